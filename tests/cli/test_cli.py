"""``python -m qops``: info, ops, validate (command line and JSON)."""

import json
import subprocess
import sys

import numpy as np
import pytest

import qops
from qops import registry


def run(*args, stdin=None):
    return subprocess.run([sys.executable, "-m", "qops", *args], capture_output=True, text=True,
                          input=stdin, timeout=120)


def test_help_lists_every_command():
    result = run("--help")
    assert result.returncode == 0
    for command in ("info", "ops", "validate"):
        assert command in result.stdout


def test_info_reports_openmp_and_threads():
    result = run("info")
    assert result.returncode == 0
    assert "openmp" in result.stdout and "threads" in result.stdout
    expected = "yes" if qops.config.config()["openmp"] else "no"
    line = next(l for l in result.stdout.splitlines() if l.startswith("openmp"))
    assert line.split()[-1] == expected


def test_ops_lists_every_registry_operator():
    result = run("ops")
    assert result.returncode == 0
    for op in registry.operators():
        assert op.name in result.stdout
        assert f"qops.{op.function}" in result.stdout


@pytest.mark.parametrize("op", registry.operators(), ids=lambda op: op.name)
def test_ops_name_prints_every_support_row(op):
    result = run("ops", op.name)
    assert result.returncode == 0
    for row in op.versions:
        for slot in op.slots:
            support = row.tensor(slot.name)
            # The kind is the row's: an optional slot a level lists as an input reads "Input".
            # The slots of one array share its row, as the page has it, and
            # each is listed with its own types below the table.
            name, kind = ((slot.array, "Array of inputs") if slot.array
                          else (slot.source_name, support.kind_text(slot)))
            assert any(l.split() and l.split()[0] == name
                       and support.dims_text() in l and ", ".join(support.dtypes) in l
                       and f" {kind} " in f" {l} "
                       for l in result.stdout.splitlines()), (row.version, slot.name)
            if slot.array:
                assert f"{slot.source_name} ({slot.name}): {', '.join(support.dtypes)}" \
                    in result.stdout


def test_ops_at_a_feature_level_prints_only_that_row():
    result = run("ops", "QUANTIZED_LINEAR_MATRIX_MULTIPLY", "--feature-level", "2_1")
    assert result.returncode == 0
    assert "DML_FEATURE_LEVEL_2_1 and above" in result.stdout
    assert "DML_FEATURE_LEVEL_4_0" not in result.stdout
    newer = run("ops", "QUANTIZED_LINEAR_MATRIX_MULTIPLY", "--feature-level", "6_4").stdout
    assert "DML_FEATURE_LEVEL_4_0 and above" in newer and "2 to 4" in newer


def test_ops_rejects_a_mismatched_version_kind_and_unknown_names():
    assert run("ops", "QuantizeLinear", "--feature-level", "2_1").returncode == 2
    assert run("ops", "QUANTIZED_LINEAR_CONVOLUTION", "--opset", "13").returncode == 2
    result = run("ops", "NOT_AN_OPERATOR")
    assert result.returncode == 2 and "known operators" in result.stderr


def test_ops_opset_shows_the_types_of_that_opset():
    out19 = run("ops", "DequantizeLinear", "--opset", "19").stdout
    out21 = run("ops", "DequantizeLinear", "--opset", "21").stdout
    assert "INT4" not in out19 and "INT4" in out21


def test_validate_accepts_and_rejects_with_the_api_message():
    args = ["QUANTIZED_LINEAR_MATRIX_MULTIPLY", "a=uint8:2,3", "b=int8:3,4", "a_scale=0.5",
            "b_scale=0.25", "output_scale=1"]
    bad = run("validate", args[0], "--feature-level", "2_1", *args[1:])
    assert bad.returncode == 1
    with pytest.raises(qops.ValidationError) as error:
        qops.validate(args[0], feature_level="2_1", a=qops.TensorDesc("uint8", (2, 3)),
                      b=qops.TensorDesc("int8", (3, 4)), a_scale=0.5, b_scale=0.25, output_scale=1)
    assert bad.stdout.strip() == str(error.value)
    assert "a has 2 dimensions; DML_FEATURE_LEVEL_2_1 supports 4 (2 to 4 from DML_FEATURE_LEVEL_4_0)" \
        in bad.stdout
    good = run("validate", args[0], "--feature-level", "4_0", *args[1:])
    assert good.returncode == 0
    assert "(2, 4)" in good.stdout and "uint8" in good.stdout


