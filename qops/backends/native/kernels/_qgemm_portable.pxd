# Portable C (see _variant.pxd for what each constant means).
cdef enum:
    # 8 x 32: eight rows of int32 sums by 32 columns, a tile the compiler
    # keeps in vector registers where the baseline instruction set has them.
    MR = 8
    NR = 32
    A_BYTES = 1
    B_BYTES = 1
    # 1024 k per block: the packed rows of A (8 KiB) stay in L1, and the
    # unit's block of B' (1024 x 128 bytes, 128 KiB) in a 256 KiB L2.
    K_BLOCK_GROUPS = 256
    # 8 micro-tiles (64 rows) by four panels (128 columns) per unit: each
    # packed block of A serves the four panels, each block of B' the eight
    # micro-tiles.
    TILE_M_PANELS = 8
    TILE_COLUMNS = 128
    # The per-row epilogue by the line forms.
    ROW_TILES = 0
    DEPTHWISE_PAIRS = 0

include "_variant.pxd"
