"""``qops.quantized_linear_convolution`` against independent implementations.

* onnxruntime ``QLinearConv``: a peer, compared by the rule of tests/peers.py:
  qops must equal the exact oracle below, and onnxruntime is compared where it
  has a kernel and is itself exact (its misses are recorded, not failed).
* ``onnx.reference`` ``QLinearConv``: within 1 (it requantizes in float64 and
  adds the zero point before rounding), on all eight uint8/int8 combinations.
* An oracle written here: a nested-loop convolution in exact Python integers
  followed by the contract's float32 requantization on ``np.float32``
  scalars, bit for bit, including calls ONNX cannot express (mixed
  granularities, absent zero points, ``output_dtype``, sums beyond int32).
* The contract's numeric pins, each derived in the test.

DirectML geometry maps to ONNX as ``pads = [start_h, start_w, end_h, end_w]``,
``group = group_count``; a per-channel DirectML ``{1, OC, 1, 1}`` filter scale
is ONNX's 1-D ``w_scale`` of OC.  onnxruntime and ``onnx.reference`` sum in
int32, so every case compared with them keeps ``|acc| < 2**31``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np
import pytest
from conftest import (
    ALTERNATIVE_MULTIPLIERS,
    INT32_MAX,
    INT32_MIN,
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


# -- a generated case -------------------------------------------------------------------

@dataclass
class ConvCase:
    """One convolution call, held as plain values; ``qops_kwargs`` and
    ``onnx_inputs`` render it for each implementation."""

    x: np.ndarray
    w: np.ndarray
    x_zp: int
    w_zp: np.ndarray          # (OC,) int64 values
    per_channel: bool
    in_scale: np.float32
    w_scale: np.ndarray       # (OC,) float32
    out_scale: np.float32
    y_zp: int
    y_dtype: np.dtype
    bias: np.ndarray | None   # (OC,) int64 values
    strides: tuple
    dilations: tuple
    start: tuple
    end: tuple
    groups: int
    forms: dict = field(default_factory=dict)
    scale_per_channel: bool | None = None   # oracle-only mixing: scale vs zero point granularity
    zp_per_channel: bool | None = None

    @property
    def oc(self):
        return self.w.shape[0]

    def multipliers(self):
        return [contract_multiplier(self.in_scale, self.w_scale[o], self.out_scale)
                for o in range(self.oc)]

    def _scale_slot(self, value, form):
        if form == "python":
            return float(value)
        if form == "0d":
            return np.asarray(value, np.float32).reshape(())
        return np.asarray(value, np.float32).reshape(1, 1, 1, 1)

    def _zp_slot(self, value, dtype, form, allow_none=True):
        if form == "none" and allow_none and value == 0:
            return None
        if form == "0d":
            return np.asarray(value).astype(dtype).reshape(())
        if form == "scalar":
            return np.dtype(dtype).type(value)
        return np.asarray(value).astype(dtype).reshape(1, 1, 1, 1)

    def _channel_slot(self, values, dtype, per_channel, form):
        values = np.asarray(values)
        if not per_channel:
            first = values[0]
            return np.asarray(first).astype(dtype).reshape(1, 1, 1, 1) if form != "0d" \
                else np.asarray(first).astype(dtype).reshape(())
        if form == "1d":
            return values.astype(dtype)
        return values.astype(dtype).reshape(1, -1, 1, 1)

    def qops_kwargs(self):
        f = self.forms
        scale_pc = self.per_channel if self.scale_per_channel is None else self.scale_per_channel
        zp_pc = self.per_channel if self.zp_per_channel is None else self.zp_per_channel
        kwargs = dict(
            input=self.x,
            input_scale=self._scale_slot(self.in_scale, f.get("input_scale", "array")),
            input_zero_point=self._zp_slot(self.x_zp, self.x.dtype, f.get("input_zero_point", "array")),
            filter=self.w,
            filter_scale=self._channel_slot(self.w_scale, np.float32, scale_pc,
                                            f.get("filter_scale", "array")),
            filter_zero_point=(None if f.get("filter_zero_point") == "none" and not np.any(self.w_zp)
                               else self._channel_slot(self.w_zp, self.w.dtype, zp_pc,
                                                       f.get("filter_zero_point", "array"))),
            bias=(None if self.bias is None else
                  self._channel_slot(self.bias, np.int32, True, f.get("bias", "array"))),
            output_scale=self._scale_slot(self.out_scale, f.get("output_scale", "array")),
            strides=self.strides, dilations=self.dilations, start_padding=self.start,
            end_padding=self.end, group_count=self.groups,
        )
        if f.get("output_zero_point") == "output_dtype" and self.y_zp == 0:
            kwargs["output_zero_point"] = None
            kwargs["output_dtype"] = self.y_dtype
        else:
            kwargs["output_zero_point"] = self._zp_slot(self.y_zp, self.y_dtype,
                                                        f.get("output_zero_point", "array"),
                                                        allow_none=False)
        return kwargs

    def onnx_inputs(self):
        pc = self.per_channel
        return {
            "x": self.x,
            "x_scale": np.float32(self.in_scale).reshape(()),
            "x_zero_point": np.asarray(self.x_zp).astype(self.x.dtype).reshape(()),
            "w": self.w,
            "w_scale": (self.w_scale.astype(np.float32) if pc
                        else np.float32(self.w_scale[0]).reshape(())),
            "w_zero_point": (self.w_zp.astype(self.w.dtype) if pc
                             else np.asarray(self.w_zp[0]).astype(self.w.dtype).reshape(())),
            "y_scale": np.float32(self.out_scale).reshape(()),
            "y_zero_point": np.asarray(self.y_zp).astype(self.y_dtype).reshape(()),
            "B": None if self.bias is None else self.bias.astype(np.int32),
        }

    def onnx_attributes(self):
        return dict(strides=list(self.strides), dilations=list(self.dilations),
                    pads=[self.start[0], self.start[1], self.end[0], self.end[1]],
                    group=self.groups, kernel_shape=list(self.w.shape[2:]))

    def max_abs_acc(self):
        """A bound on |acc| (for keeping int32 comparisons meaningful)."""
        x = np.abs(self.x.astype(np.int64) - self.x_zp).max()
        w = np.abs(self.w.astype(np.int64) - self.w_zp.reshape(-1, 1, 1, 1)).max()
        k = int(np.prod(self.w.shape[1:]))
        b = 0 if self.bias is None else int(np.abs(self.bias).max())
        return int(x * w * k + b)


def _log_uniform_f32(rng, low_exp, high_exp, size=None):
    exponent = np.asarray(rng.uniform(low_exp, high_exp, size), np.float32)
    result = np.float32(2.0) ** exponent
    return np.float32(result) if size is None else result.astype(np.float32)


@st.composite
def geometry(draw, max_batch=2, max_group=3, max_per_group=3, max_kernel=3, max_extra=4):
    batch = draw(st.integers(1, max_batch))
    if draw(st.booleans()):  # depthwise: group_count == input channels
        channels = draw(st.integers(1, 4))
        groups, per_group_in, per_group_out = channels, 1, draw(st.integers(1, 2))
    else:
        groups = draw(st.integers(1, max_group))
        per_group_in = draw(st.integers(1, max_per_group))
        per_group_out = draw(st.integers(1, max_per_group))
    kernel = (draw(st.integers(1, max_kernel)), draw(st.integers(1, max_kernel)))
    strides = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    dilations = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    start = (draw(st.integers(0, 2)), draw(st.integers(0, 2)))
    end = (draw(st.integers(0, 2)), draw(st.integers(0, 2)))
    spatial = []
    for axis in range(2):
        span = dilations[axis] * (kernel[axis] - 1) + 1
        least = max(1, span - start[axis] - end[axis])
        spatial.append(draw(st.integers(least, least + max_extra)))
    return dict(batch=batch, channels=groups * per_group_in, out_channels=groups * per_group_out,
                groups=groups, per_group_in=per_group_in, kernel=kernel, strides=strides,
                dilations=dilations, start=start, end=end, spatial=tuple(spatial))


def build_case(geo, combo, seed, *, per_channel, value_mode, scale_mode, with_bias,
               bias_range=1 << 20, forms=None):
    x_dtype, w_dtype, y_dtype = (np.dtype(t) for t in combo)
    rng = np.random.default_rng(seed)
    oc = geo["out_channels"]
    x_shape = (geo["batch"], geo["channels"]) + geo["spatial"]
    w_shape = (oc, geo["per_group_in"]) + geo["kernel"]

    def values(dtype, shape):
        low, high = int_range(dtype)
        if value_mode == "extreme":
            return rng.choice(np.array([low, high, 0], np.int64), size=shape).astype(dtype)
        return rng.integers(low, high + 1, size=shape).astype(dtype)

    x, w = values(x_dtype, x_shape), values(w_dtype, w_shape)
    x_low, x_high = int_range(x_dtype)
    w_low, w_high = int_range(w_dtype)
    y_low, y_high = int_range(y_dtype)
    x_zp = int(rng.integers(x_low, x_high + 1))
    if per_channel:
        w_zp = rng.integers(w_low, w_high + 1, size=oc).astype(np.int64)
    else:
        w_zp = np.full(oc, int(rng.integers(w_low, w_high + 1)), np.int64)
    y_zp = int(rng.integers(y_low, y_high + 1))
    if value_mode == "extreme" and rng.random() < 0.5:
        x_zp, y_zp = 0, 0
        w_zp[:] = 0

    k = geo["per_group_in"] * geo["kernel"][0] * geo["kernel"][1]
    if scale_mode == "pow2":
        # Power-of-two multipliers make ties (x.5) common: the rounding rule shows.
        in_scale = np.float32(2.0 ** int(rng.integers(-6, 1)))
        exps = rng.integers(-6, 1, size=oc) if per_channel else np.full(oc, int(rng.integers(-6, 1)))
        w_scale = (np.float32(2.0) ** exps.astype(np.float32)).astype(np.float32)
        out_scale = np.float32(2.0 ** int(rng.integers(-2, 16)))
    else:
        in_scale = _log_uniform_f32(rng, -8, 0)
        w_scale = (_log_uniform_f32(rng, -8, 0, oc) if per_channel
                   else np.full(oc, _log_uniform_f32(rng, -8, 0), np.float32))
        # Aim the typical |acc| (~5000 sqrt(K)) at the output range, give or take 16x.
        target = np.float32(2.0 ** rng.uniform(-4, 4)) * np.float32(40.0 / (5000.0 * math.sqrt(k)))
        out_scale = np.float32(np.float32(in_scale * w_scale[0]) / target)
    bias = rng.integers(-bias_range, bias_range + 1, size=oc).astype(np.int64) if with_bias else None
    forms = forms or {}
    # Absent zero points and output_dtype stand for a zero point of 0.
    if forms.get("input_zero_point") == "none":
        x_zp = 0
    if forms.get("filter_zero_point") == "none":
        w_zp[:] = 0
    if forms.get("output_zero_point") == "output_dtype":
        y_zp = 0
    return ConvCase(x=x, w=w, x_zp=x_zp, w_zp=w_zp, per_channel=per_channel, in_scale=in_scale,
                    w_scale=np.asarray(w_scale, np.float32), out_scale=out_scale, y_zp=y_zp,
                    y_dtype=y_dtype, bias=bias, strides=geo["strides"], dilations=geo["dilations"],
                    start=geo["start"], end=geo["end"], groups=geo["groups"], forms=forms)


FORMS = st.fixed_dictionaries({
    "input_scale": st.sampled_from(["python", "0d", "array"]),
    "output_scale": st.sampled_from(["python", "0d", "array"]),
    "input_zero_point": st.sampled_from(["array", "0d", "scalar", "none"]),
    "filter_scale": st.sampled_from(["array", "1d"]),
    "filter_zero_point": st.sampled_from(["array", "1d", "none"]),
    "bias": st.sampled_from(["array", "1d"]),
    "output_zero_point": st.sampled_from(["array", "0d", "scalar", "output_dtype"]),
})


@st.composite
def conv_cases(draw, combo, *, per_channel=None, geo=None, bias_range=1 << 20):
    geo = draw(geo if geo is not None else geometry())
    return build_case(
        geo, combo, draw(st.integers(0, 2**32 - 1)),
        per_channel=draw(st.booleans()) if per_channel is None else per_channel,
        value_mode=draw(st.sampled_from(["random", "random", "extreme"])),
        scale_mode=draw(st.sampled_from(["random", "pow2"])),
        with_bias=draw(st.booleans()), bias_range=bias_range, forms=draw(FORMS))


# -- the oracle --------------------------------------------------------------------

def oracle_convolution(case: ConvCase, *, scale_per_channel=None, zp_per_channel=None):
    """Direct convolution in Python ints, then the contract's requantization."""
    x, w = case.x.tolist(), case.w.tolist()
    batch, channels, height, width = case.x.shape
    oc, per_group_in, kh, kw = case.w.shape
    sh, sw = case.strides
    dh, dw = case.dilations
    out_h = (height + case.start[0] + case.end[0] - (dh * (kh - 1) + 1)) // sh + 1
    out_w = (width + case.start[1] + case.end[1] - (dw * (kw - 1) + 1)) // sw + 1
    per_group_out = oc // case.groups
    w_zp = [int(v) for v in case.w_zp]
    multipliers = case.multipliers()
    result = np.empty((batch, oc, out_h, out_w), case.y_dtype)
    for n in range(batch):
        for o in range(oc):
            group = o // per_group_out
            bias = 0 if case.bias is None else int(case.bias[o])
            for i in range(out_h):
                for j in range(out_w):
                    acc = 0
                    for ci in range(per_group_in):
                        c = group * per_group_in + ci
                        for a in range(kh):
                            row = i * sh - case.start[0] + a * dh
                            if not 0 <= row < height:
                                continue  # padding: a real zero, contributes nothing
                            for b in range(kw):
                                col = j * sw - case.start[1] + b * dw
                                if not 0 <= col < width:
                                    continue
                                acc += (x[n][c][row][col] - case.x_zp) * (w[o][ci][a][b] - w_zp[o])
                    result[n, o, i, j] = contract_requantize(acc + bias, multipliers[o], case.y_zp,
                                                             case.y_dtype)
    return result


