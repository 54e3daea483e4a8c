"""The range of float32 values (kernels/_range.pxi, include/qops_range.h):
NumPy's min and max, bit for bit, on every variant and thread count; the
value-check helper the dispatch point hands DynamicQuantizeLinear."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qops.backends import dispatch
from qops.backends.native import quantize as native_quantize
from qops.backends.native import variants

SPECIAL = np.array([np.inf, -np.inf, np.nan, -0.0, 0.0, 3.4028235e38, -3.4028235e38, 1e-45],
                   np.float32)


def numpy_range(x):
    return x.min(), x.max()


def same(got, want):
    """Equal float32 values, NaN matching NaN and -0.0 matching 0.0 (min and
    max of zeros of both signs may give either, in NumPy too)."""
    return all((np.isnan(g) and np.isnan(w)) or g == w for g, w in zip(got, want))


@pytest.mark.parametrize("variant", variants.quantize_variants())
@settings(max_examples=60, deadline=None)
@given(size=st.integers(1, 70000), specials=st.lists(st.integers(0, len(SPECIAL) - 1),
                                                     max_size=3),
       scale=st.sampled_from([1e-3, 1.0, 1e30]), seed=st.integers(0, 2**32 - 1))
def test_the_range_is_numpys_min_and_max(variant, size, specials, scale, seed):
    """Any length (whole lanes and a tail, one task and several), values of
    any scale, infinities, NaN, signed zeros and the extremes among them."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(size) * scale).astype(np.float32)
    for special in specials:
        x[rng.integers(0, size)] = SPECIAL[special]
    module = variants.quantize_module(variant)
    for n_threads in (1, 2, 3):
        got = module.range_float32(x, n_threads)
        assert same(got, numpy_range(x)), (variant, n_threads, got, numpy_range(x))


@pytest.mark.parametrize("position", [0, 15, 16, 16383, 16384, 40000])
def test_a_lone_nan_or_extreme_anywhere_is_found(position):
    """In the first lane, a tail, a task's last element or the next task's
    first: a NaN gives NaN for both; the extremes are the range's ends."""
    x = np.zeros(40001, np.float32)
    x[position] = np.nan
    assert all(np.isnan(v) for v in native_quantize.float32_range(x, 2))
    x[position] = -7.5
    x[-1 - position] = 9.25
    assert native_quantize.float32_range(x, 2) == (np.float32(-7.5), np.float32(9.25))


def test_dynamic_quantization_checks_its_range_through_the_helper():
    """The dispatch point hands the kernels' range to DynamicQuantizeLinear's
    value check, and an empty array to NumPy, which refuses it."""
    assert dispatch.helper("float32 range") is native_quantize.float32_range
    with pytest.raises(ValueError):
        native_quantize.float32_range(np.zeros(0, np.float32), 2)
    x = np.linspace(-3, 5, 1000, dtype=np.float32).reshape(10, 100)[:, ::2]
    assert native_quantize.float32_range(x, 2) == numpy_range(x)
