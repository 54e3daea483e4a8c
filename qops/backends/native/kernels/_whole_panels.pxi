# microkernel_columns for the variants whose panels are narrow enough (NR 8
# to 32) that a last panel of a few columns costs little more than its
# columns: the whole micro-kernel.


cdef void microkernel_columns(const uint8_t* a, Py_ssize_t a_stride, Py_ssize_t groups,
                              const int8_t* b, int32_t* tile, Py_ssize_t columns) noexcept nogil:
    microkernel(a, a_stride, groups, b, tile)
