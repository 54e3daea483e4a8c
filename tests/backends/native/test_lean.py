"""The lean path of small matrix multiplies (qops/ops/_lean.pyx).

A call whose signature was validated before runs through the lean path with
value checks only.  These tests hold it to the same results as the NumPy
reference and onnxruntime, and to the same errors as the validating path.
"""


import numpy as np
import pytest
from conftest import judge, run_in_threads, run_ort
from hypothesis import given, settings
from hypothesis import strategies as st

import qops
from qops import reference
from qops.ops import (
    convolution as convolution_front,
)
from qops.ops import (
    matmul as matmul_front,
)
from qops.ops import (
    quantize as quantize_front,
)

_lean = pytest.importorskip("qops.backends.native._lean")

u8, i8 = np.uint8, np.int8
MATMUL = "QUANTIZED_LINEAR_MATRIX_MULTIPLY"


@pytest.fixture(autouse=True)
def fresh_caches():
    matmul_front.PLANS.clear()
    matmul_front.FAST.get().clear()
    yield


def operands(rng, a_dtype=u8, b_dtype=i8, a_shape=(4, 4), b_shape=(4, 4)):
    def values(dtype, shape):
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max + 1, shape, dtype=dtype)

    return values(a_dtype, a_shape), values(b_dtype, b_shape)


def slots_for(rng, a_dtype=u8, b_dtype=i8, out_dtype=u8, a_shape=(4, 4), b_shape=(4, 4)):
    a, b = operands(rng, a_dtype, b_dtype, a_shape, b_shape)
    return dict(a=a, a_scale=np.float32(rng.uniform(0.01, 0.05)),
                a_zero_point=a_dtype(rng.integers(np.iinfo(a_dtype).min, np.iinfo(a_dtype).max)),
                b=b, b_scale=np.float32(rng.uniform(0.005, 0.02)),
                b_zero_point=b_dtype(rng.integers(-5, 5)),
                output_scale=np.float32(rng.uniform(0.02, 0.5)),
                output_zero_point=out_dtype(rng.integers(np.iinfo(out_dtype).min,
                                                         np.iinfo(out_dtype).max)))


def expected(slots, out_dtype=None):
    dtype = np.asarray(slots["output_zero_point"]).dtype if slots.get(
        "output_zero_point") is not None else np.dtype(out_dtype or slots["a"].dtype)
    full = dict(dict(a_zero_point=None, b_zero_point=None, output_zero_point=None), **slots)
    return reference.quantized_linear_matrix_multiply(**full, output_dtype=dtype)


def lean_run(slots, out=None, n_threads=None):
    """The lean path alone: ``None`` when it does not take the call."""
    get = slots.get
    return matmul_front.FAST.get().run(get("a"), get("a_scale"), get("a_zero_point"), get("b"),
                                get("b_scale"), get("b_zero_point"), get("output_scale"),
                                get("output_zero_point"), out, n_threads)


COMBOS = [(a, b, y) for a in (u8, i8) for b in (u8, i8) for y in (u8, i8)]


@pytest.mark.parametrize("a_dtype,b_dtype,out_dtype", COMBOS,
                         ids=lambda d: np.dtype(d).name)
def test_every_type_combination_matches_the_reference_on_the_lean_path(a_dtype, b_dtype,
                                                                        out_dtype):
    rng = np.random.default_rng(0)
    first = slots_for(rng, a_dtype, b_dtype, out_dtype)
    assert np.array_equal(qops.quantized_linear_matrix_multiply(**first), expected(first))
    assert len(matmul_front.FAST.get()) == 1
    for _ in range(5):
        later = slots_for(rng, a_dtype, b_dtype, out_dtype)
        direct = lean_run(later)
        assert direct is not None, "the lean path did not take a call of a learnt signature"
        assert direct.dtype == np.dtype(out_dtype)
        assert np.array_equal(direct, expected(later))
        assert np.array_equal(qops.quantized_linear_matrix_multiply(**later), expected(later))


