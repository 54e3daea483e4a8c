"""Exact statements of the contract in NumPy, written for the tests.

Nothing here calls qops.  Integer sums are exact (int64); the requantization
is the contract's, one float32 operation at a time::

    m = float32(float32(x_scale * w_scale) / y_scale)
    y = saturate(round_half_even(float32(float32(acc) * m)) + y_zero_point)

The operators take ONNX's conventions (QLinearConv's ``pads``, ``group`` and
``auto_pad``; QLinearMatMul's NumPy matmul broadcasting), so that whole ONNX
models have an exact oracle: :func:`exact_operators` gives
``onnx.reference`` evaluator classes that run them.

:func:`saturating_u8s8_sums` models onnxruntime's u8 x s8 kernels on CPUs
without VNNI (``vpmaddubsw`` pairs clamped to int16), for the tests of the
comparison rule itself.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view


def integer_range(dtype):
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


def multiplier(x_scale, w_scale, y_scale):
    """``float32(float32(x_scale * w_scale) / y_scale)``, broadcast."""
    with np.errstate(all="ignore"):
        product = np.multiply(np.asarray(x_scale, np.float32), np.asarray(w_scale, np.float32),
                              dtype=np.float32)
        return np.divide(product, np.asarray(y_scale, np.float32), dtype=np.float32)


def requantize(acc, m, zero_point, dtype):
    """``saturate(round_half_even(float32(float32(acc) * m)) + zero_point)``."""
    dtype = np.dtype(dtype)
    value = np.multiply(np.asarray(acc, np.int64).astype(np.float32), m, dtype=np.float32)
    rounded = np.rint(value).astype(np.int64)
    low, high = integer_range(dtype)
    shifted = rounded + (0 if zero_point is None else np.asarray(zero_point, np.int64))
    return np.clip(shifted, low, high).astype(dtype)


def _centred(values, zero_point):
    values = np.asarray(values).astype(np.int64)
    return values if zero_point is None else values - np.asarray(zero_point).astype(np.int64)


# -- QLinearMatMul ------------------------------------------------------------------------------

def qlinear_matmul(a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point):
    """ONNX QLinearMatMul, exactly: ``numpy.matmul`` shapes (1-D operands
    included).  Parameters broadcast against the product as given: per tensor
    as scalars, per row of A as ``(M, 1)``, per column of B as ``(1, N)``."""
    a_centred = _centred(a, a_zero_point)
    b_centred = _centred(b, b_zero_point)
    acc = np.matmul(a_centred, b_centred)
    dtype = np.asarray(y_zero_point).dtype if y_zero_point is not None else np.dtype(np.uint8)
    return requantize(acc, multiplier(a_scale, b_scale, y_scale), y_zero_point, dtype)


# -- QLinearConv --------------------------------------------------------------------------------

def onnx_pads(auto_pad, pads, spatial, kernel, strides, dilations):
    """``(starts, ends)`` per spatial axis as ONNX defines them.

    NOTSET takes ``pads`` (all starts, then all ends); VALID pads nothing;
    SAME_UPPER and SAME_LOWER pad so that the output has ``ceil(size /
    stride)`` positions, the odd element at the end (UPPER) or start (LOWER).
    """
    rank = len(spatial)
    if auto_pad in (None, "", "NOTSET"):
        pads = list(pads) if pads is not None else [0] * (2 * rank)
        return tuple(pads[:rank]), tuple(pads[rank:])
    if auto_pad == "VALID":
        return (0,) * rank, (0,) * rank
    starts, ends = [], []
    for size, k, s, d in zip(spatial, kernel, strides, dilations):
        extent = (k - 1) * d + 1
        total = max(0, (-(-size // s) - 1) * s + extent - size)
        small, large = total // 2, total - total // 2
        starts.append(small if auto_pad == "SAME_UPPER" else large)
        ends.append(large if auto_pad == "SAME_UPPER" else small)
    return tuple(starts), tuple(ends)


def convolution_sums(x, x_zero_point, w, w_zero_point, bias, *, starts, ends, strides,
                     dilations, group):
    """Exact int64 sums of a grouped N-D convolution (1-D or 2-D), NC... / OI...:
    padding is a real zero (the zero point is subtracted first)."""
    x = _centred(x, x_zero_point)
    out_channels = w.shape[0]
    if w_zero_point is not None and np.ndim(w_zero_point) == 1:
        w_zero_point = np.asarray(w_zero_point).reshape((-1,) + (1,) * (w.ndim - 1))
    w = _centred(w, w_zero_point)
    rank = x.ndim - 2
    padded = np.pad(x, ((0, 0), (0, 0)) + tuple(zip(starts, ends)))
    kernel = w.shape[2:]
    spans = tuple((k - 1) * d + 1 for k, d in zip(kernel, dilations))
    windows = sliding_window_view(padded, spans, axis=tuple(range(2, 2 + rank)))
    take = tuple(slice(None, None, s) for s in strides) + tuple(slice(None, None, d)
                                                                for d in dilations)
    windows = windows[(slice(None), slice(None)) + take]
    # windows: (N, C, *out, *kernel)
    per_group_in = w.shape[1]
    per_group_out = out_channels // group
    outputs = []
    for g in range(group):
        field = windows[:, g * per_group_in:(g + 1) * per_group_in]
        weights = w[g * per_group_out:(g + 1) * per_group_out]
        # sum over C and the kernel axes
        channel_axes = [1] + list(range(2 + rank, 2 + 2 * rank))
        outputs.append(np.tensordot(field, weights,
                                    axes=(channel_axes, [1] + list(range(2, 2 + rank)))))
    acc = np.concatenate(outputs, axis=-1)          # (N, *out, OC)
    acc = np.moveaxis(acc, -1, 1)                    # (N, OC, *out)
    if bias is not None:
        acc = acc + np.asarray(bias, np.int64).reshape((1, -1) + (1,) * rank)
    return acc


def qlinear_conv(x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point,
                 B=None, *, pads=None, strides=None, dilations=None, group=1, auto_pad=None):
    """ONNX QLinearConv, exactly (1-D or 2-D; ``w_scale`` per tensor or per
    output channel; ``B`` the int32 bias, ONNX's name)."""
    rank = np.ndim(x) - 2
    kernel = np.shape(w)[2:]
    strides = tuple(strides or (1,) * rank)
    dilations = tuple(dilations or (1,) * rank)
    starts, ends = onnx_pads(auto_pad, pads, np.shape(x)[2:], kernel, strides, dilations)
    acc = convolution_sums(x, x_zero_point, np.asarray(w), w_zero_point, B, starts=starts,
                           ends=ends, strides=strides, dilations=dilations, group=group)
    m = multiplier(x_scale, np.asarray(w_scale, np.float32).reshape((-1,) + (1,) * rank), y_scale)
    dtype = np.asarray(y_zero_point).dtype if y_zero_point is not None else np.dtype(np.uint8)
    return requantize(acc, m, y_zero_point, dtype)


# -- whole models ---------------------------------------------------------------------------------

def exact_operators():
    """``onnx.reference`` evaluator classes running QLinearConv and
    QLinearMatMul by the statements above (QuantizeLinear and
    DequantizeLinear stay onnx.reference's own, bit-exact by the contract)."""
    from onnx.reference.op_run import OpRun

    class QLinearConv(OpRun):
        op_domain = ""

        def _run(self, x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale,
                 y_zero_point, B=None, auto_pad=None, dilations=None, group=None,
                 kernel_shape=None, pads=None, strides=None):
            return (qlinear_conv(x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale,
                                 y_zero_point, B, pads=pads, strides=strides, dilations=dilations,
                                 group=group or 1,
                                 auto_pad=auto_pad.decode() if isinstance(auto_pad, bytes)
                                 else auto_pad),)

    class QLinearMatMul(OpRun):
        op_domain = ""

        def _run(self, a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale,
                 y_zero_point):
            return (qlinear_matmul(a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale,
                                   y_zero_point),)

    return [QLinearConv, QLinearMatMul]


# -- onnxruntime's u8 x s8 idiom without VNNI ------------------------------------------------------

INT16_LOW, INT16_HIGH = -(2**15), 2**15 - 1


def saturating_u8s8_sums(a, b):
    """``a @ b`` for uint8 ``a`` (M, K) and int8 ``b`` (K, N) as ``vpmaddubsw``
    computes it: each pair of neighbouring terms (k = 2i, 2i + 1) summed and
    clamped to int16, the pairs then added in int32 (wrapping).  Equal to the
    exact product only while no pair sum leaves int16."""
    a = np.asarray(a, np.int64)
    b = np.asarray(b, np.int64)
    if a.shape[-1] % 2:
        a = np.concatenate([a, np.zeros(a.shape[:-1] + (1,), np.int64)], axis=-1)
        b = np.concatenate([b, np.zeros((1,) + b.shape[1:], np.int64)], axis=0)
    terms = a[:, :, None] * b[None, :, :]                        # (M, K, N)
    pairs = terms[:, 0::2, :] + terms[:, 1::2, :]
    clamped = np.clip(pairs, INT16_LOW, INT16_HIGH).sum(axis=1)
    return ((clamped + 2**31) % 2**32 - 2**31).astype(np.int64)
