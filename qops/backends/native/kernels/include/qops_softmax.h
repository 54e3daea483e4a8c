/* Softmax of float32 rows, the steps of qops.onnx._numpy_ops.softmax in
   their order:

       v = x (or x / c, or x * c: a Div or Mul by a constant before it)
       d = v - max(v);  e = exp(d);  y = e / sum(e)

   each operation in float32 (built without contraction).  v is computed
   again where it is read again: a division or product rounds the same each
   time.  exp is qops_exp_at_most_zero (its subnormal results included); a
   row with a NaN takes NaN for its maximum, so that every element is NaN, as
   NumPy's maximum makes it.  The sum adds in float64, in sixteen lanes,
   element i into lane i % 16, and the lanes then in order: a fixed order,
   whatever the width or thread count, which the compiler vectorizes, and
   then one rounding to float32 (a float32 sum of a long row loses several
   ulp; float64's one rounding loses half of one). */
#ifndef QOPS_SOFTMAX_H
#define QOPS_SOFTMAX_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "qops_exp.h"

#define QOPS_SOFTMAX_LANES 16

/* What comes before the softmax: nothing, a division or a product. */
enum { QOPS_SOFTMAX_PLAIN = 0, QOPS_SOFTMAX_DIVIDED = 1, QOPS_SOFTMAX_MULTIPLIED = 2 };

static inline float qops_softmax_value(float x, int before, float constant) {
    return before == QOPS_SOFTMAX_DIVIDED ? x / constant
           : before == QOPS_SOFTMAX_MULTIPLIED ? x * constant : x;
}

typedef float qops_softmax_floats __attribute__((vector_size(16)));
typedef int32_t qops_softmax_ints __attribute__((vector_size(16)));

/* The largest v of the row, NaN where one is NaN.  A maximum is exact in any
   order: sixteen lanes in four of GCC's four-float vectors, whose
   compare-and-select the compiler makes whole vectors of (a float select in a
   plain loop stays scalar), four chains apart so that each compare waits on
   the one four steps before it. */
static inline float qops_softmax_largest(const float* x, ptrdiff_t n, int before,
                                         float constant) {
    qops_softmax_floats largest[4];
    qops_softmax_ints unordered[4];
    for (int q = 0; q < 4; q++) {
        largest[q] = (qops_softmax_floats){0} - INFINITY;
        unordered[q] = (qops_softmax_ints){0};
    }
    const ptrdiff_t whole = n - n % 16;
    for (ptrdiff_t i = 0; i < whole; i += 16) {
        for (int q = 0; q < 4; q++) {
            qops_softmax_floats v;
            for (int l = 0; l < 4; l++)
                v[l] = qops_softmax_value(x[i + 4 * q + l], before, constant);
            const qops_softmax_ints larger = (qops_softmax_ints)(v > largest[q]);
            largest[q] = (qops_softmax_floats)(((qops_softmax_ints)v & larger)
                                               | ((qops_softmax_ints)largest[q] & ~larger));
            unordered[q] |= (qops_softmax_ints)(v != v);
        }
    }
    float top = -INFINITY;
    int nan_seen = 0;
    for (int q = 0; q < 4; q++) {
        for (int l = 0; l < 4; l++) {
            top = largest[q][l] > top ? largest[q][l] : top;
            nan_seen |= unordered[q][l] != 0;
        }
    }
    for (ptrdiff_t i = whole; i < n; i++) {
        const float v = qops_softmax_value(x[i], before, constant);
        top = v > top ? v : top;
        nan_seen |= v != v;
    }
    return nan_seen ? NAN : top;
}

/* One row of n values into out (not x: x is read again after out holds e). */
static inline void qops_softmax_row_of(const float* x, ptrdiff_t n, int before, float constant,
                                       float* out) {
    const float top = qops_softmax_largest(x, n, before, constant);
    const ptrdiff_t whole = n - n % QOPS_SOFTMAX_LANES;
    double lanes[QOPS_SOFTMAX_LANES] = {0};
    for (ptrdiff_t i = 0; i < whole; i += QOPS_SOFTMAX_LANES) {
        for (int l = 0; l < QOPS_SOFTMAX_LANES; l++) {
            const float e = qops_exp_at_most_zero(
                qops_softmax_value(x[i + l], before, constant) - top);
            out[i + l] = e;
            lanes[l] = lanes[l] + (double)e;
        }
    }
    for (ptrdiff_t i = whole; i < n; i++) {
        const float e = qops_exp_at_most_zero(qops_softmax_value(x[i], before, constant) - top);
        out[i] = e;
        lanes[i - whole] = lanes[i - whole] + (double)e;
    }
    double sum = 0.0;
    for (int l = 0; l < QOPS_SOFTMAX_LANES; l++) sum = sum + lanes[l];
    const float total = (float)sum;
    for (ptrdiff_t i = 0; i < n; i++) out[i] = out[i] / total;
}

/* The three forms, each with its step written out for the compiler. */
static inline void qops_softmax_row(const float* x, ptrdiff_t n, int before, float constant,
                                    float* out) {
    if (before == QOPS_SOFTMAX_DIVIDED) {
        qops_softmax_row_of(x, n, QOPS_SOFTMAX_DIVIDED, constant, out);
    } else if (before == QOPS_SOFTMAX_MULTIPLIED) {
        qops_softmax_row_of(x, n, QOPS_SOFTMAX_MULTIPLIED, constant, out);
    } else {
        qops_softmax_row_of(x, n, QOPS_SOFTMAX_PLAIN, 1.0f, out);
    }
}

#endif /* QOPS_SOFTMAX_H */
