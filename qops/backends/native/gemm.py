"""Calls into the compiled kernels: a validated Call becomes kernel arguments.

Nothing here validates (qops.ops has) and nothing loops over elements: this
layer reshapes scales and zero points into per-row and per-column vectors,
applies the unsigned-times-signed offsets the kernels use, and views arrays
as bytes.
"""

from __future__ import annotations

import numpy as np

from qops.registry import dtypes as _dtypes
from qops.backends.native import variants as _simd
from qops.reference import requantization_multiplier

_FLIP = 128  # x ^ 0x80 moves int8 to uint8 (x + 128) and uint8 to int8 (x - 128)
_SINGLE_BATCH = np.zeros(1, np.int64)


def _vector(parameter, length, dtype, offset=0):
    """A scale or zero point (per tensor, or one value per row/column) plus
    ``offset``, as a contiguous vector of ``length``; ``None`` gives ``offset``."""
    if parameter is None:
        return np.full(length, offset, dtype)
    if parameter.size == 1:
        return np.full(length, parameter.item() + offset, dtype)
    # Always a copy: the result may be kept (_ParameterCache) after the
    # caller's array changes.
    values = np.array(parameter, dtype).reshape(length)
    return values + offset if offset else values


def _multiplier(input_scale, weight_scale, output_scale, row_side):
    """The requantization multipliers as a (rows or 1) x (columns or 1) float32
    table, computed once per call by the reference rule; ``row_side`` says for
    each scale whether its values run along rows (else along columns)."""
    if input_scale.size == weight_scale.size == output_scale.size == 1:
        # Per tensor, in NumPy scalars: float32 values multiply exactly in
        # double, so rounding that product to float32 is the float32 product.
        product = np.float32(input_scale.item() * weight_scale.item())
        return np.full((1, 1), product / np.float32(output_scale.item()), np.float32)
    shaped = []
    for scale, along_rows in zip((input_scale, weight_scale, output_scale), row_side):
        values = scale.reshape(-1)
        shaped.append(values.reshape(-1, 1) if along_rows else values.reshape(1, -1))
    return np.ascontiguousarray(requantization_multiplier(*shaped))


def _signed(array):
    return array.dtype == np.int8


#: Multiply-adds that make a thread worth its start: about 15 to 30
#: microseconds of one core, several times what opening a parallel region
#: costs on an idle machine.  Below it a thread adds little, and on a busy
#: machine it costs much more: every parallel region waits for all its
#: threads, and a thread the scheduler has not run yet can hold a region for
#: milliseconds.
WORK_PER_THREAD = 1 << 20


