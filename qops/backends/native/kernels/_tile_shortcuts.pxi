# -- the tile epilogue's shortcuts -------------------------------------------------
# Included by the variants whose requantize_tile is a vector loop
# (requantize_rows(tile, terms, result, pitch, column_zero, clamp), defined
# before this file, column_zero one of the COLUMN_ZERO_* forms): each
# combination of TileTerms' shortcuts is a call with constant flags, so each
# inlined copy drops the steps they turn off.

cdef enum:
    COLUMN_ZERO_NONE = 0     # every column_zero is 0: no product
    COLUMN_ZERO_EACH = 1     # column_zero[c] * row_term
    COLUMN_ZERO_ONE = 2      # every column_zero is 1: row_term itself


cdef void requantize_tile(const int32_t* tile, const TileTerms* terms, uint8_t* result,
                          Py_ssize_t pitch) noexcept nogil:
    if terms.no_column_zero:
        if terms.packs_clamp:
            requantize_rows(tile, terms, result, pitch, COLUMN_ZERO_NONE, False)
        else:
            requantize_rows(tile, terms, result, pitch, COLUMN_ZERO_NONE, True)
    elif terms.unit_column_zero:
        if terms.packs_clamp:
            requantize_rows(tile, terms, result, pitch, COLUMN_ZERO_ONE, False)
        else:
            requantize_rows(tile, terms, result, pitch, COLUMN_ZERO_ONE, True)
    elif terms.packs_clamp:
        requantize_rows(tile, terms, result, pitch, COLUMN_ZERO_EACH, False)
    else:
        requantize_rows(tile, terms, result, pitch, COLUMN_ZERO_EACH, True)
