/* The quantized add's rule on whole vectors. */
#ifndef QOPS_QUANTIZED_ADD_H
#define QOPS_QUANTIZED_ADD_H

/* The quantized add's rule on whole vectors, where the variant has them.
   Each operand's byte b becomes the float 2**23 + (b ^ flip): with
   AVX-512, by one xor of its zero-extended dword with the bits of 2**23
   and the flip; with AVX2 and SSE2, by unpacking the flipped bytes with
   zeros and then with the words 0x4B00, which makes each dword
   0x4B0000xx, that float itself (four vectors per load, in an order
   within 128-bit lanes that the packs undo, so no permute).  Less
   2**23 + its zero point, that is float32(b ^ flip - zero) exactly; then
   times its multiplier, and the two products' float32 sum, as the rule
   has them.  The last step of QuantizeLinear: vcvtps2dq rounds half to
   even (the default rounding mode), the zero point is added in int16 and
   packs saturate to the output's range.  Saturation clamps as the rule
   does, since the bounds are integers; only a sum past int32 needs a
   clamp first, and only above (vcvtps2dq turns any too large or too
   small sum into INT32_MIN, which saturates to the low end), so the
   loops clamp only where the multipliers let a sum pass 2**30
   (qops_add_needs_ceiling).  An operand of step 0 is one value, its term
   computed once the same way.  The compiler's loop spent about twice
   the instructions (its rounding trick, masks for the wrapping casts, a
   byte unpack tree).  Returns how many leading elements were done; the
   caller's loop does the rest. */
#include <stdint.h>
#include <stddef.h>

/* Whether a sum may reach 2**30: each term is at most 255 times its
   multiplier, and float32 rounding adds a few parts in 2**24. */
static inline int qops_add_needs_ceiling(float a_multiplier, float b_multiplier) {
    double a = a_multiplier < 0 ? -(double)a_multiplier : (double)a_multiplier;
    double b = b_multiplier < 0 ? -(double)b_multiplier : (double)b_multiplier;
    return 255.0 * (a + b) >= 1073741824.0;
}

#if defined(__AVX512F__) && defined(__AVX512BW__)
#include <immintrin.h>
#define QOPS_ADD_STEP 64
#define QOPS_TWO_23 0x4B000000

static inline __m512 qops_add_term(const uint8_t* x, __m512i bits, __m512 base,
                                   __m512 multiplier) {
    __m512 value = _mm512_castsi512_ps(_mm512_xor_si512(
        _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)x)), bits));
    return _mm512_mul_ps(_mm512_sub_ps(value, base), multiplier);
}

/* packs work within 128-bit lanes: the bytes' dwords come out as group j
   of every vector, for each j, and one permute puts them in order. */
static inline ptrdiff_t qops_add_loop(
        const uint8_t* a, int a_step, uint8_t a_flip, int32_t a_zero, float a_multiplier,
        const uint8_t* b, int b_step, uint8_t b_flip, int32_t b_zero, float b_multiplier,
        ptrdiff_t count, int32_t zero, int32_t high, uint8_t* out, int signed_out,
        int ceiling_clamp) {
    const __m512i a_bits = _mm512_set1_epi32(QOPS_TWO_23 | a_flip);
    const __m512i b_bits = _mm512_set1_epi32(QOPS_TWO_23 | b_flip);
    const __m512 a_base = _mm512_set1_ps(8388608.0f + (float)a_zero);
    const __m512 b_base = _mm512_set1_ps(8388608.0f + (float)b_zero);
    const __m512 a_multipliers = _mm512_set1_ps(a_multiplier);
    const __m512 b_multipliers = _mm512_set1_ps(b_multiplier);
    const __m512 ceiling = _mm512_set1_ps((float)(high - zero));
    const __m512 a_one = _mm512_set1_ps((float)((int32_t)(a[0] ^ a_flip) - a_zero) * a_multiplier);
    const __m512 b_one = _mm512_set1_ps((float)((int32_t)(b[0] ^ b_flip) - b_zero) * b_multiplier);
    const __m512i zeros = _mm512_set1_epi16((int16_t)zero);
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13,
                                            2, 6, 10, 14, 3, 7, 11, 15);
    __m512i values[4], first, second, bytes;
    __m512 sum;
    ptrdiff_t i;
    int part;
    for (i = 0; i + QOPS_ADD_STEP <= count; i += QOPS_ADD_STEP) {
        for (part = 0; part < 4; part++) {
            sum = _mm512_add_ps(
                a_step ? qops_add_term(a + i + 16 * part, a_bits, a_base, a_multipliers)
                       : a_one,
                b_step ? qops_add_term(b + i + 16 * part, b_bits, b_base, b_multipliers)
                       : b_one);
            values[part] = _mm512_cvtps_epi32(ceiling_clamp ? _mm512_min_ps(sum, ceiling)
                                                            : sum);
        }
        first = _mm512_adds_epi16(_mm512_packs_epi32(values[0], values[1]), zeros);
        second = _mm512_adds_epi16(_mm512_packs_epi32(values[2], values[3]), zeros);
        bytes = signed_out ? _mm512_packs_epi16(first, second)
                           : _mm512_packus_epi16(first, second);
        _mm512_storeu_si512((void*)(out + i), _mm512_permutexvar_epi32(order, bytes));
    }
    return i;
}

