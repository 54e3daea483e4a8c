# cython: language_level=3
"""Quantized GEMM with AVX-512 VNNI: vpdpbusd multiplies 4 unsigned bytes of
A' by 4 signed bytes of B' and adds the four products into an int32 lane."""

from libc.stdint cimport int8_t, int32_t, uint8_t
from libc.string cimport memcpy

from qops.backends.native.kernels._registers cimport in_register
from qops.backends.native.kernels._requantize cimport RowTerms, TileTerms

cdef extern from "<immintrin.h>" nogil:
    ctypedef struct __m512i:
        pass
    __m512i _mm512_setzero_si512()
    __m512i _mm512_loadu_si512(const void* p)
    __m512i _mm512_set1_epi32(int value)
    __m512i _mm512_dpbusd_epi32(__m512i accumulator, __m512i a, __m512i b)
    void _mm512_storeu_si512(void* p, __m512i value)
    ctypedef struct __m512:
        pass
    __m512i _mm512_add_epi32(__m512i a, __m512i b)
    __m512i _mm512_sub_epi32(__m512i a, __m512i b)
    __m512i _mm512_mullo_epi32(__m512i a, __m512i b)
    __m512 _mm512_cvtepi32_ps(__m512i a)
    __m512i _mm512_cvtps_epi32(__m512 a)
    __m512 _mm512_mul_ps(__m512 a, __m512 b)
    __m512 _mm512_max_ps(__m512 a, __m512 b)
    __m512 _mm512_min_ps(__m512 a, __m512 b)
    __m512 _mm512_loadu_ps(const void* p)
    __m512 _mm512_set1_ps(float value)
    __m512i _mm512_packs_epi32(__m512i a, __m512i b)
    __m512i _mm512_packus_epi16(__m512i a, __m512i b)
    __m512i _mm512_permutexvar_epi32(__m512i index, __m512i a)
    __m512i _mm512_setr_epi32(int e0, int e1, int e2, int e3, int e4, int e5, int e6, int e7,
                              int e8, int e9, int e10, int e11, int e12, int e13, int e14,
                              int e15)
    __m512i _mm512_set1_epi8(char value)
    __m512i _mm512_add_epi8(__m512i a, __m512i b)
    __m512i _mm512_xor_si512(__m512i a, __m512i b)
    __m512i _mm512_unpacklo_epi8(__m512i a, __m512i b)
    __m512i _mm512_unpackhi_epi8(__m512i a, __m512i b)
    __m512i _mm512_unpacklo_epi16(__m512i a, __m512i b)
    __m512i _mm512_unpackhi_epi16(__m512i a, __m512i b)
    __m512i _mm512_shuffle_i64x2(__m512i a, __m512i b, int control)

# The tile (MR x NR) and its units: _qgemm_avx512vnni.pxd.


cdef inline __m512i broadcast4(const uint8_t* p) noexcept nogil:
    cdef int value
    memcpy(&value, p, 4)
    return _mm512_set1_epi32(value)


cdef inline void store_sums_row(int32_t* row, __m512i c0, __m512i c1, __m512i c2,
                                __m512i c3) noexcept nogil:
    """A tile row's four vectors of sums (columns 0-15 .. 48-63)."""
    _mm512_storeu_si512(row, c0)
    _mm512_storeu_si512(row + 16, c1)
    _mm512_storeu_si512(row + 32, c2)
    _mm512_storeu_si512(row + 48, c3)


cdef inline __m512i initial(const int32_t* sums, bint add) noexcept nogil:
    """An accumulator's start: the tile's sums where the pass adds to them."""
    return _mm512_loadu_si512(sums) if add else _mm512_setzero_si512()


# tile_rows: its 24 accumulators unrolled from one template.
include "_tile_rows_512.pxi"


cdef inline void short_rows(const uint8_t* a, Py_ssize_t a_stride, Py_ssize_t groups,
                            const int8_t* b, int32_t* tile, int rows) noexcept nogil:
    """One or two rows for microkernel_rows (_short_rows.pxi): tile_rows.
    Their groups dealt in turn to two sets of accumulators, as AVX-VNNI's
    chained_rows does, were no faster here (one row) or slower (two)."""
    tile_rows(a, a_stride, groups, b, tile, rows, False)


