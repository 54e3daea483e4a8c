/* qops_portable.h: the portable variant's kernels (the C behind
   _qgemm_portable.pyx): the micro-kernel, its packer and tile epilogue, in
   SSE2 intrinsics where the compiler targets SSE2 and in plain loops where
   not (a choice the preprocessor makes, not Cython).

   Kept as a real header, not a string in the .pyx, so that it is compiled
   and checked as C (tests/backends/native/kernels/test_c_headers.py, and
   test_portable_fallback.py, which builds it both ways).  Included by the
   portable variant only. */
#ifndef QOPS_PORTABLE_H
#define QOPS_PORTABLE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#define QOPS_PORTABLE_SSE2 1
/* The micro-kernel and the tile epilogue inlined wherever they are
   called, into qops_portable_tile_requantized among others (the tests
   define it empty, to call them from outside the module). */
#ifndef QOPS_PORTABLE_INLINE
#define QOPS_PORTABLE_INLINE static inline __attribute__((always_inline))
#endif

/* Per pair of k: B' columns 0-3 and 4-7 (int16 pairs), each of the
   first `rows` rows' pair of A in every lane (a load: the block holds
   each pair four times, A_SPREAD), two pmaddwd + paddd a row; lane c of
   a row's accumulators is column c's sum.  Inlined with `rows` constant,
   each copy keeps only its rows' accumulators: six for the micro-kernel,
   fewer for a short block or a tail's rows (qops_portable_microkernel_rows). */
QOPS_PORTABLE_INLINE void qops_portable_tile_rows(const uint8_t* a, ptrdiff_t a_stride,
                                                  ptrdiff_t groups, const int8_t* b,
                                                  int32_t* tile, int rows) {
    __m128i c00 = _mm_setzero_si128(), c01 = _mm_setzero_si128();
    __m128i c10 = _mm_setzero_si128(), c11 = _mm_setzero_si128();
    __m128i c20 = _mm_setzero_si128(), c21 = _mm_setzero_si128();
    __m128i c30 = _mm_setzero_si128(), c31 = _mm_setzero_si128();
    __m128i c40 = _mm_setzero_si128(), c41 = _mm_setzero_si128();
    __m128i c50 = _mm_setzero_si128(), c51 = _mm_setzero_si128();
    const __m128i* a0 = (const __m128i*)a;
    const __m128i* a1 = (const __m128i*)(a + a_stride);
    const __m128i* a2 = (const __m128i*)(a + 2 * a_stride);
    const __m128i* a3 = (const __m128i*)(a + 3 * a_stride);
    const __m128i* a4 = (const __m128i*)(a + 4 * a_stride);
    const __m128i* a5 = (const __m128i*)(a + 5 * a_stride);
    ptrdiff_t pair;
    for (pair = 0; pair < 2 * groups; pair++) {
        __m128i b0 = _mm_loadu_si128((const __m128i*)b);
        __m128i b1 = _mm_loadu_si128((const __m128i*)(b + 16));
        __m128i x = _mm_loadu_si128(a0 + pair);
        c00 = _mm_add_epi32(c00, _mm_madd_epi16(x, b0));
        c01 = _mm_add_epi32(c01, _mm_madd_epi16(x, b1));
        if (rows > 1) {
            x = _mm_loadu_si128(a1 + pair);
            c10 = _mm_add_epi32(c10, _mm_madd_epi16(x, b0));
            c11 = _mm_add_epi32(c11, _mm_madd_epi16(x, b1));
        }
        if (rows > 2) {
            x = _mm_loadu_si128(a2 + pair);
            c20 = _mm_add_epi32(c20, _mm_madd_epi16(x, b0));
            c21 = _mm_add_epi32(c21, _mm_madd_epi16(x, b1));
        }
        if (rows > 3) {
            x = _mm_loadu_si128(a3 + pair);
            c30 = _mm_add_epi32(c30, _mm_madd_epi16(x, b0));
            c31 = _mm_add_epi32(c31, _mm_madd_epi16(x, b1));
        }
        if (rows > 4) {
            x = _mm_loadu_si128(a4 + pair);
            c40 = _mm_add_epi32(c40, _mm_madd_epi16(x, b0));
            c41 = _mm_add_epi32(c41, _mm_madd_epi16(x, b1));
        }
        if (rows > 5) {
            x = _mm_loadu_si128(a5 + pair);
            c50 = _mm_add_epi32(c50, _mm_madd_epi16(x, b0));
            c51 = _mm_add_epi32(c51, _mm_madd_epi16(x, b1));
        }
        b += 32;
    }
    _mm_storeu_si128((__m128i*)(tile + 0), c00);
    _mm_storeu_si128((__m128i*)(tile + 4), c01);
    _mm_storeu_si128((__m128i*)(tile + 8), c10);
    _mm_storeu_si128((__m128i*)(tile + 12), c11);
    _mm_storeu_si128((__m128i*)(tile + 16), c20);
    _mm_storeu_si128((__m128i*)(tile + 20), c21);
    _mm_storeu_si128((__m128i*)(tile + 24), c30);
    _mm_storeu_si128((__m128i*)(tile + 28), c31);
    _mm_storeu_si128((__m128i*)(tile + 32), c40);
    _mm_storeu_si128((__m128i*)(tile + 36), c41);
    _mm_storeu_si128((__m128i*)(tile + 40), c50);
    _mm_storeu_si128((__m128i*)(tile + 44), c51);
}

