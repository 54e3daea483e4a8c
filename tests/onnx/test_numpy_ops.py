"""The session's NumPy operators (qops.onnx._numpy_ops) against onnx.reference's."""

from __future__ import annotations

import math
from unittest import mock

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

onnx = pytest.importorskip("onnx")
from onnx import helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from qops.backends.native import tables  # noqa: E402
from qops.backends.native import variants as _simd  # noqa: E402
from qops.onnx import _numpy_ops  # noqa: E402
from qops.onnx._graph import attribute_values  # noqa: E402


def _without_kernels():
    """_numpy_ops as where the compiled kernels are not built (NumPy's steps
    alone), for the ``with`` block."""
    return mock.patch.object(_numpy_ops, "native_tables", lambda: None)


def _reference(node, arguments, opset=21):
    model = helper.make_model(helper.make_graph([node], "g", [], []),
                              opset_imports=[helper.make_opsetid("", opset)])
    return ReferenceEvaluator(model).rt_nodes_[0].run(*arguments)


def _max_pool_by_definition(x, kernel, strides, dilations, pads, auto_pad, ceil_mode):
    """ONNX's MaxPool, position by position: the largest element of each
    window that lies inside X (padding never wins; a window with nothing
    inside takes the padding's value, below every element).  onnx.reference's own
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
        index = (slice(None), slice(None)) + position
        if not all(taps):
            # No tap inside (dilated taps can step over a small image): the
            # padding's value, below every element.
            out[index] = (np.iinfo(x.dtype).min if np.issubdtype(x.dtype, np.integer)
                          else -np.inf)
            continue
        window = x[(slice(None), slice(None)) + np.ix_(*taps)]
        out[index] = window.reshape(x.shape[:2] + (-1,)).max(-1)
    return out


@given(data=st.data(), dtype=st.sampled_from([np.float32, np.uint8, np.int8]),
       rank=st.sampled_from([1, 2, 3]), auto_pad=st.sampled_from(["NOTSET", "SAME_UPPER",
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


@pytest.mark.parametrize("variant", _simd.quantize_variants())
@given(data=st.data(), dtype=st.sampled_from([np.uint8, np.int8]))
def test_the_max_pool_kernel_is_onnx_s_definition(variant, data, dtype):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**31)))
    kernel = [data.draw(st.integers(1, 4)) for _ in range(2)]
    strides = [data.draw(st.integers(1, 3)) for _ in range(2)]
    dilations = [data.draw(st.integers(1, 3)) for _ in range(2)]
    # Planes from empty (every window in the padding) to wider than a vector.
    sizes = [data.draw(st.integers(0, 70)) for _ in range(2)]
    pads = [data.draw(st.integers(0, (k - 1) * d)) for k, d in zip(kernel * 2, dilations * 2)]
    ceil_mode = data.draw(st.booleans())
    begins, _, outputs = _numpy_ops._pool_geometry(sizes, kernel, strides, dilations, pads,
                                                   "NOTSET", ceil_mode)
    if not all(outputs):
        return
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max + 1, (2, 3, *sizes), dtype=dtype)
    actual = tables.max_pool_bytes(x, kernel, strides, dilations, begins, outputs,
                                   n_threads=data.draw(st.integers(1, 3)), variant=variant)
    if 0 in sizes:
        expected = np.full(x.shape[:2] + tuple(outputs), info.min, dtype)
    else:
        expected = _max_pool_by_definition(x, kernel, strides, dilations, pads, "NOTSET",
                                           ceil_mode)
    assert actual.dtype == dtype
    np.testing.assert_array_equal(actual, expected)


@pytest.mark.parametrize("variant", _simd.quantize_variants())
def test_the_max_pool_kernel_does_not_depend_on_the_thread_count(variant):
    # 64 planes of 112 x 112, as ResNet-50's stem pools: the planes shared out.
    x = np.random.default_rng(5).integers(0, 256, (1, 64, 112, 112), dtype=np.uint8)
    runs = [tables.max_pool_bytes(x, (3, 3), (2, 2), (1, 1), (1, 1), (56, 56),
                                  n_threads=n_threads, variant=variant)
            for n_threads in (1, 2, 3)]
    np.testing.assert_array_equal(runs[0], runs[1])
    np.testing.assert_array_equal(runs[0], runs[2])
    np.testing.assert_array_equal(
        runs[0], _max_pool_by_definition(x, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), "NOTSET",
                                         False))


@given(data=st.data(), dtype=st.sampled_from([np.uint8, np.int8]),
       rank=st.sampled_from([1, 2]))
def test_max_pool_of_bytes_in_numpy_alone_is_onnx_s_definition(data, dtype, rank):
    # Where the kernels are not built, the NumPy statement pools bytes.
    rng = np.random.default_rng(data.draw(st.integers(0, 2**31)))
    kernel = [data.draw(st.integers(1, 3)) for _ in range(rank)]
    strides = [data.draw(st.integers(1, 3)) for _ in range(rank)]
    sizes = [data.draw(st.integers(k, 12)) for k in kernel]
    pads = [data.draw(st.integers(0, k - 1)) for k in kernel * 2]
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max + 1, (2, 3, *sizes), dtype=dtype)
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=kernel, strides=strides,
                            pads=pads)
    with _without_kernels():
        (actual,) = _numpy_ops.max_pool(node, attribute_values(node), 21)([x])
    np.testing.assert_array_equal(
        actual, _max_pool_by_definition(x, kernel, strides, (1,) * rank, pads, "NOTSET", False))


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


# -- Erf -------------------------------------------------------------------------------------

#: The bound the tests hold erf_float32 to (its docstring reports 1.13 ulp over
#: every float32 in [-6, 6] with NumPy's AVX-512 float32 exp).
ERF_ULP_BOUND = 2.0


def _kernel_erf(variant):
    def erf(x):
        return tables.erf_float32(x, variant=variant)

    return erf


#: The approximation in NumPy and on each quantize variant's kernel (the
#: session's Erf takes the kernel where one is built).
ERF_IMPLEMENTATIONS = ([pytest.param(_numpy_ops.erf_float32, id="numpy")]
                       + [pytest.param(_kernel_erf(variant), id=variant)
                          for variant in _simd.quantize_variants()])


def _erf_ulp_errors(x, erf=_numpy_ops.erf_float32):
    """|erf(x) - math.erf(x)| in units of the float32 spacing at the exact
    value (``math.erf`` in float64 stands for it), per element."""
    x = np.asarray(x, np.float32)
    actual = erf(x).astype(np.float64)
    exact = np.fromiter(map(math.erf, x.astype(np.float64).reshape(-1).tolist()), np.float64,
                        x.size)
    _, exponent = np.frexp(np.abs(exact))
    spacing = np.ldexp(1.0, np.maximum(exponent - 24, -149))
    return np.abs(actual - exact.reshape(x.shape)) / spacing.reshape(x.shape)


@pytest.mark.parametrize("erf", ERF_IMPLEMENTATIONS)
def test_erf_is_within_its_bound_on_a_dense_grid_of_float32(erf):
    # Every 509th float32 from 0 to 6 (2.2 million of each sign), subnormals
    # and the branch switch at 0.875 included.
    top = int(np.float32(6).view(np.uint32))
    bits = np.arange(0, top + 1, 509, dtype=np.uint32)
    positive = bits.view(np.float32)
    split = np.float32(0.875)
    near_split = (np.arange(-2000, 2000, dtype=np.int64) + int(split.view(np.uint32)))
    x = np.concatenate([positive, near_split.astype(np.uint32).view(np.float32)])
    x = np.concatenate([x, -x])
    errors = _erf_ulp_errors(x, erf)
    assert errors.max() <= ERF_ULP_BOUND, (errors.max(), x[errors.argmax()])


@given(st.floats(width=32, allow_nan=True, allow_infinity=True, allow_subnormal=True))
@example(0.0)
@example(-0.0)
@example(float("inf"))
@example(float("-inf"))
@example(float("nan"))
@example(2.0**-149)
@example(-(2.0**-126) * 0.75)
@example(0.875)
@example(3.92)
@pytest.mark.parametrize("erf", ERF_IMPLEMENTATIONS)
def test_erf_of_any_float32(erf, value):
    x = np.float32(value)
    (y,) = erf(np.array([x]))
    assert y.dtype == np.float32
    if np.isnan(x):
        assert np.isnan(y)
        return
    if x == 0:
        assert y == 0 and np.signbit(y) == np.signbit(x)  # -0.0 stays -0.0
        return
    assert np.signbit(y) == np.signbit(x)
    assert _erf_ulp_errors(np.array([x]), erf)[0] <= ERF_ULP_BOUND


@pytest.mark.parametrize("erf", ERF_IMPLEMENTATIONS)
def test_erf_of_every_shape_and_block_boundary(erf):
    rng = np.random.default_rng(7)
    for shape in [(), (0,), (3, 0), (1,), (16385,), (65536,), (65537,), (2, 3, 40000)]:
        x = rng.normal(0, 2, shape).astype(np.float32)
        y = erf(x)
        assert y.shape == x.shape and y.dtype == np.float32
        if x.size:
            assert _erf_ulp_errors(x, erf).max() <= ERF_ULP_BOUND
    # a strided view is read as its values
    x = rng.normal(0, 2, (50, 40)).astype(np.float32)
    np.testing.assert_array_equal(erf(x.T), erf(x).T)


@pytest.mark.parametrize("variant", _simd.quantize_variants())
def test_the_erf_kernel_does_not_depend_on_the_thread_count(variant):
    x = np.random.default_rng(3).normal(0, 2, 200000).astype(np.float32)
    np.testing.assert_array_equal(tables.erf_float32(x, n_threads=1, variant=variant),
                                  tables.erf_float32(x, n_threads=2, variant=variant))


@pytest.mark.parametrize("dtype, rtol", [(np.float32, 2**-22), (np.float16, 2**-10)])
def test_erf_node_against_onnx_reference(dtype, rtol):
    x = np.concatenate([np.linspace(-6, 6, 20001), [0.0, -0.0, np.inf, -np.inf, 1e-30]])
    x = x.astype(dtype)
    node = helper.make_node("Erf", ["x"], ["y"])
    (expected,) = _reference(node, [x])
    (actual,) = _numpy_ops.erf(node, {}, 21)([x])
    assert actual.dtype == x.dtype
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=2**-30)


def test_erf_node_of_float64_is_math_erf():
    """float64 keeps its precision (onnx.reference rounds through float32)."""
    x = np.concatenate([np.linspace(-6, 6, 2001), [0.0, -0.0, np.inf, -np.inf, 1e-300]])
    node = helper.make_node("Erf", ["x"], ["y"])
    (actual,) = _numpy_ops.erf(node, {}, 21)([x])
    assert actual.dtype == np.float64
    np.testing.assert_allclose(actual, [math.erf(v) for v in x], rtol=4e-16, atol=0)


# -- Softmax ---------------------------------------------------------------------------------

@given(data=st.data(), rank=st.integers(1, 4), with_axis=st.booleans(),
       dtype=st.sampled_from([np.float32, np.float64]), opset=st.sampled_from([13, 21]))
def test_softmax_against_onnx_reference(data, rank, with_axis, dtype, opset):
    """From opset 13 NumPy's steps (without the kernels) are onnx.reference's
    own: within 2 ulp (they agree exactly where both run NumPy's same
    reductions)."""
    rng = np.random.default_rng(data.draw(st.integers(0, 2**31)))
    shape = tuple(data.draw(st.integers(1, 6)) for _ in range(rank))
    x = (rng.normal(0, data.draw(st.sampled_from([0.1, 3.0, 30.0])), shape)).astype(dtype)
    attributes = {"axis": data.draw(st.integers(-rank, rank - 1))} if with_axis else {}
    node = helper.make_node("Softmax", ["x"], ["y"], **attributes)
    (expected,) = _reference(node, [x], opset)
    with _without_kernels():
        (actual,) = _numpy_ops.softmax(node, attribute_values(node), opset)([x])
    assert actual.dtype == x.dtype and actual.shape == x.shape
    np.testing.assert_allclose(actual, expected, rtol=2 * np.finfo(dtype).eps, atol=0)


#: The bound the tests hold the softmax kernel to, in units of the float32
#: spacing at the exact softmax of the float32 differences x - max.
SOFTMAX_ULP_BOUND = 3.0


def _softmax_ulp_errors(y, x):
    """|y - softmax(x)| in units of the float32 spacing at the exact value,
    per element: the exact softmax in float64 of the differences x - max as
    float32 rounds them (the first step of every statement)."""
    differences = (x - x.max(axis=-1, keepdims=True)).astype(np.float64)
    exponentials = np.exp(differences)
    exact = exponentials / exponentials.sum(axis=-1, keepdims=True)
    spacing = np.spacing(exact.astype(np.float32)).astype(np.float64)
    return np.abs(y.astype(np.float64) - exact) / spacing


@pytest.mark.parametrize("variant", _simd.quantize_variants())
@given(data=st.data())
def test_the_softmax_kernel_is_within_its_bound_of_the_exact_softmax(variant, data):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**31)))
    # Rows around the lanes' width; spreads from nearly flat to most values
    # underflowing (subnormal and zero results).
    shape = (data.draw(st.integers(1, 40)), data.draw(st.integers(1, 300)))
    x = rng.normal(0, data.draw(st.sampled_from([0.01, 1.0, 5.0, 30.0, 200.0])),
                   shape).astype(np.float32)
    operation = data.draw(st.sampled_from([None, "divisor", "multiplier"]))
    constant = np.float32(data.draw(st.sampled_from([8.0, 0.125, 3.0, 1e-3])))
    keywords = {} if operation is None else {operation: constant}
    y = tables.softmax_float32(x, **keywords, n_threads=data.draw(st.integers(1, 3)),
                               variant=variant)
    scaled = (x if operation is None else x / constant if operation == "divisor"
              else x * constant)
    assert y.dtype == np.float32 and y.shape == x.shape
    assert _softmax_ulp_errors(y, scaled).max() <= SOFTMAX_ULP_BOUND


@pytest.mark.parametrize("variant", _simd.quantize_variants())
def test_the_softmax_kernel_takes_nan_and_infinities_as_numpy_s_steps(variant):
    rows = np.array([[np.nan, 0, 1, 2], [np.inf, 0, -np.inf, 1], [-np.inf] * 4,
                     [-np.inf, -np.inf, 0, 0], [np.inf, np.inf, 0, 0], [0, -0.0, 0, 0],
                     [3.4e38, -3.4e38, 0, 1], [-1e30, 0, 0, -200]], np.float32)
    with np.errstate(invalid="ignore"):
        differences = rows - rows.max(axis=-1, keepdims=True)
        exponentials = np.exp(differences)
        expected = exponentials / exponentials.sum(axis=-1, keepdims=True)
    got = tables.softmax_float32(rows, variant=variant)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))
    finite = ~np.isnan(expected)
    np.testing.assert_array_equal(got[finite] == 0, expected[finite] == 0)
    np.testing.assert_allclose(got[finite], expected[finite], rtol=1e-6, atol=0)


@pytest.mark.parametrize("variant", _simd.quantize_variants())
def test_the_softmax_kernel_does_not_depend_on_the_thread_count(variant):
    x = np.random.default_rng(6).normal(0, 4, (12 * 128, 128)).astype(np.float32)
    runs = [tables.softmax_float32(x, divisor=np.float32(8), n_threads=n, variant=variant)
            for n in (1, 2, 3)]
    assert np.array_equal(runs[0].view(np.uint32), runs[1].view(np.uint32))
    assert np.array_equal(runs[0].view(np.uint32), runs[2].view(np.uint32))


@given(data=st.data(), opset=st.sampled_from([11, 13, 21]))
def test_softmax_of_float32_along_the_last_axis_is_within_the_bound(data, opset):
    """The node's float32 softmax over the trailing values (the kernels' where
    built, else NumPy's steps) against the exact softmax of x - max."""
    rng = np.random.default_rng(data.draw(st.integers(0, 2**31)))
    rows = data.draw(st.integers(1, 20))
    length = data.draw(st.integers(1, 200))
    x = rng.normal(0, data.draw(st.sampled_from([0.1, 3.0, 30.0])), (rows, length)).astype(
        np.float32)
    node = helper.make_node("Softmax", ["x"], ["y"], axis=1 if opset < 13 else -1)
    (actual,) = _numpy_ops.softmax(node, attribute_values(node), opset)([x])
    bound = SOFTMAX_ULP_BOUND if tables.built() else 12.0
    assert _softmax_ulp_errors(actual, x).max() <= bound


