"""``qops.quantized_linear_matrix_multiply`` against independent implementations.

* onnxruntime ``QLinearMatMul``: a peer, compared by the rule of tests/peers.py
  (qops equals the oracle below; onnxruntime is compared where it is exact).
* ``onnx.reference`` ``QLinearMatMul``: within 1, all eight type combinations.
* An oracle written here (exact Python-int dot products, the contract's
  float32 requantization) for what ONNX cannot express: per-row
  ``a_scale`` / ``a_zero_point`` / ``output_scale`` / ``output_zero_point``
  (DirectML ``{1,1,M,1}``), absent zero points, ``output_dtype``, sums
  beyond int32.
* The contract's numeric pins, derived in the test.

DirectML needs ``a``, ``b`` and the output to share one rank (2 to 4 from
feature level 4_0, exactly 4 at 2_1); batch dimensions of size 1 broadcast.
ONNX's per-column ``b_scale`` is 1-D of N; DirectML's is ``{..., 1, N}``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np
import pytest
from conftest import (
    ALTERNATIVE_MULTIPLIERS,
    INT32_MAX,
    TYPE_COMBOS,
    all_combo_params,
    assert_exact,
    assert_within_one,
    combo_id,
    contract_multiplier,
    contract_requantize,
    int8_terms,
    int_range,
    judge,
    multiplier_order_case,
    run_ort,
    run_reference,
)
from hypothesis import given
from hypothesis import strategies as st

import qops

ALL_COMBOS = all_combo_params()


@dataclass
class MatMulCase:
    a: np.ndarray
    b: np.ndarray
    a_zp: np.ndarray        # (M,) int64; equal values when per tensor
    b_zp: np.ndarray        # (N,)
    a_scale: np.ndarray     # (M,) float32
    b_scale: np.ndarray     # (N,)
    out_scale: np.ndarray   # (M,)
    y_zp: np.ndarray        # (M,)
    y_dtype: np.dtype
    per_row: bool
    per_column: bool
    forms: dict = field(default_factory=dict)
    feature_level: object = None

    @property
    def rank(self):
        return self.a.ndim

    @property
    def m(self):
        return self.a.shape[-2]

    @property
    def n(self):
        return self.b.shape[-1]

    def _shape(self, kind):
        lead = (1,) * (self.rank - 2)
        return lead + {"row": (self.m, 1), "column": (1, self.n), "tensor": (1, 1)}[kind]

    def _param(self, values, dtype, kind, form):
        """A scale / zero point slot of the DirectML shape for ``kind``; per-tensor
        values may use the scalar shorthand."""
        values = np.asarray(values)
        if kind == "tensor":
            value = values.reshape(-1)[0]
            if form == "python" and dtype == np.float32:
                return float(value)
            if form == "0d":
                return np.asarray(value).astype(dtype).reshape(())
            if form == "none" and value == 0:
                return None
            return np.asarray(value).astype(dtype).reshape(self._shape("tensor"))
        return values.astype(dtype).reshape(self._shape(kind))

    def qops_kwargs(self):
        f = self.forms
        row = "row" if self.per_row else "tensor"
        col = "column" if self.per_column else "tensor"
        kwargs = dict(
            a=self.a,
            a_scale=self._param(self.a_scale, np.float32, row, f.get("a_scale", "array")),
            a_zero_point=self._param(self.a_zp, self.a.dtype, row, f.get("a_zero_point", "array")),
            b=self.b,
            b_scale=self._param(self.b_scale, np.float32, col, f.get("b_scale", "array")),
            b_zero_point=self._param(self.b_zp, self.b.dtype, col, f.get("b_zero_point", "array")),
            output_scale=self._param(self.out_scale, np.float32, row, f.get("output_scale", "array")),
            feature_level=self.feature_level,
        )
        if f.get("output_zero_point") == "output_dtype" and not np.any(self.y_zp):
            kwargs["output_zero_point"] = None
            kwargs["output_dtype"] = self.y_dtype
        else:
            form = f.get("output_zero_point", "array")
            kwargs["output_zero_point"] = self._param(self.y_zp, self.y_dtype, row,
                                                      "array" if form == "none" else form)
        return kwargs

    def onnx_inputs(self):
        """ONNX inputs.  A per-column ``b_scale`` / ``b_zero_point`` is 1-D of N for
        a 2-D ``b``; above that onnxruntime wants ``b``'s batch dimensions with a
        1 before N (``b.shape[:-2] + (1, N)``), which broadcasts the same way."""
        assert not self.per_row
        column_shape = (self.n,) if self.rank == 2 else self.b.shape[:-2] + (1, self.n)
        return {
            "a": self.a,
            "a_scale": np.float32(self.a_scale[0]).reshape(()),
            "a_zero_point": np.asarray(self.a_zp[0]).astype(self.a.dtype).reshape(()),
            "b": self.b,
            "b_scale": (np.broadcast_to(self.b_scale.astype(np.float32), column_shape).copy()
                        if self.per_column else np.float32(self.b_scale[0]).reshape(())),
            "b_zero_point": (np.broadcast_to(self.b_zp.astype(self.b.dtype), column_shape).copy()
                             if self.per_column
                             else np.asarray(self.b_zp[0]).astype(self.b.dtype).reshape(())),
            "y_scale": np.float32(self.out_scale[0]).reshape(()),
            "y_zero_point": np.asarray(self.y_zp[0]).astype(self.y_dtype).reshape(()),
        }

    def max_abs_acc(self):
        a = np.abs(self.a.astype(np.int64) - self.a_zp.reshape(-1, 1)).max()
        b = np.abs(self.b.astype(np.int64) - self.b_zp.reshape(1, -1)).max()
        return int(a * b * self.a.shape[-1])


def _log_uniform(rng, low, high, size):
    return (np.float32(2.0) ** np.asarray(rng.uniform(low, high, size), np.float32)).astype(np.float32)


@st.composite
def matmul_shapes(draw, ranks=(2, 3, 4), max_mn=5, max_k=8, max_batch=3):
    rank = draw(st.sampled_from(ranks))
    m, k, n = (draw(st.integers(1, max_mn)), draw(st.integers(1, max_k)),
               draw(st.integers(1, max_mn)))
    batch_a, batch_b = [], []
    for _ in range(rank - 2):
        size = draw(st.integers(1, max_batch))
        kind = draw(st.sampled_from(["same", "a1", "b1"]))  # size-1 batch dims broadcast
        batch_a.append(1 if kind == "a1" else size)
        batch_b.append(1 if kind == "b1" else size)
    return tuple(batch_a) + (m, k), tuple(batch_b) + (k, n)


def build_case(a_shape, b_shape, combo, seed, *, per_row, per_column, value_mode="random",
               scale_mode="random", forms=None, feature_level=None):
    a_dtype, b_dtype, y_dtype = (np.dtype(t) for t in combo)
    rng = np.random.default_rng(seed)
    m, k, n = a_shape[-2], a_shape[-1], b_shape[-1]

    def values(dtype, shape):
        low, high = int_range(dtype)
        if value_mode == "extreme":
            return rng.choice(np.array([low, high, 0], np.int64), size=shape).astype(dtype)
        return rng.integers(low, high + 1, size=shape).astype(dtype)

    def zero_points(dtype, count, varying):
        low, high = int_range(dtype)
        if varying:
            return rng.integers(low, high + 1, size=count).astype(np.int64)
        return np.full(count, int(rng.integers(low, high + 1)), np.int64)

    a, b = values(a_dtype, a_shape), values(b_dtype, b_shape)
    a_zp = zero_points(a_dtype, m, per_row)
    b_zp = zero_points(b_dtype, n, per_column)
    y_zp = zero_points(y_dtype, m, per_row)
    if value_mode == "extreme" and rng.random() < 0.5:
        a_zp[:], b_zp[:], y_zp[:] = 0, 0, 0
    if scale_mode == "pow2":
        def scales(count, varying, low, high):
            exps = rng.integers(low, high + 1, size=count) if varying else \
                np.full(count, int(rng.integers(low, high + 1)))
            return (np.float32(2.0) ** exps.astype(np.float32)).astype(np.float32)
        a_scale = scales(m, per_row, -6, 0)
        b_scale = scales(n, per_column, -6, 0)
        out_scale = scales(m, per_row, -2, 14)
    else:
        def scales(count, varying):
            return _log_uniform(rng, -8, 0, count) if varying else \
                np.full(count, _log_uniform(rng, -8, 0, 1)[0], np.float32)
        a_scale = scales(m, per_row)
        b_scale = scales(n, per_column)
        target = _log_uniform(rng, -4, 4, m if per_row else 1) * np.float32(40.0 / (5000.0 * k**0.5))
        out_scale = (a_scale[0] * b_scale[0] / target).astype(np.float32)
        out_scale = np.broadcast_to(out_scale, (m,)).astype(np.float32)
    forms = forms or {}
    if forms.get("a_zero_point") == "none" and not per_row:
        a_zp[:] = 0
    if forms.get("b_zero_point") == "none" and not per_column:
        b_zp[:] = 0
    if forms.get("output_zero_point") == "output_dtype":
        y_zp[:] = 0
    return MatMulCase(a=a, b=b, a_zp=a_zp, b_zp=b_zp, a_scale=a_scale, b_scale=b_scale,
                      out_scale=out_scale, y_zp=y_zp, y_dtype=y_dtype, per_row=per_row,
                      per_column=per_column, forms=forms, feature_level=feature_level)


FORMS = st.fixed_dictionaries({
    "a_scale": st.sampled_from(["python", "0d", "array"]),
    "b_scale": st.sampled_from(["python", "0d", "array"]),
    "output_scale": st.sampled_from(["python", "0d", "array"]),
    "a_zero_point": st.sampled_from(["0d", "array", "none"]),
    "b_zero_point": st.sampled_from(["0d", "array", "none"]),
    "output_zero_point": st.sampled_from(["0d", "array", "output_dtype"]),
})


def _feature_level(rank, draw):
    if rank < 4:
        return draw(st.sampled_from(["4_0", "4.0", (4, 0)]))
    return draw(st.sampled_from([None, "2_1", "4_0"]))


@st.composite
def matmul_cases(draw, combo, *, per_row=False, per_column=None, shapes=None):
    a_shape, b_shape = draw(shapes if shapes is not None else matmul_shapes())
    return build_case(
        a_shape, b_shape, combo, draw(st.integers(0, 2**32 - 1)),
        per_row=per_row,
        per_column=draw(st.booleans()) if per_column is None else per_column,
        value_mode=draw(st.sampled_from(["random", "random", "extreme"])),
        scale_mode=draw(st.sampled_from(["random", "pow2"])),
        forms=draw(FORMS), feature_level=_feature_level(len(a_shape), draw))


def run_qops(case, **extra):
    return qops.quantized_linear_matrix_multiply(**case.qops_kwargs(), **extra)


# -- the oracle ---------------------------------------------------------------------------

def oracle_matmul(case: MatMulCase):
    a, b = case.a, case.b
    batch = tuple(max(x, y) for x, y in zip(a.shape[:-2], b.shape[:-2]))
    m, k, n = case.m, a.shape[-1], case.n
    result = np.empty(batch + (m, n), case.y_dtype)
    for index in np.ndindex(*batch):
        a_index = tuple(0 if size == 1 else i for i, size in zip(index, a.shape[:-2]))
        b_index = tuple(0 if size == 1 else i for i, size in zip(index, b.shape[:-2]))
        a_rows = a[a_index].tolist()
        b_rows = b[b_index].tolist()
        for i in range(m):
            for j in range(n):
                acc = sum((a_rows[i][t] - int(case.a_zp[i])) * (b_rows[t][j] - int(case.b_zp[j]))
                          for t in range(k))
                multiplier = contract_multiplier(case.a_scale[i], case.b_scale[j], case.out_scale[i])
                result[index + (i, j)] = contract_requantize(acc, multiplier, int(case.y_zp[i]),
                                                             case.y_dtype)
    return result


# -- the oracle bit for bit, and onnxruntime where it is exact -----------------------------------

def ort_matmul(case, inputs=None):
    """onnxruntime's QLinearMatMul on the case, for :func:`judge` (a skip without a kernel)."""
    return lambda: run_ort("QLinearMatMul", inputs or case.onnx_inputs(), opset=10,
                           output_dtype=case.y_dtype)


