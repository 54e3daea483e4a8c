# microkernel_tail and microkernel_add for the variants without the ymm
# tile_rows (portable, AMX), by their own passes: the block above, then the
# tail's rows through microkernel_rows into a tile of their own (a pass of
# those rows on the portable variant, a whole tile on AMX), as a short last
# block runs; a pass into a tile of its own, then added.  Included after the
# variant's microkernel_rows.

from libc.string cimport memcpy


cdef void microkernel_tail(const uint8_t* a, Py_ssize_t a_stride, const uint8_t* tail,
                           Py_ssize_t tail_stride, Py_ssize_t groups, const int8_t* b,
                           int32_t* tile, Py_ssize_t rows) noexcept nogil:
    cdef int32_t rest[MR * NR]
    microkernel_whole(a, a_stride, groups, b, tile)
    microkernel_rows(tail, tail_stride, groups, b, rest, rows - MR)
    memcpy(tile + MR * NR, rest, (rows - MR) * NR * sizeof(int32_t))


cdef void microkernel_add(const uint8_t* a, Py_ssize_t a_stride, Py_ssize_t groups,
                          const int8_t* b, int32_t* tile) noexcept nogil:
    cdef int32_t pass_sums[MR * NR]
    cdef Py_ssize_t i
    microkernel_whole(a, a_stride, groups, b, pass_sums)
    for i in range(MR * NR):
        tile[i] += pass_sums[i]