@pytest.mark.parametrize("axis", [None, 0, 1, 2, -1, -2])
def test_softmax_before_opset_13_takes_the_sizes_from_axis_on_as_one(axis):
    x = np.random.default_rng(3).normal(0, 2, (2, 3, 4)).astype(np.float32)
    attributes = {} if axis is None else {"axis": axis}
    node = helper.make_node("Softmax", ["x"], ["y"], **attributes)
    (actual,) = _numpy_ops.softmax(node, attribute_values(node), 11)([x])
    start = (1 if axis is None else axis) % 3
    flat = x.reshape(int(np.prod(x.shape[:start])), -1).astype(np.float64)
    expected = np.exp(flat - flat.max(axis=1, keepdims=True))
    expected /= expected.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(actual, expected.reshape(x.shape), rtol=1e-6)
    if start < 2:  # there the rule differs from a softmax over the one axis
        single = np.exp(x - x.max(axis=start, keepdims=True))
        assert not np.allclose(actual, single / single.sum(axis=start, keepdims=True))


def test_softmax_with_the_opset_unknown_is_left_to_onnx_reference():
    node = helper.make_node("Softmax", ["x"], ["y"])
    assert _numpy_ops.softmax(node, {}, None) is None


# -- LayerNormalization ----------------------------------------------------------------------

