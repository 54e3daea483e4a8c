# -- depthwise convolution with AVX2: pairs of taps per vpmaddwd ------------------
# Included by the AVX2 variant before _qgemm.pxi (whose _depthwise.pxi drives
# it); the AVX-512 variants include _depthwise_avx512.pxi, the portable one
# _depthwise_scalar.pxi.
#
# The design of _depthwise_avx512.pxi on 256-bit registers: a 32-bit lane j
# of a 32-byte load from int16 element e of the widened plane holds elements
# (e + 2j, e + 2j + 1), and vpmaddwd multiplies that pair by a pair of int16
# weights and adds the two products, exactly (|x| <= 255, |w - w_zp| <= 255:
# no pair reaches the one input, -32768 twice, that it saturates); vpaddd
# adds the pair to the lane's int32 sum.  A term covers two horizontally
# adjacent taps (dilation 1) or one (other dilations):
#
# * stride 2: lane j of a load at 2 ow0 + term offset is output ow0 + j;
# * stride 1: lane j of a load at ow0 + term offset is output ow0 + 2j, of
#   a load at ow0 + 1 + term offset output ow0 + 2j + 1, interleaved on the
#   way out.
#
# A block of outputs spans 16 plane columns (half the AVX-512 block, so the
# driver's plane, sized for 32-column blocks, covers every load).  A pass
# computes four output rows of two vectors each in eight accumulators, as
# the AVX-512 kernel does: eight of the sixteen ymm registers, with room for
# the two loads and the broadcast weight pair.  Requantization stays in the
# registers: float32 scale, clamp, round half to even (vcvtps2dq in the
# default rounding mode), zero point, low byte.  The driver runs this only
# when every sum plus bias fits int32.

from libc.stdint cimport int16_t, uint32_t, uint64_t

