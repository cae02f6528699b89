# cython: freethreading_compatible = True
"""The table-driven protobuf wire encoder: Arrow buffers -> serialized messages.

One call encodes a whole batch with the GIL released into one buffer, as upb does: the
buffer is written **backwards**, from its end towards its start, so that when a
sub-message's bytes are complete its length is known and is written just before them; no
size pass, no backpatching. Rows, fields (by descending field number), repeated elements and
map entries are therefore visited in reverse, and land in forward order.

Tables (built by wirearrow.plan.encoding, passed as int64 matrices whose columns are the
fields of layout.EncodeColumn, EncodeEntry and EncodeNode, in that order; loaded into the
structs of tables.pxd, which `tables` hands back as those records):
- cols: one row per Arrow array. Element `k` of an array (its *logical* index, what
  parents' offsets hold) lives at physical slot `k + offset`; the bad mask and the
  permutation are indexed by the logical index.
- entries: one row per field of a message node, ascending field number.
- nodes: one per message shape. Node 0 is the root; its columns are the batch's.

Invariants: the caller keeps every addressed buffer alive and sized as Arrow says (the
plan checked each array's type); offsets of a list column index into its element column.
Space is reserved before every write (`reserve`), so writes below `ptr` never cross `buf`.
The host is little-endian, as Arrow's buffers and protobuf's fixed-width values are.
"""
from cpython.mem cimport PyMem_RawFree, PyMem_RawMalloc
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t, uintptr_t
from libc.string cimport memcmp, memcpy

import numpy as np

from wirearrow._core.buffers cimport (
    MAX_LINES, Lines, OwnedBuffer, add_lines, pool_alloc, pool_free, wa_hugepages,
)
from wirearrow._core.tables cimport (
    P_ALWAYS, P_EXPLICIT, P_IMPLICIT, S_PACKED, S_REPEATED, S_SINGULAR, V_BOOL, V_BYTES,
    V_FIXED32, V_FIXED64, V_GROUP, V_INT32, V_INT64, V_MESSAGE, V_RAW_GROUP, V_SINT32, V_SINT64,
    V_UINT32, V_UNKNOWN, ArrowColumn, EncodeEntry, EncodeNode,
)
from wirearrow._core.wire cimport varint_size, zigzag32_of, zigzag64_of

from wirearrow._core import layout


cdef extern from *:
    void __builtin_prefetch(const void* addr) nogil


KIND = {
    "int32": V_INT32, "uint32": V_UINT32, "int64": V_INT64, "sint32": V_SINT32,
    "sint64": V_SINT64, "fixed32": V_FIXED32, "fixed64": V_FIXED64, "bool": V_BOOL,
    "bytes": V_BYTES, "message": V_MESSAGE, "group": V_GROUP, "raw_group": V_RAW_GROUP,
    "unknown": V_UNKNOWN,
}

SHAPE = {"singular": S_SINGULAR, "repeated": S_REPEATED, "packed": S_PACKED}

PRESENCE = {"explicit": P_EXPLICIT, "implicit": P_IMPLICIT, "always": P_ALWAYS}

cdef enum Status:
    OK = 0
    E_NULL_ELEMENT = 1
    E_NULL_ENTRY = 2
    E_BAD_VALUE = 3
    E_ONEOF = 4
    E_NO_MEMORY = 5
    E_TOO_LARGE = 6

STATUS_TEXT = {
    E_NULL_ELEMENT: "null element in a repeated field (protobuf lists cannot hold nulls)",
    E_NULL_ENTRY: "null map key or value (protobuf map entries cannot hold nulls)",
    E_BAD_VALUE: "value cannot be encoded",
    E_ONEOF: "more than one member of a oneof is set",
    E_NO_MEMORY: "out of memory",
    E_TOO_LARGE: "a serialized message would exceed 2 GiB",
}

COL_WIDTH = len(layout.EncodeColumn._fields)
ENTRY_WIDTH = len(layout.EncodeEntry._fields)
NODE_WIDTH = len(layout.EncodeNode._fields)

