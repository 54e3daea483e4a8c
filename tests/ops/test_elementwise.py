"""ELEMENT_WISE_QUANTIZED_LINEAR_ADD: the kernels and the reference against
the rule written out here, onnxruntime's QLinearAdd within 1, validation."""

import dataclasses

import numpy as np
import pytest
from conftest import contrib_model, run_contrib_ort
from hypothesis import given, settings
from hypothesis import strategies as st

import qops
from qops.backends import dispatch
from qops.backends.native import elementwise as _native
from qops.backends.native import variants as _simd
from qops.ops import elementwise

TYPES = (np.uint8, np.int8)


def stated_add(a, a_scale, a_zero_point, b, b_scale, b_zero_point, output_scale,
               output_zero_point, out_type):
    """The documented rule, step by step in float32 (written apart from
    qops.reference)."""
    f32 = np.float32
    ma = f32(f32(a_scale) / f32(output_scale))
    mb = f32(f32(b_scale) / f32(output_scale))
    a_part = (a.astype(np.int32) - int(a_zero_point)).astype(f32) * ma
    b_part = (b.astype(np.int32) - int(b_zero_point)).astype(f32) * mb
    value = (a_part + b_part).astype(f32)
    info = np.iinfo(out_type)
    return np.clip(np.rint(value).astype(np.int64) + int(output_zero_point),
                   info.min, info.max).astype(out_type)


def random_values(rng, shape, dtype):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, shape).astype(dtype)


@st.composite
def add_calls(draw):
    rank = draw(st.integers(1, 8))
    sizes = [draw(st.integers(1, 4)) for _ in range(rank)]
    if draw(st.booleans()):
        sizes[-1] = draw(st.integers(1, 700))  # rows longer than a vector, and partial ones
    a_shape = tuple(s if draw(st.booleans()) else 1 for s in sizes)
    b_shape = tuple(s if draw(st.booleans()) else 1 for s in sizes)
    a_type, b_type, out_type = (draw(st.sampled_from(TYPES)) for _ in range(3))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    scale = st.floats(0.0009765625, 16.0, width=32)
    return dict(
        a=random_values(rng, a_shape, a_type), a_scale=np.float32(draw(scale)),
        a_zero_point=random_values(rng, (), a_type)[()],
        b=random_values(rng, b_shape, b_type), b_scale=np.float32(draw(scale)),
        b_zero_point=random_values(rng, (), b_type)[()],
        output_scale=np.float32(draw(scale)),
        output_zero_point=random_values(rng, (), out_type)[()])


def on_variant(call, variant, n_threads=1):
    """The add of ``call`` by ``variant``'s kernels, called directly (the
    glue's preparation, then the variant's run on ``n_threads``)."""
    prepared = elementwise.prepare_add(dict(call), {})
    run = _native.prepare_add(prepared, variant)
    values = run.derive(prepared.arrays, prepared.checked)
    out = np.empty(prepared.output_shape, call["output_zero_point"].dtype)
    run.run(dataclasses.replace(prepared, values=values), out, n_threads)
    return out


@settings(max_examples=150, deadline=None)
@given(call=add_calls())
def test_every_implementation_follows_the_stated_rule(call):
    expected = stated_add(**call, out_type=call["output_zero_point"].dtype)
    prepared = elementwise.prepare_add(dict(call), {})
    assert prepared.output_shape == expected.shape
    for implementation in ("reference", "kernels"):
        got = dispatch.execute(prepared, 2, implementation=implementation)
        assert got.dtype == expected.dtype
        assert np.array_equal(got, expected), implementation
    assert np.array_equal(qops.element_wise_quantized_linear_add(**call, n_threads=1), expected)


@pytest.mark.parametrize("variant", _simd.quantize_variants())
@settings(max_examples=80, deadline=None)
@given(call=add_calls(), n_threads=st.sampled_from([1, 2]))
def test_every_variant_follows_the_stated_rule(variant, call, n_threads):
    """Each kernel variant (its vector loop over rows of 64 or more, the
    plain loop over the rest), every type of each slot, operands whole or
    broadcast, on 1 and 2 threads."""
    expected = stated_add(**call, out_type=call["output_zero_point"].dtype)
    assert np.array_equal(on_variant(call, variant, n_threads), expected)


