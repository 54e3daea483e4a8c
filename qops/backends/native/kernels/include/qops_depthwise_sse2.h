/* Generated from qops_depthwise.h.tp by tools/generate_kernels.py: edit the template. */
/* qops_depthwise_sse2.h: the SSE2 depthwise pair kernel (the C behind
   _depthwise_sse2.pxi; the design is described there).

   Kept as a real header, not a string in the .pxi, so that it is compiled
   and checked as C (tests/backends/native/kernels/test_c_headers.py).
   Included by the portable variant (_qgemm_portable.pyx); SSE2 is x86-64's
   baseline, and without __SSE2__ only stubs are defined, so that the
   driver compiles (DEPTHWISE_PAIRS is 0 there). */
#ifndef QOPS_DEPTHWISE_SSE2_H
#define QOPS_DEPTHWISE_SSE2_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
typedef __m128i qops_dw_int;
typedef __m128 qops_dw_float;
#define qops_dw_broadcast(value) _mm_set1_epi32(value)
#define qops_dw_broadcast_float(value) _mm_set1_ps(value)

/* The term loop (the sums of four output rows), as at every width. */
#include "qops_depthwise_terms_sse2.h"

/* One vector of each of ROWS output rows for a filter shape fixed when
   compiled (paired taps, dilation 1; plane row i feeds output row r with
   kernel row i - r * STRIDE_H): constant trip counts, so GCC unrolls
   the loops and drops the kernel-row tests, as in the AVX2 kernel. */
#define QOPS_DEPTHWISE_ROWS_FIXED_SSE2(NAME, ROWS, SPAN, COLUMNS, STRIDE_H, KERNEL_H)    \
static inline __attribute__((always_inline)) void NAME(                                \
    const int16_t* a, ptrdiff_t pitch, const int32_t* weights, int32_t start,          \
    __m128i* sums) {                                                                   \
    __m128i s[ROWS];                                                                   \
    _Pragma("GCC unroll 4")                                                            \
    for (int r = 0; r < (ROWS); r++) s[r] = _mm_set1_epi32(start);                    \
    _Pragma("GCC unroll 16")                                                           \
    for (int i = 0; i < (SPAN); i++) {                                                 \
        _Pragma("GCC unroll 4")                                                        \
        for (int c = 0; c < (COLUMNS); c++) {                                          \
            const __m128i x = _mm_loadu_si128((const __m128i*)(a + i * pitch + 2 * c)); \
            _Pragma("GCC unroll 4")                                                    \
            for (int r = 0; r < (ROWS); r++) {                                         \
                const int kh = i - r * (STRIDE_H);                                     \
                if (kh >= 0 && kh < (KERNEL_H)) {                                      \
                    const __m128i w = _mm_set1_epi32(weights[kh * (COLUMNS) + c]);     \
                    s[r] = qops_depthwise_term_sse2(s[r], x, w);                       \
                }                                                                      \
            }                                                                          \
        }                                                                              \
    }                                                                                  \
    _Pragma("GCC unroll 4")                                                            \
    for (int r = 0; r < (ROWS); r++) sums[r] = s[r];                                   \
}
QOPS_DEPTHWISE_ROWS_FIXED_SSE2(qops_depthwise_rows2_3x3s1_sse2, 2, 4, 2, 1, 3)
QOPS_DEPTHWISE_ROWS_FIXED_SSE2(qops_depthwise_rows2_3x3s2_sse2, 2, 5, 2, 2, 3)
/* The output integers of 4 sums (bias included), as `requantize` computes
   them, each masked to its low byte. */
static inline __m128i qops_depthwise_requantize_sse2(__m128i sums, __m128 multiplier,
                                                     __m128 floor_value,
                                                     __m128 ceiling_value,
                                                     __m128i zero_point) {
    __m128 value = _mm_mul_ps(_mm_cvtepi32_ps(sums), multiplier);
    value = _mm_min_ps(_mm_max_ps(value, floor_value), ceiling_value);
    return _mm_and_si128(_mm_add_epi32(_mm_cvtps_epi32(value), zero_point),
                         _mm_set1_epi32(0xFF));
}

