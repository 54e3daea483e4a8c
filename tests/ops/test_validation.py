"""Every validation rule: accepted and rejected calls, exception classes, messages.

Expectations come from the contract (``../shared/API.md`` beside the project) and the seed pages:
000 (convolution), 002 (matrix multiply, feature levels 2_1 and 4_0) and 004
(DequantizeLinear, opsets 10..23); QuantizeLinear's type lists come from
``onnx.defs``.  Each rejected case asserts the exception class and the key parts
of its message: the operator, the slot, what was given, what the level or opset
allows and, where there is one, the first level or opset that allows it.

Calls go through the operator functions and through ``qops.validate`` (with
arrays, and with ``qops.TensorDesc`` descriptions in place of the arrays).
"""

from __future__ import annotations

import functools
import math

import ml_dtypes
import numpy as np
import pytest

import qops
from qops import FeatureLevel
from qops import TensorDesc as TD

CONV = "QUANTIZED_LINEAR_CONVOLUTION"
MATMUL = "QUANTIZED_LINEAR_MATRIX_MULTIPLY"
DQ = "DequantizeLinear"
Q = "QuantizeLinear"
ONNX_OPS = (DQ, Q)

U8, I8, I16, U16, I32 = np.uint8, np.int8, np.int16, np.uint16, np.int32
F16, F32, F64 = np.float16, np.float32, np.float64
BF16 = ml_dtypes.bfloat16
INT4, UINT4 = ml_dtypes.int4, ml_dtypes.uint4
FLOAT4 = ml_dtypes.float4_e2m1fn
FLOAT8 = {"float8e4m3fn": ml_dtypes.float8_e4m3fn, "float8e4m3fnuz": ml_dtypes.float8_e4m3fnuz,
          "float8e5m2": ml_dtypes.float8_e5m2, "float8e5m2fnuz": ml_dtypes.float8_e5m2fnuz}

FUNCTIONS = {CONV: qops.quantized_linear_convolution, MATMUL: qops.quantized_linear_matrix_multiply,
             DQ: qops.dequantize_linear, Q: qops.quantize_linear}
VIAS = ["function", "validate", "desc"]
ARRAY_VIAS = ["function", "validate"]

# Error kinds
INVALID = "invalid"                    # ValidationError, neither Unsupported nor TypeError
UNSUPPORTED = "unsupported"            # UnsupportedError, not TypeError
DTYPE = "dtype"                        # ValidationError and TypeError, not Unsupported
DTYPE_UNSUPPORTED = "dtype-unsupported"  # UnsupportedError and TypeError
ANY = "any"                            # some ValidationError


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------

def full(shape, value, dtype):
    return np.full(shape, value, dtype=dtype)


def data(shape, dtype, modulo=5):
    size = math.prod(shape)
    return (np.arange(size) % modulo).reshape(shape).astype(dtype)


def describe(kwargs):
    """Arrays replaced by TensorDesc descriptions (numbers stay numbers)."""
    return {k: (TD(v.dtype, v.shape) if isinstance(v, np.ndarray) else v)
            for k, v in kwargs.items()}


def run(name, via, version=None, **kwargs):
    key = "opset" if name in ONNX_OPS else "feature_level"
    if version is not None:
        kwargs[key] = version
    if via == "function":
        return FUNCTIONS[name](**kwargs)
    if via == "desc":
        kwargs = describe(kwargs)
    return qops.validate(name, **kwargs)


def check_kind(error, kind):
    assert isinstance(error, qops.ValidationError)
    assert isinstance(error, qops.QopsError) and isinstance(error, ValueError)
    if kind == INVALID:
        assert not isinstance(error, qops.UnsupportedError), repr(error)
        assert not isinstance(error, TypeError), repr(error)
    elif kind == UNSUPPORTED:
        assert isinstance(error, qops.UnsupportedError), repr(error)
        assert not isinstance(error, TypeError), repr(error)
    elif kind == DTYPE:
        assert isinstance(error, TypeError), repr(error)
        assert not isinstance(error, qops.UnsupportedError), repr(error)
    elif kind == DTYPE_UNSUPPORTED:
        assert isinstance(error, qops.UnsupportedError), repr(error)
        assert isinstance(error, TypeError), repr(error)
    else:
        assert kind == ANY


def check_message(message, fragments, absent=()):
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    for fragment in absent:
        assert fragment not in message, f"{fragment!r} unexpectedly in {message!r}"


def expect(kind, fragments, name, via, version=None, absent=(), **kwargs):
    with pytest.raises(qops.ValidationError) as info:
        run(name, via, version, **kwargs)
    check_kind(info.value, kind)
    message = str(info.value)
    check_message(message, (name,) + tuple(fragments), absent)
    return info.value


def level(label):
    return f"DML_FEATURE_LEVEL_{label}"


# -- valid base calls -----------------------------------------------------------

def conv_kw(x_type=U8, w_type=U8, y_type=None, x_shape=(1, 2, 4, 4), w_shape=(3, 2, 2, 2),
            **overrides):
    """A valid convolution with every slot an explicit 4-D array."""
    x, w = x_type, w_type
    y = x if y_type is None else y_type
    oc = w_shape[0]
    kwargs = dict(
        input=data(x_shape, x), input_scale=full((1, 1, 1, 1), 0.5, F32),
        input_zero_point=full((1, 1, 1, 1), 1, x),
        filter=data(w_shape, w, 3), filter_scale=full((1, oc, 1, 1), 0.25, F32),
        filter_zero_point=full((1, oc, 1, 1), 1, w), bias=full((1, oc, 1, 1), 3, I32),
        output_scale=full((1, 1, 1, 1), 0.5, F32), output_zero_point=full((1, 1, 1, 1), 2, y))
    kwargs.update(overrides)
    return kwargs


def mm_kw(rank=4, a_type=U8, b_type=U8, y_type=None, m=2, k=3, n=4, scale_rank=None, **overrides):
    """A valid matrix multiply: A (..., M, K), B (..., K, N), per-tensor parameters of scale_rank."""
    a, b = a_type, b_type
    y = a if y_type is None else y_type
    batch = (1,) * (rank - 2)
    s = (1,) * (rank if scale_rank is None else scale_rank)
    kwargs = dict(
        a=data(batch + (m, k), a), a_scale=full(s, 0.5, F32), a_zero_point=full(s, 1, a),
        b=data(batch + (k, n), b, 3), b_scale=full(s, 0.25, F32), b_zero_point=full(s, 1, b),
        output_scale=full(s, 0.5, F32), output_zero_point=full(s, 2, y))
    kwargs.update(overrides)
    return kwargs


def dq_kw(x_type=I8, shape=(2, 3), scale=None, **overrides):
    kwargs = dict(x=data(shape, x_type), x_scale=full((), 0.5, F32) if scale is None else scale)
    kwargs.update(overrides)
    return kwargs


def q_kw(x_type=F32, shape=(2, 3), scale=None, **overrides):
    kwargs = dict(x=(data(shape, F32) - 2).astype(x_type),
                  y_scale=full((), 0.5, x_type) if scale is None else scale)
    kwargs.update(overrides)
    return kwargs


def base(name, **overrides):
    return {CONV: conv_kw, MATMUL: mm_kw, DQ: dq_kw, Q: q_kw}[name](**overrides)


# ---------------------------------------------------------------------------
# feature levels and opsets
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("via", VIAS)
@pytest.mark.parametrize("name", [CONV, MATMUL])
@pytest.mark.parametrize("below", ["2_0", "1_0", (2, 0), "2.0", FeatureLevel.FL_2_0])
def test_feature_level_below_introduction(name, below, via):
    label = FeatureLevel.parse(below).label
    error = expect(UNSUPPORTED, [level("2_1"), level(label)], name, via, below, **base(name))
    assert error.first_version is FeatureLevel.FL_2_1


@pytest.mark.parametrize("via", VIAS)
@pytest.mark.parametrize("name", [CONV, MATMUL])
@pytest.mark.parametrize("bad", ["2_2", "9_9", "4", "", "v2_1", "latest", (2, 2), (4,), 2.1])
def test_unknown_feature_level(name, bad, via):
    expect(ANY, [repr(bad)], name, via, bad, **base(name))


@pytest.mark.parametrize("via", VIAS)
@pytest.mark.parametrize("spelling", ["2_1", "2.1", (2, 1), "DML_FEATURE_LEVEL_2_1",
                                      FeatureLevel.FL_2_1])
def test_feature_level_2_1_spellings(spelling, via):
    assert run(MATMUL, via, spelling, **mm_kw(4)) is not None
    expect(UNSUPPORTED, [f"a has 2 dimensions; {level('2_1')} supports 4"], MATMUL, via, spelling,
           **mm_kw(2))


@pytest.mark.parametrize("via", VIAS)
@pytest.mark.parametrize("spelling", ["4_0", "4.0", (4, 0), "DML_FEATURE_LEVEL_4_0",
                                      FeatureLevel.FL_4_0, "6_4", None])
def test_feature_level_4_0_and_newer_spellings(spelling, via):
    # None is the newest level the registry knows: it has the 4_0 support.
    assert run(MATMUL, via, spelling, **mm_kw(2)) is not None


@pytest.mark.parametrize("via", VIAS)
@pytest.mark.parametrize("name", ONNX_OPS)
@pytest.mark.parametrize("opset", [9, 1])
def test_opset_below_introduction(name, opset, via):
    expect(UNSUPPORTED, ["opset 10", f"opset {opset}"], name, via, opset, **base(name))


@pytest.mark.parametrize("via", VIAS)
@pytest.mark.parametrize("name", ONNX_OPS)
@pytest.mark.parametrize("bad", [0, -1, "13", 13.0, True])
def test_bad_opset_value(name, bad, via):
    expect(ANY, ["opset", repr(bad)], name, via, bad, **base(name))


@pytest.mark.parametrize("name", [CONV, MATMUL])
def test_directml_operator_rejects_opset(name):
    expect(ANY, ["opset"], name, "validate", opset=13, **base(name))
    with pytest.raises((TypeError, qops.ValidationError)):
        FUNCTIONS[name](**base(name), opset=13)


@pytest.mark.parametrize("name", ONNX_OPS)
def test_onnx_operator_rejects_feature_level(name):
    expect(ANY, ["feature_level"], name, "validate", feature_level="4_0", **base(name))
    with pytest.raises((TypeError, qops.ValidationError)):
        FUNCTIONS[name](**base(name), feature_level="4_0")


def test_validate_unknown_operator_and_argument():
    with pytest.raises(qops.ValidationError) as info:
        qops.validate("QLinearConv")
    assert "QLinearConv" in str(info.value)
    expect(ANY, ["colour"], CONV, "validate", **conv_kw(), colour="red")


# ---------------------------------------------------------------------------
# dimension counts per slot and level
# ---------------------------------------------------------------------------

def _conv_shape(slot, ndim):
    if slot == "input":
        return {3: (2, 4, 4), 5: (1, 1, 2, 4, 4)}[ndim]
    if slot == "filter":
        return {3: (2, 2, 2), 5: (1, 3, 2, 2, 2)}[ndim]
    return (1,) * ndim


