"""The compiled QuantizeLinear / DequantizeLinear kernels against the NumPy
reference (which matches onnx.reference), bit for bit, for every variant
this machine runs at one and two threads; and their float conversions
against NumPy and ml_dtypes themselves, over every float16 / bfloat16 value
and random float32 bits."""

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qops import Packed2Bit, Packed4Bit
from qops.backends import dispatch as _dispatch
from qops.backends.native import quantize as _quantize_native
from qops.backends.native import variants as _simd
from qops.ops import quantize as ops

VARIANTS = _simd.quantize_variants()
K = _simd.quantize_module("portable")  # the kind constants, the same in every variant

F32, F16, BF16 = np.dtype(np.float32), np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)
FLOATS = (F32, F16, BF16)
INTEGERS = tuple(np.dtype(t) for t in (np.int8, np.uint8, np.int16, np.uint16, ml_dtypes.int4,
                                       ml_dtypes.uint4, ml_dtypes.int2, ml_dtypes.uint2))
FLOAT8 = tuple(np.dtype(t) for t in (ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e4m3fnuz,
                                     ml_dtypes.float8_e5m2, ml_dtypes.float8_e5m2fnuz))
F4 = np.dtype(ml_dtypes.float4_e2m1fn)
QUANTIZED = INTEGERS + FLOAT8 + (F4,)
FOUR_BIT = (INTEGERS[4], INTEGERS[5], F4)
TWO_BIT = (INTEGERS[6], INTEGERS[7])
DEQUANTIZED = QUANTIZED + (np.dtype(np.int32),)
E8M0 = np.dtype(ml_dtypes.float8_e8m0fnu)
#: Scale types (opset 25): the float types and float8e8m0, powers of two.
SCALES = FLOATS + (E8M0,)
OPSET = 25


def raw_bits(array):
    """Every bit of every element (NaN payloads and -0 count); 4-bit and
    2-bit types by their code."""
    array = np.ascontiguousarray(array)
    raw = array.view({1: np.uint8, 2: np.uint16, 4: np.uint32}[array.dtype.itemsize])
    if array.dtype in FOUR_BIT:
        raw = raw & 0xF
    if array.dtype in TWO_BIT:
        raw = raw & 0x3
    return raw


def assert_same_bits(got, expected, context=""):
    assert got.dtype == expected.dtype and got.shape == expected.shape, context
    a, b = raw_bits(got), raw_bits(expected)
    if not np.array_equal(a, b):
        where = np.argwhere(a != b)[:6]
        raise AssertionError(f"{context}: {int((a != b).sum())} differ; first "
                             f"{[(tuple(w), hex(a[tuple(w)]), hex(b[tuple(w)])) for w in where]}")


def run_both(call):
    expected = _dispatch.execute(call, 1, implementation="reference")
    assert _dispatch.select(call, exclude=("lean",)).name == "kernels"  # the kernels take it
    run = (_quantize_native.run_quantize if call.operator.name == "QuantizeLinear"
           else _quantize_native.run_dequantize)
    for variant in VARIANTS:
        for threads in (1, 2):
            got = np.empty(call.output_shape, call.output_dtype)
            run(call, got, threads, variant=variant)
            assert_same_bits(got, expected, f"{variant}, {threads} threads")


# -- conversions ------------------------------------------------------------------------------------

def _float32_samples():
    rng = np.random.default_rng(0)
    words = np.arange(65536, dtype=np.uint32)
    shifted = words << 16
    half_grid = (words << 13) + 0x38000000
    parts = [shifted, np.arange(65536, dtype=np.uint16).view(np.float16).astype(np.float32)
             .view(np.uint32), rng.integers(0, 2**32, 1_000_000, dtype=np.uint64).astype(np.uint32)]
    # Exact ties and their neighbours for bfloat16 and float16 (and so for
    # the narrower types, whose ties are among these).
    for grid, half in ((shifted, 0x8000), (half_grid, 0x1000)):
        parts += [grid + half, grid + half - 1, grid + half + 1]
    return np.ascontiguousarray(np.concatenate(parts).view(np.float32))


SAMPLES = _float32_samples()


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("kind,dtype", [(K.F_FLOAT16, F16), (K.F_BFLOAT16, BF16)],
                         ids=["float16", "bfloat16"])