def run_qops(case: ConvCase, **extra):
    return qops.quantized_linear_convolution(**case.qops_kwargs(), **extra)


# -- the oracle bit for bit, and onnxruntime where it is exact -----------------------------

def ort_conv(case):
    """onnxruntime's QLinearConv on the case, for :func:`judge` (a skip without a kernel)."""
    return lambda: run_ort("QLinearConv", case.onnx_inputs(), case.onnx_attributes(), opset=10,
                           output_dtype=case.y_dtype)


@pytest.mark.parametrize("combo", ALL_COMBOS)
@given(data=st.data())
def test_equals_the_oracle_and_onnxruntime_where_it_is_exact(combo, data):
    per_channel = data.draw(st.booleans(), label="per_channel")
    case = data.draw(conv_cases(combo, per_channel=per_channel), label="case")
    assert case.max_abs_acc() < 2**31  # onnxruntime sums in int32
    judge(run_qops(case), oracle_convolution(case), peer=ort_conv(case), context="QLinearConv")


@pytest.mark.parametrize("combo", ALL_COMBOS)
def test_per_channel_depthwise_with_bias_against_oracle_and_onnxruntime(combo):
    """A fixed per-channel depthwise case with bias, asymmetric padding, strides and dilations."""
    geo = dict(batch=2, channels=3, out_channels=6, groups=3, per_group_in=1, kernel=(3, 2),
               strides=(2, 1), dilations=(1, 2), start=(2, 0), end=(0, 1), spatial=(6, 5))
    for seed in range(4):
        case = build_case(geo, combo, seed, per_channel=True, value_mode="random",
                          scale_mode="random", with_bias=True)
        judge(run_qops(case), oracle_convolution(case), peer=ort_conv(case), context=f"seed {seed}")


