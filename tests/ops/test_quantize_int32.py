"""QuantizeLinear of an int32 ``x`` (every opset) and with an int32 scale
(opset 19 on).

The rule qops implements is the schema's ``float32(x) / float32(y_scale)``:
both operands rounded to float32 (nearest, ties to even), one float32
division, then round half to even, the zero point and saturation.  The
expected values below come from :func:`independent`, which states that rule
with exact rational arithmetic (``fractions``), Python's own rounding and
plain clamping, sharing no code with qops.  ``onnx.reference`` divides int32
by float32 in float64 instead; :func:`test_differences_from_onnx_reference_are_the_rule`
checks that every element where it disagrees is one where the two rules
round differently, and that such elements exist.
"""

from __future__ import annotations

import math
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from conftest import run_reference
from hypothesis import given, settings
from hypothesis import strategies as st

import qops
from qops.backends import dispatch as _dispatch
from qops.backends.native import quantize as _quantize_native
from qops.backends.native import variants as _simd
from qops.ops import quantize as _ops

I32 = np.dtype(np.int32)
F32, F16, BF16 = np.dtype(np.float32), np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)
#: Integer outputs per opset, with their inclusive ranges (written out here).
RANGES = {
    np.dtype(np.int8): (-128, 127), np.dtype(np.uint8): (0, 255),
    np.dtype(np.int16): (-32768, 32767), np.dtype(np.uint16): (0, 65535),
    np.dtype(ml_dtypes.int4): (-8, 7), np.dtype(ml_dtypes.uint4): (0, 15),
    np.dtype(ml_dtypes.int2): (-2, 1), np.dtype(ml_dtypes.uint2): (0, 3),
}
_EIGHT = (np.dtype(np.int8), np.dtype(np.uint8))
_SIXTEEN_FOUR = tuple(np.dtype(t) for t in (np.int16, np.uint16, ml_dtypes.int4, ml_dtypes.uint4))
_TWO = (np.dtype(ml_dtypes.int2), np.dtype(ml_dtypes.uint2))
OUTPUTS = {10: _EIGHT, 13: _EIGHT, 19: _EIGHT, 21: _EIGHT + _SIXTEEN_FOUR,
           23: _EIGHT + _SIXTEEN_FOUR, 24: _EIGHT + _SIXTEEN_FOUR,
           25: _EIGHT + _SIXTEEN_FOUR + _TWO, 28: _EIGHT + _SIXTEEN_FOUR + _TWO}
OPSETS = tuple(OUTPUTS)


def scale_types(opset):
    """The scale types an int32 x may have at ``opset`` (onnx.defs): float32
    before 19; int32 only in 19 and 21 (x and the scale share T1); from 23
    any float type or int32."""
    if opset < 19:
        return (F32,)
    if opset in (19, 21):
        return (I32,)
    return (F32, F16, BF16, I32)


def _float32_fraction(value):
    """The exact value of ``value`` rounded to float32."""
    return Fraction(float(np.float32(value)))


def independent(x, scale, zero_point, out_dtype):
    """The rule, one element at a time: float32(x) / float32(scale) rounded
    once to float32, then half to even, plus the zero point, clamped.

    The quotient of two float32 values rounded to double and then to float32
    is the correctly rounded float32 quotient (double has more than twice
    float32's digits), so ``float(Fraction)`` then ``np.float32`` states it.
    """
    low, high = RANGES[out_dtype]
    x = np.asarray(x)
    scale = np.broadcast_to(np.asarray(scale), x.shape)
    zero = np.broadcast_to(np.asarray(0 if zero_point is None else zero_point).astype(np.int64),
                           x.shape)
    result = np.empty(x.shape, np.int64)
    for index in np.ndindex(x.shape):
        exact = _float32_fraction(int(x[index])) / _float32_fraction(scale[index].item())
        with np.errstate(over="ignore"):
            quotient = float(np.float32(float(exact)))
        if math.isinf(quotient):
            value = high if quotient > 0 else low
        else:
            value = min(max(round(quotient) + int(zero[index]), low), high)
        result[index] = value
    return result.astype(out_dtype)


@st.composite
def int32_values(draw, size):
    """int32 values that probe the rule: small ones, the extremes, values past
    2**24 (which float32 rounds), odd neighbours of large powers of two."""
    pool = st.one_of(
        st.integers(-300, 300),
        st.integers(-(2**31), 2**31 - 1),
        st.sampled_from([-(2**31), 2**31 - 1, 2**24 - 1, 2**24 + 1, 2**24 + 3, -(2**24) - 1,
                         2**25 + 3, 2**30 + 2**22 + 1, 0]),
        st.integers(2**24, 2**26).map(lambda v: v | 1),
    )
    return np.array(draw(st.lists(pool, min_size=size, max_size=size)), np.int32)


