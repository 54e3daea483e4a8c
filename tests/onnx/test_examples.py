"""qops.onnx.examples: the float example models and onnxruntime's quantized versions of them.

The small versions run by default (each built and quantized once per run, in a
module-scoped cache folder); the full-size ones are marked slow."""

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnxruntime.quantization")

from onnx import numpy_helper  # noqa: E402

from qops.onnx import examples  # noqa: E402

SEED = 20240601
ARCHITECTURES = ("resnet50", "mobilenet_v2", "bert_layer")
CNNS = ("resnet50", "mobilenet_v2")
#: The float operators whose weights the quantizer quantizes, and what each
#: format turns them into.
WEIGHTED = {"Conv", "MatMul", "Gemm"}
QOPERATOR_NODES = {"resnet50": {("", "QLinearConv"), ("com.microsoft", "QGemm"),
                                ("com.microsoft", "QLinearAdd")},
                   "mobilenet_v2": {("", "QLinearConv"), ("com.microsoft", "QGemm"),
                                    ("com.microsoft", "QLinearAdd")},
                   "bert_layer": {("", "QLinearMatMul"), ("com.microsoft", "QLinearAdd")}}
#: Layouts internal to onnxruntime's CPU provider, which the "extended" level must not bring in.
INTERNAL_LAYOUT_NODES = {"NhwcMaxPool", "ReorderInput", "ReorderOutput", "NchwcConv",
                         "NhwcConv", "QLinearConv"}


def _ids(example):
    return example.name


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("example_models")


@pytest.fixture(scope="module")
def small(cache_dir):
    """The small version of an example (quantized) or, given an architecture
    name, of its float model; built once per test run."""

    def get(example):
        if isinstance(example, str):
            example = examples.ExampleModel(example, "qdq")
            return example.float_model(SEED, small=True, cache_dir=cache_dir)
        return example.build(SEED, small=True, cache_dir=cache_dir)

    return get


def _session(model):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def _run(model, feeds):
    return _session(model).run(None, feeds)[0]


def _nodes(model):
    return set(examples.op_types(model))


def _assert_varied(y):
    assert np.isfinite(y).all()
    assert np.ptp(y) > 0 and y.std() > 1e-3 * max(1.0, float(np.abs(y).max()))


def _activation_scales(model, feeds, op_types):
    """The root mean square of the output of every node of ``op_types``, in graph order."""
    from onnx import helper

    probed = onnx.ModelProto()
    probed.CopyFrom(model)
    names = [node.output[0] for node in probed.graph.node if node.op_type in op_types]
    outputs = {value.name for value in probed.graph.output}
    probed.graph.output.extend(helper.make_empty_tensor_value_info(name) for name in names
                               if name not in outputs)
    session = _session(probed)
    values = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
    return [(name, float(np.sqrt(np.mean(values[name].astype(np.float64) ** 2))))
            for name in names]


# -- The table --------------------------------------------------------------------------


def test_the_table_names_every_model_and_format_once():
    names = [example.name for example in examples.EXAMPLES]
    assert len(names) == len(set(names)) == 13
    for name in names:
        assert examples.by_name(name).name == name
    combinations = {(e.architecture, e.fmt, e.per_channel) for e in examples.EXAMPLES}
    for architecture in CNNS:
        assert {(architecture, fmt, per_channel) for fmt in ("qdq", "qoperator")
                for per_channel in (False, True)} <= combinations
    assert ("bert_layer", "dynamic", False) in combinations
    with pytest.raises(KeyError, match="resnet50-qdq-per-tensor"):
        examples.by_name("resnet50-int4")


def test_the_cache_quantizes_once(tmp_path):
    example = examples.by_name("bert_layer-dynamic")
    first = example.build(SEED, small=True, cache_dir=tmp_path)
    files = sorted(path.name for path in tmp_path.iterdir())
    assert files == ["bert_layer-dynamic-small.onnx", "bert_layer-float-small.onnx"]
    stamp = (tmp_path / files[0]).stat().st_mtime_ns
    again = example.build(SEED, small=True, cache_dir=tmp_path)
    assert (tmp_path / files[0]).stat().st_mtime_ns == stamp
    assert again.SerializeToString() == first.SerializeToString()
    # The float model of the same seed is the one that was quantized.
    cached_float = onnx.load(tmp_path / files[1])
    assert example.float_model(SEED, small=True).SerializeToString() == \
        cached_float.SerializeToString()


def test_the_same_seed_builds_the_same_model():
    a = examples.bert_layer(np.random.default_rng(3), sequence=4, hidden=8, heads=2,
                            intermediate=16)
    b = examples.bert_layer(np.random.default_rng(3), sequence=4, hidden=8, heads=2,
                            intermediate=16)
    assert a.SerializeToString() == b.SerializeToString()


def test_bad_arguments_are_refused():
    model = examples.bert_layer(np.random.default_rng(0), sequence=4, hidden=8, heads=2,
                                intermediate=16)
    with pytest.raises(ValueError, match="fmt"):
        examples.quantize(model, "int4")
    with pytest.raises(ValueError, match="level"):
        examples.optimized_by_onnxruntime(model, "fastest")
    with pytest.raises(ValueError, match="heads"):
        examples.bert_layer(np.random.default_rng(0), hidden=10, heads=3)


