# -- depthwise convolution with AVX-512: pairs of taps per vpdpwssd ---------------
# Included by the AVX-512 variants before _qgemm.pxi (whose _depthwise.pxi
# drives it); the other variants include _depthwise_scalar.pxi instead.
#
# The driver centres one input channel into an int16 plane (x - x_zp, zero
# padded, rows `pitch` apart).  A 32-bit lane of a 64-byte load from int16
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
# Either way a block of outputs spans 32 plane columns; four vectors (two
# stride-1 blocks or four stride-2 blocks, flattened over the output rows)
# are accumulated at a time, each term's weight pair broadcast once for the
# four.  Requantization stays in the registers: int32 + bias, float32 scale,
# clamp, round half to even (vcvtps2dq in the default rounding mode, as the
# scalar rule's rounding trick assumes), zero point, low byte.  The driver
# runs this only when every sum plus bias fits int32.

from libc.stdint cimport int16_t, uint32_t, uint64_t

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
    dw_int dw_broadcast_words "_mm512_set1_epi16"(short value)
    dw_int dw_xor "_mm512_xor_si512"(dw_int a, dw_int b)
    dw_half dw_load_half_masked "_mm256_maskz_loadu_epi8"(dw_mask32 mask, const void* p)
    dw_int dw_widen_bytes "_mm512_cvtepu8_epi16"(dw_half a)
    dw_int dw_subtract_words_masked "_mm512_maskz_sub_epi16"(dw_mask32 mask, dw_int a, dw_int b)

cdef extern from *:
    # The term loop in C: written in Cython, GCC copies the eight sums
    # between registers on every iteration.
    """
    #include <stddef.h>
    #include <stdint.h>
    #include <immintrin.h>
    static inline void qops_depthwise_sums8(const int16_t* const* p, const ptrdiff_t* offsets,
                                            const int32_t* weights, ptrdiff_t terms,
                                            __m512i* sums) {
        const int16_t *p0 = p[0], *p1 = p[1], *p2 = p[2], *p3 = p[3];
        const int16_t *p4 = p[4], *p5 = p[5], *p6 = p[6], *p7 = p[7];
        __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
        __m512i s2 = _mm512_setzero_si512(), s3 = _mm512_setzero_si512();
        __m512i s4 = _mm512_setzero_si512(), s5 = _mm512_setzero_si512();
        __m512i s6 = _mm512_setzero_si512(), s7 = _mm512_setzero_si512();
        for (ptrdiff_t t = 0; t < terms; t++) {
            const __m512i w = _mm512_set1_epi32(weights[t]);
            const ptrdiff_t o = offsets[t];
            s0 = _mm512_dpwssd_epi32(s0, w, _mm512_loadu_si512(p0 + o));
            s1 = _mm512_dpwssd_epi32(s1, w, _mm512_loadu_si512(p1 + o));
            s2 = _mm512_dpwssd_epi32(s2, w, _mm512_loadu_si512(p2 + o));
            s3 = _mm512_dpwssd_epi32(s3, w, _mm512_loadu_si512(p3 + o));
            s4 = _mm512_dpwssd_epi32(s4, w, _mm512_loadu_si512(p4 + o));
            s5 = _mm512_dpwssd_epi32(s5, w, _mm512_loadu_si512(p5 + o));
            s6 = _mm512_dpwssd_epi32(s6, w, _mm512_loadu_si512(p6 + o));
            s7 = _mm512_dpwssd_epi32(s7, w, _mm512_loadu_si512(p7 + o));
        }
        sums[0] = s0; sums[1] = s1; sums[2] = s2; sums[3] = s3;
        sums[4] = s4; sums[5] = s5; sums[6] = s6; sums[7] = s7;
    }
    """
    void depthwise_sums8 "qops_depthwise_sums8"(const int16_t* const* p,
                                                 const Py_ssize_t* offsets,
                                                 const int32_t* weights, Py_ssize_t terms,
                                                 dw_int* sums) nogil

cdef enum:
    DEPTHWISE_PAIRS = 1


cdef struct DepthwiseRequantization:
    dw_int bias
    dw_float multiplier
    dw_float floor_value
    dw_float ceiling_value
    dw_int zero_point


cdef inline dw_int requantize_vector(dw_int sums,
                                     const DepthwiseRequantization* r) noexcept nogil:
    """The output integers of 16 sums, as `requantize` computes them."""
    cdef dw_float value = dw_multiply(dw_to_float(dw_add(sums, r.bias)), r.multiplier)
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


cdef struct Block:
    # The next block of the plane: its output row and block column.
    Py_ssize_t row
    Py_ssize_t column