@pytest.mark.parametrize("variant", _simd.available())
@pytest.mark.parametrize("shapes", [((2, 64, 56, 56), (2, 64, 56, 56)),
                                    ((2, 64, 56, 56), (1, 64, 1, 1)),
                                    ((3, 1, 5, 1000), (1, 7, 1, 1000)),
                                    ((1, 1, 70000), (1, 1, 1))])
def test_kernels_on_every_variant_and_thread_count(variant, shapes):
    """Tensors of many rows (shared between threads), each operand whole or
    broadcast along the rows, on every variant this machine runs."""
    rng = np.random.default_rng(7)
    call = dict(a=random_values(rng, shapes[0], np.int8), a_scale=np.float32(0.031),
                a_zero_point=np.int8(-3), b=random_values(rng, shapes[1], np.uint8),
                b_scale=np.float32(0.047), b_zero_point=np.uint8(131),
                output_scale=np.float32(0.05), output_zero_point=np.int8(4))
    expected = stated_add(**call, out_type=np.int8)
    for n_threads in (1, 2):
        assert np.array_equal(on_variant(call, variant, n_threads), expected), (variant, n_threads)


def test_ties_round_to_even_and_the_output_saturates():
    """Twice each value is the integer s = (a - 128) + 2 (b - 100): an odd s
    is a tie, which goes to the even neighbour; the rows of b = 0 and 255
    saturate at -128 and 127."""
    a = np.arange(256, dtype=np.uint8).reshape(1, 256)
    b = np.array([[0], [101], [255]], np.uint8)
    got = qops.element_wise_quantized_linear_add(
        a=a, a_scale=0.5, a_zero_point=np.uint8(128), b=b, b_scale=1.0,
        b_zero_point=np.uint8(100), output_scale=1.0, output_dtype=np.int8)
    twice = (a.astype(np.int64) - 128) + 2 * (b.astype(np.int64) - 100)
    half, odd = twice // 2, twice % 2 == 1
    rounded = half + (odd & (half % 2 == 1))
    expected = np.clip(rounded, -128, 127)
    assert np.array_equal(got.astype(np.int64), expected)
    assert np.any(odd) and got.min() == -128 and got.max() == 127


@pytest.mark.parametrize("variant", _simd.quantize_variants())
@pytest.mark.parametrize("zero", [0, 255])
def test_sums_past_float32_saturate(variant, zero):
    """Multipliers at the largest the validation takes (float32's largest /
    255) keep each product finite; the sum of two may pass float32's range
    (+infinity with zero points 0, -infinity with 255), which saturates to
    the output's range like any value beyond it."""
    a = np.array([255, 0, 255, 0, 200, 128] * 20, np.uint8)
    b = np.array([255, 0, 0, 255, 55, 128] * 20, np.uint8)
    call = dict(a=a, a_scale=np.float32(1.0), a_zero_point=np.uint8(zero), b=b,
                b_scale=np.float32(1.0), b_zero_point=np.uint8(zero),
                output_scale=np.float32(1e-36), output_zero_point=np.uint8(7))
    multiplier = np.float32(np.float32(1.0) / np.float32(1e-36))
    with np.errstate(over="ignore"):
        value = ((a.astype(np.int32) - zero).astype(np.float32) * multiplier
                 + (b.astype(np.int32) - zero).astype(np.float32) * multiplier)
    assert np.isinf(value).any() and np.isfinite(value).any()
    expected = np.clip(np.rint(value.astype(np.float64)) + 7, 0, 255).astype(np.uint8)
    assert np.array_equal(on_variant(call, variant), expected)


