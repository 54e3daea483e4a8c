# -- the pair kernel's plane driver, for 256-bit (AVX2) and 128-bit (SSE2) ----------
# Included at the end of _depthwise_avx2.pxi and _depthwise_sse2.pxi, whose C
# defines, at its own vector width, the names used below: DW_LANES (int32
# lanes per vector), the vector types dw_int and dw_float, depthwise_rows4
# (four output rows of two vectors), the stores (requantize one row's two
# vectors into bytes), the unrolled 3 x 3 planes and widen_run.  What is
# written here is the same at both widths: which pass reads where, and
# which store takes its sums.
#
# A pass is four output rows by 2 * DW_LANES outputs: in each row a stride-1
# block's even and odd outputs (loads at `a` and a + 1), or two stride-2
# blocks side by side (loads at `a` and a + 2 * DW_LANES).  Either way its
# loads stay inside the plane _depthwise.pxi sizes for 32-column blocks.

from libc.math cimport fabs
from libc.stdint cimport int16_t, int64_t, uint32_t

from qops.backends.native.kernels._requantize cimport packs_clamp_exactly

cdef extern from "qops_depthwise_pairs.h":
    bint fixed_shape "qops_depthwise_fixed_shape"(
        const int32_t* kernel_rows, Py_ssize_t span, const Py_ssize_t* offsets,
        Py_ssize_t columns, Py_ssize_t stride_h, int kernel_h) nogil
    int count_trailing_zeros "__builtin_ctz"(unsigned int value) nogil
    int count_leading_zeros "__builtin_clz"(unsigned int value) nogil


cdef void depthwise_pairs_plane(const int16_t* plane, Py_ssize_t pitch, Py_ssize_t stride_h,
                                Py_ssize_t span, const int32_t* kernel_rows,
                                const Py_ssize_t* offsets, Py_ssize_t columns,
                                const int32_t* weights, Py_ssize_t out_h, Py_ssize_t out_w,
                                bint interleaved, int32_t bias, int64_t largest_sum,
                                float multiplier, int32_t zero_point, int32_t low,
                                int32_t high, uint8_t* out) noexcept nogil:
    """One output plane (out_h x out_w bytes at `out`) of one channel, a pass
    of four rows by 2 * DW_LANES outputs at a time.  Rows past out_h and a
    stride-2 block past the row are computed from the plane's margin and not
    stored."""
    cdef Py_ssize_t width = 2 * DW_LANES
    cdef Py_ssize_t oh, start, i, count
    cdef const int16_t* a
    cdef uint8_t* target
    cdef dw_int sums[8]
    cdef dw_float scale = dw_broadcast_float(multiplier)
    cdef dw_float floor_value = dw_broadcast_float(<float>(low - zero_point))
    cdef dw_float ceiling_value = dw_broadcast_float(<float>(high - zero_point))
    cdef dw_int zero = dw_broadcast(zero_point)
    # Saturating packs clamp to the output type where they may (|sum| <=
    # largest_sum).
    cdef bint signed_out = low == -128 and high == 127
    cdef bint packed = packs_clamp_exactly(fabs(<double>multiplier) * <double>largest_sum,
                                           low, high)
    # 3 x 3 at vertical stride 1 or 2: the unrolled loops.
    cdef int shape = 0
    if columns == 2 and stride_h <= 2 and fixed_shape(kernel_rows, span, offsets, columns,
                                                      stride_h, 3):
        shape = <int>stride_h
    if packed and shape == 1:
        depthwise_plane_3x3s1(plane, pitch, weights, out_h, out_w, interleaved, bias, multiplier,
                              zero_point, signed_out, out)
        return
    if packed and shape == 2:
        depthwise_plane_3x3s2(plane, pitch, weights, out_h, out_w, interleaved, bias, multiplier,
                              zero_point, signed_out, out)
        return
    for oh in range(0, out_h, 4):
        start = 0
        while start < out_w:
            a = plane + oh * stride_h * pitch + (start if interleaved else 2 * start)
            depthwise_rows4(a, a + (1 if interleaved else width), pitch, span, kernel_rows,
                            offsets, columns, weights, bias, sums)
            count = min(width, out_w - start)
            for i in range(min(<Py_ssize_t>4, out_h - oh)):
                target = out + (oh + i) * out_w + start
                if packed and interleaved:
                    store_pair_block_packed(sums[2 * i], sums[2 * i + 1], scale, zero,
                                            signed_out, target, count)
                elif packed:
                    store_blocks_packed(sums[2 * i], sums[2 * i + 1], scale, zero, signed_out,
                                        target, count)
                elif interleaved:
                    store_pair_block(sums[2 * i], sums[2 * i + 1], scale, floor_value,
                                     ceiling_value, zero, target, count)
                else:
                    store_block(sums[2 * i], scale, floor_value, ceiling_value, zero, target,
                                min(<Py_ssize_t>DW_LANES, count))
                    if count > DW_LANES:
                        store_block(sums[2 * i + 1], scale, floor_value, ceiling_value, zero,
                                    target + DW_LANES, count - DW_LANES)
            start = start + width


cdef void depthwise_widen_plane(const uint8_t* source, bint signed, Py_ssize_t width,
                                Py_ssize_t first_row, Py_ssize_t rows, Py_ssize_t pad_left,
                                Py_ssize_t first_chunk, Py_ssize_t chunks,
                                const uint32_t* masks, Py_ssize_t pitch, uint8_t zero,
                                int16_t* plane) noexcept nogil:
    """Image rows 0 .. rows - 1 into plane rows first_row .. first_row + rows
    - 1 (see _depthwise_avx512.pxi): plane[r, c] <- x[r - first_row, c -
    pad_left] widened to int16 inside the image; the plane's padding (the
    zero point) is left as the driver filled it."""
    # The chunks' image columns are one run (the masks mark its pieces):
    # widened whole, each row is a few wide loads, where chunk by chunk it
    # was mostly the bookkeeping of short runs.
    cdef Py_ssize_t r, first = -1, end = 0, k
    for k in range(chunks):
        if masks[k]:
            if first < 0:
                first = (first_chunk + k) * 32 + count_trailing_zeros(masks[k])
            end = (first_chunk + k) * 32 + 32 - count_leading_zeros(masks[k])
    if first < 0:
        return
    for r in range(rows):
        widen_run(source + r * width - pad_left + first, end - first, signed,
                  plane + (first_row + r) * pitch + first)
