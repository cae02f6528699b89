# cython: freethreading_compatible = True
"""Length-delimited record streams: each record is its length, then its bytes.

Framings: "varint" (base-128, as protobuf's writeDelimitedTo), "u32le" and "u32be"
(4-byte unsigned). Splitting never copies: it yields (starts, ends) into the buffer.
"""
from cpython.mem cimport PyMem_RawFree, PyMem_RawMalloc, PyMem_RawRealloc
from libc.stdint cimport int32_t, int64_t, uint8_t, uint64_t
from libc.string cimport memcpy

from wirearrow._core.buffers cimport OwnedBuffer
from wirearrow._core.wire cimport E_VARINT_OVERFLOW, OK, read_varint

FRAMINGS = {"varint": 0, "u32le": 1, "u32be": 2}


def split(const uint8_t[::1] data, int framing, int64_t base=0):
    """Return (starts, ends, consumed) of the complete records in data.

    `consumed` is where the first incomplete record starts (== len(data) when the buffer
    holds whole records only), so a streaming reader can carry the tail over. A length
    prefix that cannot be a length (a varint over 10 bytes or over 2**63) raises ValueError
    naming the byte offset.
    """
    cdef int64_t size = data.shape[0]
    cdef const uint8_t* d = &data[0] if size > 0 else <const uint8_t*>""
    cdef int64_t pos = 0, cap = 1024, n = 0, rec_start
    cdef uint64_t length
    cdef int st, bad = 0
    cdef const uint8_t* p
    cdef int64_t* starts = <int64_t*>PyMem_RawMalloc(cap * 8)
    cdef int64_t* ends = <int64_t*>PyMem_RawMalloc(cap * 8)
    cdef int64_t* grown
    if starts == NULL or ends == NULL:
        PyMem_RawFree(starts)
        PyMem_RawFree(ends)
        raise MemoryError()
    with nogil:
        while pos < size:
            rec_start = pos
            if framing == 0:
                p = d + pos
                st = read_varint(&p, d + size, &length)
                if st == E_VARINT_OVERFLOW:
                    bad = 1
                    break
                if st != OK:   # truncated: the prefix continues in the next chunk
                    break
                pos = p - d
            else:
                if size - pos < 4:
                    break
                if framing == 1:
                    length = (<uint64_t>d[pos] | (<uint64_t>d[pos + 1] << 8)
                              | (<uint64_t>d[pos + 2] << 16) | (<uint64_t>d[pos + 3] << 24))
                else:
                    length = (<uint64_t>d[pos + 3] | (<uint64_t>d[pos + 2] << 8)
                              | (<uint64_t>d[pos + 1] << 16) | (<uint64_t>d[pos] << 24))
                pos += 4
            if length > <uint64_t>(size - pos):
                pos = rec_start
                break
            if n == cap:
                cap *= 2
                grown = <int64_t*>PyMem_RawRealloc(starts, cap * 8)
                if grown == NULL:
                    bad = 2
                    break
                starts = grown
                grown = <int64_t*>PyMem_RawRealloc(ends, cap * 8)
                if grown == NULL:
                    bad = 2
                    break
                ends = grown
            starts[n] = pos + base
            ends[n] = pos + <int64_t>length + base
            n += 1
            pos += <int64_t>length
    if bad:
        PyMem_RawFree(starts)
        PyMem_RawFree(ends)
        if bad == 2:
            raise MemoryError()
        raise ValueError(f"byte {rec_start + base}: varint length prefix longer than 10 bytes")
    return OwnedBuffer.adopt(<uint8_t*>starts, n * 8), OwnedBuffer.adopt(<uint8_t*>ends, n * 8), pos


