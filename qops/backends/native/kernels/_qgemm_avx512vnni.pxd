# AVX-512 VNNI (see _variant.pxd for what each constant means).
cdef enum:
    # 6 x 64: 24 zmm accumulators (four per row), four B' loads and one A'
    # broadcast per row and group of 4 k: 29 of the 32 zmm registers.
    MR = 6
    NR = 64
    A_BYTES = 1
    A_SPREAD = 1
    B_BYTES = 1
    # 1024 k per block: the packed rows of A (6 KiB) stay in L1 while each
    # 64 KiB panel streams from L2, and the unit's block of B' (1024 x 128
    # bytes, 128 KiB) stays in L2 while its micro-tiles take turns.
    K_BLOCK_GROUPS = 256
    # 8 micro-tiles (48 rows) by two panels (128 columns) per unit: each
    # packed block of A serves both panels, each block of B' the eight
    # micro-tiles.
    TILE_M_PANELS = 8
    TILE_COLUMNS = 128
    # The per-row epilogue by whole micro-tiles in zmm registers.
    ROW_TILES = 1
    DEPTHWISE_PAIRS = 1

include "_variant.pxd"
