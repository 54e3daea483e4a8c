"""Where a model session's time goes: each prepared call timed on its own.

``python benchmarks/session_steps.py MODEL [--rounds 10] [--threads 2] [--top 15]
[--isolated]`` builds an example model (``qops.onnx.examples``, e.g.
``bert_layer-qoperator-per-channel``), runs its session ``--rounds`` times
step by step, and prints each kind of step's total (the best round of each
step) and the slowest steps.  With ``--isolated`` each step is also timed
called again at once on the same operands (its weights, code and operands
then in cache): the difference from its time in the run is what the run's
order costs it, as the steps before it push its data out of the caches (the
repeats themselves leave the next step's operands warmer than a plain run
would: compare totals of runs without it).  Run it under
``benchmarks/avx2_cpu.py`` or with ``QOPS_SIMD`` to see a lower variant.
"""

from __future__ import annotations

import argparse
import collections
import time

import numpy as np

from qops.onnx import InferenceSession, examples
from qops.threads import threads_in_context, workers_kept_spinning


def _timed(call, arguments, n_threads):
    start = time.perf_counter()
    results = call(arguments, n_threads)
    return time.perf_counter() - start, results


def step_times(session, feeds, rounds, n_threads, repeats=0):
    """The best time of each of the session's steps over ``rounds`` runs,
    and with ``repeats`` its best of as many calls made again at once.

    Reads the session's prepared program (its constants and the feeds'
    checks are the session's own), frees each value after its last reader
    and keeps the pool's workers spinning, as :meth:`InferenceSession.run`
    does.  Returns the steps, their best times in the run and their best
    times repeated (infinite without ``repeats``)."""
    program = session._program
    best = [float("inf")] * len(program)
    repeated = [float("inf")] * len(program)
    for _ in range(rounds):
        values = dict(session._constants_env)
        values.update(session._checked_feeds(feeds))
        with threads_in_context(n_threads), workers_kept_spinning(n_threads > 1):
            for index, (arguments_of, call, outputs, frees, _) in enumerate(program):
                arguments = arguments_of(values)
                seconds, results = _timed(call, arguments, n_threads)
                best[index] = min(best[index], seconds)
                for _ in range(repeats):
                    repeated[index] = min(repeated[index], _timed(call, arguments, n_threads)[0])
                values.update(zip(outputs, results))
                for name in frees:
                    values.pop(name, None)
    return [entry[4] for entry in program], best, repeated


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="an example model's name, e.g. mobilenet_v2-qdq-per-channel")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--isolated", action="store_true",
                        help="also time each step called again at once, its data in cache")
    arguments = parser.parse_args()
    model = examples.by_name(arguments.model).build(0)
    session = InferenceSession(model, arguments.threads)
    feeds = examples.random_inputs(model, np.random.default_rng(1))
    steps, best, repeated = step_times(session, feeds, arguments.rounds, arguments.threads,
                                       repeats=3 if arguments.isolated else 0)
    totals, counts = collections.Counter(), collections.Counter()
    for step, seconds in zip(steps, best):
        totals[step.kind] += seconds
        counts[step.kind] += 1
    print(f"{arguments.model}: {sum(best) * 1e3:.2f} ms in {len(steps)} steps "
          f"({arguments.threads} threads, best of {arguments.rounds} rounds per step)")
    for kind, seconds in totals.most_common():
        print(f"  {kind:40s} {counts[kind]:4d} steps {seconds * 1e3:8.2f} ms")
    if arguments.isolated:
        print(f"  called again at once: {sum(repeated) * 1e3:.2f} ms in all")
    print("slowest steps" + (" (in the run, called again at once):" if arguments.isolated else ":"))
    for index in sorted(range(len(steps)), key=lambda i: -best[i])[:arguments.top]:
        again = f" {repeated[index] * 1e3:7.3f} ms" if arguments.isolated else ""
        print(f"  {best[index] * 1e3:7.3f} ms{again}  {steps[index].kind:32s} {steps[index].label}")


if __name__ == "__main__":
    main()
