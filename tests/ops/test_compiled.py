"""qops.compile: constants bound and packed once, results equal to the plain functions."""

import dataclasses

import numpy as np
import pytest
from conftest import run_in_threads
from hypothesis import given, settings
from hypothesis import strategies as st

import qops

u8, i8, f32 = np.uint8, np.int8, np.float32


def ints(rng, shape, dtype):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, shape, dtype=dtype)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), groups=st.integers(1, 3), per_channel=st.booleans(),
       types=st.tuples(st.sampled_from([u8, i8]), st.sampled_from([u8, i8])),
       stride=st.integers(1, 2), pad=st.integers(0, 2))
def test_compiled_convolution_equals_the_function(seed, groups, per_channel, types, stride, pad):
    rng = np.random.default_rng(seed)
    in_type, filter_type = types
    out_channels = 2 * groups
    constants = dict(filter=ints(rng, (out_channels, 3, 3, 2), filter_type),
                     filter_scale=rng.uniform(0.01, 0.1, out_channels if per_channel else ()).astype(f32),
                     filter_zero_point=ints(rng, out_channels if per_channel else (), filter_type),
                     bias=rng.integers(-1000, 1000, out_channels, dtype=np.int32))
    attributes = dict(strides=(stride, 1), start_padding=(pad, 0), end_padding=(0, pad),
                      group_count=groups)
    runtime = dict(input=ints(rng, (2, 3 * groups, 7, 6), in_type), input_scale=f32(0.05),
                   input_zero_point=ints(rng, (), in_type), output_scale=f32(0.7),
                   output_zero_point=ints(rng, (), u8))
    compiled = qops.compile("QUANTIZED_LINEAR_CONVOLUTION", **constants, **attributes)
    expected = qops.quantized_linear_convolution(**runtime, **constants, **attributes)
    for n_threads in (1, 2):  # the second call reuses the packed filter
        assert np.array_equal(compiled(**runtime, n_threads=n_threads), expected)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), rank=st.integers(2, 4), per_column=st.booleans(),
       types=st.tuples(st.sampled_from([u8, i8]), st.sampled_from([u8, i8])))
def test_compiled_matmul_equals_the_function(seed, rank, per_column, types):
    rng = np.random.default_rng(seed)
    a_type, b_type = types
    batch = (2,) * (rank - 2)
    scale_shape = (1,) * (rank - 1) + ((5,) if per_column else (1,))
    constants = dict(b=ints(rng, batch + (9, 5), b_type),
                     b_scale=rng.uniform(0.01, 0.1, scale_shape).astype(f32),
                     b_zero_point=ints(rng, scale_shape, b_type))
    runtime = dict(a=ints(rng, batch + (4, 9), a_type), a_scale=f32(0.03),
                   a_zero_point=ints(rng, (), a_type), output_scale=f32(0.5))
    compiled = qops.compile("QUANTIZED_LINEAR_MATRIX_MULTIPLY", feature_level="4_0", **constants)
    expected = qops.quantized_linear_matrix_multiply(**runtime, **constants, feature_level="4_0")
    assert np.array_equal(compiled(**runtime), expected)
    out = np.empty_like(expected)
    assert compiled(**runtime, out=out) is out and np.array_equal(out, expected)


def test_calls_from_several_threads_agree():
    rng = np.random.default_rng(3)
    compiled = qops.compile("QUANTIZED_LINEAR_MATRIX_MULTIPLY", feature_level="4_0",
                            b=ints(rng, (64, 48), i8), b_scale=0.02)
    inputs = [ints(rng, (33, 64), u8) for _ in range(8)]
    expected = [qops.quantized_linear_matrix_multiply(a, 0.05, None, compiled._constants["b"], 0.02,
                                                       None, 1.0, feature_level="4_0") for a in inputs]
    results = [None] * len(inputs)

    def work(index):
        for _ in range(5):
            results[index] = compiled(a=inputs[index], a_scale=0.05, output_scale=1.0)

    run_in_threads(work, len(inputs))
    assert all(np.array_equal(r, e) for r, e in zip(results, expected))


