"""qops.onnx: ONNX nodes on qops, ONNX's own backend cases, the reference evaluator and the CLI.

QLinearConv and QLinearMatMul nodes, and a whole quantized CNN, are judged
against the exact statements of tests/oracles.py; onnxruntime is compared by
the rule of tests/peers.py (where its own output is exact)."""

import subprocess
import sys
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

onnx = pytest.importorskip("onnx")
import oracles  # noqa: E402
from conftest import assert_bits_equal, judge  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import qops  # noqa: E402
import qops.onnx  # noqa: E402

#: Backend cases of the 2-bit types, which arrived with QuantizeLinear /
#: DequantizeLinear 25.
TWO_BIT_CASES = {"test_quantizelinear_int2", "test_quantizelinear_uint2",
                 "test_dequantizelinear_int2", "test_dequantizelinear_uint2"}


def _backend_cases():
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = collect_testcases(None)
    types = set(qops.onnx.supported_operators())
    return [case for case in cases
            if case.model.graph.node and case.model.graph.node[0].op_type in types
            and len(case.model.graph.node) == 1]


BACKEND_CASES = _backend_cases()


def _as_array(value):
    return numpy_helper.to_array(value) if isinstance(value, TensorProto) else np.asarray(value)


def _opset(model):
    return next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))


def test_the_backend_cases_cover_every_supported_operator():
    covered = {case.model.graph.node[0].op_type for case in BACKEND_CASES}
    assert covered == set(qops.onnx.supported_operators())
    assert len(BACKEND_CASES) >= 30


@pytest.mark.parametrize("case", BACKEND_CASES, ids=lambda case: case.name)
def test_onnx_backend_node_case(case):
    node = case.model.graph.node[0]
    opset = _opset(case.model)
    for inputs, outputs in case.data_sets:
        if case.name in TWO_BIT_CASES:  # and not before their opset
            with pytest.raises(qops.UnsupportedError, match="from opset 25"):
                qops.onnx.run_node(node, inputs, opset=24)
        got = qops.onnx.run_node(node, inputs, opset=opset)
        assert len(got) == len(outputs)
        for actual, expected in zip(got, outputs):
            assert_bits_equal(actual, _as_array(expected), case.name)


def test_the_two_bit_cases_are_among_them():
    assert TWO_BIT_CASES <= {case.name for case in BACKEND_CASES}


@pytest.mark.parametrize("case", BACKEND_CASES,
                         ids=lambda case: case.name)
def test_backend_models_run_in_the_reference_evaluator_with_qops_operators(case):
    evaluator = ReferenceEvaluator(case.model, new_ops=qops.onnx.reference_ops())
    for inputs, outputs in case.data_sets:
        feeds = {name: _as_array(value) for name, value in zip(evaluator.input_names, inputs)}
        for actual, expected in zip(evaluator.run(None, feeds), outputs):
            assert_bits_equal(np.asarray(actual), _as_array(expected), case.name)


def test_inputs_by_name_and_packed_4_bit_tensors():
    node = helper.make_node("DequantizeLinear", ["x", "s", "z"], ["y"], axis=0)
    values = np.array([-8, -1, 0, 7, 3], dtype=np.int8)
    packed = helper.make_tensor("x", TensorProto.INT4, [5], values.tolist())
    scale = np.float32(0.5)
    got = qops.onnx.run_node(node, {"x": packed, "s": scale,
                                    "z": helper.make_tensor("z", TensorProto.INT4, [], [1])})
    assert np.array_equal(got[0], (values.astype(np.float32) - 1) * scale)


