"""The reference evaluator with and without qops' operators, on a quantized CNN.

``python benchmarks/onnx_reference.py [--size 56]`` builds the CNN of
qops.onnx._examples (conv, relu, conv, reshape, matmul; quantized by
onnxruntime in the QOperator format, per-channel int8 weights) and times one
inference three ways: onnx.reference's ReferenceEvaluator, the same with
``qops.onnx.reference_ops()``, and onnxruntime (2 threads).  It checks that
qops' output equals onnxruntime's and prints a Markdown table.
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
    expected = session.run(None, x)[0]
    same = np.array_equal(with_qops.run(None, x)[0], expected)
    times = {"onnx.reference": best_time(lambda: plain.run(None, x), args.repeats),
             "onnx.reference + qops.onnx": best_time(lambda: with_qops.run(None, x), args.repeats),
             "onnxruntime": best_time(lambda: session.run(None, x), args.repeats)}
    print(f"quantized CNN, 1x3x{args.size}x{args.size} input; qops output equals onnxruntime's: "
          f"{'yes' if same else 'NO'}\n")
    print("| evaluator | ms per inference | speed-up over onnx.reference |\n|---|---|---|")
    for name, seconds in times.items():
        print(f"| {name} | {seconds * 1e3:.2f} | {times['onnx.reference'] / seconds:.1f}x |")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