include "_short_rows.pxi"


cdef inline void quarters_step(__m512i* c0, __m512i* c1, __m512i* c2, __m512i x, __m512i b0,
                               __m512i b1, __m512i b2, int quarters) noexcept nogil:
    """One row's step of quarter_rows: its first `quarters` accumulators."""
    c0[0] = _mm512_dpbusd_epi32(c0[0], x, b0)
    if quarters > 1:
        c1[0] = _mm512_dpbusd_epi32(c1[0], x, b1)
    if quarters > 2:
        c2[0] = _mm512_dpbusd_epi32(c2[0], x, b2)


cdef inline void quarter_rows(const uint8_t* a, Py_ssize_t a_stride, Py_ssize_t groups,
                              const int8_t* b, int32_t* tile, int quarters) noexcept nogil:
    """Columns 0 .. 16 * quarters - 1 of the panel (quarters 1 to 3) for
    MR rows: `quarters` vectors of the panel per group and as many
    accumulators a row; the tile's other columns zero.  Inlined with
    `quarters` a constant."""
    cdef __m512i zero = _mm512_setzero_si512()
    cdef __m512i c00 = zero, c01 = zero, c02 = zero
    cdef __m512i c10 = zero, c11 = zero, c12 = zero
    cdef __m512i c20 = zero, c21 = zero, c22 = zero
    cdef __m512i c30 = zero, c31 = zero, c32 = zero
    cdef __m512i c40 = zero, c41 = zero, c42 = zero
    cdef __m512i c50 = zero, c51 = zero, c52 = zero
    cdef __m512i b0, b1 = zero, b2 = zero
    cdef Py_ssize_t g
    for g in range(0, 4 * groups, 4):
        b0 = _mm512_loadu_si512(b + 0)
        in_register(b0)
        if quarters > 1:
            b1 = _mm512_loadu_si512(b + 64)
            in_register(b1)
        if quarters > 2:
            b2 = _mm512_loadu_si512(b + 128)
            in_register(b2)
        quarters_step(&c00, &c01, &c02, broadcast4(a + g), b0, b1, b2, quarters)
        quarters_step(&c10, &c11, &c12, broadcast4(a + a_stride + g), b0, b1, b2, quarters)
        quarters_step(&c20, &c21, &c22, broadcast4(a + 2 * a_stride + g), b0, b1, b2, quarters)
        quarters_step(&c30, &c31, &c32, broadcast4(a + 3 * a_stride + g), b0, b1, b2, quarters)
        quarters_step(&c40, &c41, &c42, broadcast4(a + 4 * a_stride + g), b0, b1, b2, quarters)
        quarters_step(&c50, &c51, &c52, broadcast4(a + 5 * a_stride + g), b0, b1, b2, quarters)
        b += NR * 4
    # Unset accumulators are zero: the columns past the quarters.
    store_sums_row(tile + 0 * NR, c00, c01, c02, zero)
    store_sums_row(tile + 1 * NR, c10, c11, c12, zero)
    store_sums_row(tile + 2 * NR, c20, c21, c22, zero)
    store_sums_row(tile + 3 * NR, c30, c31, c32, zero)
    store_sums_row(tile + 4 * NR, c40, c41, c42, zero)
    store_sums_row(tile + 5 * NR, c50, c51, c52, zero)


cdef void microkernel_columns(const uint8_t* a, Py_ssize_t a_stride, Py_ssize_t groups,
                              const int8_t* b, int32_t* tile, Py_ssize_t columns) noexcept nogil:
    """A panel of 48 columns or fewer (an image's last pixels, when a 1 x 1
    convolution runs as filter x image) in one pass over the quarters of the
    panel its columns need: the whole micro-kernel spent a 28 x 28 image's
    last 16 pixels the time of 64."""
    if columns <= 16:
        quarter_rows(a, a_stride, groups, b, tile, 1)
    elif columns <= 32:
        quarter_rows(a, a_stride, groups, b, tile, 2)
    elif columns <= 48:
        quarter_rows(a, a_stride, groups, b, tile, 3)
    else:
        microkernel_whole(a, a_stride, groups, b, tile)


