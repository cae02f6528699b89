# cython: freethreading_compatible = True
"""The table-driven protobuf wire decoder.

One call decodes a whole batch with the GIL released. It executes a Program (flat tables
compiled from a descriptor and a plan, see tables.pxd) and appends into column slots and
element groups; it never sees a descriptor, a dict or a string.

Invariants:
- every read is checked against the end of the innermost enclosing length-delimited region
  (the record, or a sub-message); a length prefix is checked against that end before use,
  so no allocation or pointer is ever derived from an unchecked length;
- a column slot belongs to the current element of its group; an element is opened by a
  repeated field occurrence and is never reopened, so every write lands in the newest
  element of its group (this is what makes rollback of a bad record a matter of counts);
- a record that fails leaves no trace: groups are cut back to their counts before it, the
  slots past those counts are zeroed, and string columns end where they ended before it
  (their offsets are written in order, so this is a count and an arena length).
"""
from cpython.mem cimport PyMem_RawCalloc, PyMem_RawFree, PyMem_RawMalloc, PyMem_RawRealloc
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcmp, memcpy, memset

from wirearrow._core.buffers cimport (
    MAX_LINES, OwnedBuffer, PoolUser, pool_alloc, pool_free, pool_give,
    pool_take,
)
import numpy as np

from wirearrow._core.tables cimport (
    A_ANY, A_BOOL, A_BYTES, A_CHECK_STRING, A_ENUM, A_FIXED32, A_FIXED64, A_GROUP, A_MAP, A_MESSAGE,
    A_NONE, A_SKIP_BYTES, A_SKIP_FIXED32, A_SKIP_FIXED64, A_SKIP_VARINT, A_STRING, A_VARINT32,
    A_VARINT64, A_ZIGZAG32, A_ZIGZAG64, AnySpec, AnyType, ColumnStore, EnumSet, F_CLOSED, F_LENIENT, F_MAP, F_MERGE,
    F_PACKABLE, F_REPEATED, F_UTF8, F_UTF8_OR_UNKNOWN, FieldEntry, GroupStore,
    K_ANY, K_BOOL, K_BYTES, K_FIXED32, K_FIXED64, K_GROUP, K_MESSAGE, K_VARINT32, K_VARINT64, K_ZIGZAG32,
    K_ZIGZAG64, MapSpec, Node, R_BOOL, R_BYTES, R_FIXED32, R_FIXED64, R_INT32, R_INT64, R_MESSAGE,
    R_UINT32,
)
from wirearrow._core.wire cimport (
    E_LENGTH, E_LENGTH_LONG, E_TAG_LONG, E_TAG_OVERFLOW, E_TRUNCATED, E_VARINT_OVERFLOW, OK,
    copy_short, put_varint, read_length, read_tag,
    read_varint, skip_fixed, skip_varint, zigzag32, zigzag64,
)

from wirearrow._core import layout

# Status codes. 0 is success; the text of each lives in STATUS_TEXT below.
# The wire readers' statuses (OK, E_TRUNCATED, E_VARINT_OVERFLOW, E_LENGTH, E_TAG_OVERFLOW,
# E_TAG_LONG, E_LENGTH_LONG) are wire.pxd's, numbered to fit in.
cdef enum Status:
    E_FIELD_ZERO = 4
    E_WIRE_TYPE_RESERVED = 5
    E_STRAY_END_GROUP = 6
    E_END_GROUP_MISMATCH = 7
    E_UNTERMINATED_GROUP = 8
    E_WIRE_TYPE = 9
    E_UTF8 = 10
    E_DEPTH = 11
    E_NO_MEMORY = 13
    E_PACKED_LENGTH = 14
    E_TOO_LARGE = 15
    E_INTERNAL = 16
    E_ANY_TWICE = 20     # a singular Any with declared types sent twice in one message
    E_MOVED = 19         # not an error: an earlier value of this singular string was moved
                         # to the unknown fields (not_stored)
    END_OF_GROUP = 100   # not an error: the end-group tag of the group being decoded

STATUS_TEXT = {
    E_TRUNCATED: "truncated: the record ends inside a value",
    E_VARINT_OVERFLOW: "varint longer than 10 bytes",
    E_LENGTH: "length prefix runs past the end of the enclosing message",
    E_FIELD_ZERO: "invalid field number 0",
    E_WIRE_TYPE_RESERVED: "reserved wire type (6 or 7)",
    E_STRAY_END_GROUP: "end-group tag without a matching start-group",
    E_END_GROUP_MISMATCH: "end-group tag does not match the open group",
    E_UNTERMINATED_GROUP: "group not terminated before the end of the message",
    E_WIRE_TYPE: "wrong wire type for the field",
    E_UTF8: "invalid UTF-8 in a string field",
    E_DEPTH: "nesting deeper than the limit",
    E_TAG_OVERFLOW: "tag larger than 32 bits",
    E_TAG_LONG: "tag varint longer than 5 bytes",
    E_LENGTH_LONG: "length prefix varint longer than 5 bytes",
    E_NO_MEMORY: "out of memory",
    E_PACKED_LENGTH: "packed fixed-width field length is not a multiple of the value size",
    E_TOO_LARGE: "a string column holds over 4 GiB in one batch: use smaller batches",
    E_INTERNAL: "internal error: a value for an element that is already closed",
    E_ANY_TWICE: ("an Any read with any_types occurs twice in one message (merged): "
                  "not supported (docs/types.md)"),
}

# Error policies of decode().
POLICY_RAISE = 0
POLICY_SKIP = 1

cdef enum:
    MAX_STACK = 1024
    BLOCK = 64          # records a prefetch block (see list_writes)
    ZERO_AHEAD = 256    # slots a column's first block is zeroed by at a time (zero_ahead)


cdef extern from *:
    void __builtin_prefetch(const void* addr, int rw) nogil


cdef extern from *:
    """
    #define wa_unlikely(x) __builtin_expect(!!(x), 0)
    """
    bint wa_unlikely(bint x) nogil   # a branch the compiler lays out of the common path


cdef extern from *:
    """
    #define wa_unreachable() __builtin_unreachable()
    """
    void wa_unreachable() nogil   # a switch's default that cannot happen: no range test


cdef extern from *:
    """
    #define wa_nonnull(x) ({ __typeof__(x) wa_p_ = (x); if (!wa_p_) __builtin_unreachable(); wa_p_; })
    """
    # A slot inside a column's block is never NULL: said to the compiler, so that the
    # caller's NULL test (only slot_grown can fail) drops out of the common path.
    uint8_t* wa_nonnull(uint8_t* x) nogil


cdef extern from *:
    """
    #define wa_opaque(x) ({ __typeof__(x) wa_x_ = (x); __asm__("" : "+r"(wa_x_)); wa_x_; })
    """
    # The value as computed, which the compiler cannot take apart again: a loop invariant
    # held as one value instead of the two it was summed from.
    const FieldEntry* wa_opaque(const FieldEntry* x) nogil
    const FieldEntry** wa_opaque_tags "wa_opaque"(const FieldEntry** x) nogil


ctypedef struct Ctx:
    const FieldEntry* entries
    const Node* nodes
    const int32_t* dense
    const FieldEntry* dense_entries  # dense, with each entry copied in (A_NONE: no entry)
    const FieldEntry** tag_entries  # per node, by one-byte tag: its entry (NULL: none)
    const int32_t* default_cols
    const uint8_t* default_values    # 16 bytes per default
    const int32_t* clear_cols
    const EnumSet* enum_sets
    const int32_t* enum_values
    const MapSpec* map_specs
    const AnySpec* any_specs
    const AnyType* any_types
    const uint8_t* any_names
    ColumnStore* cols
    GroupStore* groups
    int64_t* cur                     # current element of each group
    const uint8_t* data              # batch data
    const uint8_t* record            # start of the record being decoded
    int32_t n_cols
    int32_t n_groups
    int32_t max_nesting              # messages and groups nested deeper are an error
    bint pooled                      # buffers come from and go back to the buffer pool
    # error report, filled on the way out of a failing record
    int32_t err_status
    int64_t err_offset
    int32_t err_depth                # levels recorded in the stacks below
    int32_t stack_node[MAX_STACK]
    uint32_t stack_field[MAX_STACK]
    int64_t stack_index[MAX_STACK]   # element index of a repeated field, -1 otherwise
    const uint8_t* resume            # after a group: first byte past its end-group tag
    int rejected                     # the map entry being decoded holds an unknown field
    int64_t moved                    # values moved to the unknown fields (not UTF-8)
    # F_UTF8_OR_UNKNOWN columns only (cold: touched when a value is not UTF-8), per column:
    int64_t* col_moved               # the message element whose field had a value moved to
                                     # the unknown fields, -1 = none (a repeated column's
                                     # arena_cap is then -1 until a value of another
                                     # message: not_stored)
    const int32_t* col_member        # a oneof member's column: its node + 1, else 0
    const int64_t* arena_want        # per column: bytes its arena's first block gets, as
                                     # given (NULL: none); read clamped (arena_reserve)
    uint64_t pool_key                # the plan's name for its buffers in the pool (buffer_key)
    # The columns whose store left its initial state this call, in the order first written
    # (touch): a Ctx is kept with its Program and reused, and reset_ctx puts back only
    # these (a wide recursive plan has ~16,000 columns, a small batch writes a few hundred).
    int32_t* touched
    uint8_t* is_touched              # per column: 1 when in `touched`
    int32_t n_touched


ctypedef struct Run:
    const uint8_t* at      # the first line (64-byte aligned)
    int64_t lines          # consecutive lines from there, 1 at least


ctypedef struct Ahead:
    Run* runs              # min(3 * columns + groups, MAX_LINES) runs, or NULL: no prefetching
    int64_t n_runs
    int64_t lines          # in all runs: MAX_LINES at most (beyond: not prefetched)


