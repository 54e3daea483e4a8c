"""The reference evaluator with and without qops' operators, on a quantized CNN.

``python benchmarks/onnx_reference.py [--size 56]`` builds the CNN of
qops.onnx._examples (conv, relu, conv, reshape, matmul; quantized by
onnxruntime in the QOperator format, per-channel int8 weights) and times one
inference three ways: onnx.reference's ReferenceEvaluator, the same with
``qops.onnx.reference_ops()``, and onnxruntime (2 threads).  It judges qops'
output and onnxruntime's against the exact model (onnx.reference with
QLinearConv and QLinearMatMul computed by :mod:`qops.reference`'s exact
integer sums and the contract's requantization) and prints a Markdown table.
The exit status is 1 only when qops' output is not exact: onnxruntime's u8 x
s8 kernels saturate on CPUs without VNNI.
"""

import argparse
import os
import sys
import tempfile
import time

import numpy as np


def best_time(function, repeats):
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        best = min(best, time.perf_counter() - start)
    return best


def exact_operators():
    """onnx.reference classes running QLinearConv (explicit ``pads``, as the
    quantizer writes them) and QLinearMatMul (2-D) by qops.reference."""
    from onnx.reference.op_run import OpRun

    from qops import reference
    from qops.reference.convolution import convolution_sums

    def per_tensor(value, rank=4):
        return np.asarray(value).reshape((1,) * rank)

    class QLinearConv(OpRun):
        op_domain = ""

        def _run(self, x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale,
                 y_zero_point, B=None, auto_pad=None, dilations=None, group=None,
                 kernel_shape=None, pads=None, strides=None):
            pads = pads or [0, 0, 0, 0]
            channels = (1, -1, 1, 1)
            sums = convolution_sums(
                x, per_tensor(x_zero_point), w, np.asarray(w_zero_point).reshape(channels), B,
                strides=tuple(strides or (1, 1)), dilations=tuple(dilations or (1, 1)),
                start_padding=tuple(pads[:2]), end_padding=tuple(pads[2:]), group_count=group or 1)
            m = reference.requantization_multiplier(
                per_tensor(x_scale), np.asarray(w_scale, np.float32).reshape(channels),
                per_tensor(y_scale))
            return (reference.requantize(sums, m, per_tensor(y_zero_point),
                                         np.asarray(y_zero_point).dtype),)

    class QLinearMatMul(OpRun):
        op_domain = ""

        def _run(self, a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale,
                 y_zero_point):
            return (reference.quantized_linear_matrix_multiply(
                a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point,
                output_dtype=np.asarray(y_zero_point).dtype),)

    return [QLinearConv, QLinearMatMul]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=56, help="image height and width")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)

    import onnxruntime
    from onnx.reference import ReferenceEvaluator

    import qops.onnx
    from qops.onnx._examples import quantized_cnn

    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as directory:
        model = quantized_cnn(os.path.join(directory, "cnn.onnx"), rng, size=args.size,
                              channels=(32, 64))
    x = {"x": rng.normal(0, 1, (1, 3, args.size, args.size)).astype(np.float32)}
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 2
    session = onnxruntime.InferenceSession(model.SerializeToString(), options,
                                           providers=["CPUExecutionProvider"])
    plain = ReferenceEvaluator(model)
    with_qops = ReferenceEvaluator(model, new_ops=qops.onnx.reference_ops())
    expected = ReferenceEvaluator(model, new_ops=exact_operators()).run(None, x)[0]
    exact = np.array_equal(with_qops.run(None, x)[0], expected)
    ort_exact = np.array_equal(session.run(None, x)[0], expected)
    times = {"onnx.reference": best_time(lambda: plain.run(None, x), args.repeats),
             "onnx.reference + qops.onnx": best_time(lambda: with_qops.run(None, x), args.repeats),
             "onnxruntime": best_time(lambda: session.run(None, x), args.repeats)}
    print(f"quantized CNN, 1x3x{args.size}x{args.size} input; qops output exact: "
          f"{'yes' if exact else 'NO'}; onnxruntime's exact: {'yes' if ort_exact else 'no'}\n")
    print("| evaluator | ms per inference | speed-up over onnx.reference |\n|---|---|---|")
    for name, seconds in times.items():
        print(f"| {name} | {seconds * 1e3:.2f} | {times['onnx.reference'] / seconds:.1f}x |")
    return 0 if exact else 1


if __name__ == "__main__":
    sys.exit(main())
