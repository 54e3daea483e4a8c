# AMX-INT8 (see _variant.pxd for what each constant means).
cdef enum:
    # 32 x 32: four 16 x 16 int32 accumulator tiles (tmm0-3), two A tiles
    # (tmm4-5) and two B tiles (tmm6-7), all eight tile registers.
    MR = 32
    NR = 32
    # 8 micro-tiles (256 rows of A, 256 KiB at K = 1024) per unit and four
    # panels (128 columns, 128 KiB of B' at K = 1024): 384 KiB per unit,
    # inside the 2 MiB L2 of the CPUs with AMX.  (Not tuned on such a CPU:
    # the values the 8 x 32 tiles use, whose units are half that size.)
    TILE_M_PANELS = 8
    TILE_COLUMNS = 128
    DEPTHWISE_PAIRS = 1

include "_variant.pxd"
