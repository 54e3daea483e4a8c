"""ONNX QuantizeLinear / DequantizeLinear: arguments in, validated :class:`Call` out."""

from __future__ import annotations

import math

import numpy as np

from qops.registry import dtypes as _dtypes
from qops import registry
from qops.errors import UnsupportedError
from qops.ops.validation import Desc, check_attributes, check_scale_values, check_tensors, fail, plural, resolve_version, shape_text
from qops.ops import arguments as _args

DEQUANTIZE = registry.get("DequantizeLinear")
QUANTIZE = registry.get("QuantizeLinear")

# The float types a Python number given as a scale may take (x's, if one).
_FLOAT_SCALES = registry.onnx.FLOAT_TYPES[max(registry.onnx.OPSETS)]


def prepare_dequantize(slots: dict, attributes: dict, opset=None, *, out=None) -> _args.Call:
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
    if x is not None and scale is not None:
        descs["y"] = Desc(dtype=scale.desc.dtype, dtype_text=scale.desc.dtype_text, shape=x.desc.shape)
    check_tensors(op, version, descs)
    return _finish(op, version, given, descs, attributes, "x_scale", "x_zero_point",
                   descs["y"], out)


def prepare_quantize(slots: dict, attributes: dict, opset=None, *, out=None) -> _args.Call:
    """Normalize and validate a QuantizeLinear call."""
    op = QUANTIZE
    version = resolve_version(op, opset=opset)
    attributes = check_attributes(op, version, attributes)
    x = _args.as_tensor(op, "x", slots.get("x"))
    x_type = _args.registry_dtype(x)
    scale = _args.as_parameter(op, "y_scale", slots.get("y_scale"),
                               number_dtype=x_type if x_type in _FLOAT_SCALES else "FLOAT32")
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


def _finish(op, version, given, descs, attributes, scale_name, zero_point_name, output, out):
    x_desc, scale_desc = descs["x"], descs[scale_name]
    zero_desc = descs[zero_point_name]
    if zero_desc is not None and tuple(zero_desc.shape) != tuple(scale_desc.shape):
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
    return _args.Call(
        operator=op, version=version, arrays=arrays, attributes=attributes,
        output_shape=tuple(output.shape), output_dtype=_dtypes.to_numpy(output.dtype),
        granularity={scale_name: granularity})


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