# Where each field sits in a row of the matrices: taken from the layout by name, once.
cdef Py_ssize_t C_VALIDITY = layout.position(layout.EncodeColumn, "validity")
cdef Py_ssize_t C_OFFSET = layout.position(layout.EncodeColumn, "offset")
cdef Py_ssize_t C_VALUES = layout.position(layout.EncodeColumn, "values")
cdef Py_ssize_t C_OFFSETS = layout.position(layout.EncodeColumn, "offsets")
cdef Py_ssize_t C_WIDE = layout.position(layout.EncodeColumn, "wide")
cdef Py_ssize_t C_BAD = layout.position(layout.EncodeColumn, "bad")
cdef Py_ssize_t C_PERM = layout.position(layout.EncodeColumn, "perm")
cdef Py_ssize_t EN_TAG = layout.position(layout.EncodeEntry, "tag")
cdef Py_ssize_t EN_END_TAG = layout.position(layout.EncodeEntry, "end_tag")
cdef Py_ssize_t EN_KIND = layout.position(layout.EncodeEntry, "kind")
cdef Py_ssize_t EN_SHAPE = layout.position(layout.EncodeEntry, "shape")
cdef Py_ssize_t EN_PRESENCE = layout.position(layout.EncodeEntry, "presence")
cdef Py_ssize_t EN_COL = layout.position(layout.EncodeEntry, "col")
cdef Py_ssize_t EN_ELEM = layout.position(layout.EncodeEntry, "elem")
cdef Py_ssize_t EN_CHILD = layout.position(layout.EncodeEntry, "child")
cdef Py_ssize_t EN_ONEOF = layout.position(layout.EncodeEntry, "oneof")
cdef Py_ssize_t N_FIRST = layout.position(layout.EncodeNode, "first")
cdef Py_ssize_t N_ENTRIES = layout.position(layout.EncodeNode, "n_entries")


ctypedef struct Enc:
    uint8_t* buf
    uint8_t* ptr               # next byte is written at ptr - 1
    uint8_t* limit             # end of the buffer: the output is [ptr, limit)
    int64_t allocated          # bytes behind buf (given back to the pool with it)
    const ArrowColumn* cols
    const EncodeEntry* entries
    const EncodeNode* nodes
    int32_t err_col
    int64_t err_index


cdef int grow(Enc* e, size_t n) noexcept nogil:
    """Move the written bytes to the end of a buffer with room for n more below them."""
    cdef size_t used = e.limit - e.ptr
    cdef size_t cap = e.limit - e.buf
    cdef size_t new_cap = cap * 2 if cap > 0 else 4096
    while new_cap < used + n:
        new_cap *= 2
    cdef int64_t allocated
    # The pool's blocks were written before (no page faults); a fresh one is written back
    # to front, every page, so it asks for huge pages (see buffers.pxd).
    cdef uint8_t* grown = pool_alloc(new_cap, False, &allocated)
    if grown == NULL:
        return E_NO_MEMORY
    if new_cap >= (<size_t>4 << 20):
        wa_hugepages(grown, new_cap)
    new_cap = <size_t>allocated
    if used:
        memcpy(grown + new_cap - used, e.ptr, used)
    pool_free(e.buf, e.allocated)
    e.buf = grown
    e.allocated = allocated
    e.limit = grown + new_cap
    e.ptr = e.limit - used
    return OK


cdef inline int reserve(Enc* e, size_t n) noexcept nogil:
    if <size_t>(e.ptr - e.buf) >= n:
        return OK
    return grow(e, n)


cdef inline void put_varint(Enc* e, uint64_t v) noexcept nogil:
    """Base-128 varint, low group first, continuation bit on all but the last byte."""
    cdef uint8_t* p
    if v < 0x80:
        e.ptr -= 1
        e.ptr[0] = <uint8_t>v
        return
    e.ptr -= varint_size(v)
    p = e.ptr
    while v >= 0x80:
        p[0] = <uint8_t>(v | 0x80)
        p += 1
        v >>= 7
    p[0] = <uint8_t>v


cdef inline void copy_bytes(uint8_t* dst, const uint8_t* src, size_t n) noexcept nogil:
    # Most strings of a message are short (ids, codes, names): fixed-size copies compile to
    # a load and a store each, where a memcpy call costs more than the bytes it moves.
    if n > 16:
        memcpy(dst, src, n)
    elif n >= 8:
        memcpy(dst, src, 8)
        memcpy(dst + n - 8, src + n - 8, 8)
    elif n >= 4:
        memcpy(dst, src, 4)
        memcpy(dst + n - 4, src + n - 4, 4)
    else:
        while n:
            n -= 1
            dst[n] = src[n]


