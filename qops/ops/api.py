"""The public operator functions and :func:`validate`.

Each function normalizes its arguments, validates the whole call against the
registry (nothing runs before every check has passed) and hands it to the
dispatch point.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qops.backends import dispatch as _dispatch
from qops.registry import dtypes as _dtypes
from qops import reference, registry
from qops.threads import resolve_threads
from qops.errors import DTypeValidationError, ValidationError
from qops.ops.validation import TensorDesc, fail, resolve_version, shape_text
from qops.ops import convolution as _convolution
from qops.ops import integer as _integer
from qops.ops import matmul as _matmul
from qops.ops import quantize as _quantize
from qops.ops.plans import PlanCache, lean_cache

# Validated signatures of the plain functions: a call like an earlier one
# checks only its values.
_CONVOLUTION_PLANS = PlanCache(_convolution.prepare, _convolution.SCALES)
_MATMUL_PLANS = PlanCache(_matmul.prepare, _matmul.SCALES)
# Small matrix multiplies at the default level and output type: the lean
# path checks a call against the signatures validated before and runs it
# (see qops.backends.native._lean).  Made on first use, so that importing qops loads
# nothing compiled; ``None`` in a checkout whose extensions are not built.
_MATMUL_LEAN = []


def _matmul_lean():
    if not _MATMUL_LEAN:
        _MATMUL_LEAN.append(lean_cache())
    return _MATMUL_LEAN[0]

# Per-tensor float32 to int8 / uint8 quantization at the defaults: checked
# and run in C (qops.backends.native._lean.quantize_per_tensor) with the selected
# kernels' entry, found on first use; ``None`` when not built.
_QUANTIZE_LEAN = []


def _quantize_lean():
    if not _QUANTIZE_LEAN:
        try:
            from qops.backends.native import variants as _simd
            from qops.backends.native._lean import quantize_per_tensor

            entry = _simd.quantize_module(None).lean_entry()
        except ImportError:
            _QUANTIZE_LEAN.append(None)
        else:
            _QUANTIZE_LEAN.append((quantize_per_tensor, entry))
    return _QUANTIZE_LEAN[0]


_DEQUANTIZE_PLANS = PlanCache(_quantize.prepare_dequantize, ("x_scale",),
                              check_values=_quantize.recheck_values)
_QUANTIZE_PLANS = PlanCache(_quantize.prepare_quantize, ("y_scale",),
                            check_values=_quantize.recheck_values)

__all__ = [
    "quantized_linear_convolution",
    "quantized_linear_matrix_multiply",
    "dequantize_linear",
    "quantize_linear",
    "convolution_integer",
    "matrix_multiply_integer",
    "dynamic_quantize_linear",
    "validate",
    "Validated",
]


def quantized_linear_convolution(input=None, input_scale=None, input_zero_point=None, filter=None,
                                 filter_scale=None, filter_zero_point=None, bias=None,
                                 output_scale=None, output_zero_point=None, *, strides=None,
                                 dilations=None, start_padding=None, end_padding=None,
                                 group_count=None, output_dtype=None, feature_level=None, out=None,
                                 n_threads=None):
    """DirectML ``QUANTIZED_LINEAR_CONVOLUTION``: 2-D convolution of quantized data.

    Parameters
    ----------
    input : ndarray of uint8 or int8, shape (N, C, H, W)
    input_scale : float or ndarray of float32
        Per tensor: a number, a 0-d array or shape ``(1, 1, 1, 1)``.
    input_zero_point : int or ndarray, optional
        Per tensor, the type of ``input``.
    filter : ndarray of uint8 or int8, shape (OC, C / group_count, KH, KW)
    filter_scale : float or ndarray of float32
        Per tensor, or per output channel: ``(1, OC, 1, 1)`` or a 1-d array of ``OC``.
    filter_zero_point : int or ndarray, optional
        Shaped like ``filter_scale``, the type of ``filter``.
    bias : ndarray of int32, optional
        ``(1, OC, 1, 1)`` or a 1-d array of ``OC``.
    output_scale : float or ndarray of float32
        Per tensor.
    output_zero_point : int or ndarray, optional
        Per tensor; its type is the output's.
    strides, dilations : pair of int, optional
        Default ``(1, 1)``.
    start_padding, end_padding : pair of int, optional
        Zeros (in the real domain) before and after each spatial dimension; default ``(0, 0)``.
    group_count : int, optional
        Default 1; the input channel count gives a depthwise convolution.
    output_dtype : dtype-like, optional
        The output type when there is no output zero point (default: the input's).
    feature_level : str, tuple or FeatureLevel, optional
        Validate against this DirectML feature level (default: the newest).
    out : ndarray, optional
        A C-contiguous array of the output's shape and type to write into.
    n_threads : int, optional
        Threads for this call (default: :func:`qops.get_num_threads`).

    Returns
    -------
    ndarray of shape (N, OC, OH, OW)
        ``saturate(round_half_even(float32(acc) * m) + output_zero_point)`` where
        ``acc`` is the exact sum of ``(input - input_zero_point) * (filter -
        filter_zero_point)`` over each window plus ``bias`` and
        ``m = float32(float32(input_scale * filter_scale) / output_scale)``.

    Raises
    ------
    qops.ValidationError
        For any argument the feature level does not accept; nothing is written.

    Examples
    --------
    >>> import numpy as np
    >>> image = np.arange(16, dtype=np.uint8).reshape(1, 1, 4, 4)
    >>> box = np.ones((1, 1, 2, 2), np.int8)
    >>> quantized_linear_convolution(input=image, input_scale=1.0, filter=box, filter_scale=1.0,
    ...                              output_scale=4.0, strides=(2, 2))
    array([[[[ 2,  4],
             [10, 12]]]], dtype=uint8)
    """
    slots = dict(input=input, input_scale=input_scale, input_zero_point=input_zero_point,
                 filter=filter, filter_scale=filter_scale, filter_zero_point=filter_zero_point,
                 bias=bias, output_scale=output_scale, output_zero_point=output_zero_point)
    attributes = dict(strides=strides, dilations=dilations, start_padding=start_padding,
                      end_padding=end_padding, group_count=group_count, output_dtype=output_dtype)
    return _CONVOLUTION_PLANS.run(slots, attributes, feature_level, out=out,
                                  n_threads=resolve_threads(n_threads))


def quantized_linear_matrix_multiply(a=None, a_scale=None, a_zero_point=None, b=None, b_scale=None,
                                     b_zero_point=None, output_scale=None, output_zero_point=None, *,
                                     output_dtype=None, feature_level=None, out=None, n_threads=None):
    """DirectML ``QUANTIZED_LINEAR_MATRIX_MULTIPLY``: batched matrix multiply of quantized data.

    Parameters
    ----------
    a : ndarray of uint8 or int8, shape (..., M, K)
        4 dimensions at feature level 2_1, 2 to 4 from 4_0.
    a_scale, a_zero_point : number or ndarray
        Per tensor or per row of A: ``(1, 1, M, 1)`` (trailing dimensions of it
        at lower ranks).
    b : ndarray of uint8 or int8, shape (..., K, N)
        The same number of dimensions as ``a``; batch dimensions of size 1 broadcast.
    b_scale, b_zero_point : number or ndarray
        Per tensor or per column of B: ``(1, 1, 1, N)``.
    output_scale, output_zero_point : number or ndarray
        Per tensor or per row of the output: ``(1, 1, M, 1)``.  The zero
        point's type is the output's.
    output_dtype : dtype-like, optional
        The output type when there is no output zero point (default: A's).
    feature_level, out, n_threads
        As for :func:`quantized_linear_convolution`.

    Returns
    -------
    ndarray of shape (..., M, N)
        Requantized exactly as for the convolution, with
        ``m = float32(float32(a_scale * b_scale) / output_scale)``.

    Examples
    --------
    >>> import numpy as np
    >>> a = np.array([[1, 2], [3, 4]], np.uint8)
    >>> b = np.array([[1, -1], [1, 1]], np.int8)
    >>> quantized_linear_matrix_multiply(a=a, a_scale=1.0, b=b, b_scale=1.0, output_scale=1.0,
    ...                                  output_dtype=np.int8)
    array([[3, 1],
           [7, 1]], dtype=int8)
    """
    lean = _matmul_lean() if output_dtype is None and feature_level is None else None
    if lean is not None:
        result = lean.run(a, a_scale, a_zero_point, b, b_scale, b_zero_point, output_scale,
                          output_zero_point, out, n_threads)
        if result is not None:
            return result
    slots = dict(a=a, a_scale=a_scale, a_zero_point=a_zero_point, b=b, b_scale=b_scale,
                 b_zero_point=b_zero_point, output_scale=output_scale,
                 output_zero_point=output_zero_point)
    return _MATMUL_PLANS.run(slots, dict(output_dtype=output_dtype), feature_level, out=out,
                             n_threads=resolve_threads(n_threads), lean=lean)


def convolution_integer(input=None, input_zero_point=None, filter=None, filter_zero_point=None, *,
                        strides=None, dilations=None, start_padding=None, end_padding=None,
                        group_count=None, feature_level=None, out=None, n_threads=None):
    """DirectML ``CONVOLUTION_INTEGER`` (ONNX ConvInteger): exact convolution sums.

    Parameters
    ----------
    input : ndarray of uint8 or int8, shape (N, C, H, W), or (N, C, W) from feature level 4_0
    input_zero_point : int or ndarray, optional
        Per tensor, the type of ``input``.
    filter : ndarray of uint8 or int8, shape (OC, C / group_count, KH, KW) or (OC, C / group_count, KW)
    filter_zero_point : int or ndarray, optional
        Per tensor, or per output channel (a 1-d array of ``OC`` or ``(1, OC, 1, 1)``).
    strides, dilations, start_padding, end_padding, group_count
        As for :func:`quantized_linear_convolution` (one value each for a 1-D convolution).
    feature_level, out, n_threads
        As for :func:`quantized_linear_convolution`.

    Returns
    -------
    ndarray of int32, shape (N, OC, OH, OW) or (N, OC, OW)
        The exact sum of ``(input - input_zero_point) * (filter - filter_zero_point)``
        over each window.  A sum int32 cannot hold raises ``qops.ValidationError``
        (ONNX runtimes wrap it).
    """
    slots = dict(input=input, input_zero_point=input_zero_point, filter=filter,
                 filter_zero_point=filter_zero_point)
    attributes = dict(strides=strides, dilations=dilations, start_padding=start_padding,
                      end_padding=end_padding, group_count=group_count)
    call = _integer.prepare_convolution_integer(slots, attributes, feature_level, out=out)
    return _dispatch.execute(call, out=out, n_threads=resolve_threads(n_threads))


def matrix_multiply_integer(a=None, a_zero_point=None, b=None, b_zero_point=None, *,
                            feature_level=None, out=None, n_threads=None):
    """DirectML ``MATRIX_MULTIPLY_INTEGER`` (ONNX MatMulInteger): exact products.

    Parameters
    ----------
    a, b : ndarray of uint8 or int8, shapes (..., M, K) and (..., K, N)
        4 dimensions at feature level 2_1, 2 to 4 from 4_0; batch dimensions of
        size 1 broadcast.
    a_zero_point : int or ndarray, optional
        Per tensor or per row of A.
    b_zero_point : int or ndarray, optional
        Per tensor or per column of B.
    feature_level, out, n_threads
        As for :func:`quantized_linear_matrix_multiply`.

    Returns
    -------
    ndarray of int32, shape (..., M, N)
        ``(a - a_zero_point) @ (b - b_zero_point)``, exact; a value int32
        cannot hold raises ``qops.ValidationError``.
    """
    slots = dict(a=a, a_zero_point=a_zero_point, b=b, b_zero_point=b_zero_point)
    call = _integer.prepare_matrix_multiply_integer(slots, {}, feature_level, out=out)
    return _dispatch.execute(call, out=out, n_threads=resolve_threads(n_threads))


def dynamic_quantize_linear(input, *, output_dtype=None, feature_level=None, n_threads=None):
    """DirectML ``DYNAMIC_QUANTIZE_LINEAR`` (ONNX DynamicQuantizeLinear).

    The scale and zero point come from the input's range widened to include
    0 (so that 0 is exact), as ONNX defines them::

        scale = (max(x, 0) - min(x, 0)) / (qmax - qmin)      (1 when the range is empty)
        zero_point = round(clip(qmin - min(x, 0) / scale, qmin, qmax))
        y = saturate(round(x / scale) + zero_point)

    in float32, rounding half to even.

    Parameters
    ----------
    input : ndarray of float32 or float16
        Finite values, at least one.
    output_dtype : dtype-like, optional
        ``uint8`` (default, ONNX's only type) or ``int8``.
    feature_level, n_threads
        As for the other operators; the operator exists from feature level 4_0.

    Returns
    -------
    (y, scale, zero_point)
        ``y`` shaped as ``input``; ``scale`` (float32) and ``zero_point``
        (``y``'s type) with one element and the input's dimension count.
    """
    call = _integer.prepare_dynamic_quantize(
        {"input": input}, {"output_dtype": output_dtype}, feature_level)
    x = np.asarray(call.arrays["input"], np.float32)
    scale, zero_point = reference.dynamic_quantize_parameters(x, call.output_dtype)
    if 0 < scale < np.inf:
        # The quantization itself is QuantizeLinear's rule, and runs where it does.
        y = quantize_linear(x, scale, zero_point, n_threads=n_threads)
    else:
        # A range inside float32's subnormals (span / 255 underflows to 0) or
        # past its largest value (the span overflows): QuantizeLinear refuses
        # such a scale, and ONNX's arithmetic goes on; the reference follows it.
        y = reference.dynamic_quantize_linear(x, call.output_dtype)[0]
    one = (1,) * x.ndim
    return y, np.full(one, scale, np.float32), np.full(one, zero_point, call.output_dtype)


def dequantize_linear(x, x_scale, x_zero_point=None, *, axis=1, block_size=0, opset=None, out=None,
                      n_threads=None):
    """ONNX ``DequantizeLinear``: ``y = (x - x_zero_point) * x_scale``.

    Parameters
    ----------
    x : ndarray or Packed4Bit
        int8, uint8, int32 (from opset 10), float8 (19), int16, uint16, int4,
        uint4 (21) or float4e2m1 (23); the narrow types as ml_dtypes arrays,
        or the 4-bit types packed two to a byte as ONNX stores them
        (:class:`qops.Packed4Bit`, read in place without an unpacked copy).
    x_scale : number or ndarray of float32, float16 or bfloat16
        A scalar (per tensor), a 1-d array of ``x.shape[axis]`` (per axis,
        from opset 13) or an array of x's rank with
        ``ceil(x.shape[axis] / block_size)`` along ``axis`` (blocked, from 21).
        Its type is the output's.
    x_zero_point : number or ndarray, optional
        Same shape as ``x_scale``, same type as ``x``; must be 0 for int32,
        float8 and float4.
    axis : int, default 1
        Negative values count from the back.
    block_size : int, default 0
    opset : int, optional
        Validate against this ONNX opset (default 23).
    out, n_threads
        As for :func:`quantized_linear_convolution`.

    Returns
    -------
    ndarray of x's shape and x_scale's type
        Computed in float32 and rounded once to the scale's type.

    Notes
    -----
    Every value of every type has a defined result: float8 NaN gives NaN
    and float8 infinity (e5m2) infinity, scaled; float4e2m1 has neither.
    A product beyond a float16 output's range is infinity.

    Examples
    --------
    >>> import numpy as np
    >>> dequantize_linear(np.array([0, 128, 255], np.uint8), 0.5, np.uint8(128))
    array([-64. ,   0. ,  63.5], dtype=float32)
    """
    slots = dict(x=x, x_scale=x_scale, x_zero_point=x_zero_point)
    return _DEQUANTIZE_PLANS.run(slots, dict(axis=axis, block_size=block_size), opset, out=out,
                                 n_threads=resolve_threads(n_threads))


def quantize_linear(x, y_scale, y_zero_point=None, *, axis=1, block_size=0, saturate=True,
                    output_dtype=None, precision=None, opset=None, out=None, n_threads=None):
    """ONNX ``QuantizeLinear``: ``y = saturate(round_half_even(x / y_scale) + y_zero_point)``.

    Parameters
    ----------
    x : ndarray of float32, float16 or bfloat16
    y_scale : number or ndarray
        Per tensor, per axis or blocked, as for :func:`dequantize_linear`.
    y_zero_point : number or ndarray, optional
        Same shape as ``y_scale``; its type is the output's.
    axis, block_size
        As for :func:`dequantize_linear`.
    saturate : bool, default True
        float8 outputs: clamp to the largest finite value instead of
        producing infinity or NaN (from opset 19).
    output_dtype : dtype-like, optional
        The output type when there is no zero point (from opset 21; default uint8).
    precision : dtype-like, optional
        The float type of the division (from opset 23; default: the common
        type of ``x`` and ``y_scale``).
    opset, out, n_threads
        As for :func:`dequantize_linear`.

    Returns
    -------
    ndarray of x's shape
        Of the zero point's type, else ``output_dtype``, else uint8.

    Notes
    -----
    Integer outputs saturate: values beyond the type's range (infinities
    included) give its minimum or maximum, and NaN gives the zero point;
    int4 and uint4 never wrap around.  float8 outputs: NaN stays NaN (the
    fnuz types' one NaN); with ``saturate`` (the default) every other value
    beyond the largest finite one (448 for e4m3fn, 240 for e4m3fnuz, 57344
    for the e5m2 types), infinities included, gives that value with its
    sign; without it, e5m2 overflows to infinity and the others to NaN.
    float4e2m1 has no infinity or NaN: out of range gives +-6, and NaN gives
    a zero (-0 for a positive NaN, as ml_dtypes converts).  All of this is
    what ``onnx.reference`` computes.

    Examples
    --------
    >>> import numpy as np
    >>> quantize_linear(np.array([-1.0, 0.25, 0.75, 100.0], np.float32), 0.5, np.int8(0))
    array([ -2,   0,   2, 127], dtype=int8)
    """
    if (type(axis) is int and axis == 1 and type(block_size) is int and block_size == 0
            and (saturate is True or saturate is False) and output_dtype is None
            and precision is None and opset is None):
        lean = _quantize_lean()
        if lean is not None:
            run, entry = lean
            result = run(entry, x, y_scale, y_zero_point, out,
                         resolve_threads() if n_threads is None else n_threads)
            if result is not None:
                return result
    slots = dict(x=x, y_scale=y_scale, y_zero_point=y_zero_point)
    attributes = dict(axis=axis, block_size=block_size, saturate=saturate,
                      output_dtype=output_dtype, precision=precision)
    return _QUANTIZE_PLANS.run(slots, attributes, opset, out=out,
                               n_threads=resolve_threads(n_threads))


# -- validate -------------------------------------------------------------------

_PREPARE = {
    "QUANTIZED_LINEAR_CONVOLUTION": _convolution.prepare,
    "QUANTIZED_LINEAR_MATRIX_MULTIPLY": _matmul.prepare,
    "DequantizeLinear": _quantize.prepare_dequantize,
    "QuantizeLinear": _quantize.prepare_quantize,
    "CONVOLUTION_INTEGER": _integer.prepare_convolution_integer,
    "MATRIX_MULTIPLY_INTEGER": _integer.prepare_matrix_multiply_integer,
    "DYNAMIC_QUANTIZE_LINEAR": _integer.prepare_dynamic_quantize,
}


@dataclass(frozen=True)
class Validated:
    """What :func:`validate` found: the version checked and the output it implies."""

    operator: str
    version: object
    output_shape: tuple
    output_dtype: str
    granularity: dict

    def __str__(self):
        granularity = ", ".join(f"{k} {v}" for k, v in self.granularity.items())
        text = (f"{self.operator} at {self.version}: valid; output {self.output_dtype} "
                f"{shape_text(self.output_shape)}")
        return text + (f" ({granularity})" if granularity else "")


def validate(name, *, feature_level=None, opset=None, **slots):
    """Check a call without running it.

    Parameters
    ----------
    name : str
        Registry name (``"QUANTIZED_LINEAR_CONVOLUTION"``) or function name.
    feature_level, opset
        The DirectML feature level or ONNX opset to check against (default: newest).
    **slots
        Tensor slots as arrays or :class:`qops.TensorDesc`, numbers for the
        scalar shorthand, attributes by name, and optionally the output slot
        (``output`` / ``y``) to check its description too.

    Returns
    -------
    Validated
        The output shape and type the call would produce.

    Raises
    ------
    qops.ValidationError
        The same error (and message) the operator function would raise.
    """
    try:
        op = registry.get(name)
    except KeyError as error:
        raise ValidationError(str(error.args[0]), given=name) from None
    slot_names = {s.name for s in op.inputs}
    output_name = op.output.name
    given_output = slots.pop(output_name, None)
    tensors = {k: v for k, v in slots.items() if k in slot_names}
    attributes = {k: v for k, v in slots.items() if k not in slot_names}
    version = resolve_version(op, feature_level, opset)
    prepare = _PREPARE[op.name]
    call = prepare(tensors, attributes, version)
    if given_output is not None:
        _check_output(op, given_output, call)
    return Validated(op.name, call.version, tuple(call.output_shape),
                     _dtypes.label(call.output_dtype), dict(call.granularity))


def _check_output(op, given, call):
    name = op.output.name
    desc = given if isinstance(given, TensorDesc) else np.asarray(given)
    shape = tuple(desc.sizes) if isinstance(desc, TensorDesc) else tuple(desc.shape)
    try:
        dtype = _dtypes.to_numpy(_dtypes.parse_dtype(desc.dtype))
    except ValueError:
        dtype = None
    if dtype != call.output_dtype:
        fail(op, f"{name} has dtype {desc.dtype}; the call produces {_dtypes.label(call.output_dtype)}",
             DTypeValidationError, slot=name, given=str(desc.dtype))
    if shape != tuple(call.output_shape):
        fail(op, f"{name} has shape {shape_text(shape)}; the call produces "
                 f"{shape_text(call.output_shape)}", slot=name, given=shape)
