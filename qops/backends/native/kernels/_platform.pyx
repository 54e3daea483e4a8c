# cython: language_level=3
"""What the build gave (OpenMP or not, a debug build or not) and what the
CPU runs.  No kernel opens an OpenMP parallel region: OpenMP is the build's
switch for threads and the source of the default thread count, and the
kernels run on the process's one pool (_qops_pool.pyx)."""

from qops.backends.native.kernels._openmp_helpers cimport (
    QOPS_DEBUG_BUILD,
    QOPS_OPENMP_ENABLED,
    omp_get_max_threads,
    omp_get_num_procs,
)


cdef extern from "qops_cpu_features.h":
    int qops_cpu_supports_avx2()
    int qops_cpu_supports_avx512vnni()
    int qops_cpu_supports_avxvnni()
    int qops_cpu_supports_amx()
    int qops_cpu_has_dot_product()


def cpu_features():
    """The instruction sets this CPU (and operating system) can run, by variant name."""
    return {"portable": True, "avx2": bool(qops_cpu_supports_avx2()),
            "avxvnni": bool(qops_cpu_supports_avxvnni()),
            "avx512vnni": bool(qops_cpu_supports_avx512vnni()),
            "amx": bool(qops_cpu_supports_amx())}


def cpu_dot_product():
    """Whether this process's CPU (as CPUID tells it, which is what
    onnxruntime asks too) has an exact 8-bit dot product, AVX-512 VNNI or
    AVX-VNNI; None off x86-64."""
    cdef int answer = qops_cpu_has_dot_product()
    return None if answer < 0 else bool(answer)


def openmp_enabled():
    """True when the kernels were compiled with OpenMP."""
    return bool(QOPS_OPENMP_ENABLED)


def debug_build():
    """True for a ``QOPS_DEBUG=1`` build (bounds checks on)."""
    return bool(QOPS_DEBUG_BUILD)


def max_threads():
    """OpenMP's default team size (``OMP_NUM_THREADS`` if set); 1 without OpenMP."""
    return omp_get_max_threads()


def num_procs():
    return omp_get_num_procs()
