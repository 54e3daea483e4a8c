/* onnxruntime's QLinearMul of two tensors of one shape, by the rule
   qops.onnx._qoperator.qlinear_mul states:

       p = (a - a_zp) * (b - b_zp)                     exact, |p| <= 65025
       v = float32(float32(float32(p) * m) + float32(y_zp))
       y = v rounded half to even, clamped to the type

   for a finite m (the rule's y_zp where p == 0 is then what v gives), in a
   plain loop the compiler vectorizes (built without contraction, so the
   product and the sum each round as written).  Clamping before rounding
   gives the same integer as after (the bounds are integers), and keeps the
   float magic number's rounding in its range. */
#ifndef QOPS_QUANTIZED_MUL_H
#define QOPS_QUANTIZED_MUL_H

#include <stddef.h>
#include <stdint.h>

#include "qops_rounding.h"

/* Written once per signedness so that each loop widens its bytes one way. */
#define QOPS_MUL_BYTES_LOOP(type)                                                          \
    for (ptrdiff_t i = 0; i < count; i++) {                                                \
        const int32_t product = ((int32_t)(type)a[i] - a_zero) * ((int32_t)(type)b[i] - b_zero); \
        float value = (float)product * multiplier;                                         \
        value = value + y_zero;                                                            \
        value = value < low ? low : value;                                                 \
        value = value > high ? high : value;                                               \
        value = (value + QOPS_ROUNDING_MAGIC) - QOPS_ROUNDING_MAGIC;                       \
        out[i] = (uint8_t)(int32_t)value;                                                  \
    }

/* a, b and out: `count` bytes of one type (int8 where is_signed); the zero
   points as integers of that type, y_zero as float32, multiplier finite. */
static inline void qops_mul_bytes(const uint8_t* a, const uint8_t* b, ptrdiff_t count,
                                  int is_signed, int32_t a_zero, int32_t b_zero,
                                  float multiplier, float y_zero, uint8_t* out) {
    const float low = is_signed ? -128.0f : 0.0f, high = is_signed ? 127.0f : 255.0f;
    if (is_signed) {
        QOPS_MUL_BYTES_LOOP(int8_t)
    } else {
        QOPS_MUL_BYTES_LOOP(uint8_t)
    }
}

#undef QOPS_MUL_BYTES_LOOP

#endif /* QOPS_QUANTIZED_MUL_H */
