"""Shared pieces of the kernel tests: every SIMD variant this machine runs,
and how to run one on a validated call."""

import ctypes
import mmap

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


def at_page_end(values):
    """A copy of ``values`` whose last byte ends a readable page, the next
    page unreadable, so that a kernel reading past the array faults; None
    where the platform has no mmap with mprotect.  The copy keeps its map
    alive (``.base``)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        protect = libc.mprotect
    except (AttributeError, OSError):
        return None
    nbytes = values.nbytes
    size = -(-max(nbytes, 1) // mmap.PAGESIZE) * mmap.PAGESIZE
    region = mmap.mmap(-1, size + mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    start = ctypes.addressof(ctypes.c_char.from_buffer(region))
    protect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    if protect(ctypes.c_void_p(start + size), mmap.PAGESIZE, 0) != 0:
        return None
    copy = np.frombuffer(region, np.uint8, nbytes, size - nbytes).view(values.dtype)
    copy = copy.reshape(values.shape)
    copy[...] = values
    return copy


__all__ = ["VARIANTS", "TYPES", "random_values", "run_variant", "reference", "_native",
           "at_page_end"]
