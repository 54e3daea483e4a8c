/* Generated from qops_depthwise_terms.h.tp by tools/generate_kernels.py: edit the template. */
/* qops_depthwise_terms_avx512.h: the AVX-512 depthwise pair kernel's term loop,
   the part its 512-bit lanes do not change (the design is described in
   _depthwise_avx512.pxi).  In C because, written in Cython, GCC copies the
   sums between registers on every iteration.

   A term is one vpdpwssd where the build has AVX-512 VNNI (as the AVX-512
   variants are built), and vpmaddwd then vpaddd without it: the same sum
   (both wrap at 32 bits; here no pair comes near), so that a CPU with
   AVX-512BW alone can run and test this loop. */
#ifndef QOPS_DEPTHWISE_TERMS_AVX512_H
#define QOPS_DEPTHWISE_TERMS_AVX512_H

#include <stddef.h>
#include <stdint.h>
#include <immintrin.h>

/* sums + (x pair . w pair) in each 32-bit lane, exactly: |x| <= 255 and
   |w| <= 255, so no pair is the one input (-32768 twice) that overflows. */
static inline __m512i qops_depthwise_term_avx512(__m512i sums, __m512i x, __m512i w) {
#if defined(__AVX512VNNI__)
    return _mm512_dpwssd_epi32(sums, x, w);
#else
    return _mm512_add_epi32(sums, _mm512_madd_epi16(x, w));
#endif
}

/* sums[2r + v] <- start + the sum over plane rows i < span with
   kh = kernel_rows[4i + r] >= 0, and term columns c < columns, of the pairs at
   (a or b) + i * pitch + offsets[c] (v = 0 or 1) times weights[kh * columns + c]. */
static inline void qops_depthwise_rows4_avx512(
    const int16_t* a, const int16_t* b, ptrdiff_t pitch, ptrdiff_t span,
    const int32_t* kernel_rows, const ptrdiff_t* offsets, ptrdiff_t columns,
    const int32_t* weights, int32_t start, __m512i* sums) {
    const __m512i first = _mm512_set1_epi32(start);
    __m512i s0 = first, s1 = first, s2 = first, s3 = first;
    __m512i s4 = first, s5 = first, s6 = first, s7 = first;
    for (ptrdiff_t i = 0; i < span; i++) {
        const int16_t* row_a = a + i * pitch;
        const int16_t* row_b = b + i * pitch;
        const int32_t k0 = kernel_rows[4 * i], k1 = kernel_rows[4 * i + 1];
        const int32_t k2 = kernel_rows[4 * i + 2], k3 = kernel_rows[4 * i + 3];
        for (ptrdiff_t c = 0; c < columns; c++) {
            const __m512i x = _mm512_loadu_si512((const __m512i*)(row_a + offsets[c]));
            const __m512i y = _mm512_loadu_si512((const __m512i*)(row_b + offsets[c]));
            __m512i w;
            if (k0 >= 0) {
                w = _mm512_set1_epi32(weights[k0 * columns + c]);
                s0 = qops_depthwise_term_avx512(s0, x, w);
                s1 = qops_depthwise_term_avx512(s1, y, w);
            }
            if (k1 >= 0) {
                w = _mm512_set1_epi32(weights[k1 * columns + c]);
                s2 = qops_depthwise_term_avx512(s2, x, w);
                s3 = qops_depthwise_term_avx512(s3, y, w);
            }
            if (k2 >= 0) {
                w = _mm512_set1_epi32(weights[k2 * columns + c]);
                s4 = qops_depthwise_term_avx512(s4, x, w);
                s5 = qops_depthwise_term_avx512(s5, y, w);
            }
            if (k3 >= 0) {
                w = _mm512_set1_epi32(weights[k3 * columns + c]);
                s6 = qops_depthwise_term_avx512(s6, x, w);
                s7 = qops_depthwise_term_avx512(s7, y, w);
            }
        }
    }
    sums[0] = s0; sums[1] = s1; sums[2] = s2; sums[3] = s3;
    sums[4] = s4; sums[5] = s5; sums[6] = s6; sums[7] = s7;
}

#endif /* QOPS_DEPTHWISE_TERMS_AVX512_H */
