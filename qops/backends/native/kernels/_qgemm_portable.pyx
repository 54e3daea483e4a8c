# cython: language_level=3
"""Quantized GEMM, portable: SSE2 on x86-64 (pmaddwd on int16 pairs, the
AVX2 variant's design at half the width), the same layout in plain C
elsewhere."""

from libc.stdint cimport int8_t, int32_t, uint8_t, uint32_t

from qops.backends.native.kernels._probe cimport PROBE_PLACEMENTS
from qops.backends.native.kernels._requantize cimport (
    RowTerms, TileTerms, requantize_tile_plain, requantize_tile_rows_plain)

# The tile (MR x NR) and its units: _qgemm_portable.pxd.  The kernels are C
# (include/qops_portable.h), each in SSE2 intrinsics where the compiler targets
# SSE2 and in plain loops where not (a choice the preprocessor makes, not Cython).
cdef extern from "qops_portable.h":
    bint SSE2 "QOPS_PORTABLE_SSE2"
    void c_microkernel "qops_portable_microkernel"(
        const uint8_t* a, Py_ssize_t a_stride, Py_ssize_t groups, const int8_t* b,
        int32_t* tile) noexcept nogil
    void c_microkernel_rows "qops_portable_microkernel_rows"(
        const uint8_t* a, Py_ssize_t a_stride, Py_ssize_t groups, const int8_t* b,
        int32_t* tile, Py_ssize_t rows) noexcept nogil
    void c_pack_groups "qops_portable_pack_groups"(
        const uint8_t* rows, Py_ssize_t ldb, Py_ssize_t count, uint8_t flip, int8_t* target,
        int32_t* sums) noexcept nogil
    void c_tile_requantized "qops_portable_tile_requantized"(
        const uint8_t* a, Py_ssize_t a_stride, Py_ssize_t groups, const int8_t* b,
        const uint32_t* column, const uint32_t* row_term, const float* multiplier,
        const int32_t* offset, int32_t low, uint8_t* result, Py_ssize_t pitch) noexcept nogil
    void c_requantize_tile "qops_portable_requantize_tile"(
        const int32_t* tile, const uint32_t* column, const uint32_t* row_term,
        const float* multiplier, const float* floor, const float* ceiling,
        const int32_t* offset, int32_t low, bint clamp, uint8_t* result,
        Py_ssize_t pitch) noexcept nogil


cdef void microkernel(const uint8_t* a, Py_ssize_t a_stride, Py_ssize_t groups, const int8_t* b,
                      int32_t* tile) noexcept nogil:
    c_microkernel(a, a_stride, groups, b, tile)


cdef void microkernel_rows(const uint8_t* a, Py_ssize_t a_stride, Py_ssize_t groups,
                           const int8_t* b, int32_t* tile, Py_ssize_t rows) noexcept nogil:
    c_microkernel_rows(a, a_stride, groups, b, tile, rows)


include "_tail_as_tiles.pxi"
include "_whole_panels.pxi"


cdef void pack_groups(const uint8_t* rows, Py_ssize_t ldb, Py_ssize_t count, uint8_t flip,
                      int8_t* target, int32_t* sums) noexcept nogil:
    c_pack_groups(rows, ldb, count, flip, target, sums)