cdef inline void store_half_row(int32_t* row, __m512i c0, __m512i c1) noexcept nogil:
    """Half a tile row's sums: two vectors (columns 0-31 of the half)."""
    _mm512_storeu_si512(row, c0)
    _mm512_storeu_si512(row + 16, c1)


cdef inline void half_rows(const uint8_t* a, Py_ssize_t a_stride, const uint8_t* tail,
                           Py_ssize_t tail_stride, Py_ssize_t groups, const int8_t* b,
                           int32_t* tile, int rows) noexcept nogil:
    """Columns 0-31 of the panel at b (of 32-63 with b 128 bytes on) for
    `rows` (7 or 8) rows of A, MR from a and the rest from tail: two vectors
    of the panel per group, sixteen accumulators.  Inlined with `rows` a
    constant."""
    cdef __m512i c00 = _mm512_setzero_si512(), c01 = _mm512_setzero_si512()
    cdef __m512i c10 = _mm512_setzero_si512(), c11 = _mm512_setzero_si512()
    cdef __m512i c20 = _mm512_setzero_si512(), c21 = _mm512_setzero_si512()
    cdef __m512i c30 = _mm512_setzero_si512(), c31 = _mm512_setzero_si512()
    cdef __m512i c40 = _mm512_setzero_si512(), c41 = _mm512_setzero_si512()
    cdef __m512i c50 = _mm512_setzero_si512(), c51 = _mm512_setzero_si512()
    cdef __m512i c60 = _mm512_setzero_si512(), c61 = _mm512_setzero_si512()
    cdef __m512i c70 = _mm512_setzero_si512(), c71 = _mm512_setzero_si512()
    cdef __m512i b0, b1, x
    cdef Py_ssize_t g
    cdef const uint8_t* a0 = a
    cdef const uint8_t* a1 = a + a_stride
    cdef const uint8_t* a2 = a + 2 * a_stride
    cdef const uint8_t* a3 = a + 3 * a_stride
    cdef const uint8_t* a4 = a + 4 * a_stride
    cdef const uint8_t* a5 = a + 5 * a_stride
    cdef const uint8_t* a6 = tail
    cdef const uint8_t* a7 = tail + tail_stride
    for g in range(0, 4 * groups, 4):
        b0 = _mm512_loadu_si512(b + 0)
        b1 = _mm512_loadu_si512(b + 64)
        in_register(b0)
        in_register(b1)
        x = broadcast4(a0 + g)
        c00 = _mm512_dpbusd_epi32(c00, x, b0)
        c01 = _mm512_dpbusd_epi32(c01, x, b1)
        x = broadcast4(a1 + g)
        c10 = _mm512_dpbusd_epi32(c10, x, b0)
        c11 = _mm512_dpbusd_epi32(c11, x, b1)
        x = broadcast4(a2 + g)
        c20 = _mm512_dpbusd_epi32(c20, x, b0)
        c21 = _mm512_dpbusd_epi32(c21, x, b1)
        x = broadcast4(a3 + g)
        c30 = _mm512_dpbusd_epi32(c30, x, b0)
        c31 = _mm512_dpbusd_epi32(c31, x, b1)
        x = broadcast4(a4 + g)
        c40 = _mm512_dpbusd_epi32(c40, x, b0)
        c41 = _mm512_dpbusd_epi32(c41, x, b1)
        x = broadcast4(a5 + g)
        c50 = _mm512_dpbusd_epi32(c50, x, b0)
        c51 = _mm512_dpbusd_epi32(c51, x, b1)
        x = broadcast4(a6 + g)
        c60 = _mm512_dpbusd_epi32(c60, x, b0)
        c61 = _mm512_dpbusd_epi32(c61, x, b1)
        if rows > 7:
            x = broadcast4(a7 + g)
            c70 = _mm512_dpbusd_epi32(c70, x, b0)
            c71 = _mm512_dpbusd_epi32(c71, x, b1)
        b += NR * 4
    store_half_row(tile + 0 * NR, c00, c01)
    store_half_row(tile + 1 * NR, c10, c11)
    store_half_row(tile + 2 * NR, c20, c21)
    store_half_row(tile + 3 * NR, c30, c31)
    store_half_row(tile + 4 * NR, c40, c41)
    store_half_row(tile + 5 * NR, c50, c51)
    store_half_row(tile + 6 * NR, c60, c61)
    if rows > 7:
        store_half_row(tile + 7 * NR, c70, c71)


