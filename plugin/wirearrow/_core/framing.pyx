# cython: freethreading_compatible = True
"""Length-delimited record streams: each record is its length, then its bytes.

Framings: "varint" (base-128, as protobuf's writeDelimitedTo), "u32le" and "u32be"
(4-byte unsigned), "tfrecord" (TensorFlow's TFRecord: u64le length, masked CRC32C of the
length, the record, masked CRC32C of the record). Splitting never copies: it yields
(starts, ends) into the buffer. :func:`frame` is the inverse: records -> one framed buffer.
"""
from cpython.mem cimport PyMem_RawFree, PyMem_RawMalloc, PyMem_RawRealloc
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcpy

from wirearrow._core.buffers cimport OwnedBuffer
from wirearrow._core.wire cimport E_VARINT_OVERFLOW, OK, put_varint, read_varint

FRAMINGS = {"varint": 0, "u32le": 1, "u32be": 2, "tfrecord": 3}
# Bytes after each record's data (TFRecord's CRC of the data): the next frame starts there.
TRAILERS = {"varint": 0, "u32le": 0, "u32be": 0, "tfrecord": 4}
cdef enum:
    F_VARINT = 0
    F_U32LE = 1
    F_U32BE = 2
    F_TFRECORD = 3


# CRC32C (Castagnoli, reflected polynomial 0x82F63B78). On x86-64 with SSE4.2 (checked at
# import) the CPU's crc32 instruction, 8 bytes a step: TFRecord's two CRCs per record
# would otherwise cost about what decoding the record costs. Elsewhere slicing-by-8: eight
# 256-entry tables fold 8 bytes per step (~4x a byte-wise table). No dependency either way.
cdef extern from *:
    """
    #include <stdint.h>
    #include <string.h>
    #if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __attribute__((target("sse4.2")))
    static uint32_t wa_crc32c_hw(uint32_t crc, const uint8_t* p, int64_t n) {
        uint64_t c = crc, w;
        while (n >= 8) {
            memcpy(&w, p, 8);
            c = __builtin_ia32_crc32di(c, w);
            p += 8;
            n -= 8;
        }
        uint32_t c32 = (uint32_t)c;
        while (n > 0) {
            c32 = __builtin_ia32_crc32qi(c32, *p);
            p++;
            n--;
        }
        return c32;
    }
    static int wa_crc32c_hw_ok(void) { return __builtin_cpu_supports("sse4.2"); }
    #else
    static uint32_t wa_crc32c_hw(uint32_t crc, const uint8_t* p, int64_t n) {
        (void)p; (void)n; return crc;
    }
    static int wa_crc32c_hw_ok(void) { return 0; }
    #endif
    """
    uint32_t wa_crc32c_hw(uint32_t crc, const uint8_t* p, int64_t n) nogil
    int wa_crc32c_hw_ok() nogil

cdef uint32_t CRC_TABLE[8][256]
cdef bint CRC_HW = wa_crc32c_hw_ok()


cdef void _crc_tables() noexcept:
    cdef uint32_t c
    cdef int i, k
    for i in range(256):
        c = i
        for k in range(8):
            c = (c >> 1) ^ (0x82F63B78 if c & 1 else 0)
        CRC_TABLE[0][i] = c
    for i in range(256):
        for k in range(1, 8):
            CRC_TABLE[k][i] = (CRC_TABLE[k - 1][i] >> 8) ^ CRC_TABLE[0][CRC_TABLE[k - 1][i] & 0xFF]


_crc_tables()


cdef inline uint32_t crc32c_of(const uint8_t* p, int64_t n) noexcept nogil:
    if CRC_HW:
        return wa_crc32c_hw(0xFFFFFFFFU, p, n) ^ 0xFFFFFFFFU
    return crc32c_table(p, n)