# The peak probe (peak_gops in _qgemm.pxi): what the baseline instruction
# set offers for exact 16-bit products, SSE2's pmaddwd + paddd on x86-64
# (six chains, in assembly and placed as the AVX2 probe), else plain int32
# multiply-adds.
cdef extern from *:
    """
    #if defined(__SSE2__) && defined(__GNUC__) && defined(__x86_64__)
    #define QOPS_PROBE_LANES 8
    #define QOPS_PROBE_RESULT 12
    #define QOPS_PROBE_SSE2(name, at) \\
    static long long name(long long rounds) { \\
        int sink = 0; \\
        if (rounds <= 0) return 0; \\
        __asm__ volatile( \\
            "pxor %%xmm0, %%xmm0\\n\\t" \\
            "pxor %%xmm1, %%xmm1\\n\\t" \\
            "pxor %%xmm2, %%xmm2\\n\\t" \\
            "pxor %%xmm3, %%xmm3\\n\\t" \\
            "pxor %%xmm4, %%xmm4\\n\\t" \\
            "pxor %%xmm5, %%xmm5\\n\\t" \\
            "pcmpeqd %%xmm6, %%xmm6\\n\\t" \\
            "pcmpeqd %%xmm7, %%xmm7\\n\\t" \\
            at "1:\\n\\t" \\
            "movdqa %%xmm6, %%xmm8\\n\\t" \\
            "pmaddwd %%xmm7, %%xmm8\\n\\t" \\
            "paddd %%xmm8, %%xmm0\\n\\t" \\
            "movdqa %%xmm6, %%xmm9\\n\\t" \\
            "pmaddwd %%xmm7, %%xmm9\\n\\t" \\
            "paddd %%xmm9, %%xmm1\\n\\t" \\
            "movdqa %%xmm6, %%xmm10\\n\\t" \\
            "pmaddwd %%xmm7, %%xmm10\\n\\t" \\
            "paddd %%xmm10, %%xmm2\\n\\t" \\
            "movdqa %%xmm6, %%xmm11\\n\\t" \\
            "pmaddwd %%xmm7, %%xmm11\\n\\t" \\
            "paddd %%xmm11, %%xmm3\\n\\t" \\
            "movdqa %%xmm6, %%xmm12\\n\\t" \\
            "pmaddwd %%xmm7, %%xmm12\\n\\t" \\
            "paddd %%xmm12, %%xmm4\\n\\t" \\
            "movdqa %%xmm6, %%xmm13\\n\\t" \\
            "pmaddwd %%xmm7, %%xmm13\\n\\t" \\
            "paddd %%xmm13, %%xmm5\\n\\t" \\
            "dec %[rounds]\\n\\t" \\
            "jnz 1b\\n\\t" \\
            "paddd %%xmm1, %%xmm0\\n\\t" \\
            "paddd %%xmm3, %%xmm2\\n\\t" \\
            "paddd %%xmm5, %%xmm4\\n\\t" \\
            "paddd %%xmm2, %%xmm0\\n\\t" \\
            "paddd %%xmm4, %%xmm0\\n\\t" \\
            "movd %%xmm0, %[sink]\\n\\t" \\
            : [rounds] "+r"(rounds), [sink] "=r"(sink) \\
            : \\
            : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", \\
              "xmm10", "xmm11", "xmm12", "xmm13", "cc"); \\
        return sink; \\
    }
    QOPS_PROBE_PLACED(qops_probe_portable, QOPS_PROBE_SSE2)
    #else
    #define QOPS_PROBE_LANES 1
    #define QOPS_PROBE_RESULT 63
    static long long qops_probe_portable(long long rounds, int placement) {
        volatile int a = 3;
        (void)placement;  /* compiled C: the compiler places its loop */
        int c0 = 0, c1 = 0, c2 = 0, c3 = 0, c4 = 0, c5 = 0;
        for (long long i = 0; i < rounds; i++) {
            int x = a;
            c0 += x * 1; c1 += x * 2; c2 += x * 3; c3 += x * 4; c4 += x * 5; c5 += x * 6;
        }
        return c0 + c1 + c2 + c3 + c4 + c5;
    }
    #endif
    """
    long long probe_loop "qops_probe_portable"(long long rounds, int placement) noexcept nogil
    int QOPS_PROBE_LANES
    int QOPS_PROBE_RESULT

cdef long long probe_kernel(long long rounds, int placement) noexcept nogil:
    return probe_loop(rounds, placement)


# Multiply-adds per probe round: six multiply-adds of QOPS_PROBE_LANES products.
PROBE_MULTIPLY_ADDS = 6 * QOPS_PROBE_LANES
PROBE_MIX = ("pmaddwd + paddd (SSE2, int16 pairs, exact)" if QOPS_PROBE_LANES > 1
             else "int32 multiply-adds (plain C)")
# What one round adds to the probe's result (six chains of (-1)(-1) * 2 in a
# lane; in plain C, 3 times 1 to 6).
PROBE_RESULT_PER_ROUND = QOPS_PROBE_RESULT


cdef void requantize_tile(const int32_t* tile, const TileTerms* terms, uint8_t* result,
                          Py_ssize_t pitch) noexcept nogil:
    """SSE2 where the rule needs no 32-bit products (every zero point of B
    0, or 1 with the row terms scaled by the one zero point: column_zero *
    row_term is 0 or row_term), the plain rule otherwise."""
    cdef const uint32_t* row_term = NULL
    if not terms.no_column_zero:
        row_term = terms.row_term
    if SSE2 and (terms.no_column_zero or terms.unit_column_zero):
        c_requantize_tile(tile, terms.column, row_term, terms.multiplier, terms.floor, terms.ceiling, terms.offset, terms.low,
                          not terms.packs_clamp, result, pitch)
    else:
        requantize_tile_plain(tile, MR, NR, terms, result, pitch)


cdef void microkernel_requantize(const uint8_t* a, Py_ssize_t a_stride, Py_ssize_t groups,
                                 const int8_t* b, const TileTerms* terms, uint8_t* result,
                                 Py_ssize_t pitch) noexcept nogil:
    """In one C function where requantize_tile would take SSE2's path with
    the packs clamping; in two steps otherwise."""
    cdef const uint32_t* row_term = NULL
    if not terms.no_column_zero:
        row_term = terms.row_term
    if SSE2 and terms.packs_clamp and (terms.no_column_zero or terms.unit_column_zero):
        c_tile_requantized(a, a_stride, groups, b, terms.column, row_term, terms.multiplier,
                           terms.offset, terms.low, result, pitch)
    else:
        microkernel_then_requantize(a, a_stride, groups, b, terms, result, pitch)


cdef void requantize_tile_rows(const int32_t* tile, const RowTerms* terms, uint8_t* result,
                               Py_ssize_t pitch) noexcept nogil:
    # Not called while ROW_TILES is 0; the interface's plain form.
    requantize_tile_rows_plain(tile, MR, NR, terms, result, pitch)


cdef void microkernel_requantize_rows(const uint8_t* a, Py_ssize_t a_stride, Py_ssize_t groups,
                                      const int8_t* b, const RowTerms* terms, uint8_t* result,
                                      Py_ssize_t pitch) noexcept nogil:
    # Unreached where ROW_TILES is 0 (the per-row epilogue by lines).
    microkernel_then_requantize_rows(a, a_stride, groups, b, terms, result, pitch)


include "_pack_pair_twice.pxi"
include "_depthwise_sse2.pxi"
include "_qgemm.pxi"
