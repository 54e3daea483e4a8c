"""The plan cache: a signature is validated once; values are checked every call."""

import numpy as np
import pytest
from conftest import run_in_threads

import qops
from qops import reference
from qops.ops import (
    convolution as convolution_front,
)
from qops.ops import (
    matmul as matmul_front,
)
from qops.ops import plans as _plans

u8, i8 = np.uint8, np.int8


def matmul_slots(rng, rows=5, depth=7, columns=3):
    return dict(a=rng.integers(0, 256, (rows, depth), dtype=u8), a_scale=np.float32(0.02),
                a_zero_point=u8(128), b=rng.integers(-128, 128, (depth, columns), dtype=i8),
                b_scale=np.float32(0.01), output_scale=np.float32(0.05),
                output_zero_point=u8(120))


def expected_matmul(slots):
    full = dict(dict(b_zero_point=None), **slots)
    return reference.quantized_linear_matrix_multiply(**full, output_dtype=np.dtype(u8))


@pytest.fixture(autouse=True)
def fresh_caches():
    matmul_front.PLANS.clear()
    matmul_front.BINDER.clear()
    convolution_front.PLANS.clear()
    if matmul_front.FAST.get() is not None:
        matmul_front.FAST.get().clear()
    yield


def test_a_repeated_signature_reuses_its_plan_and_still_computes_each_call():
    rng = np.random.default_rng(0)
    first, second = matmul_slots(rng), matmul_slots(rng)
    got_first = qops.quantized_linear_matrix_multiply(**first)
    assert len(matmul_front.PLANS) == 1
    got_second = qops.quantized_linear_matrix_multiply(**second)
    assert len(matmul_front.PLANS) == 1
    assert np.array_equal(got_first, expected_matmul(first))
    assert np.array_equal(got_second, expected_matmul(second))
    assert not np.array_equal(got_first, got_second)


@pytest.mark.parametrize("bad", [0.0, -1.0, np.nan, np.inf])
def test_scale_values_are_checked_on_a_cached_plan(bad):
    rng = np.random.default_rng(1)
    slots = matmul_slots(rng)
    qops.quantized_linear_matrix_multiply(**slots)
    with pytest.raises(qops.ValidationError, match="a_scale.*positive and finite"):
        qops.quantized_linear_matrix_multiply(**dict(slots, a_scale=np.float32(bad)))
    assert len(matmul_front.PLANS) == 1


def test_an_overflowing_multiplier_is_refused_on_a_cached_plan():
    rng = np.random.default_rng(2)
    slots = matmul_slots(rng)
    qops.quantized_linear_matrix_multiply(**slots)
    huge = dict(slots, a_scale=np.float32(3e38), b_scale=np.float32(2.0))
    with pytest.raises(qops.ValidationError, match="overflows float32"):
        qops.quantized_linear_matrix_multiply(**huge)


def test_per_row_scales_are_checked_element_by_element_on_a_cached_plan():
    rng = np.random.default_rng(3)
    slots = dict(matmul_slots(rng), a_scale=np.full((5, 1), 0.02, np.float32))
    qops.quantized_linear_matrix_multiply(**slots)
    bad = slots["a_scale"].copy()
    bad[3, 0] = -0.5
    with pytest.raises(qops.ValidationError, match="1 of 5 elements"):
        qops.quantized_linear_matrix_multiply(**dict(slots, a_scale=bad))


def test_scales_changed_in_place_after_passing_are_checked_again():
    """A plan skips the checks only for the very scale values it last passed:
    a per-channel scale changed in place to zero, then back, is refused, then
    accepted."""
    rng = np.random.default_rng(4)
    slots = dict(input=rng.integers(0, 256, (1, 3, 5, 5), dtype=u8), input_scale=0.1,
                 filter=rng.integers(-128, 128, (3, 1, 3, 3), dtype=i8),
                 filter_scale=np.full(3, 0.1, np.float32), output_scale=0.5)
    attributes = dict(group_count=3)
    first = qops.quantized_linear_convolution(**slots, **attributes)
    slots["filter_scale"][1] = 0.0
    with pytest.raises(qops.ValidationError, match="filter_scale.*positive and finite"):
        qops.quantized_linear_convolution(**slots, **attributes)
    slots["filter_scale"][1] = 0.1
    assert np.array_equal(qops.quantized_linear_convolution(**slots, **attributes), first)
    compiled = qops.compile("QUANTIZED_LINEAR_CONVOLUTION", filter=slots["filter"],
                            filter_scale=slots["filter_scale"], **attributes)
    compiled(input=slots["input"], input_scale=0.1, output_scale=0.5)
    with pytest.raises(qops.ValidationError, match="output_scale.*positive and finite"):
        compiled(input=slots["input"], input_scale=0.1, output_scale=np.float32(np.nan))
    with pytest.raises(qops.ValidationError, match="overflows float32"):
        compiled(input=slots["input"], input_scale=np.float32(3e38), output_scale=1e-30)


