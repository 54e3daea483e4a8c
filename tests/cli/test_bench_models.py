"""python -m qops bench --models: the model table and the per-node cost."""

import io

import numpy as np
import pytest

pytest.importorskip("onnxruntime.quantization")

import qops.onnx  # noqa: E402
from qops.cli import bench_models  # noqa: E402


def test_the_model_table_times_both_sides_and_judges_qops():
    rows = bench_models.run(["mobilenet_v2-qdq-per-tensor", "bert_layer-dynamic"], small=True,
                            budget=0.01, rounds=1, progress=io.StringIO())
    assert [row[0] for row in rows] == ["mobilenet_v2-qdq-per-tensor", "bert_layer-dynamic"]
    for name, peer_ms, qops_ms, speed, exact in rows:
        assert peer_ms > 0 and qops_ms > 0 and speed == pytest.approx(peer_ms / qops_ms)
        assert exact in ("yes", "within 1%")
    text = bench_models.table(rows, {"qops": 5.0, "onnxruntime": 1.0})
    assert "| mobilenet_v2-qdq-per-tensor |" in text and "qops 5.0 us" in text


def test_the_add_chain_is_a_chain_of_quantized_adds():
    model = bench_models.add_chain(5)
    assert [node.op_type for node in model.graph.node] == ["QLinearAdd"] * 5
    x = np.full((1, 8), 100, np.uint8)
    (y,) = qops.onnx.InferenceSession(model).run(None, {"x": x})
    # Each add: (x - 128) * 0.05 + (130 - 128) * 0.05 over 0.05, plus 128: x + 2.
    np.testing.assert_array_equal(y, x + 10)
    overhead = bench_models.node_overhead(1, 0.005, 1)
    assert set(overhead) == {"qops", "onnxruntime"}
