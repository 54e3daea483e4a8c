# cython: language_level=3
"""Quantized GEMM with AVX-VNNI: vpdpbusd on ymm registers (VEX-encoded),
for CPUs that have the 8-bit dot product without AVX-512.  Unsigned A
quads times signed B' quads, summed exactly into int32, on the AVX2
variant's 6 x 16 tile."""

from libc.stdint cimport int8_t, int16_t, int32_t, uint8_t
from libc.string cimport memcpy

from qops.backends.native.kernels._registers cimport in_register
from qops.backends.native.kernels._requantize cimport RowTerms, TileTerms

include "_ymm.pxi"

cdef extern from "<immintrin.h>" nogil:
    __m256i _mm256_dpbusd_avx_epi32(__m256i sums, __m256i a, __m256i b)
    __m128i _mm_unpacklo_epi8(__m128i a, __m128i b)
    __m128i _mm_unpackhi_epi8(__m128i a, __m128i b)
    __m128i _mm_unpacklo_epi16(__m128i a, __m128i b)
    __m128i _mm_unpackhi_epi16(__m128i a, __m128i b)
    __m256i _mm256_set_m128i(__m128i high, __m128i low)
    __m256i _mm256_xor_si256(__m256i a, __m256i b)
    __m256i _mm256_unpacklo_epi8(__m256i a, __m256i b)
    __m256i _mm256_unpackhi_epi8(__m256i a, __m256i b)

# The tile (MR x NR) and its blocks: _qgemm_avxvnni.pxd.


cdef enum:
    # One quad of k per group of four.
    STEPS_PER_GROUP = 1


cdef inline __m256i multiply_add(__m256i sums, __m256i quads, __m256i panel) noexcept nogil:
    """sums + the exact int32 sums of unsigned x signed quads: one vpdpbusd."""
    return _mm256_dpbusd_avx_epi32(sums, quads, panel)


include "_tile_rows_ymm.pxi"


cdef inline void short_rows(const uint8_t* a, Py_ssize_t a_stride, Py_ssize_t groups,
                            const int8_t* b, int32_t* tile, int rows) noexcept nogil:
    """One or two rows for microkernel_rows (_short_rows.pxi): chained_rows,
    as vpdpbusd adds into its accumulator."""
    chained_rows(a, a_stride, groups, b, tile, rows)


include "_short_rows.pxi"
include "_whole_panels.pxi"
include "_epilogue_ymm.pxi"


cdef void microkernel_tail(const uint8_t* a, Py_ssize_t a_stride, const uint8_t* tail,
                           Py_ssize_t tail_stride, Py_ssize_t groups, const int8_t* b,
                           int32_t* tile, Py_ssize_t rows) noexcept nogil:
    """The block, then its tail of one or two rows in a pass of three
    chains (chained_rows), the panel still in L1 from the block's pass.
    Two passes of four rows and three (AVX2's way, _tail_in_passes.pxi)
    each waited out vpdpbusd's latency with eight or six chains."""
    microkernel_whole(a, a_stride, groups, b, tile)
    if rows == MR + 2:
        chained_rows(tail, tail_stride, groups, b, tile + MR * NR, 2)
    else:
        chained_rows(tail, tail_stride, groups, b, tile + MR * NR, 1)


cdef void pack_groups(const uint8_t* rows, Py_ssize_t ldb, Py_ssize_t count, uint8_t flip,
                      int8_t* target, int32_t* sums) noexcept nogil:
    """16 columns of 4 * count rows into count groups of a panel: column c's
    four bytes of a group at target[4c..4c+3], by a byte then a word
    interleave (columns 0-3, 4-7, 8-11, 12-15 in turn); sums[c] += their
    sums as signed bytes, one vpdpbusd of the quads with bytes of 1 into
    registers, stored once."""
    cdef __m128i mask = _mm_set1_epi8(<char>flip)
    cdef __m256i ones = _mm256_set1_epi8(1)
    cdef __m256i first_sums = _mm256_loadu_si256(sums)
    cdef __m256i second_sums = _mm256_loadu_si256(sums + 8)
    cdef __m128i k0, k1, k2, k3, low01, high01, low23, high23
    cdef __m256i first, second
    cdef Py_ssize_t g
    for g in range(count):
        k0 = _mm_xor_si128(_mm_loadu_si128(rows), mask)
        k1 = _mm_xor_si128(_mm_loadu_si128(rows + ldb), mask)
        k2 = _mm_xor_si128(_mm_loadu_si128(rows + 2 * ldb), mask)
        k3 = _mm_xor_si128(_mm_loadu_si128(rows + 3 * ldb), mask)
        low01 = _mm_unpacklo_epi8(k0, k1)
        high01 = _mm_unpackhi_epi8(k0, k1)
        low23 = _mm_unpacklo_epi8(k2, k3)
        high23 = _mm_unpackhi_epi8(k2, k3)
        first = _mm256_set_m128i(_mm_unpackhi_epi16(low01, low23), _mm_unpacklo_epi16(low01, low23))
        second = _mm256_set_m128i(_mm_unpackhi_epi16(high01, high23),
                                  _mm_unpacklo_epi16(high01, high23))
        _mm256_storeu_si256(target, first)
        _mm256_storeu_si256(target + 32, second)
        first_sums = _mm256_dpbusd_avx_epi32(first_sums, ones, first)
        second_sums = _mm256_dpbusd_avx_epi32(second_sums, ones, second)
        rows += 4 * ldb
        target += 4 * NR
    _mm256_storeu_si256(sums, first_sums)
    _mm256_storeu_si256(sums + 8, second_sums)