def test_out_is_checked_on_a_cached_plan():
    rng = np.random.default_rng(4)
    slots = matmul_slots(rng)
    out = np.empty((5, 3), u8)
    qops.quantized_linear_matrix_multiply(**slots, out=out)
    assert np.array_equal(out, expected_matmul(slots))
    shared = slots["a"].reshape(-1).copy()
    with pytest.raises(qops.ValidationError, match="out overlaps a"):
        qops.quantized_linear_matrix_multiply(**dict(slots, a=shared.reshape(5, 7)),
                                              out=shared[:15].reshape(5, 3))
    with pytest.raises(qops.DTypeValidationError):
        qops.quantized_linear_matrix_multiply(**slots, out=np.empty((5, 3), i8))


def test_a_signature_that_fails_validation_is_never_cached():
    rng = np.random.default_rng(5)
    slots = dict(matmul_slots(rng), a=rng.integers(0, 256, (5, 6), dtype=u8))
    for _ in range(2):
        with pytest.raises(qops.ValidationError, match="K = 6"):
            qops.quantized_linear_matrix_multiply(**slots)
    assert len(matmul_front.PLANS) == 0


def test_feature_levels_get_plans_of_their_own():
    rng = np.random.default_rng(6)
    slots = matmul_slots(rng)
    qops.quantized_linear_matrix_multiply(**slots)
    with pytest.raises(qops.ValidationError, match="DML_FEATURE_LEVEL_2_1"):
        qops.quantized_linear_matrix_multiply(**slots, feature_level="2_1")


def test_python_integers_take_the_full_path_every_time():
    """An integer zero point's range is a value check: such calls are not keyed."""
    rng = np.random.default_rng(7)
    slots = dict(matmul_slots(rng), output_zero_point=7)
    assert _plans.signature(slots, {"output_dtype": None}, None) is None
    qops.quantized_linear_matrix_multiply(**slots)
    with pytest.raises(qops.ValidationError, match="output_zero_point is 300"):
        qops.quantized_linear_matrix_multiply(**dict(slots, output_zero_point=300))
    assert len(matmul_front.PLANS) == 0


def test_convolution_attributes_are_part_of_the_signature():
    rng = np.random.default_rng(8)
    slots = dict(input=rng.integers(0, 256, (1, 2, 6, 6), dtype=u8), input_scale=0.1,
                 filter=rng.integers(-128, 128, (3, 2, 3, 3), dtype=i8), filter_scale=0.1,
                 output_scale=0.5)
    full = dict(input_zero_point=None, filter_zero_point=None, bias=None,
                output_zero_point=None, dilations=(1, 1), group_count=1, output_dtype=np.dtype(u8))
    for strides in ((1, 1), [2, 2], (1, 1)):
        got = qops.quantized_linear_convolution(**slots, strides=strides)
        expected = reference.quantized_linear_convolution(
            **slots, **full, strides=tuple(strides), start_padding=(0, 0), end_padding=(0, 0))
        assert np.array_equal(got, expected)
    assert len(convolution_front.PLANS) == 2


def test_the_cache_is_bounded():
    rng = np.random.default_rng(9)
    for depth in range(1, _plans.CAPACITY + 10):
        qops.quantized_linear_matrix_multiply(**matmul_slots(rng, 2, depth, 2))
    assert 0 < len(matmul_front.PLANS) <= _plans.CAPACITY


def test_concurrent_calls_on_one_plan_agree():
    rng = np.random.default_rng(10)
    cases = [matmul_slots(rng, 40, 50, 30) for _ in range(8)]
    expected = [expected_matmul(slots) for slots in cases]
    failures = []

    def work(index):
        for _ in range(20):
            got = qops.quantized_linear_matrix_multiply(**cases[index], n_threads=1)
            if not np.array_equal(got, expected[index]):
                failures.append(index)

    run_in_threads(work, len(cases))
    assert failures == []
    assert len(matmul_front.PLANS) == 1


