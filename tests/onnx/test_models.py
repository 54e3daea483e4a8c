"""Whole quantized models through qops.onnx.InferenceSession.

The example models (qops.onnx.examples: ResNet-50, MobileNetV2 and a BERT
encoder layer with random weights, quantized by onnxruntime's quantizer) in
every format.  The CNNs' outputs must equal, bit for bit, onnxruntime's own
fused graph of the same model (``optimized_model_filepath``) evaluated node
by node by ``onnx.reference`` with qops' quantized operators: the session
fuses the QDQ groups as onnxruntime does, and computes each fused group
exactly.  onnxruntime's own outputs are compared where its kernels are exact
(CPUs with VNNI); elsewhere its u8 x s8 products saturate 16-bit pair sums.

Small versions run by default; the full-size ones are marked slow.
"""

from __future__ import annotations

import functools
import os

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnxruntime.quantization")

from onnx import numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import qops.onnx  # noqa: E402
from qops.onnx import examples  # noqa: E402

SEED = 20261128
CNNS = [e for e in examples.EXAMPLES if e.architecture in ("resnet50", "mobilenet_v2")]
BERTS = [e for e in examples.EXAMPLES if e.architecture == "bert_layer"]


def _has_vnni():
    """Whether onnxruntime's u8 x s8 kernels are exact here (VNNI sums quads
    into 32 bits; without it pairs saturate at 16 bits)."""
    try:
        with open("/proc/cpuinfo") as handle:
            flags = handle.read()
    except OSError:
        return False
    return "avx512_vnni" in flags or "avx_vnni" in flags


VNNI = _has_vnni()


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("session_models"))


@functools.lru_cache(maxsize=None)
def _optimized(path):
    return examples.optimized_by_onnxruntime(onnx.load(path))


def _model(example, small, cache_dir):
    model = example.build(SEED, small=small, cache_dir=cache_dir)
    path = os.path.join(cache_dir, f"{example.name}{'-small' if small else ''}.onnx")
    if not os.path.exists(path):
        onnx.save(model, path)
    return model, path


def _onnxruntime(model, feeds):
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _output_quantum(model):
    """The scale of the DequantizeLinear that makes the model's output."""
    output = model.graph.output[0].name
    (node,) = [n for n in model.graph.node if output in n.output]
    assert node.op_type == "DequantizeLinear"
    scales = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    return float(np.asarray(scales[node.input[1]]).reshape(-1)[0])


def _check_cnn(example, small, cache_dir, n_threads):
    model, path = _model(example, small, cache_dir)
    feeds = examples.random_inputs(model, SEED + 1)
    session = qops.onnx.InferenceSession(model, n_threads=n_threads)
    kinds = [step.kind for step in session.steps]
    if example.fmt == "qdq":
        # Every convolution, Gemm and residual add is one fused integer call.
        assert not any(kind.startswith("onnx.reference") for kind in kinds), kinds
        assert "QDQ Conv" in kinds and "QDQ Gemm" in kinds
    else:
        assert "qops QLinearConv (compiled)" in kinds and "qops QGemm (compiled)" in kinds
    (actual,) = session.run(None, feeds)
    # The tensors between its wider convolutions kept channels-last: the
    # same values as the session that keeps every tensor as the model does.
    # (Both reach the global pooling channels-last; MobileNetV2's depthwise
    # convolutions of its last stage go too.)
    pooling = [step.channels_last for step in session.steps
               if "GlobalAveragePool" in step.kind]
    assert pooling == [(True, False)], pooling
    assert any(step.channels_last == (True, True) for step in session.steps)
    (first,) = qops.onnx.InferenceSession(model, n_threads=n_threads,
                                          channels_last=False).run(None, feeds)
    np.testing.assert_array_equal(first, actual)
    fused_graph = ReferenceEvaluator(_optimized(path), new_ops=qops.onnx.reference_ops())
    (expected,) = fused_graph.run(None, feeds)
    np.testing.assert_array_equal(actual, expected)
    (unfused,) = qops.onnx.InferenceSession(model, n_threads=n_threads, fuse=False).run(None,
                                                                                         feeds)
    if example.fmt == "qoperator":
        np.testing.assert_array_equal(unfused, actual)
    else:
        # The literal float graph of Q and DQ nodes: within a quantum per layer,
        # compounding over the network; the same classes in the main.
        assert np.isfinite(unfused).all()
        assert np.corrcoef(unfused.ravel(), actual.ravel())[0, 1] > 0.9
    if VNNI:
        (peer,) = _onnxruntime(model, feeds)
        gap = np.abs(actual - peer).max() / _output_quantum(model)
        assert gap <= 3, f"{gap} quanta from onnxruntime"
    return actual