def test_a_pickled_compiled_operator_is_the_same_operator():
    """A copy (another process, a dask worker) binds the same constants,
    attributes and feature level and gives the same bytes; its caches are
    its own."""
    import pickle
    rng = np.random.default_rng(4)
    compiled = qops.compile("QUANTIZED_LINEAR_CONVOLUTION", feature_level="4_0",
                            filter=ints(rng, (6, 2, 3, 3), i8),
                            filter_scale=rng.uniform(0.01, 0.1, 6).astype(np.float32),
                            strides=(2, 1), start_padding=(1, 0), end_padding=(0, 1),
                            group_count=2)
    image = ints(rng, (2, 4, 7, 6), u8)
    expected = compiled(image, 0.05, np.uint8(3), 0.5, np.uint8(9))
    copy = pickle.loads(pickle.dumps(compiled))
    assert copy.feature_level == compiled.feature_level
    assert copy.attributes == compiled.attributes
    assert all(np.array_equal(copy.constants[k], v) for k, v in compiled.constants.items())
    assert np.array_equal(copy(image, 0.05, np.uint8(3), 0.5, np.uint8(9)), expected)
    assert copy._packed is not compiled._packed


def test_constants_are_copied_and_frozen():
    weights = np.ones((2, 1, 1, 1), i8)
    compiled = qops.compile("QUANTIZED_LINEAR_CONVOLUTION", filter=weights, filter_scale=1.0)
    weights[...] = 5  # the caller's array changes; the compiled operator's must not
    out = compiled(input=np.full((1, 1, 1, 1), 3, u8), input_scale=1.0, output_scale=1.0)
    assert out.ravel().tolist() == [3, 3]


@pytest.mark.parametrize("kwargs, message", [
    (dict(filter_scale=1.0), "filter is required to compile"),
    (dict(filter=np.ones((2, 1, 1, 1), f32), filter_scale=1.0), "filter has dtype float32"),
    (dict(filter=np.ones((2, 1, 1, 1), i8), filter_scale=np.ones(3, f32)), "OutputChannelCount = 2"),
    (dict(filter=np.ones((2, 1, 1, 1), i8), filter_scale=1.0, input=np.ones((1, 1, 1, 1), u8)),
     "input is given when the operator is called"),
    (dict(filter=np.ones((2, 1, 1, 1), i8), filter_scale=1.0, group_count=3), "group_count 3"),
    (dict(filter=np.ones((2, 1, 1, 1), i8), filter_scale=1.0, strides=(0, 1)), "strides"),
])
def test_compile_rejects_bad_constants(kwargs, message):
    with pytest.raises(qops.ValidationError, match=message):
        qops.compile("QUANTIZED_LINEAR_CONVOLUTION", **kwargs)


def test_compiled_calls_reject_bound_and_unknown_slots():
    compiled = qops.compile("QUANTIZED_LINEAR_MATRIX_MULTIPLY", b=np.ones((1, 1, 2, 2), i8), b_scale=1.0)
    a = np.ones((1, 1, 2, 2), u8)
    with pytest.raises(qops.ValidationError, match="b is bound at compile time"):
        compiled(a=a, a_scale=1.0, output_scale=1.0, b=a)
    with pytest.raises(qops.ValidationError, match="not a slot"):
        compiled(a=a, a_scale=1.0, output_scale=1.0, c=a)
    with pytest.raises(qops.ValidationError, match="no constant slots"):
        qops.compile("DYNAMIC_QUANTIZE_LINEAR")


def _matmul_operator(rng):
    # Products past the lean path's size (SMALL_PRODUCT_LIMIT multiply-adds).
    b = ints(rng, (64, 70), i8)
    compiled = qops.compile("QUANTIZED_LINEAR_MATRIX_MULTIPLY", b=b, b_scale=f32(0.02))
    return compiled, dict(b=b, b_scale=f32(0.02))


