"""Edge cases of qops.onnx.InferenceSession (session.py, _graph.py, _fusion.py).

Small hand-written models, each aimed at one fusion condition, one malformed
model or one part of the run loop.  The standard:

* a fused group is within one quantum of the literal graph (``fuse=False``,
  or onnx.reference on the whole model), of the same shape and dtype;
* what is not fused equals onnx.reference;
* a bad model or feed is a ``qops.QopsError`` (a ``ValidationError`` naming
  the node or input), never another exception.

The first part holds conditions a session must decline or handle (each
test names the rule it pins); the second, behaviour that is right by design.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import qops  # noqa: E402
import qops.onnx  # noqa: E402

T = TensorProto
_ONNX = {np.dtype(np.uint8): T.UINT8, np.dtype(np.int8): T.INT8, np.dtype(np.float32): T.FLOAT,
         np.dtype(np.int64): T.INT64, np.dtype(np.int32): T.INT32, np.dtype(bool): T.BOOL}


# -- helpers ------------------------------------------------------------------------------

def _vi(name, elem_type, shape):
    return helper.make_tensor_value_info(name, elem_type, shape)


def _out(name):
    return helper.make_tensor_value_info(name, T.UNDEFINED, None)


def _init(name, value):
    return numpy_helper.from_array(np.asarray(value), name)


def _model(nodes, inputs, outputs, initializers=(), opset=21, extra_opsets=(), functions=()):
    graph = helper.make_graph(list(nodes), "g", list(inputs), list(outputs),
                              initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset),
                                                    *extra_opsets])
    model.ir_version = 10
    model.functions.extend(functions)
    return model


def _feeds_inputs(feeds, shapes=None):
    shapes = shapes or {}
    return [_vi(name, _ONNX[np.asarray(value).dtype], shapes.get(name, list(np.shape(value))))
            for name, value in feeds.items()]


def _dq(x, y, scale="s", zero="z", **attributes):
    return helper.make_node("DequantizeLinear", [x, scale, zero], [y], **attributes)


def _q(x, y, scale="s", zero="z", **attributes):
    return helper.make_node("QuantizeLinear", [x, scale, zero], [y], **attributes)


def _qparams(scale=0.05, zero=np.uint8(7), prefix=""):
    return [_init(prefix + "s", np.float32(scale)), _init(prefix + "z", np.asarray(zero))]


def _kinds(session):
    return [step.kind for step in session.steps]


def _gap(a, b):
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, a.dtype, b.shape, b.dtype)
    return int(np.abs(a.astype(np.int64) - b.astype(np.int64)).max(initial=0))


def _sessions(model, feeds):
    fused = qops.onnx.InferenceSession(model)
    literal = qops.onnx.InferenceSession(model, fuse=False)
    return fused, fused.run(None, feeds), literal.run(None, feeds)


def _quantized(rng, shape, dtype):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, shape, dtype=dtype)


# == conditions to decline or handle ==========================================================

_OUTER = np.array([-1.0, 0.0, 2.0], np.float32)


def _if_reading_a_feed():
    then_graph = helper.make_graph([helper.make_node("Relu", ["x"], ["t"])], "then", [],
                                   [_out("t")])
    else_graph = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [],
                                   [_out("e")])
    node = helper.make_node("If", ["cond"], ["y"], then_branch=then_graph,
                            else_branch=else_graph, name="branch")
    return _model([node], [_vi("x", T.FLOAT, [3])], [_out("y")],
                  [_init("cond", np.array(True))])


def _loop_reading_a_feed():
    body = helper.make_graph(
        [helper.make_node("Identity", ["c_in"], ["c_out"]),
         helper.make_node("Add", ["v_in", "x"], ["v_out"])], "body",
        [_vi("i", T.INT64, []), _vi("c_in", T.BOOL, []), _vi("v_in", T.FLOAT, [3])],
        [_vi("c_out", T.BOOL, []), _vi("v_out", T.FLOAT, [3])])
    node = helper.make_node("Loop", ["n", "c", "v0"], ["y"], body=body, name="loop")
    return _model([node], [_vi("x", T.FLOAT, [3])], [_out("y")],
                  [_init("n", np.int64(3)), _init("c", np.array(True)),
                   _init("v0", np.zeros(3, np.float32))])


def _scan_reading_a_feed():
    body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "e"], ["s_out"]),
         helper.make_node("Mul", ["e", "x"], ["o"])], "body",
        [_vi("s_in", T.FLOAT, []), _vi("e", T.FLOAT, [])],
        [_vi("s_out", T.FLOAT, []), _vi("o", T.FLOAT, [])])
    node = helper.make_node("Scan", ["s0", "sequence"], ["final", "ys"], body=body,
                            num_scan_inputs=1, name="scan")
    return _model([node], [_vi("x", T.FLOAT, [3])], [_out("final"), _out("ys")],
                  [_init("s0", np.zeros(3, np.float32)),
                   _init("sequence", np.arange(6, dtype=np.float32).reshape(2, 3))])


@pytest.mark.parametrize("build", [_if_reading_a_feed, _loop_reading_a_feed, _scan_reading_a_feed],
                         ids=["If", "Loop", "Scan"])
@pytest.mark.parametrize("fuse", [True, False])
def test_control_flow_with_constant_inputs_reading_a_feed_is_not_folded(build, fuse):
    model = build()
    feeds = {"x": _OUTER}
    session = qops.onnx.InferenceSession(model, fuse=fuse)
    expected = ReferenceEvaluator(model).run(None, feeds)
    for actual, wanted in zip(session.run(None, feeds), expected):
        np.testing.assert_array_equal(actual, wanted)


def test_resize_tf_crop_and_resize_extrapolation_is_quantized():
    x = (np.arange(16, dtype=np.uint8) + 100).reshape(1, 1, 4, 4)
    nodes = [_dq("x", "xd"),
             helper.make_node("Resize", ["xd", "roi", "", "sizes"], ["r"], mode="nearest",
                              coordinate_transformation_mode="tf_crop_and_resize",
                              extrapolation_value=0.0),
             _q("r", "y")]
    model = _model(nodes, [_vi("x", T.UINT8, [1, 1, 4, 4])], [_out("y")],
                   _qparams(0.1, np.uint8(7)) + [
                       _init("roi", np.array([0, 0, -0.5, -0.5, 1, 1, 1.5, 1.5], np.float32)),
                       _init("sizes", np.array([1, 1, 4, 4], np.int64))])
    (fused,) = qops.onnx.InferenceSession(model).run(None, {"x": x})
    (expected,) = ReferenceEvaluator(model).run(None, {"x": x})
    np.testing.assert_array_equal(fused, expected)  # the border is 7 (Q(0.0)), not 0


def test_average_pool_ceil_mode_runs_fused():
    x = np.arange(25, dtype=np.uint8).reshape(1, 1, 5, 5)
    nodes = [_dq("x", "xd"),
             helper.make_node("AveragePool", ["xd"], ["p"], kernel_shape=[2, 2], strides=[2, 2],
                              ceil_mode=1),
             _q("p", "y")]
    model = _model(nodes, [_vi("x", T.UINT8, [1, 1, 5, 5])], [_out("y")],
                   _qparams(0.1, np.uint8(3)))
    _, (fused,), (literal,) = _sessions(model, {"x": x})
    assert _gap(fused, literal) <= 1


def _conv_with_bias(bias_scale, filter_scale, bias=np.array([10, 20, 30], np.int32)):
    rng = np.random.default_rng(0)
    x = _quantized(rng, (1, 2, 4, 4), np.uint8)
    w = _quantized(rng, (3, 2, 1, 1), np.int8)
    nodes = [_dq("x", "xd"),
             helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wd"], axis=0),
             helper.make_node("DequantizeLinear", ["b", "bs"], ["bd"], axis=0),
             helper.make_node("Conv", ["xd", "wd", "bd"], ["c"], name="theconv"),
             _q("c", "y", "ys")]
    model = _model(nodes, [_vi("x", T.UINT8, [1, 2, 4, 4])], [_out("y")],
                   _qparams(0.1, np.uint8(3)) + [
                       _init("w", w), _init("ws", filter_scale),
                       _init("wz", np.zeros(np.shape(filter_scale), np.int8)),
                       _init("b", bias), _init("bs", bias_scale), _init("ys", np.float32(0.2))])
    return model, {"x": x}


def test_per_tensor_bias_scale_with_per_channel_weights_builds():
    model, feeds = _conv_with_bias(np.float32(0.001), np.array([0.01, 0.02, 0.03], np.float32))
    _, (fused,), (literal,) = _sessions(model, feeds)
    assert _gap(fused, literal) <= 1


@pytest.mark.parametrize("axis", [0, 1])
def test_softmax_before_opset_13_fused_agrees_with_unfused(axis):
    x = _quantized(np.random.default_rng(0), (2, 3, 4), np.uint8)
    nodes = [_dq("x", "xd"), helper.make_node("Softmax", ["xd"], ["p"], axis=axis),
             _q("p", "y", "ys", "yz")]
    model = _model(nodes, [_vi("x", T.UINT8, [2, 3, 4])], [_out("y")],
                   _qparams(0.05, np.uint8(3)) + [_init("ys", np.float32(1 / 256)),
                                                  _init("yz", np.uint8(0))], opset=12)
    session, (fused,), (literal,) = _sessions(model, {"x": x})
    assert _gap(fused, literal) <= 1


def test_a_custom_domain_matmul_behind_relu_is_not_fused():
    rng = np.random.default_rng(0)
    x = _quantized(rng, (3, 3), np.uint8)
    add = helper.make_function("custom", "MatMul", ["a", "b"], ["c"],
                               [helper.make_node("Add", ["a", "b"], ["c"])],
                               [helper.make_opsetid("", 21)])
    nodes = [_dq("x", "xd"), helper.make_node("DequantizeLinear", ["w", "ws"], ["wd"]),
             helper.make_node("MatMul", ["xd", "wd"], ["c"], domain="custom"),
             helper.make_node("Relu", ["c"], ["r"]), _q("r", "y", "ys")]
    model = _model(nodes, [_vi("x", T.UINT8, [3, 3])], [_out("y")],
                   _qparams(0.02, np.uint8(3)) + [_init("w", _quantized(rng, (3, 3), np.int8)),
                                                  _init("ws", np.float32(0.01)),
                                                  _init("ys", np.float32(0.05))],
                   extra_opsets=[helper.make_opsetid("custom", 1)], functions=[add])
    (fused,) = qops.onnx.InferenceSession(model).run(None, {"x": x})
    (expected,) = ReferenceEvaluator(model).run(None, {"x": x})
    assert _gap(fused, expected) <= 1


def test_a_negative_dim_value_is_an_unknown_dimension():
    model = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", T.FLOAT, [-1, 3])],
                   [_vi("y", T.FLOAT, [-1, 3])])
    session = qops.onnx.InferenceSession(model)
    (y,) = session.run(None, {"x": np.ones((2, 3), np.float32)})
    assert y.shape == (2, 3)


def _two_activation_matmul_5d():
    rng = np.random.default_rng(0)
    feeds = {"a": _quantized(rng, (2, 1, 2, 3, 4), np.uint8),
             "b": _quantized(rng, (1, 2, 1, 4, 5), np.uint8)}
    nodes = [_dq("a", "ad"), _dq("b", "bd"), helper.make_node("MatMul", ["ad", "bd"], ["c"]),
             _q("c", "y", "ys")]
    return nodes, feeds


def _add_9d():
    rng = np.random.default_rng(1)
    feeds = {"a": _quantized(rng, (1, 2, 1, 2, 1, 1, 1, 3, 4), np.uint8),
             "b": _quantized(rng, (2, 1, 2, 1, 1, 1, 1, 3, 1), np.uint8)}
    nodes = [_dq("a", "ad"), _dq("b", "bd"), helper.make_node("Add", ["ad", "bd"], ["c"]),
             _q("c", "y", "ys")]
    return nodes, feeds


def _global_pool_4_spatial_axes():
    feeds = {"a": _quantized(np.random.default_rng(2), (1, 2, 3, 4, 5, 2), np.uint8)}
    nodes = [_dq("a", "ad"), helper.make_node("GlobalAveragePool", ["ad"], ["c"]),
             _q("c", "y", "ys")]
    return nodes, feeds


@pytest.mark.parametrize("case", [_two_activation_matmul_5d, _add_9d, _global_pool_4_spatial_axes],
                         ids=["matmul-5d", "add-9d", "global-pool-6d"])
def test_fused_groups_run_every_rank_the_literal_graph_runs(case):
    nodes, feeds = case()
    model = _model(nodes, _feeds_inputs(feeds), [_out("y")],
                   _qparams(0.02, np.uint8(3)) + [_init("ys", np.float32(0.05))])
    _, (fused,), (literal,) = _sessions(model, feeds)
    assert _gap(fused, literal) <= 1


def test_a_node_with_too_many_outputs_is_a_qops_error():
    model = _model([helper.make_node("Relu", ["x"], ["y", "z"], name="relu")],
                   [_vi("x", T.FLOAT, [3])], [_out("y"), _out("z")])
    with pytest.raises(qops.QopsError, match="relu"):
        qops.onnx.InferenceSession(model).run(None, {"x": _OUTER})


def _dynamic_quantize_with_one_output():
    w = _quantized(np.random.default_rng(0), (4, 3), np.int8)
    return _model([helper.make_node("DynamicQuantizeLinear", ["x"], ["xq"], name="dql"),
                   helper.make_node("MatMulInteger", ["xq", "w"], ["y"], name="mmi")],
                  [_vi("x", T.FLOAT, [2, 4])], [_out("y")], [_init("w", w)])


def _scale_mul_with_three_inputs():
    w = _quantized(np.random.default_rng(0), (4, 3), np.int8)
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
             helper.make_node("MatMulInteger", ["xq", "w", "xz"], ["acc"]),
             helper.make_node("Cast", ["acc"], ["accf"], to=T.FLOAT),
             helper.make_node("Mul", ["xs", "ws", "ws"], ["m"], name="scalemul"),
             helper.make_node("Mul", ["accf", "m"], ["y"])]
    return _model(nodes, [_vi("x", T.FLOAT, [2, 4])], [_out("y")],
                  [_init("w", w), _init("ws", np.float32(0.01))])


@pytest.mark.parametrize("build", [_dynamic_quantize_with_one_output, _scale_mul_with_three_inputs],
                         ids=["dql-one-output", "mul-three-inputs"])
def test_malformed_dynamic_products_are_qops_errors(build):
    model = build()
    feeds = {"x": np.random.default_rng(1).normal(0, 1, (2, 4)).astype(np.float32)}
    try:
        qops.onnx.InferenceSession(model).run(None, feeds)
    except qops.QopsError:
        pass


@pytest.mark.parametrize("breakage", ["bias of 2 for 3 channels", "pads of 2 values"])
def test_a_malformed_fused_conv_is_reported_with_its_node(breakage):
    if breakage == "pads of 2 values":
        model, feeds = _conv_with_bias(np.float32(0.001), np.float32(0.01))
        model.graph.node[3].attribute.extend([helper.make_attribute("pads", [1, 1])])
    else:
        model, feeds = _conv_with_bias(np.float32(0.001), np.float32(0.01),
                                       bias=np.array([1, 2], np.int32))
    with pytest.raises(qops.QopsError, match="theconv"):
        qops.onnx.InferenceSession(model).run(None, feeds)


def test_a_ragged_feed_is_a_validation_error_naming_the_input():
    model = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", T.FLOAT, None)],
                   [_out("y")])
    with pytest.raises(qops.ValidationError, match="'x'"):
        qops.onnx.InferenceSession(model).run(None, {"x": [[1.0, 2.0], [3.0]]})


def test_a_sequence_output_is_refused_or_returned_as_onnx_reference_does():
    model = _model([helper.make_node("SequenceConstruct", ["x", "c"], ["y"])],
                   [_vi("x", T.FLOAT, [3])], [_out("y")], [_init("c", np.ones(2, np.float32))])
    try:
        session = qops.onnx.InferenceSession(model)
    except qops.ValidationError:
        return
    (actual,) = session.run(None, {"x": _OUTER})
    (expected,) = ReferenceEvaluator(model).run(None, {"x": _OUTER})
    assert len(actual) == len(expected)
    for got, wanted in zip(actual, expected):
        np.testing.assert_array_equal(got, wanted)


def test_output_names_as_any_iterable():
    model = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", T.FLOAT, [3])],
                   [_out("y")])
    outputs = qops.onnx.InferenceSession(model).run(iter(["y"]), {"x": _OUTER})
    assert len(outputs) == 1


def test_an_initializer_listed_as_an_input_can_be_overridden():
    model = _model([helper.make_node("Add", ["x", "b"], ["y"])],
                   [_vi("x", T.FLOAT, [3]), _vi("b", T.FLOAT, [3])], [_out("y")],
                   [_init("b", np.ones(3, np.float32))])
    session = qops.onnx.InferenceSession(model)
    (default,) = session.run(None, {"x": np.zeros(3, np.float32)})
    np.testing.assert_array_equal(default, np.ones(3, np.float32))
    (overridden,) = session.run(None, {"x": np.zeros(3, np.float32),
                                       "b": np.full(3, 5, np.float32)})
    np.testing.assert_array_equal(overridden, np.full(3, 5, np.float32))


# == right by design ===========================================================================

def _matmul_then(activation_nodes, extra_initializers, y_zero=np.uint8(128), opset=21,
                 y_scale=0.05, last="a"):
    rng = np.random.default_rng(0)
    x = _quantized(rng, (4, 8), np.uint8)
    nodes = [_dq("x", "xd"), helper.make_node("DequantizeLinear", ["w", "ws"], ["wd"]),
             helper.make_node("MatMul", ["xd", "wd"], ["c"]), *activation_nodes,
             _q(last, "y", "ys", "yz")]
    model = _model(nodes, [_vi("x", T.UINT8, [4, 8])], [_out("y")],
                   _qparams(0.02, np.uint8(3)) + [
                       _init("w", _quantized(rng, (8, 5), np.int8)), _init("ws", np.float32(0.01)),
                       _init("ys", np.float32(y_scale)), _init("yz", np.asarray(y_zero))]
                   + list(extra_initializers), opset=opset)
    return model, {"x": x}


@pytest.mark.parametrize("case", [
    "clip min > max", "clip min > max int8", "clip max only", "clip infinite",
    "clip opset 10 attributes", "clip opset 10 min > max", "relu zero point at max",
    "relu int8 zero point at max", "relu int8 zero point at min"])
def test_relu_and_clip_fold_into_the_saturation_range(case):
    clip = helper.make_node("Clip", ["c", "lo", "hi"], ["a"])
    relu = [helper.make_node("Relu", ["c"], ["a"])]
    lo_hi = [_init("lo", np.float32(0.5)), _init("hi", np.float32(-0.5))]
    nodes, initializers, zero, opset = [clip], lo_hi, np.uint8(128), 21
    if case == "clip min > max int8":
        zero = np.int8(0)
    elif case == "clip max only":
        nodes = [helper.make_node("Clip", ["c", "", "hi"], ["a"])]
        initializers = [_init("hi", np.float32(0.3))]
    elif case == "clip infinite":
        initializers = [_init("lo", np.float32(-np.inf)), _init("hi", np.float32(np.inf))]
    elif case.startswith("clip opset 10"):
        bounds = (0.3, -0.2) if "min > max" in case else (-0.2, 0.3)
        nodes = [helper.make_node("Clip", ["c"], ["a"], min=bounds[0], max=bounds[1])]
        initializers, opset = [], 10
    elif case.startswith("relu"):
        nodes, initializers = relu, []
        zero = {"relu zero point at max": np.uint8(255),
                "relu int8 zero point at max": np.int8(127),
                "relu int8 zero point at min": np.int8(-128)}[case]
    model, feeds = _matmul_then(nodes, initializers, zero, opset)
    session, (fused,), (literal,) = _sessions(model, feeds)
    assert _kinds(session) == ["QDQ MatMul"]
    assert _gap(fused, literal) <= 1


def test_a_nan_clip_bound_is_not_fused():
    model, feeds = _matmul_then([helper.make_node("Clip", ["c", "lo"], ["a"])],
                                [_init("lo", np.float32(np.nan))])
    session, (fused,), (literal,) = _sessions(model, feeds)
    assert "QDQ MatMul" not in _kinds(session)
    np.testing.assert_array_equal(fused, literal)


@pytest.mark.parametrize("attributes, zero, dtype, fused_kind", [
    ({"output_dtype": T.INT8}, None, np.int8, True),
    ({"output_dtype": T.UINT8}, None, np.uint8, True),
    ({"output_dtype": T.INT16}, None, np.int16, False),
    ({"saturate": 0}, np.int8(0), np.int8, True),
])
def test_quantize_linear_attributes_on_a_group_output(attributes, zero, dtype, fused_kind):
    rng = np.random.default_rng(0)
    x = _quantized(rng, (3, 8), np.uint8)
    q_inputs = ["c", "ys"] + (["yz"] if zero is not None else [])
    nodes = [_dq("x", "xd"), helper.make_node("DequantizeLinear", ["w", "ws"], ["wd"]),
             helper.make_node("MatMul", ["xd", "wd"], ["c"]),
             helper.make_node("QuantizeLinear", q_inputs, ["y"], **attributes)]
    initializers = _qparams(0.02, np.uint8(3)) + [
        _init("w", _quantized(rng, (8, 3), np.int8)), _init("ws", np.float32(0.01)),
        _init("ys", np.float32(0.05))] + ([_init("yz", zero)] if zero is not None else [])
    model = _model(nodes, [_vi("x", T.UINT8, [3, 8])], [_out("y")], initializers)
    session, (fused,), (literal,) = _sessions(model, {"x": x})
    assert ("QDQ MatMul" in _kinds(session)) == fused_kind
    assert fused.dtype == np.dtype(dtype)
    assert _gap(fused, ReferenceEvaluator(model).run(None, {"x": x})[0]) <= 1
    assert _gap(fused, literal) <= 1


def test_a_per_axis_quantized_output_is_not_fused():
    model, feeds = _matmul_then([], [], last="c")
    for tensor in model.graph.initializer:
        if tensor.name in ("ys", "yz"):
            value = numpy_helper.to_array(tensor)
            tensor.CopyFrom(numpy_helper.from_array(np.full(4, value, value.dtype), tensor.name))
    model.graph.node[-1].attribute.extend([helper.make_attribute("axis", 0)])
    session, (fused,), (literal,) = _sessions(model, feeds)
    assert "QDQ MatMul" not in _kinds(session)
    np.testing.assert_array_equal(fused, literal)


def test_a_per_axis_dequantized_activation_is_not_fused():
    rng = np.random.default_rng(4)
    a, b = _quantized(rng, (2, 3, 4), np.uint8), _quantized(rng, (2, 3, 4), np.uint8)
    nodes = [helper.make_node("DequantizeLinear", ["a", "sa", "za"], ["ad"], axis=1),
             _dq("b", "bd"), helper.make_node("Add", ["ad", "bd"], ["c"]), _q("c", "y")]
    model = _model(nodes, _feeds_inputs({"a": a, "b": b}), [_out("y")],
                   _qparams(0.05, np.uint8(7)) + [
                       _init("sa", np.array([0.01, 0.02, 0.03], np.float32)),
                       _init("za", np.array([1, 2, 3], np.uint8))])
    session, (fused,), (literal,) = _sessions(model, {"a": a, "b": b})
    assert "QDQ Add" not in _kinds(session)
    np.testing.assert_array_equal(fused, literal)


_MOVES = {
    "Gather negative indices": ([_init("i", np.array([-1, 0, -6], np.int64))], "Gather", ["i"],
                                {"axis": 3}),
    "Gather 2-D negative indices": ([_init("i", np.array([[-1, 0], [2, -2]], np.int64))], "Gather",
                                    ["i"], {"axis": 2}),
    "Pad reflect": ([_init("p", np.array([0, 0, 1, 2, 0, 0, 2, 1], np.int64))], "Pad", ["p"],
                    {"mode": "reflect"}),
    "Pad edge": ([_init("p", np.array([0, 0, 1, 2, 0, 0, 2, 1], np.int64))], "Pad", ["p"],
                 {"mode": "edge"}),
    "Pad wrap": ([_init("p", np.array([0, 0, 1, 2, 0, 0, 2, 1], np.int64))], "Pad", ["p"],
                 {"mode": "wrap"}),
    "Pad constant value": ([_init("p", np.array([0, 0, 1, 2, 0, 0, 2, 1], np.int64)),
                            _init("v", np.float32(0.7))], "Pad", ["p", "v"], {}),
    "Pad constant axes": ([_init("p", np.array([1, 2, 2, 1], np.int64)),
                           _init("v", np.float32(-0.4)),
                           _init("ax", np.array([-2, -1], np.int64))], "Pad", ["p", "v", "ax"], {}),
    "MaxPool ceil_mode": ([], "MaxPool", [], {"kernel_shape": [3, 3], "strides": [2, 2],
                                              "ceil_mode": 1}),
    "MaxPool ceil_mode padding-only window": ([], "MaxPool", [], {
        "kernel_shape": [3, 3], "pads": [2, 2, 2, 2], "strides": [3, 3], "ceil_mode": 1}),
    "MaxPool dilations": ([], "MaxPool", [], {"kernel_shape": [2, 2], "dilations": [2, 2],
                                              "pads": [1, 1, 1, 1]}),
    "MaxPool storage_order": ([], "MaxPool", [], {"kernel_shape": [2, 2], "storage_order": 1}),
    "MaxPool SAME_LOWER": ([], "MaxPool", [], {"kernel_shape": [2, 2], "auto_pad": "SAME_LOWER",
                                               "strides": [2, 2]}),
    "Transpose without perm": ([], "Transpose", [], {}),
    "Slice negative steps": ([_init("st", np.array([-1], np.int64)),
                              _init("en", np.array([-100], np.int64)),
                              _init("ax", np.array([3], np.int64)),
                              _init("sp", np.array([-2], np.int64))], "Slice",
                             ["st", "en", "ax", "sp"], {}),
    "Flatten axis 0": ([], "Flatten", [], {"axis": 0}),
    "Resize round_prefer_ceil asymmetric": ([_init("sc", np.array([1, 1, 1.7, 0.6], np.float32))],
                                            "Resize", ["", "sc"], {
                                                "mode": "nearest",
                                                "nearest_mode": "round_prefer_ceil",
                                                "coordinate_transformation_mode": "asymmetric"}),
    "Resize floor align_corners": ([_init("sc", np.array([1, 1, 1.7, 0.6], np.float32))],
                                   "Resize", ["", "sc"], {
                                       "mode": "nearest", "nearest_mode": "floor",
                                       "coordinate_transformation_mode": "align_corners"}),
}


@pytest.mark.parametrize("case", sorted(_MOVES))
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_more_movements_on_the_integers_equal_the_literal_graph(case, dtype):
    initializers, op_type, others, attributes = _MOVES[case]
    x = _quantized(np.random.default_rng(7), (1, 2, 5, 6), dtype)
    nodes = [_dq("x", "xd"), helper.make_node(op_type, ["xd", *others], ["m"], **attributes),
             _q("m", "y")]
    zero = np.asarray(5 if dtype == np.uint8 else -3, dtype)
    model = _model(nodes, _feeds_inputs({"x": x}), [_out("y")],
                   _qparams(0.03, zero) + list(initializers))
    session, (fused,), (literal,) = _sessions(model, {"x": x})
    assert f"QDQ {op_type} on integers" in _kinds(session)
    np.testing.assert_array_equal(fused, literal)
    if case != "MaxPool SAME_LOWER":  # onnx.reference's MaxPool has the wrong size there
        np.testing.assert_array_equal(fused, ReferenceEvaluator(model).run(None, {"x": x})[0])


@pytest.mark.parametrize("op_type, attributes, shape", [
    ("Squeeze", {}, (1, 2, 1, 6)), ("Squeeze", {"axes": [0, 2]}, (1, 2, 1, 6)),
    ("Unsqueeze", {"axes": [0, -1]}, (2, 3))])
def test_squeeze_and_unsqueeze_of_old_opsets_on_the_integers(op_type, attributes, shape):
    x = _quantized(np.random.default_rng(8), shape, np.uint8)
    nodes = [_dq("x", "xd"), helper.make_node(op_type, ["xd"], ["m"], **attributes), _q("m", "y")]
    model = _model(nodes, _feeds_inputs({"x": x}), [_out("y")], _qparams(0.03, np.uint8(5)),
                   opset=11)
    session, (fused,), (literal,) = _sessions(model, {"x": x})
    assert f"QDQ {op_type} on integers" in _kinds(session)
    np.testing.assert_array_equal(fused, literal)


def test_concat_of_different_scales_is_not_fused():
    rng = np.random.default_rng(9)
    a, b = _quantized(rng, (1, 2, 3), np.uint8), _quantized(rng, (1, 2, 3), np.uint8)
    nodes = [_dq("a", "ad"), _dq("b", "bd", "s2"), helper.make_node("Concat", ["ad", "bd"], ["c"],
                                                                   axis=1), _q("c", "y")]
    model = _model(nodes, _feeds_inputs({"a": a, "b": b}), [_out("y")],
                   _qparams(0.05, np.uint8(7)) + [_init("s2", np.float32(0.06))])
    session, (fused,), (literal,) = _sessions(model, {"a": a, "b": b})
    assert not any("Concat" in kind and "QDQ" in kind for kind in _kinds(session))
    np.testing.assert_array_equal(fused, literal)


@pytest.mark.parametrize("x_dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("w_dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("y_dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("op_type", ["Conv", "MatMul"])
def test_mixed_8_bit_types_fuse_with_the_output_s_type(op_type, x_dtype, w_dtype, y_dtype):
    rng = np.random.default_rng(10)
    conv = op_type == "Conv"
    x = _quantized(rng, (1, 2, 4, 4) if conv else (3, 8), x_dtype)
    w = _quantized(rng, (3, 2, 3, 3) if conv else (8, 3), w_dtype)
    nodes = [_dq("x", "xd"), helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wd"]),
             helper.make_node(op_type, ["xd", "wd"], ["c"], **({"pads": [1] * 4} if conv else {})),
             _q("c", "y", "ys", "yz")]
    model = _model(nodes, _feeds_inputs({"x": x}), [_out("y")],
                   _qparams(0.02, np.asarray(3, x_dtype)) + [
                       _init("w", w), _init("ws", np.float32(0.01)),
                       _init("wz", np.asarray(1, w_dtype)), _init("ys", np.float32(0.2)),
                       _init("yz", np.asarray(4, y_dtype))])
    session, (fused,), (literal,) = _sessions(model, {"x": x})
    assert _kinds(session) == [f"QDQ {op_type}"]
    assert fused.dtype == np.dtype(y_dtype)
    assert _gap(fused, literal) <= 1


@pytest.mark.parametrize("bias_shape, attributes, fused_kind", [
    ((3, 4), {}, False), ((1, 4), {}, False), ((4,), {}, True), ((1,), {}, True),
    ((4,), {"beta": 2.0}, False)])
def test_gemm_bias_shapes_and_beta(bias_shape, attributes, fused_kind):
    rng = np.random.default_rng(11)
    a = _quantized(rng, (3, 8), np.uint8)
    nodes = [_dq("a", "ad"), helper.make_node("DequantizeLinear", ["w", "ws"], ["wd"]),
             helper.make_node("DequantizeLinear", ["b", "bs"], ["bd"]),
             helper.make_node("Gemm", ["ad", "wd", "bd"], ["c"], **attributes), _q("c", "y", "ys")]
    model = _model(nodes, _feeds_inputs({"a": a}), [_out("y")],
                   _qparams(0.1, np.uint8(3)) + [
                       _init("w", _quantized(rng, (8, 4), np.int8)), _init("ws", np.float32(0.01)),
                       _init("b", rng.integers(-500, 500, bias_shape).astype(np.int32)),
                       _init("bs", np.float32(0.1) * np.float32(0.01)),
                       _init("ys", np.float32(0.2))])
    session, (fused,), (literal,) = _sessions(model, {"a": a})
    assert ("QDQ Gemm" in _kinds(session)) == fused_kind
    assert _gap(fused, literal) <= 1


def test_shared_dq_group_outputs_as_graph_outputs_and_any_node_order():
    rng = np.random.default_rng(12)
    x = _quantized(rng, (1, 2, 4, 4), np.uint8)
    nodes = [_dq("x", "xd"), helper.make_node("DequantizeLinear", ["w", "ws"], ["wd"]),
             helper.make_node("Conv", ["xd", "wd"], ["c1"]), _q("c1", "y1", "ys", "yz"),
             helper.make_node("Conv", ["xd", "wd"], ["c2"]),
             helper.make_node("Relu", ["c2"], ["r2"]),
             _q("r2", "y2", "ys", "yz"), _dq("y1", "d1", "ys", "yz"),
             helper.make_node("MaxPool", ["d1"], ["mp"], kernel_shape=[2, 2]),
             _q("mp", "y3", "ys", "yz")]
    initializers = _qparams(0.02, np.uint8(3)) + [
        _init("w", _quantized(rng, (3, 2, 1, 1), np.int8)), _init("ws", np.float32(0.01)),
        _init("ys", np.float32(0.05)), _init("yz", np.uint8(7))]
    outputs = [_out("y1"), _out("y2"), _out("y3"), _out("xd")]
    model = _model(nodes, _feeds_inputs({"x": x}), outputs, initializers)
    reversed_model = _model(nodes[::-1], _feeds_inputs({"x": x}), outputs, initializers)
    expected = ReferenceEvaluator(model).run(None, {"x": x})
    for source in (model, reversed_model):
        session = qops.onnx.InferenceSession(source)
        assert sorted(_kinds(session)) == ["QDQ Conv", "QDQ Conv", "QDQ MaxPool on integers",
                                           "qops DequantizeLinear (bound)"]
        actual = session.run(None, {"x": x})
        for got, wanted in zip(actual[:3], expected[:3]):
            assert _gap(got, wanted) <= 1
        np.testing.assert_array_equal(actual[3], expected[3])


def _single(node_or_nodes, inputs=("x",), outputs=(), initializers=()):
    nodes = node_or_nodes if isinstance(node_or_nodes, list) else [node_or_nodes]
    return _model(nodes, [_vi(name, T.FLOAT, [3]) for name in inputs],
                  [_out(name) for name in outputs], initializers)


_ODD_BUT_VALID = {
    "empty graph": (lambda: _model([], [], []), {}),
    "input passed through": (lambda: _model([], [_vi("x", T.FLOAT, [3])], [_out("x")]),
                             {"x": _OUTER}),
    "node without outputs": (lambda: _single([helper.make_node("Relu", ["x"], []),
                                              helper.make_node("Neg", ["x"], ["y"])],
                                             outputs=["y"]), {"x": _OUTER}),
    "Constant value_ints": (lambda: _model(
        [helper.make_node("Constant", [], ["c"], value_ints=[1, 2, 3]),
         helper.make_node("Add", ["x", "c"], ["y"])], [_vi("x", T.INT64, [3])], [_out("y")]),
        {"x": np.array([4, 5, 6], np.int64)}),
    "Constant value_floats as output": (lambda: _model(
        [helper.make_node("Constant", [], ["y"], value_floats=[1.5, 2.0])], [], [_out("y")]), {}),
    "Constant value_float": (lambda: _model(
        [helper.make_node("Constant", [], ["c"], value_float=1.5),
         helper.make_node("Identity", ["c"], ["y"])], [], [_out("y")]), {}),
    "duplicate node names": (lambda: _single([helper.make_node("Relu", ["x"], ["a"], name="n"),
                                              helper.make_node("Neg", ["a"], ["y"], name="n")],
                                             outputs=["y"]), {"x": _OUTER}),
    "unused initializer": (lambda: _single(helper.make_node("Relu", ["x"], ["y"]), outputs=["y"],
                                           initializers=[_init("u", np.ones(3, np.float32))]),
                           {"x": _OUTER}),
    "outputs: an input, an initializer, one twice": (lambda: _single(
        helper.make_node("Relu", ["x"], ["y"]), outputs=["y", "x", "u", "y"],
        initializers=[_init("u", np.ones(3, np.float32))]), {"x": _OUTER}),
    "initializer listed as an input, not fed": (lambda: _model(
        [helper.make_node("Add", ["x", "b"], ["y"])],
        [_vi("x", T.FLOAT, [3]), _vi("b", T.FLOAT, [3])], [_out("y")],
        [_init("b", np.ones(3, np.float32))]), {"x": _OUTER}),
}


@pytest.mark.parametrize("case", sorted(_ODD_BUT_VALID))
def test_odd_but_valid_models_run_as_onnx_reference_runs_them(case):
    build, feeds = _ODD_BUT_VALID[case]
    model = build()
    session = qops.onnx.InferenceSession(model)
    actual = session.run(None, feeds)
    expected = ReferenceEvaluator(model).run(None, feeds)
    assert len(actual) == len(expected)
    for got, wanted in zip(actual, expected):
        np.testing.assert_array_equal(got, wanted)
        assert got.dtype == np.asarray(wanted).dtype
    # The outputs are the caller's, one array each.
    for position, got in enumerate(actual):
        assert got.flags.writeable and (got.base is None or _on_an_output_buffer(got))
        assert not any(np.shares_memory(got, other) for other in actual[position + 1:])
        assert not any(np.shares_memory(got, value) for value in feeds.values())


def _on_an_output_buffer(array):
    from qops.backends.native._outputs import OutputBuffer

    return type(array.base) is OutputBuffer


def test_a_kernel_s_new_output_is_returned_as_it_is_and_a_view_of_a_feed_is_copied():
    """The session returns an output of qops' allocator without copying it
    (the kernels made it for this run alone), but never two outputs on one
    buffer; a feed that is itself such an output (a previous run's),
    returned through Reshape or Identity, is copied."""
    _compiled_tables()
    rng = np.random.default_rng(16)
    x = _quantized(rng, (1, 2, 64, 64), np.uint8)
    nodes = [_dq("x", "xd"), helper.make_node("DequantizeLinear", ["w", "ws"], ["wd"]),
             helper.make_node("Conv", ["xd", "wd"], ["c"]), _q("c", "y", "s2"),
             helper.make_node("Identity", ["y"], ["y_again"])]
    model = _model(nodes, _feeds_inputs({"x": x}), [_out("y"), _out("y_again")],
                   _qparams(0.02, np.uint8(3)) + [
                       _init("w", _quantized(rng, (3, 2, 1, 1), np.int8)),
                       _init("ws", np.float32(0.01)), _init("s2", np.float32(0.05))])
    y, y_again = qops.onnx.InferenceSession(model).run(None, {"x": x})
    assert _on_an_output_buffer(y) and not np.shares_memory(y, y_again)
    np.testing.assert_array_equal(y, y_again)
    # DQ -> Reshape -> Q of one quantization is the bytes reshaped: a view of
    # the feed's buffer, which the caller's feed still holds.
    passing = _model([_dq("x", "xd"), helper.make_node("Reshape", ["xd", "shape"], ["r"]),
                      _q("r", "flat")],
                     _feeds_inputs({"x": y}), [_out("flat")],
                     _qparams(0.02, np.uint8(3)) + [_init("shape", np.array([3, -1], np.int64))])
    session = qops.onnx.InferenceSession(passing)
    assert "QDQ Reshape on integers" in _kinds(session)
    (flat,) = session.run(None, {"x": y})
    assert not np.shares_memory(flat, y)
    np.testing.assert_array_equal(flat, y.reshape(3, -1))


def test_a_model_local_function_runs():
    twice = helper.make_function("custom", "Twice", ["a"], ["b"],
                                 [helper.make_node("Add", ["a", "a"], ["b"])],
                                 [helper.make_opsetid("", 21)])
    model = _model([helper.make_node("Twice", ["x"], ["y"], domain="custom")],
                   [_vi("x", T.FLOAT, [3])], [_out("y")],
                   extra_opsets=[helper.make_opsetid("custom", 1)], functions=[twice])
    (y,) = qops.onnx.InferenceSession(model).run(None, {"x": _OUTER})
    np.testing.assert_array_equal(y, 2 * _OUTER)


@pytest.mark.parametrize("breakage, message", [
    ("Constant without a value", "one attribute"),
    ("sequence input", "not a tensor"),
    ("input without a type", "not a tensor"),
    ("unknown operator", "Frobnicate"),
    ("folded node fails", "fails on its constant inputs"),
])
def test_malformed_models_fail_at_construction_naming_what_is_wrong(breakage, message):
    if breakage == "Constant without a value":
        model = _model([helper.make_node("Constant", [], ["c"]),
                        helper.make_node("Identity", ["c"], ["y"])], [], [_out("y")])
    elif breakage == "sequence input":
        model = _model([helper.make_node("Identity", ["x"], ["y"])],
                       [helper.make_tensor_sequence_value_info("x", T.FLOAT, [3])], [_out("y")])
    elif breakage == "input without a type":
        model = _model([helper.make_node("Relu", ["x"], ["y"])],
                       [helper.make_value_info("x", onnx.TypeProto())], [_out("y")])
    elif breakage == "unknown operator":
        model = _single(helper.make_node("Frobnicate", ["x"], ["y"], name="frob"), outputs=["y"])
    else:
        model = _model([helper.make_node("Softmax", ["c"], ["y"], axis=7, name="soft")], [],
                       [_out("y")], [_init("c", np.ones(3, np.float32))])
    with pytest.raises(qops.ValidationError, match=message):
        qops.onnx.InferenceSession(model)


def test_if_reading_a_feed_with_a_fed_condition_runs():
    then_graph = helper.make_graph([helper.make_node("Add", ["x", "k"], ["t"])], "then", [],
                                   [_out("t")])
    else_graph = helper.make_graph([helper.make_node("Neg", ["r"], ["e"])], "else", [],
                                   [_out("e")])
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("If", ["cond"], ["y"], then_branch=then_graph,
                              else_branch=else_graph)]
    model = _model(nodes, [_vi("x", T.FLOAT, [3]), _vi("cond", T.BOOL, [])], [_out("y")],
                   [_init("k", np.float32(5))])
    session = qops.onnx.InferenceSession(model)
    for condition in (True, False):
        feeds = {"x": _OUTER, "cond": np.array(condition)}
        np.testing.assert_array_equal(session.run(None, feeds)[0],
                                      ReferenceEvaluator(model).run(None, feeds)[0])


def test_unusual_feed_layouts_give_the_contiguous_feed_s_results():
    rng = np.random.default_rng(13)
    big = _quantized(rng, (4, 8), np.uint8)
    nodes = [_dq("a", "ad"), _dq("b", "bd"), helper.make_node("Add", ["ad", "bd"], ["c"]),
             _q("c", "y1"), helper.make_node("Softmax", ["ad"], ["p"]), _q("p", "y2", "ps", "pz"),
             helper.make_node("Mul", ["ad", "bd"], ["m"]), _q("m", "y3"),
             helper.make_node("DequantizeLinear", ["w", "ws"], ["wd"]),
             helper.make_node("MatMul", ["ad", "wd"], ["mm"]), _q("mm", "y4")]
    model = _model(nodes, [_vi("a", T.UINT8, [4, 4]), _vi("b", T.UINT8, [4, 4])],
                   [_out(f"y{i}") for i in range(1, 5)],
                   _qparams(0.05, np.uint8(7)) + [
                       _init("ps", np.float32(1 / 256)), _init("pz", np.uint8(0)),
                       _init("w", _quantized(rng, (4, 3), np.int8)), _init("ws", np.float32(0.01))])
    session = qops.onnx.InferenceSession(model)
    assert sorted(_kinds(session)) == ["QDQ Add", "QDQ MatMul", "QDQ Mul", "QDQ Softmax"]
    read_only = np.ascontiguousarray(big[:, ::2])
    read_only.flags.writeable = False
    before = big.copy()
    for feeds in ({"a": big[:, ::2], "b": big.T[:4, :4]},
                  {"a": read_only, "b": np.asfortranarray(big[:4, :4])}):
        contiguous = {name: np.ascontiguousarray(value) for name, value in feeds.items()}
        for got, wanted in zip(session.run(None, feeds), session.run(None, contiguous)):
            np.testing.assert_array_equal(got, wanted)
        expected = ReferenceEvaluator(model).run(None, feeds)
        for got, wanted in zip(session.run(None, feeds), expected):
            assert _gap(got, wanted) <= 1
    np.testing.assert_array_equal(big, before)  # the feeds are left as they were


def test_concurrent_runs_of_a_mixed_model_with_symbolic_sizes():
    rng = np.random.default_rng(14)
    then_graph = helper.make_graph([helper.make_node("Relu", ["f"], ["t"])], "then", [],
                                   [_out("t")])
    else_graph = helper.make_graph([helper.make_node("Neg", ["f"], ["e"])], "else", [],
                                   [_out("e")])
    nodes = [_dq("x", "xd"), helper.make_node("DequantizeLinear", ["w", "ws"], ["wd"]),
             helper.make_node("Conv", ["xd", "wd"], ["c"], auto_pad="SAME_UPPER", strides=[2, 2]),
             _q("c", "q", "s2"), _dq("q", "qd", "s2"),
             helper.make_node("MaxPool", ["qd"], ["mp"], kernel_shape=[2, 2]),
             _q("mp", "q2", "s2"), _dq("q2", "f", "s2"),
             helper.make_node("ReduceSum", ["f"], ["total"], keepdims=0),
             helper.make_node("Greater", ["total", "zero"], ["cond"]),
             helper.make_node("If", ["cond"], ["y"], then_branch=then_graph,
                              else_branch=else_graph),
             helper.make_node("Softmax", ["f"], ["sm"], axis=1)]
    model = _model(nodes, [_vi("x", T.UINT8, [1, 3, "h", "w"])], [_out("y"), _out("sm"), _out("q")],
                   _qparams(0.02, np.uint8(100)) + [
                       _init("w", _quantized(rng, (4, 3, 3, 3), np.int8)),
                       _init("ws", np.float32(0.01)), _init("s2", np.float32(0.05)),
                       _init("zero", np.float32(0))])
    feeds = [{"x": _quantized(rng, (1, 3, int(rng.integers(3, 16)), int(rng.integers(3, 16))),
                              np.uint8)} for _ in range(8)]
    one = qops.onnx.InferenceSession(model, n_threads=1)
    assert {"QDQ Conv", "QDQ MaxPool on integers", "onnx.reference If"} <= set(_kinds(one))
    expected = [one.run(None, feed) for feed in feeds]
    shared = qops.onnx.InferenceSession(model, n_threads=2)
    failures = []

    def work(index):
        try:
            for repeat in range(4):
                position = (index + repeat) % len(feeds)
                for got, wanted in zip(shared.run(None, feeds[position]), expected[position]):
                    if not np.array_equal(got, wanted):
                        failures.append(position)
        except Exception as error:  # noqa: BLE001 - reported below
            failures.append(repr(error))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures


def test_fused_outputs_are_new_arrays_on_every_run():
    rng = np.random.default_rng(15)
    x = _quantized(rng, (1, 2, 4, 4), np.uint8)
    nodes = [_dq("x", "xd"), helper.make_node("DequantizeLinear", ["w", "ws"], ["wd"]),
             helper.make_node("Conv", ["xd", "wd"], ["c"]), _q("c", "y", "s2"),
             _dq("y", "yd", "s2"), helper.make_node("Reshape", ["yd", "shape"], ["r"]),
             _q("r", "y2", "s2"), helper.make_node("Identity", ["y2"], ["y3"])]
    model = _model(nodes, _feeds_inputs({"x": x}), [_out("y"), _out("y2"), _out("y3")],
                   _qparams(0.02, np.uint8(3)) + [
                       _init("w", _quantized(rng, (3, 2, 1, 1), np.int8)),
                       _init("ws", np.float32(0.01)), _init("s2", np.float32(0.05)),
                       _init("shape", np.array([3, 16], np.int64))])
    session = qops.onnx.InferenceSession(model)
    assert "QDQ Reshape on integers" in _kinds(session)
    first = session.run(None, {"x": x})
    kept = [array.copy() for array in first]
    assert not np.shares_memory(first[0], first[1]) and not np.shares_memory(first[1], first[2])
    for array in first:
        assert array.flags.writeable
        array[...] = 0
    for got, wanted in zip(session.run(None, {"x": x}), kept):
        np.testing.assert_array_equal(got, wanted)


@pytest.mark.parametrize("w_dtype", [np.int8, np.uint8])
@pytest.mark.parametrize("per_column", [False, True])
def test_dynamic_product_with_nonzero_weight_zero_points_and_the_bias_first(w_dtype, per_column):
    rng = np.random.default_rng(16)
    info = np.iinfo(w_dtype)
    columns = 5
    shape = (columns,) if per_column else ()
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
             helper.make_node("MatMulInteger", ["xq", "w", "xz", "wz"], ["acc"]),
             helper.make_node("Cast", ["acc"], ["accf"], to=T.FLOAT),
             helper.make_node("Mul", ["ws", "xs"], ["m"]),
             helper.make_node("Mul", ["m", "accf"], ["p"]),
             helper.make_node("Add", ["bias", "p"], ["y"])]
    model = _model(nodes, [_vi("x", T.FLOAT, ["batch", 3, 16])], [_out("y")], [
        _init("w", _quantized(rng, (16, columns), w_dtype)),
        _init("wz", rng.integers(info.min, info.max + 1, shape).astype(w_dtype)),
        _init("ws", rng.uniform(0.001, 0.02, shape).astype(np.float32)),
        _init("bias", rng.normal(0, 1, columns).astype(np.float32))])
    x = rng.normal(0, 3, (2, 3, 16)).astype(np.float32)
    session = qops.onnx.InferenceSession(model)
    assert "dynamic MatMul" in _kinds(session)
    np.testing.assert_array_equal(session.run(None, {"x": x})[0],
                                  ReferenceEvaluator(model).run(None, {"x": x})[0])


def test_constant_strings_are_text_as_onnx_reference_has_them():
    node = helper.make_node("Constant", [], ["c"], value_strings=["ab", "c"])
    graph = helper.make_graph([node, helper.make_node("Identity", ["c"], ["y"])], "g", [],
                              [helper.make_tensor_value_info("y", TensorProto.STRING, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    (actual,) = qops.onnx.InferenceSession(model).run(None, {})
    (expected,) = ReferenceEvaluator(model).run(None, {})
    assert actual.dtype == expected.dtype and actual.tolist() == expected.tolist()


def test_a_conv_whose_kernel_shape_disagrees_with_its_weight_is_not_fused():
    rng = np.random.default_rng(3)
    x = rng.integers(0, 256, (1, 2, 5, 5), dtype=np.uint8)
    w = rng.integers(-100, 100, (3, 2, 3, 3), dtype=np.int8)
    inits = [numpy_helper.from_array(v, n) for n, v in [
        ("s", np.float32(0.02)), ("z", np.uint8(128)), ("w", w), ("ws", np.float32(0.01)),
        ("wz", np.int8(0)), ("ys", np.float32(0.1))]]
    nodes = [helper.make_node("DequantizeLinear", ["x", "s", "z"], ["xd"]),
             helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wd"]),
             helper.make_node("Conv", ["xd", "wd"], ["c"], kernel_shape=[2, 2]),
             helper.make_node("QuantizeLinear", ["c", "ys", "z"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.UINT8,
                                                                         [1, 2, 5, 5])],
                              [helper.make_tensor_value_info("y", TensorProto.UINT8, None)],
                              initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    session = qops.onnx.InferenceSession(model)
    assert "QDQ Conv" not in [step.kind for step in session.steps]
    with pytest.raises(qops.QopsError):
        session.run(None, {"x": x})


def test_a_quantize_version_past_the_registry_is_refused_naming_it(monkeypatch):
    """One rule with the direct functions: where the model's opset puts
    QuantizeLinear at a version the registry lacks, the session refuses it,
    naming the node, that version and the newest qops knows."""
    from qops.onnx import session as session_module

    node = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], name="q")
    model = _model([node], [_vi("x", T.FLOAT, [3])], [_out("y")],
                   [_init("s", np.float32(0.5)), _init("z", np.uint8(3))], opset=28)
    (y,) = qops.onnx.InferenceSession(model).run(None, {"x": np.float32([1, -1, 2])})
    assert y.tolist() == [5, 1, 7]
    real = session_module.operator_version
    monkeypatch.setattr(session_module, "operator_version",
                        lambda op_type, opset: 29 if op_type == "QuantizeLinear"
                        else real(op_type, opset))
    with pytest.raises(qops.UnsupportedError,
                       match=r"node q \(QuantizeLinear, domain ai.onnx\): opset 28 puts QuantizeLinear at its version "
                             r"29, which qops does not describe \(the newest it knows: 28\)"):
        qops.onnx.InferenceSession(model)


def _compiled_tables():
    """Skip where the kernels are not built: the fused GELU runs on them."""
    from qops.backends.native import tables

    if not tables.built():
        pytest.skip("the compiled kernels are not built")


def _gelu_model(order="as exported", shared_output=False, divisor=np.sqrt(2.0)):
    """x -> Div(x, divisor) -> Erf -> Add(1) -> Mul(x) -> Mul(0.5) -> y, the
    commutative nodes' operands in the order given."""
    def constant(name, value):
        return numpy_helper.from_array(np.asarray(value, np.float32), name)

    swapped = order == "swapped"
    nodes = [helper.make_node("Div", ["x", "sqrt2"], ["t"], name="div"),
             helper.make_node("Erf", ["t"], ["e"], name="erf"),
             helper.make_node("Add", ["one", "e"] if swapped else ["e", "one"], ["u"],
                              name="add"),
             helper.make_node("Mul", ["u", "x"] if swapped else ["x", "u"], ["v"], name="times"),
             helper.make_node("Mul", ["half", "v"] if swapped else ["v", "half"], ["y"],
                              name="gelu")]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 700])]
    if shared_output:
        outputs.append(helper.make_tensor_value_info("e", TensorProto.FLOAT, [3, 700]))
    graph = helper.make_graph(
        nodes, "gelu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 700])],
        outputs, [constant("sqrt2", divisor), constant("one", 1.0), constant("half", 0.5)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("order", ["as exported", "swapped"])
def test_gelu_s_erf_form_runs_as_one_step_equal_to_its_nodes(order):
    """Div, Erf, Add, Mul, Mul fused into one step give the nodes' own
    results bit for bit (each step rounds as the node does; products and
    sums are the same in either order), within float32 rounding of GELU."""
    _compiled_tables()
    model = _gelu_model(order)
    x = np.random.default_rng(4).normal(0, 3, (3, 700)).astype(np.float32)
    x[0, :6] = [0.0, -0.0, np.inf, -np.inf, np.nan, 40.0]
    fused = qops.onnx.InferenceSession(model)
    assert [step.kind for step in fused._steps_list] == ["qops Gelu (fused)"]
    literal = qops.onnx.InferenceSession(model, fuse=False)
    (got,), (want,) = fused.run(None, {"x": x}), literal.run(None, {"x": x})
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    from scipy import special
    wide = x.astype(np.float64)
    exact = wide * 0.5 * (1 + special.erf(wide / np.sqrt(2)))
    finite = np.isfinite(exact)
    np.testing.assert_allclose(got[finite], exact[finite], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("breakage", ["shared output", "vector divisor"])
def test_gelu_s_nodes_stay_apart_where_fusing_would_change_the_graph(breakage):
    """An inner value the graph also outputs, or a constant of more than one
    value, leaves the nodes as they are."""
    if breakage == "shared output":
        model = _gelu_model(shared_output=True)
    else:
        model = _gelu_model(divisor=np.full(700, np.sqrt(2.0)))
    session = qops.onnx.InferenceSession(model)
    assert "qops Gelu (fused)" not in [step.kind for step in session._steps_list]
    x = np.random.default_rng(5).normal(0, 2, (3, 700)).astype(np.float32)
    literal = qops.onnx.InferenceSession(model, fuse=False)
    for got, want in zip(session.run(None, {"x": x}), literal.run(None, {"x": x})):
        assert np.array_equal(got, want)


def test_gelu_with_constants_of_one_value_and_more_dimensions_keeps_the_nodes_shape():
    """A divisor of shape (1, 1, 1) makes the nodes' output (1, 3, 700) from
    x of (3, 700): the fused step gives that shape too, and the same values."""
    _compiled_tables()
    model = _gelu_model(divisor=np.full((1, 1, 1), np.sqrt(2.0)))
    model.graph.output[0].type.tensor_type.shape.ClearField("dim")
    x = np.random.default_rng(7).normal(0, 2, (3, 700)).astype(np.float32)
    fused = qops.onnx.InferenceSession(model)
    assert "qops Gelu (fused)" in [step.kind for step in fused._steps_list]
    (got,) = fused.run(None, {"x": x})
    (want,) = qops.onnx.InferenceSession(model, fuse=False).run(None, {"x": x})
    assert got.shape == want.shape == (1, 3, 700)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


def _gelu_node_model(op_type="Gelu", elem_type=TensorProto.FLOAT, with_bias=False,
                     **attributes):
    """One GELU node: ONNX's Gelu (opset 20), or onnxruntime's Gelu, BiasGelu
    or FastGelu (com.microsoft), over x of (4, 300) and a bias of 300."""
    contrib = op_type != "Gelu" or attributes.pop("contrib", False)
    inputs = ["x", "bias"] if with_bias else ["x"]
    node = helper.make_node(op_type, inputs, ["y"], domain="com.microsoft" if contrib else "",
                            **attributes)
    values = [helper.make_tensor_value_info("x", elem_type, [4, 300])]
    if with_bias:
        values.append(helper.make_tensor_value_info("bias", elem_type, [300]))
    opsets = [helper.make_opsetid("", 20)]
    if contrib:
        opsets.append(helper.make_opsetid("com.microsoft", 1))
    graph = helper.make_graph([node], "gelu", values,
                              [helper.make_tensor_value_info("y", elem_type, [4, 300])])
    return helper.make_model(graph, opset_imports=opsets)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_onnx_s_gelu_node_runs_as_one_numpy_step(approximate, dtype):
    """ONNX's Gelu (opset 20) runs on qops' statement of its function, not
    onnx.reference's (whose Erf calls math.erf element by element): the tanh
    form as onnx.reference gives it, the erf form within the erf's bound."""
    elem_type = TensorProto.FLOAT if dtype == np.float32 else TensorProto.FLOAT16
    model = _gelu_node_model(approximate=approximate, elem_type=elem_type)
    session = qops.onnx.InferenceSession(model)
    assert [step.kind for step in session.steps] == ["numpy Gelu"]
    x = np.random.default_rng(8).normal(0, 3, (4, 300)).astype(dtype)
    (got,) = session.run(None, {"x": x})
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    assert got.dtype == dtype and got.shape == x.shape
    if approximate == "tanh":
        assert np.array_equal(got, want)
    else:
        unit = 2.0 ** (-24 if dtype == np.float32 else -11)
        bound = (3 * unit * np.abs(x.astype(np.float64))
                 + 2 * np.spacing(np.abs(want)).astype(np.float64))
        assert (np.abs(got.astype(np.float64) - want) <= bound).all()


def test_a_malformed_gelu_node_is_named_when_the_session_is_built():
    model = _gelu_node_model("BiasGelu")  # one input; BiasGelu takes two
    with pytest.raises(qops.ValidationError, match=r"BiasGelu.*BiasGelu takes 2 inputs"):
        qops.onnx.InferenceSession(model)
    model = _gelu_node_model(approximate="none")
    model.opset_import[0].version = 17  # no Gelu in ONNX before opset 20
    with pytest.raises(qops.ValidationError, match="Gelu"):
        qops.onnx.InferenceSession(model)


def test_a_node_whose_function_depends_on_its_input_types_runs_on_onnx_reference():
    """Without qops' own Gelu, the session takes onnx.reference's, whose
    function is built from the input's type (its constants are CastLike X):
    the node is given its inputs' types to build it."""
    from unittest import mock

    from qops.onnx import _numpy_ops

    model = _gelu_node_model(approximate="tanh")
    implementations = {k: v for k, v in _numpy_ops.IMPLEMENTATIONS.items() if k != "Gelu"}
    with mock.patch.object(_numpy_ops, "IMPLEMENTATIONS", implementations):
        session = qops.onnx.InferenceSession(model)
    assert [step.kind for step in session.steps] == ["onnx.reference Gelu"]
    x = np.random.default_rng(9).normal(0, 3, (4, 300)).astype(np.float32)
    (got,) = session.run(None, {"x": x})
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    assert np.array_equal(got, want)


@pytest.mark.parametrize("op_type, with_bias", [("Gelu", False), ("BiasGelu", True),
                                                ("FastGelu", False), ("FastGelu", True)])
def test_onnxruntime_s_gelu_operators_run_within_their_bound_of_onnxruntime(op_type,
                                                                           with_bias):
    """com.microsoft Gelu, BiasGelu and FastGelu, as a model optimized by
    onnxruntime for a transformer has them: within a few units of float32's
    last place of 1 times |x| (1 + erf or 1 + tanh cancels for large negative
    x: the error is |x|'s, not the result's) of onnxruntime's own."""
    ort = pytest.importorskip("onnxruntime")
    model = _gelu_node_model(op_type, with_bias=with_bias)
    rng = np.random.default_rng(10)
    feeds = {"x": rng.normal(0, 3, (4, 300)).astype(np.float32)}
    if with_bias:
        feeds["bias"] = rng.normal(0, 1, 300).astype(np.float32)
    session = qops.onnx.InferenceSession(model)
    assert [step.kind for step in session.steps] == [f"numpy {op_type}"]
    (got,) = session.run(None, feeds)
    peer = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (want,) = peer.run(None, feeds)
    x = feeds["x"] + feeds["bias"] if with_bias else feeds["x"]
    bound = 8 * 2.0**-24 * np.abs(x.astype(np.float64)) + 4 * np.spacing(np.abs(want))
    assert (np.abs(got.astype(np.float64) - want) <= bound).all()


def _scaled_softmax_model(operation="Div", order="as exported", shared_output=False,
                          constant=8.0, axis=None, opset=17):
    """x -> Div(x, c) or Mul(x, c) -> Softmax -> y: attention's scaled scores."""
    scaled = ["c", "x"] if order == "swapped" else ["x", "c"]
    attributes = {} if axis is None else {"axis": axis}
    nodes = [helper.make_node(operation, scaled, ["scaled"], name="scale"),
             helper.make_node("Softmax", ["scaled"], ["y"], name="softmax", **attributes)]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    if shared_output:
        outputs.append(helper.make_tensor_value_info("scaled", TensorProto.FLOAT, None))
    graph = helper.make_graph(
        nodes, "scaled_softmax",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 40, 130])], outputs,
        [numpy_helper.from_array(np.asarray(constant, np.float32), "c")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _attention_scores(seed):
    x = np.random.default_rng(seed).normal(0, 20, (2, 3, 40, 130)).astype(np.float32)
    x[0, 0, 0, :4] = [np.nan, 0.0, 1.0, 2.0]           # a row of NaN
    x[0, 0, 1, :3] = [np.inf, 0.0, -np.inf]            # +inf: NaN - as NumPy's steps
    x[0, 0, 2, :] = -np.inf                             # all -inf: NaN
    x[0, 0, 3, :5] = -np.inf                            # some -inf: zeros there
    return x


@pytest.mark.parametrize("operation, order", [("Div", "as exported"), ("Mul", "as exported"),
                                              ("Mul", "swapped")])
def test_scaled_softmax_runs_as_one_step_equal_to_its_nodes_on_the_kernels(operation, order):
    """Div or Mul by a constant, then Softmax, as one step: the quotient or
    product rounded as the node rounds it, then the kernel's softmax (the
    unfused Softmax's too), bit for bit."""
    _compiled_tables()
    model = _scaled_softmax_model(operation, order)
    x = _attention_scores(8)
    fused = qops.onnx.InferenceSession(model)
    assert [step.kind for step in fused._steps_list] == ["qops Softmax (fused)"]
    literal = qops.onnx.InferenceSession(model, fuse=False)
    assert "qops Softmax (fused)" not in [step.kind for step in literal._steps_list]
    (got,), (want,) = fused.run(None, {"x": x}), literal.run(None, {"x": x})
    assert got.shape == want.shape == x.shape
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    # The special rows as NumPy's steps make them; the rest sums to one.
    assert np.isnan(got[0, 0, :3]).all()
    assert (got[0, 0, 3, :5] == 0).all()
    np.testing.assert_allclose(got[0, 1].sum(-1), 1, rtol=1e-5)


@pytest.mark.parametrize("breakage", ["shared output", "vector constant", "constant first"])
def test_scaled_softmax_nodes_stay_apart_where_fusing_would_change_the_graph(breakage):
    """A scaled value the graph also outputs, a constant of more than one
    value, or a Div of the constant by x leaves the nodes as they are."""
    model = {"shared output": lambda: _scaled_softmax_model(shared_output=True),
             "vector constant": lambda: _scaled_softmax_model(constant=np.full(130, 8.0)),
             "constant first": lambda: _scaled_softmax_model(order="swapped")}[breakage]()
    session = qops.onnx.InferenceSession(model)
    assert "qops Softmax (fused)" not in [step.kind for step in session._steps_list]
    x = np.random.default_rng(5).normal(0, 2, (2, 3, 40, 130)).astype(np.float32)
    literal = qops.onnx.InferenceSession(model, fuse=False)
    for got, want in zip(session.run(None, {"x": x}), literal.run(None, {"x": x})):
        assert np.array_equal(got, want, equal_nan=True)


@pytest.mark.parametrize("axis, opset", [(1, 11), (2, 17), (-1, 17)])
def test_scaled_softmax_of_any_axis_and_constant_shape_is_its_nodes(axis, opset):
    """A softmax over an inner axis (NumPy's steps after the quotient), over
    the sizes from axis on (before opset 13), and a constant of one value with
    more dimensions (the nodes' broadcast shape) give the nodes' results."""
    _compiled_tables()
    model = _scaled_softmax_model(constant=np.full((1, 1, 1, 1, 1), 8.0), axis=axis,
                                  opset=opset)
    x = np.random.default_rng(9).normal(0, 20, (2, 3, 40, 130)).astype(np.float32)
    fused = qops.onnx.InferenceSession(model)
    assert "qops Softmax (fused)" in [step.kind for step in fused._steps_list]
    (got,) = fused.run(None, {"x": x})
    (want,) = qops.onnx.InferenceSession(model, fuse=False).run(None, {"x": x})
    assert got.shape == want.shape == (1, 2, 3, 40, 130)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


def _byte_chain_model(chain, x_dtype=np.uint8, y_dtype=np.uint8, extra_output=None,
                      dq_also_read=False, dq_scale=0.05):
    """x (bytes) -> DQ -> each (op_type, constant, constant first) of ``chain``
    -> Q -> y; the constants float32 (one value, any shape)."""
    element = {np.uint8: TensorProto.UINT8, np.int8: TensorProto.INT8}
    initializers = [numpy_helper.from_array(np.asarray(dq_scale, np.float32), "x_scale"),
                    numpy_helper.from_array(np.asarray(3, x_dtype), "x_zero"),
                    numpy_helper.from_array(np.float32(0.011), "y_scale"),
                    numpy_helper.from_array(np.asarray(-5 if y_dtype == np.int8 else 128, y_dtype),
                                            "y_zero")]
    nodes = [helper.make_node("DequantizeLinear", ["x", "x_scale", "x_zero"], ["v0"], name="dq")]
    for position, (op_type, constant, first) in enumerate(chain):
        source, target = f"v{position}", f"v{position + 1}"
        if op_type == "Erf":
            nodes.append(helper.make_node("Erf", [source], [target], name=f"n{position}"))
            continue
        name = f"c{position}"
        initializers.append(numpy_helper.from_array(np.asarray(constant, np.float32), name))
        operands = [name, source] if first else [source, name]
        nodes.append(helper.make_node(op_type, operands, [target], name=f"n{position}"))
    nodes.append(helper.make_node("QuantizeLinear", [f"v{len(chain)}", "y_scale", "y_zero"],
                                  ["y"], name="q"))
    outputs = [helper.make_tensor_value_info("y", element[y_dtype], None)]
    if extra_output:
        outputs.append(helper.make_tensor_value_info(extra_output, TensorProto.FLOAT, None))
    if dq_also_read:
        nodes.append(helper.make_node("Relu", ["v0"], ["side"], name="side"))
        outputs.append(helper.make_tensor_value_info("side", TensorProto.FLOAT, None))
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info(
        "x", element[x_dtype], [2, 256])], outputs, initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


def _every_byte(dtype):
    return np.stack([np.arange(256, dtype=np.uint8).view(dtype),
                     np.arange(255, -1, -1, dtype=np.uint8).view(dtype)])


GELU_HALF = [("Div", np.sqrt(2.0), False), ("Erf", None, False)]


@pytest.mark.parametrize("chain, x_dtype, y_dtype", [
    (GELU_HALF, np.uint8, np.uint8),
    (GELU_HALF, np.int8, np.int8),
    ([("Mul", 0.7, True), ("Add", -1.5, False), ("Sub", 2.0, True), ("Div", 4.0, True)],
     np.uint8, np.int8),
    ([("Div", 8.0, False)], np.int8, np.uint8)])
def test_a_chain_of_elementwise_nodes_between_dq_and_q_is_one_lookup_equal_to_its_nodes(
        chain, x_dtype, y_dtype):
    """Every byte goes through the table the nodes' own steps made: the
    unfused nodes' bytes, bit for bit (constants on either side)."""
    model = _byte_chain_model(chain, x_dtype, y_dtype)
    fused = qops.onnx.InferenceSession(model)
    assert [step.kind for step in fused._steps_list] == ["qops byte chain (lookup)"]
    literal = qops.onnx.InferenceSession(model, fuse=False)
    x = _every_byte(x_dtype)
    (got,), (want,) = fused.run(None, {"x": x}), literal.run(None, {"x": x})
    assert got.dtype == want.dtype == np.dtype(y_dtype) and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    assert len(np.unique(got)) > 8  # the chain does map bytes to many values


def test_a_byte_chain_leaves_a_dq_read_elsewhere_and_keeps_the_nodes_shape():
    """The DequantizeLinear another node reads stays for it; a constant of
    one value with more dimensions gives the nodes' broadcast shape."""
    model = _byte_chain_model([("Mul", np.full((1, 1, 1), 0.5), False), ("Erf", None, False)],
                              dq_also_read=True)
    fused = qops.onnx.InferenceSession(model)
    kinds = [step.kind for step in fused._steps_list]
    assert "qops byte chain (lookup)" in kinds and "qops DequantizeLinear (bound)" in kinds
    literal = qops.onnx.InferenceSession(model, fuse=False)
    x = _every_byte(np.uint8)
    got, want = fused.run(None, {"x": x}), literal.run(None, {"x": x})
    assert got[0].shape == want[0].shape == (1, 2, 256)
    for mine, theirs in zip(got, want):
        np.testing.assert_array_equal(mine, theirs)


@pytest.mark.parametrize("breakage", ["inner output", "vector constant", "per-channel dq",
                                      "another operator"])
def test_a_byte_chain_stays_apart_where_fusing_would_change_the_graph(breakage):
    chain, extra, scale = [("Div", 2.0, False), ("Erf", None, False)], None, 0.05
    if breakage == "inner output":
        extra = "v1"
    elif breakage == "vector constant":
        chain = [("Mul", np.full(256, 0.5), False)]
    elif breakage == "per-channel dq":
        scale = np.full(2, 0.05)
    else:
        chain = [("Div", 2.0, False), ("Exp", None, False)]
    if breakage == "another operator":
        model = _byte_chain_model(chain[:1])
        exp = helper.make_node("Exp", ["v1"], ["v1e"], name="exp")
        model.graph.node.insert(2, exp)
        model.graph.node[3].input[0] = "v1e"
    else:
        model = _byte_chain_model(chain, extra_output=extra, dq_scale=scale)
        if breakage == "per-channel dq":
            model.graph.node[0].attribute.append(helper.make_attribute("axis", 0))
            model.graph.initializer[1].CopyFrom(numpy_helper.from_array(
                np.full(2, 3, np.uint8), "x_zero"))
    session = qops.onnx.InferenceSession(model)
    assert "qops byte chain (lookup)" not in [step.kind for step in session._steps_list]
    x = _every_byte(np.uint8)
    literal = qops.onnx.InferenceSession(model, fuse=False)
    for got, want in zip(session.run(None, {"x": x}), literal.run(None, {"x": x})):
        np.testing.assert_array_equal(got, want)


def _qlinear_add_model(a_shape, b_shape, b_constant=None, constant_first=False, dtype=np.uint8):
    """com.microsoft QLinearAdd of A and B (B a constant when given) with
    constant scales and zero points."""
    element = {np.uint8: TensorProto.UINT8, np.int8: TensorProto.INT8}[dtype]
    zero = (lambda v: np.asarray(v, dtype))
    initializers = [_init("as", np.float32(0.07)), _init("az", zero(9)),
                    _init("bs", np.float32(0.03)), _init("bz", zero(-7 if dtype == np.int8 else 200)),
                    _init("cs", np.float32(0.05)), _init("cz", zero(100))]
    inputs = [helper.make_tensor_value_info("a", element, a_shape)]
    if b_constant is None:
        inputs.append(helper.make_tensor_value_info("b", element, b_shape))
    else:
        initializers.append(_init("b", np.asarray(b_constant, dtype)))
    operands = (["b", "bs", "bz", "a", "as", "az"] if constant_first
                else ["a", "as", "az", "b", "bs", "bz"])
    node = helper.make_node("QLinearAdd", operands + ["cs", "cz"], ["y"], domain="com.microsoft")
    graph = helper.make_graph([node], "add", inputs,
                              [helper.make_tensor_value_info("y", element, None)], initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13),
                                                   helper.make_opsetid("com.microsoft", 1)])