@pytest.mark.parametrize("combo", ALL_COMBOS)
@given(data=st.data())
def test_equals_the_oracle_and_onnxruntime_where_it_is_exact(combo, data):
    case = data.draw(matmul_cases(combo), label="case")
    assert case.max_abs_acc() < 2**31  # onnxruntime sums in int32
    judge(run_qops(case), oracle_matmul(case), peer=ort_matmul(case), context="QLinearMatMul")


@pytest.mark.parametrize("combo", ALL_COMBOS)
@pytest.mark.parametrize("a_shape,b_shape", [
    ((2, 3, 4, 5), (2, 3, 5, 6)),
    ((1, 3, 4, 5), (2, 1, 5, 6)),
    ((2, 7, 9), (1, 9, 3)),
    ((6, 16), (16, 7)),
], ids=["4d", "4d-broadcast", "3d-broadcast", "2d"])
def test_per_column_fixed_against_oracle_and_onnxruntime(combo, a_shape, b_shape):
    for seed in range(3):
        case = build_case(a_shape, b_shape, combo, seed, per_row=False, per_column=True,
                          feature_level="4_0")
        judge(run_qops(case), oracle_matmul(case), peer=ort_matmul(case), context=f"seed {seed}")


@pytest.mark.parametrize("combo", ALL_COMBOS)
def test_per_column_rank_one_parameters_against_oracle_and_onnxruntime(combo):
    """From 4_0 scales and zero points may have 1 dimension: a 1-D b_scale /
    b_zero_point of N (ONNX's own form) is per column, numbers the rest."""
    for seed in range(3):
        case = build_case((5, 9), (9, 4), combo, 50 + seed, per_row=False, per_column=True)
        inputs = case.onnx_inputs()
        got = qops.quantized_linear_matrix_multiply(
            a=case.a, a_scale=float(case.a_scale[0]), a_zero_point=inputs["a_zero_point"],
            b=case.b, b_scale=inputs["b_scale"], b_zero_point=inputs["b_zero_point"],
            output_scale=float(case.out_scale[0]), output_zero_point=inputs["y_zero_point"],
            feature_level="4_0")
        judge(got, oracle_matmul(case), peer=ort_matmul(case, inputs), context=f"seed {seed}")


