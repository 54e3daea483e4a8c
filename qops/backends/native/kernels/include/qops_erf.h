/* The error function of float32 values, in plain loops the compiler
   vectorizes: the approximation qops.onnx._numpy_ops.erf_float32 states
   (its constants, its steps in its order), with an exponential of its own.

   erf(x) = x + x * q(x^2)                for |x| < 0.875,
   erf(x) = 1 - C * exp(u * P(u))         for 0.875 <= |x|, u = |x| - 0.875,
   |x| clamped to 4 (erf is 1 in float32 from 3.92 on).  Both branches are
   evaluated for every element and blended; the sign is x's; NaN gives NaN.

   The exponential (qops_exp.h) has its argument in [-17, 2] here (above 0
   only in the branch the blend discards); its error is scaled down by
   erfc(x) <= 0.22 in the result.  Built without contraction, so every step
   rounds as written. */
#ifndef QOPS_ERF_H
#define QOPS_ERF_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "qops_exp.h"

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
        uint32_t bits = qops_float_bits(value);
        float magnitude = qops_bits_float(bits & 0x7fffffffu);
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
        float result = 1.0f - qops_exp(exponent) * erfc_at_split;
        result = offset < 0.0f ? tail : result;
        result = qops_bits_float(qops_float_bits(result) | (bits & 0x80000000u));
        out[i] = value == value ? result : value;
    }
}

/* The erf form of GELU as a model writes it, Div -> Erf -> Add -> Mul by x
   -> Mul: out = (x * (erf(x / divisor) + addend)) * factor, each step
   rounded as the nodes round it (a product or sum of two values is the
   same in either order), in blocks that stay in L1; with factor_first,
   ONNX's Gelu function instead: out = (factor * x) * (addend + erf(x /
   divisor)), which differs where x times the sum overflows or factor
   times x is subnormal.  out must not be x: each block's x is read again
   after out holds its erf. */
#define QOPS_GELU_BLOCK 1024

static inline void qops_gelu_float32(const float* x, float* out, ptrdiff_t count, float divisor,
                                     float addend, float factor, int factor_first) {
    for (ptrdiff_t start = 0; start < count; start += QOPS_GELU_BLOCK) {
        const ptrdiff_t size = count - start < QOPS_GELU_BLOCK ? count - start
                                                               : QOPS_GELU_BLOCK;
        const float* values = x + start;
        float* results = out + start;
        for (ptrdiff_t i = 0; i < size; i++) results[i] = values[i] / divisor;
        qops_erf_float32(results, results, size);
        if (factor_first) {
            for (ptrdiff_t i = 0; i < size; i++)
                results[i] = (factor * values[i]) * (addend + results[i]);
        } else {
            for (ptrdiff_t i = 0; i < size; i++)
                results[i] = (values[i] * (results[i] + addend)) * factor;
        }
    }
}

#endif /* QOPS_ERF_H */
