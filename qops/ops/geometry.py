"""Shape rules shared by the operators' front ends: a convolution's output
size and geometry checks (QUANTIZED_LINEAR_CONVOLUTION, CONVOLUTION_INTEGER)
and a matrix multiply's output shape (QUANTIZED_LINEAR_MATRIX_MULTIPLY,
MATRIX_MULTIPLY_INTEGER)."""

from __future__ import annotations

from qops.ops import arguments as _args
from qops.ops.validation import check_attributes, check_slot, fail, plural, shape_text
from qops.reference.convolution import output_size

__all__ = ["INDEX_LIMIT", "SPATIAL_ATTRIBUTES", "convolution_rank", "one_d_attributes",
           "lifted_attributes", "lifted_form", "two_d_form", "convolution_attributes",
           "check_window_extents", "SPATIAL_NAMES", "convolution_in_two_d", "convolution_output_shape",
           "check_convolution_geometry", "matmul_output_shape"]

#: The largest padded spatial size: DirectML indexes tensors with 32-bit integers.
INDEX_LIMIT = 2**31 - 1


#: A convolution's per-axis attributes and the value that leaves an axis as
#: it is: a 1-D convolution runs as a 2-D one whose height takes these.
SPATIAL_ATTRIBUTES = {"strides": 1, "dilations": 1, "start_padding": 0, "end_padding": 0}


def convolution_rank(input_item):
    """The dimension count of a convolution's data tensors: the input's when
    it is 3 (a 1-D convolution) or 4, else 4, so that the dimension check
    reports a wrong input rather than the shorthand built from it."""
    ndim = input_item.desc.ndim if input_item is not None else 4
    return ndim if ndim in (3, 4) else 4


def lifted_attributes(op, attributes, neutral, count, lift, what):
    """Spatial attributes given with ``count`` values each (NumPy arrays too)
    in the form of ``count + lift`` dimensions the kernels run: each of
    ``neutral``'s attributes gains ``lift`` leading neutral values.  ``what``
    names the call in the error (``"a 1-D convolution (input of 3
    dimensions)"``)."""
    attributes = dict(attributes)
    for name, value_of_axis in neutral.items():
        value = attributes.get(name)
        if value is None:
            continue
        if hasattr(value, "tolist") and not isinstance(value, (tuple, list)):
            value = value.tolist()
        if not isinstance(value, (tuple, list)) or len(value) != count:
            wanted = "one value per attribute" if count == 1 else f"{count} values"
            fail(op, f"{name} is {value!r}; {what} takes {wanted}", slot=name, given=value)
        attributes[name] = (value_of_axis,) * lift + tuple(value)
    return attributes


def one_d_attributes(op, attributes):
    """A 1-D convolution's spatial attributes (one value each) with the
    height's neutral value put first, as the 2-D form it runs as takes them."""
    return lifted_attributes(op, attributes, SPATIAL_ATTRIBUTES, 1, 1,
                             "a 1-D convolution (input of 3 dimensions)")


def convolution_attributes(op, version, input_item, attributes):
    """``(rank, attributes)`` of a convolution: its data tensors' dimension
    count and its attributes checked, a 1-D convolution's in their 2-D form.
    A level without 1-D convolutions reports the input's rank first, before
    any error about the attributes."""
    rank = convolution_rank(input_item)
    if rank == 3:
        check_slot(op, version, "input", input_item.desc)
        attributes = one_d_attributes(op, attributes)
    return rank, check_attributes(op, version, attributes)


def lifted_form(item, rank, full_rank):
    """A slot in the form of ``full_rank`` dimensions the kernels run.

    Fewer dimensions than ``rank`` (the call's) align to the right, as
    DirectML's broadcasting does (``(OC, 1, 1)`` of a 2-D convolution is
    ``(1, OC, 1, 1)``).  A slot one dimension short of ``full_rank`` then
    gains a spatial size of 1 after the channels (the height of a 1-D
    convolution, the depth of a 2-D pooling); one of ``full_rank`` already
    has the form.
    """
    if item is None:
        return None
    shape = tuple(item.desc.shape)
    if len(shape) < rank:
        shape = (1,) * (rank - len(shape)) + shape
    if len(shape) == full_rank - 1:
        shape = shape[:2] + (1,) + shape[2:]
    if shape == tuple(item.desc.shape):
        return item
    note = item.desc.note or f"given as {shape_text(item.desc.shape)}"
    return _args.expand(item, shape, note)


def two_d_form(item, rank):
    """A convolution slot in the 2-D form the kernels run (:func:`lifted_form`)."""
    return lifted_form(item, rank, 4)


