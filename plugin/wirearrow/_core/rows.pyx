# cython: freethreading_compatible = True
"""Per-parent selections over element groups (the integer side of fan-out).

A group's elements are stored parent by parent, so `offsets[p]:offsets[p + 1]` are the
elements of parent p. A selection picks, for each parent, some of those elements in order.
"""
from cpython.buffer cimport PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcmp, memset

from wirearrow._core.buffers cimport OwnedBuffer, pool_alloc, pool_free, pool_take

import numpy as np


# Row tables are a flat plan's largest per-batch temporaries (an int32 or int64 per output
# row, several per fan-out). From malloc, each batch's were fresh pages on a thread whose
# arena had given its last ones back (measured: flat-4, 65,536 records, two threads, 3.3
# minor faults a batch against 0.1 on one, in expand / gather_rows / group_offsets). So a
# large one is a block of the buffer pool named by the caller (`key`: which table of which
# plan, see pool_take): batch after batch the same table gets the block it had last,
# already written as far as it writes, on either thread. The array is a read-only numpy
# view of the block (no copy), which goes back to the pool when the array is dropped.
#
# A table's name is composed here, in one place, from the caller's `name` (its plan's: the
# assembler passes id(plan) << 16; 0: none, plain numpy arrays) and which table it is: the
# selection's or group's index and the kind below (expand's element table is +1). A hint:
# two tables sharing a name cost at most a page fault, never a wrong value.
cdef enum:
    POOL_MIN = 65536   # buffers.pyx: smaller blocks are malloc's (reused from its free lists)
    T_OFFSETS = 1
    T_ALL = 3
    T_ROOT = 5
    T_EXPAND = 7
    T_GATHER = 9


cdef inline uint64_t table_key(uint64_t name, uint64_t which) noexcept nogil:
    # A caller's table (plan, which) spread over the pool's key space (decoder keys too).
    return ((name + which) * <uint64_t>0xD6E8FEB86659FD93 + <uint64_t>0x632BE59BD9B4E019
            if name else 0)


# Looked up once: a small batch's tables are numpy arrays, made several times a call, and
# two module attribute lookups and a typed memoryview a table cost more than the array
# (callgrind, 1-record flat-4: ~3,600 instructions a table).
cdef object np_empty = np.empty
cdef object np_zeros = np.zeros
cdef object int32_dtype = np.dtype(np.int32)
cdef object int64_dtype = np.dtype(np.int64)


cdef object row_table(int64_t n, bint wide, uint64_t key, bint zero, void** data):
    """n int32 (int64 if wide) slots, zeroed if asked, at *data: a pool block named key
    when large (a read-only numpy view that gives it back when dropped), else np.empty."""
    cdef int64_t size = n * (8 if wide else 4), allocated
    cdef uint8_t* p
    cdef object arr
    cdef Py_buffer view
    if size < POOL_MIN or key == 0:
        arr = (np_zeros if zero else np_empty)(n, int64_dtype if wide else int32_dtype)
        data[0] = NULL
        if n > 0:
            PyObject_GetBuffer(arr, &view, PyBUF_WRITABLE)
            data[0] = view.buf
            PyBuffer_Release(&view)   # (the array, returned, keeps the memory)
        return arr
    p = pool_take(size, zero, &allocated, key)
    if p == NULL:
        raise MemoryError()
    data[0] = p
    return np.frombuffer(OwnedBuffer.adopt(p, size, allocated), np.int64 if wide else np.int32)


cdef inline int64_t clamp_bound(int64_t v, bint given, int64_t length, int64_t lower,
                               int64_t upper, int64_t default) noexcept nogil:
    if not given:
        return default
    if v < 0:
        v += length
    if v < lower:
        return lower
    if v > upper:
        return upper
    return v


cdef inline void slice_indices(int64_t length, int64_t start, bint has_start, int64_t stop,
                               bint has_stop, int64_t step, int64_t* first,
                               int64_t* count) noexcept nogil:
    # CPython's PySlice_AdjustIndices, so that list[a:b:s] means what it means in Python.
    cdef int64_t lower = 0 if step > 0 else -1
    cdef int64_t upper = length if step > 0 else length - 1
    cdef int64_t a = clamp_bound(start, has_start, length, lower, upper,
                                 lower if step > 0 else upper)
    cdef int64_t b = clamp_bound(stop, has_stop, length, lower, upper,
                                 upper if step > 0 else lower)
    first[0] = a
    if step > 0:
        count[0] = (b - a + step - 1) // step if b > a else 0
    else:
        count[0] = (a - b - step - 1) // (-step) if a > b else 0