cdef extern from *:
    # In C: written in Cython, GCC copies the sums between registers on every
    # iteration of the term loop.
    """
    #include <stddef.h>
    #include <stdint.h>
    #include <string.h>
    #include <immintrin.h>
    /* sums[2r + v] <- start + the sum over plane rows i < span with
       kh = kernel_rows[4i + r] >= 0, and term columns c < columns, of the pairs at
       (a or b) + i * pitch + offsets[c] (v = 0 or 1) times weights[kh * columns + c]. */
    static inline void qops_depthwise_rows4_avx2(const int16_t* a, const int16_t* b,
                                                 ptrdiff_t pitch, ptrdiff_t span,
                                                 const int32_t* kernel_rows,
                                                 const ptrdiff_t* offsets, ptrdiff_t columns,
                                                 const int32_t* weights, int32_t start,
                                                 __m256i* sums) {
        const __m256i first = _mm256_set1_epi32(start);
        __m256i s0 = first, s1 = first, s2 = first, s3 = first;
        __m256i s4 = first, s5 = first, s6 = first, s7 = first;
        for (ptrdiff_t i = 0; i < span; i++) {
            const int16_t* row_a = a + i * pitch;
            const int16_t* row_b = b + i * pitch;
            const int32_t k0 = kernel_rows[4 * i], k1 = kernel_rows[4 * i + 1];
            const int32_t k2 = kernel_rows[4 * i + 2], k3 = kernel_rows[4 * i + 3];
            for (ptrdiff_t c = 0; c < columns; c++) {
                const __m256i x = _mm256_loadu_si256((const __m256i*)(row_a + offsets[c]));
                const __m256i y = _mm256_loadu_si256((const __m256i*)(row_b + offsets[c]));
                __m256i w;
                if (k0 >= 0) {
                    w = _mm256_set1_epi32(weights[k0 * columns + c]);
                    s0 = _mm256_add_epi32(s0, _mm256_madd_epi16(x, w));
                    s1 = _mm256_add_epi32(s1, _mm256_madd_epi16(y, w));
                }
                if (k1 >= 0) {
                    w = _mm256_set1_epi32(weights[k1 * columns + c]);
                    s2 = _mm256_add_epi32(s2, _mm256_madd_epi16(x, w));
                    s3 = _mm256_add_epi32(s3, _mm256_madd_epi16(y, w));
                }
                if (k2 >= 0) {
                    w = _mm256_set1_epi32(weights[k2 * columns + c]);
                    s4 = _mm256_add_epi32(s4, _mm256_madd_epi16(x, w));
                    s5 = _mm256_add_epi32(s5, _mm256_madd_epi16(y, w));
                }
                if (k3 >= 0) {
                    w = _mm256_set1_epi32(weights[k3 * columns + c]);
                    s6 = _mm256_add_epi32(s6, _mm256_madd_epi16(x, w));
                    s7 = _mm256_add_epi32(s7, _mm256_madd_epi16(y, w));
                }
            }
        }
        sums[0] = s0; sums[1] = s1; sums[2] = s2; sums[3] = s3;
        sums[4] = s4; sums[5] = s5; sums[6] = s6; sums[7] = s7;
    }

    /* The output integers of 8 sums (bias included), as `requantize` computes
       them, each masked to its low byte. */
    static inline __m256i qops_depthwise_requantize_avx2(__m256i sums, __m256 multiplier,
                                                         __m256 floor_value,
                                                         __m256 ceiling_value,
                                                         __m256i zero_point) {
        __m256 value = _mm256_mul_ps(_mm256_cvtepi32_ps(sums), multiplier);
        value = _mm256_min_ps(_mm256_max_ps(value, floor_value), ceiling_value);
        return _mm256_and_si256(_mm256_add_epi32(_mm256_cvtps_epi32(value), zero_point),
                                _mm256_set1_epi32(0xFF));
    }

    /* count (<= 16) outputs of a stride-1 block: even lane j is output 2j,
       odd lane j output 2j + 1. */
    static inline void qops_depthwise_store_pairs_avx2(__m256i even, __m256i odd,
                                                       __m256 multiplier, __m256 floor_value,
                                                       __m256 ceiling_value,
                                                       __m256i zero_point, uint8_t* target,
                                                       ptrdiff_t count) {
        const __m256i pairs = _mm256_or_si256(
            qops_depthwise_requantize_avx2(even, multiplier, floor_value, ceiling_value,
                                           zero_point),
            _mm256_slli_epi32(qops_depthwise_requantize_avx2(odd, multiplier, floor_value,
                                                             ceiling_value, zero_point), 8));
        /* Lane j's low 16 bits are outputs 2j and 2j + 1: pack each 128-bit
           half's four, then bring the halves' packs together. */
        const __m256i words = _mm256_permute4x64_epi64(_mm256_packus_epi32(pairs, pairs), 0x08);
        const __m128i bytes = _mm256_castsi256_si128(words);
        if (count >= 16) {
            _mm_storeu_si128((__m128i*)target, bytes);
        } else {
            uint8_t line[16];
            _mm_storeu_si128((__m128i*)line, bytes);
            memcpy(target, line, (size_t)count);
        }
    }

    /* count (<= 8) outputs of a stride-2 block. */
    static inline void qops_depthwise_store_block_avx2(__m256i sums, __m256 multiplier,
                                                       __m256 floor_value,
                                                       __m256 ceiling_value,
                                                       __m256i zero_point, uint8_t* target,
                                                       ptrdiff_t count) {
        const __m256i values = qops_depthwise_requantize_avx2(sums, multiplier, floor_value,
                                                             ceiling_value, zero_point);
        const __m256i words = _mm256_packus_epi32(values, values);
        const __m256i bytes = _mm256_packus_epi16(words, words);
        /* Each 128-bit half now starts with its four outputs. */
        const uint32_t low = (uint32_t)_mm256_extract_epi32(bytes, 0);
        const uint32_t high = (uint32_t)_mm256_extract_epi32(bytes, 4);
        const uint64_t line = (uint64_t)low | ((uint64_t)high << 32);
        memcpy(target, &line, (size_t)(count < 8 ? count : 8));
    }

    /* x[0 .. count) widened to int16 into line[0 .. count), loads and stores
       of 16 (or 8) values, the last one overlapping the one before it: no
       byte outside the run is read, no element outside it written. */
    static inline void qops_depthwise_widen_run_avx2(const uint8_t* x, ptrdiff_t count,
                                                     int is_signed, int16_t* line) {
        if (count >= 16) {
            for (ptrdiff_t i = 0;; i += 16) {
                const ptrdiff_t at = i + 16 <= count ? i : count - 16;
                const __m128i bytes = _mm_loadu_si128((const __m128i*)(x + at));
                _mm256_storeu_si256((__m256i*)(line + at), is_signed
                                    ? _mm256_cvtepi8_epi16(bytes) : _mm256_cvtepu8_epi16(bytes));
                if (at + 16 >= count) break;
            }
        } else if (count >= 8) {
            for (ptrdiff_t at = 0;; at = count - 8) {
                const __m128i bytes = _mm_loadl_epi64((const __m128i*)(x + at));
                _mm_storeu_si128((__m128i*)(line + at), is_signed
                                 ? _mm_cvtepi8_epi16(bytes) : _mm_cvtepu8_epi16(bytes));
                if (at == count - 8) break;
            }
        } else {
            for (ptrdiff_t i = 0; i < count; i++) {
                line[i] = is_signed ? (int16_t)(int8_t)x[i] : (int16_t)x[i];
            }
        }
    }

    /* Image row `row` (plane column c holds image column c - pad_left) into
       chunks first_chunk .. first_chunk + chunks - 1 of 32 plane columns;
       masks[k] marks the run of chunk k's columns that hold the image.  Only
       those are written: the rest of the plane is padding, filled with the
       zero point once. */
    static inline void qops_depthwise_widen_row_avx2(const uint8_t* row, int is_signed,
                                                     ptrdiff_t first_chunk, ptrdiff_t chunks,
                                                     const uint32_t* masks, int16_t* line) {
        for (ptrdiff_t k = 0; k < chunks; k++) {
            if (masks[k] == 0) {
                continue;
            }
            const ptrdiff_t c = (first_chunk + k) * 32 + __builtin_ctz(masks[k]);
            const ptrdiff_t end = (first_chunk + k) * 32 + 32 - __builtin_clz(masks[k]);
            qops_depthwise_widen_run_avx2(row + c, end - c, is_signed, line + c);
        }
    }
    """
    ctypedef struct dw_int "__m256i":
        pass
    ctypedef struct dw_float "__m256":
        pass
    dw_int dw_broadcast "_mm256_set1_epi32"(int value) nogil
    dw_float dw_broadcast_float "_mm256_set1_ps"(float value) nogil
    void depthwise_rows4 "qops_depthwise_rows4_avx2"(
        const int16_t* a, const int16_t* b, Py_ssize_t pitch, Py_ssize_t span,
        const int32_t* kernel_rows, const Py_ssize_t* offsets, Py_ssize_t columns,
        const int32_t* weights, int32_t start, dw_int* sums) nogil
    void store_pair_block "qops_depthwise_store_pairs_avx2"(
        dw_int even, dw_int odd, dw_float multiplier, dw_float floor_value,
        dw_float ceiling_value, dw_int zero_point, uint8_t* target, Py_ssize_t count) nogil
    void store_block "qops_depthwise_store_block_avx2"(
        dw_int sums, dw_float multiplier, dw_float floor_value, dw_float ceiling_value,
        dw_int zero_point, uint8_t* target, Py_ssize_t count) nogil
    void widen_row "qops_depthwise_widen_row_avx2"(
        const uint8_t* row, int is_signed, Py_ssize_t first_chunk, Py_ssize_t chunks,
        const uint32_t* masks, int16_t* line) nogil


