/* OpenMP where the build has it, one thread where it has not, and the build's flags. */
#ifndef QOPS_OPENMP_H
#define QOPS_OPENMP_H

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

#endif /* QOPS_OPENMP_H */
