"""Checks shared by the convolution and matrix-multiply front ends."""

from __future__ import annotations

import numpy as np

from qops.registry import dtypes as _dtypes
from qops.ops.validation import Desc, check_scale_values, fail
from qops.reference import requantization_multiplier
from qops.ops import arguments as _args


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


_SAFE = 1e37  # well under float32's largest value, about 3.4e38


def check_multiplier(op, input_scale, weight_scale, output_scale, names):
    """The requantization multiplier must be finite: a product of scales that
    overflows float32 would turn a zero sum into NaN."""
    if input_scale.size == weight_scale.size == output_scale.size == 1:
        # Positive float32 values: in double the product is exact and the
        # quotient near it, so far from float32's limit both stay finite.
        product = input_scale.item() * weight_scale.item()
        if product < _SAFE and product / output_scale.item() < _SAFE:
            return
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        multiplier = requantization_multiplier(input_scale, weight_scale, output_scale)
    if not np.all(np.isfinite(multiplier)):
        fail(op, f"float32({names[0]} * {names[1]}) / {names[2]} overflows float32; "
                 "choose scales whose requantization multiplier is finite",
             slot=names[2])


def finish_requantized(op, version, given, descs, attributes, output_shape, granularity, scales,
                       out):
    """The value checks of convolution and matrix multiply (scales, the
    requantization multiplier, ``out=``) and the validated :class:`Call`.

    ``scales`` names the input, weight and output scale slots in that order.
    """
    output_dtype = _dtypes.to_numpy(descs["output"].dtype)
    # qops.validate may mix descriptions and data: check whatever has data.
    arrays, complete = _args.arrays_of(given)
    for name in scales:
        if arrays[name] is not None:
            check_scale_values(op, name, arrays[name])
    if all(arrays[name] is not None for name in scales):
        check_multiplier(op, *(arrays[name] for name in scales), scales)
    if complete:
        _args.check_out(op, out, output_shape, output_dtype, arrays)
    return _args.Call(operator=op, version=version, arrays=arrays if complete else None,
                      attributes=attributes, output_shape=tuple(output_shape),
                      output_dtype=output_dtype, granularity=granularity)
