# cython: freethreading_compatible = True
"""The profiling walker: wire statistics of a sample of records, off the hot path.

The decoder keeps no counters. A ParserCache hands a small sample of each batch (1 % by
default) to `walk`, which reads the tags of those records again and counts, per plan node
(a message the plan descends into) and field number:

- present: messages of the node in which the field occurs at least once;
- count:   occurrences (for a repeated field, count / present = elements per message);
- nbytes:  payload bytes of length-delimited occurrences (strings, sub-messages, packed);
- first:   messages whose first field it is;
- follow:  (previous field, field) pairs, i.e. the field order seen on the wire.

Field numbers at or above a node's width share bucket 0 (field 0 never occurs on valid
input). The walker descends only into sub-messages the plan descends into (`child`); it
skips everything else by length. Malformed records stop the walk of that record: a profile
is a hint, never a source of output, so a bad record only costs it accuracy.
"""
from libc.stdint cimport int32_t, int64_t, uint8_t, uint64_t


cdef struct Tables:
    const uint8_t* data
    const int32_t* child
    const int32_t* base
    const int32_t* width
    const int64_t* fbase
    int64_t* visits
    int64_t* present
    int64_t* count
    int64_t* nbytes
    int64_t* first
    int64_t* follow
    int64_t* stamp
    int64_t visit
    int max_depth


cdef inline int varint(const uint8_t** pp, const uint8_t* end, uint64_t* out) noexcept nogil:
    cdef const uint8_t* p = pp[0]
    cdef uint64_t result = 0
    cdef int shift = 0
    while True:
        if p >= end or shift > 63:
            return -1
        result |= (<uint64_t>(p[0] & 0x7F)) << shift
        if p[0] < 0x80:
            break
        p += 1
        shift += 7
    pp[0] = p + 1
    out[0] = result
    return 0


cdef int skip(const uint8_t** pp, const uint8_t* end, uint64_t number, int wt,
              int depth) noexcept nogil:
    cdef uint64_t v, tag
    if wt == 0:
        return varint(pp, end, &v)
    if wt == 1 or wt == 5:
        v = 8 if wt == 1 else 4
        if <uint64_t>(end - pp[0]) < v:
            return -1
        pp[0] += v
        return 0
    if wt == 2:
        if varint(pp, end, &v) != 0 or v > <uint64_t>(end - pp[0]):
            return -1
        pp[0] += v
        return 0
    if wt == 3:
        if depth > 100:
            return -1
        while True:
            if varint(pp, end, &tag) != 0:
                return -1
            if (tag & 7) == 4:
                return 0 if (tag >> 3) == number else -1
            if skip(pp, end, tag >> 3, tag & 7, depth + 1) != 0:
                return -1
    return -1


cdef int walk_message(Tables* t, int32_t node, const uint8_t* p, const uint8_t* end,
                      int depth) noexcept nogil:
    cdef uint64_t tag, n
    cdef uint64_t number
    cdef int wt
    cdef int64_t bucket, prev = -1, at
    cdef int32_t w = t.width[node]
    cdef int32_t b = t.base[node]
    cdef int32_t sub
    cdef int64_t visit
    if depth > t.max_depth:
        return -1
    t.visit += 1
    visit = t.visit
    t.visits[node] += 1
    while p < end:
        if varint(&p, end, &tag) != 0:
            return -1
        number = tag >> 3
        wt = tag & 7
        if number == 0 or wt == 4 or wt > 5:
            return -1
        bucket = <int64_t>number if number < <uint64_t>w else 0
        at = b + bucket
        t.count[at] += 1
        if t.stamp[at] != visit:
            t.stamp[at] = visit
            t.present[at] += 1
        if prev < 0:
            t.first[at] += 1
        else:
            t.follow[t.fbase[node] + prev * w + bucket] += 1
        prev = bucket
        sub = t.child[at] if bucket != 0 else -1
        if wt == 2:
            if varint(&p, end, &n) != 0 or n > <uint64_t>(end - p):
                return -1
            t.nbytes[at] += <int64_t>n
            if sub >= 0 and walk_message(t, sub, p, p + n, depth + 1) != 0:
                return -1
            p += n
        else:
            if skip(&p, end, number, wt, depth) != 0:
                return -1
    return 0


def walk(const uint8_t[::1] data, const int64_t[::1] starts, const int64_t[::1] ends,
         const int64_t[::1] sample, const int32_t[::1] child, const int32_t[::1] base,
         const int32_t[::1] width, const int64_t[::1] fbase, int64_t[::1] visits,
         int64_t[::1] present, int64_t[::1] count, int64_t[::1] nbytes, int64_t[::1] first,
         int64_t[::1] follow, int64_t[::1] stamp, int max_depth=100):
    """Walk records data[starts[i]:ends[i]] for i in `sample`, adding to the counters.

    Node 0 is the record. `child[base[node] + number]` is the node a length-delimited field
    descends into, or -1; `fbase[node]` is where the node's width x width `follow` matrix
    starts. `stamp` (as long as `present`) is scratch. Returns the records walked whole.
    """
    cdef Tables t
    cdef int64_t i, k, n = sample.shape[0], ok = 0
    cdef int64_t size = data.shape[0]
    if starts.shape[0] != ends.shape[0]:
        raise ValueError("starts and ends differ in length")
    if not (present.shape[0] == count.shape[0] == nbytes.shape[0] == first.shape[0]
            == stamp.shape[0] == child.shape[0]):
        raise ValueError("per-field arrays differ in length")
    cdef int64_t n_nodes = base.shape[0]
    if width.shape[0] != n_nodes or fbase.shape[0] != n_nodes or visits.shape[0] != n_nodes:
        raise ValueError("per-node arrays differ in length")
    cdef int64_t node
    for node in range(n_nodes):
        if width[node] < 1 or base[node] < 0 or base[node] + width[node] > child.shape[0]:
            raise ValueError(f"node {node}: bad base/width")
        if fbase[node] < 0 or fbase[node] + <int64_t>width[node] * width[node] > follow.shape[0]:
            raise ValueError(f"node {node}: bad follow base")
    for k in range(child.shape[0]):
        if not -1 <= child[k] < n_nodes:
            raise ValueError(f"bad child {child[k]}")
    for k in range(n):
        i = sample[k]
        if not (0 <= i < starts.shape[0] and 0 <= starts[i] <= ends[i] <= size):
            raise ValueError(f"sample {k}: record out of range")
    if n_nodes == 0 or n == 0 or size == 0:
        return 0
    t.data = &data[0]
    t.child = &child[0]
    t.base = &base[0]
    t.width = &width[0]
    t.fbase = &fbase[0]
    t.visits = &visits[0]
    t.present = &present[0]
    t.count = &count[0]
    t.nbytes = &nbytes[0]
    t.first = &first[0]
    t.follow = &follow[0]
    t.stamp = &stamp[0]
    t.visit = 0
    for k in range(stamp.shape[0]):
        stamp[k] = 0
    t.max_depth = max_depth
    with nogil:
        for k in range(n):
            i = sample[k]
            if walk_message(&t, 0, t.data + starts[i], t.data + ends[i], 0) == 0:
                ok += 1
    return ok
