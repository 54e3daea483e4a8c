"""onnxruntime's QOperator-format nodes (qops/onnx/_qoperator.py) against their rules written out.

Each node's rule is stated again here, element by element, with NumPy
float32 scalars (each operation one IEEE float32 operation), Python ints
(exact sums) and exact fractions (a fused multiply-add rounds once), from
onnxruntime's CPU kernels: quant_gemm.cc, MLAS's qlmul.cpp, quantize.cpp and
logistic kernel, qlinear_lookup_table.cc, qlinear_activations.cc,
qlinear_softmax.cc, qlinear_concat.cc, qlinear_where.cc and
dynamic_quantize_matmul.cc.  qops must equal the statement bit for bit;
onnxruntime, run on one-node models, is compared by the rule of
tests/peers.py wherever its kernel is itself exact (not for u8 x s8 sums that
can saturate 16-bit pair sums on CPUs without VNNI, nor past the int32
conversion of QLinearMul).  Fixed cases tell the stated rule apart from its
near neighbours (separate multiply and add, a float64 logarithm, a float32
quotient, a sum rounded once, the zero point added after rounding, alpha
applied last).
"""

import ctypes
import ctypes.util
import math
from fractions import Fraction

import numpy as np
import pytest
from conftest import contrib_model, judge, run_contrib_ort
from hypothesis import given
from hypothesis import strategies as st

onnx = pytest.importorskip("onnx")
from onnx.reference import ReferenceEvaluator  # noqa: E402

import qops  # noqa: E402
import qops.onnx  # noqa: E402
from qops.onnx import _qoperator  # noqa: E402

F32 = np.float32
TYPES = (np.dtype(np.uint8), np.dtype(np.int8))
RANGES = {np.dtype(np.uint8): (0, 255), np.dtype(np.int8): (-128, 127)}


def clamp(value, dtype):
    low, high = RANGES[np.dtype(dtype)]
    return min(max(value, low), high)


def byte_values(dtype):
    """The value of each raw byte 0 .. 255 in ``dtype``."""
    return [int(v) for v in np.arange(256, dtype=np.uint8).view(dtype)]


def random_values(rng, shape, dtype, low=None, high=None):
    lo, hi = RANGES[np.dtype(dtype)]
    lo, hi = (lo if low is None else low), (hi if high is None else high)
    return rng.integers(lo, hi + 1, shape).astype(dtype)


# -- the rules, stated ----------------------------------------------------------------------

def float32_nearest(value: Fraction) -> np.float32:
    """The float32 nearest to the exact ``value``, ties to an even significand."""
    guess = F32(float(value))
    candidates = [np.nextafter(guess, F32(-np.inf)), guess, np.nextafter(guess, F32(np.inf))]
    return min(candidates, key=lambda c: (abs(Fraction(float(c)) - value),
                                          int(np.array(c).view(np.uint32)) & 1))


def fma(a, b, c):
    """float32 ``a * b + c`` with one rounding (an FMA instruction)."""
    return float32_nearest(Fraction(float(a)) * Fraction(float(b)) + Fraction(float(c)))


def mlas_quantize(value, scale, zero_point, dtype):
    """MLAS's QuantizeLinear of one float32: ``value / scale`` in float32,
    clamped to the range shifted by the zero point (NaN to its low end),
    rounded half to even, plus the zero point."""
    low, high = RANGES[np.dtype(dtype)]
    with np.errstate(all="ignore"):
        scaled = F32(F32(value) / F32(scale))
    if np.isnan(scaled):
        scaled = F32(low - zero_point)
    scaled = min(max(scaled, F32(low - zero_point)), F32(high - zero_point))
    return round(float(scaled)) + zero_point


def stated_table(function, x_scale, x_zero_point, y_scale, y_zero_point, dtype):
    """onnxruntime's lookup table: byte -> quantize(function(x_scale * float(x - x_zp)))."""
    return {byte: mlas_quantize(function(F32(F32(x_scale) * F32(value - x_zero_point))),
                                y_scale, y_zero_point, dtype)
            for byte, value in enumerate(byte_values(dtype))}


def look_up(x, table, dtype):
    raw = np.asarray(x).view(np.uint8)
    return np.array([table[int(b)] for b in raw.reshape(-1)], dtype).reshape(np.shape(x))


LOGISTIC_ALPHA = [F32(v) for v in ("4.37031012579801e-11", "1.15627324459942e-07",
                                   "6.08574864600143e-05", "8.51377133304701e-03",
                                   "2.48287947061529e-01")]
LOGISTIC_BETA = [F32(v) for v in ("6.10247389755681e-13", "5.76102136993427e-09",
                                  "6.29106785017040e-06", "1.70198817374094e-03",
                                  "1.16817656904453e-01", "9.93151921023180e-01")]


def stated_sigmoid(v, fused=True):
    """MLAS's logistic kernel for one float32 (FMA3: every Horner step fused;
    ``fused=False`` is its SSE2 form, separate multiply and add, clamped to [0, 1])."""
    step = fma if fused else (lambda a, b, c: F32(F32(a * b) + c))
    x = min(max(F32(v), F32(-18)), F32(18))
    x2 = F32(x * x)
    p = step(x2, LOGISTIC_ALPHA[0], LOGISTIC_ALPHA[1])
    for coefficient in LOGISTIC_ALPHA[2:]:
        p = step(x2, p, coefficient)
    q = step(x2, LOGISTIC_BETA[0], LOGISTIC_BETA[1])
    for coefficient in LOGISTIC_BETA[2:]:
        q = step(x2, q, coefficient)
    result = F32(F32(F32(x * p) / q) + F32(0.5))
    return max(F32(0), result) if fused else min(max(F32(0), result), F32(1))


def stated_leaky_relu(alpha):
    return lambda v: v if v >= 0 else F32(F32(alpha) * v)


def _c_logf():
    """C's logf, which onnxruntime calls (None where libm cannot be loaded)."""
    try:
        function = ctypes.CDLL(ctypes.util.find_library("m")).logf
    except (OSError, AttributeError, TypeError):
        return None
    function.restype, function.argtypes = ctypes.c_float, [ctypes.c_float]
    return function


LOGF = _c_logf()


def float32_log(value):
    return F32(LOGF(float(value))) if LOGF is not None else F32(math.log(float(value)))


def stated_softmax(x, x_scale, y_scale, y_zero_point, axis, opset, log=float32_log,
                   float32_quotient=False, float64_sum=False):
    """onnxruntime's QLinearSoftmax, one softmax at a time.

    ``shift = max(0, logf(float32(FLT_MAX / float32(D))) - 5) / x_scale``;
    each element's ``e = float32(exp((x - max + shift) * x_scale))`` in
    float64; the float32 sum in element order; ``c = floor(float32(1 / y_scale))``;
    ``y = round_half_even(e * c / sum)`` in float64, plus the zero point, saturated
    (``float32_quotient``: the quotient rounded to float32 before, as C's
    ``nearbyintf`` of it would; ``float64_sum``: the exact sum rounded once).
    """
    dtype = x.dtype
    axis = axis % x.ndim
    if opset >= 13:
        rows = np.moveaxis(x, axis, -1)
        size = x.shape[axis]
    else:
        rows = x
        size = int(np.prod(x.shape[axis:]))
    quotient = F32(F32(np.finfo(np.float32).max) / F32(size))
    shift = max(0.0, float(log(quotient)) - 5.0) / float(F32(x_scale))
    c = math.floor(F32(F32(1) / F32(y_scale)))
    out = []
    for row in rows.reshape(-1, size):
        top = max(int(v) for v in row)
        exps = [F32(math.exp((float(int(v) - top) + shift) * float(F32(x_scale)))) for v in row]
        total = F32(0)
        for e in exps:
            total = F32(total + e)
        if float64_sum:
            total = F32(math.fsum(float(e) for e in exps))
        for e in exps:
            value = float(e) * c / float(total)
            if float32_quotient:
                value = float(F32(value))
            out.append(clamp(round(value) + int(y_zero_point), dtype))
    y = np.array(out, dtype).reshape(rows.shape)
    return np.moveaxis(y, -1, axis) if opset >= 13 else y


