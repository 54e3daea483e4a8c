/* The depthwise pair driver's helpers. */
#ifndef QOPS_DEPTHWISE_PAIRS_H
#define QOPS_DEPTHWISE_PAIRS_H

#include <stddef.h>
#include <stdint.h>
/* Whether kernel_rows (4 per plane row, span rows) and offsets are those
   of a KERNEL_H-row filter of paired taps at vertical stride stride_h and
   dilation 1, the shapes the unrolled planes assume. */
static inline int qops_depthwise_fixed_shape(const int32_t* kernel_rows, ptrdiff_t span,
                                             const ptrdiff_t* offsets, ptrdiff_t columns,
                                             ptrdiff_t stride_h, int kernel_h) {
    if (span != 3 * stride_h + kernel_h) return 0;
    for (ptrdiff_t c = 0; c < columns; c++) {
        if (offsets[c] != 2 * c) return 0;
    }
    for (ptrdiff_t i = 0; i < span; i++) {
        for (ptrdiff_t r = 0; r < 4; r++) {
            const ptrdiff_t kh = i - r * stride_h;
            const int32_t expected = (kh >= 0 && kh < kernel_h) ? (int32_t)kh : -1;
            if (kernel_rows[4 * i + r] != expected) return 0;
        }
    }
    return 1;
}

#endif /* QOPS_DEPTHWISE_PAIRS_H */
