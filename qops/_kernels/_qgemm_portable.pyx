# cython: language_level=3
"""Quantized GEMM, portable C: the micro-kernel is plain loops the compiler
may vectorize for the baseline instruction set."""

from libc.stdint cimport int8_t, int32_t, uint8_t
from libc.string cimport memset

# 8 x 32 micro-tiles over panels of 32 columns in groups of 4 k.
cdef enum:
    MR = 8
    NR = 32


cdef void microkernel(const uint8_t* const* rows, const Py_ssize_t* offsets, Py_ssize_t steps,
                      Py_ssize_t groups, const int8_t* b, int32_t* tile) noexcept nogil:
    cdef Py_ssize_t s, g, r, c
    cdef int32_t a0, a1, a2, a3
    cdef const uint8_t* a
    cdef const int8_t* column
    memset(tile, 0, MR * NR * sizeof(int32_t))
    for s in range(steps):
        for g in range(groups):
            for r in range(MR):
                a = rows[r] + offsets[s] + 4 * g
                a0 = a[0]
                a1 = a[1]
                a2 = a[2]
                a3 = a[3]
                for c in range(NR):
                    column = b + c * 4
                    tile[r * NR + c] += (a0 * column[0] + a1 * column[1] + a2 * column[2]
                                         + a3 * column[3])
            b += NR * 4


cdef void pack_group32(const uint8_t* row0, const uint8_t* row1, const uint8_t* row2,
                       const uint8_t* row3, uint8_t flip, int8_t* target,
                       int32_t* sums) noexcept nogil:
    """32 columns of four rows into one group of a panel: column c's bytes
    (row0..row3) at target[4c..4c+3]; sums[c] += their sum as signed bytes
    (the driver's column-by-column loop)."""
    pack_columns(row0, row1, row2, row3, NR, flip, target, sums)


include "_depthwise_scalar.pxi"
include "_qgemm.pxi"