def test_new_parameter_values_on_one_plan_are_used():
    """Scales and zero points change between calls of one signature: each call
    requantizes with its own values (derived vectors are keyed by value)."""
    rng = np.random.default_rng(11)
    slots = matmul_slots(rng)
    seen = set()
    for a_zero, scale, out_zero in [(128, 0.05, 120), (3, 0.05, 120), (128, 0.07, 120),
                                    (128, 0.05, 9), (128, 0.05, 120)]:
        call = dict(slots, a_zero_point=u8(a_zero), output_scale=np.float32(scale),
                    output_zero_point=u8(out_zero))
        got = qops.quantized_linear_matrix_multiply(**call)
        assert np.array_equal(got, expected_matmul(call))
        seen.add(got.tobytes())
    assert len(seen) == 4
    assert len(matmul_front.PLANS) == 1


def test_new_convolution_parameters_on_one_plan_are_used():
    rng = np.random.default_rng(12)
    slots = dict(input=rng.integers(0, 256, (1, 3, 5, 5), dtype=u8), input_scale=0.1,
                 filter=rng.integers(-128, 128, (4, 3, 3, 3), dtype=i8),
                 filter_scale=np.full(4, 0.1, np.float32), output_scale=0.5)
    full = dict(input_zero_point=None, filter_zero_point=None, output_zero_point=None,
                strides=(1, 1), dilations=(1, 1), start_padding=(0, 0), end_padding=(0, 0),
                group_count=1, output_dtype=np.dtype(u8))
    outputs = set()
    for bias, filter_scale in [((1, 2, 3, 4), 0.1), ((9, 2, 3, 4), 0.1), ((1, 2, 3, 4), 0.2)]:
        call = dict(slots, bias=np.array(bias, np.int32),
                    filter_scale=np.full(4, filter_scale, np.float32))
        got = qops.quantized_linear_convolution(**call)
        shaped = dict(call, bias=call["bias"].reshape(1, 4, 1, 1),
                      filter_scale=call["filter_scale"].reshape(1, 4, 1, 1))
        expected = reference.quantized_linear_convolution(**dict(full, **shaped))
        assert np.array_equal(got, expected)
        outputs.add(got.tobytes())
    assert len(outputs) == 3


def test_a_bias_changed_in_place_between_calls_is_not_remembered():
    """Derived vectors are copies: a caller's array changed in place after a
    call must not leak into a later call whose bias has the old values."""
    rng = np.random.default_rng(13)
    slots = dict(input=rng.integers(0, 256, (1, 2, 4, 4), dtype=u8), input_scale=0.1,
                 filter=rng.integers(-128, 128, (8, 2, 1, 1), dtype=i8), filter_scale=0.1,
                 output_scale=2.0)
    original = np.arange(8, dtype=np.int32) * 2000
    bias = original.copy()
    first = qops.quantized_linear_convolution(**slots, bias=bias)
    bias[:] = -original
    second = qops.quantized_linear_convolution(**slots, bias=bias)
    third = qops.quantized_linear_convolution(**slots, bias=original.copy())
    assert not np.array_equal(first, second)
    assert np.array_equal(third, first)


def test_packed_4_bit_values_key_the_value_cache():
    """A Packed4Bit zero point is a value slot like any other: keyed by its
    bytes, so a second call with other nibbles uses them."""
    import ml_dtypes

    x = np.array([-8, -1, 0, 7, 3, 5], ml_dtypes.int4)
    packed = qops.Packed4Bit(qops.pack_4bit(x), "int4", x.shape)
    scale = np.array([0.5], np.float32)
    for zero in (2, -3, 2):
        zp = np.array([zero], ml_dtypes.int4)
        packed_zero = qops.Packed4Bit(qops.pack_4bit(zp), "int4", (1,))
        got = qops.dequantize_linear(packed, scale, packed_zero, axis=0)
        expected = (x.astype(np.float32) - zero) * np.float32(0.5)
        assert np.array_equal(got, expected), zero


def test_compiled_slots_in_any_keyword_order_are_planned_apart():
    """A compiled operator's plans key calls by slot: keywords in another
    order, or another optional slot given, are another signature."""
    rng = np.random.default_rng(14)
    a = rng.integers(0, 256, (5, 7), dtype=u8)
    compiled = qops.compile("QUANTIZED_LINEAR_MATRIX_MULTIPLY",
                            b=rng.integers(-128, 128, (7, 3), dtype=i8), b_scale=0.01)
    first = compiled(a=a, a_scale=0.02, output_scale=0.05, a_zero_point=u8(100))
    second = compiled(a=a, a_scale=0.02, output_scale=0.05, output_zero_point=u8(100))
    third = compiled(output_zero_point=u8(100), output_scale=0.05, a_scale=0.02, a=a)
    assert np.array_equal(second, third) and not np.array_equal(first, second)
    fresh = qops.compile("QUANTIZED_LINEAR_MATRIX_MULTIPLY", b=compiled._constants["b"],
                         b_scale=0.01)
    assert np.array_equal(second, fresh(a=a, a_scale=0.02, output_scale=0.05,
                                        output_zero_point=u8(100)))


