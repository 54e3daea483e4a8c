# microkernel_tail for the AVX2 variant, whose tile_rows(a, a_stride, groups, b,
# tile, rows, add) runs up to MR rows in one pass (see
# _short_rows.pxi), with MR = 6.  Included after _short_rows.pxi.

cdef void microkernel_tail(const uint8_t* a, Py_ssize_t a_stride, const uint8_t* tail,
                           Py_ssize_t tail_stride, Py_ssize_t groups, const int8_t* b,
                           int32_t* tile, Py_ssize_t rows) noexcept nogil:
    """Two passes of four rows and the rest (4 + 4, 4 + 3) where the tail's
    rows follow the block's (the driver packs them so): fewer passes over
    the panel than the block and a pass of the tail's rows
    (docs/performance_notes.rst); else the block, then the tail."""
    if tail != a + MR * a_stride or tail_stride != a_stride:
        microkernel_whole(a, a_stride, groups, b, tile)
        if rows == MR + 2:
            tile_rows(tail, tail_stride, groups, b, tile + MR * NR, 2, False)
        else:
            tile_rows(tail, tail_stride, groups, b, tile + MR * NR, 1, False)
        return
    tile_rows(a, a_stride, groups, b, tile, 4, False)
    if rows == MR + 2:
        tile_rows(a + 4 * a_stride, a_stride, groups, b, tile + 4 * NR, 4, False)
    else:
        tile_rows(a + 4 * a_stride, a_stride, groups, b, tile + 4 * NR, 3, False)
