"""MatMulNBits in models: the node through run_node and the session (B
constant: compiled once; B an input: the adapter), DequantizeLinear of a
blocked 2-, 4- or 8-bit weight into MatMul fused onto the same kernels, and
a small block of such layers against onnxruntime."""

import ml_dtypes
import numpy as np
import pytest

pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import qops  # noqa: E402
import qops.onnx as qonnx  # noqa: E402

CONTRIB = helper.make_opsetid("com.microsoft", 1)


def _weights(rng, k, n, bits, block_size):
    k_blocks = -(-k // block_size)
    b = rng.integers(0, 256, (n, k_blocks, block_size * bits // 8), dtype=np.uint8)
    scales = (rng.random((n, k_blocks)) * 0.05 + 0.01).astype(np.float32)
    zero_points = rng.integers(0, 256, (n, -(-k_blocks * bits // 8)), dtype=np.uint8)
    return b, scales, zero_points


def _n_bits_model(layers, k, inputs_constant=True):
    """A chain of MatMulNBits layers (Relu between them), weights as initializers."""
    nodes, initializers, value = [], [], "A"
    for index, (b, scales, zero_points, n, bits, block_size) in enumerate(layers):
        names = [f"B{index}", f"S{index}", f"Z{index}"]
        initializers += [numpy_helper.from_array(b, names[0]),
                         numpy_helper.from_array(scales, names[1]),
                         numpy_helper.from_array(zero_points, names[2])]
        out = f"Y{index}" if index == len(layers) - 1 else f"H{index}"
        nodes.append(helper.make_node("MatMulNBits", [value, *names], [out],
                                      domain="com.microsoft", name=f"layer{index}", K=k, N=n,
                                      bits=bits, block_size=block_size))
        if index < len(layers) - 1:
            nodes.append(helper.make_node("Relu", [out], [f"R{index}"]))
            value, k = f"R{index}", n
        else:
            value = out
    graph = helper.make_graph(
        nodes, "n_bits", [helper.make_tensor_value_info("A", TensorProto.FLOAT, ["M", None])],
        [helper.make_tensor_value_info(value, TensorProto.FLOAT, None)],
        initializers if inputs_constant else [])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), CONTRIB])


def test_run_node_is_the_function():
    rng = np.random.default_rng(1)
    b, scales, zero_points = _weights(rng, 96, 20, 4, 32)
    a = rng.standard_normal((3, 96)).astype(np.float32)
    node = helper.make_node("MatMulNBits", ["A", "B", "S", "Z"], ["Y"], domain="com.microsoft",
                            K=96, N=20, bits=4, block_size=32)
    got = qonnx.run_node(node, [a, b, scales, zero_points])[0]
    assert np.array_equal(got, qops.matmul_n_bits(a, b, scales, zero_points, k=96, n=20,
                                                  block_size=32))
    assert "MatMulNBits" in qonnx.supported_operators("com.microsoft")


def test_run_node_refuses_an_unknown_attribute():
    node = helper.make_node("MatMulNBits", ["A", "B", "S"], ["Y"], domain="com.microsoft", K=32,
                            N=2, block_size=16, group=2)
    with pytest.raises(qops.ValidationError, match="MatMulNBits: group"):
        qonnx.run_node(node, [np.zeros((1, 32), np.float32), np.zeros((2, 2, 8), np.uint8),
                              np.ones((2, 2), np.float32)])


def test_a_session_compiles_constant_weights_and_equals_the_function():
    rng = np.random.default_rng(2)
    first = (*_weights(rng, 64, 48, 4, 32), 48, 4, 32)
    second = (*_weights(rng, 48, 24, 8, 16), 24, 8, 16)
    session = qonnx.InferenceSession(_n_bits_model([first, second], 64), n_threads=2)
    assert [step.kind for step in session.steps].count("qops MatMulNBits (compiled)") == 2
    a = rng.standard_normal((5, 64)).astype(np.float32)
    got = session.run(None, {"A": a})[0]
    hidden = np.maximum(qops.matmul_n_bits(a, *first[:3], k=64, n=48, block_size=32), 0)
    want = qops.matmul_n_bits(hidden, *second[:3], k=48, n=24, bits=8, block_size=16)
    assert np.array_equal(got, want)


def test_a_session_with_weights_as_inputs_runs_the_node():
    rng = np.random.default_rng(3)
    b, scales, zero_points = _weights(rng, 32, 16, 2, 16)
    node = helper.make_node("MatMulNBits", ["A", "B", "S", "Z"], ["Y"], domain="com.microsoft",
                            K=32, N=16, bits=2, block_size=16)
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info("A", TensorProto.FLOAT, [2, 32]),
         helper.make_tensor_value_info("B", TensorProto.UINT8, list(b.shape)),
         helper.make_tensor_value_info("S", TensorProto.FLOAT, list(scales.shape)),
         helper.make_tensor_value_info("Z", TensorProto.UINT8, list(zero_points.shape))],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), CONTRIB])
    session = qonnx.InferenceSession(model)
    a = rng.standard_normal((2, 32)).astype(np.float32)
    got = session.run(None, {"A": a, "B": b, "S": scales, "Z": zero_points})[0]
    assert np.array_equal(got, qops.matmul_n_bits(a, b, scales, zero_points, k=32, n=16,
                                                  bits=2, block_size=16))


