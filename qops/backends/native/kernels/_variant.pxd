# The kernel variant interface: what every _qgemm_<variant> module defines,
# so that _qgemm.pxi (the shared driver, packers and entry points) and
# _depthwise.pxi compile against it with the variant's flags.
#
# Each variant's own .pxd (_qgemm_<variant>.pxd) sets its constants, with
# the reason for their sizes, and includes this file; Cython then checks the
# variant's definitions against the declarations below at compile time.  The
# micro-kernel's contract (microkernel) is the one exception: every variant
# takes _microkernel_contract.pxi's, made of four forms the variant defines
# (microkernel_whole, microkernel_add, microkernel_rows, microkernel_columns;
# shared includes give the usual ones).
#
#   cdef enum:
#       MR, NR            the micro-tile: MR rows of A by NR columns of B'
#       A_BYTES           bytes per value of a packed block of A: 1 (A' bytes
#                         as they are) or 2 (widened to int16 by the packer,
#                         for a multiply-add on 16-bit pairs)
#       A_SPREAD          copies of each pair of A' values in a packed row: 1,
#                         or 4 for a micro-kernel that loads its broadcasts
#                         of a pair rather than making them (SSE2 has no
#                         broadcast load; see spread_pairs in _qgemm.pxi)
#       B_BYTES           bytes per value of a packed panel of B: 1, laid out
#                         [group of 4 k][column][4 k] (the quads of vpdpbusd
#                         and tdpbusd), or 2, int16 laid out [group][pair of
#                         k][column][2 k] (the pairs of vpmaddwd)
#       K_BLOCK_GROUPS    groups of 4 k per block of the driver's K loop: the
#                         packed MR-row block of A stays in L1 while the
#                         unit's panels stream past it, and the unit's B'
#                         block (K_BLOCK_GROUPS x TILE_COLUMNS groups of 4
#                         values) stays in L2 while its micro-tiles take turns
#       TILE_M_PANELS     micro-tiles down a unit of parallel work, at most
#                         (run_gemm takes fewer where its units are few)
#       TILE_COLUMNS      most columns of B' per unit (a multiple of NR); N is
#                         cut into as few columns of units as that allows,
#                         their panels shared out as evenly as one width
#                         allows (unit_panels)
#       ROW_TILES         1 when requantize_tile_rows is vectorized, so that the
#                         driver gives it whole micro-tiles of a per-row
#                         epilogue; 0 when the line forms serve better
#       DEPTHWISE_PAIRS   1 when depthwise_pairs_plane is a pair kernel
#                         (_depthwise_avx512.pxi, _depthwise_avx2.pxi,
#                         _depthwise_sse2.pxi), 0 when
#                         the variant has none and _depthwise.pxi runs its
#                         row kernel

from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint32_t

from qops.backends.native.kernels._requantize cimport RowTerms, TileTerms

# The return type of a kernel the compiler must not inline into the driver:
# run_unit inlines the micro-kernel it calls most, and other kernels inlined
# beside it took registers from its loop (GCC and Clang; the variants that
# use it are built by them alone).
cdef extern from *:
    ctypedef void not_inlined "__attribute__((noinline)) void"
    # The contract's function (microkernel below), inlined into each caller,
    # where the cases its arguments fix fold away: a pass over rows read in
    # place is always a whole block, which then runs the whole micro-kernel
    # as directly as before there was a contract.
    ctypedef void always_inlined "__attribute__((always_inline)) inline void"

# The micro-kernel's contract (XNNPACK's mr x nc): for r < rows (1 to MR)
# and c < columns (1 to NR),
#     tile[r * NR + c] <- sum over k < 4 * groups of A[r, k] * B[k, c]
# (added to the tile's sums with add, which comes with rows == MR only),
# for the packed block of A (row r at a + r * a_stride, unsigned values,
# A_BYTES each, each pair A_SPREAD times) and a packed panel of B' (signed
# values, B_BYTES each) from its group at b: exact in int32 for up to 65536
# k.  The tile's rows from `rows` on are zero; its columns from `columns` on
# are zero or what the panel gives there (zero: a panel is zero past N).
# The block of A always has MR rows to read (a short block is packed zero
# past its rows), so a variant may compute them all.  The driver passes the
# rows of a block of SHORT_BLOCK_ROWS or fewer and MR for any other (the
# whole kernel over a zeroed block costs no more there), and the panel's
# columns; _microkernel_contract.pxi splits the cases.
cdef always_inlined microkernel(const uint8_t* a, Py_ssize_t a_stride, Py_ssize_t groups,
                                const int8_t* b, int32_t* tile, Py_ssize_t rows,
                                Py_ssize_t columns, bint add) noexcept nogil

# The same for a short block (rows <= SHORT_BLOCK_ROWS, sums set) on a panel
# narrowed to one byte per value (Gemm.b_narrow: the same layout as B_BYTES
# 2's, each int16 a byte), from its group at `narrow`.  A product of one or
# two rows reads each value of B' once, so that its time is B''s bytes
# coming from memory: where panels hold int16, it reads half the bytes this
# way.  Variants whose panels are bytes (B_BYTES 1) are never given one;
# _narrow_panels.pxi serves the variants with no kernel of their own.
cdef void microkernel_narrow(const uint8_t* a, Py_ssize_t a_stride, Py_ssize_t groups,
                             const int8_t* narrow, int32_t* tile,
                             Py_ssize_t rows) noexcept nogil

