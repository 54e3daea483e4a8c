"""CONVOLUTION_INTEGER, MATRIX_MULTIPLY_INTEGER and DYNAMIC_QUANTIZE_LINEAR:
arguments in, validated :class:`Call` out."""

from __future__ import annotations

import numpy as np

from qops.registry import dtypes as _dtypes
from qops import registry
from qops.ops.validation import Desc, check_attributes, check_patterns, check_tensors, fail, resolve_version
from qops.ops import arguments as _args
from qops.ops import convolution as _convolution
from qops.ops import matmul as _matmul
from qops.ops.common import output_desc

CONVOLUTION = registry.get("CONVOLUTION_INTEGER")
MATMUL = registry.get("MATRIX_MULTIPLY_INTEGER")
DYNAMIC = registry.get("DYNAMIC_QUANTIZE_LINEAR")

_SPATIAL = ("strides", "dilations", "start_padding", "end_padding")
_NEUTRAL = {"strides": 1, "dilations": 1, "start_padding": 0, "end_padding": 0}


def _int32_output(shape):
    return Desc(dtype="INT32", dtype_text="int32", shape=tuple(shape))


def _finish(op, version, given, descs, attributes, output_shape, granularity, out,
            output_dtype=np.dtype(np.int32)):
    arrays, complete = _args.arrays_of(given)
    if complete:
        _args.check_out(op, out, output_shape, output_dtype, arrays)
    return _args.Call(operator=op, version=version, arrays=arrays if complete else None,
                      attributes=attributes, output_shape=tuple(output_shape),
                      output_dtype=output_dtype, granularity=granularity)


def _zero_points(op, slots, given, paired):
    """Each zero point as a parameter whose Python-number shorthand takes the
    type of the tensor it pairs with (``paired``: zero point -> tensor)."""
    for name, tensor in paired.items():
        given[name] = _args.as_parameter(op, name, slots.get(name),
                                         number_dtype=_args.registry_dtype(given[tensor]))


# -- CONVOLUTION_INTEGER -------------------------------------------------------------------

def _four_d(item, one_d, at_axis=2):
    """A slot of a 1-D convolution (3 dimensions) as its 2-D form (height 1)."""
    if item is None or not one_d or item.desc.ndim != 3:
        return item
    shape = item.desc.shape[:at_axis] + (1,) + item.desc.shape[at_axis:]
    return _args.expand(item, shape, item.desc.note)


def prepare_convolution_integer(slots: dict, attributes: dict, feature_level=None, *,
                                out=None) -> _args.Call:
    """Normalize and validate a CONVOLUTION_INTEGER call; raise before anything runs.

    A 1-D convolution (3-dimensional input and filter, from feature level
    4_0) takes one value per spatial attribute and runs as a 2-D one of
    height 1.
    """
    op = CONVOLUTION
    version = resolve_version(op, feature_level)
    given = {name: _args.as_tensor(op, name, slots.get(name)) for name in ("input", "filter")}
    one_d = given["input"] is not None and given["input"].desc.ndim == 3
    attributes = dict(attributes)
    if one_d:
        for name in _SPATIAL:
            value = attributes.get(name)
            if value is None:
                continue
            if not isinstance(value, (tuple, list)) or len(value) != 1:
                fail(op, f"{name} is {value!r}; a 1-D convolution (input of 3 dimensions) takes "
                         "one value per attribute", slot=name, given=value)
            attributes[name] = (_NEUTRAL[name], *value)
    attributes = check_attributes(op, version, attributes)
    _zero_points(op, slots, given, {"input_zero_point": "input", "filter_zero_point": "filter"})
    rank = given["input"].desc.ndim if given["input"] is not None else 4
    for name in ("input_zero_point", "filter_zero_point"):
        item = given[name]
        if item is None:
            continue
        if item.desc.ndim == 0:
            given[name] = _args.expand(item, (1,) * rank, _args.shorthand_note(item))
        elif item.desc.ndim == 1 and name == "filter_zero_point" and rank >= 2:
            shape = (1, item.desc.shape[0]) + (1,) * (rank - 2)
            given[name] = _args.expand(item, shape, _args.shorthand_note(item))

    descs = {name: (item.desc if item is not None else None) for name, item in given.items()}
    square = {name: _four_d(item, one_d) for name, item in given.items()}
    square_descs = {name: (item.desc if item is not None else None)
                    for name, item in square.items()}
    geometry_known = all(square_descs[n] is not None and square_descs[n].ndim == 4
                         for n in ("input", "filter"))
    output_shape = (_convolution._output_shape(square_descs, attributes) if geometry_known
                    else ())
    visible_shape = (output_shape[:2] + output_shape[3:]) if one_d and output_shape else output_shape
    descs["output"] = _int32_output(visible_shape)
    check_tensors(op, version, descs)
    _convolution._check_geometry(op, square_descs, attributes, output_shape)
    # Zero points of fewer dimensions align to the right of {1, C, 1, 1}.
    for name in ("input_zero_point", "filter_zero_point"):
        item = square[name]
        if item is not None and item.desc.ndim < 4:
            square[name] = _args.expand(item, (1,) * (4 - item.desc.ndim) + item.desc.shape,
                                        item.desc.note)
            square_descs[name] = square[name].desc
    granularity = check_patterns(op, version, square_descs,
                                 {"OutputChannelCount": square_descs["filter"].shape[0]},
                                 ("input_zero_point", "filter_zero_point"))
    return _finish(op, version, square, square_descs, attributes, visible_shape, granularity,
                   out)