cdef uint32_t crc32c_table(const uint8_t* p, int64_t n) noexcept nogil:
    cdef uint32_t crc = 0xFFFFFFFFU
    cdef uint32_t lo, hi
    while n >= 8:
        # Loaded byte by byte: the same result on any endianness (GCC makes it one load).
        lo = crc ^ (<uint32_t>p[0] | (<uint32_t>p[1] << 8) | (<uint32_t>p[2] << 16)
                    | (<uint32_t>p[3] << 24))
        hi = (<uint32_t>p[4] | (<uint32_t>p[5] << 8) | (<uint32_t>p[6] << 16)
              | (<uint32_t>p[7] << 24))
        crc = (CRC_TABLE[7][lo & 0xFF] ^ CRC_TABLE[6][(lo >> 8) & 0xFF]
               ^ CRC_TABLE[5][(lo >> 16) & 0xFF] ^ CRC_TABLE[4][lo >> 24]
               ^ CRC_TABLE[3][hi & 0xFF] ^ CRC_TABLE[2][(hi >> 8) & 0xFF]
               ^ CRC_TABLE[1][(hi >> 16) & 0xFF] ^ CRC_TABLE[0][hi >> 24])
        p += 8
        n -= 8
    while n > 0:
        crc = CRC_TABLE[0][(crc ^ p[0]) & 0xFF] ^ (crc >> 8)
        p += 1
        n -= 1
    return crc ^ 0xFFFFFFFFU


cdef inline uint32_t masked_crc(const uint8_t* p, int64_t n) noexcept nogil:
    # TFRecord stores CRCs rotated and offset, so that a CRC of data holding CRCs is not
    # trivially zero (TensorFlow's crc32c::Mask).
    cdef uint32_t c = crc32c_of(p, n)
    return ((c >> 15) | (c << 17)) + <uint32_t>0xA282EAD8


cdef inline uint32_t load_u32le(const uint8_t* p) noexcept nogil:
    return (<uint32_t>p[0] | (<uint32_t>p[1] << 8) | (<uint32_t>p[2] << 16)
            | (<uint32_t>p[3] << 24))


cdef inline void store_u32le(uint8_t* p, uint32_t v) noexcept nogil:
    p[0] = v & 0xFF
    p[1] = (v >> 8) & 0xFF
    p[2] = (v >> 16) & 0xFF
    p[3] = v >> 24


HARDWARE_CRC32C = bool(CRC_HW)


def crc32c(const uint8_t[::1] data, bint masked=False, bint table=False):
    """CRC32C of data (TFRecord's masked form with masked=True; table=True: the portable
    slicing-by-8 code even where the CPU instruction is used, to test both)."""
    cdef int64_t n = data.shape[0]
    cdef const uint8_t* p = &data[0] if n > 0 else <const uint8_t*>""
    cdef uint32_t c
    with nogil:
        if table:
            c = crc32c_table(p, n)
            if masked:
                c = ((c >> 15) | (c << 17)) + <uint32_t>0xA282EAD8
        else:
            c = masked_crc(p, n) if masked else crc32c_of(p, n)
    return c


