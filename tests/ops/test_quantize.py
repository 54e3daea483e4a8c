"""``qops.quantize_linear`` / ``qops.dequantize_linear`` against ONNX.

* ``onnx.reference``: bit for bit (raw bits; NaN matches NaN) for every opset
  (10, 13, 19, 21, 23, 24, 25, 28) and every type the DequantizeLinear seed pages
  list there (QuantizeLinear: the same quantized types without int32), scales
  in float32 / float16 / bfloat16 (and float8e8m0 from 24) and ``x`` in the
  first three where the opset has them; per tensor,
  per axis (negative axes too) and blocked (with a short last block);
  ``saturate``, ``output_dtype`` and ``precision``.  Quantize inputs keep
  ``x / scale`` inside the int32 range for integer outputs: beyond it (and
  for NaN) ``onnx.reference`` casts out of range, which is undefined.
* qops's own saturation for those inputs, from first principles.
* onnxruntime: a peer for the 8/16-bit integer types it has kernels for,
  compared by the rule of tests/peers.py (onnx.reference is the oracle).
* Properties: the round trip is within scale / 2; thread count is irrelevant.

The type tables below are copied from the seed pages (004, DequantizeLinear,
and later/onnx_quantize_dequantize_23_to_25.md) and the contract, not from
qops's registry.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from conftest import assert_bits_equal, int_range, judge, onnx_type, run_ort, run_reference
from hypothesis import given
from hypothesis import strategies as st

import qops

OPSETS = (10, 13, 19, 21, 23, 24, 25, 28)

F32, F16, BF16 = np.dtype(np.float32), np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)
I8, U8, I16, U16, I32 = (np.dtype(t) for t in (np.int8, np.uint8, np.int16, np.uint16, np.int32))
I4, U4 = np.dtype(ml_dtypes.int4), np.dtype(ml_dtypes.uint4)
I2, U2 = np.dtype(ml_dtypes.int2), np.dtype(ml_dtypes.uint2)
E8M0 = np.dtype(ml_dtypes.float8_e8m0fnu)
E4M3FN = np.dtype(ml_dtypes.float8_e4m3fn)
E4M3FNUZ = np.dtype(ml_dtypes.float8_e4m3fnuz)
E5M2 = np.dtype(ml_dtypes.float8_e5m2)
E5M2FNUZ = np.dtype(ml_dtypes.float8_e5m2fnuz)
F4 = np.dtype(ml_dtypes.float4_e2m1fn)
F6E2M3, F6E3M2 = np.dtype(ml_dtypes.float6_e2m3fn), np.dtype(ml_dtypes.float6_e3m2fn)
FLOAT6 = (F6E2M3, F6E3M2)
FLOAT8 = (E4M3FN, E4M3FNUZ, E5M2, E5M2FNUZ)
NARROW_FLOATS = FLOAT8 + (F4,) + FLOAT6
INTEGERS = (I8, U8, I16, U16, I32, I4, U4, I2, U2)

#: DequantizeLinear's T1 per opset (seed page 004).
DEQUANTIZE_TYPES = {
    10: (I8, U8, I32),
    13: (I8, U8, I32),
    19: (I8, U8, I32) + FLOAT8,
    21: (I8, U8, I16, U16, I32, I4, U4) + FLOAT8,
    23: (I8, U8, I16, U16, I32, I4, U4) + FLOAT8 + (F4,),
    24: (I8, U8, I16, U16, I32, I4, U4) + FLOAT8 + (F4,),
    25: (I8, U8, I16, U16, I32, I4, U4) + FLOAT8 + (F4, I2, U2),
    28: (I8, U8, I16, U16, I32, I4, U4) + FLOAT8 + (F4, I2, U2) + FLOAT6,  # onnx.defs
}
#: QuantizeLinear's outputs: the same without int32 (the contract).
QUANTIZE_TYPES = {opset: tuple(t for t in types if t != I32) for opset, types in DEQUANTIZE_TYPES.items()}
#: The dequantized output types (and QuantizeLinear's x types).
FLOATS = {10: (F32,), 13: (F32,), 19: (F32, F16, BF16), 21: (F32, F16, BF16), 23: (F32, F16, BF16),
          24: (F32, F16, BF16), 25: (F32, F16, BF16), 28: (F32, F16, BF16)}
#: The scale types: the same, and float8e8m0 from opset 24.
SCALES = {opset: types + ((E8M0,) if opset >= 24 else ()) for opset, types in FLOATS.items()}
GRANULARITIES = {10: ("tensor",), 13: ("tensor", "axis"), 19: ("tensor", "axis"),
                 21: ("tensor", "axis", "blocked"), 23: ("tensor", "axis", "blocked"),
                 24: ("tensor", "axis", "blocked"), 25: ("tensor", "axis", "blocked"),
                 28: ("tensor", "axis", "blocked")}


def tid(dtype):
    return np.dtype(dtype).name


# -- layouts and parameters --------------------------------------------------------------

@st.composite
def layouts(draw, opset, granularity=None, min_rank=0):
    granularity = granularity or draw(st.sampled_from(GRANULARITIES[opset]))
    if granularity == "tensor":
        rank = draw(st.integers(min_rank, 3))
        shape = tuple(draw(st.integers(1, 4)) for _ in range(rank))
        return dict(granularity=granularity, shape=shape, axis=None, block_size=0,
                    param_shape=draw(st.sampled_from([(), (1,)])))
    rank = draw(st.integers(1, 3))
    shape = [draw(st.integers(1, 4)) for _ in range(rank)]
    axis = draw(st.integers(-rank, rank - 1))
    if granularity == "axis":
        shape[axis] = draw(st.integers(2, 5))  # length 1 would read as per tensor
        return dict(granularity=granularity, shape=tuple(shape), axis=axis, block_size=0,
                    param_shape=(shape[axis],))
    block = draw(st.integers(1, 4))
    shape[axis] = draw(st.integers(1, 9))
    param_shape = list(shape)
    param_shape[axis] = -(-shape[axis] // block)  # a short last block when block does not divide
    return dict(granularity=granularity, shape=tuple(shape), axis=axis, block_size=block,
                param_shape=tuple(param_shape))


def expand(values, layout):
    """A parameter spread over every element of x (written independently of
    onnx and qops: index arithmetic, no np.repeat)."""
    values = np.asarray(values)
    shape = layout["shape"]
    if values.size == 1:
        return np.broadcast_to(values.reshape(()), shape)
    axis = layout["axis"] % len(shape)
    index = np.indices(shape)
    if layout["block_size"]:
        index[axis] //= layout["block_size"]
        return values[tuple(index)]
    return values[index[axis]]


def scales(rng, dtype, shape, mode):
    if mode == "pow2":
        values = 2.0 ** rng.integers(-6, 4, size=shape).astype(np.float64)
    else:
        values = 2.0 ** rng.uniform(-6, 4, size=shape)
    result = np.asarray(values).astype(dtype)
    assert np.all(result.astype(np.float64) > 0)
    return result


def zero_points(rng, dtype, shape):
    if dtype in NARROW_FLOATS or dtype == I32:
        return np.zeros(shape, dtype)  # ONNX: 0 for int32 and the float types
    low, high = int_range(dtype)
    return np.asarray(rng.integers(low, high + 1, size=shape)).astype(dtype)


def float8_grid(dtype):
    """Every finite value of a narrow float type, ascending, and the midpoints."""
    count = 16 if dtype == F4 else 64 if dtype in FLOAT6 else 256
    values = np.arange(count, dtype=np.uint8).view(dtype).astype(np.float64)
    values = np.unique(values[np.isfinite(values)])
    return values, (values[:-1] + values[1:]) / 2


# -- ONNX side ---------------------------------------------------------------------------------

def onnx_attributes(opset, layout, *, saturate=None, output_dtype=None, precision=None):
    attributes = {}
    if opset >= 13 and layout["axis"] is not None:
        attributes["axis"] = layout["axis"]
    if opset >= 21 and layout["block_size"]:
        attributes["block_size"] = layout["block_size"]
    if opset >= 19 and saturate is not None:
        attributes["saturate"] = int(saturate)
    if opset >= 21 and output_dtype is not None:  # DequantizeLinear's from 23
        attributes["output_dtype"] = onnx_type(output_dtype)
    if opset >= 23 and precision is not None:
        attributes["precision"] = onnx_type(precision)
    return attributes


def qops_layout_kwargs(layout):
    kwargs = {}
    if layout["axis"] is not None:
        kwargs["axis"] = layout["axis"]
    if layout["block_size"]:
        kwargs["block_size"] = layout["block_size"]
    return kwargs


# -- quantize: generated cases ---------------------------------------------------------------

@st.composite
def quantize_cases(draw, opset=None, y_type=None):
    opset = opset or draw(st.sampled_from(OPSETS))
    y_type = y_type or draw(st.sampled_from(QUANTIZE_TYPES[opset]))
    layout = draw(layouts(opset))
    if opset in (19, 21):
        x_type = scale_type = draw(st.sampled_from(FLOATS[opset]))  # one type T1 in 19 and 21
    else:
        x_type = draw(st.sampled_from(FLOATS[opset]))
        scale_type = draw(st.sampled_from(SCALES[opset]))
    precision = draw(st.sampled_from([None, F32, F16, BF16])) if opset >= 23 else None
    if scale_type == E8M0 and x_type != F32 and precision is None:
        # NumPy has no common type of these two, so onnx.reference cannot
        # divide without a precision (qops divides in float32: tested apart).
        precision = draw(st.sampled_from([F32, F16, BF16]))
    with_zero_point = draw(st.booleans())
    if opset < 21 and y_type != U8:
        with_zero_point = True  # output_dtype arrives in 21; before it the zero point sets the type
    output_dtype = None
    if not with_zero_point and opset >= 21 and (y_type != U8 or draw(st.booleans())):
        output_dtype = y_type
    saturate = draw(st.sampled_from([None, True, False])) if opset >= 19 else None
    seed = draw(st.integers(0, 2**32 - 1))
    scale_mode = draw(st.sampled_from(["pow2", "random"]))
    scale_form = draw(st.sampled_from(["array", "python"]))
    return dict(opset=opset, y_type=y_type, layout=layout, x_type=x_type, scale_type=scale_type,
                precision=precision, with_zero_point=with_zero_point, output_dtype=output_dtype,
                saturate=saturate, seed=seed, scale_mode=scale_mode, scale_form=scale_form)


def quotient_limit(case):
    """|x / scale| stays below this, in the division's precision, for integer
    outputs (onnx.reference casts to int32; float16 division overflows at 65504)."""
    involved = {case["x_type"], case["scale_type"], case["precision"]}
    return 60000.0 if F16 in involved else float(2**30)


def materialize_quantize(case):
    rng = np.random.default_rng(case["seed"])
    layout, y_type = case["layout"], case["y_type"]
    shape = layout["shape"]
    scale = scales(rng, case["scale_type"], layout["param_shape"], case["scale_mode"])
    zero_point = zero_points(rng, y_type, layout["param_shape"])
    scale_full = expand(scale, layout).astype(np.float64)
    if y_type in NARROW_FLOATS:
        grid, mids = float8_grid(y_type)
        top = grid[-1]
        pools = [grid, mids, -grid, -mids,
                 np.array([0.0, -0.0, np.inf, -np.inf, np.nan, top * 1.01, top * 4, -top * 4,
                           grid[1] / 3, -grid[1] / 3])]
        choice = rng.integers(0, len(pools), size=shape)
        quotient = np.empty(shape, np.float64)
        for i, pool in enumerate(pools):
            picked = rng.choice(pool, size=shape)
            quotient = np.where(choice == i, picked, quotient)
        log_random = np.sign(rng.uniform(-1, 1, size=shape)) * 2.0 ** rng.uniform(-12, 12, size=shape)
        quotient = np.where(rng.random(shape) < 0.25, log_random, quotient)
        with np.errstate(all="ignore"):
            x = (quotient * scale_full).astype(case["x_type"])
    else:
        low, high = int_range(y_type)
        span = high - low
        target = rng.uniform(low - 0.3 * span - 2, high + 0.3 * span + 2, size=shape)
        kind = rng.integers(0, 3, size=shape)
        target = np.where(kind == 0, np.floor(target) + 0.5, target)  # ties
        target = np.where(kind == 1, np.floor(target), target)       # whole numbers
        target = target - expand(zero_point, layout).astype(np.float64) * (rng.random(shape) < 0.5)
        with np.errstate(all="ignore"):
            x = (target * scale_full).astype(case["x_type"])
        with np.errstate(all="ignore"):
            q = x.astype(np.float64) / scale_full
        keep = np.isfinite(q) & (np.abs(q) < quotient_limit(case))
        if case["precision"] is not None:
            with np.errstate(all="ignore"):
                keep &= np.isfinite(x.astype(case["precision"]).astype(np.float64))
        x = np.where(keep, x, np.zeros((), case["x_type"])).astype(case["x_type"])
    return np.asarray(x).reshape(shape), scale, zero_point


def run_quantize_both(case):
    x, scale, zero_point = materialize_quantize(case)
    layout, opset = case["layout"], case["opset"]
    zp = zero_point if case["with_zero_point"] else None
    inputs = {"x": x, "y_scale": scale, "y_zero_point": zp}
    attributes = onnx_attributes(opset, layout, saturate=case["saturate"],
                                 output_dtype=case["output_dtype"], precision=case["precision"])
    expected = run_reference("QuantizeLinear", inputs, attributes, opset=opset,
                             output_dtype=case["y_type"])
    kwargs = qops_layout_kwargs(layout)
    if case["saturate"] is not None:
        kwargs["saturate"] = case["saturate"]
    if case["output_dtype"] is not None:
        kwargs["output_dtype"] = case["output_dtype"]
    if case["precision"] is not None:
        kwargs["precision"] = case["precision"]
    qops_scale = scale
    if case["scale_form"] == "python" and scale.size == 1 and scale.ndim == 0 \
            and case["scale_type"] == case["x_type"]:
        qops_scale = float(scale)  # the shorthand takes x's float type
    got = qops.quantize_linear(x, qops_scale, zp, opset=opset, **kwargs)
    return got, expected


@given(case=quantize_cases())
def test_quantize_matches_onnx_reference(case):
    got, expected = run_quantize_both(case)
    assert_bits_equal(got, expected, f"QuantizeLinear {case}")


@pytest.mark.parametrize("opset", OPSETS)
@given(data=st.data())
def test_quantize_matches_onnx_reference_each_opset(opset, data):
    case = data.draw(quantize_cases(opset=opset), label="case")
    got, expected = run_quantize_both(case)
    assert_bits_equal(got, expected, f"QuantizeLinear {case}")


def _quantize_type_params():
    params = []
    for opset in OPSETS:
        for y_type in QUANTIZE_TYPES[opset]:
            params.append(pytest.param(opset, y_type, id=f"opset{opset}-{tid(y_type)}"))
    return params


@pytest.mark.parametrize("opset,y_type", _quantize_type_params())
@given(data=st.data())
def test_quantize_every_type_at_every_opset(opset, y_type, data):
    """Every (opset, output type) pair the seed lists, a few examples each."""
    case = data.draw(quantize_cases(opset=opset, y_type=y_type), label="case")
    got, expected = run_quantize_both(case)
    assert_bits_equal(got, expected, f"QuantizeLinear {case}")


def _mixed_float_params():
    # float16 with bfloat16 has no NumPy common type; onnx.reference's division
    # still runs (in float32), and so must qops's.
    return [pytest.param(x, s, id=f"x-{tid(x)}-scale-{tid(s)}")
            for x in FLOATS[23] for s in FLOATS[23] if x != s]


@pytest.mark.parametrize("x_type,scale_type", _mixed_float_params())
@pytest.mark.parametrize("y_type", [U8, I8, I16, E4M3FN, E5M2FNUZ, I4, F4], ids=tid)
def test_quantize_opset23_mixed_float_types(x_type, scale_type, y_type):
    """Opset 23 takes x and y_scale of different float types; without
    ``precision`` the division is in their common type, as onnx.reference does."""
    for seed in range(3):
        case = dict(opset=23, y_type=y_type, x_type=x_type, scale_type=scale_type,
                    layout=dict(granularity="axis", shape=(2, 3, 2), axis=1, block_size=0,
                                param_shape=(3,)),
                    precision=None, with_zero_point=True, output_dtype=None, saturate=None,
                    seed=seed, scale_mode="random", scale_form="array")
        got, expected = run_quantize_both(case)
        assert_bits_equal(got, expected, f"seed {seed}")


def _zero_d_params():
    params = []
    for opset in (13, 23):
        for y_type in (I8, U8, I16, U16, I4, U4, E4M3FN, E5M2, F4):
            if y_type not in QUANTIZE_TYPES[opset]:
                continue
            params.append(pytest.param(opset, y_type, id=f"opset{opset}-{tid(y_type)}"))
    return params


@pytest.mark.parametrize("opset,y_type", _zero_d_params())
def test_quantize_zero_dimensional_x(opset, y_type):
    """ONNX x is N-D, N = 0 included (the registry allows 0 dimensions)."""
    x = np.asarray(2.5, np.float32)
    zp = np.zeros((), y_type)
    expected = run_reference("QuantizeLinear", {"x": x, "y_scale": np.float32(1.0),
                                                "y_zero_point": zp}, opset=opset, output_dtype=y_type)
    got = qops.quantize_linear(x, np.float32(1.0), zp, opset=opset)
    assert_bits_equal(got, expected, "0-d x")


def test_quantize_zero_dimensional_x_integer_output():
    x = np.asarray(2.5, np.float32)
    got = qops.quantize_linear(x, np.float32(1.0), np.int8(1), opset=13)
    # 2.5 -> 2 (half to even), + 1
    assert got.shape == () and got.dtype == np.int8 and int(got) == 3


@pytest.mark.parametrize("y_type", FLOAT8, ids=tid)
@pytest.mark.parametrize("saturate", [True, False])
@pytest.mark.parametrize("x_type", [F32, F16, BF16], ids=tid)
def test_quantize_float8_specials(y_type, saturate, x_type):
    """Infinities, NaN, -0, overflow and exact midpoints, both saturate modes."""
    grid, mids = float8_grid(y_type)
    top = grid[-1]
    values = np.concatenate([[0.0, -0.0, np.inf, -np.inf, np.nan, top, -top, top * 1.06, top * 2,
                              -top * 2, 1e30, -1e30], grid, mids, -mids])
    with np.errstate(all="ignore"):
        x = values.astype(x_type)
    scale = np.asarray(1.0, x_type)
    inputs = {"x": x, "y_scale": scale, "y_zero_point": np.zeros((), y_type)}
    expected = run_reference("QuantizeLinear", inputs, {"saturate": int(saturate)}, opset=19,
                             output_dtype=y_type)
    got = qops.quantize_linear(x, scale, np.zeros((), y_type), saturate=saturate, opset=19)
    assert_bits_equal(got, expected, "float8 specials")


@pytest.mark.parametrize("x_type", [F32, F16, BF16], ids=tid)
def test_quantize_float4_specials(x_type):
    grid, mids = float8_grid(F4)
    values = np.concatenate([[0.0, -0.0, 6.0, 7.0, 100.0, -100.0, np.inf, -np.inf], grid, mids,
                             -mids])
    x = values.astype(x_type)
    scale = np.asarray(0.5, x_type)
    for zero_point in (None, np.zeros((), F4)):
        inputs = {"x": x, "y_scale": scale, "y_zero_point": zero_point}
        attributes = {} if zero_point is not None else {"output_dtype": onnx_type(F4)}
        expected = run_reference("QuantizeLinear", inputs, attributes, opset=23, output_dtype=F4)
        kwargs = {} if zero_point is not None else {"output_dtype": F4}
        got = qops.quantize_linear(x, scale, zero_point, opset=23, **kwargs)
        assert_bits_equal(got, expected, f"float4 zero point {zero_point!r}")


@pytest.mark.parametrize("precision", [F32, F16, BF16], ids=tid)
@pytest.mark.parametrize("y_type", [U8, I16, E4M3FN], ids=tid)
def test_quantize_precision_changes_the_division(precision, y_type):
    """``precision`` (opset 23) is the type of x / y_scale: a value whose
    quotient rounds differently in float16 / bfloat16 shows the choice."""
    x = np.array([100.37, 3.0009765625, 2.5009765625, 250.4, 1.1, 0.7], np.float32)
    scale = np.array(0.9999, np.float32)
    inputs = {"x": x, "y_scale": scale, "y_zero_point": np.zeros((), y_type)}
    expected = run_reference("QuantizeLinear", inputs, {"precision": onnx_type(precision)},
                             opset=23, output_dtype=y_type)
    got = qops.quantize_linear(x, scale, np.zeros((), y_type), precision=precision, opset=23)
    assert_bits_equal(got, expected, f"precision {tid(precision)}")


def test_quantize_precision_is_observable():
    """The case above is not vacuous: float32 and bfloat16 divisions disagree."""
    x = np.array([2.5009765625], np.float32)
    in_f32 = np.rint(x / np.float32(0.9999))
    in_bf16 = np.rint((x.astype(BF16) / np.asarray(0.9999, BF16)).astype(np.float32))
    assert in_f32[0] != in_bf16[0]
    got32 = qops.quantize_linear(x, np.float32(0.9999), np.uint8(0), precision=F32, opset=23)
    got16 = qops.quantize_linear(x, np.float32(0.9999), np.uint8(0), precision=BF16, opset=23)
    assert int(got32[0]) == int(in_f32[0]) and int(got16[0]) == int(in_bf16[0])


# -- dequantize: generated cases ---------------------------------------------------------------

@st.composite
def dequantize_cases(draw, opset=None, x_type=None):
    opset = opset or draw(st.sampled_from(OPSETS))
    x_type = x_type or draw(st.sampled_from(DEQUANTIZE_TYPES[opset]))
    scale_type = draw(st.sampled_from(SCALES[opset]))
    output_dtype = None
    if scale_type == E8M0 or (opset >= 23 and draw(st.booleans())):
        output_dtype = draw(st.sampled_from(FLOATS[opset]))  # E8M0 is no output type
    return dict(opset=opset, x_type=x_type, layout=draw(layouts(opset)), scale_type=scale_type,
                output_dtype=output_dtype,
                with_zero_point=draw(st.booleans()), seed=draw(st.integers(0, 2**32 - 1)),
                scale_mode=draw(st.sampled_from(["pow2", "random"])))


def materialize_dequantize(case):
    rng = np.random.default_rng(case["seed"])
    layout, x_type = case["layout"], case["x_type"]
    shape = layout["shape"]
    if x_type in NARROW_FLOATS:
        count = 16 if x_type == F4 else 64 if x_type in FLOAT6 else 256
        x = rng.integers(0, count, size=shape).astype(np.uint8).view(x_type)  # every bit pattern
    else:
        low, high = int_range(x_type)
        x = np.asarray(rng.integers(low, high + 1, size=shape, dtype=np.int64)).astype(x_type)
    scale = scales(rng, case["scale_type"], layout["param_shape"], case["scale_mode"])
    zero_point = zero_points(rng, x_type, layout["param_shape"])
    return np.asarray(x).reshape(shape), scale, zero_point


def run_dequantize_both(case):
    x, scale, zero_point = materialize_dequantize(case)
    layout, opset = case["layout"], case["opset"]
    zp = zero_point if case["with_zero_point"] else None
    inputs = {"x": x, "x_scale": scale, "x_zero_point": zp}
    output_dtype = case.get("output_dtype")
    expected = run_reference("DequantizeLinear", inputs,
                             onnx_attributes(opset, layout, output_dtype=output_dtype),
                             opset=opset, output_dtype=output_dtype or case["scale_type"])
    kwargs = qops_layout_kwargs(layout)
    if output_dtype is not None:
        kwargs["output_dtype"] = output_dtype
    got = qops.dequantize_linear(x, scale, zp, opset=opset, **kwargs)
    return got, expected


@given(case=dequantize_cases())
def test_dequantize_matches_onnx_reference(case):
    got, expected = run_dequantize_both(case)
    assert_bits_equal(got, expected, f"DequantizeLinear {case}")


def _dequantize_type_params():
    return [pytest.param(opset, x_type, id=f"opset{opset}-{tid(x_type)}")
            for opset in OPSETS for x_type in DEQUANTIZE_TYPES[opset]]


@pytest.mark.parametrize("opset,x_type", _dequantize_type_params())
@given(data=st.data())
def test_dequantize_every_type_at_every_opset(opset, x_type, data):
    case = data.draw(dequantize_cases(opset=opset, x_type=x_type), label="case")
    got, expected = run_dequantize_both(case)
    assert_bits_equal(got, expected, f"DequantizeLinear {case}")


@pytest.mark.parametrize("x_type", FLOAT8 + (F4,), ids=tid)
@pytest.mark.parametrize("scale_type", [F32, F16, BF16], ids=tid)
def test_dequantize_every_narrow_float_bit_pattern(x_type, scale_type):
    count = 16 if x_type == F4 else 256
    x = np.arange(count, dtype=np.uint8).view(x_type).reshape(-1, 4)
    scale = np.array([0.5, 3.0, 1e-3, 7.25], scale_type)
    opset = 23
    inputs = {"x": x, "x_scale": scale, "x_zero_point": np.zeros(4, x_type)}
    expected = run_reference("DequantizeLinear", inputs, {"axis": -1}, opset=opset,
                             output_dtype=scale_type)
    got = qops.dequantize_linear(x, scale, np.zeros(4, x_type), axis=-1, opset=opset)
    assert_bits_equal(got, expected, "every bit pattern")


def test_dequantize_int32_extremes():
    """int32 beyond float32's exact range: the conversion rounds once."""
    x = np.array([2**31 - 1, -(2**31), 2**24 + 1, -(2**24) - 3, 16777217, 123456789], np.int32)
    for scale_type in (F32, F16, BF16):
        scale = np.array(2.0**-20, scale_type)
        expected = run_reference("DequantizeLinear", {"x": x, "x_scale": scale}, opset=21,
                                 output_dtype=scale_type)
        assert_bits_equal(qops.dequantize_linear(x, scale, opset=21), expected, tid(scale_type))
        # with an explicit zero point of 0 (allowed for int32)
        zp = np.zeros((), np.int32)
        expected = run_reference("DequantizeLinear", {"x": x, "x_scale": scale, "x_zero_point": zp},
                                 opset=21, output_dtype=scale_type)
        assert_bits_equal(qops.dequantize_linear(x, scale, zp, opset=21), expected, tid(scale_type))


