"""QUANTIZED_LINEAR_AVERAGE_POOLING on the quantize kernels' build.

The glue computes once per signature what depends on the geometry only:
each output position's divisor (the window's elements inside the input, or
all of them with ``include_padding``) and the number of those inside; per
call, the per-channel zero points and scales as the kernel reads them.
"""

from __future__ import annotations

import numpy as np

from qops.backends.contract import Prepared, empty_output
from qops.backends.native import variants as _simd
from qops.backends.native.quantize import _raw
from qops.reference.pooling import window_sums
from qops.registry import dtypes as _dtypes

__all__ = ["bound_global_average", "prepare_average_pooling", "supports_average_pooling"]

#: Windows of up to this many elements: their sums of bytes fit int32.
MAX_WINDOW = 2**23

#: Image shapes a bound global pooling keeps the geometry of.
_SHAPES_KEPT = 8

_SPATIAL = ("window_size", "strides", "dilations", "start_padding", "end_padding")


def supports_average_pooling(call):
    window = call.attributes["window_size"]
    return (int(np.prod(window)) <= MAX_WINDOW and call.arrays["input"].size > 0
            and all(call.output_shape))


def _per_channel(value, channels, dtype, shift=0):
    """A per-tensor or per-channel parameter as ``channels`` values."""
    if value is None:
        return np.full(channels, shift, dtype)
    flat = np.asarray(value).reshape(-1).astype(dtype)
    flat = np.broadcast_to(flat, (channels,)) if flat.size == 1 else flat
    return np.ascontiguousarray(flat + dtype(shift))


def _windows(size, geometry, include_padding):
    """(out_size, counts, inside) of an image of ``size``: each output
    position's divisor and the number of its window's elements inside."""
    _, inside = window_sums(np.zeros((1, 1) + size, np.uint8), None, **geometry)
    counts = (np.full_like(inside, int(np.prod(geometry["window_size"])))
              if include_padding else inside)
    return (tuple(inside.shape), np.ascontiguousarray(counts.reshape(-1), np.int32),
            np.ascontiguousarray(inside.reshape(-1), np.int32))


def prepare_average_pooling(call, variant=None):
    """``run(call, out, n_threads)`` for poolings of this signature."""
    attributes = call.attributes
    image = call.arrays["input"]
    channels = image.shape[1]
    size = tuple(image.shape[2:])
    geometry = {name: tuple(attributes[name]) for name in _SPATIAL}
    out_size, counts, inside = _windows(size, geometry, attributes["include_padding"])
    signed = image.dtype == np.int8
    low, high = _dtypes.INTEGER_RANGES[_dtypes.name_of(call.output_dtype)]
    kernel = _simd.quantize_module(variant).average_pooling

    def derive(arrays, checked):
        return (_per_channel(arrays["input_zero_point"], channels, np.int32, 128 if signed else 0),
                _per_channel(arrays["input_scale"], channels, np.float64),
                _per_channel(arrays["output_scale"], channels, np.float64),
                _per_channel(arrays["output_zero_point"], channels, np.int32))

    def run(call, out, n_threads):
        in_zero, in_scale, out_scale, out_zero = call.values
        kernel(_raw(call.arrays["input"]), 0x80 if signed else 0, channels, size, out_size,
               geometry["window_size"], geometry["strides"], geometry["dilations"],
               geometry["start_padding"], counts, inside, in_zero, in_scale, out_scale, out_zero,
               low, high, _raw(out), n_threads)

    return Prepared(run, derive)


def bound_global_average(input_scale, input_zero_point, output_scale, output_zero_point,
                         channels_last=False):
    """``run(x, n_threads)``: the average of each image of ``x`` (N x C x H x W,
    or N x H x W x C with ``channels_last``; C-contiguous, not empty, of
    ``input_zero_point``'s type: the caller's checks) as
    QUANTIZED_LINEAR_AVERAGE_POOLING gives it over the whole image, with the
    per-tensor scales and the int8 or uint8 zero points (checked by the
    operator first) bound; N x C x 1 x 1 of ``output_zero_point``'s type.

    A channels-last image is one plane of H * W rows of C values, pooled by
    windows of a whole column (the kernel's column sums over rows), each
    channel's average from the same sum and count: the same values, and the
    output's bytes are the same in either layout.

    A model's global pooling runs once a run, its Python path cold, where
    every layer of calls costs (as for qops.backends.native.quantize's
    bound nodes): this one calls the kernel, its geometry made once per
    image shape."""
    kernel = _simd.quantize_module().average_pooling
    if channels_last and any(np.size(value) != 1 for value in (
            input_scale, input_zero_point, output_scale, output_zero_point)):
        # One plane for all the channels: one value of each parameter.
        raise ValueError("bound_global_average: a channels-last pooling takes per-tensor "
                         "parameters")
    signed = np.asarray(input_zero_point).dtype == np.int8
    out_dtype = np.asarray(output_zero_point).dtype
    low, high = _dtypes.INTEGER_RANGES[_dtypes.name_of(out_dtype)]
    shapes = {}

    def parts(channels, size):
        size = (1,) * (3 - len(size)) + tuple(size)  # the kernel's three spatial axes
        window = size
        if channels_last:  # one plane: rows of pixels, a column per channel
            size = (1, size[1] * size[2], channels)
            window, channels = (1, size[1], 1), 1
        geometry = dict(window_size=window, strides=(1, 1, 1), dilations=(1, 1, 1),
                        start_padding=(0, 0, 0), end_padding=(0, 0, 0))
        out_size, counts, inside = _windows(size, geometry, False)
        return (size, out_size, window, geometry["strides"], geometry["dilations"],
                geometry["start_padding"], counts, inside,
                _per_channel(input_zero_point, channels, np.int32, 128 if signed else 0),
                _per_channel(input_scale, channels, np.float64),
                _per_channel(output_scale, channels, np.float64),
                _per_channel(output_zero_point, channels, np.int32))

    def run(x, n_threads):
        if channels_last:
            channels, size = x.shape[-1], x.shape[1:-1]
        else:
            channels, size = x.shape[1], x.shape[2:]
        bound = shapes.get(x.shape[1:])
        if bound is None:
            if len(shapes) >= _SHAPES_KEPT:
                shapes.clear()
            bound = shapes[x.shape[1:]] = parts(channels, size)
        out = empty_output((x.shape[0], channels) + (1,) * len(size), out_dtype)
        kernel(_raw(x), 0x80 if signed else 0, 1 if channels_last else channels, *bound, low,
               high, _raw(out), n_threads)
        return out

    return run
