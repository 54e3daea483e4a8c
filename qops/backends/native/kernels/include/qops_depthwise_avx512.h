/* The AVX-512 depthwise pair kernel's term loop. */
#ifndef QOPS_DEPTHWISE_AVX512_H
#define QOPS_DEPTHWISE_AVX512_H

/* The term loop in C: written in Cython, GCC copies the sums between registers
   on every iteration. */
#include <stddef.h>
#include <stdint.h>
#include <immintrin.h>
/* sums[2r + v] <- start + the sum over plane rows i < span with
   kh = kernel_rows[4i + r] >= 0, and term columns c < columns, of the pairs at
   (a or b) + i * pitch + offsets[c] (v = 0 or 1) times weights[kh * columns + c]. */
static inline void qops_depthwise_rows4(const int16_t* a, const int16_t* b,
                                        ptrdiff_t pitch, ptrdiff_t span,
                                        const int32_t* kernel_rows,
                                        const ptrdiff_t* offsets, ptrdiff_t columns,
                                        const int32_t* weights, __m512i start,
                                        __m512i* sums) {
    __m512i s0 = start, s1 = start, s2 = start, s3 = start;
    __m512i s4 = start, s5 = start, s6 = start, s7 = start;
    for (ptrdiff_t i = 0; i < span; i++) {
        const int16_t* row_a = a + i * pitch;
        const int16_t* row_b = b + i * pitch;
        const int32_t k0 = kernel_rows[4 * i], k1 = kernel_rows[4 * i + 1];
        const int32_t k2 = kernel_rows[4 * i + 2], k3 = kernel_rows[4 * i + 3];
        for (ptrdiff_t c = 0; c < columns; c++) {
            const __m512i x = _mm512_loadu_si512(row_a + offsets[c]);
            const __m512i y = _mm512_loadu_si512(row_b + offsets[c]);
            __m512i w;
            if (k0 >= 0) {
                w = _mm512_set1_epi32(weights[k0 * columns + c]);
                s0 = _mm512_dpwssd_epi32(s0, x, w);
                s1 = _mm512_dpwssd_epi32(s1, y, w);
            }
            if (k1 >= 0) {
                w = _mm512_set1_epi32(weights[k1 * columns + c]);
                s2 = _mm512_dpwssd_epi32(s2, x, w);
                s3 = _mm512_dpwssd_epi32(s3, y, w);
            }
            if (k2 >= 0) {
                w = _mm512_set1_epi32(weights[k2 * columns + c]);
                s4 = _mm512_dpwssd_epi32(s4, x, w);
                s5 = _mm512_dpwssd_epi32(s5, y, w);
            }
            if (k3 >= 0) {
                w = _mm512_set1_epi32(weights[k3 * columns + c]);
                s6 = _mm512_dpwssd_epi32(s6, x, w);
                s7 = _mm512_dpwssd_epi32(s7, y, w);
            }
        }
    }
    sums[0] = s0; sums[1] = s1; sums[2] = s2; sums[3] = s3;
    sums[4] = s4; sums[5] = s5; sums[6] = s6; sums[7] = s7;
}

#endif /* QOPS_DEPTHWISE_AVX512_H */
