# AVX-512 VNNI (see _variant.pxd for what each constant means).
cdef enum:
    # 6 x 64: 24 zmm accumulators (four per row), four B' loads and one A'
    # broadcast per row and group of 4 k: 29 of the 32 zmm registers.
    MR = 6
    NR = 64
    # 8 micro-tiles (48 rows of A, 48 KiB at K = 1024) per unit, each B'
    # panel (K x NR bytes, 64 KiB at K = 1024) serving them from L2; two
    # panels (128 columns) per unit, 128 KiB of B', stay in a 1 MiB L2.
    TILE_M_PANELS = 8
    TILE_COLUMNS = 128
    DEPTHWISE_PAIRS = 1

include "_variant.pxd"
