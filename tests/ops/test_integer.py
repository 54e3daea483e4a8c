"""The integer operators through the public API: CONVOLUTION_INTEGER,
MATRIX_MULTIPLY_INTEGER and DYNAMIC_QUANTIZE_LINEAR against exact sums and
onnx.reference, with onnxruntime compared by the rule of tests/peers.py; their
validation and their int32 limit."""

import functools

import numpy as np
import oracles
import pytest
from conftest import judge, run_ort, run_reference
from hypothesis import given, settings
from hypothesis import strategies as st

import qops
from qops.backends import dispatch as _dispatch

u8, i8 = np.uint8, np.int8


def _ints(rng, dtype, shape):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, shape, dtype=dtype)


# -- MATRIX_MULTIPLY_INTEGER ----------------------------------------------------------------

@pytest.mark.parametrize("a_type,b_type", [(u8, u8), (u8, i8), (i8, u8), (i8, i8)])
def test_matrix_multiply_integer_equals_onnx_matmul_integer(a_type, b_type):
    rng = np.random.default_rng(0)
    a, b = _ints(rng, a_type, (3, 5, 7)), _ints(rng, b_type, (7, 4))
    a_zero, b_zero = _ints(rng, a_type, ()), _ints(rng, b_type, (4,))
    got = qops.matrix_multiply_integer(a, a_zero, b.reshape(1, 7, 4), b_zero.reshape(1, 1, 4))
    inputs = {"A": a, "B": b, "a_zero_point": a_zero, "b_zero_point": b_zero}
    exact = ((a.astype(np.int64) - int(a_zero)) @ (b.astype(np.int64) - b_zero.astype(np.int64))
             ).astype(np.int32)
    judge(got, exact, context="MatMulInteger",
          peer=lambda: run_ort("MatMulInteger", inputs, opset=10, output_dtype=np.int32))
    assert np.array_equal(got, run_reference("MatMulInteger", inputs, opset=10,
                                             output_dtype=np.int32))


def test_matrix_multiply_integer_feature_levels():
    rng = np.random.default_rng(1)
    a, b = _ints(rng, u8, (4, 6)), _ints(rng, i8, (6, 3))
    assert qops.matrix_multiply_integer(a, None, b, None).shape == (4, 3)
    with pytest.raises(qops.UnsupportedError, match="a has 2 dimensions; DML_FEATURE_LEVEL_2_1 "
                                                    "supports 4"):
        qops.matrix_multiply_integer(a, None, b, None, feature_level="2_1")
    with pytest.raises(qops.ValidationError, match="b and b_zero_point must have the same data type"):
        qops.matrix_multiply_integer(a, None, b, np.uint8(1))


@pytest.mark.parametrize("n_threads", [1, 2])
def test_matrix_multiply_integer_one_dimensional_b_zero_point_from_5_2(n_threads):
    """From 5_2 the B zero point may have 1 dimension: (N,) per column, (1,)
    per tensor; 4_0 wants 2 to 4.  ONNX's MatMulInteger takes the same 1-D
    zero point, so onnxruntime is the peer."""
    rng = np.random.default_rng(5)
    a, b = _ints(rng, u8, (2, 5, 9)), _ints(rng, i8, (2, 9, 6))
    for b_zero in (_ints(rng, i8, (6,)), _ints(rng, i8, (1,))):
        exact = ((a.astype(np.int64) - 3) @ (b.astype(np.int64) - b_zero.astype(np.int64))
                 ).astype(np.int32)
        got = qops.matrix_multiply_integer(a, u8(3), b, b_zero, n_threads=n_threads)
        inputs = {"A": a, "B": b, "a_zero_point": np.asarray(u8(3)), "b_zero_point": b_zero}
        judge(got, exact, context="MatMulInteger, 1-D b_zero_point",
              peer=lambda: run_ort("MatMulInteger", inputs, opset=10, output_dtype=np.int32))
        with pytest.raises(qops.UnsupportedError, match="b_zero_point has 1 dimension; "
                                                        "DML_FEATURE_LEVEL_4_0 supports 2 to 4 "
                                                        "\\(1 to 4 from DML_FEATURE_LEVEL_5_2\\)"):
            qops.matrix_multiply_integer(a, u8(3), b, b_zero, feature_level="4_0")
    with pytest.raises(qops.ValidationError, match="b_zero_point has shape \\(4,\\); expected "
                                                   "\\(1,\\) per-tensor or \\(6,\\) per-column"):
        qops.matrix_multiply_integer(a, None, b, _ints(rng, i8, (4,)))
    # 4_0 ties the B zero point's dimension count to the tensors'; 5_2 does not.
    b_zero = _ints(rng, i8, (1, 6))
    exact = (a.astype(np.int64) @ (b.astype(np.int64) - b_zero.astype(np.int64))).astype(np.int32)
    assert np.array_equal(qops.matrix_multiply_integer(a, None, b, b_zero), exact)
    with pytest.raises(qops.ValidationError, match="same dimension count"):
        qops.matrix_multiply_integer(a, None, b, b_zero, feature_level="4_0")


