# tile_rows for the variants whose micro-tile is 6 x 16 int32 sums in two
# ymm a row (AVX2, AVX-VNNI).  Each step of the loop reads four bytes of a
# row of A (a pair of int16 for AVX2, a quad of bytes for AVX-VNNI), the
# panel's 64 bytes (columns 0-7 and 8-15), and takes one multiply_add(c,
# x, b) per accumulator; the variant defines multiply_add and
# STEPS_PER_GROUP (steps per group of four k) before including this file.


cdef inline __m256i broadcast_step(const uint8_t* row, Py_ssize_t step) noexcept nogil:
    """Step `step`'s four bytes of a packed row of A in every lane: a
    broadcast load, which issues on a load port."""
    cdef int value
    memcpy(&value, row + 4 * step, 4)
    return _mm256_set1_epi32(value)


cdef inline void store_sums_row(int32_t* row, __m256i c0, __m256i c1) noexcept nogil:
    """A tile row's two vectors of sums (columns 0-7, 8-15)."""
    _mm256_storeu_si256(row, c0)
    _mm256_storeu_si256(row + 8, c1)


cdef inline __m256i initial(const int32_t* sums, bint add) noexcept nogil:
    """An accumulator's start: the tile's sums where the pass adds to them."""
    return _mm256_loadu_si256(sums) if add else _mm256_setzero_si256()


# tile_rows: its 12 accumulators unrolled from one template.
include "_tile_rows_256.pxi"


cdef inline void chained_rows(const uint8_t* a, Py_ssize_t a_stride, Py_ssize_t groups,
                              const int8_t* b, int32_t* tile, int rows) noexcept nogil:
    """The first `rows` (1 or 2) rows of a micro-tile, as tile_rows, with
    the steps dealt in turn to three sets of accumulators, added at the
    end (sums modulo 2**32, in any order alike).  For a variant whose
    multiply_add is one instruction on its accumulator (vpdpbusd, 5 cycles
    from sum to sum, two a cycle), a row's two chains alone wait out that
    latency at each step; with three sets a pass of one row runs at about
    the rate the panel's loads allow.  Inlined with `rows` constant."""
    cdef __m256i c00 = _mm256_setzero_si256(), c01 = _mm256_setzero_si256()
    cdef __m256i c10 = _mm256_setzero_si256(), c11 = _mm256_setzero_si256()
    cdef __m256i d00 = _mm256_setzero_si256(), d01 = _mm256_setzero_si256()
    cdef __m256i d10 = _mm256_setzero_si256(), d11 = _mm256_setzero_si256()
    cdef __m256i e00 = _mm256_setzero_si256(), e01 = _mm256_setzero_si256()
    cdef __m256i e10 = _mm256_setzero_si256(), e11 = _mm256_setzero_si256()
    cdef __m256i b0, b1, x
    cdef const uint8_t* a0 = a
    cdef const uint8_t* a1 = a + a_stride
    cdef Py_ssize_t steps = STEPS_PER_GROUP * groups
    cdef Py_ssize_t step = 0
    while step + 3 <= steps:
        b0 = _mm256_loadu_si256(b)
        b1 = _mm256_loadu_si256(b + 32)
        x = broadcast_step(a0, step)
        c00 = multiply_add(c00, x, b0)
        c01 = multiply_add(c01, x, b1)
        if rows > 1:
            x = broadcast_step(a1, step)
            c10 = multiply_add(c10, x, b0)
            c11 = multiply_add(c11, x, b1)
        b0 = _mm256_loadu_si256(b + 64)
        b1 = _mm256_loadu_si256(b + 96)
        x = broadcast_step(a0, step + 1)
        d00 = multiply_add(d00, x, b0)
        d01 = multiply_add(d01, x, b1)
        if rows > 1:
            x = broadcast_step(a1, step + 1)
            d10 = multiply_add(d10, x, b0)
            d11 = multiply_add(d11, x, b1)
        b0 = _mm256_loadu_si256(b + 128)
        b1 = _mm256_loadu_si256(b + 160)
        x = broadcast_step(a0, step + 2)
        e00 = multiply_add(e00, x, b0)
        e01 = multiply_add(e01, x, b1)
        if rows > 1:
            x = broadcast_step(a1, step + 2)
            e10 = multiply_add(e10, x, b0)
            e11 = multiply_add(e11, x, b1)
        b += 192
        step = step + 3
    while step < steps:
        b0 = _mm256_loadu_si256(b)
        b1 = _mm256_loadu_si256(b + 32)
        x = broadcast_step(a0, step)
        c00 = multiply_add(c00, x, b0)
        c01 = multiply_add(c01, x, b1)
        if rows > 1:
            x = broadcast_step(a1, step)
            c10 = multiply_add(c10, x, b0)
            c11 = multiply_add(c11, x, b1)
        b += 64
        step = step + 1
    store_sums_row(tile, _mm256_add_epi32(_mm256_add_epi32(c00, d00), e00),
                   _mm256_add_epi32(_mm256_add_epi32(c01, d01), e01))
    if rows > 1:
        store_sums_row(tile + NR, _mm256_add_epi32(_mm256_add_epi32(c10, d10), e10),
                       _mm256_add_epi32(_mm256_add_epi32(c11, d11), e11))