def test_dequantize_first_principles():
    """A hand-checked case: (x - zp) * scale per axis, with a negative axis."""
    x = np.array([[0, 255, 128], [10, 20, 30]], np.uint8)
    scale = np.array([0.5, 0.25], np.float32)
    zp = np.array([128, 20], np.uint8)
    got = qops.dequantize_linear(x, scale, zp, axis=-2, opset=13)
    assert got.dtype == np.float32
    assert got.tolist() == [[-64.0, 63.5, 0.0], [-2.5, 0.0, 2.5]]


def test_quantize_first_principles():
    """A hand-checked case: ties to even, then the zero point, then saturation."""
    x = np.array([[0.5, 1.5, 2.5, -0.5, -1.5, 300.0], [1.0, 1.25, -1.25, -2.5, 2.75, -300.0]],
                 np.float32)
    scale = np.array([0.5, 1.0], np.float32)   # per axis 0: x / scale
    zp = np.array([10, -3], np.int8)
    got = qops.quantize_linear(x, scale, zp, axis=0, opset=13)
    # row 0: x/0.5 = 1, 3, 5, -1, -3, 600 -> + 10 = 11, 13, 15, 9, 7, 127 (saturated)
    # row 1: x/1 = 1, 1.25, -1.25, -2.5, 2.75, -300 -> 1, 1, -1, -2, 3, -300 -> - 3
    assert got.dtype == np.int8
    assert got.tolist() == [[11, 13, 15, 9, 7, 127], [-2, -2, -4, -5, 0, -128]]


