/* The AVX2 packer's unaligned 256-bit load and store on any pointer. */
#ifndef QOPS_PACK_AVX2_H
#define QOPS_PACK_AVX2_H

/* The unaligned 256-bit load and store on any pointer (their C declarations
   take __m256i pointers). */
#include <immintrin.h>
#define qops_pack_load(p) _mm256_loadu_si256((const __m256i*)(p))
#define qops_pack_store(p, value) _mm256_storeu_si256((__m256i*)(p), (value))

#endif /* QOPS_PACK_AVX2_H */