def threads_for(work, n_threads):
    """The threads a product of ``work`` multiply-adds runs on: at most
    ``n_threads``, one per WORK_PER_THREAD (results never depend on it)."""
    return max(1, min(n_threads, work // WORK_PER_THREAD))


def _bytes(array):
    return np.ascontiguousarray(array).view(np.uint8)


def _range(dtype):
    return _dtypes.INTEGER_RANGES[_dtypes.name_of(dtype)]


def prepare_matmul(call, variant=None):
    """``run(call, out, n_threads)`` for matrix multiplies of this signature."""
    variant = variant or _simd.selected()
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
    # MATRIX_MULTIPLY_INTEGER: the exact products as int32, 4 bytes each.
    raw = call.output_dtype == np.int32
    a_shape, b_shape = (-1, rows, depth), (-1, depth, columns)
    out_shape = (-1, rows, columns * (4 if raw else 1))
    low, high = (0, 0) if raw else _range(call.output_dtype)

    def requantization(arrays):
        zero_points = (
            _vector(arrays["a_zero_point"], rows, np.int32, _FLIP if a_flip else 0),
            _vector(arrays["b_zero_point"], columns, np.int32, -_FLIP if b_flip else 0))
        if raw:
            return zero_points + (np.ones((1, columns), np.float32),
                                  np.zeros((1, columns), np.int32))
        return zero_points + (
            _table(_multiplier(arrays["a_scale"], arrays["b_scale"], arrays["output_scale"],
                               row_side=(True, False, True)), columns),
            _table(_output_zero(arrays["output_zero_point"], rows), columns))

    parameters = _ParameterCache(("a_scale", "a_zero_point", "b_scale", "b_zero_point",
                                  "output_scale", "output_zero_point"), requantization)
    work = int(np.prod(call.output_shape, dtype=np.int64)) * depth

    def run(call, out, n_threads):
        n_threads = threads_for(work, n_threads)
        arrays = call.arrays
        packed_b, colsum = _cached(call, ("b", variant), lambda: kernels.pack_b_batches(
            _bytes(arrays["b"]).reshape(b_shape), b_flip, n_threads))
        kernels.matmul(_bytes(arrays["a"]).reshape(a_shape), a_flip, a_index, packed_b, colsum,
                       b_index, columns, *parameters.get(arrays),
                       out.view(np.uint8).reshape(out_shape), low, high, n_threads, raw)

    return run


class _ParameterCache:
    """The kernel-ready vectors derived from a call's scales and zero points,
    kept for the next call with the same parameter values (they rarely
    change between calls).  Keyed by the parameters' bytes, for parameters
    of at most _PARAMETER_KEY_LIMIT elements; the vectors are only read."""

    def __init__(self, slots, derive):
        self._slots = slots
        self._derive = derive
        self._entries = {}

    def get(self, arrays):
        key = []
        for name in self._slots:
            value = arrays.get(name)
            if value is None:
                key.append(None)
            elif value.size <= _PARAMETER_KEY_LIMIT:
                key.append(value.tobytes())
            else:
                return self._derive(arrays)
        key = tuple(key)
        found = self._entries.get(key)
        if found is None:
            found = self._derive(arrays)
            for value in found:
                if isinstance(value, np.ndarray):
                    value.setflags(write=False)
            if len(self._entries) >= _PARAMETER_ENTRIES:
                self._entries.clear()
            self._entries[key] = found
        return found


_PARAMETER_KEY_LIMIT = 4096
_PARAMETER_ENTRIES = 16


def _table(values, columns):
    """A (rows or 1) x (columns or 1) table as (rows or 1) x columns, contiguous:
    the kernels read per-column values in a line."""
    if values.shape[1] == columns:
        return values
    if values.shape[0] == 1:
        return np.full((1, columns), values.item(), values.dtype)
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


def filter_taps(filter, fold):
    """Per row of the packed filter, the offset of its tap in a filter row
    (out_channels x channels * kernel_h * kernel_w bytes), -1 for padding.

    Rows run (filter row, [filter column,] channel): one step of the kernel
    per filter row (fold = kernel_w) or per tap (fold = 1), each step's block
    of channels padded to a multiple of 4.
    """
    _, group_channels, kernel_h, kernel_w = filter.shape
    block = fold * group_channels
    block_padded = -(-block // 4) * 4
    row, column, channel = np.meshgrid(np.arange(kernel_h), np.arange(kernel_w),
                                       np.arange(group_channels), indexing="ij")
    offsets = (channel * kernel_h + row) * kernel_w + column
    steps = offsets.reshape(kernel_h * (kernel_w // fold), block)
    table = np.full((steps.shape[0], block_padded), -1, np.intp)
    table[:, :block] = steps
    return table.reshape(-1)


def pack_filter(filter, group_count, fold, kernels, n_threads=1):
    """The filter as each group's packed B (the order of :func:`filter_taps`);
    columns are the group's output channels."""
    rows = _bytes(filter).reshape(filter.shape[0], -1)
    return kernels.pack_filter(rows, group_count, filter_taps(filter, fold), not _signed(filter),
                               n_threads)


def _channel_requantization(arrays, out_channels):
    """Per output channel: the multiplier, output zero point and bias (None)
    of a convolution, as the kernels take them."""
    # Every convolution scale is per output channel or per tensor.
    multiplier = _multiplier(arrays["input_scale"], arrays["filter_scale"],
                             arrays["output_scale"], row_side=(False, False, False))
    if multiplier.size != out_channels:
        multiplier = np.full(out_channels, multiplier.reshape(()), np.float32)
    out_zero = _vector(arrays["output_zero_point"], out_channels, np.int32)
    bias = None if arrays["bias"] is None else _vector(arrays["bias"], out_channels, np.int32)
    return multiplier.reshape(-1), out_zero, bias


def prepare_convolution(call, variant=None):
    """``run(call, out, n_threads)`` for convolutions of this signature."""
    arrays = call.arrays
    attributes = call.attributes
    image, filter = arrays["input"], arrays["filter"]
    out_channels, _, kernel_h, kernel_w = filter.shape
    group_count = attributes["group_count"]
    filter_flip, input_flip = not _signed(filter), _signed(image)
    fold = filter_fold(filter, group_count)
    variant = variant or _convolution_variant(filter, fold)
    kernels = _simd.module(variant)
    # CONVOLUTION_INTEGER: the exact sums as int32, 4 bytes each (a 1-D
    # convolution's output has no height: its pixels are its width).
    raw = call.output_dtype == np.int32
    low, high = (0, 0) if raw else _range(call.output_dtype)
    geometry = (kernel_h, kernel_w, fold, attributes["strides"], attributes["dilations"],
                attributes["start_padding"], attributes["end_padding"])
    pixels = int(np.prod(call.output_shape[2:], dtype=np.int64))
    out_shape = (call.output_shape[0], out_channels, pixels * (4 if raw else 1))

    def requantization(arrays):
        input_zero = _vector(arrays["input_zero_point"], 1, arrays["input"].dtype)
        if raw:
            per_channel = (np.ones(out_channels, np.float32), np.zeros(out_channels, np.int32),
                           None)
        else:
            per_channel = _channel_requantization(arrays, out_channels)
        return (int(input_zero.view(np.uint8)[0]),
                _vector(arrays["filter_zero_point"], out_channels, np.int32,
                        -_FLIP if filter_flip else 0),
                *per_channel)

    parameters = _ParameterCache(("input_scale", "input_zero_point", "filter_scale",
                                  "filter_zero_point", "bias", "output_scale",
                                  "output_zero_point"), requantization)
    work = int(np.prod(call.output_shape, dtype=np.int64)) * int(filter[0].size)

    def run(call, out, n_threads):
        n_threads = threads_for(work, n_threads)
        arrays = call.arrays
        filter = arrays["filter"]
        packed, colsum = _cached(call, ("filter", variant),
                                 lambda: pack_filter(filter, group_count, fold, kernels,
                                                     n_threads))
        input_zero, col_zero, multiplier, out_zero, bias = parameters.get(arrays)
        kernels.conv2d(_bytes(arrays["input"]), input_flip, input_zero, packed, colsum,
                       *geometry, col_zero, multiplier, out_zero, bias,
                       out.view(np.uint8).reshape(out_shape), low, high, n_threads, raw)

    return run


def _convolution_variant(filter, fold):
    """The selected kernels, except that AMX multiplies 16 groups of 4 k at a
    time: when a filter step's channels are not whole such blocks (few
    channels: the first layer of a network), gathering A costs more than the
    tiles save, and the AVX-512 VNNI kernels run instead.  A variant asked
    for by name always runs."""
    selected = _simd.selected()
    step_groups = -(-fold * filter.shape[1] // 4)
    if selected == "amx" and step_groups % 16 and "avx512vnni" in _simd.available():
        return "avx512vnni"
    return selected


def _is_depthwise(call):
    filter = call.arrays["filter"]
    return filter.shape[1] == 1 and call.attributes["group_count"] > 1


def prepare_depthwise(call, variant=None):
    """``run(call, out, n_threads)`` for depthwise convolutions of this signature."""
    attributes = call.attributes
    image, filter = call.arrays["input"], call.arrays["filter"]
    kernels = _simd.module(variant)
    out_channels, _, kernel_h, kernel_w = filter.shape
    low, high = _range(call.output_dtype)
    kernel = kernels.depthwise2d
    geometry = (attributes["strides"], attributes["dilations"], attributes["start_padding"],
                attributes["end_padding"])
    image_signed, filter_signed = _signed(image), _signed(filter)
    taps_shape = (out_channels, kernel_h * kernel_w)

    def requantization(arrays):
        return (int(_vector(arrays["input_zero_point"], 1, np.int32)[0]),
                _vector(arrays["filter_zero_point"], out_channels, np.int32),
                *_channel_requantization(arrays, out_channels))

    parameters = _ParameterCache(("input_scale", "input_zero_point", "filter_scale",
                                  "filter_zero_point", "bias", "output_scale",
                                  "output_zero_point"), requantization)

    def run(call, out, n_threads):
        arrays = call.arrays
        input_zero, filter_zero, multiplier, out_zero, bias = parameters.get(arrays)
        kernel(_bytes(arrays["input"]), image_signed, input_zero,
               _bytes(arrays["filter"]).reshape(taps_shape), filter_signed, filter_zero,
               kernel_h, kernel_w, *geometry, multiplier, out_zero, bias, out.view(np.uint8),
               low, high, n_threads)

    return run


def _runner(prepare):
    def run(call, out, n_threads, variant=None):
        prepare(call, variant)(call, out, n_threads)
    return run


run_matmul = _runner(prepare_matmul)
run_convolution = _runner(prepare_convolution)
run_depthwise = _runner(prepare_depthwise)


def _has_work(call, *slots):
    """Empty operands and outputs are the reference's: nothing to pack."""
    return all(call.arrays[name].size for name in slots) and all(call.output_shape)


def _fits_int32(depth):
    """Whether every sum of ``depth`` products of 8-bit differences fits int32."""
    return depth * 255 * 255 <= np.iinfo(np.int32).max


def register(dispatch):
    """Put the kernels ahead of the reference at the dispatch point."""
    dispatch.register("QUANTIZED_LINEAR_MATRIX_MULTIPLY", "kernels", run_matmul, priority=10,
                      supports=lambda call: _has_work(call, "a", "b"), prepare=prepare_matmul)
    dispatch.register("QUANTIZED_LINEAR_CONVOLUTION", "kernels", run_convolution, priority=10,
                      supports=lambda call: _has_work(call, "input", "filter"),
                      prepare=prepare_convolution)
    # The integer operators share the GEMM kernels, whose raw epilogue writes
    # the exact sums as int32: only where K proves every sum fits.
    dispatch.register("MATRIX_MULTIPLY_INTEGER", "kernels", run_matmul, priority=10,
                      supports=lambda call: (_has_work(call, "a", "b")
                                             and _fits_int32(call.arrays["a"].shape[-1])),
                      prepare=prepare_matmul)
    dispatch.register("CONVOLUTION_INTEGER", "kernels", run_convolution, priority=10,
                      supports=lambda call: (_has_work(call, "input", "filter")
                                             and _fits_int32(call.arrays["filter"][0].size)),
                      prepare=prepare_convolution)
    # Above the GEMM path: one input channel per group, at most 4096 filter taps.
    dispatch.register("QUANTIZED_LINEAR_CONVOLUTION", "depthwise kernels", run_depthwise,
                      priority=20,
                      supports=lambda call: (_has_work(call, "input", "filter")
                                             and _is_depthwise(call)
                                             and call.arrays["filter"][0].size <= 4096),
                      prepare=prepare_depthwise)
    from qops.backends.native import quantize as _quantize_native
    _quantize_native.register(dispatch)