def test_sums_beyond_int32_are_an_error_not_a_wrap():
    depth = 70000  # past the kernels' proven bound: the exact path runs
    a = np.full((1, depth), 255, u8)
    b = np.full((depth, 1), 255, u8)
    small = qops.matrix_multiply_integer(a[:, :1000], np.uint8(0), b[:1000], np.uint8(0))
    assert small[0, 0] == 1000 * 255 * 255
    out = np.full((1, 1), 7, np.int32)
    with pytest.raises(qops.ValidationError, match="outside int32"):
        qops.matrix_multiply_integer(a, np.uint8(0), b, np.uint8(0), out=out)
    assert out[0, 0] == 7
    # The same K with a sum that fits runs exactly.
    half = np.zeros((depth, 1), u8)
    assert qops.matrix_multiply_integer(a, np.uint8(0), half, np.uint8(1))[0, 0] == -255 * depth


# -- CONVOLUTION_INTEGER --------------------------------------------------------------------

@given(seed=st.integers(0, 2**16), stride=st.integers(1, 2), pad=st.integers(0, 2),
       kernel=st.integers(1, 3), groups=st.sampled_from([1, 2]),
       per_channel=st.booleans(), x_type=st.sampled_from([u8, i8]),
       w_type=st.sampled_from([u8, i8]))
@settings(max_examples=30, deadline=None)
def test_convolution_integer_equals_onnx_conv_integer(seed, stride, pad, kernel, groups,
                                                      per_channel, x_type, w_type):
    rng = np.random.default_rng(seed)
    x = _ints(rng, x_type, (1, 2 * groups, 7, 6))
    w = _ints(rng, w_type, (4, 2, kernel, kernel))
    x_zero = _ints(rng, x_type, ())
    w_zero = _ints(rng, w_type, (4,)) if per_channel else _ints(rng, w_type, ())
    got = qops.convolution_integer(x, x_zero, w, w_zero, strides=(stride, stride),
                                   start_padding=(pad, 0), end_padding=(0, pad),
                                   group_count=groups)
    attributes = {"strides": [stride, stride], "pads": [pad, 0, 0, pad], "group": groups}
    inputs = {"x": x, "w": w, "x_zero_point": x_zero, "w_zero_point": w_zero}
    want = run_reference("ConvInteger", inputs, attributes, opset=10, output_dtype=np.int32)
    assert got.dtype == np.int32 and np.array_equal(got, want)


@pytest.mark.parametrize("w_type", [u8, i8])
def test_convolution_integer_equals_exact_sums_and_onnxruntime_where_it_is_exact(w_type):
    rng = np.random.default_rng(2)
    x, w = _ints(rng, u8, (2, 3, 8, 8)), _ints(rng, w_type, (5, 3, 3, 3))
    w_zero = w_type(120 if w_type == u8 else -7)
    inputs = {"x": x, "w": w, "x_zero_point": np.uint8(100), "w_zero_point": w_zero}
    got = qops.convolution_integer(x, np.uint8(100), w, w_zero, start_padding=(1, 1),
                                   end_padding=(1, 1))
    exact = oracles.convolution_sums(x, 100, w, int(w_zero), None, starts=(1, 1), ends=(1, 1),
                                     strides=(1, 1), dilations=(1, 1), group=1)
    judge(got, exact.astype(np.int32), context="ConvInteger",
          peer=lambda: run_ort("ConvInteger", inputs, {"pads": [1, 1, 1, 1]}, opset=10,
                               output_dtype=np.int32))