cdef class Program:
    """Compiled tables of one (schema, plan); immutable and shared by every decode call.

    Built by wirearrow.plan from plain Python lists; checked here once so the decoder can
    index without checks.
    """
    cdef FieldEntry* entries
    cdef Node* nodes
    cdef int32_t* dense
    cdef FieldEntry* dense_entries
    cdef const FieldEntry** tag_entries
    cdef int32_t* default_cols
    cdef uint8_t* default_values
    cdef int32_t* clear_cols
    cdef int32_t* col_width
    cdef int32_t* col_group
    cdef uint8_t* col_bytes     # 1: a column of string / bytes values (found from the entries)
    cdef int32_t* col_member    # ColumnStore.member: node + 1 of a oneof member's
                                # F_UTF8_OR_UNKNOWN column, else 0
    cdef int32_t* group_parent
    cdef EnumSet* enum_sets
    cdef int32_t* enum_values
    cdef MapSpec* map_specs
    cdef AnySpec* any_specs
    cdef AnyType* any_types
    cdef uint8_t* any_names
    cdef readonly int32_t n_entries, n_nodes, n_cols, n_groups, n_defaults, max_nesting
    cdef readonly int32_t n_enum_sets, n_map_specs, n_any_specs
    # A decode call's working state, kept between calls (take_ctx / give_back_ctx): one
    # call at a time takes it, under the GIL; a call that finds it taken makes its own.
    cdef Ctx* spare
    # What export() starts a Result from, made once (templates()): each group's columns
    # (group_cols[group_cols_at[g] .. group_cols_at[g + 1]]), and the Result's lists as
    # they are for a batch of no elements, copied whole (a wide recursive plan has
    # ~16,000 columns; a small batch fills a few hundred entries).
    cdef int32_t* group_cols_at
    cdef int32_t* group_cols
    cdef list empty_col_values, empty_col_valid, empty_col_arena, empty_col_counts
    cdef list empty_group_parents, empty_group_counts

    def __cinit__(self):
        self.spare = NULL
        self.group_cols_at = NULL
        self.group_cols = NULL
        self.entries = NULL
        self.nodes = NULL
        self.dense = NULL
        self.dense_entries = NULL
        self.tag_entries = NULL
        self.default_cols = NULL
        self.default_values = NULL
        self.clear_cols = NULL
        self.col_width = NULL
        self.col_group = NULL
        self.col_member = NULL
        self.group_parent = NULL
        self.enum_sets = NULL
        self.enum_values = NULL
        self.map_specs = NULL
        self.any_specs = NULL
        self.any_types = NULL
        self.any_names = NULL

    def __init__(self, entries, nodes, dense, defaults, clear_cols, columns, groups,
                 int max_nesting, enum_sets=(), map_specs=(), any_specs=()):
        """entries, nodes, defaults, columns, enum_sets, map_specs, any_specs: rows of
        layout.DecodeEntry, DecodeNode, DecodeDefault, DecodeColumn, DecodeEnumSet,
        DecodeMapSpec, DecodeAnySpec (or plain tuples of their fields, in order); dense:
        entry index or -1;
        clear_cols: column indices; groups: parent group (-1 root); max_nesting: messages and
        groups nested deeper are a decode error.
        """
        cdef int32_t i
        if not 0 < max_nesting < MAX_STACK:
            raise ValueError(f"max_nesting must be in 1..{MAX_STACK - 1}")
        self.max_nesting = max_nesting
        self.n_entries = len(entries)
        self.n_nodes = len(nodes)
        self.n_cols = len(columns)
        self.n_groups = len(groups)
        self.n_defaults = len(defaults)
        self._set_enums_and_maps(enum_sets, map_specs)
        self._set_any_specs(any_specs)
        if self.n_nodes == 0 or self.n_groups == 0:
            raise ValueError("a program needs a root node and a root group")
        self.entries = <FieldEntry*>PyMem_RawCalloc(max(self.n_entries, 1), sizeof(FieldEntry))
        self.nodes = <Node*>PyMem_RawCalloc(self.n_nodes, sizeof(Node))
        self.dense = <int32_t*>PyMem_RawCalloc(max(len(dense), 1), sizeof(int32_t))
        self.dense_entries = <FieldEntry*>PyMem_RawCalloc(max(len(dense), 1), sizeof(FieldEntry))
        self.default_cols = <int32_t*>PyMem_RawCalloc(max(len(defaults), 1), sizeof(int32_t))
        self.default_values = <uint8_t*>PyMem_RawCalloc(max(len(defaults), 1), 16)
        self.clear_cols = <int32_t*>PyMem_RawCalloc(max(len(clear_cols), 1), sizeof(int32_t))
        self.col_width = <int32_t*>PyMem_RawCalloc(max(self.n_cols, 1), sizeof(int32_t))
        self.col_group = <int32_t*>PyMem_RawCalloc(max(self.n_cols, 1), sizeof(int32_t))
        self.col_bytes = <uint8_t*>PyMem_RawCalloc(max(self.n_cols, 1), 1)
        self.col_member = <int32_t*>PyMem_RawCalloc(max(self.n_cols, 1), sizeof(int32_t))
        self.group_parent = <int32_t*>PyMem_RawCalloc(self.n_groups, sizeof(int32_t))
        if (self.entries == NULL or self.nodes == NULL or self.dense == NULL
                or self.dense_entries == NULL
                or self.default_cols == NULL or self.default_values == NULL
                or self.clear_cols == NULL or self.col_width == NULL or self.col_group == NULL
                or self.col_bytes == NULL or self.col_member == NULL
                or self.group_parent == NULL):
            raise MemoryError()
        for i, row in enumerate(columns):
            col = layout.DecodeColumn._make(row)
            if col.width not in (0, 1, 4, 8) or not 0 <= col.group < self.n_groups:
                raise ValueError(f"bad column {i}")
            self.col_width[i] = col.width
            self.col_group[i] = col.group
        for i, parent in enumerate(groups):
            if not (-1 <= parent < i) or (parent == -1) != (i == 0):
                raise ValueError(f"bad group {i}: parents precede children, only group 0 is root")
            self.group_parent[i] = parent
        for i, d in enumerate(dense):
            if not -1 <= d < self.n_entries:
                raise ValueError(f"bad dense slot {i}")
            self.dense[i] = d
        for i, c in enumerate(clear_cols):
            self._check_col(c, "clear column")
            self.clear_cols[i] = c
        for i, row in enumerate(defaults):
            dflt = layout.DecodeDefault._make(row)
            self._check_col(dflt.column, "default column")
            value = dflt.value
            if len(value) != 16:
                raise ValueError("default values are 16 bytes")
            self.default_cols[i] = dflt.column
            memcpy(self.default_values + 16 * i, <const char*>value, 16)
        for i, row in enumerate(entries):
            e = layout.DecodeEntry._make(row)
            self._set_entry(i, e.number, e.wire_type, e.kind, e.flags, e.column, e.child,
                            e.group, e.clear, e.n_clear, e.aux)
        for i, row in enumerate(nodes):
            n = layout.DecodeNode._make(row)
            self._set_node(i, n.entries, n.n_entries, n.dense, n.dense_len, n.group,
                           n.presence, n.defaults, n.n_defaults, n.unknown, len(dense),
                           len(defaults))
        self._check_groups()
        self._check_bytes(len(defaults))
        # A oneof member's F_UTF8_OR_UNKNOWN column, named by its node: the columns another
        # member of that node unsets (a member the plan does not read unsets them too).
        cdef int32_t k, j
        cdef const FieldEntry* fe
        unvalidated = {}
        for i in range(self.n_nodes):
            for k in range(self.nodes[i].entries, self.nodes[i].entries + self.nodes[i].n_entries):
                if self.entries[k].action == A_STRING and self.entries[k].flags & F_UTF8_OR_UNKNOWN:
                    unvalidated[self.entries[k].column] = i
        for i in range(self.n_nodes):
            for k in range(self.nodes[i].entries, self.nodes[i].entries + self.nodes[i].n_entries):
                fe = &self.entries[k]
                for j in range(fe.clear, fe.clear + fe.n_clear if fe.clear >= 0 else fe.clear):
                    if unvalidated.get(self.clear_cols[j]) == i:
                        self.col_member[self.clear_cols[j]] = i + 1
        # A scalar that is a oneof member or repeated takes a step before its store (unset
        # its siblings, open its element): A_PRE in its action, so that the hot loop's one
        # range test on the action sends it (and the message and skip actions) off the
        # path of a plain singular scalar, instead of a second test on group and n_clear.
        for k in range(self.n_entries):
            fe = &self.entries[k]
            if fe.action < A_MESSAGE and (fe.n_clear | (fe.group + 1)) != 0:
                self.entries[k].action = fe.action | A_PRE
        # The hot loop reads a field's entry straight from the dense slot of its number:
        # one dependent load less per field than slot -> index -> entry.
        for i, d in enumerate(dense):
            if d >= 0:
                self.dense_entries[i] = self.entries[d]
            else:
                # (no wire type matches NO_WIRE_TYPE: an empty slot takes the path of a
                # field under another wire type, and the hot loop makes one test, not two)
                self.dense_entries[i].action = A_NONE
                self.dense_entries[i].wire_type = NO_WIRE_TYPE
        self._set_tag_table()

    cdef _set_tag_table(self):
        # A one-byte tag (most fields') indexes its node's tag table whole: no shift for the
        # number, no test of the dense length, no wire type compare in the hot loop. A slot
        # holds the entry whose number and wire type the tag is, else NULL (no entry, another
        # wire type: packed values, an end-group tag), which takes the general lookup.
        cdef int32_t i, t, at = 0
        cdef Node* n
        cdef const FieldEntry* e
        for i in range(self.n_nodes):
            n = &self.nodes[i]
            n.tag_len = min(n.dense_len, 16) * 8
            at += n.tag_len
        self.tag_entries = <const FieldEntry**>PyMem_RawCalloc(max(at, 1), sizeof(FieldEntry*))
        if self.tag_entries == NULL:
            raise MemoryError()
        at = 0
        for i in range(self.n_nodes):
            n = &self.nodes[i]
            n.tags = self.tag_entries + at
            n.dense_at = self.dense_entries + n.dense
            at += n.tag_len
            for t in range(n.tag_len):
                e = &n.dense_at[t >> 3]
                n.tags[t] = e if e.wire_type == (t & 7) else NULL

    cdef _set_enums_and_maps(self, enum_sets, map_specs):
        cdef int32_t i
        cdef int64_t v
        sets = [layout.DecodeEnumSet._make(row) for row in enum_sets]
        specs = [layout.DecodeMapSpec._make(row) for row in map_specs]
        large = [[v for v in es.values if not 0 <= v < 64] for es in sets]
        self.n_enum_sets = len(sets)
        self.n_map_specs = len(specs)
        self.enum_sets = <EnumSet*>PyMem_RawCalloc(max(len(sets), 1), sizeof(EnumSet))
        self.enum_values = <int32_t*>PyMem_RawCalloc(max(sum(map(len, large)), 1), sizeof(int32_t))
        self.map_specs = <MapSpec*>PyMem_RawCalloc(max(len(specs), 1), sizeof(MapSpec))
        if self.enum_sets == NULL or self.enum_values == NULL or self.map_specs == NULL:
            raise MemoryError()
        cdef int32_t at = 0
        for i, es in enumerate(sets):
            values = list(es.values)
            if values != sorted(set(values)) or not all(-2**31 <= v < 2**31 for v in values):
                raise ValueError(f"enum set {i}: distinct sorted int32 values")
            self.enum_sets[i].first = at
            self.enum_sets[i].count = len(large[i])
            for v in values:
                if 0 <= v < 64:
                    self.enum_sets[i].small |= (<uint64_t>1) << v
            for v in large[i]:
                self.enum_values[at] = v
                at += 1
        for i, ms in enumerate(specs):
            if (ms.key_wire_type not in (0, 1, 2, 5) or ms.value_wire_type not in (0, 1, 2, 5)
                    or not 0 <= ms.key_form <= R_BYTES or not 0 <= ms.value_form <= R_MESSAGE
                    or not -1 <= ms.value_enum < len(sets)):
                raise ValueError(f"bad map spec {i}")
            self.map_specs[i].key_wire_type = ms.key_wire_type
            self.map_specs[i].value_wire_type = ms.value_wire_type
            self.map_specs[i].key_form = ms.key_form
            self.map_specs[i].value_form = ms.value_form
            self.map_specs[i].key_implicit = ms.key_implicit != 0
            self.map_specs[i].value_implicit = ms.value_implicit != 0
            self.map_specs[i].value_enum = ms.value_enum

    cdef _set_any_specs(self, any_specs):
        cdef int32_t i, k, at = 0
        cdef int64_t name_at = 0
        specs = [layout.DecodeAnySpec._make(row) for row in any_specs]
        names = [[n.encode() for n in spec.names] for spec in specs]
        self.n_any_specs = len(specs)
        self.any_specs = <AnySpec*>PyMem_RawCalloc(max(len(specs), 1), sizeof(AnySpec))
        self.any_types = <AnyType*>PyMem_RawCalloc(max(sum(map(len, names)), 1), sizeof(AnyType))
        blob = b"".join(b"".join(n) for n in names)
        self.any_names = <uint8_t*>PyMem_RawMalloc(max(len(blob), 1))
        if self.any_specs == NULL or self.any_types == NULL or self.any_names == NULL:
            raise MemoryError()
        if blob:
            memcpy(self.any_names, <const char*>blob, len(blob))
        for i, spec in enumerate(specs):
            if len(spec.nodes) != len(names[i]) or not names[i]:
                raise ValueError(f"any spec {i}: a node for each of its names")
            self.any_specs[i].first = at
            self.any_specs[i].count = len(names[i])
            for k in range(len(names[i])):
                # (nodes are checked against n_nodes in _check_groups, once they are known)
                self.any_types[at].name_at = name_at
                self.any_types[at].name_len = len(names[i][k])
                self.any_types[at].node = spec.nodes[k]
                name_at += len(names[i][k])
                at += 1

    cdef _check_groups(self):
        # The decoder takes the element a stored value belongs to from the node being
        # decoded (its group's current element, held in a register) or, for a repeated
        # scalar, from the element the value itself opened: each column must belong there.
        cdef int32_t i, k, t, node
        cdef const FieldEntry* f
        cdef const AnySpec* spec
        cdef int32_t want
        for i in range(self.n_nodes):
            for k in range(self.nodes[i].entries, self.nodes[i].entries + self.nodes[i].n_entries):
                f = &self.entries[k]
                want = f.group if f.group >= 0 else self.nodes[i].group
                if f.kind >= K_MESSAGE:
                    # (-1: a message only checked, never stored)
                    if self.nodes[f.child].group not in (want, -1):
                        raise ValueError(f"entry {k} of node {i}: its message is not in the "
                                         f"group it opens or its parent's")
                if f.kind == K_ANY:
                    # a declared type's struct is a child of the Any's: one slot per Any
                    spec = &self.any_specs[f.aux]
                    for t in range(spec.first, spec.first + spec.count):
                        node = self.any_types[t].node
                        if not 0 <= node < self.n_nodes or self.nodes[node].group != self.nodes[f.child].group:
                            raise ValueError(f"entry {k} of node {i}: a declared type's node "
                                             f"is not in the Any's group")
                elif f.column >= 0 and self.col_group[f.column] != want:
                    raise ValueError(f"entry {k} of node {i}: its column is not in the group "
                                     f"its values belong to")
            if self.nodes[i].presence >= 0 and self.col_group[self.nodes[i].presence] != self.nodes[i].group:
                raise ValueError(f"node {i}: its presence column is not in its group")
            for k in range(self.nodes[i].defaults, self.nodes[i].defaults + self.nodes[i].n_defaults):
                if self.col_group[self.default_cols[k]] != self.nodes[i].group:
                    raise ValueError(f"node {i}: a default column is not in its group")

    cdef _check_bytes(self, int64_t n_defaults):
        # A bytes column holds offsets, not slots: only string / bytes values (and a node's
        # unknown fields) may be stored in it.
        cdef int32_t i, k
        cdef const FieldEntry* f
        for k in range(self.n_entries):
            f = &self.entries[k]
            if f.kind < K_MESSAGE and f.column >= 0 and (f.kind == K_BYTES) != self.col_bytes[f.column]:
                raise ValueError(f"entry {k}: its column also holds values of another kind")
        for i in range(self.n_nodes):
            if self.nodes[i].presence >= 0 and self.col_bytes[self.nodes[i].presence]:
                raise ValueError(f"node {i}: its presence column holds bytes")
        for k in range(n_defaults):
            if self.col_bytes[self.default_cols[k]]:
                raise ValueError("a default (other than empty) for a bytes column")

    cdef _check_col(self, int64_t c, str what):
        if not 0 <= c < self.n_cols:
            raise ValueError(f"bad {what} {c}")

    cdef _set_entry(self, int32_t i, uint32_t number, int wire_type, int kind, int flags,
                    int32_t column, int32_t child, int32_t group, int32_t clear,
                    int32_t n_clear, int32_t aux):
        if flags & F_CLOSED and (kind != K_VARINT32 or not 0 <= aux < self.n_enum_sets):
            raise ValueError(f"entry {i}: a closed enum is a varint32 with a value set")
        if flags & F_MAP and (kind != K_MESSAGE or not 0 <= aux < self.n_map_specs):
            raise ValueError(f"entry {i}: a map is a message field with a map spec")
        if kind == K_ANY and (wire_type != 2 or flags & (F_CLOSED | F_MAP)
                              or not 0 <= aux < self.n_any_specs):
            raise ValueError(f"entry {i}: an Any is a length-delimited field with an any spec")
        if not flags & (F_CLOSED | F_MAP) and kind != K_ANY and aux != -1:
            raise ValueError(f"entry {i}: aux is for closed enums, maps and Any fields")
        if number == 0 or wire_type not in (0, 1, 2, 3, 5) or not 0 <= kind <= K_ANY:
            raise ValueError(f"bad entry {i}")
        if column != -1:
            self._check_col(column, "entry column")
        if kind >= K_MESSAGE and not 0 <= child < self.n_nodes:
            raise ValueError(f"entry {i}: message kinds need a child node")
        if group != -1 and not 0 < group < self.n_groups:
            raise ValueError(f"entry {i}: bad group")
        if (flags & F_REPEATED) and kind < K_MESSAGE and (group == -1 or column == -1):
            raise ValueError(f"entry {i}: a repeated scalar needs a group and a column")
        if column != -1 and kind < K_MESSAGE:
            if self.col_width[column] != scalar_width(kind):
                raise ValueError(f"entry {i}: column width does not fit the kind")
        if clear != -1 and (clear < 0 or n_clear < 0):
            raise ValueError(f"entry {i}: bad clear list")
        if column != -1 and kind == K_BYTES:
            self.col_bytes[column] = 1
        cdef FieldEntry* e = &self.entries[i]
        e.number = number
        e.wire_type = wire_type
        e.kind = kind
        e.flags = flags
        e.action = entry_action(kind, flags, column)
        e.column = column
        e.child = child
        e.group = group
        e.clear = clear
        e.n_clear = n_clear
        e.aux = aux

    cdef _set_node(self, int32_t i, int32_t entries, int32_t n_entries, int32_t dense,
                   int32_t dense_len, int32_t group, int32_t presence, int32_t defaults,
                   int32_t n_defaults, int32_t unknown, int64_t n_dense,
                   int64_t n_defaults_total):
        if (entries < 0 or n_entries < 0 or entries + n_entries > self.n_entries
                or dense < 0 or dense_len < 0 or dense + dense_len > n_dense
                or not -1 <= group < self.n_groups
                or defaults < 0 or n_defaults < 0 or defaults + n_defaults > n_defaults_total):
            raise ValueError(f"bad node {i}")
        if presence != -1:
            self._check_col(presence, "presence column")
        if unknown >= 0 or unknown < -2:
            self._check_col(unknown, "unknown-fields column")
            if self.col_width[unknown] != 8 or self.col_group[unknown] != group:
                raise ValueError(f"node {i}: the unknown-fields column is a bytes column of its group")
            self.col_bytes[unknown] = 1
        cdef int32_t k
        for k in range(entries + 1, entries + n_entries):
            if self.entries[k - 1].number >= self.entries[k].number:
                raise ValueError(f"node {i}: entries must be sorted by field number")
        cdef Node* n = &self.nodes[i]
        n.entries = entries
        n.n_entries = n_entries
        n.dense = dense
        n.dense_len = dense_len
        n.group = group
        n.presence = presence
        n.defaults = defaults
        n.n_defaults = n_defaults
        n.unknown = unknown

    # Read back from the structs (tests/test_layout.py: every field of a row arrives).

    def entry(self, int32_t i):
        """Entry i as the decoder holds it."""
        if not 0 <= i < self.n_entries:
            raise IndexError(i)
        cdef const FieldEntry* e = &self.entries[i]
        return layout.DecodeEntry(
            number=e.number, wire_type=e.wire_type, kind=e.kind, flags=e.flags,
            column=e.column, child=e.child, group=e.group, clear=e.clear, n_clear=e.n_clear,
            aux=e.aux)

    def node(self, int32_t i):
        """Node i as the decoder holds it."""
        if not 0 <= i < self.n_nodes:
            raise IndexError(i)
        cdef const Node* n = &self.nodes[i]
        return layout.DecodeNode(
            entries=n.entries, n_entries=n.n_entries, dense=n.dense, dense_len=n.dense_len,
            group=n.group, presence=n.presence, defaults=n.defaults, n_defaults=n.n_defaults,
            unknown=n.unknown)

    def column(self, int32_t i):
        """Column i as the decoder holds it."""
        if not 0 <= i < self.n_cols:
            raise IndexError(i)
        return layout.DecodeColumn(width=self.col_width[i], group=self.col_group[i])

    def enum_set(self, int32_t i):
        """Value set i as the decoder holds it."""
        if not 0 <= i < self.n_enum_sets:
            raise IndexError(i)
        cdef const EnumSet* es = &self.enum_sets[i]
        small = [v for v in range(64) if es.small >> v & 1]
        large = [self.enum_values[k] for k in range(es.first, es.first + es.count)]
        return layout.DecodeEnumSet(values=tuple(sorted(small + large)))

    def map_spec(self, int32_t i):
        """Map spec i as the decoder holds it."""
        if not 0 <= i < self.n_map_specs:
            raise IndexError(i)
        cdef const MapSpec* ms = &self.map_specs[i]
        return layout.DecodeMapSpec(
            key_wire_type=ms.key_wire_type, value_wire_type=ms.value_wire_type,
            key_form=ms.key_form, value_form=ms.value_form, key_implicit=ms.key_implicit,
            value_implicit=ms.value_implicit, value_enum=ms.value_enum)

    def any_spec(self, int32_t i):
        """Any spec i as the decoder holds it."""
        if not 0 <= i < self.n_any_specs:
            raise IndexError(i)
        cdef const AnySpec* spec = &self.any_specs[i]
        cdef const AnyType* t
        names, nodes = [], []
        for k in range(spec.first, spec.first + spec.count):
            t = &self.any_types[k]
            names.append((<const char*>self.any_names + t.name_at)[:t.name_len].decode())
            nodes.append(t.node)
        return layout.DecodeAnySpec(names=tuple(names), nodes=tuple(nodes))

    def default(self, int32_t i):
        """Default i as the decoder holds it (self.n_defaults of them)."""
        if not 0 <= i < self.n_defaults:
            raise IndexError(i)
        return layout.DecodeDefault(
            column=self.default_cols[i],
            value=(<const char*>self.default_values + 16 * i)[:16])

    def _spare_state(self):
        """For tests: None without a spare; else the columns and groups whose store is not
        as new_ctx leaves it (both empty when reset_ctx put everything back)."""
        cdef Ctx* c = self.spare
        cdef int32_t i
        cdef ColumnStore* cs
        if c == NULL:
            return None
        cols = []
        for i in range(c.n_cols):
            cs = &c.cols[i]
            if (cs.values != NULL or cs.valid != NULL or cs.arena != NULL or cs.arena_len
                    or cs.arena_cap or cs.filled or cs.capacity or cs.arena_alloc
                    or cs.values_alloc or cs.valid_alloc or c.col_moved[i] != -1
                    or c.is_touched[i]
                    or cs.group != self.col_group[i] or cs.bytes != self.col_bytes[i]):
                cols.append(i)
        groups = [i for i in range(c.n_groups)
                  if c.groups[i].parent != NULL or c.groups[i].count or c.groups[i].capacity
                  or c.groups[i].want or c.cur[i]]
        if c.n_touched or c.moved or c.err_depth or c.arena_want != NULL:
            groups.append(-1)
        return cols, groups

    cdef int templates(self) except -1:
        """Make what export() starts from (once; under the GIL, so two calls that both
        find it missing make the same thing, and the last one made is kept)."""
        cdef int32_t i, g
        if self.empty_group_counts is not None:
            return 0
        cdef int32_t* at = <int32_t*>PyMem_RawCalloc(self.n_groups + 1, sizeof(int32_t))
        cdef int32_t* cols = <int32_t*>PyMem_RawMalloc(max(self.n_cols, 1) * sizeof(int32_t))
        if at == NULL or cols == NULL:
            PyMem_RawFree(at)
            PyMem_RawFree(cols)
            raise MemoryError()
        for i in range(self.n_cols):
            at[self.col_group[i] + 1] += 1
        for g in range(self.n_groups):
            at[g + 1] += at[g]
        for i in range(self.n_cols):   # (at[g] counts up to g's end, then is put back)
            g = self.col_group[i]
            cols[at[g]] = i
            at[g] += 1
        for g in range(self.n_groups, 0, -1):
            at[g] = at[g - 1]
        at[0] = 0
        PyMem_RawFree(self.group_cols_at)
        PyMem_RawFree(self.group_cols)
        self.group_cols_at = at
        self.group_cols = cols
        # A column of no elements: no values (presence only: None), a bytes column's one
        # offset, else the empty view; no validity, no arena, count 0.
        self.empty_col_values = [
            None if self.col_width[i] == 0 and not self.col_bytes[i]
            else EMPTY_OFFSETS if self.col_bytes[i] else EMPTY
            for i in range(self.n_cols)
        ]
        self.empty_col_valid = [EMPTY] * self.n_cols
        self.empty_col_arena = [None] * self.n_cols
        self.empty_col_counts = [0] * self.n_cols
        self.empty_group_parents = [EMPTY] * self.n_groups
        self.empty_group_counts = [0] * self.n_groups
        return 0

    def __dealloc__(self):
        free_ctx(self.spare)
        self.spare = NULL
        PyMem_RawFree(self.group_cols_at)
        PyMem_RawFree(self.group_cols)
        PyMem_RawFree(self.entries)
        PyMem_RawFree(self.nodes)
        PyMem_RawFree(self.dense)
        PyMem_RawFree(self.dense_entries)
        PyMem_RawFree(self.tag_entries)
        PyMem_RawFree(self.default_cols)
        PyMem_RawFree(self.default_values)
        PyMem_RawFree(self.clear_cols)
        PyMem_RawFree(self.col_width)
        PyMem_RawFree(self.col_group)
        PyMem_RawFree(self.col_bytes)
        PyMem_RawFree(self.col_member)
        PyMem_RawFree(self.group_parent)
        PyMem_RawFree(self.enum_sets)
        PyMem_RawFree(self.enum_values)
        PyMem_RawFree(self.map_specs)
        PyMem_RawFree(self.any_specs)
        PyMem_RawFree(self.any_types)
        PyMem_RawFree(self.any_names)