def stated_mul(a, a_scale, a_zp, b, b_scale, b_zp, c_scale, c_zp, zero_point_first=True):
    """MLAS's QLinearMul for x86, per element: ``m = float32(float32(sa * sb) / sc)``,
    ``v = float32(float32(float32(prod) * m) + zp)``, rounded half to even, saturated
    (``zero_point_first=False``: rounded, then the zero point added)."""
    m = F32(F32(F32(a_scale) * F32(b_scale)) / F32(c_scale))
    a, b = np.broadcast_arrays(a, b)
    out = np.empty(a.shape, a.dtype)
    for index in np.ndindex(a.shape):
        product = (int(a[index]) - a_zp) * (int(b[index]) - b_zp)
        scaled = F32(F32(product) * m)
        value = (round(float(F32(scaled + F32(c_zp)))) if zero_point_first
                 else round(float(scaled)) + c_zp)
        out[index] = clamp(value, a.dtype)
    return out


def stated_gemm(a, a_scale, a_zp, b, b_scale, b_zp, c, y_scale, y_zp, alpha, trans_a, trans_b,
                alpha_first=True):
    """onnxruntime's QGemm: exact sums plus C; per column
    ``s = float32(float32(float32(alpha) * a_scale) * b_scale[n])``, divided by y_scale
    in float32 if given; ``float32(float32(acc) * s)``, then rounded half to even plus
    y_zp and saturated when y_zp is given (``alpha_first=False``: alpha applied last)."""
    a2 = (a.T if trans_a else a).astype(np.int64) - int(a_zp)
    b2 = (b.T if trans_b else b).astype(np.int64)
    n = b2.shape[1]
    b_scales = np.broadcast_to(np.asarray(b_scale, np.float32).reshape(-1), (n,))
    b_zps = np.broadcast_to(np.asarray(b_zp).astype(np.int64).reshape(-1), (n,))
    sums = a2 @ (b2 - b_zps)
    if c is not None:
        sums = sums + np.broadcast_to(np.asarray(c, np.int64), sums.shape)
    out = np.empty(sums.shape, np.float32 if y_zp is None else np.asarray(y_zp).dtype)
    for i, j in np.ndindex(sums.shape):
        if alpha_first:
            s = F32(F32(F32(alpha) * F32(a_scale)) * b_scales[j])
        else:
            s = F32(F32(alpha) * F32(F32(a_scale) * b_scales[j]))
        if y_scale is not None:
            s = F32(s / F32(y_scale))
        value = F32(F32(int(sums[i, j])) * s)
        out[i, j] = value if y_zp is None else clamp(round(float(value)) + int(y_zp), out.dtype)
    return out


def stated_requantized(x, x_scale, x_zp, y_scale, y_zp):
    """x in y's quantization: a copy where the parameters agree, else the
    identity's lookup table."""
    if F32(x_scale) == F32(y_scale) and int(x_zp) == int(y_zp):
        return np.array(x)
    table = stated_table(lambda v: v, x_scale, int(x_zp), y_scale, int(y_zp), x.dtype)
    return look_up(x, table, x.dtype)


def stated_dynamic_matmul(a, b, b_scale, b_zp, bias):
    """A's range widened to include 0 gives ``scale = float32(float32(max - min) / 255)``
    (1 for an empty range) and ``zp = round(clamp(0 - min / scale, 0, 255))``;
    A quantized by MLAS; exact sums; ``float32(float32(acc) * float32(scale * b_scale))``
    plus bias in float32."""
    low = min(F32(0), F32(a.min()))
    high = max(F32(0), F32(a.max()))
    scale = F32(1) if high == low else F32(F32(high - low) / F32(255))
    zp = round(float(min(max(F32(F32(0) - F32(low / scale)), F32(0)), F32(255))))
    quantized = np.vectorize(lambda v: mlas_quantize(v, scale, zp, np.uint8))(a).astype(np.int64)
    n = b.shape[-1]
    b_zps = np.zeros(n, np.int64) if b_zp is None else np.broadcast_to(
        np.asarray(b_zp).astype(np.int64).reshape(-1), (n,))
    sums = np.matmul(quantized - zp, b.astype(np.int64) - b_zps)
    b_scales = np.broadcast_to(np.asarray(b_scale, np.float32).reshape(-1), (n,))
    out = np.empty(sums.shape, np.float32)
    for index in np.ndindex(sums.shape):
        value = F32(F32(int(sums[index])) * F32(scale * b_scales[index[-1]]))
        out[index] = value if bias is None else F32(value + F32(bias[index[-1]]))
    return out


# -- running a node: qops.onnx.run_node, and onnxruntime as the peer -------------------------

def node_and_model(op_type, names, values, feeds, output_dtype, **attributes):
    """conftest's ``contrib_model``, but naming every input position, omitted
    ones as "" to the last: onnxruntime's QLinearSigmoid and QLinearLeakyRelu
    read input 4 (Y_zero_point) without checking that the node has it."""
    node, model = contrib_model(op_type, names, values, feeds, output_dtype, **attributes)
    for container in (node, model.graph.node[0]):
        del container.input[:]
        container.input.extend(name if values.get(name) is not None else "" for name in names)
    return node, model


def one_node(op_type, names, values, feeds, output_dtype, **attributes):
    """``(qops' result through run_node, a callable giving onnxruntime's)``."""
    node, model = node_and_model(op_type, names, values, feeds, output_dtype, **attributes)
    (result,) = qops.onnx.run_node(node, {name: values.get(name) for name in names})
    return result, (lambda: run_contrib_ort(model, values, feeds))


scales = st.floats(2.0**-10, 4.0, width=32)
seeds = st.integers(0, 2**32 - 1)
types = st.sampled_from(TYPES)


# -- QGemm ---------------------------------------------------------------------------------

GEMM_INPUTS = ["A", "a_scale", "a_zero_point", "B", "b_scale", "b_zero_point", "C", "y_scale",
               "y_zero_point"]


