"""Shared pieces of the kernel tests: every SIMD variant this machine runs,
and how to run one on a validated call."""

import numpy as np

from qops import _dispatch, _native, _simd

VARIANTS = _simd.available()


def run_variant(operator_run, call, variant, n_threads):
    out = np.empty(call.output_shape, call.output_dtype)
    operator_run(call, out, n_threads, variant=variant)
    return out


def reference(call):
    return _dispatch.execute(call, implementation="reference")


__all__ = ["VARIANTS", "run_variant", "reference", "_native"]