cdef int entry_action(int kind, int flags, int32_t column) noexcept nogil:
    if flags & F_MAP:
        return A_MAP
    if flags & F_CLOSED:
        return A_ENUM
    if kind == K_ANY:
        return A_ANY
    if kind == K_MESSAGE:
        return A_MESSAGE
    if kind == K_GROUP:
        return A_GROUP
    if column >= 0:
        if kind == K_BYTES:
            return A_STRING if flags & (F_UTF8 | F_UTF8_OR_UNKNOWN) else A_BYTES
        return kind   # the stored scalar actions are numbered as their kinds
    if kind == K_FIXED32:
        return A_SKIP_FIXED32
    if kind == K_FIXED64:
        return A_SKIP_FIXED64
    if kind == K_BYTES:
        return A_CHECK_STRING if flags & F_UTF8 else A_SKIP_BYTES
    return A_SKIP_VARINT


cdef int scalar_width(int kind) noexcept nogil:
    if kind == K_BOOL:
        return 1
    if kind == K_VARINT32 or kind == K_ZIGZAG32 or kind == K_FIXED32:
        return 4
    if kind == K_BYTES:
        return 8
    return 8


cdef class Result:
    """What one decode call produced: element groups and column slots, as buffers.

    `errors` lists (record index, status, byte offset, stack) for every failed record, the
    stack being [(node, field number, element index or -1), ...] from the root down.
    """
    cdef readonly list group_parents   # OwnedBuffer of int64 per group
    cdef readonly list group_counts
    cdef readonly object group_sizes   # the same as an int64 numpy array (no list to convert)
    cdef readonly list col_values      # OwnedBuffer (width * count bytes) or None; a bytes
                                       # column: count + 1 uint32 offsets into its arena
    cdef readonly list col_valid       # OwnedBuffer (count bytes)
    cdef readonly list col_arena       # OwnedBuffer of a bytes column's bytes, or None
    cdef readonly list col_counts
    cdef readonly object arena_bytes   # string bytes of each column (0: none), for sizing:
                                       # an int64 numpy array
    cdef readonly list errors
    cdef readonly int64_t records
    cdef readonly int64_t moved        # string values moved to the unknown fields (not UTF-8)
    cdef readonly int64_t input_bytes  # sum of ends - starts over every record given


def decode(Program program, const uint8_t[::1] data, const int64_t[::1] starts,
           const int64_t[::1] ends, int policy, int64_t index_base=0, capacity=None,
           arena_capacity=None, bint pooled=True):
    """Decode records data[starts[i]:ends[i]] for every i; return a Result.

    With POLICY_RAISE decoding stops at the first bad record (it is in Result.errors and the
    records before it are kept); with POLICY_SKIP every bad record is rolled back and listed.
    `capacity`: expected elements per group (e.g. from the previous batch), allocated up
    front with calloc so that stores neither reallocate nor copy; `arena_capacity`: the
    same for the string bytes of each column. `pooled`: take the buffers from the buffer
    pool and give them back to it when released (see buffers.pyx); without it they are
    plain allocations, freed when released (a flat plan drops most of them within the call,
    and pooled they would lift its peak memory while Arrow allocates the output).
    """
    cdef int64_t n = starts.shape[0]
    if ends.shape[0] != n:
        raise ValueError("starts and ends differ in length")
    # Counted while this call runs (released with it): the buffer pool holds its limit once
    # per decode call that ran at the same time as others (buffers.pyx).
    cdef PoolUser running = PoolUser()
    cdef int64_t size = data.shape[0]
    cdef int64_t i
    cdef int64_t bad = -1, input_bytes = 0
    # Everything that is per record or per byte runs without the GIL (threads decoding
    # other batches meanwhile: docs/memory.md, benchmarks/bench_threads.py), checks included;
    # the input's size too (numpy's (ends - starts).sum() held the GIL ~40 us per 8k batch).
    with nogil:
        for i in range(n):
            if not 0 <= starts[i] <= ends[i] <= size:
                bad = i
                break
            input_bytes += ends[i] - starts[i]
    if bad >= 0:
        raise ValueError(f"record {bad}: bounds outside the data")
    # One owner for the call's working state: whichever way this function leaves (a
    # MemoryError, a bad argument, an exception while exporting), it is freed once, there.
    cdef Context own = Context.__new__(Context)
    own.program = program
    cdef Ctx* c = take_ctx(program)
    if c == NULL:
        raise MemoryError()
    own.c = c
    own.checkpoint = <int64_t*>PyMem_RawCalloc(max(program.n_groups, 1), sizeof(int64_t))
    if own.checkpoint == NULL:
        raise MemoryError()
    c.pooled = pooled
    c.data = &data[0] if size > 0 else <const uint8_t*>""
    if capacity is not None and len(capacity) != program.n_groups:
        raise ValueError("capacity needs one entry per group")
    if arena_capacity is not None and len(arena_capacity) != program.n_cols:
        raise ValueError("arena_capacity needs one entry per column")
    # The sizes as C arrays, so that the (zeroed) allocations behind them run without the GIL.
    cdef const int64_t[::1] given
    if capacity is not None:
        given = np.ascontiguousarray(capacity, dtype=np.int64)
        own.caps = <int64_t*>PyMem_RawMalloc(max(program.n_groups, 1) * sizeof(int64_t))
        if own.caps == NULL:
            raise MemoryError()
        for i in range(program.n_groups):
            own.caps[i] = max(0, min(given[i], <int64_t>1 << 40))
    cdef const int64_t[::1] arena_given   # (read where used, clamped: see arena_reserve)
    if arena_capacity is not None:
        arena_given = np.ascontiguousarray(arena_capacity, dtype=np.int64)
    # The sizes are what a column's or group's first block gets, taken when a record
    # first writes there (a plan's columns no record touches cost nothing: a wide
    # recursive plan has thousands, most of them empty in a small batch). A column's
    # slots are its group's; its arena's bytes are read from the sizes given when its
    # first string comes (no loop over the plan's columns a call).
    with nogil:
        if own.caps != NULL:
            presize(c, own.caps)
    if arena_capacity is not None:
        c.arena_want = &arena_given[0] if program.n_cols > 0 else NULL

    # Prefetching the writes: with sizes known (from the previous batch or a profile), the
    # elements and string bytes each block of records adds to every column are known ahead.
    cdef Ahead* ah = &own.ahead
    cdef int64_t step = 0, block_left = 0, left = 0, run = 0, run_left = 0, k, m
    cdef const uint8_t* line = NULL
    cdef const uint8_t* stop
    if own.caps != NULL and arena_capacity is not None and n >= 2 * BLOCK:
        # (a run has a line at least, and a block lists MAX_LINES at most)
        ah.runs = <Run*>PyMem_RawMalloc(
            min(3 * <int64_t>program.n_cols + program.n_groups, MAX_LINES) * sizeof(Run))
        own.block_elems = <int64_t*>PyMem_RawMalloc(max(program.n_groups, 1) * sizeof(int64_t))
        own.block_bytes = <int64_t*>PyMem_RawMalloc(max(program.n_cols, 1) * sizeof(int64_t))
        if ah.runs == NULL or own.block_elems == NULL or own.block_bytes == NULL:
            PyMem_RawFree(ah.runs)
            ah.runs = NULL   # (no prefetching: not an error)
        else:
            for i in range(program.n_groups):
                own.block_elems[i] = (own.caps[i] * BLOCK + n - 1) // n
            for i in range(program.n_cols):
                own.block_bytes[i] = min(max(0, arena_given[i]), ARENA_MAX) * BLOCK // n

    errors = []
    cdef int status = OK
    cdef int64_t start, end, moved = 0
    cdef const int64_t* ps = &starts[0] if n > 0 else NULL
    cdef const int64_t* pe = &ends[0] if n > 0 else NULL
    cdef int64_t* checkpoint = own.checkpoint
    i = 0
    while i < n:
        with nogil:
            while i < n:
                if ah.runs != NULL:
                    # A block's lines are listed at its start, as runs of consecutive
                    # lines, and issued a share a record (counted down: no division per
                    # record), from the run where the last record's share stopped.
                    if block_left == 0:
                        list_writes(c, ah, own.block_elems, own.block_bytes)
                        step = (ah.lines + BLOCK - 1) // BLOCK
                        left = ah.lines
                        run = 0
                        run_left = 0
                        block_left = BLOCK
                    block_left -= 1
                    k = step if step < left else left
                    left -= k
                    while k > 0:
                        if run_left == 0:   # (left counts only lines the runs hold)
                            line = ah.runs[run].at
                            run_left = ah.runs[run].lines
                            run += 1
                        m = k if k < run_left else run_left
                        k -= m
                        run_left -= m
                        stop = line + m * 64
                        while line < stop:
                            __builtin_prefetch(line, 1)
                            line += 64
                start = ps[i]
                end = pe[i]
                c.record = c.data + start
                c.err_depth = 0
                moved = c.moved
                status = decode_record(c, c.data + start, c.data + end, index_base + i)
                if status != OK:
                    record_counts(c, index_base + i, checkpoint)
                    rollback(c, checkpoint)
                    c.moved = moved
                    break
                i += 1
        if status != OK:
            errors.append((index_base + i, status, c.err_offset, error_stack(c, status)))
            status = OK
            i += 1
            if policy == POLICY_RAISE:
                break
    c.arena_want = NULL   # (arena_given's: not read past the records)
    cdef Result result = Result.__new__(Result)
    export(c, program, result)
    result.errors = errors
    result.records = i
    result.moved = c.moved
    result.input_bytes = input_bytes
    return result


cdef class Context:
    """The working state of one decode() call, and its one owner: the Ctx (whose buffers
    export() hands over to the Result; any it has not are freed with it), the per-group
    counts of a bad record's rollback, the sizes given and the prefetch lists."""
    cdef Ctx* c
    cdef Program program       # whose spare c goes back to (give_back_ctx)
    cdef int64_t* checkpoint   # per group: its count before a bad record (record_counts)
    cdef int64_t* caps         # the capacities given, per group (NULL: none)
    cdef Ahead ahead           # the cache lines of the next block (runs NULL: none)
    cdef int64_t* block_elems  # per group: elements a block of records adds
    cdef int64_t* block_bytes  # per column: string bytes a block of records adds

    def __cinit__(self):
        self.ahead.runs = NULL
        self.ahead.n_runs = 0
        self.ahead.lines = 0

    def __dealloc__(self):
        give_back_ctx(self.program, self.c)
        self.c = NULL
        PyMem_RawFree(self.checkpoint)
        PyMem_RawFree(self.caps)
        PyMem_RawFree(self.ahead.runs)
        PyMem_RawFree(self.block_elems)
        PyMem_RawFree(self.block_bytes)


cdef Ctx* new_ctx(Program program) noexcept:
    """A Ctx for the program's tables, its stores empty (NULL when out of memory)."""
    cdef int32_t i
    cdef Ctx* c = <Ctx*>PyMem_RawCalloc(1, sizeof(Ctx))
    if c == NULL:
        return NULL
    c.n_cols = program.n_cols
    c.n_groups = program.n_groups
    c.cols = <ColumnStore*>PyMem_RawCalloc(max(program.n_cols, 1), sizeof(ColumnStore))
    c.groups = <GroupStore*>PyMem_RawCalloc(max(program.n_groups, 1), sizeof(GroupStore))
    c.cur = <int64_t*>PyMem_RawCalloc(max(program.n_groups, 1), sizeof(int64_t))
    c.col_moved = <int64_t*>PyMem_RawMalloc(max(program.n_cols, 1) * sizeof(int64_t))
    c.touched = <int32_t*>PyMem_RawMalloc(max(program.n_cols, 1) * sizeof(int32_t))
    c.is_touched = <uint8_t*>PyMem_RawCalloc(max(program.n_cols, 1), 1)
    if (c.cols == NULL or c.groups == NULL or c.cur == NULL or c.col_moved == NULL
            or c.touched == NULL or c.is_touched == NULL):
        free_ctx(c)
        return NULL
    c.col_member = program.col_member
    c.entries = program.entries
    c.nodes = program.nodes
    c.dense = program.dense
    c.dense_entries = program.dense_entries
    c.tag_entries = program.tag_entries
    c.default_cols = program.default_cols
    c.default_values = program.default_values
    c.clear_cols = program.clear_cols
    c.enum_sets = program.enum_sets
    c.enum_values = program.enum_values
    c.map_specs = program.map_specs
    c.any_specs = program.any_specs
    c.any_types = program.any_types
    c.any_names = program.any_names
    c.max_nesting = program.max_nesting
    # The plan's tables' address names its buffers in the pool (a hint: a plan freed and
    # another built at the same address costs at most a fault, never a wrong byte).
    c.pool_key = <uint64_t><size_t>program.entries
    for i in range(program.n_cols):
        c.col_moved[i] = -1
        c.cols[i].bytes = program.col_bytes[i]
        c.cols[i].width = 4 if c.cols[i].bytes else program.col_width[i]
        c.cols[i].group = program.col_group[i]
    for i in range(program.n_groups):
        c.groups[i].parent_group = program.group_parent[i]
    return c


cdef Ctx* take_ctx(Program program) noexcept:
    """The program's spare Ctx, or a new one when another call holds it (NULL when out of
    memory). Called with the GIL held: taking it is one step no other thread interleaves."""
    cdef Ctx* c = program.spare
    if c != NULL:
        program.spare = NULL
        return c
    return new_ctx(program)


cdef void give_back_ctx(Program program, Ctx* c) noexcept:
    """c, reset, back as the program's spare (freed if the program has one already).
    Called with the GIL held (Context.__dealloc__)."""
    if c == NULL:
        return
    if program is None or program.spare != NULL:
        free_ctx(c)
        return
    reset_ctx(c)
    program.spare = c


