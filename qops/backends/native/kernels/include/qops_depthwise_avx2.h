/* Generated from qops_depthwise.h.tp by tools/generate_kernels.py: edit the template. */
/* qops_depthwise_avx2.h: the AVX2 depthwise pair kernel (the C behind
   _depthwise_avx2.pxi; the design is described there).  In C because,
   written in Cython, GCC copies the sums between registers on every
   iteration of the term loop.

   Kept as a real header, not a string in the .pxi, so that it is compiled
   and checked as C (tests/backends/native/kernels/test_c_headers.py).
   Needs AVX2 (and FMA's flags, as its variants are built): included only by
   the variants compiled with them (_qgemm_avx2.pyx, _qgemm_avxvnni.pyx). */
#ifndef QOPS_DEPTHWISE_AVX2_H
#define QOPS_DEPTHWISE_AVX2_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <immintrin.h>
/* The term loop (the sums of four output rows), as at every width. */
#include "qops_depthwise_terms_avx2.h"

/* One vector of each of ROWS output rows, for one filter shape known
   when compiled: taps paired (term c at column 2c), dilation 1 down the
   columns, so plane row i feeds output row r with kernel row
   i - r * STRIDE_H.  With the trip counts constant GCC unrolls every
   loop and the branches on the kernel row vanish.  Two rows a call:
   the calls' accumulators, the kernel's six weight pairs and the loads
   stay in registers (with four, GCC reorders the sums into trees and
   spills). */
#define QOPS_DEPTHWISE_ROWS_FIXED(NAME, ROWS, SPAN, COLUMNS, STRIDE_H, KERNEL_H)         \
static inline __attribute__((always_inline)) void NAME(                                \
    const int16_t* a, ptrdiff_t pitch, const int32_t* weights, int32_t start,          \
    __m256i* sums) {                                                                   \
    __m256i s[ROWS];                                                                   \
    _Pragma("GCC unroll 4")                                                            \
    for (int r = 0; r < (ROWS); r++) s[r] = _mm256_set1_epi32(start);                 \
    _Pragma("GCC unroll 16")                                                           \
    for (int i = 0; i < (SPAN); i++) {                                                 \
        _Pragma("GCC unroll 4")                                                        \
        for (int c = 0; c < (COLUMNS); c++) {                                          \
            const __m256i x = _mm256_loadu_si256((const __m256i*)(a + i * pitch + 2 * c)); \
            _Pragma("GCC unroll 4")                                                    \
            for (int r = 0; r < (ROWS); r++) {                                         \
                const int kh = i - r * (STRIDE_H);                                     \
                if (kh >= 0 && kh < (KERNEL_H)) {                                      \
                    const __m256i w = _mm256_set1_epi32(weights[kh * (COLUMNS) + c]);  \
                    s[r] = qops_depthwise_term_avx2(s[r], x, w);                       \
                }                                                                      \
            }                                                                          \
        }                                                                              \
    }                                                                                  \
    _Pragma("GCC unroll 4")                                                            \
    for (int r = 0; r < (ROWS); r++) sums[r] = s[r];                                   \
}
/* 3 x 3 filters, the depthwise layers of MobileNets and their kin. */
QOPS_DEPTHWISE_ROWS_FIXED(qops_depthwise_rows2_3x3s1_avx2, 2, 4, 2, 1, 3)
QOPS_DEPTHWISE_ROWS_FIXED(qops_depthwise_rows2_3x3s2_avx2, 2, 5, 2, 2, 3)
/* The output integers of 8 sums (bias included), as `requantize` computes
   them, each masked to its low byte. */
static inline __m256i qops_depthwise_requantize_avx2(__m256i sums, __m256 multiplier,
                                                     __m256 floor_value,
                                                     __m256 ceiling_value,
                                                     __m256i zero_point) {
    __m256 value = _mm256_mul_ps(_mm256_cvtepi32_ps(sums), multiplier);
    value = _mm256_min_ps(_mm256_max_ps(value, floor_value), ceiling_value);
    return _mm256_and_si256(_mm256_add_epi32(_mm256_cvtps_epi32(value), zero_point),
                            _mm256_set1_epi32(0xFF));
}

/* count (<= 16) outputs of a stride-1 block: even lane j is output 2j,
   odd lane j output 2j + 1. */