QOPS_PORTABLE_INLINE void qops_portable_microkernel(const uint8_t* a, ptrdiff_t a_stride,
                                                    ptrdiff_t groups, const int8_t* b,
                                                    int32_t* tile) {
    qops_portable_tile_rows(a, a_stride, groups, b, tile, 6);
}

/* The first `rows` (1 to 5; any other count, the whole tile) rows of a
   block at the cost of their rows, not a whole micro-tile's pass (the
   tail of 128 rows: two past 21 blocks).  The tile's other rows are zero, as tile_rows
   stores them. */
static void qops_portable_microkernel_rows(const uint8_t* a, ptrdiff_t a_stride,
                                           ptrdiff_t groups, const int8_t* b,
                                           int32_t* tile, ptrdiff_t rows) {
    switch (rows) {
    case 1: qops_portable_tile_rows(a, a_stride, groups, b, tile, 1); break;
    case 2: qops_portable_tile_rows(a, a_stride, groups, b, tile, 2); break;
    case 3: qops_portable_tile_rows(a, a_stride, groups, b, tile, 3); break;
    case 4: qops_portable_tile_rows(a, a_stride, groups, b, tile, 4); break;
    case 5: qops_portable_tile_rows(a, a_stride, groups, b, tile, 5); break;
    default: qops_portable_tile_rows(a, a_stride, groups, b, tile, 6); break;
    }
}

/* Eight bytes of a row of B, xor flip, as int16: each byte unpacked
   beside itself and shifted down arithmetically (SSE2 has no pmovsxbw). */
static inline __m128i qops_portable_widened(const uint8_t* row, __m128i flip) {
    __m128i bytes = _mm_xor_si128(_mm_loadl_epi64((const __m128i*)row), flip);
    return _mm_srai_epi16(_mm_unpacklo_epi8(bytes, bytes), 8);
}

/* 8 columns of 4 * count rows into count groups: per pair of rows, the
   rows' int16 values interleaved column by column (columns 0-3, then
   4-7); the column sums gathered in registers and added once. */
