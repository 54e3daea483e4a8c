# AVX2 (see _variant.pxd for what each constant means).
cdef enum:
    # 8 x 32: per pass of 4 columns, eight ymm accumulators (one per row)
    # plus the widened B' columns and the row broadcast fit the 16 ymm.
    MR = 8
    NR = 32
    # 8 micro-tiles (64 rows of A, 64 KiB at K = 1024) per unit, each B'
    # panel (K x NR bytes, 32 KiB at K = 1024) serving them from L1/L2; four
    # panels (128 columns) per unit keep the unit's B' inside a 512 KiB L2.
    TILE_M_PANELS = 8
    TILE_COLUMNS = 128
    DEPTHWISE_PAIRS = 0

include "_variant.pxd"