def select_slice(const int64_t[::1] offsets, const int64_t[::1] parents, object start,
                 object stop, object step):
    """Python slice semantics per parent: elements[start:stop:step] of each listed parent.

    `parents` are the parent elements asked for (in any order, repeats allowed). Returns
    (selected element ids, per-entry offsets into them), one entry per item of `parents`.
    """
    cdef int64_t n = parents.shape[0], i, k, p, first, count, pos = 0, total = 0
    cdef int64_t s = 1 if step is None else step
    cdef bint has_a = start is not None, has_b = stop is not None
    cdef int64_t a = start if has_a else 0
    cdef int64_t b = stop if has_b else 0
    if s == 0:
        raise ValueError("slice step must not be zero")
    for i in range(n):
        p = parents[i]
        slice_indices(offsets[p + 1] - offsets[p], a, has_a, b, has_b, s, &first, &count)
        total += count
    out = np.empty(total, dtype=np.int64)
    out_off = np.empty(n + 1, dtype=np.int64)
    cdef int64_t[::1] o = out
    cdef int64_t[::1] oo = out_off
    with nogil:
        oo[0] = 0
        for i in range(n):
            p = parents[i]
            slice_indices(offsets[p + 1] - offsets[p], a, has_a, b, has_b, s, &first, &count)
            for k in range(count):
                o[pos] = offsets[p] + first + k * s
                pos += 1
            oo[i + 1] = pos
    return out, out_off


ctypedef fused offset_t:
    int32_t
    int64_t


cdef bint count_children(const int64_t* par, int64_t n, int64_t n_parent,
                         offset_t* o) noexcept nogil:
    """Zeroed o[0..n_parent] -> offsets of each parent's elements; False when the parents
    are not sorted or not in range. Counts, then a running sum: no branch depends on how
    many children a parent has (walking parent by parent mispredicts once per parent: 2-3x
    slower on a 50,000-record whole OpenRTB batch's groups, in a C microbenchmark).

    Four elements a step, their order and range tested together before any is counted
    (one branch, no short-circuit): each element at least the one before it and the last
    below n_parent put all four in range, so no count lands outside o. The tests and the
    loop's own were most of the instructions (callgrind, 1,000 whole OpenRTB records,
    ~22,800 elements and ~12,500 parents a call: 292k instructions a call before, ~189k)."""
    cdef int64_t i = 0, x0, x1, x2, x3, prev = 0
    cdef offset_t total = 0
    while i + 4 <= n:
        x0 = par[i]
        x1 = par[i + 1]
        x2 = par[i + 2]
        x3 = par[i + 3]
        if (x0 < prev) | (x1 < x0) | (x2 < x1) | (x3 < x2) | (<uint64_t>x3 >= <uint64_t>n_parent):
            return False
        o[x0 + 1] += 1
        o[x1 + 1] += 1
        o[x2 + 1] += 1
        o[x3 + 1] += 1
        prev = x3
        i += 4
    while i < n:
        x0 = par[i]
        if x0 < prev or x0 >= n_parent:
            return False
        o[x0 + 1] += 1
        prev = x0
        i += 1
    # The running sum kept in a register, four parents a step.
    i = 1
    while i + 4 <= n_parent + 1:
        total += o[i]
        o[i] = total
        total += o[i + 1]
        o[i + 1] = total
        total += o[i + 2]
        o[i + 2] = total
        total += o[i + 3]
        o[i + 3] = total
        i += 4
    while i <= n_parent:
        total += o[i]
        o[i] = total
        i += 1
    return True


def group_offsets(const int64_t[::1] parents, int64_t n_parent, uint64_t name=0,
                  int64_t group=0):
    """offsets[p]:offsets[p + 1] = elements whose parent is p (parents are non-decreasing).
    `name` (0: none) and `group` name the table for the pool (see row_table)."""
    cdef int64_t n = parents.shape[0]
    cdef void* ov
    out = row_table(n_parent + 1, True, table_key(name, <uint64_t>group << 4 | T_OFFSETS), True,
                    &ov)
    cdef const int64_t* par = &parents[0] if n > 0 else NULL
    cdef bint ok
    with nogil:
        ok = count_children(par, n, n_parent, <int64_t*>ov)
    if not ok:
        raise ValueError("group parents must be sorted and in range")
    return out


