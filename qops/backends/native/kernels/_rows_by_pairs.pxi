# microkernel_rows for the variants with a two-row kernel, two_rows(a0, a1,
# groups, b, tile, second): rows a0 and (with `second`) a1 of a micro-tile,
# inlined with `second` a constant.  Included by each such variant after its
# two_rows, so that it compiles with the variant's flags and constants.
#
# Two rows per pass over the panel are as fast per row as the full kernel (a
# pass is bound by its multiply-adds); one row alone is bound by its loads.
# The tile's other rows are zero.

from libc.string cimport memset


cdef void microkernel_rows(const uint8_t* a, Py_ssize_t a_stride, Py_ssize_t groups,
                           const int8_t* b, int32_t* tile, Py_ssize_t rows) noexcept nogil:
    cdef Py_ssize_t r
    for r in range(0, rows - 1, 2):
        two_rows(a + r * a_stride, a + (r + 1) * a_stride, groups, b, tile + r * NR, True)
    if rows % 2:
        two_rows(a + (rows - 1) * a_stride, a, groups, b, tile + (rows - 1) * NR, False)
    memset(tile + rows * NR, 0, (MR - rows) * NR * sizeof(int32_t))