@pytest.mark.parametrize("onnx_type, dtype, values", [
    (TensorProto.INT2, "int2", [-2, -1, 0, 1, 1, -2, 0]),
    (TensorProto.UINT2, "uint2", [0, 1, 2, 3, 3, 2, 1]),
])
def test_packed_2_bit_tensors(onnx_type, dtype, values):
    """ONNX stores int2 / uint2 four to a byte; a TensorProto of them runs,
    and so does the same bytes as qops.Packed2Bit, read in place."""
    import ml_dtypes

    node = helper.make_node("DequantizeLinear", ["x", "s", "z"], ["y"], axis=0)
    tensor = helper.make_tensor("x", onnx_type, [7], values)
    zero = helper.make_tensor("z", onnx_type, [], [1])
    scale = np.float32(0.25)
    expected = (np.array(values, np.float32) - 1) * scale
    got = qops.onnx.run_node(node, {"x": tensor, "s": scale, "z": zero})
    assert np.array_equal(got[0], expected)
    quantized = np.array(values, getattr(ml_dtypes, dtype))
    packed = qops.Packed2Bit(qops.pack_2bit(quantized), quantized.dtype, (7,))
    assert packed.raw.tolist() == list(tensor.int32_data)  # ONNX's own packing
    assert np.array_equal(qops.dequantize_linear(packed, scale, np.array(1, quantized.dtype)),
                          expected)


def test_unknown_operators_domains_and_opsets_are_refused():
    with pytest.raises(qops.UnsupportedError, match="not an operator qops runs"):
        qops.onnx.run_node(helper.make_node("Conv", ["x", "w"], ["y"]), [None, None])
    with pytest.raises(qops.UnsupportedError, match="domain"):
        qops.onnx.run_node(helper.make_node("QLinearConv", ["x"], ["y"], domain="com.microsoft"),
                           [None])
    with pytest.raises(qops.UnsupportedError, match="does not exist at opset"):
        qops.onnx.run_node(helper.make_node("QuantizeLinear", ["x", "s"], ["y"]),
                           [np.zeros(2, np.float32), np.float32(1)], opset=9)


# -- QLinearConv: padding rules against the exact oracle, onnx.reference and onnxruntime ---