@given(data=st.data(), rank=st.integers(1, 4), with_bias=st.booleans(),
       epsilon=st.sampled_from([None, 1e-12, 1e-5, 0.5]))
def test_layer_normalization_against_onnx_reference(data, rank, with_bias, epsilon):
    """Both compute in float32 in the same steps, with sums whose order
    differs (einsum here, np.sum there): within 1e-5 of the output's
    magnitude, plus the rounding of the mean (a few float32 epsilons of
    max |x|) magnified by 1 / sqrt(variance + epsilon) and the scale."""
    rng = np.random.default_rng(data.draw(st.integers(0, 2**31)))
    shape = tuple(data.draw(st.integers(1, 7)) for _ in range(rank))
    axis = data.draw(st.integers(-rank, rank - 1))
    x = (rng.normal(data.draw(st.sampled_from([0.0, 2.0])),
                    data.draw(st.sampled_from([0.01, 1.0, 20.0])), shape)).astype(np.float32)
    scale = rng.normal(0, 1, shape[axis % rank:]).astype(np.float32)
    bias = rng.normal(0, 1, scale.shape).astype(np.float32)
    attributes = {"axis": axis}
    if epsilon is not None:
        attributes["epsilon"] = epsilon
    inputs = ["x", "scale", "bias"] if with_bias else ["x", "scale"]
    arguments = [x, scale, bias] if with_bias else [x, scale]
    node = helper.make_node("LayerNormalization", inputs, ["y"], **attributes)
    (expected,) = _reference(node, arguments)[:1]
    (actual,) = _numpy_ops.layer_normalization(node, attribute_values(node), 21)(arguments)
    assert actual.dtype == np.float32 and actual.shape == x.shape
    magnitude = float(np.abs(expected).max())
    rows = x.astype(np.float64).reshape(int(np.prod(shape[:axis % rank])), -1)
    deviation = np.sqrt(rows.var(axis=1).min() + (1e-5 if epsilon is None else epsilon))
    conditioning = 8 * np.finfo(np.float32).eps * np.abs(x).max() / deviation
    np.testing.assert_allclose(actual, expected, rtol=1e-5,
                               atol=1e-5 * magnitude + conditioning * np.abs(scale).max())