def gemm_values(rng, a_type, b_type, y_type, sizes, trans, per_column, c_form, output,
                a_scale, y_scale, b_range=(None, None)):
    """QGemm's inputs by name: A and B of (m, k, n) ``sizes`` (transposed as
    ``trans`` says), B's scales and zero points per column or per tensor, C
    in ``c_form``, and a quantized or float output (``output``)."""
    m, k, n = sizes
    a = random_values(rng, (k, m) if trans[0] else (m, k), a_type)
    b = random_values(rng, (n, k) if trans[1] else (k, n), b_type, *b_range)
    b_scale = ((2.0 ** rng.uniform(-10, 2, n)).astype(np.float32) if per_column
               else np.array([2.0 ** rng.uniform(-10, 2)], np.float32))
    b_zp = random_values(rng, (n,) if per_column else (), b_type, *b_range)
    c_shape = {None: None, "scalar": (), "row": (n,), "column": (m, 1), "full": (m, n)}[c_form]
    c = None if c_shape is None else rng.integers(-3000, 3000, c_shape).astype(np.int32)
    y_zp = random_values(rng, (), y_type) if output == "quantized" else None
    return dict(A=a, a_scale=F32(a_scale), a_zero_point=random_values(rng, (), a_type), B=b,
                b_scale=b_scale, b_zero_point=b_zp, C=c,
                y_scale=F32(y_scale) if output != "float" else None, y_zero_point=y_zp)


@given(a_type=types, b_type=types, y_type=types, seed=seeds,
       sizes=st.tuples(*[st.integers(1, 5)] * 3),
       trans=st.tuples(st.booleans(), st.booleans()), per_column=st.booleans(),
       c_form=st.sampled_from([None, "scalar", "row", "column", "full"]),
       output=st.sampled_from(["quantized", "float", "float with y_scale"]),
       alpha=st.sampled_from([1.0, 0.5, -1.25, 0.0, 2.0**-3 * 3]), narrow_b=st.booleans(),
       a_scale=scales, y_scale=scales)
def test_qgemm_equals_its_stated_rule(a_type, b_type, y_type, seed, sizes, trans, per_column,
                                      c_form, output, alpha, narrow_b, a_scale, y_scale):
    b_range = (-64, 63) if narrow_b and b_type == np.int8 else (None, None)
    values = gemm_values(np.random.default_rng(seed), a_type, b_type, y_type, sizes, trans,
                         per_column, c_form, output, a_scale, y_scale, b_range)
    a, b, b_scale, b_zp, c = (values[name] for name in ("A", "B", "b_scale", "b_zero_point", "C"))
    y_scale, y_zp = values["y_scale"], values["y_zero_point"]
    got, onnxruntime = one_node("QGemm", GEMM_INPUTS, values, ("A",),
                                y_type if y_zp is not None else np.float32, alpha=alpha,
                                transA=int(trans[0]), transB=int(trans[1]))
    expected = stated_gemm(a, F32(a_scale), values["a_zero_point"], b, b_scale, b_zp, c, y_scale,
                           y_zp, alpha, *trans)
    # onnxruntime's u8 x s8 kernels (s8 x s8 too: A moves to u8) saturate pair sums
    # of 16 bits on CPUs without VNNI: compared where no pair can reach 2**15.
    exact_peer = b_type == np.uint8 or int(np.abs(b.astype(np.int64)).max()) <= 64
    judge(got, expected, peer=onnxruntime if exact_peer else None, context="QGemm")


@given(a_type=types, b_type=types, y_type=types, seed=seeds,
       sizes=st.tuples(st.integers(1, 9), st.integers(0, 40), st.integers(1, 40)),
       trans=st.tuples(st.booleans(), st.booleans()), per_column=st.booleans(),
       c_form=st.sampled_from([None, "scalar", "row", "column", "full"]),
       output=st.sampled_from(["quantized", "float", "float with y_scale"]),
       alpha=st.sampled_from([1.0, -1.25, 2.0**-3 * 3]), n_threads=st.sampled_from([1, 2]),
       a_scale=scales, y_scale=scales)
def test_qgemm_in_a_session_equals_its_stated_rule(a_type, b_type, y_type, seed, sizes, trans,
                                                   per_column, c_form, output, alpha, n_threads,
                                                   a_scale, y_scale):
    """A session compiles a QGemm whose B, scales, zero points and C (of one
    row at most) are initializers; other forms of C run as written."""
    values = gemm_values(np.random.default_rng(seed), a_type, b_type, y_type, sizes, trans,
                         per_column, c_form, output, a_scale, y_scale)
    a, b, b_scale, b_zp, c = (values[name] for name in ("A", "B", "b_scale", "b_zero_point", "C"))
    y_scale, y_zp = values["y_scale"], values["y_zero_point"]
    _, model = node_and_model("QGemm", GEMM_INPUTS, values, ("A",),
                              y_type if y_zp is not None else np.float32, alpha=alpha,
                              transA=int(trans[0]), transB=int(trans[1]))
    session = qops.onnx.InferenceSession(model, n_threads=n_threads)
    (kind,) = [step.kind for step in session.steps]
    rows_of_c = 1 if c is None or c.ndim < 2 else c.shape[0]
    assert kind == ("qops QGemm" if rows_of_c > 1 else "qops QGemm (compiled)")
    (got,) = session.run(None, {"A": a})
    expected = stated_gemm(a, F32(a_scale), values["a_zero_point"], b, b_scale, b_zp, c, y_scale,
                           y_zp, alpha, *trans)
    judge(got, expected, context="QGemm in a session")


@pytest.mark.parametrize("alpha, output, c_form", [(1.0, "quantized", "row"),
                                                    (1.0, "quantized", None),
                                                    (1.0, "quantized", "scalar"),
                                                    (1.5, "quantized", "row"),
                                                    (1.0, "float", "row")])
@pytest.mark.parametrize("per_column", [False, True])
def test_a_qgemm_of_alpha_one_runs_as_the_compiled_convolution(alpha, output, c_form,
                                                               per_column, monkeypatch):
    """alpha 1 and a quantized output: the session's QGemm is the compiled
    1 x 1 convolution (its image rows A's rows), the stated rule bit for
    bit, on one row and on several; other QGemms keep the integer product."""
    from qops.onnx import _fusion

    taken = []
    made = _fusion._conv_call

    def counting(*arguments):
        run = made(*arguments)

        def spied(images, n_threads):
            taken.append(images[0].shape)
            return run(images, n_threads)

        return spied

    monkeypatch.setattr(_fusion, "_conv_call", counting)
    rng = np.random.default_rng(17)
    for rows in (1, 5):
        values = gemm_values(rng, np.uint8, np.int8, np.int8, (rows, 40, 24), (False, True),
                             per_column, c_form, output, 0.03, 0.4)
        _, model = node_and_model("QGemm", GEMM_INPUTS, values, ("A",),
                                  np.int8 if values["y_zero_point"] is not None else np.float32,
                                  alpha=alpha, transB=1)
        session = qops.onnx.InferenceSession(model)
        assert [step.kind for step in session.steps] == ["qops QGemm (compiled)"]
        taken.clear()
        (got,) = session.run(None, {"A": values["A"]})
        expected = stated_gemm(values["A"], F32(0.03), values["a_zero_point"], values["B"],
                               values["b_scale"], values["b_zero_point"], values["C"],
                               values["y_scale"], values["y_zero_point"], alpha, False, True)
        judge(got, expected, context="QGemm as a convolution")
        as_convolution = alpha == 1.0 and output == "quantized"
        assert taken == ([(rows, 40, 1, 1)] if as_convolution else [])


