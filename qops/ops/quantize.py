"""ONNX QuantizeLinear and DequantizeLinear: the public functions, their validation
and their plans."""

from __future__ import annotations

import math

import numpy as np

from qops import registry
from qops.backends.contract import Call
from qops.errors import UnsupportedError
from qops.ops import arguments as _args
from qops.ops.plans import FastPath, PlanCache
from qops.ops.validation import (
    Desc,
    check_attributes,
    check_scale_values,
    check_tensors,
    fail,
    plural,
    resolve_version,
    shape_text,
)
from qops.registry import dtypes as _dtypes
from qops.threads import resolve_threads

__all__ = ["dequantize_linear", "quantize_linear", "prepare_dequantize", "prepare_quantize",
           "recheck_values"]

DEQUANTIZE = registry.get("DequantizeLinear")
QUANTIZE = registry.get("QuantizeLinear")

# The float types a Python number given as a scale may take (x's, if one).
_FLOAT_SCALES = registry.onnx.FLOAT_TYPES[max(registry.onnx.OPSETS)]


def dequantize_linear(x, x_scale, x_zero_point=None, *, axis=1, block_size=0, output_dtype=None,
                      opset=None, out=None, n_threads=None):
    """ONNX ``DequantizeLinear``: ``y = (x - x_zero_point) * x_scale``.

    Parameters
    ----------
    x : ndarray, Packed4Bit, Packed2Bit or Packed6Bit
        int8, uint8, int32 (from opset 10), float8 (19), int16, uint16, int4,
        uint4 (21), float4e2m1 (23), int2, uint2 (25), float6e2m3 or
        float6e3m2 (28); the narrow types as ml_dtypes arrays, or packed as
        ONNX stores them (:class:`qops.Packed4Bit` two to a byte,
        :class:`qops.Packed2Bit` four to a byte, both read in place without an
        unpacked copy; :class:`qops.Packed6Bit` four in three bytes).
    x_scale : number or ndarray of float32, float16, bfloat16 or float8e8m0
        A scalar (per tensor), a 1-d array of ``x.shape[axis]`` (per axis,
        from opset 13) or an array of x's rank with
        ``ceil(x.shape[axis] / block_size)`` along ``axis`` (blocked, from 21).
        Its type is the output's unless ``output_dtype`` is given; float8e8m0
        (a power of two, from opset 24) is no output type and needs it.
    x_zero_point : number or ndarray, optional
        Same shape as ``x_scale`` (a 0-d and a one-element 1-D array are both
        per tensor and may stand beside each other, as in ONNX), same type as
        ``x``; must be 0 for int32, float8 and float4.
    axis : int, default 1
        Negative values count from the back.
    block_size : int, default 0
    output_dtype : dtype-like, optional
        float32, float16 or bfloat16 (from opset 23): the output type, which
        the product is rounded to.
    opset : int, optional
        Validate against this ONNX opset (default: the newest qops knows).
    out, n_threads
        As for :func:`quantized_linear_convolution`.

    Returns
    -------
    ndarray of x's shape, of ``output_dtype`` or else x_scale's type
        Computed in float32 and rounded once to the output type.

    Notes
    -----
    Every value of every type has a defined result: float8 NaN gives NaN
    and float8 infinity (e5m2) infinity, scaled; float4e2m1 and the float6
    types have neither.
    A product beyond a float16 output's range is infinity.

    Examples
    --------
    >>> import numpy as np
    >>> dequantize_linear(np.array([0, 128, 255], np.uint8), 0.5, np.uint8(128))
    array([-64. ,   0. ,  63.5], dtype=float32)
    """
    slots = dict(x=x, x_scale=x_scale, x_zero_point=x_zero_point)
    return DEQUANTIZE_PLANS.run(slots, dict(axis=axis, block_size=block_size,
                                            output_dtype=output_dtype),
                                opset, out=out, n_threads=resolve_threads(n_threads))


