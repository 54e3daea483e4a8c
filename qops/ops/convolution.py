"""QUANTIZED_LINEAR_CONVOLUTION: arguments in, validated :class:`Call` out."""

from __future__ import annotations


from qops import registry
from qops.ops.validation import check_attributes, check_patterns, check_tensors, fail, plural, resolve_version
from qops.reference.convolution import output_size
from qops.ops import arguments as _args
from qops.ops.common import finish_requantized, output_desc

OPERATOR = registry.get("QUANTIZED_LINEAR_CONVOLUTION")

SLOTS = tuple(slot.name for slot in OPERATOR.inputs)
#: The largest padded spatial size: DirectML indexes tensors with 32-bit integers.
INDEX_LIMIT = 2**31 - 1
SCALES = ("input_scale", "filter_scale", "output_scale")
_ZERO_POINTS = {"input_zero_point": "input", "filter_zero_point": "filter"}
_PER_CHANNEL_SHORTHAND = ("filter_scale", "filter_zero_point", "bias")


def prepare(slots: dict, attributes: dict, feature_level=None, *, out=None) -> _args.Call:
    """Normalize and validate a convolution call; raise before anything runs."""
    op = OPERATOR
    version = resolve_version(op, feature_level)
    attributes = check_attributes(op, version, attributes)

    given = {}
    for name in ("input", "filter"):
        given[name] = _args.as_tensor(op, name, slots.get(name))
    for name, paired in _ZERO_POINTS.items():
        given[name] = _args.as_parameter(op, name, slots.get(name),
                                         number_dtype=_args.registry_dtype(given[paired]))
    for name in SCALES:
        given[name] = _args.as_parameter(op, name, slots.get(name), number_dtype="FLOAT32")
    given["bias"] = _args.as_parameter(op, "bias", slots.get("bias"), number_dtype="INT32")
    output_dtype = attributes["output_dtype"] or _args.registry_dtype(given["input"])
    given["output_zero_point"] = _args.as_parameter(
        op, "output_zero_point", slots.get("output_zero_point"), number_dtype=output_dtype)

    # Shorthand: numbers and 0-d arrays are per-tensor {1,1,1,1}; a 1-d
    # filter scale, filter zero point or bias is per-channel {1,C,1,1}.
    for name in SLOTS:
        item = given[name]
        if item is None or name in ("input", "filter"):
            continue
        if item.desc.ndim == 0:
            given[name] = _args.expand(item, (1, 1, 1, 1), _args.shorthand_note(item))
        elif item.desc.ndim == 1 and name in _PER_CHANNEL_SHORTHAND:
            given[name] = _args.expand(item, (1, item.desc.shape[0], 1, 1), _args.shorthand_note(item))

    descs = {name: (item.desc if item is not None else None) for name, item in given.items()}
    geometry_known = all(descs[n] is not None and descs[n].ndim == 4 for n in ("input", "filter"))
    output_shape = _output_shape(descs, attributes) if geometry_known else ()
    descs["output"] = output_desc(attributes["output_dtype"], descs["output_zero_point"],
                                  descs["input"], output_shape)
    if descs["output"] is None:
        del descs["output"]
    check_tensors(op, version, descs)
    _check_geometry(op, descs, attributes, output_shape)
    symbols = {"OutputChannelCount": descs["filter"].shape[0]}
    granularity = check_patterns(
        op, version, descs, symbols,
        ("input_scale", "input_zero_point", "filter_scale", "filter_zero_point", "bias",
         "output_scale", "output_zero_point"))

    return finish_requantized(op, version, given, descs, attributes, output_shape, granularity,
                              SCALES, out)


def _output_shape(descs, attributes):
    batch, _, height, width = descs["input"].shape
    out_channels, _, kernel_h, kernel_w = descs["filter"].shape
    sizes = []
    for axis, (size, kernel) in enumerate(((height, kernel_h), (width, kernel_w))):
        sizes.append(output_size(size, kernel, attributes["strides"][axis],
                                 attributes["dilations"][axis],
                                 attributes["start_padding"][axis], attributes["end_padding"][axis]))
    return (batch, out_channels, sizes[0], sizes[1])


def _check_geometry(op, descs, attributes, output_shape):
    """Channel counts against the group count, and a non-empty output window."""
    _, channels, height, width = descs["input"].shape
    out_channels, group_channels, kernel_h, kernel_w = descs["filter"].shape
    groups = attributes["group_count"]
    if channels != group_channels * groups:
        fail(op, f"input has {plural(channels, 'channel')} but filter {descs['filter'].shape_text()} "
                 f"takes {group_channels} per group; with group_count {groups} the input needs "
                 f"{group_channels * groups}", slot="filter", given=channels)
    if out_channels % groups:
        fail(op, f"filter has {out_channels} output channels, which group_count {groups} does not "
                 "divide", slot="group_count", given=groups)
    for axis, (dimension, size, kernel) in enumerate(
            (("height", height, kernel_h), ("width", width, kernel_w))):
        padded = size + attributes["start_padding"][axis] + attributes["end_padding"][axis]
        if padded > INDEX_LIMIT:
            fail(op, f"the padded input {dimension} is {padded}; spatial sizes with their padding "
                     f"must stay within 2**31 - 1 (32-bit indexing)", slot="end_padding",
                 given=padded, allowed=INDEX_LIMIT)
        if kernel < 1:
            fail(op, f"filter {dimension} is 0; a filter needs at least one element per dimension",
                 slot="filter", given=descs["filter"].shape)
        if output_shape[2 + axis] < 1:
            dilated = attributes["dilations"][axis] * (kernel - 1) + 1
            padded = size + attributes["start_padding"][axis] + attributes["end_padding"][axis]
            fail(op, f"the output {dimension} would be {output_shape[2 + axis]}: the padded input "
                     f"{dimension} {padded} is smaller than the dilated filter {dimension} {dilated}",
                 slot="input", given=descs["input"].shape)