def test_a_warm_call_refuses_an_overflowing_float_scale_as_a_cold_one_does():
    import warnings

    rng = np.random.default_rng(15)
    slots = matmul_slots(rng)
    qops.quantized_linear_matrix_multiply(**dict(slots, a_scale=0.02))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(qops.ValidationError, match="a_scale has an infinite value"):
            qops.quantized_linear_matrix_multiply(**dict(slots, a_scale=1e40))


def test_scalar_parameters_are_remembered_by_object_and_never_by_place():
    """A plan keeps the array it made of a NumPy scalar or a Python float,
    by that object: the next object in the same slot, equal or not, is its
    own value; the same object again reuses the array, which is read-only."""
    rng = np.random.default_rng(16)
    base = dict(input=rng.integers(0, 256, (1, 3, 6, 6), dtype=u8), input_scale=np.float32(0.1),
                input_zero_point=u8(120), filter=rng.integers(-128, 128, (4, 3, 3, 3), dtype=i8),
                filter_scale=np.float32(0.05), output_zero_point=u8(100))
    full = dict(filter_zero_point=None, bias=None, strides=(1, 1), dilations=(1, 1),
                start_padding=(0, 0), end_padding=(0, 0), group_count=1,
                output_dtype=np.dtype(u8))
    results = {}
    scales = [np.float32(0.25), np.float32(0.5), 0.75, np.float32(0.25), 0.75]
    for scale in scales * 2:
        got = qops.quantized_linear_convolution(**base, output_scale=scale)
        expected = reference.quantized_linear_convolution(**full, **base, output_scale=scale)
        assert np.array_equal(got, expected), scale
        results.setdefault(float(scale), got.tobytes())
        assert results[float(scale)] == got.tobytes()
    assert len(results) == 3 and len(convolution_front.PLANS) == 2  # float32 and float scales
    remembered = [last for plan in convolution_front.PLANS._plans.values()
                  for last in plan.scalars.values()]
    assert remembered and all(not array.flags.writeable for _, array, _ in remembered
                              if isinstance(array, np.ndarray))


def test_a_bad_scalar_given_again_is_refused_again():
    rng = np.random.default_rng(17)
    slots = dict(input=rng.integers(0, 256, (1, 2, 4, 4), dtype=u8), input_scale=np.float32(0.1),
                 filter=rng.integers(-128, 128, (3, 2, 1, 1), dtype=i8), filter_scale=0.1)
    qops.quantized_linear_convolution(**slots, output_scale=np.float32(0.5))
    for bad in (np.float32(np.nan), np.float32(0.0), -2.0):
        for _ in range(3):
            with pytest.raises(qops.ValidationError, match="output_scale"):
                qops.quantized_linear_convolution(**slots, output_scale=bad)