@pytest.mark.parametrize("scale_shape, zero_shape", [((), (1,)), ((1,), ()), ((1,), (1,))])
@pytest.mark.parametrize("y_type", [np.uint8, np.int8])
def test_one_element_parameters_are_per_tensor(scale_shape, zero_shape, y_type):
    """A 0-d and a one-element 1-D scale or zero point side by side mean one
    value for the tensor, as onnx.reference reads them."""
    x = np.array([[0.0, 1.0, 2.5, -7.0], [300.0, -300.0, 3.5, -0.5]], np.float32)
    scale = np.full(scale_shape, 0.5, np.float32)
    zero = np.full(zero_shape, 7, y_type)
    quantized = qops.quantize_linear(x, scale, zero)
    expected = run_reference("QuantizeLinear", {"x": x, "y_scale": scale, "y_zero_point": zero},
                             opset=21, output_dtype=y_type)
    assert_bits_equal(quantized, expected, "QuantizeLinear")
    restored = qops.dequantize_linear(quantized, scale, zero)
    expected = run_reference("DequantizeLinear",
                             {"x": quantized, "x_scale": scale, "x_zero_point": zero}, opset=21,
                             output_dtype=np.float32)
    assert_bits_equal(restored, expected, "DequantizeLinear")


def test_zero_point_of_another_shape_is_refused():
    x = np.zeros((2, 3), np.float32)
    with pytest.raises(qops.ValidationError, match="y_zero_point has shape .2,. but y_scale"):
        qops.quantize_linear(x, np.full(3, 0.5, np.float32), np.zeros(2, np.uint8), axis=1)