@pytest.mark.parametrize("variant", _simd.quantize_variants())
@pytest.mark.parametrize("zero", [0, 255])
@pytest.mark.parametrize("multiplier", [2.0e6, 2.1e6, 4.3e6])
def test_sums_near_and_past_int32_saturate(variant, zero, multiplier):
    """Sums up to 2**30 (multipliers to 2.1e6) pass through the conversion to
    int32 unclamped and saturate in the packs; larger multipliers let a sum
    pass int32 (4.3e6: 2.2e9), which must still saturate high, not wrap."""
    a = np.array([255, 0, 255, 0, 200, 128, 1, 254] * 16, np.uint8)
    b = np.array([255, 0, 0, 255, 55, 128, 0, 255] * 16, np.uint8)
    output_scale = np.float32(1.0) / np.float32(multiplier)
    call = dict(a=a, a_scale=np.float32(1.0), a_zero_point=np.uint8(zero), b=b,
                b_scale=np.float32(1.0), b_zero_point=np.uint8(zero),
                output_scale=output_scale, output_zero_point=np.uint8(7))
    factor = np.float32(np.float32(1.0) / output_scale)
    value = ((a.astype(np.int32) - zero).astype(np.float32) * factor
             + (b.astype(np.int32) - zero).astype(np.float32) * factor)
    assert np.abs(value).max() > 1e9 and np.abs(value).min() < 1e7
    expected = np.clip(np.rint(value.astype(np.float64)) + 7, 0, 255).astype(np.uint8)
    assert np.array_equal(on_variant(call, variant), expected)


def test_a_call_like_the_last_follows_its_data(monkeypatch):
    """The same parameter objects and new data of the same form take the
    recent-call shortcut (no signature made) and follow the data; another
    parameter takes the validating path.  (B broadcasts: the lean path,
    which would take the call first, takes operands of one shape only.)"""
    from qops.ops import plans

    rng = np.random.default_rng(9)
    a = random_values(rng, (2, 8, 30), np.uint8)
    b = random_values(rng, (1, 8, 30), np.uint8)
    parameters = dict(a_scale=np.float32(0.02), a_zero_point=np.uint8(120),
                      b_scale=np.float32(0.03), b_zero_point=np.uint8(130),
                      output_scale=np.float32(0.04), output_zero_point=np.uint8(128))
    qops.element_wise_quantized_linear_add(a=a, b=b, **parameters)
    signatures = []
    real = plans.signature
    monkeypatch.setattr(plans, "signature", lambda *args: signatures.append(1) or real(*args))
    for _ in range(3):
        a[...] = random_values(rng, a.shape, np.uint8)
        got = qops.element_wise_quantized_linear_add(a=a, b=b, **parameters)
        assert np.array_equal(got, stated_add(a, b=b, **parameters, out_type=np.uint8))
    assert not signatures
    other = dict(parameters, output_scale=np.float32(0.05))
    got = qops.element_wise_quantized_linear_add(a=a, b=b, **other)
    assert np.array_equal(got, stated_add(a, b=b, **other, out_type=np.uint8)) and signatures


ADD_INPUTS = ["A", "A_scale", "A_zero_point", "B", "B_scale", "B_zero_point", "C_scale",
              "C_zero_point"]
_ADD_SLOTS = ["a", "a_scale", "a_zero_point", "b", "b_scale", "b_zero_point", "output_scale",
              "output_zero_point"]


def _onnxruntime_add(call, out_type):
    values = {name: call[slot] for name, slot in zip(ADD_INPUTS, _ADD_SLOTS)}
    _, model = contrib_model("QLinearAdd", ADD_INPUTS, values, ("A", "B"), out_type)
    return run_contrib_ort(model, values, ("A", "B"))


@pytest.mark.parametrize("a_type", TYPES)
@pytest.mark.parametrize("shapes", [((1, 32, 28, 28), (1, 32, 28, 28)),
                                    ((1, 32, 28, 28), (1, 32, 1, 1)), ((5, 1, 3), (1, 4, 3))])