cdef inline const int16_t* next_block(Block* block, const int16_t* plane, Py_ssize_t row_step,
                                      Py_ssize_t per_row, Py_ssize_t out_h, uint8_t** target,
                                      Py_ssize_t* count, Py_ssize_t width,
                                      Py_ssize_t out_w, uint8_t* out) noexcept nogil:
    """The plane address of `block`, its output address and count; then
    steps `block` on, except past the last block, which repeats."""
    cdef const int16_t* source = plane + block.row * row_step + block.column * 32
    target[0] = out + block.row * out_w + block.column * width
    count[0] = min(width, out_w - block.column * width)
    if block.column + 1 < per_row:
        block.column = block.column + 1
    elif block.row + 1 < out_h:
        block.row = block.row + 1
        block.column = 0
    return source


cdef void depthwise_pairs_plane(const int16_t* plane, Py_ssize_t row_step,
                                const Py_ssize_t* offsets, const int32_t* weights,
                                Py_ssize_t terms, Py_ssize_t out_h, Py_ssize_t out_w,
                                bint interleaved, int32_t bias, float multiplier,
                                int32_t zero_point, int32_t low, int32_t high,
                                uint8_t* out) noexcept nogil:
    """One output plane (out_h x out_w bytes at `out`) of one channel.

    Output row oh reads plane + oh * row_step; term t adds the pair of
    elements at offsets[t] (plus 2j in lane j) times the int16 pair weights[t]
    (first weight in the low half).  Eight vectors at a time: four stride-1
    blocks or eight stride-2 blocks, in row order across rows; a group past
    the last block repeats it (same sums, same bytes)."""
    cdef DepthwiseRequantization r
    cdef Py_ssize_t width = 32 if interleaved else 16   # outputs per block
    cdef Py_ssize_t per_row = (out_w + width - 1) // width
    cdef Py_ssize_t groups = (out_h * per_row * (2 if interleaved else 1) + 7) // 8
    cdef Py_ssize_t n[8]
    cdef uint8_t* o[8]
    cdef const int16_t* p[8]
    cdef dw_int sums[8]
    cdef Py_ssize_t group, i
    cdef Block block
    block.row = 0
    block.column = 0
    r.bias = dw_broadcast(bias)
    r.multiplier = dw_broadcast_float(multiplier)
    r.floor_value = dw_broadcast_float(<float>(low - zero_point))
    r.ceiling_value = dw_broadcast_float(<float>(high - zero_point))
    r.zero_point = dw_broadcast(zero_point)
    for group in range(groups):
        if interleaved:
            for i in range(0, 8, 2):
                p[i] = next_block(&block, plane, row_step, per_row, out_h, &o[i], &n[i], width,
                                  out_w, out)
                p[i + 1] = p[i] + 1
        else:
            for i in range(8):
                p[i] = next_block(&block, plane, row_step, per_row, out_h, &o[i], &n[i], width,
                                  out_w, out)
        depthwise_sums8(p, offsets, weights, terms, sums)
        if interleaved:
            for i in range(0, 8, 2):
                store_pair_block(sums[i], sums[i + 1], &r, o[i], n[i])
        else:
            for i in range(8):
                store_block(sums[i], &r, o[i], n[i])

cdef void depthwise_centre_plane(const uint8_t* source, Py_ssize_t height, Py_ssize_t width,
                                 Py_ssize_t pad_top, Py_ssize_t pad_left, Py_ssize_t rows,
                                 Py_ssize_t columns, Py_ssize_t pitch, uint8_t flip,
                                 int32_t zero, int16_t* plane) noexcept nogil:
    """plane[r, c] <- (x[r - pad_top, c - pad_left] ^ flip) - zero inside the
    image, 0 outside, for r < rows and c < columns rounded up to 32: per
    32 columns one masked load (lanes outside the image are neither read
    nor kept), widen, flip, subtract."""
    cdef dw_int flips = dw_broadcast_words(flip)
    cdef dw_int zeros = dw_broadcast_words(<short>zero)
    cdef Py_ssize_t r, ih, c, low, high
    cdef uint32_t mask
    cdef int16_t* line
    for r in range(rows):
        ih = r - pad_top
        line = plane + r * pitch
        for c in range(0, columns, 32):
            # Lanes [low, high) of this chunk are image columns.
            low = min(max(pad_left - c, 0), 32)
            high = min(max(pad_left + width - c, 0), 32)
            if ih < 0 or ih >= height or high <= low:
                dw_store(line + c, dw_zero())
                continue
            mask = <uint32_t>(((<uint64_t>1 << high) - 1) & ~((<uint64_t>1 << low) - 1))
            dw_store(line + c, dw_subtract_words_masked(
                mask, dw_xor(dw_widen_bytes(dw_load_half_masked(
                    mask, source + ih * width + c - pad_left)), flips), zeros))
