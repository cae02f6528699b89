# cython: freethreading_compatible = True
"""Buffers handed from the core to Arrow, and bit packing of validity/bool bytes.

The decoder keeps one byte per slot for validity and bools (a byte store on the hot path is
cheaper than a read-modify-write of a bit); packing them into Arrow bitmaps happens once per
batch here.
"""
from cpython.buffer cimport PyBUF_WRITABLE
from cpython.mem cimport PyMem_RawFree, PyMem_RawMalloc
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcpy, memset


cdef extern from *:
    void __builtin_prefetch(const void* addr) nogil

cdef enum:
    PREFETCH = 16


cdef class OwnedBuffer:
    def __cinit__(self):
        self.data = NULL
        self.size = 0
        self.exports = 0

    def __dealloc__(self):
        if self.data != NULL:
            PyMem_RawFree(self.data)
            self.data = NULL

    @staticmethod
    cdef OwnedBuffer adopt(uint8_t* data, int64_t size):
        cdef OwnedBuffer b = OwnedBuffer.__new__(OwnedBuffer)
        b.data = data
        b.size = size
        return b

    def __len__(self):
        return self.size

    def __getbuffer__(self, Py_buffer* view, int flags):
        if flags & PyBUF_WRITABLE:
            raise BufferError("wirearrow buffers are read-only once handed out")
        self.shape[0] = self.size
        self.strides[0] = 1
        view.buf = <void*>(self.data if self.data != NULL else <uint8_t*>"")
        view.obj = self
        view.len = self.size
        view.readonly = 1
        view.itemsize = 1
        view.format = "B"
        view.ndim = 1
        view.shape = self.shape
        view.strides = self.strides
        view.suboffsets = NULL
        view.internal = NULL
        self.exports += 1

    def __releasebuffer__(self, Py_buffer* view):
        self.exports -= 1


