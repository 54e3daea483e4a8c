"""What the convolution and matrix-multiply front ends share: the output
slot's description and the requantization's value checks."""

from __future__ import annotations

import numpy as np

from qops.backends.contract import Call
from qops.ops import arguments as _args
from qops.ops.validation import Desc, check_scale_values, fail
from qops.reference import requantization_multiplier
from qops.registry import dtypes as _dtypes

__all__ = ["output_desc", "requantization", "finish_requantized", "requantized_slots",
           "expand_to_shared_rank"]


def requantized_slots(op, slots, tensors, zero_points, scales, output_dtype):
    """A requantized operator's slots, normalized: ``tensors`` must be arrays;
    each of ``zero_points`` (zero point -> the tensor it pairs with) given as
    a number takes that tensor's type; ``scales`` are float32; the output
    zero point takes ``output_dtype``, default the first tensor's type."""
    given = {name: _args.as_tensor(op, name, slots.get(name)) for name in tensors}
    for name, paired in zero_points.items():
        given[name] = _args.as_parameter(op, name, slots.get(name),
                                         number_dtype=_args.registry_dtype(given[paired]))
    for name in scales:
        given[name] = _args.as_parameter(op, name, slots.get(name), number_dtype="FLOAT32")
    output_dtype = output_dtype or _args.registry_dtype(given[tensors[0]])
    given["output_zero_point"] = _args.as_parameter(
        op, "output_zero_point", slots.get("output_zero_point"), number_dtype=output_dtype)
    return given


def expand_to_shared_rank(op, version, given, group, tensor):
    """Shorthand of a matrix multiply's scales and zero points: a number or
    0-d array in ``group`` is per tensor, all ones at the rank the group's
    arrays share (the page makes them share one), else at the rank of
    ``tensor`` (A) -- also when the shared rank is one the level refuses, so
    that the error names the array given, not the shorthand."""
    explicit = {given[n].desc.ndim for n in group
                if given.get(n) is not None and given[n].desc.ndim}
    tensor_rank = given[tensor].desc.ndim if given[tensor] is not None else 4
    rank = explicit.pop() if len(explicit) == 1 else tensor_rank
    if not op.support(version).tensor(group[0]).allows_dims(rank):
        rank = tensor_rank
    for name in group:
        item = given.get(name)
        if item is not None and item.desc.ndim == 0 and rank > 0:
            given[name] = _args.expand(item, (1,) * rank, _args.shorthand_note(item))


def output_desc(output_dtype, zero_point_desc, main_desc, shape):
    """The output slot's description: its type is ``output_dtype`` if given,
    else the output zero point's, else the main input's."""
    if output_dtype is not None:
        return Desc(dtype=output_dtype, dtype_text=_dtypes.label(_dtypes.to_numpy(output_dtype)),
                    shape=tuple(shape))
    source = zero_point_desc if zero_point_desc is not None else main_desc
    if source is None:
        return None  # the missing input is reported first
    return Desc(dtype=source.dtype, dtype_text=source.dtype_text, shape=tuple(shape))


def requantization(op, arrays, scales):
    """The value checks of a requantized call, and what they derive: each
    scale positive and finite, then the multipliers
    ``float32(float32(in * w) / out)`` (broadcast over the scales' DirectML
    shapes), which must be finite too: a product of scales that overflows
    float32 would turn a zero sum into NaN.  ``scales`` names the input,
    weight and output scale slots, in that order."""
    for name in scales:
        check_scale_values(op, name, arrays[name])
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        multiplier = requantization_multiplier(*(arrays[name] for name in scales))
    if not np.all(np.isfinite(multiplier)):
        fail(op, f"float32({scales[0]} * {scales[1]}) / {scales[2]} overflows float32; "
                 "choose scales whose requantization multiplier is finite",
             slot=scales[2])
    return multiplier


def finish_requantized(op, version, given, descs, attributes, output_shape, granularity, scales,
                       out, multipliers=None):
    """The value checks of a requantized operator (scales, its multipliers,
    ``out=``) and the validated :class:`Call`, carrying the multipliers it
    computed (``checked``).  ``multipliers(op, arrays)`` checks and computes
    them (default: convolution's and matrix multiply's :func:`requantization`
    of ``scales``).

    ``qops.validate`` may mix descriptions and data: what has data is checked.
    """
    output_dtype = _dtypes.to_numpy(descs["output"].dtype)
    arrays, complete = _args.arrays_of(given)
    multiplier = None
    if all(arrays[name] is not None for name in scales):
        multiplier = (multipliers(op, arrays) if multipliers is not None
                      else requantization(op, arrays, scales))
    else:
        for name in scales:
            if arrays[name] is not None:
                check_scale_values(op, name, arrays[name])
    if complete:
        _args.check_out(op, out, output_shape, output_dtype, arrays)
    return Call(operator=op, version=version, arrays=arrays if complete else None,
                attributes=attributes, output_shape=tuple(output_shape),
                output_dtype=output_dtype, granularity=granularity, checked=multiplier)
