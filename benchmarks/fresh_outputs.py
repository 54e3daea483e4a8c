"""What a new output array costs a call, each case in a fresh process.

``python benchmarks/fresh_outputs.py [--budget 0.5] [--threads 2] [CASE ...]``
times, for each benchmark case (default: a few whose outputs are hundreds of
kilobytes), the compiled operator in a new Python process per case, twice:
first as the process starts, then after it has allocated and freed one
8 MiB array.  With glibc that free lifts malloc's threshold for memory
mappings, so that afterwards arrays of some hundreds of kilobytes come from
the heap, already mapped; before it, each one may be a fresh mapping whose
pages fault in on every call.  A long benchmark run allocates enough to lift
the threshold and so hides the difference; the ratio (fresh over lifted)
shows it: near 1.0 when a new output costs the call nothing (3x on
``mbv2_dw_56`` when outputs came from ``np.empty``).  Prints a Markdown
table.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

DEFAULT_CASES = ("mbv2_dw_56", "mbv2_dw_112_s2", "attn_batched", "r50_3x3_56", "bert_qkv")

_MEASURE = """
import json, sys
import numpy as np
import qops
from qops.cli import bench
name, threads, budget = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
case = next(c for c in bench.CASES if c.name == name)
constants, runtime, attributes = bench.operands(case)
operator = qops.compile(
    "QUANTIZED_LINEAR_CONVOLUTION" if case.kind == "conv" else "QUANTIZED_LINEAR_MATRIX_MULTIPLY",
    **constants, **attributes)
call = lambda: operator(**runtime, n_threads=threads)
fresh = bench.best_time(call, budget)
large = np.ones(8 << 20, np.uint8)   # one large array, written and freed
del large
lifted = bench.best_time(call, budget)
print(json.dumps({"fresh": fresh, "lifted": lifted}))
"""


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="*", default=list(DEFAULT_CASES))
    parser.add_argument("--budget", type=float, default=0.5)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    print("| case | fresh process ms | after an 8 MiB free ms | ratio |")
    print("|---|---|---|---|")
    for name in args.cases:
        result = subprocess.run([sys.executable, "-c", _MEASURE, name, str(args.threads),
                                 str(args.budget)], check=True, capture_output=True, text=True)
        times = json.loads(result.stdout.strip().splitlines()[-1])
        print(f"| {name} | {times['fresh'] * 1e3:.3f} | {times['lifted'] * 1e3:.3f} | "
              f"{times['fresh'] / times['lifted']:.2f}x |")


if __name__ == "__main__":
    main()