def test_a_repeated_call_follows_new_data_and_new_parameters():
    """The recent-call shortcut (same parameter objects, new data of the same
    form) gives the plain function's bytes, and any other parameter object,
    of the same value or not, takes the validating path with its own values."""
    rng = np.random.default_rng(7)
    compiled, constants = _matmul_operator(rng)
    scale, zero, out_scale = f32(0.03), u8(120), f32(0.4)
    parameters = dict(a_scale=scale, a_zero_point=zero, output_scale=out_scale,
                      output_zero_point=u8(128))
    for step in range(4):
        a = ints(rng, (13, 64), u8)
        got = compiled(a=a, **parameters)
        assert np.array_equal(got, qops.quantized_linear_matrix_multiply(
            a=a, **parameters, **constants))
        assert 0.5 < np.mean((got > 0) & (got < 255))  # values, not saturation, compared
    changed = dict(a_scale=f32(0.04), a_zero_point=u8(110), output_scale=0.5,
                   output_zero_point=u8(100))
    assert np.array_equal(compiled(a=a, **changed),
                          qops.quantized_linear_matrix_multiply(a=a, **changed, **constants))
    # Another shape, then the first form again: each its own plan.
    short = ints(rng, (5, 64), u8)
    assert np.array_equal(compiled(a=short, **changed),
                          qops.quantized_linear_matrix_multiply(a=short, **changed, **constants))
    assert np.array_equal(compiled(a=a, **changed),
                          qops.quantized_linear_matrix_multiply(a=a, **changed, **constants))


def test_a_parameter_array_changed_in_place_is_read_again():
    """An array parameter may change between calls: its new values count."""
    rng = np.random.default_rng(8)
    compiled, constants = _matmul_operator(rng)
    a = ints(rng, (6, 64), u8)
    zero = np.array(100, u8)
    parameters = dict(a_scale=f32(0.03), output_scale=f32(0.4), output_zero_point=u8(128))
    first = compiled(a=a, a_zero_point=zero, **parameters)
    zero[...] = 110
    second = compiled(a=a, a_zero_point=zero, **parameters)
    assert np.array_equal(second, qops.quantized_linear_matrix_multiply(
        a=a, a_zero_point=u8(110), **parameters, **constants))
    assert not np.array_equal(first, second)


def test_a_repeated_call_is_still_validated():
    """A bad call after good ones of the same form is refused as on its own,
    and a call of another dtype or with out= takes the full path."""
    rng = np.random.default_rng(9)
    compiled, constants = _matmul_operator(rng)
    a = ints(rng, (6, 64), u8)
    good = dict(a_scale=f32(0.03), a_zero_point=u8(1), output_scale=f32(0.4))
    compiled(a=a, **good)
    compiled(a=a, **good)
    # An optional slot left out before and given now counts.
    assert np.array_equal(compiled(a=a, **good, output_zero_point=u8(50)),
                          qops.quantized_linear_matrix_multiply(
                              a=a, **good, output_zero_point=u8(50), **constants))
    compiled(a=a, **good)
    with pytest.raises(qops.ValidationError, match="a_scale"):
        compiled(a=a, **dict(good, a_scale=f32(0.0)))
    with pytest.raises(qops.ValidationError, match="a_zero_point"):
        compiled(a=a, **dict(good, a_zero_point=i8(1)))
    with pytest.raises(qops.ValidationError, match="has 1 dimension"):
        compiled(a=a[0], **good)
    signed = ints(rng, (6, 64), i8)
    with pytest.raises(qops.ValidationError, match="a_zero_point"):
        compiled(a=signed, **good)  # the same parameter objects, A of another type
    assert np.array_equal(compiled(a=signed, **dict(good, a_zero_point=i8(1))),
                          qops.quantized_linear_matrix_multiply(
                              a=signed, **dict(good, a_zero_point=i8(1)), **constants))
    out = np.empty((6, 70), u8)
    assert compiled(a=a, **good, out=out) is out
    with pytest.raises(qops.ValidationError, match="out"):
        compiled(a=a, **good, out=np.empty((6, 71), u8))
    with pytest.raises(qops.ValidationError):
        compiled(a=a, **good, n_threads=0)


