# cython: language_level=3
"""Quantized GEMM with AVX2.  AVX2 has no exact 8-bit dot product (vpmaddubsw
saturates its int16 pair sums), so both operands are widened to int16 once,
by the packers, and vpmaddwd adds exact int32 pairs."""

from libc.stdint cimport int8_t, int16_t, int32_t, uint8_t
from libc.string cimport memcpy

from qops.backends.native.kernels._probe cimport PROBE_PLACEMENTS
from qops.backends.native.kernels._registers cimport in_register
from qops.backends.native.kernels._requantize cimport RowTerms, TileTerms

include "_ymm.pxi"

# The tile (MR x NR) and its blocks: _qgemm_avx2.pxd.


cdef enum:
    # Two pairs of k per group of four.
    STEPS_PER_GROUP = 2


cdef inline __m256i multiply_add(__m256i sums, __m256i pairs, __m256i panel) noexcept nogil:
    """sums + the exact int32 sums of int16 pairs' products: vpmaddwd + vpaddd."""
    return _mm256_add_epi32(sums, _mm256_madd_epi16(pairs, panel))


include "_tile_rows_ymm.pxi"


cdef inline void short_rows(const uint8_t* a, Py_ssize_t a_stride, Py_ssize_t groups,
                            const int8_t* b, int32_t* tile, int rows) noexcept nogil:
    """One or two rows for microkernel_rows (_short_rows.pxi): tile_rows.
    vpmaddwd's products go to a vpaddd one cycle long, so that a pass of
    one or two rows is bound by its loads, in chains of steps or not."""
    tile_rows(a, a_stride, groups, b, tile, rows, False)


include "_short_rows.pxi"
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


# The peak probe (peak_gops in _qgemm.pxi): six independent vpmaddwd +
# vpaddd chains on register-resident int16 operands, the micro-kernel's own
# arithmetic without its loads.  Written in assembly with fixed registers:
# compiled from intrinsics, the loop had accumulators spilled to the stack
# and timed store forwarding instead of the multiplier.  At four places in
# a line (_probe.pxd): at the one the linker gave it, AMD Zen 5 ran it 15%
# slower, and the bench read the GEMM at 107% of its "peak".
cdef extern from *:
    """
    /* What both probes share: six int32 chains (ymm0-5) zeroed and operands
       of all ones bits (ymm6, ymm7) before the loop; after it, the round
       counted down and the chains summed into the result. */
    #define QOPS_PROBE_START \\
        "vpxor %%xmm0, %%xmm0, %%xmm0\\n\\t" "vpxor %%xmm1, %%xmm1, %%xmm1\\n\\t" \\
        "vpxor %%xmm2, %%xmm2, %%xmm2\\n\\t" "vpxor %%xmm3, %%xmm3, %%xmm3\\n\\t" \\
        "vpxor %%xmm4, %%xmm4, %%xmm4\\n\\t" "vpxor %%xmm5, %%xmm5, %%xmm5\\n\\t" \\
        "vpcmpeqd %%ymm6, %%ymm6, %%ymm6\\n\\t" "vpcmpeqd %%ymm7, %%ymm7, %%ymm7\\n\\t"
    #define QOPS_PROBE_END \\
        "dec %[rounds]\\n\\t" "jnz 1b\\n\\t" \\
        "vpaddd %%ymm1, %%ymm0, %%ymm0\\n\\t" "vpaddd %%ymm3, %%ymm2, %%ymm2\\n\\t" \\
        "vpaddd %%ymm5, %%ymm4, %%ymm4\\n\\t" "vpaddd %%ymm2, %%ymm0, %%ymm0\\n\\t" \\
        "vpaddd %%ymm4, %%ymm0, %%ymm0\\n\\t" "vmovd %%xmm0, %[sink]\\n\\t" "vzeroupper\\n\\t"
    #define QOPS_PROBE_CLOBBERS \\
        "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", \\
        "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "cc"
    #define QOPS_PROBE_AVX2(name, at) \\
    static long long name(long long rounds) { \\
        int sink = 0; \\
        if (rounds <= 0) return 0; \\
        __asm__ volatile( \\
            QOPS_PROBE_START \\
            at "1:\\n\\t" \\
            "vpmaddwd %%ymm7, %%ymm6, %%ymm8\\n\\t" "vpaddd %%ymm8, %%ymm0, %%ymm0\\n\\t" \\
            "vpmaddwd %%ymm7, %%ymm6, %%ymm9\\n\\t" "vpaddd %%ymm9, %%ymm1, %%ymm1\\n\\t" \\
            "vpmaddwd %%ymm7, %%ymm6, %%ymm10\\n\\t" "vpaddd %%ymm10, %%ymm2, %%ymm2\\n\\t" \\
            "vpmaddwd %%ymm7, %%ymm6, %%ymm11\\n\\t" "vpaddd %%ymm11, %%ymm3, %%ymm3\\n\\t" \\
            "vpmaddwd %%ymm7, %%ymm6, %%ymm12\\n\\t" "vpaddd %%ymm12, %%ymm4, %%ymm4\\n\\t" \\
            "vpmaddwd %%ymm7, %%ymm6, %%ymm13\\n\\t" "vpaddd %%ymm13, %%ymm5, %%ymm5\\n\\t" \\
            QOPS_PROBE_END \\
            : [rounds] "+r"(rounds), [sink] "=r"(sink) : : QOPS_PROBE_CLOBBERS); \\
        return sink; \\
    }
    QOPS_PROBE_PLACED(qops_probe_avx2, QOPS_PROBE_AVX2)
    """
    long long probe_loop "qops_probe_avx2"(long long rounds, int placement) noexcept nogil

