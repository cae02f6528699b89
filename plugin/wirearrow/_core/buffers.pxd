from libc.stdint cimport int64_t, uint8_t, uint64_t


cdef extern from *:
    """
    #include <stddef.h>
    #include <stdint.h>
    #if defined(__linux__)
    #include <sys/mman.h>
    #endif
    /* Ask for transparent huge pages over the 2 MiB-aligned part of a large buffer that is
       about to be written front to back (or back to front): one fault per 2 MiB instead
       of 512. A hint only; without THP (or off Linux) nothing happens. */
    static inline void wa_hugepages(void* p, size_t n) {
    #if defined(__linux__) && defined(MADV_HUGEPAGE)
        const uintptr_t huge = (uintptr_t)2 << 20;
        uintptr_t a = ((uintptr_t)p + huge - 1) & ~(huge - 1);
        uintptr_t b = ((uintptr_t)p + n) & ~(huge - 1);
        if (b > a) (void)madvise((void*)a, b - a, MADV_HUGEPAGE);
    #else
        (void)p; (void)n;
    #endif
    }
    """
    void wa_hugepages(void* p, size_t n) noexcept nogil


# Prefetching (decoder writes, encoder reads): the cache lines a block of rows will touch,
# listed at the block's start and issued a few per row (a burst would mostly be dropped).
cdef enum:
    MAX_LINES = 16384       # lines listed for one block (beyond: not prefetched)

ctypedef struct Lines:
    const uint8_t** at      # MAX_LINES slots, or NULL: no prefetching
    int64_t count
    int64_t issued


cdef inline void add_lines(Lines* ls, const uint8_t* base, int64_t lo, int64_t hi) noexcept nogil:
    """The cache lines of bytes [lo, hi) of base."""
    cdef int64_t a
    if base == NULL or hi <= lo:
        return
    a = lo & ~(<int64_t>63)
    while a < hi and ls.count < MAX_LINES:
        ls.at[ls.count] = base + a
        ls.count += 1
        a += 64


# Large column buffers are recycled instead of freed (see buffers.pyx: fresh pages cost a
# page fault each, which was a third of a large batch's decode). Both are safe without the
# GIL; pool_alloc zeroes only when asked and reports the size it really gave, which is
# what pool_free takes back (with any PyMem_Raw* block, grown by realloc or not).
cdef uint8_t* pool_alloc(int64_t size, bint zero, int64_t* allocated) noexcept nogil
cdef void pool_free(uint8_t* data, int64_t allocated) noexcept nogil
# pool_alloc for one named buffer (`key` != 0: e.g. a decoder column's values for a plan):
# the block that buffer had last comes back to it first, written as far as it writes.
cdef uint8_t* pool_take(int64_t size, bint zero, int64_t* allocated, uint64_t key) noexcept nogil
# The same, told that the first `written` bytes were written (an exported buffer's size):
# the pool prefers blocks already written as far as a request needs.
cdef void pool_give(uint8_t* data, int64_t allocated, int64_t written) noexcept nogil

# Made by each decode call: a thread's first one gives it a pool of its own (buffers.pyx).
cdef class PoolUser:
    pass


cdef class OwnedBuffer:
    # Memory allocated with PyMem_Raw* (so tracemalloc sees it), handed to Arrow without a
    # copy through the buffer protocol; given back to the pool (or freed) when the last
    # Arrow buffer over it goes away.
    cdef uint8_t* data
    cdef int64_t size
    cdef int64_t allocated     # bytes behind data (>= size); 0 = unknown: freed, not pooled
    cdef Py_ssize_t shape[1]
    cdef Py_ssize_t strides[1]
    cdef int exports
    cdef object base           # a view: the OwnedBuffer whose memory data points into
                               # (kept alive by this one; never freed here)

    @staticmethod
    cdef OwnedBuffer adopt(uint8_t* data, int64_t size, int64_t allocated=*)

    @staticmethod
    cdef OwnedBuffer view(OwnedBuffer base, int64_t size)