def quantize_linear(x, y_scale, y_zero_point=None, *, axis=1, block_size=0, saturate=True,
                    output_dtype=None, precision=None, opset=None, out=None, n_threads=None):
    """ONNX ``QuantizeLinear``: ``y = saturate(round_half_even(x / y_scale) + y_zero_point)``.

    Parameters
    ----------
    x : ndarray of float32, float16, bfloat16 or int32
        float16 and bfloat16 from opset 19; int32 in every opset.
    y_scale : number or ndarray
        float32, float16, bfloat16 (from opset 19), int32 (from opset 19) or
        float8e8m0 (from opset 24); per tensor, per axis or blocked, as for
        :func:`dequantize_linear`.  In opsets 19 and 21 it has x's type (an
        int32 x needs an int32 scale, and a number given here takes x's
        type); otherwise a number is float32 beside an int32 x.  An int32
        scale, like any other, must be positive.
    y_zero_point : number or ndarray, optional
        Same shape as ``y_scale`` (a 0-d and a one-element 1-D array are both
        per tensor and may stand beside each other, as in ONNX); its type is the
        output's.
    axis, block_size
        As for :func:`dequantize_linear`.
    saturate : bool, default True
        float8 outputs: clamp to the largest finite value instead of
        producing infinity or NaN (from opset 19).
    output_dtype : dtype-like, optional
        The output type when there is no zero point (from opset 21; default uint8).
    precision : dtype-like, optional
        The float type of the division (from opset 23; default: the common
        type of ``x`` and ``y_scale``, float32 where they have none, as for
        float16 or bfloat16 with a float8e8m0 scale, and float32 whenever
        ``x`` or ``y_scale`` is int32).
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
    int4, uint4, int2 and uint2 never wrap around.  float8 outputs: NaN stays NaN (the
    fnuz types' one NaN); with ``saturate`` (the default) every other value
    beyond the largest finite one (448 for e4m3fn, 240 for e4m3fnuz, 57344
    for the e5m2 types), infinities included, gives that value with its
    sign; without it, e5m2 overflows to infinity and the others to NaN.
    float4e2m1, float6e2m3 and float6e3m2 (opset 28) have no infinity or
    NaN: out of range gives the largest magnitude (6, 7.5 and 28) with its
    sign, and NaN gives a zero (-0 for a positive NaN, as ml_dtypes
    converts).  All of this is what ``onnx.reference`` computes.

    An int32 ``x`` or ``y_scale`` is converted to float32 (to nearest, ties to
    even) before the division, which runs in float32 unless ``precision``
    names another type: ``float32(x) / float32(y_scale)``.  ``onnx.reference``
    divides int32 by float32 in float64 instead, so for an ``x`` beyond
    2**24 in magnitude, or a quotient whose float32 rounding crosses a
    half-integer, its result may differ from this one.

    Examples
    --------
    >>> import numpy as np
    >>> quantize_linear(np.array([-1.0, 0.25, 0.75, 100.0], np.float32), 0.5, np.int8(0))
    array([ -2,   0,   2, 127], dtype=int8)
    """
    if (type(axis) is int and axis == 1 and type(block_size) is int and block_size == 0
            and (saturate is True or saturate is False) and output_dtype is None
            and precision is None and opset is None):
        fast = QUANTIZE_FAST.get()
        if fast is not None:
            result = fast.run(x, y_scale, y_zero_point, out,
                              resolve_threads() if n_threads is None else n_threads)
            if result is not None:
                return result
    slots = dict(x=x, y_scale=y_scale, y_zero_point=y_zero_point)
    attributes = dict(axis=axis, block_size=block_size, saturate=saturate,
                      output_dtype=output_dtype, precision=precision)
    return QUANTIZE_PLANS.run(slots, attributes, opset, out=out,
                              n_threads=resolve_threads(n_threads))


def prepare_dequantize(slots: dict, attributes: dict, opset=None, *, out=None) -> Call:
    """Normalize and validate a DequantizeLinear call."""
    op = DEQUANTIZE
    version = resolve_version(op, opset=opset)
    attributes = check_attributes(op, version, attributes)
    x = _args.as_tensor(op, "x", slots.get("x"))
    scale = _args.as_parameter(op, "x_scale", slots.get("x_scale"), number_dtype="FLOAT32")
    zero_point = _args.as_parameter(op, "x_zero_point", slots.get("x_zero_point"),
                                    number_dtype=_args.registry_dtype(x))
    given = {"x": x, "x_scale": scale, "x_zero_point": zero_point}
    descs = {name: (item.desc if item is not None else None) for name, item in given.items()}
    output_type = attributes.get("output_dtype")
    if x is not None and scale is not None:
        if output_type is not None:
            descs["y"] = Desc(dtype=output_type, dtype_text=_dtypes.label(_dtypes.to_numpy(output_type)),
                              shape=x.desc.shape)
        else:
            _check_scale_is_an_output_type(op, version, scale.desc)
            descs["y"] = Desc(dtype=scale.desc.dtype, dtype_text=scale.desc.dtype_text,
                              shape=x.desc.shape)
    check_tensors(op, version, descs)
    return _finish(op, version, given, descs, attributes, "x_scale", "x_zero_point",
                   descs["y"], out)


