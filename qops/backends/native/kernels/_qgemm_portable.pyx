# cython: language_level=3
"""Quantized GEMM, portable: SSE2 on x86-64 (pmaddwd on int16 pairs, the
AVX2 variant's design at half the width), the same layout in plain C
elsewhere."""

from libc.stdint cimport int8_t, int32_t, uint8_t, uint32_t

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


cdef void microkernel_whole(const uint8_t* a, Py_ssize_t a_stride, Py_ssize_t groups,
                            const int8_t* b, int32_t* tile) noexcept nogil:
    c_microkernel(a, a_stride, groups, b, tile)


cdef void microkernel_rows(const uint8_t* a, Py_ssize_t a_stride, Py_ssize_t groups,
                           const int8_t* b, int32_t* tile, Py_ssize_t rows) noexcept nogil:
    c_microkernel_rows(a, a_stride, groups, b, tile, rows)


include "_tail_as_tiles.pxi"
include "_whole_panels.pxi"


cdef void pack_groups(const uint8_t* rows, Py_ssize_t ldb, Py_ssize_t count, uint8_t flip,
                      int8_t* target, int32_t* sums) noexcept nogil:
    c_pack_groups(rows, ldb, count, flip, target, sums)


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


include "_narrow_panels.pxi"
include "_pack_pair_twice.pxi"
include "_depthwise_sse2.pxi"
include "_qgemm.pxi"