def convolution_in_two_d(given, rank, attributes):
    """A convolution's slots in their 2-D form (:func:`two_d_form`).

    Returns ``(square, square_descs, output_shape, visible_shape)``: the
    slots and their descriptions in that form, the 2-D output shape (``()``
    while the input or filter is not yet a tensor of ``rank`` dimensions; the
    dimension checks report it) and the output's shape as the caller sees it
    (a 1-D convolution's has no height).
    """
    square = {}
    for name, item in given.items():
        if name in ("input", "filter") and item is not None and item.desc.ndim != rank:
            square[name] = item
        else:
            square[name] = two_d_form(item, rank)
    descs = {name: (item.desc if item is not None else None) for name, item in square.items()}
    known = all(descs[n] is not None and descs[n].ndim == 4 for n in ("input", "filter"))
    output_shape = convolution_output_shape(descs, attributes) if known else ()
    visible = output_shape[:2] + output_shape[3:] if rank == 3 and output_shape else output_shape
    return square, descs, output_shape, visible


def convolution_output_shape(descs, attributes):
    """``(N, OC, OH, OW)`` of a 2-D convolution's descriptions."""
    batch, _, height, width = descs["input"].shape
    out_channels, _, kernel_h, kernel_w = descs["filter"].shape
    sizes = []
    for axis, (size, kernel) in enumerate(((height, kernel_h), (width, kernel_w))):
        sizes.append(output_size(size, kernel, attributes["strides"][axis],
                                 attributes["dilations"][axis],
                                 attributes["start_padding"][axis], attributes["end_padding"][axis]))
    return (batch, out_channels, sizes[0], sizes[1])


def check_convolution_geometry(op, descs, attributes, output_shape):
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
    for dimension, kernel in (("height", kernel_h), ("width", kernel_w)):
        if kernel < 1:
            fail(op, f"filter {dimension} is 0; a filter needs at least one element per dimension",
                 slot="filter", given=descs["filter"].shape)
    check_window_extents(op, (height, width), (kernel_h, kernel_w), attributes, output_shape[2:],
                         "filter", slot="input", given=descs["input"].shape)


#: The names of up to three spatial dimensions, the last ones for fewer.
SPATIAL_NAMES = ("depth", "height", "width")


def check_window_extents(op, sizes, windows, attributes, output_sizes, what, *, slot, given):
    """Along each spatial dimension: the padded size within 32-bit indexing,
    and a non-empty output, the padded input at least the dilated window
    (``what``: ``"filter"`` or ``"window"``)."""
    names = SPATIAL_NAMES[len(SPATIAL_NAMES) - len(sizes):]
    for axis, (dimension, size, window) in enumerate(zip(names, sizes, windows)):
        padded = size + attributes["start_padding"][axis] + attributes["end_padding"][axis]
        if padded > INDEX_LIMIT:
            fail(op, f"the padded input {dimension} is {padded}; spatial sizes with their padding "
                     f"must stay within 2**31 - 1 (32-bit indexing)", slot="end_padding",
                 given=padded, allowed=INDEX_LIMIT)
        if output_sizes[axis] < 1:
            dilated = attributes["dilations"][axis] * (window - 1) + 1
            fail(op, f"the output {dimension} would be {output_sizes[axis]}: the padded input "
                     f"{dimension} {padded} is smaller than the dilated {what} {dimension} "
                     f"{dilated}", slot=slot, given=given)


def matmul_output_shape(op, descs, strict=False):
    """``(*broadcast batch, M, N)``.

    Before the dimension checks (``strict`` false) it answers ``None`` for
    shapes that do not fit, so those checks report first; after them, an
    error.
    """
    a, b = descs["a"], descs["b"]
    if a is None or b is None or a.ndim < 2 or b.ndim < 2 or a.ndim != b.ndim:
        if strict:
            fail(op, f"a {shape_text(a.shape)} and b {shape_text(b.shape)} are not matrices of one rank")
        return None
    if not strict:
        broadcastable = all(l == r or 1 in (l, r) for l, r in zip(a.shape[:-2], b.shape[:-2]))
        if a.shape[-1] != b.shape[-2] or not broadcastable:
            return None
    if a.shape[-1] != b.shape[-2]:
        fail(op, f"a has shape {shape_text(a.shape)} and b {shape_text(b.shape)}: a has K = "
                 f"{a.shape[-1]} columns but b has {b.shape[-2]} rows", slot="b",
             given=b.shape, allowed=a.shape[-1])
    batch = []
    for axis, (left, right) in enumerate(zip(a.shape[:-2], b.shape[:-2])):
        if left != right and 1 not in (left, right):
            fail(op, f"a {shape_text(a.shape)} and b {shape_text(b.shape)} differ in batch dimension "
                     f"{axis} ({left} and {right}); only a size of 1 broadcasts", slot="b",
                 given=b.shape)
        batch.append(max(left, right) if min(left, right) else 0)
    return tuple(batch) + (a.shape[-2], b.shape[-1])