#elif defined(__AVX2__) || defined(__SSE2__)
/* AVX2, and SSE2 (the portable variant on x86-64) at half the width: the
   same loop over the names below. */
#if defined(__AVX2__)
#include <immintrin.h>
#define QOPS_ADD_STEP 32
typedef __m256 qops_add_float;
typedef __m256i qops_add_int;
#define qops_add_load(p) _mm256_loadu_si256((const __m256i*)(p))
#define qops_add_store(p, v) _mm256_storeu_si256((__m256i*)(p), (v))
#define qops_add_setzero _mm256_setzero_si256
#define qops_add_set1_epi8 _mm256_set1_epi8
#define qops_add_set1_epi16 _mm256_set1_epi16
#define qops_add_set1_ps _mm256_set1_ps
#define qops_add_xor _mm256_xor_si256
#define qops_add_unpacklo_epi8 _mm256_unpacklo_epi8
#define qops_add_unpackhi_epi8 _mm256_unpackhi_epi8
#define qops_add_unpacklo_epi16 _mm256_unpacklo_epi16
#define qops_add_unpackhi_epi16 _mm256_unpackhi_epi16
#define qops_add_as_float _mm256_castsi256_ps
#define qops_add_sub_ps _mm256_sub_ps
#define qops_add_mul_ps _mm256_mul_ps
#define qops_add_add_ps _mm256_add_ps
#define qops_add_min_ps _mm256_min_ps
#define qops_add_to_int _mm256_cvtps_epi32
#define qops_add_packs_epi32 _mm256_packs_epi32
#define qops_add_adds_epi16 _mm256_adds_epi16
#define qops_add_packs_epi16 _mm256_packs_epi16
#define qops_add_packus_epi16 _mm256_packus_epi16
#else
#include <emmintrin.h>
#define QOPS_ADD_STEP 16
typedef __m128 qops_add_float;
typedef __m128i qops_add_int;
#define qops_add_load(p) _mm_loadu_si128((const __m128i*)(p))
#define qops_add_store(p, v) _mm_storeu_si128((__m128i*)(p), (v))
#define qops_add_setzero _mm_setzero_si128
#define qops_add_set1_epi8 _mm_set1_epi8
#define qops_add_set1_epi16 _mm_set1_epi16
#define qops_add_set1_ps _mm_set1_ps
#define qops_add_xor _mm_xor_si128
#define qops_add_unpacklo_epi8 _mm_unpacklo_epi8
#define qops_add_unpackhi_epi8 _mm_unpackhi_epi8
#define qops_add_unpacklo_epi16 _mm_unpacklo_epi16
#define qops_add_unpackhi_epi16 _mm_unpackhi_epi16
#define qops_add_as_float _mm_castsi128_ps
#define qops_add_sub_ps _mm_sub_ps
#define qops_add_mul_ps _mm_mul_ps
#define qops_add_add_ps _mm_add_ps
#define qops_add_min_ps _mm_min_ps
#define qops_add_to_int _mm_cvtps_epi32
#define qops_add_packs_epi32 _mm_packs_epi32
#define qops_add_adds_epi16 _mm_adds_epi16
#define qops_add_packs_epi16 _mm_packs_epi16
#define qops_add_packus_epi16 _mm_packus_epi16
#endif

/* One register of an operand's bytes to four vectors of terms (the
   unpacks' order within 128-bit lanes, which the packs undo). */
static inline void qops_add_terms(const uint8_t* x, qops_add_int flip, qops_add_float base,
                                  qops_add_float multiplier, qops_add_float* terms) {
    const qops_add_int zeros = qops_add_setzero();
    const qops_add_int high_words = qops_add_set1_epi16(0x4B00);
    qops_add_int bytes = qops_add_xor(qops_add_load(x), flip);
    qops_add_int low_half = qops_add_unpacklo_epi8(bytes, zeros);
    qops_add_int high_half = qops_add_unpackhi_epi8(bytes, zeros);
    int part;
    terms[0] = qops_add_as_float(qops_add_unpacklo_epi16(low_half, high_words));
    terms[1] = qops_add_as_float(qops_add_unpackhi_epi16(low_half, high_words));
    terms[2] = qops_add_as_float(qops_add_unpacklo_epi16(high_half, high_words));
    terms[3] = qops_add_as_float(qops_add_unpackhi_epi16(high_half, high_words));
    for (part = 0; part < 4; part++)
        terms[part] = qops_add_mul_ps(qops_add_sub_ps(terms[part], base), multiplier);
}