# -- onnx.reference: within 1 ------------------------------------------------------------

@pytest.mark.parametrize("combo", ALL_COMBOS)
@given(data=st.data())
def test_matches_onnx_reference_within_one(combo, data):
    case = data.draw(conv_cases(combo), label="case")
    assert case.max_abs_acc() < 2**31
    expected = run_reference("QLinearConv", case.onnx_inputs(), case.onnx_attributes(), opset=10,
                             output_dtype=case.y_dtype)
    assert_within_one(run_qops(case), expected, "qops vs onnx.reference QLinearConv")


# -- the in-test oracle: bit for bit --------------------------------------------------------

SMALL_GEOMETRY = geometry(max_batch=2, max_group=2, max_per_group=2, max_kernel=3, max_extra=2)


@pytest.mark.parametrize("combo", ALL_COMBOS)
@given(data=st.data())
def test_matches_oracle(combo, data):
    case = data.draw(conv_cases(combo, geo=SMALL_GEOMETRY, bias_range=INT32_MAX), label="case")
    assert_exact(run_qops(case), oracle_convolution(case), "qops vs nested-loop oracle")


@pytest.mark.parametrize("combo", ALL_COMBOS)
@pytest.mark.parametrize("scale_pc,zp_pc", [(True, False), (False, True)],
                         ids=["scale-per-channel-zp-per-tensor", "scale-per-tensor-zp-per-channel"])