@pytest.mark.parametrize("a_shape, b_shape", [((3, 5, 64), (64,)), ((64,), (3, 5, 64)),
                                              ((2, 3, 4), (3, 1)), ((2, 1, 4), (3, 4))])
def test_a_bound_qlinear_add_of_two_ranks_broadcasts_as_the_adapter(a_shape, b_shape):
    """The shorter operand gets ones before its shape and the operator
    broadcasts: the adapter's (ONNX's) results, bit for bit."""
    from qops.onnx import _nodes

    model = _qlinear_add_model(a_shape, b_shape)
    session = qops.onnx.InferenceSession(model)
    assert [step.kind for step in session._steps_list] == ["qops QLinearAdd (bound)"]
    rng = np.random.default_rng(14)
    a = rng.integers(0, 256, a_shape, dtype=np.uint8)
    b = rng.integers(0, 256, b_shape, dtype=np.uint8)
    (got,) = session.run(None, {"a": a, "b": b})
    (want,) = _nodes.qlinear_add([a, np.float32(0.07), np.uint8(9), b, np.float32(0.03),
                                  np.uint8(200), np.float32(0.05), np.uint8(100)], {}, 1)
    assert got.shape == np.broadcast_shapes(a_shape, b_shape)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("constant_first", [False, True])
