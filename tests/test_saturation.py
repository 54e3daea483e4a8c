"""u8 x s8 operands whose pair sums leave int16, on every path and variant.

``vpmaddubsw`` (onnxruntime's u8 x s8 idiom without AVX-512 VNNI) adds two
neighbouring byte products into int16 and saturates: 255 * -128 twice is
-65280, 255 * 127 twice is 64770, both outside [-32768, 32767].  qops widens
to int16 before multiplying (``vpmaddwd``), uses ``vpdpbusd`` or AMX, or
plain C, and must be exact on every one of them.  Each test holds qops to
exact integer sums computed here; onnxruntime, where a test asks it, is
compared by the rule of tests/peers.py, so on a CPU without VNNI its miss is
recorded and on one with VNNI its agreement is counted.
"""

import numpy as np
import oracles
import pytest
from conftest import judge, run_ort

import qops
from qops.backends.native import gemm as _native
from qops.backends.native import variants as _simd
from qops.ops import convolution, integer, matmul
from qops.ops import matmul as matmul_front

#: Every kernel variant this machine runs.
VARIANTS = _simd.available()


def run_variant(operator_run, call, variant, n_threads):
    out = np.empty(call.output_shape, call.output_dtype)
    operator_run(call, out, n_threads, variant=variant)
    return out

A_VALUE = 255
#: Columns of B (or filters): every pair at -128, every pair at 127, pairs
#: of each sign in turn, and -128 / 127 alternating (whose pairs fit int16).
PATTERNS = ("low", "high", "pairs", "alternating")