def test_oracle_mixed_granularity(combo, scale_pc, zp_pc):
    """A per-channel filter scale with a per-tensor zero point and the other way
    round: DirectML allows each independently; ONNX ties them together."""
    geo = dict(batch=1, channels=4, out_channels=4, groups=2, per_group_in=2, kernel=(2, 2),
               strides=(1, 2), dilations=(2, 1), start=(1, 1), end=(0, 2), spatial=(4, 5))
    for seed in range(3):
        case = build_case(geo, combo, 100 + seed, per_channel=True, value_mode="random",
                          scale_mode="random", with_bias=True)
        if not scale_pc:
            case.w_scale[:] = case.w_scale[0]
        if not zp_pc:
            case.w_zp[:] = case.w_zp[0]
        case.scale_per_channel, case.zp_per_channel = scale_pc, zp_pc
        assert_exact(run_qops(case), oracle_convolution(case), f"seed {seed}")


@pytest.mark.parametrize("combo", ALL_COMBOS)
def test_oracle_sums_beyond_int32(combo):
    """Extreme values and an int32-extreme bias: the exact sum leaves the int32
    range, where onnxruntime and onnx.reference would wrap around."""
    x_dtype, w_dtype, y_dtype = (np.dtype(t) for t in combo)
    geo = dict(batch=1, channels=3, out_channels=2, groups=1, per_group_in=3, kernel=(2, 2),
               strides=(1, 1), dilations=(1, 1), start=(0, 0), end=(0, 0), spatial=(2, 3))
    case = build_case(geo, combo, 7, per_channel=True, value_mode="random", scale_mode="random",
                      with_bias=True)
    x_low, x_high = int_range(x_dtype)
    w_low, w_high = int_range(w_dtype)
    case.x[...] = x_high
    case.x_zp = x_low                     # every input term is x_high - x_low = 255
    case.w[0] = w_high
    case.w[1] = w_low
    case.w_zp[:] = [w_low, w_high]        # filter terms +255 and -255
    case.bias = np.array([INT32_MAX, INT32_MIN], np.int64)
    case.in_scale = np.float32(1.0)
    case.w_scale[:] = np.float32(1.0)
    case.out_scale = np.float32(2.0**25)  # multiplier 2**-25
    case.y_zp = 0
    expected = oracle_convolution(case)
    # From first principles: 12 terms of +-255*255 plus the bias, times 2**-25.
    low, high = int_range(y_dtype)
    sums = [12 * 255 * 255 + INT32_MAX, -12 * 255 * 255 + INT32_MIN]
    firsts = [min(high, max(low, round(s / 2**25))) for s in sums]
    assert expected[0, :, 0, 0].tolist() == firsts
    wrapped = [min(high, max(low, round(((s + 2**31) % 2**32 - 2**31) / 2**25))) for s in sums]
    assert wrapped != firsts  # int32 wrap-around would show
    assert_exact(run_qops(case), expected, "sums beyond int32")


# -- numeric pins, each derived here -------------------------------------------------------

