"""qops.onnx.InferenceSession: fused QDQ groups against exact statements,
the unfused run against onnx.reference, and the session's interface.

Every fused group is checked three ways: against an exact statement of its
rule (tests/oracles.py, qops.reference, or the group's QOperator node run on
its own), against the literal float graph of Q and DQ nodes run by
onnx.reference (within one quantum), and by the steps the session made (the
group really was fused).
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

onnx = pytest.importorskip("onnx")
import oracles  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import qops  # noqa: E402
import qops.onnx  # noqa: E402
from qops import reference  # noqa: E402

OPSET = 21
_U8, _I8 = np.dtype(np.uint8), np.dtype(np.int8)
_ONNX = {_U8: TensorProto.UINT8, _I8: TensorProto.INT8, np.dtype(np.float32): TensorProto.FLOAT,
         np.dtype(np.int32): TensorProto.INT32, np.dtype(np.int64): TensorProto.INT64,
         np.dtype(bool): TensorProto.BOOL}


class Model:
    """A small graph under construction: quantized inputs, Q and DQ nodes."""

    def __init__(self):
        self.nodes, self.inputs, self.initializers, self.feeds = [], [], [], {}
        self.count = 0

    def name(self, stem):
        self.count += 1
        return f"{stem}{self.count}"

    def constant(self, value, stem="c"):
        name = self.name(stem)
        self.initializers.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def feed(self, value, stem="x", shape=None):
        name = self.name(stem)
        value = np.asarray(value)
        self.inputs.append(helper.make_tensor_value_info(
            name, _ONNX[value.dtype], list(value.shape) if shape is None else shape))
        self.feeds[name] = value
        return name

    def node(self, op_type, inputs, outputs=1, **attributes):
        names = [self.name(op_type.lower()) for _ in range(outputs)]
        self.nodes.append(helper.make_node(op_type, list(inputs), names, name=self.name(op_type),
                                           **attributes))
        return names[0] if outputs == 1 else names

    def dequantized(self, name, scale, zero_point, **attributes):
        return self.node("DequantizeLinear", [name, self.constant(np.float32(scale)),
                                              self.constant(zero_point)], **attributes)

    def quantized(self, name, scale, zero_point):
        return self.node("QuantizeLinear", [name, self.constant(np.float32(scale)),
                                            self.constant(zero_point)])

    def build(self, outputs, opset=OPSET):
        graph = helper.make_graph(
            self.nodes, "g", self.inputs,
            [helper.make_tensor_value_info(name, TensorProto.UNDEFINED, None) for name in outputs],
            initializer=self.initializers)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        model.ir_version = 10
        return model


def _run_both(model, feeds, n_threads=None):
    """The fused and the unfused session's outputs, and the fused steps' kinds."""
    fused = qops.onnx.InferenceSession(model, n_threads=n_threads)
    literal = qops.onnx.InferenceSession(model, n_threads=n_threads, fuse=False)
    return fused.run(None, feeds), literal.run(None, feeds), [s.kind for s in fused.steps]


def _literal(model, feeds):
    return ReferenceEvaluator(model).run(None, feeds)


def _within_one(actual, expected):
    gap = np.abs(actual.astype(np.int64) - expected.astype(np.int64))
    assert gap.max(initial=0) <= 1, gap.max()


_scales = st.floats(0.001953125, 0.0625, width=32)  # bounds exact in float32
_dtypes = st.sampled_from([_U8, _I8])


def _zero_point(draw, dtype):
    low, high = (0, 255) if dtype == _U8 else (-128, 127)
    return np.array(draw(st.integers(low, high)), dtype)


def _quantized(rng, shape, dtype):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, shape, dtype=dtype)


# -- convolution --------------------------------------------------------------------------

@given(data=st.data(), dtype=_dtypes, per_channel=st.booleans(),
       activation=st.sampled_from([None, "Relu", "Clip"]), one_d=st.booleans(),
       group=st.sampled_from([1, 2]), stride=st.integers(1, 2), kernel=st.sampled_from([1, 3]),
       auto_pad=st.sampled_from(["NOTSET", "SAME_UPPER"]), n_threads=st.sampled_from([1, 2]))
def test_dq_conv_q_is_one_exact_convolution(data, dtype, per_channel, activation, one_d, group,
                                            stride, kernel, auto_pad, n_threads):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**31)))
    channels, outputs = 2 * group, 3 * group
    spatial = (data.draw(st.integers(3, 9)),) if one_d else (data.draw(st.integers(3, 8)),
                                                             data.draw(st.integers(3, 8)))
    x = _quantized(rng, (data.draw(st.integers(1, 2)), channels, *spatial), dtype)
    w = _quantized(rng, (outputs, channels // group) + (kernel,) * len(spatial), _I8)
    x_scale, y_scale = data.draw(_scales), data.draw(_scales)
    x_zero, y_zero = _zero_point(data.draw, dtype), _zero_point(data.draw, dtype)
    w_scale = (rng.uniform(0.002, 0.02, outputs).astype(np.float32) if per_channel
               else np.float32(data.draw(_scales)))
    bias_scale = np.float32(x_scale) * np.asarray(w_scale, np.float32)
    bias = rng.integers(-3000, 3000, outputs).astype(np.int32)
    pads = [1] * (2 * len(spatial)) if kernel == 3 else [0] * (2 * len(spatial))
    attributes = dict(strides=[stride] * len(spatial), group=group)
    attributes.update(pads=pads) if auto_pad == "NOTSET" else attributes.update(auto_pad=auto_pad)

    m = Model()
    xd = m.dequantized(m.feed(x), x_scale, x_zero)
    wd = m.node("DequantizeLinear", [m.constant(w), m.constant(np.asarray(w_scale, np.float32)),
                                     m.constant(np.zeros(np.shape(w_scale), np.int8))], axis=0)
    bd = m.node("DequantizeLinear", [m.constant(bias), m.constant(bias_scale),
                                     m.constant(np.zeros(np.shape(bias_scale), np.int32))], axis=0)
    value = m.node("Conv", [xd, wd, bd], **attributes)
    low, high = -1.0, 0.8
    if activation == "Relu":
        value = m.node("Relu", [value])
    elif activation == "Clip":
        value = m.node("Clip", [value, m.constant(np.float32(low)), m.constant(np.float32(high))])
    y = m.quantized(value, y_scale, y_zero)
    model = m.build([y])

    (fused,), (unfused,), kinds = _run_both(model, m.feeds, n_threads)
    assert "QDQ Conv" in kinds and "onnx.reference Conv" not in kinds
    exact = oracles.qlinear_conv(x, x_scale, x_zero, w, w_scale, None, y_scale, y_zero, bias,
                                 pads=pads if auto_pad == "NOTSET" else None,
                                 strides=attributes["strides"], group=group, auto_pad=auto_pad)
    if activation == "Relu":
        exact = np.maximum(exact, y_zero)
    elif activation == "Clip":
        low_q = np.clip(np.rint(np.float32(low) / np.float32(y_scale)) + int(y_zero),
                        *oracles.integer_range(dtype))
        high_q = np.clip(np.rint(np.float32(high) / np.float32(y_scale)) + int(y_zero),
                         *oracles.integer_range(dtype))
        exact = np.clip(exact, low_q, high_q).astype(dtype)
    np.testing.assert_array_equal(fused, exact)
    np.testing.assert_array_equal(unfused, _literal(model, m.feeds)[0])
    _within_one(fused, unfused)


# -- matrix multiply and Gemm -------------------------------------------------------------

@given(data=st.data(), dtype=_dtypes, per_column=st.booleans(), lead=st.sampled_from([(), (2,),
                                                                                       (2, 3)]),
       n_threads=st.sampled_from([1, 2]))
def test_dq_matmul_q_by_a_constant_weight(data, dtype, per_column, lead, n_threads):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**31)))
    rows, depth, columns = data.draw(st.integers(1, 9)), data.draw(st.integers(1, 70)), \
        data.draw(st.integers(1, 12))
    a = _quantized(rng, lead + (rows, depth), dtype)
    b = _quantized(rng, (depth, columns), _I8)
    a_scale, y_scale = data.draw(_scales), data.draw(_scales)
    a_zero, y_zero = _zero_point(data.draw, dtype), _zero_point(data.draw, dtype)
    b_scale = (rng.uniform(0.002, 0.02, columns).astype(np.float32) if per_column
               else np.float32(data.draw(_scales)))
    m = Model()
    ad = m.dequantized(m.feed(a), a_scale, a_zero)
    bd = m.node("DequantizeLinear", [m.constant(b), m.constant(np.asarray(b_scale, np.float32)),
                                     m.constant(np.zeros(np.shape(b_scale), np.int8))], axis=1)
    model = m.build([m.quantized(m.node("MatMul", [ad, bd]), y_scale, y_zero)])
    (fused,), (unfused,), kinds = _run_both(model, m.feeds, n_threads)
    assert "QDQ MatMul" in kinds
    exact = oracles.qlinear_matmul(a, a_scale, a_zero, b, np.asarray(b_scale).reshape(1, -1)
                                   if per_column else b_scale, None, y_scale, y_zero)
    np.testing.assert_array_equal(fused, exact)
    _within_one(fused, unfused)


@given(data=st.data(), dtype=_dtypes)
def test_dq_matmul_q_of_two_activations(data, dtype):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**31)))
    heads, rows, depth, columns = 2, data.draw(st.integers(1, 6)), data.draw(st.integers(1, 40)), \
        data.draw(st.integers(1, 7))
    a = _quantized(rng, (heads, rows, depth), dtype)
    b = _quantized(rng, (heads, depth, columns), dtype)
    scales = [data.draw(_scales) for _ in range(3)]
    zeros = [_zero_point(data.draw, dtype) for _ in range(3)]
    m = Model()
    ad = m.dequantized(m.feed(a), scales[0], zeros[0])
    bd = m.dequantized(m.feed(b, "b"), scales[1], zeros[1])
    model = m.build([m.quantized(m.node("MatMul", [ad, bd]), scales[2], zeros[2])])
    (fused,), (unfused,), kinds = _run_both(model, m.feeds)
    assert "QDQ MatMul" in kinds
    np.testing.assert_array_equal(fused, oracles.qlinear_matmul(
        a, scales[0], zeros[0], b, scales[1], zeros[1], scales[2], zeros[2]))
    _within_one(fused, unfused)


@given(data=st.data(), trans_a=st.booleans(), trans_b=st.booleans(), per_column=st.booleans(),
       with_bias=st.booleans(), relu=st.booleans())
def test_dq_gemm_q_with_transposes_and_an_int32_bias(data, trans_a, trans_b, per_column,
                                                     with_bias, relu):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**31)))
    rows, depth, columns = data.draw(st.integers(1, 5)), data.draw(st.integers(1, 50)), \
        data.draw(st.integers(1, 10))
    a = _quantized(rng, (depth, rows) if trans_a else (rows, depth), _U8)
    b = _quantized(rng, (columns, depth) if trans_b else (depth, columns), _I8)
    a_scale, y_scale = data.draw(_scales), data.draw(_scales)
    a_zero, y_zero = _zero_point(data.draw, _U8), _zero_point(data.draw, _U8)
    b_scale = (rng.uniform(0.002, 0.02, columns).astype(np.float32) if per_column
               else np.float32(data.draw(_scales)))
    bias = rng.integers(-5000, 5000, columns).astype(np.int32)
    m = Model()
    ad = m.dequantized(m.feed(a), a_scale, a_zero)
    bd = m.node("DequantizeLinear", [m.constant(b), m.constant(np.asarray(b_scale, np.float32)),
                                     m.constant(np.zeros(np.shape(b_scale), np.int8))],
                axis=0 if trans_b else 1)
    inputs = [ad, bd]
    if with_bias:
        bias_scale = np.float32(a_scale) * np.asarray(b_scale, np.float32)
        inputs.append(m.node("DequantizeLinear", [m.constant(bias), m.constant(bias_scale),
                                                  m.constant(np.zeros(np.shape(bias_scale),
                                                                      np.int32))], axis=0))
    value = m.node("Gemm", inputs, transA=int(trans_a), transB=int(trans_b))
    if relu:
        value = m.node("Relu", [value])
    model = m.build([m.quantized(value, y_scale, y_zero)])
    (fused,), (unfused,), kinds = _run_both(model, m.feeds)
    assert "QDQ Gemm" in kinds
    a_rows = (a.T if trans_a else a).astype(np.int64) - int(a_zero)
    b_columns = (b.T if trans_b else b).astype(np.int64)
    acc = a_rows @ b_columns + (bias.astype(np.int64) if with_bias else 0)
    exact = oracles.requantize(acc, oracles.multiplier(a_scale, np.asarray(b_scale).reshape(1, -1)
                                                       if per_column else b_scale, y_scale),
                               y_zero, _U8)
    if relu:
        exact = np.maximum(exact, y_zero)
    np.testing.assert_array_equal(fused, exact)
    _within_one(fused, unfused)


# -- add, multiply, pooling, softmax ----------------------------------------------------------

@given(data=st.data(), dtype=_dtypes, broadcast=st.booleans())
def test_dq_add_q_is_the_quantized_add(data, dtype, broadcast):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**31)))
    shape = (1, 3, data.draw(st.integers(1, 6)), data.draw(st.integers(1, 6)))
    a = _quantized(rng, shape, dtype)
    b = _quantized(rng, (1, 3, 1, 1) if broadcast else shape, dtype)
    scales = [data.draw(_scales) for _ in range(3)]
    zeros = [_zero_point(data.draw, dtype) for _ in range(3)]
    m = Model()
    ad = m.dequantized(m.feed(a), scales[0], zeros[0])
    bd = m.dequantized(m.feed(b, "b"), scales[1], zeros[1])
    model = m.build([m.quantized(m.node("Add", [ad, bd]), scales[2], zeros[2])])
    (fused,), (unfused,), kinds = _run_both(model, m.feeds)
    assert "QDQ Add" in kinds
    exact = reference.element_wise_quantized_linear_add(
        a, np.float32(scales[0]), zeros[0], np.broadcast_to(b, shape), np.float32(scales[1]),
        zeros[1], np.float32(scales[2]), zeros[2], dtype)
    np.testing.assert_array_equal(fused, exact)
    _within_one(fused, unfused)


@given(data=st.data(), dtype=_dtypes)
def test_dq_mul_q_equals_qlinear_mul(data, dtype):
    if "QLinearMul" not in qops.onnx.supported_operators("com.microsoft"):
        pytest.skip("QLinearMul is not among the com.microsoft operators qops runs")
    rng = np.random.default_rng(data.draw(st.integers(0, 2**31)))
    shape = (2, data.draw(st.integers(1, 8)))
    a, b = _quantized(rng, shape, dtype), _quantized(rng, shape, dtype)
    scales = [data.draw(_scales) for _ in range(3)]
    zeros = [_zero_point(data.draw, dtype) for _ in range(3)]
    m = Model()
    ad = m.dequantized(m.feed(a), scales[0], zeros[0])
    bd = m.dequantized(m.feed(b, "b"), scales[1], zeros[1])
    model = m.build([m.quantized(m.node("Mul", [ad, bd]), np.float32(scales[2] * 0.05),
                                 zeros[2])])
    (fused,), (unfused,), kinds = _run_both(model, m.feeds)
    assert "QDQ Mul" in kinds
    node = helper.make_node("QLinearMul", list("abcdefgh"), ["y"], domain="com.microsoft")
    (expected,) = qops.onnx.run_node(node, [a, np.float32(scales[0]), zeros[0], b,
                                            np.float32(scales[1]), zeros[1],
                                            np.float32(scales[2] * 0.05), zeros[2]])
    np.testing.assert_array_equal(fused, expected)
    _within_one(fused, unfused)


@given(data=st.data(), dtype=_dtypes, global_pool=st.booleans())
def test_dq_average_pool_q_is_quantized_average_pooling(data, dtype, global_pool):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**31)))
    x = _quantized(rng, (1, 2, data.draw(st.integers(3, 8)), data.draw(st.integers(3, 8))), dtype)
    scales = [data.draw(_scales) for _ in range(2)]
    zeros = [_zero_point(data.draw, dtype) for _ in range(2)]
    m = Model()
    xd = m.dequantized(m.feed(x), scales[0], zeros[0])
    if global_pool:
        pooled = m.node("GlobalAveragePool", [xd])
        geometry = dict(window_size=x.shape[2:], strides=(1, 1), start_padding=(0, 0),
                        end_padding=(0, 0), include_padding=False)
    else:
        pooled = m.node("AveragePool", [xd], kernel_shape=[2, 2], strides=[2, 2],
                        pads=[1, 1, 0, 0], count_include_pad=0)
        geometry = dict(window_size=(2, 2), strides=(2, 2), start_padding=(1, 1),
                        end_padding=(0, 0), include_padding=False)
    model = m.build([m.quantized(pooled, scales[1], zeros[1])])
    (fused,), (unfused,), kinds = _run_both(model, m.feeds)
    assert any(kind.startswith("QDQ") and "Pool" in kind for kind in kinds)
    # The reference pools 3-D: a 2-D pooling is one of depth 1.
    depth_one = {key: (1 if key in ("window_size", "strides") else 0, *value)
                 if isinstance(value, tuple) else value for key, value in geometry.items()}
    exact = reference.quantized_linear_average_pooling(
        x[:, :, None], np.float32(scales[0]), zeros[0], np.float32(scales[1]), zeros[1],
        dilations=(1, 1, 1), output_dtype=dtype, **depth_one)
    np.testing.assert_array_equal(fused, exact[:, :, 0])
    _within_one(fused, unfused)


@given(data=st.data(), dtype=_dtypes)
def test_dq_softmax_q_equals_qlinear_softmax(data, dtype):
    if "QLinearSoftmax" not in qops.onnx.supported_operators("com.microsoft"):
        pytest.skip("QLinearSoftmax is not among the com.microsoft operators qops runs")
    rng = np.random.default_rng(data.draw(st.integers(0, 2**31)))
    x = _quantized(rng, (2, 3, data.draw(st.integers(2, 20))), dtype)
    x_scale, x_zero = data.draw(st.floats(0.0078125, 0.25, width=32)), _zero_point(data.draw, dtype)
    y_zero = np.array(0 if dtype == _U8 else -128, dtype)
    m = Model()
    xd = m.dequantized(m.feed(x), x_scale, x_zero)
    model = m.build([m.quantized(m.node("Softmax", [xd], axis=-1), np.float32(1 / 256), y_zero)])
    (fused,), (unfused,), kinds = _run_both(model, m.feeds)
    assert "QDQ Softmax" in kinds
    node = helper.make_node("QLinearSoftmax", list("abcde"), ["y"], domain="com.microsoft",
                            axis=-1, opset=OPSET)
    (expected,) = qops.onnx.run_node(node, [x, np.float32(x_scale), x_zero, np.float32(1 / 256),
                                            y_zero])
    np.testing.assert_array_equal(fused, expected)
    assert np.abs(fused.astype(int) - unfused.astype(int)).max() <= 2


_MOVEMENTS = {
    "MaxPool": (lambda m, x: m.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2],
                                    pads=[1, 1, 1, 1])),
    "Reshape": lambda m, x: m.node("Reshape", [x, m.constant(np.array([0, -1], np.int64))]),
    "Transpose": lambda m, x: m.node("Transpose", [x], perm=[0, 2, 3, 1]),
    "Flatten": lambda m, x: m.node("Flatten", [x], axis=2),
    "Squeeze": lambda m, x: m.node("Squeeze", [x, m.constant(np.array([0], np.int64))]),
    "Unsqueeze": lambda m, x: m.node("Unsqueeze", [x, m.constant(np.array([1], np.int64))]),
    "Slice": lambda m, x: m.node("Slice", [x, m.constant(np.array([1], np.int64)),
                                           m.constant(np.array([4], np.int64)),
                                           m.constant(np.array([3], np.int64))]),
    "Pad": lambda m, x: m.node("Pad", [x, m.constant(np.array([0, 0, 1, 2, 0, 0, 2, 1],
                                                              np.int64))]),
    "Gather": lambda m, x: m.node("Gather", [x, m.constant(np.array([2, 0, 2], np.int64))],
                                  axis=3),
    "Resize": lambda m, x: m.node("Resize", [x, "", m.constant(np.array([1, 1, 2, 2],
                                                                        np.float32))],
                                  mode="nearest"),
}


@pytest.mark.parametrize("op_type", sorted(_MOVEMENTS) + ["Concat"])
@pytest.mark.parametrize("dtype", [_U8, _I8])
def test_operators_that_move_values_run_on_the_integers(op_type, dtype):
    rng = np.random.default_rng(7)
    x = _quantized(rng, (1, 2, 5, 6), dtype)
    scale, zero = np.float32(0.03), np.array(5 if dtype == _U8 else -3, dtype)
    m = Model()
    xd = m.dequantized(m.feed(x), scale, zero)
    if op_type == "Concat":
        other = m.dequantized(m.feed(_quantized(rng, (1, 3, 5, 6), dtype), "b"), scale, zero)
        moved = m.node("Concat", [xd, other], axis=1)
    else:
        moved = _MOVEMENTS[op_type](m, xd)
    model = m.build([m.quantized(moved, scale, zero)])
    (fused,), (unfused,), kinds = _run_both(model, m.feeds)
    assert f"QDQ {op_type} on integers" in kinds
    # With one scale and zero point, Q(op(DQ(x))) is op(x): the literal graph exactly.
    np.testing.assert_array_equal(fused, _literal(model, m.feeds)[0])
    np.testing.assert_array_equal(fused, unfused)


@pytest.mark.parametrize("dtype", [_U8, _I8])
def test_a_split_whose_parts_are_each_quantized_runs_on_the_integers(dtype):
    rng = np.random.default_rng(8)
    x = _quantized(rng, (2, 7, 3), dtype)
    scale, zero = np.float32(0.02), np.array(3, dtype)
    m = Model()
    parts = m.node("Split", [m.dequantized(m.feed(x), scale, zero),
                             m.constant(np.array([2, 5], np.int64))], outputs=2, axis=1)
    # The first part is read after the second is quantized: the group must
    # make both before either reader runs.
    second = m.quantized(parts[1], scale, zero)
    first = m.quantized(parts[0], scale, zero)
    model = m.build([m.node("Identity", [first]), second])
    (fused_first, fused_second), unfused, kinds = _run_both(model, m.feeds)
    assert "QDQ Split on integers" in kinds
    np.testing.assert_array_equal(fused_first, x[:, :2])
    np.testing.assert_array_equal(fused_second, x[:, 2:])
    for actual, expected in zip((fused_first, fused_second), _literal(model, m.feeds)):
        np.testing.assert_array_equal(actual, expected)


def test_a_movement_between_different_scales_runs_as_written():
    x = np.arange(12, dtype=np.uint8).reshape(1, 12)
    m = Model()
    xd = m.dequantized(m.feed(x), 0.1, np.uint8(3))
    model = m.build([m.quantized(m.node("Reshape", [xd, m.constant(np.array([3, 4], np.int64))]),
                                 0.2, np.uint8(3))])
    (fused,), _, kinds = _run_both(model, m.feeds)
    assert "numpy Reshape" in kinds
    np.testing.assert_array_equal(fused, _literal(model, m.feeds)[0])


def test_a_group_whose_inner_value_has_another_reader_is_not_fused():
    rng = np.random.default_rng(3)
    x = _quantized(rng, (2, 8), _U8)
    b = _quantized(rng, (8, 4), _I8)
    m = Model()
    xd = m.dequantized(m.feed(x), 0.02, np.uint8(128))
    product = m.node("MatMul", [xd, m.dequantized(m.constant(b), 0.01, np.int8(0))])
    model = m.build([m.quantized(product, 0.05, np.uint8(128)), product])
    session = qops.onnx.InferenceSession(model)
    assert "QDQ MatMul" not in [step.kind for step in session.steps]
    expected = _literal(model, m.feeds)
    for actual, wanted in zip(session.run(None, m.feeds), expected):
        np.testing.assert_array_equal(actual, wanted)


# -- dynamic quantization -------------------------------------------------------------------

@given(data=st.data(), with_bias=st.booleans(), per_column=st.booleans())
def test_dynamic_quantize_matmul_integer_cast_mul_is_one_product(data, with_bias, per_column):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**31)))
    depth, columns = data.draw(st.integers(1, 60)), data.draw(st.integers(1, 9))
    x = rng.normal(0, 2, (data.draw(st.integers(1, 3)), data.draw(st.integers(1, 5)), depth)) \
        .astype(np.float32)
    w = _quantized(rng, (depth, columns), _I8)
    w_scale = (rng.uniform(0.001, 0.02, columns) if per_column
               else rng.uniform(0.001, 0.02, ())).astype(np.float32)
    w_zero = np.zeros(w_scale.shape, np.int8)
    bias = rng.normal(0, 1, columns).astype(np.float32)
    m = Model()
    xq, xs, xz = m.node("DynamicQuantizeLinear", [m.feed(x)], outputs=3)
    sums = m.node("MatMulInteger", [xq, m.constant(w), xz, m.constant(w_zero)])
    scale = m.node("Mul", [xs, m.constant(w_scale)])
    value = m.node("Mul", [m.node("Cast", [sums], to=TensorProto.FLOAT), scale])
    if with_bias:
        value = m.node("Add", [value, m.constant(bias)])
    model = m.build([value])
    (fused,), (unfused,), kinds = _run_both(model, m.feeds, n_threads=2)
    assert "dynamic MatMul" in kinds and "qops MatMulInteger" not in kinds
    # The same float32 steps as the literal graph: equal bit for bit.
    (literal,) = _literal(model, m.feeds)
    np.testing.assert_array_equal(fused, literal)
    np.testing.assert_array_equal(unfused, literal)
    # And the exact statement of the product.
    q, s, z = reference.dynamic_quantize_linear(x, np.uint8)
    acc = (q.astype(np.int64) - int(np.asarray(z).reshape(()))) @ w.astype(np.int64)
    expected = acc.astype(np.float32) * np.multiply(np.float32(np.asarray(s).reshape(())),
                                                    w_scale, dtype=np.float32)
    if with_bias:
        expected = expected + bias
    np.testing.assert_array_equal(fused, expected)


# -- the session's interface ----------------------------------------------------------------

def _small_qdq_model(symbolic=True):
    """x (batch, 8) float -> Q -> DQ -> MatMul(DQ(W)) -> Q -> DQ -> y."""
    rng = np.random.default_rng(11)
    m = Model()
    x = m.feed(np.zeros((1, 8), np.float32), shape=["batch", 8] if symbolic else [1, 8])
    xq = m.quantized(x, 0.05, np.uint8(128))
    w = m.dequantized(m.constant(_quantized(rng, (8, 5), _I8)), 0.01, np.int8(0))
    y = m.dequantized(m.quantized(m.node("MatMul", [m.dequantized(xq, 0.05, np.uint8(128)), w]),
                                  0.04, np.uint8(120)), 0.04, np.uint8(120))
    return m.build([y]), x


def test_inputs_and_outputs_are_described_as_onnxruntime_does():
    model, x = _small_qdq_model()
    session = qops.onnx.InferenceSession(model.SerializeToString())
    (arg,) = session.get_inputs()
    assert (arg.name, arg.shape, arg.type) == (x, ["batch", 8], "tensor(float)")
    assert [o.name for o in session.get_outputs()] == [model.graph.output[0].name]


def test_symbolic_dimensions_take_any_size(tmp_path):
    model, x = _small_qdq_model()
    path = tmp_path / "model.onnx"
    path.write_bytes(model.SerializeToString())
    session = qops.onnx.InferenceSession(str(path))
    rng = np.random.default_rng(0)
    for batch in (1, 4, 2):
        feed = {x: rng.normal(0, 2, (batch, 8)).astype(np.float32)}
        (y,) = session.run(None, feed)
        (unfused,) = qops.onnx.InferenceSession(model, fuse=False).run(None, feed)
        assert y.shape == (batch, 5)
        assert np.abs(y - unfused).max() <= 0.04 * 1.001


@pytest.mark.parametrize("breakage, message", [
    ("missing", "is missing"),
    ("extra", "'nope' is not an input"),
    ("dtype", "has dtype float64"),
    ("rank", "has 3 dimensions"),
    ("size", "axis 1 is 8"),
])
def test_bad_feeds_raise_validation_errors_naming_the_input(breakage, message):
    model, x = _small_qdq_model()
    session = qops.onnx.InferenceSession(model)
    good = np.zeros((1, 8), np.float32)
    feeds = {"missing": {}, "extra": {x: good, "nope": good}, "dtype": {x: np.zeros((1, 8))},
             "rank": {x: np.zeros((1, 1, 8), np.float32)},
             "size": {x: np.zeros((1, 7), np.float32)}}[breakage]
    with pytest.raises(qops.ValidationError, match=message) as caught:
        session.run(None, feeds)
    assert (x if breakage != "extra" else "nope") in str(caught.value)
    with pytest.raises(qops.ValidationError, match="not an output"):
        session.run(["missing"], {x: good})


def test_outputs_are_new_arrays_the_caller_owns():
    m = Model()
    x = m.feed(np.zeros((2, 3), np.float32))
    model = m.build([m.node("Identity", [x]), m.node("Reshape", [x, m.constant(
        np.array([3, 2], np.int64))])])
    session = qops.onnx.InferenceSession(model)
    feed = np.arange(6, dtype=np.float32).reshape(2, 3)
    first, second = session.run(None, {x: feed})
    first[...] = -1
    second[...] = -2
    np.testing.assert_array_equal(feed, np.arange(6, dtype=np.float32).reshape(2, 3))
    again, _ = session.run(None, {x: feed})
    np.testing.assert_array_equal(again, feed)


def test_concurrent_runs_and_thread_counts_give_the_same_results():
    model, x = _small_qdq_model()
    rng = np.random.default_rng(5)
    feeds = [{x: rng.normal(0, 2, (int(rng.integers(1, 40)), 8)).astype(np.float32)}
             for _ in range(12)]
    one = qops.onnx.InferenceSession(model, n_threads=1)
    expected = [one.run(None, feed)[0] for feed in feeds]
    two = qops.onnx.InferenceSession(model, n_threads=2)
    results = [None] * len(feeds)

    def work(index):
        for _ in range(5):
            results[index] = two.run(None, feeds[index])[0]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(feeds))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for got, wanted in zip(results, expected):
        np.testing.assert_array_equal(got, wanted)


def test_a_node_nothing_runs_fails_at_construction_naming_it():
    m = Model()
    x = m.feed(np.zeros((1, 4), np.float32))
    node = helper.make_node("EmbedLayerNormalization", [x], ["y"], name="embedding",
                            domain="com.microsoft")
    m.nodes.append(node)
    model = m.build(["y"])
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    with pytest.raises(qops.UnsupportedError, match="embedding.*EmbedLayerNormalization.*"
                                                    "com.microsoft"):
        qops.onnx.InferenceSession(model)


@pytest.mark.parametrize("breakage", ["undefined input", "cycle", "twice defined", "bytes",
                                      "no opset", "bad output", "wrong type"])
def test_malformed_models_are_refused_with_a_validation_error(breakage):
    m = Model()
    x = m.feed(np.zeros((1, 4), np.float32))
    if breakage == "undefined input":
        m.nodes.append(helper.make_node("Relu", ["ghost"], ["y"], name="r"))
    elif breakage == "cycle":
        m.nodes += [helper.make_node("Add", [x, "z"], ["y"], name="a"),
                    helper.make_node("Relu", ["y"], ["z"], name="b")]
    else:
        m.nodes += [helper.make_node("Relu", [x], ["y"], name="a"),
                    helper.make_node("Relu", [x], ["y" if breakage == "twice defined" else "w"],
                                     name="b")]
    model = m.build(["y"])
    source = model
    if breakage == "bytes":
        source = model.SerializeToString()[:-7] + b"\xff\xff\xff"
    elif breakage == "no opset":
        del model.opset_import[:]
    elif breakage == "bad output":
        model.graph.output[0].name = "nowhere"
    elif breakage == "wrong type":
        source = 42
    with pytest.raises(qops.ValidationError):
        qops.onnx.InferenceSession(source)


@given(st.data())
def test_mutated_model_bytes_never_crash(data):
    model, x = _small_qdq_model()
    raw = bytearray(model.SerializeToString())
    for _ in range(data.draw(st.integers(1, 8))):
        position = data.draw(st.integers(0, len(raw) - 1))
        raw[position] = data.draw(st.integers(0, 255))
    try:
        session = qops.onnx.InferenceSession(bytes(raw))
    except qops.ValidationError:
        return
    try:
        session.run(None, {arg.name: np.zeros([d if isinstance(d, int) else 2
                                               for d in (arg.shape or [2, 8])], np.float32)
                           for arg in session.get_inputs()})
    except qops.QopsError:
        pass


def test_the_run_command_uses_the_session(tmp_path):
    import argparse

    from qops.cli.run import run_model

    model, x = _small_qdq_model(symbolic=False)
    path = tmp_path / "model.onnx"
    path.write_bytes(model.SerializeToString())
    feed = np.random.default_rng(1).normal(0, 1, (1, 8)).astype(np.float32)
    np.save(tmp_path / "x.npy", feed)
    import io

    stream = io.StringIO()
    status = run_model(argparse.Namespace(model=str(path), input=[f"{x}=" + str(tmp_path / "x.npy")],
                                          out=str(tmp_path / "out"), repeat=2, n_threads=None,
                                          no_fuse=False), stream)
    assert status == 0
    (expected,) = qops.onnx.InferenceSession(model).run(None, {x: feed})
    name = model.graph.output[0].name
    np.testing.assert_array_equal(np.load(tmp_path / "out" / f"{name}.npy"), expected)
    assert "QDQ MatMul" in stream.getvalue()


# -- onnxruntime's quantized nodes in a session -----------------------------------------------

def _contrib_case(op_type, rng):
    """(inputs in order, attributes) of one com.microsoft node on 8-bit tensors."""
    x = _quantized(rng, (2, 3, 4), _U8)
    s, z = np.float32(0.05), np.uint8(120)
    if op_type in ("QLinearSigmoid", "QLinearLeakyRelu"):
        return [x, s, z, np.float32(1 / 256), np.uint8(0)], (
            {"alpha": 0.1} if op_type == "QLinearLeakyRelu" else {})
    if op_type == "QLinearConcat":
        other = _quantized(rng, (2, 5, 4), _U8)
        return [np.float32(0.06), np.uint8(128), x, s, z, other, np.float32(0.04), np.uint8(100)], \
            {"axis": 1}
    if op_type == "QLinearWhere":
        condition = rng.integers(0, 2, (2, 3, 4)).astype(bool)
        return [condition, x, s, z, _quantized(rng, (2, 3, 4), _U8), np.float32(0.03),
                np.uint8(90), np.float32(0.06), np.uint8(128)], {}
    if op_type == "QGemm":
        b = _quantized(rng, (5, 4), _U8)
        return [x[0], s, z, b, np.float32(0.02), np.uint8(128),
                rng.integers(-100, 100, 5).astype(np.int32), np.float32(0.3), np.uint8(128)], \
            {"transB": 1}
    if op_type == "DynamicQuantizeMatMul":
        return [rng.normal(0, 1, (3, 4)).astype(np.float32), _quantized(rng, (4, 6), _I8),
                np.float32(0.02), np.int8(0), rng.normal(0, 1, 6).astype(np.float32)], {}
    if op_type == "MatMulIntegerToFloat":
        return [x[0], _quantized(rng, (4, 6), _U8), np.float32(0.05), np.float32(0.02),
                np.uint8(120), np.uint8(128)], {}
    raise AssertionError(op_type)


@pytest.mark.parametrize("op_type", ["QLinearSigmoid", "QLinearLeakyRelu", "QLinearConcat",
                                     "QLinearWhere", "QGemm", "DynamicQuantizeMatMul",
                                     "MatMulIntegerToFloat"])
def test_onnxruntime_s_quantized_nodes_run_in_a_session_as_run_node_runs_them(op_type):
    """Each node's rule is tested against its own statement (test_qoperator.py);
    here the session must give what run_node gives, with every input a feed
    and with every input but the data constant."""
    rng = np.random.default_rng(13)
    values, attributes = _contrib_case(op_type, rng)
    names = [f"in{i}" for i in range(len(values))]
    node = helper.make_node(op_type, names, ["y"], domain="com.microsoft", **attributes)
    (expected,) = qops.onnx.run_node(node, values)
    data = 2 if op_type == "QLinearConcat" else 1 if op_type == "QLinearWhere" else 0
    for constants in (False, True):
        inputs, initializers, feeds = [], [], {}
        for position, (name, value) in enumerate(zip(names, values)):
            value = np.asarray(value)
            if constants and position != data:
                initializers.append(numpy_helper.from_array(value, name))
            else:
                inputs.append(helper.make_tensor_value_info(name, _ONNX[value.dtype],
                                                            list(value.shape)))
                feeds[name] = value
        graph = helper.make_graph([node], "g", inputs,
                                  [helper.make_tensor_value_info("y", TensorProto.UNDEFINED,
                                                                 None)],
                                  initializer=initializers)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET),
                                                        helper.make_opsetid("com.microsoft", 1)])
        model.ir_version = 10
        for fuse in (True, False):
            (actual,) = qops.onnx.InferenceSession(model, fuse=fuse).run(None, feeds)
            np.testing.assert_array_equal(actual, expected)


@pytest.mark.parametrize("a_type, b_type", [(_U8, _U8), (_U8, _I8), (_I8, _I8), (_I8, _U8)])
@pytest.mark.parametrize("per_column, with_bias, lead", [(False, False, (7,)),
                                                          (True, True, (2, 3)),
                                                          (True, False, (1, 1, 5))])
@pytest.mark.parametrize("a_parameters", ["fed", "constant"])
def test_matmul_integer_to_float_with_a_constant_b_runs_compiled_as_run_node_runs_it(
        a_type, b_type, per_column, with_bias, lead, a_parameters):
    """B, b_scale, b_zero_point and the bias constant: B is packed once
    (the step is compiled) and A of the other byte type goes to B's type,
    with the same results as run_node, which moves the smaller operand.  A
    scale or zero point of A per row, or a one-dimensional A, takes the
    adapter."""
    rng = np.random.default_rng(14)
    k, n = 48, 20
    a = _quantized(rng, lead + (k,), a_type)
    b = _quantized(rng, (k, n), b_type)
    b_scale = (rng.uniform(0.001, 0.02, n) if per_column else np.asarray(0.013)).astype(
        np.float32)
    info = np.iinfo(b_type)
    b_zero = (rng.integers(info.min, info.max + 1, n) if per_column
              else np.asarray(info.min + 3)).astype(b_type)
    bias = rng.normal(0, 1, n).astype(np.float32) if with_bias else None
    a_scale = np.asarray(0.021, np.float32)
    a_zero = np.asarray(7 if a_type == _U8 else -5, a_type)
    names = ["a", "b", "a_scale", "b_scale", "a_zero", "b_zero"] + (["bias"] if with_bias else [])
    node = helper.make_node("MatMulIntegerToFloat", names, ["y"], domain="com.microsoft")
    constants = {"b": b, "b_scale": b_scale, "b_zero": b_zero, "bias": bias}
    fed = {"a": a, "a_scale": a_scale, "a_zero": a_zero}
    if a_parameters == "constant":
        # A's scale and zero point bound too: the call brings A alone.
        constants.update(a_scale=fed.pop("a_scale"), a_zero=fed.pop("a_zero"))
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(name, _ONNX[np.dtype(value.dtype)], list(value.shape))
         for name, value in fed.items()],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[numpy_helper.from_array(value, name) for name, value in constants.items()
                     if value is not None])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 10
    session = qops.onnx.InferenceSession(model)
    assert [step.kind for step in session.steps] == ["qops MatMulIntegerToFloat (compiled)"]
    values = [a, b, a_scale, b_scale, a_zero, b_zero] + ([bias] if with_bias else [])
    (expected,) = qops.onnx.run_node(node, values)
    (actual,) = session.run(None, fed)
    assert actual.shape == lead + (n,)
    np.testing.assert_array_equal(actual, expected)
    # Every call of these forms is the compiled operator's, never the adapter's.
    from unittest import mock

    from qops.onnx import _nodes

    def refused(*arguments):
        raise AssertionError("the adapter ran")

    with mock.patch.dict(_nodes.CONTRIB_ADAPTERS, {"MatMulIntegerToFloat": refused}):
        compiled = qops.onnx.InferenceSession(model)
    np.testing.assert_array_equal(compiled.run(None, fed)[0], expected)


def test_matmul_integer_to_float_of_a_five_dimensional_a_is_refused_as_run_node_refuses_it():
    rng = np.random.default_rng(15)
    a = _quantized(rng, (1, 1, 1, 2, 16), _U8)
    b = _quantized(rng, (16, 4), _I8)
    node = helper.make_node("MatMulIntegerToFloat", ["a", "b", "a_scale", "b_scale"], ["y"],
                            domain="com.microsoft")
    values = [a, b, np.asarray(0.02, np.float32), np.asarray(0.01, np.float32)]
    with pytest.raises(qops.ValidationError) as expected:
        qops.onnx.run_node(node, values)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("a", TensorProto.UINT8, list(a.shape)),
                      helper.make_tensor_value_info("a_scale", TensorProto.FLOAT, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[numpy_helper.from_array(b, "b"),
                     numpy_helper.from_array(values[3], "b_scale")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 10
    session = qops.onnx.InferenceSession(model)
    assert [step.kind for step in session.steps] == ["qops MatMulIntegerToFloat (compiled)"]
    with pytest.raises(qops.ValidationError) as raised:
        session.run(None, {"a": a, "a_scale": values[2]})
    assert str(expected.value) in str(raised.value)