/* The low count (<= 8) bytes of `bytes` to target. */
static inline void qops_depthwise_store_low_sse2(__m128i bytes, uint8_t* target,
                                                 ptrdiff_t count) {
    if (count >= 8) {
        _mm_storel_epi64((__m128i*)target, bytes);
    } else {
        uint8_t line[16];
        _mm_storeu_si128((__m128i*)line, bytes);
        memcpy(target, line, (size_t)count);
    }
}

/* count (<= 8) outputs of a stride-1 block: even lane j is output 2j,
   odd lane j output 2j + 1. */
static inline void qops_depthwise_store_pairs_sse2(__m128i even, __m128i odd,
                                                   __m128 multiplier, __m128 floor_value,
                                                   __m128 ceiling_value,
                                                   __m128i zero_point, uint8_t* target,
                                                   ptrdiff_t count) {
    const __m128i e = qops_depthwise_requantize_sse2(even, multiplier, floor_value,
                                                    ceiling_value, zero_point);
    const __m128i o = qops_depthwise_requantize_sse2(odd, multiplier, floor_value,
                                                    ceiling_value, zero_point);
    /* Bytes 0-255 in int32 lanes: e0 o0 e1 o1 and e2 o2 e3 o3 packed to words,
       then to bytes, without saturating. */
    const __m128i words = _mm_packs_epi32(_mm_unpacklo_epi32(e, o),
                                          _mm_unpackhi_epi32(e, o));
    qops_depthwise_store_low_sse2(_mm_packus_epi16(words, words), target, count);
}

/* count (<= 4) outputs of a stride-2 block. */
static inline void qops_depthwise_store_block_sse2(__m128i sums, __m128 multiplier,
                                                   __m128 floor_value,
                                                   __m128 ceiling_value,
                                                   __m128i zero_point, uint8_t* target,
                                                   ptrdiff_t count) {
    const __m128i values = qops_depthwise_requantize_sse2(sums, multiplier, floor_value,
                                                         ceiling_value, zero_point);
    const __m128i words = _mm_packs_epi32(values, values);
    const uint32_t line = (uint32_t)_mm_cvtsi128_si32(_mm_packus_epi16(words, words));
    memcpy(target, &line, (size_t)(count < 4 ? count : 4));
}

/* round_half_even(sums * multiplier), for sums whose scaled value the
   driver has bounded well inside int32: no float clamp, the saturating
   packs clamp to the output type instead. */
static inline __m128i qops_depthwise_round_sse2(__m128i sums, __m128 multiplier) {
    return _mm_cvtps_epi32(_mm_mul_ps(_mm_cvtepi32_ps(sums), multiplier));
}

/* 8 rounded values, saturated to int16 in output order, plus the zero
   point (int32 lanes), saturated to bytes and stored as count (<= 8)
   outputs.  The zero point is added to the 8 words at once, after the
   first saturation, which changes no output: a value that saturates
   int16 is still beyond the byte range after adding |zero point| <= 255,
   on the side where the exact sum is. */
static inline void qops_depthwise_store_words_sse2(__m128i words, __m128i zero_point,
                                                   int is_signed, uint8_t* target,
                                                   ptrdiff_t count) {
    const __m128i centred = _mm_adds_epi16(words, _mm_packs_epi32(zero_point, zero_point));
    qops_depthwise_store_low_sse2(is_signed ? _mm_packs_epi16(centred, centred)
                                            : _mm_packus_epi16(centred, centred),
                                  target, count);
}