# -- blocked with a short last block, by hand and against onnx.reference -------------------------------

@pytest.mark.parametrize("axis", [1, -1, 0])
def test_blocked_short_last_block(axis):
    rng = np.random.default_rng(5)
    shape = [3, 7] if axis != 0 else [7, 3]
    block = 3                      # blocks of 3, 3 and 1
    param_shape = list(shape)
    param_shape[axis] = 3
    scale = scales(rng, F32, tuple(param_shape), "random")
    zp = zero_points(rng, I8, tuple(param_shape))
    x = rng.uniform(-50, 50, size=shape).astype(np.float32)
    layout = dict(granularity="blocked", shape=tuple(shape), axis=axis, block_size=block,
                  param_shape=tuple(param_shape))
    got = qops.quantize_linear(x, scale, zp, axis=axis, block_size=block, opset=21)
    expected = run_reference("QuantizeLinear", {"x": x, "y_scale": scale, "y_zero_point": zp},
                             {"axis": axis, "block_size": block}, opset=21, output_dtype=I8)
    assert_bits_equal(got, expected, "blocked quantize")
    # by hand: each element's own scale and zero point
    s, z = expand(scale, layout), expand(zp, layout).astype(np.int64)
    by_hand = np.clip(np.rint(x / s).astype(np.int64) + z, -128, 127).astype(np.int8)
    assert_bits_equal(got, by_hand, "blocked quantize by hand")
    back = qops.dequantize_linear(got, scale, zp, axis=axis, block_size=block, opset=21)
    assert_bits_equal(back, ((got.astype(np.float32) - z.astype(np.float32)) * s).astype(np.float32),
                      "blocked dequantize by hand")


