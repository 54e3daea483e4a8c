# microkernel_columns for the variants whose panels are 8 to 32 columns
# wide (NR), where a narrow last panel wastes less than a panel of work per
# block of rows: the whole micro-kernel.


cdef void microkernel_columns(const uint8_t* a, Py_ssize_t a_stride, Py_ssize_t groups,
                              const int8_t* b, int32_t* tile, Py_ssize_t columns) noexcept nogil:
    microkernel_whole(a, a_stride, groups, b, tile)