cdef inline bint is_set(const uint8_t* bitmap, int64_t i) noexcept nogil:
    return (bitmap[i >> 3] >> (i & 7)) & 1


cdef inline bint is_null(const ArrowColumn* c, int64_t p) noexcept nogil:
    return c.validity != NULL and not is_set(c.validity, p)


cdef inline int64_t offset_in(const uint8_t* offsets, bint wide, int64_t p) noexcept nogil:
    """Entry p of an Arrow offsets buffer (int64 when wide, else int32)."""
    if wide:
        return (<const int64_t*>offsets)[p]
    return (<const int32_t*>offsets)[p]


cdef inline int64_t offset_at(const ArrowColumn* c, int64_t p) noexcept nogil:
    return offset_in(c.offsets, c.wide, p)


cdef inline void span(const ArrowColumn* c, int64_t p, int64_t* lo, int64_t* hi) noexcept nogil:
    lo[0] = offset_at(c, p)
    hi[0] = offset_at(c, p + 1)


cdef inline bint is_zero(const ArrowColumn* c, int32_t kind, int64_t p) noexcept nogil:
    """Whether slot p holds the default of an implicit-presence field (bits, not value)."""
    cdef int64_t lo, hi
    if kind == V_INT32 or kind == V_UINT32 or kind == V_SINT32 or kind == V_FIXED32:
        return (<const uint32_t*>c.values)[p] == 0
    if kind == V_INT64 or kind == V_SINT64 or kind == V_FIXED64:
        return (<const uint64_t*>c.values)[p] == 0
    if kind == V_BOOL:
        return not is_set(c.values, p)
    span(c, p, &lo, &hi)
    return hi == lo


cdef int put_value(Enc* e, const ArrowColumn* c, int32_t kind, int64_t p) noexcept nogil:
    """Write the value of slot p without its tag."""
    cdef int64_t lo, hi, v
    cdef size_t n
    if reserve(e, 10):
        return E_NO_MEMORY
    if kind == V_INT32:
        put_varint(e, <uint64_t><int64_t>(<const int32_t*>c.values)[p])
    elif kind == V_UINT32:
        put_varint(e, (<const uint32_t*>c.values)[p])
    elif kind == V_INT64:
        put_varint(e, (<const uint64_t*>c.values)[p])
    elif kind == V_SINT32:
        put_varint(e, zigzag32_of((<const int32_t*>c.values)[p]))
    elif kind == V_SINT64:
        put_varint(e, zigzag64_of((<const int64_t*>c.values)[p]))
    elif kind == V_FIXED32:
        e.ptr -= 4
        memcpy(e.ptr, c.values + 4 * p, 4)
    elif kind == V_FIXED64:
        e.ptr -= 8
        memcpy(e.ptr, c.values + 8 * p, 8)
    elif kind == V_BOOL:
        put_varint(e, is_set(c.values, p))
    else:  # V_BYTES, V_UNKNOWN, V_RAW_GROUP: a binary slot
        span(c, p, &lo, &hi)
        n = <size_t>(hi - lo)
        if reserve(e, n + 10):
            return E_NO_MEMORY
        e.ptr -= n
        copy_bytes(e.ptr, c.values + lo, n)
        if kind == V_BYTES:
            put_varint(e, n)
    return OK


cdef inline int put_tag(Enc* e, uint64_t tag) noexcept nogil:
    if reserve(e, 10):
        return E_NO_MEMORY
    put_varint(e, tag)
    return OK


cdef int put_delimited(Enc* e, size_t used_before, uint64_t tag) noexcept nogil:
    """Length prefix and tag of the bytes written since `used_before`."""
    cdef size_t n = <size_t>(e.limit - e.ptr) - used_before
    if n > 0x7FFFFFFF:
        return E_TOO_LARGE
    if reserve(e, 20):
        return E_NO_MEMORY
    put_varint(e, n)
    put_varint(e, tag)
    return OK


