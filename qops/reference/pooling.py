"""QUANTIZED_LINEAR_AVERAGE_POOLING, stated in NumPy."""

from __future__ import annotations

import numpy as np

from qops.reference._requantize import widen
from qops.registry import dtypes as _dtypes


def pooled_size(size, window, stride, dilation, start, end):
    """The output size along one spatial dimension: the page's
    ``(PaddedSize - WindowSize) / Strides + 1``, with the window's dilated
    extent ``dilation * (window - 1) + 1`` (the page's formula is the
    undilated case)."""
    return (size + start + end - (dilation * (window - 1) + 1)) // stride + 1


def window_sums(input, input_zero_point, *, window_size, strides, dilations, start_padding,
                end_padding):
    """``(sums, counts)`` of a 3-D pooling of a 5-D input: per output
    element the exact sum of ``input - input_zero_point`` over the window's
    elements inside the input (padding is a real zero: it adds nothing), and
    per output position how many of those elements there are."""
    difference = widen(input, input_zero_point)
    spatial = difference.shape[2:]
    out = tuple(pooled_size(*args) for args in zip(spatial, window_size, strides, dilations,
                                                    start_padding, end_padding))
    pads = tuple(zip(start_padding, end_padding))
    padded = np.pad(difference, ((0, 0), (0, 0)) + pads)
    inside = np.pad(np.ones(spatial, np.int64), pads)
    sums = np.zeros(difference.shape[:2] + out, np.int64)
    counts = np.zeros(out, np.int64)
    for offset in np.ndindex(*window_size):
        # The window element at ``offset`` of every output position, at once.
        view = tuple(slice(o * d, o * d + (n - 1) * s + 1, s)
                     for o, d, n, s in zip(offset, dilations, out, strides))
        sums += padded[(slice(None), slice(None)) + view]
        counts += inside[view]
    return sums, counts


def quantized_linear_average_pooling(input, input_scale, input_zero_point, output_scale,
                                     output_zero_point, *, window_size, strides, dilations,
                                     start_padding, end_padding, include_padding, output_dtype):
    """The operator on a 5-D input (a 2-D pooling is a 3-D one of depth 1),
    parameters per tensor or per channel in their 5-D shapes.

    ``S`` is the exact sum of ``input - input_zero_point`` over a window's
    elements inside the input, ``count`` their number (every window element
    with ``include_padding``).  Then, in float64, ``v = S * input_scale /
    (output_scale * count)``: the product and the divisor are exact, the
    quotient rounded once.  ``output = clamp(round_half_even(v) +
    output_zero_point)``.
    """
    sums, counts = window_sums(input, input_zero_point, window_size=window_size,
                               strides=strides, dilations=dilations,
                               start_padding=start_padding, end_padding=end_padding)
    if include_padding:
        counts = np.full_like(counts, int(np.prod(window_size)))
    value = (sums.astype(np.float64) * np.asarray(input_scale, np.float64)
             / (np.asarray(output_scale, np.float64) * counts))
    low, high = _dtypes.INTEGER_RANGES[_dtypes.name_of(np.dtype(output_dtype))]
    zero = 0 if output_zero_point is None else np.asarray(output_zero_point, np.int64)
    return np.clip(np.rint(value) + zero, low, high).astype(output_dtype)