def prepare_quantize(slots: dict, attributes: dict, opset=None, *, out=None) -> Call:
    """Normalize and validate a QuantizeLinear call."""
    op = QUANTIZE
    version = resolve_version(op, opset=opset)
    attributes = check_attributes(op, version, attributes)
    x = _args.as_tensor(op, "x", slots.get("x"))
    scale = _args.as_parameter(op, "y_scale", slots.get("y_scale"),
                               number_dtype=_number_scale_type(version, _args.registry_dtype(x)))
    output_type = attributes["output_dtype"]
    zero_point = _args.as_parameter(op, "y_zero_point", slots.get("y_zero_point"),
                                    number_dtype=output_type or "UINT8")
    given = {"x": x, "y_scale": scale, "y_zero_point": zero_point}
    descs = {name: (item.desc if item is not None else None) for name, item in given.items()}
    if output_type is not None:
        output_text = _dtypes.label(_dtypes.to_numpy(output_type))
    elif zero_point is not None:  # its type, known to the registry or not (reported below)
        output_type, output_text = zero_point.desc.dtype, zero_point.desc.dtype_text
    else:
        output_type, output_text = "UINT8", "uint8"
    if x is not None:
        descs["y"] = Desc(dtype=output_type, dtype_text=output_text, shape=x.desc.shape)
    check_tensors(op, version, descs)
    return _finish(op, version, given, descs, attributes, "y_scale", "y_zero_point",
                   descs["y"], out)


def _number_scale_type(version, x_type):
    """The type a Python number given as QuantizeLinear's scale takes: x's
    float type; beside an int32 x, int32 where the opset makes the scale share
    x's type (19 and 21), else float32."""
    if x_type in _FLOAT_SCALES:
        return x_type
    shared = any(c.kind is registry.ConstraintKind.SAME_DTYPE and set(c.slots) == {"x", "y_scale"}
                 for c in QUANTIZE.constraints_at(version))
    return "INT32" if x_type == "INT32" and shared else "FLOAT32"


def _check_scale_is_an_output_type(op, version, scale_desc):
    """A float8e8m0 scale (opset 24) holds powers of two, and no output has
    its type: the call must name one."""
    support = op.support(version)
    if (scale_desc.dtype in support.tensor("x_scale").dtypes
            and scale_desc.dtype not in support.tensor("y").dtypes):
        choices = ", ".join(_dtypes.label(_dtypes.to_numpy(t)) for t in support.tensor("y").dtypes)
        fail(op, f"x_scale has dtype {scale_desc.dtype_text}, which is no output type; "
                 f"give output_dtype ({choices})", slot="output_dtype",
             given=scale_desc.dtype_text, allowed=support.tensor("y").dtypes)


def _finish(op, version, given, descs, attributes, scale_name, zero_point_name, output, out):
    x_desc, scale_desc = descs["x"], descs[scale_name]
    zero_desc = descs[zero_point_name]
    if (zero_desc is not None and tuple(zero_desc.shape) != tuple(scale_desc.shape)
            and not (_one_value(zero_desc.shape) and _one_value(scale_desc.shape))):
        fail(op, f"{zero_point_name} has shape {shape_text(zero_desc.shape)} but {scale_name} "
                 f"{shape_text(scale_desc.shape)}; they must have the same shape",
             slot=zero_point_name, given=tuple(zero_desc.shape))
    granularity, axis = _granularity(op, version, x_desc, scale_desc, scale_name, attributes)
    attributes = dict(attributes, axis=axis)

    arrays, complete = _args.arrays_of(given)
    # qops.validate may mix descriptions and data: check whatever has data.
    if arrays[scale_name] is not None:
        check_scale_values(op, scale_name, arrays[scale_name])
    if arrays[zero_point_name] is not None:
        quantized_type = output.dtype if op is QUANTIZE else x_desc.dtype
        _check_zero_point(op, zero_point_name, arrays[zero_point_name], quantized_type)
    if complete:
        _args.check_out(op, out, output.shape, _dtypes.to_numpy(output.dtype), arrays)
    else:
        arrays = None
    return Call(
        operator=op, version=version, arrays=arrays, attributes=attributes,
        output_shape=tuple(output.shape), output_dtype=_dtypes.to_numpy(output.dtype),
        granularity={scale_name: granularity})


def _one_value(shape):
    """A 0-d or one-element 1-D shape: per tensor, as ONNX (and onnx.reference
    and onnxruntime) take a scale or zero point of either shape beside the
    other's."""
    return len(shape) <= 1 and math.prod(shape) == 1