static void qops_portable_pack_groups(const uint8_t* rows, ptrdiff_t ldb, ptrdiff_t count,
                                      uint8_t flip, int8_t* target, int32_t* sums) {
    __m128i mask = _mm_set1_epi8((char)flip), ones = _mm_set1_epi16(1);
    __m128i low_sums = _mm_loadu_si128((const __m128i*)sums);
    __m128i high_sums = _mm_loadu_si128((const __m128i*)(sums + 4));
    ptrdiff_t g;
    for (g = 0; g < count; g++, rows += 4 * ldb, target += 64) {
        __m128i k0 = qops_portable_widened(rows, mask);
        __m128i k1 = qops_portable_widened(rows + ldb, mask);
        __m128i k2 = qops_portable_widened(rows + 2 * ldb, mask);
        __m128i k3 = qops_portable_widened(rows + 3 * ldb, mask);
        __m128i low01 = _mm_unpacklo_epi16(k0, k1), high01 = _mm_unpackhi_epi16(k0, k1);
        __m128i low23 = _mm_unpacklo_epi16(k2, k3), high23 = _mm_unpackhi_epi16(k2, k3);
        _mm_storeu_si128((__m128i*)target, low01);
        _mm_storeu_si128((__m128i*)(target + 16), high01);
        _mm_storeu_si128((__m128i*)(target + 32), low23);
        _mm_storeu_si128((__m128i*)(target + 48), high23);
        low_sums = _mm_add_epi32(low_sums, _mm_add_epi32(_mm_madd_epi16(low01, ones),
                                                         _mm_madd_epi16(low23, ones)));
        high_sums = _mm_add_epi32(high_sums, _mm_add_epi32(_mm_madd_epi16(high01, ones),
                                                           _mm_madd_epi16(high23, ones)));
    }
    _mm_storeu_si128((__m128i*)sums, low_sums);
    _mm_storeu_si128((__m128i*)(sums + 4), high_sums);
}

/* Four values of a row (their terms added modulo 2**32) to their output
   integers less low: float32 product, clamp, then cvtps2dq, rounding
   half to even in the default mode. */
static inline __m128i qops_portable_quarter(__m128i value, __m128 multiplier, __m128 floor,
                                            __m128 ceiling, __m128i offset, int clamp) {
    __m128 scaled = _mm_mul_ps(_mm_cvtepi32_ps(value), multiplier);
    if (clamp)
        scaled = _mm_min_ps(_mm_max_ps(scaled, floor), ceiling);
    return _mm_add_epi32(_mm_cvtps_epi32(scaled), offset);
}

/* A whole 6 x 8 tile into bytes (row i at result + i * pitch) by
   TileTerms' rule where it needs no 32-bit products (SSE2 has no 32-bit
   multiply): no zero point of B, or one for every column, whose product
   with the row's sums is then row_term[i] itself (row_term NULL: none).
   Both halves of a row packed with saturation (exact: the values lie in
   [0, 255], or saturate to it when the clamp is left to the packs).  The
   column terms are loaded once for the six rows. */
QOPS_PORTABLE_INLINE void qops_portable_requantize_tile(
        const int32_t* tile, const uint32_t* column, const uint32_t* row_term,
        const float* multiplier, const float* floor, const float* ceiling,
        const int32_t* offset, int32_t low, int clamp, uint8_t* result, ptrdiff_t pitch) {
    __m128i base = _mm_set1_epi8((char)low);
    __m128i column_low = _mm_loadu_si128((const __m128i*)column);
    __m128i column_high = _mm_loadu_si128((const __m128i*)(column + 4));
    __m128 multiplier_low = _mm_loadu_ps(multiplier);
    __m128 multiplier_high = _mm_loadu_ps(multiplier + 4);
    __m128 floor_low = clamp ? _mm_loadu_ps(floor) : _mm_setzero_ps();
    __m128 floor_high = clamp ? _mm_loadu_ps(floor + 4) : _mm_setzero_ps();
    __m128 ceiling_low = clamp ? _mm_loadu_ps(ceiling) : _mm_setzero_ps();
    __m128 ceiling_high = clamp ? _mm_loadu_ps(ceiling + 4) : _mm_setzero_ps();
    __m128i offset_low = _mm_loadu_si128((const __m128i*)offset);
    __m128i offset_high = _mm_loadu_si128((const __m128i*)(offset + 4));
    int i;
    for (i = 0; i < 6; i++) {
        __m128i term = _mm_set1_epi32(row_term != NULL ? (int)row_term[i] : 0);
        __m128i value_low = _mm_sub_epi32(
            _mm_add_epi32(_mm_loadu_si128((const __m128i*)(tile + 8 * i)), column_low), term);
        __m128i value_high = _mm_sub_epi32(
            _mm_add_epi32(_mm_loadu_si128((const __m128i*)(tile + 8 * i + 4)), column_high),
            term);
        __m128i words = _mm_packs_epi32(
            qops_portable_quarter(value_low, multiplier_low, floor_low, ceiling_low,
                                  offset_low, clamp),
            qops_portable_quarter(value_high, multiplier_high, floor_high, ceiling_high,
                                  offset_high, clamp));
        _mm_storel_epi64((__m128i*)(result + i * pitch),
                         _mm_add_epi8(_mm_packus_epi16(words, words), base));
    }
}
#else
#define QOPS_PORTABLE_SSE2 0

