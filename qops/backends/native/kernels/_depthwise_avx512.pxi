# -- depthwise convolution with AVX-512: pairs of taps per vpdpwssd ---------------
# Included by the AVX-512 variants before _qgemm.pxi (whose _depthwise.pxi
# drives it); the AVX2 and portable variants include _depthwise_avx2.pxi and
# _depthwise_sse2.pxi instead.
#
# The driver widens one input channel into an int16 plane (x, padded with
# x_zp, rows `pitch` apart; x_zp times the weights' sum is taken off the
# accumulators' start).  A 32-bit lane of a 64-byte load from int16
# element e of that plane holds elements (e + 2j, e + 2j + 1) in lane j, and
# vpdpwssd multiplies such a pair by a pair of int16 weights and adds both
# products to the lane's int32 sum, exactly.  So a "term" (an element offset
# and a weight pair) covers two horizontally adjacent taps (dilation 1; the
# second weight is 0 past the last tap), or one tap (other dilations):
#
# * stride 2: output column ow reads element 2 ow + tap column, so the lanes
#   of a load at 2 ow0 + term offset are the terms of outputs ow0 .. ow0 + 15;
# * stride 1: lane j of a load at ow0 + term offset serves output ow0 + 2j and
#   of a load at ow0 + 1 + term offset output ow0 + 2j + 1; the two vectors'
#   requantized bytes are interleaved on the way out.
#
# Either way a block of outputs spans 32 plane columns.  A pass computes
# four output rows of two vectors (a stride-1 block's even and odd outputs,
# or two stride-2 blocks side by side) in eight accumulators that start at
# the bias; each plane row's loads serve all of the four rows that read it,
# so a 3 x 3 stride-1 filter loads once per two vpdpwssd.  Requantization
# stays in the registers: float32 scale, clamp, round half to even
# (vcvtps2dq in the default rounding mode, as the scalar rule's rounding
# trick assumes), zero point, low byte.  The driver runs this only when every
# sum plus bias fits int32 (the accumulators then never wrap).

from libc.stdint cimport int16_t, int64_t, uint32_t, uint64_t

cdef extern from "<immintrin.h>" nogil:
    ctypedef struct dw_int "__m512i":
        pass
    ctypedef struct dw_float "__m512":
        pass
    ctypedef struct dw_half "__m256i":
        pass
    ctypedef struct dw_quarter "__m128i":
        pass
    ctypedef unsigned int dw_mask32 "__mmask32"
    ctypedef unsigned short dw_mask16 "__mmask16"
    dw_int dw_zero "_mm512_setzero_si512"()
    dw_int dw_load "_mm512_loadu_si512"(const void* p)
    dw_int dw_broadcast "_mm512_set1_epi32"(int value)
    dw_int dw_pair_products "_mm512_dpwssd_epi32"(dw_int sums, dw_int a, dw_int b)
    dw_int dw_add "_mm512_add_epi32"(dw_int a, dw_int b)
    dw_int dw_and "_mm512_and_si512"(dw_int a, dw_int b)
    dw_int dw_or "_mm512_or_si512"(dw_int a, dw_int b)
    dw_int dw_shift_left "_mm512_slli_epi32"(dw_int a, unsigned int count)
    dw_float dw_to_float "_mm512_cvtepi32_ps"(dw_int a)
    dw_int dw_to_nearest "_mm512_cvtps_epi32"(dw_float a)
    dw_float dw_broadcast_float "_mm512_set1_ps"(float value)
    dw_float dw_multiply "_mm512_mul_ps"(dw_float a, dw_float b)
    dw_float dw_max "_mm512_max_ps"(dw_float a, dw_float b)
    dw_float dw_min "_mm512_min_ps"(dw_float a, dw_float b)
    dw_half dw_low_words "_mm512_cvtepi32_epi16"(dw_int a)
    dw_quarter dw_low_bytes "_mm512_cvtepi32_epi8"(dw_int a)
    void dw_store_half "_mm256_mask_storeu_epi8"(void* p, dw_mask32 mask, dw_half value)
    void dw_store_quarter "_mm_mask_storeu_epi8"(void* p, dw_mask16 mask, dw_quarter value)
    void dw_store "_mm512_storeu_si512"(void* p, dw_int value)
    dw_half dw_broadcast_bytes "_mm256_set1_epi8"(char value)
    dw_half dw_load_half_merged "_mm256_mask_loadu_epi8"(dw_half fill, dw_mask32 mask,
                                                          const void* p)
    dw_int dw_widen_bytes "_mm512_cvtepu8_epi16"(dw_half a)
    dw_int dw_widen_signed "_mm512_cvtepi8_epi16"(dw_half a)

# The term loop: include/qops_depthwise_terms_avx512.h, rendered from the
# template that renders the SSE2 and AVX2 ones.
cdef extern from "qops_depthwise_terms_avx512.h":
    void depthwise_rows4 "qops_depthwise_rows4_avx512"(
        const int16_t* a, const int16_t* b, Py_ssize_t pitch, Py_ssize_t span,
        const int32_t* kernel_rows, const Py_ssize_t* offsets, Py_ssize_t columns,
        const int32_t* weights, int32_t start, dw_int* sums) nogil

cdef struct DepthwiseRequantization:
    dw_float multiplier
    dw_float floor_value
    dw_float ceiling_value
    dw_int zero_point


