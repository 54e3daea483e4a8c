/* The GEMM's driver: the row sums of A, by psadbw where the target has it. */
#ifndef QOPS_GEMM_UNITS_H
#define QOPS_GEMM_UNITS_H

/* sum of p[j] ^ flip over count bytes: psadbw against zero sums eight bytes
   into a 64-bit lane, 32 (AVX2) or 16 (SSE2) bytes per step.  Row sums are
   summed in the units (ensure_row_sums), once per band of rows. */
#include <stddef.h>
#include <stdint.h>
#if defined(__AVX2__)
#include <immintrin.h>
#elif defined(__SSE2__)
#include <emmintrin.h>
#endif
static inline int64_t qops_sum_bytes(const uint8_t* p, ptrdiff_t count, uint8_t flip) {
    int64_t total = 0;
    ptrdiff_t j = 0;
#if defined(__AVX2__)
    __m256i flips = _mm256_set1_epi8((char)flip), zero = _mm256_setzero_si256();
    __m256i acc = zero;
    int64_t lanes[4];
    for (; j + 32 <= count; j += 32)
        acc = _mm256_add_epi64(acc, _mm256_sad_epu8(_mm256_xor_si256(
            _mm256_loadu_si256((const __m256i*)(p + j)), flips), zero));
    _mm256_storeu_si256((__m256i*)lanes, acc);
    total = lanes[0] + lanes[1] + lanes[2] + lanes[3];
#elif defined(__SSE2__)
    __m128i flips = _mm_set1_epi8((char)flip), zero = _mm_setzero_si128(), acc = zero;
    int64_t lanes[2];
    for (; j + 16 <= count; j += 16)
        acc = _mm_add_epi64(acc, _mm_sad_epu8(_mm_xor_si128(
            _mm_loadu_si128((const __m128i*)(p + j)), flips), zero));
    _mm_storeu_si128((__m128i*)lanes, acc);
    total = lanes[0] + lanes[1];
#endif
    for (; j < count; j++)
        total += p[j] ^ flip;
    return total;
}

#endif /* QOPS_GEMM_UNITS_H */