# The same for MR + 1 or MR + 2 rows into a tile of MR + 2 rows: a whole
# block (row r at a + r * a_stride) and the one or two rows of a short last
# block under it (at tail + r * tail_stride, a packed block of MR rows, zero
# past them, which a variant may read whole), in the passes that suit the
# variant (run_unit).
cdef void microkernel_tail(const uint8_t* a, Py_ssize_t a_stride, const uint8_t* tail,
                           Py_ssize_t tail_stride, Py_ssize_t groups, const int8_t* b,
                           int32_t* tile, Py_ssize_t rows) noexcept nogil

# A whole micro-tile's sums (row r at tile + r * NR) requantized by
# TileTerms' rule into bytes (row r at result + r * pitch): vector
# intrinsics where the variant has them, requantize_tile_plain elsewhere.
cdef void requantize_tile(const int32_t* tile, const TileTerms* terms, uint8_t* result,
                          Py_ssize_t pitch) noexcept nogil

# The same by RowTerms' rule (per-row requantization).
cdef void requantize_tile_rows(const int32_t* tile, const RowTerms* terms, uint8_t* result,
                               Py_ssize_t pitch) noexcept nogil

# The micro-kernel on a whole block of MR rows, packed (zero past a short block's
# rows) or read where it lies in one run, then requantize_tile of its sums: one function where the variant
# can keep the sums in registers between the two (_tile_shortcuts.pxi, the
# portable variant's C), the two calls where not.
cdef void microkernel_requantize(const uint8_t* a, Py_ssize_t a_stride, Py_ssize_t groups,
                                 const int8_t* b, const TileTerms* terms, uint8_t* result,
                                 Py_ssize_t pitch) noexcept nogil


cdef inline void microkernel_then_requantize(const uint8_t* a, Py_ssize_t a_stride,
                                             Py_ssize_t groups, const int8_t* b,
                                             const TileTerms* terms, uint8_t* result,
                                             Py_ssize_t pitch) noexcept nogil:
    """microkernel_requantize in its two steps, through a tile in memory."""
    cdef int32_t tile[MR * NR]
    microkernel(a, a_stride, groups, b, tile, MR, NR, False)
    requantize_tile(tile, terms, result, pitch)

# The same by RowTerms' rule (requantize_tile_rows), which the driver
# takes where ROW_TILES is 1: one function that keeps the sums in
# registers where requantize_tile_rows is vectorized (AVX-512 VNNI, and
# _epilogue_ymm.pxi's for AVX2 and AVX-VNNI), the two calls elsewhere.
cdef void microkernel_requantize_rows(const uint8_t* a, Py_ssize_t a_stride, Py_ssize_t groups,
                                      const int8_t* b, const RowTerms* terms, uint8_t* result,
                                      Py_ssize_t pitch) noexcept nogil


cdef inline void microkernel_then_requantize_rows(const uint8_t* a, Py_ssize_t a_stride,
                                                  Py_ssize_t groups, const int8_t* b,
                                                  const RowTerms* terms, uint8_t* result,
                                                  Py_ssize_t pitch) noexcept nogil:
    """microkernel_requantize_rows in its two steps, through a tile in memory."""
    cdef int32_t tile[MR * NR]
    microkernel(a, a_stride, groups, b, tile, MR, NR, False)
    requantize_tile_rows(tile, terms, result, pitch)

# `count` groups of a full panel: NR columns of rows 0 .. 4 * count - 1 of B
# (row i at rows + i * ldb; each byte xor flip, then read as signed), group g
# (k = 4g .. 4g + 3) at target + g * GROUP_BYTES in the panel layout (B_BYTES
# per value); sums[c] += the column's values.
cdef void pack_groups(const uint8_t* rows, Py_ssize_t ldb, Py_ssize_t count, uint8_t flip,
                      int8_t* target, int32_t* sums) noexcept nogil

# The same for two panels side by side: 2 * NR columns of the rows, the
# first NR into the groups at first_target and the next NR into those at
# second_target; sums[c] += the values of all 2 * NR columns.  In fewer
# steps where the variant packs rows twice as wide at a time (AVX-VNNI),
# else pack_groups on each panel (_pack_pair_twice.pxi).
cdef void pack_groups_pair(const uint8_t* rows, Py_ssize_t ldb, Py_ssize_t count, uint8_t flip,
                           int8_t* first_target, int8_t* second_target,
                           int32_t* sums) noexcept nogil

# The depthwise pair kernel's two steps (no-ops where DEPTHWISE_PAIRS is 0):
# one output plane from an int16 plane, and an image channel widened into one.
cdef void depthwise_pairs_plane(const int16_t* plane, Py_ssize_t pitch, Py_ssize_t stride_h,
                                Py_ssize_t span, const int32_t* kernel_rows,
                                const Py_ssize_t* offsets, Py_ssize_t columns,
                                const int32_t* weights, Py_ssize_t out_h, Py_ssize_t out_w,
                                bint interleaved, int32_t bias, int64_t largest_sum,
                                float multiplier, int32_t zero_point, int32_t low,
                                int32_t high, uint8_t* out) noexcept nogil
cdef void depthwise_widen_plane(const uint8_t* source, bint signed, Py_ssize_t width,
                                Py_ssize_t first_row, Py_ssize_t rows, Py_ssize_t pad_left,
                                Py_ssize_t first_chunk, Py_ssize_t chunks,
                                const uint32_t* masks, Py_ssize_t pitch, uint8_t zero,
                                int16_t* plane) noexcept nogil
