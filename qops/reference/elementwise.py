"""ELEMENT_WISE_QUANTIZED_LINEAR_ADD, stated in NumPy."""

from __future__ import annotations

import numpy as np

from qops.reference._requantize import widen
from qops.registry import dtypes as _dtypes

__all__ = ["add_multipliers", "element_wise_quantized_linear_add"]


def add_multipliers(a_scale, b_scale, output_scale):
    """``(float32(a_scale / output_scale), float32(b_scale / output_scale))``:
    each input's scale relative to the output's, one float32 division each."""
    output = np.asarray(output_scale, np.float32)
    return (np.divide(np.asarray(a_scale, np.float32), output, dtype=np.float32),
            np.divide(np.asarray(b_scale, np.float32), output, dtype=np.float32))


def element_wise_quantized_linear_add(a, a_scale, a_zero_point, b, b_scale, b_zero_point,
                                      output_scale, output_zero_point, output_dtype):
    """The sum of two quantized tensors, requantized::

        value = float32(float32(a - a_zero_point) * float32(a_scale / output_scale))
              + float32(float32(b - b_zero_point) * float32(b_scale / output_scale))
        output = saturate(round_half_even(value) + output_zero_point)

    Every step is one float32 operation, rounded once, in this order (no
    fused multiply-add); the sum is a float32 addition.  DirectML's page
    writes ``round((AValue + BValue) / OutputScale)``; dividing each scale by
    the output's first, as onnxruntime's QLinearAdd does, turns the
    per-element division into two products, and onnxruntime adds the output
    zero point before rounding and may fuse the products: its results are
    within 1 of these.

    Parameters
    ----------
    a, b : ndarray of uint8 or int8
        Shapes that broadcast together (NumPy's rule, equal dimension counts).
    a_scale, b_scale, output_scale : ndarray of float32, one element
    a_zero_point, b_zero_point, output_zero_point : ndarray or None
        One element each, the type of ``a``, ``b`` and the output; ``None`` means 0.
    output_dtype : numpy dtype
        ``uint8`` or ``int8``.
    """
    a_multiplier, b_multiplier = add_multipliers(a_scale, b_scale, output_scale)
    a_value = np.multiply(widen(a, a_zero_point).astype(np.float32), a_multiplier.reshape(()),
                          dtype=np.float32)
    b_value = np.multiply(widen(b, b_zero_point).astype(np.float32), b_multiplier.reshape(()),
                          dtype=np.float32)
    value = np.add(a_value, b_value, dtype=np.float32)
    shifted = np.rint(value).astype(np.float64)  # half to even, in float32
    if output_zero_point is not None:
        shifted = shifted + float(np.asarray(output_zero_point).reshape(()))
    low, high = _dtypes.INTEGER_RANGES[_dtypes.name_of(output_dtype)]
    return np.clip(shifted, low, high).astype(output_dtype)
