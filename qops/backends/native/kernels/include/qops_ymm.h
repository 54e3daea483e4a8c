/* The AVX2 variants' unaligned 256-bit loads and stores on any pointer. */
#ifndef QOPS_YMM_H
#define QOPS_YMM_H

/* The unaligned loads and the store on any pointer (their C declarations take
   __m256i pointers). */
#include <immintrin.h>
#define qops_load_128(p) _mm_loadu_si128((const __m128i*)(p))
#define qops_load_256(p) _mm256_loadu_si256((const __m256i*)(p))
#define qops_store_256(p, value) _mm256_storeu_si256((__m256i*)(p), (value))
#define qops_store_128(p, value) _mm_storeu_si128((__m128i*)(p), (value))
#define qops_load_ps(p) _mm256_loadu_ps((const float*)(p))

/* sums + the int32 pair sums of pairs * panel (vpmaddwd), added into sums'
   own register: with the intrinsic, GCC added two steps' products first
   and then to the sums (a reassociation it may make of integers), which
   needs twelve more registers than the micro-tile has, and spilled every
   sum of an unrolled loop. */
static inline __m256i qops_multiply_add_epi16(__m256i sums, __m256i pairs, __m256i panel) {
    const __m256i products = _mm256_madd_epi16(pairs, panel);
#if defined(__GNUC__)
    __asm__("vpaddd %1, %0, %0" : "+x"(sums) : "x"(products));
    return sums;
#else
    return _mm256_add_epi32(sums, products);
#endif
}

#endif /* QOPS_YMM_H */