def test_a_malformed_node_is_named_when_the_session_is_built():
    rng = np.random.default_rng(4)
    b, scales, zero_points = _weights(rng, 64, 8, 4, 32)
    model = _n_bits_model([(b, scales[:, :1], zero_points, 8, 4, 32)], 64)
    with pytest.raises(qops.ValidationError, match="layer0.*scales"):
        qonnx.InferenceSession(model)


def _dq_matmul_model(weight, scale, zero_point, block_size):
    k, n = weight.shape
    initializers = [numpy_helper.from_array(weight, "W"), numpy_helper.from_array(scale, "S")]
    dq_inputs = ["W", "S"]
    if zero_point is not None:
        initializers.append(numpy_helper.from_array(zero_point, "Z"))
        dq_inputs.append("Z")
    nodes = [helper.make_node("DequantizeLinear", dq_inputs, ["Wf"], axis=0,
                              block_size=block_size),
             helper.make_node("MatMul", ["A", "Wf"], ["Y"], name="proj")]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("A", TensorProto.FLOAT, ["M", k])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)], initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


@pytest.mark.parametrize("dtype", [ml_dtypes.int4, ml_dtypes.uint4, np.int8, np.uint8],
                         ids=["int4", "uint4", "int8", "uint8"])
@pytest.mark.parametrize("with_zero_point", [False, True])
def test_dequantize_linear_into_matmul_runs_as_matmul_n_bits(dtype, with_zero_point):
    """The fused pair equals MatMulNBits on the same weights, and is within
    float32 rounding (K * 2**-24 of the products' magnitudes, twice: two
    orders of summation) of the two nodes run as written."""
    rng = np.random.default_rng(5)
    k, n, block_size = 100, 24, 32
    k_blocks = -(-k // block_size)
    info = ml_dtypes.iinfo(dtype)
    weight = rng.integers(int(info.min), int(info.max) + 1, (k, n)).astype(dtype)
    scale = (rng.random((k_blocks, n)) * 0.05 + 0.01).astype(np.float32)
    zero_point = (rng.integers(int(info.min), int(info.max) + 1, (k_blocks, n)).astype(dtype)
                  if with_zero_point else None)
    model = _dq_matmul_model(weight, scale, zero_point, block_size)
    fused = qonnx.InferenceSession(model)
    assert [step.kind for step in fused.steps] == ["DQ MatMul (MatMulNBits)"]
    a = rng.standard_normal((3, k)).astype(np.float32)
    got = fused.run(None, {"A": a})[0]
    written = qonnx.InferenceSession(model, fuse=False).run(None, {"A": a})[0]
    zeros = (np.zeros((k_blocks, n)) if zero_point is None else zero_point.astype(np.float64))
    weights = ((weight.astype(np.float64) - np.repeat(zeros, block_size, axis=0)[:k])
               * np.repeat(scale.astype(np.float64), block_size, axis=0)[:k])
    magnitude = np.abs(a.astype(np.float64)) @ np.abs(weights)
    assert np.all(np.abs(got - written) <= 2 * (k + 2) * 2.0 ** -24 * magnitude)


def test_a_matmul_of_a_per_channel_weight_is_not_taken():
    """Only blocked weights run as MatMulNBits; a per-channel one stays as written."""
    rng = np.random.default_rng(6)
    weight = rng.integers(-8, 8, (32, 4)).astype(ml_dtypes.int4)
    graph = helper.make_graph(
        [helper.make_node("DequantizeLinear", ["W", "S"], ["Wf"], axis=1),
         helper.make_node("MatMul", ["A", "Wf"], ["Y"])], "g",
        [helper.make_tensor_value_info("A", TensorProto.FLOAT, [1, 32])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(weight, "W"),
         numpy_helper.from_array(np.full(4, 0.5, np.float32), "S")])
    session = qonnx.InferenceSession(helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 21)]))
    assert "DQ MatMul (MatMulNBits)" not in [step.kind for step in session.steps]


def test_a_block_of_layers_is_within_float32_rounding_of_onnxruntime():
    ort = pytest.importorskip("onnxruntime")
    rng = np.random.default_rng(7)
    layers = [(*_weights(rng, 128, 256, 4, 32), 256, 4, 32),
              (*_weights(rng, 256, 128, 4, 64), 128, 4, 64)]
    model = _n_bits_model(layers, 128)
    a = rng.standard_normal((4, 128)).astype(np.float32)
    got = qonnx.InferenceSession(model).run(None, {"A": a})[0]
    theirs = ort.InferenceSession(model.SerializeToString(),
                                  providers=["CPUExecutionProvider"]).run(None, {"A": a})[0]
    assert np.allclose(got, theirs, rtol=1e-4, atol=1e-4 * np.abs(theirs).max())