cdef void reset_ctx(Ctx* c) noexcept:
    """c as new_ctx made it: the stores of the touched columns (and every group's) freed
    and emptied, so that the next call sees nothing of this one."""
    cdef int32_t i, col
    cdef ColumnStore* cs
    cdef int32_t width, group
    cdef uint8_t is_bytes
    for i in range(c.n_touched):
        col = c.touched[i]
        cs = &c.cols[col]
        pool_free(cs.values, pool_size(c, cs.values_alloc))
        pool_free(cs.valid, pool_size(c, cs.valid_alloc))
        pool_free(cs.arena, pool_size(c, cs.arena_alloc))
        width = cs.width
        group = cs.group
        is_bytes = cs.bytes
        memset(cs, 0, sizeof(ColumnStore))
        cs.width = width
        cs.group = group
        cs.bytes = is_bytes
        c.col_moved[col] = -1
        c.is_touched[col] = 0
    c.n_touched = 0
    c.arena_want = NULL
    for i in range(c.n_groups):
        if c.groups[i].parent != NULL:
            pool_free(<uint8_t*>c.groups[i].parent, pool_size(c, c.groups[i].capacity * 8))
            c.groups[i].parent = NULL
        c.groups[i].count = 0
        c.groups[i].capacity = 0
        c.groups[i].want = 0
    memset(c.cur, 0, max(c.n_groups, 1) * sizeof(int64_t))
    c.data = NULL
    c.record = NULL
    c.pooled = False
    c.err_status = 0
    c.err_offset = 0
    c.err_depth = 0
    c.resume = NULL
    c.rejected = 0
    c.moved = 0


cdef inline void touch(Ctx* c, ColumnStore* cs) noexcept nogil:
    """The column's store is about to leave its initial state: listed for reset_ctx."""
    cdef int64_t col = cs - c.cols
    if not c.is_touched[col]:
        c.is_touched[col] = 1
        c.touched[c.n_touched] = <int32_t>col
        c.n_touched += 1


cdef inline void add_run(Run* runs, int64_t* n_runs, int64_t* lines, const uint8_t* base,
                         int64_t lo, int64_t hi) noexcept nogil:
    """The cache lines of bytes [lo, hi) of base, as one run."""
    cdef int64_t a, count
    if base == NULL or hi <= lo:
        return
    a = lo & ~(<int64_t>63)
    count = min((hi - a + 63) >> 6, MAX_LINES - lines[0])
    if count <= 0:
        return
    runs[n_runs[0]].at = base + a
    runs[n_runs[0]].lines = count
    n_runs[0] += 1
    lines[0] += count


cdef void list_writes(Ctx* c, Ahead* ah, const int64_t* block_elems,
                      const int64_t* block_bytes) noexcept nogil:
    """The cache lines the next block of records will write, by the sizes expected: a
    column's slots past its group's count, its arena past its length. Asked for a few per
    record (with write intent), they are in cache when the stores come: ~170 output
    streams are more than the hardware prefetcher follows. Listed as runs (a stream's
    lines are consecutive): a line costs its prefetch, not a list entry as well."""
    cdef int32_t col, g
    cdef ColumnStore* cs
    cdef int64_t a, b
    cdef Run* runs = ah.runs
    cdef int64_t n_runs = 0, lines = 0   # (locals: the runs' stores cannot alias them)
    for col in range(c.n_cols):
        cs = &c.cols[col]
        g = cs.group
        a = c.groups[g].count + block_elems[g]
        # (bounded by the blocks, not the capacity: zero_ahead zeroes the lines listed here
        # when the stores reach them, a few slots past the capacity each time)
        b = min(a + block_elems[g], cs.valid_alloc)
        if a < b:
            add_run(runs, &n_runs, &lines, cs.valid, a, b)
            if cs.width > 0:
                add_run(runs, &n_runs, &lines, cs.values, a * cs.width,
                        min(b * cs.width, cs.values_alloc))
        if cs.arena != NULL and block_bytes[col] > 0:
            a = cs.arena_len + block_bytes[col]
            add_run(runs, &n_runs, &lines, cs.arena, a, min(a + block_bytes[col], cs.arena_cap))
    for g in range(c.n_groups):
        a = c.groups[g].count + block_elems[g]
        b = min(a + block_elems[g], c.groups[g].capacity)
        if a < b:
            add_run(runs, &n_runs, &lines, <const uint8_t*>c.groups[g].parent, a * 8, b * 8)
    ah.n_runs = n_runs
    ah.lines = lines


cdef void presize(Ctx* c, const int64_t* capacity) noexcept nogil:
    """The slots each group's first block gets, and each of its columns' (GroupStore.want)."""
    cdef int32_t i
    for i in range(c.n_groups):
        c.groups[i].want = <int32_t>min(capacity[i], 0x7FFFFFFF)


cdef int first_block(Ctx* c, ColumnStore* cs) noexcept nogil:
    """A column's first block, of its group's `want` slots, when a record first writes to it.
    Not zeroed here: zero_ahead() zeroes it a few slots at a time as the stores reach them."""
    cdef int64_t cap = c.groups[cs.group].want
    # Offsets are all written (see store_string), so they need no zeroing.
    cdef int64_t col = cs - c.cols
    cs.valid = take_block(c, cap, False, &cs.valid_alloc, buffer_id(col, K_VALID))
    if cs.valid == NULL:
        return E_NO_MEMORY
    if cs.bytes:
        cs.values = take_block(c, (cap + 1) * 4, False, &cs.values_alloc,
                               buffer_id(col, K_VALUES))
        if cs.values != NULL:
            memset(cs.values, 0, 4)
    elif cs.width > 0:
        cs.values = take_block(c, cap * cs.width, False, &cs.values_alloc,
                               buffer_id(col, K_VALUES))
    if cs.width > 0 and cs.values == NULL:
        return E_NO_MEMORY
    return OK   # (capacity stays 0 until zero_ahead)


cdef inline void zero_ahead(ColumnStore* cs, int64_t slot, int64_t room) noexcept nogil:
    """Zero the slots from cs.capacity past `slot` (ZERO_AHEAD more, at most `room`, the
    slots the blocks hold) and make them the capacity: a slot never written is a null (and
    a zero value) of its element. Zeroing the whole first block up front (a pooled block
    holds the last batch's bytes) wrote every line of it once more, long before the stores
    came back to it, out of cache by then for a large batch: zeroed here, just ahead of the
    stores, the lines are written while the list_writes prefetches have them in cache."""
    cdef int64_t cap = min(max(slot + 1, cs.capacity + ZERO_AHEAD), room)
    memset(cs.valid + cs.capacity, 0, cap - cs.capacity)
    if cs.width > 0 and not cs.bytes:
        memset(cs.values + cs.capacity * cs.width, 0, (cap - cs.capacity) * cs.width)
    cs.capacity = cap


cdef enum:
    POOL_MIN = 65536   # buffers.pyx: smaller requests are malloc's, not the pool's
    # Which of a column's buffers, or a group's, a pool key names (buffer_key).
    K_VALID = 1
    K_VALUES = 2
    K_ARENA = 3
    K_PARENT = 4


cdef inline int64_t buffer_id(int64_t index, int kind) noexcept nogil:
    """One buffer of the plan: a column's (its index) or a group's (its index, K_PARENT)."""
    return index * 8 + kind


cdef inline uint64_t buffer_key(const Ctx* c, int64_t buffer) noexcept nogil:
    """The pool's name for one buffer (buffer_id) of this plan. Batch after batch the block
    the buffer had last comes back to it, written as far as it writes (buffers.pyx,
    pool_take). Made only for a pooled request (a small batch's blocks are not)."""
    return c.pool_key + <uint64_t>buffer * <uint64_t>0x9E3779B97F4A7C15


cdef uint8_t* take_block(Ctx* c, int64_t size, bint zero, int64_t* allocated,
                         int64_t buffer) noexcept nogil:
    """A buffer of at least size bytes for `buffer` (buffer_id); *allocated = the size
    behind it (at least size)."""
    if c.pooled:
        return pool_take(size, zero, allocated,
                         buffer_key(c, buffer) if size >= POOL_MIN else 0)
    cdef uint8_t* p = <uint8_t*>(PyMem_RawCalloc(size, 1) if zero else PyMem_RawMalloc(size))
    allocated[0] = size if p != NULL else 0
    return p


cdef uint8_t* grow_block(Ctx* c, uint8_t* old, int64_t old_alloc, int64_t used, int64_t size,
                         int64_t* allocated, int64_t buffer) noexcept nogil:
    """old (old_alloc bytes behind it, the first `used` of them kept) moved to a block of at
    least size bytes; *allocated = the size behind it; NULL when out of memory (old kept).
    Pooled, a large one is a pool block and old goes back to the pool: realloc'd, the
    grown block left the pool's reach (no name, no written extent) and realloc's fresh
    tail was faulted in anew by every batch that grew past its learned size."""
    cdef uint8_t* p
    if c.pooled and size >= POOL_MIN:
        p = pool_take(size, False, allocated, buffer_key(c, buffer))
        if p != NULL:
            if used > 0:
                memcpy(p, old, used)
            pool_give(old, old_alloc, used)
        return p
    p = <uint8_t*>PyMem_RawRealloc(old, size)
    allocated[0] = size if p != NULL else 0
    return p


cdef inline int64_t pool_size(const Ctx* c, int64_t allocated) noexcept nogil:
    # What a buffer is given back to the pool with: 0 (free it) when the ctx is not pooled.
    return allocated if c.pooled else 0


cdef list error_stack(Ctx* c, int status):
    # Levels were recorded innermost first; return them root first.
    return [(c.stack_node[k], c.stack_field[k], c.stack_index[k])
            for k in range(c.err_depth - 1, -1, -1)]


cdef void free_ctx(Ctx* c) noexcept:
    """Free c and the stores it still holds (export() took the others, leaving NULLs)."""
    cdef int32_t i
    if c == NULL:
        return
    if c.cols != NULL:
        for i in range(c.n_cols):
            pool_free(c.cols[i].values, pool_size(c, c.cols[i].values_alloc))
            pool_free(c.cols[i].valid, pool_size(c, c.cols[i].valid_alloc))
            pool_free(c.cols[i].arena, pool_size(c, c.cols[i].arena_alloc))
    if c.groups != NULL:
        for i in range(c.n_groups):
            pool_free(<uint8_t*>c.groups[i].parent, pool_size(c, c.groups[i].capacity * 8))
    PyMem_RawFree(c.cols)
    PyMem_RawFree(c.groups)
    PyMem_RawFree(c.cur)
    PyMem_RawFree(c.col_moved)
    PyMem_RawFree(c.touched)
    PyMem_RawFree(c.is_touched)
    PyMem_RawFree(c)


cdef int export(Ctx* c, Program program, Result r) except -1:
    # Ownership of every store moves into OwnedBuffers; the ctx keeps NULLs. A column no
    # record wrote to (no block: see GroupStore.want) is read as zeros: null values,
    # empty strings. Such columns share one zeroed block, each through a view of its exact
    # size (a view per group and size, not an allocation per column). The lists start as
    # copies of the program's entries for a batch of no elements (Program.templates): only
    # the columns of a non-empty group (the program's list of each group's columns) and
    # the columns the call wrote (c.touched) are looked at, so that a call costs what the
    # batch holds, not the plan's ~16,000 columns of a wide recursive plan.
    cdef int32_t i, g, k
    cdef GroupStore* gs
    cdef ColumnStore* cs
    cdef int64_t count, most = 0
    program.templates()
    cdef list group_parents = list(program.empty_group_parents)
    cdef list group_counts = list(program.empty_group_counts)
    group_sizes = np.zeros(c.n_groups, dtype=np.int64)
    cdef int64_t[::1] sizes_view = group_sizes
    r.group_parents = group_parents
    r.group_counts = group_counts
    r.group_sizes = group_sizes
    for i in range(c.n_groups):
        gs = &c.groups[i]
        if gs.count > 0:
            # An empty group's parents: the shared empty view (its block, if any, given back).
            group_parents[i] = OwnedBuffer.adopt(<uint8_t*>gs.parent, gs.count * 8,
                                                 pool_size(c, gs.capacity * 8))
            group_counts[i] = gs.count
            sizes_view[i] = gs.count
            most = max(most, gs.count)
        elif gs.parent != NULL:
            pool_free(<uint8_t*>gs.parent, pool_size(c, gs.capacity * 8))
        gs.parent = NULL
    cdef ExportZeros zeros = ExportZeros.__new__(ExportZeros)
    zeros.most = most
    zeros.views = {}
    cdef list col_values = list(program.empty_col_values)
    cdef list col_valid = list(program.empty_col_valid)
    cdef list col_arena = list(program.empty_col_arena)
    cdef list col_counts = list(program.empty_col_counts)
    arena_bytes = np.zeros(c.n_cols, dtype=np.int64)
    cdef int64_t[::1] arena_view = arena_bytes
    r.col_values = col_values
    r.col_valid = col_valid
    r.col_arena = col_arena
    r.col_counts = col_counts
    r.arena_bytes = arena_bytes
    # Every column of a group that holds elements: written, or zeros (a wide record's
    # groups hold ~4,000 columns, most of them unwritten: each such column's entries are
    # the group's views, made once a group) ...
    cdef object n_obj, valid_view, view_1, view_4, view_8, view_offsets
    for g in range(c.n_groups):
        count = c.groups[g].count
        if count == 0:
            continue
        n_obj = count
        valid_view = view_1 = view_4 = view_8 = view_offsets = None   # (made when needed)
        for k in range(program.group_cols_at[g], program.group_cols_at[g + 1]):
            i = program.group_cols[k]
            cs = &c.cols[i]
            if cs.valid != NULL or cs.values != NULL or cs.arena != NULL:
                export_column(c, i, count, col_values, col_valid, col_arena,
                              col_counts, arena_view)
                continue
            if valid_view is None:
                valid_view = view_1 = zeros.view(count)
            if cs.bytes:
                if view_offsets is None:
                    view_offsets = zeros.view((count + 1) * 4)
                col_values[i] = view_offsets
            elif cs.width == 1:
                col_values[i] = view_1
            elif cs.width == 4:
                if view_4 is None:
                    view_4 = zeros.view(count * 4)
                col_values[i] = view_4
            elif cs.width == 8:
                if view_8 is None:
                    view_8 = zeros.view(count * 8)
                col_values[i] = view_8
            elif cs.width > 0:   # (no other width today: kept right if one comes)
                col_values[i] = zeros.view(count * cs.width)
            col_valid[i] = valid_view
            col_counts[i] = n_obj
    # ... and the columns written in a group left empty (its records rolled back): their
    # blocks are handed over as a column of no elements, as any written column's.
    for k in range(c.n_touched):
        i = c.touched[k]
        cs = &c.cols[i]
        if c.groups[cs.group].count == 0 and (
                cs.valid != NULL or cs.values != NULL or cs.arena != NULL):
            export_column(c, i, 0, col_values, col_valid, col_arena, col_counts,
                          arena_view)
    return 0


cdef class ExportZeros:
    """The zeroed block the unwritten columns of one export() share, taken when the first
    of them is met (most + 1 eight-byte slots: the largest group's), and its views by size."""
    cdef OwnedBuffer block
    cdef int64_t most
    cdef dict views

    cdef OwnedBuffer view(self, int64_t size):
        """A view of `size` zero bytes (one per size)."""
        cdef int64_t allocated = 0
        if self.block is None:
            self.block = OwnedBuffer.adopt(
                pool_alloc((self.most + 1) * 8, True, &allocated), (self.most + 1) * 8,
                allocated)
            if self.block.data == NULL:
                raise MemoryError()
        return zero_view(self.block, self.views, size)


cdef int export_column(Ctx* c, int32_t i, int64_t count, list col_values,
                       list col_valid, list col_arena, list col_counts,
                       int64_t[::1] arena_view) except -1:
    """A written column's entries of the Result (its blocks handed over), its group
    holding `count` elements."""
    cdef ColumnStore* cs = &c.cols[i]
    if cs.valid == NULL and cs.values == NULL and cs.arena == NULL:
        return 0   # (a column of no elements: the program's empty entries)
    # Slots past the capacity were never written: grow so that every element has one.
    if (cs.capacity < count or (cs.bytes and cs.values == NULL)) and \
            grow_column(c, cs, max(count - 1, 0)) != OK:
        raise MemoryError()
    if cs.bytes:
        close_offsets(cs, count)
    col_values[i] = (OwnedBuffer.adopt(cs.values, (count + cs.bytes) * cs.width,
                                       pool_size(c, cs.values_alloc))
                     if cs.width > 0 else None)
    if cs.width == 0:
        pool_free(cs.values, pool_size(c, cs.values_alloc))
    col_valid[i] = OwnedBuffer.adopt(cs.valid, count, pool_size(c, cs.valid_alloc))
    if cs.arena != NULL:
        col_arena[i] = OwnedBuffer.adopt(cs.arena, cs.arena_len, pool_size(c, cs.arena_alloc))
        arena_view[i] = cs.arena_len
    col_counts[i] = count
    cs.values = NULL
    cs.valid = NULL
    cs.arena = NULL
    return 0


# The entries of a column or group of no elements, shared by every Result: views of a few
# zero bytes kept for the process (never written: Arrow buffers over them are read-only).
cdef OwnedBuffer ZERO_BYTES = OwnedBuffer.adopt(<uint8_t*>PyMem_RawCalloc(64, 1), 64, 0)
if ZERO_BYTES.data == NULL:
    raise MemoryError()
