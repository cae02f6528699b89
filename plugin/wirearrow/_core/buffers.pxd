from libc.stdint cimport int64_t, uint8_t


cdef class OwnedBuffer:
    # Memory allocated with PyMem_Raw* (so tracemalloc sees it), handed to Arrow without a
    # copy through the buffer protocol; freed when the last Arrow buffer over it goes away.
    cdef uint8_t* data
    cdef int64_t size
    cdef Py_ssize_t shape[1]
    cdef Py_ssize_t strides[1]
    cdef int exports

    @staticmethod
    cdef OwnedBuffer adopt(uint8_t* data, int64_t size)