cdef int fail(Enc* e, int status, int32_t col, int64_t index) noexcept nogil:
    e.err_col = col
    e.err_index = index
    return status


cdef int put_record(Enc* e, const EncodeEntry* en, const ArrowColumn* c, int64_t k) noexcept nogil:
    """One tagged value of field `en`: element k (logical) of array c."""
    cdef int status
    cdef size_t before
    cdef int32_t kind = en.kind
    if kind == V_MESSAGE:
        before = e.limit - e.ptr
        status = encode_message(e, en.child, k)
        if status:
            return status
        return put_delimited(e, before, en.tag)
    if kind == V_GROUP or kind == V_RAW_GROUP:
        status = put_tag(e, en.end_tag)
        if status:
            return status
        if kind == V_GROUP:
            status = encode_message(e, en.child, k)
        else:
            status = put_value(e, c, kind, k + c.offset)
        if status:
            return status
        return put_tag(e, en.tag)
    status = put_value(e, c, kind, k + c.offset)
    if status or kind == V_UNKNOWN:
        return status
    return put_tag(e, en.tag)


cdef int put_repeated(Enc* e, const EncodeEntry* en, const ArrowColumn* c, int64_t p) noexcept nogil:
    cdef int64_t lo, hi, j, k
    cdef int status
    cdef size_t before
    cdef const ArrowColumn* ec = &e.cols[en.elem]
    span(c, p, &lo, &hi)
    if lo == hi:
        return OK
    if en.shape == S_PACKED:
        before = e.limit - e.ptr
        j = hi
        while j > lo:
            j -= 1
            if is_null(ec, j + ec.offset):
                return fail(e, E_NULL_ELEMENT, en.elem, j)
            if ec.bad != NULL and ec.bad[j]:
                return fail(e, E_BAD_VALUE, en.elem, j)
            status = put_value(e, ec, en.kind, j + ec.offset)
            if status:
                return status
        return put_delimited(e, before, en.tag)
    j = hi
    while j > lo:
        j -= 1
        k = c.perm[j] if c.perm != NULL else j
        if is_null(ec, k + ec.offset):
            return fail(e, E_NULL_ELEMENT, en.elem, k)
        if ec.bad != NULL and ec.bad[k]:
            return fail(e, E_BAD_VALUE, en.elem, k)
        status = put_record(e, en, ec, k)
        if status:
            return status
    return OK


cdef int encode_message(Enc* e, int32_t node, int64_t k) noexcept nogil:
    """Message k (logical index of the node's arrays): fields last to first."""
    cdef const EncodeNode* nd = &e.nodes[node]
    cdef const EncodeEntry* en
    cdef const ArrowColumn* c
    cdef int32_t i = nd.first + nd.n_entries
    cdef int64_t p
    cdef uint64_t oneofs = 0, bit, v
    cdef int status
    cdef int32_t kind
    cdef int64_t lo
    cdef size_t n, before
    while i > nd.first:
        i -= 1
        en = &e.entries[i]
        c = &e.cols[en.col]
        p = k + c.offset
        if is_null(c, p):
            if en.presence == P_ALWAYS:
                return fail(e, E_NULL_ENTRY, en.col, k)
            continue
        if c.bad != NULL and c.bad[k]:
            return fail(e, E_BAD_VALUE, en.col, k)
        if en.shape == S_SINGULAR and en.oneof == 0:
            # The common singular kinds inline: one reserve for value, length and tag, the
            # zero test on the value already loaded.
            kind = en.kind
            if kind == V_BYTES and not c.wide:
                lo = (<const int32_t*>c.offsets)[p]
                n = <size_t>((<const int32_t*>c.offsets)[p + 1] - lo)
                if n == 0 and en.presence == P_IMPLICIT:
                    continue
                if reserve(e, n + 20):
                    return E_NO_MEMORY
                e.ptr -= n
                copy_bytes(e.ptr, c.values + lo, n)
                put_varint(e, n)
                put_varint(e, en.tag)
                continue
            if kind == V_INT32 or kind == V_INT64 or kind == V_UINT32:
                if kind == V_INT32:
                    v = <uint64_t><int64_t>(<const int32_t*>c.values)[p]
                elif kind == V_UINT32:
                    v = (<const uint32_t*>c.values)[p]
                else:
                    v = (<const uint64_t*>c.values)[p]
                if v == 0 and en.presence == P_IMPLICIT:
                    continue
                if reserve(e, 20):
                    return E_NO_MEMORY
                put_varint(e, v)
                put_varint(e, en.tag)
                continue
            if kind == V_MESSAGE:
                before = e.limit - e.ptr
                status = encode_message(e, en.child, k)
                if status:
                    return status
                status = put_delimited(e, before, en.tag)
                if status:
                    return status
                continue
        if en.shape != S_SINGULAR:
            status = put_repeated(e, en, c, p)
        else:
            if en.presence == P_IMPLICIT and is_zero(c, en.kind, p):
                continue
            if en.oneof:
                bit = (<uint64_t>1) << ((en.oneof - 1) & 63)
                if oneofs & bit:
                    return fail(e, E_ONEOF, en.col, k)
                oneofs |= bit
            status = put_record(e, en, c, k)
        if status:
            return status
    return OK


