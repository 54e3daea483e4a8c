"""The channels-last depthwise pixel (qops_depthwise_channels_last.h) built
alone at each width and run on this CPU, against the rule stated in NumPy:
the AVX-512 branch, which only the VNNI build compiles in, runs here
wherever the CPU has AVX-512F and BW, with vpdpwssd where it has VNNI too."""

import ctypes

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

BLOCK = 64

HARNESS = """
#include "qops_depthwise_channels_last.h"
void pixel(const uint8_t* copy, const ptrdiff_t* tap_offset, ptrdiff_t count,
           const int32_t* weights, int16_t* laid, const uint32_t* terms,
           const float* multiplier, const float* floor_value, const float* ceiling_value,
           const int32_t* out_zero, uint8_t* result) {
    qops_depthwise_channels_last_lay_weights(weights, count, laid);
    qops_depthwise_channels_last_pixel(copy, tap_offset, count, laid, terms, multiplier,
                                       floor_value, ceiling_value, out_zero, result);
}
"""


@pytest.fixture(scope="module", params=["scalar", "avx2", "avx512", "avx512-vnni"])
def pixel(request, tmp_path_factory):
    from c_compiler import compiler, library_at_width

    if compiler() is None:
        pytest.skip("no C compiler")
    library = library_at_width(HARNESS, request.param, tmp_path_factory.mktemp(request.param))
    if library is None:
        pytest.skip(f"this CPU cannot run the {request.param} width")
    function = library.pixel
    function.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_ssize_t] + [
        ctypes.c_void_p] * 8
    return function


def statement(copy, offsets, weights, terms, multiplier, low, high, out_zero):
    """The pixel's bytes: each channel's taps (copy's pixel at each offset)
    times its weights plus its term, in exact integers; then float32 of the
    sum times the multiplier, clamped to the output's range less the zero
    point, rounded half to even, plus the zero point, as a byte."""
    taps = copy.reshape(-1, BLOCK)[offsets].astype(np.int64)
    sums = (taps * weights.astype(np.int64)).sum(axis=0) + terms.view(np.int32)
    scaled = sums.astype(np.float32) * multiplier
    scaled = np.clip(scaled, (low - out_zero).astype(np.float32),
                     (high - out_zero).astype(np.float32))
    return (np.rint(scaled).astype(np.int32) + out_zero).astype(np.uint8)


@settings(max_examples=40, deadline=None)
@given(count=st.integers(1, 25), signed=st.booleans(), scale_log=st.integers(-12, 0),
       seed=st.integers(0, 2**32 - 1))
def test_the_pixel_at_each_width_gives_the_rule(pixel, count, signed, scale_log, seed):
    """Any count of taps (odd ones leave the last pair half empty), weights
    across int16's range of differences, terms near int32's ends, outputs
    inside and saturated at both ends of uint8 or int8."""
    rng = np.random.default_rng(seed)
    pixels = 30
    copy = rng.integers(0, 256, (pixels, BLOCK), dtype=np.uint8)
    offsets = rng.integers(0, pixels, count).astype(np.intp)
    weights = rng.integers(-255, 256, (count, BLOCK)).astype(np.int32)
    # The true sums stay inside int32 (the kernel's contract).
    bound = 2**31 - 1 - 255 * 255 * count
    terms = rng.integers(-bound, bound, BLOCK).astype(np.int32).view(np.uint32)
    multiplier = (rng.uniform(0.5, 2.0, BLOCK) * 2.0**scale_log * 1e-3).astype(np.float32)
    low, high = (-128, 127) if signed else (0, 255)
    out_zero = rng.integers(low, high + 1, BLOCK).astype(np.int32)
    floor_value = (low - out_zero).astype(np.float32)
    ceiling_value = (high - out_zero).astype(np.float32)
    laid = np.zeros(2 * (count + 1) * BLOCK, np.int32)
    result = np.zeros(BLOCK, np.uint8)
    pixel(copy.ctypes.data, offsets.ctypes.data, count, weights.ctypes.data, laid.ctypes.data,
          terms.ctypes.data, multiplier.ctypes.data, floor_value.ctypes.data,
          ceiling_value.ctypes.data, out_zero.ctypes.data, result.ctypes.data)
    expected = statement(copy, offsets, weights, terms, multiplier, low, high, out_zero)
    assert np.array_equal(result, expected)
