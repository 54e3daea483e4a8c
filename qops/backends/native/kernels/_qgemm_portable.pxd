# Portable (see _variant.pxd for what each constant means).  On x86-64 the
# baseline instruction set is SSE2, whose pmaddwd multiplies int16 pairs
# exactly, so the layout is the AVX2 variant's at half the width; elsewhere
# the same layout runs as plain C.
cdef enum:
    # 6 x 8: per pair of k, two xmm of B' columns and one broadcast pair of A
    # per row feed twelve pmaddwd into twelve xmm accumulators: 15 of the 16
    # xmm registers.  Both operands are int16, widened once by the packers.
    MR = 6
    NR = 8
    A_BYTES = 2
    B_BYTES = 2
    # Each pair of A four times, so that a row's broadcast is one load: SSE2
    # has no broadcast load, and making it (movd + pshufd) put six shuffles
    # beside every twelve pmaddwd, on the ports they share.  Spread once per
    # block, the copies serve every panel of the unit (8 to 16).
    A_SPREAD = 4
    # 256 k per block: the spread rows of A (6 x 256 x 8 bytes, 12 KiB) stay
    # in a 32 KiB L1 beside the 4 KiB panel of the block that streams past
    # them from L2, and the unit's block of B' (256 x 128 x 2 bytes, 64 KiB)
    # stays in L2 while its eight micro-tiles take turns.  (At 1024 k the
    # spread rows alone were 48 KiB.)
    K_BLOCK_GROUPS = 64
    # 8 micro-tiles (48 rows) by sixteen panels (128 columns) per unit: each
    # packed block of A serves sixteen panels, each block of B' eight
    # micro-tiles.
    TILE_M_PANELS = 8
    TILE_COLUMNS = 128
    # The per-row epilogue by the line forms.
    ROW_TILES = 0

cdef extern from *:
    # The pair kernel (_depthwise_sse2.pxi) wherever the target has SSE2
    # (QOPS_PORTABLE_SSE2, from the kernels' C); the row kernel elsewhere.
    enum: DEPTHWISE_PAIRS "QOPS_PORTABLE_SSE2"

include "_variant.pxd"
