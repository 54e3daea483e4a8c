"""QUANTIZED_LINEAR_AVERAGE_POOLING on the quantize kernels' build.

The glue computes once per signature what depends on the geometry only:
each output position's divisor (the window's elements inside the input, or
all of them with ``include_padding``) and the number of those inside; per
call, the per-channel zero points and scales as the kernel reads them.
"""

from __future__ import annotations

import numpy as np

from qops.backends.contract import Prepared
from qops.backends.native import variants as _simd
from qops.backends.native.quantize import _raw
from qops.reference.pooling import window_sums
from qops.registry import dtypes as _dtypes

__all__ = ["prepare_average_pooling", "supports_average_pooling"]

#: Windows of up to this many elements: their sums of bytes fit int32.
MAX_WINDOW = 2**23

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


def prepare_average_pooling(call, variant=None):
    """``run(call, out, n_threads)`` for poolings of this signature."""
    attributes = call.attributes
    image = call.arrays["input"]
    channels = image.shape[1]
    size = tuple(image.shape[2:])
    geometry = {name: tuple(attributes[name]) for name in _SPATIAL}
    _, inside = window_sums(np.zeros((1, 1) + size, np.uint8), None, **geometry)
    counts = (np.full_like(inside, int(np.prod(geometry["window_size"])))
              if attributes["include_padding"] else inside)
    out_size = tuple(inside.shape)
    inside = np.ascontiguousarray(inside.reshape(-1), np.int32)
    counts = np.ascontiguousarray(counts.reshape(-1), np.int32)
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
