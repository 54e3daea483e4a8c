"""Two builds of one kernel module against each other, in one process.

``python benchmarks/paired_modules.py OLD.so NEW.so [--threads 2] [--rounds 40] [--flush MB] CASE ...``
loads both builds of a variant's GEMM module (``_qgemm_avx2...so`` copied
aside before and after a change) side by side, and times each case
through both, alternating short rounds.  A case ``CIN,COUT,HW`` is a
pointwise convolution (filter x image, CIN -> COUT channels over HW x HW
pixels, per-channel requantization, as a compiled QLinearConv runs it:
a ``BoundProduct`` bound once per build); ``dw:C,HW`` a 3 x 3 depthwise convolution of C
channels over HW x HW pixels, padded by one, through ``depthwise2d``;
``row:K,N`` a product of one row on a packed K x N B (a classifier's),
on the narrowed panels where the build has them; ``rows:M,K,N`` M rows by a
packed K x N B (a channels-last pointwise convolution's M pixels); ``n0:K,N,BLOCK,ROWS[,zp]``
and ``n4:...`` MatMulNBits at accuracy level 0 or 4 on 4-bit weights,
through two builds of a quantize module (``_quantize_avx2...so``).  The host's load moves
both sides alike, so the median of the rounds' ratios holds still where
two processes' times, seconds apart, do not.  With ``--flush MB`` each
timed call follows a write of MB megabytes, so that its operands come
from memory.  Both outputs must be equal.
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


def pointwise(rng, channels, out_channels, side, module, threads):
    """call(module, out) and the output's shape of a pointwise convolution."""
    pixels = side * side
    filter_ = rng.integers(-127, 128, (1, out_channels, channels), dtype=np.int8)
    a = filter_.view(np.uint8) ^ np.uint8(0x80)  # A' of a compiled filter
    image = rng.integers(0, 256, (1, channels, pixels), dtype=np.uint8)
    index = np.zeros(1, np.int64)
    row_zero = np.full(out_channels, 128, np.int32)
    column_zero = np.array([3 - 128], np.int32)
    multiplier = (rng.random((out_channels, 1)) * 1e-3 + 1e-4).astype(np.float32)
    out_zero = np.full((out_channels, 1), 128, np.int32)
    bias = rng.integers(-1000, 1000, out_channels).astype(np.int64)
    bound = {}

    def call(module, out):
        # Bound once per build, as a compiled convolution binds its product.
        if module not in bound:
            bound[module] = module.BoundProduct(
                a, False, index, None, None, index, pixels, row_zero, column_zero, multiplier,
                out_zero, 1, 0, 255, False, True, bias, module.matrix_row_sums(a, False, 1),
                image.shape, True, a_packed_once=True)
        bound[module].run(None, image, out, threads)

    return call, (1, out_channels, pixels)


def rows_product(rng, rows, depth, columns, threads, narrowed=False):
    """call(module, out) and the output's shape of ``rows`` rows of A by a
    packed depth x columns B: a channels-last pointwise convolution of
    ``rows`` pixels, or with ``narrowed`` one row (a classifier's, as a
    compiled operator runs it) on the narrowed panels where the build has
    them."""
    a = rng.integers(0, 256, (1, rows, depth), dtype=np.uint8)
    b = rng.integers(0, 256, (1, depth, columns), dtype=np.uint8)
    index = np.zeros(1, np.int64)
    multiplier = np.full((1, columns), 1e-4, np.float32)
    out_zero = np.full((1, columns), 128, np.int32)
    packed = {}

    def call(module, out):
        if module not in packed:
            b_packed, colsum = module.pack_b_batches(b, False, 1)
            narrow = getattr(module, "narrow_panels", None) if narrowed else None
            packed[module] = (b_packed, colsum, {} if narrow is None
                              else {"b_narrow": narrow(b_packed)})
        b_packed, colsum, narrow_panels = packed[module]
        module.matmul(a, False, index, b_packed, colsum, index, columns,
                      np.full(rows, 0 if narrowed else 3, np.int32), np.zeros(columns, np.int32),
                      multiplier,
                      out_zero, out, 0, 255, threads, **narrow_panels)

    return call, (1, rows, columns)