cdef void microkernel_tail(const uint8_t* a, Py_ssize_t a_stride, const uint8_t* tail,
                           Py_ssize_t tail_stride, Py_ssize_t groups, const int8_t* b,
                           int32_t* tile, Py_ssize_t rows) noexcept nogil:
    """All MR + 1 or MR + 2 rows in each of two passes over half the panel's
    columns, so that the panel is read once for them all.  Passes of four
    rows over the whole panel (four vectors per sixteen vpdpbusd) each
    streamed it from L2 faster than L2 delivers; these take the
    micro-kernel's time per row."""
    if rows == MR + 2:
        half_rows(a, a_stride, tail, tail_stride, groups, b, tile, MR + 2)
        half_rows(a, a_stride, tail, tail_stride, groups, b + 128, tile + 32, MR + 2)
    else:
        half_rows(a, a_stride, tail, tail_stride, groups, b, tile, MR + 1)
        half_rows(a, a_stride, tail, tail_stride, groups, b + 128, tile + 32, MR + 1)


cdef inline __m512i output_integers(__m512i value, __m512 multiplier, __m512 floor,
                                    __m512 ceiling, __m512i offset, bint clamp) noexcept nogil:
    """Sixteen values (their terms added modulo 2**32) to their output
    integers less low, as int32: float32 product, clamp, then vcvtps2dq,
    which rounds half to even in the default rounding mode (the rule of
    round_half_even).  Without clamp the caller's saturating packs clamp
    (TileTerms.packs_clamp, RowTerms.packs_clamp)."""
    cdef __m512 scaled = _mm512_mul_ps(_mm512_cvtepi32_ps(value), multiplier)
    if clamp:
        scaled = _mm512_min_ps(_mm512_max_ps(scaled, floor), ceiling)
    return _mm512_add_epi32(_mm512_cvtps_epi32(scaled), offset)


cdef inline void store_row(uint8_t* target, __m512i q0, __m512i q1, __m512i q2, __m512i q3,
                           __m512i low) noexcept nogil:
    """A row's 64 output integers less low (four quarters of int32) as bytes:
    packed to int16 in pairs and the pairs to bytes (saturating packs, exact:
    the values lie in [0, high - low], or saturate to it when the clamp is
    left to them).  The packs work within 128-bit lanes, so lane L of the
    bytes holds dwords L of quarters 0, 1, 2, 3 in turn; one vpermd puts the
    row in column order, and adding low gives the output bytes."""
    cdef __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15)
    _mm512_storeu_si512(target, _mm512_add_epi8(_mm512_permutexvar_epi32(
        order, _mm512_packus_epi16(_mm512_packs_epi32(q0, q1), _mm512_packs_epi32(q2, q3))),
        low))


cdef struct QuarterTerms:
    # A tile's column terms for sixteen of its columns, loaded once for all
    # its rows (stores through a uint8_t pointer, which may alias anything,
    # had the compiler load them again for each row).
    __m512i column
    __m512i column_zero
    __m512 multiplier
    __m512 floor
    __m512 ceiling
    __m512i offset


cdef inline QuarterTerms quarter_terms(const TileTerms* terms, Py_ssize_t c, int column_zero,
                                       bint clamp) noexcept nogil:
    """The column terms of columns c .. c + 15 that the form uses
    (column_zero left unset when it does not)."""
    cdef QuarterTerms quarter
    quarter.column = _mm512_loadu_si512(terms.column + c)
    if column_zero == COLUMN_ZERO_EACH:
        quarter.column_zero = _mm512_loadu_si512(terms.column_zero + c)
    quarter.multiplier = _mm512_loadu_ps(terms.multiplier + c)
    if clamp:
        quarter.floor = _mm512_loadu_ps(terms.floor + c)
        quarter.ceiling = _mm512_loadu_ps(terms.ceiling + c)
    else:
        # Unread (output_integers clamps only with clamp), but passed.
        quarter.floor = _mm512_set1_ps(0.0)
        quarter.ceiling = quarter.floor
    quarter.offset = _mm512_loadu_si512(terms.offset + c)
    return quarter


