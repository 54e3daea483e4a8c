# The tile epilogue of the variants whose micro-tile is 6 x 16 int32 sums
# in two ymm a row (AVX2, AVX-VNNI): requantize_tile by vector intrinsics
# and requantize_tile_rows with microkernel_requantize_rows (which the
# driver takes where the variant's ROW_TILES is 1, AVX-VNNI's), through
# _tile_shortcuts.pxi from requantize_rows and rows_by_row_terms.
# Included after _ymm.pxi, _tile_rows_ymm.pxi and the variant's constants.

cdef struct HalfTerms:
    # A tile's column terms for eight of its columns, loaded once for all
    # its rows: stored through a uint8_t pointer (which may alias anything),
    # each row's results made the compiler load them again for the next.
    __m256i column
    __m256i column_zero
    __m256 multiplier
    __m256 floor
    __m256 ceiling


cdef inline HalfTerms half_terms(const TileTerms* terms, Py_ssize_t c, int column_zero,
                                 bint clamp) noexcept nogil:
    """The column terms of columns c .. c + 7 that the form uses (the others
    left unset)."""
    cdef HalfTerms half
    half.column = _mm256_loadu_si256(terms.column + c)
    if column_zero == COLUMN_ZERO_EACH:
        half.column_zero = _mm256_loadu_si256(terms.column_zero + c)
    half.multiplier = _mm256_loadu_ps(terms.multiplier + c)
    if clamp:
        half.floor = _mm256_loadu_ps(terms.floor + c)
        half.ceiling = _mm256_loadu_ps(terms.ceiling + c)
    return half


cdef inline __m256i requantize_half(const int32_t* sums, const HalfTerms* half,
                                    __m256i row_term, int column_zero,
                                    bint clamp) noexcept nogil:
    """Eight sums of a row (columns c .. c + 7 of the tile, their terms in
    half) to their rounded values, as int32 (the output integers less the
    zero points): the terms modulo 2**32, float32 product, clamp, then
    vcvtps2dq, which rounds half to even in the default rounding mode (the
    rule of round_half_even).  column_zero says how the product with the row
    term is taken (_tile_shortcuts.pxi); without clamp the caller's
    saturating packs clamp (TileTerms.packs_clamp)."""
    cdef __m256i value = _mm256_add_epi32(_mm256_loadu_si256(sums), half.column)
    if column_zero == COLUMN_ZERO_EACH:
        value = _mm256_sub_epi32(value, _mm256_mullo_epi32(half.column_zero, row_term))
    elif column_zero == COLUMN_ZERO_ONE:
        value = _mm256_sub_epi32(value, row_term)
    cdef __m256 scaled = _mm256_mul_ps(_mm256_cvtepi32_ps(value), half.multiplier)
    if clamp:
        scaled = _mm256_min_ps(_mm256_max_ps(scaled, half.floor), half.ceiling)
    return _mm256_cvtps_epi32(scaled)


cdef inline void requantize_rows(const int32_t* tile, const TileTerms* terms, uint8_t* result,
                                 Py_ssize_t pitch, int column_zero, bint clamp) noexcept nogil:
    """The tile's rows two at a time: each row's 16 values packed to int16,
    the offsets added (zero point less low, in [0, 255], saturating: a value
    that saturates int16 is past the output's range either way, so this is
    the int32 sum's result), and both rows packed to bytes (saturating
    packs, exact: the values lie in [0, high - low], or saturate to it when
    the clamp is left to them).  The packs put dwords of the two rows in the
    order 0 4 1 5 | 2 6 3 7, which one cross-lane permute puts back as row
    a | row b.  The offsets as int16, in the order of the first packs, cost
    one packs per tile and one addition per row pair, against two additions
    per row in int32."""
    cdef __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)
    cdef __m256i low = _mm256_set1_epi8(<char>terms.low)
    cdef __m256i offsets = _mm256_packs_epi32(_mm256_loadu_si256(terms.offset),
                                              _mm256_loadu_si256(terms.offset + 8))
    cdef HalfTerms left = half_terms(terms, 0, column_zero, clamp)
    cdef HalfTerms right = half_terms(terms, 8, column_zero, clamp)
    cdef __m256i first, second, row_term, both
    cdef bint add_low = terms.low != 0
    cdef Py_ssize_t i
    for i in range(0, MR, 2):
        row_term = _mm256_set1_epi32(<int>terms.row_term[i])
        first = _mm256_adds_epi16(_mm256_packs_epi32(
            requantize_half(tile + i * NR, &left, row_term, column_zero, clamp),
            requantize_half(tile + i * NR + 8, &right, row_term, column_zero, clamp)), offsets)
        row_term = _mm256_set1_epi32(<int>terms.row_term[i + 1])
        second = _mm256_adds_epi16(_mm256_packs_epi32(
            requantize_half(tile + (i + 1) * NR, &left, row_term, column_zero, clamp),
            requantize_half(tile + (i + 1) * NR + 8, &right, row_term, column_zero, clamp)),
            offsets)
        both = _mm256_permutevar8x32_epi32(_mm256_packus_epi16(first, second), order)
        if add_low:
            both = _mm256_add_epi8(both, low)
        _mm_storeu_si128(result + i * pitch, _mm256_castsi256_si128(both))
        _mm_storeu_si128(result + (i + 1) * pitch, _mm256_extracti128_si256(both, 1))


