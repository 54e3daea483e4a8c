/* One output pixel of a block of channels of the channels-last depthwise
   convolution (_depthwise_channels_last.pxi). */
#ifndef QOPS_DEPTHWISE_CHANNELS_LAST_H
#define QOPS_DEPTHWISE_CHANNELS_LAST_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "qops_rounding.h"

/* The channels of a block: the lanes of every loop below. */
#define QOPS_CHANNEL_BLOCK 64

/* One output pixel of the block's channels: each tap's bytes (the copy's
   pixel at tap_offset[t], a byte per channel) times its weights, summed
   modulo 2**32 with the terms (the caller proved the true sum fits int32),
   then requantized by the contract's rule: float32(sum) * multiplier,
   clamped to [floor, ceiling] (the output's range less the zero point),
   rounded half to even, plus the zero point, whose low byte is the output.

   With AVX2 or AVX-512, the block's sums stay in registers across the taps,
   which go two at a time as int16 pairs (the weights are at most 255 in
   magnitude, the bytes 0 to 255): one multiply-add of pairs (vpdpwssd with
   AVX-512 VNNI) for two taps of a vector's channels, in place of a vpmulld
   and an add per tap (docs/performance_notes.rst).  vcvtps2dq rounds half
   to even in the default mode.  Elsewhere, plain loops over the block, which the compiler
   vectorizes. */
#if defined(__AVX512F__) && defined(__AVX512BW__)
#include <immintrin.h>
#define QOPS_CHANNELS_LAST_PAIRS 1
/* Channels a vector of int16 pairs spans: the weights' layout's group. */
#define QOPS_CHANNELS_LAST_GROUP 32
/* sums + the pairs' products, exact: each pair's two products fit int32. */
#if defined(__AVX512VNNI__)
#define QOPS_CHANNELS_LAST_MADD(sums, a, b) _mm512_dpwssd_epi32(sums, a, b)
#else
#define QOPS_CHANNELS_LAST_MADD(sums, a, b) _mm512_add_epi32(sums, _mm512_madd_epi16(a, b))
#endif
static inline void qops_depthwise_channels_last_pixel(
        const uint8_t* copy, const ptrdiff_t* tap_offset, ptrdiff_t count,
        const void* laid_weights, const uint32_t* terms, const float* multiplier,
        const float* floor_value, const float* ceiling_value, const int32_t* out_zero,
        uint8_t* result) {
    const __m512i* weight = (const __m512i*)laid_weights;
    /* Per 32 channels, the unpacks' low pairs (channels 0-3, 8-11, 16-19,
       24-27) and high pairs (4-7, 12-15, 20-23, 28-31). */
    __m512i sums[QOPS_CHANNEL_BLOCK / 16];
    ptrdiff_t part, t;
    for (part = 0; part < QOPS_CHANNEL_BLOCK / 16; part++)
        sums[part] = _mm512_setzero_si512();
    for (t = 0; t < count; t += 2) {
        const uint8_t* first = copy + tap_offset[t] * QOPS_CHANNEL_BLOCK;
        const uint8_t* second = copy + tap_offset[t + 1 < count ? t + 1 : t] * QOPS_CHANNEL_BLOCK;
        for (part = 0; part < QOPS_CHANNEL_BLOCK / 32; part++) {
            const __m512i a = _mm512_cvtepu8_epi16(
                _mm256_loadu_si256((const __m256i*)(first + 32 * part)));
            const __m512i b = _mm512_cvtepu8_epi16(
                _mm256_loadu_si256((const __m256i*)(second + 32 * part)));
            sums[2 * part] = QOPS_CHANNELS_LAST_MADD(sums[2 * part], _mm512_unpacklo_epi16(a, b),
                                                     _mm512_loadu_si512((const void*)weight));
            sums[2 * part + 1] = QOPS_CHANNELS_LAST_MADD(
                sums[2 * part + 1], _mm512_unpackhi_epi16(a, b),
                _mm512_loadu_si512((const void*)(weight + 1)));
            weight += 2;
        }
    }
    /* Back in channel order, plus each channel's term, requantized. */
    const __m512i low_order = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19,
                                                4, 5, 6, 7, 20, 21, 22, 23);
    const __m512i high_order = _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27,
                                                 12, 13, 14, 15, 28, 29, 30, 31);
    for (part = 0; part < QOPS_CHANNEL_BLOCK / 16; part++) {
        const ptrdiff_t first = 16 * part;
        const __m512i in_order = _mm512_add_epi32(
            _mm512_permutex2var_epi32(sums[part & ~1], part & 1 ? high_order : low_order,
                                      sums[part | 1]),
            _mm512_loadu_si512((const void*)(terms + first)));
        __m512 scaled = _mm512_mul_ps(_mm512_cvtepi32_ps(in_order),
                                      _mm512_loadu_ps(multiplier + first));
        scaled = _mm512_min_ps(_mm512_max_ps(scaled, _mm512_loadu_ps(floor_value + first)),
                               _mm512_loadu_ps(ceiling_value + first));
        _mm_storeu_si128((__m128i*)(result + first), _mm512_cvtepi32_epi8(_mm512_add_epi32(
            _mm512_cvtps_epi32(scaled), _mm512_loadu_si512((const void*)(out_zero + first)))));
    }
}
#elif defined(__AVX2__)
#include <immintrin.h>
#define QOPS_CHANNELS_LAST_PAIRS 1
#define QOPS_CHANNELS_LAST_GROUP 16

