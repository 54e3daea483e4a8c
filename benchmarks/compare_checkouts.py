"""Two checkouts of qops against each other, in the same run.

``python benchmarks/compare_checkouts.py OLD NEW [--rounds 3] [--budget 0.5] [CASE ...]``
runs ``python -m qops bench`` in each checkout in turn (each imports its own
qops: the command runs with the checkout as its working directory), round
after round, and prints, per case, the best time of each checkout over the
rounds and the ratio of the two, for the plain function and the compiled
operator.  onnxruntime's best times in the same runs say how much the
machine itself moved between the two checkouts' runs; the last columns take
that out: per checkout, the median over rounds of each run's "vs ORT" speed
(onnxruntime's time over qops', both from that run), and their ratio (above 1:
the new checkout is faster).  Each checkout must be built (``python setup.py
build_ext --inplace``).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile


def read_table(path):
    """``{case: {column: cell}}`` of a bench.md."""
    rows, header = {}, None
    for line in open(path):
        if not line.startswith("| ") or line.startswith("| geometric"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0] == "case":
            header = cells
            continue
        rows[cells[0]] = dict(zip(header, cells))
    return rows


def run_bench(checkout, cases, budget, out):
    command = [sys.executable, "-m", "qops", "bench", *cases, "--budget", str(budget),
               "--out", out]
    subprocess.run(command, cwd=checkout, check=True, capture_output=True, text=True)
    return read_table(os.path.join(out, "bench.md"))


def _best(runs, case, column):
    values = [float(run[case][column]) for run in runs if run[case].get(column)]
    return min(values) if values else None


def _median_speed(runs, case, column):
    """The median over runs of one run's speed relative to onnxruntime."""
    values = sorted(float(run[case][column].rstrip("x")) for run in runs
                    if run[case].get(column))
    return values[len(values) // 2] if values else None


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("cases", nargs="*")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--budget", type=float, default=0.5)
    args = parser.parse_args(argv)
    runs = {"old": [], "new": []}
    with tempfile.TemporaryDirectory() as folder:
        for round_ in range(args.rounds):
            for name in ("old", "new"):
                checkout = getattr(args, name)
                out = os.path.join(folder, f"{name}{round_}")
                runs[name].append(run_bench(os.path.abspath(checkout), args.cases, args.budget,
                                            out))
                print(f"round {round_ + 1}: {name} done", file=sys.stderr)
    print("| case | old ms | new ms | new / old | old compiled ms | new compiled ms | "
          "new / old compiled | ORT ms (old runs, new runs) | vs ORT old, new | "
          "compiled vs ORT old, new | speed new / old (vs ORT; plain, compiled) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for case in runs["new"][0]:
        cells = [case]
        for column in ("qops ms", "compiled ms"):
            old, new = _best(runs["old"], case, column), _best(runs["new"], case, column)
            if old is None or new is None:
                cells += ["", "", ""]
                continue
            cells += [f"{old:.3f}", f"{new:.3f}", f"{new / old:.2f}"]
        ort_old, ort_new = _best(runs["old"], case, "ORT ms"), _best(runs["new"], case, "ORT ms")
        # Cases onnxruntime does not run (no kernel) have no ORT columns.
        cells.append("" if ort_old is None or ort_new is None
                     else f"{ort_old:.3f}, {ort_new:.3f}")
        relative = []
        for column in ("qops vs ORT", "compiled vs ORT const"):
            old = _median_speed(runs["old"], case, column)
            new = _median_speed(runs["new"], case, column)
            missing = old is None or new is None
            cells.append("" if missing else f"{old:.2f}, {new:.2f}")
            relative.append("" if missing else f"{new / old:.2f}")
        cells.append(", ".join(r for r in relative if r))
        print("| " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
