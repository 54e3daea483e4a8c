"""QUANTIZED_LINEAR_MATRIX_MULTIPLY, stated in NumPy."""

from __future__ import annotations

import numpy as np

from qops.reference._requantize import exact_products, requantization_multiplier, requantize, widen


def quantized_linear_matrix_multiply(a, a_scale, a_zero_point, b, b_scale, b_zero_point,
                                     output_scale, output_zero_point, *, output_dtype):
    """Batched ``(a - a_zero_point) @ (b - b_zero_point)``, requantized.

    Scales and zero points have DirectML shapes (``{1,1,M,1}`` per row of A
    and of the output, ``{1,1,1,N}`` per column of B, all ones per tensor),
    possibly with fewer leading dimensions; NumPy's right-aligned
    broadcasting applies them, and broadcasts batch dimensions of size 1.
    """
    # int64 holds any sum a real input can produce: |term| <= 255 * 255, so
    # overflow would need K above 10**14.
    accumulator = exact_products(widen(a, a_zero_point), widen(b, b_zero_point))
    multiplier = requantization_multiplier(a_scale, b_scale, output_scale)
    return requantize(accumulator, multiplier, output_zero_point, np.dtype(output_dtype))