def test_a_repeated_convolution_follows_its_input():
    """The shortcut on a convolution (channels-first input, every thread count)."""
    rng = np.random.default_rng(10)
    constants = dict(filter=ints(rng, (8, 3, 3, 3), i8),
                     filter_scale=rng.uniform(0.01, 0.1, 8).astype(f32))
    compiled = qops.compile("QUANTIZED_LINEAR_CONVOLUTION", **constants,
                            start_padding=(1, 1), end_padding=(1, 1))
    parameters = dict(input_scale=f32(0.05), input_zero_point=u8(128), output_scale=f32(0.3),
                      output_zero_point=u8(128))
    for n_threads in (1, 2, 1):
        image = ints(rng, (1, 3, 9, 9), u8)
        assert np.array_equal(
            compiled(input=image, **parameters, n_threads=n_threads),
            qops.quantized_linear_convolution(input=image, **parameters, **constants,
                                              start_padding=(1, 1), end_padding=(1, 1)))


@pytest.mark.parametrize("shape", [(3, 4), (9, 64)])  # the lean path's sizes and past them
def test_compiled_matmul_takes_slots_by_position_or_keyword(shape):
    rng = np.random.default_rng(11)
    b = ints(rng, (shape[1], 5), i8)
    compiled = qops.compile("QUANTIZED_LINEAR_MATRIX_MULTIPLY", b=b, b_scale=f32(0.02))
    a = ints(rng, shape, u8)
    expected = qops.quantized_linear_matrix_multiply(
        a=a, a_scale=f32(0.03), a_zero_point=u8(7), b=b, b_scale=f32(0.02),
        output_scale=f32(0.4), output_zero_point=u8(128))
    assert np.array_equal(compiled(a, f32(0.03), u8(7), f32(0.4), u8(128)), expected)
    assert np.array_equal(compiled(a, f32(0.03), output_zero_point=u8(128), a_zero_point=u8(7),
                                   output_scale=f32(0.4)), expected)
    with pytest.raises(qops.ValidationError, match="at most 5 positional"):
        compiled(a, f32(0.03), u8(7), f32(0.4), u8(128), u8(1))
    with pytest.raises(qops.ValidationError, match="b_scale is bound at compile time"):
        compiled(a, f32(0.03), output_scale=f32(0.4), b_scale=f32(0.1))
    with pytest.raises(qops.ValidationError, match="a_scale"):
        compiled(a, f32(-1.0), output_scale=f32(0.4))


@pytest.mark.parametrize("a_type, out_type", [(u8, u8), (i8, i8)])
def test_a_call_like_the_last_runs_its_bound_kernel_and_follows_its_data(a_type, out_type,
                                                                        monkeypatch):
    """Past the lean path's size, a call like the last (A of the same dtype
    and shape, the same parameter objects, no out=) runs the kernel bound to
    the plan of the last two calls of that form, skipping the plans: its
    result is the plain function's for each new A (batched, int8 too, and
    not contiguous), every thread count; any other form, forms in turn, or
    an implementation switched off since, take the plans again."""
    from qops.backends import dispatch

    rng = np.random.default_rng(12)
    b = ints(rng, (3, 64, 40), i8)
    compiled = qops.compile("QUANTIZED_LINEAR_MATRIX_MULTIPLY", b=b, b_scale=f32(0.02))
    parameters = dict(a_scale=f32(0.03), a_zero_point=a_type(7), output_scale=f32(0.4),
                      output_zero_point=out_type(3))

    def plain(a):
        return qops.quantized_linear_matrix_multiply(a=a, b=b, b_scale=f32(0.02), **parameters)

    a = ints(rng, (3, 20, 64), a_type)
    compiled(a=a, **parameters)
    assert compiled._binder.bound is None  # a form is bound on its second call in a row
    compiled(a=a, **parameters)
    planned = []
    real_run = compiled._plans.run
    monkeypatch.setattr(compiled._plans, "run",
                        lambda *args, **kwargs: planned.append(1) or real_run(*args, **kwargs))
    for n_threads in (1, 2, None):
        a[...] = ints(rng, a.shape, a_type)
        got = compiled(a=a, **parameters, n_threads=n_threads)
        assert got.dtype == out_type and np.array_equal(got, plain(a))
    reversed_a = ints(rng, (3, 20, 128), a_type)[:, :, ::2]  # not contiguous
    assert np.array_equal(compiled(a=reversed_a, **parameters), plain(reversed_a))
    assert planned == []
    with pytest.raises(qops.ValidationError):
        compiled(a=a, **parameters, n_threads=0)
    assert planned == []  # refused by the thread count's own check
    # Another parameter object (an equal value), another shape: the plans.
    assert np.array_equal(compiled(a=a, **dict(parameters, a_scale=f32(0.03))), plain(a))
    assert len(planned) == 1
    assert np.array_equal(compiled(a=a[:, :10], **parameters), plain(a[:, :10]))
    assert len(planned) == 2
    # Forms in turn (two scale objects of one value): the plans each time,
    # and the bound run is kept.
    bound = compiled._binder.bound
    turns = [dict(parameters, a_scale=f32(0.03)), dict(parameters, a_scale=f32(0.03))]
    for given in turns * 2:
        assert np.array_equal(compiled(a=a, **given), plain(a))
    assert len(planned) == 6 and compiled._binder.bound is bound
    planned.clear()
    assert np.array_equal(compiled(a=a, **parameters), plain(a))  # bound still
    assert planned == []
    # An implementation switched off: the bound run is not taken.
    dispatch.set_enabled("QUANTIZED_LINEAR_MATRIX_MULTIPLY", "kernels", False)
    try:
        assert np.array_equal(compiled(a=a, **parameters), plain(a))
        assert len(planned) == 1
    finally:
        dispatch.set_enabled("QUANTIZED_LINEAR_MATRIX_MULTIPLY", "kernels", True)