def test_a_compiled_qgemm_names_what_is_wrong_with_a():
    rng = np.random.default_rng(5)
    values = dict(A=random_values(rng, (3, 4), np.uint8), a_scale=F32(0.02),
                  a_zero_point=np.uint8(120), B=random_values(rng, (4, 5), np.int8), b_scale=np.float32([0.01]),
                  b_zero_point=np.int8(0), y_scale=F32(0.5), y_zero_point=np.uint8(3))
    _, model = node_and_model("QGemm", GEMM_INPUTS, values, ("A",), np.uint8)
    # A of any shape reaches the node: the model's own check of feeds is not the one tested.
    for dimension, name in zip(model.graph.input[0].type.tensor_type.shape.dim, "mk"):
        dimension.dim_param = name
    session = qops.onnx.InferenceSession(model)
    assert [step.kind for step in session.steps] == ["qops QGemm (compiled)"]
    with pytest.raises(qops.ValidationError, match=r"QGemm: B has shape \(4, 5\)"):
        session.run(None, {"A": np.zeros((3, 6), np.uint8)})


def test_qgemm_applies_alpha_to_a_scale_first():
    """onnxruntime's multiplier is ``float32(float32(alpha * a_scale) * b_scale) / y_scale``;
    these scales round differently when alpha comes last."""
    values = dict(A=np.array([[0]], np.uint8), a_scale=F32(0.595653), a_zero_point=np.uint8(248),
                  B=np.array([[1]], np.uint8), b_scale=F32(0.199969), b_zero_point=np.uint8(0),
                  y_scale=F32(0.108659), y_zero_point=np.uint8(128))
    arguments = (values["A"], values["a_scale"], 248, values["B"], values["b_scale"], 0, None,
                 values["y_scale"], np.uint8(128), 0.366, False, False)
    expected = stated_gemm(*arguments)
    assert not np.array_equal(expected, stated_gemm(*arguments, alpha_first=False))
    got, onnxruntime = one_node("QGemm", GEMM_INPUTS, values, ("A",), np.uint8, alpha=0.366)
    judge(got, expected, peer=onnxruntime)


def test_qgemm_without_an_inner_dimension_is_c_requantized():
    """K = 0: the sums are C alone, under the same rule (onnxruntime takes a
    path of its own there, so it is not compared)."""
    values = dict(A=np.zeros((3, 0), np.int8), a_scale=F32(0.5), a_zero_point=np.int8(3),
                  B=np.zeros((0, 2), np.int8), b_scale=np.array([0.25, 0.125], np.float32),
                  b_zero_point=np.array([1, -2], np.int8), C=np.array([[7, -9]], np.int32),
                  y_scale=F32(0.2), y_zero_point=np.int8(-5))
    got, _ = one_node("QGemm", GEMM_INPUTS, values, ("A",), np.int8, alpha=1.5)
    expected = stated_gemm(values["A"], F32(0.5), 3, values["B"], values["b_scale"],
                           values["b_zero_point"], values["C"], F32(0.2), np.int8(-5), 1.5,
                           False, False)
    judge(got, expected)
    assert got.shape == (3, 2) and not np.all(got == -5)


# -- QLinearMul ----------------------------------------------------------------------------

MUL_INPUTS = ["A", "A_scale", "A_zero_point", "B", "B_scale", "B_zero_point", "C_scale",
              "C_zero_point"]


@st.composite
def broadcast_shapes(draw):
    rank = draw(st.integers(0, 4))
    sizes = [draw(st.integers(1, 5)) for _ in range(rank)]
    a_shape = tuple(s if draw(st.booleans()) else 1 for s in sizes)
    b_shape = tuple(s if draw(st.booleans()) else 1 for s in sizes)
    return a_shape[draw(st.integers(0, len(a_shape))):], b_shape


@given(dtype=types, shapes=broadcast_shapes(), seed=seeds, a_scale=scales, b_scale=scales,
       c_scale=scales, zeros=st.tuples(st.booleans(), st.booleans(), st.booleans()))
def test_qlinear_mul_equals_its_stated_rule(dtype, shapes, seed, a_scale, b_scale, c_scale, zeros):
    rng = np.random.default_rng(seed)
    a, b = (random_values(rng, shape, dtype) for shape in shapes)
    zps = [None if omitted else random_values(rng, (), dtype) for omitted in zeros]
    values = dict(A=a, A_scale=F32(a_scale), A_zero_point=zps[0], B=b, B_scale=F32(b_scale),
                  B_zero_point=zps[1], C_scale=F32(c_scale), C_zero_point=zps[2])
    got, onnxruntime = one_node("QLinearMul", MUL_INPUTS, values, ("A", "B"), dtype)
    ints = [0 if z is None else int(z) for z in zps]
    expected = stated_mul(a, a_scale, ints[0], b, b_scale, ints[1], c_scale, ints[2])
    # onnxruntime's float-to-int32 conversion turns a value past 2**31 into the minimum.
    ratio = F32(F32(F32(a_scale) * F32(b_scale)) / F32(c_scale))
    within_int32 = float(ratio) * 255 * 255 + 255 < 2.0**31
    judge(got, expected, peer=onnxruntime if within_int32 else None, context="QLinearMul")


def test_qlinear_mul_adds_the_zero_point_before_rounding():
    """(5 * 1) * 0.5 = 2.5; plus the zero point 1 in float32 is 3.5, which
    rounds to 4 (rounding 2.5 first would give 2 + 1 = 3)."""
    values = dict(A=np.array([5], np.uint8), A_scale=F32(0.5), A_zero_point=None,
                  B=np.array([1], np.uint8), B_scale=F32(1), B_zero_point=None, C_scale=F32(1),
                  C_zero_point=np.uint8(1))
    got, onnxruntime = one_node("QLinearMul", MUL_INPUTS, values, ("A", "B"), np.uint8)
    judge(got, np.array([4], np.uint8), peer=onnxruntime)
    assert stated_mul(values["A"], 0.5, 0, values["B"], 1, 0, 1, 1, zero_point_first=False) == 3


def test_qlinear_mul_saturates_values_past_int32():
    a = np.array([10, 200, 0], np.uint8)
    b = np.array([200, 10, 0], np.uint8)
    got = _qoperator.qlinear_mul(a, 1000.0, 0, b, 1000.0, 100, 0.001, 7)
    assert got.tolist() == [255, 0, 7]


@given(dtype=types, shapes=broadcast_shapes(), seed=seeds, a_scale=scales, b_scale=scales,
       c_scale=scales, zero_points=st.tuples(st.booleans(), st.booleans(), st.booleans()))
def test_qlinear_mul_through_its_product_table_equals_its_stated_rule(dtype, shapes, seed,
                                                                      a_scale, b_scale,
                                                                      c_scale, zero_points):
    """Every tensor through the 65536-entry table (the threshold lowered to 0)."""
    rng = np.random.default_rng(seed)
    a, b = (random_values(rng, shape, dtype) for shape in shapes)
    zps = [int(random_values(rng, (), dtype)) if given_ else 0 for given_ in zero_points]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_qoperator, "_MUL_TABLE_MIN_SIZE", 0)
        got = _qoperator.qlinear_mul(a, F32(a_scale), zps[0], b, F32(b_scale), zps[1],
                                     F32(c_scale), zps[2])
    expected = stated_mul(a, a_scale, zps[0], b, b_scale, zps[1], c_scale, zps[2])
    assert got.dtype == expected.dtype and got.shape == expected.shape
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("dtype", TYPES)
@pytest.mark.parametrize("shapes", [((40, 30), ()), ((1, 1), (7, 60)), ((300,), (1,)),
                                    ((200, 300), (200, 300)), ((200, 1, 300), (5, 1))],
                         ids=["scalar B", "scalar A", "one-element B", "table", "broadcast"])