def test_float32_to_16_bit_floats_as_numpy_and_ml_dtypes(kind, dtype, variant):
    out = np.empty(SAMPLES.size * 2, np.uint8)
    _simd.quantize_module(variant).convert_float32(SAMPLES, kind, out)
    with np.errstate(all="ignore"):
        expected = SAMPLES.astype(dtype).view(np.uint16)
    assert_same_bits(out.view(np.uint16), expected, str(dtype))


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("dtype", FLOAT8 + (F4,), ids=str)
def test_float32_to_narrow_floats_as_ml_dtypes(dtype, variant):
    """Without saturation: overflow gives infinity or NaN (float4 saturates),
    NaN its type's NaN, every tie to even."""
    kind = {FLOAT8[0]: K.Q_E4M3FN, FLOAT8[1]: K.Q_E4M3FNUZ, FLOAT8[2]: K.Q_E5M2,
            FLOAT8[3]: K.Q_E5M2FNUZ, F4: K.Q_E2M1}[dtype]
    out = np.empty(SAMPLES.size, np.uint8)
    _simd.quantize_module(variant).convert_float32(SAMPLES, kind, out)
    with np.errstate(all="ignore"):
        expected = SAMPLES.astype(dtype).view(np.uint8)
    assert_same_bits(out, expected, str(dtype))


@pytest.mark.parametrize("variant", VARIANTS)
def test_float16_to_float32_as_numpy(variant):
    halves = np.arange(65536, dtype=np.uint16)
    out = np.empty(65536, np.float32)
    _simd.quantize_module(variant).widen_float16(halves, out)
    assert_same_bits(out, halves.view(np.float16).astype(np.float32))


# -- calls ------------------------------------------------------------------------------------------

@st.composite
def layouts(draw, max_dim=7):
    rank = draw(st.integers(0, 4))
    shape = [draw(st.integers(1, max_dim)) for _ in range(rank)]
    kinds = ["per-tensor"] + (["per-axis", "blocked"] if rank else [])
    kind = draw(st.sampled_from(kinds))
    if kind == "per-tensor":
        return tuple(shape), dict(axis=1, block_size=0), draw(st.sampled_from([(), (1,)]))
    axis = draw(st.integers(-rank, rank - 1))
    if kind == "per-axis":
        shape[axis] = draw(st.integers(2, max_dim + 3))
        return tuple(shape), dict(axis=axis, block_size=0), (shape[axis],)
    block = draw(st.integers(1, 5))
    shape[axis] = draw(st.integers(1, 13))
    param = list(shape)
    param[axis] = -(-shape[axis] // block)
    return tuple(shape), dict(axis=axis, block_size=block), tuple(param)


def special_floats(rng, shape, dtype):
    """A mix of ordinary values, ties, and the edges: NaN (both signs),
    infinities, -0, subnormals, huge values."""
    specials = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 2.5, -2.5, 0.5, 1.5,
                         1e-40, -1e-40, 1e-7, 3e38, -3e38, 448.0, 464.0, 465.0, 57344.0, 61440.0,
                         65504.0, 65520.0, 6.0, 7.0, 0.25, 0.75], np.float64)
    size = int(np.prod(shape))
    values = np.where(rng.random(size) < 0.3, rng.choice(specials, size),
                      rng.standard_normal(size) * 10.0 ** rng.uniform(-3, 5, size))
    values = np.where(rng.random(size) < 0.2, np.round(values) + 0.5, values)
    with np.errstate(all="ignore"):
        return values.astype(dtype).reshape(shape)


def positive_scales(rng, shape, dtype):
    values = 2.0 ** rng.uniform(-12, 8, shape)
    values = np.where(rng.random(shape) < 0.3, 2.0 ** rng.integers(-8, 4, shape), values)
    return np.asarray(values).astype(dtype)


def quantized_values(rng, shape, dtype):
    """Every bit pattern of the narrow floats (NaN included), any integer."""
    if dtype in FLOAT8:
        return rng.integers(0, 256, shape, dtype=np.uint8).view(dtype)
    if dtype == F4:
        return rng.integers(0, 16, shape, dtype=np.uint8).view(dtype)
    return random_integers(rng, shape, dtype)


def random_integers(rng, shape, dtype):
    try:
        info = np.iinfo(dtype)
    except ValueError:  # int4 / uint4
        info = ml_dtypes.iinfo(dtype)
    return np.asarray(rng.integers(int(info.min), int(info.max) + 1, shape)).astype(dtype)


def zero_points(rng, shape, dtype):
    if dtype in FLOAT8 or dtype == F4 or dtype == np.int32:
        return np.zeros(shape, dtype)
    return random_integers(rng, shape, dtype)


def pack_nibbles(x):
    """ONNX's layout: element 2i in the low nibble of byte i, 2i + 1 in the high."""
    nibbles = [int(b) & 0xF for b in np.ascontiguousarray(x).reshape(-1).view(np.uint8)]
    nibbles += [0] * (len(nibbles) % 2)
    return np.array([lo | (hi << 4) for lo, hi in zip(nibbles[0::2], nibbles[1::2])], np.uint8)


