"""A 1 x 1 expansion and the depthwise convolution of its output run as one
(_expand_depthwise.pxi, CompiledOperator.followed_runner): the two
operators' values, bit for bit, against the reference of each in turn."""

import types

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kernel_cases import VARIANTS, at_page_end, random_values, reference

import qops
from qops.backends import dispatch as _dispatch
from qops.backends.native import variants as _simd
from qops.ops import convolution


def _pair(rng, channels, expanded, stride, kernel, dilation, padding, in_type, filter_type,
          per_channel, with_bias):
    """Slots and attributes of an expansion and of its depthwise convolution."""
    def scales(count):
        return (rng.uniform(0.002, 0.02, count).astype(np.float32) if per_channel
                else np.float32(rng.uniform(0.002, 0.02)))

    middle = np.dtype(in_type)
    expand = dict(filter=random_values(rng, (expanded, channels, 1, 1), filter_type),
                  filter_scale=scales(expanded),
                  filter_zero_point=random_values(rng, (), filter_type),
                  bias=rng.integers(-3000, 3000, expanded).astype(np.int32) if with_bias else None,
                  input_scale=np.float32(0.05), input_zero_point=random_values(rng, (), in_type),
                  output_scale=np.float32(rng.uniform(0.05, 0.4)),
                  output_zero_point=random_values(rng, (), middle))
    depthwise = dict(filter=random_values(rng, (expanded, 1, kernel, kernel), filter_type),
                     filter_scale=scales(expanded),
                     filter_zero_point=random_values(rng, (), filter_type),
                     bias=(rng.integers(-3000, 3000, expanded).astype(np.int32) if with_bias
                           else None),
                     input_scale=expand["output_scale"],
                     input_zero_point=expand["output_zero_point"],
                     output_scale=np.float32(rng.uniform(0.05, 0.4)),
                     output_zero_point=random_values(rng, (), in_type))
    expand_attributes = dict(strides=(1, 1), dilations=(1, 1), start_padding=(0, 0),
                             end_padding=(0, 0), group_count=1)
    strides = stride if isinstance(stride, tuple) else (stride, stride)
    depthwise_attributes = dict(strides=strides, dilations=(dilation, dilation),
                                start_padding=padding[0], end_padding=padding[1],
                                group_count=expanded)
    return expand, expand_attributes, depthwise, depthwise_attributes


def _expected(image, slots, attributes):
    """The reference's convolution of ``image``."""
    return reference(convolution.prepare(dict(slots, input=image), attributes, "2_1"))


def _compiled(slots, attributes):
    return qops.compile("QUANTIZED_LINEAR_CONVOLUTION", **slots, **attributes)


def _two_calls(first, second):
    """run(n_threads, image) of the two operators in turn."""
    return lambda n_threads, image: second(first(image, n_threads=n_threads),
                                           n_threads=n_threads)


def _pair_kernel():
    """Skip where the selected variant has no pair kernel (no pairs)."""
    if not _simd.module().PAIR_KERNEL:
        pytest.skip("this build's kernels have no depthwise pair kernel")


