"""``qops.matrix_multiply_integer_to_float`` against the stated rule written
out here (exact sums in Python integers, then each float32 step on NumPy
scalars), onnxruntime's com.microsoft MatMulIntegerToFloat as a peer by the
rule of tests/peers.py, ``qops.onnx`` and the validation."""

import numpy as np
import pytest
from conftest import contrib_model, judge, run_contrib_ort
from hypothesis import given, settings
from hypothesis import strategies as st

import qops
from qops.backends import dispatch
from qops.ops.integer_to_float import prepare

TYPES = [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32]


def stated(a, a_scale, a_zero_point, b, b_scale, b_zero_point, bias, output_dtype):
    """The rule, element by element: acc exact (Python integers), then
    ``float32(float32(acc) * float32(a_scale * b_scale))``, ``+ bias`` in
    float32, and one rounding to the output type."""
    a, b = np.asarray(a), np.asarray(b)
    shape = np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1])
    rows, columns = shape[-2:]
    a = np.broadcast_to(a, shape[:-2] + a.shape[-2:])
    b = np.broadcast_to(b, shape[:-2] + b.shape[-2:])

    def per(value, count, along_rows):
        if value is None:
            return [0] * count
        flat = np.asarray(value).reshape(-1)
        return [flat[0]] * count if flat.size == 1 else list(flat)

    a_zp, b_zp = per(a_zero_point, rows, True), per(b_zero_point, columns, False)
    a_s, b_s = per(a_scale, rows, True), per(b_scale, columns, False)
    bias = None if bias is None else np.broadcast_to(np.asarray(bias, np.float32), shape)
    result = np.empty(shape, np.float32)
    for index in np.ndindex(shape[:-2]):
        left, right = a[index].tolist(), b[index].tolist()
        for m in range(rows):
            for n in range(columns):
                acc = sum((left[m][k] - int(a_zp[m])) * (right[k][n] - int(b_zp[n]))
                          for k in range(len(right)))
                multiplier = np.float32(np.float32(a_s[m]) * np.float32(b_s[n]))
                value = np.float32(np.float32(acc) * multiplier)
                if bias is not None:
                    value = np.float32(value + bias[index + (m, n)])
                result[index + (m, n)] = value
    with np.errstate(over="ignore"):
        return result.astype(output_dtype)


@st.composite
def calls(draw, dtype=None):
    dtype = np.dtype(draw(st.sampled_from(TYPES)) if dtype is None else dtype)
    info = np.iinfo(dtype)
    # Wide types take values whose sums stay below 2**53 (larger are refused).
    low, high = (int(info.min), int(info.max)) if dtype.itemsize == 1 else (
        max(int(info.min), -3000), min(int(info.max), 3000))
    rank = draw(st.integers(2, 4))
    rows, depth, columns = (draw(st.integers(1, 9)), draw(st.integers(1, 40)),
                            draw(st.integers(1, 20)))
    batch_a = tuple(draw(st.sampled_from([1, 2])) for _ in range(rank - 2))
    batch_b = tuple(size if draw(st.booleans()) else 1 for size in batch_a)
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    float_type = np.dtype(draw(st.sampled_from([np.float32, np.float16])))
    ones = (1,) * (rank - 2)

    def ints(shape):
        return rng.integers(low, high + 1, shape).astype(dtype)

    def scales(shape):
        return (rng.uniform(0.5, 2.0, shape) * 2.0 ** rng.integers(-12, -4, shape)).astype(
            float_type)

    per_row, per_column = draw(st.booleans()), draw(st.booleans())
    call = dict(
        a=ints(batch_a + (rows, depth)), b=ints(batch_b + (depth, columns)),
        a_scale=scales(ones + ((rows, 1) if per_row else (1, 1))),
        b_scale=scales(ones + ((1, columns) if per_column else (1, 1))))
    if draw(st.booleans()):
        call["a_zero_point"] = ints(ones + ((rows, 1) if per_row else (1, 1)))
    if draw(st.booleans()):
        call["b_zero_point"] = ints(ones + ((1, columns) if per_column else (1, 1)))
    bias_form = draw(st.sampled_from(["none", "full", "row"]))
    out_batch = tuple(max(x, y) for x, y in zip(batch_a, batch_b))
    if bias_form == "full":
        call["bias"] = rng.standard_normal(out_batch + (rows, columns)).astype(float_type)
    elif bias_form == "row":
        call["bias"] = rng.standard_normal(columns).astype(float_type)
    return call


