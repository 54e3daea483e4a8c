"""Build configuration, OpenMP and thread settings."""

import io
import os
import subprocess
import sys
import textwrap

import pytest
from conftest import PROJECT_ROOT

import qops
from qops.backends.native.kernels import _platform, _qops_pool


def most_threads_used(n_threads, attempts=5):
    """The most threads a job of the pool's check ran on, over a few jobs:
    the caller never waits for a worker, so on a loaded machine a worker the
    scheduler has not run yet misses one job, but not every one."""
    return max(_qops_pool.threads_used(n_threads) for _ in range(attempts))


@pytest.mark.skipif(bool(os.environ.get("OMP_THREAD_LIMIT") or os.environ.get("OMP_DYNAMIC")),
                    reason="the OpenMP runtime may give a parallel loop fewer threads here")
def test_kernels_are_compiled_and_report_openmp():
    """show_config's OpenMP line (the build's flag) agrees with what a
    parallel loop does: two threads with OpenMP, one without."""
    info = qops.config.config()
    assert info["kernels built"] is True
    assert info["openmp"] == (most_threads_used(2) == 2)
    text = io.StringIO()
    qops.show_config(file=text)
    assert ("openmp" in text.getvalue()) and str(qops.get_num_threads()) in text.getvalue()


@pytest.mark.skipif(not _platform.openmp_enabled(), reason="built without OpenMP")
def test_the_pool_runs_a_job_on_the_requested_threads():
    assert _qops_pool.threads_used(1) == 1
    assert most_threads_used(2) == 2


def test_set_and_get_num_threads_round_trip():
    before = qops.get_num_threads()
    try:
        qops.set_num_threads(3)
        assert qops.get_num_threads() == 3
    finally:
        qops.threads.reset_num_threads()
    assert qops.get_num_threads() == before


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2", None, True])
def test_bad_thread_counts_are_rejected(bad):
    with pytest.raises(qops.ValidationError):
        qops.set_num_threads(bad)


def test_a_bad_n_threads_is_rejected_before_running():
    import numpy as np
    with pytest.raises(qops.ValidationError, match="n_threads"):
        qops.quantize_linear(np.zeros(3, np.float32), 1.0, n_threads=0)


def test_omp_num_threads_sets_the_default():
    code = "import qops; print(qops.get_num_threads())"
    env = dict(os.environ, OMP_NUM_THREADS="3")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True, cwd="/")
    assert out.stdout.strip() == "3"


# The two builds below take two to four minutes each on two cores: past the
# default run's budget, so they run with -m slow.
@pytest.mark.slow
def test_the_kernels_build_without_openmp(tmp_path):
    """QOPS_DISABLE_OPENMP=1 builds serial kernels that still run."""
    root = PROJECT_ROOT
    env = dict(os.environ, QOPS_DISABLE_OPENMP="1")
    build = subprocess.run(
        [sys.executable, "setup.py", "-q", "build_ext", "--build-lib", str(tmp_path / "lib"),
         "--build-temp", str(tmp_path / "tmp")],
        cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stderr[-2000:]
    assert "OpenMP off" in build.stderr
    probe = textwrap.dedent("""
        import importlib.util, glob, sys
        def load(name):
            path = glob.glob(sys.argv[1] + f"/qops/backends/native/kernels/{name}*.so")[0]
            spec = importlib.util.spec_from_file_location(f"qops.backends.native.kernels.{name}",
                                                          path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return module
        openmp, pool = load("_platform"), load("_qops_pool")
        print(openmp.openmp_enabled(), pool.threads_used(2), openmp.max_threads(), pool.enabled())
    """)
    out = subprocess.run([sys.executable, "-c", probe, str(tmp_path / "lib")], capture_output=True,
                         text=True, check=True, cwd="/")
    assert out.stdout.split() == ["False", "1", "1", "False"]


@pytest.mark.parametrize("forced", ["portable", "avx2", "avxvnni", "avx512vnni"])
def test_qops_simd_forces_a_variant_this_machine_runs(forced):
    from qops.backends.native import variants as _simd
    code = "import qops; print(qops.config.config()['simd'].split()[0])"
    env = dict(os.environ, QOPS_SIMD=forced)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True, cwd="/")
    runnable = _simd.available()
    expected = forced if forced in runnable else next(
        n for n in runnable if _simd.VARIANTS.index(n) > _simd.VARIANTS.index(forced))
    assert out.stdout.strip() == expected


def test_an_unknown_qops_simd_warns_and_uses_the_best():
    from qops.backends.native import variants as _simd
    code = "import warnings; warnings.simplefilter('error'); from qops.backends.native import variants; variants.selected()"
    env = dict(os.environ, QOPS_SIMD="sse9")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         cwd="/")
    assert out.returncode != 0 and "QOPS_SIMD='sse9'" in out.stderr
    code = "from qops.backends.native import variants; print(variants.selected())"
    out = subprocess.run([sys.executable, "-W", "ignore", "-c", code], env=env,
                         capture_output=True, text=True, check=True, cwd="/")
    assert out.stdout.strip() == _simd.available()[0]


@pytest.mark.slow
def test_a_debug_build_passes_the_kernel_tests(tmp_path):
    """QOPS_DEBUG=1 turns Cython's bounds checks back on: the kernel tests must
    pass on it too (about 20 s: it compiles every variant at -O0)."""
    import shutil
    root = PROJECT_ROOT
    copy = tmp_path / "qops-debug"
    shutil.copytree(root, copy, ignore=shutil.ignore_patterns(
        "*.so", "*.c", "build", ".git", "__pycache__", ".hypothesis", "*.egg-info"))
    env = dict(os.environ, QOPS_DEBUG="1")
    subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=copy,
                   env=env, check=True, capture_output=True, timeout=1800)
    env = dict(env, PYTHONPATH=str(copy))
    probe = subprocess.run([sys.executable, "-c", "import qops; print(qops.config.config()['debug build'])"],
                           cwd=copy, env=env, capture_output=True, text=True, check=True)
    assert probe.stdout.strip() == "True"
    tests = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                            "tests/backends/native/kernels", "tests/test_robustness.py"],
                           cwd=copy, env=env, capture_output=True, text=True, timeout=1800)
    assert tests.returncode == 0, tests.stdout[-3000:]
