"""Shared helpers for the differential tests.

* Hypothesis profiles: ``default`` (modest, the normal run), ``ci`` (more
  examples) and ``long`` (many more, run by hand through
  ``benchmarks/long_tests.py``); pick one with ``HYPOTHESIS_PROFILE=ci``.
* One-node ONNX models of QLinearConv, QLinearMatMul, QuantizeLinear and
  DequantizeLinear, run on onnxruntime (:func:`run_ort`) and on
  ``onnx.reference.ReferenceEvaluator`` (:func:`run_reference`).
* Raw-bit comparison of arrays (tests/bitwise.py) and the one rule of every
  comparison with a peer (tests/peers.py, :func:`judge`): qops is judged
  against an exact oracle, onnxruntime only compared where it is itself exact.

Nothing here calls qops: the expectations every test compares against come
from an exact oracle (qops.reference, tests/oracles.py, or one written in the
test itself) or onnx.reference.
"""

from __future__ import annotations

import functools
import os

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from onnx import helper

try:  # onnxruntime is a test dependency, but keep collection alive without it
    import onnxruntime as ort
    from onnxruntime.capi import onnxruntime_pybind11_state as _ort_state
except ImportError:  # pragma: no cover
    ort = None
    _ort_state = None

from onnx.reference import ReferenceEvaluator

#: The checkout's root (where pyproject.toml is), however deep a test module lies.
PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# -- Hypothesis ------------------------------------------------------------------

_SUPPRESS = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]
settings.register_profile("default", deadline=None, max_examples=40, suppress_health_check=_SUPPRESS,
                          print_blob=True)
settings.register_profile("ci", deadline=None, max_examples=150, suppress_health_check=_SUPPRESS,
                          print_blob=True)
settings.register_profile("long", deadline=None, max_examples=1000,
                          suppress_health_check=_SUPPRESS, print_blob=True)
settings.register_profile("dev", deadline=None, max_examples=10, suppress_health_check=_SUPPRESS)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


@pytest.fixture(autouse=True)
def threads_as_asked(monkeypatch):
    """Products smaller than qops.backends.native.gemm.WORK_PER_THREAD per thread run on
    fewer threads than asked; the tests' products are small, and they ask for
    thread counts to test the parallel paths, so every product gets them."""
    try:
        from qops.backends.native import gemm as _native
    except ImportError:
        return
    monkeypatch.setattr(_native, "WORK_PER_THREAD", 1)

# -- dtypes ----------------------------------------------------------------------

INT8_TYPES = (np.dtype(np.uint8), np.dtype(np.int8))

#: Every (input/a, filter/b, output) combination of uint8 and int8.
TYPE_COMBOS = [(x, w, y) for x in INT8_TYPES for w in INT8_TYPES for y in INT8_TYPES]


def combo_id(combo):
    return "-".join(np.dtype(t).name for t in combo)


INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


def all_combo_params():
    return [pytest.param(c, id=combo_id(c)) for c in TYPE_COMBOS]


def int_range(dtype):
    info = np.iinfo(dtype) if np.dtype(dtype).kind in "iu" else ml_dtypes.iinfo(dtype)
    return int(info.min), int(info.max)


def onnx_type(dtype) -> int:
    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


# -- one-node models ----------------------------------------------------------------

#: Slot order of each operator's ONNX node.
ONNX_INPUTS = {
    "QLinearConv": ("x", "x_scale", "x_zero_point", "w", "w_scale", "w_zero_point", "y_scale",
                    "y_zero_point", "B"),
    "QLinearMatMul": ("a", "a_scale", "a_zero_point", "b", "b_scale", "b_zero_point", "y_scale",
                      "y_zero_point"),
    "QuantizeLinear": ("x", "y_scale", "y_zero_point"),
    "DequantizeLinear": ("x", "x_scale", "x_zero_point"),
    "ConvInteger": ("x", "w", "x_zero_point", "w_zero_point"),
    "MatMulInteger": ("A", "B", "a_zero_point", "b_zero_point"),
}


