# The requantization rule, once, for convolution and matrix multiply:
#     y = saturate(round_half_even(float32(float32(acc) * multiplier)) + zero_point)
# The multiplier, float32(float32(scale_a * scale_b) / output_scale), comes
# from qops.reference.requantization_multiplier (computed once per call, not
# per element).  The build never uses -ffast-math, so each float operation
# below rounds once in float32, as the NumPy reference does.
#
# Forms of the same rule: `requantize` takes one int64 sum, for sums that
# may pass int32; the line forms take a line of int32 sums with their
# zero-point corrections, in loops the compiler vectorizes, for sums the
# caller has proved fit int32: `requantize_line` with per-column vectors,
# `requantize_sums` with one term, `requantize_row_line` with the row's
# bias, multiplier and zero point.  `exact_line` and `exact_row_line` give
# the values of the first and last unrequantized, for the raw epilogue.

from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t

# Rounding (_rounding.pxd) happens after clamping to the integers
# [low - zp, high - zp], which gives the same result as rounding first and
# keeps |value| under 2**17, inside the rounding trick's range.
from qops.backends.native.kernels._rounding cimport round_half_even


cdef inline int32_t clamped_round(float scaled, float floor_value,
                                  float ceiling_value) noexcept nogil:
    """round_half_even(scaled) within [floor_value, ceiling_value] (integers,
    the output range less the zero point): the step every form shares."""
    scaled = floor_value if scaled < floor_value else scaled
    scaled = ceiling_value if scaled > ceiling_value else scaled
    return <int32_t>round_half_even(scaled)


cdef inline int32_t requantize(int64_t accumulator, float multiplier, int32_t zero_point,
                               int32_t low, int32_t high) noexcept nogil:
    return clamped_round((<float>accumulator) * multiplier, <float>(low - zero_point),
                         <float>(high - zero_point)) + zero_point


cdef enum:
    # Values per pass of a line: the integer-and-float pass writes int32 to a
    # local array, a second pass narrows it to bytes.  Kept apart, each loop
    # has one element width, which the compiler vectorizes a full register
    # wide (8 int32 per ymm): fused with the byte stores, it picked vectors
    # as wide in bytes and ran a 16-value line at a quarter of the width.
    LINE_CHUNK = 64


cdef inline void narrow_line(const int32_t* values, uint8_t* result,
                             Py_ssize_t count) noexcept nogil:
    """The low byte of each value (the output integer as uint8 or int8).
    Blocks of a fixed 16, which the compiler vectorizes at that length, and
    the last few alone: lines are often short (a pooling's 49 or 56
    outputs), and a loop of unknown length ran them element by element."""
    cdef Py_ssize_t block, c, blocks = count // 16
    for block in range(blocks):
        for c in range(16):
            result[block * 16 + c] = <uint8_t>values[block * 16 + c]
    for c in range(blocks * 16, count):
        result[c] = <uint8_t>values[c]


cdef inline int32_t line_value(int32_t sum, uint32_t column_term, int32_t column_zero,
                               uint32_t column_sum, uint32_t row_term,
                               uint32_t row_zero) noexcept nogil:
    """sum + column_term - column_zero * row_term - row_zero * column_sum,
    modulo 2**32: the exact value, where the caller has proved it fits int32
    (the wrapped sum is then that value, whatever the terms on the way)."""
    return <int32_t>(<uint32_t>sum + column_term - (<uint32_t>column_zero) * row_term
                     - row_zero * column_sum)


cdef inline int32_t row_line_value(int32_t sum, uint32_t term, uint32_t row_zero,
                                   uint32_t column_sum) noexcept nogil:
    """sum + term - row_zero * column_sum modulo 2**32: line_value where the
    bias and the column zero point's share are the row's one term."""
    return <int32_t>(<uint32_t>sum + term - row_zero * column_sum)


