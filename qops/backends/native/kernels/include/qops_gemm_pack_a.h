/* The GEMM's packing of A: short runs copied (and widened) and int16 pairs spread. */
#ifndef QOPS_GEMM_PACK_A_H
#define QOPS_GEMM_PACK_A_H

/* A_SLACK values of A' (source ^ flip) in the variant's A_BYTES: with AVX2,
   two 16-byte loads and two widening stores (or one byte store); the plain
   loop elsewhere.  (Written out: from a loop through local arrays the compiler
   made a 32-byte store that the 16-byte reloads could not forward from, a
   stall of most of the copy's time.) */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* count bytes of source ^ flip into target, as a channels-last image's
   copy for the convolutions takes a pixel's run of channels: 64 bytes at a
   time, a fixed count the compiler makes whole vectors of, then the rest.
   (Written as the callers' loops over a struct's flip, they stored byte by
   byte, the flip read again after every store.) */
static inline void qops_copy_flipped(uint8_t* restrict target, const uint8_t* restrict source,
                                     ptrdiff_t count, uint8_t flip) {
    ptrdiff_t i = 0, c;
    for (; i + 64 <= count; i += 64) {
        if (!flip) {
            memcpy(target + i, source + i, 64);
            continue;
        }
        for (c = 0; c < 64; c++)
            target[i + c] = source[i + c] ^ flip;
    }
    for (; i < count; i++)
        target[i] = source[i] ^ flip;
}

#if defined(__AVX2__)
#include <immintrin.h>
static inline void qops_copy_short(uint8_t* target, const uint8_t* source, uint8_t flip,
                                   int wide) {
    __m128i mask = _mm_set1_epi8((char)flip);
    __m128i low = _mm_loadu_si128((const __m128i*)source);
    __m128i high = _mm_loadu_si128((const __m128i*)(source + 16));
    if (wide && !flip) {
        /* Unsigned A as it is: each load folds into its widening. */
        _mm256_storeu_si256((__m256i*)target, _mm256_cvtepu8_epi16(low));
        _mm256_storeu_si256((__m256i*)(target + 32), _mm256_cvtepu8_epi16(high));
        return;
    }
    low = _mm_xor_si128(low, mask);
    high = _mm_xor_si128(high, mask);
    if (wide) {
        _mm256_storeu_si256((__m256i*)target, _mm256_cvtepu8_epi16(low));
        _mm256_storeu_si256((__m256i*)(target + 32), _mm256_cvtepu8_epi16(high));
    } else {
        _mm256_storeu_si256((__m256i*)target, _mm256_set_m128i(high, low));
    }
}
#else
static inline void qops_copy_short(uint8_t* target, const uint8_t* source, uint8_t flip,
                                   int wide) {
    int i;
    for (i = 0; i < 32; i++) {
        if (wide) ((uint16_t*)target)[i] = (uint16_t)(source[i] ^ flip);
        else target[i] = (uint8_t)(source[i] ^ flip);
    }
}
#endif

/* A packed row's first `pairs` pairs of int16 spread in place to four copies
   each (pair p at row + 16 p), for A_SPREAD 4.  From the last pair to the
   first: a pair's copies land on higher pairs' values only, which have been
   read by then.  With SSE2, four pairs a step (one load, four pshufd and four
   stores per four pairs: the shuffles a micro-kernel of that width would make
   per pair and panel, made once per block). */
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
static void qops_spread_pairs(uint8_t* row, ptrdiff_t pairs) {
    ptrdiff_t p = pairs;
    int32_t pair;
    int copy;
#if defined(__SSE2__)
    while (p % 4) {
        p--;
        memcpy(&pair, row + 4 * p, 4);
        _mm_storeu_si128((__m128i*)(row + 16 * p), _mm_set1_epi32(pair));
    }
    while (p > 0) {
        __m128i four;
        p -= 4;
        four = _mm_loadu_si128((const __m128i*)(row + 4 * p));
        _mm_storeu_si128((__m128i*)(row + 16 * p + 48), _mm_shuffle_epi32(four, 0xFF));
        _mm_storeu_si128((__m128i*)(row + 16 * p + 32), _mm_shuffle_epi32(four, 0xAA));
        _mm_storeu_si128((__m128i*)(row + 16 * p + 16), _mm_shuffle_epi32(four, 0x55));
        _mm_storeu_si128((__m128i*)(row + 16 * p), _mm_shuffle_epi32(four, 0x00));
    }
#else
    while (p > 0) {
        p--;
        memcpy(&pair, row + 4 * p, 4);
        for (copy = 0; copy < 4; copy++)
            memcpy(row + 16 * p + 4 * copy, &pair, 4);
    }
#endif
    (void)copy;
}

#endif /* QOPS_GEMM_PACK_A_H */