@pytest.mark.parametrize("example", CNNS, ids=lambda e: e.name)
def test_small_cnn_equals_onnxruntime_s_fused_graph_bit_for_bit(example, cache_dir):
    one = _check_cnn(example, True, cache_dir, n_threads=1)
    two = _check_cnn(example, True, cache_dir, n_threads=2)
    np.testing.assert_array_equal(one, two)


@pytest.mark.slow
@pytest.mark.parametrize("example", CNNS, ids=lambda e: e.name)
def test_full_size_cnn_equals_onnxruntime_s_fused_graph_bit_for_bit(example, cache_dir):
    _check_cnn(example, False, cache_dir, n_threads=2)


def _close(actual, expected, what, share=1e-2):
    """Within ``share`` of the largest magnitude (the layer's output is float)."""
    bound = share * np.abs(expected).max()
    gap = np.abs(actual - expected).max()
    assert gap <= bound, f"{gap} from {what} (bound {bound})"


def _check_bert(example, small, cache_dir):
    model, path = _model(example, small, cache_dir)
    feeds = examples.random_inputs(model, SEED + 2)
    session = qops.onnx.InferenceSession(model, n_threads=2)
    kinds = [step.kind for step in session.steps]
    (actual,) = session.run(None, feeds)
    (unfused,) = qops.onnx.InferenceSession(model, fuse=False).run(None, feeds)
    if example.fmt == "dynamic":
        assert kinds.count("dynamic MatMul") == 6 and "qops MatMulInteger" not in kinds
        # onnxruntime's fused graph has float operators of its own (FusedMatMul,
        # SkipLayerNormalization) that onnx.reference does not run: the literal
        # graph is the statement here, and the fused products compute its steps.
        np.testing.assert_array_equal(actual, unfused)
    else:
        if example.fmt == "qdq":
            assert kinds.count("QDQ MatMul") == 8 and "QDQ Softmax" in kinds
        fused_graph = ReferenceEvaluator(_optimized(path), new_ops=qops.onnx.reference_ops())
        (expected,) = fused_graph.run(None, feeds)
        _close(actual, expected, "onnxruntime's fused graph evaluated by onnx.reference")
        # The literal float graph rounds differently at each of a dozen
        # requantizations, and LayerNormalization scales the gaps up.
        assert np.corrcoef(actual.ravel(), unfused.ravel())[0, 1] > 0.99
    if VNNI:
        # A peer's check, not an oracle's: onnxruntime's own kernels stray from
        # its fused graph's statement, which qops equals to float32's last
        # places, by more than 1% of the largest output in the full-size QDQ
        # layer (docs/models.rst has the figure).
        (peer,) = _onnxruntime(model, feeds)
        _close(actual, peer, "onnxruntime", share=2.5e-2)


@pytest.mark.parametrize("example", BERTS, ids=lambda e: e.name)
def test_small_bert_layer_within_a_percent_of_the_fused_graph(example, cache_dir):
    _check_bert(example, True, cache_dir)


@pytest.mark.slow
@pytest.mark.parametrize("example", BERTS, ids=lambda e: e.name)
def test_full_size_bert_layer_within_a_percent_of_the_fused_graph(example, cache_dir):
    _check_bert(example, False, cache_dir)


def test_a_bert_layer_takes_other_batch_and_sequence_sizes(cache_dir):
    model, path = _model(examples.by_name("bert_layer-qdq-per-tensor"), True, cache_dir)
    session = qops.onnx.InferenceSession(model)
    (arg,) = session.get_inputs()
    assert arg.shape[:2] == ["batch", "sequence"]
    for batch, sequence in ((1, 3), (2, 7)):
        feeds = examples.random_inputs(model, SEED, dims={"batch": batch, "sequence": sequence})
        (actual,) = session.run(None, feeds)
        fused_graph = ReferenceEvaluator(_optimized(path), new_ops=qops.onnx.reference_ops())
        (expected,) = fused_graph.run(None, feeds)
        assert actual.shape[:2] == (batch, sequence)
        _close(actual, expected, "onnxruntime's fused graph evaluated by onnx.reference")