def conv_1x1(x_values, w_values, *, x_dtype, w_dtype, in_scale, w_scale, out_scale, y_zp, y_dtype,
             **extra):
    """A 1x1 convolution over C channels: one output element, acc = dot(x, w)."""
    channels = len(x_values)
    x = np.asarray(x_values).astype(x_dtype).reshape(1, channels, 1, 1)
    w = np.asarray(w_values).astype(w_dtype).reshape(1, channels, 1, 1)
    return qops.quantized_linear_convolution(
        input=x, input_scale=in_scale, input_zero_point=None, filter=w, filter_scale=w_scale,
        filter_zero_point=None, bias=None, output_scale=out_scale,
        output_zero_point=np.asarray(y_zp).astype(y_dtype).reshape(1, 1, 1, 1), **extra)


@pytest.mark.parametrize("acc,y_zp,expected", [
    (5, 1, 3),     # v = 2.5 -> 2 (even), + 1 = 3; adding first would give round(3.5) = 4
    (7, 1, 5),     # v = 3.5 -> 4 (even), + 1 = 5
    (3, 0, 2),     # v = 1.5 -> 2
    (-5, 1, -1),   # v = -2.5 -> -2, + 1 = -1
    (-7, 0, -4),   # v = -3.5 -> -4
])
def test_pin_ties_round_half_even_then_add_zero_point(acc, y_zp, expected):
    in_scale, w_scale, out_scale = 1.0, 0.5, 1.0
    m = np.float32(np.float32(np.float32(in_scale) * np.float32(w_scale)) / np.float32(out_scale))
    assert Fraction(float(m)) == Fraction(1, 2)
    assert Fraction(float(np.float32(np.float32(acc) * m))) == Fraction(acc, 2)  # an exact tie
    got = conv_1x1([acc], [1], x_dtype=np.int8, w_dtype=np.int8, in_scale=in_scale,
                   w_scale=w_scale, out_scale=out_scale, y_zp=y_zp, y_dtype=np.int8)
    assert got.shape == (1, 1, 1, 1) and got.dtype == np.int8
    assert int(got[0, 0, 0, 0]) == expected


def test_pin_tie_rule_differs_from_onnx_reference():
    """2.5 with zero point 1: 3 in qops (onnxruntime is compared by the rule),
    4 in onnx.reference."""
    x = np.array([5], np.uint8).reshape(1, 1, 1, 1)
    w = np.array([1], np.uint8).reshape(1, 1, 1, 1)
    inputs = {"x": x, "x_scale": np.float32(1.0), "x_zero_point": np.uint8(0), "w": w,
              "w_scale": np.float32(0.5), "w_zero_point": np.uint8(0), "y_scale": np.float32(1.0),
              "y_zero_point": np.uint8(1)}
    reference = run_reference("QLinearConv", inputs, opset=10, output_dtype=np.uint8)
    assert int(reference.ravel()[0]) == 4
    got = qops.quantized_linear_convolution(
        input=x, input_scale=1.0, input_zero_point=np.uint8(0), filter=w, filter_scale=0.5,
        filter_zero_point=np.uint8(0), output_scale=1.0, output_zero_point=np.uint8(1))
    judge(got, np.full((1, 1, 1, 1), 3, np.uint8),
          peer=lambda: run_ort("QLinearConv", inputs, opset=10, output_dtype=np.uint8))


MULTIPLIER = np.float32(0.0786445)
#: int8 values whose dot product with ones is -782.
ACC_782 = [-128] * 6 + [-14]


def test_pin_float32_rule_claim_holds():
    """The contract's example: float32(-782) * float32(0.0786445) rounds to
    -61.5 in float32 (-> -62, half to even), while the float64 product is
    above -61.5 (-> -61)."""
    assert sum(ACC_782) == -782
    product32 = np.float32(np.float32(-782) * MULTIPLIER)
    assert product32 == np.float32(-61.5)
    exact = Fraction(-782) * Fraction(float(MULTIPLIER))
    assert exact > Fraction(-123, 2)  # the real product is above -61.5 ...
    product64 = np.float64(-782.0) * np.float64(MULTIPLIER)
    assert round(product64) == -61     # ... so float64 gives -61
    assert round(float(product32)) == -62


@pytest.mark.parametrize("y_zp", [0, 5, -3])
def test_pin_float32_rule(y_zp):
    got = conv_1x1(ACC_782, [1] * 7, x_dtype=np.int8, w_dtype=np.int8,
                   in_scale=np.float32(MULTIPLIER), w_scale=1.0, out_scale=1.0, y_zp=y_zp,
                   y_dtype=np.int8)
    assert int(got.ravel()[0]) == -62 + y_zp