static inline __m256i qops_channels_last_requantize8(__m256i sums, const float* multiplier,
                                                     const float* floor_value,
                                                     const float* ceiling_value,
                                                     const int32_t* out_zero) {
    __m256 scaled = _mm256_mul_ps(_mm256_cvtepi32_ps(sums), _mm256_loadu_ps(multiplier));
    scaled = _mm256_min_ps(_mm256_max_ps(scaled, _mm256_loadu_ps(floor_value)),
                           _mm256_loadu_ps(ceiling_value));
    return _mm256_add_epi32(_mm256_cvtps_epi32(scaled),
                            _mm256_loadu_si256((const __m256i*)out_zero));
}

static inline void qops_depthwise_channels_last_pixel(
        const uint8_t* copy, const ptrdiff_t* tap_offset, ptrdiff_t count,
        const void* laid_weights, const uint32_t* terms, const float* multiplier,
        const float* floor_value, const float* ceiling_value, const int32_t* out_zero,
        uint8_t* result) {
    const __m256i* weight = (const __m256i*)laid_weights;
    __m256i sums[QOPS_CHANNEL_BLOCK / 8];
    ptrdiff_t part, t;
    for (part = 0; part < QOPS_CHANNEL_BLOCK / 8; part++)
        sums[part] = _mm256_setzero_si256();
    for (t = 0; t < count; t += 2) {
        const uint8_t* first = copy + tap_offset[t] * QOPS_CHANNEL_BLOCK;
        const uint8_t* second = copy + tap_offset[t + 1 < count ? t + 1 : t] * QOPS_CHANNEL_BLOCK;
        for (part = 0; part < QOPS_CHANNEL_BLOCK / 16; part++) {
            __m256i a = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i*)(first + 16 * part)));
            __m256i b = _mm256_cvtepu8_epi16(
                _mm_loadu_si128((const __m128i*)(second + 16 * part)));
            sums[2 * part] = _mm256_add_epi32(sums[2 * part], _mm256_madd_epi16(
                _mm256_unpacklo_epi16(a, b), _mm256_loadu_si256(weight)));
            sums[2 * part + 1] = _mm256_add_epi32(sums[2 * part + 1], _mm256_madd_epi16(
                _mm256_unpackhi_epi16(a, b), _mm256_loadu_si256(weight + 1)));
            weight += 2;
        }
    }
    for (part = 0; part < QOPS_CHANNEL_BLOCK / 16; part++) {
        const ptrdiff_t first = 16 * part;
        /* Channels 0-3 and 8-11 in the unpacked low half, 4-7 and 12-15 in the
           high: back in order, plus each channel's term. */
        __m256i low = _mm256_add_epi32(
            _mm256_permute2x128_si256(sums[2 * part], sums[2 * part + 1], 0x20),
            _mm256_loadu_si256((const __m256i*)(terms + first)));
        __m256i high = _mm256_add_epi32(
            _mm256_permute2x128_si256(sums[2 * part], sums[2 * part + 1], 0x31),
            _mm256_loadu_si256((const __m256i*)(terms + first + 8)));
        __m256i words;
        low = qops_channels_last_requantize8(low, multiplier + first, floor_value + first,
                                             ceiling_value + first, out_zero + first);
        high = qops_channels_last_requantize8(high, multiplier + first + 8,
                                              floor_value + first + 8,
                                              ceiling_value + first + 8, out_zero + first + 8);
        /* In range, so exact as int16; each value's low byte is the output. */
        words = _mm256_and_si256(_mm256_permute4x64_epi64(_mm256_packs_epi32(low, high), 0xD8),
                                 _mm256_set1_epi16(0xFF));
        _mm_storeu_si128((__m128i*)(result + first),
                         _mm_packus_epi16(_mm256_castsi256_si128(words),
                                          _mm256_extracti128_si256(words, 1)));
    }
}
#else
#define QOPS_CHANNELS_LAST_PAIRS 0
static inline void qops_depthwise_channels_last_pixel(
        const uint8_t* restrict copy, const ptrdiff_t* restrict tap_offset, ptrdiff_t count,
        const void* restrict laid_weights, const uint32_t* restrict terms,
        const float* restrict multiplier, const float* restrict floor_value,
        const float* restrict ceiling_value, const int32_t* restrict out_zero,
        uint8_t* restrict result) {
    const int32_t* restrict weights = (const int32_t*)laid_weights;
    uint32_t sums[QOPS_CHANNEL_BLOCK];
    ptrdiff_t c, t;
    for (c = 0; c < QOPS_CHANNEL_BLOCK; c++)
        sums[c] = terms[c];
    for (t = 0; t < count; t++) {
        const uint8_t* restrict source = copy + tap_offset[t] * QOPS_CHANNEL_BLOCK;
        const int32_t* restrict weight = weights + t * QOPS_CHANNEL_BLOCK;
        for (c = 0; c < QOPS_CHANNEL_BLOCK; c++)
            sums[c] += (uint32_t)((int32_t)source[c] * weight[c]);
    }
    for (c = 0; c < QOPS_CHANNEL_BLOCK; c++) {
        float scaled = (float)(int32_t)sums[c] * multiplier[c];
        scaled = scaled < floor_value[c] ? floor_value[c] : scaled;
        scaled = scaled > ceiling_value[c] ? ceiling_value[c] : scaled;
        result[c] = (uint8_t)((int32_t)((scaled + QOPS_ROUNDING_MAGIC) - QOPS_ROUNDING_MAGIC)
                              + out_zero[c]);
    }
}
#endif

