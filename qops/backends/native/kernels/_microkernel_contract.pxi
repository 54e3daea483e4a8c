# The micro-kernel's contract (_variant.pxd) from the four forms each
# variant defines before it includes _qgemm.pxi: microkernel_whole (MR rows
# by NR columns), microkernel_add (the same, added to the tile's sums),
# microkernel_rows (1 to MR - 1 rows, the tile's others zero) and
# microkernel_columns (a last panel of fewer than NR columns).  Shared
# includes give the usual ones (_short_rows.pxi from a variant's tile_rows,
# _whole_panels.pxi, _tail_as_tiles.pxi).  Inlined into each caller
# (always_inlined, _variant.pxd), where the cases its arguments fix fold
# away.


cdef always_inlined microkernel(const uint8_t* a, Py_ssize_t a_stride, Py_ssize_t groups,
                                const int8_t* b, int32_t* tile, Py_ssize_t rows,
                                Py_ssize_t columns, bint add) noexcept nogil:
    if rows < MR:
        microkernel_rows(a, a_stride, groups, b, tile, rows)
    elif add:
        microkernel_add(a, a_stride, groups, b, tile)
    elif columns < NR:
        microkernel_columns(a, a_stride, groups, b, tile, columns)
    else:
        microkernel_whole(a, a_stride, groups, b, tile)