def test_one_dimensional_convolution_integer_from_feature_level_4_0():
    rng = np.random.default_rng(3)
    x, w = _ints(rng, u8, (2, 4, 11)), _ints(rng, i8, (3, 4, 3))
    got = qops.convolution_integer(x, np.uint8(9), w, np.arange(3, dtype=i8), strides=(2,),
                                   dilations=(2,), start_padding=(1,), end_padding=(2,))
    square = qops.convolution_integer(x[:, :, None], np.uint8(9), w[:, :, None],
                                      np.arange(3, dtype=i8), strides=(1, 2), dilations=(1, 2),
                                      start_padding=(0, 1), end_padding=(0, 2))
    assert got.shape == (2, 3, 5) and np.array_equal(got, square[:, :, 0])
    with pytest.raises(qops.UnsupportedError, match="input has 3 dimensions; "
                                                    "DML_FEATURE_LEVEL_2_1 supports 4"):
        qops.convolution_integer(x, None, w, None, feature_level="2_1")
    with pytest.raises(qops.ValidationError, match="one value per attribute"):
        qops.convolution_integer(x, None, w, None, strides=(1, 1))


def test_convolution_integer_runs_on_the_kernels_and_checks_its_geometry():
    rng = np.random.default_rng(4)
    x, w = _ints(rng, u8, (1, 4, 6, 6)), _ints(rng, i8, (2, 4, 3, 3))
    call = qops.ops.integer.prepare_convolution_integer(
        dict(input=x, input_zero_point=None, filter=w, filter_zero_point=None), {})
    assert _dispatch.select(call).name == "kernels"
    with pytest.raises(qops.ValidationError, match="group_count"):
        qops.convolution_integer(x, None, w, None, group_count=3)
    with pytest.raises(qops.ValidationError, match="filter_zero_point has shape"):
        qops.convolution_integer(x, None, w, np.zeros((1, 3, 1, 1), i8))


# -- DYNAMIC_QUANTIZE_LINEAR ----------------------------------------------------------------