@pytest.mark.parametrize("constant", [np.array(17), np.full((1, 1, 1), 240)])
def test_a_qlinear_add_of_a_constant_of_one_value_is_a_table_of_the_add(dtype, constant_first,
                                                                       constant):
    """Every byte of the variable operand gives the add's own result (the
    unfused adapter's), in the shape the two broadcast to."""
    from qops.onnx import _nodes

    constant = constant.astype(np.int64).astype(dtype) if dtype == np.uint8 else (
        constant.astype(np.int64) - 128).astype(dtype)
    model = _qlinear_add_model([2, 256], None, constant, constant_first, dtype)
    session = qops.onnx.InferenceSession(model)
    assert [step.kind for step in session._steps_list] == ["qops QLinearAdd (by table)"]
    a = np.stack([np.arange(256, dtype=np.uint8), np.arange(255, -1, -1, dtype=np.uint8)]).view(
        dtype)
    (got,) = session.run(None, {"a": a})
    scales = [np.float32(0.07), dtype(9), np.float32(0.03),
              dtype(-7) if dtype == np.int8 else dtype(200)]
    operands = ([constant, scales[2], scales[3], a, scales[0], scales[1]] if constant_first
                else [a, scales[0], scales[1], constant, scales[2], scales[3]])
    (want,) = _nodes.qlinear_add(operands + [np.float32(0.05), dtype(100)], {}, 1)
    assert got.shape == want.shape == np.broadcast_shapes((2, 256), constant.shape)
    np.testing.assert_array_equal(got, want)
    assert len(np.unique(got)) > 100


