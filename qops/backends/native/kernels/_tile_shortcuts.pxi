# -- the tile epilogue's shortcuts -------------------------------------------------
# Included by the variants whose requantize_tile is a vector loop
# (requantize_rows(tile, terms, result, pitch, column_zero, clamp), defined
# before this file): each combination of TileTerms' shortcuts is a call
# with constant flags, so each inlined copy drops the steps they turn off.

cdef void requantize_tile(const int32_t* tile, const TileTerms* terms, uint8_t* result,
                          Py_ssize_t pitch) noexcept nogil:
    if terms.no_column_zero and terms.packs_clamp:
        requantize_rows(tile, terms, result, pitch, False, False)
    elif terms.no_column_zero:
        requantize_rows(tile, terms, result, pitch, False, True)
    elif terms.packs_clamp:
        requantize_rows(tile, terms, result, pitch, True, False)
    else:
        requantize_rows(tile, terms, result, pitch, True, True)
