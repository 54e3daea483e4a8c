"""The integer operators (CONVOLUTION_INTEGER, MATRIX_MULTIPLY_INTEGER,
DYNAMIC_QUANTIZE_LINEAR), stated in NumPy."""

from __future__ import annotations

import numpy as np

from qops.reference._requantize import exact_products, widen
from qops.reference.convolution import convolution_sums
from qops.registry import dtypes as _dtypes


def matrix_multiply_integer(a, a_zero_point, b, b_zero_point):
    """Batched ``(a - a_zero_point) @ (b - b_zero_point)``: the exact sums, int64.

    The operator's output is int32; a call whose sums int32 cannot hold is
    refused by the operator (onnxruntime and onnx.reference wrap them)."""
    return exact_products(widen(a, a_zero_point), widen(b, b_zero_point))


def convolution_integer(input, input_zero_point, filter, filter_zero_point, *, strides,
                        dilations, start_padding, end_padding, group_count):
    """The exact sums of a grouped 2-D convolution (zero points subtracted),
    int64: the quantized convolution's sums before requantization (the
    operator's int32 output refuses sums it cannot hold)."""
    return convolution_sums(
        input, input_zero_point, filter, filter_zero_point, None, strides=strides,
        dilations=dilations, start_padding=start_padding, end_padding=end_padding,
        group_count=group_count)


def dynamic_quantize_parameters(input, output_dtype):
    """``(scale, zero_point)`` of DYNAMIC_QUANTIZE_LINEAR: from the range of
    ``input`` widened to include 0, in float32, ties to even, as ONNX's
    DynamicQuantizeLinear.  Both are scalars (``float32`` and ``output_dtype``)."""
    x = np.asarray(input)
    low, high = _dtypes.INTEGER_RANGES[_dtypes.name_of(np.dtype(output_dtype))]
    largest = np.float32(max(0.0, float(x.max()))) if x.size else np.float32(0)
    smallest = np.float32(min(0.0, float(x.min()))) if x.size else np.float32(0)
    # A span past float32's largest value makes the scale infinite, a
    # subnormal one makes it 0, and ONNX's arithmetic goes on: a zero minimum
    # over a zero scale is 0 / 0, NaN, which its clamp (min and max, each
    # keeping the bound when a comparison fails) turns into the top of the range.
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        span = np.float32(1.0) if largest == smallest else np.float32(largest - smallest)
        scale = np.float32(span / np.float32(high - low))
        initial = np.float32(low) - smallest / scale
    zero = np.float32(high) if np.isnan(initial) else np.rint(np.clip(initial, low, high))
    return scale, np.dtype(output_dtype).type(zero)


def dynamic_quantize_linear(input, output_dtype):
    """``(y, scale, zero_point)``: :func:`dynamic_quantize_parameters`, then
    ``saturate(round(x / scale) + zero_point)`` in float32 (float16 input
    converts exactly).  ``scale`` and ``zero_point`` have one element and the
    input's dimension count."""
    x = np.asarray(input).astype(np.float32)
    scale, zero = dynamic_quantize_parameters(x, output_dtype)
    low, high = _dtypes.INTEGER_RANGES[_dtypes.name_of(np.dtype(output_dtype))]
    dtype = np.dtype(output_dtype)
    # A zero scale (see above) makes 0 / 0 NaN, which ONNX casts as the platform does.
    with np.errstate(divide="ignore", invalid="ignore"):
        y = np.clip(np.rint(x / scale) + np.float32(zero), low, high).astype(dtype)
    shape = (1,) * x.ndim
    return y, np.full(shape, scale, np.float32), np.full(shape, zero, dtype)