static inline void qops_depthwise_store_pairs_avx2(__m256i even, __m256i odd,
                                                   __m256 multiplier, __m256 floor_value,
                                                   __m256 ceiling_value,
                                                   __m256i zero_point, uint8_t* target,
                                                   ptrdiff_t count) {
    const __m256i pairs = _mm256_or_si256(
        qops_depthwise_requantize_avx2(even, multiplier, floor_value, ceiling_value,
                                       zero_point),
        _mm256_slli_epi32(qops_depthwise_requantize_avx2(odd, multiplier, floor_value,
                                                         ceiling_value, zero_point), 8));
    /* Lane j's low 16 bits are outputs 2j and 2j + 1: pack each 128-bit
       half's four, then bring the halves' packs together. */
    const __m256i words = _mm256_permute4x64_epi64(_mm256_packus_epi32(pairs, pairs), 0x08);
    const __m128i bytes = _mm256_castsi256_si128(words);
    if (count >= 16) {
        _mm_storeu_si128((__m128i*)target, bytes);
    } else {
        uint8_t line[16];
        _mm_storeu_si128((__m128i*)line, bytes);
        memcpy(target, line, (size_t)count);
    }
}

/* count (<= 8) outputs of a stride-2 block. */
static inline void qops_depthwise_store_block_avx2(__m256i sums, __m256 multiplier,
                                                   __m256 floor_value,
                                                   __m256 ceiling_value,
                                                   __m256i zero_point, uint8_t* target,
                                                   ptrdiff_t count) {
    const __m256i values = qops_depthwise_requantize_avx2(sums, multiplier, floor_value,
                                                         ceiling_value, zero_point);
    const __m256i words = _mm256_packus_epi32(values, values);
    const __m256i bytes = _mm256_packus_epi16(words, words);
    /* Each 128-bit half now starts with its four outputs. */
    const uint32_t low = (uint32_t)_mm256_extract_epi32(bytes, 0);
    const uint32_t high = (uint32_t)_mm256_extract_epi32(bytes, 4);
    const uint64_t line = (uint64_t)low | ((uint64_t)high << 32);
    memcpy(target, &line, (size_t)(count < 8 ? count : 8));
}

/* round_half_even(sums * multiplier) + zero point, for sums whose
   scaled value the driver has bounded well inside int32: then no float
   clamp is needed, and the saturating packs below clamp to the output
   type instead. */
static inline __m256i qops_depthwise_round_avx2(__m256i sums, __m256 multiplier,
                                                __m256i zero_point) {
    return _mm256_add_epi32(
        _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_cvtepi32_ps(sums), multiplier)),
        zero_point);
}

/* 16 int16 in output order (words 0-7, then 8-15, in the 128-bit
   halves) saturated to bytes, stored as count (<= 16) outputs. */
static inline void qops_depthwise_store_words_avx2(__m256i words, int is_signed,
                                                   uint8_t* target, ptrdiff_t count) {
    const __m256i bytes = is_signed ? _mm256_packs_epi16(words, words)
                                    : _mm256_packus_epi16(words, words);
    const __m128i line = _mm256_castsi256_si128(_mm256_permute4x64_epi64(bytes, 0x08));
    if (count >= 16) {
        _mm_storeu_si128((__m128i*)target, line);
    } else {
        uint8_t buffer[16];
        _mm_storeu_si128((__m128i*)buffer, line);
        memcpy(target, buffer, (size_t)count);
    }
}

/* qops_depthwise_store_pairs_avx2 for bounded sums: the even and odd
   outputs interleaved as int32 (unpack), then two saturating packs. */
static inline void qops_depthwise_store_pairs_packed_avx2(__m256i even, __m256i odd,
                                                          __m256 multiplier,
                                                          __m256i zero_point,
                                                          int is_signed, uint8_t* target,
                                                          ptrdiff_t count) {
    const __m256i e = qops_depthwise_round_avx2(even, multiplier, zero_point);
    const __m256i o = qops_depthwise_round_avx2(odd, multiplier, zero_point);
    /* Halves: (e0 o0 e1 o1 | e4 o4 e5 o5) and (e2 o2 e3 o3 | e6 o6 e7 o7),
       packed to words e0 o0 .. e3 o3 | e4 o4 .. e7 o7. */
    qops_depthwise_store_words_avx2(
        _mm256_packs_epi32(_mm256_unpacklo_epi32(e, o), _mm256_unpackhi_epi32(e, o)),
        is_signed, target, count);
}

/* Two stride-2 blocks side by side (first, then second: count <= 16
   outputs) for bounded sums. */
static inline void qops_depthwise_store_blocks_packed_avx2(__m256i first, __m256i second,
                                                           __m256 multiplier,
                                                           __m256i zero_point,
                                                           int is_signed, uint8_t* target,
                                                           ptrdiff_t count) {
    const __m256i f = qops_depthwise_round_avx2(first, multiplier, zero_point);
    const __m256i s = qops_depthwise_round_avx2(second, multiplier, zero_point);
    /* Words f0-3 s0-3 | f4-7 s4-7; the middle quarters trade places. */
    qops_depthwise_store_words_avx2(
        _mm256_permute4x64_epi64(_mm256_packs_epi32(f, s), 0xD8), is_signed, target, count);
}

