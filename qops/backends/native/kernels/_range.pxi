# The range of float32 values (include/qops_range.h), for
# DynamicQuantizeLinear's value check (qops.ops.integer): one pass on the
# pool's threads where NumPy's min and max are two passes on one.  Each
# task's range goes to its own slot of a list, combined once all are done.

cdef extern from "qops_range.h":
    bint range_values "qops_range_float32"(const float* x, Py_ssize_t count,
                                           float* range) noexcept nogil


cdef struct RangeJob:
    const float* x
    Py_ssize_t count
    float* ranges      # two per task
    int32_t* nans      # one per task


cdef void range_tasks(void* context, Py_ssize_t start, Py_ssize_t stop, int slot) noexcept nogil:
    """Tasks [start, stop): ROW elements each (the last short)."""
    cdef const RangeJob* job = <const RangeJob*>context
    cdef Py_ssize_t task, first
    for task in range(start, stop):
        first = task * ROW
        job.nans[task] = range_values(job.x + first, min(ROW, job.count - first),
                                      job.ranges + 2 * task)


def range_float32(const float[::1] x, int n_threads):
    """(least, greatest) of x as NumPy's min and max give them: NaN for
    both where x has a NaN; +inf and -inf for no values."""
    cdef RangeJob job
    cdef Py_ssize_t count = x.shape[0], tasks = (x.shape[0] + ROW - 1) // ROW, task
    if count == 0:
        return float("inf"), float("-inf")
    ranges = np.empty(2 * tasks, np.float32)
    nans = np.empty(tasks, np.int32)
    cdef float[::1] range_view = ranges
    cdef int32_t[::1] nan_view = nans
    job.x = &x[0]
    job.count = count
    job.ranges = &range_view[0]
    job.nans = &nan_view[0]
    with nogil:
        run_range(range_tasks, &job, tasks, 1, n_threads if count >= PARALLEL_MIN else 1)
    cdef float least = range_view[0], greatest = range_view[1]
    cdef bint nan = False
    for task in range(tasks):
        nan = nan or nan_view[task] != 0
        least = range_view[2 * task] if range_view[2 * task] < least else least
        greatest = range_view[2 * task + 1] if range_view[2 * task + 1] > greatest else greatest
    if nan:
        return float("nan"), float("nan")
    return least, greatest