@st.composite
def cases(draw):
    opset = draw(st.sampled_from(OPSETS))
    out_dtype = draw(st.sampled_from(OUTPUTS[opset]))
    scale_dtype = draw(st.sampled_from(scale_types(opset)))
    size = draw(st.integers(1, 40))
    x = draw(int32_values(size))
    if scale_dtype == I32:
        scale = np.array(draw(st.one_of(st.integers(1, 1000), st.integers(1, 2**31 - 1))), I32)
    else:
        exponent = draw(st.floats(-4, 14 if scale_dtype == F16 else 26, allow_nan=False))
        scale = np.array(2.0 ** exponent * draw(st.sampled_from([1.0, 1.1, 3.0, 0.7]))) \
            .astype(scale_dtype)
    low, high = RANGES[out_dtype]
    zero_point = None
    if draw(st.booleans()) or out_dtype not in (np.dtype(np.uint8),) and opset < 21:
        zero_point = np.array(draw(st.integers(low, high))).astype(out_dtype)
    return opset, x, scale, zero_point, out_dtype


def call_qops(opset, x, scale, zero_point, out_dtype, **kwargs):
    if zero_point is None and out_dtype != np.dtype(np.uint8):
        kwargs["output_dtype"] = out_dtype
    return qops.quantize_linear(x, scale, zero_point, opset=opset, **kwargs)


@settings(max_examples=400, deadline=None)
@given(case=cases())
def test_int32_x_is_the_schema_rule(case):
    opset, x, scale, zero_point, out_dtype = case
    expected = independent(x, scale, zero_point, out_dtype)
    got = call_qops(opset, x, scale, zero_point, out_dtype)
    assert got.dtype == out_dtype
    assert np.array_equal(got.astype(np.int64), expected.astype(np.int64)), (x, scale, zero_point)
    reference = qops.reference.quantize_linear(x, scale, zero_point, output_dtype=out_dtype)
    assert np.array_equal(reference.astype(np.int64), expected.astype(np.int64))


@pytest.mark.parametrize("opset", OPSETS)
def test_int32_x_every_opset_by_hand(opset):
    """2**24 + 257 is not a float32: it rounds to 2**24 + 256, whose quotient
    by 512 is the tie 32768.5, which rounds to even; the exact quotient
    32768.50195... would round up."""
    x = np.array([2**24 + 257, 7, -7, 5, 2**31 - 1, -(2**31)], np.int32)
    scale = np.array(2, np.int32) if opset in (19, 21) else np.float32(2.0)
    got = qops.quantize_linear(x, scale, np.uint8(10), opset=opset)
    assert got.tolist() == [255, 14, 6, 12, 255, 0]
    if opset >= 21:
        got = qops.quantize_linear(x[:1], np.float32(512.0) if opset >= 23 else np.int32(512),
                                   np.uint16(0), opset=opset)
        assert got.tolist() == [32768]


def test_int32_scale_is_made_float32_first():
    """2**31 - 1 as float32 is 2**31; x = 2**31 - 1 over it is then 1.0 exactly."""
    x = np.array([2**31 - 1, 2**30 + 2**6, 3 * 2**29], np.int32)
    got = qops.quantize_linear(x, np.int32(2**31 - 1), np.int8(0), opset=25)
    assert got.tolist() == [1, 0, 1]


@pytest.mark.parametrize("precision", [F32, F16, BF16], ids=str)
def test_int32_x_with_precision(precision):
    """With ``precision`` the float32 values are rounded once more to it, and
    the quotient too (bfloat16's double rounding of 2**30 + 2**22 + 1 is
    float32's first)."""
    x = np.array([2**30 + 2**22 + 1, 1000, -999, 65519, 3], np.int32)
    got = qops.quantize_linear(x, np.int32(1), np.int32(0).astype(np.int16), opset=23,
                               precision=precision)
    with np.errstate(over="ignore"):
        widened = x.astype(np.float32).astype(precision).astype(np.float64)
    expected = np.clip(np.rint(widened), -32768, 32767).astype(np.int16)
    assert np.array_equal(got, expected)


@pytest.mark.parametrize("opset", [10, 13, 23, 25, 28])
def test_python_number_scale_is_float32_beside_int32(opset):
    x = np.array([3, 5], np.int32)
    assert qops.quantize_linear(x, 2.0, np.int8(0), opset=opset).tolist() == [2, 2]


