# The Arrow C data interface (https://arrow.apache.org/docs/format/CDataInterface.html):
# how whole trees of arrays cross between pyarrow and the core without a Python object per
# array. The struct is Arrow's ABI, declared once here for every module that cimports it.
from libc.stdint cimport int64_t


cdef extern from *:
    """
    #ifndef ARROW_C_DATA_INTERFACE
    #define ARROW_C_DATA_INTERFACE
    struct ArrowSchema {
      const char* format; const char* name; const char* metadata; int64_t flags;
      int64_t n_children; struct ArrowSchema** children; struct ArrowSchema* dictionary;
      void (*release)(struct ArrowSchema*); void* private_data;
    };
    struct ArrowArray {
      int64_t length; int64_t null_count; int64_t offset; int64_t n_buffers;
      int64_t n_children; const void** buffers; struct ArrowArray** children;
      struct ArrowArray* dictionary; void (*release)(struct ArrowArray*); void* private_data;
    };
    #endif
    """
    struct ArrowArray:
        int64_t length
        int64_t null_count
        int64_t offset
        int64_t n_buffers
        int64_t n_children
        const void** buffers
        ArrowArray** children
        ArrowArray* dictionary
        void (*release)(ArrowArray*) noexcept nogil
        void* private_data