@pytest.mark.parametrize("scale_shape, bias_shape", [((4, 1), None), ((4,), (4, 1)),
                                                    ((1, 1, 4), (4,)), ((2, 1, 4), None)])
def test_layer_normalization_with_a_scale_that_is_not_one_per_column(scale_shape, bias_shape):
    """A scale or bias that varies along an axis before the normalized one (or
    along a row's other axis) is applied as it broadcasts, not read as one
    value per column."""
    rng = np.random.default_rng(8)
    x = rng.normal(1, 2, (2, 4, 4)).astype(np.float32)
    scale = rng.normal(0, 1, scale_shape).astype(np.float32)
    arguments, inputs = [x, scale], ["x", "s"]
    if bias_shape is not None:
        arguments.append(rng.normal(0, 1, bias_shape).astype(np.float32))
        inputs.append("b")
    node = helper.make_node("LayerNormalization", inputs, ["y"])
    (actual,) = _numpy_ops.layer_normalization(node, attribute_values(node), 21)(arguments)
    wide = x.astype(np.float64)
    centred = wide - wide.mean(axis=-1, keepdims=True)
    expected = centred / np.sqrt((centred ** 2).mean(axis=-1, keepdims=True) + 1e-5) * scale
    if bias_shape is not None:
        expected = expected + arguments[2]
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-5)