def b_column(pattern, depth):
    k = np.arange(depth)
    if pattern == "low":
        return np.full(depth, -128)
    if pattern == "high":
        return np.full(depth, 127)
    if pattern == "pairs":
        return np.where((k // 2) % 2 == 0, -128, 127)
    return np.where(k % 2 == 0, -128, 127)


def saturating_b(depth, columns):
    return np.stack([b_column(PATTERNS[c % len(PATTERNS)], depth) for c in range(columns)],
                    axis=1).astype(np.int8)


#: (M, K, N): a product for the lean path (at most 4096 multiply-adds), and two for the GEMM.
SHAPES = [(2, 4, 4), (20, 64, 40), (9, 1000, 6)]
SHAPE_IDS = ["lean-size", "gemm", "long-k"]


def requantized(sums, output_scale, output_zero_point=128):
    m = oracles.multiplier(1.0, 1.0, output_scale)
    return oracles.requantize(sums, m, np.uint8(output_zero_point), np.uint8)


def matmul_operands(m, k, n):
    a = np.full((m, k), A_VALUE, np.uint8)
    b = saturating_b(k, n)
    # The output scale maps the exact sums, up to 255 * 128 * K, into uint8.
    output_scale = np.float32(2.0 ** np.ceil(np.log2(A_VALUE * 128 * k / 100)))
    return a, b, output_scale


def exact_sums(a, b):
    return a.astype(np.int64) @ b.astype(np.int64)


def test_the_operands_leave_int16_and_the_saturating_idiom_is_wrong_on_them():
    a, b, output_scale = matmul_operands(*SHAPES[1])
    assert 2 * A_VALUE * -128 < oracles.INT16_LOW and 2 * A_VALUE * 127 > oracles.INT16_HIGH
    exact = requantized(exact_sums(a, b), output_scale)
    saturated = requantized(oracles.saturating_u8s8_sums(a, b), output_scale)
    assert not np.array_equal(exact, saturated)


def _ort_matmul(a, b, output_scale):
    inputs = {"a": a, "a_scale": np.float32(1.0), "a_zero_point": np.uint8(0), "b": b,
              "b_scale": np.float32(1.0), "b_zero_point": np.int8(0),
              "y_scale": np.float32(output_scale), "y_zero_point": np.uint8(128)}
    return lambda: run_ort("QLinearMatMul", inputs, opset=10, output_dtype=np.uint8)


# -- QUANTIZED_LINEAR_MATRIX_MULTIPLY ----------------------------------------------------------

@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
def test_matrix_multiply_is_exact_on_every_variant(variant, shape):
    a, b, output_scale = matmul_operands(*shape)
    call = matmul.prepare(dict(a=a, a_scale=1.0, b=b, b_scale=1.0, output_scale=output_scale,
                               output_zero_point=np.uint8(128)), {}, "4_0")
    expected = requantized(exact_sums(a, b), output_scale)
    for n_threads in (1, 2):
        judge(run_variant(_native.run_matmul, call, variant, n_threads), expected,
              context=f"{variant}, {n_threads} threads")


@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
def test_the_public_matrix_multiply_is_exact(shape):
    a, b, output_scale = matmul_operands(*shape)
    got = qops.quantized_linear_matrix_multiply(a, 1.0, None, b, 1.0, None, output_scale,
                                                np.uint8(128))
    judge(got, requantized(exact_sums(a, b), output_scale),
          peer=_ort_matmul(a, b, output_scale), context="QLinearMatMul")


def test_the_lean_path_is_exact():
    matmul_front.PLANS.clear()
    matmul_front.FAST.get().clear()
    a, b, output_scale = matmul_operands(*SHAPES[0])
    expected = requantized(exact_sums(a, b), output_scale)
    slots = (a, np.float32(1.0), None, b, np.float32(1.0), None, np.float32(output_scale),
             np.uint8(128))
    judge(qops.quantized_linear_matrix_multiply(*slots), expected)  # learns the signature
    lean = matmul_front.FAST.get().run(*slots, None, None)
    assert lean is not None, "the lean path did not take the call"
    judge(lean, expected, peer=_ort_matmul(a, b, output_scale), context="the lean path")


# -- QUANTIZED_LINEAR_CONVOLUTION, depthwise included ------------------------------------------

def conv_operands(channels, out_channels, groups):
    image = np.full((1, channels, 6, 5), A_VALUE, np.uint8)
    taps = (channels // groups) * 9
    filter = saturating_b(taps, out_channels).T.reshape(out_channels, channels // groups, 3, 3)
    output_scale = np.float32(2.0 ** np.ceil(np.log2(A_VALUE * 128 * taps / 100)))
    return image, np.ascontiguousarray(filter), output_scale


def exact_convolution_sums(image, filter, groups):
    """Without padding every window is whole: padding would only add zeros."""
    return oracles.convolution_sums(image, 0, filter, 0, None, starts=(0, 0), ends=(0, 0),
                                    strides=(1, 1), dilations=(1, 1), group=groups)


CONVOLUTIONS = [(16, 8, 1), (8, 8, 8)]
CONVOLUTION_IDS = ["dense", "depthwise"]


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("channels,out_channels,groups", CONVOLUTIONS, ids=CONVOLUTION_IDS)
def test_convolution_is_exact_on_every_variant(variant, channels, out_channels, groups):
    image, filter, output_scale = conv_operands(channels, out_channels, groups)
    call = convolution.prepare(dict(input=image, input_scale=1.0, filter=filter, filter_scale=1.0,
                                    output_scale=output_scale, output_zero_point=np.uint8(128)),
                               dict(group_count=groups))
    expected = requantized(exact_convolution_sums(image, filter, groups), output_scale)
    runs = [_native.run_convolution] + ([_native.run_depthwise] if groups > 1 else [])
    for run in runs:
        for n_threads in (1, 2):
            judge(run_variant(run, call, variant, n_threads), expected,
                  context=f"{run.__name__} on {variant}, {n_threads} threads")


@pytest.mark.parametrize("channels,out_channels,groups", CONVOLUTIONS, ids=CONVOLUTION_IDS)
def test_the_public_convolution_is_exact(channels, out_channels, groups):
    image, filter, output_scale = conv_operands(channels, out_channels, groups)
    got = qops.quantized_linear_convolution(
        image, 1.0, None, filter, 1.0, None, None, output_scale, np.uint8(128),
        group_count=groups)
    inputs = {"x": image, "x_scale": np.float32(1.0), "x_zero_point": np.uint8(0), "w": filter,
              "w_scale": np.float32(1.0), "w_zero_point": np.int8(0),
              "y_scale": np.float32(output_scale), "y_zero_point": np.uint8(128)}
    judge(got, requantized(exact_convolution_sums(image, filter, groups), output_scale),
          peer=lambda: run_ort("QLinearConv", inputs, {"group": groups}, opset=10,
                               output_dtype=np.uint8), context="QLinearConv")


# -- MATRIX_MULTIPLY_INTEGER and CONVOLUTION_INTEGER ---------------------------------------------

@pytest.mark.parametrize("variant", VARIANTS)
def test_the_integer_operators_are_exact_on_every_variant(variant):
    a, b, _ = matmul_operands(*SHAPES[1])
    call = integer.prepare_matrix_multiply_integer(dict(a=a, b=b), {}, "4_0")
    judge(run_variant(_native.run_matmul, call, variant, 2), exact_sums(a, b).astype(np.int32),
          context=f"MATRIX_MULTIPLY_INTEGER on {variant}")
    image, filter, _ = conv_operands(16, 8, 1)
    call = integer.prepare_convolution_integer(dict(input=image, filter=filter), {})
    judge(run_variant(_native.run_convolution, call, variant, 2),
          exact_convolution_sums(image, filter, 1).astype(np.int32),
          context=f"CONVOLUTION_INTEGER on {variant}")


def test_the_public_integer_operators_are_exact():
    a, b, _ = matmul_operands(*SHAPES[1])
    inputs = {"A": a, "B": b, "a_zero_point": np.uint8(0), "b_zero_point": np.int8(0)}
    judge(qops.matrix_multiply_integer(a, None, b, None), exact_sums(a, b).astype(np.int32),
          peer=lambda: run_ort("MatMulInteger", inputs, opset=10, output_dtype=np.int32),
          context="MatMulInteger")
    image, filter, _ = conv_operands(16, 8, 1)
    inputs = {"x": image, "w": filter, "x_zero_point": np.uint8(0), "w_zero_point": np.int8(0)}
    judge(qops.convolution_integer(image, None, filter, None),
          exact_convolution_sums(image, filter, 1).astype(np.int32),
          peer=lambda: run_ort("ConvInteger", inputs, opset=10, output_dtype=np.int32),
          context="ConvInteger")
