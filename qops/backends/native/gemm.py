"""Matrix multiplies and convolutions on the compiled kernels: a validated
call becomes kernel arguments.

Nothing here validates (:mod:`qops.ops` has) and nothing loops over
elements.  Each ``prepare_*`` does a signature's work once and returns a
:class:`~qops.backends.dispatch.Prepared`: ``derive`` turns a call's scale,
zero-point and bias values, with the requantization multipliers the front
end computed, into the per-row and per-column vectors the kernels read
(applying the unsigned-times-signed offsets of :mod:`.kernels`), and ``run``
views the arrays as bytes and calls the kernel.  The plan keeps what
``derive`` returns for the next call with the same values.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from qops.backends.contract import Prepared, empty_output, run_prepared
from qops.backends.native import variants
from qops.registry import dtypes as _dtypes

__all__ = ["prepare_matmul", "prepare_integer_to_float", "prepare_convolution",
           "prepare_pointwise", "prepare_pixel_rows", "prepare_depthwise", "run_matmul",
           "run_integer_to_float", "run_convolution", "run_pointwise", "run_pixel_rows",
           "run_depthwise", "threads_for", "WORK_PER_THREAD", "fits_int32", "is_pointwise",
           "is_pixel_rows", "is_depthwise"]

_FLIP = 128  # x ^ 0x80 moves int8 to uint8 (x + 128) and uint8 to int8 (x - 128)
_SINGLE_BATCH = np.zeros(1, np.int64)

#: Multiply-adds that make a thread worth its start: a few microseconds of
#: one core, several times what handing a task to a waiting worker costs.
#: Below it a thread adds little, and on a busy machine a worker may not get
#: a core in time anyway (the caller then takes its tasks).  At four times
#: this, products of 0.5 to 2 million multiply-adds ran on one thread, and
#: slower (docs/performance_notes.rst).
WORK_PER_THREAD = 1 << 18

#: The multiply-adds a value of B is worth when a product counts its threads:
#: a product of few rows reads each value of B (from memory, in a model) for
#: a multiply-add or two, and a second thread then halves the reading.
B_VALUE_WORK = 4


def threads_for(work, n_threads):
    """The threads a product of ``work`` multiply-adds runs on: at most
    ``n_threads``, one per WORK_PER_THREAD (results never depend on it)."""
    return max(1, min(n_threads, work // WORK_PER_THREAD))


def fits_int32(depth):
    """Whether every sum of ``depth`` products of 8-bit differences fits int32
    (the kernels' own rule)."""
    return variants.module().depth_fits_int32(depth)


def _vector(parameter, length, dtype, offset=0):
    """A scale or zero point (per tensor, or one value per row/column) plus
    ``offset``, as a contiguous vector of ``length``; ``None`` gives ``offset``.
    Always a new array: the plan keeps it after the caller's array changes."""
    if parameter is None:
        return np.full(length, offset, dtype)
    if parameter.size == 1:
        # No offset is no addition: -0.0 + 0 would be +0.0 (a float bias).
        return np.full(length, parameter.item() + offset if offset else parameter.item(), dtype)
    values = np.array(parameter, dtype).reshape(length)
    return values + offset if offset else values


def _signed(array):
    return array.dtype == np.int8


def _bytes(array):
    return np.ascontiguousarray(array).view(np.uint8)


def _range(dtype):
    return _dtypes.INTEGER_RANGES[_dtypes.name_of(dtype)]


def _table(values, rows, columns):
    """A (rows or 1) x (columns or 1) table as (rows or 1) x columns,
    contiguous and new: the kernels read per-column values in a line."""
    values = np.asarray(values).reshape(values.shape[-2:] if values.ndim >= 2 else (1, -1))
    height = rows if values.shape[0] == rows else 1
    return np.array(np.broadcast_to(values[:height], (height, columns)))


def _frozen(values):
    for value in values:
        if isinstance(value, np.ndarray):
            value.setflags(write=False)
    return values


def _cached(call, key, pack):
    """A constant operand in kernel layout: packed once per compiled operator
    (and kernel variant), or afresh for a plain call."""
    if call.packed is None:
        return pack()
    return call.packed.get(key, pack)


# -- matrix multiply -------------------------------------------------------------------------

def prepare_matmul(call, variant=None):
    """QUANTIZED_LINEAR_MATRIX_MULTIPLY and MATRIX_MULTIPLY_INTEGER calls of
    this signature on the GEMM kernels of ``variant`` (default: the selected)."""
    variant = variant or variants.selected()
    kernels = variants.module(variant)
    arrays = call.arrays
    a, b = arrays["a"], arrays["b"]
    rows, depth = a.shape[-2:]
    columns = b.shape[-1]
    out_batch = tuple(call.output_shape[:-2])

    def batch_index(array):
        if not out_batch:
            return _SINGLE_BATCH
        count = int(np.prod(array.shape[:-2], dtype=np.int64))
        grid = np.arange(count, dtype=np.int64).reshape(array.shape[:-2])
        return np.ascontiguousarray(np.broadcast_to(grid, out_batch).ravel())

    a_index, b_index = batch_index(a), batch_index(b)
    a_flip, b_flip = _signed(a), not _signed(b)
    # MATRIX_MULTIPLY_INTEGER: the exact products as int32, 4 bytes each;
    # MATRIX_MULTIPLY_INTEGER_TO_FLOAT's float32 (prepare_integer_to_float):
    # the same products through the kernels' float epilogue.
    to_float = call.output_dtype == np.float32
    raw = to_float or call.output_dtype == np.int32
    a_shape, b_shape = (-1, rows, depth), (-1, depth, columns)
    out_shape = (-1, rows, columns * (4 if raw else 1))
    low, high = (0, 0) if raw else _range(call.output_dtype)
    work = int(np.prod(call.output_shape, dtype=np.int64)) * depth
    # B's values, not B: a plan must not keep a call's arrays alive.
    b_values = int(b.size)

    def derive(arrays, multiplier):
        zero_points = (
            _vector(arrays["a_zero_point"], rows, np.int32, _FLIP if a_flip else 0),
            _vector(arrays["b_zero_point"], columns, np.int32, -_FLIP if b_flip else 0))
        if to_float:
            bias = arrays.get("bias")
            return _frozen(zero_points + (_table(multiplier, rows, columns),
                                          np.zeros((1, columns), np.int32),
                                          None if bias is None else _vector(
                                              bias, columns, np.float32)))
        if raw:
            return _frozen(zero_points + (np.ones((1, columns), np.float32),
                                          np.zeros((1, columns), np.int32), None))
        out_zero = arrays["output_zero_point"]
        out_zero = (np.zeros((1, 1), np.int32) if out_zero is None
                    else np.asarray(out_zero, np.int32))
        return _frozen(zero_points + (_table(multiplier, rows, columns),
                                      _table(out_zero, rows, columns), None))

    def bound_run(call, pack_threads):
        """The run of calls with the values of ``call``, taken from it once:
        run_data(a, out, n_threads) with its B packed once (a compiled
        operator's), or run_data(a, b, out, n_threads) with B packed during
        each product, by the threads that multiply it (a plain call's)."""
        row_zero, column_zero, multiplier, out_zero, float_bias = call.values
        if call.packed is None:
            matmul = kernels.matmul
            most_threads = most_threads_of()
            # The arrays to view as uint8: each view only where the type
            # needs it, and the arguments by position.
            a_bytes, b_bytes, out_bytes = a_flip, not b_flip, call.output_dtype != np.uint8

            def run_data(a, b, out, n_threads):
                a = np.ascontiguousarray(a).reshape(a_shape)
                b = np.ascontiguousarray(b).reshape(b_shape)
                matmul(a.view(np.uint8) if a_bytes else a, a_flip, a_index, None, None,
                       b_index, columns, row_zero, column_zero, multiplier, out_zero,
                       (out.view(np.uint8) if out_bytes else out).reshape(out_shape), low, high,
                       min(n_threads, most_threads), raw, False, None, None,
                       b.view(np.uint8) if b_bytes else b, b_flip, to_float, float_bias)

            return run_data

        product = packed_product(call, pack_threads)

        def run_data(a, out, n_threads):
            product(a, row_zero, multiplier, out, n_threads)

        return run_data

    def most_threads_of():
        """threads_for's bound, or B's values' worth where that is more."""
        return max(1, max(work, b_values * B_VALUE_WORK) // WORK_PER_THREAD)

    def packed_product(call, pack_threads):
        """``product(a, row_zero, multiplier, out, n_threads)``: a compiled
        operator's product on its B packed once, the other values from
        ``call`` and A's zero points and the multipliers as given."""
        _, column_zero, _, out_zero, float_bias = call.values
        packed_b, colsum = call.packed.get(("b", variant), lambda: kernels.pack_b_batches(
            _bytes(call.arrays["b"]).reshape(b_shape), b_flip, pack_threads))
        # A product of one or two rows reads each value of B' once: where
        # the panels are int16, it reads them narrowed to bytes instead.
        narrow_b = (call.packed.get(("b narrowed", variant),
                                    lambda: kernels.narrow_panels(packed_b))
                    if rows <= kernels.NARROW_MAX_ROWS else None)
        matmul = kernels.matmul
        most_threads = most_threads_of()
        # The arrays to view as uint8: each view only where the type needs
        # it, and the arguments by position (a small product's call is
        # mostly this Python).
        a_bytes, out_bytes = a_flip, call.output_dtype != np.uint8

        def product(a, row_zero, multiplier, out, n_threads):
            a = np.ascontiguousarray(a).reshape(a_shape)
            matmul(a.view(np.uint8) if a_bytes else a, a_flip, a_index, packed_b, colsum,
                   b_index, columns, row_zero, column_zero, multiplier, out_zero,
                   (out.view(np.uint8) if out_bytes else out).reshape(out_shape), low, high,
                   min(n_threads, most_threads), raw, False, None, None, None, False, to_float,
                   float_bias, narrow_b)

        return product

    def run(call, out, n_threads):
        arrays = call.arrays
        run_data = bound_run(call, threads_for(work, n_threads))
        if call.packed is None:
            run_data(arrays["a"], arrays["b"], out, n_threads)
        else:
            run_data(arrays["a"], out, n_threads)

    def bind(call):
        return bound_run(call, 1)

    def bind_parameters(call):
        """A compiled float product's run with A's zero point and the
        multipliers per call (Prepared.bind_parameters): the rows' zero point
        and the multipliers' table made as derive makes them."""
        if not to_float or call.packed is None:
            return None
        product = packed_product(call, 1)
        offset = _FLIP if a_flip else 0

        def run_parameters(a, a_zero_point, multiplier, n_threads):
            out = empty_output(call.output_shape, call.output_dtype)
            product(a, np.full(rows, a_zero_point + offset, np.int32),
                    _table(multiplier, rows, columns), out, n_threads)
            return out

        return run_parameters

    return Prepared(run, derive, bind, bind_parameters=bind_parameters)


# -- integer to float ------------------------------------------------------------------------

_SUM_SLOTS = ("a", "a_zero_point", "b", "b_zero_point")


def _column_bias(call):
    """Whether the call's bias (if any) is one value per column: N values
    with ones before them, the same for every row and matrix."""
    bias = call.arrays["bias"]
    columns = call.output_shape[-1] if call.output_shape else 0
    return bias is None or (bias.ndim >= 1 and bias.shape[-1] == columns
                            and bias.size == columns)


def prepare_integer_to_float(call, variant=None):
    """MATRIX_MULTIPLY_INTEGER_TO_FLOAT of 8-bit operands on the GEMM kernels.

    A float32 output whose bias (if any) is one per column comes from the
    kernels' float epilogue: ``float32(acc) * m``, then ``+ bias``, each one
    IEEE rounding in float32 as the rule states, as the threads finish each
    tile.  Other outputs (float16, a bias per element) take the kernels'
    exact int32 sums (their raw epilogue, as MATRIX_MULTIPLY_INTEGER) and the
    same steps in NumPy's float32 arithmetic."""
    if call.output_dtype == np.float32 and _column_bias(call):
        return prepare_matmul(call, variant)
    sums_call = dataclasses.replace(call, arrays={n: call.arrays[n] for n in _SUM_SLOTS},
                                    output_dtype=np.dtype(np.int32), checked=None, values=None)
    sums = prepare_matmul(sums_call, variant)
    kernels = variants.module(variant)
    shape, count = call.output_shape, int(np.prod(call.output_shape, dtype=np.int64))
    wide = call.output_dtype != np.float32

    def derive(arrays, multiplier):
        # Per-row and per-column parameters have ones before M and N.
        multiplier = np.asarray(multiplier, np.float32)
        table = multiplier.reshape(multiplier.shape[-2:]) if multiplier.ndim >= 2 else multiplier
        return _frozen((sums.derive(arrays, None), table))

    def run(call, out, n_threads):
        sum_values, multiplier = call.values
        # One-call buffers from the thread's workspace (no fresh mapping per call).
        acc = kernels.workspace("integer to float sums", count, np.int32).reshape(shape)
        sums.run(dataclasses.replace(call, values=sum_values), acc, n_threads)
        value = (kernels.workspace("integer to float values", count, np.float32).reshape(shape)
                 if wide else out)
        with np.errstate(over="ignore"):  # past float32's (float16's) range is infinity
            np.multiply(acc, multiplier, out=value, dtype=np.float32)
            bias = call.arrays["bias"]
            if bias is not None:
                np.add(value, bias, out=value, dtype=np.float32)
            if wide:
                out[...] = value

    return Prepared(run, derive)


def _narrowed(array, zero_point):
    """``array`` and its zero point as uint8 or int8 when every value of both
    lies in that type's range (so each difference is an 8-bit one), else None."""
    low, high = (int(array.min()), int(array.max())) if array.size else (0, 0)
    if zero_point is not None:
        low, high = min(low, int(zero_point.min())), max(high, int(zero_point.max()))
    for dtype in (np.uint8, np.int8):
        info = np.iinfo(dtype)
        if info.min <= low and high <= info.max:
            return (array.astype(dtype),
                    None if zero_point is None else zero_point.astype(dtype))
    return None


def prepare_integer_to_float_16(call, variant=None, exact=None):
    """16-bit operands whose values (and zero points) are 8-bit ones (a
    uint8 x int8 pair widened to one type for the page's constraint):
    narrowed per call and run as 8-bit operands on the GEMM kernels, each
    side in the type its values fit; other values go to
    ``exact(call, out, n_threads)`` (the reference)."""

    def run(call, out, n_threads):
        arrays = call.arrays
        a = _narrowed(arrays["a"], arrays["a_zero_point"])
        b = _narrowed(arrays["b"], arrays["b_zero_point"])
        if a is None or b is None:
            exact(call, out, n_threads)
            return
        narrow = dataclasses.replace(call, arrays=dict(arrays, a=a[0], a_zero_point=a[1], b=b[0],
                                                       b_zero_point=b[1]))
        prepare_integer_to_float(narrow, variant).run_once(narrow, out, n_threads)

    return Prepared(run)


# -- convolution -----------------------------------------------------------------------------

#: Filters of fewer channels per group than this take all of a filter row's
#: columns per kernel step (longer steps, fewer of them).
FOLD_BELOW_CHANNELS = 16


def filter_taps_per_run(filter):
    """How many filter columns the convolution kernel takes per step: all of
    them when a group has few channels, else one."""
    _, group_channels, _, kernel_w = filter.shape
    return kernel_w if kernel_w > 1 and group_channels < FOLD_BELOW_CHANNELS else 1


def copies_unpadded(attributes, taps_per_run):
    """Whether a folded convolution's copy can hold just the channels of each
    position (conv2d's unpadded copy): one group and undilated filter rows, whose
    taps are then consecutive positions.  The first convolution of a network
    (RGB, 7 x 7) copies its image once instead of seven times over."""
    return (taps_per_run > 1 and attributes["group_count"] == 1
            and tuple(attributes["dilations"])[-1] == 1)


def filter_taps(filter, taps_per_run):
    """Per row of the packed filter, the offset of its tap in a filter row
    (out_channels x channels * kernel_h * kernel_w bytes).

    Rows run (filter row, [filter column,] channel): one step of the kernel
    per filter row (taps_per_run = kernel_w) or per tap (taps_per_run = 1), the steps'
    channels end to end, as the kernels pack A.
    """
    _, group_channels, kernel_h, kernel_w = filter.shape
    row, column, channel = np.meshgrid(np.arange(kernel_h), np.arange(kernel_w),
                                       np.arange(group_channels), indexing="ij")
    return ((channel * kernel_h + row) * kernel_w + column).reshape(-1).astype(np.intp)


def pack_filter(filter, group_count, taps_per_run, kernels, n_threads=1, taps=None, scratch=False):
    """The filter as each group's packed B (the order of :func:`filter_taps`,
    given as ``taps`` or computed); columns are the group's output channels.
    With ``scratch`` the packed bytes lie in the thread's workspace, for one
    call."""
    rows = _bytes(filter).reshape(filter.shape[0], -1)
    taps = filter_taps(filter, taps_per_run) if taps is None else taps
    return kernels.pack_filter(rows, group_count, taps, not _signed(filter), n_threads,
                               scratch)


def _channel_requantization(arrays, multiplier, out_channels):
    """Per output channel: the multiplier, output zero point and bias (None)
    of a convolution, as the kernels take them."""
    # Every convolution scale is per output channel or per tensor.
    multiplier = np.asarray(multiplier, np.float32).reshape(-1)
    multiplier = (np.array(multiplier) if multiplier.size == out_channels
                  else np.full(out_channels, multiplier[0], np.float32))
    out_zero = _vector(arrays["output_zero_point"], out_channels, np.int32)
    bias = None if arrays["bias"] is None else _vector(arrays["bias"], out_channels, np.int32)
    return multiplier, out_zero, bias


def convolution_variant(filter, taps_per_run):
    """The selected kernels, except that AMX multiplies 16 groups of 4 k at a
    time: when a filter step's channels are not whole such blocks (few
    channels: the first layer of a network), gathering A costs more than the
    tiles save, and the AVX-512 VNNI kernels run instead."""
    selected = variants.selected()
    step_groups = -(-taps_per_run * filter.shape[1] // 4)
    if selected == "amx" and step_groups % 16 and "avx512vnni" in variants.available():
        return "avx512vnni"
    return selected


def prepare_convolution(call, variant=None):
    """QUANTIZED_LINEAR_CONVOLUTION and CONVOLUTION_INTEGER calls of this
    signature on the GEMM kernels (an implicit GEMM over the image)."""
    arrays = call.arrays
    attributes = call.attributes
    image, filter = arrays["input"], arrays["filter"]
    out_channels, _, kernel_h, kernel_w = filter.shape
    group_count = attributes["group_count"]
    filter_flip, input_flip = not _signed(filter), _signed(image)
    taps_per_run = filter_taps_per_run(filter)
    unpadded = copies_unpadded(attributes, taps_per_run)
    taps = filter_taps(filter, taps_per_run)
    variant = variant or convolution_variant(filter, taps_per_run)
    kernels = variants.module(variant)
    # CONVOLUTION_INTEGER: the exact sums as int32, 4 bytes each (a 1-D
    # convolution's output has no height: its pixels are its width).
    raw = call.output_dtype == np.int32
    low, high = (0, 0) if raw else _range(call.output_dtype)
    geometry = (kernel_h, kernel_w, taps_per_run, attributes["strides"], attributes["dilations"],
                attributes["start_padding"], attributes["end_padding"])
    pixels = int(np.prod(call.output_shape[2:], dtype=np.int64))
    out_shape = (call.output_shape[0], out_channels, pixels * (4 if raw else 1))
    work = int(np.prod(call.output_shape, dtype=np.int64)) * int(filter[0].size)

    def derive(arrays, multiplier):
        input_zero = _vector(arrays["input_zero_point"], 1, arrays["input"].dtype)
        if raw:
            per_channel = (np.ones(out_channels, np.float32), np.zeros(out_channels, np.int32),
                           None)
        else:
            multiplier, out_zero, bias = _channel_requantization(arrays, multiplier, out_channels)
            # As the kernels add it: no conversion per call.
            per_channel = (multiplier, out_zero, None if bias is None else bias.astype(np.int64))
        return _frozen((int(input_zero.view(np.uint8)[0]),
                        _vector(arrays["filter_zero_point"], out_channels, np.int32,
                                -_FLIP if filter_flip else 0),
                        *per_channel))

    def bound_run(call, pack_threads, fresh=False):
        """run_data(image, out, n_threads) of a call with the filter and
        values of ``call`` (the filter packed once for a compiled operator,
        else for this call); with ``fresh`` (a compiled operator's bound
        calls), run_data.fresh too (see Prepared)."""
        packed, colsum = packed_filter(call, pack_threads)
        input_zero, col_zero, multiplier, out_zero, bias = call.values
        conv2d, most_threads = kernels.conv2d, max(1, work // WORK_PER_THREAD)

        def run_data(image, out, n_threads):
            conv2d(_bytes(image), input_flip, input_zero, packed, colsum, *geometry, col_zero,
                   multiplier, out_zero, bias, out.view(np.uint8).reshape(out_shape), low, high,
                   min(n_threads, most_threads), raw, unpadded)

        if fresh:
            # Described once, each output made in the kernels.
            run_data.fresh = bound_convolution(call, packed, colsum).run_fresh
        return run_data

    def packed_filter(call, pack_threads):
        """The filter as packed B and its column sums: a compiled operator's
        packed once, a plain call's into the thread's workspace."""
        filter = call.arrays["filter"]
        return _cached(call, ("filter", variant), lambda: pack_filter(
            filter, group_count, taps_per_run, kernels, pack_threads, taps, call.packed is None))

    def bound_convolution(call, packed, colsum, input_channels_last=False,
                          output_channels_last=False):
        """The kernels' BoundConvolution of the call, its image and output
        in these layouts (channels-last: (N, H, W, C) and (N, OH, OW, OC))."""
        batch, channels, height, width = image.shape
        image_shape = (batch, height, width, channels) if input_channels_last else image.shape
        bytes_shape, fresh_shape = out_shape, call.output_shape
        if output_channels_last:
            bytes_shape = (batch, pixels, out_channels * (4 if raw else 1))
            fresh_shape = (batch, *call.output_shape[2:], out_channels)
        input_zero, col_zero, multiplier, out_zero, bias = call.values
        return kernels.BoundConvolution(
            image_shape, input_flip, input_zero, packed, colsum, *geometry, col_zero,
            multiplier, out_zero, bias, bytes_shape, low, high, fresh_shape, call.output_dtype,
            max(1, work // WORK_PER_THREAD), raw, unpadded, input_channels_last,
            output_channels_last)

    def run(call, out, n_threads):
        bound_run(call, threads_for(work, n_threads))(call.arrays["input"], out, n_threads)

    def bind(call):
        return bound_run(call, 1, fresh=True) if call.packed is not None else None

    def bind_implicit_gemm(call, input_channels_last, output_channels_last):
        return bound_convolution(call, *packed_filter(call, 1), input_channels_last,
                                 output_channels_last).run_fresh

    return Prepared(run, derive, bind, _channels_last(image, bind_implicit_gemm))


def _channels_last(image, bind_implicit_gemm):
    """A convolution's ``Prepared.bind_channels_last``: a 1 x 1 convolution of
    one group without padding or strides whose image and output are both
    channels-last is a product of the image's pixels (rows of channels) and
    the filter's transpose, as :func:`prepare_pixel_rows` runs one-pixel
    images, with nothing copied or transposed on either side; any other goes
    to the implicit GEMM's bind (``bind_implicit_gemm``: the plan's own, or
    :func:`prepare_convolution`'s with the call's values derived for it),
    whose copy of the image and whose stores take either layout.  ``image``
    is the signature's (its shape and dtype), which a bound call does not
    hold."""
    def bind_channels_last(call, input_channels_last, output_channels_last):
        if call.packed is None or len(call.output_shape) != 4:
            return None
        call = dataclasses.replace(call, arrays={**call.arrays, "input": image})
        filter, attributes = call.arrays["filter"], call.attributes
        if (input_channels_last and output_channels_last and call.output_dtype != np.int32
                and is_pixel_rows_shape(filter, attributes)
                and all(step == 1 for step in attributes["strides"])):
            batch, channels, height, width = image.shape
            rows = batch * height * width
            # (The rows' call needs the shape and dtype of its image alone.)
            rows_image = np.broadcast_to(np.zeros((), image.dtype), (rows, channels, 1, 1))
            rows_call = dataclasses.replace(call, arrays={**call.arrays, "input": rows_image},
                                            output_shape=(rows, filter.shape[0], 1, 1))
            prepared = prepare_pixel_rows(rows_call)
            rows_call.values = prepared.derive(rows_call.arrays, rows_call.checked)
            fresh = prepared.bind(rows_call).fresh
            shape = (batch, height, width, filter.shape[0])

            def run(data, n_threads):
                out = fresh(data, n_threads)
                return None if out is None else out.reshape(shape)

            return run
        if bind_implicit_gemm is not None:
            return bind_implicit_gemm(call, input_channels_last, output_channels_last)
        # Another implementation's plan: the implicit GEMM's, its values derived.
        prepared = prepare_convolution(call)
        call = dataclasses.replace(call, values=prepared.derive(call.arrays, call.checked))
        return prepared.bind_channels_last(call, input_channels_last, output_channels_last)

    return bind_channels_last


# -- pointwise convolution (1 x 1) -----------------------------------------------------------

#: A pointwise product runs as filter x image when its image's pixels fill the
#: micro-tile's columns at least this well (else the implicit GEMM, whose
#: rows are pixels, wastes less of each tile: r50's 7 x 7 maps).
POINTWISE_MIN_FILL = 0.9


def is_pointwise(call):
    """A 1 x 1 convolution of one group without padding or strides: a
    product of the filter (output channels x channels) and each image
    (channels x pixels) that fills the micro-tile's columns well enough.

    A strided one reads a subsample of its image, which the implicit GEMM's
    copy-in takes where it lies; here it would be a strided copy of its own
    first, on one thread (slower, as docs/performance_notes.rst records)."""
    filter, attributes = call.arrays["filter"], call.attributes
    if (attributes["group_count"] != 1 or any(size != 1 for size in filter.shape[2:])
            or any(step != 1 for step in attributes["strides"])
            or any(attributes["start_padding"]) or any(attributes["end_padding"])):
        return False
    pixels = int(np.prod(call.output_shape[2:], dtype=np.int64))
    _, columns = variants.module().tile_shape()
    return pixels >= POINTWISE_MIN_FILL * (-(-pixels // columns) * columns)


def prepare_pointwise(call, variant=None):
    """A 1 x 1 convolution of this signature as filter x image, one product
    per image: the filter is A (rows: output channels, each with its own
    requantization), each image B (its channels x pixels, as NCHW lays them
    out), and the product is the output image, channels-first, with no
    channels-last copy and no transposition on the way out."""
    variant = variant or variants.selected()
    kernels = variants.module(variant)
    arrays, attributes = call.arrays, call.attributes
    image, filter = arrays["input"], arrays["filter"]
    batch, channels = image.shape[:2]
    out_channels = filter.shape[0]
    pixels = int(np.prod(call.output_shape[2:], dtype=np.int64))
    a_flip, b_flip = _signed(filter), not _signed(image)
    raw = call.output_dtype == np.int32
    low, high = (0, 0) if raw else _range(call.output_dtype)
    out_shape = (batch, out_channels, pixels * (4 if raw else 1))
    a_index = np.zeros(batch, np.int64)
    b_index = np.arange(batch, dtype=np.int64)
    work = batch * pixels * out_channels * channels

    def derive(arrays, multiplier):
        row_zero = _vector(arrays["filter_zero_point"], out_channels, np.int32,
                           _FLIP if a_flip else 0)
        column_zero = _vector(arrays["input_zero_point"], 1, np.int32, -_FLIP if b_flip else 0)
        if raw:
            per_row = (np.ones((out_channels, 1), np.float32),
                       np.zeros((out_channels, 1), np.int32), None)
        else:
            scale, out_zero, bias = _channel_requantization(arrays, multiplier, out_channels)
            per_row = (scale.reshape(-1, 1), out_zero.reshape(-1, 1),
                       None if bias is None else bias.astype(np.int64))
        return _frozen((row_zero, column_zero) + per_row)

    def bound_run(call, fresh=False):
        """run_data(image, out, n_threads) of a call with the filter and
        values of ``call``; with ``fresh`` (a compiled operator's bound
        calls), run_data.fresh too (see Prepared)."""
        rows = _bytes(call.arrays["filter"]).reshape(1, out_channels, channels)
        row_zero, column_zero, multiplier, out_zero, bias = call.values
        row_sums = None
        if column_zero[0] and call.packed is not None:
            row_sums = call.packed.get(("filter rows", variant),
                                       lambda: kernels.matrix_row_sums(rows, a_flip, 1))
        a_rows, flip = rows, a_flip
        if a_flip and call.packed is not None:
            # A compiled operator keeps its int8 filter as A' (xor 0x80), which
            # the kernels then read in place instead of packing each block of
            # rows once per unit of pixels.
            a_rows = call.packed.get(("filter as A'", variant), lambda: rows ^ np.uint8(_FLIP))
            flip = False
        most_threads = max(1, work // WORK_PER_THREAD)
        # Checked and described once; each image is packed during the
        # product, by the threads that multiply it.
        product = kernels.BoundProduct(
            a_rows, flip, a_index, None, None, b_index, pixels, row_zero, column_zero,
            multiplier, out_zero, batch, low, high, raw, True, bias, row_sums,
            (batch, channels, pixels), b_flip, a_packed_once=call.packed is not None)

        def run_data(image, out, n_threads):
            product.run(None, _bytes(image).reshape(batch, channels, pixels),
                        out.view(np.uint8).reshape(out_shape), min(n_threads, most_threads))

        if fresh:
            product.set_output(call.output_shape, call.output_dtype, most_threads)
            run_data.fresh = product.run_fresh
            run_data.product = product
        return run_data

    def run(call, out, n_threads):
        bound_run(call)(call.arrays["input"], out, n_threads)

    def bind_followed(call, following, following_prepared):
        """The compiled expansion and the compiled depthwise convolution of
        its output (``following``, on the depthwise kernels) as one run of
        the kernels, each block of expanded channels filtered while it is in
        cache (kernels.BoundExpandDepthwise), or None where they do not take
        it."""
        if (call.packed is None or following.packed is None
                or following_prepared.followed_arguments is None
                or len(call.output_shape) != 4 or len(following.output_shape) != 4):
            return None
        depthwise = following_prepared.followed_arguments(following, call.output_dtype)
        fused = kernels.BoundExpandDepthwise(
            bound_run(call, True).product, *call.output_shape[2:], *depthwise,
            *following.output_shape[2:], *_range(following.output_dtype))
        if not fused.takes:
            return None
        fused.set_output(following.output_shape, following.output_dtype)
        return fused.run_fresh

    return Prepared(run, derive,
                    lambda call: bound_run(call, True) if call.packed is not None else None,
                    _channels_last(image, None), bind_followed=bind_followed)


# -- 1 x 1 convolution of one-pixel images (a Gemm's rows) ----------------------------------

def is_pixel_rows_shape(filter, attributes):
    """A 1 x 1 filter of one group without padding: with images of one
    pixel (or, without strides, pixels kept channels-last) a product of rows
    and the filter's transpose."""
    return (attributes["group_count"] == 1 and all(size == 1 for size in filter.shape[2:])
            and not any(attributes["start_padding"]) and not any(attributes["end_padding"]))


def is_pixel_rows(call):
    """A 1 x 1 convolution of one group without padding whose images are
    single pixels (a Gemm or a classifier as a convolution): NCHW lays the
    images out as the rows of a batch x channels matrix A, and the output as
    the rows of A times the filter's transpose, so the product is a
    matrix multiply's, B packed once and read once per call (narrowed where
    its panels are int16), with no copy of the image."""
    return (is_pixel_rows_shape(call.arrays["filter"], call.attributes)
            and all(size == 1 for size in call.arrays["input"].shape[2:]))


def prepare_pixel_rows(call, variant=None):
    """A QUANTIZED_LINEAR_CONVOLUTION :func:`is_pixel_rows` takes, on the
    matrix multiply's kernels: A the images' rows, B the filter's transpose
    (channels x output channels), each output channel's multiplier, zero
    point and bias its column's."""
    variant = variant or variants.selected()
    kernels = variants.module(variant)
    arrays = call.arrays
    image, filter = arrays["input"], arrays["filter"]
    batch, channels = image.shape[:2]
    out_channels = filter.shape[0]
    a_flip, b_flip = _signed(image), not _signed(filter)
    low, high = _range(call.output_dtype)
    a_shape, out_shape = (1, batch, channels), (1, batch, out_channels)
    b_shape = (1, channels, out_channels)
    work = batch * out_channels * channels
    most_threads = max(1, max(work, filter.size * B_VALUE_WORK) // WORK_PER_THREAD)

    def derive(arrays, multiplier):
        row_zero = _vector(arrays["input_zero_point"], batch, np.int32, _FLIP if a_flip else 0)
        column_zero = _vector(arrays["filter_zero_point"], out_channels, np.int32,
                              -_FLIP if b_flip else 0)
        scale, out_zero, bias = _channel_requantization(arrays, multiplier, out_channels)
        return _frozen((row_zero, column_zero, scale.reshape(1, -1), out_zero.reshape(1, -1),
                        None if bias is None else bias.astype(np.int64)))

    def bound_run(call, pack_threads, fresh=False):
        """run_data(image, out, n_threads) with the filter and values of
        ``call``; with ``fresh`` (a compiled operator's bound calls),
        run_data.fresh too (see Prepared)."""
        row_zero, column_zero, multiplier, out_zero, bias = call.values
        columns = _bytes(call.arrays["filter"]).reshape(out_channels, channels).T
        packed_b, colsum = _cached(call, ("filter columns", variant), lambda: (
            kernels.pack_b_batches(np.ascontiguousarray(columns).reshape(b_shape), b_flip,
                                   pack_threads)))
        # Narrowed once for a compiled operator's calls; a plain call reads
        # the panels it has just packed.
        narrow_b = (call.packed.get(("filter columns narrowed", variant),
                                    lambda: kernels.narrow_panels(packed_b))
                    if call.packed is not None and batch <= kernels.NARROW_MAX_ROWS else None)
        matmul = kernels.matmul

        def run_data(image, out, n_threads):
            matmul(_bytes(image).reshape(a_shape), a_flip, _SINGLE_BATCH, packed_b, colsum,
                   _SINGLE_BATCH, out_channels, row_zero, column_zero, multiplier, out_zero,
                   out.view(np.uint8).reshape(out_shape), low, high,
                   min(n_threads, most_threads), False, False, bias, None, None, False, False,
                   None, narrow_b)

        if fresh:
            # Bound once: a compiled operator's calls bring the images alone.
            product = kernels.BoundProduct(
                np.zeros(a_shape, np.uint8), a_flip, _SINGLE_BATCH, packed_b, colsum,
                _SINGLE_BATCH, out_channels, row_zero, column_zero, multiplier, out_zero, 1,
                low, high, False, False, bias, a_per_call=True, b_narrow=narrow_b)
            product.set_output(call.output_shape, call.output_dtype, most_threads)
            run_data.fresh = product.run_fresh
        return run_data

    def run(call, out, n_threads):
        bound_run(call, threads_for(work, n_threads))(call.arrays["input"], out, n_threads)

    return Prepared(run, derive, lambda call: (bound_run(call, 1, fresh=True)
                                               if call.packed is not None else None),
                    _channels_last(image, None))


def is_depthwise(call):
    filter = call.arrays["filter"]
    return filter.shape[1] == 1 and call.attributes["group_count"] > 1


def depthwise_arguments(call, image_dtype):
    """A depthwise convolution's arguments as depthwise2d takes them after
    its image: (input_signed, input_zero, taps, filter_signed, filter_zero,
    kernel_h, kernel_w, strides, dilations, start_padding, end_padding,
    multiplier, out_zero, bias), from the call's derived values, for images
    of ``image_dtype``."""
    attributes, filter = call.attributes, call.arrays["filter"]
    out_channels, _, kernel_h, kernel_w = filter.shape
    input_zero, filter_zero, multiplier, out_zero, bias = call.values
    return (image_dtype == np.int8, input_zero,
            _bytes(filter).reshape(out_channels, kernel_h * kernel_w), _signed(filter),
            filter_zero, kernel_h, kernel_w, attributes["strides"], attributes["dilations"],
            attributes["start_padding"], attributes["end_padding"], multiplier, out_zero, bias)


def prepare_depthwise(call, variant=None):
    """Depthwise convolutions of this signature on the depthwise kernels."""
    image = call.arrays["input"]
    kernels = variants.module(variant)
    out_channels = call.arrays["filter"].shape[0]
    low, high = _range(call.output_dtype)
    # A 1-D convolution's output has no height; the kernel writes its 2-D form.
    out_shape = call.output_shape[:2] + (-1, call.output_shape[-1])

    def derive(arrays, multiplier):
        return _frozen((int(_vector(arrays["input_zero_point"], 1, np.int32)[0]),
                        _vector(arrays["filter_zero_point"], out_channels, np.int32),
                        *_channel_requantization(arrays, multiplier, out_channels)))

    def bound_run(call, fresh=False):
        """run_data(image, out, n_threads) of a call with the filter and
        values of ``call``; with ``fresh`` (a compiled operator's bound
        calls), run_data.fresh too where the kernels have it (see Prepared)."""
        arguments = depthwise_arguments(call, image.dtype)
        depthwise2d = kernels.depthwise2d

        def run_data(image, out, n_threads):
            depthwise2d(_bytes(image), *arguments, out.view(np.uint8).reshape(out_shape), low,
                        high, n_threads)

        if fresh and len(call.output_shape) == 4:
            # Where the kernels take the images channels-last, the filter's
            # blocks are laid once and each output made there.
            bound = bound_depthwise(call)
            if bound.takes:
                run_data.fresh = bound.run_fresh
        return run_data

    def bound_depthwise(call, input_channels_last=False, output_channels_last=False):
        return kernels.BoundDepthwise(
            image.shape, *depthwise_arguments(call, image.dtype), call.output_shape,
            call.output_dtype, low, high, input_channels_last, output_channels_last)

    def run(call, out, n_threads):
        bound_run(call)(call.arrays["input"], out, n_threads)

    def bind_channels_last(call, input_channels_last, output_channels_last):
        """The channels-last kernel's run on images or outputs kept
        channels-last, where it takes the images (at most 256 outputs per
        channel), else None."""
        if call.packed is None or len(call.output_shape) != 4:
            return None
        bound = bound_depthwise(call, input_channels_last, output_channels_last)
        return bound.run_fresh if bound.takes else None

    return Prepared(run, derive,
                    lambda call: bound_run(call, True) if call.packed is not None else None,
                    bind_channels_last, followed_arguments=depthwise_arguments)


#: A validated call run once, on a named variant with ``variant=`` (the tests
#: run every variant so).
run_matmul = run_prepared(prepare_matmul)
run_integer_to_float = run_prepared(prepare_integer_to_float)
run_convolution = run_prepared(prepare_convolution)
run_pointwise = run_prepared(prepare_pointwise)
run_pixel_rows = run_prepared(prepare_pixel_rows)
run_depthwise = run_prepared(prepare_depthwise)