def compact(const uint8_t[::1] data, const int64_t[::1] starts, const int64_t[::1] ends):
    """Copy the records into one contiguous values buffer with offsets (Arrow binary layout).

    Returns (offsets, values, large): int32 offsets unless the values exceed 2 GiB, then
    int64 (large=True, for a LargeBinaryArray).
    """
    cdef int64_t n = starts.shape[0], i, total = 0, pos = 0
    cdef int64_t size = data.shape[0]
    if ends.shape[0] != n:
        raise ValueError("starts and ends differ in length")
    for i in range(n):
        if not 0 <= starts[i] <= ends[i] <= size:
            raise ValueError(f"record {i}: bounds outside the data")
        total += ends[i] - starts[i]
    cdef bint large = total > 0x7FFFFFFF
    cdef int64_t width = 8 if large else 4
    cdef uint8_t* offsets = <uint8_t*>PyMem_RawMalloc((n + 1) * width)
    cdef uint8_t* values = <uint8_t*>PyMem_RawMalloc(total if total > 0 else 1)
    if offsets == NULL or values == NULL:
        PyMem_RawFree(offsets)
        PyMem_RawFree(values)
        raise MemoryError()
    cdef const uint8_t* d = &data[0] if size > 0 else <const uint8_t*>""
    with nogil:
        for i in range(n + 1):
            if i > 0:
                memcpy(values + pos, d + starts[i - 1], ends[i - 1] - starts[i - 1])
                pos += ends[i - 1] - starts[i - 1]
            if large:
                (<int64_t*>offsets)[i] = pos
            else:
                (<int32_t*>offsets)[i] = <int32_t>pos
    return OwnedBuffer.adopt(offsets, (n + 1) * width), OwnedBuffer.adopt(values, total), large


def pack_records(object records):
    """Copy a sequence of bytes-like records into one buffer with (starts, ends), exactly
    sized (two passes), so list input costs one memcpy per record and no Arrow builder.

    None is not a record: its position is returned in `nulls` and it occupies no bytes.
    Returns (data, starts, ends, nulls).
    """
    cdef Py_ssize_t n = len(records), i
    cdef int64_t total = 0, pos = 0
    cdef const unsigned char[::1] view
    nulls = []
    items = []
    for i in range(n):
        r = records[i]
        if r is None:
            nulls.append(i)
            items.append(b"")
            continue
        if not isinstance(r, bytes):
            r = memoryview(r).cast("B").tobytes() if not isinstance(r, bytearray) else bytes(r)
        items.append(r)
        total += len(<bytes>r)
    cdef uint8_t* data = <uint8_t*>PyMem_RawMalloc(total if total > 0 else 1)
    cdef int64_t* starts = <int64_t*>PyMem_RawMalloc(n * 8 if n > 0 else 8)
    cdef int64_t* ends = <int64_t*>PyMem_RawMalloc(n * 8 if n > 0 else 8)
    if data == NULL or starts == NULL or ends == NULL:
        PyMem_RawFree(data)
        PyMem_RawFree(starts)
        PyMem_RawFree(ends)
        raise MemoryError()
    cdef bytes b
    cdef Py_ssize_t length
    for i in range(n):
        b = <bytes>items[i]
        length = len(b)
        memcpy(data + pos, <const char*>b, length)
        starts[i] = pos
        pos += length
        ends[i] = pos
    return (OwnedBuffer.adopt(data, total), OwnedBuffer.adopt(<uint8_t*>starts, n * 8),
            OwnedBuffer.adopt(<uint8_t*>ends, n * 8), nulls)


# Confluent Schema Registry record prefix: statuses of confluent_prefixes.
cdef enum:
    C_OK = 0
    C_BAD_MAGIC = 1
    C_TRUNCATED = 2
    C_BAD_INDEX = 3
    C_UNKNOWN_ID = 4
    C_WRONG_MESSAGE = 5
    # A message-index array deeper than this is not a path any schema has: a bad prefix.
    MAX_INDEX_DEPTH = 64

CONFLUENT_OK = C_OK
CONFLUENT_BAD_MAGIC = C_BAD_MAGIC
CONFLUENT_TRUNCATED = C_TRUNCATED
CONFLUENT_BAD_INDEX = C_BAD_INDEX
CONFLUENT_UNKNOWN_ID = C_UNKNOWN_ID
CONFLUENT_WRONG_MESSAGE = C_WRONG_MESSAGE


cdef inline int64_t unzigzag(uint64_t v) noexcept nogil:
    return <int64_t>(v >> 1) ^ -<int64_t>(v & 1)


