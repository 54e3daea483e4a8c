"""A model's steps in qops beside onnxruntime's nodes, measured in one process.

``python benchmarks/node_times.py MODEL [--rounds 6] [--runs 40] [--threads 2] [--nodes]``
builds an example model (``qops.onnx.examples``, e.g.
``mobilenet_v2-qdq-per-tensor``) and alternates rounds of the two sides.  A
round of onnxruntime runs the model ``--runs`` times with its profiler on
(each node's kernel time), then as many times with it off (the whole run),
and ends its sessions before qops runs (their idle workers spin); a round of
qops runs its session the same number of times, each step timed in the run
and called again at once (best of three) on the same operands
(``benchmarks/session_steps.py``), then whole runs.  Each figure is the
best over every run of every round.

It prints the time by kind of step (pointwise convolutions, depthwise ones,
other convolutions, adds, the rest) for onnxruntime's nodes, qops' steps in
the run and qops' steps called again at once, the sums and the whole runs'
best times; with ``--nodes``, every step.  Steps and nodes pair by the
model's node names (onnxruntime's QDQ fusion keeps the Conv's name with a
``_token_N`` suffix).  The profiler's own cost per node is in onnxruntime's
sums, not in its whole runs.  Run it under ``benchmarks/avx2_cpu.py`` for
an AVX2-only CPU on both sides.
"""

from __future__ import annotations

import argparse
import collections
import gc
import json
import os
import re
import tempfile

import numpy as np

from qops.onnx import InferenceSession, examples
from onnx_reference import best_time as _whole_runs
from session_steps import step_times


def kind_of(name):
    """The kind of a node by its example name."""
    if "depthwise" in name:
        return "depthwise convolutions"
    if re.search(r"expand|project|\.conv3$|\.conv1$|downsample|features\.18\.conv", name):
        return "pointwise convolutions"
    if "conv" in name:
        return "other convolutions"
    if name.endswith("add") or ".add" in name:
        return "adds"
    return "the rest"


def onnxruntime_round(model_bytes, feeds, threads, runs):
    """({node name: best kernel seconds}, best whole-run seconds)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    with tempfile.TemporaryDirectory() as directory:
        options.enable_profiling = True
        options.profile_file_prefix = os.path.join(directory, "profile")
        session = ort.InferenceSession(model_bytes, options, providers=["CPUExecutionProvider"])
        for _ in range(runs):
            session.run(None, feeds)
        with open(session.end_profiling()) as handle:
            events = json.load(handle)
        del session
    nodes = {}
    for event in events:
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
            name = re.sub(r"_token_\d+$", "", event["name"][:-len("_kernel_time")])
            nodes[name] = min(nodes.get(name, float("inf")), event["dur"] * 1e-6)
    options.enable_profiling = False
    session = ort.InferenceSession(model_bytes, options, providers=["CPUExecutionProvider"])
    whole = _whole_runs(lambda: session.run(None, feeds), runs)
    del session
    gc.collect()
    return nodes, whole


def qops_round(session, feeds, threads, runs):
    """({step name: best seconds in the run}, {... called again at once},
    best whole-run seconds)."""
    # Three calls again: the first may find no free buffer of its output's size.
    steps, in_run, again = step_times(session, feeds, runs, threads, repeats=3)
    names = [step.label.split(" (")[0].removeprefix("node ") for step in steps]
    whole = _whole_runs(lambda: session.run(None, feeds), runs)
    return dict(zip(names, in_run)), dict(zip(names, again)), whole


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="an example model's name, e.g. mobilenet_v2-qdq-per-tensor")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--nodes", action="store_true", help="print every step")
    arguments = parser.parse_args()
    model = examples.by_name(arguments.model).build(0)
    feeds = examples.random_inputs(model, np.random.default_rng(1))
    model_bytes = model.SerializeToString()
    session = InferenceSession(model, arguments.threads)
    best = collections.defaultdict(lambda: collections.defaultdict(lambda: float("inf")))
    whole = {"onnxruntime": float("inf"), "qops": float("inf")}
    for _ in range(arguments.rounds):
        nodes, seconds = onnxruntime_round(model_bytes, feeds, arguments.threads, arguments.runs)
        whole["onnxruntime"] = min(whole["onnxruntime"], seconds)
        for name, value in nodes.items():
            best["onnxruntime"][name] = min(best["onnxruntime"][name], value)
        in_run, again, seconds = qops_round(session, feeds, arguments.threads, arguments.runs)
        whole["qops"] = min(whole["qops"], seconds)
        for column, values in (("in the run", in_run), ("again", again)):
            for name, value in values.items():
                best[column][name] = min(best[column][name], value)
    columns = ("onnxruntime", "in the run", "again")
    paired = [name for name in best["in the run"] if name in best["onnxruntime"]]
    totals = collections.defaultdict(lambda: [0.0, 0.0, 0.0])
    for name in paired:
        for index, column in enumerate(columns):
            totals[kind_of(name)][index] += best[column][name]
    print(f"{arguments.model}, {arguments.threads} threads, best of {arguments.rounds} rounds "
          f"of {arguments.runs} runs; microseconds")
    print(f"{'':26s} {'onnxruntime':>12s} {'qops in run':>12s} {'qops again':>12s}")
    for kind, values in sorted(totals.items(), key=lambda item: -item[1][0]):
        print(f"{kind:26s} " + " ".join(f"{value * 1e6:12.0f}" for value in values))
    sums = [sum(values[index] for values in totals.values()) for index in range(3)]
    print(f"{'paired steps, summed':26s} " + " ".join(f"{value * 1e6:12.0f}" for value in sums))
    print(f"{'whole runs':26s} {whole['onnxruntime'] * 1e6:12.0f} {whole['qops'] * 1e6:12.0f}")
    unpaired = [name for name in best["in the run"] if name not in best["onnxruntime"]]
    if unpaired:
        print(f"qops steps without a node of that name: {', '.join(unpaired)}")
    if arguments.nodes:
        for name in paired:
            print(f"  {name:30s} " + " ".join(f"{best[column][name] * 1e6:8.1f}"
                                              for column in columns))


if __name__ == "__main__":
    main()