@pytest.mark.parametrize("a_dtype,b_dtype,out_dtype", COMBOS, ids=lambda d: np.dtype(d).name)
def test_the_lean_path_equals_the_reference_and_onnxruntime_where_it_is_exact(a_dtype, b_dtype,
                                                                             out_dtype):
    rng = np.random.default_rng(1)
    qops.quantized_linear_matrix_multiply(**slots_for(rng, a_dtype, b_dtype, out_dtype))
    for _ in range(10):
        slots = slots_for(rng, a_dtype, b_dtype, out_dtype)
        got = lean_run(slots)
        assert got is not None
        inputs = {"a": slots["a"], "a_scale": slots["a_scale"],
                  "a_zero_point": slots["a_zero_point"], "b": slots["b"],
                  "b_scale": slots["b_scale"], "b_zero_point": slots["b_zero_point"],
                  "y_scale": slots["output_scale"], "y_zero_point": slots["output_zero_point"]}
        judge(got, expected(slots), context="the lean path",
              peer=lambda: run_ort("QLinearMatMul", inputs, opset=10,
                                   output_dtype=np.dtype(out_dtype)))


def test_the_lean_path_equals_the_packed_kernels():
    rng = np.random.default_rng(2)
    slots = slots_for(rng, a_shape=(3, 8, 16), b_shape=(3, 16, 8))
    qops.quantized_linear_matrix_multiply(**slots)
    lean = lean_run(slots)
    assert lean is not None
    kernels = qops.backends.dispatch.execute(
        qops.ops.matmul.prepare(dict(slots), {"output_dtype": None}), 1, implementation="kernels")
    assert np.array_equal(lean, kernels)


# Each parameter form the lean path records, and a value in that form.
FORMS = {
    "python float": lambda v, dtype: float(v),
    "numpy scalar": lambda v, dtype: dtype(v),
    "0-d array": lambda v, dtype: np.array(v, dtype),
    "all-ones array": lambda v, dtype: np.full((1, 1), v, dtype),
    "float64 scalar": lambda v, dtype: np.float64(v),
}


@given(data=st.data(), rank=st.integers(2, 4), m=st.integers(0, 5), k=st.integers(0, 6),
       n=st.integers(0, 5), combo=st.sampled_from(COMBOS),
       scale_form=st.sampled_from(sorted(FORMS)),
       zero_form=st.sampled_from(["absent", "numpy scalar", "0-d array", "all-ones array"]),
       seed=st.integers(0, 2**16))
@settings(max_examples=60, deadline=None)
def test_lean_results_equal_the_reference_over_shapes_types_and_forms(
        data, rank, m, k, n, combo, scale_form, zero_form, seed):
    a_dtype, b_dtype, out_dtype = combo
    rng = np.random.default_rng(seed)
    batch = [data.draw(st.integers(1, 3)) for _ in range(rank - 2)]
    # Either operand may be one broadcast matrix.
    a_batch = [1] * len(batch) if data.draw(st.booleans()) else batch
    b_batch = [1] * len(batch) if data.draw(st.booleans()) else batch
    matmul_front.PLANS.clear()
    matmul_front.FAST.get().clear()

    def make():
        a, b = operands(rng, a_dtype, b_dtype, (*a_batch, m, k), (*b_batch, k, n))
        slots = dict(a=a, b=b)
        for name, low, high in (("a_scale", 0.01, 0.05), ("b_scale", 0.005, 0.02),
                                ("output_scale", 0.02, 0.4)):
            slots[name] = FORMS[scale_form](np.float32(rng.uniform(low, high)), np.float32)
            if scale_form == "all-ones array":
                slots[name] = slots[name].reshape((1,) * rank)
        for name, dtype in (("a_zero_point", a_dtype), ("b_zero_point", b_dtype),
                            ("output_zero_point", out_dtype)):
            if zero_form == "absent":
                slots[name] = None
                continue
            value = rng.integers(np.iinfo(dtype).min, np.iinfo(dtype).max + 1)
            slots[name] = FORMS[zero_form](value, dtype)
            if zero_form == "all-ones array":
                slots[name] = slots[name].reshape((1,) * rank)
        return slots

    output_dtype = out_dtype if zero_form == "absent" else None
    first = make()
    try:
        got = qops.quantized_linear_matrix_multiply(**first, output_dtype=output_dtype)
    except qops.ValidationError:
        return  # a form this feature level rejects; the lean path never learns it
    want = expected(first, out_dtype)
    assert np.array_equal(got, want)
    for _ in range(3):
        later = make()
        want = expected(later, out_dtype)
        assert np.array_equal(
            qops.quantized_linear_matrix_multiply(**later, output_dtype=output_dtype), want)
        if output_dtype is None:
            direct = lean_run(later)
            assert direct is not None and np.array_equal(direct, want)