def test_within_one_of_onnxruntime_qlinearadd(a_type, shapes):
    rng = np.random.default_rng(11)
    call = dict(a=random_values(rng, shapes[0], a_type), a_scale=np.float32(0.0173),
                a_zero_point=random_values(rng, (), a_type)[()],
                b=random_values(rng, shapes[1], a_type), b_scale=np.float32(0.0291),
                b_zero_point=random_values(rng, (), a_type)[()],
                output_scale=np.float32(0.0337),
                output_zero_point=random_values(rng, (), a_type)[()])
    ours = qops.element_wise_quantized_linear_add(**call)
    theirs = _onnxruntime_add(call, a_type)
    assert ours.shape == theirs.shape
    assert np.abs(ours.astype(np.int64) - theirs.astype(np.int64)).max() <= 1


def _call(**changes):
    call = dict(a=np.zeros((2, 3), np.uint8), a_scale=0.5, b=np.zeros((2, 3), np.uint8),
                b_scale=0.5, output_scale=1.0)
    call.update(changes)
    return call


@pytest.mark.parametrize("changes, match", [
    (dict(b=np.zeros((2, 4), np.uint8)),
     r"a has shape \(2, 3\) and b \(2, 4\); dimension 1 differs \(3 and 4\)"),
    (dict(b=np.zeros((3,), np.uint8)), r"same dimension count"),
    (dict(a=np.zeros((1,) * 9, np.uint8), b=np.zeros((1,) * 9, np.uint8), feature_level="4_0"),
     r"a has 9 dimensions; DML_FEATURE_LEVEL_4_0 supports 1 to 8"),
    (dict(a=np.zeros((2, 3), np.int16)), r"a has dtype int16"),
    (dict(b_scale=0.0), r"b_scale"),
    (dict(a_scale=np.float32(3e38), output_scale=np.float32(1e-3)),
     r"a_scale / output_scale is .*; it must be at most"),
    (dict(a_zero_point=np.int8(1)), r"a_zero_point"),
    (dict(a_scale=np.ones((1, 2), np.float32)), r"a_scale has shape \(1, 2\); expected \(1, 1\) per-tensor"),
    (dict(feature_level="3_1"), r"DML_FEATURE_LEVEL_4_0"),
])
def test_bad_calls_are_refused_with_the_reason(changes, match):
    with pytest.raises(qops.ValidationError, match=match) as error:
        qops.element_wise_quantized_linear_add(**_call(**changes))
    assert str(error.value).startswith("ELEMENT_WISE_QUANTIZED_LINEAR_ADD: ")


def test_out_receives_the_result():
    out = np.empty((2, 3), np.uint8)
    result = qops.element_wise_quantized_linear_add(**_call(a=np.full((2, 3), 4, np.uint8)),
                                                    out=out)
    assert result is out and np.all(out == 2)


def _qlinear_add_model(a, b, parameters, out_type):
    return contrib_model("QLinearAdd", ADD_INPUTS, dict(parameters, A=a, B=b), ("A", "B"),
                         out_type)


def test_qlinear_add_runs_through_qops_onnx_and_the_reference_evaluator():
    """ONNX broadcasting of different ranks, 1-element 1-D scales as ONNX
    writes them: run_node and the reference evaluator (with reference_ops)
    give the stated rule on the operands broadcast by NumPy."""
    pytest.importorskip("onnx")
    import qops.onnx
    from onnx.reference import ReferenceEvaluator

    rng = np.random.default_rng(5)
    a = random_values(rng, (2, 3, 4, 5), np.uint8)
    b = random_values(rng, (4, 1), np.uint8)
    parameters = dict(A_scale=np.array([0.02], np.float32), A_zero_point=np.uint8(120),
                      B_scale=np.float32(0.03), B_zero_point=np.array([7], np.uint8),
                      C_scale=np.float32(0.04), C_zero_point=np.uint8(128))
    node, model = _qlinear_add_model(a, b, parameters, np.uint8)
    expected = stated_add(a, 0.02, 120, np.broadcast_to(b, a.shape), 0.03, 7, 0.04, 128,
                          np.uint8)
    (got,) = qops.onnx.run_node(node, [a, parameters["A_scale"], parameters["A_zero_point"], b,
                                       parameters["B_scale"], parameters["B_zero_point"],
                                       parameters["C_scale"], parameters["C_zero_point"]])
    assert np.array_equal(got, expected)
    evaluator = ReferenceEvaluator(model, new_ops=qops.onnx.reference_ops())
    assert np.array_equal(evaluator.run(None, {"A": a, "B": b})[0], expected)
    assert "QLinearAdd" in qops.onnx.supported_operators("com.microsoft")
    # Without an output zero point, the output has A's type (int8 here).
    (signed,) = qops.onnx.run_node(node, [a.astype(np.int8) // 2, np.float32(0.5), None,
                                          np.int8([[1]]), np.float32(0.5), None,
                                          np.float32(1.0)])
    assert signed.dtype == np.int8 and signed.shape == a.shape