/* qops_depthwise_store_pairs_sse2 for bounded sums. */
static inline void qops_depthwise_store_pairs_packed_sse2(__m128i even, __m128i odd,
                                                          __m128 multiplier,
                                                          __m128i zero_point,
                                                          int is_signed, uint8_t* target,
                                                          ptrdiff_t count) {
    const __m128i e = qops_depthwise_round_sse2(even, multiplier);
    const __m128i o = qops_depthwise_round_sse2(odd, multiplier);
    qops_depthwise_store_words_sse2(
        _mm_packs_epi32(_mm_unpacklo_epi32(e, o), _mm_unpackhi_epi32(e, o)),
        zero_point, is_signed, target, count);
}

/* Two stride-2 blocks side by side (first, then second: count <= 8
   outputs) for bounded sums. */
static inline void qops_depthwise_store_blocks_packed_sse2(__m128i first, __m128i second,
                                                           __m128 multiplier,
                                                           __m128i zero_point,
                                                           int is_signed, uint8_t* target,
                                                           ptrdiff_t count) {
    qops_depthwise_store_words_sse2(
        _mm_packs_epi32(qops_depthwise_round_sse2(first, multiplier),
                        qops_depthwise_round_sse2(second, multiplier)),
        zero_point, is_signed, target, count);
}

/* A whole output plane of a fixed shape's two-row loop ROWS2 and bounded
   sums, 8 outputs of four rows per pass; a row's last pass ends at its
   last output, overlapping the one before it, so that it stores whole
   8-byte lines.  The block form and the output type are constants of
   each copy of the body, not tests in its loop.  Four rows per pass: two,
   though they spill fewer sums, are slower. */
#define QOPS_DEPTHWISE_PLANE_FIXED_SSE2(NAME, ROWS2, STRIDE_H)                           \
static inline __attribute__((always_inline)) void NAME##_body(                         \
    const int16_t* plane, ptrdiff_t pitch, const int32_t* weights, ptrdiff_t out_h,    \
    ptrdiff_t out_w, const int interleaved, int32_t bias, float multiplier,            \
    int32_t zero_point, const int is_signed, uint8_t* out) {                           \
    const __m128 scale = _mm_set1_ps(multiplier);                                      \
    const __m128i zero = _mm_set1_epi32(zero_point);                                   \
    const ptrdiff_t lower = 2 * (STRIDE_H) * pitch;                                    \
    for (ptrdiff_t oh = 0; oh < out_h; oh += 4) {                                      \
        const ptrdiff_t rows = out_h - oh < 4 ? out_h - oh : 4;                        \
        for (ptrdiff_t block = 0; block * 8 < out_w; block++) {                        \
            ptrdiff_t start = block * 8;                                               \
            if (start + 8 > out_w && out_w >= 8) start = out_w - 8;                    \
            const int16_t* a = plane + oh * (STRIDE_H) * pitch                         \
                               + (interleaved ? start : 2 * start);                    \
            const int16_t* b = a + (interleaved ? 1 : 8);                              \
            const ptrdiff_t left = out_w - start;                                      \
            const ptrdiff_t count = left < 8 ? left : 8;                               \
            __m128i first[4], second[4];                                               \
            ROWS2(a, pitch, weights, bias, first);                                     \
            ROWS2(a + lower, pitch, weights, bias, first + 2);                         \
            ROWS2(b, pitch, weights, bias, second);                                    \
            ROWS2(b + lower, pitch, weights, bias, second + 2);                        \
            _Pragma("GCC unroll 4")                                                    \
            for (int i = 0; i < 4; i++) {                                              \
                if (i >= rows) break;                                                  \
                uint8_t* target = out + (oh + i) * out_w + start;                      \
                if (interleaved) {                                                     \
                    qops_depthwise_store_pairs_packed_sse2(first[i], second[i], scale, \
                                                           zero, is_signed, target,    \
                                                           count);                     \
                } else {                                                               \
                    qops_depthwise_store_blocks_packed_sse2(first[i], second[i],       \
                                                            scale, zero, is_signed,    \
                                                            target, count);            \
                }                                                                      \
            }                                                                          \
        }                                                                              \
    }                                                                                  \
}                                                                                      \
static void NAME(const int16_t* plane, ptrdiff_t pitch, const int32_t* weights,       \
                 ptrdiff_t out_h, ptrdiff_t out_w, int interleaved, int32_t bias,      \
                 float multiplier, int32_t zero_point, int is_signed, uint8_t* out) {  \
    if (interleaved && is_signed)                                                      \
        NAME##_body(plane, pitch, weights, out_h, out_w, 1, bias, multiplier,          \
                    zero_point, 1, out);                                               \
    else if (interleaved)                                                              \
        NAME##_body(plane, pitch, weights, out_h, out_w, 1, bias, multiplier,          \
                    zero_point, 0, out);                                               \
    else if (is_signed)                                                                \
        NAME##_body(plane, pitch, weights, out_h, out_w, 0, bias, multiplier,          \
                    zero_point, 1, out);                                               \
    else                                                                               \
        NAME##_body(plane, pitch, weights, out_h, out_w, 0, bias, multiplier,          \
                    zero_point, 0, out);                                               \
}
QOPS_DEPTHWISE_PLANE_FIXED_SSE2(qops_depthwise_plane_3x3s1_sse2,
                                qops_depthwise_rows2_3x3s1_sse2, 1)
