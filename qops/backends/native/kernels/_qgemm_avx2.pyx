# cython: language_level=3
"""Quantized GEMM with AVX2.  AVX2 has no exact 8-bit dot product (vpmaddubsw
saturates its int16 pair sums), so bytes are widened to int16 and vpmaddwd
adds exact int32 pairs."""

from libc.stdint cimport int8_t, int32_t, uint8_t
from libc.string cimport memcpy

cdef extern from "<immintrin.h>" nogil:
    ctypedef struct __m128i:
        pass
    ctypedef struct __m256i:
        pass
    __m256i _mm256_setzero_si256()
    __m128i _mm_loadu_si128(const void* p)
    __m128i _mm_cvtsi32_si128(int value)
    __m128i _mm_cvtepu8_epi16(__m128i value)
    __m256i _mm256_cvtepi8_epi16(__m128i value)
    __m256i _mm256_broadcastq_epi64(__m128i value)
    __m256i _mm256_madd_epi16(__m256i a, __m256i b)
    __m256i _mm256_add_epi32(__m256i a, __m256i b)
    void _mm256_storeu_si256(void* p, __m256i value)

# The tile (MR x NR) and its units: _qgemm_avx2.pxd.
cdef enum:
    # Columns per pass: 16 bytes of B' (4 columns x 4 k) widen to one ymm of
    # int16, and eight row accumulators plus the operands fit the 16 ymm.
    PASS_COLUMNS = 4


cdef inline __m256i broadcast_row(const uint8_t* p) noexcept nogil:
    """a0 a1 a2 a3 as int16, repeated across the register: vpmaddwd then pairs
    (a0, a1) and (a2, a3) with the same k of each column."""
    cdef int value
    memcpy(&value, p, 4)
    return _mm256_broadcastq_epi64(_mm_cvtepu8_epi16(_mm_cvtsi32_si128(value)))