@st.composite
def lean_add_calls(draw):
    """Adds of the lean path's form: A and B of one shape (up to 40000
    elements, past one row of the kernels' threads), each parameter a
    Python float, a NumPy scalar, a 0-d array or absent (zero points)."""
    rank = draw(st.integers(1, 8))
    shape = [draw(st.integers(1, 3)) for _ in range(rank)]
    shape[-1] = draw(st.sampled_from([1, 7, 64, 700, 40000]))
    if shape[-1] == 40000:  # one long row, which the kernels' threads share
        shape[:-1] = [1] * (rank - 1)
    a_type, b_type = (draw(st.sampled_from(TYPES)) for _ in range(2))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    scale = st.floats(0.0009765625, 16.0, width=32)

    def scale_form(value):
        return draw(st.sampled_from([float(value), np.float32(value),
                                     np.array(value, np.float32)]))

    def zero_form(dtype):
        value = random_values(rng, (), dtype)
        return draw(st.sampled_from([None, value[()], np.array(value)]))

    out_type = draw(st.sampled_from([None, np.uint8, np.int8]))
    return dict(a=random_values(rng, tuple(shape), a_type), a_scale=scale_form(draw(scale)),
                a_zero_point=zero_form(a_type), b=random_values(rng, tuple(shape), b_type),
                b_scale=scale_form(draw(scale)), b_zero_point=zero_form(b_type),
                output_scale=scale_form(draw(scale)),
                output_zero_point=None if out_type is None else zero_form(out_type))


@settings(max_examples=80, deadline=None)
@given(call=lean_add_calls(), n_threads=st.sampled_from([1, 2]), into_out=st.booleans())
def test_the_lean_add_follows_the_stated_rule(call, n_threads, into_out):
    """An add of two operands of one shape with scalar parameters runs in C
    without the plans (no plan is made), into out= too, with the rule's
    result."""
    zero = call["output_zero_point"]
    out_type = call["a"].dtype.type if zero is None else np.asarray(zero).dtype.type
    expected = stated_add(**{name: (0 if value is None and "zero" in name else value)
                             for name, value in call.items()}, out_type=out_type)
    out = np.empty(expected.shape, out_type) if into_out else None
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(elementwise.ADD_PLANS, "run", None)  # any use of the plans fails
        got = qops.element_wise_quantized_linear_add(**call, out=out, n_threads=n_threads)
    assert got.dtype == out_type and np.array_equal(got, expected)
    assert out is None or got is out


