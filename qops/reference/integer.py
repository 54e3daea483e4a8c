"""The integer operators (CONVOLUTION_INTEGER, MATRIX_MULTIPLY_INTEGER,
MATRIX_MULTIPLY_INTEGER_TO_FLOAT, DYNAMIC_QUANTIZE_LINEAR), stated in NumPy."""

from __future__ import annotations

import math

import numpy as np

from qops.reference._requantize import exact_products, widen
from qops.reference.convolution import convolution_sums
from qops.registry import dtypes as _dtypes


def matrix_multiply_integer(a, a_zero_point, b, b_zero_point):
    """Batched ``(a - a_zero_point) @ (b - b_zero_point)``: the exact sums, int64.

    The operator's output is int32; a call whose sums int32 cannot hold is
    refused by the operator (onnxruntime and onnx.reference wrap them)."""
    return exact_products(widen(a, a_zero_point), widen(b, b_zero_point))


#: Sums the integer-to-float product takes: below this magnitude float64
#: holds each exactly, so one rounding takes it to float32.
EXACT_SUM_LIMIT = 2**53


def integer_to_float_multipliers(a_scale, b_scale):
    """``float32(a_scale * b_scale)``, broadcast over the scales' DirectML
    shapes.  float16 scales widen to float32 exactly first."""
    return np.multiply(np.asarray(a_scale, np.float32), np.asarray(b_scale, np.float32),
                       dtype=np.float32)


def sum_bound(depth, a, a_zero_point, b, b_zero_point):
    """K times the largest ``|a - a_zero_point|`` times the largest
    ``|b - b_zero_point|``: no sum of the product is larger in magnitude."""
    left, right = widen(a, a_zero_point), widen(b, b_zero_point)
    largest_left = int(np.abs(left).max()) if left.size else 0
    largest_right = int(np.abs(right).max()) if right.size else 0
    return depth * largest_left * largest_right


def inexact_sums(a, a_zero_point, b, b_zero_point):
    """Why sums of this product could reach 2**53 (a sentence), or ``None``.
    The types' ranges decide at once for 8- and 16-bit operands; otherwise
    the operands' values do."""
    a, b = np.asarray(a), np.asarray(b)
    depth = a.shape[-1]
    if depth * 2 ** (8 * a.dtype.itemsize) * 2 ** (8 * b.dtype.itemsize) < EXACT_SUM_LIMIT:
        return None
    bound = sum_bound(depth, a, a_zero_point, b, b_zero_point)
    if bound < EXACT_SUM_LIMIT:
        return None
    return (f"a sum could reach {bound} (K times the largest |a - a_zero_point| times the "
            "largest |b - b_zero_point|), past 2**53, where float64 no longer holds every "
            "integer; split K or narrow the operands")


def matrix_multiply_integer_to_float(a, a_scale, a_zero_point, b, b_scale, b_zero_point, bias,
                                     output_dtype=np.float32):
    """MATRIX_MULTIPLY_INTEGER_TO_FLOAT, step by step.

    ``acc`` is the exact sum of ``(a - a_zero_point) * (b - b_zero_point)``
    (the operator refuses calls whose sums could reach 2**53); then, each
    step rounded once to float32::

        m = float32(a_scale * b_scale)
        v = float32(float32(acc) * m)
        v = float32(v + bias)             (with a bias)

    and a float16 output is ``v`` rounded to float16.
    """
    sums = exact_products(widen(a, a_zero_point), widen(b, b_zero_point))
    # |acc| < 2**53: float64 holds it exactly, so float32 rounds it once.
    value = sums.astype(np.float64).astype(np.float32) * integer_to_float_multipliers(a_scale,
                                                                                     b_scale)
    if bias is not None:
        value = value + np.asarray(bias, np.float32)
    with np.errstate(over="ignore"):  # past float16's range is infinity
        return value.astype(output_dtype)


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
    if not x.size:
        return dynamic_quantize_parameters_of_range(0.0, 0.0, output_dtype)
    return dynamic_quantize_parameters_of_range(x.min(), x.max(), output_dtype)


#: Spans of the range inside which no step below overflows, makes a
#: subnormal scale or divides by zero: those skip NumPy's error-state
#: context, most of a small call's time.
_ORDINARY_SPANS = (2.0 ** -100, 2.0 ** 100)


def dynamic_quantize_parameters_of_range(minimum, maximum, output_dtype):
    """:func:`dynamic_quantize_parameters` of an input whose smallest and
    largest values are ``minimum`` and ``maximum``."""
    low, high = _dtypes.INTEGER_RANGES[_dtypes.name_of(np.dtype(output_dtype))]
    largest = np.float32(max(0.0, float(maximum)))
    smallest = np.float32(min(0.0, float(minimum)))
    if (largest == smallest
            or _ORDINARY_SPANS[0] <= float(largest) - float(smallest) <= _ORDINARY_SPANS[1]):
        return _parameters(largest, smallest, low, high, output_dtype)
    # A span past float32's largest value makes the scale infinite, a
    # subnormal one makes it 0, and ONNX's arithmetic goes on: a zero minimum
    # over a zero scale is 0 / 0, NaN, which its clamp (min and max, each
    # keeping the bound when a comparison fails) turns into the top of the range.
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        return _parameters(largest, smallest, low, high, output_dtype)


def _parameters(largest, smallest, low, high, output_dtype):
    """The scale and zero point of the range [smallest, largest] (float32,
    0 inside it): each step one float32 operation; the zero point clamped
    to [low, high], then rounded half to even (Python's round, as np.rint)."""
    span = np.float32(1.0) if largest == smallest else np.float32(largest - smallest)
    scale = np.float32(span / np.float32(high - low))
    initial = float(np.float32(low) - smallest / scale)
    zero = high if math.isnan(initial) else round(min(max(initial, low), high))
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