def confluent_prefixes(const uint8_t[::1] data, const int64_t[::1] starts,
                       const int64_t[::1] ends, const int64_t[::1] ids,
                       const int64_t[::1] path_offsets, const int32_t[::1] path_values):
    """Read each record's Confluent prefix: magic 0, schema id (4 bytes big-endian), the
    message-index array (zigzag varint count, then that many zigzag varint indexes; a
    count of 0 means [0]).

    ``ids`` (sorted) are the schema ids the caller knows; the index path id k must carry
    is ``path_values[path_offsets[k]:path_offsets[k + 1]]`` (a path holding -1 never
    matches: that schema has no such message). Returns (payload starts, schema ids,
    statuses): the payload is ``data[payload_start:end]``, not copied. A record whose
    status is not C_OK keeps its own start; its schema id is -1 unless it was read.
    (Statuses: the CONFLUENT_* constants.)
    """
    cdef int64_t n = starts.shape[0], size = data.shape[0], n_ids = ids.shape[0]
    if ends.shape[0] != n or path_offsets.shape[0] != n_ids + 1:
        raise ValueError("confluent_prefixes: array lengths differ")
    cdef int64_t i, lo, hi, mid, k, depth, j, sid, start, end
    cdef int64_t path[MAX_INDEX_DEPTH]
    cdef uint64_t v
    cdef const uint8_t* d = &data[0] if size > 0 else <const uint8_t*>""
    cdef const uint8_t* p
    cdef const uint8_t* e
    cdef int64_t* out_starts = <int64_t*>PyMem_RawMalloc(n * 8 if n > 0 else 8)
    cdef int64_t* out_ids = <int64_t*>PyMem_RawMalloc(n * 8 if n > 0 else 8)
    cdef uint8_t* out_status = <uint8_t*>PyMem_RawMalloc(n if n > 0 else 1)
    if out_starts == NULL or out_ids == NULL or out_status == NULL:
        PyMem_RawFree(out_starts)
        PyMem_RawFree(out_ids)
        PyMem_RawFree(out_status)
        raise MemoryError()
    for i in range(n):
        if not 0 <= starts[i] <= ends[i] <= size:
            PyMem_RawFree(out_starts)
            PyMem_RawFree(out_ids)
            PyMem_RawFree(out_status)
            raise ValueError(f"record {i}: bounds outside the data")
    with nogil:
        for i in range(n):
            start = starts[i]
            end = ends[i]
            out_starts[i] = start
            out_ids[i] = -1
            if end - start < 6:  # magic, 4 id bytes, at least the count
                if end > start and d[start] != 0:
                    out_status[i] = C_BAD_MAGIC
                else:
                    out_status[i] = C_TRUNCATED
                continue
            if d[start] != 0:
                out_status[i] = C_BAD_MAGIC
                continue
            sid = ((<int64_t>d[start + 1] << 24) | (<int64_t>d[start + 2] << 16)
                   | (<int64_t>d[start + 3] << 8) | <int64_t>d[start + 4])
            out_ids[i] = sid
            p = d + start + 5
            e = d + end
            # The common case, [0] written as one 0 byte, without the loop.
            if p[0] == 0:
                p += 1
                depth = 1
                path[0] = 0
            else:
                if read_varint(&p, e, &v) != OK:
                    out_status[i] = C_TRUNCATED
                    continue
                depth = unzigzag(v)
                if depth <= 0 or depth > MAX_INDEX_DEPTH:
                    out_status[i] = C_BAD_INDEX
                    continue
                for j in range(depth):
                    if read_varint(&p, e, &v) != OK:
                        depth = -1
                        break
                    path[j] = unzigzag(v)
                    if path[j] < 0:
                        depth = -2
                        break
                if depth == -1:
                    out_status[i] = C_TRUNCATED
                    continue
                if depth == -2:
                    out_status[i] = C_BAD_INDEX
                    continue
            lo = 0
            hi = n_ids
            while lo < hi:
                mid = (lo + hi) >> 1
                if ids[mid] < sid:
                    lo = mid + 1
                else:
                    hi = mid
            if lo == n_ids or ids[lo] != sid:
                out_status[i] = C_UNKNOWN_ID
                continue
            k = path_offsets[lo]
            if path_offsets[lo + 1] - k != depth:
                out_status[i] = C_WRONG_MESSAGE
                continue
            for j in range(depth):
                if path_values[k + j] != path[j]:
                    depth = -1
                    break
            if depth == -1:
                out_status[i] = C_WRONG_MESSAGE
                continue
            out_status[i] = C_OK
            out_starts[i] = p - d
    return (OwnedBuffer.adopt(<uint8_t*>out_starts, n * 8),
            OwnedBuffer.adopt(<uint8_t*>out_ids, n * 8), OwnedBuffer.adopt(out_status, n))