def list_offsets(const int64_t[::1] parents, int64_t n_parent):
    """group_offsets as the int32 offsets buffer of an Arrow list (an OwnedBuffer), built
    straight into pooled memory: whole-message batches need one per list column."""
    cdef int64_t n = parents.shape[0], allocated
    if n > 0x7FFFFFFF:
        raise OverflowError("a list column exceeds 2**31 elements in one batch")
    cdef int32_t* o = <int32_t*>pool_alloc((n_parent + 1) * sizeof(int32_t), True, &allocated)
    if o == NULL:
        raise MemoryError()
    cdef const int64_t* par = &parents[0] if n > 0 else NULL
    cdef bint ok
    with nogil:
        ok = count_children(par, n, n_parent, o)
    if not ok:
        pool_free(<uint8_t*>o, allocated)
        raise ValueError("group parents must be sorted and in range")
    return OwnedBuffer.adopt(<uint8_t*>o, (n_parent + 1) * sizeof(int32_t), allocated)


ctypedef fused index_t:
    int32_t
    int64_t


def numbering(int64_t n, bint wide, uint64_t name=0, int64_t index=-1):
    """0, 1, ..., n - 1 as int32 (int64 if wide): the root's row table (index -1), or every
    element of a group selected (index: the selection's); `name` (0: none) and index name
    it for the pool (see row_table)."""
    cdef void* out
    cdef int64_t i
    arr = row_table(n, wide, table_key(name, <uint64_t>index << 4 | T_ALL if index >= 0
                                       else T_ROOT), False, &out)
    with nogil:
        if wide:
            for i in range(n):
                (<int64_t*>out)[i] = i
        else:
            for i in range(n):
                (<int32_t*>out)[i] = <int32_t>i
    return arr


def expand(const index_t[::1] rows, const int64_t[::1] sel, const int64_t[::1] sel_off,
           uint64_t name=0, int64_t index=0):
    """Fan a row table out over one selection (SQL UNNEST with a left join).

    rows[r] is the parent element of row r (-1: none). Each row becomes one row per selected
    element under its parent, or one row with no element (-1) when there are none.
    Returns (owner, element): the source row of every new row, and its element; int32 when
    both fit (row tables are the largest temporaries of a batch), else int64. `name` (0:
    none) and `index` (the selection's) name the two tables for the pool (see row_table).
    """
    cdef int64_t n = rows.shape[0], r, k, e, count, total = 0, pos = 0
    cdef int64_t n_off = sel_off.shape[0]
    cdef bint outside = False
    with nogil:
        for r in range(n):
            e = rows[r]
            if e >= n_off - 1:
                outside = True
                break
            count = sel_off[e + 1] - sel_off[e] if e >= 0 else 0
            total += count if count > 0 else 1
    if outside:
        raise ValueError("row element outside the selection's parents")
    narrow = total < 0x7FFFFFFF and sel.shape[0] < 0x7FFFFFFF
    cdef void* o
    cdef void* el
    cdef uint64_t which = <uint64_t>index << 4 | T_EXPAND
    owner = row_table(total, not narrow, table_key(name, which), False, &o)
    element = row_table(total, not narrow, table_key(name, which + 1), False, &el)
    if narrow:
        _expand_into(rows, sel, sel_off, <int32_t*>o, <int32_t*>el)
    else:
        _expand_into(rows, sel, sel_off, <int64_t*>o, <int64_t*>el)
    return owner, element


ctypedef fused out_t:
    int32_t
    int64_t


cdef void _expand_into(const index_t[::1] rows, const int64_t[::1] sel,
                       const int64_t[::1] sel_off, out_t* o, out_t* el) noexcept:
    cdef int64_t n = rows.shape[0], r, k, e, count, pos = 0
    with nogil:
        for r in range(n):
            e = rows[r]
            count = sel_off[e + 1] - sel_off[e] if e >= 0 else 0
            if count <= 0:
                o[pos] = <out_t>r
                el[pos] = -1
                pos += 1
                continue
            for k in range(sel_off[e], sel_off[e] + count):
                o[pos] = <out_t>r
                el[pos] = <out_t>sel[k]
                pos += 1


