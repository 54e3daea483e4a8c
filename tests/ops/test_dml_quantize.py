"""``qops.quantize`` and ``qops.dequantize`` (DirectML QUANTIZE / DEQUANTIZE,
6_3) against the rule written out here element by element, against
onnx.reference's QuantizeLinear / DequantizeLinear wherever ONNX can state
the call (per tensor, per axis, blocks along one axis), every kernel variant
against the reference, and the validation rules qops sets where the pages
are silent."""

import os
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest
from conftest import run_reference
from hypothesis import given, settings
from hypothesis import strategies as st

import qops
from qops.backends import dispatch
from qops.backends.native import quantize as native
from qops.backends.native import variants as _simd
from qops.ops.dml_quantize import SEVERAL_AXES, prepare_dequantize, prepare_quantize

QUANTIZED = [np.dtype(t) for t in (np.int8, np.uint8, ml_dtypes.int4, ml_dtypes.uint4)]
FLOATS = [np.dtype(np.float32), np.dtype(np.float16)]
VARIANTS = _simd.quantize_variants()


def bounds(dtype):
    info = ml_dtypes.iinfo(dtype)
    return int(info.min), int(info.max)


def raw(array):
    """The bytes of ``array``, for comparisons that see NaN payloads and -0."""
    return np.ascontiguousarray(array).view(np.uint8)


def parameter_at(parameter, index, shape):
    """The parameter of element ``index``: ``k // (d // s)`` along each dimension."""
    return parameter[tuple(k // (d // s) for k, d, s in zip(index, shape, parameter.shape))]


def stated_quantize(x, scale, zero_point, dtype):
    """saturate(round_half_even(float32(x) / float32(scale)) + zero_point), one
    NumPy scalar at a time; NaN gives the zero point, infinities saturate."""
    low, high = bounds(dtype)
    out = np.empty(x.shape, dtype)
    for index in np.ndindex(x.shape):
        with np.errstate(all="ignore"):
            quotient = np.float32(x[index]) / np.float32(parameter_at(scale, index, x.shape))
        assert isinstance(quotient, np.float32)
        zero = 0 if zero_point is None else int(parameter_at(zero_point, index, x.shape))
        if np.isnan(quotient):
            value = zero
        elif np.isinf(quotient):
            value = high if quotient > 0 else low
        else:
            value = int(np.rint(quotient)) + zero
        out[index] = min(max(value, low), high)
    return out


def stated_dequantize(x, scale, zero_point, dtype):
    """(float32(x) - zero_point) * float32(scale), a float32 product, then
    rounded once to ``dtype``."""
    values = np.asarray(x)
    out = np.empty(values.shape, dtype)
    for index in np.ndindex(values.shape):
        zero = 0 if zero_point is None else parameter_at(zero_point, index, values.shape)
        centred = np.float32(values[index]) - np.float32(zero)
        product = centred * np.float32(parameter_at(scale, index, values.shape))
        assert isinstance(product, np.float32)
        with np.errstate(over="ignore"):
            out[index] = dtype.type(product)
    return out


def divisors(n):
    return [d for d in range(1, n + 1) if n % d == 0]


@st.composite
def shapes(draw):
    """An input shape (1 to 4 dimensions, sometimes up to 8 small ones) and a
    parameter shape whose every size divides the input's."""
    if draw(st.integers(0, 9)) == 0:
        shape = tuple(draw(st.lists(st.integers(1, 2), min_size=5, max_size=8)))
    else:
        shape = tuple(draw(st.lists(st.sampled_from([1, 2, 3, 4, 6, 8]), min_size=1,
                                    max_size=4)))
    parameter = tuple(draw(st.sampled_from(divisors(size))) for size in shape)
    return shape, parameter


SPECIALS = np.array([np.nan, np.inf, -np.inf, 0.5, 1.5, 2.5, -2.5, -0.0, 1e30, -1e30], np.float32)


@settings(max_examples=80, deadline=None)
@given(data=st.data(), form=shapes())
def test_quantize_equals_the_stated_rule(data, form):
    shape, parameter_shape = form
    x_type = data.draw(st.sampled_from(FLOATS), label="x_type")
    scale_type = data.draw(st.sampled_from(FLOATS), label="scale_type")
    out_type = data.draw(st.sampled_from(QUANTIZED), label="out_type")
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))
    x = (rng.standard_normal(shape) * 40).astype(np.float32)
    specials = rng.random(shape) < 0.1
    x[specials] = rng.choice(SPECIALS, int(specials.sum()))
    with np.errstate(over="ignore"):  # 1e30 is infinity in float16
        x = x.astype(x_type)
    scale = rng.uniform(0.25, 4.0, parameter_shape).astype(scale_type)
    low, high = bounds(out_type)
    zero = rng.integers(low, high + 1, parameter_shape).astype(out_type)
    zero = zero if data.draw(st.booleans(), label="with_zero") else None
    out = np.empty(shape, out_type) if data.draw(st.booleans(), label="out") else None
    got = qops.quantize(x, scale, zero, output_dtype=out_type, out=out,
                        n_threads=data.draw(st.sampled_from([1, 2]), label="n_threads"))
    assert got.dtype == out_type and got.shape == shape
    assert out is None or got is out
    assert np.array_equal(raw(got), raw(stated_quantize(x, scale, zero, out_type)))
    assert np.array_equal(raw(got), raw(qops.reference.quantize_blocks(x, scale, zero, out_type)))