# -- saturation beyond what onnx.reference defines ------------------------------------------------------

SATURATING_TYPES = [I8, U8, I16, U16, I4, U4]


@pytest.mark.parametrize("y_type", SATURATING_TYPES, ids=tid)
@pytest.mark.parametrize("x_type", [F32, F16, BF16], ids=tid)
def test_quantize_saturates_out_of_range_and_nan(y_type, x_type):
    """inf -> max, -inf -> min, NaN -> the zero point, +-1e12 (or the type's
    largest finite) -> max / min, whatever the zero point."""
    low, high = int_range(y_type)
    zp_value = (low + high) // 2 + 1
    big = 1e12 if x_type != F16 else 65504.0
    x = np.array([np.inf, -np.inf, np.nan, big, -big, 0.0], np.float64).astype(x_type)
    scale_value = 1.0 if x_type != F16 else 2.0**-10
    expected = [high, low, zp_value, high, low, zp_value]
    opset = 21
    zp = np.asarray(zp_value).astype(y_type)
    scale = np.asarray(scale_value, x_type)
    got = qops.quantize_linear(x, scale, zp, opset=opset)
    assert got.dtype == y_type
    assert got.astype(np.int64).tolist() == expected
    # per axis too
    got = qops.quantize_linear(np.stack([x, x]), np.array([scale_value] * 2, x_type),
                               np.array([zp_value] * 2).astype(y_type), axis=0, opset=opset)
    assert got.astype(np.int64).tolist() == [expected, expected]


@pytest.mark.parametrize("opset", [10, 13, 19, 21, 23])
def test_quantize_saturates_uint8_default(opset):
    x = np.array([np.inf, -np.inf, np.nan, 1e12, -1e12, 3e9, -3e9], np.float32)
    got = qops.quantize_linear(x, np.float32(1.0), opset=opset)
    assert got.dtype == np.uint8
    assert got.tolist() == [255, 0, 0, 255, 0, 255, 0]


# -- onnxruntime -------------------------------------------------------------------------------------

def _ort_params():
    params = []
    for opset in (10, 13, 19, 21, 23):
        types = [U8, I8] + ([I16, U16] if opset >= 21 else [])
        granularities = ["tensor"] + (["axis"] if opset >= 13 else [])
        for y_type in types:
            for granularity in granularities:
                params.append(pytest.param(opset, y_type, granularity,
                                           id=f"opset{opset}-{tid(y_type)}-{granularity}"))
    return params


def _ort_case(rng, y_type, granularity):
    shape = (2, 5, 3)
    param_shape = (5,) if granularity == "axis" else ()
    layout = dict(granularity=granularity, shape=shape, axis=1 if granularity == "axis" else None,
                  block_size=0, param_shape=param_shape)
    scale = scales(rng, F32, param_shape, "pow2" if rng.random() < 0.5 else "random")
    zp = zero_points(rng, y_type, param_shape)
    low, high = int_range(y_type)
    target = rng.uniform(low - (high - low) * 0.3, high + (high - low) * 0.3, size=shape)
    target[::2] = np.floor(target[::2]) + 0.5
    x = (target * expand(scale, layout).astype(np.float64)).astype(np.float32)
    return layout, x, scale, zp


@pytest.mark.parametrize("opset,y_type,granularity", _ort_params())
def test_quantize_equals_onnx_reference_and_onnxruntime_where_it_is_exact(opset, y_type,
                                                                          granularity):
    rng = np.random.default_rng(opset * 100 + len(granularity))
    for _ in range(4):
        layout, x, scale, zp = _ort_case(rng, y_type, granularity)
        inputs = {"x": x, "y_scale": scale, "y_zero_point": zp}
        attributes = onnx_attributes(opset, layout)
        got = qops.quantize_linear(x, scale, zp, opset=opset, **qops_layout_kwargs(layout))
        judge(got, run_reference("QuantizeLinear", inputs, attributes, opset=opset,
                                 output_dtype=y_type), context="QuantizeLinear",
              peer=lambda: run_ort("QuantizeLinear", inputs, attributes, opset=opset,
                                   output_dtype=y_type))


@pytest.mark.parametrize("opset,x_type,granularity", _ort_params() + [
    pytest.param(opset, I32, "tensor", id=f"opset{opset}-int32-tensor") for opset in OPSETS])
def test_dequantize_equals_onnx_reference_and_onnxruntime_where_it_is_exact(opset, x_type,
                                                                            granularity):
    rng = np.random.default_rng(opset * 7 + len(granularity))
    for _ in range(4):
        layout, _, scale, zp = _ort_case(rng, U8 if x_type == I32 else x_type, granularity)
        low, high = int_range(x_type)
        x = np.asarray(rng.integers(low, high + 1, size=layout["shape"], dtype=np.int64)).astype(x_type)
        zp = None if x_type == I32 else zp
        inputs = {"x": x, "x_scale": scale, "x_zero_point": zp}
        attributes = onnx_attributes(opset, layout)
        got = qops.dequantize_linear(x, scale, zp, opset=opset, **qops_layout_kwargs(layout))
        judge(got, run_reference("DequantizeLinear", inputs, attributes, opset=opset,
                                 output_dtype=F32), context="DequantizeLinear",
              peer=lambda: run_ort("DequantizeLinear", inputs, attributes, opset=opset,
                                   output_dtype=F32))


# -- properties ------------------------------------------------------------------------------------------

ROUND_TRIP_TYPES = [I8, U8, I16, U16, I4, U4]


@given(y_type=st.sampled_from(ROUND_TRIP_TYPES), layout=layouts(21),
       seed=st.integers(0, 2**32 - 1), data=st.data())