_CONV_DTYPES = {"input": U8, "input_scale": F32, "input_zero_point": U8, "filter": U8,
                "filter_scale": F32, "filter_zero_point": U8, "bias": I32, "output_scale": F32,
                "output_zero_point": U8}
CONV_DIM_CASES = [(slot, ndim) for slot in _CONV_DTYPES for ndim in (2, 3, 5)
                  if not (slot in ("input", "filter") and ndim == 2)]
# A 1-d filter_scale / filter_zero_point / bias is the per-channel shorthand.
CONV_DIM_CASES += [(slot, 1) for slot in ("input_scale", "input_zero_point", "output_scale",
                                          "output_zero_point")]


#: The convolution page's dimension counts per level, transcribed here apart
#: from the registry's table: every slot 4 at 2_1; 3 to 4 for the tensors and
#: 1 to 4 for the parameters (3 to 4 for the filter scale) from 4_0; the
#: filter scale 1 to 4 from 5_2.
_CONV_PAGE_DIMS = {"2_1": dict.fromkeys(_CONV_DTYPES, (4, 4))}
_CONV_PAGE_DIMS["4_0"] = {slot: ((3, 4) if slot in ("input", "filter", "bias", "filter_scale")
                                 else (1, 4)) for slot in _CONV_DTYPES}
_CONV_PAGE_DIMS["5_2"] = dict(_CONV_PAGE_DIMS["4_0"], filter_scale=(1, 4))


def _dims_text(low, high):
    return str(low) if low == high else f"{low} to {high}"


@pytest.mark.parametrize("via", VIAS)
@pytest.mark.parametrize("label", ["2_1", "3_1", "4_0", "5_1", "5_2", "6_4"])
@pytest.mark.parametrize("slot, ndim", CONV_DIM_CASES)
def test_conv_dimension_counts(slot, ndim, label, via):
    """Each level takes what its row says and names the first level that
    takes a count it refuses; a tensor of an allowed count that differs
    from the others meets the page's same-dimension-count constraint."""
    rows = [key for key in _CONV_PAGE_DIMS if FeatureLevel.parse(key) <= FeatureLevel.parse(label)]
    low, high = _CONV_PAGE_DIMS[rows[-1]][slot]
    value = data(_conv_shape(slot, ndim), _CONV_DTYPES[slot]) + (1 if "scale" in slot else 0)
    kwargs = conv_kw(**{slot: value})
    if low <= ndim <= high:
        if slot in ("input", "filter", "bias") and ndim != 4:
            expect(INVALID, ["bias, filter, input and output must have the same dimension count",
                             f"{slot} has {ndim}"], CONV, via, label, **kwargs)
        else:
            result = run(CONV, via, label, **kwargs)
            shape = getattr(result, "shape", None) or result.output_shape
            assert tuple(shape) == (1, 3, 3, 3)
        return
    word = "dimension" if ndim == 1 else "dimensions"
    fragments = [f"{slot} has {ndim} {word}; {level(label)} supports {_dims_text(low, high)}"]
    later = [key for key in _CONV_PAGE_DIMS if FeatureLevel.parse(key) > FeatureLevel.parse(label)
             and _CONV_PAGE_DIMS[key][slot][0] <= ndim <= _CONV_PAGE_DIMS[key][slot][1]]
    if later:
        fragments.append(f"({_dims_text(*_CONV_PAGE_DIMS[later[0]][slot])} from "
                         f"{level(later[0])})")
    error = expect(UNSUPPORTED, fragments, CONV, via, label,
                   absent=() if later else ["from DML_FEATURE_LEVEL"], **kwargs)
    assert error.slot == slot
    if later:
        assert error.first_version is FeatureLevel.parse(later[0])


@pytest.mark.parametrize("via", VIAS)
@pytest.mark.parametrize("label", ["2_1", "3_0", "4_0", "6_4"])
def test_conv_accepts_4d_at_every_level(label, via):
    result = run(CONV, via, label, **conv_kw())
    shape = getattr(result, "shape", None) or result.output_shape
    assert tuple(shape) == (1, 3, 3, 3)


_MM_DTYPES = {"a": U8, "a_scale": F32, "a_zero_point": U8, "b": U8, "b_scale": F32,
              "b_zero_point": U8, "output_scale": F32, "output_zero_point": U8}


def _mm_value(slot, ndim, rank=4):
    if slot == "a":
        shape = (1,) * (ndim - 2) + (2, 3) if ndim >= 2 else (3,)
    elif slot == "b":
        shape = (1,) * (ndim - 2) + (3, 4) if ndim >= 2 else (3,)
    else:
        shape = (1,) * ndim
    return full(shape, 1, _MM_DTYPES[slot])


MM_DIM_CASES = []
for _slot in _MM_DTYPES:
    _data = _slot in ("a", "b")
    # at 2_1 (and 3_x, which use the 2_1 row): only 4; 2 and 3 (data) / 1 to 3 (parameters) from 4_0
    for _ndim in ((2, 3) if _data else (1, 2, 3)):
        for _label in ("2_1", "3_1"):
            MM_DIM_CASES.append((_slot, _ndim, _label, "4", "2 to 4" if _data else "1 to 4"))
    for _label in ("2_1", "4_0", "6_4"):
        allowed = "4" if _label == "2_1" else ("2 to 4" if _data else "1 to 4")
        MM_DIM_CASES.append((_slot, 5, _label, allowed, None))
    if _data:
        for _label in ("2_1", "4_0"):
            MM_DIM_CASES.append((_slot, 1, _label, "4" if _label == "2_1" else "2 to 4", None))


@pytest.mark.parametrize("via", VIAS)
@pytest.mark.parametrize("slot, ndim, label, allowed, later", MM_DIM_CASES,
                         ids=[f"{c[0]}-{c[1]}d-{c[2]}" for c in MM_DIM_CASES])
def test_matmul_dimension_counts(slot, ndim, label, allowed, later, via):
    kwargs = mm_kw(4, a_scale=0.5, a_zero_point=1, b_scale=0.25, b_zero_point=1, output_scale=0.5,
                   output_zero_point=2)
    kwargs[slot] = _mm_value(slot, ndim)
    word = "dimension" if ndim == 1 else "dimensions"
    fragments = [f"{slot} has {ndim} {word}; {level(label)} supports {allowed}"]
    if later:
        fragments.append(f"({later} from {level('4_0')})")
        absent = ()
    else:
        absent = ["from DML_FEATURE_LEVEL"]
    error = expect(UNSUPPORTED, fragments, MATMUL, via, label, absent=absent, **kwargs)
    assert error.slot == slot
    if later:
        assert error.first_version is FeatureLevel.FL_4_0


def test_matmul_dimension_message_example():
    """The contract's own example message, verbatim."""
    with pytest.raises(qops.UnsupportedError) as info:
        qops.quantized_linear_matrix_multiply(**mm_kw(2), feature_level="2_1")
    assert str(info.value) == ("QUANTIZED_LINEAR_MATRIX_MULTIPLY: a has 2 dimensions; "
                               "DML_FEATURE_LEVEL_2_1 supports 4 (2 to 4 from DML_FEATURE_LEVEL_4_0)")


MM_RANKS_4_0 = [(r, s) for r in (2, 3, 4) for s in (1, 2, 3, 4)]


@pytest.mark.parametrize("via", VIAS)
@pytest.mark.parametrize("rank, scale_rank", MM_RANKS_4_0)
def test_matmul_accepts_ranks_from_4_0(rank, scale_rank, via):
    result = run(MATMUL, via, "4_0", **mm_kw(rank, scale_rank=scale_rank))
    shape = getattr(result, "shape", None) or result.output_shape
    assert tuple(shape) == (1,) * (rank - 2) + (2, 4)
    if (rank, scale_rank) != (4, 4):
        with pytest.raises(qops.UnsupportedError):
            run(MATMUL, via, "2_1", **mm_kw(rank, scale_rank=scale_rank))


# ---------------------------------------------------------------------------
# data types per slot
# ---------------------------------------------------------------------------

CONV_DTYPE_CASES = [
    ("input", I16, "int16", "int8, uint8"),
    ("input", F32, "float32", "int8, uint8"),
    ("input_scale", F16, "float16", "float32"),
    ("input_scale", F64, "float64", "float32"),
    ("input_zero_point", I16, "int16", "int8, uint8"),
    ("filter", I32, "int32", "int8, uint8"),
    ("filter_scale", BF16, "bfloat16", "float32"),
    ("filter_zero_point", U16, "uint16", "int8, uint8"),
    ("bias", F32, "float32", "int32"),
    ("bias", np.int64, "int64", "int32"),
    ("bias", I16, "int16", "int32"),
    ("output_scale", F16, "float16", "float32"),
    ("output_zero_point", I32, "int32", "int8, uint8"),
]


@pytest.mark.parametrize("via", VIAS)
@pytest.mark.parametrize("label", ["2_1", "4_0"])
@pytest.mark.parametrize("slot, dtype, given, allowed", CONV_DTYPE_CASES,
                         ids=[f"{c[0]}-{c[2]}" for c in CONV_DTYPE_CASES])
def test_conv_dtypes(slot, dtype, given, allowed, label, via):
    kwargs = conv_kw()
    kwargs[slot] = kwargs[slot].astype(dtype)
    error = expect(DTYPE_UNSUPPORTED, [f"{slot} has dtype {given}; {level(label)} supports {allowed}"],
                   CONV, via, label, absent=[" from "], **kwargs)
    assert error.slot == slot


MM_DTYPE_CASES = [
    ("a", I16, "int16", "int8, uint8"),
    ("a_scale", F16, "float16", "float32"),
    ("a_zero_point", I32, "int32", "int8, uint8"),
    ("b", U16, "uint16", "int8, uint8"),
    ("b", F32, "float32", "int8, uint8"),
    ("b_scale", F64, "float64", "float32"),
    ("b_zero_point", I16, "int16", "int8, uint8"),
    ("output_scale", BF16, "bfloat16", "float32"),
    ("output_zero_point", I16, "int16", "int8, uint8"),
]


@pytest.mark.parametrize("via", VIAS)
@pytest.mark.parametrize("label", ["2_1", "4_0"])
@pytest.mark.parametrize("slot, dtype, given, allowed", MM_DTYPE_CASES,
                         ids=[f"{c[0]}-{c[2]}" for c in MM_DTYPE_CASES])
def test_matmul_dtypes(slot, dtype, given, allowed, label, via):
    kwargs = mm_kw(4)
    kwargs[slot] = kwargs[slot].astype(dtype)
    error = expect(DTYPE_UNSUPPORTED, [f"{slot} has dtype {given}; {level(label)} supports {allowed}"],
                   MATMUL, via, label, absent=[" from "], **kwargs)
    assert error.slot == slot


@pytest.mark.parametrize("via", VIAS)
@pytest.mark.parametrize("name", [CONV, MATMUL])
@pytest.mark.parametrize("output_dtype, label", [("int16", "int16"), (np.int32, "int32"),
                                                 ("float32", "float32"), ("uint4", "uint4")])