# -- onnx.reference: within 1 --------------------------------------------------------------

@pytest.mark.parametrize("combo", ALL_COMBOS)
@given(data=st.data())
def test_matches_onnx_reference_within_one(combo, data):
    case = data.draw(matmul_cases(combo), label="case")
    assert case.max_abs_acc() < 2**31
    expected = run_reference("QLinearMatMul", case.onnx_inputs(), opset=10,
                             output_dtype=case.y_dtype)
    assert_within_one(run_qops(case), expected, "qops vs onnx.reference QLinearMatMul")


# -- the oracle: bit for bit --------------------------------------------------------------------

SMALL_SHAPES = matmul_shapes(max_mn=4, max_k=6, max_batch=2)


@pytest.mark.parametrize("combo", ALL_COMBOS)
@given(data=st.data())
def test_matches_oracle_per_tensor_and_per_column(combo, data):
    case = data.draw(matmul_cases(combo, per_row=False, shapes=SMALL_SHAPES), label="case")
    assert_exact(run_qops(case), oracle_matmul(case), "qops vs oracle")


@pytest.mark.parametrize("combo", ALL_COMBOS)
@given(data=st.data())
def test_matches_oracle_per_row(combo, data):
    """Per-row a_scale, a_zero_point, output_scale and output_zero_point
    ({1,1,M,1}, trailing dimensions at lower ranks): ONNX has no such form."""
    case = data.draw(matmul_cases(combo, per_row=True, shapes=SMALL_SHAPES), label="case")
    assert_exact(run_qops(case), oracle_matmul(case), "qops vs oracle (per row)")