def test_a_plain_call_like_the_last_follows_its_data_and_attributes():
    """The recent-call shortcut of the plain functions: new data (B changed
    in place included) and new attributes with the same parameter objects
    give the exact result each time; a parameter object changed, or a slot
    left out, takes the validating path."""
    rng = np.random.default_rng(12)
    scales = dict(input_scale=np.float32(0.05), input_zero_point=np.uint8(128),
                  filter_scale=np.float32(0.02), output_scale=np.float32(0.3),
                  output_zero_point=np.uint8(128))
    image = rng.integers(0, 256, (1, 4, 10, 10), dtype=np.uint8)
    weights = rng.integers(-128, 128, (6, 4, 3, 3), dtype=np.int8)
    for strides in ((1, 1), (1, 1), (2, 1), (2, 1)):
        image[...] = rng.integers(0, 256, image.shape, dtype=np.uint8)
        weights[...] = rng.integers(-128, 128, weights.shape, dtype=np.int8)  # in place
        got = qops.quantized_linear_convolution(input=image, filter=weights, strides=strides,
                                                **scales)
        expected = reference.quantized_linear_convolution(
            image, *(np.reshape(scales[k], (1,) * 4) for k in ("input_scale", "input_zero_point")),
            weights, np.reshape(scales["filter_scale"], (1,) * 4), None, None,
            *(np.reshape(scales[k], (1,) * 4) for k in ("output_scale", "output_zero_point")),
            strides=strides, dilations=(1, 1), start_padding=(0, 0), end_padding=(0, 0),
            group_count=1, output_dtype=np.dtype(np.uint8))
        assert np.array_equal(got, expected), strides
    a = rng.integers(0, 256, (40, 64), dtype=np.uint8)
    b = rng.integers(-128, 128, (64, 50), dtype=np.int8)
    parameters = dict(a_scale=np.float32(0.03), a_zero_point=np.uint8(100),
                      b_scale=np.float32(0.02), output_scale=np.float32(0.5),
                      output_zero_point=np.uint8(128))
    first = qops.quantized_linear_matrix_multiply(a=a, b=b, **parameters)
    b[...] = -b
    second = qops.quantized_linear_matrix_multiply(a=a, b=b, **parameters)
    assert np.array_equal(second, reference.quantized_linear_matrix_multiply(
        a, *(np.reshape(parameters[k], (1, 1)) for k in ("a_scale", "a_zero_point")), b,
        np.reshape(parameters["b_scale"], (1, 1)), None,
        *(np.reshape(parameters[k], (1, 1)) for k in ("output_scale", "output_zero_point")),
        output_dtype=np.dtype(np.uint8)))
    assert not np.array_equal(first, second)
    with pytest.raises(qops.ValidationError, match="b_zero_point"):
        qops.quantized_linear_matrix_multiply(a=a, b=b, b_zero_point=np.uint8(1), **parameters)
    without = dict(parameters, output_zero_point=None)
    assert qops.quantized_linear_matrix_multiply(a=a, b=b, **without).dtype == np.uint8


@pytest.mark.parametrize("a_type, b_type", [(u8, i8), (i8, u8), (i8, i8), (u8, u8)])
def test_a_plain_product_like_the_last_runs_its_bound_kernel_and_follows_its_data(
        a_type, b_type, monkeypatch):
    """Past the lean path's size, a plain product like the last (A and B of
    the same dtypes and shapes, the same parameter objects; no out=,
    output_dtype or feature level) runs the kernel bound to the plan of the
    last two calls of that form: each new A and B (changed in place, new,
    not contiguous) give the reference's result on every thread count
    without the plans; any other form, or an implementation switched off
    since, takes the plans again."""
    from qops.backends import dispatch

    rng = np.random.default_rng(21)

    def ints(shape, dtype):
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max + 1, shape, dtype=dtype)

    parameters = dict(a_scale=np.float32(0.03), a_zero_point=a_type(7), b_scale=np.float32(0.02),
                      b_zero_point=b_type(-3 if b_type is i8 else 130),
                      output_scale=np.float32(0.4), output_zero_point=u8(128))

    def expected(a, b, **given):
        ones = {name: np.reshape(value, (1, 1, -1))
                for name, value in dict(parameters, **given).items()}
        return reference.quantized_linear_matrix_multiply(
            a, ones["a_scale"], ones["a_zero_point"], b, ones["b_scale"], ones["b_zero_point"],
            ones["output_scale"], ones["output_zero_point"], output_dtype=np.dtype(u8))

    def product(a, b, **given):
        return qops.quantized_linear_matrix_multiply(a=a, b=b, **dict(parameters, **given))

    a, b = ints((3, 20, 64), a_type), ints((3, 64, 40), b_type)
    product(a, b)
    assert matmul_front.BINDER.bound is None  # a form is bound on its second call in a row
    product(a, b)
    assert matmul_front.BINDER.bound is not None
    planned = []
    real_run = matmul_front.PLANS.run
    monkeypatch.setattr(matmul_front.PLANS, "run",
                        lambda *args, **kwargs: planned.append(1) or real_run(*args, **kwargs))
    for n_threads in (1, 2, None):
        a[...], b[...] = ints(a.shape, a_type), ints(b.shape, b_type)
        got = product(a, b, n_threads=n_threads)
        assert got.dtype == u8 and np.array_equal(got, expected(a, b)), n_threads
        assert 0.3 < np.mean((got > 0) & (got < 255))  # values, not saturation, compared
    strided_a = ints((3, 20, 128), a_type)[:, :, ::2]
    strided_b = ints((3, 64, 80), b_type)[:, :, ::2]
    assert np.array_equal(product(strided_a, strided_b), expected(strided_a, strided_b))
    assert planned == []
    with pytest.raises(qops.ValidationError, match="n_threads"):
        product(a, b, n_threads=0)
    assert planned == []  # refused by the thread count's own check
    # Another parameter object (an equal value, or each parameter another
    # value), another shape, out=, an output dtype or a feature level
    # given: the plans.
    assert np.array_equal(product(a, b, a_scale=np.float32(0.03)), expected(a, b))
    others = dict(a_scale=np.float32(0.05), a_zero_point=a_type(9), b_scale=np.float32(0.01),
                  b_zero_point=b_type(5), output_scale=np.float32(0.3),
                  output_zero_point=u8(100))
    for name, value in others.items():
        assert np.array_equal(product(a, b, **{name: value}), expected(a, b, **{name: value}))
        assert np.array_equal(product(a, b), expected(a, b)), name  # still bound
    assert np.array_equal(product(a[:, :10], b), expected(a[:, :10], b))
    out = np.empty((3, 20, 40), u8)
    product(a, b, out=out)
    assert np.array_equal(out, expected(a, b))
    assert np.array_equal(product(a, b, output_dtype=u8), expected(a, b))
    assert np.array_equal(product(a, b, feature_level="6_0"), expected(a, b))
    assert len(planned) == 11  # the bound form never took the plans
    planned.clear()
    assert np.array_equal(product(a, b), expected(a, b))  # bound still
    assert planned == []
    dispatch.set_enabled("QUANTIZED_LINEAR_MATRIX_MULTIPLY", "kernels", False)
    try:
        assert np.array_equal(product(a, b), expected(a, b))
        assert planned == [1]
    finally:
        dispatch.set_enabled("QUANTIZED_LINEAR_MATRIX_MULTIPLY", "kernels", True)
    # An array parameter may change in place between calls: never bound.
    column_scales = rng.uniform(0.01, 0.03, (1, 1, 40)).astype(np.float32)
    for _ in range(3):
        assert np.array_equal(product(a, b, b_scale=column_scales),
                              expected(a, b, b_scale=column_scales))
        column_scales *= 1.5


