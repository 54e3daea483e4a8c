# AVX-VNNI (see _variant.pxd for what each constant means): vpdpbusd on
# ymm registers, VEX-encoded, as Intel's client cores have it without
# AVX-512 (Alder Lake on).
cdef enum:
    # 6 x 16: per group of 4 k, two ymm of B' quads (columns 0-7, 8-15) and
    # one broadcast quad of A per row feed twelve vpdpbusd into twelve ymm
    # accumulators: 15 of the 16 ymm registers, and eight loads per twelve
    # multiply-adds.  The AVX2 tile, on bytes: its epilogue serves as it is
    # (_epilogue_ymm.pxi); a tail of one or two rows has passes of its own
    # (chained_rows in _tile_rows_ymm.pxi).
    MR = 6
    NR = 16
    A_BYTES = 1
    A_SPREAD = 1
    B_BYTES = 1
    # 3072 k per block: the rows of A (6 x 3072 bytes, 18 KiB) stay in a
    # 48 KiB L1 while each 48 KiB panel of the block streams from L2, and the
    # unit's block of B' (3072 x 128 bytes, 384 KiB) stays in an L2 of 1 MiB
    # or more (Intel's client cores since Alder Lake, AMD Zen 5) while its
    # micro-tiles take turns.  BERT's K = 3072 and a 3 x 3 filter over 256
    # channels (K = 2304) then take one block, not three of 1024 k, whose
    # sums each block but the first reloads and adds.
    K_BLOCK_GROUPS = 768
    # 8 micro-tiles (48 rows) by eight panels (128 columns) per unit.
    TILE_M_PANELS = 8
    TILE_COLUMNS = 128
    # The per-row epilogue by whole micro-tiles (_epilogue_ymm.pxi), in one
    # function with the micro-kernel, rather than the line forms; the AVX2
    # pair kernel for depthwise convolution.
    ROW_TILES = 1
    DEPTHWISE_PAIRS = 1

include "_variant.pxd"
