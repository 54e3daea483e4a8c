# AVX2 (see _variant.pxd for what each constant means).
cdef enum:
    # 6 x 16: per pair of k, two ymm of B' columns and one broadcast pair of
    # A per row feed twelve vpmaddwd into twelve ymm accumulators: 15 of the
    # 16 ymm registers, and eight loads (six broadcasts, two of B') per twelve
    # multiply-adds, inside two load ports.  Both operands are int16, widened
    # once by the packers, so the loop issues nothing but loads, vpmaddwd and
    # vpaddd.
    MR = 6
    NR = 16
    A_BYTES = 2
    A_SPREAD = 1
    B_BYTES = 2
    # 1024 k per block: the packed rows of A (6 x 1024 x 2 bytes, 12 KiB) stay
    # in a 32 KiB L1 while each 32 KiB panel of the block streams from L2,
    # and the unit's block of B' (1024 x 128 x 2 bytes, 256 KiB) stays in a
    # 512 KiB L2 while its eight micro-tiles take turns.
    K_BLOCK_GROUPS = 256
    # 8 micro-tiles (48 rows) by eight panels (128 columns) per unit: each
    # packed block of A serves eight panels, each block of B' eight
    # micro-tiles, so packing is a small share of the unit's work.
    TILE_M_PANELS = 8
    TILE_COLUMNS = 128
    # The per-row epilogue (a pointwise convolution's, filter x image) by
    # whole micro-tiles, requantized in registers: with few channels per
    # sum the epilogue is much of the work, and the line forms store every
    # sum and read it back.
    ROW_TILES = 1
    # The pair kernel of _depthwise_avx2.pxi.
    DEPTHWISE_PAIRS = 1

include "_variant.pxd"