# ---- schema merging with a custom message (docs/custom-message.md) -------------------------

cdef enum:  # merge_custom statuses, per record
    M_OK = 0
    M_UNDECLARED = 1  # a top-level field number the custom message does not declare
    M_MALFORMED = 2   # the custom bytes are not a sequence of well-formed fields

MERGE_OK = M_OK
MERGE_UNDECLARED = M_UNDECLARED
MERGE_MALFORMED = M_MALFORMED


cdef inline int64_t put_varint(uint8_t* out, uint64_t v) noexcept nogil:
    cdef int64_t n = 0
    while v >= 0x80:
        out[n] = <uint8_t>(v | 0x80)
        v >>= 7
        n += 1
    out[n] = <uint8_t>v
    return n + 1


cdef inline int skip_value(const uint8_t** pp, const uint8_t* end, int wire_type) noexcept nogil:
    """Skip one non-group value of ``wire_type``: 0 ok, else malformed."""
    cdef uint64_t length
    cdef const uint8_t* p = pp[0]
    if wire_type == 0:
        while True:
            if p >= end or p - pp[0] >= 10:
                return 1
            if p[0] < 0x80:
                p += 1
                break
            p += 1
    elif wire_type == 1:
        if end - p < 8:
            return 1
        p += 8
    elif wire_type == 5:
        if end - p < 4:
            return 1
        p += 4
    elif wire_type == 2:
        if read_varint(&p, end, &length) != OK or length > <uint64_t>(end - p):
            return 1
        p += length
    else:
        return 1
    pp[0] = p
    return 0


