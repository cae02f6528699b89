# The compiled tables, as flat C arrays the decoder and the encoder index by integer only.
#
# Each struct here has its row in layout.py (the one description of the fields, which the
# plan builders fill by name): FieldEntry = layout.DecodeEntry, Node = layout.DecodeNode;
# ArrowColumn = layout.EncodeColumn, EncodeEntry and EncodeNode = their namesakes.
# tests/test_layout.py sends rows through each extension and back.
#
# ---- decoder ----
#
# Invariants the decoder relies on (checked by Program.__init__, never on the hot path):
# - every FieldEntry.child / column / group / clear index is in range or -1;
# - the entries of a node are sorted by field number;
# - a node's dense table maps field numbers below dense_len to an entry index or -1.
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t

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
    K_ANY = 10          # google.protobuf.Any with declared types (any_types): descend into
                        # `child` as K_MESSAGE, then decode `value` as the declared type its
                        # type_url names (`aux`: its AnySpec)

# FieldEntry.flags
cdef enum Flag:
    F_REPEATED = 1      # each occurrence (each packed value) opens a new element of `group`
    F_PACKABLE = 2      # repeated scalar: wire type 2 carries packed values
    F_UTF8 = 4          # string whose bytes must be valid UTF-8
    F_LENIENT = 8       # only checked, not read: another wire type makes it an unknown field
    F_MERGE = 16        # raw bytes of a singular sub-message: a second occurrence is appended
    F_UTF8_OR_UNKNOWN = 32 # (with F_UTF8) a string the schema does not validate (proto2,
                        # editions NONE) read into a utf8 column: a value that is not UTF-8
                        # is moved to the message's unknown fields instead of failing the
                        # record. Stored by A_STRING: looked at only when a store fails.
    F_CLOSED = 64       # closed enum: an undeclared value is an unknown field (`aux`: its set)
    F_MAP = 128         # map field: an entry holding an unknown field is an unknown field of
                        # the parent, whole (`aux`: its MapSpec, to write it back)

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
    A_STRING = 8        # stored bytes, UTF-8 checked (F_UTF8_OR_UNKNOWN: on failure only,
                        # the value is moved to the unknown fields instead)
    A_SKIP_VARINT = 9   # no column: read (checked) and drop
    A_SKIP_FIXED32 = 10
    A_SKIP_FIXED64 = 11
    A_SKIP_BYTES = 12
    A_CHECK_STRING = 13 # no column, UTF-8 checked
    A_MESSAGE = 14      # message kinds last: action >= A_MESSAGE descends
    A_GROUP = 15
    A_MAP = 16          # the rare kinds after the messages (one compare on the message path):
    A_ENUM = 17         # a map entry, taken out again if it holds an unknown field; a closed
                        # enum's value, checked before it has any effect
    A_ANY = 18          # an Any with declared types (K_ANY)
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
    int32_t aux         # F_CLOSED: its EnumSet; F_MAP: its MapSpec; K_ANY: its AnySpec; else -1

ctypedef struct Node:
    int32_t entries     # first FieldEntry of this message
    int32_t n_entries
    int32_t dense       # first slot of this node in the dense table
    int32_t dense_len   # field numbers < dense_len are looked up directly
    int32_t group       # group whose current element this node's columns belong to
    int32_t presence    # column marked present when the node is entered, -1 = none
    int32_t defaults    # first index into default_cols / default_values
    int32_t n_defaults  # implicit-presence columns filled with their default on entry
    int32_t unknown     # K_BYTES-width column collecting the raw unknown fields, -1 = skip them,
                        # -2 = a map entry: holding one, it is not inserted (decoder.rare_field)
    # Derived by the decoder's Program, not in layout.DecodeNode (never set by a builder):
    int32_t tag_len     # one-byte tags < tag_len are looked up there by the whole tag
    const FieldEntry** tags        # this node's slots of the one-byte tag table
    const FieldEntry* dense_at     # this node's first slot of the dense table
    int64_t reserved    # (64 bytes: a node's address is a shift and an add, as a
                        # sub-message enters one; its tables one load each)

# The declared values of a closed enum: 0..63 as a bit mask, the others sorted.
ctypedef struct EnumSet:
    uint64_t small      # bit v: value v (0 <= v < 64) is declared
    int32_t first       # the other declared values: enum_values[first .. first + count)
    int32_t count

