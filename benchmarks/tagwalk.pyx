# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The ceiling for touching every field: a C loop that walks every tag of every message.

Benchmark-only (compiled at run time by bench_nested.py, never part of wirearrow). It reads
each tag, skips each scalar by its wire type, and descends into every length-delimited
field the schema says is a message (map entries and well-known types included), checking
every read against the end of the enclosing message. It stores nothing: any decoder that
produces output must do at least this much work.

The schema arrives as one flat table: child[node_dense[m] + field_number] is the node of a
sub-message or group field of message m, or -1 (a scalar, string or bytes field, or no
field). Groups are walked to their end-group tag, as a decoder must.
"""
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t


cdef inline const uint8_t* skip_varint(const uint8_t* p, const uint8_t* end) noexcept nogil:
    cdef const uint8_t* limit = p + 10
    while p < end and p < limit:
        if p[0] < 0x80:
            return p + 1
        p += 1
    return NULL


cdef inline const uint8_t* read_varint(const uint8_t* p, const uint8_t* end,
                                       uint64_t* out) noexcept nogil:
    cdef uint64_t v = 0
    cdef int shift = 0
    while p < end and shift < 64:
        v |= <uint64_t>(p[0] & 0x7F) << shift
        if p[0] < 0x80:
            out[0] = v
            return p + 1
        p += 1
        shift += 7
    return NULL


cdef const uint8_t* walk(const uint8_t* p, const uint8_t* end, int32_t node,
                         const int32_t* dense, const int32_t* dense_len, const int32_t* child,
                         int depth, uint32_t end_group, int64_t* tags) noexcept nogil:
    """Walk the fields of one message in [p, end), sub-messages and groups included, adding
    the tags seen to tags[0]; a group (end_group != 0) ends at its end-group tag. Returns
    the position after the message (after a group's end-group tag), NULL on malformed input.
    node -1: a group the schema does not know, walked without descending."""
    cdef uint64_t tag, n
    cdef uint32_t fn
    cdef int wt
    cdef int32_t sub
    cdef int64_t count = 0   # (a local: kept in a register, added to tags[0] on the way out)
    if depth > 100:
        return NULL
    while p < end:
        if p[0] < 0x80:
            tag = p[0]
            p += 1
        else:
            p = read_varint(p, end, &tag)
            if p == NULL:
                return NULL
        count += 1
        fn = <uint32_t>(tag >> 3)
        wt = tag & 7
        if wt == 0:
            p = skip_varint(p, end)
            if p == NULL:
                return NULL
        elif wt == 2:
            if p < end and p[0] < 0x80:
                n = p[0]
                p += 1
            else:
                p = read_varint(p, end, &n)
                if p == NULL:
                    return NULL
            if n > <uint64_t>(end - p):
                return NULL
            sub = child[dense[node] + fn] if node >= 0 and fn < <uint32_t>dense_len[node] else -1
            if sub >= 0:
                if walk(p, p + n, sub, dense, dense_len, child, depth + 1, 0, tags) == NULL:
                    return NULL
            p += n
        elif wt == 5:
            if end - p < 4:
                return NULL
            p += 4
        elif wt == 1:
            if end - p < 8:
                return NULL
            p += 8
        elif wt == 3:
            sub = child[dense[node] + fn] if node >= 0 and fn < <uint32_t>dense_len[node] else -1
            p = walk(p, end, sub, dense, dense_len, child, depth + 1, fn, tags)
            if p == NULL:
                return NULL
        elif wt == 4:
            if fn != end_group or end_group == 0:
                return NULL
            tags[0] += count
            return p
        else:
            return NULL
    if end_group != 0:
        return NULL
    tags[0] += count
    return p


def walk_all(const uint8_t[::1] data, const int64_t[::1] offsets, const int32_t[::1] dense,
             const int32_t[::1] dense_len, const int32_t[::1] child):
    """Walk records data[offsets[i]:offsets[i + 1]] from node 0; return the tag count."""
    cdef int64_t i, k, total = 0
    cdef int64_t n = offsets.shape[0] - 1
    cdef const uint8_t* base = &data[0] if data.shape[0] else NULL
    with nogil:
        for i in range(n):
            k = 0
            if walk(base + offsets[i], base + offsets[i + 1], 0, &dense[0], &dense_len[0],
                    &child[0], 0, 0, &k) == NULL:
                with gil:
                    raise ValueError(f"record {i}: malformed")
            total += k
    return total