cdef inline __m512i requantize_quarter(const int32_t* sums, const QuarterTerms* quarter,
                                       __m512i row_term, int column_zero,
                                       bint clamp) noexcept nogil:
    """Sixteen sums of a row (columns c .. c + 15 of the tile, their terms
    in quarter) by TileTerms' rule, the product with the row term taken as
    column_zero says (_tile_shortcuts.pxi)."""
    cdef __m512i value = _mm512_add_epi32(_mm512_loadu_si512(sums), quarter.column)
    if column_zero == COLUMN_ZERO_EACH:
        value = _mm512_sub_epi32(value, _mm512_mullo_epi32(quarter.column_zero, row_term))
    elif column_zero == COLUMN_ZERO_ONE:
        value = _mm512_sub_epi32(value, row_term)
    return output_integers(value, quarter.multiplier, quarter.floor, quarter.ceiling,
                           quarter.offset, clamp)


cdef inline void requantize_rows(const int32_t* tile, const TileTerms* terms, uint8_t* result,
                                 Py_ssize_t pitch, int column_zero, bint clamp) noexcept nogil:
    """Each row's 64 values in four quarters, stored by store_row."""
    cdef __m512i low = _mm512_set1_epi8(<char>terms.low)
    cdef QuarterTerms q0 = quarter_terms(terms, 0, column_zero, clamp)
    cdef QuarterTerms q1 = quarter_terms(terms, 16, column_zero, clamp)
    cdef QuarterTerms q2 = quarter_terms(terms, 32, column_zero, clamp)
    cdef QuarterTerms q3 = quarter_terms(terms, 48, column_zero, clamp)
    cdef __m512i row_term
    cdef const int32_t* sums
    cdef Py_ssize_t i
    for i in range(MR):
        row_term = _mm512_set1_epi32(<int>terms.row_term[i])
        sums = tile + i * NR
        store_row(result + i * pitch,
                  requantize_quarter(sums, &q0, row_term, column_zero, clamp),
                  requantize_quarter(sums + 16, &q1, row_term, column_zero, clamp),
                  requantize_quarter(sums + 32, &q2, row_term, column_zero, clamp),
                  requantize_quarter(sums + 48, &q3, row_term, column_zero, clamp), low)


cdef inline void rows_by_row_terms(const int32_t* tile, const RowTerms* terms, uint8_t* result,
                                   Py_ssize_t pitch, bint one_row_zero,
                                   bint clamp) noexcept nogil:
    """Each row's 64 values by its own terms (RowTerms' rule; inlined with
    the shortcuts constant: _tile_shortcuts.pxi), stored by store_row.  With
    one_row_zero the products row_zero * column_sum are the tile's four
    vectors, taken once."""
    cdef __m512i low = _mm512_set1_epi8(<char>terms.low)
    cdef __m512i term, row_zero, offset
    cdef __m512i quarters[4]
    cdef __m512i shares[4]
    cdef __m512 multiplier, floor, ceiling
    cdef const int32_t* sums
    cdef Py_ssize_t i, j
    for j in range(4):
        shares[j] = _mm512_loadu_si512(terms.column_sum + 16 * j)
    if one_row_zero:
        row_zero = _mm512_set1_epi32(<int>terms.row_zero[0])
        for j in range(4):
            shares[j] = _mm512_mullo_epi32(shares[j], row_zero)
    for i in range(MR):
        term = _mm512_set1_epi32(<int>terms.term[i])
        if not one_row_zero:
            row_zero = _mm512_set1_epi32(<int>terms.row_zero[i])
        multiplier = _mm512_set1_ps(terms.multiplier[i])
        if clamp:
            floor = _mm512_set1_ps(terms.floor[i])
            ceiling = _mm512_set1_ps(terms.ceiling[i])
        else:
            # Unread (output_integers clamps only with clamp), but passed.
            floor = _mm512_set1_ps(0.0)
            ceiling = floor
        offset = _mm512_set1_epi32(terms.offset[i])
        sums = tile + i * NR
        for j in range(4):
            quarters[j] = output_integers(
                _mm512_sub_epi32(_mm512_add_epi32(_mm512_loadu_si512(sums + 16 * j), term),
                                 shares[j] if one_row_zero
                                 else _mm512_mullo_epi32(shares[j], row_zero)),
                multiplier, floor, ceiling, offset, clamp)
        store_row(result + i * pitch, quarters[0], quarters[1], quarters[2], quarters[3], low)