/* A whole output plane (out_h x out_w bytes at `out`) of a fixed shape's
   two-row loop ROWS2 and bounded sums, in C so that each block's four
   rows are stored straight from the sums and the next block's loads can
   start while a block is stored. */
#define QOPS_DEPTHWISE_PLANE_FIXED(NAME, ROWS2, STRIDE_H)                                \
static void NAME(const int16_t* plane, ptrdiff_t pitch, const int32_t* weights,       \
                 ptrdiff_t out_h, ptrdiff_t out_w, int interleaved, int32_t bias,      \
                 float multiplier, int32_t zero_point, int is_signed, uint8_t* out) {  \
    const __m256 scale = _mm256_set1_ps(multiplier);                                   \
    const __m256i zero = _mm256_set1_epi32(zero_point);                                \
    const ptrdiff_t width = interleaved ? 16 : 8;                                      \
    const ptrdiff_t per_row = (out_w + width - 1) / width;                             \
    for (ptrdiff_t oh = 0; oh < out_h; oh += 4) {                                      \
        const ptrdiff_t rows = out_h - oh < 4 ? out_h - oh : 4;                        \
        for (ptrdiff_t block = 0; block < per_row; block += interleaved ? 1 : 2) {     \
            /* A row's last block ends at its last output, overlapping the     \
               block before it: whole 16-byte stores, where a short one went     \
               through a buffer and memcpy. */                                  \
            ptrdiff_t start = block * width;                                           \
            if (start + 16 > out_w && out_w >= 16) start = out_w - 16;                 \
            const int16_t* a = plane + oh * (STRIDE_H) * pitch                         \
                               + (interleaved ? start : 2 * start);                    \
            const ptrdiff_t left = out_w - start;                                      \
            const ptrdiff_t count = left < 16 ? left : 16;                             \
            __m256i first[4], second[4];                                               \
            const int16_t* b = a + (interleaved ? 1 : 16);                             \
            const ptrdiff_t lower = 2 * (STRIDE_H) * pitch;                            \
            ROWS2(a, pitch, weights, bias, first);                                     \
            ROWS2(a + lower, pitch, weights, bias, first + 2);                         \
            ROWS2(b, pitch, weights, bias, second);                                    \
            ROWS2(b + lower, pitch, weights, bias, second + 2);                        \
            _Pragma("GCC unroll 4")                                                    \
            for (int i = 0; i < 4; i++) {                                              \
                if (i >= rows) break;                                                  \
                uint8_t* target = out + (oh + i) * out_w + start;                      \
                if (interleaved) {                                                     \
                    qops_depthwise_store_pairs_packed_avx2(first[i], second[i],        \
                                                           scale, zero, is_signed,      \
                                                           target, count);              \
                } else {                                                               \
                    qops_depthwise_store_blocks_packed_avx2(first[i], second[i],       \
                                                            scale, zero, is_signed,     \
                                                            target, count);             \
                }                                                                      \
            }                                                                          \
        }                                                                              \
    }                                                                                  \
}
QOPS_DEPTHWISE_PLANE_FIXED(qops_depthwise_plane_3x3s1_avx2,
                           qops_depthwise_rows2_3x3s1_avx2, 1)
QOPS_DEPTHWISE_PLANE_FIXED(qops_depthwise_plane_3x3s2_avx2,
                           qops_depthwise_rows2_3x3s2_avx2, 2)
/* x[0 .. count) widened to int16 into line[0 .. count), loads and stores
   of 16 (or 8) values, the last one overlapping the one before it: no
   byte outside the run is read, no element outside it written. */
static inline void qops_depthwise_widen_run_avx2(const uint8_t* x, ptrdiff_t count,
                                                 int is_signed, int16_t* line) {
    if (count >= 16) {
        for (ptrdiff_t i = 0;; i += 16) {
            const ptrdiff_t at = i + 16 <= count ? i : count - 16;
            const __m128i bytes = _mm_loadu_si128((const __m128i*)(x + at));
            _mm256_storeu_si256((__m256i*)(line + at), is_signed
                                ? _mm256_cvtepi8_epi16(bytes) : _mm256_cvtepu8_epi16(bytes));
            if (at + 16 >= count) break;
        }
    } else if (count >= 8) {
        for (ptrdiff_t at = 0;; at = count - 8) {
            const __m128i bytes = _mm_loadl_epi64((const __m128i*)(x + at));
            _mm_storeu_si128((__m128i*)(line + at), is_signed
                             ? _mm_cvtepi8_epi16(bytes) : _mm_cvtepu8_epi16(bytes));
            if (at == count - 8) break;
        }
    } else {
        for (ptrdiff_t i = 0; i < count; i++) {
            line[i] = is_signed ? (int16_t)(int8_t)x[i] : (int16_t)x[i];
        }
    }
}
#endif /* QOPS_DEPTHWISE_AVX2_H */