def test_output_dtype_unsupported(name, output_dtype, label, via):
    kwargs = base(name, output_zero_point=None)
    expect(DTYPE_UNSUPPORTED, [f"output has dtype {label}", "supports int8, uint8"], name, via,
           "2_1", output_dtype=output_dtype, **kwargs)


@pytest.mark.parametrize("via", VIAS)
@pytest.mark.parametrize("name", [CONV, MATMUL])
def test_output_dtype_unknown_name(name, via):
    kwargs = base(name, output_zero_point=None)
    expect(DTYPE, ["output_dtype", "bogus"], name, via, "2_1", output_dtype="bogus", **kwargs)


TYPE_COMBOS = [(x, w, y) for x in (U8, I8) for w in (U8, I8) for y in (U8, I8)]


@pytest.mark.parametrize("via", VIAS)
@pytest.mark.parametrize("x, w, y", TYPE_COMBOS)
def test_every_int8_combination_accepted(x, w, y, via):
    conv = run(CONV, via, "2_1", **conv_kw(x, w, y))
    mm = run(MATMUL, via, "2_1", **mm_kw(4, x, w, y))
    if via == "function":
        assert conv.dtype == np.dtype(y) and mm.dtype == np.dtype(y)
    else:
        assert conv.output_dtype == np.dtype(y).name and mm.output_dtype == np.dtype(y).name


# ---------------------------------------------------------------------------
# cross-slot constraints
# ---------------------------------------------------------------------------

SAME_DTYPE_CASES = [
    (CONV, "input", "input_zero_point", dict(x_type=U8), I8),
    (CONV, "input", "input_zero_point", dict(x_type=I8), U8),
    (CONV, "filter", "filter_zero_point", dict(w_type=U8), I8),
    (CONV, "filter", "filter_zero_point", dict(w_type=I8), U8),
    (MATMUL, "a", "a_zero_point", dict(a_type=U8), I8),
    (MATMUL, "b", "b_zero_point", dict(b_type=I8), U8),
]


@pytest.mark.parametrize("via", VIAS)
@pytest.mark.parametrize("label", ["2_1", "4_0"])
@pytest.mark.parametrize("name, tensor, zero_point, types, zp_dtype", SAME_DTYPE_CASES)
def test_same_dtype_constraint(name, tensor, zero_point, types, zp_dtype, label, via):
    kwargs = base(name, **types)
    tensor_type = np.dtype(kwargs[tensor].dtype).name
    kwargs[zero_point] = kwargs[zero_point].astype(zp_dtype)
    expect(DTYPE, [f"{tensor} and {zero_point} must have the same data type",
                   f"{tensor} is {tensor_type}", f"{zero_point} is {np.dtype(zp_dtype).name}"],
           name, via, label, **kwargs)


@pytest.mark.parametrize("via", VIAS)
@pytest.mark.parametrize("name", [CONV, MATMUL])
@pytest.mark.parametrize("output_dtype, zp_dtype", [("uint8", I8), ("int8", U8)])
def test_output_dtype_conflicts_with_output_zero_point(name, output_dtype, zp_dtype, via):
    kwargs = base(name)
    kwargs["output_zero_point"] = kwargs["output_zero_point"].astype(zp_dtype)
    expect(DTYPE, ["output", "output_zero_point", output_dtype, np.dtype(zp_dtype).name], name, via,
           "2_1", output_dtype=output_dtype, **kwargs)


@pytest.mark.parametrize("via", VIAS)
@pytest.mark.parametrize("name", [CONV, MATMUL])
def test_output_dtype_rules_accepted(name, via):
    """Output dtype: the zero point's; else output_dtype; else the input's."""
    def out_dtype(**kwargs):
        result = run(name, via, "2_1", **kwargs)
        return np.dtype(result.dtype).name if via == "function" else result.output_dtype
    kwargs = base(name)  # uint8 input
    kwargs["output_zero_point"] = kwargs["output_zero_point"].astype(I8)
    assert out_dtype(**kwargs) == "int8"
    assert out_dtype(**kwargs, output_dtype="int8") == "int8"
    assert out_dtype(**base(name, output_zero_point=None)) == "uint8"
    assert out_dtype(**base(name, output_zero_point=None), output_dtype=I8) == "int8"
    # A number as output zero point takes output_dtype.
    assert out_dtype(**base(name, output_zero_point=-5), output_dtype="int8") == "int8"
    assert out_dtype(**base(name, output_zero_point=200)) == "uint8"


MM_SAME_DIMS_CASES = [
    dict(a_scale=(1, 1), b_scale=(1, 1, 1)),
    dict(a_zero_point=(1, 1, 1, 1), a_scale=(1, 1)),
    dict(output_scale=(1, 1), output_zero_point=(1,)),
    dict(b_scale=(1, 1, 1), b_zero_point=(1, 1)),
]


@pytest.mark.parametrize("via", VIAS)
@pytest.mark.parametrize("shapes", MM_SAME_DIMS_CASES)
def test_matmul_parameters_same_dimension_count(shapes, via):
    kwargs = mm_kw(2, a_scale=0.5, a_zero_point=None, b_scale=0.5, b_zero_point=None,
                   output_scale=0.5, output_zero_point=None)
    for slot, shape in shapes.items():
        kwargs[slot] = full(shape, 1, _MM_DTYPES[slot])
    fragments = ["a_scale, a_zero_point, b_scale, b_zero_point, output_scale and output_zero_point "
                 "must have the same dimension count"]
    fragments += [f"{slot} has {len(shape)}" for slot, shape in shapes.items()]
    expect(INVALID, fragments, MATMUL, via, "4_0", **kwargs)


@pytest.mark.parametrize("via", VIAS)
@pytest.mark.parametrize("a_rank, b_rank", [(2, 3), (3, 2), (4, 2), (3, 4)])
def test_matmul_data_same_dimension_count(a_rank, b_rank, via):
    kwargs = mm_kw(a_rank, scale_rank=2)
    kwargs["b"] = _mm_value("b", b_rank)
    expect(INVALID, ["a, b and output must have the same dimension count", f"a has {a_rank}",
                     f"b has {b_rank}"], MATMUL, via, "4_0", **kwargs)


# ---------------------------------------------------------------------------
# shorthand
# ---------------------------------------------------------------------------

def test_conv_shorthand_numbers_and_0d_arrays_equal_explicit():
    explicit = qops.quantized_linear_convolution(**conv_kw(), feature_level="2_1")
    per_tensor = conv_kw(filter_scale=full((1, 1, 1, 1), 0.25, F32),
                         filter_zero_point=full((1, 1, 1, 1), 1, U8))
    explicit_pt = qops.quantized_linear_convolution(**per_tensor, feature_level="2_1")
    variants = [
        dict(input_scale=0.5, input_zero_point=1, output_scale=0.5, output_zero_point=2),
        dict(input_scale=np.float32(0.5), input_zero_point=np.uint8(1),
             output_scale=np.array(0.5, F32), output_zero_point=np.array(2, U8)),
    ]
    for variant in variants:
        got = qops.quantized_linear_convolution(**conv_kw(**variant), feature_level="2_1")
        assert got.dtype == explicit.dtype and np.array_equal(got, explicit)
        got = qops.quantized_linear_convolution(
            **dict(per_tensor, **variant, filter_scale=0.25, filter_zero_point=1),
            feature_level="2_1")
        assert np.array_equal(got, explicit_pt)


def test_conv_per_channel_1d_shorthand_equals_explicit():
    scales = np.array([0.25, 0.5, 0.125], F32)
    zero_points = np.array([1, 2, 0], U8)
    bias = np.array([3, -7, 100], I32)
    explicit = qops.quantized_linear_convolution(**conv_kw(
        filter_scale=scales.reshape(1, 3, 1, 1), filter_zero_point=zero_points.reshape(1, 3, 1, 1),
        bias=bias.reshape(1, 3, 1, 1)))
    short = qops.quantized_linear_convolution(**conv_kw(
        filter_scale=scales, filter_zero_point=zero_points, bias=bias))
    assert np.array_equal(short, explicit)
    result = qops.validate(CONV, feature_level="2_1", **describe(conv_kw(
        filter_scale=scales, filter_zero_point=zero_points, bias=bias)))
    assert result.granularity["filter_scale"] == "per-channel"


@pytest.mark.parametrize("label, rank", [("2_1", 4), ("4_0", 2), ("4_0", 3)])
def test_matmul_shorthand_expands_to_rank(label, rank):
    explicit = qops.quantized_linear_matrix_multiply(**mm_kw(rank), feature_level=label)
    for variant in (dict(a_scale=0.5, a_zero_point=1, b_scale=0.25, b_zero_point=1,
                         output_scale=0.5, output_zero_point=2),
                    dict(a_scale=np.array(0.5, F32), a_zero_point=np.array(1, U8),
                         b_scale=np.float32(0.25), b_zero_point=np.uint8(1),
                         output_scale=np.array(0.5, F32), output_zero_point=np.uint8(2))):
        got = qops.quantized_linear_matrix_multiply(**mm_kw(rank, **variant), feature_level=label)
        assert got.dtype == explicit.dtype and np.array_equal(got, explicit)
        assert qops.validate(MATMUL, feature_level=label, **describe(mm_kw(rank, **variant))) is not None


@pytest.mark.parametrize("via", VIAS)
def test_matmul_shorthand_next_to_explicit_parameters(via):
    # A scalar takes the rank the explicit parameters share (4_0), so it does not
    # break the same-dimension-count constraint.
    kwargs = mm_kw(3, a_scale=full((1, 2, 1), 0.5, F32), b_scale=0.25, b_zero_point=1,
                   a_zero_point=np.uint8(1), output_scale=0.5, output_zero_point=2)
    assert run(MATMUL, via, "4_0", **kwargs) is not None


PER_CHANNEL_MISMATCH = [
    ("filter_scale", np.full(4, 0.25, F32), ["(1, 1, 1, 1) per-tensor", "(1, 3, 1, 1) per-channel"]),
    ("filter_zero_point", np.full(4, 1, U8), ["(1, 1, 1, 1) per-tensor", "(1, 3, 1, 1) per-channel"]),
    ("bias", np.full(4, 1, I32), ["(1, 3, 1, 1) per-channel"]),
    ("filter_scale", np.full(2, 0.25, F32), ["(1, 3, 1, 1) per-channel"]),
]


@pytest.mark.parametrize("via", VIAS)
@pytest.mark.parametrize("slot, value, expected", PER_CHANNEL_MISMATCH,
                         ids=[f"{c[0]}-{len(c[1])}" for c in PER_CHANNEL_MISMATCH])
def test_per_channel_length_mismatch_names_expanded_shape(slot, value, expected, via):
    n = len(value)
    expect(INVALID, [f"{slot} has shape (1, {n}, 1, 1)", f"expanded from a 1-d array of length {n}",
                     "OutputChannelCount = 3"] + expected, CONV, via, "2_1", **conv_kw(**{slot: value}))