def _dynamic_quantize_model():
    from onnx import TensorProto, helper

    node = helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "y_scale", "y_zero_point"])
    graph = helper.make_graph(
        [node], "dql", [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("y", TensorProto.UINT8, None),
         helper.make_tensor_value_info("y_scale", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("y_zero_point", TensorProto.UINT8, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    model.ir_version = 10
    return model


def _reference_dynamic_quantize(x):
    from onnx.reference import ReferenceEvaluator

    return ReferenceEvaluator(_dynamic_quantize_model()).run(None, {"x": x})


def _onnxruntime_dynamic_quantize(x):
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(_dynamic_quantize_model().SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})

@given(values=st.lists(st.floats(-1e4, 1e4, width=32), min_size=1, max_size=40))
@settings(max_examples=80, deadline=None)
def test_dynamic_quantize_linear_equals_onnx_reference_bit_for_bit(values):
    x = np.array(values, np.float32)
    y, scale, zero_point = qops.dynamic_quantize_linear(x)
    want = _reference_dynamic_quantize(x)
    assert np.array_equal(y, want[0])
    assert scale.shape == zero_point.shape == (1,)
    assert scale.view(np.uint32)[0] == np.asarray(want[1], np.float32).view(np.uint32)
    assert zero_point[0] == want[2]


@pytest.mark.parametrize("values", [[1.401298464324817e-45], [-1e-44, 2e-45, 0.0], [-3e-45],
                                    [3e38, -3e38, 1.0, 0.0], [-3.4e38, 1e38]])
def test_dynamic_quantize_linear_of_a_range_beyond_float32_equals_onnx_reference(values):
    """span / 255 underflows to a zero scale, or the span overflows to an
    infinite one; QuantizeLinear refuses both."""
    x = np.array(values, np.float32)
    y, scale, zero_point = qops.dynamic_quantize_linear(x)
    want = _reference_dynamic_quantize(x)
    assert np.array_equal(y, want[0])
    assert scale.view(np.uint32)[0] == np.asarray(want[1], np.float32).view(np.uint32)
    assert zero_point[0] == want[2]


def test_dynamic_quantize_linear_cases_onnxruntime_and_types():
    x = np.array([[-1.5, 0.0, 0.25], [3.0, 2.5, -0.75]], np.float32)
    y, scale, zero_point = qops.dynamic_quantize_linear(x)
    want = _reference_dynamic_quantize(x)
    peer_outputs = functools.cache(lambda: _onnxruntime_dynamic_quantize(x))
    for index, (got, oracle) in enumerate(zip((y, scale.reshape(()), zero_point.reshape(())),
                                              want)):
        judge(got, np.asarray(oracle), context="DynamicQuantizeLinear",
              peer=lambda: np.asarray(peer_outputs()[index]))
    # A constant input has an empty range: the scale is 1 / 255.
    _, constant_scale, _ = qops.dynamic_quantize_linear(np.zeros(4, np.float32))
    assert constant_scale[0] == np.float32(1.0) / np.float32(255)
    # float16 input converts exactly; int8 output uses -128..127.
    half = qops.dynamic_quantize_linear(x.astype(np.float16))
    assert np.array_equal(half[0], qops.dynamic_quantize_linear(x.astype(np.float16)
                                                                 .astype(np.float32))[0])
    signed, signed_scale, signed_zero = qops.dynamic_quantize_linear(x, output_dtype=np.int8)
    assert signed.dtype == signed_zero.dtype == np.int8 and signed_scale[0, 0] == scale[0, 0]
    assert np.array_equal(signed.astype(int), y.astype(int) - 128)


@pytest.mark.parametrize("bad,message", [
    (np.array([1.0, np.nan], np.float32), "NaN or infinite"),
    (np.zeros(0, np.float32), "empty"),
    (np.zeros(3, np.float64), "input has dtype float64"),
    (np.zeros(3, np.float32), "DML_FEATURE_LEVEL_2_1"),
])
def test_dynamic_quantize_linear_rejects(bad, message):
    level = "2_1" if message.startswith("DML") else None
    with pytest.raises(qops.ValidationError, match=message):
        qops.dynamic_quantize_linear(bad, feature_level=level)


def _parameters_statement(minimum, maximum, low, high):
    """ONNX's DynamicQuantizeLinear scale and zero point of a range, stated
    on NumPy scalars: the range widened to 0, span / (high - low), the zero
    point low - smallest / scale clamped (NaN to high) and rounded half to
    even, each step in float32."""
    largest = np.float32(max(0.0, float(maximum)))
    smallest = np.float32(min(0.0, float(minimum)))
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        span = np.float32(1.0) if largest == smallest else np.float32(largest - smallest)
        scale = np.float32(span / np.float32(high - low))
        initial = np.float32(low) - smallest / scale
    zero = np.float32(high) if np.isnan(initial) else np.rint(np.clip(initial, low, high))
    return scale, zero


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@settings(max_examples=2000, deadline=None)
@given(first=st.floats(width=32, allow_nan=False, allow_infinity=False),
       second=st.floats(width=32, allow_nan=False, allow_infinity=False))
def test_dynamic_parameters_of_any_finite_range_are_the_statements(dtype, first, second):
    """The reference's scale and zero point of every finite float32 range
    (subnormal, huge, equal, one-signed, crossing 0): the statement's bits,
    as a float32 and an integer of the output type."""
    info = np.iinfo(dtype)
    scale, zero = qops.reference.dynamic_quantize_parameters_of_range(
        min(first, second), max(first, second), dtype)
    want_scale, want_zero = _parameters_statement(min(first, second), max(first, second),
                                                  info.min, info.max)
    assert type(scale) is np.float32 and type(zero) is dtype
    assert scale.tobytes() == want_scale.tobytes() and zero == want_zero


@pytest.mark.parametrize("edges", [(0.0, 0.0), (-1e-40, 1e-40), (-3e38, 3e38), (2.0, 2.0),
                                   (-5.0, -1.0), (0.5, 7.0), (-1.0, 2.0 ** 100),
                                   (0.0, 1.4e-45), (-2.0 ** -100, 0.0)])
def test_dynamic_parameters_of_the_special_ranges_are_the_statements(edges):
    """The ranges at and past the ends of the spans computed without
    NumPy's error state: the statement's bits, with no warning."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        scale, zero = qops.reference.dynamic_quantize_parameters_of_range(*edges, np.uint8)
    want_scale, want_zero = _parameters_statement(*edges, 0, 255)
    assert scale.tobytes() == want_scale.tobytes() and zero == want_zero