def test_layer_normalization_is_onnx_s_definition_with_epsilon():
    """epsilon enters under the square root: with a row of variance 0.01 and
    epsilon 0.03 the normalized values halve."""
    x = np.array([[0.9, 1.1, 0.9, 1.1]], np.float32)
    scale = np.full(4, 2.0, np.float32)
    node = helper.make_node("LayerNormalization", ["x", "s"], ["y"], epsilon=0.03)
    (actual,) = _numpy_ops.layer_normalization(node, attribute_values(node), 21)([x, scale])
    np.testing.assert_allclose(actual, [[-1.0, 1.0, -1.0, 1.0]], rtol=1e-6)


def test_layer_normalization_of_float16_computes_in_float32():
    rng = np.random.default_rng(5)
    x = rng.normal(1, 2, (4, 64)).astype(np.float16)
    scale = rng.normal(0, 1, 64).astype(np.float16)
    bias = rng.normal(0, 1, 64).astype(np.float16)
    node = helper.make_node("LayerNormalization", ["x", "s", "b"], ["y"])
    (actual,) = _numpy_ops.layer_normalization(node, attribute_values(node), 21)(
        [x, scale, bias])
    assert actual.dtype == np.float16
    wide = x.astype(np.float64)
    centred = wide - wide.mean(axis=1, keepdims=True)
    expected = centred / np.sqrt((centred**2).mean(axis=1, keepdims=True) + 1e-5)
    expected = expected * scale.astype(np.float64) + bias.astype(np.float64)
    # float32 steps, then one rounding to float16
    np.testing.assert_allclose(actual, expected, rtol=2**-10, atol=2**-12)


@pytest.mark.parametrize("outputs, attributes", [(["y", "mean"], {}), (["y", "", "inv"], {}),
                                                 (["y"], {"stash_type": 0})])
def test_layer_normalization_asked_for_statistics_is_left_to_onnx_reference(outputs,
                                                                            attributes):
    node = helper.make_node("LayerNormalization", ["x", "s"], outputs, **attributes)
    assert _numpy_ops.layer_normalization(node, attribute_values(node), 21) is None


def test_float_matmul_of_strided_views_equals_numpy_and_leaves_blas_threads_as_they_were():
    from qops.onnx import _blas

    rng = np.random.default_rng(2)
    q = rng.normal(size=(1, 9, 3, 8)).astype(np.float32).transpose(0, 2, 1, 3)
    k = rng.normal(size=(1, 9, 3, 8)).astype(np.float32).transpose(0, 2, 3, 1)
    node = helper.make_node("MatMul", ["a", "b"], ["y"])
    libraries = _blas._blas_libraries()
    before = [library.num_threads for library in libraries]
    (actual,) = _blas.matmul(node, {}, 21)([q, k])
    np.testing.assert_array_equal(actual, np.matmul(np.ascontiguousarray(q),
                                                    np.ascontiguousarray(k)))
    assert [library.num_threads for library in libraries] == before
    integers = np.arange(6, dtype=np.int32).reshape(2, 3)
    (product,) = _blas.matmul(node, {}, 21)([integers, integers.T])
    np.testing.assert_array_equal(product, integers @ integers.T)


@pytest.mark.parametrize("layout", ["contiguous", "heads transposed", "keys transposed",
                                    "empty depth"])
def test_float_products_on_the_pool_are_numpy_s_bits_for_every_thread_count(layout):
    """Each matrix pair is one call of NumPy's own BLAS sgemm on the pool's
    threads: NumPy's matmul bit for bit, whatever the count."""
    from qops.onnx import _blas

    if not _blas._sgemm_64():
        pytest.skip("NumPy's BLAS has no cblas_sgemm of 64-bit integers here")
    rng = np.random.default_rng(4)
    depth = 0 if layout == "empty depth" else 64
    a = rng.normal(size=(2, 128, 6, depth)).astype(np.float32).transpose(0, 2, 1, 3)
    b = rng.normal(size=(2, 6, depth, 96)).astype(np.float32)
    if layout == "contiguous":
        a = np.ascontiguousarray(a)
    if layout == "keys transposed":
        b = np.ascontiguousarray(b.transpose(0, 1, 3, 2)).transpose(0, 1, 3, 2)
    expected = np.matmul(a, b)
    for n_threads in (1, 2, 5):
        got = _blas.one_blas_thread(_blas._pool_matmul, a, b, n_threads)
        assert got.shape == expected.shape and got.dtype == np.float32
        np.testing.assert_array_equal(got.view(np.uint32), expected.view(np.uint32))


