/* The least and greatest of float32 values and whether any is NaN, in
   sixteen lanes: element i goes to lane i % 16, where the lane's least
   becomes `v < least ? v : least` (minps's own rule: a NaN never replaces
   a value) and its greatest likewise, and NaNs are noted apart.  Minimum
   and maximum are exact whatever the order, so the lanes give NumPy's min
   and max of the values (both NaN where one is NaN: the caller's to say).
   In intrinsics at the AVX2 and AVX-512 widths: the compiler leaves the
   plain loop's selects scalar. */
#ifndef QOPS_RANGE_H
#define QOPS_RANGE_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

#define QOPS_RANGE_LANES 16

/* Into range[0] and range[1] the least and greatest of count values
   (+inf and -inf for none); returns whether any is NaN. */
static inline int qops_range_float32(const float* x, ptrdiff_t count, float* range) {
    float least[QOPS_RANGE_LANES], greatest[QOPS_RANGE_LANES];
    int nan = 0;
    ptrdiff_t i = 0;
#if defined(__AVX512F__)
    __m512 low = _mm512_set1_ps(INFINITY), high = _mm512_set1_ps(-INFINITY);
    __mmask16 unordered = 0;
    for (; i + QOPS_RANGE_LANES <= count; i += QOPS_RANGE_LANES) {
        const __m512 v = _mm512_loadu_ps(x + i);
        low = _mm512_min_ps(v, low);
        high = _mm512_max_ps(v, high);
        unordered |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    }
    _mm512_storeu_ps(least, low);
    _mm512_storeu_ps(greatest, high);
    nan = unordered != 0;
#elif defined(__AVX2__)
    __m256 low[2], high[2], unordered[2];
    for (int h = 0; h < 2; h++) {
        low[h] = _mm256_set1_ps(INFINITY);
        high[h] = _mm256_set1_ps(-INFINITY);
        unordered[h] = _mm256_setzero_ps();
    }
    for (; i + QOPS_RANGE_LANES <= count; i += QOPS_RANGE_LANES) {
        for (int h = 0; h < 2; h++) {
            const __m256 v = _mm256_loadu_ps(x + i + 8 * h);
            low[h] = _mm256_min_ps(v, low[h]);
            high[h] = _mm256_max_ps(v, high[h]);
            unordered[h] = _mm256_or_ps(unordered[h], _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
        }
    }
    for (int h = 0; h < 2; h++) {
        _mm256_storeu_ps(least + 8 * h, low[h]);
        _mm256_storeu_ps(greatest + 8 * h, high[h]);
        nan |= _mm256_movemask_ps(unordered[h]) != 0;
    }
#else
    for (int l = 0; l < QOPS_RANGE_LANES; l++) {
        least[l] = INFINITY;
        greatest[l] = -INFINITY;
    }
    for (; i + QOPS_RANGE_LANES <= count; i += QOPS_RANGE_LANES) {
        for (int l = 0; l < QOPS_RANGE_LANES; l++) {
            const float v = x[i + l];
            least[l] = v < least[l] ? v : least[l];
            greatest[l] = v > greatest[l] ? v : greatest[l];
            nan |= v != v;
        }
    }
#endif
    for (int l = 0; i < count; i++, l++) {
        const float v = x[i];
        least[l] = v < least[l] ? v : least[l];
        greatest[l] = v > greatest[l] ? v : greatest[l];
        nan |= v != v;
    }
    range[0] = INFINITY;
    range[1] = -INFINITY;
    for (int l = 0; l < QOPS_RANGE_LANES; l++) {
        range[0] = least[l] < range[0] ? least[l] : range[0];
        range[1] = greatest[l] > range[1] ? greatest[l] : range[1];
    }
    return nan;
}

#endif /* QOPS_RANGE_H */
