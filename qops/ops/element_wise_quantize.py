"""ELEMENT_WISE_QUANTIZE_LINEAR and ELEMENT_WISE_DEQUANTIZE_LINEAR: the public
functions, their validation and their plans.

Every tensor has the input's sizes on DirectML, where a scale or zero point
broadcasts by strides of 0: qops takes NumPy's broadcasting at one dimension
count (a number or 0-d array is a scale or zero point for every element).
A call whose scale and zero point vary along at most one axis is the ONNX
QuantizeLinear / DequantizeLinear of that form and runs on their kernels.
"""

from __future__ import annotations

from qops import registry
from qops.backends.contract import Call
from qops.ops import arguments as _args
from qops.ops.plans import PlanCache
from qops.ops.validation import (
    Desc,
    check_attributes,
    check_scale_values,
    check_tensors,
    fail,
    resolve_version,
    shape_text,
)
from qops.registry import dtypes as _dtypes
from qops.threads import resolve_threads

__all__ = ["element_wise_quantize_linear", "element_wise_dequantize_linear",
           "prepare_quantize", "prepare_dequantize", "QUANTIZE_PLANS", "DEQUANTIZE_PLANS"]

QUANTIZE = registry.get("ELEMENT_WISE_QUANTIZE_LINEAR")
DEQUANTIZE = registry.get("ELEMENT_WISE_DEQUANTIZE_LINEAR")
_PARAMETERS = ("scale", "zero_point")


def element_wise_quantize_linear(input=None, scale=None, zero_point=None, *, output_dtype=None,
                                 feature_level=None, out=None, n_threads=None):
    """DirectML ``ELEMENT_WISE_QUANTIZE_LINEAR``: ``clamp(round(input / scale) + zero_point)``.

    Parameters
    ----------
    input : ndarray of float32, float16 (from 6_0) or int32 (from 2_1)
    scale : number or ndarray
        Broadcasts to the input (the same dimension count, sizes equal or 1).
        float32; the input's type when the input is float16.
    zero_point : number or ndarray of uint8 or int8, optional (from 6_2)
        Broadcasts likewise; its type is the output's.
    output_dtype : uint8 or int8, optional
        The output type when there is no zero point (default uint8).
    feature_level, out, n_threads
        As for :func:`quantized_linear_convolution`.

    Returns
    -------
    ndarray of the input's shape
        ``clamp(round_half_even(float32(input) / float32(scale)) + zero_point)``,
        the division one float32 operation (NaN gives the zero point).

    Examples
    --------
    >>> import numpy as np
    >>> element_wise_quantize_linear(np.array([[0.5, 1.5], [2.5, -7.0]], np.float32),
    ...                              np.array([[1.0], [2.0]], np.float32), np.uint8(2))
    array([[2, 4],
           [3, 0]], dtype=uint8)
    """
    slots = dict(input=input, scale=scale, zero_point=zero_point)
    return QUANTIZE_PLANS.run(slots, dict(output_dtype=output_dtype), feature_level, out=out,
                              n_threads=resolve_threads(n_threads))


def element_wise_dequantize_linear(input=None, scale=None, zero_point=None, *,
                                   feature_level=None, out=None, n_threads=None):
    """DirectML ``ELEMENT_WISE_DEQUANTIZE_LINEAR``: ``(input - zero_point) * scale``.

    Parameters
    ----------
    input : ndarray of int8, uint8, int16, uint16, int32 or uint32 (uint8 only at 1_0)
    scale : number or ndarray of float32 or float16 (from 6_0)
        Broadcasts to the input; its type is the output's.
    zero_point : number or ndarray, optional (from 6_2)
        The input's type; broadcasts likewise.
    feature_level, out, n_threads
        As for :func:`quantized_linear_convolution`.

    Returns
    -------
    ndarray of the input's shape and the scale's type
        As ONNX's DequantizeLinear computes it: ``float32(input) - zero_point``,
        times the scale, rounded once to the scale's type.

    Examples
    --------
    >>> import numpy as np
    >>> element_wise_dequantize_linear(np.array([[0, 10], [20, 30]], np.uint8), 0.5,
    ...                                np.array([[10], [20]], np.uint8))
    array([[-5.,  0.],
           [ 0.,  5.]], dtype=float32)
    """
    slots = dict(input=input, scale=scale, zero_point=zero_point)
    return DEQUANTIZE_PLANS.run(slots, {}, feature_level, out=out,
                                n_threads=resolve_threads(n_threads))