# -- MATRIX_MULTIPLY_INTEGER ---------------------------------------------------------------

def prepare_matrix_multiply_integer(slots: dict, attributes: dict, feature_level=None, *,
                                    out=None) -> _args.Call:
    """Normalize and validate a MATRIX_MULTIPLY_INTEGER call; raise before anything runs."""
    op = MATMUL
    version = resolve_version(op, feature_level)
    attributes = check_attributes(op, version, attributes)
    given = {name: _args.as_tensor(op, name, slots.get(name)) for name in ("a", "b")}
    _zero_points(op, slots, given, {"a_zero_point": "a", "b_zero_point": "b"})
    rank = given["a"].desc.ndim if given["a"] is not None else 4
    for name in ("a_zero_point", "b_zero_point"):
        item = given[name]
        if item is not None and item.desc.ndim == 0 and rank > 0:
            given[name] = _args.expand(item, (1,) * rank, _args.shorthand_note(item))
    descs = {name: (item.desc if item is not None else None) for name, item in given.items()}
    output_shape = _matmul._output_shape(op, descs)
    descs["output"] = _int32_output(output_shape or (descs["a"].shape if descs["a"] else ()))
    check_tensors(op, version, descs)
    output_shape = _matmul._output_shape(op, descs, strict=True)
    symbols = {"M": descs["a"].shape[-2], "N": descs["b"].shape[-1]}
    granularity = check_patterns(op, version, descs, symbols, ("a_zero_point", "b_zero_point"))
    return _finish(op, version, given, descs, attributes, output_shape, granularity, out)


# -- DYNAMIC_QUANTIZE_LINEAR ---------------------------------------------------------------

def prepare_dynamic_quantize(slots: dict, attributes: dict, feature_level=None, *,
                             out=None) -> _args.Call:
    """Normalize and validate a DYNAMIC_QUANTIZE_LINEAR call (``out`` is not taken:
    the operator has three outputs)."""
    op = DYNAMIC
    version = resolve_version(op, feature_level)
    output_dtype = attributes.get("output_dtype") or "UINT8"
    item = _args.as_tensor(op, "input", slots.get("input"))
    descs = {"input": item.desc if item is not None else None}
    try:
        name = _dtypes.parse_dtype(output_dtype)
    except ValueError as error:
        fail(op, f"output_dtype: {error}", slot="output_dtype", given=output_dtype)
    shape = descs["input"].shape if descs["input"] is not None else ()
    one = (1,) * len(shape)
    descs["output"] = output_desc(name, None, None, shape)
    descs["output_scale"] = Desc(dtype="FLOAT32", dtype_text="float32", shape=one)
    descs["output_zero_point"] = Desc(dtype=name, dtype_text=descs["output"].dtype_text,
                                      shape=one)
    check_tensors(op, version, descs)
    if item.array is not None and item.array.size == 0:
        fail(op, "input is empty; the scale comes from its range, which an empty tensor "
                 "does not have", slot="input", given=item.array.shape)
    if item.array is not None and not np.all(np.isfinite(item.array)):
        fail(op, "input has NaN or infinite values; the scale comes from its finite range",
             slot="input")
    return _args.Call(operator=op, version=version,
                      arrays={"input": item.array} if item.array is not None else None,
                      attributes={"output_dtype": name}, output_shape=tuple(shape),
                      output_dtype=_dtypes.to_numpy(name), granularity={})
