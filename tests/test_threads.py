"""Threads and memory: concurrent calls equal serial ones, thread settings are
honoured from worker threads and by threadpoolctl, and repeated calls do not
grow the process."""

import concurrent.futures
import os
import threading

import numpy as np
import pytest
from calls import CALLS, IDS, expected, run

import qops
from qops import threads as _threads

openmp = pytest.importorskip("qops.backends.native.kernels._platform")
pool = pytest.importorskip("qops.backends.native.kernels._qops_pool")


@pytest.mark.parametrize("make", CALLS, ids=IDS)
def test_concurrent_calls_from_many_threads_equal_serial_results(make):
    name, slots, attributes = make()
    rng = np.random.default_rng(7)
    # Eight variants of the call, differing in their main input's values.
    slot = next(iter(slots))
    variants = []
    for _ in range(8):
        values = slots[slot]
        changed = rng.permutation(values.reshape(-1)).reshape(values.shape)
        variants.append(dict(slots, **{slot: changed}))
    serial = [expected(name, v, attributes) for v in variants]

    def work(index):
        return run(name, variants[index % 8], attributes, n_threads=1 + index % 2)

    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(work, range(64)))
    for index, result in enumerate(results):
        assert np.array_equal(result.view(np.uint8), serial[index % 8].view(np.uint8)), index


def test_n_threads_and_set_num_threads_are_honoured_in_worker_threads():
    if not openmp.openmp_enabled():
        pytest.skip("built without OpenMP")
    seen = {}
    saved = pool.configured()

    def worker():
        # The most of a few jobs: a worker slow to wake on a busy machine
        # misses a job (the pool never waits for it), so one job may count 1.
        seen["explicit"] = max(pool.threads_used(2) for _ in range(5))
        qops.set_num_threads(1)
        seen["default"] = qops.get_num_threads()
        seen["used"] = pool.threads_used(qops.get_num_threads())

    try:
        thread = threading.Thread(target=worker)
        thread.start()
        thread.join()
    finally:
        pool.set_num_threads(saved)
    assert seen == {"explicit": 2, "default": 1, "used": 1}


def test_threadpoolctl_sees_and_limits_the_openmp_pool():
    threadpoolctl = pytest.importorskip("threadpoolctl")
    if not openmp.openmp_enabled():
        pytest.skip("built without OpenMP")
    if os.environ.get("OMP_NUM_THREADS"):
        pytest.skip("OMP_NUM_THREADS fixes the default")
    saved = pool.configured()
    _threads.reset_num_threads()
    try:
        pools = [p for p in threadpoolctl.threadpool_info() if p["user_api"] == "openmp"]
        assert pools, "qops' OpenMP runtime is not visible to threadpoolctl"
        with threadpoolctl.threadpool_limits(limits=1, user_api="openmp"):
            assert qops.get_num_threads() == 1
            name, slots, attributes = CALLS[0]()
            assert np.array_equal(run(name, slots, attributes),
                                  expected(name, slots, attributes))
        assert qops.get_num_threads() == max(1, openmp.max_threads())
    finally:
        pool.set_num_threads(saved)


def _resident_bytes():
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs /proc")
@pytest.mark.parametrize("make", CALLS, ids=IDS)
def test_ten_thousand_calls_do_not_grow_the_process(make):
    name, slots, attributes = make()
    out = np.empty_like(expected(name, slots, attributes))
    for _ in range(500):  # caches and allocator pools reach their size
        run(name, slots, attributes)
        run(name, slots, attributes, out=out)
    before = _resident_bytes()
    for index in range(10_000):
        run(name, slots, attributes, out=out if index % 2 else None)
    growth = _resident_bytes() - before
    assert growth < 4 * 2**20, f"{name}: {growth / 2**20:.1f} MiB more after 10,000 calls"


@pytest.mark.parametrize("n_threads", [1, 2, 3, 5])
def test_the_range_scheduler_runs_every_element_once_in_whole_grains(n_threads):
    """Home segments and the chunks threads take from each other's segments
    cover a range exactly once, in whole grains but for the range's end,
    whatever the range, grain and thread count (and however the threads
    interleave: some chunks spin long enough for the workers to join)."""
    for total in list(range(0, 40)) + [97, 1000]:
        for grain in (1, 2, 3, 7, 64):
            runs, bad = pool.range_coverage(total, grain, n_threads, spin=2000)
            assert runs == [1] * total, (total, grain)
            assert bad == 0, (total, grain)



def test_workers_kept_spinning_counts_holds_that_nest_and_are_given_back():
    """The block takes one hold on the workers' spinning and gives it back,
    also when the block raises; blocks nest, enabled=False takes none, and
    jobs run in and after the block as before."""
    if not pool.enabled():
        pytest.skip("this build runs every job on its caller")
    before = pool.hold(1) - 1
    assert pool.hold(-1) == before
    with _threads.workers_kept_spinning():
        assert pool.hold(1) - 1 == before + 1
        pool.hold(-1)
        with _threads.workers_kept_spinning(), _threads.workers_kept_spinning(enabled=False):
            assert pool.hold(1) - 1 == before + 2
            pool.hold(-1)
            runs, bad = pool.range_coverage(97, 3, 2, spin=2000)
            assert runs == [1] * 97 and bad == 0
    with pytest.raises(RuntimeError), _threads.workers_kept_spinning():
        raise RuntimeError("a step failed")
    assert pool.hold(1) - 1 == before
    pool.hold(-1)
    runs, bad = pool.range_coverage(97, 3, 2, spin=2000)
    assert runs == [1] * 97 and bad == 0
    with pytest.raises(ValueError):
        pool.hold(2)