# ---- prefetching ----------------------------------------------------------------------
#
# A row reads one slot of each of its ~100 arrays (values, offsets, string bytes, bits):
# too many streams for the hardware prefetcher, so at 50k rows most new cache lines a row
# touches miss (the loads of values, string offsets and bytes were ~60% of the samples).
# Rows are encoded in blocks; while a block is written, the cache lines the next block
# will read (found through the list offsets, as the encoder will) are requested a few per
# row, so that the fetches overlap the work instead of being issued in one burst that the
# memory system would mostly drop.

cdef enum:
    BLOCK = 64          # rows a block


cdef void list_col(Lines* ls, const ArrowColumn* c, int32_t kind, int64_t a, int64_t b) noexcept nogil:
    """The lines of slots [a, b) (logical) of one array, as the encoder reads them."""
    cdef int64_t pa = a + c.offset, pb = b + c.offset
    cdef int64_t w = 8 if c.wide else 4
    if c.validity != NULL:
        add_lines(ls, c.validity, pa >> 3, (pb + 7) >> 3)
    if kind == V_INT32 or kind == V_UINT32 or kind == V_SINT32 or kind == V_FIXED32:
        add_lines(ls, c.values, pa * 4, pb * 4)
    elif kind == V_INT64 or kind == V_SINT64 or kind == V_FIXED64:
        add_lines(ls, c.values, pa * 8, pb * 8)
    elif kind == V_BOOL:
        add_lines(ls, c.values, pa >> 3, (pb + 7) >> 3)
    elif kind == V_BYTES or kind == V_UNKNOWN or kind == V_RAW_GROUP:
        add_lines(ls, c.offsets, pa * w, (pb + 1) * w)
        add_lines(ls, c.values, offset_at(c, pa), offset_at(c, pb))


cdef void list_node(Lines* ls, const Enc* e, int32_t node, int64_t a, int64_t b,
                    int depth) noexcept nogil:
    """The lines every array of `node` is read at for its messages [a, b)."""
    cdef const EncodeNode* nd = &e.nodes[node]
    cdef const EncodeEntry* en
    cdef const ArrowColumn* c
    cdef int32_t i
    cdef int64_t ea, eb, w
    if b <= a or depth > 16:
        return
    for i in range(nd.first, nd.first + nd.n_entries):
        en = &e.entries[i]
        c = &e.cols[en.col]
        if en.shape == S_SINGULAR:
            list_col(ls, c, en.kind, a, b)
            if en.kind == V_MESSAGE or en.kind == V_GROUP:
                list_node(ls, e, en.child, a, b, depth + 1)
            continue
        w = 8 if c.wide else 4
        if c.validity != NULL:
            add_lines(ls, c.validity, (a + c.offset) >> 3, (b + c.offset + 7) >> 3)
        add_lines(ls, c.offsets, (a + c.offset) * w, (b + c.offset + 1) * w)
        ea = offset_at(c, a + c.offset)
        eb = offset_at(c, b + c.offset)
        list_col(ls, &e.cols[en.elem], en.kind, ea, eb)
        if en.kind == V_MESSAGE or en.kind == V_GROUP:
            list_node(ls, e, en.child, ea, eb, depth + 1)


