"""Build the Cython kernels; every flag decision lives in tools/build_helpers.py."""

import copy
import os
import sys

from setuptools import Extension, setup

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "tools"))

from build_helpers import (  # noqa: E402
    QUANTIZE_FLAGS,
    QUANTIZE_VARIANTS,
    ROUNDING_FLAGS,
    SIMD_VARIANTS,
    build_jobs,
    compiler_accepts,
    cython_directives,
    extension_options,
    forks,
    warm_probes,
)
from Cython.Build import cythonize  # noqa: E402

jobs = build_jobs()
# Every probe below, at once (each compiles a program with <immintrin.h>).
warm_probes([ROUNDING_FLAGS, QUANTIZE_FLAGS, *SIMD_VARIANTS.values()], jobs)
options, openmp = extension_options()
print(f"qops build: OpenMP {'on' if openmp else 'off'}", file=sys.stderr)


KERNELS = "qops.backends.native.kernels"
# The kernels' C, as headers (``cdef extern from "<name>.h"``).
KERNEL_HEADERS = os.path.join(*KERNELS.split("."), "include")


def kernel(name, extra_flags=(), package=KERNELS, numpy_headers=False):
    settings = copy.deepcopy(options)
    settings["extra_compile_args"] = settings["extra_compile_args"] + list(extra_flags)
    settings["include_dirs"] = list(settings.get("include_dirs", [])) + [KERNEL_HEADERS]
    if numpy_headers:
        import numpy

        settings["include_dirs"].append(numpy.get_include())
    return Extension(f"{package}.{name}", [os.path.join(*package.split("."), f"{name}.pyx")],
                     **settings)


# The lean per-call paths (qops.backends.native._lean), the output buffers
# (_outputs) and the GEMM kernels' bound runs use NumPy's C API.  The pool is
# one extension that every kernel module cimports: one per process.
extensions = [kernel("_platform"), kernel("_qops_pool"), kernel("_small"),
              kernel("_peak_probes"), kernel("_float_products"),
              kernel("_lean", package="qops.backends.native", numpy_headers=True),
              kernel("_outputs", package="qops.backends.native", numpy_headers=True)]
rounding_flags = ROUNDING_FLAGS if compiler_accepts(ROUNDING_FLAGS) else []
for variant, flags in SIMD_VARIANTS.items():
    if not os.path.exists(os.path.join(*KERNELS.split("."), f"_qgemm_{variant}.pyx")):
        continue
    if compiler_accepts(flags):
        extensions.append(kernel(f"_qgemm_{variant}", flags + rounding_flags,
                                 numpy_headers=True))
    else:
        print(f"qops build: compiler rejects {' '.join(flags)}; no {variant} kernels",
              file=sys.stderr)
quantize_flags = QUANTIZE_FLAGS if compiler_accepts(QUANTIZE_FLAGS) else []
for variant in QUANTIZE_VARIANTS:
    flags = SIMD_VARIANTS[variant]
    if compiler_accepts(flags):
        extensions.append(kernel(f"_quantize_{variant}", flags + quantize_flags))

# Cython's utility code (typed memoryviews above all: some 20,000 lines of C
# per module) compiled once, in a module of its own that the others import,
# instead of once in every module.
SHARED_UTILITY = "qops.backends.native._cython_utility"
extensions.append(Extension(SHARED_UTILITY,
                            [os.path.join(*SHARED_UTILITY.split(".")) + ".c"], **options))

# Cythonize and compile on every core: the extensions are independent.
# Cython's pool forks (where processes start by spawning, each would run
# this file again: one process there); setuptools' build_ext takes
# ``parallel`` as make's -j.  The GEMM variants, the largest, go first so
# that the small ones fill the other cores' tails.
extensions.sort(key=lambda extension: not extension.name.rsplit(".", 1)[-1].startswith(
    ("_qgemm", "_cython_utility")))
setup(ext_modules=cythonize(extensions, compiler_directives=cython_directives(),
                            include_path=[os.path.dirname(os.path.abspath(__file__))],
                            nthreads=jobs if forks() else 0,
                            shared_utility_qualified_name=SHARED_UTILITY),
      options={"build_ext": {"parallel": jobs}})
