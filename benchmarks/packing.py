"""How fast each SIMD variant packs B of a matrix product and a convolution's
filter, one thread, in the same run.

    python benchmarks/packing.py [--variants avx512vnni avx2] [--repeat 100]

A plain product packs its B during the call and a plain convolution its
filter (a compiled operator packs them once), so these rates bound the
plain forms (a filter packed into the workspace, as a plain call
packs it): per variant and shape, the best of the repeats (a tenth of
them, for the noise of a shared machine) in microseconds and in GB/s of the
source bytes, Python's call included.  B of 768 x 3072 and 1024 x 4096 has
rows far apart (their lines fall in a few L1 sets); the filters are a
3 x 3 convolution's of 64 and 256 channels, a 1 x 1 one's of 512 to 2048
and a network's first (3 channels, 7 x 7).
"""

import argparse
import time

import numpy as np

from qops.backends.native import gemm, variants

B_SHAPES = ((768, 768), (768, 3072), (1024, 4096), (64, 128))
FILTER_SHAPES = ((64, 64, 3, 3), (256, 256, 3, 3), (2048, 512, 1, 1), (64, 3, 7, 7))


def best(call, repeat):
    for _ in range(max(1, repeat // 10)):
        call()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 10]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", nargs="*", default=None,
                        help="variants to run (default: every one this CPU runs)")
    parser.add_argument("--repeat", type=int, default=100)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    print("| variant | what | shape | us | GB/s |")
    print("|---|---|---|---|---|")
    for variant in args.variants or variants.available():
        kernels = variants.module(variant)
        for k, n in B_SHAPES:
            b = rng.integers(0, 256, (1, k, n), dtype=np.uint8)
            seconds = best(lambda: kernels.pack_b_batches(b, True, 1), args.repeat)
            print(f"| {variant} | B | {k} x {n} | {seconds * 1e6:.1f} | {b.size / seconds / 1e9:.2f} |")
        for shape in FILTER_SHAPES:
            weights = rng.integers(-128, 128, shape, dtype=np.int8)
            taps_per_run = gemm.filter_taps_per_run(weights)
            taps = gemm.filter_taps(weights, taps_per_run)
            seconds = best(lambda: gemm.pack_filter(weights, 1, taps_per_run, kernels, 1, taps,
                                                    scratch=True), args.repeat)
            print(f"| {variant} | filter | {' x '.join(map(str, shape))} | "
                  f"{seconds * 1e6:.1f} | {weights.size / seconds / 1e9:.2f} |")


if __name__ == "__main__":
    main()