QOPS_DEPTHWISE_PLANE_FIXED_SSE2(qops_depthwise_plane_3x3s2_sse2,
                                qops_depthwise_rows2_3x3s2_sse2, 2)
/* 16 (or 8) bytes widened to int16: unsigned against zero, signed
   against themselves, the copy in the high byte shifted down
   arithmetically. */
static inline __m128i qops_depthwise_widen_low_sse2(__m128i bytes, int is_signed) {
    return is_signed ? _mm_srai_epi16(_mm_unpacklo_epi8(bytes, bytes), 8)
                     : _mm_unpacklo_epi8(bytes, _mm_setzero_si128());
}
static inline __m128i qops_depthwise_widen_high_sse2(__m128i bytes, int is_signed) {
    return is_signed ? _mm_srai_epi16(_mm_unpackhi_epi8(bytes, bytes), 8)
                     : _mm_unpackhi_epi8(bytes, _mm_setzero_si128());
}

/* x[0 .. count) widened to int16 into line[0 .. count), loads of 16
   (or 8) bytes, the last overlapping the one before it: no byte outside
   the run is read, no element outside it written. */
static inline void qops_depthwise_widen_run_sse2(const uint8_t* x, ptrdiff_t count,
                                                 int is_signed, int16_t* line) {
    if (count >= 16) {
        for (ptrdiff_t i = 0;; i += 16) {
            const ptrdiff_t at = i + 16 <= count ? i : count - 16;
            const __m128i bytes = _mm_loadu_si128((const __m128i*)(x + at));
            _mm_storeu_si128((__m128i*)(line + at),
                             qops_depthwise_widen_low_sse2(bytes, is_signed));
            _mm_storeu_si128((__m128i*)(line + at + 8),
                             qops_depthwise_widen_high_sse2(bytes, is_signed));
            if (at + 16 >= count) break;
        }
    } else if (count >= 8) {
        for (ptrdiff_t at = 0;; at = count - 8) {
            const __m128i bytes = _mm_loadl_epi64((const __m128i*)(x + at));
            _mm_storeu_si128((__m128i*)(line + at),
                             qops_depthwise_widen_low_sse2(bytes, is_signed));
            if (at == count - 8) break;
        }
    } else {
        for (ptrdiff_t i = 0; i < count; i++) {
            line[i] = is_signed ? (int16_t)(int8_t)x[i] : (int16_t)x[i];
        }
    }
}
#else
/* Without SSE2 the pair kernel is not built (DEPTHWISE_PAIRS is 0 and
   _depthwise.pxi runs its row kernel): these only let the driver compile. */