static inline ptrdiff_t qops_add_loop(
        const uint8_t* a, int a_step, uint8_t a_flip, int32_t a_zero, float a_multiplier,
        const uint8_t* b, int b_step, uint8_t b_flip, int32_t b_zero, float b_multiplier,
        ptrdiff_t count, int32_t zero, int32_t high, uint8_t* out, int signed_out,
        int ceiling_clamp) {
    const qops_add_int a_flips = qops_add_set1_epi8((char)a_flip);
    const qops_add_int b_flips = qops_add_set1_epi8((char)b_flip);
    const qops_add_float a_base = qops_add_set1_ps(8388608.0f + (float)a_zero);
    const qops_add_float b_base = qops_add_set1_ps(8388608.0f + (float)b_zero);
    const qops_add_float a_multipliers = qops_add_set1_ps(a_multiplier);
    const qops_add_float b_multipliers = qops_add_set1_ps(b_multiplier);
    const qops_add_float ceiling = qops_add_set1_ps((float)(high - zero));
    const qops_add_int zeros = qops_add_set1_epi16((int16_t)zero);
    qops_add_float a_terms[4], b_terms[4], sum;
    qops_add_int values[4], first, second;
    ptrdiff_t i;
    int part;
    a_terms[0] = a_terms[1] = a_terms[2] = a_terms[3] = qops_add_set1_ps(
        (float)((int32_t)(a[0] ^ a_flip) - a_zero) * a_multiplier);
    b_terms[0] = b_terms[1] = b_terms[2] = b_terms[3] = qops_add_set1_ps(
        (float)((int32_t)(b[0] ^ b_flip) - b_zero) * b_multiplier);
    for (i = 0; i + QOPS_ADD_STEP <= count; i += QOPS_ADD_STEP) {
        if (a_step)
            qops_add_terms(a + i, a_flips, a_base, a_multipliers, a_terms);
        if (b_step)
            qops_add_terms(b + i, b_flips, b_base, b_multipliers, b_terms);
        for (part = 0; part < 4; part++) {
            sum = qops_add_add_ps(a_terms[part], b_terms[part]);
            values[part] = qops_add_to_int(ceiling_clamp ? qops_add_min_ps(sum, ceiling)
                                                         : sum);
        }
        first = qops_add_adds_epi16(qops_add_packs_epi32(values[0], values[1]), zeros);
        second = qops_add_adds_epi16(qops_add_packs_epi32(values[2], values[3]), zeros);
        qops_add_store(out + i, signed_out ? qops_add_packs_epi16(first, second)
                                           : qops_add_packus_epi16(first, second));
    }
    return i;
}
#endif

#if defined(QOPS_ADD_STEP)
static inline ptrdiff_t qops_add_vectors(
        const uint8_t* a, int a_step, uint8_t a_flip, int32_t a_zero, float a_multiplier,
        const uint8_t* b, int b_step, uint8_t b_flip, int32_t b_zero, float b_multiplier,
        ptrdiff_t count, int32_t zero, int32_t low, int32_t high, uint8_t* out) {
    /* A loop per output signedness and clamp, each with its own steps. */
    int clamp = qops_add_needs_ceiling(a_multiplier, b_multiplier);
    if (low < 0 && clamp)
        return qops_add_loop(a, a_step, a_flip, a_zero, a_multiplier, b, b_step, b_flip,
                             b_zero, b_multiplier, count, zero, high, out, 1, 1);
    if (low < 0)
        return qops_add_loop(a, a_step, a_flip, a_zero, a_multiplier, b, b_step, b_flip,
                             b_zero, b_multiplier, count, zero, high, out, 1, 0);
    if (clamp)
        return qops_add_loop(a, a_step, a_flip, a_zero, a_multiplier, b, b_step, b_flip,
                             b_zero, b_multiplier, count, zero, high, out, 0, 1);
    return qops_add_loop(a, a_step, a_flip, a_zero, a_multiplier, b, b_step, b_flip,
                         b_zero, b_multiplier, count, zero, high, out, 0, 0);
}
#else
static inline ptrdiff_t qops_add_vectors(
        const uint8_t* a, int a_step, uint8_t a_flip, int32_t a_zero, float a_multiplier,
        const uint8_t* b, int b_step, uint8_t b_flip, int32_t b_zero, float b_multiplier,
        ptrdiff_t count, int32_t zero, int32_t low, int32_t high, uint8_t* out) {
    (void)a; (void)a_step; (void)a_flip; (void)a_zero; (void)a_multiplier;
    (void)b; (void)b_step; (void)b_flip; (void)b_zero; (void)b_multiplier;
    (void)count; (void)zero; (void)low; (void)high; (void)out;
    return 0;
}
#endif

#endif /* QOPS_QUANTIZED_ADD_H */