static void qops_portable_microkernel(const uint8_t* a, ptrdiff_t a_stride,
                                      ptrdiff_t groups, const int8_t* b, int32_t* tile) {
    const int16_t* panel = (const int16_t*)b;
    ptrdiff_t pair, r, c;
    memset(tile, 0, 6 * 8 * sizeof(int32_t));
    for (pair = 0; pair < 2 * groups; pair++, panel += 16)
        for (r = 0; r < 6; r++) {
            const int16_t* x = (const int16_t*)(a + r * a_stride) + 8 * pair;
            for (c = 0; c < 8; c++)
                tile[r * 8 + c] += x[0] * panel[2 * c] + x[1] * panel[2 * c + 1];
        }
}

/* The whole tile: the packed block is zero past its rows. */
static void qops_portable_microkernel_rows(const uint8_t* a, ptrdiff_t a_stride,
                                           ptrdiff_t groups, const int8_t* b,
                                           int32_t* tile, ptrdiff_t rows) {
    (void)rows;
    qops_portable_microkernel(a, a_stride, groups, b, tile);
}

static void qops_portable_pack_groups(const uint8_t* rows, ptrdiff_t ldb, ptrdiff_t count,
                                      uint8_t flip, int8_t* target, int32_t* sums) {
    ptrdiff_t g, c;
    for (g = 0; g < count; g++, rows += 4 * ldb, target += 64) {
        int16_t* panel = (int16_t*)target;
        for (c = 0; c < 8; c++) {
            int16_t v0 = (int8_t)(rows[c] ^ flip), v1 = (int8_t)(rows[ldb + c] ^ flip);
            int16_t v2 = (int8_t)(rows[2 * ldb + c] ^ flip);
            int16_t v3 = (int8_t)(rows[3 * ldb + c] ^ flip);
            panel[2 * c] = v0;
            panel[2 * c + 1] = v1;
            panel[16 + 2 * c] = v2;
            panel[16 + 2 * c + 1] = v3;
            sums[c] += v0 + v1 + v2 + v3;
        }
    }
}

static void qops_portable_requantize_tile(const int32_t* tile, const uint32_t* column,
                                          const uint32_t* row_term,
                                          const float* multiplier, const float* floor,
                                          const float* ceiling, const int32_t* offset,
                                          int32_t low, int clamp, uint8_t* result,
                                          ptrdiff_t pitch) {
    (void)tile; (void)column; (void)row_term; (void)multiplier; (void)floor; (void)ceiling;
    (void)offset; (void)low; (void)clamp; (void)result; (void)pitch;
}
#endif

/* The micro-kernel, then its tile requantized with the packs clamping,
   in one function: with SSE2 both are inlined here, and the sums go
   from the accumulators to the epilogue in registers rather than
   through the tile.
   Not inlined into its caller, whose other live values would push the
   accumulators out of registers.  Without SSE2 the tile epilogue above
   is an empty stand-in: microkernel_requantize calls this only where
   QOPS_PORTABLE_SSE2 is 1. */
#if defined(__GNUC__)
__attribute__((noinline))
#endif
static void qops_portable_tile_requantized(const uint8_t* a, ptrdiff_t a_stride,
                                           ptrdiff_t groups, const int8_t* b,
                                           const uint32_t* column, const uint32_t* row_term,
                                           const float* multiplier, const int32_t* offset,
                                           int32_t low, uint8_t* result, ptrdiff_t pitch) {
    int32_t tile[6 * 8];
    qops_portable_microkernel(a, a_stride, groups, b, tile);
    qops_portable_requantize_tile(tile, column, row_term, multiplier, NULL, NULL, offset,
                                  low, 0, result, pitch);
}

#endif /* QOPS_PORTABLE_H */