cdef void depthwise_pairs_plane(const int16_t* plane, Py_ssize_t pitch, Py_ssize_t stride_h,
                                Py_ssize_t span, const int32_t* kernel_rows,
                                const Py_ssize_t* offsets, Py_ssize_t columns,
                                const int32_t* weights, Py_ssize_t out_h, Py_ssize_t out_w,
                                bint interleaved, int32_t bias, float multiplier,
                                int32_t zero_point, int32_t low, int32_t high,
                                uint8_t* out) noexcept nogil:
    """One output plane (out_h x out_w bytes at `out`) of one channel, four
    output rows at a time, two vectors per row: the even and odd outputs of a
    stride-1 block, or two stride-2 blocks side by side.  Rows past out_h and
    a stride-2 block past the row are computed from the plane's zero margin
    and not stored."""
    cdef Py_ssize_t width = 16 if interleaved else 8   # outputs per block
    cdef Py_ssize_t per_row = (out_w + width - 1) // width
    cdef Py_ssize_t step = 1 if interleaved else 2
    cdef Py_ssize_t oh, block, i, count
    cdef const int16_t* a
    cdef uint8_t* target
    cdef dw_int sums[8]
    cdef dw_float scale = dw_broadcast_float(multiplier)
    cdef dw_float floor_value = dw_broadcast_float(<float>(low - zero_point))
    cdef dw_float ceiling_value = dw_broadcast_float(<float>(high - zero_point))
    cdef dw_int zero = dw_broadcast(zero_point)
    for oh in range(0, out_h, 4):
        block = 0
        while block < per_row:
            a = plane + oh * stride_h * pitch + block * 16
            depthwise_rows4(a, a + (1 if interleaved else 16), pitch, span, kernel_rows,
                            offsets, columns, weights, bias, sums)
            for i in range(min(<Py_ssize_t>4, out_h - oh)):
                target = out + (oh + i) * out_w + block * width
                count = min(width, out_w - block * width)
                if interleaved:
                    store_pair_block(sums[2 * i], sums[2 * i + 1], scale, floor_value,
                                     ceiling_value, zero, target, count)
                else:
                    store_block(sums[2 * i], scale, floor_value, ceiling_value, zero, target,
                                count)
                    if block + 1 < per_row:
                        store_block(sums[2 * i + 1], scale, floor_value, ceiling_value, zero,
                                    target + 8, min(width, out_w - (block + 1) * width))
            block = block + step


cdef void depthwise_widen_plane(const uint8_t* source, bint signed, Py_ssize_t width,
                                Py_ssize_t first_row, Py_ssize_t rows, Py_ssize_t pad_left,
                                Py_ssize_t first_chunk, Py_ssize_t chunks,
                                const uint32_t* masks, Py_ssize_t pitch, uint8_t zero,
                                int16_t* plane) noexcept nogil:
    """Image rows 0 .. rows - 1 into plane rows first_row .. first_row + rows
    - 1 (see _depthwise_avx512.pxi): plane[r, c] <- x[r - first_row, c -
    pad_left] widened to int16 inside the image; the plane's padding (the
    zero point) is left as the driver filled it."""
    cdef Py_ssize_t r
    for r in range(rows):
        widen_row(source + r * width - pad_left, signed, first_chunk, chunks, masks,
                  plane + (first_row + r) * pitch)
