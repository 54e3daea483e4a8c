"""The fuzz harness (tools/fuzz.py) runs, briefly, in the default test run;
the long runs are by hand (see the module's docstring)."""

import os
import subprocess
import sys

import pytest
from conftest import PROJECT_ROOT

pytest.importorskip("atheris")

HARNESS = os.path.join(PROJECT_ROOT, "tools", "fuzz.py")


def test_the_fuzz_harness_runs_a_bounded_number_of_calls_cleanly(tmp_path):
    result = subprocess.run(
        [sys.executable, HARNESS, "-runs=1500", "-seed=1", f"-artifact_prefix={tmp_path}/"],
        capture_output=True, text=True, timeout=600,
        env=dict(os.environ, QOPS_FUZZ_STATS="1"))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Done 1500 runs" in result.stderr
    # Both kinds of outcome happen: calls that run and calls that are refused.
    assert " ran" in result.stderr and " rejected" in result.stderr
