/* LayerNormalization of float32 rows, the steps of
   qops.onnx._numpy_ops.layer_normalization in their order and rounding:

       mean = sum(x) / n;  d = x - mean
       inverse = 1 / sqrt(sum(d * d) / n + epsilon)
       y = d * inverse * scale  (+ bias)

   each operation in float32 (built without contraction).  The two sums add
   in sixteen lanes, element i into lane i % 16, and the lanes then in order:
   a fixed order, whatever the width or thread count, which the compiler
   vectorizes (the NumPy statement's order is einsum's: the results agree
   to the rounding of the sums). */
#ifndef QOPS_LAYER_NORMALIZATION_H
#define QOPS_LAYER_NORMALIZATION_H

#include <math.h>
#include <stddef.h>

#define QOPS_NORM_LANES 16

static inline float qops_norm_lanes_total(const float* lanes) {
    float total = 0.0f;
    for (int l = 0; l < QOPS_NORM_LANES; l++) total = total + lanes[l];
    return total;
}

/* One row of n values into out (which may be x); bias may be NULL. */
static inline void qops_layer_normalization_row(const float* x, ptrdiff_t n, const float* scale,
                                                const float* bias, float epsilon, float* out) {
    float lanes[QOPS_NORM_LANES] = {0};
    const ptrdiff_t whole = n - n % QOPS_NORM_LANES;
    for (ptrdiff_t i = 0; i < whole; i += QOPS_NORM_LANES) {
        for (int l = 0; l < QOPS_NORM_LANES; l++) lanes[l] = lanes[l] + x[i + l];
    }
    for (ptrdiff_t i = whole; i < n; i++) lanes[i - whole] = lanes[i - whole] + x[i];
    const float mean = qops_norm_lanes_total(lanes) / (float)n;
    for (int l = 0; l < QOPS_NORM_LANES; l++) lanes[l] = 0.0f;
    for (ptrdiff_t i = 0; i < whole; i += QOPS_NORM_LANES) {
        for (int l = 0; l < QOPS_NORM_LANES; l++) {
            const float d = x[i + l] - mean;
            out[i + l] = d;
            lanes[l] = lanes[l] + d * d;
        }
    }
    for (ptrdiff_t i = whole; i < n; i++) {
        const float d = x[i] - mean;
        out[i] = d;
        lanes[i - whole] = lanes[i - whole] + d * d;
    }
    const float variance = qops_norm_lanes_total(lanes) / (float)n;
    const float inverse = 1.0f / sqrtf(variance + epsilon);
    if (bias) {
        for (ptrdiff_t i = 0; i < n; i++) out[i] = out[i] * inverse * scale[i] + bias[i];
    } else {
        for (ptrdiff_t i = 0; i < n; i++) out[i] = out[i] * inverse * scale[i];
    }
}

#endif /* QOPS_LAYER_NORMALIZATION_H */