cdef class _Tables:
    cdef ArrowColumn* cols
    cdef EncodeEntry* entries
    cdef EncodeNode* nodes
    cdef Py_ssize_t n_cols, n_entries, n_nodes

    def __cinit__(self):
        self.cols = NULL
        self.entries = NULL
        self.nodes = NULL

    def __dealloc__(self):
        PyMem_RawFree(self.cols)
        PyMem_RawFree(self.entries)
        PyMem_RawFree(self.nodes)


cdef _Tables load_tables(const int64_t[:, ::1] cols, const int64_t[:, ::1] entries,
                        const int64_t[:, ::1] nodes):
    """The matrices, checked, into the structs encode() runs on."""
    if (cols.shape[1] != COL_WIDTH or entries.shape[1] != ENTRY_WIDTH
            or nodes.shape[1] != NODE_WIDTH):
        raise ValueError("encode: malformed tables")
    if nodes.shape[0] < 1:
        raise ValueError("encode: no root node")
    cdef Py_ssize_t i
    cdef _Tables t = _Tables()
    t.n_cols = cols.shape[0]
    t.n_entries = entries.shape[0]
    t.n_nodes = nodes.shape[0]
    t.cols = <ArrowColumn*>PyMem_RawMalloc(max(cols.shape[0], 1) * sizeof(ArrowColumn))
    t.entries = <EncodeEntry*>PyMem_RawMalloc(max(entries.shape[0], 1) * sizeof(EncodeEntry))
    t.nodes = <EncodeNode*>PyMem_RawMalloc(nodes.shape[0] * sizeof(EncodeNode))
    if t.cols == NULL or t.entries == NULL or t.nodes == NULL:
        raise MemoryError()
    for i in range(cols.shape[0]):
        t.cols[i].validity = <const uint8_t*><uintptr_t>cols[i, C_VALIDITY]
        t.cols[i].offset = cols[i, C_OFFSET]
        t.cols[i].values = <const uint8_t*><uintptr_t>cols[i, C_VALUES]
        t.cols[i].offsets = <const uint8_t*><uintptr_t>cols[i, C_OFFSETS]
        t.cols[i].wide = <int32_t>cols[i, C_WIDE]
        t.cols[i].bad = <const uint8_t*><uintptr_t>cols[i, C_BAD]
        t.cols[i].perm = <const int64_t*><uintptr_t>cols[i, C_PERM]
    for i in range(entries.shape[0]):
        t.entries[i].tag = <uint64_t>entries[i, EN_TAG]
        t.entries[i].end_tag = <uint64_t>entries[i, EN_END_TAG]
        t.entries[i].kind = <int32_t>entries[i, EN_KIND]
        t.entries[i].shape = <int32_t>entries[i, EN_SHAPE]
        t.entries[i].presence = <int32_t>entries[i, EN_PRESENCE]
        t.entries[i].col = <int32_t>entries[i, EN_COL]
        t.entries[i].elem = <int32_t>entries[i, EN_ELEM]
        t.entries[i].child = <int32_t>entries[i, EN_CHILD]
        t.entries[i].oneof = <int32_t>entries[i, EN_ONEOF]
        if not (0 <= t.entries[i].col < cols.shape[0]) or (
            t.entries[i].shape != S_SINGULAR and not (0 <= t.entries[i].elem < cols.shape[0])
        ) or ((t.entries[i].kind == V_MESSAGE or t.entries[i].kind == V_GROUP)
              and not (0 <= t.entries[i].child < nodes.shape[0])):
            raise ValueError("encode: an entry points outside the tables")
    for i in range(nodes.shape[0]):
        t.nodes[i].first = <int32_t>nodes[i, N_FIRST]
        t.nodes[i].n_entries = <int32_t>nodes[i, N_ENTRIES]
        if t.nodes[i].first < 0 or t.nodes[i].first + t.nodes[i].n_entries > entries.shape[0]:
            raise ValueError("encode: a node points outside the tables")
    return t


