"""``python -m qops bench --n-bits``: MatMulNBits against onnxruntime's.

Each case is one weight shape (K x N), block size, zero points or none, rows
of A and accuracy level.  qops runs a compiled operator (B interleaved once,
as onnxruntime prepacks its initializer); onnxruntime runs a one-node model
whose B, scales and zero points are initializers, at the same accuracy
level.  Rounds alternate the two sides, each session made afresh and freed
after its timing (its idle workers spin), and each side's best round counts.
qops' results are checked against the rule's NumPy statement at the case's
accuracy level, bit for bit, on the case's first 64 columns (the whole
product is slow in NumPy).

For one row of A the table also gives the weight bytes streamed per second
(B, scales and zero points) beside a plain read of the same bytes.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time

import numpy as np

from qops.cli.bench import best_time, machine, machine_line

#: (K, N) of a language model's layers: square, up-projection, down-projection.
SHAPES = ((4096, 4096), (4096, 11008), (11008, 4096))
BLOCKS = (32, 128)
ROWS = (1, 128)
LEVELS = (0, 4)


@dataclasses.dataclass(frozen=True)
class NBitsCase:
    k: int
    n: int
    block_size: int
    zero_points: bool
    rows: int
    level: int
    bits: int = 4

    @property
    def name(self):
        zero = "zp" if self.zero_points else "sym"
        return (f"{self.k}x{self.n} b{self.block_size} {zero} m{self.rows} "
                f"level{self.level}")

    @property
    def k_blocks(self):
        return -(-self.k // self.block_size)

    def weight_bytes(self):
        blob = self.block_size * self.bits // 8
        packed_zero = -(-self.k_blocks * self.bits // 8) if self.zero_points else 0
        return self.n * (self.k_blocks * blob + self.k_blocks * 4 + packed_zero)


def cases(shapes=SHAPES, blocks=BLOCKS, rows=ROWS, levels=LEVELS, zero_points=(False, True)):
    return tuple(NBitsCase(k, n, block, zero, m, level) for k, n in shapes for block in blocks
                 for zero in zero_points for m in rows for level in levels)


def operands(case, seed=0):
    rng = np.random.default_rng(seed)
    blob = case.block_size * case.bits // 8
    b = rng.integers(0, 256, (case.n, case.k_blocks, blob), dtype=np.uint8)
    scales = (rng.random((case.n, case.k_blocks)) * 0.02 + 0.001).astype(np.float32)
    zero_points = (rng.integers(0, 256, (case.n, -(-case.k_blocks * case.bits // 8)),
                                dtype=np.uint8) if case.zero_points else None)
    a = rng.standard_normal((case.rows, case.k)).astype(np.float32)
    return a, b, scales, zero_points


def _model(case, b, scales, zero_points):
    from onnx import TensorProto, helper, numpy_helper

    initializers = [numpy_helper.from_array(b, "B"), numpy_helper.from_array(scales, "scales")]
    names = ["A", "B", "scales"]
    if zero_points is not None:
        initializers.append(numpy_helper.from_array(zero_points, "zero_points"))
        names.append("zero_points")
    node = helper.make_node("MatMulNBits", names, ["Y"], domain="com.microsoft", K=case.k,
                            N=case.n, bits=case.bits, block_size=case.block_size,
                            accuracy_level=case.level)
    graph = helper.make_graph(
        [node], "n_bits", [helper.make_tensor_value_info("A", TensorProto.FLOAT, [None, case.k])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)], initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                   helper.make_opsetid("com.microsoft", 1)])


def _onnxruntime_session(model_bytes, threads):
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    return onnxruntime.InferenceSession(model_bytes, options,
                                        providers=["CPUExecutionProvider"])


def _rule_holds(case, compiled, b, scales, zero_points):
    """qops' compiled operator equals the rule's NumPy statement on the
    case's first 64 columns (a product of the same K, blocks and zero
    points), bit for bit."""
    import qops

    columns = min(case.n, 64)
    a = np.random.default_rng(1).standard_normal((2, case.k)).astype(np.float32)
    zero = None if zero_points is None else zero_points[:columns]
    got = qops.matmul_n_bits(a, b[:columns], scales[:columns], zero, k=case.k, n=columns,
                             bits=case.bits, block_size=case.block_size,
                             accuracy_level=case.level)
    want = qops.reference.matmul_n_bits(a, b[:columns], scales[:columns], zero, k=case.k,
                                        n=columns, bits=case.bits, block_size=case.block_size,
                                        accuracy_level=case.level)
    return bool(np.array_equal(got.view(np.uint32), want.view(np.uint32))) and bool(
        np.array_equal(compiled(a)[:, :columns], got))


def run_case(case, threads=2, budget=0.3, rounds=3):
    import qops

    a, b, scales, zero_points = operands(case)
    compiled = qops.compile("MatMulNBits", b=b, scales=scales, zero_points=zero_points, k=case.k,
                            n=case.n, bits=case.bits, block_size=case.block_size,
                            accuracy_level=case.level)
    exact = _rule_holds(case, compiled, b, scales, zero_points)
    model_bytes = _model(case, b, scales, zero_points).SerializeToString()
    share = budget / max(rounds, 1)
    qops_best = ours_read = theirs_best = math.inf
    weights = np.concatenate([b.reshape(-1), scales.reshape(-1).view(np.uint8)])
    for _ in range(max(rounds, 1)):
        qops_best = min(qops_best, best_time(lambda: compiled(a, n_threads=threads), share))
        if case.rows == 1:
            ours_read = min(ours_read, best_time(lambda: weights.max(), share))
        session = _onnxruntime_session(model_bytes, threads)
        session.run(None, {"A": a})
        theirs_best = min(theirs_best, best_time(lambda: session.run(None, {"A": a}), share))
        del session
    gigabytes = case.weight_bytes() / 1e9
    return {"case": case.name, "onnxruntime ms": theirs_best * 1e3, "qops ms": qops_best * 1e3,
            "speed": theirs_best / qops_best, "rule": exact,
            "qops GB/s": gigabytes / qops_best if case.rows == 1 else None,
            "read GB/s": gigabytes / ours_read if case.rows == 1 else None}


def table(rows, info=None):
    lines = []
    if info is not None:
        lines += [machine_line(info), ""]
    lines += ["| case | onnxruntime ms | qops ms | speed | rule holds | qops GB/s | read GB/s |",
              "|---|---|---|---|---|---|---|"]
    for row in rows:
        gb = "" if row["qops GB/s"] is None else f"{row['qops GB/s']:.1f}"
        read = "" if row["read GB/s"] is None else f"{row['read GB/s']:.1f}"
        lines.append(f"| {row['case']} | {row['onnxruntime ms']:.3f} | {row['qops ms']:.3f} | "
                     f"{row['speed']:.2f}x | {'yes' if row['rule'] else 'NO'} | {gb} | {read} |")
    return "\n".join(lines)


def select(all_cases, words):
    """The cases ``words`` pick: each word is one word of the case names
    (``4096x11008``, ``b32``, ``zp``, ``m1``, ``level4``); words in the same
    place of the names are alternatives, words in different places must all
    hold (``m1 level0 level4``: one row at either level).  No words, every
    case.  A word no name has is a ``SystemExit`` naming the words there
    are."""
    places = {}
    for case in all_cases:
        for place, word in enumerate(case.name.split()):
            places.setdefault(word, place)
    unknown = [word for word in words if word not in places]
    if unknown:
        raise SystemExit(f"qops bench --n-bits: no case has the word(s) {', '.join(unknown)}; "
                         f"the words are {', '.join(places)}")
    wanted = {}
    for word in words:
        wanted.setdefault(places[word], set()).add(word)
    return tuple(case for case in all_cases
                 if all(case.name.split()[place] in alternatives
                        for place, alternatives in wanted.items()))


def main(args, progress=sys.stderr):
    selected = select(cases(), args.cases or ())
    info = machine(args.threads)
    rows = []
    for index, case in enumerate(selected):
        print(f"[{index + 1}/{len(selected)}] {case.name}", file=progress, flush=True)
        started = time.perf_counter()
        rows.append(run_case(case, args.threads, args.budget, args.rounds))
        print(f"    {time.perf_counter() - started:.1f} s", file=progress, flush=True)
    print(table(rows, info))
    return 0
