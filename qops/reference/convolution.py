"""QUANTIZED_LINEAR_CONVOLUTION, stated in NumPy."""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from qops.reference._requantize import exact_products, requantization_multiplier, requantize, widen


def output_size(size, kernel, stride, dilation, start, end):
    """Output length of one spatial dimension (may be < 1 for an invalid call)."""
    dilated = dilation * (kernel - 1) + 1
    return (size + start + end - dilated) // stride + 1


def quantized_linear_convolution(input, input_scale, input_zero_point, filter, filter_scale,
                                 filter_zero_point, bias, output_scale, output_zero_point, *,
                                 strides, dilations, start_padding, end_padding, group_count,
                                 output_dtype):
    """Grouped 2-D convolution of NCHW ``input`` with OIHW ``filter``, requantized.

    Padding adds real zeros: the input zero point is subtracted first, so a
    padded element contributes nothing to the sum.
    """
    accumulator = convolution_sums(input, input_zero_point, filter, filter_zero_point, bias,
                                   strides=strides, dilations=dilations,
                                   start_padding=start_padding, end_padding=end_padding,
                                   group_count=group_count)
    multiplier = requantization_multiplier(input_scale, filter_scale, output_scale)
    return requantize(accumulator, multiplier, output_zero_point, np.dtype(output_dtype))


def convolution_sums(input, input_zero_point, filter, filter_zero_point, bias, *, strides,
                     dilations, start_padding, end_padding, group_count):
    """The exact int64 sums of ``(input - input_zero_point) * (filter -
    filter_zero_point)`` over each window, plus ``bias``: (N, OC, OH, OW)."""
    batch, channels, height, width = input.shape
    out_channels, group_channels, kernel_h, kernel_w = filter.shape
    stride_h, stride_w = strides
    dilation_h, dilation_w = dilations
    out_h = output_size(height, kernel_h, stride_h, dilation_h, start_padding[0], end_padding[0])
    out_w = output_size(width, kernel_w, stride_w, dilation_w, start_padding[1], end_padding[1])

    centred = widen(input, input_zero_point)
    # A per-channel filter zero point is {1, OC, 1, 1}; the filter is OIHW.
    weights = widen(filter, None if filter_zero_point is None
                    else np.asarray(filter_zero_point).reshape(-1, 1, 1, 1))
    padded = np.pad(centred, ((0, 0), (0, 0),
                              (start_padding[0], end_padding[0]),
                              (start_padding[1], end_padding[1])))
    span_h = dilation_h * (kernel_h - 1) + 1
    span_w = dilation_w * (kernel_w - 1) + 1
    windows = sliding_window_view(padded, (span_h, span_w), axis=(2, 3))
    # (N, C, OH, OW, KH, KW): every output position's receptive field.
    windows = windows[:, :, : (out_h - 1) * stride_h + 1 : stride_h,
                      : (out_w - 1) * stride_w + 1 : stride_w, ::dilation_h, ::dilation_w]

    per_group = out_channels // group_count
    accumulator = np.empty((batch, out_channels, out_h, out_w), dtype=np.int64)
    for group in range(group_count):
        field = windows[:, group * group_channels:(group + 1) * group_channels]
        columns = field.transpose(0, 2, 3, 1, 4, 5).reshape(
            batch * out_h * out_w, group_channels * kernel_h * kernel_w)
        kernel = weights[group * per_group:(group + 1) * per_group].reshape(
            per_group, group_channels * kernel_h * kernel_w)
        sums = exact_products(columns, kernel.T)  # (N*OH*OW, per_group)
        accumulator[:, group * per_group:(group + 1) * per_group] = (
            sums.reshape(batch, out_h, out_w, per_group).transpose(0, 3, 1, 2))
    if bias is not None:
        accumulator += np.asarray(bias).astype(np.int64).reshape(1, out_channels, 1, 1)
    return accumulator
