# The one thread pool of the process (_qops_pool.pyx): every kernel module
# cimports these, so there is one set of worker threads, one fork handler
# and one thread setting, whatever the variant.
#
# A job is `count` independent tasks; task(context, index, slot) runs task
# `index` on the thread numbered `slot` (0 is the caller, 1 .. threads - 1
# the workers that joined, in the order they joined: an index into
# per-thread scratch space).  Tasks write disjoint outputs, so which thread
# runs one never changes a result.  The caller takes tasks too and never
# waits for a worker that has not started: on a busy machine the job may run
# on fewer threads than asked, never slower than on the caller alone.

ctypedef void (*pool_task)(void* context, Py_ssize_t index, int slot) noexcept nogil

# task(context, start, stop, slot): the elements [start, stop) of a range.
ctypedef void (*range_task)(void* context, Py_ssize_t start, Py_ssize_t stop,
                            int slot) noexcept nogil

cdef void run_tasks(pool_task task, void* context, Py_ssize_t count, int threads) noexcept nogil

# [0, total) in chunks of whole `grain`s of elements (a range's last may be
# shorter): one contiguous home segment per thread, which that thread takes
# in halving chunks, then helps the others with theirs; the caller's segment
# is always the first, so each thread works on the same part call after call
# (its data stays in the thread's cache) and the threads finish together.
cdef void run_range(range_task task, void* context, Py_ssize_t total, Py_ssize_t grain,
                    int threads) noexcept nogil

cdef extern from "qops_pool_limits.h":
    cdef enum:
        MAX_WORKERS "QOPS_POOL_MAX_WORKERS"