def _one_node(op_type, names, inputs, attributes=None, opset=21):
    """(node, model, feeds) of a one-node model whose given inputs are graph
    inputs (absent ones are omitted); the output is y_zero_point's type."""
    present = [n for n in names if inputs.get(n) is not None]
    node = helper.make_node(op_type, [n if n in present else "" for n in names], ["y"],
                            **(attributes or {}))
    infos = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(
        np.asarray(inputs[n]).dtype), list(np.shape(inputs[n]))) for n in present]
    out_type = helper.np_dtype_to_tensor_dtype(np.asarray(inputs["y_zero_point"]).dtype)
    graph = helper.make_graph([node], op_type, infos,
                              [helper.make_tensor_value_info("y", out_type, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return node, model, {n: np.asarray(inputs[n]) for n in present}


def _qlinear_conv_model(inputs, attributes, opset=21):
    names = ["x", "x_scale", "x_zero_point", "w", "w_scale", "w_zero_point", "y_scale",
             "y_zero_point", "B"]
    return _one_node("QLinearConv", names, inputs, attributes, opset)


def _run_ort(model, feeds):
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


def _conv_inputs(rng, spatial, channels=4, out_channels=6, kernel=3, group=1, per_channel=True):
    x = rng.integers(0, 256, (2, channels, *spatial), dtype=np.uint8)
    w = rng.integers(-128, 128, (out_channels, channels // group, *([kernel] * len(spatial))),
                     dtype=np.int8)
    w_scale = (rng.uniform(0.002, 0.02, out_channels).astype(np.float32) if per_channel
               else np.float32(0.01))
    return {"x": x, "x_scale": np.float32(0.03), "x_zero_point": np.uint8(120), "w": w,
            "w_scale": w_scale,
            "w_zero_point": np.zeros(out_channels, np.int8) if per_channel else np.int8(0),
            "y_scale": np.float32(0.4), "y_zero_point": np.uint8(128),
            "B": rng.integers(-2000, 2000, out_channels, dtype=np.int32)}


@pytest.mark.parametrize("auto_pad", ["NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"])
@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("kernel", [2, 3])
def test_qlinear_conv_padding_rules_are_onnx_s_exactly(auto_pad, stride, kernel):
    rng = np.random.default_rng(kernel * 10 + stride)
    inputs = _conv_inputs(rng, (9, 8), kernel=kernel)
    attributes = {"auto_pad": auto_pad, "strides": [stride, stride],
                  "kernel_shape": [kernel, kernel]}
    if auto_pad == "NOTSET":
        attributes["pads"] = [1, 0, 2, 1]
    node, model, feeds = _qlinear_conv_model(inputs, attributes)
    got = qops.onnx.run_node(node, [feeds.get(n) for n in node.input])[0]
    exact = oracles.qlinear_conv(**feeds, **{k: v for k, v in attributes.items()
                                             if k != "kernel_shape"})
    judge(got, exact, peer=lambda: _run_ort(model, feeds), context=f"QLinearConv {auto_pad}")
    reference = ReferenceEvaluator(model).run(None, feeds)[0]
    assert np.abs(got.astype(int) - reference.astype(int)).max() <= 1


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER"])
@given(size=st.integers(1, 12), kernel=st.integers(1, 5), stride=st.integers(1, 4),
       dilation=st.integers(1, 3))
@settings(max_examples=40, deadline=None)
def test_same_padding_gives_ceil_of_input_over_stride_positions(auto_pad, size, kernel, stride,
                                                                dilation):
    (start,), (end,) = qops.onnx._nodes.conv_padding(auto_pad, None, (size,), (kernel,),
                                                     (stride,), (dilation,))
    extent = (kernel - 1) * dilation + 1
    positions = (size + start + end - extent) // stride + 1
    assert positions == -(-size // stride)
    assert abs(start - end) <= 1
    assert (end >= start) if auto_pad == "SAME_UPPER" else (start >= end)


def test_qlinear_conv_1d_groups_and_per_tensor_weights():
    rng = np.random.default_rng(3)
    inputs = _conv_inputs(rng, (11,), channels=4, out_channels=4, group=2, per_channel=False)
    node, model, feeds = _qlinear_conv_model(inputs, {"group": 2, "pads": [1, 1],
                                                      "dilations": [2]})
    got = qops.onnx.run_node(node, [feeds.get(n) for n in node.input])[0]
    reference = ReferenceEvaluator(model).run(None, feeds)[0]
    assert got.shape == reference.shape == (2, 4, 9)
    assert np.abs(got.astype(int) - reference.astype(int)).max() <= 1
    exact = oracles.qlinear_conv(**feeds, group=2, pads=[1, 1], dilations=[2])
    judge(got, exact, peer=lambda: _run_ort(model, feeds), context="1-D QLinearConv")


def test_qlinear_conv_rejects_3d_and_a_wrong_kernel_shape():
    rng = np.random.default_rng(4)
    inputs = _conv_inputs(rng, (4, 4, 4))
    node, _, feeds = _qlinear_conv_model(inputs, {})
    with pytest.raises(qops.UnsupportedError, match="1-D and 2-D"):
        qops.onnx.run_node(node, [feeds.get(n) for n in node.input])
    inputs = _conv_inputs(rng, (6, 6))
    node, _, feeds = _qlinear_conv_model(inputs, {"kernel_shape": [2, 2]})
    with pytest.raises(qops.ValidationError, match="kernel_shape"):
        qops.onnx.run_node(node, [feeds.get(n) for n in node.input])


# -- QLinearMatMul: numpy.matmul shapes, per-row / per-column, scale types --------------

def _matmul_model(inputs, opset):
    names = ["a", "a_scale", "a_zero_point", "b", "b_scale", "b_zero_point", "y_scale",
             "y_zero_point"]
    return _one_node("QLinearMatMul", names, inputs, opset=opset)


def _matmul_inputs(rng, a_shape, b_shape, scale_dtype=np.float32, a_dtype=np.uint8,
                   b_dtype=np.int8, rows=None, columns=None):
    def ints(dtype, shape):
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max + 1, shape, dtype=dtype)

    def parameter(count, low, high, dtype):
        if count is None:
            return np.asarray(rng.uniform(low, high), dtype)
        return rng.uniform(low, high, count).astype(dtype)

    def zero(count, dtype):
        return np.asarray(ints(dtype, count if count else ()), dtype)

    return {"a": ints(a_dtype, a_shape), "a_scale": parameter(rows, 0.01, 0.03, scale_dtype),
            "a_zero_point": zero(rows, a_dtype), "b": ints(b_dtype, b_shape),
            "b_scale": parameter(columns, 0.005, 0.02, scale_dtype),
            "b_zero_point": zero(columns, b_dtype),
            "y_scale": parameter(rows, 0.3, 0.6, scale_dtype), "y_zero_point": zero(rows, a_dtype)}


@pytest.mark.parametrize("a_shape,b_shape", [
    ((5, 7), (7, 3)), ((2, 5, 7), (7, 3)), ((7,), (7, 3)), ((5, 7), (7,)), ((7,), (2, 7, 3)),
    ((2, 1, 5, 7), (3, 7, 4)), ((1, 5, 7), (2, 7, 3))])
def test_qlinear_matmul_broadcasts_like_numpy_matmul(a_shape, b_shape):
    rng = np.random.default_rng(len(a_shape) * 10 + len(b_shape))
    inputs = _matmul_inputs(rng, a_shape, b_shape)
    node, model, feeds = _matmul_model(inputs, 21)
    got = qops.onnx.run_node(node, list(feeds.values()))[0]
    assert got.shape == np.matmul(np.zeros(a_shape), np.zeros(b_shape)).shape
    judge(got, oracles.qlinear_matmul(**feeds), peer=lambda: _run_ort(model, feeds),
          context="QLinearMatMul")


def test_qlinear_matmul_per_row_and_per_column_parameters_match_the_reference():
    rng = np.random.default_rng(7)
    inputs = _matmul_inputs(rng, (6, 9), (9, 4), rows=6, columns=4)
    inputs["y_scale"], inputs["y_zero_point"] = np.float32(0.5), np.uint8(128)
    node, model, feeds = _matmul_model(inputs, 21)
    got = qops.onnx.run_node(node, list(feeds.values()))[0]
    # ONNX writes per-row parameters as M-vectors or [M, 1], per-column ones as
    # N-vectors or [1, N]; onnx.reference takes only the second form.
    shaped = dict(feeds, a_scale=feeds["a_scale"].reshape(-1, 1),
                  a_zero_point=feeds["a_zero_point"].reshape(-1, 1),
                  b_scale=feeds["b_scale"].reshape(1, -1),
                  b_zero_point=feeds["b_zero_point"].reshape(1, -1))
    _, shaped_model, _ = _matmul_model(shaped, 21)
    assert np.array_equal(qops.onnx.run_node(node, list(shaped.values()))[0], got)
    reference = ReferenceEvaluator(shaped_model).run(None, shaped)[0]
    assert np.abs(got.astype(int) - reference.astype(int)).max() <= 1
    scales = (feeds["a_scale"].reshape(-1, 1), feeds["b_scale"].reshape(1, -1),
              np.float32(0.5))
    expected = qops.reference.quantized_linear_matrix_multiply(
        feeds["a"], scales[0], feeds["a_zero_point"].reshape(-1, 1), feeds["b"], scales[1],
        feeds["b_zero_point"].reshape(1, -1), np.float32(0.5), np.uint8(128),
        output_dtype=np.dtype(np.uint8))
    assert np.array_equal(got, expected)


@pytest.mark.parametrize("scale_dtype", [np.float16, "bfloat16"])
def test_float16_and_bfloat16_scales_are_onnx_21_and_convert_exactly(scale_dtype):
    import ml_dtypes

    dtype = ml_dtypes.bfloat16 if scale_dtype == "bfloat16" else scale_dtype
    rng = np.random.default_rng(8)
    inputs = _matmul_inputs(rng, (4, 6), (6, 5), scale_dtype=dtype)
    node, model, feeds = _matmul_model(inputs, 21)
    got = qops.onnx.run_node(node, list(feeds.values()), opset=21)[0]
    as_float32 = {k: (v.astype(np.float32) if "scale" in k else v) for k, v in feeds.items()}
    expected = qops.reference.quantized_linear_matrix_multiply(
        as_float32["a"], as_float32["a_scale"], as_float32["a_zero_point"], as_float32["b"],
        as_float32["b_scale"], as_float32["b_zero_point"], as_float32["y_scale"],
        as_float32["y_zero_point"], output_dtype=np.dtype(np.uint8))
    assert np.array_equal(got, expected)
    with pytest.raises(qops.UnsupportedError, match="opset 10 takes float32 scales"):
        qops.onnx.run_node(node, list(feeds.values()), opset=10)


def test_qlinear_matmul_refuses_float8_and_more_than_four_dimensions():
    import ml_dtypes

    rng = np.random.default_rng(9)
    inputs = _matmul_inputs(rng, (4, 6), (6, 5))
    node, _, feeds = _matmul_model(inputs, 21)
    values = list(feeds.values())
    values[0] = values[0].astype(ml_dtypes.float8_e4m3fn)
    with pytest.raises(qops.UnsupportedError, match="float8"):
        qops.onnx.run_node(node, values)
    inputs = _matmul_inputs(rng, (1, 1, 1, 2, 4, 6), (6, 5))
    node, _, feeds = _matmul_model(inputs, 21)
    with pytest.raises(qops.UnsupportedError, match="up to 4"):
        qops.onnx.run_node(node, list(feeds.values()))


# -- a quantized CNN, three ways -------------------------------------------------------

@pytest.fixture(scope="module")
def quantized_cnn(tmp_path_factory):
    pytest.importorskip("onnxruntime.quantization")
    from qops.onnx._examples import quantized_cnn as build

    path = tmp_path_factory.mktemp("cnn") / "quantized.onnx"
    build(path, np.random.default_rng(10))
    return path


def test_a_quantized_cnn_runs_three_ways_and_qops_equals_the_exact_model(quantized_cnn):
    """The exact model is onnx.reference's evaluator with QLinearConv and
    QLinearMatMul replaced by tests/oracles.py's statements; onnxruntime is
    compared with it by the rule."""
    ort = pytest.importorskip("onnxruntime")
    model = onnx.load(quantized_cnn)
    op_types = [node.op_type for node in model.graph.node]
    assert op_types.count("QLinearConv") == 2 and "QLinearMatMul" in op_types
    assert any(init.dims == [8] and init.name.endswith("scale") for init in model.graph.initializer
               ), "weights are quantized per channel"
    rng = np.random.default_rng(11)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    plain = ReferenceEvaluator(model)
    with_qops = ReferenceEvaluator(model, new_ops=qops.onnx.reference_ops())
    exact = ReferenceEvaluator(model, new_ops=oracles.exact_operators())
    for index in range(3):
        x = rng.normal(0, 1, (1, 3, 16, 16)).astype(np.float32)
        expected = exact.run(None, {"x": x})[0]
        got = with_qops.run(None, {"x": x})[0]
        judge(got, expected, peer=lambda: session.run(None, {"x": x})[0],
              context=f"quantized CNN, input {index}")
        reference = plain.run(None, {"x": x})[0]
        # The reference evaluator requantizes in float64 with the zero point
        # before rounding: each quantized value within 1, scaled by y's scale.
        assert np.allclose(reference, expected, atol=0.5)


def test_the_run_command_writes_outputs_and_lists_the_session_s_calls(quantized_cnn, tmp_path):
    x = np.random.default_rng(12).normal(0, 1, (1, 3, 16, 16)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    result = subprocess.run(
        [sys.executable, "-m", "qops", "run", str(quantized_cnn), "--input",
         f"x={tmp_path / 'x.npy'}", "--out", str(tmp_path / "out"), "--repeat", "2"],
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "qops QLinearConv (compiled)" in result.stdout and "ms per run" in result.stdout
    evaluator = ReferenceEvaluator(onnx.load(quantized_cnn), new_ops=qops.onnx.reference_ops())
    assert np.array_equal(np.load(tmp_path / "out" / "y.npy"), evaluator.run(None, {"x": x})[0])
    missing = subprocess.run([sys.executable, "-m", "qops", "run", str(quantized_cnn)],
                             capture_output=True, text=True, timeout=300)
    assert missing.returncode == 2 and "--input for x" in missing.stderr