def _expected(call):
    dtype = np.dtype(call["a_scale"].dtype)
    return stated(call["a"], call["a_scale"], call.get("a_zero_point"), call["b"],
                  call["b_scale"], call.get("b_zero_point"), call.get("bias"), dtype)


@settings(max_examples=60, deadline=None)
@given(call=calls(), n_threads=st.sampled_from([1, 2]))
def test_equals_the_stated_rule(call, n_threads):
    got = qops.matrix_multiply_integer_to_float(**call, n_threads=n_threads)
    want = _expected(call)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert np.array_equal(got.view(np.uint8), want.view(np.uint8))


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_the_kernels_equal_the_reference_on_8_bit_operands(dtype, data):
    """8-bit operands run on the GEMM kernels (exact int32 sums, then the
    float steps); the reference states the rule in NumPy."""
    call = data.draw(calls(dtype), label="call")
    validated = prepare(call, {})
    assert dispatch.select(validated).name == "kernels"
    want = dispatch.execute(validated, 1, implementation="reference")
    for n_threads in (1, 2):
        got = dispatch.execute(validated, n_threads, implementation="kernels")
        assert np.array_equal(got.view(np.uint8), want.view(np.uint8)), n_threads


ITF_INPUTS = ["A", "B", "a_scale", "b_scale", "a_zero_point", "b_zero_point", "bias"]


def _ort_model(inputs, output_dtype):
    """Every given input a graph input (nothing folded)."""
    return contrib_model("MatMulIntegerToFloat", ITF_INPUTS, inputs,
                         [n for n in ITF_INPUTS if inputs.get(n) is not None], output_dtype)


def _run_ort(inputs, output_dtype):
    _, model = _ort_model(inputs, output_dtype)
    return run_contrib_ort(model, inputs, [n for n in ITF_INPUTS if inputs.get(n) is not None])


@pytest.mark.parametrize("a_type, b_type", [(np.uint8, np.uint8), (np.int8, np.int8),
                                            (np.uint8, np.int8), (np.int8, np.uint8)])
@pytest.mark.parametrize("rows", [6, 40])
@pytest.mark.parametrize("zero_points", [True, False])
@pytest.mark.parametrize("with_bias", [False, True])
def test_matmul_integer_to_float_through_qops_onnx_and_onnxruntime(a_type, b_type, rows,
                                                                   zero_points, with_bias):
    """com.microsoft MatMulIntegerToFloat through ``qops.onnx.run_node`` and
    the reference evaluator equals the stated rule; onnxruntime is compared
    where it is exact.  A mixed pair runs on qops in one type, the smaller
    operand (A of 2 x 6 rows, B beside 2 x 40) and its zero point moved to
    the other's, an absent zero point as 0."""
    pytest.importorskip("onnx")
    import qops.onnx
    from onnx.reference import ReferenceEvaluator

    rng = np.random.default_rng(7)
    a = rng.integers(np.iinfo(a_type).min, np.iinfo(a_type).max + 1,
                     (2, rows, 70)).astype(a_type)
    b = rng.integers(np.iinfo(b_type).min, np.iinfo(b_type).max + 1, (70, 24)).astype(b_type)
    b_zero = rng.integers(0, 5, 24).astype(b_type)
    inputs = {"A": a, "B": b, "a_scale": np.float32(0.0173),
              "b_scale": rng.uniform(0.001, 0.02, 24).astype(np.float32),
              "a_zero_point": a_type(3) if zero_points else None,
              "b_zero_point": b_zero if zero_points else None,
              "bias": rng.standard_normal(24).astype(np.float32) if with_bias else None}
    want = stated(a, inputs["a_scale"], inputs["a_zero_point"], b[None], inputs["b_scale"],
                  inputs["b_zero_point"], inputs["bias"], np.float32)
    node, model = _ort_model(inputs, np.float32)
    names = ("A", "B", "a_scale", "b_scale", "a_zero_point", "b_zero_point", "bias")
    (got,) = qops.onnx.run_node(node, [inputs[n] for n in names[:len(node.input)]])
    judge(got, want, context="MatMulIntegerToFloat",
          peer=lambda: _run_ort(inputs, np.float32))
    evaluator = ReferenceEvaluator(model, new_ops=qops.onnx.reference_ops())
    feeds = {k: np.asarray(v) for k, v in inputs.items() if v is not None}
    assert np.array_equal(evaluator.run(None, feeds)[0], want)
    assert "MatMulIntegerToFloat" in qops.onnx.supported_operators("com.microsoft")