cdef inline void requantize_line(const int32_t* sums, uint8_t* result, Py_ssize_t count,
                                 const uint32_t* column_term, const int32_t* column_zero,
                                 const uint32_t* column_sum, uint32_t row_term,
                                 uint32_t row_zero, const float* multiplier,
                                 const int32_t* out_zero, int32_t low,
                                 int32_t high) noexcept nogil:
    """result[c] <- requantize(sums[c] + column_term[c] - column_zero[c] * row_term
                               - row_zero * column_sum[c]) for c < count.

    The terms are added modulo 2**32: when the caller has proved that the true
    value fits int32, the wrapped sum is that value, whatever the size of the
    terms on the way.  int32 converts to float32 with the same single rounding
    as the int64 of `requantize`.  Bytes of the result are the low byte of the
    output integer (uint8 or int8 alike).
    """
    cdef int32_t values[LINE_CHUNK]
    cdef Py_ssize_t first = 0, c, n
    cdef int32_t value, zero
    while first < count:
        n = min(<Py_ssize_t>LINE_CHUNK, count - first)
        for c in range(first, first + n):
            value = line_value(sums[c], column_term[c], column_zero[c], column_sum[c], row_term,
                               row_zero)
            zero = out_zero[c]
            values[c - first] = clamped_round((<float>value) * multiplier[c],
                                              <float>(low - zero), <float>(high - zero)) + zero
        narrow_line(values, result + first, n)
        first = first + n


cdef inline void requantize_sums(const int32_t* sums, uint8_t* result, Py_ssize_t count,
                                 uint32_t term, float multiplier, int32_t zero_point,
                                 int32_t low, int32_t high) noexcept nogil:
    """result[c] <- requantize(sums[c] + term) for c < count, one multiplier and
    zero point for the line; as `requantize_line`, for values that fit int32."""
    cdef int32_t values[LINE_CHUNK]
    cdef Py_ssize_t first = 0, c, n
    cdef float floor_value = <float>(low - zero_point)
    cdef float ceiling_value = <float>(high - zero_point)
    while first < count:
        n = min(<Py_ssize_t>LINE_CHUNK, count - first)
        for c in range(first, first + n):
            values[c - first] = clamped_round(
                (<float>(<int32_t>(<uint32_t>sums[c] + term))) * multiplier, floor_value,
                ceiling_value) + zero_point
        narrow_line(values, result + first, n)
        first = first + n


cdef inline void requantize_row_line(const int32_t* sums, uint8_t* result, Py_ssize_t count,
                                     uint32_t term, uint32_t row_zero,
                                     const uint32_t* column_sum, float multiplier,
                                     int32_t zero_point, int32_t low, int32_t high) noexcept nogil:
    """result[c] <- requantize(sums[c] + term - row_zero * column_sum[c]) for
    c < count: a line whose bias, multiplier and output zero point are the
    row's (`term` holds the bias and the row's share of the zero-point
    corrections); as `requantize_line`, for values that fit int32."""
    cdef int32_t values[LINE_CHUNK]
    cdef Py_ssize_t first = 0, c, n
    cdef float floor_value = <float>(low - zero_point)
    cdef float ceiling_value = <float>(high - zero_point)
    while first < count:
        n = min(<Py_ssize_t>LINE_CHUNK, count - first)
        for c in range(first, first + n):
            values[c - first] = clamped_round(
                (<float>row_line_value(sums[c], term, row_zero, column_sum[c])) * multiplier,
                floor_value, ceiling_value) + zero_point
        narrow_line(values, result + first, n)
        first = first + n


cdef inline void exact_line(const int32_t* sums, int32_t* values, Py_ssize_t count,
                            const uint32_t* column_term, const int32_t* column_zero,
                            const uint32_t* column_sum, uint32_t row_term,
                            uint32_t row_zero) noexcept nogil:
    """values[c] <- sums[c] + column_term[c] - column_zero[c] * row_term
    - row_zero * column_sum[c], the value `requantize_line` requantizes,
    unrequantized (a raw epilogue's); modulo 2**32, for values that fit int32."""
    cdef Py_ssize_t c
    for c in range(count):
        values[c] = line_value(sums[c], column_term[c], column_zero[c], column_sum[c], row_term,
                               row_zero)


cdef inline void exact_row_line(const int32_t* sums, int32_t* values, Py_ssize_t count,
                                uint32_t term, uint32_t row_zero,
                                const uint32_t* column_sum) noexcept nogil:
    """values[c] <- sums[c] + term - row_zero * column_sum[c], the value
    `requantize_row_line` requantizes, unrequantized."""
    cdef Py_ssize_t c
    for c in range(count):
        values[c] = row_line_value(sums[c], term, row_zero, column_sum[c])


