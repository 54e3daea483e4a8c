"""Calls into the compiled kernels: a validated Call becomes kernel arguments.

Nothing here validates (qops.ops has) and nothing loops over elements: this
layer reshapes scales and zero points into per-row and per-column vectors,
applies the unsigned-times-signed offsets the kernels use, and views arrays
as bytes.
"""

from __future__ import annotations

import numpy as np

from . import _dtypes, _simd
from .reference import requantization_multiplier

_FLIP = 128  # x ^ 0x80 moves int8 to uint8 (x + 128) and uint8 to int8 (x - 128)
_SINGLE_BATCH = np.zeros(1, np.int64)


def _vector(parameter, length, dtype):
    """A scale or zero point (per tensor, or one value per row/column) as a
    contiguous vector of ``length``; ``None`` gives zeros."""
    if parameter is None:
        return np.zeros(length, dtype)
    values = np.asarray(parameter)
    if values.size == 1:
        return np.full(length, values.reshape(()), dtype)
    return np.ascontiguousarray(values.reshape(length), dtype=dtype)


def _multiplier(input_scale, weight_scale, output_scale, rows, columns, row_side):
    """The requantization multipliers as a (rows or 1) x (columns or 1) float32
    table, computed once by the reference rule; ``row_side`` says for each
    scale whether its values run along rows (else along columns)."""
    shaped = []
    for scale, along_rows in zip((input_scale, weight_scale, output_scale), row_side):
        values = np.asarray(scale, np.float32).reshape(-1)
        shaped.append(values.reshape(-1, 1) if along_rows else values.reshape(1, -1))
    table = requantization_multiplier(*shaped)
    return np.ascontiguousarray(table)


def _signed(array):
    return array.dtype == np.int8


def _bytes(array):
    return np.ascontiguousarray(array).view(np.uint8)


def _range(dtype):
    return _dtypes.INTEGER_RANGES[_dtypes.name_of(dtype)]


def run_matmul(call, out, n_threads, variant=None):
    arrays = call.arrays
    a, b = arrays["a"], arrays["b"]
    rows, depth = a.shape[-2:]
    columns = b.shape[-1]
    kernels = _simd.module(variant)
    out_batch = tuple(call.output_shape[:-2])

    def batch_index(array):
        if not out_batch:
            return _SINGLE_BATCH
        count = int(np.prod(array.shape[:-2], dtype=np.int64))
        grid = np.arange(count, dtype=np.int64).reshape(array.shape[:-2])
        return np.ascontiguousarray(np.broadcast_to(grid, out_batch).ravel())

    a_index, b_index = batch_index(a), batch_index(b)
    a_flip, b_flip = _signed(a), not _signed(b)
    a3 = _bytes(a).reshape(-1, rows, depth)
    b3 = _bytes(b).reshape(-1, depth, columns)
    row_zero = _vector(arrays["a_zero_point"], rows, np.int32) + (_FLIP if a_flip else 0)
    col_zero = _vector(arrays["b_zero_point"], columns, np.int32) - (_FLIP if b_flip else 0)
    multiplier = _table(_multiplier(arrays["a_scale"], arrays["b_scale"], arrays["output_scale"],
                                    rows, columns, row_side=(True, False, True)), columns)
    out_zero = _table(_output_zero(arrays["output_zero_point"], rows), columns)
    low, high = _range(call.output_dtype)
    packed_b, colsum = _cached(call, ("b", variant),
                               lambda: kernels.pack_b_batches(b3, b_flip, n_threads))
    kernels.matmul(a3, a_flip, a_index, packed_b, colsum, b_index, columns, row_zero, col_zero,
                   multiplier, out_zero, out.view(np.uint8).reshape(-1, rows, columns), low, high,
                   n_threads)


def _table(values, columns):
    """A (rows or 1) x (columns or 1) table as (rows or 1) x columns, contiguous:
    the kernels read per-column values in a line."""
    return np.ascontiguousarray(np.broadcast_to(values, (values.shape[0], columns)))


def _output_zero(parameter, rows):
    """The output zero point as a (rows or 1) x 1 int32 column."""
    if parameter is None:
        return np.zeros((1, 1), np.int32)
    values = np.asarray(parameter, np.int32).reshape(-1, 1)
    return values if values.shape[0] == rows else values[:1]


def _cached(call, key, pack):
    """A constant operand in kernel layout: packed once per compiled operator
    (and kernel variant), or afresh for a plain call."""
    if call.packed is None:
        return pack()
    return call.packed.get(key, pack)


def filter_fold(filter, group_count):
    """How many filter columns the convolution kernel takes per step: all of
    them when a group has few channels (longer steps, fewer of them), else one."""
    _, group_channels, _, kernel_w = filter.shape
    return kernel_w if kernel_w > 1 and group_channels < _FOLD_BELOW_CHANNELS else 1


_FOLD_BELOW_CHANNELS = 16