def test_validate_attributes_on_the_command_line():
    base = ["validate", "QUANTIZED_LINEAR_CONVOLUTION", "input=uint8:1,4,9,9", "filter=int8:8,2,3,3",
            "input_scale=1", "filter_scale=float32:8", "output_scale=1"]
    good = run(*base, "group_count=2", "strides=2,2")
    assert good.returncode == 0, good.stdout + good.stderr
    assert "(1, 8, 4, 4)" in good.stdout  # (9 - 3) // 2 + 1 = 4
    bad = run(*base, "group_count=3")
    assert bad.returncode == 1 and "group_count" in bad.stdout


def test_validate_reads_json_from_a_file_and_stdin(tmp_path):
    call = {"operator": "QuantizeLinear", "opset": 19,
            "slots": {"x": {"dtype": "float32", "shape": [2, 3]}, "y_scale": 0.5},
            "attributes": {"output_dtype": "int4"}}
    path = tmp_path / "call.json"
    path.write_text(json.dumps(call))
    result = run("validate", "--json", str(path))
    assert result.returncode == 1
    assert "output_dtype" in result.stdout and "opset 21" in result.stdout
    call["opset"] = 21
    result = run("validate", "--json", "-", stdin=json.dumps(call))
    assert result.returncode == 0, result.stdout
    assert "int4" in result.stdout and "(2, 3)" in result.stdout


def test_validate_reports_unreadable_input():
    assert run("validate", "--json", "/nonexistent/call.json").returncode == 2
    assert run("validate").returncode == 2
    assert run("validate", "QuantizeLinear", "x=float32:two").returncode == 2


def _bench_table(path):
    """(machine line, header cells, {case: cells}) of a bench.md."""
    lines = path.read_text().splitlines()
    header = next(line for line in lines if line.startswith("| case"))
    names = [c.strip() for c in header.strip("|").split("|")]
    rows = {}
    for line in lines:
        if line.startswith("| ") and not line.startswith(("| case", "| geometric")):
            cells = [c.strip() for c in line.strip("|").split("|")]
            rows[cells[0]] = dict(zip(names, cells))
    return lines[0], names, rows