cdef long long probe_kernel(long long rounds, int placement) noexcept nogil:
    return probe_loop(rounds, placement)


# Multiply-adds per probe round: six vpmaddwd of 16 int16 products each.
PROBE_MULTIPLY_ADDS = 6 * 16
PROBE_MIX = "vpmaddwd + vpaddd (int16 pairs, exact)"
# What one round adds to the probe's result: six chains, (-1)(-1) * 2 in a lane each.
PROBE_RESULT_PER_ROUND = 6 * 2


include "_pack_pair_twice.pxi"
include "_depthwise_avx2.pxi"
include "_qgemm.pxi"


# onnxruntime's AVX2 step for u8 x s8 (where the CPU has no 8-bit dot
# product): vpmaddubsw adds pairs of byte products into int16, saturating,
# vpmaddwd by ones widens them, vpaddd accumulates; 32 multiply-adds in
# three instructions against the exact step's 16 in two.  Its ceiling beside
# the exact one (benchmarks: the peer's ceiling) tells how much of a
# comparison on an AVX2 CPU is the idiom rather than the kernel: on Intel
# cores the saturating step has more issue slots, on AMD Zen 2 about the
# same.  Six chains on register operands, like the exact probe.
cdef extern from *:
    """
    #define QOPS_PEER_PROBE_AVX2(name, at) \\
    static long long name(long long rounds) { \\
        int sink = 0; \\
        if (rounds <= 0) return 0; \\
        __asm__ volatile( \\
            QOPS_PROBE_START \\
            "vpcmpeqd %%ymm14, %%ymm14, %%ymm14\\n\\t" \\
            "vpsrlw $15, %%ymm14, %%ymm14\\n\\t" \\
            at "1:\\n\\t" \\
            "vpmaddubsw %%ymm7, %%ymm6, %%ymm8\\n\\t" "vpmaddwd %%ymm14, %%ymm8, %%ymm8\\n\\t" \\
            "vpaddd %%ymm8, %%ymm0, %%ymm0\\n\\t" \\
            "vpmaddubsw %%ymm7, %%ymm6, %%ymm9\\n\\t" "vpmaddwd %%ymm14, %%ymm9, %%ymm9\\n\\t" \\
            "vpaddd %%ymm9, %%ymm1, %%ymm1\\n\\t" \\
            "vpmaddubsw %%ymm7, %%ymm6, %%ymm10\\n\\t" "vpmaddwd %%ymm14, %%ymm10, %%ymm10\\n\\t" \\
            "vpaddd %%ymm10, %%ymm2, %%ymm2\\n\\t" \\
            "vpmaddubsw %%ymm7, %%ymm6, %%ymm11\\n\\t" "vpmaddwd %%ymm14, %%ymm11, %%ymm11\\n\\t" \\
            "vpaddd %%ymm11, %%ymm3, %%ymm3\\n\\t" \\
            "vpmaddubsw %%ymm7, %%ymm6, %%ymm12\\n\\t" "vpmaddwd %%ymm14, %%ymm12, %%ymm12\\n\\t" \\
            "vpaddd %%ymm12, %%ymm4, %%ymm4\\n\\t" \\
            "vpmaddubsw %%ymm7, %%ymm6, %%ymm13\\n\\t" "vpmaddwd %%ymm14, %%ymm13, %%ymm13\\n\\t" \\
            "vpaddd %%ymm13, %%ymm5, %%ymm5\\n\\t" \\
            QOPS_PROBE_END \\
            : [rounds] "+r"(rounds), [sink] "=r"(sink) : : QOPS_PROBE_CLOBBERS); \\
        return sink; \\
    }
    QOPS_PROBE_PLACED(qops_peer_probe_avx2, QOPS_PEER_PROBE_AVX2)
    """
    long long peer_probe_loop "qops_peer_probe_avx2"(long long rounds, int placement) noexcept nogil


# Multiply-adds per round: six vpmaddubsw of 32 byte products each.
PEER_PROBE_MULTIPLY_ADDS = 6 * 32
PEER_PROBE_MIX = "vpmaddubsw + vpmaddwd + vpaddd (u8 x s8 pairs, saturating int16)"
# What one round adds to the result: six chains, each two words of two (255 x -1)
# byte products in a lane.
PEER_PROBE_RESULT_PER_ROUND = 6 * -1020


def peer_peak_gops(int n_threads=1, double seconds=0.2):
    """The ceiling of onnxruntime's AVX2 u8 x s8 step (PEER_PROBE_MIX), as
    peak_gops measures the variant's own: what the peer's kernels run on
    where the CPU has no 8-bit dot product."""
    return probe_gops(peer_probe_loop, PEER_PROBE_MULTIPLY_ADDS, n_threads, seconds)


def peer_probe_result(long long rounds, int placement=0):
    """The peer probe loop's result after ``rounds`` rounds (as probe_result)."""
    cdef long long value
    check_placement(placement)
    with nogil:
        value = peer_probe_loop(rounds, placement)
    return value