def test_qlinear_mul_of_large_tensors_equals_its_stated_rule(dtype, shapes):
    """The row of a single value and the product table (a sample of the
    elements is checked against the statement; every element against the
    rule evaluated directly), then the same scales with other zero points:
    a table kept for the first must not serve the second."""
    rng = np.random.default_rng(11)
    a, b = (random_values(rng, shape, dtype) for shape in shapes)
    for zps in ([3, -2 if dtype == np.int8 else 200, 5], [3, 7, 5]):
        got = _qoperator.qlinear_mul(a, F32(0.031), zps[0], b, F32(0.0173), zps[1], F32(0.0042),
                                     zps[2])
        direct = _qoperator._mul_values(a, b, zps, F32(F32(F32(0.031) * F32(0.0173)) /
                                                        F32(0.0042)))
        np.testing.assert_array_equal(got, direct)
        flat_a, flat_b = (np.broadcast_to(v, got.shape).reshape(-1) for v in (a, b))
        sample = rng.choice(got.size, 300)
        expected = stated_mul(flat_a[sample], 0.031, zps[0], flat_b[sample], 0.0173, zps[1],
                              0.0042, zps[2])
        np.testing.assert_array_equal(got.reshape(-1)[sample], expected)


# -- QLinearLeakyRelu and QLinearSigmoid ------------------------------------------------------

TABLE_INPUTS = ["X", "X_scale", "X_zero_point", "Y_scale", "Y_zero_point"]


@pytest.mark.parametrize("op_type", ["QLinearSigmoid", "QLinearLeakyRelu"])
@given(dtype=types, seed=seeds, x_scale=st.floats(2.0**-7, 1.0, width=32),
       y_scale=st.floats(2.0**-12, 2.0**-4, width=32),
       zeros=st.tuples(st.booleans(), st.booleans()),
       alpha=st.floats(-2, 2, width=32), shape=st.lists(st.integers(1, 4), max_size=3))
def test_lookup_table_nodes_equal_their_stated_tables(op_type, dtype, seed, x_scale, y_scale,
                                                      zeros, alpha, shape):
    rng = np.random.default_rng(seed)
    # every byte once, then a random tensor
    x = np.concatenate([np.arange(256, dtype=np.uint8).view(dtype),
                        random_values(rng, (int(np.prod(shape)),), dtype)]).reshape(-1)
    x_zp, y_zp = (None if omitted else random_values(rng, (), dtype) for omitted in zeros)
    values = dict(X=x, X_scale=F32(x_scale), X_zero_point=x_zp, Y_scale=F32(y_scale),
                  Y_zero_point=y_zp)
    attributes = {"alpha": alpha} if op_type == "QLinearLeakyRelu" else {}
    got, onnxruntime = one_node(op_type, TABLE_INPUTS, values, ("X",), dtype, **attributes)
    function = stated_sigmoid if op_type == "QLinearSigmoid" else stated_leaky_relu(alpha)
    table = stated_table(function, x_scale, 0 if x_zp is None else int(x_zp), y_scale,
                         0 if y_zp is None else int(y_zp), dtype)
    judge(got, look_up(x, table, dtype), peer=onnxruntime, context=op_type)


def test_the_sigmoid_table_is_mlas_fused_kernel():
    """Scales for which one entry of the table differs between the fused
    (FMA3, what onnxruntime runs on x86-64 with AVX2) and the unfused form."""
    parameters = dict(X_scale=F32(0.106436), X_zero_point=np.uint8(67), Y_scale=F32(7.1471e-05),
                      Y_zero_point=np.uint8(18))
    fused, unfused = (stated_table(lambda v, f=f: stated_sigmoid(v, fused=f), F32(0.106436), 67,
                                   F32(7.1471e-05), 18, np.uint8) for f in (True, False))
    assert fused != unfused
    x = np.arange(256, dtype=np.uint8)
    got, onnxruntime = one_node("QLinearSigmoid", TABLE_INPUTS, dict(parameters, X=x), ("X",),
                                np.uint8)
    judge(got, look_up(x, fused, np.uint8), peer=onnxruntime)


# -- QLinearSoftmax ------------------------------------------------------------------------

SOFTMAX_INPUTS = ["X", "X_scale", "x_zero_point", "y_scale", "y_zero_point"]


@given(dtype=types, seed=seeds, shape=st.lists(st.integers(1, 6), min_size=1, max_size=3),
       axis_draw=st.integers(0, 5), opset=st.sampled_from([11, 12, 13, 21]),
       x_scale=st.floats(2.0**-8, 2.0, width=32),
       y_scale=st.one_of(st.just(1 / 256), st.floats(2.0**-16, 0.5, width=32)),
       with_axis=st.booleans(), x_zp=st.booleans())
def test_qlinear_softmax_equals_its_stated_rule(dtype, seed, shape, axis_draw, opset, x_scale,
                                                y_scale, with_axis, x_zp):
    rng = np.random.default_rng(seed)
    x = random_values(rng, tuple(shape), dtype)
    axis = axis_draw % (2 * len(shape)) - len(shape)  # negative and non-negative
    attributes = dict(opset=opset, **({"axis": axis} if with_axis else {}))
    y_zp = random_values(rng, (), dtype)
    values = dict(X=x, X_scale=F32(x_scale), x_zero_point=random_values(rng, (), dtype) if x_zp
                  else None, y_scale=F32(y_scale), y_zero_point=y_zp)
    got, onnxruntime = one_node("QLinearSoftmax", SOFTMAX_INPUTS, values, ("X",), dtype,
                                **attributes)
    # Without the attribute the axis is the schema's default, -1, at every opset.
    expected = stated_softmax(x, x_scale, y_scale, int(y_zp), axis if with_axis else -1, opset)
    judge(got, expected, peer=onnxruntime, context="QLinearSoftmax")


@pytest.mark.parametrize("row, x_scale, inverse_y_scale, neighbour", [
    ([236, 215], 0.27228, 45331, dict(float32_quotient=True)),
    ([162, 204, 165], 0.1573, 60914, dict(log=lambda v: math.log(float(v)))),
    (((np.arange(295) * 43 + 80) % 256).tolist(), 0.01056, 21705, dict(float64_sum=True)),
], ids=["float64 quotient", "float32 logarithm", "float32 sum in element order"])
def test_qlinear_softmax_cases_that_tell_the_arithmetic_apart(row, x_scale, inverse_y_scale,
                                                              neighbour):
    """onnxruntime divides in float64 (a float32 quotient rounds otherwise
    here), takes the shift from C's float32 logf (the float64 logarithm, not
    rounded to float32, gives another table here) and adds the exponentials
    one at a time in float32 (their sum rounded once differs here)."""
    x = np.array([row], np.uint8)
    y_scale = F32(1 / inverse_y_scale)
    expected = stated_softmax(x, x_scale, y_scale, 0, -1, 13)
    assert not np.array_equal(expected, stated_softmax(x, x_scale, y_scale, 0, -1, 13,
                                                       **neighbour))
    values = dict(X=x, X_scale=F32(x_scale), y_scale=y_scale, y_zero_point=np.uint8(0))
    got, onnxruntime = one_node("QLinearSoftmax", SOFTMAX_INPUTS, values, ("X",), np.uint8,
                                opset=13, axis=-1)
    judge(got, expected, peer=onnxruntime)