def test_pin_float32_rule_multiplier_from_scales():
    """The multiplier formed from three scales, float32 at each step."""
    in_scale, w_scale, out_scale = np.float32(0.3), np.float32(0.7), np.float32(2.67)
    m = np.float32(np.float32(in_scale * w_scale) / out_scale)
    for acc in (-782, -781, 1000, 12345, -99):
        values = []
        remaining = acc
        while remaining:
            step = max(-128, min(127, remaining))
            values.append(step)
            remaining -= step
        v = np.float32(np.float32(acc) * m)
        expected = max(-128, min(127, round(float(v)) + 2))
        got = conv_1x1(values, [1] * len(values), x_dtype=np.int8, w_dtype=np.int8,
                       in_scale=in_scale, w_scale=w_scale, out_scale=out_scale, y_zp=2,
                       y_dtype=np.int8)
        assert int(got.ravel()[0]) == expected, acc


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("alternative", ALTERNATIVE_MULTIPLIERS)
def test_pin_multiplier_evaluation_order(alternative, seed):
    """m = float32(float32(input_scale * filter_scale) / output_scale), in that
    order: cases (found by search in conftest) where another order, or one
    float64 evaluation, rounds to a different output."""
    in_scale, w_scale, out_scale, acc, contract, other = multiplier_order_case(alternative, seed)
    assert contract != other
    values = int8_terms(acc)
    got = conv_1x1(values, [1] * len(values), x_dtype=np.int8, w_dtype=np.int8, in_scale=in_scale,
                   w_scale=w_scale, out_scale=out_scale, y_zp=0, y_dtype=np.int8)
    assert int(got.ravel()[0]) == contract
    # per channel: the same scales in channel 1, a neutral channel 0
    x = np.asarray(values, np.int8).reshape(1, -1, 1, 1)
    w = np.ones((2, len(values), 1, 1), np.int8)
    got = qops.quantized_linear_convolution(
        input=x, input_scale=in_scale, filter=w, filter_scale=np.array([1.0, w_scale], np.float32),
        output_scale=out_scale, output_zero_point=np.int8(0))
    inputs = {"x": x, "x_scale": np.float32(in_scale), "x_zero_point": np.int8(0), "w": w,
              "w_scale": np.array([1.0, w_scale], np.float32),
              "w_zero_point": np.zeros(2, np.int8), "y_scale": np.float32(out_scale),
              "y_zero_point": np.int8(0)}
    judge(got[:, 1:], np.full((1, 1, 1, 1), contract, np.int8),
          peer=lambda: run_ort("QLinearConv", inputs, opset=10, output_dtype=np.int8)[:, 1:])


K_LARGE = 40000


@pytest.mark.parametrize("x_dtype,x_value,w_dtype,w_value,bias", [
    (np.uint8, 255, np.int8, -128, INT32_MIN),  # -1_305_600_000 + INT32_MIN: below int32
    (np.uint8, 255, np.uint8, 255, 0),           # 2_601_000_000: above int32
    (np.uint8, 255, np.int8, -128, 0),           # -1_305_600_000: fits, exact
    (np.int8, -128, np.int8, -128, INT32_MAX),   # 655_360_000 + INT32_MAX: above int32
])
def test_pin_large_k_exact_accumulation(x_dtype, x_value, w_dtype, w_value, bias):
    acc = K_LARGE * x_value * w_value + bias          # Python int: exact
    wrapped = (acc + 2**31) % 2**32 - 2**31           # what int32 arithmetic would hold
    out_scale = np.float32(2.0**26)                   # multiplier 2**-26, exact
    x = np.full((1, K_LARGE, 1, 1), x_value, x_dtype)
    w = np.full((1, K_LARGE, 1, 1), w_value, w_dtype)
    got = qops.quantized_linear_convolution(
        input=x, input_scale=1.0, input_zero_point=np.zeros((1, 1, 1, 1), x_dtype), filter=w,
        filter_scale=1.0, filter_zero_point=np.zeros((1, 1, 1, 1), w_dtype),
        bias=np.array([bias], np.int32), output_scale=out_scale,
        output_zero_point=np.zeros((1, 1, 1, 1), np.int8))
    v = np.float32(np.float32(acc) * np.float32(2.0**-26))
    expected = max(-128, min(127, round(float(v))))
    assert int(got.ravel()[0]) == expected
    if wrapped != acc:
        v_wrapped = np.float32(np.float32(wrapped) * np.float32(2.0**-26))
        assert max(-128, min(127, round(float(v_wrapped)))) != expected


def _out_case():
    rng = np.random.default_rng(3)
    geo = dict(batch=2, channels=4, out_channels=4, groups=2, per_group_in=2, kernel=(3, 3),
               strides=(1, 1), dilations=(1, 1), start=(1, 1), end=(1, 1), spatial=(5, 5))
    case = build_case(geo, (np.uint8, np.int8, np.int8), int(rng.integers(1 << 30)),
                      per_channel=True, value_mode="random", scale_mode="random", with_bias=True)
    return case


def test_out_success_returns_the_same_object():
    case = _out_case()
    expected = oracle_convolution(case)
    out = np.full(expected.shape, 77, expected.dtype)
    result = run_qops(case, out=out)
    assert result is out
    assert_exact(out, expected, "out=")


@pytest.mark.parametrize("break_it", ["zero output scale", "negative filter scale",
                                      "NaN input scale", "group mismatch", "wrong out dtype",
                                      "wrong out shape", "out overlaps"])