@pytest.mark.parametrize("via", VIAS)
@pytest.mark.parametrize("bias", [5, np.array(5, I32)])
def test_scalar_bias_rejected(bias, via):
    # The seed's bias is { 1, OutputChannelCount, 1, 1 } (OutputChannelCount = 3 here);
    # the contract's shorthand covers scales and zero points only.  If qops expands the
    # scalar anyway, the message must name the expanded shape and say so.
    error = expect(INVALID, ["bias"], CONV, via, "2_1", **conv_kw(bias=bias))
    if "expanded" in str(error):
        check_message(str(error), ["(1, 1, 1, 1)", "expanded from a scalar"])


@pytest.mark.parametrize("via", VIAS)
@pytest.mark.parametrize("slot, shape, expected", [
    ("filter_scale", (1, 4, 1, 1), "(1, 3, 1, 1) per-channel"),
    ("filter_scale", (1, 1, 3, 1), "(1, 3, 1, 1) per-channel"),
    ("input_scale", (1, 3, 1, 1), "(1, 1, 1, 1) per-tensor"),
    ("input_zero_point", (1, 2, 1, 1), "(1, 1, 1, 1) per-tensor"),
    ("output_scale", (1, 3, 1, 1), "(1, 1, 1, 1) per-tensor"),
    ("output_zero_point", (1, 1, 1, 3), "(1, 1, 1, 1) per-tensor"),
    ("bias", (1, 1, 1, 1), "(1, 3, 1, 1) per-channel"),
])
def test_conv_parameter_shapes(slot, shape, expected, via):
    kwargs = conv_kw()
    kwargs[slot] = full(shape, 1, kwargs[slot].dtype)
    error = expect(INVALID, [f"{slot} has shape {shape}", expected], CONV, via, "2_1",
                   absent=["expanded"], **kwargs)
    assert error.slot == slot
    if slot in ("input_scale", "input_zero_point", "output_scale", "output_zero_point"):
        assert "per-channel" not in str(error)


@pytest.mark.parametrize("via", VIAS)
@pytest.mark.parametrize("slot, shape, expected", [
    ("a_scale", (1, 1, 3, 1), ["(1, 1, 2, 1) per-row", "M = 2"]),
    ("a_zero_point", (1, 1, 1, 2), ["(1, 1, 2, 1) per-row"]),
    ("b_scale", (1, 1, 1, 3), ["(1, 1, 1, 4) per-column", "N = 4"]),
    ("b_zero_point", (1, 1, 4, 1), ["(1, 1, 1, 4) per-column"]),
    ("output_scale", (1, 1, 1, 4), ["(1, 1, 2, 1) per-row"]),
    ("output_zero_point", (1, 1, 3, 1), ["(1, 1, 2, 1) per-row"]),
])
def test_matmul_parameter_shapes(slot, shape, expected, via):
    kwargs = mm_kw(4)
    kwargs[slot] = full(shape, 1, kwargs[slot].dtype)
    expect(INVALID, [f"{slot} has shape {shape}", "(1, 1, 1, 1) per-tensor"] + expected, MATMUL,
           via, "2_1", **kwargs)


@pytest.mark.parametrize("via", VIAS)
@pytest.mark.parametrize("label, rank", [("2_1", 4), ("4_0", 2), ("4_0", 3)])
def test_matmul_per_row_and_column_accepted(label, rank, via):
    s = (1,) * (rank - 2)
    kwargs = mm_kw(rank, a_scale=full(s + (2, 1), 0.5, F32), a_zero_point=full(s + (2, 1), 1, U8),
                   b_scale=full(s + (1, 4), 0.25, F32), b_zero_point=full(s + (1, 4), 1, U8),
                   output_scale=full(s + (2, 1), 0.5, F32), output_zero_point=full(s + (2, 1), 3, U8))
    result = run(MATMUL, via, label, **kwargs)
    if via != "function":
        assert result.granularity == {"a_scale": "per-row", "a_zero_point": "per-row",
                                      "b_scale": "per-column", "b_zero_point": "per-column",
                                      "output_scale": "per-row", "output_zero_point": "per-row"}


def test_matmul_dimension_count_message_says_expanded():
    kwargs = mm_kw(2, a_scale=full((1, 1), 0.5, F32), a_zero_point=None, b_zero_point=None,
                   b_scale=full((1, 1, 1), 0.25, F32), output_scale=0.5, output_zero_point=None)
    error = expect(INVALID, ["must have the same dimension count", "output_scale",
                             "expanded from a scalar"], MATMUL, "function", "4_0", **kwargs)
    assert error.slot is not None


def test_matmul_dimension_count_message_names_expanded_shape():
    kwargs = mm_kw(2, a_scale=full((1, 1), 0.5, F32), a_zero_point=None, b_zero_point=None,
                   b_scale=full((1, 1, 1), 0.25, F32), output_scale=0.5, output_zero_point=None)
    expect(INVALID, ["output_scale", "(1, 1)", "expanded from a scalar"], MATMUL, "function",
           "4_0", **kwargs)


# ---------------------------------------------------------------------------
# matrix multiply: K and batch broadcasting
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("via", VIAS)
@pytest.mark.parametrize("label, a_shape, b_shape", [
    ("2_1", (1, 1, 2, 3), (1, 1, 4, 5)),
    ("4_0", (2, 3), (2, 3)),
    ("4_0", (5, 2, 7), (5, 6, 4)),
])
def test_matmul_k_mismatch(label, a_shape, b_shape, via):
    kwargs = mm_kw(len(a_shape), a=full(a_shape, 1, U8), b=full(b_shape, 1, U8), a_scale=0.5,
                   a_zero_point=1, b_scale=0.5, b_zero_point=1, output_scale=0.5,
                   output_zero_point=1)
    expect(INVALID, ["K", str(a_shape), str(b_shape)], MATMUL, via, label, **kwargs)


BROADCASTS = [
    ("2_1", (2, 1, 2, 3), (1, 3, 3, 4), (2, 3, 2, 4)),
    ("2_1", (1, 1, 2, 3), (2, 3, 3, 4), (2, 3, 2, 4)),
    ("2_1", (2, 3, 2, 3), (2, 3, 3, 4), (2, 3, 2, 4)),
    ("4_0", (1, 2, 3), (5, 3, 4), (5, 2, 4)),
    ("4_0", (4, 2, 3), (1, 3, 4), (4, 2, 4)),
]


@pytest.mark.parametrize("label, a_shape, b_shape, out_shape", BROADCASTS)
def test_matmul_batch_broadcast_accepted(label, a_shape, b_shape, out_shape):
    a, b = data(a_shape, U8, 7), data(b_shape, U8, 4)
    kwargs = mm_kw(len(a_shape), a=a, b=b, a_scale=0.5, a_zero_point=1, b_scale=0.25,
                   b_zero_point=1, output_scale=0.5, output_zero_point=2)
    result = qops.quantized_linear_matrix_multiply(**kwargs, feature_level=label)
    assert result.shape == out_shape
    # Size-1 batch dimensions broadcast: the same as the materialized operands.
    batch = out_shape[:-2]
    full_a = np.ascontiguousarray(np.broadcast_to(a, batch + a_shape[-2:]))
    full_b = np.ascontiguousarray(np.broadcast_to(b, batch + b_shape[-2:]))
    expected = qops.quantized_linear_matrix_multiply(**dict(kwargs, a=full_a, b=full_b),
                                                     feature_level=label)
    assert np.array_equal(result, expected)
    assert qops.validate(MATMUL, feature_level=label, **describe(kwargs)).output_shape == out_shape


@pytest.mark.parametrize("via", VIAS)
@pytest.mark.parametrize("label, a_shape, b_shape, axis", [
    ("2_1", (2, 1, 2, 3), (3, 1, 3, 4), 0),
    ("2_1", (1, 2, 2, 3), (1, 3, 3, 4), 1),
    ("4_0", (2, 2, 3), (3, 3, 4), 0),
])
def test_matmul_batch_mismatch(label, a_shape, b_shape, axis, via):
    kwargs = mm_kw(len(a_shape), a=full(a_shape, 1, U8), b=full(b_shape, 1, U8), a_scale=0.5,
                   a_zero_point=1, b_scale=0.5, b_zero_point=1, output_scale=0.5,
                   output_zero_point=1)
    expect(INVALID, [str(a_shape), str(b_shape), "batch", str(a_shape[axis]), str(b_shape[axis])],
           MATMUL, via, label, **kwargs)


# ---------------------------------------------------------------------------
# convolution geometry
# ---------------------------------------------------------------------------

def _conv_geometry(x_shape, w_shape, **attributes):
    return conv_kw(x_shape=x_shape, w_shape=w_shape, **attributes)