@pytest.mark.parametrize("dtype", TYPES)
@pytest.mark.parametrize("axis", [-1, 0, 1])
@pytest.mark.parametrize("opset", [11, 13])
def test_qlinear_softmax_of_many_rows_with_the_whole_range_equals_its_stated_rule(dtype, axis,
                                                                                 opset):
    """Rows that hold the type's least and greatest values (differences from
    the maximum of 0 and 255, the table's two ends), and rows of one value;
    240 to 1320 softmaxes, summed along rows or a column at a time."""
    rng = np.random.default_rng(23)
    low, high = RANGES[np.dtype(dtype)]
    x = random_values(rng, (6, 40, 33), dtype)
    x[0, 0, :] = low
    x[0, 0, 5] = high
    x[1, :, 0] = high
    x[1, 3, :] = low
    x[2] = low
    x[:, 7, 7] = high
    expected = stated_softmax(x, F32(0.05), F32(1 / 256), low, axis, opset)
    got = _qoperator.qlinear_softmax(x, F32(0.05), F32(1 / 256), low, axis=axis, opset=opset)
    np.testing.assert_array_equal(got, expected)
    assert got.flags.c_contiguous


def test_qlinear_softmax_of_many_rows_sums_each_in_element_order():
    """The row whose float32 sum in element order differs from its sum
    rounded once (see the case above), as 300 softmaxes: summed a column at
    a time, each must still be its own left-to-right sum."""
    row = ((np.arange(295) * 43 + 80) % 256).astype(np.uint8)
    y_scale = F32(1 / 21705)
    expected = stated_softmax(row[None, :], 0.01056, y_scale, 0, -1, 13)
    assert not np.array_equal(expected, stated_softmax(row[None, :], 0.01056, y_scale, 0, -1, 13,
                                                       float64_sum=True))
    x = np.tile(row, (300, 1))
    got = _qoperator.qlinear_softmax(x, F32(0.01056), y_scale, 0, axis=-1, opset=13)
    np.testing.assert_array_equal(got, np.tile(expected, (300, 1)))


def test_int8_softmax_saturates_at_127():
    """A probability that rounds to 1 with y_scale 1/256 and zero point -128
    is 128: it saturates to 127 (onnxruntime's int8 kernel wrapped it to -128
    until microsoft/onnxruntime#29728)."""
    x = np.array([[127, -128, -128, -128]], np.int8)
    values = dict(X=x, X_scale=F32(0.1), y_scale=F32(1 / 256), y_zero_point=np.int8(-128))
    got, onnxruntime = one_node("QLinearSoftmax", SOFTMAX_INPUTS, values, ("X",), np.int8,
                                opset=13)
    judge(got, np.array([[127, -128, -128, -128]], np.int8), peer=onnxruntime)


# -- QLinearConcat and QLinearWhere -------------------------------------------------------------

@given(dtype=types, seed=seeds, count=st.integers(1, 3), shape=st.lists(st.integers(1, 4),
       min_size=1, max_size=3), axis_draw=st.integers(0, 5), same=st.lists(st.booleans(),
       min_size=3, max_size=3), y_scale=scales)
def test_qlinear_concat_equals_its_stated_rule(dtype, seed, count, shape, axis_draw, same, y_scale):
    rng = np.random.default_rng(seed)
    axis = axis_draw % (2 * len(shape)) - len(shape)
    y_zp = random_values(rng, (), dtype)
    names, values, parts = ["Y_scale", "Y_zero_point"], dict(Y_scale=F32(y_scale),
                                                             Y_zero_point=y_zp), []
    for index in range(count):
        sizes = list(shape)
        sizes[axis] = int(rng.integers(0 if index else 1, 4))
        x = random_values(rng, tuple(sizes), dtype)
        # an input in the output's own quantization is copied
        scale = F32(y_scale) if same[index] else F32(2.0 ** rng.uniform(-10, 2))
        zp = y_zp if same[index] else random_values(rng, (), dtype)
        names += [f"x{index}", f"x{index}_scale", f"x{index}_zero_point"]
        values.update({f"x{index}": x, f"x{index}_scale": scale, f"x{index}_zero_point": zp})
        parts.append(stated_requantized(x, scale, zp, F32(y_scale), y_zp))
    feeds = tuple(f"x{index}" for index in range(count))
    got, onnxruntime = one_node("QLinearConcat", names, values, feeds, dtype, axis=axis)
    judge(got, np.concatenate(parts, axis=axis), peer=onnxruntime, context="QLinearConcat")


WHERE_INPUTS = ["condition", "X", "x_scale", "x_zero_point", "Y", "y_scale", "y_zero_point",
                "z_scale", "z_zero_point"]


@given(dtype=types, seed=seeds, shapes=broadcast_shapes(), condition_full=st.booleans(),
       same=st.tuples(st.booleans(), st.booleans()), z_scale=scales)
def test_qlinear_where_equals_its_stated_rule(dtype, seed, shapes, condition_full, same, z_scale):
    rng = np.random.default_rng(seed)
    x, y = (random_values(rng, shape, dtype) for shape in shapes)
    full = np.broadcast_shapes(*shapes)
    condition = rng.integers(0, 2, full if condition_full else full[-1:]).astype(bool)
    z_zp = random_values(rng, (), dtype)
    parameters = [(F32(z_scale), z_zp) if s else (F32(2.0 ** rng.uniform(-10, 2)),
                                                  random_values(rng, (), dtype)) for s in same]
    values = dict(condition=condition, X=x, x_scale=parameters[0][0],
                  x_zero_point=parameters[0][1], Y=y, y_scale=parameters[1][0],
                  y_zero_point=parameters[1][1], z_scale=F32(z_scale), z_zero_point=z_zp)
    got, onnxruntime = one_node("QLinearWhere", WHERE_INPUTS, values, ("condition", "X", "Y"),
                                dtype)
    x_in_z = stated_requantized(x, *parameters[0], F32(z_scale), z_zp)
    y_in_z = stated_requantized(y, *parameters[1], F32(z_scale), z_zp)
    c, xb, yb = np.broadcast_arrays(condition, x_in_z, y_in_z)
    expected = np.array([xb[i] if c[i] else yb[i] for i in np.ndindex(c.shape)],
                        dtype).reshape(c.shape)
    judge(got, expected, peer=onnxruntime, context="QLinearWhere")


# -- DynamicQuantizeMatMul -------------------------------------------------------------------

DQMM_INPUTS = ["A", "B", "b_scale", "b_zero_point", "bias"]


