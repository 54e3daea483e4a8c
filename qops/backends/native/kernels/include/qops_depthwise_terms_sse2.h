/* Generated from qops_depthwise_terms.h.tp by tools/generate_kernels.py: edit the template. */
/* qops_depthwise_terms_sse2.h: the SSE2 depthwise pair kernel's term loop,
   the part its 128-bit lanes do not change (the design is described in
   _depthwise_sse2.pxi).  In C because, written in Cython, GCC copies the
   sums between registers on every iteration.
   Included by qops_depthwise_sse2.h. */
#ifndef QOPS_DEPTHWISE_TERMS_SSE2_H
#define QOPS_DEPTHWISE_TERMS_SSE2_H

#include <stddef.h>
#include <stdint.h>
#include <emmintrin.h>

/* sums + (x pair . w pair) in each 32-bit lane, exactly: |x| <= 255 and
   |w| <= 255, so no pair is the one input (-32768 twice) that overflows. */
static inline __m128i qops_depthwise_term_sse2(__m128i sums, __m128i x, __m128i w) {
    return _mm_add_epi32(sums, _mm_madd_epi16(x, w));
}

/* sums[2r + v] <- start + the sum over plane rows i < span with
   kh = kernel_rows[4i + r] >= 0, and term columns c < columns, of the pairs at
   (a or b) + i * pitch + offsets[c] (v = 0 or 1) times weights[kh * columns + c]. */
static inline void qops_depthwise_rows4_sse2(
    const int16_t* a, const int16_t* b, ptrdiff_t pitch, ptrdiff_t span,
    const int32_t* kernel_rows, const ptrdiff_t* offsets, ptrdiff_t columns,
    const int32_t* weights, int32_t start, __m128i* sums) {
    const __m128i first = _mm_set1_epi32(start);
    __m128i s0 = first, s1 = first, s2 = first, s3 = first;
    __m128i s4 = first, s5 = first, s6 = first, s7 = first;
    for (ptrdiff_t i = 0; i < span; i++) {
        const int16_t* row_a = a + i * pitch;
        const int16_t* row_b = b + i * pitch;
        const int32_t k0 = kernel_rows[4 * i], k1 = kernel_rows[4 * i + 1];
        const int32_t k2 = kernel_rows[4 * i + 2], k3 = kernel_rows[4 * i + 3];
        for (ptrdiff_t c = 0; c < columns; c++) {
            const __m128i x = _mm_loadu_si128((const __m128i*)(row_a + offsets[c]));
            const __m128i y = _mm_loadu_si128((const __m128i*)(row_b + offsets[c]));
            __m128i w;
            if (k0 >= 0) {
                w = _mm_set1_epi32(weights[k0 * columns + c]);
                s0 = qops_depthwise_term_sse2(s0, x, w);
                s1 = qops_depthwise_term_sse2(s1, y, w);
            }
            if (k1 >= 0) {
                w = _mm_set1_epi32(weights[k1 * columns + c]);
                s2 = qops_depthwise_term_sse2(s2, x, w);
                s3 = qops_depthwise_term_sse2(s3, y, w);
            }
            if (k2 >= 0) {
                w = _mm_set1_epi32(weights[k2 * columns + c]);
                s4 = qops_depthwise_term_sse2(s4, x, w);
                s5 = qops_depthwise_term_sse2(s5, y, w);
            }
            if (k3 >= 0) {
                w = _mm_set1_epi32(weights[k3 * columns + c]);
                s6 = qops_depthwise_term_sse2(s6, x, w);
                s7 = qops_depthwise_term_sse2(s7, y, w);
            }
        }
    }
    sums[0] = s0; sums[1] = s1; sums[2] = s2; sums[3] = s3;
    sums[4] = s4; sums[5] = s5; sums[6] = s6; sums[7] = s7;
}

#endif /* QOPS_DEPTHWISE_TERMS_SSE2_H */
