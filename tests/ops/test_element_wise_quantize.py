"""``qops.element_wise_quantize_linear`` and ``element_wise_dequantize_linear``
against onnx.reference's QuantizeLinear / DequantizeLinear where the
parameters are per tensor or per axis, the rule written out here for any
broadcast, the kernels against the reference, and the level history."""

import numpy as np
import pytest
from conftest import run_reference
from hypothesis import given, settings
from hypothesis import strategies as st

import qops
from qops.backends import dispatch
from qops.ops.element_wise_quantize import prepare_dequantize, prepare_quantize

INPUTS = [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32]


def stated_quantize(x, scale, zero_point, dtype):
    """round_half_even(float32(x) / float32(scale)) + zero_point, saturated
    (NaN gives the zero point), element by element on NumPy scalars."""
    x, scale = np.broadcast_arrays(np.asarray(x), np.asarray(scale))
    zero = np.broadcast_to(np.asarray(0 if zero_point is None else zero_point), x.shape)
    info = np.iinfo(dtype)
    out = np.empty(x.shape, dtype)
    for index in np.ndindex(x.shape):
        with np.errstate(all="ignore"):
            quotient = np.float32(np.float32(x[index]) / np.float32(scale[index]))
        value = 0 if np.isnan(quotient) else float(np.rint(quotient))
        out[index] = min(max(value + int(zero[index]), info.min), info.max)
    return out


def stated_dequantize(x, scale, zero_point):
    """(float32(x) - zero_point) * scale as ONNX's reference computes it:
    the subtraction in NumPy's promotion, the result in the scale's type."""
    scale = np.asarray(scale)
    centred = np.asarray(x).astype(np.float32)
    if zero_point is not None:
        centred = centred - np.asarray(zero_point)
    with np.errstate(over="ignore"):  # past float16's range is infinity
        return (centred * scale).astype(scale.dtype)


@st.composite
def parameter_shapes(draw, shape):
    form = draw(st.sampled_from(["tensor", "axis", "broadcast"]))
    if form == "tensor":
        return (1,) * len(shape)
    if form == "axis":
        axis = draw(st.integers(0, len(shape) - 1))
        return tuple(size if i == axis else 1 for i, size in enumerate(shape))
    return tuple(size if draw(st.booleans()) else 1 for size in shape)


@settings(max_examples=80, deadline=None)
@given(data=st.data())
def test_quantize_equals_the_stated_rule(data):
    shape = tuple(data.draw(st.lists(st.integers(1, 5), min_size=1, max_size=4), label="shape"))
    x_type = data.draw(st.sampled_from([np.float32, np.float16, np.int32]), label="x_type")
    out_type = data.draw(st.sampled_from([np.uint8, np.int8]), label="out_type")
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))
    scale_shape, zero_shape = data.draw(parameter_shapes(shape)), data.draw(parameter_shapes(shape))
    scale_type = np.float32 if x_type is np.int32 else x_type
    x = (rng.standard_normal(shape) * 300).astype(x_type)
    scale = rng.uniform(0.25, 4.0, scale_shape).astype(scale_type)
    info = np.iinfo(out_type)
    zero = rng.integers(info.min, info.max + 1, zero_shape).astype(out_type)
    zero = zero if data.draw(st.booleans(), label="with_zero") else None
    got = qops.element_wise_quantize_linear(x, scale, zero, output_dtype=out_type,
                                            n_threads=data.draw(st.sampled_from([1, 2])))
    assert got.dtype == out_type
    assert np.array_equal(got, stated_quantize(x, scale, zero, out_type))


@settings(max_examples=80, deadline=None)
@given(data=st.data())
def test_dequantize_equals_the_stated_rule(data):
    shape = tuple(data.draw(st.lists(st.integers(1, 5), min_size=1, max_size=4), label="shape"))
    x_type = data.draw(st.sampled_from(INPUTS), label="x_type")
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))
    scale_shape, zero_shape = data.draw(parameter_shapes(shape)), data.draw(parameter_shapes(shape))
    info = np.iinfo(x_type)
    x = rng.integers(info.min, info.max, shape, dtype=np.int64, endpoint=True).astype(x_type)
    scale = rng.uniform(0.001, 0.1, scale_shape).astype(
        data.draw(st.sampled_from([np.float32, np.float16]), label="scale_type"))
    zero = rng.integers(info.min, info.max, zero_shape, dtype=np.int64, endpoint=True).astype(x_type)
    zero = zero if data.draw(st.booleans(), label="with_zero") else None
    got = qops.element_wise_dequantize_linear(x, scale, zero,
                                              n_threads=data.draw(st.sampled_from([1, 2])))
    want = stated_dequantize(x, scale, zero)
    assert got.dtype == want.dtype and np.array_equal(got.view(np.uint8), want.view(np.uint8))