@pytest.mark.parametrize("changes, match", [
    (dict(a_scale=np.float32(0.0)), "a_scale"),
    (dict(b_scale=np.float32(np.nan)), "b_scale"),
    (dict(output_scale=-0.5), "output_scale"),
    (dict(output_scale=np.float32(1e-38)), "output_scale"),  # a multiplier past float32 / 255
    (dict(a_zero_point=np.int8(3)), "a_zero_point"),
    (dict(b_zero_point=np.array([7], np.uint8)), "dimension"),
    (dict(output_zero_point=np.int16(3)), "output_zero_point"),
    (dict(n_threads=0), "n_threads"),
    # One dimension more than the registry's 8, and none: the dimension counts
    # the lean path takes are the registry's.
    (dict(a=np.zeros((1,) * 8 + (2,), np.uint8), b=np.zeros((1,) * 8 + (2,), np.uint8)),
     "dimension"),
    (dict(a=np.zeros((), np.uint8), b=np.zeros((), np.uint8)), "dimension"),
])
def test_the_lean_add_leaves_what_it_refuses_to_the_validating_path(changes, match):
    """A value or form the lean path does not take gets the validating
    path's error, as with the kernels (and their lean path) switched off."""
    rng = np.random.default_rng(3)
    call = dict(a=random_values(rng, (2, 3, 40), np.uint8), a_scale=np.float32(0.02),
                a_zero_point=np.uint8(120), b=random_values(rng, (2, 3, 40), np.uint8),
                b_scale=np.float32(0.03), b_zero_point=np.uint8(130),
                output_scale=np.float32(0.04), output_zero_point=np.uint8(128))
    call.update(changes)
    with pytest.raises((qops.ValidationError, ValueError, TypeError), match=match) as lean:
        qops.element_wise_quantized_linear_add(**call)
    dispatch.set_enabled("ELEMENT_WISE_QUANTIZED_LINEAR_ADD", "kernels", False)
    try:
        with pytest.raises(type(lean.value)) as full:
            qops.element_wise_quantized_linear_add(**call)
    finally:
        dispatch.set_enabled("ELEMENT_WISE_QUANTIZED_LINEAR_ADD", "kernels", True)
    assert str(lean.value) == str(full.value)


def test_the_lean_add_takes_the_dimension_counts_of_the_registry():
    """Its range is the registry's row at the default feature level: every
    count in it runs on the lean path, one past either end does not."""
    from qops import registry
    from qops.backends.native.implementations import LeanAdd
    row = registry.get("ELEMENT_WISE_QUANTIZED_LINEAR_ADD").support(
        registry.NEWEST_FEATURE_LEVEL).tensor("a")
    lean = LeanAdd()
    parameters = (np.float32(0.02), np.uint8(1), np.float32(0.03), np.uint8(2),
                  np.float32(0.04), np.uint8(3))
    for rank in range(max(row.min_dims - 1, 0), row.max_dims + 2):
        a = np.ones((2,) + (1,) * (rank - 1), np.uint8) if rank else np.ones((), np.uint8)
        got = lean.run(a, *parameters[:2], a, *parameters[2:], None, 1)
        assert (got is not None) == row.allows_dims(rank), rank


@pytest.mark.parametrize("operand", ["a", "b", "output_zero_point"])
def test_the_lean_add_refuses_out_over_an_argument_as_the_validating_path_does(operand):
    """out= over any argument's bytes (A itself, a view of B, a 0-d zero
    point) gets the validating path's error, not an add in place."""
    rng = np.random.default_rng(4)
    call = dict(a=random_values(rng, (2, 3, 40), np.uint8), a_scale=np.float32(0.02),
                a_zero_point=np.uint8(120), b=random_values(rng, (2, 3, 40), np.uint8),
                b_scale=np.float32(0.03), b_zero_point=np.uint8(130),
                output_scale=np.float32(0.04))
    if operand == "output_zero_point":
        out = np.empty((2, 3, 40), np.uint8)
        call[operand] = out[0, 0, :1].reshape(())  # a 0-d view of out's first byte
    else:
        call["output_zero_point"] = np.uint8(128)
        out = call[operand] if operand == "a" else call[operand][...]
    with pytest.raises(qops.ValidationError, match="out") as lean:
        qops.element_wise_quantized_linear_add(**call, out=out)
    dispatch.set_enabled("ELEMENT_WISE_QUANTIZED_LINEAR_ADD", "kernels", False)
    try:
        with pytest.raises(qops.ValidationError) as full:
            qops.element_wise_quantized_linear_add(**call, out=out)
    finally:
        dispatch.set_enabled("ELEMENT_WISE_QUANTIZED_LINEAR_ADD", "kernels", True)
    assert str(lean.value) == str(full.value)