# Re-encoding forms of a map entry's key and value (an entry kept as an unknown field is
# written as upb writes it: key, value, then the entry's own unknown fields).
cdef enum Form:
    R_INT32 = 0         # varint of the sign-extended low 32 bits (int32, enum)
    R_UINT32 = 1        # varint of the low 32 bits (uint32, sint32)
    R_INT64 = 2         # varint as is (int64, uint64, sint64)
    R_BOOL = 3
    R_FIXED32 = 4
    R_FIXED64 = 5
    R_BYTES = 6         # last occurrence (string, bytes)
    R_MESSAGE = 7       # every occurrence, concatenated (they merge)

ctypedef struct MapSpec:
    uint8_t key_wire_type
    uint8_t value_wire_type
    uint8_t key_form     # Form
    uint8_t value_form
    uint8_t key_implicit    # implicit presence: a zero is not written
    uint8_t value_implicit
    int32_t value_enum   # EnumSet of a closed-enum value, -1 = none

# The declared types of an Any field (any_types): any_types[first .. first + count).
ctypedef struct AnySpec:
    int32_t first
    int32_t count

# One declared type: its full name (any_names[name_at .. name_at + name_len)), matched
# against what follows the last '/' of the type URL, and the node its value is decoded by
# (a node of the Any node's group: its struct is a child of the Any's).
ctypedef struct AnyType:
    int64_t name_at
    int32_t name_len
    int32_t node

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
    int64_t capacity    # slots usable, zero-filled beyond the group's count (the blocks may
                        # hold more: decoder.pyx's zero_ahead zeroes them as stores come)
    int32_t width       # 0 (presence only), 1, 4 or 8 (a bytes column: 4, one offset)
    int32_t group
    int64_t arena_alloc # bytes allocated behind arena, values and valid (for the pool)
    int64_t values_alloc
    int64_t valid_alloc
    uint8_t bytes       # string / bytes values, copied into `arena`
    # (the slots its first block gets are its group's `want`: allocated when the column
    # is first written, so that a column no record of the batch touches costs no memory)
    # (F_UTF8_OR_UNKNOWN's per-column state is in decoder.pyx's Ctx, col_moved and
    # col_member: the size of this struct is in the address of every store)

ctypedef struct GroupStore:
    int64_t* parent     # element -> element of parent_group (the root group: record index)
    int64_t count
    int64_t capacity
    int32_t parent_group
    int32_t want        # elements its first block gets, and each of its columns' (the
                        # capacity learned from earlier batches; 0: grown from empty)


# ---- encoder ----
#
# Invariants the encoder relies on (checked by encoder.Plan when it loads the tables): every
# spec's parent comes before it; every column / element / child index is in range; a node's
# entries lie inside the entries.

# Value kinds: how one value is read from its Arrow slot and written.
cdef enum ValueKind:
    V_INT32 = 0      # int32 slot -> varint of the sign-extended value (int32, enum)
    V_UINT32 = 1     # uint32 slot -> varint
    V_INT64 = 2      # 64-bit slot -> varint (int64, uint64)
    V_SINT32 = 3     # int32 slot -> zigzag varint
    V_SINT64 = 4     # int64 slot -> zigzag varint
    V_FIXED32 = 5    # 4 bytes as they are (fixed32, sfixed32, float)
    V_FIXED64 = 6    # 8 bytes as they are (fixed64, sfixed64, double)
    V_BOOL = 7       # bit of an Arrow boolean bitmap -> varint 0/1
    V_BYTES = 8      # binary/utf8 slot -> length + bytes (also a message kept serialized)
    V_MESSAGE = 9    # child node, length-delimited
    V_GROUP = 10     # child node between start- and end-group tags
    V_RAW_GROUP = 11 # binary slot holding a group's body, between its tags
    V_UNKNOWN = 12   # binary slot appended as is (a message's unknown fields)
    V_TIME = 13      # a part of a temporal slot (Timestamp seconds, a Date's month, ...):
                     # `aux` the part (T_*) and the slot's width, `scale` units a second

cdef enum Shape:
    S_SINGULAR = 0
    S_REPEATED = 1   # one tagged record per element (maps: per entry, in key order)
    S_PACKED = 2     # one length-delimited record holding every element

cdef enum Presence:
    P_EXPLICIT = 0   # written when the slot is valid
    P_IMPLICIT = 1   # written when valid and not zero (bitwise: -0.0 is written)
    P_ALWAYS = 2     # written always; a null is an error (map keys and values)

