# cython: language_level=3
"""Quantized GEMM with AVX2.  AVX2 has no exact 8-bit dot product (vpmaddubsw
saturates its int16 pair sums), so both operands are widened to int16 once,
by the packers, and vpmaddwd adds exact int32 pairs."""

from libc.stdint cimport int8_t, int16_t, int32_t, uint8_t
from libc.string cimport memcpy

from qops.backends.native.kernels._registers cimport in_register
from qops.backends.native.kernels._requantize cimport RowTerms, TileTerms

include "_ymm.pxi"

# The tile (MR x NR) and its blocks: _qgemm_avx2.pxd.


cdef enum:
    # Two pairs of k per group of four.
    STEPS_PER_GROUP = 2


cdef inline __m256i multiply_add(__m256i sums, __m256i pairs, __m256i panel) noexcept nogil:
    """sums + the exact int32 sums of int16 pairs' products: vpmaddwd + vpaddd,
    the add into sums' register (include/qops_ymm.h)."""
    return multiply_add_epi16(sums, pairs, panel)


include "_tile_rows_ymm.pxi"


cdef inline void short_rows(const uint8_t* a, Py_ssize_t a_stride, Py_ssize_t groups,
                            const int8_t* b, int32_t* tile, int rows) noexcept nogil:
    """One or two rows for microkernel_rows (_short_rows.pxi): tile_rows.
    vpmaddwd's products go to a vpaddd one cycle long, so that a pass of
    one or two rows is bound by its loads, in chains of steps or not."""
    tile_rows(a, a_stride, groups, b, tile, rows, False)


include "_short_rows.pxi"


cdef enum:
    # Bytes ahead of the narrowed panel's loads to prefetch.
    NARROW_PREFETCH = 2048


cdef inline void narrow_rows(const uint8_t* a, Py_ssize_t a_stride, Py_ssize_t groups,
                             const int8_t* narrow, int32_t* tile, int rows) noexcept nogil:
    """One or two rows on a narrowed panel: each pair of k's 16 columns
    sign-extended from 16 bytes as they load (vpmovsxbw), the panel
    prefetched 2 KiB ahead, since these rows read each of its
    bytes once.  Inlined with `rows` constant."""
    cdef __m256i c00 = _mm256_setzero_si256(), c01 = _mm256_setzero_si256()
    cdef __m256i c10 = _mm256_setzero_si256(), c11 = _mm256_setzero_si256()
    cdef __m256i b0, b1, x
    cdef const uint8_t* a0 = a
    cdef const uint8_t* a1 = a + a_stride
    cdef Py_ssize_t step, steps = STEPS_PER_GROUP * groups
    for step in range(steps):
        if step % 2 == 0:
            _mm_prefetch(<const char*>narrow + NARROW_PREFETCH, _MM_HINT_T0)
        b0 = _mm256_cvtepi8_epi16(_mm_loadu_si128(narrow))
        b1 = _mm256_cvtepi8_epi16(_mm_loadu_si128(narrow + 16))
        x = broadcast_step(a0, step)
        c00 = multiply_add(c00, x, b0)
        c01 = multiply_add(c01, x, b1)
        if rows > 1:
            x = broadcast_step(a1, step)
            c10 = multiply_add(c10, x, b0)
            c11 = multiply_add(c11, x, b1)
        narrow += 32
    store_sums_row(tile, c00, c01)
    if rows > 1:
        store_sums_row(tile + NR, c10, c11)


cdef void microkernel_narrow(const uint8_t* a, Py_ssize_t a_stride, Py_ssize_t groups,
                             const int8_t* narrow, int32_t* tile,
                             Py_ssize_t rows) noexcept nogil:
    if rows == 1:
        narrow_rows(a, a_stride, groups, narrow, tile, 1)
    else:
        narrow_rows(a, a_stride, groups, narrow, tile, 2)
    memset(tile + rows * NR, 0, (MR - rows) * NR * sizeof(int32_t))


include "_whole_panels.pxi"
include "_tail_in_passes.pxi"
include "_epilogue_ymm.pxi"


cdef inline __m256i widened_row(const uint8_t* row, __m128i flip) noexcept nogil:
    """16 bytes of a row of B, xor flip, as int16."""
    return _mm256_cvtepi8_epi16(_mm_xor_si128(_mm_loadu_si128(row), flip))


cdef void pack_groups(const uint8_t* rows, Py_ssize_t ldb, Py_ssize_t count, uint8_t flip,
                      int8_t* target, int32_t* sums) noexcept nogil:
    """16 columns of 4 * count rows into count groups of a panel: per pair
    of rows, the two rows' int16 values interleaved column by column
    (unpacks work within 128-bit halves, so the halves are then put in
    column order); sums[c] += the values, summed in registers and stored
    once."""
    cdef __m128i mask = _mm_set1_epi8(<char>flip)
    cdef __m256i ones = _mm256_set1_epi16(1)
    cdef __m256i first_sums = _mm256_loadu_si256(sums)
    cdef __m256i second_sums = _mm256_loadu_si256(sums + 8)
    cdef __m256i k0, k1, k2, k3, low, high, first01, second01, first23, second23
    cdef Py_ssize_t g
    for g in range(count):
        k0 = widened_row(rows, mask)
        k1 = widened_row(rows + ldb, mask)
        k2 = widened_row(rows + 2 * ldb, mask)
        k3 = widened_row(rows + 3 * ldb, mask)
        low = _mm256_unpacklo_epi16(k0, k1)     # columns 0-3 | 8-11
        high = _mm256_unpackhi_epi16(k0, k1)    # columns 4-7 | 12-15
        first01 = _mm256_permute2x128_si256(low, high, 0x20)
        second01 = _mm256_permute2x128_si256(low, high, 0x31)
        low = _mm256_unpacklo_epi16(k2, k3)
        high = _mm256_unpackhi_epi16(k2, k3)
        first23 = _mm256_permute2x128_si256(low, high, 0x20)
        second23 = _mm256_permute2x128_si256(low, high, 0x31)
        _mm256_storeu_si256(target, first01)
        _mm256_storeu_si256(target + 32, second01)
        _mm256_storeu_si256(target + 64, first23)
        _mm256_storeu_si256(target + 96, second23)
        first_sums = _mm256_add_epi32(first_sums, _mm256_add_epi32(
            _mm256_madd_epi16(first01, ones), _mm256_madd_epi16(first23, ones)))
        second_sums = _mm256_add_epi32(second_sums, _mm256_add_epi32(
            _mm256_madd_epi16(second01, ones), _mm256_madd_epi16(second23, ones)))
        rows += 4 * ldb
        target += 8 * NR
    _mm256_storeu_si256(sums, first_sums)
    _mm256_storeu_si256(sums + 8, second_sums)


include "_pack_pair_twice.pxi"
include "_depthwise_avx2.pxi"
include "_qgemm.pxi"
