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

#endif /* QOPS_YMM_H */