cdef inline dw_int requantize_vector(dw_int sums,
                                     const DepthwiseRequantization* r) noexcept nogil:
    """The output integers of 16 sums (bias included), as `requantize` computes them."""
    cdef dw_float value = dw_multiply(dw_to_float(sums), r.multiplier)
    value = dw_min(dw_max(value, r.floor_value), r.ceiling_value)
    return dw_add(dw_to_nearest(value), r.zero_point)


cdef inline void store_pair_block(dw_int even, dw_int odd, const DepthwiseRequantization* r,
                                  uint8_t* target, Py_ssize_t count) noexcept nogil:
    """count (<= 32) outputs of a stride-1 block: even[j] is output 2j, odd[j] 2j + 1."""
    cdef dw_int low_byte = dw_broadcast(0xFF)
    cdef dw_int pairs = dw_or(dw_and(requantize_vector(even, r), low_byte),
                              dw_shift_left(requantize_vector(odd, r), 8))
    dw_store_half(target, <dw_mask32>((<uint64_t>1 << count) - 1), dw_low_words(pairs))


cdef inline void store_block(dw_int sums, const DepthwiseRequantization* r, uint8_t* target,
                             Py_ssize_t count) noexcept nogil:
    """count (<= 16) outputs of a stride-2 block."""
    dw_store_quarter(target, <dw_mask16>((<uint32_t>1 << count) - 1),
                     dw_low_bytes(requantize_vector(sums, r)))


cdef void depthwise_pairs_plane(const int16_t* plane, Py_ssize_t pitch, Py_ssize_t stride_h,
                                Py_ssize_t span, const int32_t* kernel_rows,
                                const Py_ssize_t* offsets, Py_ssize_t columns,
                                const int32_t* weights, Py_ssize_t out_h, Py_ssize_t out_w,
                                bint interleaved, int32_t bias, int64_t largest_sum,
                                float multiplier, int32_t zero_point, int32_t low,
                                int32_t high, uint8_t* out) noexcept nogil:
    """One output plane (out_h x out_w bytes at `out`) of one channel.

    Four output rows at a time, two vectors per row: the even and odd
    outputs of a stride-1 block, or two stride-2 blocks side by side; each
    plane row's loads serve every output row of the four that reads it
    (`kernel_rows`, see depthwise_pairs).  Rows past out_h and a stride-2
    block past the row are computed from the plane's zero margin and not
    stored."""
    cdef DepthwiseRequantization r
    cdef Py_ssize_t width = 32 if interleaved else 16   # outputs per block
    cdef Py_ssize_t per_row = (out_w + width - 1) // width
    cdef Py_ssize_t step = 1 if interleaved else 2
    cdef Py_ssize_t oh, block, i, count
    cdef const int16_t* a
    cdef uint8_t* target
    cdef dw_int sums[8]
    r.multiplier = dw_broadcast_float(multiplier)
    r.floor_value = dw_broadcast_float(<float>(low - zero_point))
    r.ceiling_value = dw_broadcast_float(<float>(high - zero_point))
    r.zero_point = dw_broadcast(zero_point)
    for oh in range(0, out_h, 4):
        block = 0
        while block < per_row:
            a = plane + oh * stride_h * pitch + block * 32
            depthwise_rows4(a, a + (1 if interleaved else 32), pitch, span, kernel_rows,
                            offsets, columns, weights, bias, sums)
            for i in range(min(<Py_ssize_t>4, out_h - oh)):
                target = out + (oh + i) * out_w + block * width
                count = min(width, out_w - block * width)
                if interleaved:
                    store_pair_block(sums[2 * i], sums[2 * i + 1], &r, target, count)
                else:
                    store_block(sums[2 * i], &r, target, count)
                    if block + 1 < per_row:
                        store_block(sums[2 * i + 1], &r, target + 16,
                                    min(width, out_w - (block + 1) * width))
            block = block + step


cdef void depthwise_widen_plane(const uint8_t* source, bint signed, Py_ssize_t width,
                                Py_ssize_t first_row, Py_ssize_t rows, Py_ssize_t pad_left,
                                Py_ssize_t first_chunk, Py_ssize_t chunks,
                                const uint32_t* masks, Py_ssize_t pitch, uint8_t zero,
                                int16_t* plane) noexcept nogil:
    """Image rows 0 .. rows - 1 into plane rows first_row .. first_row + rows
    - 1, chunks first_chunk .. first_chunk + chunks - 1 of 32 columns:
    plane[r, c] <- x[r - first_row, c - pad_left] widened to int16 (signed
    or not) inside the image, the zero point's byte widened outside.  Per
    chunk one masked load (lanes outside the image are neither read nor
    kept; masks[k] for chunk first_chunk + k), widen, store.  The rest of
    the plane is padding, filled once."""
    cdef dw_half zeros = dw_broadcast_bytes(<char>zero)
    cdef Py_ssize_t r, k, c
    cdef int16_t* line
    cdef const uint8_t* row
    for r in range(rows):
        line = plane + (first_row + r) * pitch
        row = source + r * width - pad_left
        if signed:
            for k in range(chunks):
                c = (first_chunk + k) * 32
                dw_store(line + c, dw_widen_signed(dw_load_half_merged(zeros, masks[k], row + c)))
        else:
            for k in range(chunks):
                c = (first_chunk + k) * 32
                dw_store(line + c, dw_widen_bytes(dw_load_half_merged(zeros, masks[k], row + c)))
