# cython: language_level=3
"""Quantized GEMM with AMX-INT8: tdpbusd multiplies a 16 x 64 tile of
unsigned A' bytes by a 64 x 16 tile of signed B' bytes (16 groups of 4 k by
16 columns, the packed panel layout) into a 16 x 16 tile of int32 sums."""

from libc.stdint cimport int8_t, int32_t, uint8_t, uint16_t
from libc.string cimport memcpy, memset

from qops.backends.native.kernels._requantize cimport (
    RowTerms, TileTerms, requantize_tile_plain, requantize_tile_rows_plain)

cdef extern from "<immintrin.h>" nogil:
    # Tile numbers must be literals: each call below names its registers.
    void _tile_loadconfig(const void* config)
    void _tile_zero(int tile)
    void _tile_loadd(int tile, const void* base, long stride)
    void _tile_stored(int tile, void* base, long stride)
    void _tile_dpbusd(int sums, int a, int b)

cdef extern from "qops_amx.h":
    int qops_request_amx() nogil

if not qops_request_amx():
    raise ImportError("the operating system does not grant this process the AMX tile state")

# The tile (MR x NR) and its units: _qgemm_amx.pxd.
cdef enum:
    BLOCK_GROUPS = 16     # groups of 4 k per tile multiply (64 bytes of a row)


cdef struct TileConfig:
    uint8_t palette
    uint8_t start_row
    uint8_t reserved[14]
    uint16_t bytes_per_row[16]
    uint8_t rows[16]


cdef inline void configure_tiles() noexcept nogil:
    """Eight tiles of 16 rows x 64 bytes (palette 1); the configuration is
    per thread, so every call sets it."""
    cdef TileConfig config
    cdef int t
    memset(&config, 0, sizeof(config))
    config.palette = 1
    for t in range(8):
        config.rows[t] = 16
        config.bytes_per_row[t] = 64
    _tile_loadconfig(&config)


cdef void microkernel_whole(const uint8_t* a, Py_ssize_t a_stride, Py_ssize_t groups,
                            const int8_t* b, int32_t* tile) noexcept nogil:
    """Each block of 16 groups of the packed rows is copied into a 32 x 64
    buffer, zero past the last group, and a last partial block of B' into a
    zero-padded 16 x 128 buffer: the tile loads then read whole 64-byte rows.

    Loading A tiles from an L1-resident buffer pays: straight from a large
    matrix (a stride of 1024 bytes) the loads are slower.
    """
    cdef uint8_t a_block[MR * 64]
    cdef int8_t b_block[BLOCK_GROUPS * NR * 4]
    cdef Py_ssize_t first, count, r
    cdef const int8_t* b_tiles
    configure_tiles()
    _tile_zero(0)
    _tile_zero(1)
    _tile_zero(2)
    _tile_zero(3)
    first = 0
    while first < groups:
        count = min(<Py_ssize_t>BLOCK_GROUPS, groups - first)
        for r in range(MR):
            memcpy(a_block + r * 64, a + r * a_stride + 4 * first, 4 * count)
            if count < BLOCK_GROUPS:
                memset(a_block + r * 64 + 4 * count, 0, 64 - 4 * count)
        b_tiles = b + first * NR * 4
        if count < BLOCK_GROUPS:
            memcpy(b_block, b_tiles, count * NR * 4)
            memset(b_block + count * NR * 4, 0, (BLOCK_GROUPS - count) * NR * 4)
            b_tiles = b_block
        _tile_loadd(4, a_block, 64)
        _tile_loadd(5, a_block + 16 * 64, 64)
        _tile_loadd(6, b_tiles, NR * 4)
        _tile_loadd(7, b_tiles + 64, NR * 4)
        _tile_dpbusd(0, 4, 6)
        _tile_dpbusd(1, 4, 7)
        _tile_dpbusd(2, 5, 6)
        _tile_dpbusd(3, 5, 7)
        first = first + count
    _tile_stored(0, tile, NR * 4)
    _tile_stored(1, tile + 16, NR * 4)
    _tile_stored(2, tile + 16 * NR, NR * 4)
    _tile_stored(3, tile + 16 * NR + 16, NR * 4)


cdef void microkernel_rows(const uint8_t* a, Py_ssize_t a_stride, Py_ssize_t groups,
                           const int8_t* b, int32_t* tile, Py_ssize_t rows) noexcept nogil:
    # The whole tile: the packed block is zero past its rows.
    microkernel_whole(a, a_stride, groups, b, tile)


include "_tail_as_tiles.pxi"
include "_whole_panels.pxi"


cdef void requantize_tile(const int32_t* tile, const TileTerms* terms, uint8_t* result,
                          Py_ssize_t pitch) noexcept nogil:
    requantize_tile_plain(tile, MR, NR, terms, result, pitch)


cdef void requantize_tile_rows(const int32_t* tile, const RowTerms* terms, uint8_t* result,
                               Py_ssize_t pitch) noexcept nogil:
    # Not called while ROW_TILES is 0; the interface's plain form.
    requantize_tile_rows_plain(tile, MR, NR, terms, result, pitch)


cdef void microkernel_requantize_rows(const uint8_t* a, Py_ssize_t a_stride, Py_ssize_t groups,
                                      const int8_t* b, const RowTerms* terms, uint8_t* result,
                                      Py_ssize_t pitch) noexcept nogil:
    # Unreached where ROW_TILES is 0 (the per-row epilogue by lines).
    microkernel_then_requantize_rows(a, a_stride, groups, b, terms, result, pitch)


cdef void microkernel_requantize(const uint8_t* a, Py_ssize_t a_stride, Py_ssize_t groups,
                                 const int8_t* b, const TileTerms* terms, uint8_t* result,
                                 Py_ssize_t pitch) noexcept nogil:
    # The tile's sums come out of the AMX tiles through memory either way.
    microkernel_then_requantize(a, a_stride, groups, b, terms, result, pitch)


include "_narrow_panels.pxi"
include "_pack_avx2.pxi"
include "_pack_pair_twice.pxi"
include "_depthwise_avx512.pxi"
include "_qgemm.pxi"
