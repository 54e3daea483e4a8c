"""Python function calls inside qops per operator call, cold and warm.

``python benchmarks/hops.py`` calls each operator through the public API
three times in one process: once with another shape (so that imports and
kernel loading are done), once with a new signature (cold: validation and
the plan are built) and once more with the same arguments (warm).  It counts
the Python-level function calls whose code lives in the qops package during
the cold and the warm call (``sys.setprofile``; C functions, NumPy's and the
kernels' included, are not counted) and prints a Markdown table.
"""

from __future__ import annotations

import os
import sys

import numpy as np


def _cases():
    import qops

    rng = np.random.default_rng(0)

    def u8(*shape):
        return rng.integers(0, 256, shape, dtype=np.uint8)

    def i8(*shape):
        return rng.integers(-128, 128, shape, dtype=np.int8)

    def conv(size):
        return lambda: qops.quantized_linear_convolution(
            input=image[size], input_scale=0.02, input_zero_point=np.uint8(128),
            filter=weights, filter_scale=np.full(16, 0.01, np.float32), bias=bias,
            output_scale=0.5, output_zero_point=np.uint8(128), start_padding=(1, 1),
            end_padding=(1, 1))

    image = {8: u8(1, 16, 8, 8), 12: u8(1, 16, 12, 12)}
    weights, bias = i8(16, 16, 3, 3), rng.integers(-500, 500, 16, dtype=np.int32)

    def matmul(rows):
        return lambda: qops.quantized_linear_matrix_multiply(
            a=a[rows], a_scale=np.float32(0.02), a_zero_point=np.uint8(128), b=b,
            b_scale=np.float32(0.01), output_scale=np.float32(0.5),
            output_zero_point=np.uint8(128))

    a, b = {64: u8(64, 128), 96: u8(96, 128)}, i8(128, 64)

    def quantize(size):
        return lambda: qops.quantize_linear(x[size], 0.02, np.uint8(128))

    def quantize_axis(size):
        return lambda: qops.quantize_linear(x[size], np.full(size, 0.02, np.float32),
                                            np.full(size, 128, np.uint8), axis=0)

    x = {64: rng.standard_normal((64, 64)).astype(np.float32),
         96: rng.standard_normal((96, 64)).astype(np.float32)}

    def dequantize(size):
        return lambda: qops.dequantize_linear(q[size], 0.02, np.uint8(128))

    q = {64: u8(64, 64), 96: u8(96, 64)}

    def matmul_integer(rows):
        return lambda: qops.matrix_multiply_integer(a[rows], np.uint8(128), b, None)

    def conv_integer(size):
        return lambda: qops.convolution_integer(image[size], np.uint8(128), weights, None,
                                                start_padding=(1, 1), end_padding=(1, 1))

    def dynamic(size):
        return lambda: qops.dynamic_quantize_linear(x[size])

    compiled_conv = {}

    def compiled(size):
        def call():
            if "op" not in compiled_conv:
                compiled_conv["op"] = qops.compile(
                    "QUANTIZED_LINEAR_CONVOLUTION", filter=weights,
                    filter_scale=np.full(16, 0.01, np.float32), bias=bias,
                    start_padding=(1, 1), end_padding=(1, 1))
            return compiled_conv["op"](input=image[size], input_scale=0.02,
                                       input_zero_point=np.uint8(128), output_scale=0.5,
                                       output_zero_point=np.uint8(128))
        return call

    return {
        "quantized_linear_convolution": (conv(8), conv(12)),
        "compiled convolution": (compiled(8), compiled(12)),
        "quantized_linear_matrix_multiply": (matmul(64), matmul(96)),
        "quantize_linear (per tensor)": (quantize(64), quantize(96)),
        "quantize_linear (per axis)": (quantize_axis(64), quantize_axis(96)),
        "dequantize_linear": (dequantize(64), dequantize(96)),
        "matrix_multiply_integer": (matmul_integer(64), matmul_integer(96)),
        "convolution_integer": (conv_integer(8), conv_integer(12)),
        "dynamic_quantize_linear": (dynamic(64), dynamic(96)),
    }


def count_calls(function):
    """Python function calls in qops' own code while ``function`` runs."""
    import qops

    root = os.path.dirname(os.path.abspath(qops.__file__)) + os.sep
    count = [0]

    def profile(frame, event, argument):
        if event == "call" and frame.f_code.co_filename.startswith(root):
            count[0] += 1

    sys.setprofile(profile)
    try:
        function()
    finally:
        sys.setprofile(None)
    return count[0]


def main():
    rows = []
    for name, (first, other) in _cases().items():
        first()                      # imports, kernels, this operator's first plan
        cold = count_calls(other)    # a new signature
        warm = count_calls(other)    # the same one again
        rows.append((name, cold, warm))
    print("| call | cold (new signature) | warm (same signature) |\n|---|---|---|")
    for name, cold, warm in rows:
        print(f"| {name} | {cold} | {warm} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
