# cython: language_level=3
"""Quantized GEMM, portable C: the micro-kernel is plain loops the compiler
may vectorize for the baseline instruction set."""

from libc.stdint cimport int8_t, int32_t, uint8_t
from libc.string cimport memset

from qops.backends.native.kernels._requantize cimport (
    RowTerms, TileTerms, requantize_tile_plain, requantize_tile_rows_plain)

# The tile (MR x NR) and its units: _qgemm_portable.pxd.


cdef void microkernel(const uint8_t* a, Py_ssize_t a_stride, Py_ssize_t groups, const int8_t* b,
                      int32_t* tile) noexcept nogil:
    cdef Py_ssize_t g, r, c
    cdef int32_t a0, a1, a2, a3
    cdef const uint8_t* values
    cdef const int8_t* column
    memset(tile, 0, MR * NR * sizeof(int32_t))
    for g in range(groups):
        for r in range(MR):
            values = a + r * a_stride + 4 * g
            a0 = values[0]
            a1 = values[1]
            a2 = values[2]
            a3 = values[3]
            for c in range(NR):
                column = b + c * 4
                tile[r * NR + c] += (a0 * column[0] + a1 * column[1] + a2 * column[2]
                                     + a3 * column[3])
        b += NR * 4


cdef void pack_group(const uint8_t* row0, const uint8_t* row1, const uint8_t* row2,
                     const uint8_t* row3, uint8_t flip, int8_t* target,
                     int32_t* sums) noexcept nogil:
    """NR columns of four rows into one group of a panel (the driver's
    column-by-column loop, which the compiler vectorizes as it can)."""
    pack_columns(row0, row1, row2, row3, NR, flip, target, sums)


# The peak probe (peak_gops in _qgemm.pxi): what the baseline instruction
# set offers for exact 16-bit products, SSE2's pmaddwd + paddd on x86-64
# (six chains, in assembly as in the AVX2 probe), else plain int32 multiply-adds.
cdef extern from *:
    """
    #if defined(__SSE2__) && defined(__GNUC__) && defined(__x86_64__)
    #define QOPS_PROBE_LANES 8
    #define QOPS_PROBE_RESULT 12
    static long long qops_probe_portable(long long rounds) {
        int sink = 0;
        if (rounds <= 0) return 0;
        __asm__ volatile(
            "pxor %%xmm0, %%xmm0\\n\\t"
            "pxor %%xmm1, %%xmm1\\n\\t"
            "pxor %%xmm2, %%xmm2\\n\\t"
            "pxor %%xmm3, %%xmm3\\n\\t"
            "pxor %%xmm4, %%xmm4\\n\\t"
            "pxor %%xmm5, %%xmm5\\n\\t"
            "pcmpeqd %%xmm6, %%xmm6\\n\\t"
            "pcmpeqd %%xmm7, %%xmm7\\n\\t"
            "1:\\n\\t"
            "movdqa %%xmm6, %%xmm8\\n\\t"
            "pmaddwd %%xmm7, %%xmm8\\n\\t"
            "paddd %%xmm8, %%xmm0\\n\\t"
            "movdqa %%xmm6, %%xmm9\\n\\t"
            "pmaddwd %%xmm7, %%xmm9\\n\\t"
            "paddd %%xmm9, %%xmm1\\n\\t"
            "movdqa %%xmm6, %%xmm10\\n\\t"
            "pmaddwd %%xmm7, %%xmm10\\n\\t"
            "paddd %%xmm10, %%xmm2\\n\\t"
            "movdqa %%xmm6, %%xmm11\\n\\t"
            "pmaddwd %%xmm7, %%xmm11\\n\\t"
            "paddd %%xmm11, %%xmm3\\n\\t"
            "movdqa %%xmm6, %%xmm12\\n\\t"
            "pmaddwd %%xmm7, %%xmm12\\n\\t"
            "paddd %%xmm12, %%xmm4\\n\\t"
            "movdqa %%xmm6, %%xmm13\\n\\t"
            "pmaddwd %%xmm7, %%xmm13\\n\\t"
            "paddd %%xmm13, %%xmm5\\n\\t"
            "dec %[rounds]\\n\\t"
            "jnz 1b\\n\\t"
            "paddd %%xmm1, %%xmm0\\n\\t"
            "paddd %%xmm3, %%xmm2\\n\\t"
            "paddd %%xmm5, %%xmm4\\n\\t"
            "paddd %%xmm2, %%xmm0\\n\\t"
            "paddd %%xmm4, %%xmm0\\n\\t"
            "movd %%xmm0, %[sink]\\n\\t"
            : [rounds] "+r"(rounds), [sink] "=r"(sink)
            :
            : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9",
              "xmm10", "xmm11", "xmm12", "xmm13", "cc");
        return sink;
    }
    #else
    #define QOPS_PROBE_LANES 1
    #define QOPS_PROBE_RESULT 63
    static long long qops_probe_portable(long long rounds) {
        volatile int a = 3;
        int c0 = 0, c1 = 0, c2 = 0, c3 = 0, c4 = 0, c5 = 0;
        for (long long i = 0; i < rounds; i++) {
            int x = a;
            c0 += x * 1; c1 += x * 2; c2 += x * 3; c3 += x * 4; c4 += x * 5; c5 += x * 6;
        }
        return c0 + c1 + c2 + c3 + c4 + c5;
    }
    #endif
    """
    long long probe_loop "qops_probe_portable"(long long rounds) noexcept nogil
    int QOPS_PROBE_LANES
    int QOPS_PROBE_RESULT

cdef long long probe_kernel(long long rounds) noexcept nogil:
    return probe_loop(rounds)


# Multiply-adds per probe round: six multiply-adds of QOPS_PROBE_LANES products.
PROBE_MULTIPLY_ADDS = 6 * QOPS_PROBE_LANES
PROBE_MIX = ("pmaddwd + paddd (SSE2, int16 pairs, exact)" if QOPS_PROBE_LANES > 1
             else "int32 multiply-adds (plain C)")
# What one round adds to the probe's result (six chains of (-1)(-1) * 2 in a
# lane; in plain C, 3 times 1 to 6).
PROBE_RESULT_PER_ROUND = QOPS_PROBE_RESULT


cdef void requantize_tile(const int32_t* tile, const TileTerms* terms, uint8_t* result,
                          Py_ssize_t pitch) noexcept nogil:
    requantize_tile_plain(tile, MR, NR, terms, result, pitch)



cdef void requantize_tile_rows(const int32_t* tile, const RowTerms* terms, uint8_t* result,
                               Py_ssize_t pitch) noexcept nogil:
    # Not called while ROW_TILES is 0; the interface's plain form.
    requantize_tile_rows_plain(tile, MR, NR, terms, result, pitch)

include "_depthwise_scalar.pxi"
include "_qgemm.pxi"
