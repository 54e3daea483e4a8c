"""An expansion and its depthwise convolution as one run, against the two calls.

``python benchmarks/expand_depthwise.py [--rounds 10] [--threads 2] [--models]``
times MobileNetV2's expansions and depthwise convolutions of large images
(the pairs a session runs as one step, ``CompiledOperator.followed_runner``)
both ways, rounds alternating, and prints each side's best round and the
median of the rounds' ratios (pair over calls).  With ``--models`` it also
times whole MobileNetV2 sessions with and without the pairs (the session's
pass switched off for the second), alternating in this process.  The
outputs are checked equal first.  Use ``QOPS_SIMD`` for a lower variant.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import qops

#: (channels, expanded channels, image size, depthwise stride): MobileNetV2's
#: blocks 2 to 6 at 224 x 224.
CASES = [(16, 96, 112, 2), (24, 144, 56, 1), (24, 144, 56, 2), (32, 192, 28, 1)]


def pair(channels, expanded, stride, rng):
    """A compiled expansion and depthwise convolution, every constant bound."""
    def compiled(filter, group, strides, padding, input_zero, output_zero):
        return qops.compile(
            "QUANTIZED_LINEAR_CONVOLUTION", filter=filter, filter_scale=np.float32(0.01),
            filter_zero_point=np.int8(0),
            bias=rng.integers(-500, 500, expanded).astype(np.int32),
            input_scale=np.float32(0.05), input_zero_point=np.uint8(input_zero),
            output_scale=np.float32(0.1), output_zero_point=np.uint8(output_zero),
            strides=strides, dilations=(1, 1), start_padding=(padding, padding),
            end_padding=(padding, padding), group_count=group)

    expand = compiled(rng.integers(-60, 60, (expanded, channels, 1, 1)).astype(np.int8), 1,
                      (1, 1), 0, 120, 0)
    depthwise = compiled(rng.integers(-60, 60, (expanded, 1, 3, 3)).astype(np.int8), expanded,
                         (stride, stride), 1, 0, 120)
    return expand, depthwise


def best_call(call, calls=100):
    start = time.perf_counter()
    for _ in range(calls):
        call()
    return (time.perf_counter() - start) / calls


def operators(rounds, threads):
    rng = np.random.default_rng(0)
    print("| expansion | depthwise | two calls us | one run us | one run / two calls |")
    print("|---|---|---|---|---|")
    for channels, expanded, size, stride in CASES:
        expand, depthwise = pair(channels, expanded, stride, rng)
        image = rng.integers(0, 256, (1, channels, size, size)).astype(np.uint8)
        run = expand.followed_runner(depthwise, image.shape)
        assert run is not None, "the kernels do not run this pair as one"
        assert np.array_equal(run(threads, image),
                              depthwise(expand(image, n_threads=threads), n_threads=threads))
        calls, fused = [], []
        for _ in range(rounds):
            calls.append(best_call(lambda: depthwise(expand(image, n_threads=threads),
                                                     n_threads=threads)))
            fused.append(best_call(lambda: run(threads, image)))
        ratio = statistics.median(f / c for f, c in zip(fused, calls))
        print(f"| {channels} -> {expanded} over {size} x {size} | stride {stride} | "
              f"{min(calls) * 1e6:.1f} | {min(fused) * 1e6:.1f} | {ratio:.3f} |")


def models(rounds, threads):
    from qops.cli.bench_models import _qops_time
    from qops.onnx import InferenceSession, examples

    print()
    print("| model | without pairs ms | with pairs ms | with / without (median) |")
    print("|---|---|---|---|")
    for name in ("mobilenet_v2-qdq-per-tensor", "mobilenet_v2-qoperator-per-channel"):
        model = examples.by_name(name).build(0)
        feeds = examples.random_inputs(model, 1)
        with_pairs = InferenceSession(model, n_threads=threads)
        fused = InferenceSession._fused_convolutions
        InferenceSession._fused_convolutions = lambda self, steps, shapes: steps
        try:
            without = InferenceSession(model, n_threads=threads)
        finally:
            InferenceSession._fused_convolutions = fused
        assert np.array_equal(with_pairs.run(None, feeds)[0], without.run(None, feeds)[0])
        old, new = [], []
        for _ in range(rounds):
            old.append(_qops_time(without, feeds, 0.3))
            new.append(_qops_time(with_pairs, feeds, 0.3))
        ratio = statistics.median(n / o for n, o in zip(new, old))
        print(f"| {name} | {min(old) * 1e3:.3f} | {min(new) * 1e3:.3f} | {ratio:.3f} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--models", action="store_true")
    arguments = parser.parse_args()
    from qops.cli.bench import machine, machine_line

    print(machine_line(machine(arguments.threads)))
    operators(arguments.rounds, arguments.threads)
    if arguments.models:
        models(arguments.rounds, arguments.threads)


if __name__ == "__main__":
    main()
