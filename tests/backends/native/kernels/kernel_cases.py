"""Shared pieces of the kernel tests: every SIMD variant this machine runs,
and how to run one on a validated call."""

import numpy as np

from qops.backends import dispatch as _dispatch
from qops.backends.native import gemm as _native
from qops.backends.native import variants as _simd

VARIANTS = _simd.available()


TYPES = (np.uint8, np.int8)


def random_values(rng, shape, dtype):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, shape, dtype=dtype)


def run_variant(operator_run, call, variant, n_threads):
    out = np.empty(call.output_shape, call.output_dtype)
    operator_run(call, out, n_threads, variant=variant)
    return out


def reference(call):
    return _dispatch.execute(call, 1, implementation="reference")


__all__ = ["VARIANTS", "TYPES", "random_values", "run_variant", "reference", "_native"]
