# AMX-INT8 (see _variant.pxd for what each constant means).
cdef enum:
    # 32 x 32: four 16 x 16 int32 accumulator tiles (tmm0-3), two A tiles
    # (tmm4-5) and two B tiles (tmm6-7), all eight tile registers.
    MR = 32
    NR = 32
    A_BYTES = 1
    A_SPREAD = 1
    B_BYTES = 1
    # 1024 k per block: the packed rows of A (32 x 1024 bytes, 32 KiB) in a
    # 48 KiB L1, the unit's block of B' (128 KiB) in L2.
    K_BLOCK_GROUPS = 256
    # 8 micro-tiles (256 rows) by four panels (128 columns) per unit.  (Not
    # tuned on such a CPU: the values of the 8 x 32 tiles, whose units are
    # smaller.)
    TILE_M_PANELS = 8
    TILE_COLUMNS = 128
    # The per-row epilogue by the line forms.
    ROW_TILES = 0
    DEPTHWISE_PAIRS = 1

include "_variant.pxd"