def _per_tensor_model(op_type, x_type, y_type, scale, zero_point):
    """One QuantizeLinear or DequantizeLinear node with constant parameters."""
    initializers = [numpy_helper.from_array(scale, "scale"),
                    numpy_helper.from_array(zero_point, "zero_point")]
    node = helper.make_node(op_type, ["x", "scale", "zero_point"], ["y"], name="boundary")
    graph = helper.make_graph([node], "g", [_vi("x", _ONNX[np.dtype(x_type)], [3, 700])],
                              [_vi("y", _ONNX[np.dtype(y_type)], [3, 700])], initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


@pytest.fixture
def bound_boundary_calls(monkeypatch):
    """The inputs the bound QuantizeLinear and DequantizeLinear took (their
    kernel calls), and the adapter's calls."""
    from qops.backends.native import quantize
    from qops.onnx import _nodes

    taken = {"bound": [], "adapter": []}
    for name in ("bound_quantize_per_tensor", "bound_dequantize_per_tensor"):
        monkeypatch.setattr(quantize, name, _counting_bound(getattr(quantize, name), taken))
    for op_type in ("QuantizeLinear", "DequantizeLinear"):
        monkeypatch.setitem(_nodes.ADAPTERS, op_type,
                            _counting_adapter(_nodes.ADAPTERS[op_type], taken))
    return taken


def _counting_bound(make, taken):
    """``make`` (a bound path's maker), whose runs append the shape of each
    input they run (not of those they refuse) to taken["bound"]."""
    def counting(*parameters):
        run = make(*parameters)

        def spied(x, n_threads):
            result = run(x, n_threads)
            if result is not None:
                taken["bound"].append(x.shape)
            return result

        return spied

    return counting


def _counting_adapter(adapter, taken):
    """``adapter``, appending the shape of each first input to taken["adapter"]."""
    def spied(inputs, attributes, opset):
        taken["adapter"].append(np.shape(inputs[0]))
        return adapter(inputs, attributes, opset)

    return spied


@pytest.mark.parametrize("zero_point", [np.uint8(131), np.array([-5], np.int8)])
@pytest.mark.parametrize("scale", [np.float32(0.0125), np.array([3e-5], np.float32)])
@pytest.mark.parametrize("n_threads", [1, 2])
def test_a_quantize_linear_of_constant_parameters_is_bound_and_exact(zero_point, scale,
                                                                    n_threads,
                                                                    bound_boundary_calls):
    """A model's QuantizeLinear with one constant scale and zero point runs
    bound (straight to the kernels): onnx.reference's bits, ties included;
    on the infinities, NaN and values far past the range (where the
    reference's float-to-integer cast is the platform's), the operator's."""
    zero_point = np.asarray(zero_point)
    model = _per_tensor_model("QuantizeLinear", np.float32, zero_point.dtype, scale, zero_point)
    session = qops.onnx.InferenceSession(model, n_threads)
    assert [step.kind for step in session._steps_list] == ["qops QuantizeLinear (bound)"]
    rng = np.random.default_rng(21)
    step = float(scale.reshape(()))
    x = (rng.integers(-400, 400, (3, 700)) * step / 2).astype(np.float32)  # ties at every other
    x.flat[:6] = [np.inf, -np.inf, np.nan, 1e30, -1e30, -0.0]
    (got,) = session.run(None, {"x": x})
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    assert got.dtype == want.dtype == zero_point.dtype
    np.testing.assert_array_equal(got.flat[6:], want.flat[6:])
    np.testing.assert_array_equal(got, qops.quantize_linear(x, scale.reshape(()),
                                                            zero_point.reshape(())))
    low, high = np.iinfo(zero_point.dtype).min, np.iinfo(zero_point.dtype).max
    assert [got.flat[i] for i in (0, 1, 3, 4, 5)] == [high, low, high, low, zero_point]
    assert bound_boundary_calls["bound"] == [(3, 700)]


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("n_threads", [1, 2])
def test_a_dequantize_linear_of_constant_parameters_is_bound_and_exact(dtype, n_threads,
                                                                      bound_boundary_calls):
    """Every byte through a model's bound DequantizeLinear: onnx.reference's
    bits."""
    model = _per_tensor_model("DequantizeLinear", dtype, np.float32, np.float32(0.37),
                              np.array(7 if dtype == np.uint8 else -7, dtype))
    session = qops.onnx.InferenceSession(model, n_threads)
    assert [step.kind for step in session._steps_list] == ["qops DequantizeLinear (bound)"]
    x = np.resize(np.arange(256, dtype=np.uint8), (3, 700)).view(dtype)
    (got,) = session.run(None, {"x": x})
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, want)
    assert bound_boundary_calls["bound"] == [(3, 700)]