def test_out_untouched_on_failure(break_it):
    case = _out_case()
    expected_shape = oracle_convolution(case).shape
    kwargs = case.qops_kwargs()
    dtype = np.int8
    shape = expected_shape
    if break_it == "zero output scale":
        kwargs["output_scale"] = np.zeros((1, 1, 1, 1), np.float32)
    elif break_it == "negative filter scale":
        scale = np.array(kwargs["filter_scale"], np.float32).reshape(-1).copy()
        scale[-1] = -scale[-1]
        kwargs["filter_scale"] = scale
    elif break_it == "NaN input scale":
        kwargs["input_scale"] = np.float32(np.nan)
    elif break_it == "group mismatch":
        kwargs["group_count"] = 4
    elif break_it == "wrong out dtype":
        dtype = np.uint8
    elif break_it == "wrong out shape":
        shape = expected_shape[:-1] + (expected_shape[-1] + 1,)
    out = np.full(shape, 77, dtype)
    if break_it == "out overlaps":
        size = max(int(np.prod(expected_shape)), case.x.size)
        big = np.full(size, 77, np.int8)
        out = big[: int(np.prod(expected_shape))].reshape(expected_shape)
        kwargs["input"] = big[: case.x.size].view(np.uint8).reshape(case.x.shape)
    before = out.copy()
    with pytest.raises(qops.ValidationError):
        qops.quantized_linear_convolution(**kwargs, out=out)
    assert np.array_equal(out, before)


def test_thread_count_does_not_change_results():
    rng = np.random.default_rng(11)
    geo = dict(batch=2, channels=6, out_channels=6, groups=3, per_group_in=2, kernel=(3, 3),
               strides=(1, 2), dilations=(2, 1), start=(2, 1), end=(1, 2), spatial=(9, 8))
    for combo in TYPE_COMBOS:
        case = build_case(geo, combo, int(rng.integers(1 << 30)), per_channel=True,
                          value_mode="random", scale_mode="random", with_bias=True)
        one = run_qops(case, n_threads=1)
        two = run_qops(case, n_threads=2)
        assert_exact(two, one, f"{combo_id(combo)}: n_threads=2 vs 1")
    assert_exact(one, oracle_convolution(case), "and both equal the oracle")


# -- 1-D convolution (feature level 4_0) and the level rows ----------------------------

@st.composite
def one_d_geometry(draw):
    """A 2-D geometry whose height axis does nothing: one row, a kernel of
    height 1, stride and dilation 1, no padding (the oracle runs it as 2-D)."""
    geo = draw(geometry(max_extra=6))
    geo.update(kernel=(1, geo["kernel"][1]), strides=(1, geo["strides"][1]),
               dilations=(1, geo["dilations"][1]), start=(0, geo["start"][1]),
               end=(0, geo["end"][1]), spatial=(1, geo["spatial"][1]))
    return geo


def one_d_kwargs(case, parameter_rank):
    """The case as a 1-D call: input and filter without their height, one
    value per spatial attribute, and each parameter given in the 2-D form's
    shape (``parameter_rank`` 4), in the 1-D form's ``{1, OC, 1}``
    (``parameter_rank`` 3), or as the shorthand the case's forms chose.
    The bias is always 1-D form or shorthand: it must have the input's rank."""
    kwargs = case.qops_kwargs()
    kwargs["input"], kwargs["filter"] = case.x[:, :, 0], case.w[:, :, 0]
    for name in ("strides", "dilations", "start_padding", "end_padding"):
        kwargs[name] = tuple(kwargs[name][1:])
    for name, value in kwargs.items():
        if isinstance(value, np.ndarray) and value.ndim == 4 and name not in ("input", "filter"):
            if parameter_rank == 3 or name == "bias":
                kwargs[name] = value.reshape(value.shape[:2] + value.shape[3:])
    return kwargs


@pytest.mark.parametrize("combo", ALL_COMBOS)
@given(data=st.data())
def test_one_dimensional_convolution_equals_the_oracle_and_onnxruntime(combo, data):
    """A 1-D convolution (3-dimensional input and filter, from 4_0) against
    the oracle's 2-D convolution of height 1, on every kernel path the
    geometry picks (depthwise, pointwise, general) and both thread counts,
    and onnxruntime's 1-D QLinearConv where it is exact."""
    case = data.draw(conv_cases(combo, geo=one_d_geometry()), label="case")
    kwargs = one_d_kwargs(case, data.draw(st.sampled_from([3, 4]), label="parameter_rank"))
    n_threads = data.draw(st.sampled_from([1, 2]), label="n_threads")
    got = qops.quantized_linear_convolution(**kwargs, n_threads=n_threads)
    inputs = dict(case.onnx_inputs(), x=case.x[:, :, 0], w=case.w[:, :, 0])
    attributes = dict(strides=list(case.strides[1:]), dilations=list(case.dilations[1:]),
                      pads=[case.start[1], case.end[1]], group=case.groups,
                      kernel_shape=[case.w.shape[3]])
    judge(got, oracle_convolution(case)[:, :, 0], context="1-D QLinearConv",
          peer=lambda: run_ort("QLinearConv", inputs, attributes, opset=10,
                               output_dtype=case.y_dtype))


