# A matrix multiply small enough that packing, tiling and threads cost more
# than the products: per-tensor parameters, operands read where they lie.

from libc.stdint cimport int32_t, uint8_t


cdef struct SmallMatmul:
    const uint8_t* a            # batch x (m x k), rows k bytes apart
    const uint8_t* b            # batch x (k x n), rows n bytes apart
    uint8_t* out                # batch x (m x n)
    Py_ssize_t batch
    Py_ssize_t m
    Py_ssize_t k
    Py_ssize_t n
    Py_ssize_t a_batch_stride   # bytes between A matrices; 0 broadcasts one
    Py_ssize_t b_batch_stride
    bint a_signed
    bint b_signed
    int32_t a_zero
    int32_t b_zero
    int32_t out_zero
    float multiplier
    int32_t low
    int32_t high


# Products of at most this many multiply-adds run here.  It bounds k too, so
# every sum fits int32: |sum| <= SMALL_LIMIT * 255 * 255 < 2**31.
cdef enum:
    SMALL_LIMIT = 4096


cdef void small_matmul(const SmallMatmul* p) noexcept nogil