@pytest.mark.parametrize("bad", [0.0, -1.0, np.nan, np.inf, 1e-50])
@pytest.mark.parametrize("form", ["numpy scalar", "python float", "0-d array"])
def test_bad_scale_values_raise_the_validating_paths_error(bad, form):
    rng = np.random.default_rng(3)
    slots = slots_for(rng)
    slots["output_scale"] = FORMS[form](slots["output_scale"], np.float32)
    qops.quantized_linear_matrix_multiply(**slots)
    with np.errstate(over="ignore"):
        bad_value = FORMS[form](bad, np.float32)
    with pytest.raises(qops.ValidationError, match="output_scale.*positive and finite"):
        qops.quantized_linear_matrix_multiply(**dict(slots, output_scale=bad_value))


def test_an_overflowing_multiplier_raises_on_the_lean_path():
    rng = np.random.default_rng(4)
    slots = slots_for(rng)
    qops.quantized_linear_matrix_multiply(**slots)
    huge = dict(slots, a_scale=np.float32(3e38), b_scale=np.float32(2.0))
    with pytest.raises(qops.ValidationError, match="overflows float32"):
        qops.quantized_linear_matrix_multiply(**huge)


@pytest.mark.parametrize("change", [
    dict(a=np.zeros((4, 4), np.float32)),
    dict(a=np.zeros((4, 5), u8)),
    dict(a_zero_point=np.int8(3)),
    dict(output_zero_point=np.int16(3)),
    dict(b_scale=np.float16(0.5)),
    dict(a_scale=None),
])
def test_a_call_of_another_form_is_validated_in_full(change):
    rng = np.random.default_rng(5)
    slots = slots_for(rng)
    qops.quantized_linear_matrix_multiply(**slots)
    assert lean_run(dict(slots, **change)) is None
    with pytest.raises(qops.ValidationError):
        qops.quantized_linear_matrix_multiply(**dict(slots, **change))


def test_python_integer_zero_points_and_views_still_compute_correctly():
    rng = np.random.default_rng(6)
    slots = slots_for(rng, a_shape=(4, 8), b_shape=(8, 4))
    qops.quantized_linear_matrix_multiply(**slots)
    cases = [dict(a_zero_point=int(slots["a_zero_point"])),
             dict(a=np.ascontiguousarray(slots["a"][:, ::-1])[:, ::-1]),
             dict(a=np.asfortranarray(slots["a"])),
             dict(a=slots["a"].astype(np.dtype(u8).newbyteorder()))]
    for change in cases:
        call = dict(slots, **change)
        assert np.array_equal(qops.quantized_linear_matrix_multiply(**call), expected(slots))


@pytest.mark.parametrize("make_out,message", [
    (lambda: np.zeros((4, 5), u8), "shape"),
    (lambda: np.zeros((4, 4), i8), "dtype"),
    (lambda: np.zeros((4, 8), u8)[:, ::2], "C-contiguous"),
])
def test_a_wrong_out_raises_and_is_left_untouched(make_out, message):
    rng = np.random.default_rng(7)
    slots = slots_for(rng)
    qops.quantized_linear_matrix_multiply(**slots)
    out = make_out()
    before = out.copy()
    with pytest.raises(qops.ValidationError, match=message):
        qops.quantized_linear_matrix_multiply(**slots, out=out)
    assert np.array_equal(out, before)


def test_a_read_only_or_overlapping_out_raises_and_a_good_one_is_filled():
    rng = np.random.default_rng(8)
    slots = slots_for(rng)
    qops.quantized_linear_matrix_multiply(**slots)
    read_only = np.zeros((4, 4), u8)
    read_only.flags.writeable = False
    with pytest.raises(qops.ValidationError, match="read-only"):
        qops.quantized_linear_matrix_multiply(**slots, out=read_only)
    storage = np.zeros(32, u8)
    overlapping = dict(slots, a=storage[:16].reshape(4, 4))
    with pytest.raises(qops.ValidationError, match="overlaps a"):
        qops.quantized_linear_matrix_multiply(**overlapping, out=storage[8:24].reshape(4, 4))
    zero_point_inside = np.zeros(17, u8)
    with pytest.raises(qops.ValidationError, match="overlaps output_zero_point"):
        qops.quantized_linear_matrix_multiply(
            **dict(slots, output_zero_point=zero_point_inside[16:].reshape(())),
            out=zero_point_inside[1:].reshape(4, 4))
    out = np.zeros((4, 4), u8)
    returned = qops.quantized_linear_matrix_multiply(**slots, out=out)
    assert returned is out and np.array_equal(out, expected(slots))


