/* QuantizeLinear's per-tensor float32 to 8-bit integers in SSE2. */
#ifndef QOPS_QUANTIZE_LINEAR_H
#define QOPS_QUANTIZE_LINEAR_H

/* Per-tensor float32 to 8-bit integers in SSE2 (the portable variant on
   x86-64, where the compiler's loop of to_integer spent about twice the
   instructions narrowing dwords to bytes without SSE4's packs): the
   division, NaN to 0, the clamp to the range less the zero point, then
   cvtps2dq, which rounds half to even in the default rounding mode, as
   to_integer does; the zero point added in int16 and packs to bytes.
   Returns how many leading elements were done.  The AVX variants keep
   the compiler's loop, which is as fast as their memory there. */
#include <stddef.h>
#include <stdint.h>
#if defined(__SSE2__)
#include <emmintrin.h>
/* Four vectors of int32, each inside the output's range less its zero
   point, to 16 output bytes in order: the zero point added in int16,
   then signed or unsigned packs (the last step of the SSE2 loop below;
   the quantized add's loop takes the same step at either width). */
static inline __m128i qops_bytes_sse2(const __m128i* values, __m128i zeros,
                                      int signed_out) {
    __m128i first = _mm_adds_epi16(_mm_packs_epi32(values[0], values[1]), zeros);
    __m128i second = _mm_adds_epi16(_mm_packs_epi32(values[2], values[3]), zeros);
    return signed_out ? _mm_packs_epi16(first, second) : _mm_packus_epi16(first, second);
}
#endif
#if defined(__SSE2__) && !defined(__AVX2__)
static ptrdiff_t qops_quantize_bytes(const float* x, ptrdiff_t count, float scale,
                                     float zero, float low, float high, int signed_out,
                                     uint8_t* out) {
    const __m128 scales = _mm_set1_ps(scale);
    const __m128 floor_value = _mm_set1_ps(low - zero);
    const __m128 ceiling = _mm_set1_ps(high - zero);
    const __m128i zeros = _mm_set1_epi16((int16_t)zero);
    __m128i values[4];
    __m128 q;
    ptrdiff_t i;
    int part;
    for (i = 0; i + 16 <= count; i += 16) {
        for (part = 0; part < 4; part++) {
            q = _mm_div_ps(_mm_loadu_ps(x + i + 4 * part), scales);
            q = _mm_and_ps(q, _mm_cmpord_ps(q, q));
            values[part] = _mm_cvtps_epi32(_mm_min_ps(_mm_max_ps(q, floor_value), ceiling));
        }
        _mm_storeu_si128((__m128i*)(out + i), qops_bytes_sse2(values, zeros, signed_out));
    }
    return i;
}
#else
static ptrdiff_t qops_quantize_bytes(const float* x, ptrdiff_t count, float scale,
                                     float zero, float low, float high, int signed_out,
                                     uint8_t* out) {
    (void)x; (void)count; (void)scale; (void)zero; (void)low; (void)high;
    (void)signed_out; (void)out;
    return 0;
}
#endif

#endif /* QOPS_QUANTIZE_LINEAR_H */