def test_float_products_the_pool_cannot_take_are_left_to_numpy():
    """Another dtype, batch shapes that differ, or a matrix BLAS cannot read
    in place (neither rows nor columns of consecutive elements) are not the
    pool's: None, and the callers go on to NumPy; the kernel names what is
    wrong with arrays that do not describe products."""
    from qops.backends.native.kernels import _float_products
    from qops.onnx import _blas

    if not _blas._sgemm_64():
        pytest.skip("NumPy's BLAS has no cblas_sgemm of 64-bit integers here")
    a = np.ones((4, 8, 8), np.float32)
    assert _blas._pool_matmul(a.astype(np.float64), a.astype(np.float64), 2) is None
    assert _blas._pool_matmul(a, a[:1], 2) is None
    assert _blas._pool_matmul(np.ones((4, 8, 16), np.float32)[:, :, ::2], a, 2) is None
    unaligned = np.ndarray((4, 8, 8), np.float32, np.zeros(4 * 64 * 4 + 1, np.uint8).data, 1)
    assert not unaligned.flags.aligned
    assert _blas._pool_matmul(unaligned, a, 2) is None
    out = np.empty((4, 8, 8), np.float32)
    with pytest.raises(ValueError, match="do not describe the products"):
        _float_products.products(_blas._sgemm_64(), a, a, out[:, :, :4], 2)
    with pytest.raises(ValueError, match="do not describe the products"):
        _float_products.products(0, a, a, out, 2)
    with pytest.raises(ValueError, match="cannot read in place"):
        _float_products.products(_blas._sgemm_64(), np.ones((4, 8, 16), np.float32)[:, :, ::2],
                                 a, out, 2)
    # the run on NumPy's BLAS from there equals NumPy's
    node = helper.make_node("MatMul", ["a", "b"], ["y"])
    strided = np.arange(4 * 8 * 16, dtype=np.float32).reshape(4, 8, 16)[:, :, ::2]
    from qops.threads import threads_in_context

    with threads_in_context(2), mock.patch.object(_blas, "SHARED_MIN_WORK", 1):
        (product,) = _blas.matmul(node, {}, 21)([strided, a])
    np.testing.assert_array_equal(product, np.matmul(strided, a))


# -- Flatten, Reshape and Transpose ----------------------------------------------------------

def _tensor(data, rank):
    shape = tuple(data.draw(st.integers(0 if rank > 1 else 1, 4)) for _ in range(rank))
    return np.arange(math.prod(shape), dtype=np.float32).reshape(shape)


@given(data=st.data(), rank=st.integers(0, 4))
def test_flatten_against_onnx_reference(data, rank):
    x = _tensor(data, rank)
    axis = data.draw(st.integers(-rank, rank))
    node = helper.make_node("Flatten", ["x"], ["y"], axis=axis)
    (actual,) = _numpy_ops.flatten(node, attribute_values(node), 21)([x])
    at = axis % rank if rank and axis < 0 else axis
    assert actual.shape == (math.prod(x.shape[:at]), math.prod(x.shape[at:]))
    if x.size:  # onnx.reference's reshape of (rows, -1) fails on empty tensors
        (expected,) = _reference(node, [x])
        assert actual.shape == expected.shape and np.array_equal(actual, expected)


@given(data=st.data(), rank=st.integers(1, 4), allowzero=st.sampled_from([None, 0, 1]))
def test_reshape_against_onnx_reference(data, rank, allowzero):
    """Shapes that keep, copy (0), infer (-1) and, with allowzero, set a
    dimension to 0."""
    x = _tensor(data, rank)
    shape = list(x.shape)
    data.draw(st.randoms()).shuffle(shape)  # the same sizes in another order
    shape = [size for size in shape if size != 1] or [1]
    if x.size and data.draw(st.booleans()):
        shape = shape[:-1] + [-1] if len(shape) > 1 else [-1]
    if allowzero != 1 and data.draw(st.booleans()) and len(shape) <= rank:
        at = data.draw(st.integers(0, len(shape) - 1))
        if shape[at] == x.shape[at]:
            shape[at] = 0  # copied from x
    if math.prod(size for size in shape if size > 0) != x.size and -1 not in shape and (
            0 not in shape or allowzero == 1):
        shape = [x.size]
    attributes = {} if allowzero is None else {"allowzero": allowzero}
    node = helper.make_node("Reshape", ["x", "shape"], ["y"], **attributes)
    shape = np.array(shape, np.int64)
    try:
        (expected,) = _reference(node, [x, shape])
    except Exception:  # noqa: BLE001 - a shape onnx.reference refuses
        with pytest.raises(ValueError):
            _numpy_ops.reshape(node, attribute_values(node), 21)([x, shape])
        return
    (actual,) = _numpy_ops.reshape(node, attribute_values(node), 21)([x, shape])
    assert actual.shape == expected.shape and np.array_equal(actual, expected)


def test_reshape_before_opset_5_is_left_to_onnx_reference():
    node = helper.make_node("Reshape", ["x"], ["y"], shape=[2, 2])
    assert _numpy_ops.reshape(node, attribute_values(node), 4) is None


@given(data=st.data(), rank=st.integers(0, 4), with_perm=st.booleans())
def test_transpose_against_onnx_reference(data, rank, with_perm):
    x = _tensor(data, rank)
    attributes = {}
    if with_perm and rank:  # an empty perm cannot be written as an attribute
        perm = list(range(rank))
        data.draw(st.randoms()).shuffle(perm)
        attributes = {"perm": perm}
    node = helper.make_node("Transpose", ["x"], ["y"], **attributes)
    (expected,) = _reference(node, [x])
    (actual,) = _numpy_ops.transpose(node, attribute_values(node), 21)([x])
    assert actual.shape == expected.shape and np.array_equal(actual, expected)


