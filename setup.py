"""Build the Cython kernels; every flag decision lives in tools/build_helpers.py."""

import os
import sys

from setuptools import Extension, setup

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "tools"))

from build_helpers import cython_directives, extension_options  # noqa: E402

from Cython.Build import cythonize  # noqa: E402

KERNELS = ["_openmp"]

options, openmp = extension_options()
print(f"qops build: OpenMP {'on' if openmp else 'off'}", file=sys.stderr)

extensions = [
    Extension(f"qops._kernels.{name}", [os.path.join("qops", "_kernels", f"{name}.pyx")], **options)
    for name in KERNELS
]

setup(ext_modules=cythonize(extensions, compiler_directives=cython_directives()))
