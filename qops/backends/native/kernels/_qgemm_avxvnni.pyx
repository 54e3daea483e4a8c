# cython: language_level=3
"""Quantized GEMM with AVX-VNNI: vpdpbusd on ymm registers (VEX-encoded),
for CPUs that have the 8-bit dot product without AVX-512.  Unsigned A
quads times signed B' quads, summed exactly into int32, on the AVX2
variant's 6 x 16 tile."""

from libc.stdint cimport int8_t, int16_t, int32_t, uint8_t
from libc.string cimport memcpy

from qops.backends.native.kernels._probe cimport PROBE_PLACEMENTS
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
    as vpdpbusd adds into its accumulator (one row: 1 x 256 x 4096 with
    B' packed, 43 to 30 us on one core)."""
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
    each waited out vpdpbusd's latency with eight or six chains, which
    left a 1 x 1 convolution on 7 x 7 pixels (49 rows) a fifth of its time
    in the tail."""
    microkernel(a, a_stride, groups, b, tile)
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
    takes ten, and half the loads (B' of an image, packed each call: 5% of
    a 1 x 1 convolution's time on 28 x 28 pixels)."""
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


# The peak probe (peak_gops in _qgemm.pxi): twelve independent vpdpbusd
# chains on register-resident operands, in assembly with fixed registers as
# the other probes, at four places in a line (_probe.pxd).  The prefix {vex} (written %{vex%} in an asm string)
# asks the assembler for the VEX encoding, which a CPU without AVX-512 runs:
# the bare mnemonic on ymm may be given the EVEX one of AVX512-VNNI with VL.
cdef extern from *:
    """
    #define QOPS_PROBE_AVXVNNI(name, at) \\
    static long long name(long long rounds) { \\
        int sink = 0; \\
        if (rounds <= 0) return 0; \\
        __asm__ volatile( \\
            "mov $0x01010101, %%eax\\n\\t" \\
            "vmovd %%eax, %%xmm12\\n\\t" \\
            "vpbroadcastd %%xmm12, %%ymm12\\n\\t" \\
            "vmovdqa %%ymm12, %%ymm13\\n\\t" \\
            "vpxor %%xmm0, %%xmm0, %%xmm0\\n\\t" \\
            "vpxor %%xmm1, %%xmm1, %%xmm1\\n\\t" \\
            "vpxor %%xmm2, %%xmm2, %%xmm2\\n\\t" \\
            "vpxor %%xmm3, %%xmm3, %%xmm3\\n\\t" \\
            "vpxor %%xmm4, %%xmm4, %%xmm4\\n\\t" \\
            "vpxor %%xmm5, %%xmm5, %%xmm5\\n\\t" \\
            "vpxor %%xmm6, %%xmm6, %%xmm6\\n\\t" \\
            "vpxor %%xmm7, %%xmm7, %%xmm7\\n\\t" \\
            "vpxor %%xmm8, %%xmm8, %%xmm8\\n\\t" \\
            "vpxor %%xmm9, %%xmm9, %%xmm9\\n\\t" \\
            "vpxor %%xmm10, %%xmm10, %%xmm10\\n\\t" \\
            "vpxor %%xmm11, %%xmm11, %%xmm11\\n\\t" \\
            at "1:\\n\\t" \\
            "%{vex%} vpdpbusd %%ymm13, %%ymm12, %%ymm0\\n\\t" \\
            "%{vex%} vpdpbusd %%ymm13, %%ymm12, %%ymm1\\n\\t" \\
            "%{vex%} vpdpbusd %%ymm13, %%ymm12, %%ymm2\\n\\t" \\
            "%{vex%} vpdpbusd %%ymm13, %%ymm12, %%ymm3\\n\\t" \\
            "%{vex%} vpdpbusd %%ymm13, %%ymm12, %%ymm4\\n\\t" \\
            "%{vex%} vpdpbusd %%ymm13, %%ymm12, %%ymm5\\n\\t" \\
            "%{vex%} vpdpbusd %%ymm13, %%ymm12, %%ymm6\\n\\t" \\
            "%{vex%} vpdpbusd %%ymm13, %%ymm12, %%ymm7\\n\\t" \\
            "%{vex%} vpdpbusd %%ymm13, %%ymm12, %%ymm8\\n\\t" \\
            "%{vex%} vpdpbusd %%ymm13, %%ymm12, %%ymm9\\n\\t" \\
            "%{vex%} vpdpbusd %%ymm13, %%ymm12, %%ymm10\\n\\t" \\
            "%{vex%} vpdpbusd %%ymm13, %%ymm12, %%ymm11\\n\\t" \\
            "dec %[rounds]\\n\\t" \\
            "jnz 1b\\n\\t" \\
            QOPS_PROBE_SUM_TWELVE("ymm") \\
            QOPS_PROBE_TWELVE_OPERANDS); \\
        return sink; \\
    }
    QOPS_PROBE_PLACED(qops_probe_avxvnni, QOPS_PROBE_AVXVNNI)
    """
    long long probe_loop "qops_probe_avxvnni"(long long rounds, int placement) noexcept nogil

cdef long long probe_kernel(long long rounds, int placement) noexcept nogil:
    return probe_loop(rounds, placement)


# Multiply-adds per probe round: twelve vpdpbusd of 32 byte products each.
PROBE_MULTIPLY_ADDS = 12 * 32
PROBE_MIX = "vpdpbusd on ymm (AVX-VNNI, u8 x s8 quads, exact)"
# What one round adds to the probe's result: twelve chains, 4 in a lane each.
PROBE_RESULT_PER_ROUND = 12 * 4


include "_depthwise_avx2.pxi"
include "_qgemm.pxi"
