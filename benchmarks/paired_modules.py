"""Two builds of one kernel module against each other, in one process.

``python benchmarks/paired_modules.py OLD.so NEW.so [--threads 2] [--rounds 40] CIN,COUT,HW ...``
loads both builds of a variant's GEMM module (``_qgemm_avx2...so`` copied
aside before and after a change) side by side, and times a pointwise
convolution (filter x image, CIN -> COUT channels over HW x HW pixels,
per-channel requantization, as a compiled QLinearConv runs it) through
each module's ``matmul``, alternating short rounds: the host's load moves
both sides alike, so the median of the rounds' ratios holds still where
two processes' times, seconds apart, do not.  Both outputs must be equal.
Prints each side's best time and the ratio (NEW over OLD: below 1, the new
build is faster).
"""

from __future__ import annotations

import argparse
import importlib.util
import time

import numpy as np


def load(path):
    """The extension module at ``path`` (a copy of a variant's GEMM module)
    as a module object of its own."""
    spec = importlib.util.spec_from_file_location(_module_name(path), path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _module_name(path):
    """The module name the build's init function answers to: read from the
    PyInit_ symbol in the file."""
    data = open(path, "rb").read()
    start = data.index(b"PyInit_") + len(b"PyInit_")
    end = start
    while data[end:end + 1].isalnum() or data[end:end + 1] == b"_":
        end += 1
    return "qops.backends.native.kernels." + data[start:end].decode()


def pointwise(rng, channels, out_channels, side):
    """matmul's arguments for a pointwise convolution, output last."""
    pixels = side * side
    filter_ = rng.integers(-127, 128, (1, out_channels, channels), dtype=np.int8)
    a = filter_.view(np.uint8) ^ np.uint8(0x80)  # A' of a compiled filter
    image = rng.integers(0, 256, (1, channels, pixels), dtype=np.uint8)
    index = np.zeros(1, np.int64)
    return dict(
        a=a, image=image, index=index, pixels=pixels,
        row_zero=np.full(out_channels, 128, np.int32),
        column_zero=np.array([3 - 128], np.int32),
        multiplier=(rng.random((out_channels, 1)) * 1e-3 + 1e-4).astype(np.float32),
        out_zero=np.full((out_channels, 1), 128, np.int32),
        bias=rng.integers(-1000, 1000, out_channels).astype(np.int64))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("cases", nargs="+", help="CIN,COUT,HW")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=40)
    args = parser.parse_args(argv)
    import qops  # noqa: F401 - the package and its pool, which both builds use

    modules = [load(args.old), load(args.new)]
    rng = np.random.default_rng(0)
    for case in args.cases:
        channels, out_channels, side = map(int, case.split(","))
        p = pointwise(rng, channels, out_channels, side)
        sums = modules[0].matrix_row_sums(p["a"], False, 1)
        outs = [np.empty((1, out_channels, p["pixels"]), np.uint8) for _ in modules]

        def call(module, out):
            module.matmul(p["a"], False, p["index"], None, None, p["index"], p["pixels"],
                          p["row_zero"], p["column_zero"], p["multiplier"], p["out_zero"], out,
                          0, 255, args.threads, False, True, p["bias"], sums, p["image"], True)

        for module, out in zip(modules, outs):
            call(module, out)
        if not (outs[0] == outs[1]).all():
            raise SystemExit(f"{case}: the two builds' outputs differ")
        calls = max(3, int(3e6 / (channels * out_channels * p["pixels"] / 1e3)) // 1000)
        best, ratios = [float("inf")] * 2, []
        for _ in range(args.rounds):
            times = []
            for side_index, (module, out) in enumerate(zip(modules, outs)):
                start = time.perf_counter()
                for _ in range(calls):
                    call(module, out)
                elapsed = (time.perf_counter() - start) / calls
                times.append(elapsed)
                best[side_index] = min(best[side_index], elapsed)
            ratios.append(times[1] / times[0])
        print(f"{channels:5d} -> {out_channels:5d}, {side:3d} x {side:<3d}  old {best[0] * 1e3:.3f} ms"
              f"  new {best[1] * 1e3:.3f} ms  new / old: best {best[1] / best[0]:.2f},"
              f" median {np.median(ratios):.2f}")


if __name__ == "__main__":
    main()