@pytest.mark.parametrize("combo", ALL_COMBOS)
def test_oracle_per_row_distinguishes_rows(combo):
    """Each row really uses its own scale and zero points: a fixed case whose
    rows share A's values but not their parameters."""
    a_shape, b_shape = (1, 1, 3, 4), (1, 1, 4, 2)
    case = build_case(a_shape, b_shape, combo, 5, per_row=True, per_column=True)
    case.a[...] = case.a[..., :1, :]          # identical rows
    case.a_scale[:] = np.float32([0.5, 0.25, 0.125])
    case.a_zp[:] = case.a_zp[0]
    expected = oracle_matmul(case)
    assert_exact(run_qops(case), expected, "per-row parameters")


def test_oracle_sums_beyond_int32():
    """K * 255 * 255 beyond int32, kept exact."""
    k = 40000
    a = np.full((1, 1, 2, k), 255, np.uint8)
    b = np.full((1, 1, k, 1), 255, np.uint8)
    a[0, 0, 1] = 0                             # second row: a - zp = -255 with zp 255
    case = MatMulCase(a=a, b=b, a_zp=np.array([0, 255]), b_zp=np.array([0]),
                      a_scale=np.float32([1.0, 1.0]), b_scale=np.float32([1.0]),
                      out_scale=np.float32([2.0**26, 2.0**26]), y_zp=np.array([3, -3]),
                      y_dtype=np.dtype(np.int8), per_row=True, per_column=False)
    acc = k * 255 * 255
    assert acc > INT32_MAX
    expected = [[round(acc / 2**26) + 3], [round(-acc / 2**26) - 3]]
    assert run_qops(case).reshape(2, 1).tolist() == expected