# What is checked of a value before it is written (a failure is E_BAD_VALUE at its slot).
cdef enum Check:
    C_NONE = 0
    C_UTF8 = 1       # a string the schema requires to be valid UTF-8
    C_ENUM = 2       # a closed enum's number: declared (`aux`: its EncodeEnumSet)
    C_TIMESTAMP = 3  # a temporal slot inside google.protobuf.Timestamp's range
    C_DURATION = 4   # ... google.protobuf.Duration's (`scale`: units a second, `aux`: width)

# V_TIME parts (EncodeEntry.aux & 0xFF; the slot's width in bytes is aux >> 8).
cdef enum TimePart:
    T_SECONDS = 1    # Timestamp: floor(v / scale)
    T_NANOS = 2      # Timestamp: the rest, in nanoseconds
    T_DUR_SECONDS = 3  # Duration: seconds and nanos share the sign
    T_DUR_NANOS = 4
    T_YEAR = 5       # google.type.Date from days since the epoch
    T_MONTH = 6
    T_DAY = 7
    T_HOURS = 8      # google.type.TimeOfDay from units since midnight
    T_MINUTES = 9
    T_TOD_SECONDS = 10
    T_TOD_NANOS = 11

# Map key orders (EncodeEntry.aux of a map field): how its entries are sorted on the wire.
cdef enum MapKeys:
    M_NONE = 0       # not a map
    M_BOOL = 1
    M_U32 = 2        # 32-bit keys compared as unsigned numbers
    M_U64 = 3
    M_STRING = 4

# How a spec reaches its Arrow array from the batch's (EncodeSpec.access).
cdef enum Access:
    A_COLUMN = 0     # column `child` of the batch
    A_FIELD = 1      # child `child` of the parent struct (its offset composed with the parent's)
    A_VALUES = 2     # the values of the parent list, or the entries of the parent map
    A_GIVEN = 3      # built in Python per call (enum names, JSON texts, ...): given addresses

# Buffers of a spec's array (EncodeSpec.layout).
cdef enum Layout:
    L_STRUCT = 0     # [validity]
    L_FIXED = 1      # [validity, values]
    L_BOOL = 2       # [validity, bits]
    L_BINARY = 3     # [validity, offsets, data]
    L_LIST = 4       # [validity, offsets] (list or map)
    L_DICTIONARY = 5 # [validity, indices] + dictionary: read only through a given array

ctypedef struct EncodeSpec:
    int32_t parent     # -1: the batch
    int32_t access     # Access
    int32_t child      # which column of the batch / child of the parent
    int32_t layout     # Layout
    int32_t wide       # 64-bit offsets

ctypedef struct ArrowColumn:
    const uint8_t* validity    # Arrow validity bitmap, NULL when all valid
    int64_t offset             # physical slot = logical index + offset
    const uint8_t* values      # fixed-width values, boolean bitmap, or string data
    const uint8_t* offsets     # int32 (or int64 when wide) offsets of strings / lists
    const uint8_t* bad         # 1 byte per logical slot: cannot be encoded; NULL = none
    int32_t wide

ctypedef struct EncodeEntry:
    uint64_t tag               # field number << 3 | wire type (2 when packed)
    uint64_t end_tag           # groups: field number << 3 | 4
    int64_t scale              # V_TIME, C_TIMESTAMP, C_DURATION: units a second
    uint64_t tag_bytes         # (derived) the tag's varint in the top tag_len bytes (one store)
    int32_t kind               # ValueKind
    int32_t shape              # Shape
    int32_t presence           # Presence
    int32_t col                # the field's array, indexed like its message
    int32_t elem               # repeated: the element array
    int32_t child              # messages, groups, map entries: the node
    int32_t oneof              # 1-based oneof of the message, 0 = none
    int32_t check              # Check of each value
    int32_t aux                # V_TIME: part | width << 8; C_ENUM: enum set; maps: MapKeys
    # Derived by encoder.Plan from the fields above (not in layout.EncodeEntry's row); with
    # tag_bytes the entry is 88 bytes:
    int32_t col_at             # col and elem as byte offsets into the call's columns
    int32_t elem_at
    int32_t child_at           # messages, groups, map entries: the child node's first entry
    int32_t child_end_at       # and the end of its entries, as byte offsets from this entry
    uint8_t tag_len
    uint8_t op                 # encoder's EncodeOp: the hot loop's one dispatch


ctypedef struct EncodeNode:
    int32_t first              # first entry of the node
    int32_t n_entries