def _simple_pair(seed, expanded, stride, with_bias, size):
    """8 channels expanded into ``expanded``, a 3 x 3 depthwise convolution
    padded by one: the slots, the two compiled operators, the image's shape,
    the pair's runner and an image."""
    rng = np.random.default_rng(seed)
    slots = _pair(rng, 8, expanded, stride, 3, 1, ((1, 1), (1, 1)), np.uint8, np.int8, False,
                  with_bias)
    first, second = _compiled(*slots[:2]), _compiled(*slots[2:])
    shape = (1, 8, size, size)
    return types.SimpleNamespace(slots=slots, first=first, second=second, shape=shape,
                                 run=first.followed_runner(second, shape),
                                 image=random_values(rng, shape, np.uint8))


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("channels, expanded, size, stride, in_type", [
    (16, 96, (48, 48), 2, np.uint8),     # MobileNetV2's first expansion, smaller
    (24, 144, (16, 24), 1, np.int8),
    (7, 30, (8, 8), 2, np.uint8),        # channels past a whole micro-tile
    (32, 200, (16, 16), 1, np.uint8),    # several blocks of channels
    (4, 6, (264, 256), 2, np.int8),      # one micro-tile's planes past the L2 budget
])
def test_the_pair_is_the_two_convolutions(variant, channels, expanded, size, stride, in_type,
                                          monkeypatch):
    """Every block of expanded channels, filtered while in cache, gives the
    reference's depthwise convolution of the reference's expansion, for
    batches of one and two images, on 1 to 3 threads, an image whose last
    byte ends its page included."""
    monkeypatch.setattr(_simd, "selected", lambda: variant)
    rng = np.random.default_rng(channels * expanded)
    expand, expand_attributes, depthwise, depthwise_attributes = _pair(
        rng, channels, expanded, stride, 3, 1, ((1, 1), (1, 1)), in_type, np.int8,
        per_channel=True, with_bias=True)
    first, second = _compiled(expand, expand_attributes), _compiled(depthwise,
                                                                    depthwise_attributes)
    for batch in (1, 2):
        shape = (batch, channels, *size)
        run = first.followed_runner(second, shape)
        assert (run is not None) == _simd.module(variant).PAIR_KERNEL
        if run is None:  # (a target without the pair kernel: each call on its own)
            run = _two_calls(first, second)
        for n_threads in (1, 2, 3, None):
            image = random_values(rng, shape, in_type)
            middle = _expected(image, expand, expand_attributes)
            expected = _expected(middle, depthwise, depthwise_attributes)
            moved = at_page_end(image)
            got = run(n_threads, image if moved is None else moved)
            assert got.dtype == expected.dtype and np.array_equal(got, expected)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), channels=st.integers(1, 40),
       expanded=st.integers(1, 80), rows=st.integers(1, 6),
       stride=st.sampled_from([1, 2, (1, 2), (2, 1), (3, 1)]),
       kernel=st.sampled_from([1, 3, 5]), dilation=st.sampled_from([1, 2]),
       in_type=st.sampled_from([np.uint8, np.int8]),
       filter_type=st.sampled_from([np.uint8, np.int8]), per_channel=st.booleans(),
       with_bias=st.booleans(), pads=st.tuples(*[st.integers(0, 2)] * 4),
       batch=st.integers(1, 2))
def test_any_pair_is_the_two_convolutions(seed, channels, expanded, rows, stride, kernel,
                                          dilation, in_type, filter_type, per_channel, with_bias,
                                          pads, batch):
    """Any expansion and depthwise convolution (filter zero points, one or
    many scales, with and without bias, any padding, dilation and strides,
    unequal ones too):
    the pair's runner gives the reference's values of the two in turn,
    whether the kernels run them as one or each on its own."""
    rng = np.random.default_rng(seed)
    width = 64 // rows * 2
    pad_top, pad_left, pad_bottom, pad_right = pads
    span = (kernel - 1) * dilation + 1
    if rows * 2 + pad_top + pad_bottom < span or width + pad_left + pad_right < span:
        pad_top = pad_bottom = pad_left = pad_right = span
    expand, expand_attributes, depthwise, depthwise_attributes = _pair(
        rng, channels, expanded, stride, kernel, dilation,
        ((pad_top, pad_left), (pad_bottom, pad_right)), in_type, filter_type, per_channel,
        with_bias)
    first, second = _compiled(expand, expand_attributes), _compiled(depthwise,
                                                                    depthwise_attributes)
    shape = (batch, channels, rows * 2, width)
    run = first.followed_runner(second, shape)
    image = random_values(rng, shape, in_type)
    expected = _expected(_expected(image, expand, expand_attributes), depthwise,
                         depthwise_attributes)
    if run is not None:
        assert np.array_equal(run(2, image), expected)
    assert np.array_equal(second(first(image, n_threads=2), n_threads=2), expected)


