# The micro-kernels of the variants whose tile_rows(a, a_stride, groups, b,
# tile, rows, add) runs any number of a micro-tile's rows in one pass over
# the panel (microkernel_whole, microkernel_add, microkernel_rows: forms of
# the micro-kernel's contract, _microkernel_contract.pxi).  Included by
# each such variant after its tile_rows and its short_rows(a, a_stride,
# groups, b, tile, rows) (one or two rows, inlined with `rows` constant), so
# that they compile with the variant's flags and constants.
#
# One pass for all the rows: a pass per pair of rows reread the panel from
# L2 for each pair, and a lone pair is bound by its loads (AVX-512: four
# panel vectors per eight multiply-adds), so that two rows cost more than a
# whole micro-tile.  Each count is a call with a constant, whose inlined
# copy keeps only its rows' accumulators.  The tile's other rows are zero.

from libc.string cimport memset


cdef void microkernel_whole(const uint8_t* a, Py_ssize_t a_stride, Py_ssize_t groups,
                            const int8_t* b, int32_t* tile) noexcept nogil:
    tile_rows(a, a_stride, groups, b, tile, MR, False)


cdef void microkernel_add(const uint8_t* a, Py_ssize_t a_stride, Py_ssize_t groups,
                          const int8_t* b, int32_t* tile) noexcept nogil:
    tile_rows(a, a_stride, groups, b, tile, MR, True)


cdef void microkernel_rows(const uint8_t* a, Py_ssize_t a_stride, Py_ssize_t groups,
                           const int8_t* b, int32_t* tile, Py_ssize_t rows) noexcept nogil:
    # One or two rows by the variant's short_rows, which may deal the steps
    # to several sets of accumulators where its multiply-add waits on its
    # sum.
    if rows == 1:
        short_rows(a, a_stride, groups, b, tile, 1)
    elif rows == 2:
        short_rows(a, a_stride, groups, b, tile, 2)
    elif rows == 3:
        tile_rows(a, a_stride, groups, b, tile, 3, False)
    elif rows == 4:
        tile_rows(a, a_stride, groups, b, tile, 4, False)
    else:
        tile_rows(a, a_stride, groups, b, tile, 5, False)
    memset(tile + rows * NR, 0, (MR - rows) * NR * sizeof(int32_t))

