# -- depthwise convolution without SIMD ---------------------------------------------
# Included by the portable variant before _qgemm.pxi: no pair kernel,
# so _depthwise.pxi runs its row kernel (see _depthwise_avx512.pxi).

from libc.stdint cimport int16_t, int64_t, uint32_t

cdef void depthwise_pairs_plane(const int16_t* plane, Py_ssize_t pitch, Py_ssize_t stride_h,
                                Py_ssize_t span, const int32_t* kernel_rows,
                                const Py_ssize_t* offsets, Py_ssize_t columns,
                                const int32_t* weights, Py_ssize_t out_h, Py_ssize_t out_w,
                                bint interleaved, int32_t bias, int64_t largest_sum,
                                float multiplier, int32_t zero_point, int32_t low,
                                int32_t high, uint8_t* out) noexcept nogil:
    pass


cdef void depthwise_widen_plane(const uint8_t* source, bint signed, Py_ssize_t width,
                                Py_ssize_t first_row, Py_ssize_t rows, Py_ssize_t pad_left,
                                Py_ssize_t first_chunk, Py_ssize_t chunks,
                                const uint32_t* masks, Py_ssize_t pitch, uint8_t zero,
                                int16_t* plane) noexcept nogil:
    pass