@given(b_type=types, seed=seeds, sizes=st.tuples(*[st.integers(1, 6)] * 3),
       batch=st.sampled_from([(), (2,)]), per_column=st.booleans(), with_zp=st.booleans(),
       with_bias=st.booleans(), sign=st.sampled_from(["mixed", "positive", "negative", "zero"]),
       spread=st.floats(0.01, 100), narrow_b=st.booleans())
def test_dynamic_quantize_matmul_equals_its_stated_rule(b_type, seed, sizes, batch, per_column,
                                                        with_zp, with_bias, sign, spread,
                                                        narrow_b):
    rng = np.random.default_rng(seed)
    m, k, n = sizes
    a = (rng.standard_normal(batch + (m, k)) * spread).astype(np.float32)
    a = {"mixed": a, "positive": np.abs(a), "negative": -np.abs(a), "zero": a * 0}[sign]
    b_low, b_high = (-64, 63) if narrow_b and b_type == np.int8 else (None, None)
    b = random_values(rng, (k, n), b_type, b_low, b_high)
    b_scale = ((2.0 ** rng.uniform(-8, 0, n)).astype(np.float32) if per_column
               else F32(2.0 ** rng.uniform(-8, 0)))
    b_zp = (random_values(rng, (n,) if per_column else (), b_type, b_low, b_high) if with_zp
            else None)
    bias = rng.standard_normal(n).astype(np.float32) if with_bias else None
    values = dict(A=a, B=b, b_scale=b_scale, b_zero_point=b_zp, bias=bias)
    got, onnxruntime = one_node("DynamicQuantizeMatMul", DQMM_INPUTS, values, ("A",), np.float32)
    exact_peer = b_type == np.uint8 or int(np.abs(b.astype(np.int64)).max()) <= 64
    judge(got, stated_dynamic_matmul(a, b, b_scale, b_zp, bias),
          peer=onnxruntime if exact_peer else None, context="DynamicQuantizeMatMul")


# -- every node in the reference evaluator, and the functions for prepared constants -----------

def _examples():
    rng = np.random.default_rng(3)
    u8 = lambda shape: random_values(rng, shape, np.uint8)  # noqa: E731
    i8 = lambda shape: random_values(rng, shape, np.int8)  # noqa: E731
    x = i8((2, 5))
    return {
        "QGemm": (GEMM_INPUTS, dict(A=u8((3, 4)), a_scale=F32(0.02), a_zero_point=np.uint8(120),
                                    B=u8((4, 2)), b_scale=np.array([0.01, 0.03], np.float32),
                                    b_zero_point=np.array([100, 130], np.uint8),
                                    C=np.array([5, -7], np.int32), y_scale=F32(0.05),
                                    y_zero_point=np.uint8(128)), ("A",), np.uint8,
                  dict(alpha=0.75, transB=0),
                  lambda v: stated_gemm(v["A"], v["a_scale"], 120, v["B"], v["b_scale"],
                                        v["b_zero_point"], v["C"], v["y_scale"], np.uint8(128),
                                        0.75, False, False)),
        "QLinearMul": (MUL_INPUTS, dict(A=x, A_scale=F32(0.1), A_zero_point=np.int8(3),
                                        B=i8((5,)), B_scale=F32(0.2), B_zero_point=np.int8(-4),
                                        C_scale=F32(0.3), C_zero_point=np.int8(2)),
                       ("A", "B"), np.int8, {},
                       lambda v: stated_mul(v["A"], 0.1, 3, v["B"], 0.2, -4, 0.3, 2)),
        "QLinearLeakyRelu": (TABLE_INPUTS, dict(X=x, X_scale=F32(0.05), X_zero_point=np.int8(1),
                                                Y_scale=F32(0.04), Y_zero_point=np.int8(-3)),
                             ("X",), np.int8, dict(alpha=0.2),
                             lambda v: look_up(v["X"], stated_table(stated_leaky_relu(0.2), 0.05,
                                                                    1, 0.04, -3, np.int8),
                                               np.int8)),
        "QLinearSigmoid": (TABLE_INPUTS, dict(X=x, X_scale=F32(0.05), X_zero_point=np.int8(1),
                                              Y_scale=F32(1 / 256), Y_zero_point=np.int8(-128)),
                           ("X",), np.int8, {},
                           lambda v: look_up(v["X"], stated_table(stated_sigmoid, 0.05, 1,
                                                                  F32(1 / 256), -128, np.int8),
                                             np.int8)),
        "QLinearSoftmax": (SOFTMAX_INPUTS, dict(X=x, X_scale=F32(0.1), x_zero_point=np.int8(0),
                                                y_scale=F32(1 / 256), y_zero_point=np.int8(-128)),
                           ("X",), np.int8, dict(opset=13, axis=0),
                           lambda v: stated_softmax(v["X"], 0.1, F32(1 / 256), -128, 0, 13)),
        "QLinearConcat": (["Y_scale", "Y_zero_point", "a", "a_scale", "a_zero_point", "b",
                           "b_scale", "b_zero_point"],
                          dict(Y_scale=F32(0.1), Y_zero_point=np.int8(0), a=x,
                               a_scale=F32(0.1), a_zero_point=np.int8(0), b=i8((2, 3)),
                               b_scale=F32(0.07), b_zero_point=np.int8(5)),
                          ("a", "b"), np.int8, dict(axis=1),
                          lambda v: np.concatenate([v["a"], stated_requantized(
                              v["b"], F32(0.07), 5, F32(0.1), 0)], axis=1)),
        "QLinearWhere": (WHERE_INPUTS, dict(condition=np.array([True, False, True, False, True]),
                                            X=x, x_scale=F32(0.1), x_zero_point=np.int8(2),
                                            Y=i8((2, 1)), y_scale=F32(0.3),
                                            y_zero_point=np.int8(-1), z_scale=F32(0.2),
                                            z_zero_point=np.int8(4)),
                         ("condition", "X", "Y"), np.int8, {},
                         lambda v: np.where(v["condition"],
                                            stated_requantized(v["X"], F32(0.1), 2, F32(0.2), 4),
                                            stated_requantized(v["Y"], F32(0.3), -1, F32(0.2),
                                                               4))),
        "DynamicQuantizeMatMul": (DQMM_INPUTS, dict(A=rng.standard_normal((3, 4)).astype(
            np.float32), B=i8((4, 2)), b_scale=np.array([0.02, 0.05], np.float32),
            b_zero_point=np.array([1, -1], np.int8), bias=np.array([0.5, -0.25], np.float32)),
            ("A",), np.float32, {},
            lambda v: stated_dynamic_matmul(v["A"], v["B"], v["b_scale"], v["b_zero_point"],
                                            v["bias"])),
    }


EXAMPLES = _examples()


def test_every_qoperator_node_is_a_contrib_operator():
    assert set(EXAMPLES) <= set(qops.onnx.supported_operators("com.microsoft"))
    assert set(EXAMPLES) == set(_qoperator.OPERATORS)


@pytest.mark.parametrize("op_type", sorted(EXAMPLES))
def test_nodes_run_in_run_node_and_in_the_reference_evaluator(op_type):
    names, values, feeds, output_dtype, attributes, stated = EXAMPLES[op_type]
    node, model = node_and_model(op_type, names, values, feeds, output_dtype, **attributes)
    expected = stated(values)
    (through_run_node,) = qops.onnx.run_node(node, [values.get(name) for name in node.input])
    evaluator = ReferenceEvaluator(model, new_ops=qops.onnx.reference_ops())
    (through_evaluator,) = evaluator.run(None, {name: values[name] for name in feeds})
    judge(through_run_node, expected, context=f"{op_type} through run_node",
          peer=lambda: run_contrib_ort(model, values, feeds))
    judge(np.asarray(through_evaluator), expected, context=f"{op_type} in the reference evaluator")