def tables(const int64_t[:, ::1] cols, const int64_t[:, ::1] entries,
           const int64_t[:, ::1] nodes):
    """The tables as encode() loads them, read back from its structs as layout records
    (cols, entries, nodes): what tests/test_layout.py checks against what was built."""
    cdef _Tables t = load_tables(cols, entries, nodes)
    cdef Py_ssize_t i
    return (
        [layout.EncodeColumn(
            validity=<uintptr_t>t.cols[i].validity, offset=t.cols[i].offset,
            values=<uintptr_t>t.cols[i].values, offsets=<uintptr_t>t.cols[i].offsets,
            wide=t.cols[i].wide, bad=<uintptr_t>t.cols[i].bad, perm=<uintptr_t>t.cols[i].perm)
         for i in range(t.n_cols)],
        [layout.EncodeEntry(
            tag=t.entries[i].tag, end_tag=t.entries[i].end_tag, kind=t.entries[i].kind,
            shape=t.entries[i].shape, presence=t.entries[i].presence, col=t.entries[i].col,
            elem=t.entries[i].elem, child=t.entries[i].child, oneof=t.entries[i].oneof)
         for i in range(t.n_entries)],
        [layout.EncodeNode(first=t.nodes[i].first, n_entries=t.nodes[i].n_entries)
         for i in range(t.n_nodes)],
    )


