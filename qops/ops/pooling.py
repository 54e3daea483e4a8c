"""QUANTIZED_LINEAR_AVERAGE_POOLING: the public function, its validation and its plans.

A 2-D pooling (4-D input) runs as the 3-D pooling of depth 1, as a 1-D
convolution runs as a 2-D one of height 1: its attributes gain a neutral
depth value and its tensors a depth of 1.
"""

from __future__ import annotations

import numpy as np

from qops import registry
from qops.backends.contract import Call
from qops.ops import arguments as _args
from qops.ops.common import output_desc
from qops.ops.geometry import check_window_extents, lifted_attributes, lifted_form
from qops.ops.plans import PlanCache
from qops.ops.validation import (
    check_attributes,
    check_patterns,
    check_scale_values,
    check_tensors,
    fail,
    resolve_version,
)
from qops.reference.pooling import pooled_size, window_sums
from qops.registry import dtypes as _dtypes
from qops.threads import resolve_threads

__all__ = ["quantized_linear_average_pooling", "prepare", "check_values", "PLANS"]

OPERATOR = registry.get("QUANTIZED_LINEAR_AVERAGE_POOLING")

PARAMETERS = ("input_scale", "input_zero_point", "output_scale", "output_zero_point")
SCALES = ("input_scale", "output_scale")
#: Each spatial attribute and the value that leaves a (depth) axis as it is.
SPATIAL = {"window_size": 1, "strides": 1, "dilations": 1, "start_padding": 0, "end_padding": 0}


def quantized_linear_average_pooling(input=None, input_scale=None, input_zero_point=None,
                                     output_scale=None, output_zero_point=None, *,
                                     window_size=None, strides=None, start_padding=None,
                                     end_padding=None, dilations=None, include_padding=False,
                                     output_dtype=None, feature_level=None, out=None,
                                     n_threads=None):
    """DirectML ``QUANTIZED_LINEAR_AVERAGE_POOLING`` (onnxruntime's QLinearAveragePool).

    Parameters
    ----------
    input : ndarray of uint8 or int8, shape (N, C, H, W) or (N, C, D, H, W)
    input_scale, input_zero_point, output_scale, output_zero_point : number or ndarray
        Per tensor, or per channel: ``(1, C, 1, 1)`` (``(1, C, 1, 1, 1)`` for a
        5-D input) or a 1-d array of ``C``.  Zero points are optional; the
        output zero point's type is the output's.
    window_size : sequence of int
        The window, one value per spatial dimension (required).
    strides, dilations : sequence of int, optional
        Default 1 along each spatial dimension.
    start_padding, end_padding : sequence of int, optional
        Padding before and after each spatial dimension; default 0.
    include_padding : bool, optional
        Whether padding elements count in a window's divisor (default False).
    output_dtype : dtype-like, optional
        The output type when there is no output zero point (default: the input's).
    feature_level, out, n_threads
        As for :func:`quantized_linear_convolution`.

    Returns
    -------
    ndarray
        ``clamp(round_half_even(S * input_scale / (output_scale * count)) +
        output_zero_point)``, where ``S`` is the exact sum of ``input -
        input_zero_point`` over the window's elements inside the input and
        ``count`` their number (all the window's with ``include_padding``);
        the quotient is one float64 division of exact operands.

    Examples
    --------
    >>> import numpy as np
    >>> image = np.array([[[[1, 2, 3, 4], [5, 6, 7, 8]]]], np.uint8)
    >>> quantized_linear_average_pooling(image, 1.0, None, 1.0, None, window_size=(2, 2),
    ...                                  strides=(2, 2))
    array([[[[4, 6]]]], dtype=uint8)
    """
    slots = dict(input=input, input_scale=input_scale, input_zero_point=input_zero_point,
                 output_scale=output_scale, output_zero_point=output_zero_point)
    attributes = dict(window_size=window_size, strides=strides, start_padding=start_padding,
                      end_padding=end_padding, dilations=dilations,
                      include_padding=include_padding, output_dtype=output_dtype)
    return PLANS.run(slots, attributes, feature_level, out=out,
                     n_threads=resolve_threads(n_threads))


def _three_d_attributes(op, attributes, spatial):
    """A 2-D pooling's attributes (two values each) with the depth's neutral
    value put first; a 3-D pooling's as given."""
    if attributes.get("window_size") is None:
        fail(op, "window_size is required (WindowSize): one value per spatial dimension",
             slot="window_size")
    return lifted_attributes(op, attributes, SPATIAL, spatial, 3 - spatial,
                             f"a {spatial}-D pooling (input of {spatial + 2} dimensions)")