def test_the_recent_call_does_not_keep_the_callers_data_alive():
    """What the recent-call shortcut keeps (plans, parameters, kernel vectors)
    holds no reference to a call's data arrays."""
    import gc
    import weakref

    rng = np.random.default_rng(13)
    a = rng.integers(0, 256, (40, 64), dtype=np.uint8)
    b = rng.integers(-128, 128, (64, 50), dtype=np.int8)
    parameters = dict(a_scale=np.float32(0.03), b_scale=np.float32(0.02),
                      output_scale=np.float32(0.5))
    qops.quantized_linear_matrix_multiply(a=a, b=b, **parameters)
    compiled = qops.compile("QUANTIZED_LINEAR_MATRIX_MULTIPLY", b=b, b_scale=np.float32(0.02))
    compiled(a=a, a_scale=parameters["a_scale"], output_scale=parameters["output_scale"])
    watched = weakref.ref(a), weakref.ref(b)
    del a, b
    gc.collect()
    assert watched[0]() is None and watched[1]() is None


def test_array_parameters_are_remembered_by_their_bytes(monkeypatch):
    """Per-channel scales, zero points and a bias given again with the same
    bytes (the same arrays, or equal copies) take the recent-call shortcut;
    changed in place, or new values, they take the validating path and are
    used, and bad ones are refused there."""
    rng = np.random.default_rng(21)
    image = rng.integers(0, 256, (1, 6, 9, 9), dtype=u8)
    slots = dict(input=image, input_scale=np.float32(0.04), input_zero_point=u8(120),
                 filter=rng.integers(-128, 128, (6, 1, 3, 3), dtype=i8),
                 filter_scale=np.linspace(0.01, 0.03, 6).astype(np.float32),
                 bias=rng.integers(-3000, 3000, 6).astype(np.int32),
                 output_scale=np.float32(0.25), output_zero_point=u8(128))
    attributes = dict(start_padding=(1, 1), end_padding=(1, 1), group_count=6)

    def expected():
        full = {name: value if name in ("input", "filter") or value is None
                else np.reshape(value, (1, -1, 1, 1) if np.ndim(value) else (1,) * 4)
                for name, value in slots.items()}
        return reference.quantized_linear_convolution(
            **full, filter_zero_point=None, strides=(1, 1), dilations=(1, 1),
            **attributes, output_dtype=np.dtype(u8))

    def run():
        return qops.quantized_linear_convolution(**slots, **attributes)

    assert np.array_equal(run(), expected())
    signatures = []
    real_signature = _plans.signature
    monkeypatch.setattr(_plans, "signature",
                        lambda *args: signatures.append(1) or real_signature(*args))
    for copies in (False, True, False):
        if copies:
            slots.update(filter_scale=slots["filter_scale"].copy(), bias=slots["bias"].copy())
        image[...] = rng.integers(0, 256, image.shape, dtype=u8)
        assert np.array_equal(run(), expected())
    assert signatures == []  # the shortcut each time
    slots["filter_scale"][2] *= 3
    assert np.array_equal(run(), expected()) and len(signatures) == 1
    slots["bias"][4] = -slots["bias"][4] - 1
    assert np.array_equal(run(), expected()) and len(signatures) == 2
    slots["filter_scale"][0] = 0.0
    with pytest.raises(qops.ValidationError, match="filter_scale.*positive and finite"):
        run()
    slots["filter_scale"][0] = 0.02
    assert np.array_equal(run(), expected())