def _broadcast(item, shape):
    """A parameter seen at the input's sizes when it broadcasts there (one
    dimension count, each size equal or 1); else as given, for the
    constraints to report."""
    if item is None or len(item.desc.shape) != len(shape):
        return item
    if any(size not in (1, full) for size, full in zip(item.desc.shape, shape)):
        return item
    note = item.desc.note or f"broadcast from {shape_text(item.desc.shape)}"
    desc = Desc(item.desc.dtype, item.desc.dtype_text, tuple(shape), note)
    return _args.Slotted(item.array, desc)


def form_of(shapes):
    """``("per-tensor", 0)``, ``("per-axis", axis)`` when every parameter
    varies along that one axis at most, else ``("broadcast", 0)``."""
    axes = {axis for shape in shapes for axis, size in enumerate(shape) if size != 1}
    if not axes:
        return "per-tensor", 0
    if len(axes) == 1:
        return "per-axis", axes.pop()
    return "broadcast", 0


def _prepare(op, slots, attributes, feature_level, out, quantize):
    version = resolve_version(op, feature_level)
    attributes = check_attributes(op, version, attributes)
    given = {"input": _args.required_tensor(op, "input", slots.get("input"))}
    input_type = _args.registry_dtype(given["input"])
    if quantize:
        scale_number = input_type if input_type in ("FLOAT32", "FLOAT16") else "FLOAT32"
        zero_number = attributes["output_dtype"] or "UINT8"
    else:
        scale_number, zero_number = "FLOAT32", input_type
    given["scale"] = _args.as_parameter(op, "scale", slots.get("scale"), number_dtype=scale_number)
    given["zero_point"] = _args.as_parameter(op, "zero_point", slots.get("zero_point"),
                                             number_dtype=zero_number)
    shape = tuple(given["input"].desc.shape)
    raw_shapes = [tuple(given[n].desc.shape) for n in _PARAMETERS if given[n] is not None]
    for name in _PARAMETERS:
        item = given[name]
        if item is not None and item.desc.ndim == 0 and shape:
            given[name] = _args.expand(item, (1,) * len(shape), _args.shorthand_note(item))
        given[name] = _broadcast(given[name], shape)
    descs = {name: (item.desc if item is not None else None) for name, item in given.items()}
    if quantize:
        output_type = attributes["output_dtype"] or (descs["zero_point"].dtype
                                                     if descs["zero_point"] else "UINT8")
    else:
        output_type = descs["scale"].dtype if descs["scale"] is not None else "FLOAT32"
    if output_type is not None:
        descs["output"] = Desc(output_type, _dtypes.label(_dtypes.to_numpy(output_type)), shape)
    check_tensors(op, version, descs)
    if quantize:
        # The page: "If InputTensor is INT32, then ScaleTensor must be
        # FLOAT32. Otherwise, ScaleTensor must have the same DataType as
        # InputTensor."
        wanted = "FLOAT32" if input_type == "INT32" else input_type
        if descs["scale"].dtype != wanted:
            wanted = _dtypes.label(_dtypes.to_numpy(wanted))
            fail(op, f"scale is {descs['scale'].dtype_text} with an input of "
                     f"{descs['input'].dtype_text}; it must be {wanted} (float32 for an int32 "
                     "input, else the input's type)", slot="scale", given=descs["scale"].dtype_text)
    form, axis = form_of([s for s in raw_shapes if len(s) == len(shape)])
    arrays, complete = _args.arrays_of(given)
    if arrays["scale"] is not None:
        check_scale_values(op, "scale", arrays["scale"])
    output_dtype = _dtypes.to_numpy(output_type)
    if complete:
        _args.check_out(op, out, shape, output_dtype, arrays)
    return Call(operator=op, version=version, arrays=arrays if complete else None,
                attributes=dict(attributes, axis=axis), output_shape=shape,
                output_dtype=output_dtype, granularity={"scale": form})


def prepare_quantize(slots: dict, attributes: dict, feature_level=None, *, out=None) -> Call:
    """Normalize and validate an ELEMENT_WISE_QUANTIZE_LINEAR call; raise before anything runs."""
    return _prepare(QUANTIZE, slots, attributes, feature_level, out, True)


def prepare_dequantize(slots: dict, attributes: dict, feature_level=None, *, out=None) -> Call:
    """Normalize and validate an ELEMENT_WISE_DEQUANTIZE_LINEAR call; raise before anything runs."""
    return _prepare(DEQUANTIZE, slots, attributes, feature_level, out, False)


def _check_scale(template, arrays):
    check_scale_values(template.operator, "scale", arrays["scale"])


#: A planned call's value checks, by the name qops.ops.compiled looks up.
check_values = _check_scale

QUANTIZE_PLANS = PlanCache(prepare_quantize, _check_scale, _PARAMETERS)
DEQUANTIZE_PLANS = PlanCache(prepare_dequantize, _check_scale, _PARAMETERS)
