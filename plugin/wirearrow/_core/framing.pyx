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