def test_a_call_into_out_like_the_last_takes_the_shortcut_and_checks_out(monkeypatch):
    """Calls into ``out=`` that repeat the last call's form skip validation
    but not the checks of ``out``: wrong shape, dtype, layout, a read-only
    array and one overlapping an input are refused as on any cached plan."""
    rng = np.random.default_rng(22)
    a = rng.integers(0, 256, (48, 64), dtype=u8)
    b = rng.integers(-128, 128, (64, 40), dtype=i8)
    parameters = dict(a_scale=np.float32(0.03), a_zero_point=u8(100), b_scale=np.float32(0.02),
                      output_scale=np.float32(0.5), output_zero_point=u8(128))
    out = np.empty((48, 40), u8)
    qops.quantized_linear_matrix_multiply(a=a, b=b, **parameters, out=out)
    signatures = []
    real_signature = _plans.signature
    monkeypatch.setattr(_plans, "signature",
                        lambda *args: signatures.append(1) or real_signature(*args))
    for _ in range(3):
        a[...] = rng.integers(0, 256, a.shape, dtype=u8)
        got = qops.quantized_linear_matrix_multiply(a=a, b=b, **parameters, out=out)
        expected = reference.quantized_linear_matrix_multiply(
            a, *(np.reshape(parameters[k], (1, 1)) for k in ("a_scale", "a_zero_point")), b,
            np.reshape(parameters["b_scale"], (1, 1)), None,
            *(np.reshape(parameters[k], (1, 1)) for k in ("output_scale", "output_zero_point")),
            output_dtype=np.dtype(u8))
        assert got is out and np.array_equal(out, expected)
    assert signatures == []
    read_only = np.empty((48, 40), u8)
    read_only.flags.writeable = False
    overlapping = np.empty((48 * 40 + 64 * 40,), u8)
    for bad, message in ((np.empty((40, 48), u8), "out has shape"),
                         (np.empty((48, 40), i8), "out has dtype"),
                         (np.empty((40, 48), u8).T, "C-contiguous"),
                         (read_only, "read-only")):
        with pytest.raises(qops.ValidationError, match=message):
            qops.quantized_linear_matrix_multiply(a=a, b=b, **parameters, out=bad)
    shared_a = overlapping[:48 * 64].reshape(48, 64)
    shared_a[...] = a
    with pytest.raises(qops.ValidationError, match="out overlaps a"):
        qops.quantized_linear_matrix_multiply(a=shared_a, b=b, **parameters,
                                              out=overlapping[:48 * 40].reshape(48, 40))