@pytest.mark.parametrize("form", ["per-row zero point", "1-d A", "strided A", "B moved"])
def test_a_mixed_pair_runs_in_one_type_exactly(form):
    """uint8 A with int8 B through ``qops.onnx``: the smaller operand and its
    zero point go to the other's type whatever their form (a zero point per
    row of A, a 1-D A, a strided view of A, B the smaller), and the result
    is the stated rule's."""
    pytest.importorskip("onnx")
    import qops.onnx

    rng = np.random.default_rng(11)
    rows = 400 if form == "B moved" else 5
    a = rng.integers(0, 256, (rows, 140 if form == "strided A" else 70)).astype(np.uint8)
    a = a[:, ::2] if form == "strided A" else a
    b = rng.integers(-128, 128, (70, 24)).astype(np.int8)
    a_zero = (rng.integers(0, 256, rows).astype(np.uint8) if form == "per-row zero point"
              else np.uint8(131))
    if form == "1-d A":
        a = a[0]
    inputs = {"A": a, "B": b, "a_scale": np.float32(0.0173),
              "b_scale": rng.uniform(0.001, 0.02, 24).astype(np.float32),
              "a_zero_point": a_zero, "b_zero_point": rng.integers(-3, 3, 24).astype(np.int8),
              "bias": rng.standard_normal(24).astype(np.float32)}
    node, _ = _ort_model(inputs, np.float32)
    (got,) = qops.onnx.run_node(node, [inputs[n] for n in ITF_INPUTS])
    a_rows = a[None] if a.ndim == 1 else a
    a_zero_rows = a_zero.reshape(-1, 1) if np.ndim(a_zero) else a_zero
    want = stated(a_rows, inputs["a_scale"], a_zero_rows, b, inputs["b_scale"],
                  inputs["b_zero_point"], inputs["bias"], np.float32).reshape(got.shape)
    assert got.shape == ((24,) if a.ndim == 1 else (rows, 24))
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


def test_a_mixed_pair_refuses_a_zero_point_of_another_type():
    pytest.importorskip("onnx")
    import qops.onnx

    inputs = {"A": np.zeros((2, 8), np.uint8), "B": np.zeros((8, 3), np.int8),
              "a_scale": np.float32(1), "b_scale": np.float32(1),
              "a_zero_point": np.int32(3), "b_zero_point": None, "bias": None}
    node, _ = _ort_model(inputs, np.float32)
    with pytest.raises(qops.ValidationError, match="a_zero_point is int32; it must have A's "
                                                   "type, uint8") as raised:
        qops.onnx.run_node(node, [inputs[n] for n in ITF_INPUTS[:len(node.input)]])
    assert raised.value.slot == "a_zero_point"


def _call(**changes):
    rng = np.random.default_rng(3)
    call = dict(a=rng.integers(0, 256, (4, 6)).astype(np.uint8), a_scale=0.5,
                b=rng.integers(0, 256, (6, 5)).astype(np.uint8), b_scale=0.25)
    call.update(changes)
    return call