def pack_crumbs(x):
    """ONNX's layout of 2-bit types: element 4i + j in bits 2j and 2j + 1 of byte i."""
    codes = [int(b) & 0x3 for b in np.ascontiguousarray(x).reshape(-1).view(np.uint8)]
    codes += [0] * (-len(codes) % 4)
    return np.array([sum(c << (2 * j) for j, c in enumerate(codes[i:i + 4]))
                     for i in range(0, len(codes), 4)], np.uint8)


def packed_forms(x):
    """``x`` packed as ONNX stores it, when its type is stored so."""
    if x.dtype in FOUR_BIT:
        return [Packed4Bit(pack_nibbles(x), x.dtype, x.shape)]
    if x.dtype in TWO_BIT:
        return [Packed2Bit(pack_crumbs(x), x.dtype, x.shape)]
    return []


def output_type(draw_or_rng, scale_type):
    """DequantizeLinear's output_dtype: required beside a float8e8m0 scale."""
    if scale_type != E8M0:
        return None
    return FLOATS[int(draw_or_rng.integers(0, 3))]


def strided(array, rng):
    """The same values as a non-contiguous view (every other element of a
    larger array), when the array has a dimension to stride."""
    if array.ndim == 0 or rng.random() < 0.5:
        return array
    bigger = np.empty(array.shape[:-1] + (2 * array.shape[-1],), array.dtype)
    view = bigger[..., ::2]
    view[...] = array
    return view