def _dynamic_quantize_model():
    """One DynamicQuantizeLinear node of a float32 input with a free shape."""
    node = helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "y_scale", "y_zero_point"],
                            name="dynamic")
    graph = helper.make_graph([node], "g", [_vi("x", T.FLOAT, ["rows", "columns"])],
                              [_vi("y", T.UINT8, ["rows", "columns"]), _vi("y_scale", T.FLOAT, []),
                               _vi("y_zero_point", T.UINT8, [])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


@pytest.fixture
def bound_dynamic_calls(monkeypatch):
    """The inputs the bound DynamicQuantizeLinear ran, and the adapter's."""
    from qops.backends.native import quantize
    from qops.onnx import _nodes

    taken = {"bound": [], "adapter": []}
    monkeypatch.setattr(quantize, "bound_dynamic_quantize",
                        _counting_bound(quantize.bound_dynamic_quantize, taken))
    monkeypatch.setitem(_nodes.ADAPTERS, "DynamicQuantizeLinear",
                        _counting_adapter(_nodes.ADAPTERS["DynamicQuantizeLinear"], taken))
    return taken


@pytest.mark.parametrize("n_threads", [1, 2])
def test_a_dynamic_quantize_linear_runs_bound_and_exact(n_threads, bound_dynamic_calls):
    """A model's DynamicQuantizeLinear of float32 runs bound: onnx.reference's
    y, scale and zero point, bit for bit, on ranges of both signs, of one,
    of a single value and of zeros; an input it does not take (a huge span,
    NaN, an empty one) goes to the operator, which gives the same outputs
    or says what is wrong, naming the node."""
    session = qops.onnx.InferenceSession(_dynamic_quantize_model(), n_threads)
    assert [step.kind for step in session._steps_list] == ["qops DynamicQuantizeLinear (bound)"]
    evaluator = ReferenceEvaluator(_dynamic_quantize_model())
    rng = np.random.default_rng(8)
    inputs = [rng.standard_normal((128, 768)).astype(np.float32),
              (3 + rng.random((5, 9))).astype(np.float32),
              -(3 + rng.random((5, 9))).astype(np.float32),
              np.full((2, 3), 0.75, np.float32), np.zeros((4, 4), np.float32)]
    for x in inputs:
        got = session.run(None, {"x": x})
        want = evaluator.run(None, {"x": x})
        assert [value.dtype for value in got] == [np.uint8, np.float32, np.uint8]
        assert [value.shape for value in got] == [x.shape, (), ()]
        for value, expected in zip(got, want):
            assert value.tobytes() == np.asarray(expected).astype(value.dtype).tobytes()
    assert bound_dynamic_calls["bound"] == [x.shape for x in inputs]
    assert bound_dynamic_calls["adapter"] == []
    huge = np.array([[-3e38, 3e38]], np.float32)
    got = session.run(None, {"x": huge})
    want = qops.dynamic_quantize_linear(huge)
    for value, expected in zip(got, want):
        assert value.tobytes() == expected.reshape(value.shape).tobytes()
    with pytest.raises(qops.ValidationError, match="dynamic.*NaN"):
        session.run(None, {"x": np.array([[1.0, np.nan]], np.float32)})
    assert bound_dynamic_calls["adapter"] == [(1, 2), (1, 2)]


def test_a_bound_boundary_node_leaves_other_inputs_to_the_operator(bound_boundary_calls):
    """An input the bound form does not take (a strided view) runs through
    the operator's adapter, with the same result."""
    model = _per_tensor_model("DequantizeLinear", np.uint8, np.float32, np.float32(0.5),
                              np.array(3, np.uint8))
    session = qops.onnx.InferenceSession(model)
    (_, call, _, _, _), = session._program
    x = np.arange(2 * 3 * 700, dtype=np.int64).astype(np.uint8).reshape(3, 1400)[:, ::2]
    bound_boundary_calls["adapter"].clear()  # the session's own check of the parameters
    (got,) = call([x, np.float32(0.5), np.uint8(3)], 2)
    np.testing.assert_array_equal(got, (x.astype(np.float32) - 3) * np.float32(0.5))
    assert bound_boundary_calls == {"bound": [], "adapter": [(3, 700)]}


def test_a_boundary_node_with_a_2d_parameter_is_left_to_the_operator():
    """A scale of shape (1, 1) is not a per-tensor pair the adapter reads:
    the node is not bound, and a run says what the operator says."""
    model = _per_tensor_model("DequantizeLinear", np.uint8, np.float32,
                              np.array([[0.5]], np.float32), np.array(3, np.uint8))
    session = qops.onnx.InferenceSession(model)
    assert [step.kind for step in session._steps_list] == ["qops DequantizeLinear"]


def test_a_boundary_node_with_a_bad_constant_is_not_bound_and_names_itself():
    """A zero scale is not bound: the run says what is wrong, naming the node."""
    model = _per_tensor_model("QuantizeLinear", np.float32, np.uint8, np.float32(0),
                              np.array(3, np.uint8))
    session = qops.onnx.InferenceSession(model)
    assert [step.kind for step in session._steps_list] == ["qops QuantizeLinear"]
    with pytest.raises(qops.ValidationError, match="boundary"):
        session.run(None, {"x": np.ones((3, 700), np.float32)})


@pytest.fixture
def bound_pool_calls(monkeypatch):
    """How many images the bound global pooling took (its kernel call)."""
    from qops.backends.native import pooling

    taken = []
    made = pooling.bound_global_average

    def counting(*parameters):
        pool = made(*parameters)

        def run(x, n_threads):
            taken.append(x.shape)
            return pool(x, n_threads)

        return run

    monkeypatch.setattr(pooling, "bound_global_average", counting)
    return taken


@pytest.mark.parametrize("shape", [(1, 3, 7, 7), (2, 1280, 7, 7), (3, 5, 1, 13), (1, 4, 40, 33)])
@pytest.mark.parametrize("dtype, y_dtype", [(np.uint8, np.uint8), (np.int8, np.int8)])
@pytest.mark.parametrize("n_threads", [1, 2])
def test_a_qdq_global_pooling_is_bound_and_the_operator_bit_for_bit(shape, dtype, y_dtype,
                                                                   n_threads, bound_pool_calls):
    """DQ -> GlobalAveragePool -> Q with constant parameters runs on the
    bound kernel: QUANTIZED_LINEAR_AVERAGE_POOLING's bytes over the whole
    image, each image of the batch."""
    x_zero, y_zero = dtype(3 if dtype == np.uint8 else -3), y_dtype(200 if y_dtype == np.uint8
                                                                  else -20)
    nodes = [_dq("x", "xd"), helper.make_node("GlobalAveragePool", ["xd"], ["p"]),
             _q("p", "y", "ys", "yz")]
    x = _quantized(np.random.default_rng(sum(shape)), shape, dtype)
    model = _model(nodes, _feeds_inputs({"x": x}), [_out("y")],
                   _qparams(0.021, x_zero) + [_init("ys", np.float32(0.013)),
                                              _init("yz", np.asarray(y_zero))])
    session = qops.onnx.InferenceSession(model, n_threads)
    assert _kinds(session) == ["QDQ GlobalAveragePool"]
    (got,) = session.run(None, {"x": x})
    want = qops.quantized_linear_average_pooling(
        input=x, input_scale=np.float32(0.021), input_zero_point=x_zero,
        output_scale=np.float32(0.013), output_zero_point=y_zero, window_size=shape[2:])
    assert bound_pool_calls == [shape]
    assert got.dtype == want.dtype and got.shape == shape[:2] + (1, 1)
    np.testing.assert_array_equal(got, want)


def test_a_bound_global_pooling_leaves_what_it_does_not_take_to_the_operator(
        bound_pool_calls, monkeypatch):
    """A strided view, an empty batch and an image past the operator's
    largest window for the kernel go to the operator's path, with its
    result."""
    from qops.backends.native import pooling

    nodes = [_dq("x", "xd"), helper.make_node("GlobalAveragePool", ["xd"], ["p"]),
             _q("p", "y", "ys", "yz")]
    x = _quantized(np.random.default_rng(8), (2, 4, 6, 10), np.uint8)
    model = _model(nodes, _feeds_inputs({"x": x}, {"x": ["n", 4, 6, 10]}), [_out("y")],
                   _qparams(0.02, np.uint8(5)) + [_init("ys", np.float32(0.01)),
                                                  _init("yz", np.uint8(100))])
    session = qops.onnx.InferenceSession(model)
    (_, call, _, _, _), = session._program

    def operator(image):
        return qops.quantized_linear_average_pooling(
            input=np.ascontiguousarray(image), input_scale=np.float32(0.02),
            input_zero_point=np.uint8(5), output_scale=np.float32(0.01),
            output_zero_point=np.uint8(100), window_size=image.shape[2:])

    (got,) = call([x], 2)
    np.testing.assert_array_equal(got, operator(x))
    assert bound_pool_calls == [x.shape]
    strided = np.concatenate([x, x], axis=-1)[..., ::2]
    (got,) = call([strided], 2)
    np.testing.assert_array_equal(got, operator(strided))
    (got,) = call([x[:0]], 2)
    assert got.shape == (0, 4, 1, 1)
    monkeypatch.setattr(pooling, "MAX_WINDOW", 59)
    (got,) = call([x], 2)
    np.testing.assert_array_equal(got, operator(x))
    assert bound_pool_calls == [x.shape]


@pytest.mark.parametrize("shape", [(2, 96, 7, 7), (1, 6, 11)])
def test_a_qlinear_global_average_pool_is_bound_where_it_is_2d(shape, bound_pool_calls):
    """QOperator's QLinearGlobalAveragePool with constant parameters: bound
    for 2-D images, the adapter otherwise (a 1-D input), the adapter's
    bytes either way."""
    from qops.onnx import _nodes

    parameters = [np.float32(0.05), np.uint8(9), np.float32(0.02), np.uint8(120)]
    node = helper.make_node("QLinearGlobalAveragePool", ["x", "s", "z", "ys", "yz"], ["y"],
                            domain="com.microsoft", channels_last=0)
    x = _quantized(np.random.default_rng(5), shape, np.uint8)
    model = _model([node], _feeds_inputs({"x": x}), [_out("y")],
                   [_init(name, value) for name, value in zip(("s", "z", "ys", "yz"),
                                                              parameters)],
                   extra_opsets=[helper.make_opsetid("com.microsoft", 1)])
    session = qops.onnx.InferenceSession(model)
    assert _kinds(session) == ["qops QLinearGlobalAveragePool (bound)"]
    (got,) = session.run(None, {"x": x})
    (want,) = _nodes.CONTRIB_ADAPTERS["QLinearGlobalAveragePool"]([x, *parameters],
                                                                  {"channels_last": 0}, 1)
    assert bound_pool_calls == ([shape] if len(shape) == 4 else [])
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("outputs", [["y", ""], ["y"]])
def test_a_trailing_omitted_output_is_not_asked_of_the_step(outputs):
    """ONNX writes an optional output a model does not use as an empty name:
    MaxPool's Indices omitted as ``["y", ""]`` is the same node as ``["y"]``,
    and its step, which makes Y alone, runs (the reference's values)."""
    image = np.arange(2 * 5 * 5, dtype=np.float32).reshape(1, 2, 5, 5)[..., ::-1].copy()
    node = helper.make_node("MaxPool", ["x"], outputs, kernel_shape=[2, 2], strides=[2, 2])
    model = _model([node], [_vi("x", T.FLOAT, [1, 2, 5, 5])], [_vi("y", T.FLOAT, None)])
    session = qops.onnx.InferenceSession(model)
    (got,) = session.run(None, {"x": image})
    (expected,) = ReferenceEvaluator(model).run(None, {"x": image})
    assert got.shape == (1, 2, 2, 2) and np.array_equal(got, expected)