def test_a_recent_call_refuses_out_over_any_array_the_caller_gave():
    """The recent-call shortcut checks ``out=`` for overlap against the
    caller's arrays only (its other arrays were made from scalars): the
    data and an array parameter given again with the same bytes are still
    caught, before anything is written."""
    rng = np.random.default_rng(23)
    a = rng.integers(0, 256, (1, 8), dtype=u8)
    b = rng.integers(0, 256, (1, 8), dtype=u8)
    b_scale = np.full((1, 1), 0.05, np.float32)
    parameters = dict(a_scale=np.float32(0.03), a_zero_point=u8(120), b_zero_point=u8(130),
                      output_scale=np.float32(0.07), output_zero_point=u8(128))

    def add(**changed):
        slots = dict(dict(a=a, b=b, b_scale=b_scale, **parameters), **changed)
        return qops.element_wise_quantized_linear_add(**slots)

    expected = reference.element_wise_quantized_linear_add(
        a, *(np.reshape(parameters[k], (1, 1)) for k in ("a_scale", "a_zero_point")), b,
        b_scale, np.reshape(parameters["b_zero_point"], (1, 1)),
        *(np.reshape(parameters[k], (1, 1)) for k in ("output_scale", "output_zero_point")),
        output_dtype=np.dtype(u8))
    out = np.empty((1, 8), u8)
    for _ in range(2):  # the second call is the recent one
        assert np.array_equal(add(out=out), expected)
    shared = np.empty(24, u8)
    shared[:8] = b.reshape(-1)
    with pytest.raises(qops.ValidationError, match="out overlaps b"):
        add(b=shared[:8].reshape(1, 8), out=shared[4:12].reshape(1, 8))
    assert np.array_equal(shared[:8], b.reshape(-1))
    # b_scale's bytes inside out: the same bytes as the remembered b_scale.
    shared[12:16] = b_scale.view(u8).reshape(-1)
    scale_in_out = shared[12:16].view(np.float32).reshape(1, 1)
    with pytest.raises(qops.ValidationError, match="out overlaps b_scale"):
        add(b_scale=scale_in_out, out=shared[8:16].reshape(1, 8))
    assert scale_in_out[0, 0] == np.float32(0.05)
    assert np.array_equal(add(out=out), expected)


def test_the_integer_operators_take_the_shortcut_and_follow_their_data(monkeypatch):
    """CONVOLUTION_INTEGER, MATRIX_MULTIPLY_INTEGER and
    MATRIX_MULTIPLY_INTEGER_TO_FLOAT called like the last call (the same
    zero-point and scale objects, new data of the same form) skip the
    signature and give each call's exact result; a bias changed in place is
    used, and 32-bit operands whose new values could reach 2**53 are refused
    as on a cold call (the implementations check their values each call)."""
    rng = np.random.default_rng(31)
    image = rng.integers(0, 256, (1, 3, 7, 7), dtype=u8)
    weights = rng.integers(-128, 128, (4, 3, 3, 3), dtype=i8)
    image_zero, weights_zero = u8(120), i8(3)
    a = rng.integers(-128, 128, (5, 24), dtype=i8)
    b = rng.integers(-128, 128, (24, 6), dtype=i8)
    a_zero, b_zero = i8(-4), i8(7)
    wide_a = rng.integers(-1000, 1000, (5, 24)).astype(np.int32)
    wide_b = rng.integers(-1000, 1000, (24, 6)).astype(np.int32)
    a_scale, b_scale = np.float32(0.5), np.float32(0.25)
    bias = rng.standard_normal(6).astype(np.float32)

    def run_all():
        return (qops.convolution_integer(image, image_zero, weights, weights_zero),
                qops.matrix_multiply_integer(a, a_zero, b, b_zero),
                qops.matrix_multiply_integer_to_float(wide_a, a_scale, None, wide_b, b_scale,
                                                      None, bias))

    def expected():
        return (reference.convolution_integer(
                    image, np.reshape(image_zero, (1,) * 4), weights,
                    np.reshape(weights_zero, (1,) * 4), strides=(1, 1), dilations=(1, 1),
                    start_padding=(0, 0), end_padding=(0, 0), group_count=1),
                (a.astype(np.int64) - int(a_zero)) @ (b.astype(np.int64) - int(b_zero)),
                reference.matrix_multiply_integer_to_float(
                    wide_a, np.reshape(a_scale, (1, 1)), None, wide_b,
                    np.reshape(b_scale, (1, 1)), None, bias))

    def check():
        for got, want in zip(run_all(), expected()):
            assert got.dtype == want.dtype or want.dtype == np.int64
            assert np.array_equal(got, want)

    check()
    signatures = []
    real_signature = _plans.signature
    monkeypatch.setattr(_plans, "signature",
                        lambda *args: signatures.append(1) or real_signature(*args))
    for _ in range(2):
        for array in (image, weights, a, b, wide_a, wide_b):
            array[...] = rng.integers(-100, 100, array.shape).astype(array.dtype)
        check()
    bias[...] = -bias  # in place: remembered by its bytes, so validated again
    check()
    assert len(signatures) == 1  # the bias' call alone took the validating path
    wide_a[...] = np.iinfo(np.int32).max
    wide_b[...] = np.iinfo(np.int32).min
    with pytest.raises(qops.ValidationError, match="2\\*\\*53"):
        run_all()