def gather_rows(const index_t[::1] values, const out_t[::1] owner, uint64_t name=0,
                int64_t index=0, int64_t table=0):
    """values[owner] (values' dtype): a row table carried onto the rows a fan-out made
    (`owner` from expand). numpy's own fancy indexing first casts an int32 index to intp,
    with the GIL held: this is the largest array work of a flat plan's row tables. `name`
    (0: none), `index` (the fan-out's selection) and `table` (the selection whose table is
    carried) name it for the pool (see row_table)."""
    cdef int64_t n = owner.shape[0], n_values = values.shape[0], i, o
    cdef bint outside = False
    cdef void* out_data
    out = row_table(n, index_t is int64_t,
                    table_key(name, (<uint64_t>index << 6 | <uint64_t>table) << 4 | T_GATHER),
                    False, &out_data)
    cdef index_t* dst = <index_t*>out_data
    with nogil:
        for i in range(n):
            o = owner[i]
            if <uint64_t>o >= <uint64_t>n_values:  # (negative too: as unsigned, too large)
                outside = True
                break
            dst[i] = values[o]
    if outside:
        raise ValueError("gather_rows: owner outside the row table")
    return out


cdef enum:
    KEYS_SCAN_LIMIT = 32   # entries per parent compared pairwise; above, ask for the hash path


def keys_unique(const offset_t[::1] offsets, const uint8_t[::1] values, int64_t width,
                const uint8_t[::1] arena, bint strings):
    """True when no parent's entries repeat a key: a map needs no last-one-wins filter.

    `offsets` (int32 or int64) delimit each parent's keys. Keys are `width`-byte slots, or
    with `strings` the values of a decoded bytes column
    (`values`: its uint32 offsets into `arena`, one more than the keys; compared by their
    bytes). Entries are compared pairwise within each parent, so a parent with more than
    KEYS_SCAN_LIMIT entries makes the answer False: the caller then runs the general
    (hash) check.
    """
    cdef int64_t n_parent = offsets.shape[0] - 1, p, i, j, lo, hi
    cdef int64_t size = arena.shape[0]
    cdef int64_t keys = offsets[n_parent] if n_parent > 0 else 0
    cdef const uint8_t* vals = &values[0] if values.shape[0] > 0 else NULL
    cdef const uint8_t* bytes_ = &arena[0] if size > 0 else <const uint8_t*>""
    cdef const uint32_t* o = NULL
    cdef bint unique = True
    if n_parent < 0 or keys < 0:
        raise ValueError("keys_unique: bad offsets")
    if strings:
        if values.shape[0] < (keys + 1) * 4:
            raise ValueError("keys_unique: offsets outside the key slots")
        o = <const uint32_t*>vals
        for i in range(keys):
            if o[i] > o[i + 1] or o[i + 1] > size:
                raise ValueError("keys_unique: a key points outside the data")
    elif keys * width > values.shape[0]:
        raise ValueError("keys_unique: offsets outside the key slots")
    cdef uint32_t length
    with nogil:
        for p in range(n_parent):
            lo = offsets[p]
            hi = offsets[p + 1]
            if hi - lo > KEYS_SCAN_LIMIT:
                unique = False
                break
            for i in range(lo + 1, hi):
                length = o[i + 1] - o[i] if strings else 0
                for j in range(lo, i):
                    if strings:
                        # Keys of one length mostly differ in their last byte ("k1", "k2"):
                        # compared first, it spares most pairs the memcmp call.
                        if (o[j + 1] - o[j] == length
                                and (length == 0
                                     or (bytes_[o[i + 1] - 1] == bytes_[o[j + 1] - 1]
                                         and memcmp(bytes_ + o[i], bytes_ + o[j], length) == 0))):
                            unique = False
                    elif memcmp(vals + i * width, vals + j * width, width) == 0:
                        unique = False
                if not unique:
                    break
            if not unique:
                break
    return unique


def take_indices(const index_t[::1] idx, int64_t n_elements):
    """How a column over n_elements elements is read at rows idx (-1: no element).

    None when idx is 0, 1, ..., n_elements - 1 (the leaf array as it is, no take); else
    (bitmap, nulls): the validity bitmap of idx >= 0 (None when every row has an element)
    and its null count, so that the take's indices are built over idx without a copy.
    """
    cdef int64_t n = idx.shape[0], i, nulls = 0
    cdef bint identity = n == n_elements
    with nogil:
        if identity:
            for i in range(n):
                if idx[i] != i:
                    identity = False
                    break
        if not identity:
            for i in range(n):  # branch-free: the compiler vectorises it
                nulls += idx[i] < 0
    if identity:
        return None
    if nulls == 0:
        return None, 0
    bitmap = np.zeros((n + 7) // 8, dtype=np.uint8)
    cdef uint8_t[::1] bits = bitmap
    with nogil:
        for i in range(n):
            if idx[i] >= 0:
                bits[i >> 3] |= <uint8_t>(1 << (i & 7))
    return bitmap, nulls