@pytest.mark.parametrize("changes, message", [
    (dict(b=np.zeros((6, 5), np.int8)),
     "a, a_zero_point, b and b_zero_point must have the same data type; a is uint8, b is int8"),
    (dict(feature_level="6_1"), "introduced in DML_FEATURE_LEVEL_6_2"),
    (dict(bias=np.zeros((4, 4), np.float32)),
     "bias and output must have the same sizes; bias has (4, 4), output has (4, 5)"),
    (dict(bias=np.zeros((4, 5), np.float16), b_scale=np.float32(0.25)),
     "a_scale, bias, b_scale and output must have the same data type"),
    (dict(a_scale=np.float32(np.inf)), "a_scale has NaN or infinite values"),
    (dict(a_scale=np.float32(3e38), b_scale=np.float32(3e38)),
     "float32(a_scale * b_scale) overflows float32"),
    (dict(a_scale=np.float64(0.5)), "a_scale has dtype float64"),
    (dict(a_zero_point=np.zeros((1, 4), np.uint8)), "a_zero_point has shape (1, 4); expected "
                                                    "(1, 1) per-tensor or (4, 1) per-row"),
    (dict(a=np.full((1, 3), 2**31 - 1, np.int32), b=np.full((3, 1), 2**31 - 1, np.int32),
          a_zero_point=np.int32(-2**31)), "past 2**53"),
    (dict(output_dtype=np.int32), "output_dtype is int32; it must be one of float32, float16"),
    (dict(bias=np.ones(3, np.float32)), "a 1-d bias has one value per column, N = 5"),
    (dict(a_scale=1e-8, b_scale=np.float16(0.25)),
     "a_scale is 1e-08, which float16 (the scales' type here) cannot hold"),
])
def test_refuses_what_the_page_or_the_rule_does_not_take(changes, message):
    with pytest.raises(qops.ValidationError) as error:
        qops.matrix_multiply_integer_to_float(**_call(**changes))
    assert message in str(error.value)
    assert str(error.value).startswith("MATRIX_MULTIPLY_INTEGER_TO_FLOAT: ")


def test_output_type_follows_the_scales_and_output_dtype():
    half = qops.matrix_multiply_integer_to_float(**_call(output_dtype=np.float16))
    assert half.dtype == np.float16
    assert np.array_equal(half, _expected(dict(_call(), a_scale=np.float16(0.5),
                                               b_scale=np.float16(0.25))))
    # Past float16's largest value is infinity, as one rounding gives it.
    big = qops.matrix_multiply_integer_to_float(**_call(a_scale=np.float16(60000.0),
                                                        b_scale=np.float16(1.0)))
    assert big.dtype == np.float16 and np.isinf(big).any()
    out = np.empty((4, 5), np.float32)
    assert qops.matrix_multiply_integer_to_float(**_call(), out=out) is out


@pytest.mark.parametrize("dtype", [np.int16, np.uint16])
@pytest.mark.parametrize("a_range, b_range, a_zero, b_zero", [
    ((0, 255), (-128, 127), 3, -5),      # onnxruntime's uint8 x int8, widened: narrowed
    ((-128, 127), (0, 255), -2, 200),     # narrowed the other way round
    ((0, 255), (0, 255), 256, 0),         # a zero point past 8 bits: the exact path
    ((0, 300), (0, 10), 0, 0),            # values past 8 bits: the exact path
])
def test_16_bit_operands_of_8_bit_values_run_narrowed_and_exact(dtype, a_range, b_range,
                                                                 a_zero, b_zero):
    """16-bit operands whose values and zero points fit 8 bits run on the
    GEMM kernels as 8-bit ones; the rest on the exact reference path; both
    equal the stated rule at 1 and 2 threads."""
    info = np.iinfo(dtype)
    if min(a_range[0], b_range[0], a_zero, b_zero) < info.min:
        pytest.skip("values outside the unsigned type")
    rng = np.random.default_rng(17)
    call = dict(a=rng.integers(a_range[0], a_range[1] + 1, (2, 9, 130)).astype(dtype),
                a_scale=np.float32(0.0173), a_zero_point=np.asarray(a_zero, dtype),
                b=rng.integers(b_range[0], b_range[1] + 1, (1, 130, 21)).astype(dtype),
                b_scale=rng.uniform(0.001, 0.02, (1, 1, 21)).astype(np.float32),
                b_zero_point=np.full((1, 1, 21), b_zero, dtype),
                bias=rng.standard_normal(21).astype(np.float32))
    validated = prepare(call, {})
    assert dispatch.select(validated).name == "narrowed kernels"
    want = _expected(call)
    for n_threads in (1, 2):
        got = dispatch.execute(validated, n_threads)
        assert np.array_equal(got.view(np.uint8), want.view(np.uint8)), n_threads