def pack_filter(filter, group_count, fold, kernels, n_threads=1):
    """The filter as each group's packed B: rows k in the order (filter row,
    [filter column,] channel), the channel block padded to 4 with bytes that
    pack to 0; columns are the group's output channels."""
    out_channels, group_channels, kernel_h, kernel_w = filter.shape
    flip = not _signed(filter)
    outputs = out_channels // group_count
    steps = kernel_h * (kernel_w // fold)
    block = fold * group_channels
    block_padded = -(-block // 4) * 4
    taps = _bytes(filter).reshape(group_count, outputs, group_channels, kernel_h, kernel_w)
    taps = taps.transpose(0, 3, 4, 2, 1).reshape(group_count, steps, block, outputs)
    matrix = np.full((group_count, steps, block_padded, outputs), _FLIP if flip else 0, np.uint8)
    matrix[:, :, :block] = taps
    return kernels.pack_b_batches(matrix.reshape(group_count, steps * block_padded, outputs),
                                  flip, n_threads)


def _channel_requantization(call):
    """Per output channel: the multiplier, output zero point and bias (None)
    of a convolution, as the kernels take them."""
    arrays = call.arrays
    out_channels = arrays["filter"].shape[0]
    # Every convolution scale is per output channel or per tensor.
    multiplier = np.ascontiguousarray(np.broadcast_to(
        _multiplier(arrays["input_scale"], arrays["filter_scale"], arrays["output_scale"],
                    out_channels, 1, row_side=(True, True, True)), (out_channels, 1)))
    out_zero = _vector(arrays["output_zero_point"], out_channels, np.int32)
    bias = None if arrays["bias"] is None else _vector(arrays["bias"], out_channels, np.int32)
    return multiplier, out_zero, bias


def run_convolution(call, out, n_threads, variant=None):
    arrays = call.arrays
    attributes = call.attributes
    image, filter = arrays["input"], arrays["filter"]
    kernels = _simd.module(variant)
    out_channels, _, kernel_h, kernel_w = filter.shape
    batch, _, out_h, out_w = call.output_shape
    group_count = attributes["group_count"]
    filter_flip, input_flip = not _signed(filter), _signed(image)
    fold = filter_fold(filter, group_count)
    packed, colsum = _cached(call, ("filter", variant),
                             lambda: pack_filter(filter, group_count, fold, kernels, n_threads))
    input_zero = _vector(arrays["input_zero_point"], 1, image.dtype)
    col_zero = _vector(arrays["filter_zero_point"], out_channels, np.int32) - (
        _FLIP if filter_flip else 0)
    multiplier, out_zero, bias = _channel_requantization(call)
    low, high = _range(call.output_dtype)
    kernels.conv2d(_bytes(image), input_flip, int(input_zero.view(np.uint8)[0]), packed, colsum,
                   kernel_h, kernel_w, fold, attributes["strides"], attributes["dilations"],
                   attributes["start_padding"], attributes["end_padding"], col_zero,
                   multiplier.reshape(-1), out_zero, bias,
                   out.view(np.uint8).reshape(batch, out_channels, out_h * out_w), low, high,
                   n_threads)


def _is_depthwise(call):
    filter = call.arrays["filter"]
    return filter.shape[1] == 1 and call.attributes["group_count"] > 1


def run_depthwise(call, out, n_threads, variant=None):
    arrays = call.arrays
    attributes = call.attributes
    image, filter = arrays["input"], arrays["filter"]
    kernels = _simd.module(variant)
    out_channels, _, kernel_h, kernel_w = filter.shape
    input_zero = _vector(arrays["input_zero_point"], 1, np.int32)[0]
    multiplier, out_zero, bias = _channel_requantization(call)
    low, high = _range(call.output_dtype)
    strides = attributes["strides"]
    operands = (_bytes(image), _signed(image), int(input_zero),
                _bytes(filter).reshape(out_channels, kernel_h * kernel_w), _signed(filter),
                _vector(arrays["filter_zero_point"], out_channels, np.int32), kernel_h, kernel_w)
    requantization = (multiplier.reshape(-1), out_zero, bias, out.view(np.uint8), low, high,
                      n_threads)
    if strides[0] == strides[1]:
        kernels.depthwise2d_flat(*operands, strides[0], attributes["dilations"],
                                 attributes["start_padding"], attributes["end_padding"],
                                 *requantization)
    else:
        kernels.depthwise2d(*operands, strides, attributes["dilations"],
                            attributes["start_padding"], *requantization)


def _has_work(call, *slots):
    """Empty operands and outputs are the reference's: nothing to pack."""
    return all(call.arrays[name].size for name in slots) and all(call.output_shape)


def register(dispatch):
    """Put the kernels ahead of the reference at the dispatch point."""
    dispatch.register("QUANTIZED_LINEAR_MATRIX_MULTIPLY", "kernels", run_matmul, priority=10,
                      supports=lambda call: _has_work(call, "a", "b"))
    dispatch.register("QUANTIZED_LINEAR_CONVOLUTION", "kernels", run_convolution, priority=10,
                      supports=lambda call: _has_work(call, "input", "filter"))
    # Above the GEMM path: one input channel per group, at most 4096 filter taps.
    dispatch.register("QUANTIZED_LINEAR_CONVOLUTION", "depthwise kernels", run_depthwise,
                      priority=20,
                      supports=lambda call: (_has_work(call, "input", "filter")
                                             and _is_depthwise(call)
                                             and call.arrays["filter"][0].size <= 4096))
