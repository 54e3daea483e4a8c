"""ONNX QuantizeLinear and DequantizeLinear, stated in NumPy.

The arithmetic follows ONNX's reference implementation step by step: the
same operations in the same NumPy types, so results agree bit for bit.  Where
that implementation leaves a case to the platform (a value beyond the int32
range, NaN, infinity into an integer type), these functions saturate instead:
+inf and large values give the type's maximum, -inf its minimum, and NaN the
zero point.

One rule is the schema's rather than that implementation's: an int32 ``x``
or ``y_scale`` of QuantizeLinear is converted to float32 before the division,
which runs in float32 (``float32(x) / float32(y_scale)``) unless ``precision``
names another type; ONNX's reference divides int32 by float32 in float64.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from qops.registry import dtypes as _dtypes


def broadcast_parameter(value, shape, axis, block_size):
    """A scale or zero point shaped to broadcast against a tensor of ``shape``.

    A scalar or a one-element array applies to every element; a 1-D array
    applies along ``axis``; an array of the tensor's rank holds one value per
    block of ``block_size`` elements along ``axis`` (the last block may be
    shorter).
    """
    value = np.asarray(value)
    if value.ndim == 0 or value.size == 1:
        return value.reshape(())
    if not block_size:
        dims = [1] * len(shape)
        dims[axis] = value.size
        return value.reshape(dims)
    # Element i along the axis belongs to block i // block_size.
    return np.take(value, np.arange(shape[axis]) // block_size, axis=axis)


def dequantize_linear(x, x_scale, x_zero_point=None, *, axis=1, block_size=0, output_dtype=None):
    """``(x - x_zero_point) * x_scale`` in float32, rounded once to
    ``output_dtype`` (default: the scale's type).

    An int32 ``x`` with a zero point is centred in float64 (NumPy's promotion
    of float32 and int32), so its product is rounded once, from float64.
    """
    x = np.asarray(x)
    scale = broadcast_parameter(x_scale, x.shape, axis, block_size)
    centred = x.astype(np.float32)
    if x_zero_point is not None and _dtypes.name_of(x.dtype) not in _dtypes.NARROW_FLOATS:
        # A float8 / float4 zero point is 0 (validated), and ONNX leaves it out.
        centred = centred - broadcast_parameter(x_zero_point, x.shape, axis, block_size)
    # Overflow to infinity in a narrow output type is the defined result, not an error.
    if output_dtype is None:
        output_dtype = np.asarray(x_scale).dtype
    with np.errstate(over="ignore"):
        return (centred * scale).astype(output_dtype)


def division_type(x_dtype, scale_dtype, precision=None):
    """The type ``x / y_scale`` is computed in.

    Parameters
    ----------
    x_dtype, scale_dtype : dtype-like
        The types of ``x`` and ``y_scale``.
    precision : dtype-like, optional
        QuantizeLinear's ``precision`` (opset 23); when given it is the answer.

    Returns
    -------
    numpy.dtype
        ``precision``; else float32 when either operand is int32 (each is
        converted to float32 first, the schema's ``float32(x) / float32(scale)``);
        else NumPy's promotion of the two float types, as ONNX's reference
        divides, and float32 for the pairs NumPy cannot promote.
    """
    if precision is not None:
        return np.dtype(precision)
    if np.dtype(x_dtype).kind in "iu" or np.dtype(scale_dtype).kind in "iu":
        return np.dtype(np.float32)
    try:
        return np.result_type(x_dtype, scale_dtype)
    except TypeError:  # float16 with bfloat16: NumPy's division runs in float32
        return np.dtype(np.float32)


def quantize_linear(x, y_scale, y_zero_point=None, *, axis=1, block_size=0, saturate=True,
                    output_dtype=None, precision=None):
    """``saturate(round_half_even(x / y_scale) + y_zero_point)``.

    ``output_dtype`` is a NumPy dtype; it is the zero point's when there is
    one.  ``precision``, when given, is the float type of the division.
    """
    # Quotients beyond a type's range saturate (or become inf / NaN in float8
    # without saturate): defined results, so NumPy's overflow warnings are noise.
    with np.errstate(over="ignore", invalid="ignore"):
        return _quantize(np.asarray(x), y_scale, y_zero_point, axis, block_size, saturate,
                         output_dtype, precision)


def _quantize(x, y_scale, y_zero_point, axis, block_size, saturate, output_dtype, precision):
    dtype = np.dtype(y_zero_point.dtype if y_zero_point is not None else output_dtype)
    name = _dtypes.name_of(dtype)
    scale = broadcast_parameter(y_scale, x.shape, axis, block_size)
    compute = division_type(x.dtype, np.asarray(y_scale).dtype, precision)
    # An int32 operand becomes float32 first, whatever the division's type.
    quotient = _widen(x).astype(compute) / _widen(scale).astype(compute)

    if name in _dtypes.INTEGER_RANGES:
        rounded = np.rint(quotient).astype(np.float64)
        rounded = np.where(np.isnan(rounded), 0.0, rounded)
        if y_zero_point is not None:
            rounded = rounded + broadcast_parameter(y_zero_point, x.shape, axis, block_size)
        low, high = _dtypes.INTEGER_RANGES[name]
        return np.clip(rounded, low, high).astype(dtype)

    if name in _dtypes.FLOAT8:
        if saturate:
            # Clamp finite and infinite values to the largest finite value; NaN stays NaN.
            largest = float(ml_dtypes.finfo(dtype).max)
            quotient = np.clip(quotient, -largest, largest)
        return quotient.astype(dtype)

    # float4e2m1 and the float6 types have no infinity or NaN: the cast itself
    # saturates.  ONNX adds the (zero) zero point first, which turns -0 into +0.
    if y_zero_point is not None:
        quotient = quotient + broadcast_parameter(y_zero_point, x.shape, axis, block_size)
    return quotient.astype(dtype)


def _widen(array):
    """An int32 array as float32 (each value rounded to nearest even); any
    other array as is."""
    return array.astype(np.float32) if array.dtype.kind in "iu" else array


def element_wise_quantize_linear(input, scale, zero_point=None, output_dtype=np.uint8):
    """DirectML's ELEMENT_WISE_QUANTIZE_LINEAR on operands that broadcast:
    ``clamp(round_half_even(float32(input) / float32(scale)) + zero_point)``,
    the division in float32 (float16 widens exactly; int32 rounds once)."""
    x = np.asarray(input).astype(np.float32)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        quotient = x / np.asarray(scale).astype(np.float32)
        rounded = np.rint(quotient).astype(np.float64)
    rounded = np.where(np.isnan(rounded), 0.0, rounded)
    if zero_point is not None:
        rounded = rounded + np.asarray(zero_point, np.float64)
    low, high = _dtypes.INTEGER_RANGES[_dtypes.name_of(np.dtype(output_dtype))]
    return np.clip(rounded, low, high).astype(output_dtype)


def element_wise_dequantize_linear(input, scale, zero_point=None):
    """DirectML's ELEMENT_WISE_DEQUANTIZE_LINEAR on operands that broadcast,
    in the arithmetic of ONNX's DequantizeLinear reference:
    ``float32(input) - zero_point`` in NumPy's promotion (float32 with an 8-
    or 16-bit zero point, float64 with a 32-bit one), times the scale,
    rounded once to the scale's type."""
    centred = np.asarray(input).astype(np.float32)
    if zero_point is not None:
        centred = centred - np.asarray(zero_point)
    scale = np.asarray(scale)
    with np.errstate(over="ignore"):
        return (centred * scale).astype(scale.dtype)


def expand_blocks(parameter, shape):
    """A QUANTIZE / DEQUANTIZE scale or zero point at the input's sizes.

    Along each dimension the parameter's size divides the input's, and
    element ``k`` takes the parameter at ``k // (shape[i] // parameter.shape[i])``:
    a size of 1 applies to every element, the input's size to one each, and
    any size between to blocks of consecutive elements.
    """
    parameter = np.asarray(parameter)
    for axis, (size, full) in enumerate(zip(parameter.shape, shape)):
        if size != full:
            parameter = np.repeat(parameter, full // size, axis=axis)
    return parameter


def quantize_blocks(input, scale, zero_point=None, output_dtype=None):
    """DirectML's QUANTIZE, as qops defines it:
    ``saturate(round_half_even(float32(input) / float32(scale)) + zero_point)``.

    The division is one float32 operation (a float16 input or scale widens
    exactly); a NaN quotient gives the zero point, infinities saturate.
    ``output_dtype`` (int8, uint8, ml_dtypes.int4 or uint4) defaults to the
    zero point's type.  The parameters apply per block (:func:`expand_blocks`).
    """
    x = np.asarray(input).astype(np.float32)
    if output_dtype is None:
        output_dtype = np.asarray(zero_point).dtype
    output_dtype = np.dtype(output_dtype)
    scale = expand_blocks(np.asarray(scale).astype(np.float32), x.shape)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        rounded = np.rint(x / scale).astype(np.float64)
    rounded = np.where(np.isnan(rounded), 0.0, rounded)
    if zero_point is not None:
        rounded = rounded + expand_blocks(np.asarray(zero_point).astype(np.float64), x.shape)
    low, high = _dtypes.INTEGER_RANGES[_dtypes.name_of(output_dtype)]
    return np.clip(rounded, low, high).astype(output_dtype)


def dequantize_blocks(input, scale, zero_point=None, output_dtype=None):
    """DirectML's DEQUANTIZE, as qops defines it: ``(float32(input) -
    zero_point) * scale``, computed in float32 and rounded once more to
    ``output_dtype`` when that is float16 (default: the scale's type).

    ``input`` may be a :class:`qops.Packed4Bit`; the parameters apply per
    block (:func:`expand_blocks`).
    """
    x = np.asarray(input).astype(np.float32)
    scale = np.asarray(scale)
    if output_dtype is None:
        output_dtype = scale.dtype
    if zero_point is not None:
        # 8-bit values and their differences are exact in float32.
        x = x - expand_blocks(np.asarray(zero_point).astype(np.float32), x.shape)
    product = x * expand_blocks(scale.astype(np.float32), x.shape)
    # Past float16's range is infinity: the defined result, not an error.
    with np.errstate(over="ignore"):
        return product.astype(output_dtype)
