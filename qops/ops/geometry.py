"""Shape rules shared by the operators' front ends: a convolution's output
size and geometry checks (QUANTIZED_LINEAR_CONVOLUTION, CONVOLUTION_INTEGER)
and a matrix multiply's output shape (QUANTIZED_LINEAR_MATRIX_MULTIPLY,
MATRIX_MULTIPLY_INTEGER)."""

from __future__ import annotations

from qops.ops.validation import fail, plural, shape_text
from qops.reference.convolution import output_size

__all__ = ["INDEX_LIMIT", "convolution_output_shape", "check_convolution_geometry",
           "matmul_output_shape"]

#: The largest padded spatial size: DirectML indexes tensors with 32-bit integers.
INDEX_LIMIT = 2**31 - 1


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