cdef OwnedBuffer EMPTY = OwnedBuffer.view(ZERO_BYTES, 0)
cdef OwnedBuffer EMPTY_OFFSETS = OwnedBuffer.view(ZERO_BYTES, 4)


cdef inline OwnedBuffer zero_view(OwnedBuffer zeros, dict views, int64_t size):
    v = views.get(size)
    if v is None:
        v = views[size] = OwnedBuffer.view(zeros, size)
    return <OwnedBuffer>v


cdef void record_counts(Ctx* c, int64_t index, int64_t* counts) noexcept nogil:
    """Each group's count before record `index` (the one being decoded), derived after it
    failed instead of copied before every record: a group's elements are in the order of
    their parents (every element is opened under its parent group's newest one), so the
    record's are a suffix, found from the end: the root group's by their parent (the record
    index, increasing), every other group's by a parent past its parent group's count
    (parents precede their children). A bad record costs its own elements, no more."""
    cdef int32_t g
    cdef int64_t k, keep
    cdef GroupStore* gs
    for g in range(c.n_groups):
        gs = &c.groups[g]
        k = gs.count
        keep = index if g == 0 else counts[gs.parent_group]
        while k > 0 and gs.parent[k - 1] >= keep:
            k -= 1
        counts[g] = k


cdef void rollback(Ctx* c, const int64_t* checkpoint) noexcept nogil:
    # Only the touched columns: a column no store has reached is as new_ctx left it.
    cdef int32_t i, k
    cdef ColumnStore* cs
    cdef int64_t keep, stop
    for k in range(c.n_touched):
        i = c.touched[k]
        cs = &c.cols[i]
        keep = checkpoint[cs.group]
        stop = c.groups[cs.group].count
        if stop > cs.capacity:
            stop = cs.capacity
        if stop > keep:
            memset(cs.valid + keep, 0, stop - keep)
            if cs.width > 0 and not cs.bytes:
                memset(cs.values + keep * cs.width, 0, (stop - keep) * cs.width)
        if cs.bytes and cs.filled > keep:
            cs.filled = keep
            cs.arena_len = (<uint32_t*>cs.values)[keep]
        c.col_moved[i] = -1   # (element numbers are given out again)
        if cs.arena_cap < 0:
            unpoison(cs)
    for i in range(c.n_groups):
        c.groups[i].count = checkpoint[i]


# ---- storage -------------------------------------------------------------------------

cdef int grow_column(Ctx* c, ColumnStore* cs, int64_t slot) noexcept nogil:
    touch(c, cs)
    if cs.capacity == 0 and c.groups[cs.group].want > slot:
        if first_block(c, cs) != OK:
            return E_NO_MEMORY
    cdef int64_t room = slots_held(cs)
    if slot < room:
        # (the first block's slots, zeroed a few at a time: zero_ahead)
        zero_ahead(cs, slot, room)
        return OK
    cdef int64_t cap = cs.capacity * 2
    if cap < 64:
        cap = 64
    if cap <= slot:
        cap = slot + 1
    cdef int64_t col = cs - c.cols
    cdef uint8_t* valid = grow_block(c, cs.valid, cs.valid_alloc, cs.capacity, cap,
                                     &cs.valid_alloc, buffer_id(col, K_VALID))
    if valid == NULL:
        return E_NO_MEMORY
    cs.valid = valid
    memset(valid + cs.capacity, 0, cap - cs.capacity)
    cdef uint8_t* values
    if cs.bytes:
        # capacity + 1 offsets; those past `filled` are written before they are read.
        values = grow_block(c, cs.values, cs.values_alloc,
                            (cs.filled + 1) * 4 if cs.values != NULL else 0, (cap + 1) * 4,
                            &cs.values_alloc, buffer_id(col, K_VALUES))
        if values == NULL:
            return E_NO_MEMORY
        if cs.values == NULL:
            memset(values, 0, 4)
        cs.values = values
    elif cs.width > 0:
        values = grow_block(c, cs.values, cs.values_alloc, cs.capacity * cs.width,
                            cap * cs.width, &cs.values_alloc, buffer_id(col, K_VALUES))
        if values == NULL:
            return E_NO_MEMORY
        cs.values = values
        memset(values + cs.capacity * cs.width, 0, (cap - cs.capacity) * cs.width)
    cs.capacity = cap
    return OK


cdef inline uint8_t* slot(Ctx* c, int32_t col) noexcept nogil:
    """Mark the current element's slot of `col` present; return where its value goes."""
    cdef ColumnStore* cs = &c.cols[col]
    cdef int64_t e = c.cur[cs.group]
    if e >= cs.capacity:
        return slot_grown(c, cs, e)
    cs.valid[e] = 1
    # Presence-only columns have no values: hand back the validity byte as the non-NULL "ok".
    return wa_nonnull(cs.values + e * cs.width if cs.width > 0 else cs.valid + e)