def n_bits(spec, level, threads):
    """call(module, out) and the output's shape (bytes of float32) of
    MatMulNBits on 4-bit weights at accuracy level 0 or 4 through a quantize
    module's matmul_n_bits or matmul_n_bits_int8: spec is
    K,N,BLOCK,ROWS[,zp]."""
    from qops.backends.native import matmul_n_bits as native
    from qops.cli import bench_n_bits
    from qops.reference.n_bits import quantize_a_blocks

    k, n, block_size, rows, *zero = spec.split(",")
    case = bench_n_bits.NBitsCase(int(k), int(n), int(block_size), zero == ["zp"], int(rows),
                                  level)
    a, b, scales, zero_points = bench_n_bits.operands(case)
    k_blocks = case.k_blocks
    zeros = native._per_panel(native.zero_points_of(zero_points, case.n, k_blocks, 4), case.n,
                              k_blocks)
    block_scales = native._per_panel(native.scales_of(scales, case.n, k_blocks), case.n,
                                     k_blocks)
    whole_zeros = native.whole_zeros_hold(zeros, block_scales, 4)
    rows_of_a = np.ascontiguousarray(np.asarray(a, np.float32).reshape(-1, case.k))
    codes, a_scales, a_sums = quantize_a_blocks(rows_of_a, case.block_size)
    packed = {}

    def call(module, out):
        if module not in packed:
            packed[module] = module.matmul_n_bits_interleave(np.ascontiguousarray(b), 1)
            if level == 4 and getattr(module, "LEVEL_FOUR_QUADS", False):
                # Level 4's own layout, where the build's kernels read it.
                packed[module] = module.matmul_n_bits_quads(packed[module], 1)
        target = out.view(np.float32).reshape(-1, case.n)
        if level == 4:
            arguments = (codes, a_scales, a_sums, packed[module])
            rest = (block_scales, None, case.n, 4, case.block_size, target, threads)
            try:
                module.matmul_n_bits_int8(*arguments, zeros.astype(np.uint8), *rest)
            except ValueError:  # a build from before the zero points were bytes
                module.matmul_n_bits_int8(*arguments, zeros.astype(np.int32), *rest)
        else:
            arguments = (rows_of_a, packed[module], zeros, block_scales, None, case.n, 4,
                         case.block_size, target, threads)
            if "whole_zeros" in (module.matmul_n_bits.__doc__ or ""):
                module.matmul_n_bits(*arguments, whole_zeros)
            else:  # a build from before the one-row kernel's whole_zeros
                module.matmul_n_bits(*arguments)

    return call, (case.rows, 4 * case.n), case.rows * case.k * case.n


def depthwise(rng, channels, side, threads):
    """call(module, out) and the output's shape of a 3 x 3 depthwise
    convolution, stride 1, padded by one."""
    image = rng.integers(0, 256, (1, channels, side, side), dtype=np.uint8)
    taps = rng.integers(-127, 128, (channels, 9), dtype=np.int8).view(np.uint8)
    filter_zero = np.zeros(channels, np.int32)
    multiplier = (rng.random(channels) * 1e-2 + 1e-3).astype(np.float32)
    out_zero = np.full(channels, 128, np.int32)
    bias = rng.integers(-1000, 1000, channels).astype(np.int32)

    def call(module, out):
        module.depthwise2d(image, False, 3, taps, True, filter_zero, 3, 3, (1, 1), (1, 1),
                           (1, 1), (1, 1), multiplier, out_zero, bias, out, 0, 255, threads)

    return call, (1, channels, side, side)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("cases", nargs="+", help="CIN,COUT,HW, dw:C,HW, row:K,N, rows:M,K,N, n0: or n4:K,N,BLOCK,ROWS[,zp]")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--flush", type=int, default=0, metavar="MB",
                        help="write MB megabytes before each timed call, so that its "
                             "operands come from memory (one call per round)")
    args = parser.parse_args(argv)
    import qops  # noqa: F401 - the package and its pool, which both builds use

    modules = [load(args.old), load(args.new)]
    rng = np.random.default_rng(0)
    for case in args.cases:
        if case.startswith("dw:"):
            channels, side = map(int, case[3:].split(","))
            work = channels * side * side * 9
            call, shape = depthwise(rng, channels, side, args.threads)
        elif case.startswith(("n0:", "n4:")):
            call, shape, work = n_bits(case[3:], int(case[1]), args.threads)
        elif case.startswith("rows:"):
            rows, depth, columns = map(int, case[5:].split(","))
            work = rows * depth * columns
            call, shape = rows_product(rng, rows, depth, columns, args.threads)
        elif case.startswith("row:"):
            depth, columns = map(int, case[4:].split(","))
            work = depth * columns
            call, shape = rows_product(rng, 1, depth, columns, args.threads, narrowed=True)
        else:
            channels, out_channels, side = map(int, case.split(","))
            work = channels * out_channels * side * side
            call, shape = pointwise(rng, channels, out_channels, side, modules[0], args.threads)
        outs = [np.empty(shape, np.uint8) for _ in modules]
        for module, out in zip(modules, outs):
            call(module, out)
        if not (outs[0] == outs[1]).all():
            raise SystemExit(f"{case}: the two builds' outputs differ")
        calls = 1 if args.flush else max(3, int(3e9 / work) // 1000)
        flush = np.ones(args.flush << 20, np.uint8)
        best, ratios = [float("inf")] * 2, []
        for _ in range(args.rounds):
            times = []
            for side_index, (module, out) in enumerate(zip(modules, outs)):
                if args.flush:
                    flush += 1
                start = time.perf_counter()
                for _ in range(calls):
                    call(module, out)
                elapsed = (time.perf_counter() - start) / calls
                times.append(elapsed)
                best[side_index] = min(best[side_index], elapsed)
            ratios.append(times[1] / times[0])
        print(f"{case:>14}  old {best[0] * 1e3:.3f} ms"
              f"  new {best[1] * 1e3:.3f} ms  new / old: best {best[1] / best[0]:.2f},"
              f" median {np.median(ratios):.2f}")


if __name__ == "__main__":
    main()