def test_round_trip_within_half_a_scale(y_type, layout, seed, data):
    rng = np.random.default_rng(seed)
    scale = scales(rng, F32, layout["param_shape"], data.draw(st.sampled_from(["pow2", "random"])))
    zp = zero_points(rng, y_type, layout["param_shape"])
    s = expand(scale, layout).astype(np.float64)
    z = expand(zp, layout).astype(np.float64)
    low, high = int_range(y_type)
    # inside the representable range [(low - zp) * s, (high - zp) * s]
    x = ((rng.uniform(low, high, size=layout["shape"]) - z) * s).astype(np.float32)
    kwargs = qops_layout_kwargs(layout)
    q = qops.quantize_linear(x, scale, zp, opset=21, **kwargs)
    back = qops.dequantize_linear(q, scale, zp, opset=21, **kwargs)
    assert back.dtype == np.float32 and back.shape == x.shape
    error = np.abs(back.astype(np.float64) - x.astype(np.float64))
    bound = s / 2 + 1e-6 * (np.abs(x.astype(np.float64)) + s)
    assert np.all(error <= bound), (error - bound).max()


@given(case=quantize_cases(opset=23))
def test_quantize_thread_count_is_irrelevant(case):
    x, scale, zero_point = materialize_quantize(case)
    # grow the tensor so that two threads have something to split
    x = np.tile(x.reshape(-1), 50)[: max(x.size, 1) * 50] if case["layout"]["granularity"] == \
        "tensor" else x
    zp = zero_point if case["with_zero_point"] else None
    kwargs = qops_layout_kwargs(case["layout"])
    for key in ("saturate", "output_dtype", "precision"):
        if case[key] is not None:
            kwargs[key] = case[key]
    one = qops.quantize_linear(x, scale, zp, opset=23, n_threads=1, **kwargs)
    two = qops.quantize_linear(x, scale, zp, opset=23, n_threads=2, **kwargs)
    assert_bits_equal(two, one, "n_threads 2 vs 1")


@given(case=dequantize_cases(opset=23))
def test_dequantize_thread_count_is_irrelevant(case):
    x, scale, zero_point = materialize_dequantize(case)
    zp = zero_point if case["with_zero_point"] else None
    kwargs = qops_layout_kwargs(case["layout"])
    one = qops.dequantize_linear(x, scale, zp, opset=23, n_threads=1, **kwargs)
    two = qops.dequantize_linear(x, scale, zp, opset=23, n_threads=2, **kwargs)
    assert_bits_equal(two, one, "n_threads 2 vs 1")


def test_thread_count_large_tensors():
    rng = np.random.default_rng(8)
    x = rng.uniform(-300, 300, size=(64, 257)).astype(np.float32)
    scale = scales(rng, F32, (257,), "random")
    zp = zero_points(rng, I8, (257,))
    one = qops.quantize_linear(x, scale, zp, axis=1, n_threads=1)
    two = qops.quantize_linear(x, scale, zp, axis=1, n_threads=2)
    assert_bits_equal(two, one, "quantize")
    expected = run_reference("QuantizeLinear", {"x": x, "y_scale": scale, "y_zero_point": zp},
                             {"axis": 1}, opset=23, output_dtype=I8)
    assert_bits_equal(one, expected, "and onnx.reference")
    back1 = qops.dequantize_linear(one, scale, zp, axis=1, n_threads=1)
    back2 = qops.dequantize_linear(one, scale, zp, axis=1, n_threads=2)
    assert_bits_equal(back2, back1, "dequantize")


# -- out= ---------------------------------------------------------------------------------------------------

def test_out_written_and_returned():
    x = np.array([[1.0, -2.0, 3.5], [0.25, 9.0, -7.5]], np.float32)
    out = np.full(x.shape, 99, np.int8)
    result = qops.quantize_linear(x, np.float32(0.5), np.int8(1), out=out)
    assert result is out
    assert out.tolist() == [[3, -3, 8], [1, 19, -14]]
    back = np.full(x.shape, np.nan, np.float32)
    result = qops.dequantize_linear(out, np.float32(0.5), np.int8(1), out=back)
    assert result is back
    assert back.tolist() == [[1.0, -2.0, 3.5], [0.0, 9.0, -7.5]]


@pytest.mark.parametrize("problem", ["zero scale", "negative scale", "nan scale", "wrong dtype",
                                     "wrong shape", "blocked before 21"])
def test_out_untouched_on_failure(problem):
    x = np.array([[1.0, -2.0, 3.5], [0.25, 9.0, -7.5]], np.float32)
    out = np.full(x.shape, 99, np.int8)
    scale, kwargs = np.float32(0.5), {}
    if problem == "zero scale":
        scale = np.float32(0.0)
    elif problem == "negative scale":
        scale = np.float32(-0.5)
    elif problem == "nan scale":
        scale = np.float32(np.nan)
    elif problem == "wrong dtype":
        out = np.full(x.shape, 99, np.uint8)
    elif problem == "wrong shape":
        out = np.full((3, 2), 99, np.int8)
    elif problem == "blocked before 21":
        scale = np.full((2, 2), 0.5, np.float32)
        kwargs = dict(axis=1, block_size=2, opset=19)
    before = out.copy()
    with pytest.raises(qops.ValidationError):
        qops.quantize_linear(x, scale, np.int8(1), out=out, **kwargs)
    assert np.array_equal(out, before)


# -- what an opset does not have is an error --------------------------------------------------------

@pytest.mark.parametrize("opset,call", [
    (19, lambda: qops.quantize_linear(np.zeros((2, 4), np.float32), np.ones((2, 2), np.float32),
                                      np.zeros((2, 2), np.uint8), axis=1, block_size=2, opset=19)),
    (19, lambda: qops.dequantize_linear(np.zeros(3, I4), np.float32(1.0), opset=19)),
    (19, lambda: qops.dequantize_linear(np.zeros(3, I16), np.float32(1.0), opset=19)),
    (13, lambda: qops.dequantize_linear(np.zeros(3, E4M3FN), np.float32(1.0), opset=13)),
    (21, lambda: qops.dequantize_linear(np.zeros(3, F4), np.float32(1.0), opset=21)),
    (10, lambda: qops.dequantize_linear(np.zeros((2, 3), U8), np.ones(3, np.float32),
                                        np.zeros(3, U8), axis=1, opset=10)),
    (13, lambda: qops.quantize_linear(np.zeros(3, np.float32), np.float32(1.0),
                                      np.zeros((), E5M2), opset=13)),
    (19, lambda: qops.quantize_linear(np.zeros(3, np.float32), np.float32(1.0),
                                      np.zeros((), U16), opset=19)),
], ids=["blocked@19", "int4@19", "int16@19", "float8@13", "float4@21", "per-axis@10",
        "quantize-float8@13", "quantize-uint16@19"])
def test_opset_rejects_what_it_lacks(opset, call):
    with pytest.raises(qops.UnsupportedError):
        call()


# -- 4-bit types packed two to a byte ---------------------------------------------------------------

FOUR_BIT = (I4, U4, F4)


def onnx_packed_bytes(x):
    """ONNX's own packing of a 4-bit array (onnx.numpy_helper)."""
    from onnx import numpy_helper
    return np.frombuffer(numpy_helper.from_array(np.asarray(x)).raw_data, np.uint8)


#: (type, pack, unpack, elements a byte) for each width ONNX packs.
PACKINGS = [(t, qops.pack_4bit, qops.unpack_4bit, 2) for t in (I4, U4, F4)] + [
    (t, qops.pack_2bit, qops.unpack_2bit, 4) for t in (np.dtype(ml_dtypes.int2),
                                                      np.dtype(ml_dtypes.uint2))]


