"""``python -m qops``: info, ops, validate (command line and JSON)."""

import json
import subprocess
import sys

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
    expected = "yes" if qops._config.config()["openmp"] else "no"
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
            line = next(l for l in result.stdout.splitlines()
                        if l.split() and l.split()[0] == slot.source_name and support.dims_text() in l
                        and ", ".join(support.dtypes) in l)
            assert slot.kind.value in line


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


def test_bench_runs_a_case_and_checks_it_against_onnxruntime(tmp_path):
    pytest.importorskip("onnxruntime")
    result = run("bench", "tiny_4", "attn_batched", "--budget", "0.01", "--out", str(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    table = (tmp_path / "bench.md").read_text()
    rows = [line for line in table.splitlines() if line.startswith("| tiny_4") or
            line.startswith("| attn_batched")]
    assert len(rows) == 2 and all(row.rstrip(" |").endswith("yes") for row in rows)
    assert "geometric mean" in table
    assert run("bench", "no_such_case").returncode == 2


def test_bench_runs_a_quantize_case_and_reports_bytes_per_second(tmp_path):
    pytest.importorskip("onnxruntime")
    result = run("bench", "dequantize_u8_f32", "--budget", "0.01", "--out", str(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    table = (tmp_path / "bench.md").read_text()
    header = next(line for line in table.splitlines() if line.startswith("| case"))
    row = next(line for line in table.splitlines() if line.startswith("| dequantize_u8_f32"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    names = [c.strip() for c in header.strip("|").split("|")]
    assert cells[-1] == "yes"
    assert float(cells[names.index("GB/s")]) > 0 and float(cells[names.index("ORT GB/s")]) > 0
