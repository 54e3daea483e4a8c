"""The native quantize module's bound paths (qops.backends.native.quantize)
against the operators and the reference they stand for."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import qops

quantize = pytest.importorskip("qops.backends.native.quantize")


@pytest.mark.parametrize("n_threads", [1, 2])
@settings(max_examples=60, deadline=None)
@given(shape=st.sampled_from([(1,), (7, 3), (1, 128, 768), (2, 50, 33)]),
       centre=st.floats(-100, 100), spread=st.sampled_from([0.0, 1e-3, 1.0, 250.0]),
       seed=st.integers(0, 2**32 - 1))
def test_a_bound_dynamic_quantize_is_the_operators(shape, centre, spread, n_threads, seed):
    """bound_dynamic_quantize: the operator's y, scale and zero point, on
    ranges of one sign or both, a single value, ties of the division."""
    rng = np.random.default_rng(seed)
    x = (centre + spread * rng.standard_normal(shape)).astype(np.float32)
    result = quantize.bound_dynamic_quantize()(x, n_threads)
    y, scale, zero_point = qops.dynamic_quantize_linear(x)
    if result is None:
        # Only a range whose scale the lean kernel refuses (a subnormal
        # span's, 0) is left to the operator.
        span = max(float(x.max()), 0.0) - min(float(x.min()), 0.0)
        assert span and not 2.0 ** -100 <= span <= 2.0 ** 100
        return
    assert np.array_equal(result[0], y) and result[0].dtype == np.uint8
    assert result[1].tobytes() == scale.reshape(()).tobytes()
    assert result[2] == zero_point.reshape(())


def test_a_bound_dynamic_quantize_leaves_other_inputs_to_the_operator():
    """None, with nothing made, for what the operator must see: NaN and the
    infinities, an empty or strided input, other dtypes, lists."""
    run = quantize.bound_dynamic_quantize()
    wide = np.ones((4, 10), np.float32)
    for refused in (np.array([1.0, np.nan], np.float32), np.array([np.inf, 0], np.float32),
                    np.zeros((0, 3), np.float32), wide[:, ::2], wide.astype(np.float16),
                    wide.astype(np.float64), wide.tolist()):
        assert run(refused, 2) is None


@pytest.mark.parametrize("values", [[0, 1e-38], [0, 1e-42], [-1e-39, 1e-39], [0, 3e-36],
                                    [-3e38, 3e38], [0, 3.4e38], [-1e-30, 1e-30],
                                    [1e-20, 2e-20], [0, 1.4e-45]])
def test_a_bound_dynamic_quantize_of_extreme_ranges_is_the_operators_or_refused(values):
    """Subnormal, tiny and huge ranges: where the bound path runs, the
    operator's outputs; where it does not (a scale QuantizeLinear refuses),
    None."""
    x = np.array(values, np.float32)
    result = quantize.bound_dynamic_quantize()(x, 2)
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        y, scale, zero_point = qops.dynamic_quantize_linear(x)
    if result is not None:
        assert np.array_equal(result[0], y)
        assert result[1].tobytes() == scale.reshape(()).tobytes()
        assert result[2] == zero_point.reshape(())