def prepare(slots: dict, attributes: dict, feature_level=None, *, out=None) -> Call:
    """Normalize and validate a pooling call; raise before anything runs."""
    op = OPERATOR
    version = resolve_version(op, feature_level)
    given = {"input": _args.required_tensor(op, "input", slots.get("input"))}
    rank = given["input"].desc.ndim if given["input"].desc.ndim in (4, 5) else 4
    attributes = check_attributes(op, version, _three_d_attributes(op, attributes, rank - 2))
    given["input_zero_point"] = _args.as_parameter(
        op, "input_zero_point", slots.get("input_zero_point"),
        number_dtype=_args.registry_dtype(given["input"]))
    for name in SCALES:
        given[name] = _args.as_parameter(op, name, slots.get(name), number_dtype="FLOAT32")
    output_dtype = attributes["output_dtype"] or _args.registry_dtype(given["input"])
    given["output_zero_point"] = _args.as_parameter(
        op, "output_zero_point", slots.get("output_zero_point"), number_dtype=output_dtype)
    # Shorthand: numbers are per tensor, a 1-d array of C per channel.
    channels = given["input"].desc.shape[1] if given["input"].desc.ndim >= 2 else None
    for name in PARAMETERS:
        item = given[name]
        if item is None:
            continue
        if item.desc.ndim == 0:
            given[name] = _args.expand(item, (1,) * rank, _args.shorthand_note(item))
        elif item.desc.ndim == 1 and item.desc.shape[0] == channels and channels != 1:
            given[name] = _args.expand(item, (1, channels) + (1,) * (rank - 2),
                                       _args.shorthand_note(item))

    descs = {name: (item.desc if item is not None else None) for name, item in given.items()}
    square = {name: (lifted_form(item, rank, 5) if name != "input" or item.desc.ndim == 4 else item)
              for name, item in given.items()}
    input_desc = square["input"].desc
    output_shape = ()
    if input_desc.ndim == 5:
        output_shape = input_desc.shape[:2] + tuple(
            pooled_size(*args) for args in zip(input_desc.shape[2:], attributes["window_size"],
                                                attributes["strides"], attributes["dilations"],
                                                attributes["start_padding"],
                                                attributes["end_padding"]))
    visible = (output_shape[:2] + output_shape[3:] if rank == 4 and output_shape else output_shape)
    descs["output"] = output_desc(attributes["output_dtype"], descs["output_zero_point"],
                                  descs["input"], visible) if output_shape else None
    if descs["output"] is None:
        del descs["output"]
    check_tensors(op, version, descs)
    _check_windows(op, input_desc.shape, attributes, output_shape)

    # The page's patterns are 4-D: a parameter's depth (1 in the 5-D form)
    # is set aside to check them.
    pattern_descs = {}
    for name in PARAMETERS:
        item = square[name]
        if item is None:
            continue
        shape = item.desc.shape
        if len(shape) == 5 and shape[2] != 1:
            fail(op, f"{name} has shape {item.desc.shape_text()}; expected (1, 1, 1, 1, 1) "
                     f"per-tensor or (1, {channels}, 1, 1, 1) per-channel", slot=name,
                 given=tuple(shape))
        four = _args.expand(item, shape[:2] + shape[3:], item.desc.note) if len(shape) == 5 \
            else item
        pattern_descs[name] = four.desc
    granularity = check_patterns(op, version, pattern_descs, {"ChannelCount": channels},
                                 PARAMETERS)

    arrays, complete = _args.arrays_of(square)
    if all(arrays[name] is not None for name in SCALES):
        check_values_of(op, arrays)
    output_dtype = _dtypes.to_numpy(descs["output"].dtype)
    if complete:
        _args.check_out(op, out, visible, output_dtype, arrays)
    return Call(operator=op, version=version, arrays=arrays if complete else None,
                attributes=attributes, output_shape=tuple(visible), output_dtype=output_dtype,
                granularity=granularity)


def _check_windows(op, input_shape, attributes, output_shape):
    """Every output element has a window, inside the index range, with at
    least one input element unless padding counts (else its average would be
    0 / 0)."""
    if not output_shape:
        return
    check_window_extents(op, input_shape[2:], attributes["window_size"], attributes,
                         output_shape[2:], "window", slot="window_size",
                         given=attributes["window_size"])
    if attributes["include_padding"]:
        return
    _, counts = window_sums(np.zeros((1, 1) + tuple(input_shape[2:]), np.uint8), None,
                            **{k: attributes[k] for k in SPATIAL})
    if counts.min() == 0:
        fail(op, "a window lies wholly in the padding, so its average would be 0 / 0; reduce "
                 "the padding below the window's extent or set include_padding",
             slot="start_padding")


def check_values_of(op, arrays):
    """Scales positive and finite, and their quotient finite."""
    for name in SCALES:
        check_scale_values(op, name, arrays[name])
    with np.errstate(over="ignore", divide="ignore"):
        ratio = np.asarray(arrays["input_scale"], np.float64) / np.asarray(
            arrays["output_scale"], np.float64)
    if not np.all(np.isfinite(ratio)):
        fail(op, "input_scale / output_scale overflows; choose scales of a finite ratio",
             slot="output_scale")


def check_values(template, arrays):
    check_values_of(template.operator, arrays)


PLANS = PlanCache(prepare, check_values, PARAMETERS, recent=True)