@pytest.mark.parametrize("bad", [0, -1, 5000, 2.0, True, 10**30])
def test_bad_thread_counts_raise_on_the_lean_path(bad):
    rng = np.random.default_rng(9)
    slots = slots_for(rng)
    qops.quantized_linear_matrix_multiply(**slots)
    with pytest.raises(qops.ValidationError, match="n_threads"):
        qops.quantized_linear_matrix_multiply(**slots, n_threads=bad)


def test_feature_level_and_output_dtype_calls_take_the_validating_path():
    rng = np.random.default_rng(10)
    slots = slots_for(rng, a_shape=(1, 1, 4, 4), b_shape=(1, 1, 4, 4))
    qops.quantized_linear_matrix_multiply(**slots, feature_level="2_1")
    assert len(matmul_front.FAST.get()) == 0
    two_d = slots_for(rng)
    with pytest.raises(qops.UnsupportedError, match="DML_FEATURE_LEVEL_2_1"):
        qops.quantized_linear_matrix_multiply(**two_d, feature_level="2_1")


def test_large_products_are_not_learnt():
    rng = np.random.default_rng(11)
    slots = slots_for(rng, a_shape=(64, 64), b_shape=(64, 64))
    got = qops.quantized_linear_matrix_multiply(**slots)
    assert len(matmul_front.FAST.get()) == 0
    assert np.array_equal(got, expected(slots))


def test_per_column_parameters_are_not_learnt():
    rng = np.random.default_rng(12)
    slots = slots_for(rng)
    slots["b_scale"] = np.full((1, 4), 0.01, np.float32)
    got = qops.quantized_linear_matrix_multiply(**slots)
    assert len(matmul_front.FAST.get()) == 0
    assert np.array_equal(got, expected(slots))


def test_many_signatures_stay_correct_past_the_lean_capacity():
    rng = np.random.default_rng(13)
    shapes = [(m, k) for m in range(1, 5) for k in range(1, 5)]
    for _ in range(2):
        for m, k in shapes:
            slots = slots_for(rng, a_shape=(m, k), b_shape=(k, 3))
            assert np.array_equal(qops.quantized_linear_matrix_multiply(**slots),
                                  expected(slots))
    assert 0 < len(matmul_front.FAST.get()) <= 8


def test_compiled_small_matmul_takes_the_lean_path_and_equals_the_plain_function():
    rng = np.random.default_rng(14)
    slots = slots_for(rng)
    constants = {k: slots[k] for k in ("b", "b_scale", "b_zero_point")}
    runtime = {k: v for k, v in slots.items() if k not in constants}
    compiled = qops.compile(MATMUL, **constants)
    assert np.array_equal(compiled(**runtime), expected(slots))
    assert len(compiled._fast.get()) == 1
    for _ in range(5):
        later = dict(slots_for(rng), **constants)
        runtime = {k: v for k, v in later.items() if k not in constants}
        assert np.array_equal(compiled(**runtime), expected(later))
        assert np.array_equal(compiled(**runtime),
                              qops.quantized_linear_matrix_multiply(**later))
    with pytest.raises(qops.ValidationError, match="bound at compile time"):
        compiled(**runtime, b=slots["b"])
    with pytest.raises(qops.ValidationError, match="a_scale.*positive and finite"):
        compiled(**dict(runtime, a_scale=np.float32(-1)))


def test_concurrent_lean_calls_agree_with_serial_ones():
    rng = np.random.default_rng(15)
    calls = [slots_for(rng) for _ in range(64)]
    qops.quantized_linear_matrix_multiply(**calls[0])
    wanted = [expected(slots) for slots in calls]
    failures = []

    def worker(offset):
        for index in range(offset, len(calls), 4):
            for _ in range(20):
                if not np.array_equal(qops.quantized_linear_matrix_multiply(**calls[index]),
                                      wanted[index]):
                    failures.append(index)

    run_in_threads(worker, 4)
    assert not failures
