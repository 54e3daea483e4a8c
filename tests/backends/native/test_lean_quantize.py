"""The lean path of per-tensor QuantizeLinear (qops/ops/_lean.pyx).

float32 x with one scale and an int8 / uint8 (or no) zero point, every
other argument at its default, is checked and run in C.  These tests hold
that path to the NumPy reference and onnx.reference bit for bit, check that
it is the path such calls take, and that every call it does not take (other
forms, bad values) gets the validating path's result or error.
"""


import numpy as np
import pytest
from conftest import assert_bits_equal, run_in_threads, run_reference
from hypothesis import given
from hypothesis import strategies as st

import qops
from qops import reference
from qops.backends.native import variants as _simd
from qops.ops import (
    convolution as convolution_front,
)
from qops.ops import (
    matmul as matmul_front,
)
from qops.ops import (
    quantize as quantize_front,
)

_lean = pytest.importorskip("qops.backends.native._lean")

u8, i8 = np.uint8, np.int8


@pytest.fixture(scope="module")
def entry():
    return _simd.quantize_module(None).lean_entry()


def lean(entry, x, scale, zero_point=None, out=None, n_threads=1):
    """The lean path alone: ``None`` when it does not take the call."""
    return _lean.quantize_per_tensor(entry, x, scale, zero_point, out, n_threads)


def scale_form(value, form):
    return {"python": float(value), "scalar": np.float32(value),
            "0-d": np.array(value, np.float32), "(1,)": np.array([value], np.float32)}[form]


def zero_form(value, dtype, form):
    if dtype is None:
        return None
    return {"python": dtype(value), "scalar": dtype(value), "0-d": np.array(value, dtype),
            "(1,)": np.array([value], dtype)}[form]


def values(rng, shape, scale):
    """float32 data with the values that matter: exact half-integer
    quotients (ties), beyond the output range, NaN, infinities, signed zeros."""
    x = np.asarray(rng.standard_normal(shape) * 100 * scale, np.float32)
    flat = x.reshape(-1)
    if flat.size:
        picks = rng.integers(0, flat.size, min(flat.size, 16))
        specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e30, -1e30], np.float32)
        flat[picks[:7]] = specials[:picks[:7].size]
        ties = (rng.integers(-300, 300, picks[7:].size) + np.float32(0.5)) * np.float32(scale)
        flat[picks[7:]] = ties.astype(np.float32)
    return x


@given(shape=st.lists(st.integers(1, 9), min_size=0, max_size=4).map(tuple),
       scale=st.sampled_from([0.02, 0.5, 1.0, 3e-3, 1e-30, 7.25]),
       form=st.sampled_from(["python", "scalar", "0-d", "(1,)"]),
       dtype=st.sampled_from([None, u8, i8]), zero=st.integers(-128, 255),
       n_threads=st.sampled_from([1, 2]), seed=st.integers(0, 2**16))
def test_the_lean_path_equals_the_reference(entry, shape, scale, form, dtype, zero, n_threads,
                                            seed):
    rng = np.random.default_rng(seed)
    x = values(rng, shape, scale)
    if dtype is not None:
        info = np.iinfo(dtype)
        zero = min(max(zero, info.min), info.max)
    y_scale = scale_form(scale, form)
    zero_point = zero_form(zero, dtype, "scalar" if form == "python" else form)
    got = lean(entry, x, y_scale, zero_point, n_threads=n_threads)
    assert got is not None, "a call of the lean form took the validating path"
    expected = reference.quantize_linear(x, np.float32(scale),
                                         None if dtype is None else dtype(zero),
                                         output_dtype=u8 if dtype is None else None)
    assert_bits_equal(got, expected.reshape(shape), "lean QuantizeLinear")


@pytest.mark.parametrize("dtype", [u8, i8])
def test_the_lean_path_equals_onnx_reference(entry, dtype):
    rng = np.random.default_rng(7)
    x = values(rng, (2, 3, 40, 40), 0.05)
    # onnx.reference casts NaN, infinities and quotients past int32 to
    # integers unchecked (the result is the platform's); that edge policy is
    # tested against qops.reference above.
    x[~(np.abs(x) < 1e6)] = 0
    zero = dtype(rng.integers(np.iinfo(dtype).min, np.iinfo(dtype).max))
    expected = run_reference("QuantizeLinear", {"x": x, "y_scale": np.array(0.05, np.float32),
                                                "y_zero_point": np.array(zero)},
                             opset=21, output_dtype=dtype)
    for threads in (1, 2):
        assert_bits_equal(lean(entry, x, np.float32(0.05), zero, n_threads=threads), expected,
                          f"{threads} threads")