def test_float_matmul_reads_transposed_heads_in_place_and_copies_other_views():
    """Attention's transposed heads (rows or columns of consecutive values)
    go to BLAS as they are; a view with a stride inside its rows is copied
    first.  Either way the product is NumPy's of the same values."""
    from qops.onnx import _blas

    rng = np.random.default_rng(6)
    q = rng.normal(0, 1, (1, 5, 3, 4)).astype(np.float32).transpose(0, 2, 1, 3)
    k = rng.normal(0, 1, (1, 5, 3, 4)).astype(np.float32).transpose(0, 2, 3, 1)
    every_other = rng.normal(0, 1, (3, 8, 10)).astype(np.float32)[:, :, ::2]
    assert _blas._blas_ready(q) is q and _blas._blas_ready(k) is k
    copied = _blas._blas_ready(every_other)
    assert copied is not every_other and copied.flags.c_contiguous
    node = helper.make_node("MatMul", ["a", "b"], ["y"])
    run = _blas.matmul(node, {}, 17)
    np.testing.assert_allclose(run([q, k])[0], np.ascontiguousarray(q) @ np.ascontiguousarray(k),
                               rtol=1e-6)
    other = rng.normal(0, 1, (3, 5, 8)).astype(np.float32)
    np.testing.assert_allclose(run([other, every_other])[0],
                               other @ np.ascontiguousarray(every_other), rtol=1e-6)


# -- Add, Sub and Mul ------------------------------------------------------------------------

@pytest.mark.parametrize("op_type", ["Add", "Sub", "Mul"])
@given(data=st.data(), dtype=st.sampled_from([np.float32, np.float64, np.float16, np.int32,
                                              np.int64, np.uint8, np.int8]))
def test_add_sub_and_mul_are_onnx_reference_s(op_type, data, dtype):
    """Broadcast operands of every rank, integers wrapping as onnx.reference's."""
    rng = np.random.default_rng(data.draw(st.integers(0, 2**31)))
    rank = data.draw(st.integers(0, 4))
    shape = tuple(data.draw(st.integers(1, 4)) for _ in range(rank))
    other = tuple(size if data.draw(st.booleans()) else 1 for size in shape)
    other = other[data.draw(st.integers(0, rank)):]
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        a, b = (rng.integers(info.min, info.max + 1, s, dtype=dtype) for s in (shape, other))
    else:
        a, b = (rng.normal(0, 100, s).astype(dtype) for s in (shape, other))
    if data.draw(st.booleans()):
        a, b = b, a
    node = helper.make_node(op_type, ["a", "b"], ["y"])
    (expected,) = _reference(node, [a, b])
    (actual,) = _numpy_ops.IMPLEMENTATIONS[op_type](node, {}, 21)([a, b])
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    np.testing.assert_array_equal(actual, expected)


def test_add_of_two_types_is_refused_as_onnx_reference_refuses_it():
    node = helper.make_node("Add", ["a", "b"], ["y"])
    with pytest.raises(TypeError, match="Add: A is float32 and B float64; both take one type"):
        _numpy_ops.add(node, {}, 21)([np.ones(2, np.float32), np.ones(2)])


# -- Gelu, BiasGelu and FastGelu -------------------------------------------------------------

def _typed_reference(node, arguments, opset=20, domain=""):
    """onnx.reference's run of a node whose function depends on its inputs'
    types (Gelu's constants are CastLike X), the inputs declared."""
    inputs = [helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(value.dtype),
                                            None)
              for name, value in zip(node.input, arguments)]
    model = helper.make_model(helper.make_graph([node], "g", inputs, []),
                              opset_imports=[helper.make_opsetid(domain, opset)])
    return ReferenceEvaluator(model).rt_nodes_[0].run(*arguments)


def _gelu_inputs(dtype, seed=0):
    rng = np.random.default_rng(seed)
    x = np.concatenate([rng.normal(0, 3, 4000), np.linspace(-12, 12, 2401),
                        [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-30, -1e-30, 1e4, -1e4]])
    return x.astype(dtype)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_gelu_s_tanh_form_is_onnx_reference_s_bit_for_bit(dtype):
    x = _gelu_inputs(dtype).reshape(2, -1)
    node = helper.make_node("Gelu", ["x"], ["y"], approximate="tanh")
    with np.errstate(all="ignore"):
        (expected,) = _typed_reference(node, [x])
        (actual,) = _numpy_ops.gelu(node, attribute_values(node), 20)([x])
    assert actual.dtype == x.dtype and actual.shape == x.shape
    np.testing.assert_array_equal(actual, expected)


def _gelu_erf_bound(x, expected, mantissa_bits):
    """The erf form's distance from onnx.reference's, elementwise: erf within
    2 ulp on each side of 1 + erf, whose rounding (1 + erf is below 2) adds
    half an ulp of 1 on each, times 0.5 |x|; then an ulp of the result on
    each side.  Near large negative x, 1 + erf cancels: the bound is |x|'s."""
    unit = 2.0 ** -mantissa_bits
    spacing = np.spacing(np.abs(expected).astype(x.dtype)).astype(np.float64)
    return 0.5 * np.abs(x.astype(np.float64)) * (4 * unit + 2 * unit) + 2 * spacing


@pytest.mark.parametrize("dtype, mantissa_bits", [(np.float32, 24), (np.float16, 11)])
@pytest.mark.parametrize("kernels", [True, False], ids=["kernels", "numpy"])
def test_gelu_s_erf_form_is_onnx_reference_s_within_the_erf_bound(dtype, mantissa_bits,
                                                                   kernels):
    x = _gelu_inputs(dtype)
    x = x[np.isfinite(x)]
    node = helper.make_node("Gelu", ["x"], ["y"])
    with np.errstate(all="ignore"):
        (expected,) = _typed_reference(node, [x])
        if kernels:
            (actual,) = _numpy_ops.gelu(node, {}, 20)([x])
        else:
            with _without_kernels():
                (actual,) = _numpy_ops.gelu(node, {}, 20)([x])
    assert actual.dtype == x.dtype
    error = np.abs(actual.astype(np.float64) - expected.astype(np.float64))
    bound = _gelu_erf_bound(x, expected, mantissa_bits)
    assert (error <= bound).all(), (x[(error > bound)][:5], error.max())


