# cython: language_level=3
"""Float products of many matrices on the pool's threads, each matrix pair
one call of a BLAS ``cblas_sgemm`` whose address the caller found (NumPy's
own BLAS, with 64-bit integers: see qops.onnx._blas).

The pool's workers take the matrices in contiguous parts, as qops' kernels
share their work, and are already spinning in a model session: a hand-over
of microseconds, where a Python thread's takes tens.  Each pair is the same
call whichever thread makes it, so the results do not depend on the thread
count.  BLAS must be on one thread meanwhile (the caller sets it): two
threads then make their calls side by side, as two Python threads calling
NumPy do.
"""

from libc.stdint cimport int64_t, uintptr_t

import numpy as np

from qops.backends.native.kernels._qops_pool cimport run_range

# cblas_sgemm with 64-bit integers (OpenBLAS's ILP64 interface): order,
# transposes, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc.
ctypedef void (*sgemm_64)(int order, int transpose_a, int transpose_b, int64_t m, int64_t n,
                          int64_t k, float alpha, const float* a, int64_t lda, const float* b,
                          int64_t ldb, float beta, float* c, int64_t ldc) noexcept nogil

cdef enum:
    ROW_MAJOR = 101
    NO_TRANSPOSE = 111
    TRANSPOSE = 112


cdef struct Products:
    sgemm_64 sgemm
    const float* a
    const float* b
    float* out
    const int64_t* a_offsets                # elements from a's start to each matrix
    const int64_t* b_offsets
    Py_ssize_t out_step
    int64_t m, n, k, lda, ldb, ldc
    int transpose_a, transpose_b


cdef void products_range(void* context, Py_ssize_t start, Py_ssize_t stop,
                         int slot) noexcept nogil:
    cdef const Products* p = <const Products*>context
    cdef Py_ssize_t index
    for index in range(start, stop):
        p.sgemm(ROW_MAJOR, p.transpose_a, p.transpose_b, p.m, p.n, p.k, 1.0,
                p.a + p.a_offsets[index], p.lda, p.b + p.b_offsets[index], p.ldb, 0.0,
                p.out + index * p.out_step, p.ldc)


cdef int64_t leading(array, bint* transposed) except -1:
    """A matrix's leading dimension (elements) and whether BLAS reads it
    transposed: rows of consecutive elements (its row stride), else
    columns of them (its column stride)."""
    rows, columns = array.shape[array.ndim - 2], array.shape[array.ndim - 1]
    row_stride = array.strides[array.ndim - 2] // 4
    column_stride = array.strides[array.ndim - 1] // 4
    if column_stride == 1 and row_stride >= max(columns, 1):
        transposed[0] = False
        return row_stride
    if row_stride == 1 and column_stride >= max(rows, 1):
        transposed[0] = True
        return column_stride
    raise ValueError("products: a matrix BLAS cannot read in place")


def _offsets(array):
    """Each matrix's start in elements from the array's, in C order of its
    batch axes (a view's, whatever its strides)."""
    batch = array.shape[:array.ndim - 2]
    index = np.indices(batch, np.int64).reshape(len(batch), -1)
    steps = np.array([stride // 4 for stride in array.strides[:array.ndim - 2]], np.int64)
    return np.ascontiguousarray((index * steps[:, None]).sum(axis=0), np.int64)


def products(uintptr_t sgemm, a, b, out, int n_threads):
    """out[...] <- a[...] @ b[...], matrix by matrix, for float32 arrays of
    one batch shape (at least one batch axis): a (..., m, k), b (..., k, n),
    out (..., m, n) C-contiguous; each matrix of a and b readable by BLAS in
    place (rows or columns of consecutive elements), the batch axes of any
    strides.  ``sgemm`` is cblas_sgemm's address (64-bit integers).  The
    arrays are checked (ValueError)."""
    cdef Products p
    cdef bint transposed
    cdef const int64_t[::1] a_offsets, b_offsets
    if (sgemm == 0 or a.dtype != "float32" or b.dtype != "float32" or out.dtype != "float32"
            or a.ndim < 3 or a.ndim != b.ndim or a.ndim != out.ndim
            or not out.flags.c_contiguous
            or a.shape[:a.ndim - 2] != out.shape[:a.ndim - 2]
            or b.shape[:a.ndim - 2] != out.shape[:a.ndim - 2]
            or a.shape[a.ndim - 1] != b.shape[a.ndim - 2]
            or out.shape[a.ndim - 2] != a.shape[a.ndim - 2]
            or out.shape[a.ndim - 1] != b.shape[a.ndim - 1]
            or any(stride % 4 for stride in a.strides + b.strides)):
        raise ValueError("products: the arrays do not describe the products")
    if out.size == 0:
        return
    if a.shape[a.ndim - 1] == 0:
        out[...] = 0
        return
    p.sgemm = <sgemm_64>sgemm
    p.m, p.k, p.n = a.shape[a.ndim - 2], a.shape[a.ndim - 1], b.shape[b.ndim - 1]
    p.lda = leading(a, &transposed)
    p.transpose_a = TRANSPOSE if transposed else NO_TRANSPOSE
    p.ldb = leading(b, &transposed)
    p.transpose_b = TRANSPOSE if transposed else NO_TRANSPOSE
    p.ldc = p.n
    p.out_step = p.m * p.n
    a_offsets = _offsets(a)
    b_offsets = _offsets(b)
    p.a_offsets = &a_offsets[0]
    p.b_offsets = &b_offsets[0]
    if not (a.flags.aligned and b.flags.aligned and out.flags.aligned):
        raise ValueError("products: a matrix BLAS cannot read in place (its floats unaligned)")
    p.a = <const float*><uintptr_t>a.__array_interface__["data"][0]
    p.b = <const float*><uintptr_t>b.__array_interface__["data"][0]
    p.out = <float*><uintptr_t>out.__array_interface__["data"][0]
    with nogil:
        run_range(products_range, &p, a_offsets.shape[0], 1, max(n_threads, 1))
