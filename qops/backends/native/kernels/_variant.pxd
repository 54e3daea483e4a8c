# The kernel variant interface: what every _qgemm_<variant> module defines,
# so that _qgemm.pxi (the shared driver, packers, entry points and peak
# probe) and _depthwise.pxi compile against it with the variant's flags.
#
# Each variant's own .pxd (_qgemm_<variant>.pxd) sets its constants, with
# the reason for their sizes, and includes this file; Cython then checks the
# variant's definitions against the declarations below at compile time.
#
#   cdef enum:
#       MR, NR            the micro-tile: MR rows of A by NR columns of B'
#                         (NR a multiple of 32: pack_group32's width)
#       TILE_M_PANELS     micro-tiles down a unit of parallel work: each B'
#                         panel serves them in turn from L1/L2, and their
#                         rows of A stay in L2 across the unit's panels
#       TILE_COLUMNS      columns of B' per unit (a multiple of NR)
#       DEPTHWISE_PAIRS   1 when depthwise_pairs_plane is a pair kernel
#                         (_depthwise_avx512.pxi), 0 when the variant has
#                         none and _depthwise.pxi runs its row kernel
#
# and, at Python level, PROBE_MULTIPLY_ADDS, PROBE_MIX and
# PROBE_RESULT_PER_ROUND, which describe probe_kernel (see peak_gops).

from libc.stdint cimport int8_t, int16_t, int32_t, uint8_t, uint32_t

# tile[r * NR + c] <- sum over steps s, groups g and j < 4 of
#     rows[r][offsets[s] + 4 g + j] * b[((s * groups + g) * NR + c) * 4 + j]
# for unsigned A' bytes and signed B' bytes: exact in int32 for up to 65536 k.
cdef void microkernel(const uint8_t* const* rows, const Py_ssize_t* offsets, Py_ssize_t steps,
                      Py_ssize_t groups, const int8_t* b, int32_t* tile) noexcept nogil

# 32 columns of four rows of B into one group of a panel: column c's bytes
# (row0..row3, each xor flip) at target[4c..4c+3]; sums[c] += their sum as
# signed bytes.
cdef void pack_group32(const uint8_t* row0, const uint8_t* row1, const uint8_t* row2,
                       const uint8_t* row3, uint8_t flip, int8_t* target,
                       int32_t* sums) noexcept nogil

# The depthwise pair kernel's two steps (no-ops where DEPTHWISE_PAIRS is 0):
# one output plane from an int16 plane, and an image channel widened into one.
cdef void depthwise_pairs_plane(const int16_t* plane, Py_ssize_t pitch, Py_ssize_t stride_h,
                                Py_ssize_t span, const int32_t* kernel_rows,
                                const Py_ssize_t* offsets, Py_ssize_t columns,
                                const int32_t* weights, Py_ssize_t out_h, Py_ssize_t out_w,
                                bint interleaved, int32_t bias, float multiplier,
                                int32_t zero_point, int32_t low, int32_t high,
                                uint8_t* out) noexcept nogil
cdef void depthwise_widen_plane(const uint8_t* source, bint signed, Py_ssize_t width,
                                Py_ssize_t first_row, Py_ssize_t rows, Py_ssize_t pad_left,
                                Py_ssize_t first_chunk, Py_ssize_t chunks,
                                const uint32_t* masks, Py_ssize_t pitch, uint8_t zero,
                                int16_t* plane) noexcept nogil

# `rounds` rounds of the micro-kernel's own multiply-add instructions on
# registers; returns their sum (rounds * PROBE_RESULT_PER_ROUND, as int32).
cdef long long probe_kernel(long long rounds) noexcept nogil
