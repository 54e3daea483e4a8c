"""One valid call of every operator (``CALLS``, named by ``IDS``), for the
tests that change one thing about each (tests/ops/test_bad_inputs.py) or run
them all at once (tests/test_threads.py); the expected results come from the
NumPy reference run on the clean call."""

import numpy as np

import qops
from qops.backends import dispatch as _dispatch
from qops.ops.dry_run import PREPARE as _PREPARE

u8, i8 = np.uint8, np.int8


def conv_call():
    rng = np.random.default_rng(0)
    return "quantized_linear_convolution", dict(
        input=rng.integers(0, 256, (2, 4, 7, 6), dtype=u8), input_scale=np.float32(0.02),
        input_zero_point=u8(120), filter=rng.integers(-128, 128, (6, 2, 3, 3), dtype=i8),
        filter_scale=rng.uniform(0.005, 0.02, 6).astype(np.float32),
        filter_zero_point=np.zeros(6, i8), bias=rng.integers(-500, 500, 6, dtype=np.int32),
        output_scale=np.float32(0.3), output_zero_point=u8(128)), dict(
        strides=(2, 1), start_padding=(1, 0), end_padding=(1, 2), group_count=2)


def matmul_call():
    rng = np.random.default_rng(1)
    return "quantized_linear_matrix_multiply", dict(
        a=rng.integers(0, 256, (3, 5, 40), dtype=u8), a_scale=np.float32(0.02),
        a_zero_point=u8(128), b=rng.integers(-128, 128, (1, 40, 9), dtype=i8),
        b_scale=np.float32(0.01), b_zero_point=i8(-3), output_scale=np.float32(0.5),
        output_zero_point=u8(100)), {}


def conv_integer_call():
    rng = np.random.default_rng(2)
    return "convolution_integer", dict(
        input=rng.integers(-128, 128, (1, 3, 6, 6), dtype=i8), input_zero_point=i8(4),
        filter=rng.integers(0, 256, (4, 3, 2, 2), dtype=u8), filter_zero_point=u8(7)), dict(
        dilations=(2, 1))


def matmul_integer_call():
    rng = np.random.default_rng(3)
    return "matrix_multiply_integer", dict(
        a=rng.integers(0, 256, (6, 33), dtype=u8), a_zero_point=u8(3),
        b=rng.integers(-128, 128, (33, 5), dtype=i8), b_zero_point=i8(1)), {}


def quantize_call():
    rng = np.random.default_rng(4)
    return "quantize_linear", dict(
        x=rng.normal(0, 3, (2, 5, 4)).astype(np.float32),
        y_scale=rng.uniform(0.01, 0.1, 5).astype(np.float32),
        y_zero_point=rng.integers(-10, 10, 5).astype(i8)), dict(axis=1)


def quantize_per_tensor_call():
    """The lean path's form (qops/ops/_lean.pyx): every bad input must
    still get the validating path's answer."""
    rng = np.random.default_rng(6)
    return "quantize_linear", dict(
        x=rng.normal(0, 3, (2, 5, 4)).astype(np.float32), y_scale=np.float32(0.04),
        y_zero_point=u8(120)), {}


def dequantize_call():
    rng = np.random.default_rng(5)
    return "dequantize_linear", dict(
        x=rng.integers(0, 256, (2, 4, 6), dtype=u8),
        x_scale=rng.uniform(0.01, 0.1, 4).astype(np.float32),
        x_zero_point=rng.integers(90, 110, 4).astype(u8)), dict(axis=1)


CALLS = [conv_call, matmul_call, conv_integer_call, matmul_integer_call, quantize_call,
         dequantize_call, quantize_per_tensor_call]
# By function name (the tests below look calls up by it), the second form of
# a function by its own.
IDS = [make()[0] if make is not quantize_per_tensor_call else "quantize_linear_per_tensor"
       for make in CALLS]


def main_slot(slots):
    return next(iter(slots))


def run(name, slots, attributes, **keywords):
    return getattr(qops, name)(**slots, **attributes, **keywords)


def expected(name, slots, attributes):
    op = qops.registry.get(name)
    call = _PREPARE[op.name](dict(slots), dict(attributes), None)
    return _dispatch.execute(call, 1, implementation="reference")