@pytest.mark.parametrize("variant", _simd.quantize_variants())
def test_gelu_s_erf_form_takes_the_function_s_steps_around_the_kernel_erf(variant):
    """(0.5 * x) * (1 + erf(x / sqrt(2))), the steps of ONNX's function, with
    the erf of the same kernel (tables.erf_float32): bit for bit, special
    values included, on 1 and 2 threads; the fused GELU's order (x * (erf +
    1)) * 0.5 as well."""
    x = _gelu_inputs(np.float32, seed=5)
    x = np.concatenate([x, [3e38, -3e38, 2.0**-149, -(2.0**-126)]]).astype(np.float32)
    root_two = np.sqrt(np.float32(2))
    erf = tables.erf_float32(x / root_two, variant=variant)
    with np.errstate(all="ignore"):
        onnx_order = (np.float32(0.5) * x) * (np.float32(1) + erf)
        model_order = (x * (erf + np.float32(1))) * np.float32(0.5)
    for threads in (1, 2):
        np.testing.assert_array_equal(
            tables.gelu_float32(x, root_two, 1, 0.5, factor_first=True, n_threads=threads,
                                variant=variant), onnx_order)
        np.testing.assert_array_equal(
            tables.gelu_float32(x, root_two, 1, 0.5, n_threads=threads, variant=variant),
            model_order)
    # The two orders part where x times the sum overflows.
    assert np.isinf(model_order[-4]) and onnx_order[-4] == np.float32(3e38)


def test_gelu_takes_only_its_approximations_and_float_types():
    with pytest.raises(ValueError, match="Gelu: approximate is 'erf'; it takes 'none' or 'tanh'"):
        _numpy_ops.gelu(helper.make_node("Gelu", ["x"], ["y"], approximate="erf"),
                        {"approximate": "erf"}, 20)
    run = _numpy_ops.gelu(helper.make_node("Gelu", ["x"], ["y"]), {}, 20)
    with pytest.raises(TypeError, match="Gelu: X is int32; it takes float16, float32, float64"):
        run([np.ones(3, np.int32)])


def test_onnxruntime_s_gelu_and_bias_gelu_are_onnx_s_gelu():
    rng = np.random.default_rng(11)
    a = rng.normal(0, 3, (7, 300)).astype(np.float32)
    bias = rng.normal(0, 1, 300).astype(np.float32)
    gelu = _numpy_ops.gelu(helper.make_node("Gelu", ["x"], ["y"]), {}, 20)
    node = helper.make_node("Gelu", ["x"], ["y"], domain="com.microsoft")
    (plain,) = _numpy_ops.contrib_gelu(node, {}, 1)([a])
    np.testing.assert_array_equal(plain, gelu([a])[0])
    node = helper.make_node("BiasGelu", ["a", "b"], ["y"], domain="com.microsoft")
    (biased,) = _numpy_ops.bias_gelu(node, {}, 1)([a, bias])
    np.testing.assert_array_equal(biased, gelu([a + bias])[0])
    with pytest.raises(TypeError, match="BiasGelu: A is float32 and B float64"):
        _numpy_ops.bias_gelu(node, {}, 1)([a, bias.astype(np.float64)])


@pytest.mark.parametrize("with_bias", [False, True])
def test_fast_gelu_is_its_schema_s_formula_left_to_right(with_bias):
    rng = np.random.default_rng(12)
    x = rng.normal(0, 3, (5, 64)).astype(np.float32)
    bias = rng.normal(0, 1, 64).astype(np.float32)
    node = helper.make_node("FastGelu", ["x", "bias"] if with_bias else ["x"], ["y"],
                            domain="com.microsoft")
    (actual,) = _numpy_ops.fast_gelu(node, {}, 1)([x, bias] if with_bias else [x])
    v = x + bias if with_bias else x
    f = np.float32
    inner = f(0.797885) * v + f(0.035677) * v * v * v
    np.testing.assert_array_equal(actual, f(0.5) * v * (f(1) + np.tanh(inner)))


@pytest.mark.parametrize("op_type, inputs", [("BiasGelu", ["a"]), ("BiasGelu", ["a", "b", "c"]),
                                             ("FastGelu", []), ("FastGelu", ["", "bias"]),
                                             ("Gelu", ["x", "y"])])
def test_gelu_nodes_of_the_wrong_input_count_are_refused_where_they_load(op_type, inputs):
    node = helper.make_node(op_type, inputs, ["y"], domain="com.microsoft")
    with pytest.raises(ValueError, match=f"{op_type} takes"):
        _numpy_ops.CONTRIB_IMPLEMENTATIONS[op_type](node, {}, 1)


def test_onnx_s_gelu_before_opset_20_is_not_taken():
    node = helper.make_node("Gelu", ["x"], ["y"])
    assert _numpy_ops.gelu(node, {}, 17) is None
    assert _numpy_ops.gelu(node, {}, 20) is not None
