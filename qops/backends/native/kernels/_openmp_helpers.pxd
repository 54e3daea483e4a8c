# OpenMP that degrades, never breaks: without _OPENMP (a compiler without
# OpenMP, or QOPS_DISABLE_OPENMP=1) these answer for one thread, and the
# kernels' pool (_qops_pool.pyx), whose threads the same switch enables, runs
# every job on its caller.

cdef extern from "qops_openmp.h":
    bint QOPS_OPENMP_ENABLED
    bint QOPS_DEBUG_BUILD
    int omp_get_max_threads() noexcept nogil
    int omp_get_num_procs() noexcept nogil