def make_model(op_type, inputs, attributes=None, *, opset, output_dtype):
    """A one-node model of ``op_type`` at ``opset``.

    ``inputs`` maps the ONNX input names of :data:`ONNX_INPUTS` to arrays;
    absent or ``None`` entries become empty (omitted optional) inputs.  Every
    given input is a graph input (nothing is constant-folded), fed by
    :func:`feeds`.  ``output_dtype`` is the output's NumPy dtype.
    """
    names = ONNX_INPUTS[op_type]
    present = [n for n in names if inputs.get(n) is not None]
    last = max(names.index(n) for n in present)
    node_inputs = [n if inputs.get(n) is not None else "" for n in names[: last + 1]]
    attributes = {k: v for k, v in (attributes or {}).items() if v is not None}
    node = helper.make_node(op_type, node_inputs, ["y_out"], **attributes)
    graph_inputs = [
        helper.make_tensor_value_info(n, onnx_type(np.asarray(inputs[n]).dtype),
                                      list(np.shape(inputs[n])))
        for n in present
    ]
    output = helper.make_tensor_value_info("y_out", onnx_type(output_dtype), None)
    graph = helper.make_graph([node], f"one_{op_type}", graph_inputs, [output])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10 if opset <= 23 else model.ir_version
    return model


def feeds(inputs):
    return {n: np.asarray(v) for n, v in inputs.items() if v is not None}


def _is_not_implemented(error) -> bool:
    if _ort_state is not None and isinstance(error, getattr(_ort_state, "NotImplemented", ())):
        return True
    text = str(error)
    return "NOT_IMPLEMENTED" in text or "Could not find an implementation" in text


@functools.lru_cache(maxsize=512)
def _session(model_bytes):
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = 1
    options.log_severity_level = 3
    return ort.InferenceSession(model_bytes, options, providers=["CPUExecutionProvider"])


def ort_session(model):
    """An onnxruntime CPU session for ``model``; pytest.skip on NOT_IMPLEMENTED."""
    if ort is None:
        pytest.skip("onnxruntime is not installed")
    try:
        return _session(model.SerializeToString())
    except Exception as error:  # onnxruntime raises its own exception types
        if _is_not_implemented(error):
            pytest.skip(f"onnxruntime has no kernel for this type combination: {error}")
        raise


def contrib_model(op_type, names, values, feeds, output_dtype, **attributes):
    """``(node, model)``: one node of onnxruntime's ``com.microsoft`` operator
    ``op_type``, whose inputs are ``names`` in order.  ``values`` maps them to
    arrays (a missing or ``None`` one is an omitted optional input); those in
    ``feeds`` are graph inputs and the others initializers, as onnxruntime's
    quantizer writes the parameters."""
    from onnx import numpy_helper

    present = [n for n in names if values.get(n) is not None]
    last = max(names.index(n) for n in present)
    node = helper.make_node(op_type, [n if values.get(n) is not None else "" for n in
                                      names[:last + 1]], ["y_out"], domain="com.microsoft",
                            **attributes)
    graph = helper.make_graph(
        [node], op_type,
        [helper.make_tensor_value_info(n, onnx_type(np.asarray(values[n]).dtype),
                                       list(np.shape(values[n]))) for n in present if n in feeds],
        [helper.make_tensor_value_info("y_out", onnx_type(output_dtype), None)],
        initializer=[numpy_helper.from_array(np.asarray(values[n]), n) for n in present
                     if n not in feeds])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 10
    return node, model


def run_contrib_ort(model, values, feeds):
    """onnxruntime's output of a :func:`contrib_model` (a skip without a kernel)."""
    return ort_session(model).run(None, {n: np.asarray(values[n]) for n in feeds})[0]


def run_ort(op_type, inputs, attributes=None, *, opset, output_dtype):
    """Run a one-node model on onnxruntime; skip when it has no such kernel."""
    model = make_model(op_type, inputs, attributes, opset=opset, output_dtype=output_dtype)
    session = ort_session(model)
    try:
        (result,) = session.run(None, feeds(inputs))
    except Exception as error:
        if _is_not_implemented(error):
            pytest.skip(f"onnxruntime has no kernel for this type combination: {error}")
        raise
    return result


#: ``onnx.reference`` implements these operators only from the opsets listed
#: (DequantizeLinear from 19; QuantizeLinear 10 and then 19).  Earlier opsets
#: are a subset of those semantics (float32 scales, per-tensor / per-axis,
#: 8-bit and int32 types), so the model is built at the first opset it has.
_REFERENCE_OPSETS = {"QuantizeLinear": (10, 19, 21, 23), "DequantizeLinear": (19, 21, 23)}


def reference_opset(op_type, opset):
    known = _REFERENCE_OPSETS.get(op_type)
    if not known:
        return opset
    usable = [v for v in known if v <= opset]
    return max(usable) if usable else min(known)