@pytest.mark.parametrize("opset", [19, 21])
def test_python_number_scale_takes_x_type_where_shared(opset):
    x = np.array([3, 5], np.int32)
    assert qops.quantize_linear(x, 2, np.int8(0), opset=opset).tolist() == [2, 2]
    with pytest.raises(qops.ValidationError, match="y_scale is 0.5; as int32 it must be a whole"):
        qops.quantize_linear(x, 0.5, np.int8(0), opset=opset)


@pytest.mark.parametrize("opset,x_dtype,scale_dtype,fragments", [
    (13, I32, I32, ["QuantizeLinear", "y_scale has dtype int32", "opset 13", "float32",
                    "int32 from opset 19"]),
    (19, I32, F32, ["QuantizeLinear", "x and y_scale must have the same data type",
                    "x is int32", "y_scale is float32"]),
    (21, F32, I32, ["x and y_scale must have the same data type", "y_scale is int32"]),
])
def test_int32_refusals_name_operator_slot_and_types(opset, x_dtype, scale_dtype, fragments):
    with pytest.raises(qops.ValidationError) as error:
        qops.quantize_linear(np.ones(3, x_dtype), np.ones((), scale_dtype), np.int8(0),
                             opset=opset)
    for fragment in fragments:
        assert fragment in str(error.value)


@pytest.mark.parametrize("value", [0, -3])
def test_int32_scale_must_be_positive(value):
    with pytest.raises(qops.ValidationError, match="QuantizeLinear: y_scale has a (zero|negative)"):
        qops.quantize_linear(np.ones(3, I32), np.array(value, I32), np.int8(0), opset=25)


@pytest.mark.parametrize("layout", ["tensor", "axis", "blocked"])
@pytest.mark.parametrize("scale_dtype", [F32, I32, F16], ids=str)
@pytest.mark.parametrize("out_dtype", [np.dtype(np.int8), np.dtype(np.uint16),
                                       np.dtype(ml_dtypes.int4)], ids=str)
def test_kernels_every_variant_equal_the_reference(layout, scale_dtype, out_dtype):
    """The compiled kernels (every variant here, one and two threads) read
    int32 x themselves, and give the reference's bits."""
    rng = np.random.default_rng(7)
    x = np.concatenate([rng.integers(-(2**31), 2**31, 3000, dtype=np.int64),
                        rng.integers(-400, 400, 3000)]).astype(np.int32).reshape(6, 1000)
    if layout == "tensor":
        scale, kwargs = np.array(3.0).astype(scale_dtype), {}
    elif layout == "axis":
        scale, kwargs = (np.arange(1, 7) * 3).astype(scale_dtype), dict(axis=0)
    else:
        scale, kwargs = (np.arange(1, 6 * 250 + 1) % 9 + 1).reshape(6, 250).astype(scale_dtype), \
            dict(axis=1, block_size=4)
    zero_point = np.zeros(scale.shape, out_dtype)
    attributes = dict(axis=kwargs.get("axis", 1), block_size=kwargs.get("block_size", 0),
                      saturate=True, output_dtype=None, precision=None)
    call = _ops.prepare_quantize(dict(x=x, y_scale=scale, y_zero_point=zero_point), attributes,
                                 opset=25)
    expected = _dispatch.execute(call, 1, implementation="reference")
    assert _dispatch.select(call, exclude=("lean",)).name == "kernels"
    for variant in _simd.quantize_variants():
        for threads in (1, 2):
            got = np.empty(call.output_shape, call.output_dtype)
            _quantize_native.run_quantize(call, got, threads, variant=variant)
            assert np.array_equal(got.view(np.uint8), expected.view(np.uint8)), (variant, threads)
    full_scale = scale if layout != "blocked" else np.repeat(scale, 4, axis=1)[:, :1000]
    if layout == "axis":
        full_scale = scale.reshape(6, 1)
    wanted = independent(x, np.broadcast_to(full_scale, x.shape), None, out_dtype)
    assert np.array_equal(expected.astype(np.int64), wanted.astype(np.int64))


def _onnx_int32_model_result(x, scale, zero_point, opset):
    return run_reference("QuantizeLinear", {"x": x, "y_scale": scale, "y_zero_point": zero_point},
                         {}, opset=opset, output_dtype=zero_point.dtype)


