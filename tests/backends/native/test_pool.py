"""One thread pool per process (qops/backends/native/kernels/_qops_pool.pyx).

Every kernel, of every kind and variant, runs its parallel work on the same
pool: in a fresh process that runs them all on two threads, the operating
system counts one new thread (the pool's one worker) and the pool counts
jobs from each kernel.  threadpoolctl sees the pool and its limit reaches
every call that gives no ``n_threads``.
"""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import qops

pool = pytest.importorskip("qops.backends.native.kernels._qops_pool")

pytestmark = pytest.mark.skipif(not pool.enabled(), reason="built without threads (OpenMP off)")

#: Every kind of kernel, on sizes past the thresholds below which a call
#: stays on one thread; each prints the pool's job count after it.
PROGRAM = textwrap.dedent("""
    import json, os, sys
    import numpy as np
    import qops
    from qops.backends.native.kernels import _qops_pool

    def threads():
        with open("/proc/self/status") as handle:
            return int(next(l for l in handle if l.startswith("Threads:")).split()[1])

    rng = np.random.default_rng(0)
    u8 = lambda *s: rng.integers(0, 256, s, dtype=np.uint8)
    i8 = lambda *s: rng.integers(-128, 128, s, dtype=np.int8)
    x = rng.standard_normal((256, 512)).astype(np.float32)
    calls = {
        "matrix multiply": lambda: qops.quantized_linear_matrix_multiply(
            u8(256, 256), 0.02, None, i8(256, 256), 0.01, None, 8.0, n_threads=2),
        "convolution": lambda: qops.quantized_linear_convolution(
            u8(1, 64, 32, 32), 0.02, None, i8(64, 64, 3, 3), 0.01, None, None, 8.0,
            start_padding=(1, 1), end_padding=(1, 1), n_threads=2),
        "first convolution": lambda: qops.quantized_linear_convolution(
            u8(1, 3, 112, 112), 0.02, None, i8(64, 3, 7, 7), 0.01, None, None, 8.0,
            strides=(2, 2), start_padding=(3, 3), end_padding=(3, 3), n_threads=2),
        "depthwise": lambda: qops.quantized_linear_convolution(
            u8(1, 64, 64, 64), 0.02, None, i8(64, 1, 3, 3), 0.01, None, None, 8.0,
            group_count=64, start_padding=(1, 1), end_padding=(1, 1), n_threads=2),
        "matrix multiply integer": lambda: qops.matrix_multiply_integer(
            u8(256, 256), None, i8(256, 256), None, n_threads=2),
        "quantize": lambda: qops.quantize_linear(x, 0.02, np.uint8(128), n_threads=2),
        "quantize per axis": lambda: qops.quantize_linear(
            x, np.full(512, 0.02, np.float32), np.full(512, 128, np.uint8), axis=1, n_threads=2),
        "dequantize": lambda: qops.dequantize_linear(u8(256, 512), 0.02, np.uint8(128),
                                                     n_threads=2),
    }
    qops.quantize_linear(np.zeros(4, np.float32), 1.0)  # loads the kernels
    before = threads()
    jobs = {}
    for name, call in calls.items():
        first = _qops_pool.statistics()["jobs"]
        call()
        jobs[name] = _qops_pool.statistics()["jobs"] - first
    print(json.dumps({"new threads": threads() - before, "jobs": jobs,
                      "workers": _qops_pool.statistics()["workers"]}))
""")


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="counts threads in /proc")
def test_every_kernel_runs_on_one_pool_of_one_process():
    out = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True,
                         check=True, env=dict(os.environ, OMP_NUM_THREADS="2"), cwd="/")
    result = json.loads(out.stdout)
    assert all(count >= 1 for count in result["jobs"].values()), result["jobs"]
    # One worker for two threads, started by the first job; no other threads.
    assert result["workers"] == 1
    assert result["new threads"] == 1


def test_threadpoolctl_sees_the_pool_and_its_limit_reaches_the_kernels():
    threadpoolctl = pytest.importorskip("threadpoolctl")
    qops.quantize_linear(np.zeros(4, np.float32), 1.0)  # loads the kernels
    found = [info for info in threadpoolctl.threadpool_info() if info["user_api"] == "qops"]
    assert len(found) == 1 and os.path.basename(found[0]["filepath"]).startswith("_qops_pool")
    saved = pool.configured()
    rng = np.random.default_rng(1)
    a, b = rng.integers(0, 256, (256, 256), np.uint8), rng.integers(-128, 128, (256, 256), np.int8)

    def worker_tasks_of_a_call():
        first = pool.statistics()["worker tasks"]
        qops.quantized_linear_matrix_multiply(a, 0.02, None, b, 0.01, None, 8.0)
        return pool.statistics()["worker tasks"] - first

    try:
        qops.set_num_threads(2)
        with threadpoolctl.threadpool_limits(limits=1, user_api="qops"):
            assert qops.get_num_threads() == 1
            assert [i["num_threads"] for i in threadpoolctl.threadpool_info()
                    if i["user_api"] == "qops"] == [1]
            assert worker_tasks_of_a_call() == 0, "a limited call ran tasks on a worker"
        assert qops.get_num_threads() == 2
    finally:
        pool.set_num_threads(saved)


def test_the_default_follows_openmp_until_set_and_again_after_reset():
    saved = pool.configured()
    try:
        qops.threads.reset_num_threads()
        from qops.backends.native.kernels import _platform
        assert qops.get_num_threads() == max(1, _platform.max_threads())
        qops.set_num_threads(3)
        assert qops.get_num_threads() == pool.get_num_threads() == 3
        qops.threads.reset_num_threads()
        assert qops.get_num_threads() == max(1, _platform.max_threads())
    finally:
        pool.set_num_threads(saved)


def test_leaving_a_threadpoolctl_limit_restores_the_setting_it_found():
    """A count qops set stays set, and "follow OpenMP" stays that, even where
    the two give the same number."""
    threadpoolctl = pytest.importorskip("threadpoolctl")
    from qops.backends.native.kernels import _platform

    qops.quantize_linear(np.zeros(4, np.float32), 1.0)  # loads the kernels
    saved = pool.configured()
    openmp_count = max(1, _platform.max_threads())
    try:
        for setting in (0, openmp_count, openmp_count + 1):
            pool.set_num_threads(setting)
            with threadpoolctl.threadpool_limits(limits=1, user_api="qops"):
                assert qops.get_num_threads() == 1
            assert pool.configured() == setting, setting
    finally:
        pool.set_num_threads(saved)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_starts_a_pool_of_its_own():
    """The child inherits no workers: its counters start at zero, and a job
    on two threads there starts one worker and runs."""
    qops.quantize_linear(np.zeros(4, np.float32), 1.0)
    pool.threads_used(2)  # the parent has a worker
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child reports through the pipe
        try:
            before = pool.statistics()
            used = pool.threads_used(2)
            after = pool.statistics()
            os.write(write, json.dumps([before, used, after]).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        before, used, after = json.loads(pipe.read())
    os.waitpid(child, 0)
    assert before == {"workers": 0, "jobs": 0, "worker tasks": 0}
    assert after["workers"] == 1 and after["jobs"] == 1 and used >= 1
