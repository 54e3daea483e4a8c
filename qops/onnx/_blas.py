"""Float products of a model session on NumPy's BLAS, one BLAS thread at a time.

A session's integer operators run on qops' thread pool; a float MatMul
between them (attention's, in a dynamically quantized transformer) runs on
NumPy's BLAS, whose own threads then compete with qops' for the same cores
and can take many times the product's time (docs/benchmarks.rst has the
figures).  :func:`one_blas_thread` runs a function with
BLAS on one thread, through threadpoolctl where it is installed (the
setting is the process's, so it is set and restored around the product
alone).
"""

from __future__ import annotations

import threading

import numpy as np

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


def matmul(node, attributes, opset):
    """MatMul of float operands: NumPy's, on operands BLAS can read as they
    are (:func:`_blas_ready`), on one BLAS thread.  Other types go to
    onnx.reference."""

    def run(arguments):
        a, b = (np.asarray(value) for value in arguments[:2])
        if a.dtype.kind != "f" or b.dtype.kind != "f":
            return [np.matmul(a, b)]
        return [one_blas_thread(np.matmul, _blas_ready(a), _blas_ready(b))]

    return run


#: op_type -> implementation(node, attributes, opset), for the default domain.
IMPLEMENTATIONS = {"MatMul": matmul}