@settings(max_examples=150, deadline=None)
@given(layout=layouts(), x_type=st.sampled_from(FLOATS), scale_type=st.sampled_from(SCALES),
       y_type=st.sampled_from(QUANTIZED),
       precision=st.sampled_from([None, F32, F16, BF16]), saturate=st.booleans(),
       with_zero_point=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_quantize_kernel_matches_the_reference(layout, x_type, scale_type, y_type, precision,
                                               saturate, with_zero_point, seed):
    shape, attributes, param_shape = layout
    rng = np.random.default_rng(seed)
    x = strided(special_floats(rng, shape, x_type), rng)
    scale = positive_scales(rng, param_shape, scale_type)
    zero_point = zero_points(rng, param_shape, y_type) if with_zero_point else None
    call = ops.prepare_quantize(
        dict(x=x, y_scale=scale, y_zero_point=zero_point),
        dict(attributes, saturate=saturate, output_dtype=None if with_zero_point else y_type,
             precision=precision), OPSET)
    run_both(call)


@settings(max_examples=150, deadline=None)
@given(layout=layouts(), x_type=st.sampled_from(DEQUANTIZED), scale_type=st.sampled_from(SCALES),
       with_zero_point=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_dequantize_kernel_matches_the_reference(layout, x_type, scale_type, with_zero_point,
                                                 seed):
    shape, attributes, param_shape = layout
    rng = np.random.default_rng(seed)
    x = strided(quantized_values(rng, shape, x_type), rng)
    scale = positive_scales(rng, param_shape, scale_type)
    attributes = dict(attributes, output_dtype=output_type(rng, scale_type))
    if x_type == np.int32 and with_zero_point:
        # (the reference's float64 path otherwise)
        attributes["output_dtype"] = F32
    zero_point = zero_points(rng, param_shape, x_type) if with_zero_point else None
    call = ops.prepare_dequantize(dict(x=x, x_scale=scale, x_zero_point=zero_point),
                                  attributes, OPSET)
    run_both(call)
    # The same values packed as ONNX stores them (packed here, independently of qops).
    for packed in packed_forms(x):
        call = ops.prepare_dequantize(dict(x=packed, x_scale=scale, x_zero_point=zero_point),
                                      attributes, OPSET)
        run_both(call)


# -- tensors large enough for both threads, every row geometry -----------------------------------

GEOMETRIES = [
    ((64, 1030), dict(axis=1, block_size=0), ()),               # per tensor, a partial last row
    ((3, 40, 300), dict(axis=1, block_size=0), (40,)),          # per axis, rows of one scale
    ((300, 130), dict(axis=-1, block_size=0), (130,)),          # per axis, the last axis
    ((256, 257), dict(axis=1, block_size=32), (256, 9)),        # blocked along the last axis
    ((70, 33, 20), dict(axis=-2, block_size=4), (70, 9, 20)),   # blocked, rows of a scale vector
]


@pytest.mark.parametrize("shape,attributes,param_shape", GEOMETRIES)
@pytest.mark.parametrize("y_type", QUANTIZED, ids=str)
def test_quantize_large_tensors(shape, attributes, param_shape, y_type):
    rng = np.random.default_rng(1)
    x = special_floats(rng, shape, F32)
    scale = positive_scales(rng, param_shape, F32)
    zero_point = zero_points(rng, param_shape, y_type)
    for saturate in (True, False):
        call = ops.prepare_quantize(
            dict(x=x, y_scale=scale, y_zero_point=zero_point),
            dict(attributes, saturate=saturate, output_dtype=None, precision=None), OPSET)
        run_both(call)


@pytest.mark.parametrize("shape,attributes,param_shape", GEOMETRIES)
@pytest.mark.parametrize("x_type", DEQUANTIZED, ids=str)
@pytest.mark.parametrize("scale_type", FLOATS, ids=str)
def test_dequantize_large_tensors(shape, attributes, param_shape, x_type, scale_type):
    rng = np.random.default_rng(2)
    x = quantized_values(rng, shape, x_type)
    scale = positive_scales(rng, param_shape, scale_type)
    zero_point = None if x_type == np.int32 else zero_points(rng, param_shape, x_type)
    call = ops.prepare_dequantize(dict(x=x, x_scale=scale, x_zero_point=zero_point),
                                  attributes, OPSET)
    run_both(call)


@pytest.mark.parametrize("shape,attributes,param_shape", GEOMETRIES)
@pytest.mark.parametrize("x_type", FOUR_BIT + TWO_BIT, ids=str)
@pytest.mark.parametrize("scale_type", SCALES, ids=str)
def test_dequantize_packed_large_tensors(shape, attributes, param_shape, x_type, scale_type):
    rng = np.random.default_rng(3)
    x = quantized_values(rng, shape, x_type)
    scale = positive_scales(rng, param_shape, scale_type)
    zero_point = zero_points(rng, param_shape, x_type)
    attributes = dict(attributes, output_dtype=output_type(rng, scale_type))
    for packed in packed_forms(x):
        run_both(ops.prepare_dequantize(dict(x=packed, x_scale=scale, x_zero_point=zero_point),
                                        attributes, OPSET))


@pytest.mark.parametrize("x_type", [F32, F16, BF16], ids=str)
def test_every_float8e8m0_scale(x_type):
    """Each of float8e8m0's 255 values (2**-127, a float32 subnormal, to
    2**127) as a per-axis scale, both ways; the division and product by a
    power of two are exact until they leave float32's range."""
    scale = np.arange(255, dtype=np.uint8).view(E8M0)
    rng = np.random.default_rng(4)
    x = special_floats(rng, (3, 255), x_type)
    for y_type in (np.dtype(np.int8), np.dtype(np.uint16), INTEGERS[6], FLOAT8[0]):
        for precision in (None, F32):
            run_both(ops.prepare_quantize(
                dict(x=x, y_scale=scale, y_zero_point=None),
                dict(axis=1, block_size=0, saturate=True, output_dtype=y_type,
                     precision=precision), OPSET))
    q = random_integers(rng, (3, 255), np.dtype(np.int16))
    for out in FLOATS:
        run_both(ops.prepare_dequantize(dict(x=q, x_scale=scale, x_zero_point=None),
                                        dict(axis=1, block_size=0, output_dtype=out), OPSET))


def test_int32_with_a_zero_point_and_a_16_bit_scale_stays_with_the_reference():
    """ONNX's reference computes that case in float64 (one rounding to the
    output type); the kernels compute in float32, so they decline it."""
    call = ops.prepare_dequantize(dict(x=np.arange(6, dtype=np.int32), x_scale=np.float16(0.5),
                                       x_zero_point=np.int32(0)), dict(axis=1, block_size=0), 23)
    assert _dispatch.select(call).name == "reference"
    call = ops.prepare_dequantize(dict(x=np.arange(6, dtype=np.int32), x_scale=np.float32(0.5),
                                       x_zero_point=np.int32(0)),
                                  dict(axis=1, block_size=0, output_dtype=F16), 23)
    assert _dispatch.select(call).name == "reference"
    call = ops.prepare_dequantize(dict(x=np.arange(6, dtype=np.int32), x_scale=np.float32(0.5),
                                       x_zero_point=np.int32(0)), dict(axis=1, block_size=0), 23)
    assert _dispatch.select(call).name == "kernels"


def test_empty_tensors_go_to_the_reference():
    call = ops.prepare_quantize(dict(x=np.zeros((0, 3), np.float32), y_scale=np.float32(1)),
                                dict(axis=1, block_size=0, saturate=True, output_dtype=None,
                                     precision=None), 23)
    assert _dispatch.select(call).name == "reference"
