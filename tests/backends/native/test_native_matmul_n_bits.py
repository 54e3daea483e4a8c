"""The native MatMulNBits backend's choice of the one-row kernel's form."""

import numpy as np
import pytest

from qops.backends.native.matmul_n_bits import whole_zeros_hold

SMALLEST = np.float32(2.0 ** -122)


def parameters(zero, scale):
    zeros = np.full((2, 3 * 16), 8, np.float32)
    scales = np.full((2, 3 * 16), 0.25, np.float32)
    zeros[1, 5], scales[0, 7] = zero, scale
    return zeros, scales


@pytest.mark.parametrize("zero, scale", [(0, 0.25), (15, 0.25), (3.0, -1e30), (8, SMALLEST),
                                         (8, -SMALLEST), (8, 0.0), (8, -0.0), (8, np.inf),
                                         (8, np.nan), (8, np.finfo(np.float32).max)])
def test_whole_zero_points_and_exact_sixteenths_take_the_short_form(zero, scale):
    assert whole_zeros_hold(*parameters(zero, scale), 4)


@pytest.mark.parametrize("zero, scale", [(-1, 0.25), (16, 0.25), (7.5, 0.25), (np.nan, 0.25),
                                         (np.inf, 0.25),
                                         (8, np.nextafter(SMALLEST, np.float32(0))),
                                         (8, -np.float32(2.0 ** -130)),
                                         (8, np.float32(1e-45))])
def test_other_zero_points_or_scales_take_the_general_form(zero, scale):
    assert not whole_zeros_hold(*parameters(zero, scale), 4)


@pytest.mark.parametrize("bits", [2, 8])
def test_only_four_bit_codes_take_the_short_form(bits):
    assert not whole_zeros_hold(*parameters(1, 0.25), bits)
