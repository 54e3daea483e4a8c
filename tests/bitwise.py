"""Raw-bit comparison of arrays: the assertions every exact test uses.

Kept apart from ``conftest`` so that ``peers`` (the comparison rule) and
``conftest`` can both use them without importing each other.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

_UINT_OF_SIZE = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def bits(array):
    """The raw bits of ``array`` as an unsigned integer array of the same item
    size.  int4/uint4/float4 occupy one byte each in ml_dtypes; their unused
    high bits are masked off."""
    array = np.ascontiguousarray(array)
    raw = array.view(_UINT_OF_SIZE[array.dtype.itemsize])
    dtype = array.dtype
    if dtype in (np.dtype(ml_dtypes.int4), np.dtype(ml_dtypes.uint4),
                 np.dtype(ml_dtypes.float4_e2m1fn)):
        raw = raw & np.uint8(0x0F)
    if dtype in (np.dtype(ml_dtypes.float6_e2m3fn), np.dtype(ml_dtypes.float6_e3m2fn)):
        raw = raw & np.uint8(0x3F)
    return raw


def is_nan(array):
    array = np.asarray(array)
    if array.dtype.kind in "iub" or array.dtype in (np.dtype(ml_dtypes.int4),
                                                     np.dtype(ml_dtypes.uint4)):
        return np.zeros(array.shape, bool)
    try:
        return np.isnan(array.astype(np.float32))
    except (TypeError, ValueError):
        return np.zeros(array.shape, bool)


def assert_bits_equal(actual, expected, context=""):
    """Same dtype, same shape, the same bits everywhere; NaNs must be NaN in
    both (any NaN pattern; float8 NaN patterns are compared exactly too when
    both agree on the sign bit convention)."""
    actual = np.asarray(actual)
    expected = np.asarray(expected)
    assert actual.dtype == expected.dtype, f"{context}: dtype {actual.dtype} != {expected.dtype}"
    assert actual.shape == expected.shape, f"{context}: shape {actual.shape} != {expected.shape}"
    nan_a, nan_e = is_nan(actual), is_nan(expected)
    assert np.array_equal(nan_a, nan_e), (
        f"{context}: NaN positions differ at {np.argwhere(nan_a != nan_e)[:5].tolist()}")
    same = (bits(actual) == bits(expected)) | (nan_a & nan_e)
    if not same.all():
        where = np.argwhere(~same)[:8]
        detail = [(tuple(int(i) for i in w), actual[tuple(w)], expected[tuple(w)]) for w in where]
        raise AssertionError(f"{context}: {int((~same).sum())} of {same.size} elements differ in "
                             f"their bits; first (index, actual, expected): {detail}")


def assert_within_one(actual, expected, context=""):
    actual = np.asarray(actual)
    expected = np.asarray(expected)
    assert actual.dtype == expected.dtype, f"{context}: dtype {actual.dtype} != {expected.dtype}"
    assert actual.shape == expected.shape, f"{context}: shape {actual.shape} != {expected.shape}"
    diff = np.abs(actual.astype(np.int64) - expected.astype(np.int64))
    assert diff.max(initial=0) <= 1, (
        f"{context}: max |diff| {diff.max()} at {np.unravel_index(diff.argmax(), diff.shape)}")


def assert_exact(actual, expected, context=""):
    actual = np.asarray(actual)
    expected = np.asarray(expected)
    assert actual.dtype == expected.dtype, f"{context}: dtype {actual.dtype} != {expected.dtype}"
    assert actual.shape == expected.shape, f"{context}: shape {actual.shape} != {expected.shape}"
    if not np.array_equal(actual, expected):
        bad = np.argwhere(actual != expected)[:8]
        detail = [(tuple(int(i) for i in b), int(actual[tuple(b)]), int(expected[tuple(b)]))
                  for b in bad]
        raise AssertionError(f"{context}: {int((actual != expected).sum())} of {actual.size} "
                             f"elements differ; first (index, actual, expected): {detail}")
