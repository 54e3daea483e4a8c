"""A small quantized CNN (conv, relu, conv, reshape, matmul) for tests and benchmarks.

Built in float, then quantized by onnxruntime's ``quantize_static`` in the
QOperator format with per-channel int8 weights, the way such models usually
reach users.  Needs onnx and onnxruntime.
"""

from __future__ import annotations

import os
import tempfile
import warnings

import numpy as np


def float_cnn(rng, size=16, channels=(8, 16)):
    """The float model: input ``x`` of shape (1, 3, size, size), output ``y`` (1, 10)."""
    from onnx import TensorProto, helper, numpy_helper

    def weights(name, shape, scale):
        return numpy_helper.from_array(rng.normal(0, scale, shape).astype(np.float32), name)

    first, second = channels
    half = (size + 1) // 2
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1],
                              strides=[2, 2]),
             helper.make_node("Reshape", ["c2", "shape"], ["flat"]),
             helper.make_node("MatMul", ["flat", "wf"], ["y"])]
    initializers = [weights("w1", (first, 3, 3, 3), 0.2), weights("b1", (first,), 0.1),
                    weights("w2", (second, first, 3, 3), 0.1), weights("b2", (second,), 0.1),
                    numpy_helper.from_array(np.array([1, -1], np.int64), "shape"),
                    weights("wf", (second * half * half, 10), 0.02)]
    graph = helper.make_graph(
        nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
        initializer=initializers)
    # Opset 21: onnx.reference has DequantizeLinear from 19 on.
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    return model


def quantized_cnn(path, rng, size=16, channels=(8, 16), calibration_batches=4):
    """Write the quantized model to ``path`` and return it (an ``onnx.ModelProto``)."""
    import onnx
    from onnxruntime import quantization

    batches = [{"x": rng.normal(0, 1, (1, 3, size, size)).astype(np.float32)}
               for _ in range(calibration_batches)]

    class Reader(quantization.CalibrationDataReader):
        def __init__(self):
            self.batches = iter(batches)

        def get_next(self):
            return next(self.batches, None)

    with tempfile.TemporaryDirectory() as directory:
        float_path = os.path.join(directory, "float.onnx")
        onnx.save(float_cnn(rng, size, channels), float_path)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            quantization.quantize_static(
                float_path, str(path), Reader(), quant_format=quantization.QuantFormat.QOperator,
                per_channel=True, activation_type=quantization.QuantType.QUInt8,
                weight_type=quantization.QuantType.QInt8)
    return onnx.load(str(path))