include "_tile_shortcuts.pxi"


cdef void pack_groups(const uint8_t* rows, Py_ssize_t ldb, Py_ssize_t count, uint8_t flip,
                      int8_t* target, int32_t* sums) noexcept nogil:
    """64 columns of 4 * count rows into count groups of a panel: column c's
    four bytes of a group at target[4c..4c+3]; sums[c] += their sums as
    signed bytes.

    Byte then word interleaves put each column's four bytes together, but
    within 128-bit lanes: lane L of q0..q3 holds columns 16L + 0-3, 4-7,
    8-11 and 12-15.  Two rounds of lane shuffles make the four 64-byte
    stores columns 0-15, 16-31, 32-47 and 48-63.  A column's sum is one
    vpdpbusd of its quad with bytes of 1, into registers stored once."""
    cdef __m512i mask = _mm512_set1_epi8(<char>flip)
    cdef __m512i ones = _mm512_set1_epi8(1)
    cdef __m512i sums0 = _mm512_loadu_si512(sums), sums1 = _mm512_loadu_si512(sums + 16)
    cdef __m512i sums2 = _mm512_loadu_si512(sums + 32), sums3 = _mm512_loadu_si512(sums + 48)
    cdef __m512i a0, a1, a2, a3, low01, high01, low23, high23, q0, q1, q2, q3
    cdef __m512i t0, t1, t2, t3, s0, s1, s2, s3
    cdef Py_ssize_t g
    for g in range(count):
        a0 = _mm512_xor_si512(_mm512_loadu_si512(rows), mask)
        a1 = _mm512_xor_si512(_mm512_loadu_si512(rows + ldb), mask)
        a2 = _mm512_xor_si512(_mm512_loadu_si512(rows + 2 * ldb), mask)
        a3 = _mm512_xor_si512(_mm512_loadu_si512(rows + 3 * ldb), mask)
        low01 = _mm512_unpacklo_epi8(a0, a1)
        high01 = _mm512_unpackhi_epi8(a0, a1)
        low23 = _mm512_unpacklo_epi8(a2, a3)
        high23 = _mm512_unpackhi_epi8(a2, a3)
        q0 = _mm512_unpacklo_epi16(low01, low23)
        q1 = _mm512_unpackhi_epi16(low01, low23)
        q2 = _mm512_unpacklo_epi16(high01, high23)
        q3 = _mm512_unpackhi_epi16(high01, high23)
        # Lanes (0, 1) and (2, 3) of each pair, then every other lane of those.
        t0 = _mm512_shuffle_i64x2(q0, q1, 0x44)
        t1 = _mm512_shuffle_i64x2(q2, q3, 0x44)
        t2 = _mm512_shuffle_i64x2(q0, q1, 0xEE)
        t3 = _mm512_shuffle_i64x2(q2, q3, 0xEE)
        s0 = _mm512_shuffle_i64x2(t0, t1, 0x88)
        s1 = _mm512_shuffle_i64x2(t0, t1, 0xDD)
        s2 = _mm512_shuffle_i64x2(t2, t3, 0x88)
        s3 = _mm512_shuffle_i64x2(t2, t3, 0xDD)
        _mm512_storeu_si512(target, s0)
        _mm512_storeu_si512(target + 64, s1)
        _mm512_storeu_si512(target + 128, s2)
        _mm512_storeu_si512(target + 192, s3)
        sums0 = _mm512_dpbusd_epi32(sums0, ones, s0)
        sums1 = _mm512_dpbusd_epi32(sums1, ones, s1)
        sums2 = _mm512_dpbusd_epi32(sums2, ones, s2)
        sums3 = _mm512_dpbusd_epi32(sums3, ones, s3)
        rows += 4 * ldb
        target += 4 * NR
    _mm512_storeu_si512(sums, sums0)
    _mm512_storeu_si512(sums + 16, sums1)
    _mm512_storeu_si512(sums + 32, sums2)
    _mm512_storeu_si512(sums + 48, sums3)


include "_narrow_panels.pxi"
include "_pack_pair_twice.pxi"
include "_depthwise_avx512.pxi"
include "_qgemm.pxi"
