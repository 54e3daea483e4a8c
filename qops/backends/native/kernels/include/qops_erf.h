/* The error function of float32 values, in plain loops the compiler
   vectorizes: the approximation qops.onnx._numpy_ops.erf_float32 states
   (its constants, its steps in its order), with an exponential of its own.

   erf(x) = x + x * q(x^2)                for |x| < 0.875,
   erf(x) = 1 - C * exp(u * P(u))         for 0.875 <= |x|, u = |x| - 0.875,
   |x| clamped to 4 (erf is 1 in float32 from 3.92 on).  Both branches are
   evaluated for every element and blended; the sign is x's; NaN gives NaN.

   The exponential's argument lies in [-17, 2] here (above 0 only in the
   branch the blend discards): exp(t) = 2^n * e^r with
   n = rint(t / ln 2), r = t - n ln 2 (ln 2 in two parts, so r is exact to
   a few ulp), and e^r by its Taylor polynomial of degree 7 (|r| <= 0.35: the
   truncation is under 1e-8).  Its error is scaled down by erfc(x) <= 0.22 in
   the result.  Built without contraction, so every step rounds as written. */
#ifndef QOPS_ERF_H
#define QOPS_ERF_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "qops_rounding.h"

static inline uint32_t qops_erf_bits(float value) {
    uint32_t bits;
    memcpy(&bits, &value, 4);
    return bits;
}

static inline float qops_erf_float(uint32_t bits) {
    float value;
    memcpy(&value, &bits, 4);
    return value;
}

/* e^t for t in [-87, 88]. */
static inline float qops_erf_exp(float t) {
    const float log2e = 1.44269504f;
    const float ln2_high = 0.693145752f;    /* 11 bits: n * ln2_high is exact */
    const float ln2_low = 1.42860677e-06f;
    float n = (t * log2e + QOPS_ROUNDING_MAGIC) - QOPS_ROUNDING_MAGIC;
    float r = (t - n * ln2_high) - n * ln2_low;
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    /* 2^n as a float's exponent field: n + 127 is in [1, 254]. */
    return p * qops_erf_float((uint32_t)((int32_t)n + 127) << 23);
}

static inline void qops_erf_float32(const float* x, float* out, ptrdiff_t count) {
    const float small[6] = {0.12837916612625122f, -0.3761255145072937f, 0.11282455176115036f,
                            -0.026791462674736977f, 0.005032181274145842f,
                            -0.0006203255034051836f};
    const float large[6] = {-2.4302175045013428f, -0.8265727758407593f, -0.04675295948982239f,
                            0.011045346967875957f, -0.0019178815418854356f,
                            0.00016856628644745797f};
    const float erfc_at_split = 0.215924933552742f;
    for (ptrdiff_t i = 0; i < count; i++) {
        float value = x[i];
        uint32_t bits = qops_erf_bits(value);
        float magnitude = qops_erf_float(bits & 0x7fffffffu);
        magnitude = magnitude < 4.0f ? magnitude : 4.0f;   /* NaN becomes 4: restored below */
        float square = magnitude * magnitude;
        float tail = square * small[5];
        tail = (tail + small[4]) * square;
        tail = (tail + small[3]) * square;
        tail = (tail + small[2]) * square;
        tail = (tail + small[1]) * square;
        tail = ((tail + small[0]) * magnitude) + magnitude;
        float offset = magnitude - 0.875f;
        float exponent = offset * large[5];
        exponent = (exponent + large[4]) * offset;
        exponent = (exponent + large[3]) * offset;
        exponent = (exponent + large[2]) * offset;
        exponent = (exponent + large[1]) * offset;
        exponent = (exponent + large[0]) * offset;
        float result = 1.0f - qops_erf_exp(exponent) * erfc_at_split;
        result = offset < 0.0f ? tail : result;
        result = qops_erf_float(qops_erf_bits(result) | (bits & 0x80000000u));
        out[i] = value == value ? result : value;
    }
}

/* The erf form of GELU as a model writes it, Div -> Erf -> Add -> Mul by x
   -> Mul: out = (x * (erf(x / divisor) + addend)) * factor, each step
   rounded as the nodes round it (a product or sum of two values is the
   same in either order), in blocks that stay in L1.  out must not be x:
   each block's x is read again after out holds its erf. */
#define QOPS_GELU_BLOCK 1024

static inline void qops_gelu_float32(const float* x, float* out, ptrdiff_t count, float divisor,
                                     float addend, float factor) {
    for (ptrdiff_t start = 0; start < count; start += QOPS_GELU_BLOCK) {
        const ptrdiff_t size = count - start < QOPS_GELU_BLOCK ? count - start
                                                               : QOPS_GELU_BLOCK;
        const float* values = x + start;
        float* results = out + start;
        for (ptrdiff_t i = 0; i < size; i++) results[i] = values[i] / divisor;
        qops_erf_float32(results, results, size);
        for (ptrdiff_t i = 0; i < size; i++) {
            results[i] = (values[i] * (results[i] + addend)) * factor;
        }
    }
}

#endif /* QOPS_ERF_H */
