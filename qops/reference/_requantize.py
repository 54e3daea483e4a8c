"""The requantization rule shared by convolution and matrix multiply."""

from __future__ import annotations

import numpy as np

from qops.registry import dtypes as _dtypes


def requantization_multiplier(input_scale, weight_scale, output_scale):
    """``float32(float32(input_scale * weight_scale) / output_scale)``, broadcast.

    Each step is one float32 operation, so each rounds once, in this order;
    onnxruntime's CPU kernels compute the same value.
    """
    product = np.multiply(np.asarray(input_scale, np.float32), np.asarray(weight_scale, np.float32),
                          dtype=np.float32)
    return np.divide(product, np.asarray(output_scale, np.float32), dtype=np.float32)


def requantize(accumulator, multiplier, zero_point, dtype):
    """``saturate(round_half_even(float32(float32(acc) * multiplier)) + zero_point)``.

    Parameters
    ----------
    accumulator : ndarray of int64
        Exact integer sums (bias included).
    multiplier : ndarray of float32
        From :func:`requantization_multiplier`, broadcastable to ``accumulator``.
    zero_point : ndarray or None
        The output zero point, broadcastable; ``None`` means 0.
    dtype : numpy dtype
        ``uint8`` or ``int8``.
    """
    # int64 -> float32 rounds to nearest even, as int32 -> float32 does in C.
    value = np.multiply(accumulator.astype(np.float32), multiplier, dtype=np.float32)
    rounded = np.rint(value)  # half to even, in float32
    shifted = rounded.astype(np.float64)
    if zero_point is not None:
        shifted = shifted + np.asarray(zero_point, dtype=np.float64)
    low, high = _dtypes.INTEGER_RANGES[_dtypes.name_of(dtype)]
    return np.clip(shifted, low, high).astype(dtype)


def widen(array, zero_point):
    """``array - zero_point`` as int64 (``zero_point`` ``None`` means 0)."""
    wide = np.asarray(array).astype(np.int64)
    if zero_point is not None:
        wide = wide - np.asarray(zero_point).astype(np.int64)
    return wide


#: Every integer of magnitude up to 2**53 is a float64.
_FLOAT64_EXACT = 2.0 ** 53


def exact_products(left, right):
    """``np.matmul(left, right)`` of int64 arrays, exactly, as int64.

    When every partial sum is provably an integer below 2**53 in magnitude
    (K times the largest |left| times the largest |right|), float64 holds
    each one exactly whatever order BLAS adds them in, and its product is
    the exact one, hundreds of times faster than NumPy's integer matmul.
    Otherwise the integer matmul runs.  8-bit differences (|value| <= 255)
    stay exact in float64 up to K of about 10**11.
    """
    depth = left.shape[-1]
    largest_left = int(np.abs(left).max()) if left.size else 0
    largest_right = int(np.abs(right).max()) if right.size else 0
    if float(depth) * largest_left * largest_right < _FLOAT64_EXACT:
        return np.matmul(left.astype(np.float64), right.astype(np.float64)).astype(np.int64)
    return np.matmul(left, right)