cdef struct TileTerms:
    # A micro-tile's epilogue when one zero point of A serves every row and
    # the multipliers and output zero points are one per column (or one for
    # all), from the unit's column vectors (each at the tile's first column):
    #     value[r, c] = S[r, c] + column[c] - column_zero[c] * row_term[r]
    # modulo 2**32, with column = bias - a_zp' * colsum(B') and row_term =
    # rowsum(A') - K * a_zp'; then the rule above, clamped to [floor[c],
    # ceiling[c]] (low and high less the column's zero point) before rounding.
    # offset[c] is the zero point less low: a rounded value plus offset is the
    # output integer less low, in [0, high - low], and its byte plus low
    # (modulo 256) is the output byte, uint8 or int8 alike.
    const uint32_t* column
    const uint32_t* column_zero
    const float* multiplier
    const float* floor
    const float* ceiling
    const int32_t* offset
    const uint32_t* row_term        # one per row of the tile
    int32_t low
    # Shortcuts a vectorized rule may take (the plain rule needs none):
    # every column_zero is 0, so the column_zero * row_term product is 0;
    # every column_zero is 1, so the product is row_term itself (one zero
    # point of B for every column, which the driver then multiplies into
    # row_term: no 32-bit multiply per value, the slowest step of the rule);
    # and the saturating packs of the rounded value plus offset clamp
    # exactly as the float clamp does (packs_clamp_exactly).
    bint no_column_zero
    bint unit_column_zero
    bint packs_clamp


cdef inline bint packs_clamp_exactly(double largest_scaled, int32_t low,
                                     int32_t high) noexcept nogil:
    """Whether saturating packs (int32 to int16 to a byte) may stand in for
    the float clamp: the outputs fill a byte (high - low = 255), and every
    |sum * multiplier| is at most largest_scaled < 2**30, so the float
    product (rounded at most up to 2**30), its conversion and the zero point
    stay exact in int32 and only the packs saturate."""
    return high - low == 255 and largest_scaled < 1073741824.0


cdef inline void requantize_tile_plain(const int32_t* tile, Py_ssize_t rows, Py_ssize_t columns,
                                       const TileTerms* terms, uint8_t* result,
                                       Py_ssize_t pitch) noexcept nogil:
    """result[i * pitch + c] <- the output byte of tile[i * columns + c], for
    every row and column of a whole micro-tile (TileTerms' rule)."""
    cdef Py_ssize_t i, c
    cdef int32_t value
    for i in range(rows):
        for c in range(columns):
            value = <int32_t>(<uint32_t>tile[i * columns + c] + terms.column[c]
                              - terms.column_zero[c] * terms.row_term[i])
            result[i * pitch + c] = <uint8_t>(
                clamped_round((<float>value) * terms.multiplier[c], terms.floor[c],
                              terms.ceiling[c]) + terms.offset[c] + terms.low)


cdef struct RowTerms:
    # A micro-tile's epilogue when the requantization belongs to the rows (a
    # pointwise convolution computed as filter x image, whose rows are output
    # channels): per row i of the tile
    #     value[i, c] = S[i, c] + term[i] - row_zero[i] * column_sum[c]
    # modulo 2**32 (term: the row's bias less its column zero-point share),
    # then the rule above with the row's multiplier, clamped to [floor[i],
    # ceiling[i]]; offset[i] and low as in TileTerms.
    const uint32_t* term
    const uint32_t* row_zero
    const float* multiplier
    const float* floor
    const float* ceiling
    const int32_t* offset
    const uint32_t* column_sum      # one per column of the tile
    int32_t low
    # Shortcuts a vectorized rule may take (the plain rule needs neither):
    # every row_zero is row_zero[0] (one zero point of the filter, or the
    # 128 that reads an int8 filter as A'), so that row_zero * column_sum is
    # one vector per tile rather than a 32-bit product per value; and the
    # saturating packs clamp exactly as the float clamp does
    # (packs_clamp_exactly).
    bint one_row_zero
    bint packs_clamp


cdef inline void requantize_tile_rows_plain(const int32_t* tile, Py_ssize_t rows,
                                            Py_ssize_t columns, const RowTerms* terms,
                                            uint8_t* result, Py_ssize_t pitch) noexcept nogil:
    """result[i * pitch + c] <- the output byte of tile[i * columns + c], for
    every row and column of a whole micro-tile (RowTerms' rule)."""
    cdef Py_ssize_t i, c
    cdef int32_t value
    for i in range(rows):
        for c in range(columns):
            value = <int32_t>(<uint32_t>tile[i * columns + c] + terms.term[i]
                              - terms.row_zero[i] * terms.column_sum[c])
            result[i * pitch + c] = <uint8_t>(
                clamped_round((<float>value) * terms.multiplier[i], terms.floor[i],
                              terms.ceiling[i]) + terms.offset[i] + terms.low)