cdef inline __m256i packed_row_by_row_terms(const int32_t* sums, const RowTerms* terms,
                                            Py_ssize_t i, __m256i left_share,
                                            __m256i right_share, bint one_row_zero,
                                            bint clamp) noexcept nogil:
    """Row i's 16 values by its own terms (RowTerms' rule), less low, as
    int16 in the order of packs_epi32: the terms modulo 2**32, float32
    product, clamp (unless the packs clamp: RowTerms.packs_clamp),
    vcvtps2dq (half to even), then the offset (in [0, 255]) added
    saturating, as requantize_rows does.  left_share and right_share are
    the column sums of the tile's columns 0-7 and 8-15, or with
    one_row_zero those times the one row_zero."""
    cdef __m256i term = _mm256_set1_epi32(<int>terms.term[i])
    cdef __m256i row_zero
    cdef __m256 multiplier = _mm256_set1_ps(terms.multiplier[i])
    cdef __m256 floor, ceiling
    cdef __m256i left = _mm256_add_epi32(_mm256_loadu_si256(sums), term)
    cdef __m256i right = _mm256_add_epi32(_mm256_loadu_si256(sums + 8), term)
    if one_row_zero:
        left = _mm256_sub_epi32(left, left_share)
        right = _mm256_sub_epi32(right, right_share)
    else:
        row_zero = _mm256_set1_epi32(<int>terms.row_zero[i])
        left = _mm256_sub_epi32(left, _mm256_mullo_epi32(left_share, row_zero))
        right = _mm256_sub_epi32(right, _mm256_mullo_epi32(right_share, row_zero))
    cdef __m256 left_scaled = _mm256_mul_ps(_mm256_cvtepi32_ps(left), multiplier)
    cdef __m256 right_scaled = _mm256_mul_ps(_mm256_cvtepi32_ps(right), multiplier)
    if clamp:
        floor = _mm256_set1_ps(terms.floor[i])
        ceiling = _mm256_set1_ps(terms.ceiling[i])
        left_scaled = _mm256_min_ps(_mm256_max_ps(left_scaled, floor), ceiling)
        right_scaled = _mm256_min_ps(_mm256_max_ps(right_scaled, floor), ceiling)
    return _mm256_adds_epi16(_mm256_packs_epi32(_mm256_cvtps_epi32(left_scaled),
                                                _mm256_cvtps_epi32(right_scaled)),
                             _mm256_set1_epi16(<short>terms.offset[i]))


cdef inline void rows_by_row_terms(const int32_t* tile, const RowTerms* terms, uint8_t* result,
                                   Py_ssize_t pitch, bint one_row_zero,
                                   bint clamp) noexcept nogil:
    """The tile's rows two at a time by their own terms (inlined with the
    shortcuts constant: _tile_shortcuts.pxi), packed and stored as
    requantize_rows packs and stores them."""
    cdef __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)
    cdef __m256i low = _mm256_set1_epi8(<char>terms.low)
    cdef __m256i left_share = _mm256_loadu_si256(terms.column_sum)
    cdef __m256i right_share = _mm256_loadu_si256(terms.column_sum + 8)
    cdef __m256i row_zero, both
    cdef Py_ssize_t i
    if one_row_zero:
        row_zero = _mm256_set1_epi32(<int>terms.row_zero[0])
        left_share = _mm256_mullo_epi32(left_share, row_zero)
        right_share = _mm256_mullo_epi32(right_share, row_zero)
    for i in range(0, MR, 2):
        both = _mm256_add_epi8(_mm256_permutevar8x32_epi32(_mm256_packus_epi16(
            packed_row_by_row_terms(tile + i * NR, terms, i, left_share, right_share,
                                    one_row_zero, clamp),
            packed_row_by_row_terms(tile + (i + 1) * NR, terms, i + 1, left_share, right_share,
                                    one_row_zero, clamp)), order), low)
        _mm_storeu_si128(result + i * pitch, _mm256_castsi256_si128(both))
        _mm_storeu_si128(result + (i + 1) * pitch, _mm256_extracti128_si256(both, 1))


include "_tile_shortcuts.pxi"