# -- Float models -----------------------------------------------------------------------


@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_float_model_runs_with_finite_varied_outputs(small, architecture):
    model = small(architecture)
    onnx.checker.check_model(model, full_check=True)
    assert model.opset_import[0].version == examples.OPSET
    assert all(node.domain in ("", "ai.onnx") for node in model.graph.node)
    feeds = examples.random_inputs(model, 0)
    y = _run(model, feeds)
    _assert_varied(y)
    if architecture in CNNS:
        assert y.shape == (1, 10)
    else:
        assert y.shape == (1, 16, 64)


def test_the_bert_layer_takes_any_batch_and_sequence(small):
    model = small("bert_layer")
    dims = [d.dim_param or d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    assert dims == ["batch", "sequence", 64]
    feeds = examples.random_inputs(model, 1, dims={"batch": 3, "sequence": 5})
    y = _run(model, feeds)
    assert y.shape == (3, 5, 64)
    # Each position is layer-normalized over the hidden axis (scale near 1, small bias).
    assert np.allclose(y.mean(axis=-1), 0, atol=0.1)
    assert np.allclose(y.std(axis=-1), 1, atol=0.15)


def test_the_bert_layer_computes_attention_as_written():
    """A direct NumPy transcription of one encoder layer gives the model's output."""
    from math import erf, sqrt

    rng = np.random.default_rng(5)
    hidden, heads = 8, 2
    model = examples.bert_layer(rng, sequence=3, hidden=hidden, heads=heads, intermediate=12)
    w = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in model.graph.initializer}
    x = np.random.default_rng(6).normal(0, 1, (2, 3, hidden)).astype(np.float32)

    def dense(v, name):
        return v @ w[f"{name}.weight"] + w[f"{name}.bias"]

    def layer_norm(v, name):
        v = (v - v.mean(-1, keepdims=True)) / np.sqrt(v.var(-1, keepdims=True) + 1e-12)
        return v * w[f"{name}.weight"] + w[f"{name}.bias"]

    def heads_of(v):
        return v.reshape(2, 3, heads, hidden // heads).transpose(0, 2, 1, 3)

    q, k, v = (heads_of(dense(x, f"attention.self.{n}")) for n in ("query", "key", "value"))
    scores = q @ k.transpose(0, 1, 3, 2) / sqrt(hidden // heads)
    p = np.exp(scores - scores.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    context = (p @ v).transpose(0, 2, 1, 3).reshape(2, 3, hidden)
    a = layer_norm(dense(context, "attention.output.dense") + x, "attention.output.layer_norm")
    h = dense(a, "intermediate.dense")
    h = h * 0.5 * (1 + np.vectorize(erf)(h / sqrt(2)))
    expected = layer_norm(dense(h, "output.dense") + a, "output")
    assert np.allclose(_run(model, {"hidden_states": x}), expected, atol=1e-4)


@pytest.mark.parametrize("architecture", CNNS)
def test_cnn_activations_neither_explode_nor_collapse(small, architecture):
    model = small(architecture)
    scales = _activation_scales(model, examples.random_inputs(model, 2),
                                {"Relu", "Clip", "Add"})
    # The small CNNs end at 1 x 1 or 2 x 2 images, where a padded 3 x 3
    # convolution sees only part of its window: their activations shrink some.
    assert all(0.05 < scale < 10 for _, scale in scales), scales


# -- Quantized models -------------------------------------------------------------------


def _producers(model):
    return {output: node for node in model.graph.node for output in node.output}


def _weight_scales(model):
    """The scale initializers of the quantized weights (int8 initializers of
    two or more dimensions)."""
    initializers = {t.name: t for t in model.graph.initializer}

    def is_weight(name):
        tensor = initializers.get(name)
        return tensor is not None and tensor.data_type == onnx.TensorProto.INT8 and \
            len(tensor.dims) >= 2

    scales = []
    for node in model.graph.node:
        if node.op_type == "DequantizeLinear" and is_weight(node.input[0]):
            scales.append(initializers[node.input[1]])
        elif node.op_type in ("QLinearConv", "QLinearMatMul", "QGemm") and \
                is_weight(node.input[3]):
            scales.append(initializers[node.input[4]])
    return [numpy_helper.to_array(scale) for scale in scales]


def _assert_qdq(model, architecture):
    nodes = _nodes(model)
    assert {("", "QuantizeLinear"), ("", "DequantizeLinear")} <= nodes
    assert not {op for _, op in nodes if op.startswith("QLinear") or op.endswith("Integer")}
    producers = _producers(model)
    consumers = {}
    for node in model.graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    weighted = [node for node in model.graph.node if node.op_type in WEIGHTED]
    assert {node.op_type for node in weighted} == (
        {"MatMul"} if architecture == "bert_layer" else {"Conv", "Gemm"})
    for node in weighted:
        assert all(producers[name].op_type == "DequantizeLinear" for name in node.input if name)
        assert [c.op_type for c in consumers[node.output[0]]] == ["QuantizeLinear"]


def _assert_qoperator(model, architecture):
    nodes = _nodes(model)
    assert QOPERATOR_NODES[architecture] <= nodes
    assert not {op for _, op in nodes} & WEIGHTED


def _assert_dynamic(model):
    nodes = _nodes(model)
    assert {("", "DynamicQuantizeLinear"), ("", "MatMulInteger")} <= nodes
    assert not {("", "QuantizeLinear"), ("", "DequantizeLinear")} & nodes
    # The weights' six MatMuls are quantized; the two between activations
    # (scores and context) stay in float.
    assert sum(node.op_type == "MatMulInteger" for node in model.graph.node) == 6


def _assert_format(model, example):
    if example.fmt == "qdq":
        _assert_qdq(model, example.architecture)
    elif example.fmt == "qoperator":
        _assert_qoperator(model, example.architecture)
    else:
        _assert_dynamic(model)
    scales = _weight_scales(model)
    if example.fmt != "dynamic":
        assert scales
        assert all((scale.size > 1) == example.per_channel for scale in scales)


@pytest.mark.parametrize("example", examples.EXAMPLES, ids=_ids)
def test_quantized_model_has_the_nodes_of_its_format(small, example):
    model = small(example)
    onnx.checker.check_model(model)
    _assert_format(model, example)


@pytest.mark.parametrize("example", examples.EXAMPLES, ids=_ids)
def test_onnxruntime_runs_the_quantized_model(small, example):
    model = small(example)
    float_model = small(example.architecture)
    feeds = examples.random_inputs(float_model, 7)
    expected = _run(float_model, feeds)
    y = _run(model, feeds)
    assert y.shape == expected.shape and y.dtype == np.float32
    _assert_varied(y)
    # Quantization noise, not a different computation: well correlated with
    # the float model's outputs.
    assert np.corrcoef(y.ravel(), expected.ravel())[0, 1] > 0.9


def _assert_fused(optimized, example):
    nodes = _nodes(optimized)
    if example.fmt == "dynamic":
        assert ("", "MatMulInteger") not in nodes
        assert nodes & {("com.microsoft", "DynamicQuantizeMatMul"),
                        ("com.microsoft", "MatMulIntegerToFloat")}
    else:
        assert QOPERATOR_NODES[example.architecture] <= nodes
        assert not {op for _, op in nodes} & WEIGHTED
        if example.architecture in CNNS:
            assert ("com.microsoft", "QLinearGlobalAveragePool") in nodes
    internal = {op for domain, op in nodes if domain == "com.microsoft"} & INTERNAL_LAYOUT_NODES
    assert not internal, internal
    assert ("", "Transpose") not in nodes or example.architecture == "bert_layer"


@pytest.mark.parametrize("example", examples.EXAMPLES, ids=_ids)
def test_onnxruntimes_optimized_graph_has_the_fused_nodes(small, example):
    model = small(example)
    optimized = examples.optimized_by_onnxruntime(model)
    _assert_fused(optimized, example)
    feeds = examples.random_inputs(small(example.architecture), 8)
    assert np.array_equal(_run(optimized, feeds), _run(model, feeds))


def test_the_basic_level_leaves_the_qdq_groups_alone(small):
    model = small(examples.by_name("resnet50-qdq-per-tensor"))
    optimized = examples.optimized_by_onnxruntime(model, "basic")
    assert _nodes(optimized) == _nodes(model)


# -- Full size --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def full(cache_dir):
    def get(example):
        if isinstance(example, str):
            example = examples.ExampleModel(example, "qdq")
            return example.float_model(SEED, cache_dir=cache_dir)
        return example.build(SEED, cache_dir=cache_dir)

    return get


@pytest.mark.slow
@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_full_size_float_model(full, architecture):
    model = full(architecture)
    feeds = examples.random_inputs(model, 0)
    y = _run(model, feeds)
    _assert_varied(y)
    assert y.shape == ((1, 1000) if architecture in CNNS else (1, 128, 768))
    if architecture in CNNS:
        scales = _activation_scales(model, feeds, {"Relu", "Clip", "Add"})
        # Within a factor 5 of the input's unit scale through all the layers
        # (ResNet's stem max pool alone doubles it).
        assert all(0.2 < scale < 5 for _, scale in scales), scales


@pytest.mark.slow
@pytest.mark.parametrize("example", examples.EXAMPLES, ids=_ids)
def test_full_size_quantized_model(full, example):
    model = full(example)
    _assert_format(model, example)
    float_model = full(example.architecture)
    feeds = examples.random_inputs(float_model, 7)
    y = _run(model, feeds)
    _assert_varied(y)
    assert np.corrcoef(y.ravel(), _run(float_model, feeds).ravel())[0, 1] > 0.9
    optimized = examples.optimized_by_onnxruntime(model)
    _assert_fused(optimized, example)