def merge_custom(const uint8_t[::1] base, const int64_t[::1] base_starts,
                 const int64_t[::1] base_ends, const uint8_t[::1] custom,
                 const int64_t[::1] custom_starts, const int64_t[::1] custom_ends,
                 const int32_t[::1] numbers):
    """Each record's base bytes followed by its custom bytes with their top-level field
    numbers renumbered: ``numbers[n]`` is the merged number of the custom message's field
    ``n`` (0: not declared). Wire types and values are kept; only the top-level tags (and a
    group's closing tag) change, so the concatenation parses as the merged message.

    Returns (data, starts, ends, status, where, field): a record whose custom bytes hold an
    undeclared number or are malformed gets that status, no bytes, ``where`` the offset
    of the bad tag in its custom bytes and ``field`` its number.
    """
    cdef int64_t n = base_starts.shape[0], i, total = 0
    cdef int64_t bsize = base.shape[0], csize = custom.shape[0]
    if base_ends.shape[0] != n or custom_starts.shape[0] != n or custom_ends.shape[0] != n:
        raise ValueError("base and custom records differ in number")
    for i in range(n):
        if not (0 <= base_starts[i] <= base_ends[i] <= bsize
                and 0 <= custom_starts[i] <= custom_ends[i] <= csize):
            raise ValueError(f"record {i}: bounds outside the data")
        # A renumbered tag is at most 5 bytes where the smallest field (or empty group) is
        # 2: five times the custom bytes is always enough.
        total += base_ends[i] - base_starts[i] + 5 * (custom_ends[i] - custom_starts[i])
    cdef uint8_t* out = <uint8_t*>PyMem_RawMalloc(total if total > 0 else 1)
    cdef int64_t* starts = <int64_t*>PyMem_RawMalloc(n * 8 if n > 0 else 8)
    cdef int64_t* ends = <int64_t*>PyMem_RawMalloc(n * 8 if n > 0 else 8)
    cdef int32_t* status = <int32_t*>PyMem_RawMalloc(n * 4 if n > 0 else 4)
    cdef int64_t* where = <int64_t*>PyMem_RawMalloc(n * 8 if n > 0 else 8)
    cdef int64_t* fields = <int64_t*>PyMem_RawMalloc(n * 8 if n > 0 else 8)
    if (out == NULL or starts == NULL or ends == NULL or status == NULL or where == NULL
            or fields == NULL):
        PyMem_RawFree(out)
        PyMem_RawFree(starts)
        PyMem_RawFree(ends)
        PyMem_RawFree(status)
        PyMem_RawFree(where)
        PyMem_RawFree(fields)
        raise MemoryError()
    cdef const uint8_t* b = &base[0] if bsize > 0 else <const uint8_t*>""
    cdef const uint8_t* c = &custom[0] if csize > 0 else <const uint8_t*>""
    cdef int64_t nnum = numbers.shape[0], pos = 0, depth
    cdef const int32_t* num = &numbers[0] if nnum > 0 else <const int32_t*>NULL
    cdef const uint8_t* p
    cdef const uint8_t* end
    cdef const uint8_t* tag_at
    cdef const uint8_t* value_at
    cdef const uint8_t* inner_at
    cdef uint64_t tag, inner, field
    cdef int wire_type, inner_type, st
    with nogil:
        for i in range(n):
            starts[i] = pos
            status[i] = M_OK
            where[i] = 0
            fields[i] = 0
            memcpy(out + pos, b + base_starts[i], base_ends[i] - base_starts[i])
            pos += base_ends[i] - base_starts[i]
            p = c + custom_starts[i]
            end = c + custom_ends[i]
            while p < end:
                tag_at = p
                if read_varint(&p, end, &tag) != OK or tag > <uint64_t>0xFFFFFFFF or (tag >> 3) == 0:
                    status[i] = M_MALFORMED
                    break
                field = tag >> 3
                wire_type = tag & 7
                if <int64_t>field >= nnum or num[field] == 0:
                    status[i] = M_UNDECLARED
                    fields[i] = <int64_t>field
                    break
                if wire_type == 4:  # an end-group with no group open
                    status[i] = M_MALFORMED
                    break
                pos += put_varint(out + pos, (<uint64_t>num[field] << 3) | wire_type)
                value_at = p
                if wire_type != 3:
                    if skip_value(&p, end, wire_type):
                        status[i] = M_MALFORMED
                        break
                    memcpy(out + pos, value_at, p - value_at)
                    pos += p - value_at
                    continue
                # A group: copy its fields as they are, renumber its closing tag.
                depth = 1
                st = 0
                while True:
                    inner_at = p
                    if read_varint(&p, end, &inner) != OK or inner > <uint64_t>0xFFFFFFFF:
                        st = 1
                        break
                    inner_type = inner & 7
                    if inner_type == 4:
                        depth -= 1
                        if depth == 0:
                            if (inner >> 3) != field:
                                st = 1
                            break
                    elif inner_type == 3:
                        depth += 1
                    elif skip_value(&p, end, inner_type):
                        st = 1
                        break
                if st:
                    status[i] = M_MALFORMED
                    break
                memcpy(out + pos, value_at, inner_at - value_at)
                pos += inner_at - value_at
                pos += put_varint(out + pos, (<uint64_t>num[field] << 3) | 4)
            if status[i] != M_OK:
                where[i] = tag_at - (c + custom_starts[i])
                pos = starts[i]
            ends[i] = pos
    return (OwnedBuffer.adopt(out, pos), OwnedBuffer.adopt(<uint8_t*>starts, n * 8),
            OwnedBuffer.adopt(<uint8_t*>ends, n * 8), OwnedBuffer.adopt(<uint8_t*>status, n * 4),
            OwnedBuffer.adopt(<uint8_t*>where, n * 8), OwnedBuffer.adopt(<uint8_t*>fields, n * 8))