def test_the_pair_is_fused_where_the_kernels_take_it(monkeypatch):
    """Where the expansion runs filter x image (pixels filling the micro-
    tile's columns) and the depthwise convolution on its pair kernel, the
    two run as one, their middle never made (neither operator is called);
    with strides of 3 across, one output channel of two per channel, or an
    expansion that is not 1 x 1 without strides there is no runner."""
    _pair_kernel()
    rng, pair = np.random.default_rng(5), _simple_pair(5, 48, 2, True, 32)
    expand, expand_attributes, depthwise, depthwise_attributes = pair.slots
    first, second, shape, run, image = pair.first, pair.second, pair.shape, pair.run, pair.image
    expected = second(first(image))
    called = []
    for operator in (first, second):
        monkeypatch.setattr(type(operator), "__call__",
                            lambda self, *a, **k: called.append(self) or None)
    assert np.array_equal(run(2, image), expected) and not called
    monkeypatch.undo()
    # Another image's shape runs the two calls in turn.
    other = random_values(rng, (1, 8, 16, 16), np.uint8)
    assert np.array_equal(run(2, other), second(first(other)))
    # Pairs the kernels do not run as one.
    strided = dict(depthwise_attributes, strides=(3, 3))
    assert first.followed_runner(_compiled(depthwise, strided), shape) is None
    doubled = dict(depthwise, filter=random_values(rng, (96, 1, 3, 3), np.int8),
                   bias=rng.integers(-30, 30, 96).astype(np.int32))
    assert first.followed_runner(_compiled(doubled, dict(depthwise_attributes, group_count=48)),
                                 shape) is None
    padded = _compiled(expand, dict(expand_attributes, start_padding=(1, 1)))
    assert padded.followed_runner(second, shape) is None


def test_a_pair_the_kernels_do_not_take_has_no_runner():
    """A follower of another dtype than the expansion's output, or whose
    depthwise filter's taps overflow the pair kernel's sums with a bias,
    gives no runner rather than an error."""
    rng = np.random.default_rng(13)
    expand, expand_attributes, depthwise, depthwise_attributes = _pair(
        rng, 8, 24, 1, 3, 1, ((1, 1), (1, 1)), np.uint8, np.int8, False, True)
    first = _compiled(expand, expand_attributes)
    other_type = dict(depthwise, input_zero_point=np.int8(0), output_zero_point=np.int8(0))
    assert first.followed_runner(_compiled(other_type, depthwise_attributes),
                                 (1, 8, 16, 16)) is None
    large = dict(depthwise, filter=random_values(rng, (24, 1, 65, 65), np.int8))
    padded = dict(depthwise_attributes, start_padding=(32, 32), end_padding=(32, 32))
    assert first.followed_runner(_compiled(large, padded), (1, 8, 16, 16)) is None


def test_the_pair_follows_the_selected_implementations():
    """With the pointwise or the depthwise kernels switched off the runner
    runs the two operators' own calls (the same values); switched on again,
    the kernels run the pair again."""
    _pair_kernel()
    pair = _simple_pair(9, 24, 1, False, 16)
    expand, expand_attributes, depthwise, depthwise_attributes = pair.slots
    first, second, shape, run, image = pair.first, pair.second, pair.shape, pair.run, pair.image
    expected = _expected(_expected(image, expand, expand_attributes), depthwise,
                         depthwise_attributes)
    assert np.array_equal(run(1, image), expected)
    # Either half planned elsewhere (the depthwise convolution on the GEMM
    # kernels, say): no pair, and the same values; switched back, the pair.
    for switched in ("pointwise kernels", "depthwise kernels"):
        assert first._bound_followed(second, image.dtype, shape) is not None
        _dispatch.set_enabled("QUANTIZED_LINEAR_CONVOLUTION", switched, False)
        try:
            assert first._bound_followed(second, image.dtype, shape) is None
            assert np.array_equal(run(2, image), expected)
        finally:
            _dispatch.set_enabled("QUANTIZED_LINEAR_CONVOLUTION", switched, True)
        assert np.array_equal(run(1, image), expected)