cdef void microkernel(const uint8_t* const* rows, const Py_ssize_t* offsets, Py_ssize_t steps,
                      Py_ssize_t groups, const int8_t* b, int32_t* tile) noexcept nogil:
    cdef __m256i c0, c1, c2, c3, c4, c5, c6, c7, column
    cdef int32_t lanes[8]
    cdef Py_ssize_t s, g, chunk, first, r, i, offset
    cdef const int8_t* panel
    for chunk in range(NR // PASS_COLUMNS):
        first = chunk * PASS_COLUMNS
        c0 = _mm256_setzero_si256()
        c1 = _mm256_setzero_si256()
        c2 = _mm256_setzero_si256()
        c3 = _mm256_setzero_si256()
        c4 = _mm256_setzero_si256()
        c5 = _mm256_setzero_si256()
        c6 = _mm256_setzero_si256()
        c7 = _mm256_setzero_si256()
        panel = b + first * 4
        for s in range(steps):
            for g in range(groups):
                column = _mm256_cvtepi8_epi16(_mm_loadu_si128(panel))
                offset = offsets[s] + 4 * g
                c0 = _mm256_add_epi32(c0, _mm256_madd_epi16(column, broadcast_row(rows[0] + offset)))
                c1 = _mm256_add_epi32(c1, _mm256_madd_epi16(column, broadcast_row(rows[1] + offset)))
                c2 = _mm256_add_epi32(c2, _mm256_madd_epi16(column, broadcast_row(rows[2] + offset)))
                c3 = _mm256_add_epi32(c3, _mm256_madd_epi16(column, broadcast_row(rows[3] + offset)))
                c4 = _mm256_add_epi32(c4, _mm256_madd_epi16(column, broadcast_row(rows[4] + offset)))
                c5 = _mm256_add_epi32(c5, _mm256_madd_epi16(column, broadcast_row(rows[5] + offset)))
                c6 = _mm256_add_epi32(c6, _mm256_madd_epi16(column, broadcast_row(rows[6] + offset)))
                c7 = _mm256_add_epi32(c7, _mm256_madd_epi16(column, broadcast_row(rows[7] + offset)))
                panel += NR * 4
        # Lane 2i holds column i's k0 + k1 terms, lane 2i + 1 its k2 + k3 terms.
        for r in range(MR):
            if r == 0:
                _mm256_storeu_si256(lanes, c0)
            elif r == 1:
                _mm256_storeu_si256(lanes, c1)
            elif r == 2:
                _mm256_storeu_si256(lanes, c2)
            elif r == 3:
                _mm256_storeu_si256(lanes, c3)
            elif r == 4:
                _mm256_storeu_si256(lanes, c4)
            elif r == 5:
                _mm256_storeu_si256(lanes, c5)
            elif r == 6:
                _mm256_storeu_si256(lanes, c6)
            else:
                _mm256_storeu_si256(lanes, c7)
            for i in range(PASS_COLUMNS):
                tile[r * NR + first + i] = lanes[2 * i] + lanes[2 * i + 1]


# The peak probe (peak_gops in _qgemm.pxi): six independent vpmaddwd +
# vpaddd chains on register-resident int16 operands, the micro-kernel's own
# arithmetic without its loads.  Written in assembly with fixed registers:
# compiled from intrinsics, the loop had accumulators spilled to the stack
# and timed store forwarding instead of the multiplier.
cdef extern from *:
    """
    static long long qops_probe_avx2(long long rounds) {
        int sink = 0;
        if (rounds <= 0) return 0;
        __asm__ volatile(
            "vpxor %%xmm0, %%xmm0, %%xmm0\\n\\t"
            "vpxor %%xmm1, %%xmm1, %%xmm1\\n\\t"
            "vpxor %%xmm2, %%xmm2, %%xmm2\\n\\t"
            "vpxor %%xmm3, %%xmm3, %%xmm3\\n\\t"
            "vpxor %%xmm4, %%xmm4, %%xmm4\\n\\t"
            "vpxor %%xmm5, %%xmm5, %%xmm5\\n\\t"
            "vpcmpeqd %%ymm6, %%ymm6, %%ymm6\\n\\t"
            "vpcmpeqd %%ymm7, %%ymm7, %%ymm7\\n\\t"
            "1:\\n\\t"
            "vpmaddwd %%ymm7, %%ymm6, %%ymm8\\n\\t"
            "vpaddd %%ymm8, %%ymm0, %%ymm0\\n\\t"
            "vpmaddwd %%ymm7, %%ymm6, %%ymm9\\n\\t"
            "vpaddd %%ymm9, %%ymm1, %%ymm1\\n\\t"
            "vpmaddwd %%ymm7, %%ymm6, %%ymm10\\n\\t"
            "vpaddd %%ymm10, %%ymm2, %%ymm2\\n\\t"
            "vpmaddwd %%ymm7, %%ymm6, %%ymm11\\n\\t"
            "vpaddd %%ymm11, %%ymm3, %%ymm3\\n\\t"
            "vpmaddwd %%ymm7, %%ymm6, %%ymm12\\n\\t"
            "vpaddd %%ymm12, %%ymm4, %%ymm4\\n\\t"
            "vpmaddwd %%ymm7, %%ymm6, %%ymm13\\n\\t"
            "vpaddd %%ymm13, %%ymm5, %%ymm5\\n\\t"
            "dec %[rounds]\\n\\t"
            "jnz 1b\\n\\t"
            "vpaddd %%ymm1, %%ymm0, %%ymm0\\n\\t"
            "vpaddd %%ymm3, %%ymm2, %%ymm2\\n\\t"
            "vpaddd %%ymm5, %%ymm4, %%ymm4\\n\\t"
            "vpaddd %%ymm2, %%ymm0, %%ymm0\\n\\t"
            "vpaddd %%ymm4, %%ymm0, %%ymm0\\n\\t"
            "vmovd %%xmm0, %[sink]\\n\\t"
            "vzeroupper\\n\\t"
            : [rounds] "+r"(rounds), [sink] "=r"(sink)
            :
            : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9",
              "xmm10", "xmm11", "xmm12", "xmm13", "cc");
        return sink;
    }
    """
    long long probe_loop "qops_probe_avx2"(long long rounds) noexcept nogil

cdef long long probe_kernel(long long rounds) noexcept nogil:
    return probe_loop(rounds)


# Multiply-adds per probe round: six vpmaddwd of 16 int16 products each.
PROBE_MULTIPLY_ADDS = 6 * 16
PROBE_MIX = "vpmaddwd + vpaddd (int16 pairs, exact)"
# What one round adds to the probe's result: six chains, (-1)(-1) * 2 in a lane each.
PROBE_RESULT_PER_ROUND = 6 * 2


include "_pack_avx2.pxi"
include "_depthwise_scalar.pxi"
include "_qgemm.pxi"
