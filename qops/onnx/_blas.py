"""Float products of a model session on NumPy's BLAS, one BLAS thread at a time.

A session's integer operators run on qops' thread pool; a float MatMul
between them (attention's, in a dynamically quantized transformer) runs on
NumPy's BLAS, whose own threads then compete with qops' for the same cores
and can take many times the product's time (docs/benchmarks.rst has the
figures).  :func:`one_blas_thread` runs a function with
BLAS on one thread, through threadpoolctl where it is installed (the
setting is the process's, so it is set and restored around the product
alone).  A product of many float32 matrices (attention's heads) shares
them out among the call's threads instead: each matrix pair one call of
that BLAS's sgemm, made from qops' pool (:func:`_pool_matmul`).
"""

from __future__ import annotations

import threading

import numpy as np

from qops.threads import resolve_threads

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
#: their matrices among the pool's threads (a hand-over of microseconds).
SHARED_MIN_WORK = 1 << 20

#: cblas_sgemm of 64-bit integers, by the names BLAS libraries give it
#: (NumPy's wheels bundle OpenBLAS's ILP64 build under the first).
_SGEMM_64_NAMES = ("scipy_cblas_sgemm64_", "cblas_sgemm64_")
_SGEMM = []


def _sgemm_64():
    """The address of the cblas_sgemm (64-bit integers) of the BLAS NumPy
    loaded, found once; 0 where none is found (or the kernels are not built)."""
    if not _SGEMM:
        address = 0
        try:
            import ctypes

            from qops.backends.native.kernels import _float_products  # noqa: F401

            for controller in _blas_libraries():
                library = ctypes.CDLL(controller.filepath)
                for name in _SGEMM_64_NAMES:
                    if hasattr(library, name):
                        address = ctypes.cast(getattr(library, name), ctypes.c_void_p).value
                        break
                if address:
                    break
        except Exception:  # noqa: BLE001 - no such BLAS: NumPy's matmul instead
            address = 0
        _SGEMM.append(address or 0)
    return _SGEMM[0]


def _pool_matmul(a, b, n_threads):
    """``np.matmul(a, b)`` of float32 matrices of one batch shape on the
    pool's threads (qops.backends.native.kernels._float_products), each pair
    one cblas_sgemm call; None where the pool cannot take it (no such BLAS,
    another dtype, a matrix BLAS cannot read in place)."""
    address = _sgemm_64()
    if (not address or a.dtype != np.float32 or b.dtype != np.float32 or a.ndim < 3
            or a.shape[:-2] != b.shape[:-2]):
        return None
    from qops.backends.native.kernels import _float_products

    out = np.empty(a.shape[:-1] + b.shape[-1:], np.float32)
    try:
        _float_products.products(address, a, b, out, n_threads)
    except ValueError:
        return None
    return out


def matmul(node, attributes, opset):
    """MatMul of float operands: NumPy's, on operands BLAS can read as they
    are (:func:`_blas_ready`), on one BLAS thread; a product of many
    float32 matrices large enough shares them among the call's threads
    (:func:`_pool_matmul`).  Other types go to onnx.reference."""

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
                product = one_blas_thread(_pool_matmul, a, b, n_threads)
                if product is not None:
                    return [product]
        return [one_blas_thread(np.matmul, a, b)]

    return run


#: op_type -> implementation(node, attributes, opset), for the default domain.
IMPLEMENTATIONS = {"MatMul": matmul}