def test_validate_refuses_what_the_function_refuses_and_blames_the_odd_slot():
    """qops.validate runs the same value checks (sums past 2**53 included);
    a type constraint names the first slot whose type differs."""
    a, b = np.full((2, 3), 2**31 - 1, np.int32), np.full((3, 4), -2**31, np.int32)
    with pytest.raises(qops.ValidationError, match="past 2[*][*]53"):
        qops.validate("MATRIX_MULTIPLY_INTEGER_TO_FLOAT", a=a, a_scale=1.0, b=b, b_scale=1.0)
    with pytest.raises(qops.ValidationError) as error:
        qops.matrix_multiply_integer_to_float(**_call(a_zero_point=np.int8(1),
                                                      b_zero_point=np.uint8(1)))
    assert error.value.slot == "a_zero_point"


def _calls_through_the_plans(op):
    """A list that grows by one for each call of the compiled ``op`` that
    takes its plans (validation and all) instead of a bound run."""
    calls = []
    through_the_plans = op._planned

    def planned(*arguments, **keywords):
        calls.append(1)
        return through_the_plans(*arguments, **keywords)

    op._planned = planned
    return calls


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("per_column, with_bias", [(True, True), (False, False)])
def test_a_compiled_product_with_a_new_scale_and_zero_point_each_call_equals_the_function(
        dtype, per_column, with_bias):
    """B and its parameters bound, A's scale and zero point new on every call
    (a dynamically quantized layer's): each call equals the plain function's
    bit for bit, on 1 and 2 threads, scales given as NumPy scalars or 0-d
    arrays; a Python float scale, an infinite one and a zero point of
    another type take the plans, which give or refuse what the function
    gives or refuses."""
    rng = np.random.default_rng(41)
    info = np.iinfo(dtype)
    m, k, n = 150, 96, 140  # work enough for two threads
    b = rng.integers(info.min, info.max + 1, (k, n)).astype(dtype)
    b_scale = (rng.uniform(0.001, 0.03, (1, n)) if per_column else np.asarray(0.017)).astype(
        np.float32)
    b_zero = (rng.integers(info.min, info.max + 1, (1, n)) if per_column
              else np.asarray(info.min + 5)).astype(dtype)
    bias = rng.normal(0, 1, n).astype(np.float32) if with_bias else None
    op = qops.compile("MATRIX_MULTIPLY_INTEGER_TO_FLOAT", b=b, b_scale=b_scale,
                      b_zero_point=b_zero, bias=bias)
    planned = _calls_through_the_plans(op)
    # A first call of another form (a session's call on one row as it is
    # built): the later form is bound in its place.
    op(np.zeros((1, k), dtype), np.float32(1), dtype(0))
    for index in range(12):
        a = rng.integers(info.min, info.max + 1, (m, k)).astype(dtype)
        scale = np.float32(rng.uniform(1e-4, 0.1))
        zero = dtype(rng.integers(info.min, info.max + 1))
        given_scale = scale if index % 2 else np.asarray(scale)
        given_zero = zero if index % 3 else np.asarray(zero)
        want = qops.matrix_multiply_integer_to_float(a, scale, zero, b, b_scale, b_zero, bias)
        for threads in (1, 2):
            np.testing.assert_array_equal(op(a, given_scale, given_zero, n_threads=threads), want)
    # Only the first call of each form took the plans; every later one the
    # bound run.
    assert len(planned) == 2
    np.testing.assert_array_equal(op(a, float(scale), zero), qops.matrix_multiply_integer_to_float(
        a, float(scale), zero, b, b_scale, b_zero, bias))
    # A scale near float32's largest: sums past its range are infinities, as
    # the function's are.
    np.testing.assert_array_equal(op(a, np.float32(3e38), zero),
                                  qops.matrix_multiply_integer_to_float(
                                      a, np.float32(3e38), zero, b, b_scale, b_zero, bias))
    for bad_scale, bad_zero in ((np.float32(np.inf), zero), (scale, np.int16(3)),
                                (np.array(scale, ">f4"), zero)):
        with pytest.raises(qops.ValidationError) as refused:
            op(a, bad_scale, bad_zero)
        with pytest.raises(qops.ValidationError) as plain:
            qops.matrix_multiply_integer_to_float(a, bad_scale, bad_zero, b, b_scale, b_zero,
                                                  bias)
        assert str(refused.value) == str(plain.value)
    for threads in (0, -1, 1.5, True):
        with pytest.raises(qops.ValidationError, match="n_threads"):
            op(a, scale, zero, n_threads=threads)


