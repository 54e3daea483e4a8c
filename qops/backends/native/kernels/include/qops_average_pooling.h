/* The average pooling's plane sums. */
#ifndef QOPS_AVERAGE_POOLING_H
#define QOPS_AVERAGE_POOLING_H

#include <stddef.h>
#include <stdint.h>

/* The sum of a plane's bytes (^ flip): psadbw adds 8 bytes at a time
   (SSE2, in every x86-64 variant), the last few alone.  Planes of a
   global pooling are short (a 7 x 7 image's 49 bytes), too short for
   the compiler's vectorized loops, which then ran byte by byte.  Other
   CPUs take the plain loop. */
#if defined(__SSE2__) && defined(__x86_64__)
#include <emmintrin.h>
static inline int32_t qops_plane_sum(const uint8_t* image, ptrdiff_t size, uint8_t flip) {
    const __m128i mask = _mm_set1_epi8((char)flip), zero = _mm_setzero_si128();
    __m128i lanes = _mm_setzero_si128();
    ptrdiff_t i = 0;
    uint64_t total;
    for (; i + 16 <= size; i += 16)
        lanes = _mm_add_epi64(lanes, _mm_sad_epu8(
            _mm_xor_si128(_mm_loadu_si128((const __m128i*)(image + i)), mask), zero));
    total = (uint64_t)_mm_cvtsi128_si64(lanes)
            + (uint64_t)_mm_cvtsi128_si64(_mm_unpackhi_epi64(lanes, lanes));
    for (; i < size; i++)
        total += (uint8_t)(image[i] ^ flip);
    return (int32_t)total;
}
#else
static inline int32_t qops_plane_sum(const uint8_t* image, ptrdiff_t size, uint8_t flip) {
    uint32_t total = 0;
    ptrdiff_t i;
    for (i = 0; i < size; i++)
        total += (uint8_t)(image[i] ^ flip);
    return (int32_t)total;
}
#endif

#endif /* QOPS_AVERAGE_POOLING_H */
