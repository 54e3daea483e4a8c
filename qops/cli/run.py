"""``python -m qops run``: a model through the reference evaluator with qops' operators."""

from __future__ import annotations

import os
import sys
import time

import numpy as np


def _read_inputs(assignments):
    inputs = {}
    for text in assignments:
        if "=" not in text:
            raise ValueError(f"--input takes NAME=FILE.npy, not {text!r}")
        name, path = text.split("=", 1)
        inputs[name] = np.load(path, allow_pickle=False)
    return inputs


def _safe_name(name):
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name) or "output"


def run_model(args, stream=sys.stdout):
    """Run ``args.model`` with qops' operators; write each output to
    ``args.out/NAME.npy`` and print a per-operator timing summary."""
    import onnx
    from onnx.reference import ReferenceEvaluator

    from qops.onnx import run_node
    from qops.onnx._reference import operator_classes

    try:
        model = onnx.load(args.model)
        inputs = _read_inputs(args.input)
    except (OSError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    timings = {}
    evaluator = ReferenceEvaluator(model, new_ops=operator_classes(run_node, timings))
    missing = [name for name in evaluator.input_names if name not in inputs]
    if missing:
        print(f"error: the model needs --input for {', '.join(missing)}", file=sys.stderr)
        return 2
    feeds = {name: inputs[name] for name in evaluator.input_names}
    repeat = max(1, args.repeat)
    if repeat > 1:
        evaluator.run(None, feeds)  # warm-up: first-call validation and loading are not timed
        timings.clear()
    start = time.perf_counter()
    for _ in range(repeat):
        outputs = evaluator.run(None, feeds)
    total = (time.perf_counter() - start) / repeat
    os.makedirs(args.out, exist_ok=True)
    for name, value in zip(evaluator.output_names, outputs):
        path = os.path.join(args.out, _safe_name(name) + ".npy")
        np.save(path, np.asarray(value))
        print(f"{name}: {np.asarray(value).dtype} {tuple(np.shape(value))} -> {path}", file=stream)
    print(f"\nper run ({repeat} run{'s' if repeat > 1 else ''}{', after a warm-up' if repeat > 1 else ''}):",
          file=stream)
    print(f"{'operator':<24} {'nodes':>6} {'ms':>10}", file=stream)
    for op_type, (calls, seconds) in sorted(timings.items(), key=lambda item: -item[1][1]):
        print(f"{op_type + ' (qops)':<24} {calls // repeat:>6} {seconds / repeat * 1e3:>10.3f}",
              file=stream)
    rest = total - sum(seconds for _, seconds in timings.values()) / repeat
    print(f"{'other operators':<24} {'':>6} {rest * 1e3:>10.3f}", file=stream)
    print(f"{'total':<24} {'':>6} {total * 1e3:>10.3f}", file=stream)
    return 0
