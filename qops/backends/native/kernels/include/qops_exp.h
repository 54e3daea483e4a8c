/* The exponential of float32 values, in steps the compiler vectorizes:
   e^t = 2^n * e^r with n = rint(t / ln 2) and r = t - n ln 2 (ln 2 in two
   parts, the first with 11 bits so that n * ln2_high is exact and the
   subtraction too), and e^r by its Taylor polynomial of degree 7 (|r| <=
   0.35: the truncation is under 1e-8, a sixth of float32's unit roundoff).
   Built without contraction, so every step rounds as written. */
#ifndef QOPS_EXP_H
#define QOPS_EXP_H

#include <stdint.h>
#include <string.h>

#include "qops_rounding.h"

static inline uint32_t qops_float_bits(float value) {
    uint32_t bits;
    memcpy(&bits, &value, 4);
    return bits;
}

static inline float qops_bits_float(uint32_t bits) {
    float value;
    memcpy(&value, &bits, 4);
    return value;
}

/* e^r for |r| <= ln 2 / 2. */
static inline float qops_exp_near_zero(float r) {
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    return p * r + 1.0f;
}

/* n = rint(t / ln 2) (a float of an integer value) and r = t - n ln 2. */
static inline float qops_exp_reduced(float t, float* n) {
    const float log2e = 1.44269504f;
    const float ln2_high = 0.693145752f;    /* 11 bits: n * ln2_high is exact */
    const float ln2_low = 1.42860677e-06f;
    *n = (t * log2e + QOPS_ROUNDING_MAGIC) - QOPS_ROUNDING_MAGIC;
    return (t - *n * ln2_high) - *n * ln2_low;
}

/* 2^k as a float, for k in [-126, 127]. */
static inline float qops_power_of_two(int32_t k) {
    return qops_bits_float((uint32_t)(k + 127) << 23);
}

/* e^t for t in [-87, 88] (normal results). */
static inline float qops_exp(float t) {
    float n;
    const float r = qops_exp_reduced(t, &n);
    return qops_exp_near_zero(r) * qops_power_of_two((int32_t)n);
}

/* e^t for t <= 0, the subnormal results too (each rounded once), 0 from
   t = -104 down (e^-104 is under half the least subnormal); NaN gives NaN. */
static inline float qops_exp_at_most_zero(float t) {
    float clamped = t > -104.0f ? t : -104.0f;   /* NaN becomes -104: restored below */
    float n;
    const float r = qops_exp_reduced(clamped, &n);
    /* 2^n in two factors, 2^(n + 64) (n >= -150: a normal power) and 2^-64:
       the first product is exact, the second rounds only a subnormal. */
    const float result = (qops_exp_near_zero(r) * qops_power_of_two((int32_t)n + 64))
                         * qops_power_of_two(-64);
    return t == t ? result : t;
}

#endif /* QOPS_EXP_H */
