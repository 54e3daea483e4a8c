"""``python -m qops bench --models``: whole quantized models, a
:class:`qops.onnx.InferenceSession` against onnxruntime's.

The example models (:mod:`qops.onnx.examples`) in each format, full size
(``--small`` for the small versions).  Rounds alternate between the two
sides; qops is timed while no onnxruntime session exists (its idle workers
spin), each side's best round is kept, and the ratio is onnxruntime's time
over qops'.  'exact' says whether qops' output equals onnxruntime's fused
graph evaluated node by node by ``onnx.reference`` with qops' quantized
operators (for the float output of the BERT layer: within 1% of its largest
magnitude).  The last line is the session's cost per node: a chain of 101
QLinearAdd nodes on 1 x 8 tensors minus a chain of one, over 100.
"""

from __future__ import annotations

import gc
import logging
import sys

import numpy as np

from qops.cli.bench import best_time


def _onnxruntime_time(model_bytes, feeds, threads, budget):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(model_bytes, options, providers=["CPUExecutionProvider"])
    seconds = best_time(lambda: session.run(None, feeds), budget)
    output = session.run(None, feeds)[0]
    del session
    gc.collect()
    return seconds, output


def _qops_time(session, feeds, budget):
    return best_time(lambda: session.run(None, feeds), budget)


def _exactness(example, model, feeds, actual):
    from onnx.reference import ReferenceEvaluator

    import qops.onnx
    from qops.onnx import examples

    if example.fmt == "dynamic":
        (literal,) = qops.onnx.InferenceSession(model, fuse=False).run(None, feeds)
        return "yes" if np.array_equal(actual, literal) else "no"
    fused = examples.optimized_by_onnxruntime(model)
    (expected,) = ReferenceEvaluator(fused, new_ops=qops.onnx.reference_ops()).run(None, feeds)
    if example.architecture == "bert_layer":
        close = np.abs(actual - expected).max() <= 1e-2 * np.abs(expected).max()
        return "within 1%" if close else "no"
    return "yes" if np.array_equal(actual, expected) else "no"


def add_chain(length):
    """A model of ``length`` QLinearAdd nodes on 1 x 8 uint8 tensors."""
    from onnx import TensorProto, helper, numpy_helper

    constants = [numpy_helper.from_array(np.float32(0.05), "scale"),
                 numpy_helper.from_array(np.uint8(128), "zero"),
                 numpy_helper.from_array(np.full((1, 8), 130, np.uint8), "b")]
    nodes, value = [], "x"
    for index in range(length):
        output = f"y{index}"
        nodes.append(helper.make_node("QLinearAdd", [value, "scale", "zero", "b", "scale",
                                                     "zero", "scale", "zero"], [output],
                                      domain="com.microsoft"))
        value = output
    graph = helper.make_graph(nodes, "chain",
                              [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 8])],
                              [helper.make_tensor_value_info(value, TensorProto.UINT8, [1, 8])],
                              initializer=constants)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 10
    return model


def node_overhead(threads, budget, rounds):
    """Microseconds per node of a session and of onnxruntime: (chain of
    101 adds - chain of 1) / 100, each side's best round."""
    import qops.onnx

    feeds = {"x": np.full((1, 8), 100, np.uint8)}
    long_model, short_model = add_chain(101), add_chain(1)
    qops_long = qops.onnx.InferenceSession(long_model, n_threads=threads)
    qops_short = qops.onnx.InferenceSession(short_model, n_threads=threads)
    best = {"qops": [float("inf")] * 2, "onnxruntime": [float("inf")] * 2}
    for _ in range(rounds):
        for position, session in enumerate((qops_long, qops_short)):
            best["qops"][position] = min(best["qops"][position],
                                         _qops_time(session, feeds, budget))
        for position, model in enumerate((long_model, short_model)):
            seconds, _ = _onnxruntime_time(model.SerializeToString(), feeds, threads, budget)
            best["onnxruntime"][position] = min(best["onnxruntime"][position], seconds)
    return {side: (values[0] - values[1]) / 100 * 1e6 for side, values in best.items()}


def run(names=None, small=False, threads=2, budget=0.5, rounds=3, progress=sys.stderr):
    """One row per example model: (name, onnxruntime ms, qops ms, speed, exact)."""
    import qops.onnx
    from qops.onnx import examples

    logging.disable(logging.WARNING)
    chosen = [e for e in examples.EXAMPLES if names is None or e.name in names
              or e.architecture in names]
    rows = []
    for index, example in enumerate(chosen):
        print(f"[{index + 1}/{len(chosen)}] {example.name}", file=progress, flush=True)
        model = example.build(0, small=small)
        feeds = examples.random_inputs(model, 1)
        model_bytes = model.SerializeToString()
        session = qops.onnx.InferenceSession(model, n_threads=threads)
        actual = session.run(None, feeds)[0]
        best_qops = best_peer = float("inf")
        for _ in range(rounds):
            best_qops = min(best_qops, _qops_time(session, feeds, budget))
            seconds, _ = _onnxruntime_time(model_bytes, feeds, threads, budget)
            best_peer = min(best_peer, seconds)
        rows.append((example.name, best_peer * 1e3, best_qops * 1e3, best_peer / best_qops,
                     _exactness(example, model, feeds, actual)))
    return rows


def table(rows, overhead=None, threads=2):
    lines = ["| model | onnxruntime ms | qops ms | speed | exact |",
             "|---|---|---|---|---|"]
    for name, peer, ours, speed, exact in rows:
        lines.append(f"| {name} | {peer:.2f} | {ours:.2f} | {speed:.2f}x | {exact} |")
    if overhead is not None:
        lines.append("")
        lines.append(f"Per node ({threads} threads; chain of 101 QLinearAdd on 1 x 8 minus a "
                     f"chain of 1, over 100): qops {overhead['qops']:.1f} us, onnxruntime "
                     f"{overhead['onnxruntime']:.1f} us.")
    return "\n".join(lines)


def main(args):
    from qops.cli.bench import machine_line, machine

    names = set(args.cases) if getattr(args, "cases", None) else None
    small = bool(getattr(args, "small", False))
    print(machine_line(machine(args.threads)))
    rows = run(names, small=small, threads=args.threads, budget=args.budget,
               rounds=args.rounds)
    overhead = node_overhead(args.threads, min(args.budget, 0.2), args.rounds)
    print(table(rows, overhead, args.threads))
    return 0 if all(row[4] != "no" for row in rows) else 1