def test_bench_judges_every_case_against_the_exact_result(tmp_path):
    pytest.importorskip("onnxruntime")
    result = run("bench", "tiny_4", "attn_batched", "--budget", "0.01", "--out", str(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    first, names, rows = _bench_table(tmp_path / "bench.md")
    assert names[-2:] == ["exact", "ORT exact"]
    assert set(rows) == {"tiny_4", "attn_batched"}
    assert all(row["exact"] == "yes" for row in rows.values())
    # onnxruntime's exactness is reported, whatever it is on this CPU.
    assert all(row["ORT exact"] in ("yes", "no") for row in rows.values())
    # The machine it ran on, and the probe of the selected variant's peak.
    from qops.backends.native import variants as _simd
    assert first.startswith("Measured on ") and f"qops kernels {_simd.selected()}" in first
    from qops.backends.native.kernels import _peak_probes
    assert _peak_probes.probe(_simd.selected()).mix in first and " GOPS" in first
    assert float(rows["attn_batched"]["% peak"].rstrip("%")) > 0
    # onnxruntime's share of the same ceiling: the pairing's ratio is the
    # quotient of the two shares (to the cells' rounding).
    attn = rows["attn_batched"]
    ours, theirs = (float(attn[name].rstrip("%")) for name in ("% peak", "ORT const % peak"))
    ratio = float(attn["compiled vs ORT const"].rstrip("x"))
    assert theirs > 0 and ratio == pytest.approx(ours / theirs, rel=0.05, abs=0.02)
    assert rows["tiny_4"]["ORT const % peak"] != ""
    assert run("bench", "no_such_case").returncode == 2


def test_bench_times_onnx_reference_where_onnxruntime_has_no_kernel(tmp_path):
    """int32 sums requantized (opset 23) and the 6-bit floats (opset 28):
    qops exact, and onnx.reference timed and judged in onnxruntime's place."""
    pytest.importorskip("onnxruntime")
    cases = ["requantize_i32_i8_per_axis", "quantize_f32_float6e2m3",
             "dequantize_float6e3m2_f32_per_axis"]
    result = run("bench", *cases, "--budget", "0.01", "--rounds", "1", "--out", str(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    _, _, rows = _bench_table(tmp_path / "bench.md")
    assert all(rows[case]["exact"] == "yes" for case in cases)
    text = (tmp_path / "bench.md").read_text()
    for case in cases:
        line = next(line for line in text.splitlines() if line.startswith(f"{case}: onnx.reference"))
        assert "x its speed; onnx.reference's output " in line


def test_bench_runs_a_lower_variant_and_refuses_one_the_cpu_lacks(tmp_path):
    pytest.importorskip("onnxruntime")
    from qops.backends.native import variants as _simd
    result = run("bench", "tiny_4", "--budget", "0.01", "--simd", "portable", "--out",
                 str(tmp_path))
    assert result.returncode == 0, result.stderr
    first, _, rows = _bench_table(tmp_path / "bench.md")
    assert "qops kernels portable" in first and rows["tiny_4"]["exact"] == "yes"
    missing = [v for v in _simd.VARIANTS if v not in _simd.available()]
    for variant in missing + ["sse9"]:
        refused = run("bench", "tiny_4", "--simd", variant, "--out", str(tmp_path))
        assert refused.returncode == 2 and "this machine runs" in refused.stderr


def _bench_in_process(monkeypatch, tmp_path, case="attn_batched"):
    import argparse

    from qops.cli import bench as _bench

    monkeypatch.setattr(_bench, "machine", lambda threads: {
        "cpu": "test CPU", "instruction sets": ["portable"], "variant": "portable",
        "available": ["portable"], "threads": threads, "peak_gops": 1.0, "peak_mix": "none",
        "dot product": None})
    args = argparse.Namespace(cases=[case], threads=1, budget=0.001, out=str(tmp_path), simd=None,
                              rounds=_bench.ROUNDS)
    return _bench, args


def test_bench_exit_status_ignores_an_inexact_onnxruntime(monkeypatch, tmp_path):
    """A peer off by a saturated pair sum (as onnxruntime without VNNI) is
    reported, and the run still succeeds: the status is qops' alone."""
    pytest.importorskip("onnxruntime")
    bench, args = _bench_in_process(monkeypatch, tmp_path)
    real = bench.onnxruntime_runner

    def saturating(*arguments, **keywords):
        run_session = real(*arguments, **keywords)
        return lambda: run_session() ^ np.uint8(1)

    monkeypatch.setattr(bench, "onnxruntime_runner", saturating)
    assert bench.main(args) == 0
    _, _, rows = _bench_table(tmp_path / "bench.md")
    assert rows["attn_batched"]["exact"] == "yes" and rows["attn_batched"]["ORT exact"] == "no"


def test_bench_reports_an_onnxruntime_that_cannot_run(monkeypatch, tmp_path):
    pytest.importorskip("onnxruntime")
    bench, args = _bench_in_process(monkeypatch, tmp_path)

    def failing(*arguments, **keywords):
        raise RuntimeError("[ONNXRuntimeError] NOT_IMPLEMENTED")

    monkeypatch.setattr(bench, "onnxruntime_runner", failing)
    assert bench.main(args) == 0
    _, _, rows = _bench_table(tmp_path / "bench.md")
    assert rows["attn_batched"]["exact"] == "yes" and rows["attn_batched"]["ORT exact"] == "error"
    assert rows["attn_batched"]["ORT ms"] == ""


def test_bench_exit_status_fails_when_qops_is_not_exact(monkeypatch, tmp_path, capsys):
    pytest.importorskip("onnxruntime")
    bench, args = _bench_in_process(monkeypatch, tmp_path)
    real = bench.exact_output
    monkeypatch.setattr(bench, "exact_output", lambda *a: real(*a) ^ np.uint8(1))
    assert bench.main(args) == 1
    _, _, rows = _bench_table(tmp_path / "bench.md")
    assert rows["attn_batched"]["exact"] == "NO"
    assert "qops differs from the exact result on: attn_batched" in capsys.readouterr().err


def test_bench_times_each_library_with_no_other_thread_pool_spinning(monkeypatch, tmp_path):
    """qops is timed while no onnxruntime session lives, each session alone,
    and the oracle runs with NumPy's BLAS on one thread: a pool that has
    just run spins on the second core through whatever is timed next."""
    import weakref

    pytest.importorskip("onnxruntime")
    threadpoolctl = pytest.importorskip("threadpoolctl")
    bench, args = _bench_in_process(monkeypatch, tmp_path)
    sessions, timed, oracle_threads = [], [], []
    real_runner, real_best, real_oracle = (bench.onnxruntime_runner, bench.best_time,
                                           bench.exact_output)

    class Session:
        """A runner that counts as live until it is freed."""

        def __init__(self, run_session):
            self.run_session = run_session
            sessions.append(weakref.ref(self))

        def __call__(self):
            return self.run_session()

    def live():
        return sum(1 for session in sessions if session() is not None)

    def best_time(function, budget):
        timed.append(("onnxruntime" if isinstance(function, Session) else "qops", live()))
        return real_best(function, budget)

    def oracle(*arguments):
        oracle_threads.extend(pool["num_threads"] for pool in threadpoolctl.threadpool_info()
                              if pool["user_api"] == "blas")
        return real_oracle(*arguments)

    monkeypatch.setattr(bench, "onnxruntime_runner",
                        lambda *arguments: Session(real_runner(*arguments)))
    monkeypatch.setattr(bench, "best_time", best_time)
    monkeypatch.setattr(bench, "exact_output", oracle)
    args.rounds = 3
    assert bench.main(args) == 0
    # Round after round: qops (plain, compiled) with no session alive, then
    # each session alone, made afresh and freed before anything else runs.
    assert timed == 3 * [("qops", 0), ("qops", 0), ("onnxruntime", 1), ("onnxruntime", 1)]
    assert live() == 0
    assert oracle_threads and set(oracle_threads) == {1}


def test_bench_keeps_each_librarys_best_round_and_drops_a_failing_peer(monkeypatch):
    """Each time is the best of its rounds, each timing gets a share of the
    budget, and a session that fails to run is made once, not every round."""
    from qops.cli import bench

    round_times = {"qops": iter([3.0, 1.0, 2.0]), "peer": iter([5.0, 6.0, 4.0])}
    shares = []

    def best_time(function, budget):
        shares.append(budget)
        return next(round_times[function()])

    made = []

    def broken():
        made.append("broken")
        raise RuntimeError("no session")

    monkeypatch.setattr(bench, "best_time", best_time)
    monkeypatch.setattr(bench, "_exact", lambda result, oracle: result == "peer")
    times, exactness = bench._timed_rounds(
        {"qops": lambda: "qops"}, {"peer": lambda: (lambda: "peer"), "broken": broken},
        None, 0.9, 3)
    assert times == {"qops": 1.0, "peer": 4.0, "broken": None}
    assert exactness == {"peer": True, "broken": "error"} and made == ["broken"]
    assert shares == pytest.approx([0.3] * 6)


def test_info_can_measure_the_peak():
    result = run("info", "--peak")
    assert result.returncode == 0
    line = next(l for l in result.stdout.splitlines() if l.startswith("peak"))
    from qops.backends.native import variants as _simd
    from qops.backends.native.kernels import _peak_probes
    assert " GOPS on " in line and _peak_probes.probe(_simd.selected()).mix in line


def test_bench_runs_a_quantize_case_and_reports_bytes_per_second(tmp_path):
    pytest.importorskip("onnxruntime")
    result = run("bench", "dequantize_u8_f32", "--budget", "0.01", "--out", str(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    table = (tmp_path / "bench.md").read_text()
    header = next(line for line in table.splitlines() if line.startswith("| case"))
    row = next(line for line in table.splitlines() if line.startswith("| dequantize_u8_f32"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    names = [c.strip() for c in header.strip("|").split("|")]
    assert cells[names.index("exact")] == "yes"
    assert float(cells[names.index("GB/s")]) > 0 and float(cells[names.index("ORT GB/s")]) > 0


def test_every_bench_case_makes_its_operands():
    """Each case's operands are made as the bench makes them (a case the
    bench cannot set up fails here, not in a long run)."""
    from qops.cli import bench as _bench

    for case in _bench.CASES:
        constants, runtime, attributes = _bench.operands(case)
        assert runtime, case.name
        if case.is_quantize:
            x = np.asarray(runtime["x"])
            assert x.shape == case.x_shape and x.dtype == np.dtype(case.source if case.kind ==
                                                                   "quantize" else x.dtype)


def test_bench_pairs_the_model_operators_with_every_constant_on_both_sides(tmp_path):
    """The add, the pooling and MatMulIntegerToFloat also run as a model
    would have them, every constant an initializer (MatMulIntegerToFloat's
    B and its parameters; A's scale and zero point are a dynamically
    quantized model's per-run values): a qops session and onnxruntime on
    the same model, both judged against the exact result."""
    pytest.importorskip("onnxruntime")
    from onnx import numpy_helper

    from qops.cli import bench as _bench

    case = next(case for case in _bench.CASES if case.name == "bert_qkv_to_float_u8s8")
    _, runtime, _ = _bench.operands(case)
    model, feeds = _bench._contrib_onnx_model(case, runtime, constant_weights=True)
    initializers = {init.name: numpy_helper.to_array(init) for init in model.graph.initializer}
    np.testing.assert_array_equal(initializers["B"], runtime["b"])
    assert list(feeds) == ["A", "a_scale", "a_zero_point"]
    cases = ["bert_qkv_to_float_u8s8", "r50_residual_add", "r50_global_pool"]
    result = run("bench", *cases, "--budget", "0.01", "--rounds", "1", "--out", str(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    _, _, rows = _bench_table(tmp_path / "bench.md")
    for name in cases:
        row = rows[name]
        assert row["exact"] == "yes"
        assert float(row["compiled ms"]) > 0 and float(row["ORT const ms"]) > 0
        assert float(row["compiled vs ORT const"].rstrip("x")) > 0