def test_functions_with_prepared_constants_give_the_nodes_results():
    rng = np.random.default_rng(8)
    x = random_values(rng, (4, 9), np.uint8)
    table = _qoperator.softmax_table(F32(0.08), 9)
    prepared = _qoperator.qlinear_softmax(x, 0.08, 1 / 256, 0, axis=1, table=table)
    judge(prepared, stated_softmax(x, 0.08, F32(1 / 256), 0, 1, 13))
    sigmoid = _qoperator.lookup_table(_qoperator.logistic, 0.05, 7, 1 / 256, 0, np.uint8)
    judge(_qoperator.apply_lookup_table(x, sigmoid),
          look_up(x, stated_table(stated_sigmoid, 0.05, 7, F32(1 / 256), 0, np.uint8), np.uint8))
    assert _qoperator.requantize_table(0.1, 3, 0.1, 3, np.uint8) is None
    b = random_values(rng, (9,), np.uint8)
    judge(_qoperator.qlinear_mul(x, 0.1, 3, b, 0.2, 4, 0.05, 6),
          stated_mul(x, 0.1, 3, b, 0.2, 4, 0.05, 6))


# -- refused calls -----------------------------------------------------------------------------

def _with(op_type, changes=None, attributes=None, drop=()):
    names, values, feeds, output_dtype, base_attributes, _ = EXAMPLES[op_type]
    values = dict(values, **(changes or {}))
    for name in drop:
        values[name] = None
    return names, values, dict(base_attributes, **(attributes or {}))


@pytest.mark.parametrize("op_type, changes, attributes, drop, match", [
    ("QGemm", None, None, ("a_scale",), r"QGemm: a_scale is required"),
    ("QGemm", None, None, ("a_zero_point",), r"QGemm: a_zero_point is required"),
    ("QGemm", dict(A=np.zeros((3, 4), np.int16)), None, (), r"QGemm: A has dtype int16"),
    ("QGemm", dict(B=np.zeros((5, 2), np.uint8)), None, (), r"QGemm: B has shape \(5, 2\)"),
    ("QGemm", dict(b_scale=np.ones(3, np.float32)), None, (), r"QGemm: b_scale has shape \(3,\)"),
    ("QGemm", dict(C=np.zeros((2, 2), np.int32)), None, (), r"QGemm: C has shape \(2, 2\)"),
    ("QGemm", dict(C=np.zeros(2, np.float32)), None, (), r"QGemm: C has dtype float32"),
    ("QGemm", None, dict(beta=1.0), (), r"QGemm: beta is not an attribute"),
    ("QGemm", None, dict(transA=2), (), r"QGemm: transA is 2"),
    ("QGemm", dict(a_scale=F32(0)), None, (), r"QGemm: a_scale is 0.0; scales must be positive"),
    ("QLinearMul", None, None, ("B",), r"QLinearMul: B is required"),
    ("QLinearMul", dict(B=np.zeros(5, np.uint8)), None, (), r"QLinearMul: B has dtype uint8"),
    ("QLinearMul", dict(A_scale=np.ones(2, np.float32)), None, (),
     r"QLinearMul: A_scale has shape \(2,\); QLinearMul takes a per-tensor scale"),
    ("QLinearMul", dict(B=np.zeros(3, np.int8)), None, (), r"QLinearMul: B has shape \(3,\)"),
    ("QLinearMul", dict(C_zero_point=np.uint8(0)), None, (), r"QLinearMul: C_zero_point has dtype"),
    ("QLinearSigmoid", None, None, ("Y_scale",), r"QLinearSigmoid: Y_scale is required"),
    ("QLinearSigmoid", dict(X=np.zeros(3, np.float32)), None, (),
     r"QLinearSigmoid: X has dtype float32"),
    ("QLinearLeakyRelu", dict(X_scale=np.float64(0.5)), None, (),
     r"QLinearLeakyRelu: X_scale has dtype float64"),
    ("QLinearLeakyRelu", None, dict(alpha=float("nan")), (), r"QLinearLeakyRelu: alpha is nan"),
    ("QLinearSoftmax", None, dict(opset=None), (), r"QLinearSoftmax: opset is a required"),
    ("QLinearSoftmax", None, dict(axis=2), (), r"QLinearSoftmax: axis is 2"),
    ("QLinearSoftmax", None, None, ("y_zero_point",), r"QLinearSoftmax: y_zero_point is required"),
    ("QLinearSoftmax", dict(y_scale=F32(-1)), None, (), r"QLinearSoftmax: y_scale is -1.0"),
    ("QLinearConcat", None, dict(axis=None), (), r"QLinearConcat: axis is a required"),
    ("QLinearConcat", dict(b=np.zeros((3, 3), np.int8)), None, (),
     r"QLinearConcat: inputs\[1\] has shape \(3, 3\)"),
    ("QLinearConcat", dict(b=np.zeros((2, 3), np.uint8)), None, (),
     r"QLinearConcat: inputs\[1\] has dtype uint8"),
    ("QLinearConcat", None, None, ("b_zero_point",),
     r"QLinearConcat: inputs\[1\] zero point is required"),
    ("QLinearWhere", dict(condition=np.ones(5, np.int8)), None, (),
     r"QLinearWhere: condition has dtype int8"),
    ("QLinearWhere", None, None, ("z_zero_point",), r"QLinearWhere: z_zero_point is required"),
    ("QLinearWhere", dict(Y=np.zeros((3, 1), np.int8)), None, (),
     r"QLinearWhere: condition has shape \(5,\), which does not broadcast"),
    ("DynamicQuantizeMatMul", dict(A=np.zeros((3, 4), np.float64)), None, (),
     r"DynamicQuantizeMatMul: A has dtype float64"),
    ("DynamicQuantizeMatMul", None, None, ("b_scale",),
     r"DynamicQuantizeMatMul: b_scale is required"),
    ("DynamicQuantizeMatMul", dict(b_zero_point=np.array([1, 1], np.uint8)), None, (),
     r"DynamicQuantizeMatMul: b_zero_point has dtype uint8"),
])
def test_bad_nodes_are_refused_naming_the_operator_and_slot(op_type, changes, attributes, drop,
                                                            match):
    names, values, attributes = _with(op_type, changes, attributes, drop)
    attributes = {key: value for key, value in attributes.items() if value is not None}
    node = onnx.helper.make_node(op_type, names, ["y"], domain="com.microsoft", **attributes)
    with pytest.raises(qops.ValidationError, match=match):
        qops.onnx.run_node(node, [values.get(name) for name in names])


def test_a_wrong_dtype_is_also_a_type_error():
    names, values, _ = _with("QLinearMul", dict(A=np.zeros((2, 5), np.int32)))
    node = onnx.helper.make_node("QLinearMul", names, ["y"], domain="com.microsoft")
    with pytest.raises(TypeError):
        qops.onnx.run_node(node, [values[name] for name in names])
