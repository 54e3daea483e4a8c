"""``python -m qops run``: a model through :class:`qops.onnx.InferenceSession`."""

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
    """Run ``args.model`` in a session; write each output to
    ``args.out/NAME.npy`` and print the session's steps by kind with their
    times per run."""
    from qops.errors import QopsError
    from qops.onnx import InferenceSession

    try:
        inputs = _read_inputs(args.input)
        session = InferenceSession(args.model, n_threads=getattr(args, "n_threads", None),
                                   fuse=not getattr(args, "no_fuse", False))
    except (OSError, ValueError, QopsError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    missing = [arg.name for arg in session.get_inputs() if arg.name not in inputs]
    if missing:
        print(f"error: the model needs --input for {', '.join(missing)}", file=sys.stderr)
        return 2
    feeds = {arg.name: inputs[arg.name] for arg in session.get_inputs()}
    repeat = max(1, args.repeat)
    try:
        if repeat > 1:
            session.run(None, feeds)  # warm-up: first-call planning is not timed
        start = time.perf_counter()
        for _ in range(repeat):
            outputs = session.run(None, feeds)
        total = (time.perf_counter() - start) / repeat
    except QopsError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    os.makedirs(args.out, exist_ok=True)
    for arg, value in zip(session.get_outputs(), outputs):
        path = os.path.join(args.out, _safe_name(arg.name) + ".npy")
        np.save(path, value)
        print(f"{arg.name}: {value.dtype} {tuple(value.shape)} -> {path}", file=stream)
    kinds = {}
    for step in session.steps:
        kinds[step.kind] = kinds.get(step.kind, 0) + 1
    print(f"\n{len(session.steps)} prepared calls "
          f"({'fused' if not getattr(args, 'no_fuse', False) else 'as written'}):", file=stream)
    print(f"{'kind':<40} {'calls':>6}", file=stream)
    for kind, count in sorted(kinds.items(), key=lambda item: -item[1]):
        print(f"{kind:<40} {count:>6}", file=stream)
    runs = f"{repeat} run{'s' if repeat > 1 else ''}{', after a warm-up' if repeat > 1 else ''}"
    print(f"\nms per run ({runs}): {total * 1e3:.3f}", file=stream)
    return 0
