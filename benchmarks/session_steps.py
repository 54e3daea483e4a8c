"""Where a model session's time goes: each prepared call timed on its own.

``python benchmarks/session_steps.py MODEL [--rounds 10] [--threads 2] [--top 15]``
builds an example model (``qops.onnx.examples``, e.g.
``bert_layer-qoperator-per-channel``), runs its session ``--rounds`` times
step by step, and prints each kind of step's total (the best round of each
step) and the slowest steps.  Run it under ``benchmarks/avx2_cpu.py`` or with
``QOPS_SIMD`` to see a lower variant.
"""

from __future__ import annotations

import argparse
import collections
import time

import numpy as np

from qops.onnx import InferenceSession, examples
from qops.threads import threads_in_context, workers_kept_spinning


def step_times(session, feeds, rounds, n_threads):
    """The best time of each of the session's steps over ``rounds`` runs.

    Reads the session's prepared program (its constants and the feeds'
    checks are the session's own) and keeps the pool's workers spinning, as
    :meth:`InferenceSession.run` does."""
    program = session._program
    best = [float("inf")] * len(program)
    for _ in range(rounds):
        values = dict(session._constants_env)
        values.update(session._checked_feeds(feeds))
        with threads_in_context(n_threads), workers_kept_spinning(n_threads > 1):
            for index, (arguments_of, call, outputs, _, _) in enumerate(program):
                start = time.perf_counter()
                results = call(arguments_of(values), n_threads)
                best[index] = min(best[index], time.perf_counter() - start)
                values.update(zip(outputs, results))
    return [entry[4] for entry in program], best


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="an example model's name, e.g. mobilenet_v2-qdq-per-channel")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--top", type=int, default=15)
    arguments = parser.parse_args()
    model = examples.by_name(arguments.model).build(0)
    session = InferenceSession(model, arguments.threads)
    feeds = examples.random_inputs(model, np.random.default_rng(1))
    steps, best = step_times(session, feeds, arguments.rounds, arguments.threads)
    totals, counts = collections.Counter(), collections.Counter()
    for step, seconds in zip(steps, best):
        totals[step.kind] += seconds
        counts[step.kind] += 1
    print(f"{arguments.model}: {sum(best) * 1e3:.2f} ms in {len(steps)} steps "
          f"({arguments.threads} threads, best of {arguments.rounds} rounds per step)")
    for kind, seconds in totals.most_common():
        print(f"  {kind:40s} {counts[kind]:4d} steps {seconds * 1e3:8.2f} ms")
    print("slowest steps:")
    for index in sorted(range(len(steps)), key=lambda i: -best[i])[:arguments.top]:
        print(f"  {best[index] * 1e3:7.3f} ms  {steps[index].kind:32s} {steps[index].label}")


if __name__ == "__main__":
    main()