def encode(const int64_t[:, ::1] cols, const int64_t[:, ::1] entries,
           const int64_t[:, ::1] nodes, int64_t n_rows, int64_t capacity=0):
    """Encode rows 0..n_rows-1 of node 0.

    Returns (status, error column, error logical index, data, start, offsets, wide): the
    serialized rows are data[start:], row r at offsets[r]..offsets[r + 1] (int32, or int64
    when `wide`). On failure (status != 0) data and offsets are None.
    """
    if n_rows < 0:
        raise ValueError("encode: negative row count")
    cdef _Tables t = load_tables(cols, entries, nodes)

    cdef int64_t used_allocated
    cdef int64_t* used = <int64_t*>pool_alloc((n_rows + 1) * sizeof(int64_t), False,
                                              &used_allocated)
    if used == NULL:
        raise MemoryError()
    cdef Enc e
    e.cols = t.cols
    e.entries = t.entries
    e.nodes = t.nodes
    e.err_col = -1
    e.err_index = -1
    e.buf = NULL
    e.ptr = NULL
    e.limit = NULL
    e.allocated = 0
    cdef int status = OK
    cdef int64_t r, total
    cdef Lines ls
    ls.at = <const uint8_t**>PyMem_RawMalloc(MAX_LINES * sizeof(uint8_t*))
    ls.count = 0
    ls.issued = 0
    cdef int64_t lo, hi = 0, step = 0
    with nogil:
        status = grow(&e, <size_t>max(capacity, 4096))
        used[n_rows] = 0
        r = n_rows
        lo = r
        while r > 0 and status == OK:
            if r == lo:
                # A block starts: rows [lo, r). List what the next one reads.
                hi = r
                lo = max(((r - 1) // BLOCK) * BLOCK, 0)
                ls.count = 0
                ls.issued = 0
                if ls.at != NULL and lo > 0:
                    list_node(&ls, &e, 0, max(lo - BLOCK, 0), lo, 0)
                step = (ls.count + (r - lo) - 1) // (r - lo)
            while ls.issued < ls.count and ls.issued < (hi - r + 1) * step:
                __builtin_prefetch(ls.at[ls.issued])
                ls.issued += 1
            r -= 1
            status = encode_message(&e, 0, r)
            used[r] = e.limit - e.ptr
    PyMem_RawFree(ls.at)
    if status:
        pool_free(e.buf, e.allocated)
        pool_free(<uint8_t*>used, used_allocated)
        if status == E_NO_MEMORY:
            raise MemoryError()
        return status, e.err_col, e.err_index, None, 0, None, False
    total = e.limit - e.ptr
    cdef bint wide = total > 0x7FFFFFFF
    cdef int32_t* off32
    with nogil:
        # offsets[r] = total - used[r]; rewritten in place (int32 fits in the int64 slots)
        if wide:
            for r in range(n_rows + 1):
                used[r] = total - used[r]
        else:
            off32 = <int32_t*>used
            for r in range(n_rows + 1):
                off32[r] = <int32_t>(total - used[r])
    data = OwnedBuffer.adopt(e.buf, e.limit - e.buf, e.allocated)
    offsets = OwnedBuffer.adopt(<uint8_t*>used, (n_rows + 1) * (8 if wide else 4), used_allocated)
    return OK, -1, -1, data, e.ptr - e.buf, offsets, wide


# ---- map entry order ------------------------------------------------------------------

cdef enum:
    SORT_MAX = 64   # longer maps are left to the caller (a general sort)


cdef inline bint before(int kind, const uint8_t* data, const uint8_t* offsets, bint wide,
                        int64_t a, int64_t b) noexcept nogil:
    """Whether entry a goes on the wire before entry b (physical key slots), upb's order."""
    cdef uint64_t x, y
    cdef int64_t alo, ahi, blo, bhi, n
    cdef int c
    if kind == 1:  # bool: true first
        return ((data[a >> 3] >> (a & 7)) & 1) > ((data[b >> 3] >> (b & 7)) & 1)
    if kind == 4:  # 32-bit keys descend as unsigned numbers
        return (<const uint32_t*>data)[a] > (<const uint32_t*>data)[b]
    if kind == 8:
        return (<const uint64_t*>data)[a] > (<const uint64_t*>data)[b]
    alo = offset_in(offsets, wide, a)
    ahi = offset_in(offsets, wide, a + 1)
    blo = offset_in(offsets, wide, b)
    bhi = offset_in(offsets, wide, b + 1)
    n = min(ahi - alo, bhi - blo)
    c = memcmp(data + alo, data + blo, <size_t>n) if n > 0 else 0
    if c != 0:
        return c < 0
    return ahi - alo > bhi - blo  # a prefix comes after the longer strings it starts


def map_order(const int64_t[::1] offsets, int64_t n_entries, int kind, int64_t key_offset,
              const uint8_t[::1] data, key_offsets, bint wide):
    """Logical entry indices of a map array with each map's entries in upb's wire order.

    offsets: the maps' entry offsets (logical); keys are the entries' key array given by
    its values `data` (bitmap for bool keys, kind 1; 4- or 8-byte numbers, kind 4 / 8; or
    bytes, kind 0, with `key_offsets`, int64 when `wide`) and its array offset. Maps are
    short: each is insertion-sorted in place. None when a map has more than SORT_MAX
    entries (the caller sorts those batches another way).
    """
    cdef int64_t n_maps = offsets.shape[0] - 1, m, lo, hi, i, j, x
    cdef bint too_long = False
    perm = np.arange(n_entries, dtype=np.int64)
    cdef int64_t[::1] pv = perm
    cdef int64_t* p = &pv[0] if n_entries > 0 else NULL
    cdef const uint8_t[::1] ko
    cdef const uint8_t* kop = NULL
    if kind == 0:
        ko = key_offsets
        kop = &ko[0] if ko.shape[0] > 0 else NULL
    cdef const uint8_t* d = &data[0] if data.shape[0] > 0 else NULL
    if n_maps > 0 and (offsets[0] < 0 or offsets[n_maps] > n_entries):
        raise ValueError("map_order: offsets outside the entries")
    cdef int64_t end = key_offset + n_entries
    if key_offset < 0 or not (
        (kind == 1 and (end + 7) // 8 <= data.shape[0])
        or ((kind == 4 or kind == 8) and end * kind <= data.shape[0])
        or (kind == 0 and (end + 1) * (8 if wide else 4) <= ko.shape[0])
    ):
        raise ValueError("map_order: keys shorter than the entries")
    if kind == 0 and n_entries > 0:
        # every string of the key array lies inside its data (offsets never decrease)
        if not 0 <= offset_in(kop, wide, key_offset) <= offset_in(kop, wide, end) <= data.shape[0]:
            raise ValueError("map_order: key strings outside their data")
    with nogil:
        for m in range(n_maps):
            lo = offsets[m]
            hi = offsets[m + 1]
            if hi - lo > SORT_MAX:
                too_long = True
                break
            for i in range(lo + 1, hi):
                x = p[i]
                j = i
                while j > lo and before(kind, d, kop, wide, x + key_offset,
                                        p[j - 1] + key_offset):
                    p[j] = p[j - 1]
                    j -= 1
                p[j] = x
    return None if too_long else perm