cdef inline int64_t slots_held(const ColumnStore* cs) noexcept nogil:
    """The slots a column's blocks hold (its capacity: those of them zeroed so far)."""
    cdef int64_t room = cs.valid_alloc if cs.valid != NULL else 0
    if cs.bytes:
        room = min(room, cs.values_alloc // 4 - 1)
    elif cs.width > 0:
        room = min(room, cs.values_alloc // cs.width)
    return room


cdef inline uint8_t* value_slot(Ctx* c, int32_t col, int64_t width) noexcept nogil:
    """slot() of a column whose width the caller knows (a constant at each call site)."""
    cdef ColumnStore* cs = &c.cols[col]
    cdef int64_t e = c.cur[cs.group]
    if e >= cs.capacity:
        return slot_grown(c, cs, e)
    cs.valid[e] = 1
    return wa_nonnull(cs.values + e * width)


cdef inline uint8_t* slot_at(Ctx* c, int32_t col, int64_t e) noexcept nogil:
    """slot() of element e, which the caller already knows (see decode_fields)."""
    cdef ColumnStore* cs = &c.cols[col]
    if e >= cs.capacity:
        return slot_grown(c, cs, e)
    cs.valid[e] = 1
    return wa_nonnull(cs.values + e * cs.width if cs.width > 0 else cs.valid + e)


cdef inline uint8_t* value_slot_at(Ctx* c, int32_t col, int64_t e, int64_t width) noexcept nogil:
    cdef ColumnStore* cs = &c.cols[col]
    if e >= cs.capacity:
        return slot_grown(c, cs, e)
    cs.valid[e] = 1
    return wa_nonnull(cs.values + e * width)


cdef uint8_t* slot_grown(Ctx* c, ColumnStore* cs, int64_t e) noexcept nogil:
    # Out of line: once per column and batch (its first block), rarely more.
    if grow_column(c, cs, e) != OK:
        return NULL
    cs.valid[e] = 1
    return cs.values + e * cs.width if cs.width > 0 else cs.valid + e


cdef int grow_group(Ctx* c, GroupStore* gs, int64_t count) noexcept nogil:
    """Room for `count` elements in the group (its first block of gs.want elements, then
    doubling, from 64); the only place a group grows. Out of line: once per group and
    batch (its first block), rarely more."""
    cdef int64_t cap = gs.capacity * 2 if gs.capacity >= 64 else 64
    cdef int64_t* parent
    cdef int64_t allocated
    cdef int64_t buffer = buffer_id(gs - c.groups, K_PARENT)
    if gs.capacity == 0 and gs.want >= count:
        gs.parent = <int64_t*>take_block(c, <int64_t>gs.want * 8, False, &allocated, buffer)
        if gs.parent == NULL:
            return E_NO_MEMORY
        gs.capacity = allocated // 8
        return OK
    while cap < count:
        cap *= 2
    parent = <int64_t*>grow_block(c, <uint8_t*>gs.parent, gs.capacity * 8, gs.count * 8,
                                  cap * 8, &allocated, buffer)
    if parent == NULL:
        return E_NO_MEMORY
    gs.parent = parent
    gs.capacity = allocated // 8
    return OK


cdef inline int open_element(Ctx* c, int32_t g) noexcept nogil:
    cdef GroupStore* gs = &c.groups[g]
    if gs.count == gs.capacity and grow_group(c, gs, gs.count + 1) != OK:
        return E_NO_MEMORY
    gs.parent[gs.count] = c.cur[gs.parent_group]
    c.cur[g] = gs.count
    gs.count += 1
    return OK


cdef inline int enter_node(Ctx* c, const Node* node, int64_t e) noexcept nogil:
    """A sub-message (or the record) starts as element e of its group: mark it present,
    fill implicit defaults (Program checked that these columns are in the node's group)."""
    cdef int32_t k, col
    cdef ColumnStore* cs
    cdef uint8_t* dst
    if node.presence >= 0 and slot_at(c, node.presence, e) == NULL:
        return E_NO_MEMORY
    for k in range(node.defaults, node.defaults + node.n_defaults):
        col = c.default_cols[k]
        cs = &c.cols[col]
        # Merged occurrences of a message must not reset what an earlier one set.
        if e < cs.capacity and cs.valid[e]:
            continue
        dst = slot_at(c, col, e)
        if dst == NULL:
            return E_NO_MEMORY
        if cs.width > 0:
            memcpy(dst, c.default_values + 16 * k, cs.width)
    return OK


cdef inline bint clear_siblings(Ctx* c, const FieldEntry* f, int32_t node_id) noexcept nogil:
    # oneof: the member read last wins, so every other member's columns become null.
    # True when one of them is a string member of this message that had a value moved to
    # the unknown fields (see move_string): this occurrence must go there after it too, or
    # replaying the unknown fields would end the oneof on that string. Such a member keeps
    # its mark (an empty null value), so that it sees this when it comes again itself.
    cdef int32_t k, col
    cdef ColumnStore* cs
    cdef int64_t e
    cdef bint after_moved = False
    for k in range(f.clear, f.clear + f.n_clear):
        col = c.clear_cols[k]
        cs = &c.cols[col]
        e = c.cur[cs.group]
        if cs.bytes and e + 1 == cs.filled:
            # Its value was the arena's last: drop it (the element is the newest).
            cs.filled = e
            cs.arena_len = (<uint32_t*>cs.values)[e]
        if e < cs.capacity:
            cs.valid[e] = 0
        if c.col_member[col] == node_id + 1 and c.col_moved[col] == e:
            after_moved = True
            mark_moved(c, col, e)
    return after_moved


# ---- skipping ------------------------------------------------------------------------

cdef int skip_field(Ctx* c, const uint8_t** pp, const uint8_t* end, uint32_t number,
                    int wire_type, int depth) noexcept nogil:
    cdef int64_t n
    cdef int st
    if wire_type == 0:
        return skip_varint(pp, end)
    if wire_type == 1:
        return skip_fixed(pp, end, 8)
    if wire_type == 5:
        return skip_fixed(pp, end, 4)
    if wire_type == 2:
        st = read_length(pp, end, &n)
        if st == OK:
            pp[0] += n
        return st
    if wire_type == 3:
        return skip_group(c, pp, end, number, depth + 1)
    if wire_type == 4:
        return E_STRAY_END_GROUP
    return E_WIRE_TYPE_RESERVED


cdef int skip_group(Ctx* c, const uint8_t** pp, const uint8_t* end, uint32_t number,
                    int depth) noexcept nogil:
    """Skip fields until the end-group tag of `number` (groups nest, so this recurses)."""
    cdef uint64_t tag
    cdef int st, wt
    cdef uint32_t fn
    if depth > c.max_nesting:
        return E_DEPTH
    while True:
        if pp[0] >= end:
            return E_UNTERMINATED_GROUP
        st = read_tag(pp, end, &tag)
        if st != OK:
            return st
        fn = <uint32_t>(tag >> 3)
        wt = tag & 7
        if fn == 0:
            return E_FIELD_ZERO
        if wt == 4:
            return OK if fn == number else E_END_GROUP_MISMATCH
        st = skip_field(c, pp, end, fn, wt, depth)
        if st != OK:
            return st


cdef inline bint utf8_valid(const uint8_t* s, int64_t n) noexcept nogil:
    # Most strings are ASCII: OR all their bytes together, 8 at a time with no early exit
    # (the last word overlaps the one before), and validate properly only if a high bit shows.
    cdef uint64_t acc = 0, w
    cdef int64_t j = 0
    if n >= 8:
        while j + 8 <= n:
            memcpy(&w, s + j, 8)
            acc |= w
            j += 8
        memcpy(&w, s + n - 8, 8)
        acc |= w
    else:
        while j < n:
            acc |= s[j]
            j += 1
    if not (acc & 0x8080808080808080ULL):
        return True
    return utf8_valid_full(s, n)


cdef bint utf8_valid_full(const uint8_t* s, int64_t n) noexcept nogil:
    cdef int64_t i = 0
    cdef uint64_t word
    cdef uint8_t b
    cdef uint32_t cp
    cdef int k, need
    while i < n:
        # ASCII runs are the common case: 8 bytes at a time.
        while i + 8 <= n:
            memcpy(&word, s + i, 8)
            if word & 0x8080808080808080ULL:
                break
            i += 8
        if i >= n:
            break
        b = s[i]
        if b < 0x80:
            i += 1
            continue
        if b >= 0xC2 and b <= 0xDF:
            need = 1
            cp = b & 0x1F
        elif b >= 0xE0 and b <= 0xEF:
            need = 2
            cp = b & 0x0F
        elif b >= 0xF0 and b <= 0xF4:
            need = 3
            cp = b & 0x07
        else:
            return False
        if i + need >= n:
            return False
        for k in range(1, need + 1):
            if (s[i + k] & 0xC0) != 0x80:
                return False
            cp = (cp << 6) | (s[i + k] & 0x3F)
        # overlong forms, surrogates and values past U+10FFFF
        if (need == 2 and (cp < 0x800 or (cp >= 0xD800 and cp <= 0xDFFF))) or \
                (need == 3 and (cp < 0x10000 or cp > 0x10FFFF)):
            return False
        i += need + 1
    return True


# ---- the decoder ---------------------------------------------------------------------

cdef int decode_record(Ctx* c, const uint8_t* p, const uint8_t* end, int64_t index) noexcept nogil:
    cdef int st
    c.cur[0] = -1   # the root group's parent is the record index, stored by open_element
    cdef GroupStore* root = &c.groups[0]
    if root.count == root.capacity and grow_group(c, root, root.count + 1) != OK:
        return E_NO_MEMORY
    root.parent[root.count] = index
    c.cur[0] = root.count
    root.count += 1
    st = enter_node(c, &c.nodes[0], root.count - 1)
    if st != OK:
        return st
    return decode_fields(c, 0, p, end, 0, 0, root.count - 1)


# The entry of a field number no entry has: its wire type matches none (see decode_fields).
cdef enum:
    NO_WIRE_TYPE = 0xFF
    # Or'ed into the action of a scalar entry that is a oneof member or repeated (Program):
    # decode_fields takes its step (siblings unset, element opened) before the store. The
    # actions are below it; A_NONE is never looked at past the wire type test.
    A_PRE = 0x40
cdef FieldEntry NO_ENTRY
NO_ENTRY.number = 0
NO_ENTRY.wire_type = NO_WIRE_TYPE
NO_ENTRY.action = A_NONE
NO_ENTRY.column = NO_ENTRY.child = NO_ENTRY.group = NO_ENTRY.clear = NO_ENTRY.aux = -1
NO_ENTRY.n_clear = 0


cdef inline const FieldEntry* sparse_entry(const Ctx* c, const Node* node,
                                           uint32_t number) noexcept nogil:
    """The entry of a field number past the node's dense table (sparse high numbers: a
    binary search of its sorted entries), NO_ENTRY if none."""
    cdef int32_t lo = node.entries, hi = node.entries + node.n_entries - 1, mid
    while lo <= hi:
        mid = (lo + hi) >> 1
        if c.entries[mid].number == number:
            return &c.entries[mid]
        if c.entries[mid].number < number:
            lo = mid + 1
        else:
            hi = mid - 1
    return &NO_ENTRY


cdef int decode_fields(Ctx* c, int32_t node_id, const uint8_t* p, const uint8_t* end,
                       uint32_t end_group, int depth, int64_t node_element) noexcept nogil:
    """Decode the fields of one message in [p, end).

    end_group != 0: the message is a group; stop after its end-group tag and leave the
    position in c.resume. On failure, record this level in the error stack.
    """
    cdef const Node* node = &c.nodes[node_id]
    cdef const FieldEntry* f
    cdef uint64_t tag   # (dead past the dispatch: errors read it again, see number_at)
    cdef uint64_t v
    cdef uint32_t fn
    cdef int wt, st = OK
    cdef bint miss   # no entry of the tag's number and wire type
    cdef int64_t n
    cdef const uint8_t* field_start = p
    cdef const FieldEntry* opened = NULL   # entry whose element was opened by this field
    cdef uint8_t* dst
    cdef int act
    cdef uint32_t v32
    # Calls that take an address get these copies, so that p, n, v and tag, whose address
    # is never taken, stay in registers across the byte stores of the loop.
    cdef const uint8_t* q
    cdef const uint8_t* qx   # (for the calls not inlined: q, whose address escapes nowhere,
                             # stays in a register)
    cdef uint64_t vq
    cdef int64_t nq
    # Loop invariants in locals: the byte stores below could alias anything behind `c`.
    cdef const FieldEntry** tags = wa_opaque_tags(<const FieldEntry**>node.tags)
    cdef uint32_t tag_len = <uint32_t>node.tag_len
    # node_element: the element of the node's group this message is (fixed while its fields
    # are decoded: a repeated field opens elements in its own group), passed down instead of
    # read per value; Program checked that every column is in the group its values are
    # stored by.
    cdef int64_t el
    if depth > c.max_nesting:
        c.err_offset = p - c.record
        return record_level(c, node_id, 0, -1, E_DEPTH)
    while p < end:
        field_start = p
        opened = NULL
        # A one-byte tag (most fields') indexes the node's tag table whole: its slot holds
        # the entry of that number under that wire type, NULL for any other case.
        tag = p[0]
        if tag < tag_len:
            p += 1
            f = tags[tag]
            miss = f == NULL
            if miss:
                f = &node.dense_at[tag >> 3]
        else:
            # (a one-byte tag past the table without a status to test)
            if tag < 0x80:
                p += 1
            else:
                q = p
                st = read_tag(&q, end, &vq)
                p = q
                tag = vq
                if st != OK:
                    break   # (number_at names no field: the tag cannot be read)
            fn = <uint32_t>(tag >> 3)
            f = (&node.dense_at[fn] if fn < <uint32_t>node.dense_len
                 else sparse_entry(c, node, fn))
            miss = <int>(tag & 7) != f.wire_type
        if miss:
            # No entry (NO_ENTRY and the dense table's empty slots match no wire type), or a
            # known field under another wire type: packed values, or an unknown field.
            fn = <uint32_t>(tag >> 3)
            wt = tag & 7
            q = p
            if wt == 2 and (f.flags & F_PACKABLE) and f.action != A_NONE:
                st = packed_field(c, f, node, &q, end)
            else:
                st = unplanned_field(c, node, &q, end, field_start, fn, wt, end_group, depth)
            p = q
            if st == OK:
                continue
            if st == END_OF_GROUP:
                c.resume = p
                return OK
            break
        act = f.action
        el = node_element
        # One test on the action for the common case, a plain singular scalar; the others
        # (messages, values only checked, oneof members and repeated scalars) leave here.
        if act > A_STRING:
            if act >= A_PRE:
                # A oneof member or a repeated scalar: its step, then its store below.
                act = act ^ A_PRE
                if f.n_clear > 0 and clear_siblings(c, f, node_id):
                    st = AFTER_MOVED(c, f, node, node_element, field_start, p, end, depth)
                    if st != OK:
                        break
                if f.group >= 0:
                    st = open_element(c, f.group)
                    if st != OK:
                        break
                    opened = f
                    el = c.cur[f.group]
            elif act >= A_MESSAGE:
                if act > A_GROUP:
                    # A closed enum, or a map entry upb might keep as an unknown field: the
                    # check comes before the field has any effect (oneof siblings, elements).
                    qx = p
                    st = rare_field(c, node, f, &qx, end, field_start, depth, node_element)
                    p = qx
                    if st == OK:
                        continue
                    # An error names the element the field opened, as below (rare_field
                    # opened it); an error inside an entry recorded its own level already.
                    if act != A_ENUM:   # a map entry or an Any (one compare, as before Any)
                        return record_level(c, node_id, number_at(field_start, end),
                                            element_index(c, f), st)
                    if f.group >= 0:
                        opened = f
                    break
                q = p
                st = sub_message(c, node_id, node, f, &q, end, field_start, depth,
                                 node_element)
                p = q
                if st != OK:
                    return st   # (its level, and the inner ones, recorded)
                continue
            if act > A_STRING:
                # A value only checked (no column; a oneof member's too): read and dropped.
                qx = p
                st = skip_value(act, &qx, end)
                p = qx
                if st != OK:
                    break
                continue
        # One dispatch per value, on the entry's precomputed action; stores inline.
        if act == A_VARINT32:
            q = p
            st = read_varint(&q, end, &vq)
            p = q
            v = vq
            if st != OK:
                break
            dst = value_slot_at(c, f.column, el, 4)
            if dst == NULL:
                st = E_NO_MEMORY
                break
            v32 = <uint32_t>v
            memcpy(dst, &v32, 4)
        elif act == A_STRING or act == A_BYTES:
            if p < end and p[0] < 0x80:
                n = p[0]
                p += 1
                if n > end - p:
                    st = E_LENGTH
                    break
            else:
                q = p
                st = read_length(&q, end, &nq)
                p = q
                n = nq
                if st != OK:
                    break
            if act == A_STRING:
                st = store_string(c, f.column, el, p, n, True)
            elif f.flags & F_MERGE:
                st = merge_message_bytes(c, f.column, el, p, n)
            else:
                st = store_string(c, f.column, el, p, n, False)
            if st != OK:
                # (cold) a string the schema does not validate, not stored: see there
                if not (f.flags & F_UTF8_OR_UNKNOWN):
                    break
                st = NOT_STORED(c, f, node, el, node_element, field_start, p, n, st)
                if st != OK:
                    break
            p += n
        elif act == A_VARINT64 or act == A_BOOL or act == A_ZIGZAG32 or act == A_ZIGZAG64:
            q = p
            st = read_varint(&q, end, &vq)
            p = q
            v = vq
            if st != OK:
                break
            dst = slot_at(c, f.column, el)
            if dst == NULL:
                st = E_NO_MEMORY
                break
            store_varint(dst, act, v)
        elif act == A_FIXED64:
            if end - p < 8:
                st = E_TRUNCATED
                break
            dst = value_slot_at(c, f.column, el, 8)
            if dst == NULL:
                st = E_NO_MEMORY
                break
            memcpy(dst, p, 8)
            p += 8
        elif act == A_FIXED32:
            if end - p < 4:
                st = E_TRUNCATED
                break
            dst = value_slot_at(c, f.column, el, 4)
            if dst == NULL:
                st = E_NO_MEMORY
                break
            memcpy(dst, p, 4)
            p += 4
        else:
            wa_unreachable()   # (the actions past A_STRING left above: no range test here)
    if st == OK and end_group != 0:
        st = E_UNTERMINATED_GROUP
    if st != OK:
        c.err_offset = (p if st == E_UNTERMINATED_GROUP else field_start) - c.record
        return record_level(c, node_id, number_at(field_start, end),
                            element_index(c, opened) if opened != NULL else -1, st)
    return OK


cdef uint32_t number_at(const uint8_t* p, const uint8_t* end) noexcept nogil:
    """The field number of the tag at p (0 if none can be read there: it names no field).
    Errors read the failed field's tag again from its start, so that decode_fields does
    not keep the tag live (in a stack slot, stored every field) past its dispatch."""
    cdef uint64_t tag
    if p >= end or read_tag(&p, end, &tag) != OK:
        return 0
    return <uint32_t>(tag >> 3)


cdef inline int unplanned_field(Ctx* c, const Node* node, const uint8_t** pp,
                                const uint8_t* end, const uint8_t* field_start, uint32_t fn,
                                int wt, uint32_t end_group, int depth) noexcept nogil:
    """A field the node has no entry for, or a known one under another wire type: as the
    runtime (upb) does, an unknown field, read or not (no value stored, no oneof sibling
    cleared, no presence). So is a repeated group sent length-delimited, as protobuf 7
    reads it (6's upb reads a group after the length: docs/errors.md). Skipped by length
    (the common wire types inline) or kept in the node's unknown fields. Field 0 and wire
    types 4, 6, 7 never have an entry, so they are checked here only. END_OF_GROUP: the
    end-group tag of the group being decoded (pp after it)."""
    cdef const uint8_t* p = pp[0]
    cdef int64_t n
    cdef int st
    if node.unknown == -1:
        if wt == 2 and fn != 0:
            if p < end and p[0] < 0x80:   # (a one-byte length: no status to test)
                n = p[0]
                p += 1
                if n > end - p:
                    return E_LENGTH
                pp[0] = p + n
                return OK
            st = read_length(&p, end, &n)
            if st != OK:
                return st
            pp[0] = p + n
            return OK
        if wt == 0 and fn != 0 and p < end and p[0] < 0x80:
            pp[0] = p + 1
            return OK
    st = check_tag(fn, wt, end_group)
    if st != OK:
        return st   # (END_OF_GROUP: pp is past the tag already)
    st = skip_field(c, &p, end, fn, wt, depth)
    pp[0] = p
    if st != OK:
        return st
    return unknown_field(c, node, field_start, p)


cdef inline int packed_field(Ctx* c, const FieldEntry* f, const Node* node,
                             const uint8_t** pp, const uint8_t* end) noexcept nogil:
    """A repeated scalar's packed values (wire type 2)."""
    cdef const uint8_t* p = pp[0]
    cdef int64_t n
    cdef int st = read_length(&p, end, &n)
    if st != OK:
        return st
    st = decode_packed(c, f, p, p + n, node.unknown)
    if st != OK:
        return st
    pp[0] = p + n
    return OK


cdef inline int sub_message(Ctx* c, int32_t node_id, const Node* node, const FieldEntry* f,
                            const uint8_t** pp, const uint8_t* end,
                            const uint8_t* field_start, int depth,
                            int64_t node_element) noexcept nogil:
    """A_MESSAGE / A_GROUP: a sub-message (or group) of element node_element of node_id,
    decoded as the element its repeated field opens, or as node_element. On failure its
    level is recorded (the inner ones recorded themselves) and the status returned. The
    field's number is read again from field_start where it is used (a group's end, errors),
    not passed: the common case, a message, needs none."""
    cdef const uint8_t* p = pp[0]
    cdef const FieldEntry* opened = NULL   # the entry whose element this field opened
    cdef int64_t el = node_element, n
    cdef int st = OK
    if f.n_clear > 0 and clear_siblings(c, f, node_id):
        st = AFTER_MOVED(c, f, node, node_element, field_start, p, end, depth)
    if st == OK and f.group >= 0:
        st = open_element(c, f.group)
        if st == OK:
            opened = f
            el = c.cur[f.group]
    if st == OK:
        st = enter_node(c, &c.nodes[f.child], el)
    if st == OK:
        if f.action == A_MESSAGE:
            st = read_length(&p, end, &n)
            if st == OK:
                st = decode_fields(c, f.child, p, p + n, 0, depth + 1, el)
                if st == OK:
                    pp[0] = p + n
                    return OK
                return record_level(c, node_id, number_at(field_start, end),
                                    element_index(c, f), st)
        else:
            st = decode_fields(c, f.child, p, end, number_at(field_start, end), depth + 1, el)
            if st == OK:
                pp[0] = c.resume
                return OK
            return record_level(c, node_id, number_at(field_start, end),
                                element_index(c, f), st)
    c.err_offset = (p if st == E_UNTERMINATED_GROUP else field_start) - c.record
    return record_level(c, node_id, number_at(field_start, end),
                        element_index(c, opened) if opened != NULL else -1, st)


# ---- closed enums and map entries (upb's unknown-field rules) ---------------------------

cdef inline int unknown_field(Ctx* c, const Node* node, const uint8_t* start,
                              const uint8_t* stop) noexcept nogil:
    """Field [start, stop) of `node` is an unknown field: kept in its message's unknown
    fields, or, the node being a map entry (unknown == -2), the entry is one upb does not
    insert (it keeps it whole as an unknown field of the parent, see rare_field). The one
    place this is decided: another field upb moves to the unknown fields (a string it does
    not validate, holding bytes Arrow's utf8 cannot) comes here too."""
    if node.unknown >= 0:
        return keep_unknown(c, node.unknown, start, stop)
    if node.unknown == -2:
        c.rejected = 1
    return OK


cdef inline bint enum_declared(const Ctx* c, int32_t set_index, int32_t v) noexcept nogil:
    cdef const EnumSet* es = &c.enum_sets[set_index]
    if 0 <= v < 64:
        return (es.small >> v) & 1
    cdef int32_t lo = es.first, hi = es.first + es.count - 1, mid
    while lo <= hi:
        mid = (lo + hi) >> 1
        if c.enum_values[mid] == v:
            return True
        if c.enum_values[mid] < v:
            lo = mid + 1
        else:
            hi = mid - 1
    return False


cdef int rare_field(Ctx* c, const Node* node, const FieldEntry* f, const uint8_t** pp,
                    const uint8_t* end, const uint8_t* field_start, int depth,
                    int64_t node_element) noexcept nogil:
    """A_ENUM: a closed enum's value, stored only when declared; an undeclared one is an
    unknown field, as it came (so no oneof sibling is unset and no element opened).
    A_MAP: a map entry, decoded as any repeated message; one its node found an unknown field
    in (c.rejected, see unknown_field) is taken out of the map again and, as upb keeps it,
    becomes an unknown field of the parent, whole. A_ANY: any_field (checked on the enum
    path, as maps are the frequent ones here). On an error, the element the field opened is
    open (and the error offset set where no inner level set it)."""
    cdef uint64_t v
    cdef int64_t n, el
    cdef int st, saved, rejected
    cdef uint32_t v32
    cdef uint8_t* dst
    cdef const uint8_t* p = pp[0]
    if f.action == A_MAP:
        el = node_element
        st = OK
        if f.group >= 0:
            st = open_element(c, f.group)
            el = c.cur[f.group]
        if st == OK:
            st = enter_node(c, &c.nodes[f.child], el)
        if st == OK:
            st = read_length(&p, end, &n)
        if st != OK:
            c.err_offset = field_start - c.record
            return st
        saved = c.rejected
        c.rejected = 0
        st = decode_fields(c, f.child, p, p + n, 0, depth + 1, el)
        rejected = c.rejected
        c.rejected = saved
        if st != OK:
            return st
        pp[0] = p + n
        if rejected:
            if f.group >= 0:
                st = cut_entry(c, f)
            if st == OK and node.unknown >= 0:
                st = keep_entry(c, node.unknown, f, p, p + n)
            if st != OK:
                c.err_offset = field_start - c.record
        return st
    if wa_unlikely(f.action == A_ANY):
        return ANY_FIELD(c, node, f, pp, end, field_start, depth, node_element)
    if p < end and p[0] < 0x80:   # (most enum values: one byte, no status to test)
        v = p[0]
        p += 1
    else:
        st = read_varint(&p, end, &v)
        if st != OK:
            if f.group >= 0 and open_element(c, f.group) != OK:
                return E_NO_MEMORY
            return st
    pp[0] = p
    if not enum_declared(c, f.aux, <int32_t>v):
        return unknown_field(c, node, field_start, p)
    if f.n_clear > 0 and clear_siblings(c, f, <int32_t>(node - c.nodes)):
        # A string sibling was moved to the unknown fields: this value follows it there
        # (as after_moved does; the value is read already).
        st = to_unknown(c, node, field_start, p)
        if st != OK:
            return st
    el = node_element
    if f.group >= 0:
        st = open_element(c, f.group)
        if st != OK:
            return st
        el = c.cur[f.group]
    if f.column >= 0:
        dst = value_slot_at(c, f.column, el, 4)
        if dst == NULL:
            return E_NO_MEMORY
        v32 = <uint32_t>v
        memcpy(dst, &v32, 4)
    return OK


# ---- Any with declared types (any_types) ------------------------------------------------

# An error inside a declared type's value names the type at the Any's level: field numbers
# stop below 2**29, so these never name a field (transcoder._render).
cdef enum:
    ANY_LEVEL = 1 << 29
ANY_TYPE_LEVEL = ANY_LEVEL


cdef int any_field(Ctx* c, const Node* node, const FieldEntry* f, const uint8_t** pp,
                   const uint8_t* end, const uint8_t* field_start, int depth,
                   int64_t node_element) noexcept nogil:
    """A_ANY: an Any decoded as any message (its type_url and value where the plan reads
    them), then its value decoded again by the declared type whose full name follows the
    last '/' of its type URL (as the runtime's Any.Unpack / Is match it), if any. On an
    error, the element the field opened is open (and the error offset set where no inner
    level set it)."""
    cdef const uint8_t* p = pp[0]
    cdef const uint8_t* body
    cdef const Node* any_node = &c.nodes[f.child]
    cdef int64_t n, el = node_element
    cdef int st = OK
    if f.n_clear > 0 and clear_siblings(c, f, <int32_t>(node - c.nodes)):
        st = AFTER_MOVED(c, f, node, node_element, field_start, p, end, depth)
        if st != OK:
            c.err_offset = field_start - c.record
            return st
    if f.group >= 0:
        st = open_element(c, f.group)
        el = c.cur[f.group]
    elif any_node.presence >= 0 and present(c, any_node.presence, el):
        # A second occurrence merges into the first: the runtime unpacks the last type URL
        # and the last value of the two, which may come from either (documented refusal).
        st = E_ANY_TWICE
    if st == OK:
        st = enter_node(c, any_node, el)
    if st == OK:
        st = read_length(&p, end, &n)
    if st != OK:
        c.err_offset = field_start - c.record
        return st
    body = p
    st = decode_fields(c, f.child, body, body + n, 0, depth + 1, el)
    if st != OK:
        return st
    pp[0] = body + n
    return unpack_any(c, f, body, body + n, depth + 1, el)


cdef inline bint present(const Ctx* c, int32_t col, int64_t e) noexcept nogil:
    cdef const ColumnStore* cs = &c.cols[col]
    return e < cs.capacity and cs.valid[e] != 0


cdef int unpack_any(Ctx* c, const FieldEntry* f, const uint8_t* p, const uint8_t* end,
                    int depth, int64_t el) noexcept nogil:
    """Decode the value of the Any [p, end) (decoded already, so well formed) by the
    declared type its type URL names, as element `el` of that type's node."""
    cdef const uint8_t* url = NULL
    cdef const uint8_t* value = NULL
    cdef const uint8_t* name
    cdef int64_t url_len = 0, value_len = 0, n, k
    cdef uint64_t tag
    cdef int wt, st
    cdef int32_t t
    cdef const AnySpec* spec = &c.any_specs[f.aux]
    cdef const AnyType* at
    # The last type_url (1) and the last value (2), as a message's singular fields are read.
    while p < end:
        if read_tag(&p, end, &tag) != OK:
            return OK
        wt = tag & 7
        if wt == 2:
            if read_length(&p, end, &n) != OK:
                return OK
            if tag >> 3 == 1:
                url = p
                url_len = n
            elif tag >> 3 == 2:
                value = p
                value_len = n
            p += n
        elif wt == 3:
            skip_group_plain(&p, end, <uint32_t>(tag >> 3))
        elif wt == 0 or wt == 1 or wt == 5:
            if skip_plain(&p, end, wt) != OK:
                return OK
        else:
            return OK
    if url == NULL:
        return OK
    # The full name follows the last '/'; a URL without one names no type.
    k = url_len - 1
    while k >= 0 and url[k] != 47:   # '/'
        k -= 1
    if k < 0:
        return OK
    name = url + k + 1
    n = url_len - k - 1
    for t in range(spec.first, spec.first + spec.count):
        at = &c.any_types[t]
        if at.name_len != n or memcmp(c.any_names + at.name_at, name, n) != 0:
            continue
        st = enter_node(c, &c.nodes[at.node], el)
        if st == OK:
            if value == NULL:
                value = end   # no value: the type's empty message
            st = decode_fields(c, at.node, value, value + value_len, 0, depth + 1, el)
            if st != OK:
                return record_level(c, f.child, <uint32_t>(ANY_LEVEL + (t - spec.first)), -1, st)
        return st
    return OK


# Called through a pointer, as NOT_STORED below: kept out of rare_field (a map entry's and a
# closed enum's value), which would pay for its frame.
ctypedef int (*any_field_fn)(Ctx*, const Node*, const FieldEntry*, const uint8_t**,
                             const uint8_t*, const uint8_t*, int, int64_t) noexcept nogil
cdef any_field_fn ANY_FIELD = any_field


# How upb re-encodes an undeclared value of a packed closed enum as an unknown varint:
# protobuf 6 writes its low 32 bits (5 bytes for -5), protobuf 7 the int32 sign-extended
# to 64 bits (10 bytes). The plan compiler sets it from the installed runtime
# (set_packed_enum_sign_extends), as the oracle of what a record decodes to.
cdef bint packed_enum_sign_extends = 0


def set_packed_enum_sign_extends(bint on):
    global packed_enum_sign_extends
    packed_enum_sign_extends = on


cdef int decode_packed_enum(Ctx* c, const FieldEntry* f, const uint8_t* p,
                            const uint8_t* end, int32_t unknown) noexcept nogil:
    """Packed closed-enum values: each undeclared one becomes an unknown varint field of its
    own (tag, then the value's low 32 bits), as upb re-encodes it."""
    cdef uint64_t v
    cdef uint32_t v32
    cdef uint8_t buf[10]
    cdef int st, k
    cdef uint8_t* dst
    while p < end:
        st = read_varint(&p, end, &v)
        if st != OK:
            return st
        if not enum_declared(c, f.aux, <int32_t>v):
            if unknown >= 0:
                k = put_varint(buf, <uint64_t>f.number << 3)
                if packed_enum_sign_extends:
                    k += put_varint(buf + k, <uint64_t><int64_t><int32_t>v)
                else:
                    k += put_varint(buf + k, <uint32_t>v)
                st = keep_unknown(c, unknown, buf, buf + k)
                if st != OK:
                    return st
            continue
        if f.group >= 0:
            st = open_element(c, f.group)
            if st != OK:
                return st
        if f.column >= 0:
            dst = value_slot(c, f.column, 4)
            if dst == NULL:
                return E_NO_MEMORY
            v32 = <uint32_t>v
            memcpy(dst, &v32, 4)
    return OK


cdef int skip_plain(const uint8_t** pp, const uint8_t* end, int wt) noexcept nogil:
    """Skip one value of wire type 0, 1, 2 or 5 (a key's or a value's)."""
    cdef int64_t n
    cdef int st
    if wt == 0:
        return skip_varint(pp, end)
    if wt == 1:
        return skip_fixed(pp, end, 8)
    if wt == 5:
        return skip_fixed(pp, end, 4)
    st = read_length(pp, end, &n)
    if st == OK:
        pp[0] += n
    return st


cdef int cut_entry(Ctx* c, const FieldEntry* f) noexcept nogil:
    """Take the map entry just decoded (the newest element of f.group) out again, with
    everything stored under it: the groups below are cut back to their elements before it
    (a group's elements are in the order of their parents, so those are a suffix)."""
    cdef int64_t* counts = <int64_t*>PyMem_RawMalloc(c.n_groups * sizeof(int64_t))
    cdef uint8_t* below = <uint8_t*>PyMem_RawCalloc(c.n_groups, 1)
    cdef int32_t g, pg
    cdef int64_t k
    cdef GroupStore* gs
    if counts == NULL or below == NULL:
        PyMem_RawFree(counts)
        PyMem_RawFree(below)
        return E_NO_MEMORY
    for g in range(c.n_groups):
        counts[g] = c.groups[g].count
    counts[f.group] = c.cur[f.group]
    below[f.group] = 1
    for g in range(f.group + 1, c.n_groups):   # (parents precede their children)
        gs = &c.groups[g]
        pg = gs.parent_group
        if below[pg]:
            below[g] = 1
            k = gs.count
            while k > 0 and gs.parent[k - 1] >= counts[pg]:
                k -= 1
            counts[g] = k
    rollback(c, counts)
    PyMem_RawFree(counts)
    PyMem_RawFree(below)
    return OK


cdef int entry_value(const MapSpec* ms, int form, const uint8_t* p, const uint8_t* end,
                     uint64_t* v) noexcept nogil:
    """The value at p (a key's or value's) as upb holds it, for writing it back."""
    cdef const uint8_t* q = p
    if form == R_FIXED32 or form == R_FIXED64 or form >= R_BYTES:
        return OK
    if read_varint(&q, end, v) != OK:
        return E_INTERNAL
    if form == R_INT32:
        v[0] = <uint64_t><int64_t><int32_t><uint32_t>v[0]
    elif form == R_UINT32:
        v[0] = <uint32_t>v[0]
    elif form == R_BOOL:
        v[0] = v[0] != 0
    return OK


cdef int64_t put_entry_field(uint8_t* d, int number, int wt, int form, bint implicit,
                             const uint8_t* p, const uint8_t* end,
                             const uint8_t* body_start, const uint8_t* body_end,
                             int64_t total) noexcept nogil:
    """Write field `number` (found at p, its value's first byte) as upb writes it back;
    d == NULL: only measure. R_MESSAGE: every occurrence's bytes (body_start..body_end, the
    entry), `total` of them in all. Returns the bytes written, 0 when nothing is."""
    cdef uint64_t v = 0
    cdef int64_t n = 0, k = 0, len_
    cdef const uint8_t* q = p
    cdef uint64_t tag
    cdef int width
    cdef uint8_t buf[20]
    cdef const uint8_t* s
    if form == R_MESSAGE:
        k = put_varint(buf, <uint64_t>number << 3 | 2)
        k += put_varint(buf + k, total)
        if d != NULL:
            memcpy(d, buf, k)
            # the occurrences, in wire order
            q = body_start
            n = k
            while q < body_end:
                read_tag(&q, body_end, &tag)
                if tag >> 3 == <uint64_t>number and (tag & 7) == 2:
                    read_length(&q, body_end, &len_)
                    memcpy(d + n, q, len_)
                    n += len_
                    q += len_
                elif (tag & 7) == 3:
                    skip_group_plain(&q, body_end, <uint32_t>(tag >> 3))
                else:
                    skip_plain(&q, body_end, tag & 7)
        return k + total
    if form == R_BYTES:
        read_length(&q, end, &len_)
        if implicit and len_ == 0:
            return 0
        k = put_varint(buf, <uint64_t>number << 3 | 2)
        k += put_varint(buf + k, len_)
        if d != NULL:
            memcpy(d, buf, k)
            memcpy(d + k, q, len_)
        return k + len_
    if form == R_FIXED32 or form == R_FIXED64:
        width = 4 if form == R_FIXED32 else 8
        memcpy(&v, q, width)
        if implicit and v == 0:
            return 0
        k = put_varint(buf, <uint64_t>number << 3 | wt)
        memcpy(buf + k, q, width)
        k += width
    else:
        entry_value(NULL, form, q, end, &v)
        if implicit and v == 0:
            return 0
        k = put_varint(buf, <uint64_t>number << 3)
        k += put_varint(buf + k, v)
    if d != NULL:
        memcpy(d, buf, k)
    return k


cdef int skip_group_plain(const uint8_t** pp, const uint8_t* end, uint32_t number) noexcept nogil:
    """Skip a group already checked (the entry was decoded) up to its end-group tag."""
    cdef uint64_t tag
    while pp[0] < end:
        read_tag(pp, end, &tag)
        if (tag & 7) == 4:
            return OK
        if (tag & 7) == 3:
            skip_group_plain(pp, end, <uint32_t>(tag >> 3))
        else:
            skip_plain(pp, end, tag & 7)
    return OK


cdef int keep_entry(Ctx* c, int32_t col, const FieldEntry* f, const uint8_t* p,
                    const uint8_t* end) noexcept nogil:
    """Append a map entry (bytes [p, end), already checked) to the parent's unknown
    fields as upb writes it: the key's and the value's last occurrences (a message value:
    all of them, which merge; a closed enum: the last declared one), each under its
    canonical tag and not at all when implicit presence makes it zero, then the entry's
    unknown fields as they came, all in one length-delimited field."""
    cdef const MapSpec* ms = &c.map_specs[f.aux]
    cdef const uint8_t* q = p
    cdef const uint8_t* start
    cdef const uint8_t* key = NULL
    cdef const uint8_t* value = NULL
    cdef const uint8_t* at
    cdef int64_t msg_total = 0, unknown_total = 0, n, len_, body, k
    cdef uint64_t tag, v
    cdef uint32_t fn
    cdef int wt, st
    cdef uint8_t* buf
    cdef uint8_t* d
    # Pass 1: where the key and value are, what the rest weighs.
    while q < end:
        start = q
        read_tag(&q, end, &tag)
        fn = <uint32_t>(tag >> 3)
        wt = tag & 7
        if fn == 1 and wt == ms.key_wire_type:
            key = q
            skip_plain(&q, end, wt)
        elif fn == 2 and wt == ms.value_wire_type:
            if ms.value_form == R_MESSAGE:
                read_length(&q, end, &len_)
                msg_total += len_
                value = q
                q += len_
            elif ms.value_enum >= 0:
                at = q
                read_varint(&q, end, &v)
                if enum_declared(c, ms.value_enum, <int32_t>v):
                    value = at
                else:
                    unknown_total += q - start
            else:
                value = q
                skip_plain(&q, end, wt)
        else:
            if wt == 3:
                skip_group_plain(&q, end, fn)
            else:
                skip_plain(&q, end, wt)
            unknown_total += q - start
    body = unknown_total
    if key != NULL:
        body += put_entry_field(NULL, 1, ms.key_wire_type, ms.key_form, ms.key_implicit,
                                key, end, p, end, 0)
    if value != NULL:
        body += put_entry_field(NULL, 2, ms.value_wire_type, ms.value_form, ms.value_implicit,
                                value, end, p, end, msg_total)
    buf = <uint8_t*>PyMem_RawMalloc(body + 20)
    if buf == NULL:
        return E_NO_MEMORY
    d = buf
    d += put_varint(d, <uint64_t>f.number << 3 | 2)
    d += put_varint(d, body)
    if key != NULL:
        d += put_entry_field(d, 1, ms.key_wire_type, ms.key_form, ms.key_implicit,
                             key, end, p, end, 0)
    if value != NULL:
        d += put_entry_field(d, 2, ms.value_wire_type, ms.value_form, ms.value_implicit,
                             value, end, p, end, msg_total)
    # Pass 2: the unknown fields, in wire order.
    q = p
    while q < end:
        start = q
        read_tag(&q, end, &tag)
        fn = <uint32_t>(tag >> 3)
        wt = tag & 7
        if fn == 1 and wt == ms.key_wire_type:
            skip_plain(&q, end, wt)
        elif fn == 2 and wt == ms.value_wire_type:
            if ms.value_enum >= 0:
                read_varint(&q, end, &v)
                if not enum_declared(c, ms.value_enum, <int32_t>v):
                    memcpy(d, start, q - start)
                    d += q - start
            else:
                skip_plain(&q, end, wt)
        else:
            if wt == 3:
                skip_group_plain(&q, end, fn)
            else:
                skip_plain(&q, end, wt)
            memcpy(d, start, q - start)
            d += q - start
    st = keep_unknown(c, col, buf, d)
    PyMem_RawFree(buf)
    return st


cdef inline int check_tag(uint32_t fn, int wt, uint32_t end_group) noexcept nogil:
    """The tag rules a field entry does not already settle."""
    if fn == 0:
        return E_FIELD_ZERO
    if wt == 4:
        if fn == end_group and end_group != 0:
            return END_OF_GROUP
        return E_END_GROUP_MISMATCH if end_group != 0 else E_STRAY_END_GROUP
    if wt > 5:
        return E_WIRE_TYPE_RESERVED
    return OK


cdef int record_level(Ctx* c, int32_t node_id, uint32_t fn, int64_t index, int st) noexcept nogil:
    if c.err_depth < MAX_STACK:
        c.stack_node[c.err_depth] = node_id
        c.stack_field[c.err_depth] = fn
        c.stack_index[c.err_depth] = index
        c.err_depth += 1
    return st


cdef int64_t element_index(const Ctx* c, const FieldEntry* f) noexcept nogil:
    # Position of the current element among its siblings; only computed on errors.
    if f.group < 0:
        return -1
    cdef const GroupStore* gs = &c.groups[f.group]
    cdef int64_t e = c.cur[f.group]
    cdef int64_t k = e
    while k > 0 and gs.parent[k - 1] == gs.parent[e]:
        k -= 1
    return e - k


cdef inline void store_varint(uint8_t* dst, int act, uint64_t v) noexcept nogil:
    """Store a varint scalar of a stored action (A_VARINT32 .. A_ZIGZAG64) into its slot."""
    cdef uint32_t v32
    cdef int32_t z32
    cdef int64_t z64
    if act == A_VARINT32:
        v32 = <uint32_t>v
        memcpy(dst, &v32, 4)
    elif act == A_VARINT64:
        memcpy(dst, &v, 8)
    elif act == A_BOOL:
        dst[0] = v != 0
    elif act == A_ZIGZAG32:
        z32 = zigzag32(<uint32_t>v)
        memcpy(dst, &z32, 4)
    else:
        z64 = zigzag64(v)
        memcpy(dst, &z64, 8)


cdef int skip_value(int act, const uint8_t** pp, const uint8_t* end) noexcept nogil:
    """The actions without a column: read the value (checked) and drop it."""
    cdef int64_t n
    cdef int st
    if act == A_SKIP_VARINT:
        return skip_varint(pp, end)
    if act == A_SKIP_FIXED32:
        return skip_fixed(pp, end, 4)
    if act == A_SKIP_FIXED64:
        return skip_fixed(pp, end, 8)
    st = read_length(pp, end, &n)
    if st != OK:
        return st
    if act == A_CHECK_STRING and not utf8_valid(pp[0], n):
        return E_UTF8
    pp[0] += n
    return OK


cdef int64_t ARENA_MAX = (<int64_t>1 << 32) - 1  # offsets are uint32


cdef inline int store_string(Ctx* c, int32_t col, int64_t e, const uint8_t* s, int64_t n,
                             bint utf8) noexcept nogil:
    """A string or bytes value of element e: append it to the column's arena, now, while it
    is in cache, and end the element's offsets there (Arrow's layout, built as we go: no
    pass over the column afterwards). Short values are copied with fixed-size moves whose
    words also give the ASCII check for free; only a value with a high bit set is
    validated in full."""
    cdef ColumnStore* cs = &c.cols[col]
    cdef uint8_t* d
    cdef uint32_t* off
    cdef uint64_t a, b, x, y, acc = 0
    cdef int64_t k
    cdef int st
    # The common case is the next element (e == filled) with room: one test each. The
    # others leave the offsets closed up to e (filled == e) before the value is copied.
    if e >= cs.capacity and grow_column(c, cs, e) != OK:   # (filled <= capacity)
        return E_NO_MEMORY
    # (unlikely: laid out aside, GCC jumped out to a block and back on the common path)
    if wa_unlikely(e != cs.filled):
        off = <uint32_t*>cs.values
        if e < cs.filled:
            # e holds a value already (a field repeated on the wire, last one wins): as the
            # newest element, its value is the arena's tail, which is dropped.
            if e + 1 != cs.filled:
                return E_INTERNAL
            if c.col_moved[col] == e:
                return E_MOVED   # a value of this field was moved to the unknown fields
            cs.arena_len = off[e]
        else:
            k = cs.filled
            while k < e:      # elements in between have no value: empty (null by `valid`)
                k += 1
                off[k] = <uint32_t>cs.arena_len
        cs.filled = e
    if cs.arena_len + n > cs.arena_cap:
        st = arena_reserve(c, cs, n)
        if st != OK:
            return E_UTF8 if utf8 and not utf8_valid(s, n) else st
    d = cs.arena + cs.arena_len
    # Size classes shortest first (copy_short: under 16 bytes, most string values).
    if n < 16:
        acc = copy_short(d, s, n)
    elif n <= 32:
        memcpy(&a, s, 8)
        memcpy(&b, s + 8, 8)
        memcpy(&x, s + n - 16, 8)
        memcpy(&y, s + n - 8, 8)
        memcpy(d, &a, 8)
        memcpy(d + 8, &b, 8)
        memcpy(d + n - 16, &x, 8)
        memcpy(d + n - 8, &y, 8)
        acc = a | b | x | y
    elif n <= 64:
        # (ids and UUIDs: a library call and a validation loop each, otherwise)
        memcpy(&a, s, 8)
        memcpy(&b, s + 8, 8)
        memcpy(&x, s + 16, 8)
        memcpy(&y, s + 24, 8)
        memcpy(d, &a, 8)
        memcpy(d + 8, &b, 8)
        memcpy(d + 16, &x, 8)
        memcpy(d + 24, &y, 8)
        acc = a | b | x | y
        memcpy(&a, s + n - 32, 8)
        memcpy(&b, s + n - 24, 8)
        memcpy(&x, s + n - 16, 8)
        memcpy(&y, s + n - 8, 8)
        memcpy(d + n - 32, &a, 8)
        memcpy(d + n - 24, &b, 8)
        memcpy(d + n - 16, &x, 8)
        memcpy(d + n - 8, &y, 8)
        acc |= a | b | x | y
    else:
        if utf8 and not utf8_valid(s, n):
            return E_UTF8
        memcpy(d, s, n)   # (acc stays 0: checked above)
    # Short values: their words' high bits gave the ASCII check; only a value with one set
    # is validated in full.
    if utf8 and (acc & 0x8080808080808080ULL) and not utf8_valid_full(s, n):
        return E_UTF8
    off = <uint32_t*>cs.values
    cs.valid[e] = 1
    cs.arena_len += n
    off[e + 1] = <uint32_t>cs.arena_len
    cs.filled = e + 1
    return OK


cdef int not_stored(Ctx* c, const FieldEntry* f, const Node* node, int64_t e,
                    int64_t message, const uint8_t* field_start, const uint8_t* s,
                    int64_t n, int st) noexcept nogil:
    """F_UTF8_OR_UNKNOWN: a string the schema does not validate, read into a utf8 column
    of element e (`message`: the element of the message holding the field), which
    store_string did not store (status st). Not UTF-8, the value cannot be in the column,
    and upb accepts it: it is moved to the message's unknown fields (dropped without them),
    tag and bytes as they came, and counted. So that replaying the unknown fields after the
    known ones (encode, parsed by the runtime) gives the message back, a repeated field's
    later values in the same message follow the moved one, and a later value of a singular
    field is stored and also copied after it.

    Valid strings pay nothing for this: store_string sends E_MOVED here only for a column
    marked by move_string (a singular element's mark; a repeated column's poisoned arena).
    """
    cdef ColumnStore* cs = &c.cols[f.column]
    if st == E_UTF8:
        return move_string(c, f, node, e, message, field_start, s + n)
    if st != E_MOVED:
        return st
    if f.group >= 0:
        if c.col_moved[f.column] == message:   # a later value of the list that had one moved
            return move_string(c, f, node, e, message, field_start, s + n)
        unpoison(cs)              # another message: stored as usual
        st = store_string(c, f.column, e, s, n, True)
        if st == E_UTF8:
            return move_string(c, f, node, e, message, field_start, s + n)
        return st
    # An earlier value of this singular field was moved: this one replaces what the
    # element holds (the mark, or a value copied after the moved one), and goes after it.
    cs.filled = e
    cs.arena_len = (<uint32_t*>cs.values)[e]
    st = store_string(c, f.column, e, s, n, True)
    if st == E_UTF8:
        return move_string(c, f, node, e, message, field_start, s + n)
    if st == OK:
        st = to_unknown(c, node, field_start, s + n)
    return st


cdef int after_moved(Ctx* c, const FieldEntry* f, const Node* node, int64_t e,
                     const uint8_t* field_start, const uint8_t* p, const uint8_t* end,
                     int depth) noexcept nogil:
    """A oneof member after another member of this message was moved to the unknown fields
    (clear_siblings): it is copied there too; a string member does it itself, as if it had
    moved before."""
    cdef const uint8_t* q = p
    cdef int st
    if f.flags & F_UTF8_OR_UNKNOWN and (f.action & ~A_PRE) == A_STRING:
        return mark_moved(c, f.column, e)
    if node.unknown < 0:
        return OK
    st = skip_field(c, &q, end, f.number, f.wire_type, depth)
    if st != OK:
        return st
    return to_unknown(c, node, field_start, q)


# Called through pointers, so that the compiler keeps these (cold, and not_stored holds two
# more copies of store_string) out of decode_fields, whose loop would pay in registers.
ctypedef int (*not_stored_fn)(Ctx*, const FieldEntry*, const Node*, int64_t, int64_t,
                              const uint8_t*, const uint8_t*, int64_t, int) noexcept nogil
ctypedef int (*after_moved_fn)(Ctx*, const FieldEntry*, const Node*, int64_t, const uint8_t*,
                               const uint8_t*, const uint8_t*, int) noexcept nogil
cdef not_stored_fn NOT_STORED = not_stored
cdef after_moved_fn AFTER_MOVED = after_moved


cdef inline void unpoison(ColumnStore* cs) noexcept nogil:
    cdef int64_t cap = cs.arena_alloc
    cs.arena_cap = cap if cap < ARENA_MAX else ARENA_MAX


cdef int move_string(Ctx* c, const FieldEntry* f, const Node* node, int64_t e,
                     int64_t message, const uint8_t* field_start,
                     const uint8_t* stop) noexcept nogil:
    """Move the field [field_start, stop) of element e to the unknown fields (see
    not_stored). A repeated field gives back the element its value opened and marks
    the message (Ctx.col_moved); a singular field's element is left null but filled
    (an empty value, valid 0): the mark store_string and clear_siblings see."""
    cdef ColumnStore* cs = &c.cols[f.column]
    cdef GroupStore* gs
    touch(c, cs)
    if f.group >= 0:
        gs = &c.groups[f.group]
        gs.count -= 1   # the newest element: nothing else was written into it
        c.cur[f.group] = gs.count - 1
        c.col_moved[f.column] = message
        # Poisoned: every later store_string into this column reserves arena room, which
        # answers E_MOVED, so not_stored sees the list's later values (unpoison: stored).
        cs.arena_cap = -1
    elif mark_moved(c, f.column, e) != OK:
        return E_NO_MEMORY
    c.moved += 1
    return to_unknown(c, node, field_start, stop)


cdef inline int to_unknown(Ctx* c, const Node* node, const uint8_t* start,
                           const uint8_t* stop) noexcept nogil:
    """Field [start, stop) of `node`, a string moved (or a value copied after one), goes to
    the message's unknown fields, if they are kept. In a map entry (upb inserts it, key or
    value as they came, but a utf8 map column cannot hold it) unknown_field makes the
    whole entry an unknown field of the parent, written back by keep_entry."""
    return unknown_field(c, node, start, stop)


cdef int mark_moved(Ctx* c, int32_t col, int64_t e) noexcept nogil:
    """Mark singular element e as having had a value moved to the unknown fields: null,
    with an empty value in the offsets, so that another value for it takes store_string's
    path of a field repeated on the wire, which sees Ctx.col_moved."""
    cdef ColumnStore* cs = &c.cols[col]
    cdef uint32_t* off
    cdef int64_t k
    if e >= cs.capacity and grow_column(c, cs, e) != OK:
        return E_NO_MEMORY
    off = <uint32_t*>cs.values
    if cs.filled > e:   # (the newest element: its value is the arena's tail)
        cs.filled = e
        cs.arena_len = off[e]
    k = cs.filled
    while k < e:
        k += 1
        off[k] = <uint32_t>cs.arena_len
    off[e + 1] = <uint32_t>cs.arena_len
    cs.filled = e + 1
    cs.valid[e] = 0
    c.col_moved[col] = e
    return OK


cdef int merge_message_bytes(Ctx* c, int32_t col, int64_t e, const uint8_t* s,
                             int64_t n) noexcept nogil:
    """The raw bytes of a singular sub-message (kept whole: Struct / Value / ListValue, a
    level below max_depth) of element e. Sent twice, the message is the merge of both, as
    upb merges it; serialized messages concatenated parse as exactly that merge, so a
    second occurrence is appended to the first (which, the element being the newest, is
    the arena's tail) instead of replacing it."""
    cdef ColumnStore* cs = &c.cols[col]
    cdef int st
    if e >= cs.filled or not cs.valid[e]:
        return store_string(c, col, e, s, n, False)
    if e + 1 != cs.filled:
        return E_INTERNAL
    if n == 0:
        return OK   # nothing to add; and the arena may still be NULL (memcpy(NULL, s, 0) is UB)
    st = arena_reserve(c, cs, n)
    if st != OK:
        return st
    memcpy(cs.arena + cs.arena_len, s, n)
    cs.arena_len += n
    (<uint32_t*>cs.values)[e + 1] = <uint32_t>cs.arena_len
    return OK


cdef void close_offsets(ColumnStore* cs, int64_t count) noexcept nogil:
    """End the offsets of a bytes column at its group's count (capacity >= count)."""
    cdef uint32_t* off = <uint32_t*>cs.values
    while cs.filled < count:
        cs.filled += 1
        off[cs.filled] = <uint32_t>cs.arena_len


cdef int arena_reserve(Ctx* c, ColumnStore* cs, int64_t n) noexcept nogil:
    """Room for n more bytes at the end of the column's arena (it may move); the first
    block is the size learned from earlier batches (Ctx.arena_want), when it holds them."""
    cdef int64_t cap, want
    cdef uint8_t* grown
    if cs.arena_len + n <= cs.arena_cap:
        return OK
    if cs.arena_cap < 0:
        return E_MOVED   # poisoned by move_string
    touch(c, cs)
    want = (min(max(0, c.arena_want[cs - c.cols]), ARENA_MAX)
            if c.arena_want != NULL and cs.bytes else 0)
    if cs.arena == NULL and want >= n:
        cs.arena = take_block(c, want, False, &cs.arena_alloc,
                              buffer_id(cs - c.cols, K_ARENA))
        if cs.arena == NULL:
            return E_NO_MEMORY
        cs.arena_cap = min(cs.arena_alloc, ARENA_MAX)
        return OK
    cap = cs.arena_cap * 2 if cs.arena_cap >= 4096 else 4096
    while cap < cs.arena_len + n:
        cap *= 2
    if cap > ARENA_MAX:
        if cs.arena_len + n > ARENA_MAX:
            return E_TOO_LARGE
        cap = ARENA_MAX
    grown = grow_block(c, cs.arena, cs.arena_alloc, cs.arena_len, cap, &cs.arena_alloc,
                       buffer_id(cs - c.cols, K_ARENA))
    if grown == NULL:
        return E_NO_MEMORY
    cs.arena = grown
    cs.arena_cap = min(cs.arena_alloc, ARENA_MAX)
    return OK


cdef int keep_unknown(Ctx* c, int32_t col, const uint8_t* start,
                      const uint8_t* stop) noexcept nogil:
    """Append the raw bytes of one unknown field to its message's unknown-fields value.

    A message's unknown fields are concatenated in wire order, across merged occurrences
    too, as the runtime keeps them: the message is the newest element of its group, so
    what it holds already is the arena's tail, and the new bytes simply follow.
    """
    cdef ColumnStore* cs = &c.cols[col]
    cdef int64_t e = c.cur[cs.group]
    cdef int64_t n = stop - start
    cdef uint32_t* off
    cdef int64_t k
    cdef int st
    if e < cs.filled:
        if e + 1 != cs.filled:
            return E_INTERNAL
    elif e >= cs.capacity and grow_column(c, cs, e) != OK:
        return E_NO_MEMORY
    st = arena_reserve(c, cs, n)
    if st != OK:
        return st
    off = <uint32_t*>cs.values
    k = cs.filled
    while k < e:
        k += 1
        off[k] = <uint32_t>cs.arena_len
    memcpy(cs.arena + cs.arena_len, start, n)
    cs.valid[e] = 1
    cs.arena_len += n
    off[e + 1] = <uint32_t>cs.arena_len
    cs.filled = e + 1
    return OK


cdef int decode_packed(Ctx* c, const FieldEntry* f, const uint8_t* p,
                       const uint8_t* end, int32_t unknown) noexcept nogil:
    """Packed repeated scalars: one element per value, all inside one length prefix."""
    cdef int st
    cdef int act = f.action & ~A_PRE   # (a repeated scalar's action carries A_PRE)
    cdef int64_t width, k, first
    cdef uint64_t v
    cdef uint8_t* dst
    cdef ColumnStore* cs
    if act == A_FIXED32 or act == A_FIXED64 or act == A_SKIP_FIXED32 or act == A_SKIP_FIXED64:
        width = 4 if act == A_FIXED32 or act == A_SKIP_FIXED32 else 8
        if (end - p) % width:
            return E_PACKED_LENGTH
        k = (end - p) // width
        if f.group < 0 or k == 0:   # (a field only checked has no group)
            return OK
        # Fixed width: open the k elements at once and copy the values in one go.
        st = open_elements(c, f.group, k)
        if st != OK:
            return st
        if f.column < 0:
            return OK
        cs = &c.cols[f.column]
        first = c.cur[f.group] - k + 1
        if c.cur[f.group] >= cs.capacity and grow_column(c, cs, c.cur[f.group]) != OK:
            return E_NO_MEMORY
        memset(cs.valid + first, 1, k)
        memcpy(cs.values + first * width, p, k * width)
        return OK
    if act == A_ENUM:
        return decode_packed_enum(c, f, p, end, unknown)
    while p < end:
        if f.group >= 0:
            st = open_element(c, f.group)
            if st != OK:
                return st
        if act <= A_ZIGZAG64:
            st = read_varint(&p, end, &v)
            if st != OK:
                return st
            dst = slot(c, f.column)
            if dst == NULL:
                return E_NO_MEMORY
            store_varint(dst, act, v)
        else:
            # (packable entries are never bytes: this is a varint only checked)
            st = skip_value(act, &p, end)
            if st != OK:
                return st
    return OK


cdef int open_elements(Ctx* c, int32_t g, int64_t k) noexcept nogil:
    """open_element k times: k sibling elements, the last one current."""
    cdef GroupStore* gs = &c.groups[g]
    cdef int64_t i, parent_element
    if gs.count + k > gs.capacity and grow_group(c, gs, gs.count + k) != OK:
        return E_NO_MEMORY
    parent_element = c.cur[gs.parent_group]
    for i in range(gs.count, gs.count + k):
        gs.parent[i] = parent_element
    gs.count += k
    c.cur[g] = gs.count - 1
    return OK


# Python-visible names of the table enums, for the plan compiler.
KIND = {
    "varint32": K_VARINT32, "varint64": K_VARINT64, "bool": K_BOOL, "zigzag32": K_ZIGZAG32,
    "zigzag64": K_ZIGZAG64, "fixed32": K_FIXED32, "fixed64": K_FIXED64, "bytes": K_BYTES,
    "message": K_MESSAGE, "group": K_GROUP, "any": K_ANY,
}
FLAG = {
    "repeated": F_REPEATED, "packable": F_PACKABLE, "utf8": F_UTF8, "lenient": F_LENIENT,
    "merge": F_MERGE, "utf8_or_unknown": F_UTF8_OR_UNKNOWN, "closed": F_CLOSED, "map": F_MAP,
}
FORM = {
    "int32": R_INT32, "uint32": R_UINT32, "int64": R_INT64, "bool": R_BOOL, "fixed32": R_FIXED32,
    "fixed64": R_FIXED64, "bytes": R_BYTES, "message": R_MESSAGE,
}