#if QOPS_CHANNELS_LAST_PAIRS
/* The weights of taps t and t + 1 (0 past the last tap) as int16 pairs, in
   the channel order the byte-to-word unpacks give: per tap pair and group
   of QOPS_CHANNELS_LAST_GROUP channels (a vector's words, in lanes of 8),
   the low unpack's pairs (channels 0-3 of each lane of 8), then the high
   one's (4-7). */
static inline void qops_depthwise_channels_last_lay_weights(const int32_t* weights,
                                                            ptrdiff_t count, int16_t* target) {
    const ptrdiff_t half = QOPS_CHANNELS_LAST_GROUP / 2;
    ptrdiff_t t, group, i;
    for (t = 0; t < count; t += 2)
        for (group = 0; group < QOPS_CHANNEL_BLOCK; group += QOPS_CHANNELS_LAST_GROUP)
            for (i = 0; i < QOPS_CHANNELS_LAST_GROUP; i++) {
                const ptrdiff_t j = i % half;
                const ptrdiff_t c = group + j / 4 * 8 + i / half * 4 + j % 4;
                *target++ = (int16_t)weights[t * QOPS_CHANNEL_BLOCK + c];
                *target++ = (int16_t)(t + 1 < count ? weights[(t + 1) * QOPS_CHANNEL_BLOCK + c]
                                                    : 0);
            }
}
#else
/* The weights as the pixel kernel reads them: as they are. */
static inline void qops_depthwise_channels_last_lay_weights(const int32_t* weights,
                                                            ptrdiff_t count, int16_t* target) {
    memcpy(target, weights, (size_t)(count * QOPS_CHANNEL_BLOCK) * sizeof(int32_t));
}
#endif

#endif /* QOPS_DEPTHWISE_CHANNELS_LAST_H */
