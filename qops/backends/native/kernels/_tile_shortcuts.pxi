# Generated from _tile_shortcuts.pxi.tp by tools/generate_kernels.py: edit the template.
# -- the tile epilogue's shortcuts -------------------------------------------------
# Included by the variants whose requantize_tile is a vector loop
# (requantize_rows(tile, terms, result, pitch, column_zero, clamp), defined
# before this file, column_zero one of the COLUMN_ZERO_* forms): each
# combination of TileTerms' shortcuts is a call with constant flags, so each
# inlined copy drops the steps they turn off.  microkernel_requantize below
# takes the variant's tile_rows(a, a_stride, groups, b, tile, rows, add) too,
# and requantize_tile_rows and microkernel_requantize_rows its
# rows_by_row_terms(tile, terms, result, pitch, one_row_zero, clamp)
# (RowTerms' rule, with or without each of its shortcuts).

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


# microkernel_requantize: tile_rows and requantize_rows in one function, so
# that the sums go from the accumulators to the epilogue in registers, for
# the two forms of the usual operands (weights without a zero point, or one
# zero point for all of B; the packs clamping).  Each is a function of its
# own that the compiler may not inline (not_inlined, _variant.pxd): one
# function holding several forms lost their constant flags, and a form
# inlined into run_unit had its accumulators spilled to the stack inside the
# loop (both were slower than the two steps).  The other forms take the two
# steps.

cdef not_inlined tile_requantized_without_column_zero(
        const uint8_t* a, Py_ssize_t a_stride, Py_ssize_t groups, const int8_t* b,
        const TileTerms* terms, uint8_t* result, Py_ssize_t pitch) noexcept nogil:
    cdef int32_t sums[MR * NR]
    tile_rows(a, a_stride, groups, b, sums, MR, False)
    requantize_rows(sums, terms, result, pitch, COLUMN_ZERO_NONE, False)


cdef not_inlined tile_requantized_with_one_column_zero(
        const uint8_t* a, Py_ssize_t a_stride, Py_ssize_t groups, const int8_t* b,
        const TileTerms* terms, uint8_t* result, Py_ssize_t pitch) noexcept nogil:
    cdef int32_t sums[MR * NR]
    tile_rows(a, a_stride, groups, b, sums, MR, False)
    requantize_rows(sums, terms, result, pitch, COLUMN_ZERO_ONE, False)


cdef void microkernel_requantize(const uint8_t* a, Py_ssize_t a_stride, Py_ssize_t groups,
                                 const int8_t* b, const TileTerms* terms, uint8_t* result,
                                 Py_ssize_t pitch) noexcept nogil:
    if terms.packs_clamp and terms.no_column_zero:
        tile_requantized_without_column_zero(a, a_stride, groups, b, terms, result, pitch)
    elif terms.packs_clamp and terms.unit_column_zero:
        tile_requantized_with_one_column_zero(a, a_stride, groups, b, terms, result, pitch)
    else:
        microkernel_then_requantize(a, a_stride, groups, b, terms, result, pitch)


cdef inline void requantize_rows_by_row_terms(const int32_t* tile, const RowTerms* terms,
                                              uint8_t* result, Py_ssize_t pitch) noexcept nogil:
    """The variant's rows_by_row_terms in the form of RowTerms' shortcuts."""
    if terms.one_row_zero and terms.packs_clamp:
        rows_by_row_terms(tile, terms, result, pitch, True, False)
    elif terms.one_row_zero:
        rows_by_row_terms(tile, terms, result, pitch, True, True)
    elif terms.packs_clamp:
        rows_by_row_terms(tile, terms, result, pitch, False, False)
    else:
        rows_by_row_terms(tile, terms, result, pitch, False, True)


cdef void requantize_tile_rows(const int32_t* tile, const RowTerms* terms, uint8_t* result,
                               Py_ssize_t pitch) noexcept nogil:
    requantize_rows_by_row_terms(tile, terms, result, pitch)


# microkernel_requantize_rows, as microkernel_requantize above: the sums
# stay in registers from the micro-kernel to the per-row epilogue, in a
# function of its own for the usual form (one zero point of the filter, the
# packs clamping: a 1 x 1 convolution's int8 filter read as A') and in one
# for the others.

cdef not_inlined tile_requantized_by_one_row_zero(
        const uint8_t* a, Py_ssize_t a_stride, Py_ssize_t groups, const int8_t* b,
        const RowTerms* terms, uint8_t* result, Py_ssize_t pitch) noexcept nogil:
    cdef int32_t sums[MR * NR]
    tile_rows(a, a_stride, groups, b, sums, MR, False)
    rows_by_row_terms(sums, terms, result, pitch, True, False)


cdef not_inlined tile_requantized_by_rows(
        const uint8_t* a, Py_ssize_t a_stride, Py_ssize_t groups, const int8_t* b,
        const RowTerms* terms, uint8_t* result, Py_ssize_t pitch) noexcept nogil:
    cdef int32_t sums[MR * NR]
    tile_rows(a, a_stride, groups, b, sums, MR, False)
    requantize_rows_by_row_terms(sums, terms, result, pitch)


cdef void microkernel_requantize_rows(const uint8_t* a, Py_ssize_t a_stride, Py_ssize_t groups,
                                      const int8_t* b, const RowTerms* terms, uint8_t* result,
                                      Py_ssize_t pitch) noexcept nogil:
    if terms.one_row_zero and terms.packs_clamp:
        tile_requantized_by_one_row_zero(a, a_stride, groups, b, terms, result, pitch)
    else:
        tile_requantized_by_rows(a, a_stride, groups, b, terms, result, pitch)