@pytest.mark.parametrize("form", ["tensor", "axis 0", "axis 1", "axis 2"])
@pytest.mark.parametrize("out_type", [np.uint8, np.int8])
def test_per_tensor_and_per_axis_equal_onnx_reference(form, out_type):
    """The forms ONNX can state: QuantizeLinear and DequantizeLinear of
    onnx.reference give the same bytes."""
    rng = np.random.default_rng(4)
    shape = (3, 5, 7)
    axis = None if form == "tensor" else int(form[-1])
    count = 1 if axis is None else shape[axis]
    params_shape = [1] * 3
    if axis is not None:
        params_shape[axis] = count
    x = (rng.standard_normal(shape) * 200).astype(np.float32)
    scale = rng.uniform(0.5, 2.0, count).astype(np.float32)
    info = np.iinfo(out_type)
    zero = rng.integers(info.min, info.max + 1, count).astype(out_type)
    got = qops.element_wise_quantize_linear(x, scale.reshape(params_shape),
                                            zero.reshape(params_shape))
    attributes = {} if axis is None else {"axis": axis}
    onnx_scale = scale.reshape(()) if axis is None else scale
    onnx_zero = zero.reshape(()) if axis is None else zero
    want = run_reference("QuantizeLinear", {"x": x, "y_scale": onnx_scale,
                                            "y_zero_point": onnx_zero}, attributes, opset=23,
                         output_dtype=out_type)
    assert np.array_equal(got, want)
    back = qops.element_wise_dequantize_linear(got, scale.reshape(params_shape),
                                               zero.reshape(params_shape))
    want_back = run_reference("DequantizeLinear", {"x": got, "x_scale": onnx_scale,
                                                   "x_zero_point": onnx_zero}, attributes,
                              opset=23, output_dtype=np.float32)
    assert np.array_equal(back, want_back)


@pytest.mark.parametrize("operator", ["quantize", "dequantize"])
@pytest.mark.parametrize("form", ["tensor", "axis", "broadcast"])
def test_the_kernels_equal_the_reference(operator, form):
    rng = np.random.default_rng(5)
    shape = (4, 33, 65)
    params_shape = {"tensor": (1, 1, 1), "axis": (1, 33, 1), "broadcast": (4, 1, 65)}[form]
    if operator == "quantize":
        x = (rng.standard_normal(shape) * 100).astype(np.float32)
        call = prepare_quantize(dict(input=x, scale=rng.uniform(0.1, 2, params_shape).astype(
            np.float32), zero_point=rng.integers(-128, 128, params_shape).astype(np.int8)), {})
    else:
        x = rng.integers(-30000, 30000, shape).astype(np.int16)
        call = prepare_dequantize(dict(input=x, scale=rng.uniform(0.01, 2, params_shape).astype(
            np.float16), zero_point=rng.integers(-300, 300, params_shape).astype(np.int16)), {})
    assert dispatch.select(call).name == ("reference" if form == "broadcast" else "kernels")
    want = dispatch.execute(call, 1, implementation="reference")
    for n_threads in (1, 2):
        got = dispatch.execute(call, n_threads)
        assert np.array_equal(got.view(np.uint8), want.view(np.uint8))


X4 = np.linspace(-3, 3, 24, dtype=np.float32).reshape(1, 2, 3, 4)


@pytest.mark.parametrize("call, level, message", [
    (dict(input=X4[0], scale=0.5, zero_point=np.uint8(1)), "2_1",
     "input has 3 dimensions; DML_FEATURE_LEVEL_2_1 supports 4 (1 to 8 from DML_FEATURE_LEVEL_3_0)"),
    (dict(input=X4, scale=0.5), "6_0",
     "zero_point is required at DML_FEATURE_LEVEL_6_0 (optional from DML_FEATURE_LEVEL_6_2)"),
    (dict(input=X4.astype(np.float16), scale=np.float16(0.5), zero_point=np.uint8(1)), "3_0",
     "input has dtype float16; DML_FEATURE_LEVEL_3_0 supports float32, int32"),
    (dict(input=X4, scale=0.5, zero_point=np.int8(1)), "1_0",
     "zero_point has dtype int8; DML_FEATURE_LEVEL_1_0 supports uint8"),
    (dict(input=X4.astype(np.int32), scale=np.float32(0.5), zero_point=np.uint8(1)), "1_0",
     "input has dtype int32; DML_FEATURE_LEVEL_1_0 supports float32"),
    (dict(input=X4.astype(np.float16), scale=np.float32(0.5)), None,
     "scale is float32 with an input of float16; it must be float16"),
    (dict(input=X4, scale=np.ones((1, 2, 2, 4), np.float32)), None,
     "must have the same sizes; input has (1, 2, 3, 4)"),
    (dict(input=X4, scale=np.ones((3, 4), np.float32)), None,
     "must have the same dimension count"),
    (dict(input=X4, scale=0.0), None, "scale has a zero value"),
])
def test_quantize_level_history_and_rules(call, level, message):
    with pytest.raises(qops.ValidationError) as error:
        qops.element_wise_quantize_linear(**call, feature_level=level)
    assert message in str(error.value)


def test_dequantize_level_history_and_types():
    x = np.arange(24, dtype=np.uint8).reshape(1, 2, 3, 4)
    assert qops.element_wise_dequantize_linear(x, 0.5, np.uint8(2), feature_level="1_0").dtype \
        == np.float32
    with pytest.raises(qops.ValidationError, match="input has dtype int8; DML_FEATURE_LEVEL_1_0 "
                                                   "supports uint8"):
        qops.element_wise_dequantize_linear(x.astype(np.int8), 0.5, np.int8(2),
                                            feature_level="1_0")
    with pytest.raises(qops.ValidationError, match="scale has dtype float16; "
                                                   "DML_FEATURE_LEVEL_3_0 supports float32"):
        qops.element_wise_dequantize_linear(x, np.float16(0.5), np.uint8(2), feature_level="3_0")
    half = qops.element_wise_dequantize_linear(x, np.float16(0.5), np.uint8(2),
                                               feature_level="6_0")
    assert half.dtype == np.float16 and np.array_equal(half, (x.astype(np.float32) - 2) * 0.5)
    with pytest.raises(qops.ValidationError, match="input and zero_point must have the same "
                                                   "data type"):
        qops.element_wise_dequantize_linear(x, 0.5, np.int8(2))
