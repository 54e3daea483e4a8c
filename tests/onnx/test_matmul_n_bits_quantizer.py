"""Models written by onnxruntime's MatMulNBitsQuantizer run in a qops session:
a small transformer-style block (two projections around a ReLU, and a
residual add) with random weights, quantized to 4-bit blocks in both of the
quantizer's formats (MatMulNBits nodes, or DequantizeLinear -> MatMul)."""

import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnx_ir")  # the quantizer imports it
quantization = pytest.importorskip("onnxruntime.quantization")
quantizer_module = pytest.importorskip("onnxruntime.quantization.matmul_nbits_quantizer")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import qops.onnx as qonnx  # noqa: E402


def block_model(rng, hidden=64, inner=128):
    up = (rng.standard_normal((hidden, inner)) / np.sqrt(hidden)).astype(np.float32)
    down = (rng.standard_normal((inner, hidden)) / np.sqrt(inner)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "up"], ["h"], name="up_proj"),
             helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("MatMul", ["r", "down"], ["d"], name="down_proj"),
             helper.make_node("Add", ["x", "d"], ["y"])]
    graph = helper.make_graph(
        nodes, "block", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["M", hidden])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["M", hidden])],
        [numpy_helper.from_array(up, "up"), numpy_helper.from_array(down, "down")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


@pytest.mark.parametrize("fmt, kind", [("QOperator", "qops MatMulNBits (compiled)"),
                                       ("QDQ", "DQ MatMul (MatMulNBits)")])
@pytest.mark.parametrize("symmetric", [False, True])
def test_a_quantized_block_runs_on_the_n_bits_kernels(fmt, kind, symmetric):
    ort = pytest.importorskip("onnxruntime")
    rng = np.random.default_rng(8)
    quantizer = quantizer_module.MatMulNBitsQuantizer(
        block_model(rng), bits=4, block_size=32, is_symmetric=symmetric,
        quant_format=getattr(quantization.QuantFormat, fmt))
    quantizer.process()
    model = quantizer.model.model
    session = qonnx.InferenceSession(model)
    assert [step.kind for step in session.steps].count(kind) == 2
    x = rng.standard_normal((5, 64)).astype(np.float32)
    got = session.run(None, {"x": x})[0]
    theirs = ort.InferenceSession(model.SerializeToString(),
                                  providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    # Float32 sums of 64 and 128 products in other orders: within 1e-5 of the output's scale.
    scale = np.abs(theirs).max()
    assert np.allclose(got, theirs, rtol=0, atol=1e-5 * scale)
    if fmt == "QDQ" and symmetric:
        # The symmetric quantizer writes negative scales, which MatMulNBits
        # takes and qops' DequantizeLinear refuses: the nodes as written stop there.
        with pytest.raises(qonnx.ModelError, match="negative"):
            qonnx.InferenceSession(model, fuse=False)
        return
    written = qonnx.InferenceSession(model, fuse=False).run(None, {"x": x})[0]
    assert np.allclose(got, written, rtol=0, atol=1e-5 * scale)
