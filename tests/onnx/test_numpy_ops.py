"""The session's NumPy operators (qops.onnx._numpy_ops) against onnx.reference's."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

onnx = pytest.importorskip("onnx")
from onnx import helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from qops.onnx import _numpy_ops  # noqa: E402
from qops.onnx._graph import attribute_values  # noqa: E402


def _reference(node, arguments, opset=21):
    model = helper.make_model(helper.make_graph([node], "g", [], []),
                              opset_imports=[helper.make_opsetid("", opset)])
    return ReferenceEvaluator(model).rt_nodes_[0].run(*arguments)


def _max_pool_by_definition(x, kernel, strides, dilations, pads, auto_pad, ceil_mode):
    """ONNX's MaxPool, position by position: the largest element of each
    window that lies inside X (padding never wins).  onnx.reference's own
    MaxPool mishandles asymmetric pads and SAME padding with strides, so the
    statement is written here."""
    rank = len(kernel)
    sizes = x.shape[2:]
    begins, counts = [], []
    for axis in range(rank):
        size, k, s, d = sizes[axis], kernel[axis], strides[axis], dilations[axis]
        extent = (k - 1) * d + 1
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            count = -(-size // s)
            total = max(0, (count - 1) * s + extent - size)
            begin = total // 2 if auto_pad == "SAME_UPPER" else total - total // 2
        elif auto_pad == "VALID":
            begin, count = 0, (size - extent) // s + 1
        else:
            begin = pads[axis]
            span = size + pads[axis] + pads[axis + rank] - extent
            count = (-(-span // s) if ceil_mode else span // s) + 1
            if ceil_mode and (count - 1) * s >= size + begin:
                count -= 1  # a window starting in the end padding is dropped
        begins.append(begin)
        counts.append(count)
    out = np.empty(x.shape[:2] + tuple(counts), x.dtype)
    for position in np.ndindex(*counts):
        taps = []
        for axis, o in enumerate(position):
            start = o * strides[axis] - begins[axis]
            taps.append([start + t * dilations[axis] for t in range(kernel[axis])
                         if 0 <= start + t * dilations[axis] < sizes[axis]])
        window = x[(slice(None), slice(None)) + np.ix_(*taps)]
        out[(slice(None), slice(None)) + position] = window.reshape(x.shape[:2] + (-1,)).max(-1)
    return out


@given(data=st.data(), dtype=st.sampled_from([np.float32, np.uint8, np.int8]),
       rank=st.sampled_from([1, 2]), auto_pad=st.sampled_from(["NOTSET", "SAME_UPPER",
                                                                "SAME_LOWER", "VALID"]),
       ceil_mode=st.booleans())
def test_max_pool_is_onnx_s_definition(data, dtype, rank, auto_pad, ceil_mode):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**31)))
    kernel = [data.draw(st.integers(1, 3)) for _ in range(rank)]
    strides = [data.draw(st.integers(1, 3)) for _ in range(rank)]
    dilations = [data.draw(st.integers(1, 2)) for _ in range(rank)]
    sizes = [data.draw(st.integers((k - 1) * d + 1, 9)) for k, d in zip(kernel, dilations)]
    attributes = dict(kernel_shape=kernel, strides=strides, dilations=dilations)
    # ONNX asks each pad to be smaller than the kernel's extent.
    pads = [data.draw(st.integers(0, (k - 1) * d)) for k, d in zip(kernel * 2, dilations * 2)]
    if auto_pad == "NOTSET":
        attributes.update(pads=pads, ceil_mode=int(ceil_mode))
    else:
        attributes.update(auto_pad=auto_pad)
    shape = (2, 3, *sizes)
    if dtype == np.float32:
        x = rng.normal(0, 1, shape).astype(np.float32)
    else:
        info = np.iinfo(dtype)
        x = rng.integers(info.min, info.max + 1, shape, dtype=dtype)
    node = helper.make_node("MaxPool", ["x"], ["y"], **attributes)
    (actual,) = _numpy_ops.max_pool(node, attribute_values(node), 21)([x])
    expected = _max_pool_by_definition(x, kernel, strides, dilations, pads, auto_pad, ceil_mode)
    assert actual.dtype == expected.dtype
    np.testing.assert_array_equal(actual, expected)


@pytest.mark.parametrize("dtype", [np.float32, np.uint8])
def test_max_pool_equals_onnxruntime_on_a_resnet_stem(dtype):
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto

    rng = np.random.default_rng(4)
    x = (rng.normal(0, 1, (1, 4, 15, 16)).astype(np.float32) if dtype == np.float32
         else rng.integers(0, 256, (1, 4, 15, 16), dtype=np.uint8))
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2],
                            pads=[1, 1, 1, 1])
    element = TensorProto.FLOAT if dtype == np.float32 else TensorProto.UINT8
    model = helper.make_model(
        helper.make_graph([node], "g", [helper.make_tensor_value_info("x", element, x.shape)],
                          [helper.make_tensor_value_info("y", element, None)]),
        opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (expected,) = session.run(None, {"x": x})
    (actual,) = _numpy_ops.max_pool(node, attribute_values(node), 21)([x])
    np.testing.assert_array_equal(actual, expected)


def test_max_pool_with_indices_is_left_to_onnx_reference():
    node = helper.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=[2, 2])
    assert _numpy_ops.max_pool(node, attribute_values(node), 21) is None


def test_erf_matches_math_erf_within_float32_rounding():
    pytest.importorskip("scipy")
    x = np.concatenate([np.linspace(-6, 6, 20001, dtype=np.float32),
                        np.array([0.0, -0.0, np.inf, -np.inf, 1e-30], np.float32)])
    node = helper.make_node("Erf", ["x"], ["y"])
    (expected,) = _reference(node, [x])
    (actual,) = _numpy_ops.erf(node, {}, 21)([x])
    assert actual.dtype == np.float32
    np.testing.assert_allclose(actual, expected, rtol=2**-22, atol=2**-30)