def _granularity(op, version, x_desc, scale_desc, scale_name, attributes):
    """Per-tensor, per-axis or blocked, from the scale's shape; checks the axis
    and block size against ``x``.  Returns the granularity and the axis made
    non-negative (or as given when it is not used)."""
    allowed = op.support(version).granularities
    rank = x_desc.ndim
    axis = attributes["axis"]
    block_size = attributes["block_size"] or 0
    scale_shape = tuple(scale_desc.shape)
    size = math.prod(scale_shape)

    def need(granularity):
        if granularity not in allowed:
            first = op.first_version(lambda row: granularity in row.granularities, after=version)
            fail(op, f"{scale_name} has shape {shape_text(scale_shape)}, which is {granularity} "
                     f"quantization; {version} supports "
                     + " and ".join(allowed) + (f" ({granularity} from {first})" if first else ""),
                 UnsupportedError, slot=scale_name, given=scale_shape, first_version=first)

    def resolved_axis():
        if rank == 0:
            fail(op, f"x is a scalar; {scale_name} {shape_text(scale_shape)} needs an axis of x",
                 slot=scale_name, given=scale_shape)
        if not -rank <= axis < rank:
            fail(op, f"axis is {axis}; x has {plural(rank, 'dimension')}, so axis must be in "
                     f"[{-rank}, {rank - 1}]", slot="axis", given=axis)
        return axis % rank

    if block_size:
        need("blocked")
        if len(scale_shape) != rank:
            fail(op, f"{scale_name} has shape {shape_text(scale_shape)}; blocked quantization needs "
                     f"the rank of x {shape_text(x_desc.shape)}", slot=scale_name, given=scale_shape)
        dim = resolved_axis()
        expected = list(x_desc.shape)
        expected[dim] = -(-x_desc.shape[dim] // block_size)
        if scale_shape != tuple(expected):
            fail(op, f"{scale_name} has shape {shape_text(scale_shape)}; with block_size {block_size} "
                     f"along axis {dim} of x {shape_text(x_desc.shape)} it must be "
                     f"{shape_text(tuple(expected))}", slot=scale_name, given=scale_shape,
                 allowed=tuple(expected))
        return "blocked", dim
    if len(scale_shape) == 0 or (len(scale_shape) == 1 and size == 1):
        return "per-tensor", axis
    if len(scale_shape) == 1:
        need("per-axis")
        dim = resolved_axis()
        if scale_shape[0] != x_desc.shape[dim]:
            fail(op, f"{scale_name} has {scale_shape[0]} elements; per-axis quantization along axis "
                     f"{dim} of x {shape_text(x_desc.shape)} needs {x_desc.shape[dim]}",
                 slot=scale_name, given=scale_shape, allowed=(x_desc.shape[dim],))
        return "per-axis", dim
    fail(op, f"{scale_name} has shape {shape_text(scale_shape)}; a scale of rank 2 or more is "
             "blocked quantization and needs block_size", slot=scale_name, given=scale_shape)


def recheck_values(template, arrays):
    """The value checks of a call whose signature was validated before
    (qops.ops.plans): the scale, and a zero point that must be 0."""
    op = template.operator
    scale_name, zero_name = (("x_scale", "x_zero_point") if op is DEQUANTIZE
                             else ("y_scale", "y_zero_point"))
    check_scale_values(op, scale_name, arrays[scale_name])
    if arrays[zero_name] is not None:
        quantized = (arrays["x"].dtype if op is DEQUANTIZE else template.output_dtype)
        _check_zero_point(op, zero_name, arrays[zero_name], _dtypes.name_of(quantized))


def _check_zero_point(op, name, zero_point, quantized_type):
    """int32, float8 and float4 zero points exist only as 0 (ONNX)."""
    if quantized_type == "INT32" or quantized_type in _dtypes.NARROW_FLOATS:
        values = np.asarray(zero_point).astype(np.float32)
        if np.any(values != 0):
            fail(op, f"{name} must be 0 for {_dtypes.label(_dtypes.to_numpy(quantized_type))}; "
                     "ONNX defines no other zero point for it", slot=name)


#: Validated signatures of the plain functions; the per-tensor quantize fast
#: path (float32 to int8 / uint8 at the defaults: qops.backends.native._lean).
DEQUANTIZE_PLANS = PlanCache(prepare_dequantize, recheck_values, ("x_scale", "x_zero_point"))
QUANTIZE_PLANS = PlanCache(prepare_quantize, recheck_values, ("y_scale", "y_zero_point"))
QUANTIZE_FAST = FastPath("QuantizeLinear")
