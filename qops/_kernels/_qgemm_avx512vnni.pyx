# cython: language_level=3
"""Quantized GEMM with AVX-512 VNNI: vpdpbusd multiplies 4 unsigned bytes of
A' by 4 signed bytes of B' and adds the four products into an int32 lane."""

from libc.stdint cimport int8_t, int32_t, uint8_t
from libc.string cimport memcpy

cdef extern from "<immintrin.h>" nogil:
    ctypedef struct __m512i:
        pass
    __m512i _mm512_setzero_si512()
    __m512i _mm512_loadu_si512(const void* p)
    __m512i _mm512_set1_epi32(int value)
    __m512i _mm512_dpbusd_epi32(__m512i accumulator, __m512i a, __m512i b)
    void _mm512_storeu_si512(void* p, __m512i value)

# 8 rows x 32 columns: 16 zmm accumulators (two per row, 16 int32 lanes each),
# two B' loads and one A' broadcast per row per group of 4 k, within the 32
# zmm registers; 16 vpdpbusd per 2 loads keeps the multiply ports busy.  The
# eight row pointers and the step offset fit the general registers.
cdef enum:
    MR = 8
    NR = 32


cdef inline __m512i broadcast4(const uint8_t* p) noexcept nogil:
    cdef int value
    memcpy(&value, p, 4)
    return _mm512_set1_epi32(value)


cdef void microkernel(const uint8_t* const* rows, const Py_ssize_t* offsets, Py_ssize_t steps,
                      Py_ssize_t groups, const int8_t* b, int32_t* tile) noexcept nogil:
    cdef __m512i c00 = _mm512_setzero_si512(), c01 = _mm512_setzero_si512()
    cdef __m512i c10 = _mm512_setzero_si512(), c11 = _mm512_setzero_si512()
    cdef __m512i c20 = _mm512_setzero_si512(), c21 = _mm512_setzero_si512()
    cdef __m512i c30 = _mm512_setzero_si512(), c31 = _mm512_setzero_si512()
    cdef __m512i c40 = _mm512_setzero_si512(), c41 = _mm512_setzero_si512()
    cdef __m512i c50 = _mm512_setzero_si512(), c51 = _mm512_setzero_si512()
    cdef __m512i c60 = _mm512_setzero_si512(), c61 = _mm512_setzero_si512()
    cdef __m512i c70 = _mm512_setzero_si512(), c71 = _mm512_setzero_si512()
    cdef __m512i b0, b1, x
    cdef Py_ssize_t s, g, offset
    cdef const uint8_t* a0
    cdef const uint8_t* a1
    cdef const uint8_t* a2
    cdef const uint8_t* a3
    cdef const uint8_t* a4
    cdef const uint8_t* a5
    cdef const uint8_t* a6
    cdef const uint8_t* a7
    for s in range(steps):
        offset = offsets[s]
        a0 = rows[0] + offset
        a1 = rows[1] + offset
        a2 = rows[2] + offset
        a3 = rows[3] + offset
        a4 = rows[4] + offset
        a5 = rows[5] + offset
        a6 = rows[6] + offset
        a7 = rows[7] + offset
        for g in range(0, 4 * groups, 4):
            b0 = _mm512_loadu_si512(b)
            b1 = _mm512_loadu_si512(b + 64)
            x = broadcast4(a0 + g)
            c00 = _mm512_dpbusd_epi32(c00, x, b0)
            c01 = _mm512_dpbusd_epi32(c01, x, b1)
            x = broadcast4(a1 + g)
            c10 = _mm512_dpbusd_epi32(c10, x, b0)
            c11 = _mm512_dpbusd_epi32(c11, x, b1)
            x = broadcast4(a2 + g)
            c20 = _mm512_dpbusd_epi32(c20, x, b0)
            c21 = _mm512_dpbusd_epi32(c21, x, b1)
            x = broadcast4(a3 + g)
            c30 = _mm512_dpbusd_epi32(c30, x, b0)
            c31 = _mm512_dpbusd_epi32(c31, x, b1)
            x = broadcast4(a4 + g)
            c40 = _mm512_dpbusd_epi32(c40, x, b0)
            c41 = _mm512_dpbusd_epi32(c41, x, b1)
            x = broadcast4(a5 + g)
            c50 = _mm512_dpbusd_epi32(c50, x, b0)
            c51 = _mm512_dpbusd_epi32(c51, x, b1)
            x = broadcast4(a6 + g)
            c60 = _mm512_dpbusd_epi32(c60, x, b0)
            c61 = _mm512_dpbusd_epi32(c61, x, b1)
            x = broadcast4(a7 + g)
            c70 = _mm512_dpbusd_epi32(c70, x, b0)
            c71 = _mm512_dpbusd_epi32(c71, x, b1)
            b += NR * 4
    _mm512_storeu_si512(tile + 0 * NR, c00)
    _mm512_storeu_si512(tile + 0 * NR + 16, c01)
    _mm512_storeu_si512(tile + 1 * NR, c10)
    _mm512_storeu_si512(tile + 1 * NR + 16, c11)
    _mm512_storeu_si512(tile + 2 * NR, c20)
    _mm512_storeu_si512(tile + 2 * NR + 16, c21)
    _mm512_storeu_si512(tile + 3 * NR, c30)
    _mm512_storeu_si512(tile + 3 * NR + 16, c31)
    _mm512_storeu_si512(tile + 4 * NR, c40)
    _mm512_storeu_si512(tile + 4 * NR + 16, c41)
    _mm512_storeu_si512(tile + 5 * NR, c50)
    _mm512_storeu_si512(tile + 5 * NR + 16, c51)
    _mm512_storeu_si512(tile + 6 * NR, c60)
    _mm512_storeu_si512(tile + 6 * NR + 16, c61)
    _mm512_storeu_si512(tile + 7 * NR, c70)
    _mm512_storeu_si512(tile + 7 * NR + 16, c71)


include "_pack_avx2.pxi"
include "_qgemm.pxi"