@pytest.mark.parametrize("form", ["3 x 3", "1 x 1", "1 x 1, stride 2", "depthwise", "1-d"])
@pytest.mark.parametrize("input_type", [u8, i8])
def test_a_convolution_like_the_last_runs_its_bound_kernel(form, input_type, monkeypatch):
    """The bound kernel of a compiled convolution (the implicit GEMM, also a
    strided 1 x 1's, the pointwise product, the depthwise kernel, a 1-D
    input in its 2-D layout): each new image gives the plain function's
    result, on every thread count, without the plans."""
    from qops.backends import dispatch

    rng = np.random.default_rng(13)
    kernel = {"3 x 3": (3, 3), "depthwise": (3, 3), "1-d": (1, 3)}.get(form, (1, 1))
    groups = 16 if form == "depthwise" else 1
    shape = (2, 16, 16, 16)  # 256 or 64 pixels: whole micro-tiles of columns (pointwise)
    attributes = dict(group_count=groups, strides=(2, 2) if "stride" in form else (1, 1))
    if form == "1-d":
        shape, attributes = (2, 16, 40), dict(group_count=1, strides=(1,))
        kernel = (3,)
    constants = dict(filter=ints(rng, (32 if groups == 1 else 16, 16 // groups) + kernel, i8),
                     filter_scale=rng.uniform(0.01, 0.03, 32 if groups == 1 else 16).astype(f32),
                     bias=rng.integers(-2000, 2000, 32 if groups == 1 else 16).astype(np.int32))
    compiled = qops.compile("QUANTIZED_LINEAR_CONVOLUTION", **constants, **attributes)
    parameters = dict(input_scale=f32(0.05), input_zero_point=input_type(128 if input_type is u8
                                                                           else 0),
                      output_scale=f32(2.0), output_zero_point=u8(128))
    image = ints(rng, shape, input_type)

    def plain(image):
        return qops.quantized_linear_convolution(input=image, **parameters, **constants,
                                                 **attributes)

    compiled(input=image, **parameters)
    compiled(input=image, **parameters)  # the second call of a form binds it
    _, plan, arrays, _, _ = compiled._plans.recent()
    call = dataclasses.replace(plan.template, arrays=dict(arrays, input=image))
    assert dispatch.select(call).name == {"3 x 3": "kernels", "1-d": "kernels",
                                          "1 x 1, stride 2": "kernels",
                                          "depthwise": "depthwise kernels"}.get(
                                              form, "pointwise kernels")
    planned = []
    real_run = compiled._plans.run
    monkeypatch.setattr(compiled._plans, "run",
                        lambda *args, **kwargs: planned.append(1) or real_run(*args, **kwargs))
    for n_threads in (1, 2, None):
        image[...] = ints(rng, shape, input_type)
        got = compiled(input=image, **parameters, n_threads=n_threads)
        assert np.array_equal(got, plain(image)), n_threads
        assert 0.3 < np.mean((got > 0) & (got < 255))  # values, not saturation, compared
    assert planned == []
    assert np.array_equal(compiled(input=image, **dict(parameters, output_scale=f32(2.0))),
                          plain(image))
    assert planned == [1]


def _pointwise_constants(rng, channels, out_channels):
    """Every slot but the image of a 1 x 1 convolution, per-channel scales."""
    return dict(filter=ints(rng, (out_channels, channels, 1, 1), i8),
                filter_scale=rng.uniform(0.01, 0.03, out_channels).astype(f32),
                bias=rng.integers(-2000, 2000, out_channels).astype(np.int32),
                input_scale=f32(0.05), input_zero_point=u8(120), output_scale=f32(2.0),
                output_zero_point=u8(128))


def test_a_data_runner_takes_the_bound_run_and_falls_back_to_the_call(monkeypatch):
    """data_runner (a session's way in): calls of the bound form go to the
    bound kernel run without the plans, any other form (another shape or
    dtype) through the operator's call, every result the plain function's;
    an operator whose calls bring parameters has none."""
    rng = np.random.default_rng(5)
    constants = _pointwise_constants(rng, 16, 24)
    compiled = qops.compile("QUANTIZED_LINEAR_CONVOLUTION", **constants)
    run = compiled.data_runner()

    def plain(image):
        return qops.quantized_linear_convolution(input=image, **constants)

    planned = []
    real_run = compiled._plans.run
    monkeypatch.setattr(compiled._plans, "run",
                        lambda *args, **kwargs: planned.append(1) or real_run(*args, **kwargs))
    images = [ints(rng, (1, 16, 8, 8), u8) for _ in range(4)]
    for n_threads, image in zip((1, 1, 2, 2), images):
        assert np.array_equal(run(n_threads, image), plain(image))
    assert len(planned) == 2  # the first two calls bind the form
    other = ints(rng, (1, 16, 4, 16), u8)
    assert np.array_equal(run(1, other), plain(other))
    assert len(planned) == 3
    with pytest.raises(qops.ValidationError, match="input"):
        run(1, ints(rng, (1, 16, 8, 8), i8))
    open_scale = qops.compile("QUANTIZED_LINEAR_CONVOLUTION",
                              **{k: v for k, v in constants.items() if k != "input_scale"})
    assert open_scale.data_runner() is None


def test_a_channels_last_runner_follows_each_image_s_form():
    """channels_last_runner keeps its last form's kernel run: images of two
    shapes of the same bytes, alternating (and after the implementations
    are switched), each give the plain function's values for their own
    shape, in and out channels-last."""
    from qops.backends import dispatch

    rng = np.random.default_rng(8)
    constants = _pointwise_constants(rng, 64, 64)
    compiled = qops.compile("QUANTIZED_LINEAR_CONVOLUTION", **constants)
    run = compiled.channels_last_runner(True, True)

    def plain(image):
        first = np.ascontiguousarray(image.transpose(0, 3, 1, 2))
        return qops.quantized_linear_convolution(input=first, **constants).transpose(0, 2, 3, 1)

    for step in range(6):
        shape = (1, 8, 4, 64) if step % 2 else (1, 4, 8, 64)
        image = ints(rng, shape, u8)
        if step == 4:
            dispatch.set_enabled("QUANTIZED_LINEAR_CONVOLUTION", "kernels", False)
        try:
            got = run(2, image)
        finally:
            dispatch.set_enabled("QUANTIZED_LINEAR_CONVOLUTION", "kernels", True)
        assert got.shape == shape and np.array_equal(got, plain(image))