# -- numeric pins -------------------------------------------------------------------------------

def matmul_row(a_values, b_values, *, a_dtype=np.int8, b_dtype=np.int8, a_scale=1.0, b_scale=1.0,
               out_scale=1.0, y_zp=0, y_dtype=np.int8, **extra):
    """(1, K) @ (K, 1) at rank 2 (feature level 4_0): one element, acc = dot(a, b)."""
    k = len(a_values)
    a = np.asarray(a_values).astype(a_dtype).reshape(1, k)
    b = np.asarray(b_values).astype(b_dtype).reshape(k, 1)
    return qops.quantized_linear_matrix_multiply(
        a=a, a_scale=a_scale, b=b, b_scale=b_scale, output_scale=out_scale,
        output_zero_point=np.asarray(y_zp).astype(y_dtype).reshape(1, 1), feature_level="4_0",
        **extra)


@pytest.mark.parametrize("acc,y_zp,expected", [
    (5, 1, 3), (7, 1, 5), (3, 0, 2), (-5, 1, -1), (-7, 0, -4), (1, 0, 0), (-1, 0, 0),
])
def test_pin_ties_round_half_even_then_add_zero_point(acc, y_zp, expected):
    m = np.float32(np.float32(np.float32(1.0) * np.float32(0.5)) / np.float32(1.0))
    assert Fraction(float(np.float32(np.float32(acc) * m))) == Fraction(acc, 2)
    got = matmul_row([acc], [1], b_scale=0.5, y_zp=y_zp)
    assert int(got[0, 0]) == expected


def test_pin_tie_rule_differs_from_onnx_reference():
    """2.5 with zero point 1: 3 in qops (onnxruntime is compared by the rule),
    4 in onnx.reference."""
    a = np.array([[5]], np.uint8)
    b = np.array([[1]], np.uint8)
    inputs = {"a": a, "a_scale": np.float32(1.0), "a_zero_point": np.uint8(0), "b": b,
              "b_scale": np.float32(0.5), "b_zero_point": np.uint8(0), "y_scale": np.float32(1.0),
              "y_zero_point": np.uint8(1)}
    assert int(run_reference("QLinearMatMul", inputs, opset=10, output_dtype=np.uint8)[0, 0]) == 4
    got = qops.quantized_linear_matrix_multiply(
        a=a, a_scale=1.0, a_zero_point=np.uint8(0), b=b, b_scale=0.5, b_zero_point=np.uint8(0),
        output_scale=1.0, output_zero_point=np.uint8(1), feature_level="4_0")
    judge(got, np.full((1, 1), 3, np.uint8),
          peer=lambda: run_ort("QLinearMatMul", inputs, opset=10, output_dtype=np.uint8))