def test_large_tensors_do_not_depend_on_the_thread_count(entry):
    """Past the parallel threshold rows are shared between threads."""
    rng = np.random.default_rng(3)
    x = values(rng, (3, 70001), 0.01)  # an odd count: a short last row
    results = [lean(entry, x, np.float32(0.01), u8(100), n_threads=n) for n in (1, 2, 3, 8)]
    for result in results[1:]:
        assert_bits_equal(result, results[0], "thread counts")
    assert_bits_equal(results[0], reference.quantize_linear(x, np.float32(0.01), u8(100)),
                      "reference")


def test_the_public_function_takes_the_lean_path(monkeypatch):
    def validating_path(*args, **kwargs):
        raise AssertionError("took the validating path")

    x = np.linspace(-3, 3, 50, dtype=np.float32)
    monkeypatch.setattr(quantize_front.QUANTIZE_PLANS, "run", validating_path)
    got = qops.quantize_linear(x, np.float32(0.1), i8(-3))
    assert_bits_equal(got, reference.quantize_linear(x, np.float32(0.1), i8(-3)), "lean")
    with pytest.raises(AssertionError, match="validating path"):
        qops.quantize_linear(x, np.float32(0.1), i8(-3), axis=0)


@pytest.mark.parametrize("bad, form", [
    (bad, form) for bad in (0.0, -0.5, np.nan, np.inf) for form in ("python", "scalar", "0-d")
] + [(1e-50, "python"), (1e39, "python")])
def test_bad_scale_values_raise_the_validating_paths_error(entry, bad, form):
    """1e-50 and 1e39 are positive and finite as Python floats but become 0
    and infinity in float32, as validation converts them."""
    x = np.ones(4, np.float32)
    scale = bad if form == "python" else scale_form(bad, form)
    assert lean(entry, x, scale, u8(3)) is None
    with pytest.raises(qops.ValidationError, match="y_scale") as lean_error:
        qops.quantize_linear(x, scale, u8(3))
    with pytest.raises(qops.ValidationError) as full_error:
        quantize_front.QUANTIZE_PLANS.run(dict(x=x, y_scale=scale, y_zero_point=u8(3)),
                                dict(axis=1, block_size=0, saturate=True, output_dtype=None,
                                     precision=None), None, out=None, n_threads=1)
    assert str(lean_error.value) == str(full_error.value)


OTHER_FORMS = {
    "float16 x": lambda x: dict(x=x.astype(np.float16)),
    "float64 x": lambda x: dict(x=x.astype(np.float64)),
    "strided x": lambda x: dict(x=x[::2]),
    "Fortran x": lambda x: dict(x=np.asfortranarray(x.reshape(4, 5))),
    "byte-swapped x": lambda x: dict(x=x.astype(">f4")),
    "list x": lambda x: dict(x=x.tolist()),
    "empty x": lambda x: dict(x=x[:0]),
    "float64 scale": lambda x: dict(y_scale=np.float64(0.1)),
    "int scale": lambda x: dict(y_scale=1),
    "per-axis scale": lambda x: dict(x=x.reshape(4, 5), y_scale=np.full(5, 0.1, np.float32),
                                     y_zero_point=np.zeros(5, u8)),
    "(1, 1) scale": lambda x: dict(y_scale=np.full((1, 1), 0.1, np.float32),
                                   y_zero_point=np.zeros((1, 1), u8)),
    "Python int zero point": lambda x: dict(y_zero_point=3),
    "int16 zero point": lambda x: dict(y_zero_point=np.int16(3)),
    "zero point shaped unlike the scale": lambda x: dict(y_zero_point=np.array([3], u8)),
    "int4 zero point": lambda x: dict(y_zero_point=np.zeros((), __import__("ml_dtypes").int4)),
    "axis 0": lambda x: dict(axis=0),
    "block size": lambda x: dict(block_size=2),
    "output dtype": lambda x: dict(y_zero_point=None, output_dtype=np.int8),
    "opset": lambda x: dict(opset=13),
    "n_threads 0": lambda x: dict(n_threads=0),
    "n_threads True": lambda x: dict(n_threads=True),
    "n_threads 2.0": lambda x: dict(n_threads=2.0),
}


