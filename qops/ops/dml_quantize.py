"""QUANTIZE and DEQUANTIZE (DirectML 6_3): the public functions, their
validation and their plans.

The pages say little beyond the tensor table, so the rules here are qops'
own (docs/operators/quantize.rst states them): the scale and zero point
have the input's dimension count, and along each dimension their size
divides the input's; each value applies to a block of ``input size /
parameter size`` consecutive elements.  A call whose parameters are blocked
along one axis at most is an ONNX QuantizeLinear / DequantizeLinear form
(per tensor, per axis or blocked) and runs on their kernels.
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

__all__ = ["quantize", "dequantize", "prepare_quantize", "prepare_dequantize", "block_form",
           "QUANTIZE_PLANS", "DEQUANTIZE_PLANS", "SEVERAL_AXES"]

QUANTIZE = registry.get("QUANTIZE")
DEQUANTIZE = registry.get("DEQUANTIZE")
_PARAMETERS = ("scale", "zero_point")
#: The granularity of parameters blocked along two or more axes, which no
#: ONNX form states.
SEVERAL_AXES = "blocked along several axes"


def quantize(input=None, scale=None, zero_point=None, *, output_dtype=None, feature_level=None,
             out=None, n_threads=None):
    """DirectML ``QUANTIZE``: ``saturate(round(input / scale) + zero_point)``, per block.

    The quantization type is ``DML_QUANTIZATION_TYPE_SCALE_ZERO_POINT`` when
    a zero point is given, else ``DML_QUANTIZATION_TYPE_SCALE``.

    Parameters
    ----------
    input : ndarray of float32 or float16
        1 to 8 dimensions.
    scale : number or ndarray of float32 or float16
        The input's dimension count; along each dimension a size that
        divides the input's: 1 (one scale for the dimension), the input's
        size (one per element) or a size between (one per block of
        ``input.shape[i] // scale.shape[i]`` consecutive elements).  A number
        or 0-d array is one scale for every element (float32).
    zero_point : number or ndarray, optional
        The scale's shape and the output's type (int8, uint8,
        ``ml_dtypes.int4`` or ``ml_dtypes.uint4``); 0 when absent.
    output_dtype : int8, uint8, ml_dtypes.int4 or ml_dtypes.uint4
        The output type (required; a zero point must have it).
    feature_level : optional
        6_3 or later (default: the newest).
    out : ndarray, optional
        Written and returned: C-contiguous, the input's shape, ``output_dtype``.
    n_threads : int, optional
        Threads for this call (default: the global setting).

    Returns
    -------
    ndarray of the input's shape
        ``saturate(round_half_even(float32(input) / float32(scale)) + zero_point)``:
        the division one float32 operation, ties to even, a NaN quotient
        giving the zero point, infinities saturating.

    Raises
    ------
    qops.ValidationError
        A level before 6_3, a dimension count, type or shape the rules
        refuse, a scale that is not positive and finite.

    Examples
    --------
    >>> import numpy as np
    >>> x = np.array([[0.5, 1.5, 2.5, 3.5], [-1.0, -2.0, 300.0, np.nan]], np.float32)
    >>> quantize(x, np.array([[1.0, 2.0]], np.float32), np.array([[0, 10]], np.int8),
    ...          output_dtype=np.int8)
    array([[  0,   2,  11,  12],
           [ -1,  -2, 127,  10]], dtype=int8)
    """
    slots = dict(input=input, scale=scale, zero_point=zero_point)
    return QUANTIZE_PLANS.run(slots, dict(output_dtype=output_dtype), feature_level, out=out,
                              n_threads=resolve_threads(n_threads))


def dequantize(input=None, scale=None, zero_point=None, *, output_dtype=None, feature_level=None,
               out=None, n_threads=None):
    """DirectML ``DEQUANTIZE``: ``(input - zero_point) * scale``, per block.

    The quantization type is ``DML_QUANTIZATION_TYPE_SCALE_ZERO_POINT`` when
    a zero point is given, else ``DML_QUANTIZATION_TYPE_SCALE``.

    Parameters
    ----------
    input : ndarray or Packed4Bit
        int8, uint8, ``ml_dtypes.int4`` or ``ml_dtypes.uint4`` (the 4-bit
        types one to a byte, or two to a byte as a :class:`qops.Packed4Bit`);
        1 to 8 dimensions.
    scale : number or ndarray of float32 or float16
        The input's dimension count, each size dividing the input's, as for
        :func:`quantize`.  A number is a float32 scale (``output_dtype``'s
        type when that is given).
    zero_point : number or ndarray, optional
        The scale's shape and the input's type; 0 when absent.
    output_dtype : float32 or float16, optional
        The output type: the scale's, which is the default.
    feature_level, out, n_threads
        As for :func:`quantize`.

    Returns
    -------
    ndarray of the input's shape and the scale's type
        ``(float32(input) - zero_point) * float32(scale)`` in float32,
        rounded once more when the output is float16.

    Examples
    --------
    >>> import numpy as np
    >>> q = np.array([[0, 2, 11, 12], [-1, -2, 127, 10]], np.int8)
    >>> dequantize(q, np.array([[1.0, 2.0]], np.float32), np.array([[0, 10]], np.int8))
    array([[  0.,   2.,   2.,   4.],
           [ -1.,  -2., 234.,   0.]], dtype=float32)
    """
    slots = dict(input=input, scale=scale, zero_point=zero_point)
    return DEQUANTIZE_PLANS.run(slots, dict(output_dtype=output_dtype), feature_level, out=out,
                                n_threads=resolve_threads(n_threads))


def block_form(shape, parameter_shape):
    """How parameters of ``parameter_shape`` apply to an input of ``shape``,
    as ``(granularity, axis, block_size)`` in ONNX's terms.

    ``("per-tensor", 0, 0)``: one value; ``("per-axis", axis, 0)``: one per
    element along one axis; ``("blocked", axis, block_size)``: blocks along
    ``axis`` (block_size 1 when the parameters hold one value per element of
    several axes), every other axis per element or broadcast;
    ``(SEVERAL_AXES, 0, 0)``: blocks of more than one element, and more than
    one block, along two or more axes.
    """
    varying = [i for i, size in enumerate(parameter_shape) if size > 1]
    partial = [i for i in varying if parameter_shape[i] < shape[i]]
    if not varying:
        return "per-tensor", 0, 0
    if len(varying) == 1 and not partial:
        return "per-axis", varying[0], 0
    if len(partial) > 1:
        return SEVERAL_AXES, 0, 0
    axis = partial[0] if partial else varying[0]
    return "blocked", axis, shape[axis] // parameter_shape[axis]


def _check_blocks(op, shape, descs):
    """Along each dimension a parameter's size divides the input's (or equals it)."""
    for name in _PARAMETERS:
        desc = descs[name]
        if desc is None:
            continue
        for axis, (size, full) in enumerate(zip(desc.shape, shape)):
            if size == full or (size > 0 and full % size == 0):
                continue
            fail(op, f"{name} has shape {desc.shape_text()} for an input of {shape_text(shape)}; "
                     f"along dimension {axis} its size {size} does not divide {full}: each size "
                     "must divide the input's (1 for one value, the input's size for one per "
                     "element, a divisor between for blocks of input size / size elements)",
                 slot=name, given=tuple(desc.shape), allowed=f"sizes dividing {shape_text(shape)}")


def _prepare(op, slots, attributes, feature_level, out, quantize):
    version = resolve_version(op, feature_level)
    attributes = check_attributes(op, version, attributes)
    given = {"input": _args.required_tensor(op, "input", slots.get("input"))}
    input_type = _args.registry_dtype(given["input"])
    output_type = attributes["output_dtype"]
    if quantize:
        if output_type is None:
            allowed = op.support(version).tensor("output").dtypes_text()
            fail(op, f"output_dtype is required: the OutputTensor's type ({allowed})",
                 slot="output_dtype", allowed=allowed)
        # A Python float is a float32 scale: the division is float32 whatever the input.
        scale_number, zero_number = "FLOAT32", output_type
    else:
        # A number takes the output's type when that is one a scale may have.
        scale_number = output_type if output_type in ("FLOAT32", "FLOAT16") else "FLOAT32"
        zero_number = input_type
    given["scale"] = _args.as_parameter(op, "scale", slots.get("scale"), number_dtype=scale_number)
    given["zero_point"] = _args.as_parameter(op, "zero_point", slots.get("zero_point"),
                                             number_dtype=zero_number)
    shape = tuple(given["input"].desc.shape)
    for name in _PARAMETERS:
        item = given[name]
        if item is not None and item.desc.ndim == 0 and shape:
            given[name] = _args.expand(item, (1,) * len(shape), _args.shorthand_note(item))
    descs = {name: (item.desc if item is not None else None) for name, item in given.items()}
    if not quantize and output_type is None and descs["scale"] is not None:
        output_type = descs["scale"].dtype
    if output_type is not None:
        descs["output"] = Desc(output_type, _dtypes.label(_dtypes.to_numpy(output_type)), shape)
    check_tensors(op, version, descs)
    _check_blocks(op, shape, descs)
    form, axis, block_size = block_form(shape, descs["scale"].shape)
    arrays, complete = _args.arrays_of(given)
    if arrays["scale"] is not None:
        check_scale_values(op, "scale", arrays["scale"])
    output_dtype = _dtypes.to_numpy(output_type)
    if complete:
        _args.check_out(op, out, shape, output_dtype, arrays)
    kind = "SCALE" if given["zero_point"] is None else "SCALE_ZERO_POINT"
    return Call(operator=op, version=version, arrays=arrays if complete else None,
                attributes=dict(attributes, axis=axis, block_size=block_size,
                                quantization_type=kind),
                output_shape=shape, output_dtype=output_dtype, granularity={"scale": form})


def prepare_quantize(slots: dict, attributes: dict, feature_level=None, *, out=None) -> Call:
    """Normalize and validate a QUANTIZE call; raise before anything runs."""
    return _prepare(QUANTIZE, slots, attributes, feature_level, out, True)


def prepare_dequantize(slots: dict, attributes: dict, feature_level=None, *, out=None) -> Call:
    """Normalize and validate a DEQUANTIZE call; raise before anything runs."""
    return _prepare(DEQUANTIZE, slots, attributes, feature_level, out, False)


def _check_scale(template, arrays):
    check_scale_values(template.operator, "scale", arrays["scale"])


#: A planned call's value checks, by the name qops.ops.compiled looks up.
check_values = _check_scale

QUANTIZE_PLANS = PlanCache(prepare_quantize, _check_scale, _PARAMETERS)
DEQUANTIZE_PLANS = PlanCache(prepare_dequantize, _check_scale, _PARAMETERS)