typedef struct { int32_t lanes[4]; } qops_dw_int;
typedef struct { float lanes[4]; } qops_dw_float;
static inline qops_dw_int qops_dw_broadcast(int32_t value) {
    qops_dw_int v = {{value, value, value, value}};
    return v;
}
static inline qops_dw_float qops_dw_broadcast_float(float value) {
    qops_dw_float v = {{value, value, value, value}};
    return v;
}
static inline void qops_depthwise_rows4_sse2(const int16_t* a, const int16_t* b,
    ptrdiff_t pitch, ptrdiff_t span, const int32_t* kernel_rows, const ptrdiff_t* offsets,
    ptrdiff_t columns, const int32_t* weights, int32_t start, qops_dw_int* sums) {
    (void)a; (void)b; (void)pitch; (void)span; (void)kernel_rows; (void)offsets;
    (void)columns; (void)weights; (void)start; (void)sums;
}
static inline void qops_depthwise_store_pairs_sse2(qops_dw_int even, qops_dw_int odd,
    qops_dw_float multiplier, qops_dw_float floor_value, qops_dw_float ceiling_value,
    qops_dw_int zero_point, uint8_t* target, ptrdiff_t count) {
    (void)even; (void)odd; (void)multiplier; (void)floor_value; (void)ceiling_value;
    (void)zero_point; (void)target; (void)count;
}
static inline void qops_depthwise_store_block_sse2(qops_dw_int sums,
    qops_dw_float multiplier, qops_dw_float floor_value, qops_dw_float ceiling_value,
    qops_dw_int zero_point, uint8_t* target, ptrdiff_t count) {
    (void)sums; (void)multiplier; (void)floor_value; (void)ceiling_value;
    (void)zero_point; (void)target; (void)count;
}
static inline void qops_depthwise_store_pairs_packed_sse2(qops_dw_int even,
    qops_dw_int odd, qops_dw_float multiplier, qops_dw_int zero_point, int is_signed,
    uint8_t* target, ptrdiff_t count) {
    (void)even; (void)odd; (void)multiplier; (void)zero_point; (void)is_signed;
    (void)target; (void)count;
}
static inline void qops_depthwise_store_blocks_packed_sse2(qops_dw_int first,
    qops_dw_int second, qops_dw_float multiplier, qops_dw_int zero_point, int is_signed,
    uint8_t* target, ptrdiff_t count) {
    (void)first; (void)second; (void)multiplier; (void)zero_point; (void)is_signed;
    (void)target; (void)count;
}
static inline void qops_depthwise_plane_3x3s1_sse2(const int16_t* plane, ptrdiff_t pitch,
    const int32_t* weights, ptrdiff_t out_h, ptrdiff_t out_w, int interleaved,
    int32_t bias, float multiplier, int32_t zero_point, int is_signed, uint8_t* out) {
    (void)plane; (void)pitch; (void)weights; (void)out_h; (void)out_w; (void)interleaved;
    (void)bias; (void)multiplier; (void)zero_point; (void)is_signed; (void)out;
}
static inline void qops_depthwise_plane_3x3s2_sse2(const int16_t* plane, ptrdiff_t pitch,
    const int32_t* weights, ptrdiff_t out_h, ptrdiff_t out_w, int interleaved,
    int32_t bias, float multiplier, int32_t zero_point, int is_signed, uint8_t* out) {
    (void)plane; (void)pitch; (void)weights; (void)out_h; (void)out_w; (void)interleaved;
    (void)bias; (void)multiplier; (void)zero_point; (void)is_signed; (void)out;
}
static inline void qops_depthwise_widen_run_sse2(const uint8_t* x, ptrdiff_t count,
    int is_signed, int16_t* line) {
    (void)x; (void)count; (void)is_signed; (void)line;
}
#endif
#endif /* QOPS_DEPTHWISE_SSE2_H */