cdef void pack_groups_pair(const uint8_t* rows, Py_ssize_t ldb, Py_ssize_t count, uint8_t flip,
                           int8_t* first_target, int8_t* second_target,
                           int32_t* sums) noexcept nogil:
    """32 columns into two panels' groups, as pack_groups packs 16: a row's
    32 bytes in one load, the byte and word interleaves on ymm (within each
    128-bit half: columns 0-3 and 16-19 of the quads in one vector, 4-7 and
    20-23 in the next, ...), then vperm2i128 joins the halves of each
    panel's two vectors.  Per 16 columns six shuffles where pack_groups
    takes ten, and half the loads (B' of an image is packed each call)."""
    cdef __m256i mask = _mm256_set1_epi8(<char>flip)
    cdef __m256i ones = _mm256_set1_epi8(1)
    cdef __m256i sums0 = _mm256_loadu_si256(sums)
    cdef __m256i sums1 = _mm256_loadu_si256(sums + 8)
    cdef __m256i sums2 = _mm256_loadu_si256(sums + 16)
    cdef __m256i sums3 = _mm256_loadu_si256(sums + 24)
    cdef __m256i k0, k1, k2, k3, low01, high01, low23, high23, q0, q1, q2, q3
    cdef __m256i first0, first1, second0, second1
    cdef Py_ssize_t g
    for g in range(count):
        k0 = _mm256_xor_si256(_mm256_loadu_si256(rows), mask)
        k1 = _mm256_xor_si256(_mm256_loadu_si256(rows + ldb), mask)
        k2 = _mm256_xor_si256(_mm256_loadu_si256(rows + 2 * ldb), mask)
        k3 = _mm256_xor_si256(_mm256_loadu_si256(rows + 3 * ldb), mask)
        low01 = _mm256_unpacklo_epi8(k0, k1)      # columns 0-7 | 16-23
        high01 = _mm256_unpackhi_epi8(k0, k1)     # columns 8-15 | 24-31
        low23 = _mm256_unpacklo_epi8(k2, k3)
        high23 = _mm256_unpackhi_epi8(k2, k3)
        q0 = _mm256_unpacklo_epi16(low01, low23)    # quads of 0-3 | 16-19
        q1 = _mm256_unpackhi_epi16(low01, low23)    # 4-7 | 20-23
        q2 = _mm256_unpacklo_epi16(high01, high23)  # 8-11 | 24-27
        q3 = _mm256_unpackhi_epi16(high01, high23)  # 12-15 | 28-31
        first0 = _mm256_permute2x128_si256(q0, q1, 0x20)
        first1 = _mm256_permute2x128_si256(q2, q3, 0x20)
        second0 = _mm256_permute2x128_si256(q0, q1, 0x31)
        second1 = _mm256_permute2x128_si256(q2, q3, 0x31)
        _mm256_storeu_si256(first_target, first0)
        _mm256_storeu_si256(first_target + 32, first1)
        _mm256_storeu_si256(second_target, second0)
        _mm256_storeu_si256(second_target + 32, second1)
        sums0 = _mm256_dpbusd_avx_epi32(sums0, ones, first0)
        sums1 = _mm256_dpbusd_avx_epi32(sums1, ones, first1)
        sums2 = _mm256_dpbusd_avx_epi32(sums2, ones, second0)
        sums3 = _mm256_dpbusd_avx_epi32(sums3, ones, second1)
        rows += 4 * ldb
        first_target += 4 * NR
        second_target += 4 * NR
    _mm256_storeu_si256(sums, sums0)
    _mm256_storeu_si256(sums + 8, sums1)
    _mm256_storeu_si256(sums + 16, sums2)
    _mm256_storeu_si256(sums + 24, sums3)


include "_narrow_panels.pxi"
include "_depthwise_avx2.pxi"
include "_qgemm.pxi"
