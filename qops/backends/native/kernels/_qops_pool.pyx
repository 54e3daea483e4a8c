# cython: language_level=3
"""The one thread pool of the process; see _qops_pool.pxd.

An OpenMP parallel region ends at a barrier that every thread of its team
must reach.  On a machine whose cores are busy with other processes a worker
may wait milliseconds for a core, and the calling thread waits with it,
although it has done all the work in the meantime.  Here the caller publishes a job of
`count` independent tasks and takes tasks from a shared counter; the pool's
threads join while the job is open and take tasks the same way.  Once every
task is taken the caller closes the job and waits only for the workers that
joined (each finishes the task it holds); a worker that never got a core is
not waited for.

Workers spin for the next job for 0.1 ms (back-to-back calls start at once)
and then sleep on a condition variable; while a hold is taken (a model
session's run, ``hold``), they spin on.  A call finding the pool busy
(another thread's call) runs its tasks itself.  Without OpenMP (the build's
switch for threads) or pthreads every job runs on the caller.  After a fork
the child starts with no workers.

The pool is an extension of its own so that every kernel module, of every
variant, shares one: one set of workers, one fork handler, one thread
setting.  threadpoolctl sees it through the exported C functions
``qops_pool_get_num_threads``, ``qops_pool_configured_threads`` and
``qops_pool_configure`` (the controller is in qops/backends/native/pool.py).
"""

from libc.stdlib cimport calloc, free

from qops.backends.native.kernels._openmp_helpers cimport omp_get_max_threads  # noqa: F401

cdef extern from "qops_pool.h":
    int QOPS_POOL_ENABLED
    ctypedef void (*c_task "qops_task")(void* context, Py_ssize_t index, int slot) noexcept nogil
    ctypedef void (*c_range_task "qops_range_task")(void* context, Py_ssize_t start,
                                                    Py_ssize_t stop, int slot) noexcept nogil
    void c_run_tasks "qops_run_tasks"(c_task task, void* context, Py_ssize_t count,
                                      int threads) noexcept nogil
    void c_run_range "qops_run_range"(c_range_task task, void* context, Py_ssize_t total,
                                      Py_ssize_t grain, int threads) noexcept nogil
    int c_get_num_threads "qops_pool_get_num_threads"() noexcept nogil
    void c_configure "qops_pool_configure"(int n) noexcept nogil
    int c_configured "qops_pool_configured_threads"() noexcept nogil
    int c_hold "qops_pool_hold"(int delta) noexcept nogil
    int qops_pool_workers
    long qops_pool_jobs
    long qops_pool_worker_tasks


cdef void run_tasks(pool_task task, void* context, Py_ssize_t count, int threads) noexcept nogil:
    c_run_tasks(<c_task>task, context, count, threads)


cdef void run_range(range_task task, void* context, Py_ssize_t total, Py_ssize_t grain,
                    int threads) noexcept nogil:
    c_run_range(<c_range_task>task, context, total, grain, threads)


def enabled():
    """Whether jobs may run on more than one thread (an OpenMP build with pthreads)."""
    return bool(QOPS_POOL_ENABLED)


def get_num_threads():
    """The default thread count: the one set, else OpenMP's."""
    return c_get_num_threads()


def set_num_threads(int n):
    """Set the default thread count (``n >= 1``), or ``0`` to follow OpenMP's again."""
    if n < 0:
        raise ValueError("n must be 0 or more")
    c_configure(n)


def configured():
    """The thread count set (by qops or threadpoolctl), 0 if none."""
    return c_configured()


def hold(int delta):
    """Take (``+1``) or give back (``-1``) a hold: while one is taken, idle
    workers spin for the next job instead of sleeping.  Returns the holds
    taken after the change."""
    if delta not in (-1, 1):
        raise ValueError("delta must be 1 or -1")
    return c_hold(delta)


def statistics():
    """Worker threads started, jobs published to them and tasks they ran,
    since the process (or its fork) began."""
    return {"workers": qops_pool_workers, "jobs": qops_pool_jobs,
            "worker tasks": qops_pool_worker_tasks}


cdef struct Spread:
    int* seen
    long spin


cdef void mark_slot(void* context, Py_ssize_t index, int slot) noexcept nogil:
    cdef Spread* spread = <Spread*>context
    cdef long i
    cdef volatile long sink = 0
    spread.seen[slot] = 1
    for i in range(spread.spin):  # long enough that a worker can join
        sink = sink + i


def threads_used(int n_threads, long spin=200000):
    """Run a job of 64 short tasks on ``n_threads`` threads and count the
    distinct threads that ran some: the check that the pool really runs in
    parallel.  (A worker that is slow to start may miss a job; the count is
    then lower, never higher.)"""
    cdef int seen[MAX_WORKERS + 1]
    cdef Spread spread
    cdef int i
    if not 1 <= n_threads <= MAX_WORKERS:
        raise ValueError(f"n_threads must be in [1, {MAX_WORKERS}]")
    for i in range(MAX_WORKERS + 1):
        seen[i] = 0
    spread.seen = seen
    spread.spin = spin
    with nogil:
        run_tasks(mark_slot, &spread, 64, n_threads)
    return sum(seen[i] for i in range(MAX_WORKERS + 1))


cdef struct Coverage:
    int* runs          # per element: how many chunks covered it
    int* bad_chunks    # chunks that start off a grain or end short of one inside the range
    Py_ssize_t total
    Py_ssize_t grain
    long spin


cdef void count_chunk(void* context, Py_ssize_t start, Py_ssize_t stop, int slot) noexcept nogil:
    cdef Coverage* coverage = <Coverage*>context
    cdef Py_ssize_t i
    cdef volatile long sink = 0
    if start % coverage.grain or (stop % coverage.grain and stop != coverage.total):
        __atomic_add_fetch(coverage.bad_chunks, 1, __ATOMIC_RELAXED)
    for i in range(start, stop):
        __atomic_add_fetch(&coverage.runs[i], 1, __ATOMIC_RELAXED)
    for i in range(coverage.spin):  # some chunks long enough for others to join
        sink = sink + i


cdef extern from *:
    int __atomic_add_fetch(int* target, int value, int order) noexcept nogil
    int __ATOMIC_RELAXED


def range_coverage(Py_ssize_t total, Py_ssize_t grain, int n_threads, long spin=0):
    """Run a range of ``total`` elements in grains of ``grain`` on
    ``n_threads`` threads; returns (runs per element, chunks not made of whole
    grains): the check that the range scheduler covers each element once."""
    if total < 0 or grain < 1 or not 1 <= n_threads <= MAX_WORKERS:
        raise ValueError("total >= 0, grain >= 1, n_threads in [1, MAX_WORKERS]")
    cdef int* runs = <int*>calloc(max(total, 1), sizeof(int))
    cdef int bad = 0
    cdef Coverage coverage
    if runs == NULL:
        raise MemoryError()
    coverage.runs = runs
    coverage.bad_chunks = &bad
    coverage.total = total
    coverage.grain = grain
    coverage.spin = spin
    with nogil:
        run_range(count_chunk, &coverage, total, grain, n_threads)
    counts = [runs[i] for i in range(total)]
    free(runs)
    return counts, bad
