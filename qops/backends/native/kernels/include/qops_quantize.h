/* The quantize kernels' float bit casts. */
#ifndef QOPS_QUANTIZE_H
#define QOPS_QUANTIZE_H

#include <stdint.h>
#include <string.h>
static inline uint32_t qops_bits_of(float value) {
    uint32_t bits; memcpy(&bits, &value, sizeof bits); return bits;
}
static inline float qops_float_of(uint32_t bits) {
    float value; memcpy(&value, &bits, sizeof value); return value;
}

#endif /* QOPS_QUANTIZE_H */