def pack_bits(const uint8_t[::1] flags, int64_t n):
    """Pack n bytes (0 / non-zero) into an LSB-first Arrow bitmap.

    Returns (bitmap, zeros): zeros is the number of zero bytes, so a validity caller can
    drop the bitmap when it is 0.
    """
    if not 0 <= n <= flags.shape[0]:
        raise ValueError("pack_bits: n outside the input")
    cdef int64_t nbytes = (n + 7) // 8
    cdef uint8_t* out = <uint8_t*>PyMem_RawMalloc(nbytes if nbytes > 0 else 1)
    if out == NULL:
        raise MemoryError()
    cdef int64_t i, j, ones = 0
    cdef uint8_t byte
    cdef const uint8_t* src = &flags[0] if n > 0 else NULL
    with nogil:
        if nbytes > 0:
            memset(out, 0, <size_t>nbytes)
        for i in range(n // 8):
            byte = 0
            for j in range(8):
                byte |= (src[i * 8 + j] != 0) << j
            out[i] = byte
        i = n // 8
        if n % 8:
            byte = 0
            for j in range(n % 8):
                byte |= (src[i * 8 + j] != 0) << j
            out[i] = byte
        for i in range(nbytes):
            ones += popcount8(out[i])
    return OwnedBuffer.adopt(out, nbytes), n - ones


cdef inline int popcount8(uint8_t v) noexcept nogil:
    v = v - ((v >> 1) & 0x55)
    v = (v & 0x33) + ((v >> 2) & 0x33)
    return (v + (v >> 4)) & 0x0F


def gather_views(const uint8_t[::1] data, const uint8_t[::1] views, const uint8_t[::1] valid,
                 int64_t n, object indices=None):
    """Copy the byte ranges named by view slots out of the batch data.

    A view slot is 8 bytes: uint32 offset into `data`, uint32 length (written by the decoder
    after bounds checks; checked again here). Without `indices` the output has the n slots
    in order; with them (int64, -1 = null) output row i holds slot indices[i], which fuses
    Arrow's take into the one copy strings need anyway. Returns (validity bitmap or None,
    null count, int32 offsets, values) of an Arrow binary/utf8 array; values is None when
    `data` already holds them in order (see offsets_in_place): use `data` itself then.
    """
    if views.shape[0] < n * 8 or valid.shape[0] < n:
        raise ValueError("gather_views: n exceeds the view buffers")
    if indices is None:
        in_place = offsets_in_place(data, views, valid, n)
        if in_place is not None:
            return in_place
    # Row indices come as int32 (the usual row table) or int64 (very large batches).
    cdef const int32_t[::1] idx32
    cdef const int64_t[::1] idx64
    cdef const int32_t* i32 = NULL
    cdef const int64_t* i64 = NULL
    cdef int64_t rows = n
    cdef bint take = indices is not None
    if take:
        if indices.dtype.itemsize == 4:
            idx32 = indices
            rows = idx32.shape[0]
            i32 = &idx32[0] if rows > 0 else NULL
        else:
            idx64 = indices
            rows = idx64.shape[0]
            i64 = &idx64[0] if rows > 0 else NULL
    cdef const uint32_t* v = <const uint32_t*>&views[0] if n > 0 else NULL
    cdef const uint8_t* ok = &valid[0] if n > 0 else NULL
    cdef int64_t i, k, kp, total = 0, nulls = 0, size = data.shape[0], bad = -1
    with nogil:
        for i in range(rows):
            k = (i32[i] if i32 != NULL else i64[i]) if take else i
            if k < 0 or not ok[k]:
                nulls += 1
                continue
            if k >= n or <int64_t>v[2 * k] + v[2 * k + 1] > size:
                bad = i
                break
            total += v[2 * k + 1]
    if bad >= 0:
        raise ValueError("gather_views: a view or index points outside the data")
    if total > 0x7FFFFFFF:
        raise OverflowError("a string column exceeds 2 GiB in one batch: use smaller batches")
    cdef int32_t* offsets = <int32_t*>PyMem_RawMalloc((rows + 1) * sizeof(int32_t))
    cdef uint8_t* out = <uint8_t*>PyMem_RawMalloc(total if total > 0 else 1)
    cdef uint8_t* bitmap = <uint8_t*>PyMem_RawMalloc((rows + 7) // 8 + 1) if nulls else NULL
    if offsets == NULL or out == NULL or (nulls and bitmap == NULL):
        PyMem_RawFree(offsets)
        PyMem_RawFree(out)
        PyMem_RawFree(bitmap)
        raise MemoryError()
    cdef const uint8_t* src = &data[0] if size > 0 else NULL
    cdef int64_t pos = 0
    with nogil:
        if nulls:
            memset(bitmap, 0, (rows + 7) // 8 + 1)
        offsets[0] = 0
        for i in range(rows):
            # The strings are scattered over the batch input: ask for the one PREFETCH rows
            # ahead so that its cache miss overlaps this copy.
            if i + PREFETCH < rows:
                kp = (i32[i + PREFETCH] if i32 != NULL else i64[i + PREFETCH]) if take else i + PREFETCH
                if kp >= 0:
                    __builtin_prefetch(src + v[2 * kp])
            k = (i32[i] if i32 != NULL else i64[i]) if take else i
            if k >= 0 and ok[k]:
                if nulls:
                    bitmap[i >> 3] |= 1 << (i & 7)
                if v[2 * k + 1] > 0:
                    memcpy(out + pos, src + v[2 * k], v[2 * k + 1])
                    pos += v[2 * k + 1]
            offsets[i + 1] = <int32_t>pos
    return (OwnedBuffer.adopt(bitmap, (rows + 7) // 8) if nulls else None, nulls,
            OwnedBuffer.adopt(<uint8_t*>offsets, (rows + 1) * sizeof(int32_t)),
            OwnedBuffer.adopt(out, total))


cdef offsets_in_place(const uint8_t[::1] data, const uint8_t[::1] views,
                      const uint8_t[::1] valid, int64_t n):
    """The arrays of gather_views(data, views, valid, n) when the views already lie end to
    end in `data` (slot order, no gaps): only offsets are built and `data` itself is the
    values buffer (returned as None). The decoder appends each column's strings to its
    arena in slot order, so this holds unless a record was rolled back or a value
    overwritten (a repeated singular field, a oneof): then None, and the caller copies.
    """
    cdef const uint32_t* v = <const uint32_t*>&views[0] if n > 0 else NULL
    cdef const uint8_t* ok = &valid[0] if n > 0 else NULL
    cdef int64_t i, pos = 0, nulls = 0, size = data.shape[0], length
    cdef bint contiguous = True
    cdef uint64_t gap = 0
    cdef int32_t* offsets = <int32_t*>PyMem_RawMalloc((n + 1) * sizeof(int32_t))
    if offsets == NULL:
        raise MemoryError()
    with nogil:
        # Branch-free: whether a slot is null or empty varies from row to row.
        offsets[0] = 0
        for i in range(n):
            length = v[2 * i + 1] if ok[i] else 0
            gap |= <uint64_t>(v[2 * i] != pos) & <uint64_t>(length != 0)
            nulls += ok[i] == 0
            pos += length
            offsets[i + 1] = <int32_t>pos
        contiguous = gap == 0
    if not contiguous or pos > size or pos > 0x7FFFFFFF:
        PyMem_RawFree(offsets)
        return None
    bitmap, zeros = pack_bits(valid, n) if nulls else (None, 0)
    return (bitmap, zeros, OwnedBuffer.adopt(<uint8_t*>offsets, (n + 1) * sizeof(int32_t)),
            None)
