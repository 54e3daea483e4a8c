"""The bound global average pooling (qops.backends.native.pooling) of
channels-first and channels-last images against the reference, on every
variant's quantize kernels."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qops import reference
from qops.backends.native import variants as _simd

pooling = pytest.importorskip("qops.backends.native.pooling")

VARIANTS = _simd.quantize_variants()


@pytest.mark.parametrize("variant", VARIANTS)
@settings(max_examples=30, deadline=None)
@given(dtype=st.sampled_from([np.uint8, np.int8]), batch=st.integers(1, 3),
       channels=st.integers(1, 300), height=st.integers(1, 9), width=st.integers(1, 9),
       seed=st.integers(0, 2**32 - 1), n_threads=st.sampled_from([1, 2]))
def test_the_global_average_of_channels_last_images_is_the_reference_s(
        variant, dtype, batch, channels, height, width, seed, n_threads):
    """A channels-last image pooled as one plane of H x W rows (a window of
    a whole column per channel) gives the channels-first pooling's values,
    which are the reference's."""
    rng = np.random.default_rng(seed)
    info = np.iinfo(dtype)
    image = rng.integers(info.min, info.max + 1, (batch, channels, height, width), dtype=dtype)
    parameters = (np.float32(rng.uniform(0.01, 0.2)), dtype(rng.integers(info.min, info.max)),
                  np.float32(rng.uniform(0.01, 0.2)), dtype(rng.integers(info.min, info.max)))
    five_d = [np.asarray(value).reshape((1,) * 5) for value in parameters]
    expected = reference.quantized_linear_average_pooling(
        image[:, :, None], *five_d, window_size=(1, height, width), strides=(1, 1, 1),
        dilations=(1, 1, 1), start_padding=(0, 0, 0), end_padding=(0, 0, 0),
        include_padding=False, output_dtype=np.dtype(dtype)).reshape(batch, channels, 1, 1)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_simd, "selected", lambda: variant)
        first = pooling.bound_global_average(*parameters)(image, n_threads)
        last = pooling.bound_global_average(*parameters, channels_last=True)(
            np.ascontiguousarray(image.transpose(0, 2, 3, 1)), n_threads)
    assert first.shape == last.shape == (batch, channels, 1, 1)
    np.testing.assert_array_equal(first, expected)
    np.testing.assert_array_equal(last, expected)
