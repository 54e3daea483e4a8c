"""Float products of a model session on NumPy's BLAS, one BLAS thread at a time.

A session's integer operators run on qops' thread pool; a float MatMul
between them (attention's, in a dynamically quantized transformer) runs on
NumPy's BLAS, whose own threads then compete with qops' for the same cores
and can take many times the product's time (docs/benchmarks.rst has the
figures).  :func:`one_blas_thread` runs a function with
BLAS on one thread, through threadpoolctl where it is installed (the
setting is the process's, so it is set and restored around the product
alone).  A product of many matrices (attention's heads) shares them out
among the call's threads instead, each matrix still one BLAS call on one
thread (:func:`_shared_matmul`), qops' idle workers resting meanwhile.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from qops.threads import resolve_threads, workers_resting

_CONTROLLERS = []
_FOUND = threading.Event()
_LOCK = threading.Lock()
# Products under way and the counts to restore when the last one ends:
# concurrent runs must not leave BLAS on one thread.
_ACTIVE = [0, None]


def _blas_libraries():
    """threadpoolctl's controllers of the BLAS libraries loaded, found once."""
    if not _FOUND.is_set():
        with _LOCK:
            if not _FOUND.is_set():
                try:
                    from threadpoolctl import ThreadpoolController

                    _CONTROLLERS.extend(ThreadpoolController().select(
                        user_api="blas").lib_controllers)
                except Exception:  # noqa: BLE001 - without threadpoolctl, BLAS as it is
                    pass
                _FOUND.set()
    return _CONTROLLERS


def one_blas_thread(function, *arguments):
    """``function(*arguments)`` with every BLAS library on one thread."""
    libraries = _blas_libraries()
    if not libraries:
        return function(*arguments)
    with _LOCK:
        if _ACTIVE[0] == 0:
            _ACTIVE[1] = [library.num_threads for library in libraries]
            for library in libraries:
                library.set_num_threads(1)
        _ACTIVE[0] += 1
    try:
        return function(*arguments)
    finally:
        with _LOCK:
            _ACTIVE[0] -= 1
            if _ACTIVE[0] == 0:
                for library, count in zip(libraries, _ACTIVE[1]):
                    library.set_num_threads(count)


def _blas_ready(array):
    """``array`` itself where BLAS can read each of its matrices (rows or
    columns of consecutive elements, the other stride a whole line apart:
    attention's transposed heads are), else a contiguous copy (any other
    strided view leaves BLAS for a slower loop)."""
    if array.ndim >= 2:
        rows, columns = array.shape[-2:]
        row_stride, column_stride = array.strides[-2:]
        size = array.itemsize
        if (column_stride == size and row_stride % size == 0 and row_stride >= columns * size) \
                or (row_stride == size and column_stride % size == 0
                    and column_stride >= rows * size):
            return array
    return np.ascontiguousarray(array)


#: Products of matrices of at least this many multiply-adds in all share
#: their matrices among threads: below it a hand-over costs more than a
#: thread saves.
SHARED_MIN_WORK = 1 << 22

# Python threads for the shared products' other parts, made on first use
# (and again in a forked child, which has none of them): (pid, executor).
_HELPERS = [None, None]


def _helpers(count):
    """An executor of at least ``count`` threads, this process's."""
    with _LOCK:
        pid, executor = _HELPERS
        if executor is None or pid != os.getpid() or executor._max_workers < count:
            executor = ThreadPoolExecutor(max_workers=max(count, 1),
                                          thread_name_prefix="qops-matmul")
            _HELPERS[:] = [os.getpid(), executor]
        return executor


def _shared_matmul(a, b, n_threads):
    """``np.matmul(a, b)`` with the matrices of its first batch axis of more
    than one shared out in contiguous parts, one part per thread (this one
    and helpers), each product of a matrix pair the same BLAS call as
    unshared: the same result, bit for bit, whatever the thread count."""
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    out = np.empty(batch + (a.shape[-2], b.shape[-1]), np.result_type(a, b))
    axis = next(index for index, size in enumerate(batch) if size > 1)
    size = batch[axis]
    parts = min(n_threads, size)
    bounds = [size * part // parts for part in range(parts + 1)]

    def part_of(array, start, stop):
        # The operands' batch axes align with the output's from the right;
        # an axis of one (or none) broadcasts whole.
        position = axis - (out.ndim - array.ndim)
        if position < 0 or array.shape[position] == 1:
            return array
        return array[(slice(None),) * position + (slice(start, stop),)]

    def product(start, stop):
        np.matmul(part_of(a, start, stop), part_of(b, start, stop),
                  out=part_of(out, start, stop))

    with workers_resting():
        futures = [_helpers(parts - 1).submit(product, bounds[part], bounds[part + 1])
                   for part in range(1, parts)]
        try:
            product(bounds[0], bounds[1])
        finally:
            for future in futures:
                future.result()
    return out


def matmul(node, attributes, opset):
    """MatMul of float operands: NumPy's, on operands BLAS can read as they
    are (:func:`_blas_ready`), on one BLAS thread; a product of many
    matrices large enough shares them among the call's threads
    (:func:`_shared_matmul`).  Other types go to onnx.reference."""

    def run(arguments):
        a, b = (np.asarray(value) for value in arguments[:2])
        if a.dtype.kind != "f" or b.dtype.kind != "f":
            return [np.matmul(a, b)]
        a, b = _blas_ready(a), _blas_ready(b)
        n_threads = resolve_threads()
        # Matrices of one batch shape only: NumPy then makes one BLAS call per
        # matrix pair, shared out or not (a broadcast operand may be taken as
        # one larger product instead).
        if n_threads > 1 and a.ndim >= 3 and a.shape[:-2] == b.shape[:-2]:
            work = a.size * b.shape[-1]
            if work >= SHARED_MIN_WORK and any(size > 1 for size in a.shape[:-2]):
                return [one_blas_thread(_shared_matmul, a, b, n_threads)]
        return [one_blas_thread(np.matmul, a, b)]

    return run


#: op_type -> implementation(node, attributes, opset), for the default domain.
IMPLEMENTATIONS = {"MatMul": matmul}
