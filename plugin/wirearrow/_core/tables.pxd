# The compiled plan, as flat C arrays the decoder indexes by integer only.
#
# Invariants the decoder relies on (checked by Program.__init__, never on the hot path):
# - every FieldEntry.child / column / group / clear index is in range or -1;
# - the entries of a node are sorted by field number;
# - a node's dense table maps field numbers below dense_len to an entry index or -1.
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t

# Action of a field entry. Scalar kinds store one value of `width` bytes into a column slot.
cdef enum Kind:
    K_VARINT32 = 0      # int32 / uint32 / enum: low 32 bits of the varint
    K_VARINT64 = 1      # int64 / uint64
    K_BOOL = 2
    K_ZIGZAG32 = 3      # sint32
    K_ZIGZAG64 = 4      # sint64
    K_FIXED32 = 5       # fixed32 / sfixed32 / float: 4 little-endian bytes, copied as is
    K_FIXED64 = 6       # fixed64 / sfixed64 / double
    K_BYTES = 7         # string / bytes: copied into the column's arena, indexed by offsets
    K_MESSAGE = 8       # length-delimited sub-message: descend into `child`
    K_GROUP = 9         # delimited (group) sub-message: descend until the matching end-group

# FieldEntry.flags
cdef enum Flag:
    F_REPEATED = 1      # each occurrence (each packed value) opens a new element of `group`
    F_PACKABLE = 2      # repeated scalar: wire type 2 carries packed values
    F_UTF8 = 4          # string whose bytes must be valid UTF-8
    F_LENIENT = 8       # only checked, not read: another wire type makes it an unknown field

# FieldEntry.action: what the decoder does with one value of the entry's own wire type,
# settled once when the tables are built so that the hot loop dispatches a single time
# (kind x column-or-not x UTF-8). Repeated entries open their element before the action.
cdef enum Action:
    A_VARINT32 = 0      # the Kind values of stored scalars come first, unchanged
    A_VARINT64 = 1
    A_BOOL = 2
    A_ZIGZAG32 = 3
    A_ZIGZAG64 = 4
    A_FIXED32 = 5
    A_FIXED64 = 6
    A_BYTES = 7         # stored bytes, not checked
    A_STRING = 8        # stored bytes, UTF-8 checked
    A_SKIP_VARINT = 9   # no column: read (checked) and drop
    A_SKIP_FIXED32 = 10
    A_SKIP_FIXED64 = 11
    A_SKIP_BYTES = 12
    A_CHECK_STRING = 13 # no column, UTF-8 checked
    A_MESSAGE = 14      # message kinds last: action >= A_MESSAGE descends
    A_GROUP = 15
    A_NONE = 255        # an empty slot of a node's dense table (no entry for the number)

ctypedef struct FieldEntry:
    uint32_t number     # field number
    uint8_t wire_type   # wire type of one unpacked value
    uint8_t kind        # Kind
    uint8_t flags       # Flag bits
    uint8_t action      # Action: derived from the above by Program, never by the compiler
    int32_t column      # column slot written (scalar kinds), -1 = read and drop
    int32_t child       # node descended into (message kinds)
    int32_t group       # element group opened per occurrence (F_REPEATED), else -1
    int32_t clear       # first index into clear_cols (oneof siblings to unset), -1 = none
    int32_t n_clear

ctypedef struct Node:
    int32_t entries     # first FieldEntry of this message
    int32_t n_entries
    int32_t dense       # first slot of this node in the dense table
    int32_t dense_len   # field numbers < dense_len are looked up directly
    int32_t group       # group whose current element this node's columns belong to
    int32_t presence    # column marked present when the node is entered, -1 = none
    int32_t defaults    # first index into default_cols / default_values
    int32_t n_defaults  # implicit-presence columns filled with their default on entry
    int32_t unknown     # K_BYTES-width column collecting the raw unknown fields, -1 = skip them

ctypedef struct ColumnStore:
    # The fields the hot loop touches come first: they share one cache line.
    uint8_t* values     # width bytes a slot, slot i belongs to element i of `group`;
                        # a bytes column: capacity + 1 uint32 offsets into `arena`, Arrow's
                        # layout: element i is arena[values[i], values[i + 1])
    uint8_t* valid      # one byte a slot: 0 = null
    uint8_t* arena      # bytes column: the bytes, copied while they are in cache
    int64_t arena_len
    int64_t arena_cap   # bytes usable (offsets are uint32)
    int64_t filled      # bytes column: offsets[0 .. filled] are written and
                        # offsets[filled] == arena_len (the elements after are still open)
    int64_t capacity    # slots allocated (zero-filled beyond the group's count)
    int32_t width       # 0 (presence only), 1, 4 or 8 (a bytes column: 4, one offset)
    int32_t group
    int64_t arena_alloc # bytes allocated behind arena, values and valid (for the pool)
    int64_t values_alloc
    int64_t valid_alloc
    bint bytes          # string / bytes values, copied into `arena`

ctypedef struct GroupStore:
    int64_t* parent     # element -> element of parent_group (the root group: record index)
    int64_t count
    int64_t capacity
    int32_t parent_group