@pytest.mark.parametrize("change", sorted(OTHER_FORMS))
def test_other_forms_take_the_validating_path_with_its_result_or_error(change):
    x = np.linspace(-2, 2, 20, dtype=np.float32)
    call = dict(x=x, y_scale=np.float32(0.1), y_zero_point=u8(7))
    call.update(OTHER_FORMS[change](x))
    slot_names = ("x", "y_scale", "y_zero_point")
    slots = {name: call.pop(name) for name in slot_names}
    opset, n_threads = call.pop("opset", None), call.pop("n_threads", None)
    attributes = dict(dict(axis=1, block_size=0, saturate=True, output_dtype=None,
                           precision=None), **call)

    def full():
        return quantize_front.QUANTIZE_PLANS.run(dict(slots), dict(attributes), opset, out=None,
                                       n_threads=qops.threads.resolve_threads(n_threads))

    try:
        expected = full()
    except qops.ValidationError as error:
        with pytest.raises(qops.ValidationError) as raised:
            qops.quantize_linear(**slots, **call, opset=opset, n_threads=n_threads)
        assert str(raised.value) == str(error)
        return
    got = qops.quantize_linear(**slots, **call, opset=opset, n_threads=n_threads)
    assert_bits_equal(got, expected, change)


def test_out_is_filled_and_returned(entry):
    x = np.linspace(-5, 5, 33, dtype=np.float32).reshape(3, 11)
    out = np.full((3, 11), 9, u8)
    result = qops.quantize_linear(x, np.float32(0.05), u8(128), out=out)
    assert result is out
    assert_bits_equal(out, reference.quantize_linear(x, np.float32(0.05), u8(128)), "out")


OUTS = {
    "wrong dtype": lambda x: np.zeros(x.shape, i8),
    "wrong shape": lambda x: np.zeros(x.size, u8),
    "read-only": lambda x: np.zeros(x.shape, u8).copy().view(),
    "not contiguous": lambda x: np.zeros((x.shape[0], 2 * x.shape[1]), u8)[:, ::2],
    "overlapping x": lambda x: x.view(u8)[:, : x.shape[1]],
}


@pytest.mark.parametrize("kind", sorted(OUTS))
def test_outs_the_lean_path_does_not_take_get_the_validating_path(entry, kind):
    x = np.linspace(-5, 5, 24, dtype=np.float32).reshape(4, 6)
    out = OUTS[kind](x)
    if kind == "read-only":
        out.flags.writeable = False
    before = out.copy()
    assert lean(entry, x, np.float32(0.05), u8(3), out=out) is None
    try:
        result = qops.quantize_linear(x, np.float32(0.05), u8(3), out=out)
    except qops.ValidationError:
        assert np.array_equal(out, before), "a rejected call wrote into out"
    else:
        assert result is out
        assert_bits_equal(result, reference.quantize_linear(
            np.linspace(-5, 5, 24, dtype=np.float32).reshape(4, 6), np.float32(0.05), u8(3)),
            kind)


def test_concurrent_lean_calls_agree_with_serial_ones(entry):
    rng = np.random.default_rng(11)
    cases = [(values(rng, (5, 40000), s), np.float32(s), z)
             for s, z in [(0.01, u8(0)), (0.3, i8(-5)), (0.07, u8(200)), (1.5, i8(100))]]
    serial = [qops.quantize_linear(x, s, z, n_threads=2) for x, s, z in cases]
    failures = []

    def worker(index):
        x, s, z = cases[index % len(cases)]
        for _ in range(20):
            if not np.array_equal(qops.quantize_linear(x, s, z, n_threads=2),
                                  serial[index % len(cases)]):
                failures.append(index)

    run_in_threads(worker, 8)
    assert not failures