def test_one_dimensional_convolution_compiles_and_refuses_two_d_attributes():
    geo = dict(batch=2, channels=4, out_channels=6, groups=2, per_group_in=2, kernel=(1, 3),
               strides=(1, 2), dilations=(1, 2), start=(0, 2), end=(0, 1), spatial=(1, 13))
    case = build_case(geo, ("uint8", "int8", "uint8"), 5, per_channel=True, value_mode="random",
                      scale_mode="random", with_bias=True)
    kwargs = one_d_kwargs(case, 3)
    constants = {k: kwargs.pop(k) for k in ("filter", "filter_scale", "filter_zero_point", "bias",
                                            "strides", "dilations", "start_padding",
                                            "end_padding", "group_count")}
    compiled = qops.compile("QUANTIZED_LINEAR_CONVOLUTION", **constants)
    assert_exact(compiled(**kwargs), oracle_convolution(case)[:, :, 0], "compiled 1-D")
    with pytest.raises(qops.ValidationError, match="strides is \\(1, 2\\); a 1-D convolution "
                                                   "\\(input of 3 dimensions\\) takes one value"):
        qops.quantized_linear_convolution(**dict(one_d_kwargs(case, 3), strides=(1, 2)))
    with pytest.raises(qops.ValidationError, match="takes one value"):
        qops.compile("QUANTIZED_LINEAR_CONVOLUTION", **dict(constants, dilations=(1, 1)))
    # NumPy arrays of one value are one value; at 2_1 the input's rank is the error.
    as_array = dict(one_d_kwargs(case, 3), strides=np.array([2]), dilations=np.array([2]),
                    start_padding=np.array([2]), end_padding=np.array([1]))
    assert_exact(qops.quantized_linear_convolution(**as_array), oracle_convolution(case)[:, :, 0],
                 "attributes as arrays")
    with pytest.raises(qops.UnsupportedError, match="input has 3 dimensions; "
                                                    "DML_FEATURE_LEVEL_2_1 supports 4"):
        qops.quantized_linear_convolution(**dict(one_d_kwargs(case, 3), strides=(1, 2)),
                                          feature_level="2_1")


def _level_call(**changes):
    rng = np.random.default_rng(21)
    kwargs = dict(input=rng.integers(0, 256, (1, 2, 9), dtype=np.uint8), input_scale=0.5,
                  filter=rng.integers(-128, 128, (3, 2, 3), dtype=np.int8), filter_scale=0.25,
                  output_scale=2.0)
    kwargs.update(changes)
    return kwargs


@pytest.mark.parametrize("changes, level, message", [
    ({}, "2_1", "input has 3 dimensions; DML_FEATURE_LEVEL_2_1 supports 4 "
                "\\(3 to 4 from DML_FEATURE_LEVEL_4_0\\)"),
    ({"filter_scale": np.full((3, 1), 0.25, np.float32)}, "4_0",
     "filter_scale has 2 dimensions; DML_FEATURE_LEVEL_4_0 supports 3 to 4 "
     "\\(1 to 4 from DML_FEATURE_LEVEL_5_2\\)"),
    ({"bias": np.zeros((1, 3, 1, 1), np.int32)}, None,
     "bias, filter, input and output must have the same dimension count; bias has 4"),
    ({"filter": np.zeros((3, 2, 1, 3), np.int8)}, None, "must have the same dimension count"),
    ({"filter_scale": np.full((2, 1), 0.25, np.float32)}, None,
     "filter_scale has shape \\(1, 2, 1, 1\\) \\(given as \\(2, 1\\)\\); expected \\(1, 1, 1, 1\\) "
     "per-tensor or \\(1, 3, 1, 1\\) per-channel"),
    ({"input_scale": np.full((1, 1, 1, 1, 1), 0.5, np.float32)}, None,
     "input_scale has 5 dimensions; DML_FEATURE_LEVEL_6_4 supports 1 to 4"),
])
def test_feature_level_rows_of_the_convolution(changes, level, message):
    with pytest.raises(qops.ValidationError, match=message):
        qops.quantized_linear_convolution(**_level_call(**changes), feature_level=level)


@pytest.mark.parametrize("level, filter_scale_shape", [
    ("4_0", (1, 3, 1)), ("4_0", (3,)), ("4_0", (1, 3, 1, 1)), ("5_2", (3, 1)), ("5_2", (1, 3)),
    ("5_2", (1, 3, 1)),
])
def test_per_channel_filter_scale_shapes_each_level_takes(level, filter_scale_shape):
    """Where a level takes a shape, it means the same per-channel scale:
    fewer dimensions align right against the 1-D form {1, OC, 1}."""
    scales = np.array([0.25, 0.5, 0.125], np.float32)
    kwargs = _level_call()
    want = qops.quantized_linear_convolution(
        **dict(kwargs, input=kwargs["input"][:, :, None], filter=kwargs["filter"][:, :, None],
               filter_scale=scales), feature_level="2_1")[:, :, 0]
    if filter_scale_shape == (1, 3):
        # Right-aligned against {1, OC, 1}, (1, 3) is {1, 1, 3}: not per channel.
        with pytest.raises(qops.ValidationError, match="per-channel"):
            qops.quantized_linear_convolution(**dict(kwargs, filter_scale=scales.reshape(1, 3)),
                                              feature_level=level)
        return
    got = qops.quantized_linear_convolution(
        **dict(kwargs, filter_scale=scales.reshape(filter_scale_shape)), feature_level=level)
    assert_exact(got, want, f"{level} filter_scale {filter_scale_shape}")