@settings(max_examples=80, deadline=None)
@given(data=st.data(), form=shapes())
def test_dequantize_equals_the_stated_rule(data, form):
    shape, parameter_shape = form
    x_type = data.draw(st.sampled_from(QUANTIZED), label="x_type")
    scale_type = data.draw(st.sampled_from(FLOATS), label="scale_type")
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))
    low, high = bounds(x_type)
    x = rng.integers(low, high + 1, shape).astype(x_type)
    # Large scales carry some float16 products past 65504, to infinity.
    scale = (rng.uniform(0.001, 2.0, parameter_shape)
             * (400 if data.draw(st.booleans(), label="large") else 1)).astype(scale_type)
    zero = rng.integers(low, high + 1, parameter_shape).astype(x_type)
    zero = zero if data.draw(st.booleans(), label="with_zero") else None
    given_x = x
    if x.dtype.itemsize == 1 and x_type in QUANTIZED[2:] and data.draw(st.booleans(),
                                                                         label="packed"):
        given_x = qops.Packed4Bit(qops.pack_4bit(x), x.dtype, x.shape)
    output_dtype = scale_type if data.draw(st.booleans(), label="name_output") else None
    got = qops.dequantize(given_x, scale, zero, output_dtype=output_dtype,
                          n_threads=data.draw(st.sampled_from([1, 2]), label="n_threads"))
    assert got.dtype == scale_type and got.shape == shape
    assert np.array_equal(raw(got), raw(stated_dequantize(x, scale, zero, scale_type)))


# -- ONNX's forms ---------------------------------------------------------------------------