def expected_output(x_shape, w_shape, strides=(1, 1), dilations=(1, 1), start_padding=(0, 0),
                    end_padding=(0, 0), group_count=1):
    sizes = []
    for axis in range(2):
        dilated = dilations[axis] * (w_shape[2 + axis] - 1) + 1
        padded = x_shape[2 + axis] + start_padding[axis] + end_padding[axis]
        sizes.append((padded - dilated) // strides[axis] + 1)
    return (x_shape[0], w_shape[0], *sizes)


GEOMETRY_OK = [
    ((1, 2, 4, 4), (3, 2, 2, 2), {}),
    ((1, 4, 5, 5), (2, 2, 3, 3), dict(group_count=2)),
    ((1, 4, 5, 5), (4, 1, 3, 3), dict(group_count=4)),          # depthwise
    ((2, 4, 5, 5), (8, 1, 3, 3), dict(group_count=4)),
    ((1, 4, 2, 2), (4, 4, 3, 3), dict(start_padding=(1, 1))),   # padding makes room
    ((1, 4, 2, 2), (4, 4, 3, 3), dict(end_padding=(1, 1))),
    ((1, 4, 5, 5), (4, 4, 3, 3), dict(strides=(2, 2), dilations=(2, 1), start_padding=(1, 0),
                                      end_padding=(0, 2))),
    ((1, 2, 7, 6), (3, 2, 3, 2), dict(strides=(3, 1), dilations=(1, 2))),
    ((1, 1, 3, 3), (1, 1, 3, 3), {}),
]


@pytest.mark.parametrize("via", VIAS)
@pytest.mark.parametrize("x_shape, w_shape, attributes", GEOMETRY_OK)
def test_conv_geometry_accepted(x_shape, w_shape, attributes, via):
    result = run(CONV, via, "2_1", **_conv_geometry(x_shape, w_shape, **attributes))
    shape = result.shape if via == "function" else result.output_shape
    assert tuple(shape) == expected_output(x_shape, w_shape, **attributes)


GEOMETRY_BAD = [
    ((1, 4, 5, 5), (2, 2, 3, 3), {}, ["input has 4 channels", "(2, 2, 3, 3)", "group_count 1"]),
    ((1, 4, 5, 5), (2, 4, 3, 3), dict(group_count=2), ["input has 4 channels", "group_count 2"]),
    ((1, 3, 5, 5), (3, 1, 3, 3), dict(group_count=2), ["input has 3 channels", "group_count 2"]),
    ((1, 4, 5, 5), (3, 2, 3, 3), dict(group_count=2), ["3 output channels", "group_count 2"]),
    ((1, 4, 5, 5), (4, 4, 3, 3), dict(group_count=0), ["group_count", "0", "at least 1"]),
    ((1, 4, 5, 5), (4, 4, 3, 3), dict(group_count=-1), ["group_count", "-1", "at least 1"]),
    ((1, 4, 2, 2), (4, 4, 3, 3), {}, ["output height", "0"]),
    ((1, 4, 5, 2), (4, 4, 3, 3), {}, ["output width", "0"]),
    ((1, 4, 5, 5), (4, 4, 3, 3), dict(dilations=(3, 3)), ["output height", "-1"]),
    ((1, 4, 5, 5), (4, 4, 3, 3), dict(strides=(0, 1)), ["strides", "0", "at least 1"]),
    ((1, 4, 5, 5), (4, 4, 3, 3), dict(strides=(1, -2)), ["strides", "-2", "at least 1"]),
    ((1, 4, 5, 5), (4, 4, 3, 3), dict(dilations=(1, 0)), ["dilations", "0", "at least 1"]),
    ((1, 4, 5, 5), (4, 4, 3, 3), dict(start_padding=(-1, 0)), ["start_padding", "-1", "at least 0"]),
    ((1, 4, 5, 5), (4, 4, 3, 3), dict(end_padding=(0, -1)), ["end_padding", "-1", "at least 0"]),
    ((1, 4, 5, 5), (4, 4, 3, 3), dict(strides=(2,)), ["strides", "1 value"]),
    ((1, 4, 5, 5), (4, 4, 3, 3), dict(strides=(2, 2, 2)), ["strides", "3 values"]),
    ((1, 4, 5, 5), (4, 4, 3, 3), dict(dilations=(1,)), ["dilations", "1 value"]),
    ((1, 4, 5, 5), (4, 4, 3, 3), dict(start_padding=(0, 0, 0)), ["start_padding", "3 values"]),
    ((1, 4, 5, 5), (4, 4, 3, 3), dict(end_padding=()), ["end_padding", "0 values"]),
    ((1, 4, 5, 5), (4, 4, 3, 3), dict(strides=2), ["strides", "2"]),
    ((1, 4, 5, 5), (4, 4, 3, 3), dict(strides=(1.5, 1)), ["strides", "1.5"]),
    ((1, 4, 5, 5), (4, 4, 3, 3), dict(group_count=1.5), ["group_count", "1.5"]),
    ((1, 4, 5, 5), (4, 4, 0, 3), {}, ["filter", "0"]),
]


@pytest.mark.parametrize("via", VIAS)
@pytest.mark.parametrize("x_shape, w_shape, attributes, fragments", GEOMETRY_BAD,
                         ids=[str(i) for i in range(len(GEOMETRY_BAD))])
def test_conv_geometry_rejected(x_shape, w_shape, attributes, fragments, via):
    expect(INVALID, fragments, CONV, via, "2_1", **_conv_geometry(x_shape, w_shape, **attributes))


@pytest.mark.parametrize("via", ["validate", "desc"])
def test_conv_dimension_count_only_2(via):
    assert run(CONV, via, "2_1", **conv_kw(), dimension_count=2) is not None
    for bad in (1, 3):
        expect(UNSUPPORTED, ["dimension_count", str(bad), "2"], CONV, via, "2_1", **conv_kw(),
               dimension_count=bad)


# ---------------------------------------------------------------------------
# out=
# ---------------------------------------------------------------------------

def _call_and_out(name):
    """(kwargs, output shape, output dtype) of a small valid call of each operator."""
    if name == CONV:
        return conv_kw(), (1, 3, 3, 3), np.dtype(U8)
    if name == MATMUL:
        return mm_kw(4), (1, 1, 2, 4), np.dtype(U8)
    if name == DQ:
        return dq_kw(), (2, 3), np.dtype(F32)
    return q_kw(), (2, 3), np.dtype(U8)


SENTINEL = 7


def _out_problems(shape, dtype):
    other = np.dtype(I8) if dtype != np.dtype(I8) else np.dtype(U8)
    wrong_shape = shape[:-1] + (shape[-1] + 1,)
    read_only = np.full(shape, SENTINEL, dtype)
    read_only.flags.writeable = False
    wide = np.full(shape[:-1] + (shape[-1] * 2,), SENTINEL, dtype)
    fortran = np.asfortranarray(np.full(shape, SENTINEL, dtype))
    assert not fortran.flags.c_contiguous
    return {
        "shape": (np.full(wrong_shape, SENTINEL, dtype), INVALID, [str(wrong_shape), str(shape)]),
        "dtype": (np.full(shape, SENTINEL, other), DTYPE, [other.name, dtype.name]),
        "strided": (wide[..., ::2], INVALID, ["contiguous"]),
        "fortran": (fortran, INVALID, ["contiguous"]),
        "read-only": (read_only, INVALID, []),
    }


@pytest.mark.parametrize("problem", ["shape", "dtype", "strided", "fortran", "read-only"])
@pytest.mark.parametrize("name", [CONV, MATMUL, DQ, Q])
def test_out_rejected_and_untouched(name, problem):
    kwargs, shape, dtype = _call_and_out(name)
    out, kind, fragments = _out_problems(shape, dtype)[problem]
    before = out.copy()
    with pytest.raises(qops.ValidationError) as info:
        FUNCTIONS[name](**kwargs, out=out)
    check_kind(info.value, kind)
    message = str(info.value)
    check_message(message, [name, "out"] + fragments)
    if problem == "read-only":
        assert any(w in message for w in ("read-only", "writeable", "writable")), message
    assert np.array_equal(out, before)


@pytest.mark.parametrize("name", [CONV, MATMUL, DQ, Q])
def test_out_accepted_is_written_and_returned(name):
    kwargs, shape, dtype = _call_and_out(name)
    expected = FUNCTIONS[name](**kwargs)
    assert expected.shape == shape and expected.dtype == dtype
    out = np.full(shape, SENTINEL, dtype)
    result = FUNCTIONS[name](**kwargs, out=out)
    assert result is out
    assert np.array_equal(out.view(np.uint8), expected.view(np.uint8))


def _overlapping(name):
    """(kwargs with an input that shares memory with out, out, the input's slot)."""
    if name == CONV:
        kwargs = conv_kw(x_shape=(1, 3, 3, 3), w_shape=(3, 3, 1, 1))
        buffer = np.zeros(60, U8)
        kwargs["input"] = buffer[:27].reshape(1, 3, 3, 3)
        kwargs["input"][...] = data((1, 3, 3, 3), U8)
        return kwargs, buffer[10:37].reshape(1, 3, 3, 3), "input", buffer
    if name == MATMUL:
        # a per-row output zero point of the output's shape and type, used as out
        kwargs = mm_kw(4, m=3, k=3, n=1)
        buffer = np.zeros(20, U8)
        kwargs["output_zero_point"] = buffer[:3].reshape(1, 1, 3, 1)
        kwargs["output_zero_point"][...] = 2
        kwargs["output_scale"] = full((1, 1, 3, 1), 0.5, F32)
        return kwargs, buffer[:3].reshape(1, 1, 3, 1), "output_zero_point", buffer
    if name == DQ:
        buffer = np.zeros(64, U8)
        x = buffer[4:10].view(I8).reshape(2, 3)
        x[...] = data((2, 3), I8)
        return dict(x=x, x_scale=0.5), buffer[8:32].view(F32).reshape(2, 3), "x", buffer
    buffer = np.zeros(64, U8)
    x = buffer[:24].view(F32).reshape(2, 3)
    x[...] = 1.5
    return dict(x=x, y_scale=0.5), buffer[20:26].reshape(2, 3), "x", buffer


@pytest.mark.parametrize("name", [CONV, MATMUL, DQ, Q])
def test_out_overlapping_an_input_rejected(name):
    kwargs, out, slot, buffer = _overlapping(name)
    assert np.shares_memory(out, kwargs[slot])
    before = buffer.copy()
    with pytest.raises(qops.ValidationError) as info:
        FUNCTIONS[name](**kwargs, out=out)
    check_kind(info.value, INVALID)
    check_message(str(info.value), [name, "out", slot])
    assert np.array_equal(buffer, before)


@pytest.mark.parametrize("name, overrides, version", [
    (CONV, dict(input_scale=0.0), "2_1"),
    (CONV, dict(filter_scale=np.full(4, 0.5, F32)), "2_1"),
    (CONV, {}, "2_0"),
    (MATMUL, dict(output_scale=-1.0), "4_0"),
    (MATMUL, dict(a_zero_point=np.int8(0)), "2_1"),
    (DQ, dict(x_scale=np.full(3, 0.5, F32)), 10),
    (DQ, dict(x_zero_point=300), 23),
    (Q, dict(y_zero_point=np.int8(1)), 23),
    (Q, dict(y_scale=float("nan")), 23),
])
def test_rejected_call_leaves_out_untouched(name, overrides, version):
    kwargs, shape, dtype = _call_and_out(name)
    kwargs.update(overrides)
    out = np.full(shape, SENTINEL, dtype)
    key = "opset" if name in ONNX_OPS else "feature_level"
    with pytest.raises(qops.ValidationError):
        FUNCTIONS[name](**kwargs, out=out, **{key: version})
    assert np.all(out == SENTINEL)


# ---------------------------------------------------------------------------
# scale values
# ---------------------------------------------------------------------------

SCALE_SLOTS = [(CONV, "input_scale"), (CONV, "filter_scale"), (CONV, "output_scale"),
               (MATMUL, "a_scale"), (MATMUL, "b_scale"), (MATMUL, "output_scale"),
               (DQ, "x_scale"), (Q, "y_scale")]
BAD_SCALES = [(0.0, "zero"), (-0.0, "zero"), (-1.0, "negative"), (-1e-30, "negative"),
              (float("nan"), "NaN"), (float("inf"), "infinite"), (float("-inf"), None)]


@pytest.mark.parametrize("via", ARRAY_VIAS)
@pytest.mark.parametrize("value, word", BAD_SCALES, ids=[repr(v) for v, _ in BAD_SCALES])
@pytest.mark.parametrize("name, slot", SCALE_SLOTS)
def test_bad_scale_rejected(name, slot, value, word, via):
    fragments = [slot, "positive"] + ([f"{word} value"] if word else [])
    # as a number
    expect(INVALID, fragments, name, via, **base(name, **{slot: value}))
    # as an array of the slot's per-tensor shape
    shape = (1, 1, 1, 1) if name in (CONV, MATMUL) else ()
    expect(INVALID, fragments, name, via, **base(name, **{slot: full(shape, value, F32)}))


@pytest.mark.parametrize("via", ARRAY_VIAS)
@pytest.mark.parametrize("value", [0.0, -2.0, float("nan"), float("inf")])
@pytest.mark.parametrize("name, slot, good", [
    (CONV, "filter_scale", [0.5, 0.25, 1.0]),
    (MATMUL, "b_scale", [[[[0.5, 0.25, 1.0, 2.0]]]]),
    (MATMUL, "a_scale", [[[[0.5], [2.0]]]]),
    (DQ, "x_scale", [0.5, 0.25, 1.0]),
    (Q, "y_scale", [0.5, 0.25, 1.0]),
])
def test_one_bad_element_in_scale_array(name, slot, good, value, via):
    array = np.array(good, F32)
    flat = array.reshape(-1)
    flat[1] = value
    expect(INVALID, [slot, "positive"], name, via, **base(name, **{slot: array}))
    flat[1] = 0.75
    assert run(name, via, **base(name, **{slot: array})) is not None


@pytest.mark.parametrize("via", ARRAY_VIAS)
@pytest.mark.parametrize("name, dtype", [(DQ, F16), (DQ, BF16), (Q, F16), (Q, BF16)])
@pytest.mark.parametrize("value", [0.0, -1.0, float("nan"), float("inf")])
def test_bad_half_precision_scale_rejected(name, dtype, value, via):
    slot = "x_scale" if name == DQ else "y_scale"
    kwargs = dq_kw(scale=full((), value, dtype)) if name == DQ else q_kw(
        x_type=dtype, scale=full((), value, dtype))
    expect(INVALID, [slot, "positive"], name, via, 23, **kwargs)


@pytest.mark.parametrize("name", [CONV, MATMUL])
def test_overflowing_requantization_multiplier_rejected(name):
    names = ("input_scale", "filter_scale") if name == CONV else ("a_scale", "b_scale")
    kwargs = base(name, **{names[0]: 1e30, names[1]: 1e30, "output_scale": 1e-30})
    expect(INVALID, ["output_scale"], name, "function", **kwargs)


@pytest.mark.parametrize("name, kwargs", [
    (MATMUL, dict(mm_kw(4), a=TD("uint8", (1, 1, 2, 3)), a_scale=0.0)),
    (CONV, dict(conv_kw(), input=TD("uint8", (1, 2, 4, 4)), output_scale=float("nan"))),
    (DQ, dict(x=TD("int8", (2, 3)), x_scale=-0.5)),
    (Q, dict(x=TD("float32", (2, 3)), y_scale=np.float32("inf"))),
    (DQ, dict(x=TD("int32", (2, 3)), x_scale=0.5, x_zero_point=1)),
], ids=["matmul-zero-scale", "conv-nan-scale", "dq-negative-scale", "q-inf-scale",
        "dq-int32-zero-point"])
def test_validate_checks_values_given_next_to_descriptions(name, kwargs):
    with pytest.raises(qops.ValidationError):
        qops.validate(name, **kwargs)


# ---------------------------------------------------------------------------
# zero points given as Python ints
# ---------------------------------------------------------------------------

ZP_RANGE_CASES = [
    # name, base overrides, attributes, slot, label, low, high
    (CONV, dict(x_type=U8), {}, "input_zero_point", "uint8", 0, 255),
    (CONV, dict(x_type=I8), {}, "input_zero_point", "int8", -128, 127),
    (CONV, dict(w_type=U8), {}, "filter_zero_point", "uint8", 0, 255),
    (CONV, dict(w_type=I8), {}, "filter_zero_point", "int8", -128, 127),
    (CONV, dict(x_type=U8), {}, "output_zero_point", "uint8", 0, 255),
    (CONV, dict(x_type=U8), dict(output_dtype="int8"), "output_zero_point", "int8", -128, 127),
    (MATMUL, dict(a_type=I8), {}, "a_zero_point", "int8", -128, 127),
    (MATMUL, dict(b_type=U8), {}, "b_zero_point", "uint8", 0, 255),
    (MATMUL, dict(a_type=I8), {}, "output_zero_point", "int8", -128, 127),
    (MATMUL, dict(a_type=I8), dict(output_dtype=U8), "output_zero_point", "uint8", 0, 255),
    (DQ, dict(x_type=I8), {}, "x_zero_point", "int8", -128, 127),
    (DQ, dict(x_type=U8), {}, "x_zero_point", "uint8", 0, 255),
    (DQ, dict(x_type=INT4), {}, "x_zero_point", "int4", -8, 7),
    (DQ, dict(x_type=UINT4), {}, "x_zero_point", "uint4", 0, 15),
    (DQ, dict(x_type=I16), {}, "x_zero_point", "int16", -32768, 32767),
    (DQ, dict(x_type=U16), {}, "x_zero_point", "uint16", 0, 65535),
    (Q, {}, {}, "y_zero_point", "uint8", 0, 255),
    (Q, {}, dict(output_dtype="int8"), "y_zero_point", "int8", -128, 127),
    (Q, {}, dict(output_dtype="int4"), "y_zero_point", "int4", -8, 7),
    (Q, {}, dict(output_dtype="uint4"), "y_zero_point", "uint4", 0, 15),
    (Q, {}, dict(output_dtype="int16"), "y_zero_point", "int16", -32768, 32767),
    (Q, {}, dict(output_dtype=U16), "y_zero_point", "uint16", 0, 65535),
]


def _zp_kwargs(name, types, slot, value):
    if name == CONV:
        kwargs = conv_kw(**types)
    elif name == MATMUL:
        kwargs = mm_kw(4, **types)
    elif name == DQ:
        kwargs = dq_kw(**types)
    else:
        kwargs = q_kw(**types)
    kwargs[slot] = value
    if name == MATMUL:  # keep every parameter per-tensor and of one rank
        for other in ("a_zero_point", "b_zero_point", "output_zero_point"):
            if other != slot:
                kwargs[other] = None
    return kwargs


@pytest.mark.parametrize("via", VIAS)
@pytest.mark.parametrize("name, types, attributes, slot, label, low, high", ZP_RANGE_CASES,
                         ids=[f"{c[0][:6]}-{c[3]}-{c[4]}" for c in ZP_RANGE_CASES])
def test_zero_point_int_range(name, types, attributes, slot, label, low, high, via):
    version = 23 if name in ONNX_OPS else "4_0"
    for value in (low - 1, high + 1):
        error = expect(INVALID, [f"{slot} is {value}", label, f"{low} to {high}"], name, via,
                       version, **_zp_kwargs(name, types, slot, value), **attributes)
        assert error.slot == slot
    for value in (low, high):
        assert run(name, via, version, **_zp_kwargs(name, types, slot, value), **attributes) is not None


@pytest.mark.parametrize("via", VIAS)
@pytest.mark.parametrize("name, slot", [(CONV, "input_zero_point"), (MATMUL, "a_zero_point"),
                                        (DQ, "x_zero_point"), (Q, "y_zero_point")])
def test_zero_point_must_be_whole(name, slot, via):
    kwargs = _zp_kwargs(name, {}, slot, 1.5)
    expect(ANY, [slot, "1.5"], name, via, **kwargs)


# ---------------------------------------------------------------------------
# ONNX: opset gating
# ---------------------------------------------------------------------------

OPSETS = [10, 13, 19, 21, 23]
# Seed 004 DequantizeLinear T1 / T2 per opset (registry spelling), and onnx.defs'
# QuantizeLinear output types (T2; T3 from 23).
_F8 = {"float8e4m3fn", "float8e4m3fnuz", "float8e5m2", "float8e5m2fnuz"}
DQ_T1 = {10: {"int8", "uint8", "int32"}, 13: {"int8", "uint8", "int32"},
         19: {"int8", "uint8", "int32"} | _F8,
         21: {"int8", "uint8", "int32", "int16", "uint16", "int4", "uint4"} | _F8,
         23: {"int8", "uint8", "int32", "int16", "uint16", "int4", "uint4", "float4e2m1"} | _F8}
DQ_T2 = {10: {"float32"}, 13: {"float32"}, 19: {"float32", "float16", "bfloat16"},
         21: {"float32", "float16", "bfloat16"}, 23: {"float32", "float16", "bfloat16"}}
ALL_TYPES = ["int4", "uint4", "int8", "uint8", "int16", "uint16", "int32", "float4e2m1",
             "float8e4m3fn", "float8e4m3fnuz", "float8e5m2", "float8e5m2fnuz", "float16",
             "bfloat16", "float32"]


def _first(table, dtype, after):
    later = [o for o in OPSETS if o > after and dtype in table[o]]
    return later[0] if later else None


def _check_opset_dtype(name, opset, slot, dtype, accepted, first, **kwargs):
    if accepted:
        assert qops.validate(name, opset=opset, **kwargs) is not None
        return
    error = expect(DTYPE_UNSUPPORTED, [f"{slot} has dtype {dtype}; opset {opset} supports"], name,
                   "validate", opset,
                   absent=[] if first else ["from opset"], **kwargs)
    if first:
        check_message(str(error), [f"({dtype} from opset {first})"])
        assert error.first_version == qops.Opset(first)


@pytest.mark.parametrize("opset", OPSETS)
@pytest.mark.parametrize("dtype", ALL_TYPES)
def test_dequantize_x_dtypes_per_seed(dtype, opset):
    _check_opset_dtype(DQ, opset, "x", dtype, dtype in DQ_T1[opset], _first(DQ_T1, dtype, opset),
                       x=TD(dtype, (2, 3)), x_scale=TD("float32", ()))


@pytest.mark.parametrize("opset", OPSETS)
@pytest.mark.parametrize("dtype", ALL_TYPES)
def test_dequantize_scale_dtypes_per_seed(dtype, opset):
    _check_opset_dtype(DQ, opset, "x_scale", dtype, dtype in DQ_T2[opset],
                       _first(DQ_T2, dtype, opset), x=TD("int8", (2, 3)), x_scale=TD(dtype, ()))


@functools.lru_cache(maxsize=None)
def _quantize_output_types():
    defs = pytest.importorskip("onnx.defs")
    table = {}
    for opset in OPSETS:
        schema = defs.get_schema("QuantizeLinear", opset)
        param = schema.outputs[0].type_str
        (constraint,) = [c for c in schema.type_constraints if c.type_param_str == param]
        names = set()
        for t in constraint.allowed_type_strs:
            inner = t[len("tensor("):-1]
            names.add("float32" if inner == "float" else inner)
        table[opset] = names
    return table


@pytest.mark.parametrize("opset", OPSETS)
@pytest.mark.parametrize("dtype", ALL_TYPES)
def test_quantize_output_dtypes_per_onnx(dtype, opset):
    table = _quantize_output_types()
    _check_opset_dtype(Q, opset, "y_zero_point", dtype, dtype in table[opset],
                       _first(table, dtype, opset), x=TD("float32", (2, 3)),
                       y_scale=TD("float32", ()), y_zero_point=TD(dtype, ()))


@pytest.mark.parametrize("opset", OPSETS)
@pytest.mark.parametrize("dtype", ALL_TYPES)
def test_quantize_input_dtypes(dtype, opset):
    # x: float types (DequantizeLinear's outputs) and int32, which every opset
    # has (with an int32 scale where x and the scale share a type: 19 and 21).
    if dtype == "int32":
        scale = "int32" if opset in (19, 21) else "float32"
        _check_opset_dtype(Q, opset, "x", dtype, True, None, x=TD(dtype, (2, 3)),
                           y_scale=TD(scale, ()))
        return
    scale = dtype if dtype in DQ_T2[opset] else "float32"
    _check_opset_dtype(Q, opset, "x", dtype, dtype in DQ_T2[opset], _first(DQ_T2, dtype, opset),
                       x=TD(dtype, (2, 3)), y_scale=TD(scale, ()))


GATING = [
    # name, feature, rejected below, kwargs builder, kind, fragments (opset filled in)
    (DQ, "per-axis", 13, lambda: dq_kw(scale=full(3, 0.5, F32)), UNSUPPORTED,
     ["x_scale", "(3,)", "per-axis", "per-axis from opset 13"]),
    (Q, "per-axis", 13, lambda: q_kw(scale=full(3, 0.5, F32)), UNSUPPORTED,
     ["y_scale", "(3,)", "per-axis", "per-axis from opset 13"]),
    (DQ, "axis", 13, lambda: dict(dq_kw(), axis=0), UNSUPPORTED, ["axis", "axis from opset 13"]),
    (Q, "axis", 13, lambda: dict(q_kw(), axis=-1), UNSUPPORTED, ["axis", "axis from opset 13"]),
    (DQ, "float16 scale", 19, lambda: dq_kw(scale=full((), 0.5, F16)), DTYPE_UNSUPPORTED,
     ["x_scale has dtype float16", "float16 from opset 19"]),
    (DQ, "bfloat16 scale", 19, lambda: dq_kw(scale=full((), 0.5, BF16)), DTYPE_UNSUPPORTED,
     ["x_scale has dtype bfloat16", "bfloat16 from opset 19"]),
    (Q, "float16 x", 19, lambda: q_kw(x_type=F16), DTYPE_UNSUPPORTED,
     ["x has dtype float16", "float16 from opset 19"]),
    (Q, "saturate", 19, lambda: dict(q_kw(), saturate=False), UNSUPPORTED,
     ["saturate", "saturate from opset 19"]),
    (DQ, "block_size", 21, lambda: dict(dq_kw(scale=full((2, 2), 0.5, F32)), axis=1,
                                        block_size=2), UNSUPPORTED,
     ["block_size", "block_size from opset 21"]),
    (Q, "block_size", 21, lambda: dict(q_kw(scale=full((2, 2), 0.5, F32)), axis=1,
                                       block_size=2), UNSUPPORTED,
     ["block_size", "block_size from opset 21"]),
    (Q, "output_dtype", 21, lambda: dict(q_kw(), output_dtype="int8"), UNSUPPORTED,
     ["output_dtype", "output_dtype from opset 21"]),
    (Q, "precision", 23, lambda: dict(q_kw(), precision="float32"), UNSUPPORTED,
     ["precision", "precision from opset 23"]),
]
for _dtype in sorted(_F8):
    GATING.append((DQ, _dtype, 19, lambda d=_dtype: dq_kw(x_type=FLOAT8[d]), DTYPE_UNSUPPORTED,
                   [f"x has dtype {_dtype}", f"{_dtype} from opset 19"]))
for _dtype in sorted(_F8):
    GATING.append((Q, _dtype, 19, lambda d=_dtype: q_kw(y_zero_point=full((), 0, FLOAT8[d])),
                   DTYPE_UNSUPPORTED, [f"y_zero_point has dtype {_dtype}", f"{_dtype} from opset 19"]))
for _dtype, _np in [("int4", INT4), ("uint4", UINT4), ("int16", I16), ("uint16", U16)]:
    GATING.append((DQ, _dtype, 21, lambda t=_np: dq_kw(x_type=t), DTYPE_UNSUPPORTED,
                   [f"x has dtype {_dtype}", f"{_dtype} from opset 21"]))
    GATING.append((Q, _dtype, 21, lambda t=_np: q_kw(y_zero_point=full((), 1, t)),
                   DTYPE_UNSUPPORTED, [f"y_zero_point has dtype {_dtype}", f"{_dtype} from opset 21"]))
GATING.append((DQ, "float4e2m1", 23, lambda: dq_kw(x_type=FLOAT4), DTYPE_UNSUPPORTED,
               ["x has dtype float4e2m1", "float4e2m1 from opset 23"]))
GATING.append((Q, "float4e2m1", 23, lambda: q_kw(y_zero_point=full((), 0, FLOAT4)),
               DTYPE_UNSUPPORTED, ["y_zero_point has dtype float4e2m1", "float4e2m1 from opset 23"]))

GATING_CASES = [(name, feature, since, build, kind, fragments, opset)
                for name, feature, since, build, kind, fragments in GATING for opset in OPSETS]


@pytest.mark.parametrize("via", VIAS)
@pytest.mark.parametrize("name, feature, since, build, kind, fragments, opset", GATING_CASES,
                         ids=[f"{c[0][:3]}-{c[1]}-{c[6]}" for c in GATING_CASES])
def test_onnx_opset_gating(name, feature, since, build, kind, fragments, opset, via):
    kwargs = build()
    if opset >= since:
        assert run(name, via, opset, **kwargs) is not None
    else:
        error = expect(kind, [f"opset {opset}"] + fragments, name, via, opset, **kwargs)
        assert error.first_version == qops.Opset(since)


@pytest.mark.parametrize("via", VIAS)
@pytest.mark.parametrize("name", ONNX_OPS)
@pytest.mark.parametrize("opset", OPSETS)
def test_onnx_default_attributes_accepted_at_every_opset(name, opset, via):
    kwargs = base(name)
    kwargs.update(axis=1, block_size=0)
    if name == Q:
        kwargs.update(saturate=True)
    assert run(name, via, opset, **kwargs) is not None


@pytest.mark.parametrize("via", VIAS)
@pytest.mark.parametrize("opset", [19, 21])
def test_quantize_x_and_scale_share_a_type_in_19_and_21(opset, via):
    for x, scale in [(F32, F16), (F16, F32), (BF16, F32)]:
        kwargs = dict(x=data((2, 3), x), y_scale=full((), 0.5, scale))
        expect(DTYPE, ["x and y_scale must have the same data type", f"x is {np.dtype(x).name}",
                       f"y_scale is {np.dtype(scale).name}"], Q, via, opset, **kwargs)
        # opset 23 has separate T1 (x) and T2 (y_scale)
        assert run(Q, via, 23, **kwargs) is not None


@pytest.mark.parametrize("via", VIAS)
@pytest.mark.parametrize("opset", OPSETS)
def test_onnx_same_dtype_zero_point(opset, via):
    expect(DTYPE, ["x and x_zero_point must have the same data type", "x is int8",
                   "x_zero_point is uint8"], DQ, via, opset,
           **dq_kw(x_zero_point=full((), 1, U8)))
    if opset >= 21:
        expect(DTYPE, ["y and y_zero_point", "int8", "uint8"], Q, via, opset,
               **q_kw(y_zero_point=full((), 1, U8)), output_dtype="int8")
        assert run(Q, via, opset, **q_kw(y_zero_point=full((), 1, I8)), output_dtype="int8") is not None


def test_quantize_output_dtype_sets_output_type():
    out = qops.quantize_linear(data((2, 3), F32), 0.5, output_dtype="int8", opset=21)
    assert out.dtype == np.dtype(I8)
    out = qops.quantize_linear(data((2, 3), F32), 0.5, -3, output_dtype="int8", opset=21)
    assert out.dtype == np.dtype(I8)
    assert qops.quantize_linear(data((2, 3), F32), 0.5).dtype == np.dtype(U8)  # ONNX default


@pytest.mark.parametrize("via", VIAS)
@pytest.mark.parametrize("output_dtype, label", [("int32", "int32"), ("float32", "float32"),
                                                 ("float16", "float16")])
def test_quantize_output_dtype_must_be_quantized(output_dtype, label, via):
    expect(DTYPE_UNSUPPORTED, [f"y has dtype {label}", "opset 23 supports"], Q, via, 23,
           **q_kw(), output_dtype=output_dtype)


@pytest.mark.parametrize("via", VIAS)
@pytest.mark.parametrize("precision", ["float32", "float16", "bfloat16", F32])
def test_quantize_precision_accepted(precision, via):
    assert run(Q, via, 23, **q_kw(), precision=precision) is not None


@pytest.mark.parametrize("via", VIAS)
def test_quantize_precision_must_be_float(via):
    expect(ANY, ["precision", "int8"], Q, via, 23, **q_kw(), precision="int8")
    expect(ANY, ["precision", "bogus"], Q, via, 23, **q_kw(), precision="bogus")


def test_quantize_precision_wrong_dtype_is_type_error():
    with pytest.raises(TypeError):
        qops.quantize_linear(data((2, 3), F32), 0.5, precision="int8", opset=23)


@pytest.mark.parametrize("via", VIAS)
def test_saturate_must_be_boolean(via):
    expect(ANY, ["saturate", "2"], Q, via, 23, **q_kw(), saturate=2)
    assert run(Q, via, 23, **q_kw(), saturate=False) is not None


# ---------------------------------------------------------------------------
# ONNX: axis, blocks, zero point shapes and values
# ---------------------------------------------------------------------------

def _scale_kw(name, x_shape, scale, zero_point=None, **attributes):
    if name == DQ:
        kwargs = dict(x=data(x_shape, I8), x_scale=scale)
        if zero_point is not None:
            kwargs["x_zero_point"] = zero_point
    else:
        kwargs = dict(x=data(x_shape, F32), y_scale=scale)
        if zero_point is not None:
            kwargs["y_zero_point"] = zero_point
    kwargs.update(attributes)
    return kwargs


def _scale_name(name):
    return "x_scale" if name == DQ else "y_scale"


def _zp_name(name):
    return "x_zero_point" if name == DQ else "y_zero_point"


@pytest.mark.parametrize("via", VIAS)
@pytest.mark.parametrize("name", ONNX_OPS)
@pytest.mark.parametrize("axis, length", [(0, 2), (1, 3), (2, 4), (-1, 4), (-2, 3), (-3, 2)])
def test_axis_in_range_accepted(name, axis, length, via):
    kwargs = _scale_kw(name, (2, 3, 4), full(length, 0.5, F32), axis=axis)
    for opset in (13, 19, 21, 23):
        assert run(name, via, opset, **kwargs) is not None


@pytest.mark.parametrize("via", VIAS)
@pytest.mark.parametrize("name", ONNX_OPS)
@pytest.mark.parametrize("axis", [3, 4, -4, -7])
def test_axis_out_of_range(name, axis, via):
    kwargs = _scale_kw(name, (2, 3, 4), full(3, 0.5, F32), axis=axis)
    expect(INVALID, ["axis", str(axis), "-3", "2"], name, via, 23, **kwargs)


@pytest.mark.parametrize("via", VIAS)
@pytest.mark.parametrize("name", ONNX_OPS)
@pytest.mark.parametrize("axis, length, needed", [(1, 4, 3), (0, 3, 2), (-1, 3, 4)])
def test_per_axis_length_mismatch(name, axis, length, needed, via):
    kwargs = _scale_kw(name, (2, 3, 4), full(length, 0.5, F32), axis=axis)
    expect(INVALID, [_scale_name(name), str(length), str(needed)], name, via, 13, **kwargs)


@pytest.mark.parametrize("via", VIAS)
@pytest.mark.parametrize("name", ONNX_OPS)
@pytest.mark.parametrize("block_size", [1, 2, 3, 4, 5])
def test_blocked_accepted_range(name, block_size, via):
    """ONNX: with D = 4 along the axis and S = 2 scales, block_size must be in
    [ceil(D / S), ceil(D / (S - 1)) - 1] = [2, 3]."""
    kwargs = _scale_kw(name, (2, 3, 4), full((2, 3, 2), 0.5, F32), axis=-1, block_size=block_size)
    if 2 <= block_size <= 3:
        assert run(name, via, 21, **kwargs) is not None
    else:
        expected = (2, 3, -(-4 // block_size))
        expect(INVALID, [_scale_name(name), "(2, 3, 2)", str(expected), f"block_size {block_size}"],
               name, via, 21, **kwargs)


@pytest.mark.parametrize("via", VIAS)
@pytest.mark.parametrize("name", ONNX_OPS)
@pytest.mark.parametrize("x_shape, scale_shape, axis, block_size", [
    ((4, 3), (2, 3), 0, 2), ((2, 6), (2, 2), 1, 3), ((2, 5), (2, 3), -1, 2), ((3, 2, 4), (3, 1, 4), 1, 2),
])
def test_blocked_other_axes_accepted(name, x_shape, scale_shape, axis, block_size, via):
    zp_type = I8 if name == DQ else U8
    kwargs = _scale_kw(name, x_shape, full(scale_shape, 0.5, F32), full(scale_shape, 1, zp_type),
                       axis=axis, block_size=block_size)
    for opset in (21, 23):
        assert run(name, via, opset, **kwargs) is not None


@pytest.mark.parametrize("via", VIAS)
@pytest.mark.parametrize("name", ONNX_OPS)
@pytest.mark.parametrize("scale_shape, block_size, fragments", [
    ((2, 3), 2, ["(2, 3)", "(2, 3, 4)"]),              # rank differs from x
    ((2, 3, 2), 0, ["(2, 3, 2)", "block_size"]),       # rank >= 2 without block_size
    ((1, 3, 2), 2, ["(1, 3, 2)", "(2, 3, 2)"]),        # other dimension differs
])
def test_blocked_shape_mismatch(name, scale_shape, block_size, fragments, via):
    kwargs = _scale_kw(name, (2, 3, 4), full(scale_shape, 0.5, F32), axis=2, block_size=block_size)
    expect(INVALID, [_scale_name(name)] + fragments, name, via, 21, **kwargs)


@pytest.mark.parametrize("via", VIAS)
@pytest.mark.parametrize("name", ONNX_OPS)
def test_negative_block_size(name, via):
    kwargs = _scale_kw(name, (2, 3, 4), full((2, 3, 2), 0.5, F32), axis=2, block_size=-1)
    expect(INVALID, ["block_size", "-1"], name, via, 21, **kwargs)


@pytest.mark.parametrize("via", VIAS)
@pytest.mark.parametrize("name", ONNX_OPS)
@pytest.mark.parametrize("scale_shape, zp_shape", [((3,), (4,)), ((3,), ()), ((), (3,)), ((1,), (2,)),
                                                   ((2, 3, 2), (2, 3, 1))])
def test_zero_point_shape_must_equal_scale_shape(name, scale_shape, zp_shape, via):
    zp_type = I8 if name == DQ else U8
    attributes = dict(axis=2, block_size=2) if len(scale_shape) == 3 else dict(axis=1)
    kwargs = _scale_kw(name, (2, 3, 4), full(scale_shape, 0.5, F32), full(zp_shape, 1, zp_type),
                       **attributes)
    expect(INVALID, [_zp_name(name), _scale_name(name), str(zp_shape), str(scale_shape)], name, via,
           23, **kwargs)


@pytest.mark.parametrize("via", VIAS)
@pytest.mark.parametrize("name", ONNX_OPS)
@pytest.mark.parametrize("scale_shape, zp_shape", [((), (1,)), ((1,), ())])
def test_one_element_scale_and_zero_point_are_both_per_tensor(name, scale_shape, zp_shape, via):
    """As in ONNX: a 0-d and a one-element 1-D parameter side by side."""
    zp_type = I8 if name == DQ else U8
    kwargs = _scale_kw(name, (2, 3, 4), full(scale_shape, 0.5, F32), full(zp_shape, 1, zp_type))
    run(name, via, 23, **kwargs)


@pytest.mark.parametrize("via", ARRAY_VIAS)
@pytest.mark.parametrize("name, x_type, label, opset", [
    (DQ, I32, "int32", 10), (DQ, I32, "int32", 23),
    (DQ, ml_dtypes.float8_e4m3fn, "float8e4m3fn", 19),
    (DQ, ml_dtypes.float8_e4m3fnuz, "float8e4m3fnuz", 21),
    (DQ, ml_dtypes.float8_e5m2, "float8e5m2", 23),
    (DQ, ml_dtypes.float8_e5m2fnuz, "float8e5m2fnuz", 19),
    (DQ, FLOAT4, "float4e2m1", 23),
    (Q, ml_dtypes.float8_e4m3fn, "float8e4m3fn", 19),
    (Q, ml_dtypes.float8_e5m2, "float8e5m2", 21),
    (Q, ml_dtypes.float8_e5m2fnuz, "float8e5m2fnuz", 23),
    (Q, FLOAT4, "float4e2m1", 23),
])
def test_int32_and_float_zero_points_must_be_zero(name, x_type, label, opset, via):
    slot = _zp_name(name)
    if name == DQ:
        kwargs = dict(x=data((2, 3), x_type), x_scale=0.5)
    else:
        kwargs = dict(x=data((2, 3), F32), y_scale=0.5)
    expect(INVALID, [slot, label, "0"], name, via, opset, **{**kwargs, slot: full((), 1, x_type)})
    per_axis = full(3, 0, x_type)
    per_axis[1] = 1
    if opset >= 13:
        expect(INVALID, [slot, label], name, via, opset,
               **{**kwargs, slot: per_axis, _scale_name(name): full(3, 0.5, F32)})
    assert run(name, via, opset, **{**kwargs, slot: full((), 0, x_type)}) is not None


@pytest.mark.parametrize("via", ARRAY_VIAS)
def test_int32_zero_point_number(via):
    # (with a TensorDesc x, see test_validate_checks_values_given_next_to_descriptions)
    expect(INVALID, ["x_zero_point", "int32"], DQ, via, 23, **dq_kw(x_type=I32, x_zero_point=5))


# ---------------------------------------------------------------------------
# validate's own output check and descriptions
# ---------------------------------------------------------------------------

def test_validate_output_description():
    kwargs = describe(mm_kw(4))
    result = qops.validate(MATMUL, feature_level="2_1", **kwargs, output=TD("uint8", (1, 1, 2, 4)))
    assert result.output_shape == (1, 1, 2, 4) and result.output_dtype == "uint8"
    with pytest.raises(qops.ValidationError) as info:
        qops.validate(MATMUL, feature_level="2_1", **kwargs, output=TD("int8", (1, 1, 2, 4)))
    check_kind(info.value, DTYPE)
    check_message(str(info.value), [MATMUL, "output", "int8", "uint8"])
    with pytest.raises(qops.ValidationError) as info:
        qops.validate(MATMUL, feature_level="2_1", **kwargs, output=TD("uint8", (1, 1, 2, 5)))
    check_kind(info.value, INVALID)
    check_message(str(info.value), [MATMUL, "output", "(1, 1, 2, 5)", "(1, 1, 2, 4)"])


@pytest.mark.parametrize("sizes", [(-1, 2), ("a", 2), (1.5,)])
def test_tensor_desc_rejects_bad_sizes(sizes):
    with pytest.raises(qops.ValidationError):
        TD("int8", sizes)


def test_tensor_desc_unknown_dtype():
    expect(DTYPE_UNSUPPORTED, ["x has dtype bogus"], DQ, "validate", 23,
           x=TD("bogus", (2, 3)), x_scale=0.5)


def test_required_slots():
    kwargs = describe(mm_kw(4))
    del kwargs["b_scale"]
    expect(ANY, ["b_scale"], MATMUL, "validate", "2_1", **kwargs)
    kwargs = describe(conv_kw())
    del kwargs["filter"]
    expect(ANY, ["filter"], CONV, "validate", "2_1", **kwargs)


@pytest.mark.parametrize("name", [DQ, Q])
@pytest.mark.parametrize("opset", [29, 31])
def test_opsets_newer_than_the_tables_are_rejected(name, opset):
    """The tables stop at opset 28; a newer opset may allow other types, so it is not guessed."""
    with pytest.raises(qops.UnsupportedError, match=rf"opset {opset} is newer than the newest opset qops describes \(28\)"):
        qops.validate(name, opset=opset, x=TD("float32" if name == Q else "int8", (2, 3)),
                      **({"y_scale": 0.5} if name == Q else {"x_scale": 0.5}))


@pytest.mark.parametrize("name", [DQ, Q])
def test_an_opset_past_the_tables_runs_where_onnx_keeps_a_known_version(name, monkeypatch):
    """An opset past the tables that the installed onnx knows, and at which it
    keeps the operator at a version the registry has, runs at that version; a
    version the registry lacks is refused, naming it and the newest known."""
    defs = pytest.importorskip("onnx.defs")
    real = defs.get_schema
    in_effect = {"version": 28}

    class Schema:
        def __init__(self, since):
            self.since_version = since

    def get_schema(op_type, opset, domain=""):
        return Schema(in_effect["version"]) if opset >= 29 else real(op_type, opset, domain)

    monkeypatch.setattr(defs, "onnx_opset_version", lambda: 30)
    monkeypatch.setattr(defs, "get_schema", get_schema)
    slots = dict(x=TD("float32" if name == Q else "int8", (2, 3)),
                 **({"y_scale": 0.5} if name == Q else {"x_scale": 0.5}))
    qops.validate(name, opset=30, **slots)
    in_effect["version"] = 29
    with pytest.raises(qops.UnsupportedError,
                       match=rf"opset 30 puts {name} at its version 29, which qops does not "
                             r"describe \(the newest it knows: 28\)"):
        qops.validate(name, opset=30, **slots)
    with pytest.raises(qops.UnsupportedError, match=r"opset 31 is newer than the newest opset"):
        qops.validate(name, opset=31, **slots)


@pytest.mark.parametrize("value, article", [(float("inf"), "an infinite"), (float("nan"), "a NaN"),
                                            (0.0, "a zero"), (-1.0, "a negative")])
def test_scale_fault_messages_read_as_english(value, article):
    with pytest.raises(qops.ValidationError, match=f"x_scale has {article} value"):
        qops.dequantize_linear(np.zeros(3, np.int8), value)
