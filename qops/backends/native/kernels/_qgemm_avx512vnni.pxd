# AVX-512 VNNI (see _variant.pxd for what each constant means).
cdef enum:
    # 6 x 64: 24 zmm accumulators (four per row), four B' loads and one A'
    # broadcast per row and group of 4 k: 29 of the 32 zmm registers.
    MR = 6
    NR = 64
    A_BYTES = 1
    A_SPREAD = 1
    B_BYTES = 1
    # 3072 k per block: the rows of A (6 x 3072 bytes, 18 KiB) stay in L1
    # while each 192 KiB panel streams from L2, and the unit's block of B'
    # (3072 x 128 bytes, 384 KiB) stays in an L2 of 1 MiB or more (Intel's
    # server cores since Skylake, AMD Zen 4 and 5) while its micro-tiles take
    # turns.  BERT's K = 3072 and a 3 x 3 filter over 256 channels (K =
    # 2304) then take one block, not three of 1024 k, whose sums each block
    # but the first reloads and adds.
    K_BLOCK_GROUPS = 768
    # 8 micro-tiles (48 rows) by two panels (128 columns) per unit: each
    # packed block of A serves both panels, each block of B' the eight
    # micro-tiles.
    TILE_M_PANELS = 8
    TILE_COLUMNS = 128
    # The per-row epilogue by whole micro-tiles in zmm registers.
    ROW_TILES = 1
    DEPTHWISE_PAIRS = 1

include "_variant.pxd"
