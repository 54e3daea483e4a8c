# cython: language_level=3
"""The small matrix multiply: see _small.pxd.

No packing, no tiles, no parallel region: for a few thousand multiply-adds
those cost more than the arithmetic, and a call's time is its overhead.
One thread, so the result trivially does not depend on the thread count.
"""

from libc.stdint cimport int8_t, int32_t, uint8_t

from qops.backends.native.kernels._requantize cimport requantize


cdef inline int32_t centred(const uint8_t* source, bint signed, int32_t zero) noexcept nogil:
    if signed:
        return <int32_t>(<const int8_t*>source)[0] - zero
    return <int32_t>source[0] - zero


cdef void small_matmul(const SmallMatmul* p) noexcept nogil:
    cdef Py_ssize_t index, i, j, kk
    cdef const uint8_t* a
    cdef const uint8_t* b
    cdef uint8_t* out
    cdef int32_t sum
    for index in range(p.batch):
        a = p.a + index * p.a_batch_stride
        b = p.b + index * p.b_batch_stride
        out = p.out + index * p.m * p.n
        for i in range(p.m):
            for j in range(p.n):
                sum = 0
                for kk in range(p.k):
                    sum += (centred(a + i * p.k + kk, p.a_signed, p.a_zero)
                            * centred(b + kk * p.n + j, p.b_signed, p.b_zero))
                out[i * p.n + j] = <uint8_t>requantize(sum, p.multiplier, p.out_zero, p.low,
                                                       p.high)
