/* A 256-entry table of bytes looked up by each byte: out[i] = table[x[i]].

   A byte load per element leaves the vector units idle.  With AVX-512BW or
   AVX2 the table is sixteen rows of sixteen bytes, each broadcast to every
   128-bit lane: vpshufb looks a vector's low nibbles up in row 0, and each
   other row replaces the bytes whose high nibble is its own (a masked
   shuffle, or a blend on AVX2).  Where the CPU also has AVX-512 VBMI (asked
   once, at run time: the AVX-512 build does not assume it), the table is
   four vectors and two vpermi2b look each byte's low seven bits up in its
   halves, the top bit choosing: three instructions where the rows take
   forty.  The tail, and other builds, load a byte at a time. */
#ifndef QOPS_LOOKUP_H
#define QOPS_LOOKUP_H

#include <stddef.h>
#include <stdint.h>
#if defined(__AVX512BW__) || defined(__AVX2__)
#include <immintrin.h>
#endif

#if defined(__AVX512BW__) && defined(__GNUC__)
/* Whole vectors of x by AVX-512 VBMI; returns how many bytes it did. */
__attribute__((target("avx512vbmi"))) static ptrdiff_t qops_lookup_vbmi(
        const uint8_t* x, ptrdiff_t count, const uint8_t* table, uint8_t* out) {
    const __m512i first = _mm512_loadu_si512((const void*)table);
    const __m512i second = _mm512_loadu_si512((const void*)(table + 64));
    const __m512i third = _mm512_loadu_si512((const void*)(table + 128));
    const __m512i fourth = _mm512_loadu_si512((const void*)(table + 192));
    ptrdiff_t i = 0;
    for (; i + 64 <= count; i += 64) {
        const __m512i bytes = _mm512_loadu_si512((const void*)(x + i));
        const __m512i low = _mm512_permutex2var_epi8(first, bytes, second);
        const __m512i high = _mm512_permutex2var_epi8(third, bytes, fourth);
        _mm512_storeu_si512((void*)(out + i),
                            _mm512_mask_blend_epi8(_mm512_movepi8_mask(bytes), low, high));
    }
    return i;
}

/* -1 until asked; then 1 where the CPU has VBMI and it is allowed, else 0. */
static int qops_lookup_vbmi_state = -1;

/* Whether lookups take VBMI: the CPU's answer, asked once (the same for
   every thread), unless turned off (qops_lookup_allow_vbmi). */
static inline int qops_lookup_has_vbmi(void) {
    if (qops_lookup_vbmi_state < 0) {
        __builtin_cpu_init();
        qops_lookup_vbmi_state = __builtin_cpu_supports("avx512vbmi") ? 1 : 0;
    }
    return qops_lookup_vbmi_state;
}
#endif

/* Lets lookups take VBMI where the CPU has it (allowed), or not: the tests
   run both paths.  Returns whether they take it now. */
static inline int qops_lookup_allow_vbmi(int allowed) {
#if defined(__AVX512BW__) && defined(__GNUC__)
    qops_lookup_vbmi_state = -1;
    if (!allowed) qops_lookup_vbmi_state = 0;
    return qops_lookup_has_vbmi();
#else
    (void)allowed;
    return 0;
#endif
}

static inline void qops_lookup_bytes256(const uint8_t* x, ptrdiff_t count, const uint8_t* table,
                                        uint8_t* out) {
    ptrdiff_t i = 0;
#if defined(__AVX512BW__) && defined(__GNUC__)
    if (qops_lookup_has_vbmi()) {
        i = qops_lookup_vbmi(x, count, table, out);
        for (; i < count; i++) out[i] = table[x[i]];
        return;
    }
#endif
#if defined(__AVX512BW__)
    __m512i rows[16];
    for (int h = 0; h < 16; h++) {
        rows[h] = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i*)(table + 16 * h)));
    }
    const __m512i nibbles = _mm512_set1_epi8(0x0F);
    for (; i + 64 <= count; i += 64) {
        const __m512i bytes = _mm512_loadu_si512((const void*)(x + i));
        const __m512i low = _mm512_and_si512(bytes, nibbles);
        const __m512i high = _mm512_and_si512(_mm512_srli_epi16(bytes, 4), nibbles);
        __m512i result = _mm512_shuffle_epi8(rows[0], low);
        for (int h = 1; h < 16; h++) {
            const __mmask64 row = _mm512_cmpeq_epi8_mask(high, _mm512_set1_epi8((char)h));
            result = _mm512_mask_shuffle_epi8(result, row, rows[h], low);
        }
        _mm512_storeu_si512((void*)(out + i), result);
    }
#elif defined(__AVX2__)
    __m256i rows[16];
    for (int h = 0; h < 16; h++) {
        rows[h] = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i*)(table + 16 * h)));
    }
    const __m256i nibbles = _mm256_set1_epi8(0x0F);
    for (; i + 32 <= count; i += 32) {
        const __m256i bytes = _mm256_loadu_si256((const __m256i*)(x + i));
        const __m256i low = _mm256_and_si256(bytes, nibbles);
        const __m256i high = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), nibbles);
        __m256i result = _mm256_shuffle_epi8(rows[0], low);
        for (int h = 1; h < 16; h++) {
            const __m256i row = _mm256_cmpeq_epi8(high, _mm256_set1_epi8((char)h));
            result = _mm256_blendv_epi8(result, _mm256_shuffle_epi8(rows[h], low), row);
        }
        _mm256_storeu_si256((__m256i*)(out + i), result);
    }
#endif
    for (; i < count; i++) out[i] = table[x[i]];
}

#endif /* QOPS_LOOKUP_H */