def _onnx_parameters(form, shape):
    """``(qops parameter shape, ONNX attributes, ONNX parameter of a qops one)``."""
    if form == "tensor":
        return (1,) * len(shape), {}, lambda p: p.reshape(())
    kind, axis = form.split()
    axis = int(axis)
    if kind == "axis":
        sizes = tuple(size if i == axis else 1 for i, size in enumerate(shape))
        return sizes, {"axis": axis}, lambda p: p.reshape(-1)
    # Blocks of 2 along ``axis``; ONNX's blocked parameter has x's sizes elsewhere.
    sizes = tuple(size // 2 if i == axis else 1 for i, size in enumerate(shape))
    onnx_shape = tuple(size // 2 if i == axis else size for i, size in enumerate(shape))
    return sizes, {"axis": axis, "block_size": 2}, lambda p: np.broadcast_to(p, onnx_shape).copy()


ONNX_FORMS = ["tensor", "axis 0", "axis 1", "axis 2", "blocked 0", "blocked 1", "blocked 2"]


@pytest.mark.parametrize("form", ONNX_FORMS)
@pytest.mark.parametrize("out_type", QUANTIZED, ids=str)
@pytest.mark.parametrize("float_type", FLOATS, ids=str)
def test_onnx_forms_equal_onnx_reference(form, out_type, float_type):
    """QuantizeLinear with precision float32 and DequantizeLinear of
    onnx.reference (opset 23) give the same bytes as QUANTIZE and DEQUANTIZE."""
    rng = np.random.default_rng(7)
    shape = (4, 6, 8)
    sizes, attributes, as_onnx = _onnx_parameters(form, shape)
    x = (rng.standard_normal(shape) * 30).astype(float_type)
    x.flat[:2] = [2.5, -2.5]
    scale = rng.uniform(0.25, 3.0, sizes).astype(float_type)
    low, high = bounds(out_type)
    zero = rng.integers(low, high + 1, sizes).astype(out_type)
    got = qops.quantize(x, scale, zero, output_dtype=out_type)
    want = run_reference("QuantizeLinear", {"x": x, "y_scale": as_onnx(scale),
                                            "y_zero_point": as_onnx(zero)},
                         dict(attributes, precision=1), opset=23, output_dtype=out_type)
    assert np.array_equal(raw(got), raw(want))
    # NaN and infinities, which onnx.reference leaves to the platform's
    # casts: qops' QuantizeLinear states them (zero point, saturation).
    x.flat[:3] = [np.nan, np.inf, -np.inf]
    got = qops.quantize(x, scale, zero, output_dtype=out_type)
    assert [int(v) for v in got.flat[:3]] == [int(zero.flat[0]), high, low]
    back = qops.dequantize(got, scale, zero)
    want_back = run_reference("DequantizeLinear", {"x": got, "x_scale": as_onnx(scale),
                                                   "x_zero_point": as_onnx(zero)},
                              attributes, opset=23, output_dtype=float_type)
    assert back.dtype == float_type and np.array_equal(raw(back), raw(want_back))
    # QuantizeLinear of qops, with the division in float32, is the same statement.
    mirrored = qops.reference.quantize_linear(x, as_onnx(scale), as_onnx(zero), **attributes,
                                              precision=np.float32)
    assert np.array_equal(raw(got), raw(mirrored))


def test_scale_type_without_a_zero_point_equals_onnx_reference():
    rng = np.random.default_rng(8)
    x = (rng.standard_normal((2, 8)) * 30).astype(np.float32)
    scale = rng.uniform(0.25, 3.0, (2, 1)).astype(np.float32)
    got = qops.quantize(x, scale, output_dtype=np.uint8)
    want = run_reference("QuantizeLinear", {"x": x, "y_scale": scale.reshape(-1)}, {"axis": 0},
                         opset=23, output_dtype=np.uint8)
    assert np.array_equal(got, want)


# -- the kernels ----------------------------------------------------------------------------

KERNEL_FORMS = {  # parameter shapes for an input of (4, 6, 8)
    "tensor": (1, 1, 1), "axis 0": (4, 1, 1), "axis 2": (1, 1, 8),
    "blocked 1": (1, 3, 1), "blocked 2": (1, 1, 2), "blocked beside per-element": (4, 1, 4),
    "blocked beside broadcast": (1, 2, 1), "per-element on two axes": (4, 1, 8),
    "every element": (4, 6, 8), "several axes": (2, 3, 1), "several axes, last": (1, 2, 4),
}


def _calls(parameter_shape, rng):
    shape = (4, 6, 8)
    for out_type in QUANTIZED:
        low, high = bounds(out_type)
        x = (rng.standard_normal(shape) * 20).astype(np.float32)
        x.flat[:3] = [np.nan, np.inf, -np.inf]
        scale = rng.uniform(0.2, 3.0, parameter_shape).astype(np.float32)
        zero = rng.integers(low, high + 1, parameter_shape).astype(out_type)
        yield prepare_quantize(dict(input=x, scale=scale, zero_point=zero),
                               dict(output_dtype=out_type))
        yield prepare_quantize(dict(input=x.astype(np.float16), scale=scale.astype(np.float16)),
                               dict(output_dtype=out_type))
        q = rng.integers(low, high + 1, shape).astype(out_type)
        yield prepare_dequantize(dict(input=q, scale=scale.astype(np.float16), zero_point=zero), {})
        if out_type in QUANTIZED[2:]:
            packed = qops.Packed4Bit(qops.pack_4bit(q), q.dtype, q.shape)
            yield prepare_dequantize(dict(input=packed, scale=scale, zero_point=zero), {})


@pytest.mark.parametrize("form", KERNEL_FORMS)
def test_every_kernel_variant_equals_the_reference(form):
    rng = np.random.default_rng(9)
    for call in _calls(KERNEL_FORMS[form], rng):
        several = call.granularity["scale"] == SEVERAL_AXES
        assert several == form.startswith("several")
        assert dispatch.select(call).name == ("reference" if several else "kernels")
        want = dispatch.execute(call, 1, implementation="reference")
        for n_threads in (1, 2):
            got = dispatch.execute(call, n_threads)
            assert np.array_equal(raw(got), raw(want)), (form, n_threads)
        if several:
            continue
        for variant in VARIANTS:
            for n_threads in (1, 2):
                got = np.empty(call.output_shape, call.output_dtype)
                native.run_blocks(call, got, n_threads, variant=variant)
                assert np.array_equal(raw(got), raw(want)), (form, variant, n_threads)


def test_long_rows_and_many_threads():
    """Rows past a kernel piece, split between threads, in each ONNX form."""
    rng = np.random.default_rng(10)
    x = (rng.standard_normal((3, 5, 4099)) * 100).astype(np.float32)
    for parameter_shape in [(1, 1, 1), (1, 5, 1), (1, 1, 4099), (1, 1, 4099 // 4099), (3, 1, 1),
                            (1, 5, 1), (3, 5, 4099)]:
        scale = rng.uniform(0.5, 2, parameter_shape).astype(np.float32)
        want = qops.reference.quantize_blocks(x, scale, None, np.int8)
        for n_threads in (1, 2, 3):
            got = qops.quantize(x, scale, output_dtype=np.int8, n_threads=n_threads)
            assert np.array_equal(got, want)
            back = qops.dequantize(got, scale, n_threads=n_threads)
            assert np.array_equal(back, qops.reference.dequantize_blocks(got, scale))


def test_a_forced_variant_gives_the_same_bytes():
    code = ("import numpy as np, qops\n"
            "from qops.backends.native import variants\n"
            "x = np.linspace(-50, 50, 4 * 6 * 8, dtype=np.float32).reshape(4, 6, 8)\n"
            "s = np.linspace(0.3, 2, 12, dtype=np.float32).reshape(1, 3, 4)[:, :, :1]\n"
            "q = qops.quantize(x, s, output_dtype=np.int8)\n"
            "assert np.array_equal(q, qops.reference.quantize_blocks(x, s, None, np.int8))\n"
            "print(variants.selected(), q.sum())")
    env = dict(os.environ, QOPS_SIMD="portable")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[0] == "portable"


# -- arguments ------------------------------------------------------------------------------

def test_quantization_type_and_forms_are_reported():
    x = np.zeros((4, 6), np.float32)
    call = prepare_quantize(dict(input=x, scale=np.ones((1, 3), np.float32)),
                            dict(output_dtype="int4"))
    assert call.attributes["quantization_type"] == "SCALE"
    assert (call.granularity["scale"], call.attributes["axis"], call.attributes["block_size"]) \
        == ("blocked", 1, 2)
    call = prepare_dequantize(dict(input=x.astype(np.int8), scale=np.ones((4, 1), np.float32),
                                   zero_point=np.zeros((4, 1), np.int8)), {})
    assert call.attributes["quantization_type"] == "SCALE_ZERO_POINT"
    assert call.granularity["scale"] == "per-axis"
    result = qops.validate("QUANTIZE", input=qops.TensorDesc("float16", (4, 6)),
                           scale=qops.TensorDesc("float32", (2, 3)), output_dtype="uint4")
    assert str(result) == ("QUANTIZE at DML_FEATURE_LEVEL_6_4: valid; output uint4 (4, 6) "
                           f"(scale {SEVERAL_AXES})")
    assert str(qops.validate("DEQUANTIZE", input=qops.TensorDesc("uint8", (4, 6)),
                             scale=qops.TensorDesc("float16", (1, 1)), feature_level="6_3")) == \
        "DEQUANTIZE at DML_FEATURE_LEVEL_6_3: valid; output float16 (4, 6) (scale per-tensor)"


def test_numbers_and_0d_parameters_are_one_value():
    x = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    got = qops.quantize(x, 0.5, np.int8(3), output_dtype=np.int8)
    assert np.array_equal(got, [[5, 7], [9, 11]])
    got = qops.quantize(x, np.float16(0.5), 3, output_dtype=ml_dtypes.int4)
    assert got.dtype == ml_dtypes.int4 and np.array_equal(got.astype(int), [[5, 7], [7, 7]])
    back = qops.dequantize(got, 0.5, 3)
    assert back.dtype == np.float32 and np.array_equal(back, [[1, 2], [2, 2]])
    assert qops.dequantize(got, 0.5, 3, output_dtype=np.float16).dtype == np.float16


def test_plans_take_new_values():
    """Calls of one signature reuse the plan; each call's values are its own."""
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    for step in (0.5, 1.0, 2.0, 0.5):
        scale = np.full((1, 3), step, np.float32)
        zero = np.full((1, 3), int(step * 4), np.uint8)
        assert np.array_equal(qops.quantize(x, scale, zero, output_dtype=np.uint8),
                              stated_quantize(x, scale, zero, np.dtype(np.uint8)))
        back = qops.dequantize(qops.quantize(x, scale, zero, output_dtype=np.uint8), scale, zero)
        assert np.array_equal(back, np.rint(x / step) * step)


def test_eight_dimensions_and_empty_tensors():
    x = np.linspace(-4, 4, 256, dtype=np.float32).reshape((2,) * 8)
    scale = np.full((1, 2, 1, 1, 1, 1, 1, 2), 0.5, np.float32)
    got = qops.quantize(x, scale, output_dtype=np.int8)
    assert np.array_equal(got, stated_quantize(x, scale, None, np.dtype(np.int8)))
    empty = np.zeros((0, 4), np.float32)
    assert qops.quantize(empty, np.ones((1, 2), np.float32), output_dtype=np.int8).shape == (0, 4)
    assert qops.dequantize(np.zeros((0, 4), np.int8), np.ones((1, 4), np.float32)).shape == (0, 4)


def test_out_is_written_and_returned():
    x = np.linspace(-3, 3, 12, dtype=np.float32).reshape(3, 4)
    out = np.full((3, 4), 99, np.int8)
    assert qops.quantize(x, np.ones((1, 2), np.float32), output_dtype=np.int8, out=out) is out
    assert np.array_equal(out, np.rint(x))
    back = np.empty((3, 4), np.float32)
    assert qops.dequantize(out, np.ones((3, 1), np.float32), out=back) is back
    assert np.array_equal(back, out.astype(np.float32))


X = np.linspace(-3, 3, 24, dtype=np.float32).reshape(4, 6)
S = np.ones((1, 3), np.float32)
Q = np.arange(24, dtype=np.int8).reshape(4, 6)


@pytest.mark.parametrize("operator, call, slot, words", [
    ("quantize", dict(input=X, scale=S, output_dtype=np.int8, feature_level="6_2"), None,
     ["introduced in DML_FEATURE_LEVEL_6_3", "DML_FEATURE_LEVEL_6_2 was requested"]),
    ("quantize", dict(input=X, scale=S), "output_dtype",
     ["output_dtype is required", "int8, int4, uint8, uint4"]),
    ("quantize", dict(input=X, scale=S, output_dtype=np.int16), "output",
     ["output has dtype int16", "supports int8, int4, uint8, uint4"]),
    ("quantize", dict(input=X.astype(np.int32), scale=S, output_dtype=np.int8), "input",
     ["input has dtype int32", "supports float32, float16"]),
    ("quantize", dict(input=X, scale=S.astype(np.int8), output_dtype=np.int8), "scale",
     ["scale has dtype int8", "supports float32, float16"]),
    ("quantize", dict(input=X, scale=S, zero_point=np.zeros((1, 3), np.uint8),
                      output_dtype=np.int8), "zero_point",
     ["output and zero_point must have the same data type", "zero_point is uint8",
      "output is int8"]),
    ("quantize", dict(input=X, scale=np.ones((1, 4), np.float32), output_dtype=np.int8), "scale",
     ["scale has shape (1, 4)", "input of (4, 6)", "dimension 1", "4 does not divide 6",
      "blocks of input size / size elements"]),
    ("quantize", dict(input=X, scale=np.ones((8, 1), np.float32), output_dtype=np.int8), "scale",
     ["dimension 0", "8 does not divide 4"]),
    ("quantize", dict(input=X, scale=S, zero_point=np.zeros((1, 6), np.int8),
                      output_dtype=np.int8), "scale",
     ["scale and zero_point must have the same sizes", "scale has (1, 3)",
      "zero_point has (1, 6)"]),
    ("quantize", dict(input=X, scale=np.ones(3, np.float32), output_dtype=np.int8), "output",
     ["must have the same dimension count", "input has 2", "scale has 1"]),
    ("quantize", dict(input=X.reshape(-1)[:1].reshape(()), scale=0.5, output_dtype=np.int8),
     "input", ["input has 0 dimensions", "supports 1 to 8"]),
    ("quantize", dict(input=np.zeros((1,) * 9, np.float32), scale=0.5, output_dtype=np.int8),
     "input", ["input has 9 dimensions", "supports 1 to 8"]),
    ("quantize", dict(input=X, scale=np.array([[1.0, 0.0, 1.0]], np.float32),
                      output_dtype=np.int8), "scale",
     ["scale has a zero value", "positive and finite"]),
    ("quantize", dict(input=X, scale=np.array([[1.0, np.nan, -1.0]], np.float32),
                      output_dtype=np.int8), "scale", ["scale has a NaN value"]),
    ("quantize", dict(input=X, scale=S, zero_point=9, output_dtype=ml_dtypes.int4),
     "zero_point", ["zero_point is 9", "int4 holds -8 to 7"]),
    ("quantize", dict(input=X, scale=1e6, output_dtype=np.int8, feature_level="7_0"),
     "feature_level", ["unknown DirectML feature level"]),
    ("quantize", dict(input=None, scale=S, output_dtype=np.int8), "input",
     ["input is required (InputTensor)"]),
    ("dequantize", dict(input=Q, scale=None), "scale",
     ["scale is required (QuantizationTensors[0])"]),
    ("dequantize", dict(input=Q, scale=S, feature_level="6_2"), None,
     ["introduced in DML_FEATURE_LEVEL_6_3"]),
    ("dequantize", dict(input=X, scale=S), "input",
     ["input has dtype float32", "supports int8, int4, uint8, uint4"]),
    ("dequantize", dict(input=Q.astype(np.int16), scale=S), "input",
     ["input has dtype int16", "supports int8, int4, uint8, uint4"]),
    ("dequantize", dict(input=Q, scale=S, zero_point=np.zeros((1, 3), np.uint8)), "zero_point",
     ["input and zero_point must have the same data type", "zero_point is uint8"]),
    ("dequantize", dict(input=Q, scale=S, output_dtype=np.float16), "scale",
     ["output and scale must have the same data type", "scale is float32", "output is float16"]),
    ("dequantize", dict(input=Q, scale=S.astype(np.float16), output_dtype=np.float32), "scale",
     ["output and scale must have the same data type", "scale is float16", "output is float32"]),
    ("dequantize", dict(input=Q, scale=S, output_dtype=np.int8), "output",
     ["output has dtype int8", "supports float32, float16"]),
    ("dequantize", dict(input=Q, scale=np.ones((3, 1), np.float32)), "scale",
     ["scale has shape (3, 1)", "3 does not divide 4"]),
    ("dequantize", dict(input=Q, scale=S, zero_point=np.zeros((1, 1, 3), np.int8)),
     "output", ["must have the same dimension count", "zero_point has 3"]),
    ("dequantize", dict(input=Q, scale=-S), "scale", ["scale has a negative value"]),
])
def test_bad_calls_name_the_operator_slot_given_and_allowed(operator, call, slot, words):
    # Every other check comes before out's: a 2-D call gets an out to leave alone.
    out = np.full((4, 6), 7, np.float32 if operator == "dequantize" else np.int8)
    kwargs = dict(call)
    with pytest.raises(qops.ValidationError) as error:
        getattr(qops, operator)(**kwargs, out=out if np.ndim(kwargs["input"]) == 2 else None)
    message = str(error.value)
    assert message.startswith(operator.upper() + ": ")
    assert error.value.operator == operator.upper()
    if slot is not None:
        assert error.value.slot == slot
    for word in words:
        assert word in message
    assert (out == 7).all()  # a rejected call writes nothing
    # qops.validate refuses the same call with the same message.
    slots = {k: v for k, v in kwargs.items() if k != "feature_level"}
    with pytest.raises(qops.ValidationError) as again:
        qops.validate(operator.upper(), feature_level=kwargs.get("feature_level"), **slots)
    assert str(again.value) == message


@pytest.mark.parametrize("operator", ["quantize", "dequantize"])
def test_wrong_dtypes_are_type_errors(operator):
    with pytest.raises(TypeError):
        if operator == "quantize":
            qops.quantize(X, S, np.zeros((1, 3), np.uint8), output_dtype=np.int8)
        else:
            qops.dequantize(X, S)


def test_bad_out_arrays():
    with pytest.raises(qops.ValidationError, match="QUANTIZE: out has dtype uint8; the output is "
                                                   "int8"):
        qops.quantize(X, S, output_dtype=np.int8, out=np.empty((4, 6), np.uint8))
    with pytest.raises(qops.ValidationError, match=r"DEQUANTIZE: out has shape \(6, 4\)"):
        qops.dequantize(Q, S, out=np.empty((6, 4), np.float32))
    buffer = np.ones((4, 6), np.float32)
    with pytest.raises(qops.ValidationError, match="DEQUANTIZE: out overlaps scale"):
        qops.dequantize(Q, buffer[:1, :3], out=buffer)
    with pytest.raises(qops.ValidationError, match="out must be C-contiguous"):
        qops.quantize(X, S, output_dtype=np.int8, out=np.empty((6, 4), np.int8).T)