def run_reference(op_type, inputs, attributes=None, *, opset, output_dtype):
    """Run a one-node model on ``onnx.reference.ReferenceEvaluator``."""
    opset = reference_opset(op_type, opset)
    model = make_model(op_type, inputs, attributes, opset=opset, output_dtype=output_dtype)
    (result,) = ReferenceEvaluator(model).run(None, feeds(inputs))
    return np.asarray(result)


# -- raw-bit comparison (tests/bitwise.py) and the comparison rule (tests/peers.py) --

from bitwise import (  # noqa: E402,F401
    assert_bits_equal,
    assert_exact,
    assert_within_one,
    bits,
    is_nan,
)
from peers import (  # noqa: E402,F401 - pytest finds the rule's hooks here
    judge,
    pytest_runtest_call,
    pytest_runtest_makereport,
    pytest_sessionfinish,
    pytest_sessionstart,
    pytest_terminal_summary,
)


def run_in_threads(work, count):
    """``work(index)`` for index 0 .. count - 1, each on its own thread, all at once."""
    import threading

    threads = [threading.Thread(target=work, args=(index,)) for index in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()



# -- the contract's requantization, from first principles, for oracles -------------------

def f32(value):
    return np.float32(value)


def contract_multiplier(in_scale, w_scale, out_scale):
    """``float32(float32(in_scale * w_scale) / out_scale)`` on np.float32 scalars."""
    with np.errstate(all="ignore"):
        return np.float32(np.float32(f32(in_scale) * f32(w_scale)) / f32(out_scale))


def contract_requantize(acc: int, multiplier, zero_point: int, dtype) -> int:
    """``saturate(round_half_even(float32(float32(acc) * m)) + zp)`` for one
    exact Python-int accumulator."""
    low, high = int_range(dtype)
    value = np.float32(np.float32(acc) * np.float32(multiplier))
    # Python's round() on a float is round-half-to-even and exact for a float32.
    rounded = round(float(value))
    return min(max(rounded + int(zero_point), low), high)


def random_values(rng, dtype, shape, low=None, high=None):
    lo, hi = int_range(dtype)
    lo = lo if low is None else max(lo, low)
    hi = hi if high is None else min(hi, high)
    return rng.integers(lo, hi + 1, size=shape).astype(dtype)


# -- cases that tell the multiplier's evaluation order apart ---------------------------

def _alternative_multipliers():
    f = np.float32
    return {
        "in*(w/out)": lambda a, b, c: f(a * f(b / c)),
        "(in/out)*w": lambda a, b, c: f(f(a / c) * b),
        "float64 then float32": lambda a, b, c: f(np.float64(a) * np.float64(b) / np.float64(c)),
    }


ALTERNATIVE_MULTIPLIERS = tuple(_alternative_multipliers())


@functools.lru_cache(maxsize=None)
def multiplier_order_case(alternative: str, seed: int = 0):
    """Scales (in, w, out) and an accumulator |acc| < 3000 for which the
    contract's ``float32(float32(in * w) / out)`` and the ``alternative``
    evaluation give different rounded results (|result| < 100).

    Found by a deterministic search over random float32 scales; both results
    are computed here with np.float32 scalars, so the case discriminates by
    construction.  Returns ``(in, w, out, acc, contract_rounded, other_rounded)``.
    """
    other_of = _alternative_multipliers()[alternative]
    rng = np.random.default_rng(seed)
    accs = np.arange(-3000, 3001, dtype=np.int64)
    accs = accs[accs != 0]
    acc_f32 = accs.astype(np.float32)
    for _ in range(200000):
        a, b, c = (np.float32(2.0 ** rng.uniform(-8, 0)) for _ in range(3))
        m = contract_multiplier(a, b, c)
        other = other_of(a, b, c)
        if m == other:
            continue
        r1 = np.rint(np.multiply(acc_f32, m, dtype=np.float32))
        r2 = np.rint(np.multiply(acc_f32, other, dtype=np.float32))
        hit = np.flatnonzero((r1 != r2) & (np.abs(r1) < 100))
        if hit.size:
            i = hit[0]
            acc = int(accs[i])
            contract = round(float(np.float32(np.float32(acc) * m)))
            assert contract == int(r1[i])
            return a, b, c, acc, contract, int(r2[i])
    raise AssertionError(f"no case found for {alternative}")  # pragma: no cover


def int8_terms(total: int):
    """int8 values summing to ``total`` (each in [-128, 127])."""
    values = []
    while total:
        step = max(-128, min(127, total))
        values.append(step)
        total -= step
    return values or [0]