def split(const uint8_t[::1] data, int framing, int64_t base=0):
    """Return (starts, ends, consumed, corrupt) of the complete records in data.

    `consumed` is where the first incomplete record starts (== len(data) when the buffer
    holds whole records only), so a streaming reader can carry the tail over. A length
    prefix that cannot be a length (a varint over 10 bytes or over 2**63, a TFRecord length
    whose CRC does not match) raises ValueError naming the byte offset. `corrupt`: for
    TFRecord, one byte per record, 1 where the record's data CRC does not match (the
    record is still framed: its length was sound); None for the other framings.
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
    cdef uint8_t* corrupt = NULL
    cdef uint8_t* grown_flags
    cdef bint checked = framing == F_TFRECORD
    if checked:
        corrupt = <uint8_t*>PyMem_RawMalloc(cap)
    if starts == NULL or ends == NULL or (checked and corrupt == NULL):
        PyMem_RawFree(starts)
        PyMem_RawFree(ends)
        PyMem_RawFree(corrupt)
        raise MemoryError()
    with nogil:
        while pos < size:
            rec_start = pos
            if framing == F_TFRECORD:
                if size - pos < 12:
                    break
                if masked_crc(d + pos, 8) != load_u32le(d + pos + 8):
                    bad = 3
                    break
                length = (<uint64_t>load_u32le(d + pos)
                          | (<uint64_t>load_u32le(d + pos + 4) << 32))
                pos += 12
                if size - pos < 4 or length > <uint64_t>(size - pos - 4):
                    pos = rec_start
                    break
            elif framing == F_VARINT:
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
                if framing == F_U32LE:
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
                if checked:
                    grown_flags = <uint8_t*>PyMem_RawRealloc(corrupt, cap)
                    if grown_flags == NULL:
                        bad = 2
                        break
                    corrupt = grown_flags
            starts[n] = pos + base
            ends[n] = pos + <int64_t>length + base
            if checked:
                corrupt[n] = masked_crc(d + pos, <int64_t>length) != load_u32le(d + pos + length)
                pos += 4
            n += 1
            pos += <int64_t>length
    if bad:
        PyMem_RawFree(starts)
        PyMem_RawFree(ends)
        PyMem_RawFree(corrupt)
        if bad == 2:
            raise MemoryError()
        if bad == 3:
            raise ValueError(f"byte {rec_start + base}: TFRecord length whose CRC32C does not match")
        raise ValueError(f"byte {rec_start + base}: varint length prefix longer than 10 bytes")
    return (OwnedBuffer.adopt(<uint8_t*>starts, n * 8), OwnedBuffer.adopt(<uint8_t*>ends, n * 8),
            pos, OwnedBuffer.adopt(corrupt, n) if checked else None)


def array_bounds(object offsets_buffer, int64_t first, int64_t n, bint wide):
    """The n + 1 bounds of the n records of a binary array whose offsets buffer (int32, or
    int64 when `wide`) holds them from element `first`, as one int64 buffer: record i is
    bytes bounds[i] .. bounds[i + 1] (its starts and ends are two views of it). One pass
    without the GIL; numpy's frombuffer/astype/arange held it ~45 us a batch of 8k records,
    time the other threads' batches wait for. One buffer, not a start and an end buffer
    (and no record index: 0 .. n-1, made only if read): they are held through the whole
    call, and the two int64s a record less took 0.8 MB off a 50,000-record flat-4 call's
    peak (0.14x its output; benchmarks/README.md, "Threads")."""
    cdef int64_t width = 8 if wide else 4
    if n < 0 or first < 0:
        raise ValueError("array_bounds: negative count or start")
    if n == 0:  # (an empty array may come without an offsets buffer)
        return OwnedBuffer.adopt(NULL, 0)
    # (Arrow's offsets buffer exports format 'b': viewed as bytes, whatever it holds.)
    cdef const uint8_t[::1] offsets = memoryview(offsets_buffer).cast("B")
    if (first + n + 1) * width > offsets.shape[0]:
        raise ValueError("array_bounds: the records run past the offsets buffer")
    cdef int64_t* bounds = <int64_t*>PyMem_RawMalloc((n + 1) * 8)
    if bounds == NULL:
        raise MemoryError()
    cdef const int32_t* o32 = <const int32_t*>&offsets[0] + first if not wide else NULL
    cdef const int64_t* o64 = <const int64_t*>&offsets[0] + first if wide else NULL
    cdef int64_t i
    with nogil:
        if wide:
            for i in range(n + 1):
                bounds[i] = o64[i]
        else:
            for i in range(n + 1):
                bounds[i] = o32[i]
    return OwnedBuffer.adopt(<uint8_t*>bounds, (n + 1) * 8)


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


cdef inline int varint_size(uint64_t v) noexcept nogil:
    cdef int n = 1
    while v >= 0x80:
        v >>= 7
        n += 1
    return n


def frame(const uint8_t[::1] data, const int64_t[::1] offsets, int framing):
    """Records ``data[offsets[i]:offsets[i + 1]]`` -> one buffer of framed records (the
    framing's code, as in FRAMINGS), exactly sized: one pass for the size, one to write.

    A record too long for a 4-byte length raises ValueError naming it.
    """
    cdef int64_t n = offsets.shape[0] - 1, i, total = 0, length
    cdef int64_t size = data.shape[0]
    cdef int64_t too_long = -1
    if n < 0:
        raise ValueError("frame: offsets need at least one entry")
    if framing < F_VARINT or framing > F_TFRECORD:
        raise ValueError(f"frame: unknown framing code {framing}")
    if n > 0 and not (0 <= offsets[0] and offsets[n] <= size):
        raise ValueError("frame: offsets outside the data")
    cdef const uint8_t* d = &data[0] if size > 0 else <const uint8_t*>""
    with nogil:
        for i in range(n):
            length = offsets[i + 1] - offsets[i]
            if length < 0:
                too_long = -2 - i
                break
            if framing == F_VARINT:
                total += varint_size(<uint64_t>length) + length
            elif framing == F_TFRECORD:
                total += 16 + length
            else:
                if length > <int64_t>0xFFFFFFFFU:
                    too_long = i
                    break
                total += 4 + length
    if too_long <= -2:
        raise ValueError(f"frame: offsets of record {-2 - too_long} go backwards")
    if too_long >= 0:
        raise ValueError(
            f"record {too_long}: {offsets[too_long + 1] - offsets[too_long]} bytes do not fit "
            f"a 4-byte length"
        )
    cdef uint8_t* out = <uint8_t*>PyMem_RawMalloc(total if total > 0 else 1)
    if out == NULL:
        raise MemoryError()
    cdef uint8_t* w = out
    cdef uint64_t v
    with nogil:
        for i in range(n):
            length = offsets[i + 1] - offsets[i]
            if framing == F_VARINT:
                v = <uint64_t>length
                while v >= 0x80:
                    w[0] = <uint8_t>(v | 0x80)
                    w += 1
                    v >>= 7
                w[0] = <uint8_t>v
                w += 1
            elif framing == F_U32LE:
                store_u32le(w, <uint32_t>length)
                w += 4
            elif framing == F_U32BE:
                w[0] = (length >> 24) & 0xFF
                w[1] = (length >> 16) & 0xFF
                w[2] = (length >> 8) & 0xFF
                w[3] = length & 0xFF
                w += 4
            else:
                store_u32le(w, <uint32_t>(length & 0xFFFFFFFFU))
                store_u32le(w + 4, <uint32_t>(<uint64_t>length >> 32))
                store_u32le(w + 8, masked_crc(w, 8))
                w += 12
            if length:
                memcpy(w, d + offsets[i], length)
            w += length
            if framing == F_TFRECORD:
                store_u32le(w, masked_crc(d + offsets[i], length))
                w += 4
    return OwnedBuffer.adopt(out, total)


def prefix(const uint8_t[::1] data, const int64_t[::1] offsets, const uint8_t[::1] head):
    """Records ``data[offsets[i]:offsets[i + 1]]`` with ``head`` before each (a Confluent
    prefix), as Arrow binary buffers: (offsets, values, large), int64 offsets (large=True)
    when the values exceed 2 GiB."""
    cdef int64_t n = offsets.shape[0] - 1, i, total = 0, pos = 0, length
    cdef int64_t size = data.shape[0], h = head.shape[0]
    if n < 0:
        raise ValueError("prefix: offsets need at least one entry")
    if n > 0 and not (0 <= offsets[0] and offsets[n] <= size):
        raise ValueError("prefix: offsets outside the data")
    for i in range(n):
        if offsets[i + 1] < offsets[i]:
            raise ValueError(f"prefix: offsets of record {i} go backwards")
    if n > 0:
        total = offsets[n] - offsets[0] + n * h
    cdef bint large = total > 0x7FFFFFFF
    cdef int64_t width = 8 if large else 4
    cdef uint8_t* out_offsets = <uint8_t*>PyMem_RawMalloc((n + 1) * width)
    cdef uint8_t* values = <uint8_t*>PyMem_RawMalloc(total if total > 0 else 1)
    if out_offsets == NULL or values == NULL:
        PyMem_RawFree(out_offsets)
        PyMem_RawFree(values)
        raise MemoryError()
    cdef const uint8_t* d = &data[0] if size > 0 else <const uint8_t*>""
    cdef const uint8_t* hp = &head[0] if h > 0 else <const uint8_t*>""
    with nogil:
        for i in range(n + 1):
            if large:
                (<int64_t*>out_offsets)[i] = pos
            else:
                (<int32_t*>out_offsets)[i] = <int32_t>pos
            if i == n:
                break
            length = offsets[i + 1] - offsets[i]
            memcpy(values + pos, hp, h)
            pos += h
            if length:
                memcpy(values + pos, d + offsets[i], length)
            pos += length
    return OwnedBuffer.adopt(out_offsets, (n + 1) * width), OwnedBuffer.adopt(values, total), large
