"""QUANTIZED_LINEAR_CONVOLUTION: the public function, its validation and its plans."""

from __future__ import annotations

from qops import registry
from qops.backends.contract import Call
from qops.ops import arguments as _args
from qops.ops.common import finish_requantized, output_desc, requantization
from qops.ops.geometry import (
    check_convolution_geometry,
    convolution_in_two_d,
    convolution_attributes,
)
from qops.ops.plans import PlanCache
from qops.ops.validation import (
    check_patterns,
    check_tensors,
    resolve_version,
)
from qops.threads import resolve_threads

__all__ = ["quantized_linear_convolution", "prepare", "check_values", "PLANS"]

OPERATOR = registry.get("QUANTIZED_LINEAR_CONVOLUTION")

SLOTS = tuple(slot.name for slot in OPERATOR.inputs)
SCALES = ("input_scale", "filter_scale", "output_scale")
#: The slots whose values a call's value work depends on (the plans' value cache key).
VALUE_SLOTS = ("input_scale", "input_zero_point", "filter_scale", "filter_zero_point", "bias",
               "output_scale", "output_zero_point")
_ZERO_POINTS = {"input_zero_point": "input", "filter_zero_point": "filter"}
_PER_CHANNEL_SHORTHAND = ("filter_scale", "filter_zero_point", "bias")


def quantized_linear_convolution(input=None, input_scale=None, input_zero_point=None, filter=None,
                                 filter_scale=None, filter_zero_point=None, bias=None,
                                 output_scale=None, output_zero_point=None, *, strides=None,
                                 dilations=None, start_padding=None, end_padding=None,
                                 group_count=None, output_dtype=None, feature_level=None, out=None,
                                 n_threads=None):
    """DirectML ``QUANTIZED_LINEAR_CONVOLUTION``: 2-D (or 1-D) convolution of quantized data.

    Parameters
    ----------
    input : ndarray of uint8 or int8, shape (N, C, H, W), or (N, C, W) from feature level 4_0
    input_scale : float or ndarray of float32
        Per tensor: a number, a 0-d array or shape ``(1, 1, 1, 1)``.
    input_zero_point : int or ndarray, optional
        Per tensor, the type of ``input``.
    filter : ndarray of uint8 or int8, shape (OC, C / group_count, KH, KW)
        Or (OC, C / group_count, KW) for a 1-D convolution.
    filter_scale : float or ndarray of float32
        Per tensor, or per output channel: ``(1, OC, 1, 1)`` (``(1, OC, 1)`` for a 1-D
        convolution) or a 1-d array of ``OC``.  Fewer dimensions align to the right.
    filter_zero_point : int or ndarray, optional
        Shaped like ``filter_scale``, the type of ``filter``.
    bias : ndarray of int32, optional
        ``(1, OC, 1, 1)`` or a 1-d array of ``OC``.
    output_scale : float or ndarray of float32
        Per tensor.
    output_zero_point : int or ndarray, optional
        Per tensor; its type is the output's.
    strides, dilations : pair of int, optional
        Default ``(1, 1)``; one value for a 1-D convolution.
    start_padding, end_padding : pair of int, optional
        Zeros (in the real domain) before and after each spatial dimension; default ``(0, 0)``;
        one value for a 1-D convolution.
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
    ndarray of shape (N, OC, OH, OW), or (N, OC, OW) for a 1-D convolution
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
    return PLANS.run(slots, attributes, feature_level, out=out,
                     n_threads=resolve_threads(n_threads))


def prepare(slots: dict, attributes: dict, feature_level=None, *, out=None) -> Call:
    """Normalize and validate a convolution call; raise before anything runs."""
    op = OPERATOR
    version = resolve_version(op, feature_level)
    given = {name: _args.as_tensor(op, name, slots.get(name)) for name in ("input", "filter")}
    rank, attributes = convolution_attributes(op, version, given["input"], attributes)
    for name, paired in _ZERO_POINTS.items():
        given[name] = _args.as_parameter(op, name, slots.get(name),
                                         number_dtype=_args.registry_dtype(given[paired]))
    for name in SCALES:
        given[name] = _args.as_parameter(op, name, slots.get(name), number_dtype="FLOAT32")
    given["bias"] = _args.as_parameter(op, "bias", slots.get("bias"), number_dtype="INT32")
    output_dtype = attributes["output_dtype"] or _args.registry_dtype(given["input"])
    given["output_zero_point"] = _args.as_parameter(
        op, "output_zero_point", slots.get("output_zero_point"), number_dtype=output_dtype)

    # Shorthand: numbers and 0-d arrays are per-tensor, all ones; a 1-d
    # filter scale, filter zero point or bias is per-channel {1, OC, 1[, 1]}.
    for name in SLOTS:
        item = given[name]
        if item is None or name in ("input", "filter"):
            continue
        if item.desc.ndim == 0:
            given[name] = _args.expand(item, (1,) * rank, _args.shorthand_note(item))
        elif item.desc.ndim == 1 and name in _PER_CHANNEL_SHORTHAND:
            shape = (1, item.desc.shape[0]) + (1,) * (rank - 2)
            given[name] = _args.expand(item, shape, _args.shorthand_note(item))

    descs = {name: (item.desc if item is not None else None) for name, item in given.items()}
    square, square_descs, output_shape, visible_shape = convolution_in_two_d(given, rank,
                                                                             attributes)
    # Without a geometry (input or filter of another rank) there is no output
    # to describe: the checks report the tensors instead.
    descs["output"] = output_desc(attributes["output_dtype"], descs["output_zero_point"],
                                  descs["input"], visible_shape) if output_shape else None
    if descs["output"] is None:
        del descs["output"]
    check_tensors(op, version, descs)
    check_convolution_geometry(op, square_descs, attributes, output_shape)
    square_descs["output"] = descs["output"]
    symbols = {"OutputChannelCount": square_descs["filter"].shape[0]}
    granularity = check_patterns(
        op, version, square_descs, symbols,
        ("input_scale", "input_zero_point", "filter_scale", "filter_zero_point", "bias",
         "output_scale", "output_zero_point"))

    return finish_requantized(op, version, square, square_descs, attributes, visible_shape,
                              granularity, SCALES, out)


def check_values(template, arrays):
    """A planned call's value checks: scales and their multipliers."""
    return requantization(template.operator, arrays, SCALES)


#: Validated signatures of the plain function: a call like an earlier one
#: checks only its values.
PLANS = PlanCache(prepare, check_values, VALUE_SLOTS, recent=True)