MULTIPLIER = np.float32(0.0786445)
ACC_782 = [-128] * 6 + [-14]


def test_pin_float32_rule_claim_holds():
    assert sum(ACC_782) == -782
    assert np.float32(np.float32(-782) * MULTIPLIER) == np.float32(-61.5)
    assert Fraction(-782) * Fraction(float(MULTIPLIER)) > Fraction(-123, 2)
    assert round(np.float64(-782.0) * np.float64(MULTIPLIER)) == -61


@pytest.mark.parametrize("y_zp", [0, 7, -20])
@pytest.mark.parametrize("where", ["a_scale", "b_scale"])
def test_pin_float32_rule(y_zp, where):
    scales = {"a_scale": 1.0, "b_scale": 1.0, where: np.float32(MULTIPLIER)}
    got = matmul_row(ACC_782, [1] * 7, y_zp=y_zp, **scales)
    assert int(got[0, 0]) == -62 + y_zp


def test_pin_float32_rule_per_row():
    """The same rule applied per row: row 0 multiplier float32(0.0786445), row 1 0.5."""
    a = np.array([ACC_782, [1] * 7], np.int8).reshape(1, 1, 2, 7)
    b = np.ones((1, 1, 7, 1), np.int8)
    got = qops.quantized_linear_matrix_multiply(
        a=a, a_scale=np.array([MULTIPLIER, 0.5], np.float32).reshape(1, 1, 2, 1),
        b=b, b_scale=1.0, output_scale=1.0,
        output_zero_point=np.array([1, 2], np.int8).reshape(1, 1, 2, 1))
    # row 1: acc 7 * 0.5 = 3.5 -> 4, + 2 = 6
    assert got.reshape(-1).tolist() == [-61, 6]


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("alternative", ALTERNATIVE_MULTIPLIERS)
def test_pin_multiplier_evaluation_order(alternative, seed):
    """m = float32(float32(a_scale * b_scale) / output_scale), in that order."""
    a_scale, b_scale, out_scale, acc, contract, other = multiplier_order_case(alternative, seed)
    assert contract != other
    values = int8_terms(acc)
    got = matmul_row(values, [1] * len(values), a_scale=a_scale, b_scale=b_scale,
                     out_scale=out_scale)
    assert int(got[0, 0]) == contract
    # per column of b and per row of the output, at rank 4
    a = np.asarray(values, np.int8).reshape(1, 1, 1, -1)
    b = np.ones((1, 1, len(values), 2), np.int8)
    got = qops.quantized_linear_matrix_multiply(
        a=a, a_scale=a_scale, b=b, b_scale=np.array([1.0, b_scale], np.float32).reshape(1, 1, 1, 2),
        output_scale=np.float32(out_scale).reshape(1, 1, 1, 1), output_zero_point=np.int8(0))
    inputs = {"a": a[0, 0], "a_scale": np.float32(a_scale), "a_zero_point": np.int8(0),
              "b": b[0, 0], "b_scale": np.array([1.0, b_scale], np.float32),
              "b_zero_point": np.zeros(2, np.int8), "y_scale": np.float32(out_scale),
              "y_zero_point": np.int8(0)}
    judge(got[0, 0, :, 1:], np.full((1, 1), contract, np.int8),
          peer=lambda: run_ort("QLinearMatMul", inputs, opset=10, output_dtype=np.int8)[:, 1:])


K_LARGE = 40000