#: (type, pack, unpack, packed class, a type of the other width) for the byte tests.
BYTE_CASES = [(t, qops.pack_4bit, qops.unpack_4bit, qops.Packed4Bit, np.dtype(ml_dtypes.int2))
              for t in (I4, U4, F4)] + [
    (t, qops.pack_2bit, qops.unpack_2bit, qops.Packed2Bit, I4)
    for t in (np.dtype(ml_dtypes.int2), np.dtype(ml_dtypes.uint2))]


@pytest.mark.parametrize("x_type, pack, unpack, per_byte", PACKINGS,
                         ids=[tid(p[0]) for p in PACKINGS])
@pytest.mark.parametrize("shape", [(0,), (1,), (3,), (5,), (2, 3), (3, 3, 3), (4096 + 3,)],
                         ids=str)
def test_packing_is_onnx_packing(x_type, pack, unpack, per_byte, shape):
    rng = np.random.default_rng(len(shape))
    x = rng.integers(0, 2 ** (8 // per_byte), shape).astype(np.uint8)  # every code
    x = x.view(x_type)
    raw = pack(x)
    assert raw.dtype == np.uint8 and raw.shape == (-(-x.size // per_byte),)
    assert np.array_equal(raw, onnx_packed_bytes(x))
    back = unpack(raw, x_type, shape)
    assert back.dtype == x_type and back.shape == shape
    assert_bits_equal(back, x, "round trip")
    # non-contiguous input: packed in C order of its elements
    if x.ndim == 2:
        assert np.array_equal(pack(x.T), onnx_packed_bytes(np.ascontiguousarray(x.T)))


def test_pack_4bit_nibble_order_by_hand():
    x = np.array([1, 2, -1, -8, 7], I4)
    # first element low: 0x21; then -1 = 0xF, -8 = 0x8: 0x8F; odd count: 0x07
    assert qops.pack_4bit(x).tolist() == [0x21, 0x8F, 0x07]
    assert qops.unpack_4bit(bytes([0x21, 0x8F, 0x07]), "int4", (5,)).astype(int).tolist() == \
        [1, 2, -1, -8, 7]


@pytest.mark.parametrize("x_type, pack, unpack, packed_class, other", BYTE_CASES,
                         ids=[tid(c[0]) for c in BYTE_CASES])
def test_every_byte_of_an_unpacked_sub_byte_array_reads_as_ml_dtypes_shows_it(
        x_type, pack, unpack, packed_class, other):
    """A 4-bit or 2-bit array made by viewing bytes can hold codes beyond its
    bits; ml_dtypes gives each byte a value (float4 takes its sign from any
    high bit: 0x12 is -1.0), and dequantize and packing keep that value."""
    x = np.arange(256, dtype=np.uint8).view(x_type)
    shown = x.astype(np.float32)
    zero = np.zeros((), x_type)
    got = qops.dequantize_linear(x, np.float32(0.5), zero)
    assert_bits_equal(got, shown * np.float32(0.5), "unpacked bytes")
    raw = pack(x)
    assert_bits_equal(unpack(raw, x_type, x.shape).astype(np.float32), shown, "packed codes")
    packed = qops.dequantize_linear(packed_class(raw, x_type, x.shape), np.float32(0.5), zero)
    assert_bits_equal(packed, got, "packed bytes")


@pytest.mark.parametrize("x_type, pack, unpack, packed_class, other",
                         [BYTE_CASES[0], BYTE_CASES[3]], ids=["4-bit", "2-bit"])
@pytest.mark.parametrize("bad", ["count", "dtype", "other width", "raw dtype", "shape"])
def test_unpacking_rejects_what_does_not_fit(x_type, pack, unpack, packed_class, other, bad):
    per_byte = 8 // packed_class.BITS
    raw, dtype, shape = np.zeros(-(-5 // per_byte), np.uint8), x_type, (5,)
    if bad == "count":
        shape = (5 + per_byte,)
    elif bad == "dtype":
        dtype = np.int8
    elif bad == "other width":
        dtype = other
    elif bad == "raw dtype":
        raw = np.zeros(raw.size, np.int16)
    else:
        shape = (-1, 5)
    with pytest.raises(qops.ValidationError):
        unpack(raw, dtype, shape)
    with pytest.raises(qops.ValidationError):
        packed_class(raw, dtype, shape)
    with pytest.raises(qops.ValidationError):
        pack(np.zeros(4, np.int8))
    with pytest.raises(qops.ValidationError, match=f"not a {packed_class.BITS}-bit type"):
        pack(np.zeros(4, other))


@pytest.mark.parametrize("x_type", FOUR_BIT, ids=tid)
@given(data=st.data())
def test_dequantize_packed_matches_onnx_reference(x_type, data):
    """Packed bytes (ONNX's packing) dequantize exactly as the unpacked array
    does on onnx.reference, every granularity, one and two threads."""
    case = data.draw(dequantize_cases(opset=23, x_type=x_type), label="case")
    x, scale, zero_point = materialize_dequantize(case)
    layout = case["layout"]
    zp = zero_point if case["with_zero_point"] else None
    expected = run_reference("DequantizeLinear", {"x": x, "x_scale": scale, "x_zero_point": zp},
                             onnx_attributes(23, layout), opset=23,
                             output_dtype=case["scale_type"])
    packed = qops.Packed4Bit(onnx_packed_bytes(x), x_type, x.shape)
    for n_threads in (1, 2):
        got = qops.dequantize_linear(packed, scale, zp, opset=23, n_threads=n_threads,
                                     **qops_layout_kwargs(layout))
        assert_bits_equal(got, expected, f"packed {case}")


def test_dequantize_packed_large_blocked_weight():
    """The shape the benchmark uses, smaller: blocks of 32 along the last
    axis of a packed int4 weight with an odd row length (rows start mid-byte)."""
    rng = np.random.default_rng(4)
    x = rng.integers(-8, 8, (257, 129)).astype(I4)
    scale = scales(rng, F32, (257, 5), "random")
    zp = zero_points(rng, I4, (257, 5))
    expected = run_reference("DequantizeLinear", {"x": x, "x_scale": scale, "x_zero_point": zp},
                             {"axis": 1, "block_size": 32}, opset=23, output_dtype=F32)
    packed = qops.Packed4Bit(onnx_packed_bytes(x), I4, x.shape)
    for n_threads in (1, 2):
        got = qops.dequantize_linear(packed, scale, zp, axis=1, block_size=32,
                                     n_threads=n_threads)
        assert_bits_equal(got, expected, "packed int4 blocked")


def test_packed_x_is_validated_like_an_array():
    packed = qops.Packed4Bit(np.zeros(3, np.uint8), U4, (5,))
    with pytest.raises(qops.UnsupportedError):
        qops.dequantize_linear(packed, np.float32(1.0), opset=19)      # uint4 arrives in 21
    with pytest.raises(qops.ValidationError):
        qops.quantize_linear(packed, np.float32(1.0))                  # not a quantize input
    out = packed.raw[:0].view(np.float32)
    with pytest.raises(qops.ValidationError):
        qops.dequantize_linear(packed, np.float32(1.0), out=out)       # wrong shape
    assert np.asarray(packed).dtype == U4 and np.asarray(packed).shape == (5,)


# -- 2-bit types packed four to a byte (opset 25) --------------------------------------------------

TWO_BIT = (I2, U2)


def test_pack_2bit_order_by_hand():
    x = np.array([1, -1, 0, -2, 1], I2)
    # codes 1, 3, 0, 2 from the lowest bits up: 0b10_00_11_01 = 0x8D; then 1 alone
    assert qops.pack_2bit(x).tolist() == [0x8D, 0x01]
    assert qops.unpack_2bit(bytes([0x8D, 0x01]), "int2", (5,)).astype(int).tolist() == \
        [1, -1, 0, -2, 1]


@pytest.mark.parametrize("x_type", TWO_BIT, ids=tid)
@given(data=st.data())
def test_dequantize_packed_2bit_matches_onnx_reference(x_type, data):
    """Packed bytes (ONNX's packing) dequantize exactly as the unpacked array
    does on onnx.reference, every granularity (rows and blocks start at any
    of a byte's four positions), one and two threads."""
    case = data.draw(dequantize_cases(opset=25, x_type=x_type), label="case")
    x, scale, zero_point = materialize_dequantize(case)
    layout = case["layout"]
    zp = zero_point if case["with_zero_point"] else None
    output_dtype = case["output_dtype"]
    expected = run_reference("DequantizeLinear", {"x": x, "x_scale": scale, "x_zero_point": zp},
                             onnx_attributes(25, layout, output_dtype=output_dtype), opset=25,
                             output_dtype=output_dtype or case["scale_type"])
    packed = qops.Packed2Bit(onnx_packed_bytes(x), x_type, x.shape)
    kwargs = qops_layout_kwargs(layout)
    if output_dtype is not None:
        kwargs["output_dtype"] = output_dtype
    for n_threads in (1, 2):
        got = qops.dequantize_linear(packed, scale, zp, n_threads=n_threads, **kwargs)
        assert_bits_equal(got, expected, f"packed {case}")


@pytest.mark.parametrize("y_type", TWO_BIT, ids=tid)
def test_quantize_to_2bit_saturates_by_hand(y_type):
    low, high = (-2, 1) if y_type == I2 else (0, 3)
    x = np.array([-100.0, -2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 100.0, np.inf, -np.inf, np.nan],
                 np.float32)
    # round half to even, then saturate; NaN gives the zero point (0)
    expected = np.clip([-100, -2, -2, 0, 0, 2, 2, 100, high, low, 0], low, high)
    got = qops.quantize_linear(x, np.float32(1.0), np.zeros((), y_type))
    assert got.dtype == y_type
    assert got.astype(int).tolist() == expected.tolist()
    with pytest.raises(qops.UnsupportedError, match="from opset 25"):
        qops.quantize_linear(x, np.float32(1.0), np.zeros((), y_type), opset=24)


# -- float8e8m0 scales (opset 24) -------------------------------------------------------------------

def test_every_float8e8m0_scale_matches_onnx_reference():
    """All 255 finite float8e8m0 values, 2**-127 (a float32 subnormal) to
    2**127, as a per-axis scale, both ways, at opset 24 and 25."""
    scale = np.arange(255, dtype=np.uint8).view(E8M0)
    rng = np.random.default_rng(7)
    # x / scale inside the int32 range (onnx.reference casts beyond it, which
    # is undefined) and x finite; row 0 holds exact ties.
    quotient = rng.standard_normal((4, 255)) * 300
    quotient[0] = np.arange(255) % 9 - 4.5
    with np.errstate(over="ignore"):
        x = (quotient * scale.astype(np.float64)).astype(F32)
    x[~np.isfinite(x)] = 0
    for opset in (24, 25):
        for y_type in (I8, U16, E4M3FN, F4):
            zp = np.zeros(255, y_type)
            expected = run_reference("QuantizeLinear", {"x": x, "y_scale": scale, "y_zero_point": zp},
                                     {"axis": 1}, opset=opset, output_dtype=y_type)
            got = qops.quantize_linear(x, scale, zp, axis=1, opset=opset)
            assert_bits_equal(got, expected, f"quantize to {y_type} at {opset}")
        q = rng.integers(-32768, 32768, (4, 255)).astype(I16)
        for out in (F32, F16, BF16):
            expected = run_reference("DequantizeLinear", {"x": q, "x_scale": scale},
                                     {"axis": 1, "output_dtype": onnx_type(out)}, opset=opset,
                                     output_dtype=out)
            got = qops.dequantize_linear(q, scale, axis=1, output_dtype=out, opset=opset)
            assert_bits_equal(got, expected, f"dequantize to {out} at {opset}")


@pytest.mark.parametrize("x_type", [F16, BF16], ids=tid)
def test_float8e8m0_scale_beside_a_16_bit_x_divides_in_float32(x_type):
    """NumPy has no common type of float16 (or bfloat16) and float8e8m0, so
    onnx.reference needs a precision there; qops' default is float32, the
    same result as precision=float32."""
    rng = np.random.default_rng(8)
    x = (rng.standard_normal(64) * 50).astype(x_type)
    scale = np.array(0.25, E8M0)
    got = qops.quantize_linear(x, scale, np.zeros((), I8))
    expected = run_reference("QuantizeLinear", {"x": x, "y_scale": scale,
                                                "y_zero_point": np.zeros((), I8)},
                             {"precision": onnx_type(F32)}, opset=25, output_dtype=I8)
    assert_bits_equal(got, expected, "default precision")


def test_float8e8m0_scale_needs_an_output_dtype_to_dequantize():
    q = np.arange(4, dtype=np.int8)
    with pytest.raises(qops.ValidationError, match="give output_dtype") as error:
        qops.dequantize_linear(q, np.array(2.0, E8M0))
    assert error.value.slot == "output_dtype"
    with pytest.raises(qops.UnsupportedError, match="float8e8m0 from opset 24"):
        qops.dequantize_linear(q, np.array(2.0, E8M0), output_dtype=F32, opset=23)
    with pytest.raises(qops.UnsupportedError, match="output_dtype from opset 23"):
        qops.dequantize_linear(q, np.float32(2.0), output_dtype=F16, opset=21)
    with pytest.raises(qops.ValidationError, match="output_dtype"):
        qops.dequantize_linear(q, np.float32(2.0), output_dtype=np.int8)
    assert qops.dequantize_linear(q, np.array(2.0, E8M0), output_dtype=F16).tolist() == [0, 2, 4, 6]


# -- calls like an earlier one: validated signature, values checked each time -----------------------

def test_a_remembered_signature_still_checks_the_values():
    x = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    good = qops.quantize_linear(x, np.float32(0.5), np.int8(0))
    assert good.tolist() == [[2, 4], [6, 8]]
    for bad_scale in (np.float32(0.0), np.float32(-1.0), np.float32(np.nan), np.float32(np.inf)):
        with pytest.raises(qops.ValidationError):
            qops.quantize_linear(x, bad_scale, np.int8(0))
    q = np.array([[1, 2], [3, 4]], np.int32)
    assert qops.dequantize_linear(q, np.float32(2.0), np.int32(0)).tolist() == [[2, 4], [6, 8]]
    with pytest.raises(qops.ValidationError, match="must be 0"):
        qops.dequantize_linear(q, np.float32(2.0), np.int32(3))
    qops.quantize_linear(np.ones(2, np.float32), np.float32(1.0), np.zeros((), E4M3FN))
    with pytest.raises(qops.ValidationError, match="must be 0"):
        qops.quantize_linear(np.ones(2, np.float32), np.float32(1.0), np.ones((), E4M3FN))


def test_saturate_true_and_false_are_different_signatures():
    x = np.array([1000.0, -1000.0, np.inf], np.float32)
    zp = np.zeros((), E4M3FN)
    clamped = qops.quantize_linear(x, np.float32(1.0), zp, saturate=True)
    unclamped = qops.quantize_linear(x, np.float32(1.0), zp, saturate=False)
    assert clamped.astype(np.float32).tolist() == [448.0, -448.0, 448.0]
    assert np.isnan(unclamped.astype(np.float32)).all()