def _uint8_product(rng, k=64, n=48):
    """(compiled operator, B, b_scale): a uint8 B of K x N, a scale per
    column and a zero point of 7 bound; calls bring A, its scale and zero point."""
    b = rng.integers(0, 256, (k, n)).astype(np.uint8)
    b_scale = rng.uniform(0.001, 0.03, (1, n)).astype(np.float32)
    return (qops.compile("MATRIX_MULTIPLY_INTEGER_TO_FLOAT", b=b, b_scale=b_scale,
                         b_zero_point=np.uint8(7)), b, b_scale)


def test_a_compiled_product_called_from_two_threads_with_two_forms_of_a_and_new_scales():
    """Calls of two shapes of A in two threads at once, each with its own
    scale and zero point: whichever form is bound, each result is the
    function's."""
    import threading

    rng = np.random.default_rng(42)
    op, b, b_scale = _uint8_product(rng)
    k = b.shape[0]
    cases = [(rng.integers(0, 256, (rows, k)).astype(np.uint8), np.float32(0.01 * (i + 1)),
              np.uint8(i)) for i, rows in enumerate([5, 9] * 20)]
    wanted = [qops.matrix_multiply_integer_to_float(a, s, z, b, b_scale, np.uint8(7))
              for a, s, z in cases]
    failures = []

    def work(offset):
        for index in range(offset, len(cases), 2):
            a, s, z = cases[index]
            for _ in range(5):
                if not np.array_equal(op(a, s, z, n_threads=1), wanted[index]):
                    failures.append(index)

    threads = [threading.Thread(target=work, args=(offset,)) for offset in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures


def test_the_per_call_run_binds_only_the_call_the_plans_just_ran():
    """Another call of another form of A running through the plans just
    before this one's run is bound (another thread's): the bound run is made
    for this call's form or not at all, never for the other's."""
    rng = np.random.default_rng(43)
    op, b, b_scale = _uint8_product(rng)
    k = b.shape[0]
    five, nine = (rng.integers(0, 256, (rows, k)).astype(np.uint8) for rows in (5, 9))
    bind = op._bind_parameters

    def after_another_call(slots):
        op._plans.run({"a": nine, "a_scale": np.float32(0.3), "a_zero_point": np.uint8(1)},
                      op._call_attributes, op.feature_level, out=None, n_threads=1,
                      packed=op._kernel_pack, constants=op._constants, fast=None,
                      tail=op._tail)
        bind(slots)

    op._bind_parameters = after_another_call
    op(five, np.float32(0.1), np.uint8(2))
    op._bind_parameters = bind
    for a, scale, zero in ((five, 0.2, 3), (nine, 0.4, 5), (five, 0.5, 6)):
        np.testing.assert_array_equal(
            op(a, np.float32(scale), np.uint8(zero)),
            qops.matrix_multiply_integer_to_float(a, np.float32(scale), np.uint8(zero), b,
                                                  b_scale, np.uint8(7)))


def test_the_per_call_run_is_bound_again_after_implementations_are_switched():
    rng = np.random.default_rng(44)
    k, n = 64, 48
    b = rng.integers(0, 256, (k, n)).astype(np.uint8)
    op = qops.compile("MATRIX_MULTIPLY_INTEGER_TO_FLOAT", b=b, b_scale=np.float32(0.01),
                      b_zero_point=np.uint8(7))
    a = rng.integers(0, 256, (6, k)).astype(np.uint8)
    op(a, np.float32(0.1), np.uint8(2))
    dispatch.set_enabled("MATRIX_MULTIPLY_INTEGER_TO_FLOAT", "kernels", False)
    dispatch.set_enabled("MATRIX_MULTIPLY_INTEGER_TO_FLOAT", "kernels", True)
    planned = _calls_through_the_plans(op)
    for index in range(6):
        np.testing.assert_array_equal(
            op(a, np.float32(0.1 + index), np.uint8(index)),
            qops.matrix_multiply_integer_to_float(a, np.float32(0.1 + index), np.uint8(index),
                                                  b, np.float32(0.01), np.uint8(7)))
    assert len(planned) == 1