@pytest.mark.parametrize("a_dtype,a_value,b_dtype,b_value,a_zp,b_zp", [
    (np.uint8, 255, np.int8, -128, 0, 0),        # -1_305_600_000: exact, fits int32
    (np.uint8, 255, np.uint8, 255, 0, 0),        # 2_601_000_000: beyond int32
    (np.int8, -128, np.int8, 127, 127, -128),    # (-255) * 255 * K: beyond int32
    (np.uint8, 0, np.int8, -128, 255, 127),      # (-255) * (-255) * K: beyond int32
])
def test_pin_large_k_exact_accumulation(a_dtype, a_value, b_dtype, b_value, a_zp, b_zp):
    acc = K_LARGE * (a_value - a_zp) * (b_value - b_zp)
    wrapped = (acc + 2**31) % 2**32 - 2**31
    a = np.full((1, 1, 1, K_LARGE), a_value, a_dtype)
    b = np.full((1, 1, K_LARGE, 1), b_value, b_dtype)
    got = qops.quantized_linear_matrix_multiply(
        a=a, a_scale=1.0, a_zero_point=np.full((1, 1, 1, 1), a_zp, a_dtype), b=b, b_scale=1.0,
        b_zero_point=np.full((1, 1, 1, 1), b_zp, b_dtype), output_scale=np.float32(2.0**26),
        output_zero_point=np.zeros((1, 1, 1, 1), np.int8))
    expected = max(-128, min(127, round(float(np.float32(np.float32(acc) * np.float32(2.0**-26))))))
    assert int(got.ravel()[0]) == expected
    if wrapped != acc:
        assert max(-128, min(127, round(wrapped / 2**26))) != expected


def _out_case():
    return build_case((2, 1, 3, 5), (1, 3, 5, 4), (np.int8, np.uint8, np.uint8), 9, per_row=True,
                      per_column=True)


def test_out_success_returns_the_same_object():
    case = _out_case()
    expected = oracle_matmul(case)
    out = np.full(expected.shape, 77, expected.dtype)
    result = run_qops(case, out=out)
    assert result is out
    assert_exact(out, expected, "out=")


@pytest.mark.parametrize("break_it", ["zero a scale", "infinite output scale", "K mismatch",
                                      "batch mismatch", "wrong out dtype", "wrong out shape",
                                      "non-contiguous out", "out overlaps"])
def test_out_untouched_on_failure(break_it):
    case = _out_case()
    shape = oracle_matmul(case).shape
    kwargs = case.qops_kwargs()
    out = np.full(shape, 77, np.uint8)
    if break_it == "zero a scale":
        scale = np.array(kwargs["a_scale"], np.float32).copy()
        scale.reshape(-1)[1] = 0.0
        kwargs["a_scale"] = scale
    elif break_it == "infinite output scale":
        kwargs["output_scale"] = np.full((1, 1, 3, 1), np.inf, np.float32)
    elif break_it == "K mismatch":
        kwargs["b"] = np.ones((1, 3, 6, 4), np.uint8)
    elif break_it == "batch mismatch":
        kwargs["b"] = np.ones((3, 3, 5, 4), np.uint8)
    elif break_it == "wrong out dtype":
        out = np.full(shape, 77, np.int8)
    elif break_it == "wrong out shape":
        out = np.full(shape[:-1] + (shape[-1] + 1,), 77, np.uint8)
    elif break_it == "non-contiguous out":
        out = np.full(shape[:-1] + (shape[-1] * 2,), 77, np.uint8)[..., ::2]
    elif break_it == "out overlaps":
        size = max(int(np.prod(shape)), case.b.size)
        buffer = np.full(size, 77, np.uint8)
        out = buffer[: int(np.prod(shape))].reshape(shape)
        kwargs["b"] = buffer[: case.b.size].reshape(case.b.shape)
    before = out.copy()
    with pytest.raises(qops.ValidationError):
        qops.quantized_linear_matrix_multiply(**kwargs, out=out)
    assert np.array_equal(out, before)


def test_thread_count_does_not_change_results():
    rng = np.random.default_rng(21)
    for combo in TYPE_COMBOS:
        case = build_case((2, 3, 17, 33), (1, 3, 33, 19), combo, int(rng.integers(1 << 30)),
                          per_row=True, per_column=True)
        one = run_qops(case, n_threads=1)
        two = run_qops(case, n_threads=2)
        assert_exact(two, one, f"{combo_id(combo)}: n_threads=2 vs 1")
    assert_exact(one, oracle_matmul(case), "and both equal the oracle")
