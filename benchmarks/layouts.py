"""A session with channels-last tensors between its convolutions against one
that keeps every tensor channels-first, rounds alternating in one process.

``python benchmarks/layouts.py MODEL [MODEL ...] [--rounds 8] [--budget 0.3] [--threads 2]``
builds each example model (``qops.onnx.examples``, e.g.
``mobilenet_v2-qdq-per-tensor``, or an architecture name for all its
formats), checks that both sessions give the same bytes, and prints each
side's best time and the ratio (channels-first over channels-last).
"""

from __future__ import annotations

import argparse

import numpy as np

from qops.cli.bench import best_time
from qops.onnx import InferenceSession, examples


def compare(example, rounds, budget, n_threads):
    model = example.build(0)
    feeds = examples.random_inputs(model, np.random.default_rng(1))
    sessions = {layout: InferenceSession(model, n_threads, channels_last=layout)
                for layout in (False, True)}
    first, last = (sessions[layout].run(None, feeds) for layout in (False, True))
    if not all(np.array_equal(a, b) for a, b in zip(first, last)):
        raise SystemExit(f"{example.name}: the two sessions differ")
    best = dict.fromkeys(sessions, float("inf"))
    for _ in range(rounds):
        for layout, session in sessions.items():
            best[layout] = min(best[layout],
                               best_time(lambda s=session: s.run(None, feeds), budget))
    steps = sum(1 for step in sessions[True].steps if any(step.channels_last))
    return best[False], best[True], steps, len(sessions[True].steps)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--budget", type=float, default=0.3)
    parser.add_argument("--threads", type=int, default=2)
    arguments = parser.parse_args()
    chosen = [e for e in examples.EXAMPLES
              if e.name in arguments.models or e.architecture in arguments.models]
    print("| model | channels-first ms | channels-last ms | ratio | steps channels-last |")
    print("|---|---|---|---|---|")
    for example in chosen:
        first, last, steps, total = compare(example, arguments.rounds, arguments.budget,
                                            arguments.threads)
        print(f"| {example.name} | {first * 1e3:.2f} | {last * 1e3:.2f} | {first / last:.2f}x "
              f"| {steps} of {total} |", flush=True)


if __name__ == "__main__":
    main()