#: A fixed sample for the comparison with onnx.reference: every int32 up to
#: 4096 in magnitude, random ones of every size, odd ones past 2**24.
def comparison_sample():
    rng = np.random.default_rng(2024)
    return np.concatenate([
        np.arange(-4096, 4097),
        rng.integers(-(2**31), 2**31, 20000, dtype=np.int64),
        rng.integers(2**24, 2**27, 20000, dtype=np.int64) | 1,
        -(rng.integers(2**24, 2**27, 20000, dtype=np.int64) | 1),
    ]).astype(np.int32)


COMPARISON_SCALES = [np.float32(v) for v in (1.0, 3.0, 0.7, 1 / 3, 2.0**-7, 255.0, 512.0,
                                             100000.0, 1048576.0, 12345.678)]


def onnx_differences(x, scale, out_dtype):
    """``(qops, onnx.reference, indices where they differ)`` for one scale."""
    zero_point = np.zeros((), out_dtype)
    ours = qops.quantize_linear(x, scale, zero_point, opset=25)
    # onnx.reference casts a quotient past the int32 range to int32, which is
    # undefined: only quotients inside it are compared.
    keep = np.abs(x.astype(np.float64) / float(scale)) < 2.0**31 - 2**8
    theirs = _onnx_int32_model_result(x[keep], scale, zero_point, 25)
    return ours[keep], theirs, np.flatnonzero(ours[keep] != theirs), x[keep]


@pytest.mark.parametrize("out_dtype", [np.dtype(np.int16), np.dtype(np.uint16),
                                       np.dtype(np.int8)], ids=str)
def test_differences_from_onnx_reference_are_the_rule(out_dtype):
    x = comparison_sample()
    total = 0
    for scale in COMPARISON_SCALES:
        ours, theirs, where, kept = onnx_differences(x, scale, out_dtype)
        total += where.size
        if where.size:
            low, high = RANGES[out_dtype]
            exact = np.clip(np.rint(kept[where].astype(np.float64) / float(scale)), low, high)
            assert np.array_equal(theirs[where].astype(np.float64), exact)
            assert np.array_equal(ours[where], independent(kept[where], scale, None, out_dtype))
    if out_dtype == np.dtype(np.uint16):
        # The sample holds ties that float32 makes (2**24 + 257 by 512 among them).
        assert total > 0


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), layout=st.sampled_from(["tensor", "axis", "blocked"]),
       scale_dtype=st.sampled_from([F32, I32, F16]),
       out_dtype=st.sampled_from(_EIGHT + _SIXTEEN_FOUR + _TWO),
       shape=st.tuples(st.integers(1, 4), st.integers(1, 50)), data=st.data())
def test_every_variant_and_thread_count_is_the_rule(seed, layout, scale_dtype, out_dtype, shape,
                                                    data):
    """Hypothesis over layouts, scale types and output types: every kernel
    variant at one and two threads gives the independent statement's values."""
    rng = np.random.default_rng(seed)
    x = data.draw(int32_values(shape[0] * shape[1])).reshape(shape)
    scale_shape = {"tensor": (), "axis": (shape[0],), "blocked": (shape[0], -(-shape[1] // 4))}
    if scale_dtype == I32:
        scale = rng.integers(1, 5000, scale_shape[layout]).astype(I32)
    else:
        scale = (2.0 ** rng.uniform(-4, 14, scale_shape[layout])).astype(scale_dtype)
    low, high = RANGES[out_dtype]
    zero_point = rng.integers(low, high + 1, scale.shape).astype(out_dtype)
    attributes = dict(axis=0 if layout == "axis" else 1,
                      block_size=4 if layout == "blocked" else 0, saturate=True,
                      output_dtype=None, precision=None)
    call = _ops.prepare_quantize(dict(x=x, y_scale=scale, y_zero_point=zero_point), attributes,
                                 opset=25)
    full_scale = (scale if layout == "tensor" else scale.reshape(-1, 1) if layout == "axis"
                  else np.repeat(scale, 4, axis=1)[:, :shape[1]])
    full_zero = (zero_point if layout == "tensor" else zero_point.reshape(-1, 1)
                 if layout == "axis" else np.repeat(zero_point, 4, axis=1)[:, :shape[1]])
    wanted = independent(x, np.broadcast_to(full_scale, x.shape), full_zero, out_dtype)
    for variant in _simd.quantize_variants():
        for threads in (1, 2):
            got = np.empty(call.output_shape, call.output_dtype)
            _quantize_native.run_quantize(call, got, threads, variant=variant)
            assert np.array_equal(got.astype(np.int64), wanted.astype(np.int64)), (variant,
                                                                                  threads)
