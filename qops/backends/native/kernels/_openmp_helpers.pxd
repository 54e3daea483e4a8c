# OpenMP that degrades, never breaks: without _OPENMP (a compiler without
# OpenMP, or QOPS_DISABLE_OPENMP=1) these answer for one thread, and the
# kernels' pool (_qops_pool.pyx), whose threads the same switch enables, runs
# every job on its caller.

cdef extern from *:
    """
    #ifdef _OPENMP
    #include <omp.h>
    #define QOPS_OPENMP_ENABLED 1
    #else
    #define QOPS_OPENMP_ENABLED 0
    static int omp_get_max_threads(void) { return 1; }
    static int omp_get_num_procs(void) { return 1; }
    #endif
    #ifdef QOPS_DEBUG
    #define QOPS_DEBUG_BUILD 1
    #else
    #define QOPS_DEBUG_BUILD 0
    #endif
    """
    bint QOPS_OPENMP_ENABLED
    bint QOPS_DEBUG_BUILD
    int omp_get_max_threads() noexcept nogil
    int omp_get_num_procs() noexcept nogil
