# The quantized GEMM driver, the packers and the entry points, shared by every
# SIMD variant.  A variant defines what the interface of _variant.pxd names
# (its tile and block constants in its own .pxd; microkernel, pack_groups, the
# depthwise hooks and probe_kernel in its .pyx) and then includes this file,
# so each variant compiles with its own flags and its own micro-tile shape.
#
# Operands.  A is read where it lies, one start per row: a matrix multiply's
# rows of A, or a convolution's output pixels in a channels-last copy of the
# image, whose K values are the real bytes of `steps` runs (one per filter
# tap or filter row) at fixed distances from the pixel's start.  Pack, then
# compute: for each block of K_BLOCK_GROUPS groups of 4 k, the driver packs
# MR rows of A contiguously (in the variant's A_BYTES, zero past K: a
# convolution's runs packed end to end, so K is channels x taps rounded up to
# 4, however few channels a tap has), and the micro-kernel sweeps that block
# across the unit's panels of B.  B is packed once into NR-column panels
# (the variant's B_BYTES and layout): the filter of a convolution or a
# compiled operator's B once, a call's B (or a 1 x 1 convolution's image)
# during the product, a column tile at a time, by the unit that first reads it.
#
# Arithmetic: the micro-kernel multiplies unsigned A' by signed B' (the
# vpdpbusd form).  int8 A is read as A' = A + 128 (xor 0x80) and uint8 B as
# B' = B - 128, and the zero points move with them, so
#     sum_k (A - a_zp)(B - b_zp) = sum_k (A' - a_zp')(B' - b_zp')
#       = S - b_zp' * rowsum(A') - a_zp' * colsum(B') + K * a_zp' * b_zp'
# with S = sum_k A' B'.  |A' B'| <= 255 * 128, so a block's S fits int32
# (a block is at most 65536 k) and blocks add in int64.  Row and column sums
# are int64.  Nothing wraps unnoticed: when the whole value provably fits
# int32 (K * 255 * 255 + |bias| < 2**31), blocks add and the epilogue works
# modulo 2**32 in int32 lanes (`requantize_line`); otherwise in int64.

from libc.math cimport fabs
from libc.stdint cimport (
    INT64_MAX, int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t)
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy, memset

import threading

import numpy as np

from qops.backends.native.kernels._qops_pool cimport MAX_WORKERS, run_range, run_tasks
from qops.backends.native.kernels._requantize cimport (
    RowTerms, TileTerms,
    exact_line,
    exact_row_line,
    packs_clamp_exactly,
    requantize,
    requantize_line,
    requantize_row_line,
    requantize_sums,
)

cdef enum:
    # |(A - a_zp)(B - b_zp)| <= 255 * 255 for any 8-bit operands.
    MAX_PRODUCT = 65025
    INT32_LIMIT = 2147483647
    # Bytes of a panel per group of 4 k, and of a packed row of A per block.
    GROUP_BYTES = NR * 4 * B_BYTES
    BLOCK_ROW_BYTES = K_BLOCK_GROUPS * 4 * A_BYTES * A_SPREAD
    # A thread's scratch (one slot per thread of a run): two packed blocks of
    # A (the micro-tile's, and the next one's, packed ahead: run_unit), then
    # the unit's sums across blocks (int64 at most), 64-byte aligned ...
    SLOT_A_BYTES = (2 * MR * BLOCK_ROW_BYTES + 63) & ~63
    SLOT_UNIT_OFFSET = SLOT_A_BYTES + TILE_M_PANELS * MR * TILE_COLUMNS * 8
    # ... then the unit's requantized bytes, TILE_COLUMNS per row.
    # (one block more than a unit's TILE_M_PANELS: run_gemm folds a lone
    # short last block into the unit above it).
    SLOT_BYTES = SLOT_UNIT_OFFSET + (((TILE_M_PANELS + 1) * MR * TILE_COLUMNS + 63) & ~63)

if 2 * MR * BLOCK_ROW_BYTES > TILE_M_PANELS * MR * TILE_COLUMNS * 8:
    raise ImportError("BLOCK_ROW_BYTES: run_unit keeps two packed blocks in the sums' scratch")
if PACK_COLUMNS % NR:
    raise ImportError("PACK_COLUMNS: a packing task takes whole panels")
if TILE_COLUMNS % 16:
    raise ImportError("TILE_COLUMNS: store_unit transposes blocks of 16 columns")
if <Py_ssize_t>TILE_COLUMNS > <Py_ssize_t>PACK_COLUMNS:
    raise ImportError("TILE_COLUMNS: a unit's columns of B are packed as one task")
# A block's S fits int32 for up to 65792 k (|A' B'| <= 255 * 128).
if K_BLOCK_GROUPS > 16384:
    raise ImportError("K_BLOCK_GROUPS: a block of more than 65536 k could wrap int32")
# k per block of K, at Python level: the tests that cross blocks size K by it.
K_BLOCK = K_BLOCK_GROUPS * 4
if int(A_SPREAD) not in (1, 4) or (A_SPREAD == 4 and A_BYTES != 2):
    raise ImportError("A_SPREAD: spread_pairs makes four copies of int16 pairs")


cdef struct Gemm:
    const uint8_t* a              # row r of A starts at a + row_offset[r] (or r * lda)
    const Py_ssize_t* row_offset  # NULL: rows are lda bytes apart
    Py_ssize_t lda
    Py_ssize_t m
    uint8_t a_flip                # A' = A ^ a_flip (0x80 for int8 A)
    const Py_ssize_t* step_offset  # per step, added to a row's start
    Py_ssize_t steps
    Py_ssize_t step_length         # K values per step (K = steps * step_length)
    # A_SLACK when every run of A may be read A_SLACK bytes past its end
    # (a convolution's copy, allocated with that slack), else 0.
    Py_ssize_t a_slack
    Py_ssize_t groups              # ceil(K / 4): the packed depth
    const int8_t* b                # NR-column panels of `groups` groups
    Py_ssize_t n
    uint8_t* out                   # (r, c) at out[r * out_row_stride + c * out_col_stride]
    Py_ssize_t out_row_stride
    Py_ssize_t out_col_stride
    # `batch` products of one shape: product i reads A at a + a_i *
    # a_batch_stride and B at b + b_i * b_batch_stride, and writes out + i *
    # out_batch_stride, with a_i = a_index[i] and b_i = b_index[i] (i where
    # an index is NULL): a matrix multiply's broadcast batch, or a chunk of
    # a convolution's images (one B).
    Py_ssize_t batch
    const int64_t* a_index
    const int64_t* b_index
    Py_ssize_t a_batch_stride
    Py_ssize_t b_batch_stride
    Py_ssize_t out_batch_stride
    uint8_t* scratch               # SLOT_BYTES per thread, 64-byte aligned
    # B packed during the run (b_ready NULL when it comes packed): each
    # unit's column tile of B member b_i (K x N bytes at b_source + b_i * K
    # * N) is packed into its panels (b_panels, b_batch_stride per member)
    # and column sums (b_sums, b_sums_stride per member) by the first unit
    # that needs it; b_ready[b_i * b_column_tiles + tile] says how far that
    # is (PackState).
    const uint8_t* b_source
    uint8_t b_source_flip
    int8_t* b_panels
    int64_t* b_sums
    Py_ssize_t b_sums_stride
    int32_t* b_ready
    Py_ssize_t b_column_tiles
    # Row sums computed during the run (a_ready NULL when none are, or they
    # come computed): each unit's band of rows of A member a_i is summed
    # into a_sums + a_i * a_sums_stride by the first unit that needs it;
    # a_ready[a_i * a_row_bands + band] says how far that is (PackState).
    int64_t* a_sums
    Py_ssize_t a_sums_stride
    int32_t* a_ready
    Py_ssize_t a_row_bands


cdef struct Epilogue:
    # value[r, c] = S[r, c] + column_term[c] - column_zero[c] * row_term[r]
    #               - row_zero[r] * column_sum[c],
    # row_term[r] = row_sum[r] - k * row_zero[r]; then requantized.
    # With per_row, the bias, multiplier and output zero point belong to the
    # row (column_term[r], multiplier[r], out_zero[r]) and column_zero is one
    # value for every column: a pointwise convolution computed as filter x
    # image, whose rows are output channels.
    const int64_t* column_term      # bias per column, or NULL for none
    const int32_t* column_zero      # b_zp' per column
    const int64_t* column_sum       # sum_k B' per column
    const int32_t* row_zero         # a_zp' at [r * row_zero_step]
    Py_ssize_t row_zero_step        # 0: one for every row
    const int64_t* row_sum          # sum_k A' per row; NULL when every b_zp' is 0
    Py_ssize_t row_sum_batch_stride # between the row sums of A matrices (a_i)
    Py_ssize_t column_sum_batch_stride  # between the column sums of B matrices (b_i)
    int64_t k                       # the real K
    const float* multiplier         # at [r * multiplier_step + c]
    Py_ssize_t multiplier_step
    const int32_t* out_zero         # at [r * out_zero_step + c]
    Py_ssize_t out_zero_step
    int32_t low
    int32_t high
    bint per_row
    bint row_sums_given             # row_sum is the caller's: read, never computed
    bint narrow                     # the whole value fits int32
    # raw: write the exact value as int32, unrequantized (CONVOLUTION_INTEGER,
    # MATRIX_MULTIPLY_INTEGER; the glue runs them here only when K proves the
    # value fits).  The output is then int32: strides count elements of 4 bytes.
    bint raw
    # to_float (with raw): write float32(value) * multiplier[r, c], plus
    # float_bias[c] when given, as float32 instead (MATRIX_MULTIPLY_INTEGER_TO_FLOAT's
    # rule, each step rounded once: the kernels are built without contraction).
    bint to_float
    const float* float_bias


cdef inline Py_ssize_t ceil_div(Py_ssize_t a, Py_ssize_t b) noexcept nogil:
    return (a + b - 1) // b


cdef inline Py_ssize_t round_up(Py_ssize_t a, Py_ssize_t b) noexcept nogil:
    return ceil_div(a, b) * b


def scratch_bytes(int n_threads):
    """Bytes of scratch a run on ``n_threads`` threads needs (Gemm.scratch),
    with room to align it."""
    return max(n_threads, 1) * SLOT_BYTES + 64


# Buffers that live for one call only (the threads' scratch, a plain call's
# packed B, a convolution's channels-last copy and offsets) are kept per
# Python thread and reused by its next call: a fresh buffer of more than
# 128 KiB is a new mapping from the allocator, and its first touch of every
# page is a page fault, which on attention's small products took as long as
# the arithmetic.  Above WORKSPACE_LIMIT bytes a buffer is allocated afresh
# (the work then dwarfs the faults) and not kept.
WORKSPACE_LIMIT = 16 << 20
_workspace = threading.local()


cdef tuple new_buffer(Py_ssize_t nbytes):
    """(array, capacity, address): a buffer of at least nbytes, and 64 bytes
    more so that workspace_bytes can align its start."""
    cdef uint8_t[::1] view
    capacity = max(nbytes, 64)
    array = np.empty(capacity + 64, np.uint8)
    view = array
    return array, capacity, <Py_ssize_t>&view[0]


cdef tuple thread_buffer(str name, Py_ssize_t nbytes):
    buffers = _workspace.__dict__.setdefault("buffers", {})
    entry = buffers.get(name)
    if entry is None or <Py_ssize_t>entry[1] < nbytes:
        entry = buffers[name] = new_buffer(nbytes)
    return entry


def workspace(str name, Py_ssize_t count, dtype):
    """A 1-D array of ``count`` values of ``dtype``, uninitialized, from this
    thread's buffer ``name``; it holds until this thread's next request of
    ``name``, so it must never outlive the call."""
    dtype = np.dtype(dtype)
    cdef Py_ssize_t nbytes = count * dtype.itemsize
    if nbytes > WORKSPACE_LIMIT:
        return np.empty(count, dtype)
    return thread_buffer(name, nbytes)[0][:nbytes].view(dtype)


cdef uint8_t* workspace_bytes(str name, Py_ssize_t nbytes, list keep) except NULL:
    """The 64-byte aligned start of nbytes of this thread's buffer ``name``,
    as workspace() but with no array view of it (a view and its memoryview
    cost about a microsecond, and a call asked for four); a buffer above
    WORKSPACE_LIMIT is fresh, appended to ``keep``, which the caller holds
    until the run ends."""
    if nbytes > WORKSPACE_LIMIT:
        entry = new_buffer(nbytes)
        keep.append(entry[0])
    else:
        entry = thread_buffer(name, nbytes)
    cdef Py_ssize_t address = entry[2]
    return <uint8_t*>(address + (-address & 63))


# -- packing B --------------------------------------------------------------------

cdef enum:
    # Columns of B per packing task: 128, whole 64-byte lines of every row,
    # two at a time (and whole panels: NR divides it).  Not more: the 784
    # pixels of a 28 x 28 image in tasks of 512 gave one of two threads
    # twice the other's share.
    PACK_COLUMNS = 128
    # Groups whose column sums fit the int32 partial sums: 2**20 * 512 < 2**31.
    SUM_GROUPS = 1048576
    # Groups of a partial panel (or a last group past K) copied to the stack
    # and packed at a time.
    STAGE_GROUPS = 8
    # Channels-last copies per convolution chunk: a few images of a batch.
    CHUNK_BYTES = 8 * 1024 * 1024


cdef inline void stage_rows(const uint8_t* b, Py_ssize_t ldb, Py_ssize_t k, Py_ssize_t row,
                            Py_ssize_t count, Py_ssize_t width, uint8_t flip,
                            uint8_t* staged) noexcept nogil:
    """Rows [row, row + count) of B's first `width` columns copied NR bytes
    apart into `staged`, with `flip` bytes (B' = 0: zero in the panel and in
    the sums) past the width and for the rows past K (row < K)."""
    cdef Py_ssize_t i
    memset(staged, flip, count * NR)
    for i in range(min(count, k - row)):
        memcpy(staged + i * NR, b + (row + i) * ldb, width)


cdef void pack_b_columns(const uint8_t* b, Py_ssize_t ldb, Py_ssize_t k, Py_ssize_t columns,
                         uint8_t flip, int8_t* packed, Py_ssize_t panel_size,
                         int64_t* sums) noexcept nogil:
    """Up to PACK_COLUMNS columns of a K x N matrix into their panels (panel_size
    bytes apart); sums[c] <- sum_k B'[k, c] (0 for padding columns).

    A chunk of groups of rows at a time, each panel down them in turn
    through the variant's pack_groups, which reads the rows in place (two
    whole panels side by side through pack_groups_pair).  A
    partial panel, and a last group that runs past K, are packed from a copy
    padded to whole ones.  Column sums gather in int32 for at most
    SUM_GROUPS groups (|sum| <= 512 per group), then in int64.
    """
    cdef uint8_t staged[4 * STAGE_GROUPS * NR]
    cdef int32_t partial[PACK_COLUMNS]
    cdef int8_t* target
    cdef Py_ssize_t g, g0, g1, c0, c1, count, whole, q, c, first, width, p
    cdef bint pair
    cdef Py_ssize_t groups = ceil_div(k, 4)
    cdef Py_ssize_t whole_groups = k // 4
    cdef Py_ssize_t panels = ceil_div(columns, NR)
    # Groups of four rows packed into every panel of the task before the next.
    # Where one 64-byte line of a row holds the columns of 64 / NR panels,
    # those panels take their turns while the chunk's rows are in L1: 16
    # rows for NR = 16, whose lines a pass down the whole of K had lost
    # before the next panel's turn (a row stride of 3072 bytes puts every
    # row's line in one of four L1 sets; B of 768 x 3072, 376 to 250 us
    # with AVX-VNNI).  A panel of a whole line (NR = 64) takes one group at
    # a time, each row's two lines read together (243 to 218 us); eight
    # groups had cost it 10%.
    cdef Py_ssize_t chunk = max(64 // <Py_ssize_t>NR, 1)
    for c in range(panels * NR):
        sums[c] = 0
    g0 = 0
    while g0 < groups:
        g1 = min(g0 + SUM_GROUPS, groups)
        memset(partial, 0, sizeof(partial))
        c0 = g0
        while c0 < g1:
            c1 = min(c0 + chunk, g1)
            whole = max(min(c1, whole_groups) - c0, 0)
            q = 0
            while q < panels:
                first = q * NR
                width = min(<Py_ssize_t>NR, columns - first)
                target = packed + q * panel_size + c0 * GROUP_BYTES
                if width < NR:
                    g = c0
                    while g < c1:
                        count = min(<Py_ssize_t>STAGE_GROUPS, c1 - g)
                        stage_rows(b + first, ldb, k, 4 * g, 4 * count, width, flip, staged)
                        pack_groups(staged, NR, count, flip, target + (g - c0) * GROUP_BYTES,
                                    partial + first)
                        g += count
                    q += 1
                    continue
                # Two full panels side by side in one pass where both are
                # whole (pack_groups_pair).
                pair = columns - first >= 2 * NR
                if whole and pair:
                    pack_groups_pair(b + 4 * c0 * ldb + first, ldb, whole, flip, target,
                                     target + panel_size, partial + first)
                elif whole:
                    pack_groups(b + 4 * c0 * ldb + first, ldb, whole, flip, target,
                                partial + first)
                for p in range(1 + pair):
                    if c0 + whole < c1:
                        stage_rows(b + first + p * NR, ldb, k, 4 * (c0 + whole), 4, NR, flip,
                                   staged)
                        pack_groups(staged, NR, 1, flip,
                                    target + p * panel_size + whole * GROUP_BYTES,
                                    partial + first + p * NR)
                q += 1 + pair
            c0 = c1
        for c in range(panels * NR):
            sums[c] += partial[c]
        g0 = g1


cdef inline void pack_b_span(const uint8_t* b, Py_ssize_t ldb, Py_ssize_t k, Py_ssize_t n,
                             uint8_t flip, int8_t* packed, int64_t* colsum, Py_ssize_t first,
                             Py_ssize_t width) noexcept nogil:
    """Columns [first, first + width) of a K x N matrix B (first a multiple
    of NR, width at most PACK_COLUMNS; clipped at N) into their panels of
    `packed` and their sums in `colsum`, both laid out for the whole of B."""
    cdef Py_ssize_t panel_size = ceil_div(k, 4) * GROUP_BYTES
    pack_b_columns(b + first, ldb, k, min(width, n - first), flip,
                   packed + (first // NR) * panel_size, panel_size, colsum + first)


cdef struct PackB:
    const uint8_t* b
    Py_ssize_t ldb
    Py_ssize_t k
    Py_ssize_t n
    uint8_t flip
    int8_t* packed
    int64_t* colsum


cdef void pack_b_blocks(void* context, Py_ssize_t start, Py_ssize_t stop, int slot) noexcept nogil:
    """Blocks [start, stop) of PACK_COLUMNS columns of B."""
    cdef const PackB* p = <const PackB*>context
    cdef Py_ssize_t block
    for block in range(start, stop):
        pack_b_span(p.b, p.ldb, p.k, p.n, p.flip, p.packed, p.colsum, block * PACK_COLUMNS,
                    PACK_COLUMNS)


cdef void pack_b_matrix(const uint8_t* b, Py_ssize_t ldb, Py_ssize_t k, Py_ssize_t n, uint8_t flip,
                        int8_t* packed, int64_t* colsum, int n_threads) noexcept nogil:
    """A K x N matrix B (rows ldb bytes apart) into NR-column panels,
    PACK_COLUMNS columns per task."""
    cdef PackB p
    p.b = b
    p.ldb = ldb
    p.k = k
    p.n = n
    p.flip = flip
    p.packed = packed
    p.colsum = colsum
    run_range(pack_b_blocks, &p, ceil_div(n, PACK_COLUMNS), 1, n_threads)


cdef extern from *:
    """
    /* A column tile's packing state, shared by the threads of a run: one
       thread claims it (compare-and-swap), packs it and publishes it with a
       release store that the others' acquire loads pair with.  Without GCC
       or Clang builtins the pool has no threads (it needs pthreads and
       OpenMP), so plain accesses are enough. */
    #if defined(__GNUC__)
    static inline int qops_state_load(const int* state) {
        return __atomic_load_n(state, __ATOMIC_ACQUIRE);
    }
    static inline void qops_state_store(int* state, int value) {
        __atomic_store_n(state, value, __ATOMIC_RELEASE);
    }
    static inline int qops_state_claim(int* state, int from, int to) {
        return __atomic_compare_exchange_n(state, &from, to, 0, __ATOMIC_ACQUIRE,
                                           __ATOMIC_ACQUIRE);
    }
    #if defined(__x86_64__) || defined(__i386__)
    #include <immintrin.h>
    #define qops_state_pause() _mm_pause()
    #else
    #define qops_state_pause() ((void)0)
    #endif
    #else
    static int qops_state_load(const int* state) { return *state; }
    static void qops_state_store(int* state, int value) { *state = value; }
    static int qops_state_claim(int* state, int from, int to) {
        if (*state != from) return 0;
        *state = to;
        return 1;
    }
    #define qops_state_pause() ((void)0)
    #endif
    #include <sched.h>
    """
    int state_load "qops_state_load"(const int32_t* state) noexcept nogil
    void state_store "qops_state_store"(int32_t* state, int value) noexcept nogil
    bint state_claim "qops_state_claim"(int32_t* state, int from_value,
                                        int to_value) noexcept nogil
    void state_pause "qops_state_pause"() noexcept nogil
    int sched_yield() noexcept nogil


cdef enum PackState:
    UNPACKED = 0
    PACKING = 1
    PACKED = 2


cdef void ensure_packed(const Gemm* gemm, Py_ssize_t b_member, Py_ssize_t q) noexcept nogil:
    """The column tile of B member b_member holding panel q, packed (by this
    thread, or waited for while another packs it).

    Packing a unit's columns where they are multiplied, rather than all of B
    in a pass of its own before the product, saves that pass's wait for its
    slowest thread, and a thread mostly packs the columns it then reads from
    its own cache (call after call the pool gives each thread the same units).
    """
    cdef Py_ssize_t tile = q // (TILE_COLUMNS // NR)
    cdef int32_t* state = gemm.b_ready + b_member * gemm.b_column_tiles + tile
    cdef Py_ssize_t k = gemm.steps * gemm.step_length
    if state_load(state) == PACKED:
        return
    if state_claim(state, UNPACKED, PACKING):
        pack_b_span(gemm.b_source + b_member * k * gemm.n, gemm.n, k, gemm.n,
                    gemm.b_source_flip, gemm.b_panels + b_member * gemm.b_batch_stride,
                    gemm.b_sums + b_member * gemm.b_sums_stride, tile * TILE_COLUMNS,
                    TILE_COLUMNS)
        state_store(state, PACKED)
        return
    wait_for(state)  # another thread is packing it


cdef inline void wait_for(int32_t* state) noexcept nogil:
    """Until another thread has published `state` as PACKED: a few
    microseconds, unless that thread has lost its core, which then needs
    this one's."""
    cdef Py_ssize_t spins = 0
    while state_load(state) != PACKED:
        spins += 1
        if spins < 4096:
            state_pause()
        else:
            sched_yield()


cdef void ensure_row_sums(const Gemm* gemm, const Gemm* own, Py_ssize_t a_member,
                          Py_ssize_t p, Py_ssize_t p_end) noexcept nogil:
    """The sums of A' over the rows of micro-tiles [p, p_end) of A member
    a_member (own.a), computed (by this thread, or waited for): in the
    units that need them, as B is packed, rather than in a pass of their
    own before the product, which on attention's twelve 128 x 64 matrices
    was one job each and took half as long as the product."""
    cdef int32_t* state = gemm.a_ready + a_member * gemm.a_row_bands + p // TILE_M_PANELS
    if state_load(state) == PACKED:
        return
    if state_claim(state, UNPACKED, PACKING):
        sum_rows(own, p * MR, min(p_end * MR, own.m),
                 gemm.a_sums + a_member * gemm.a_sums_stride)
        state_store(state, PACKED)
        return
    wait_for(state)


cdef inline Py_ssize_t row_bands(Py_ssize_t m) noexcept nogil:
    """The bands of TILE_M_PANELS micro-tiles over m rows (run_gemm's units
    take one each; a short last band folded into the one above it keeps a
    state it never uses)."""
    return ceil_div(ceil_div(m, MR), TILE_M_PANELS)


def packed_b_bytes(Py_ssize_t k, Py_ssize_t n):
    """Bytes of a K x N matrix packed into panels."""
    return ceil_div(n, NR) * ceil_div(k, 4) * GROUP_BYTES


# -- packing A ------------------------------------------------------------------------

cdef inline void copy_values(uint8_t* target, const uint8_t* source, Py_ssize_t count,
                             uint8_t flip) noexcept nogil:
    """count values of A' (source ^ flip) in the variant's A_BYTES: a loop the
    compiler vectorizes (a widening load per 16 bytes, for int16)."""
    cdef Py_ssize_t i
    cdef uint16_t* wide = <uint16_t*>target
    if A_BYTES == 2:
        for i in range(count):
            wide[i] = source[i] ^ flip
    elif flip:
        for i in range(count):
            target[i] = source[i] ^ flip
    else:
        memcpy(target, source, count)


cdef enum:
    # Short runs (a first convolution's filter rows of 7 taps by 3 channels) are copied
    # A_SLACK values at a time, a fixed count the compiler turns into one
    # widening load and store, where the source may be read past the run and
    # the packed row written past it (the next run, or the zeros that
    # pack_a_block writes after the last, overwrite the excess).
    A_SLACK = 32


cdef extern from *:
    # A_SLACK values of A' (source ^ flip) in the variant's A_BYTES: with
    # AVX2, two 16-byte loads and two widening stores (or one byte store);
    # the plain loop elsewhere.  (Written out: from a loop through local
    # arrays the compiler made a 32-byte store that the 16-byte reloads could
    # not forward from, a stall of most of the copy's time.)
    """
    #include <stdint.h>
    #if defined(__AVX2__)
    #include <immintrin.h>
    static inline void qops_copy_short(uint8_t* target, const uint8_t* source, uint8_t flip,
                                       int wide) {
        __m128i mask = _mm_set1_epi8((char)flip);
        __m128i low = _mm_loadu_si128((const __m128i*)source);
        __m128i high = _mm_loadu_si128((const __m128i*)(source + 16));
        if (wide && !flip) {
            /* Unsigned A as it is: each load folds into its widening. */
            _mm256_storeu_si256((__m256i*)target, _mm256_cvtepu8_epi16(low));
            _mm256_storeu_si256((__m256i*)(target + 32), _mm256_cvtepu8_epi16(high));
            return;
        }
        low = _mm_xor_si128(low, mask);
        high = _mm_xor_si128(high, mask);
        if (wide) {
            _mm256_storeu_si256((__m256i*)target, _mm256_cvtepu8_epi16(low));
            _mm256_storeu_si256((__m256i*)(target + 32), _mm256_cvtepu8_epi16(high));
        } else {
            _mm256_storeu_si256((__m256i*)target, _mm256_set_m128i(high, low));
        }
    }
    #else
    static inline void qops_copy_short(uint8_t* target, const uint8_t* source, uint8_t flip,
                                       int wide) {
        int i;
        for (i = 0; i < 32; i++) {
            if (wide) ((uint16_t*)target)[i] = (uint16_t)(source[i] ^ flip);
            else target[i] = (uint8_t)(source[i] ^ flip);
        }
    }
    #endif
    """
    void copy_short "qops_copy_short"(uint8_t* target, const uint8_t* source, uint8_t flip,
                                      int wide) noexcept nogil


cdef extern from *:
    # A packed row's first `pairs` pairs of int16 spread in place to four
    # copies each (pair p at row + 16 p), for A_SPREAD 4.  From the last
    # pair to the first: a pair's copies land on higher pairs' values only,
    # which have been read by then.  With SSE2, four pairs a step (one load,
    # four pshufd and four stores per four pairs: the shuffles a micro-kernel
    # of that width would make per pair and panel, made once per block).
    """
    #include <stddef.h>
    #include <stdint.h>
    #include <string.h>
    #if defined(__SSE2__)
    #include <emmintrin.h>
    #endif
    static void qops_spread_pairs(uint8_t* row, ptrdiff_t pairs) {
        ptrdiff_t p = pairs;
        int32_t pair;
        int copy;
    #if defined(__SSE2__)
        while (p % 4) {
            p--;
            memcpy(&pair, row + 4 * p, 4);
            _mm_storeu_si128((__m128i*)(row + 16 * p), _mm_set1_epi32(pair));
        }
        while (p > 0) {
            __m128i four;
            p -= 4;
            four = _mm_loadu_si128((const __m128i*)(row + 4 * p));
            _mm_storeu_si128((__m128i*)(row + 16 * p + 48), _mm_shuffle_epi32(four, 0xFF));
            _mm_storeu_si128((__m128i*)(row + 16 * p + 32), _mm_shuffle_epi32(four, 0xAA));
            _mm_storeu_si128((__m128i*)(row + 16 * p + 16), _mm_shuffle_epi32(four, 0x55));
            _mm_storeu_si128((__m128i*)(row + 16 * p), _mm_shuffle_epi32(four, 0x00));
        }
    #else
        while (p > 0) {
            p--;
            memcpy(&pair, row + 4 * p, 4);
            for (copy = 0; copy < 4; copy++)
                memcpy(row + 16 * p + 4 * copy, &pair, 4);
        }
    #endif
        (void)copy;
    }
    """
    void spread_pairs "qops_spread_pairs"(uint8_t* row, Py_ssize_t pairs) noexcept nogil


cdef inline void copy_widened(uint8_t* target, const uint8_t* source, Py_ssize_t count,
                              uint8_t flip) noexcept nogil:
    """copy_values for int16 A' (A_BYTES 2): whole runs of A_SLACK values by
    copy_short, then the rest.  (With the compiler's loop, its head and tail
    peeled, packing took 4.9% of the AVX2 attention product; this way
    3.7%.)"""
    while count >= A_SLACK:
        copy_short(target, source, flip, True)
        target = target + 2 * A_SLACK
        source = source + A_SLACK
        count = count - A_SLACK
    copy_values(target, source, count, flip)


cdef inline void zero_row_end(uint8_t* target, Py_ssize_t count) noexcept nogil:
    """count (< 4) values of zeros: the padding of a packed row to a whole
    group, in stores of known size (a memset call per row was about 1% of a
    first convolution's time with AVX2)."""
    cdef uint64_t zeros = 0
    cdef Py_ssize_t nbytes = count * A_BYTES
    if nbytes >= 4:
        memcpy(target, &zeros, 4)
        target = target + 4
        nbytes = nbytes - 4
    if nbytes >= 2:
        memcpy(target, &zeros, 2)
        target = target + 2
        nbytes = nbytes - 2
    if nbytes:
        target[0] = 0


cdef inline const uint8_t* row_start(const Gemm* gemm, Py_ssize_t r) noexcept nogil:
    if gemm.row_offset != NULL:
        return gemm.a + gemm.row_offset[r]
    return gemm.a + r * gemm.lda


cdef void pack_a_block(const Gemm* gemm, Py_ssize_t row0, Py_ssize_t rows_here, Py_ssize_t k0,
                       Py_ssize_t k1, uint8_t* target) noexcept nogil:
    """Values [k0, k1) of rows row0 .. row0 + MR - 1 of A' into a packed
    block (row r at target + r * BLOCK_ROW_BYTES), zero up to a whole group
    past k1 and in the rows past M, each pair A_SPREAD times.  k0 is a whole
    number of groups; a convolution's steps are walked from the one holding
    k0."""
    cdef Py_ssize_t r
    pack_a_values(gemm, row0, rows_here, k0, k1, target)
    if A_SPREAD > 1:
        for r in range(MR):
            spread_pairs(target + r * BLOCK_ROW_BYTES, round_up(k1 - k0, 4) // 2)


cdef void pack_a_values(const Gemm* gemm, Py_ssize_t row0, Py_ssize_t rows_here, Py_ssize_t k0,
                        Py_ssize_t k1, uint8_t* target) noexcept nogil:
    """pack_a_block's values, each once (A_BYTES each, from the row's start)."""
    cdef Py_ssize_t r, position, step, offset, count
    cdef Py_ssize_t length = k1 - k0
    cdef Py_ssize_t padded = round_up(length, 4)
    cdef Py_ssize_t first_step = k0 // gemm.step_length
    cdef Py_ssize_t first_offset = k0 % gemm.step_length
    # Runs that start this far into the row may be copied A_SLACK at a time
    # and still end inside the row's BLOCK_ROW_BYTES.
    cdef Py_ssize_t short_limit = (K_BLOCK_GROUPS * 4 - A_SLACK) if gemm.a_slack >= A_SLACK else -1
    cdef const uint8_t* source
    cdef uint8_t* row
    # Every step whole, each short enough for copy_short (a first
    # convolution's 7 runs of 21): a fixed loop over the steps, with the
    # fields it reads in locals (stores of bytes may alias the Gemm, so
    # the general loop reloads them after each copy); about a third of
    # the packing's time on a first convolution.
    cdef const Py_ssize_t* step_offset = gemm.step_offset
    cdef Py_ssize_t steps = gemm.steps, step_length = gemm.step_length
    cdef uint8_t flip = gemm.a_flip
    if (k0 == 0 and k1 == steps * step_length and step_length <= A_SLACK
            and (steps - 1) * step_length <= short_limit):
        for r in range(rows_here):
            row = target + r * BLOCK_ROW_BYTES
            source = row_start(gemm, row0 + r)
            for step in range(steps):
                copy_short(row + step * step_length * A_BYTES, source + step_offset[step],
                           flip, A_BYTES == 2)
            zero_row_end(row + length * A_BYTES, padded - length)
        for r in range(rows_here, MR):
            memset(target + r * BLOCK_ROW_BYTES, 0, padded * A_BYTES)
        return
    for r in range(MR):
        row = target + r * BLOCK_ROW_BYTES
        if r >= rows_here:
            memset(row, 0, padded * A_BYTES)
            continue
        source = row_start(gemm, row0 + r)
        position = 0
        step = first_step
        offset = first_offset
        while position < length:
            count = min(gemm.step_length - offset, length - position)
            if count <= A_SLACK and position <= short_limit:
                copy_short(row + position * A_BYTES, source + gemm.step_offset[step] + offset,
                           gemm.a_flip, A_BYTES == 2)
            elif A_BYTES == 2:
                copy_widened(row + position * A_BYTES, source + gemm.step_offset[step] + offset,
                             count, gemm.a_flip)
            else:
                copy_values(row + position * A_BYTES, source + gemm.step_offset[step] + offset,
                            count, gemm.a_flip)
            position = position + count
            step = step + 1
            offset = 0
        zero_row_end(row + length * A_BYTES, padded - length)


# -- the driver -------------------------------------------------------------------

cdef inline void swap_bytes(uint64_t* x, int i, int j, int shift, uint64_t mask) noexcept nogil:
    """Exchange the bytes of x[i] above `shift` with the bytes of x[j] below it."""
    cdef uint64_t t = ((x[i] >> shift) ^ x[j]) & mask
    x[i] ^= t << shift
    x[j] ^= t


cdef inline void transpose_bytes(uint64_t* x) noexcept nogil:
    """Transpose the 8 x 8 byte matrix whose row i is x[i] (byte j at bits 8j):
    swap 4 x 4 blocks, then 2 x 2 blocks within them, then single bytes."""
    cdef int i
    for i in range(4):
        swap_bytes(x, i, i + 4, 32, 0x00000000FFFFFFFFULL)
    for i in range(2):
        swap_bytes(x, i, i + 2, 16, 0x0000FFFF0000FFFFULL)
        swap_bytes(x, i + 4, i + 6, 16, 0x0000FFFF0000FFFFULL)
    for i in range(4):
        swap_bytes(x, 2 * i, 2 * i + 1, 8, 0x00FF00FF00FF00FFULL)


cdef extern from *:
    # A block of up to 16 rows by 16 columns of bytes (row i at source + i *
    # pitch), each byte xor flip, transposed: column c's bytes, one per row,
    # as a run at target + c * stride, for the first `columns` columns; each
    # run `height` bytes.  With SSE2 (every x86-64), the four rounds of byte
    # interleaving that transpose 16 x 16 bytes in registers: 16 loads, 64
    # unpacks and 16 stores where the 8 x 8 scalar transposes took about 350
    # operations; a transposed store was a tenth of a 1 x 1 convolution on
    # 7 x 7 pixels, the channels-last copy of its image as much again.
    # Nothing past row `height` is read (it may be another unit's), nor past
    # a row's `columns` bytes unless all 16 lie within the first `readable`
    # bytes from source (a short block of an image's last positions, read
    # whole where the next channel follows: a partial read of each row was
    # half the copy of a 7 x 7 image).
    """
    #include <stddef.h>
    #include <stdint.h>
    #include <string.h>
    #if defined(__SSE2__)
    #include <emmintrin.h>
    static inline void qops_transpose_block16(const uint8_t* source, ptrdiff_t pitch,
                                              ptrdiff_t height, ptrdiff_t columns,
                                              uint8_t* target, ptrdiff_t stride,
                                              uint8_t flip, ptrdiff_t readable) {
        __m128i rows[16], next[16];
        __m128i flips = _mm_set1_epi8((char)flip);
        int i, round;
        for (i = 0; i < 16; i++) {
            if (i >= height) {
                rows[i] = _mm_setzero_si128();
            } else if (columns == 16 || i * pitch + 16 <= readable) {
                rows[i] = _mm_xor_si128(_mm_loadu_si128((const __m128i*)(source + i * pitch)),
                                        flips);
            } else {
                uint8_t part[16] = {0};
                memcpy(part, source + i * pitch, (size_t)columns);
                rows[i] = _mm_xor_si128(_mm_loadu_si128((const __m128i*)part), flips);
            }
        }
        /* Interleaving row i with row i + 8, four times over, moves byte
           (r, c) to (c, r). */
        for (round = 0; round < 4; round++) {
            for (i = 0; i < 8; i++) {
                next[2 * i] = _mm_unpacklo_epi8(rows[i], rows[i + 8]);
                next[2 * i + 1] = _mm_unpackhi_epi8(rows[i], rows[i + 8]);
            }
            for (i = 0; i < 16; i++)
                rows[i] = next[i];
        }
        if (height == 16) {
            for (i = 0; i < columns; i++)
                _mm_storeu_si128((__m128i*)(target + i * stride), rows[i]);
        } else {
            uint8_t run[16];
            for (i = 0; i < columns; i++) {
                _mm_storeu_si128((__m128i*)run, rows[i]);
                memcpy(target + i * stride, run, (size_t)height);
            }
        }
    }
    #else
    static inline void qops_transpose_block16(const uint8_t* source, ptrdiff_t pitch,
                                              ptrdiff_t height, ptrdiff_t columns,
                                              uint8_t* target, ptrdiff_t stride,
                                              uint8_t flip, ptrdiff_t readable) {
        ptrdiff_t r, c;
        (void)readable;
        for (c = 0; c < columns; c++)
            for (r = 0; r < height; r++)
                target[c * stride + r] = source[r * pitch + c] ^ flip;
    }
    #endif
    """
    void transpose_block16 "qops_transpose_block16"(
        const uint8_t* source, Py_ssize_t pitch, Py_ssize_t height, Py_ssize_t columns,
        uint8_t* target, Py_ssize_t stride, uint8_t flip, Py_ssize_t readable) noexcept nogil


cdef void store_unit(const uint8_t* result, Py_ssize_t rows, Py_ssize_t cols,
                     uint8_t* out, Py_ssize_t row_stride, Py_ssize_t col_stride) noexcept nogil:
    """A unit's bytes (row i at result + i * TILE_COLUMNS) into the output."""
    cdef Py_ssize_t i, c, block, first
    cdef uint8_t* target
    if col_stride == 1:
        for i in range(rows):
            memcpy(out + i * row_stride, result + i * TILE_COLUMNS, cols)
    elif row_stride == 1:
        # A convolution's output is channels-first: each column (output
        # channel) takes the unit's pixels as consecutive bytes, 16 rows by
        # 16 columns at a time (TILE_COLUMNS is a multiple of 16, so a block
        # never reads past a row of the unit's bytes).
        for first in range(0, rows, 16):
            for block in range(0, cols, 16):
                transpose_block16(result + first * TILE_COLUMNS + block, TILE_COLUMNS,
                                  min(<Py_ssize_t>16, rows - first),
                                  min(<Py_ssize_t>16, cols - block),
                                  out + block * col_stride + first, col_stride, 0,
                                  min(<Py_ssize_t>16, rows - first) * TILE_COLUMNS)
    else:
        for c in range(cols):
            target = out + c * col_stride
            for i in range(rows):
                target[i * row_stride] = result[i * TILE_COLUMNS + c]


cdef struct UnitOutput:
    # Where a unit's requantized bytes gather before store_unit writes them
    # out, and the unit's column vectors modulo 2**32 (narrow epilogues),
    # computed once per unit rather than once per micro-tile.
    uint8_t* bytes                 # row i, column c at bytes[i * pitch + c]
    Py_ssize_t pitch               # TILE_COLUMNS in the scratch; the output's row stride
    # in_place: bytes is the unit's corner of a row-major output, written
    # there by the epilogue itself (store_unit has nothing left to do).
    bint in_place
    Py_ssize_t row0                # the unit's first row and column in the product
    Py_ssize_t col0
    uint32_t column_term[TILE_COLUMNS]
    uint32_t column_sum[TILE_COLUMNS]
    # by_tile: the epilogue takes whole micro-tiles (requantize_tile), from
    # these vectors (TileTerms), zero past the unit's last column.
    bint by_tile
    uint32_t tile_column[TILE_COLUMNS]
    uint32_t tile_column_zero[TILE_COLUMNS]
    float tile_multiplier[TILE_COLUMNS]
    float tile_floor[TILE_COLUMNS]
    float tile_ceiling[TILE_COLUMNS]
    int32_t tile_offset[TILE_COLUMNS]
    bint no_column_zero             # TileTerms' shortcuts, for the unit's columns
    bint unit_column_zero           # (tile_column_zero all 1, row terms times column_zero)
    uint32_t column_zero            # the unit's one column zero point, with unit_column_zero
    bint packs_clamp
    # by_rows: a per-row epilogue by whole micro-tiles (requantize_tile_rows,
    # where the variant vectorizes it: ROW_TILES), from column_sum, zero past
    # the unit's last column.
    bint by_rows
    # raw_tiles: a raw epilogue (int32 or float32 values) with one zero point
    # of A into row-major output, whose whole tiles take raw_tile, from
    # tile_column.
    bint raw_tiles


cdef inline bint tile_epilogue(const Epilogue* e) noexcept nogil:
    """Whether requantize_tile's rule covers the epilogue: int32 values to
    bytes, one zero point of A, multipliers and output zero points per column
    (not per row), and at most 256 output integers."""
    return (e.narrow and not e.raw and not e.per_row and e.row_zero_step == 0
            and e.multiplier_step == 0 and e.out_zero_step == 0 and e.high - e.low <= 255)


cdef void start_unit(UnitOutput* unit, uint8_t* scratch, Py_ssize_t row0, Py_ssize_t col0,
                     Py_ssize_t cols, const Epilogue* e, uint8_t* corner,
                     Py_ssize_t out_row_stride, bint inside) noexcept nogil:
    """The unit's output and column vectors.  corner (or NULL): the unit's
    first byte in a row-major output, where the epilogue writes directly when
    it can: when every tile it writes whole (by_tile, by_rows: rows past M
    and columns past N too) lies inside the output, or it writes only the
    values (the line forms)."""
    # Every loop below is a plain one the compiler vectorizes: on products
    # with a short K (attention's 64) this setup is redone for each unit and
    # was, as scalar code, a fifth of the epilogue's time.
    cdef Py_ssize_t c
    cdef uint32_t row_zero
    unit.row0 = row0
    unit.col0 = col0
    unit.by_tile = tile_epilogue(e)
    unit.by_rows = (ROW_TILES and e.per_row and e.narrow and not e.raw
                    and e.high - e.low <= 255)
    # Written in place, the bytes skip a copy through the scratch: on a
    # 128 x 512 x 784 product, a thousand row copies of 128 bytes.
    unit.in_place = (corner != NULL and not e.raw
                     and (inside or not (unit.by_tile or unit.by_rows)))
    unit.bytes = corner if unit.in_place else scratch + SLOT_UNIT_OFFSET
    unit.pitch = out_row_stride if unit.in_place else TILE_COLUMNS
    unit.raw_tiles = e.raw and not e.per_row and e.row_zero_step == 0 and corner != NULL
    if not e.narrow:
        return
    # Per-column vectors (a per-row epilogue's bias, multipliers and zero
    # points are the rows': only the column sums are read then).
    cdef const int64_t* column_term = (e.column_term + col0
                                       if e.column_term != NULL and not e.per_row else NULL)
    cdef const int64_t* column_sum = e.column_sum + col0
    if column_term != NULL:
        for c in range(cols):
            unit.column_term[c] = <uint32_t>column_term[c]
    else:
        memset(unit.column_term, 0, cols * sizeof(uint32_t))
    for c in range(cols):
        unit.column_sum[c] = <uint32_t>column_sum[c]
    if cols < TILE_COLUMNS:
        memset(&unit.column_sum[cols], 0, (TILE_COLUMNS - cols) * sizeof(uint32_t))
    if unit.raw_tiles or unit.by_tile:
        # The bias less the one zero point of A's share, per column.
        row_zero = <uint32_t>e.row_zero[0]
        for c in range(cols):
            unit.tile_column[c] = unit.column_term[c] - row_zero * unit.column_sum[c]
    if not unit.by_tile:
        return
    cdef const int32_t* column_zero = e.column_zero + col0
    cdef const float* multiplier = e.multiplier + col0
    cdef const int32_t* out_zero = e.out_zero + col0
    # |value| <= K * MAX_PRODUCT + |bias|.  The largest |multiplier| is taken
    # as the largest of the floats' bits less the sign: for finite floats
    # their order as unsigned integers is their order as numbers.
    cdef int64_t largest_bias = 0, bias
    cdef uint32_t largest_bits = 0, bits
    cdef uint32_t any_column_zero = 0, other_column_zero = 0
    cdef float largest_multiplier
    for c in range(cols):
        any_column_zero |= <uint32_t>column_zero[c]
        other_column_zero |= <uint32_t>column_zero[c] ^ <uint32_t>column_zero[0]
        memcpy(&bits, &multiplier[c], 4)
        bits &= 0x7fffffffU
        largest_bits = bits if bits > largest_bits else largest_bits
    if column_term != NULL:
        for c in range(cols):
            bias = column_term[c] if column_term[c] >= 0 else -column_term[c]
            largest_bias = bias if bias > largest_bias else largest_bias
    memcpy(&largest_multiplier, &largest_bits, 4)
    unit.no_column_zero = any_column_zero == 0
    # One zero point of B for every column (per-tensor B: attention's
    # activations) goes into the row terms, a product per row instead of
    # one per value.
    unit.unit_column_zero = any_column_zero != 0 and other_column_zero == 0
    unit.column_zero = <uint32_t>column_zero[0]
    unit.packs_clamp = packs_clamp_exactly(
        largest_multiplier * (<double>e.k * MAX_PRODUCT + <double>largest_bias), e.low, e.high)
    for c in range(cols):
        unit.tile_column_zero[c] = 1 if unit.unit_column_zero else <uint32_t>column_zero[c]
        unit.tile_multiplier[c] = multiplier[c]
        unit.tile_floor[c] = <float>(e.low - out_zero[c])
        unit.tile_ceiling[c] = <float>(e.high - out_zero[c])
        unit.tile_offset[c] = out_zero[c] - e.low
    if cols < TILE_COLUMNS:
        # Zero past the unit's last column: whole micro-tiles read them.
        memset(&unit.tile_column[cols], 0, (TILE_COLUMNS - cols) * sizeof(uint32_t))
        memset(&unit.tile_column_zero[cols], 0, (TILE_COLUMNS - cols) * sizeof(uint32_t))
        memset(&unit.tile_multiplier[cols], 0, (TILE_COLUMNS - cols) * sizeof(float))
        memset(&unit.tile_floor[cols], 0, (TILE_COLUMNS - cols) * sizeof(float))
        memset(&unit.tile_ceiling[cols], 0, (TILE_COLUMNS - cols) * sizeof(float))
        memset(&unit.tile_offset[cols], 0, (TILE_COLUMNS - cols) * sizeof(int32_t))


cdef void tile_terms_of_rows(TileTerms* terms, uint32_t* row_term, Py_ssize_t row0,
                             const Epilogue* e, const Gemm* gemm,
                             const UnitOutput* unit) noexcept nogil:
    """The TileTerms of MR rows from row0 but their columns' vectors
    (tile_terms_at points those at a tile's columns): the row terms into
    row_term, which the terms then point at."""
    cdef Py_ssize_t i, r
    cdef int64_t row_zero = e.row_zero[0]
    cdef uint32_t scale = unit.column_zero if unit.unit_column_zero else 1
    for i in range(MR):
        r = row0 + i
        row_term[i] = (<uint32_t>(e.row_sum[r] - e.k * row_zero) * scale
                       if e.row_sum != NULL and r < gemm.m else 0)
    terms.row_term = row_term
    terms.low = e.low
    terms.no_column_zero = unit.no_column_zero
    terms.unit_column_zero = unit.unit_column_zero
    terms.packs_clamp = unit.packs_clamp


cdef inline uint8_t* tile_terms_at(TileTerms* terms, Py_ssize_t row0, Py_ssize_t col0,
                                   const UnitOutput* unit) noexcept nogil:
    """Points the terms of a micro-tile's rows (tile_terms_of_rows) at its
    columns' vectors; returns where the tile's bytes go in the unit's (the
    whole tile: rows past M and columns past N land in the unit's scratch,
    never in the output)."""
    cdef Py_ssize_t at = col0 - unit.col0
    terms.column = unit.tile_column + at
    terms.column_zero = unit.tile_column_zero + at
    terms.multiplier = unit.tile_multiplier + at
    terms.floor = unit.tile_floor + at
    terms.ceiling = unit.tile_ceiling + at
    terms.offset = unit.tile_offset + at
    return unit.bytes + (row0 - unit.row0) * unit.pitch + at


cdef void requantize_unit_tile_at(const int32_t* tile, TileTerms* terms, Py_ssize_t row0,
                                  Py_ssize_t col0, const UnitOutput* unit) noexcept nogil:
    """A micro-tile's int32 values into the unit's bytes by requantize_tile,
    with the terms of its rows (tile_terms_of_rows)."""
    requantize_tile(tile, terms, tile_terms_at(terms, row0, col0, unit), unit.pitch)


cdef inline void requantize_unit_tile(const int32_t* tile, Py_ssize_t row0, Py_ssize_t col0,
                                      const Epilogue* e, const Gemm* gemm,
                                      const UnitOutput* unit) noexcept nogil:
    """requantize_unit_tile_at with the terms of the tile's rows."""
    cdef uint32_t row_term[MR]
    cdef TileTerms terms
    tile_terms_of_rows(&terms, row_term, row0, e, gemm, unit)
    requantize_unit_tile_at(tile, &terms, row0, col0, unit)


cdef inline uint32_t row_term_of(const Epilogue* e, Py_ssize_t r, int64_t row_zero) noexcept nogil:
    """rowsum(A'[r]) - K * a_zp'[r] modulo 2**32 (0 when no column zero point
    asks for row sums)."""
    return <uint32_t>(e.row_sum[r] - e.k * row_zero) if e.row_sum != NULL else 0


cdef inline uint32_t per_row_term(const Epilogue* e, Py_ssize_t r,
                                  uint32_t row_term) noexcept nogil:
    """A per-row epilogue's term for row r: its bias less the one column zero
    point times the row term, modulo 2**32."""
    return ((<uint32_t>e.column_term[r] if e.column_term != NULL else 0)
            - (<uint32_t>e.column_zero[0]) * row_term)


cdef struct RowTermsStore:
    # The arrays a RowTerms points at, for MR rows.
    uint32_t term[MR]
    uint32_t row_zero[MR]
    float multiplier[MR]
    float floor[MR]
    float ceiling[MR]
    int32_t offset[MR]


cdef inline void row_terms_of_rows(RowTerms* terms, RowTermsStore* store, Py_ssize_t row0,
                                   const Epilogue* e, const Gemm* gemm) noexcept nogil:
    """The RowTerms of a micro-tile's rows from row0 (in store; rows past M
    take zero terms and the first row's zero point), and its shortcuts, but
    for column_sum, which belongs to its columns."""
    cdef Py_ssize_t i, r
    cdef int64_t zero
    cdef int32_t out_zero
    cdef double bias, scaled, largest_scaled = 0.0
    cdef bint one_row_zero = True
    for i in range(MR):
        r = row0 + i
        if r >= gemm.m:
            # Zero terms; the first row's zero point, which keeps the
            # shortcut of one (the values land in the unit's scratch).
            store.term[i] = 0
            store.row_zero[i] = store.row_zero[0] if i else 0
            store.multiplier[i] = store.floor[i] = store.ceiling[i] = 0.0
            store.offset[i] = 0
            continue
        zero = e.row_zero[r * e.row_zero_step]
        store.term[i] = per_row_term(e, r, row_term_of(e, r, zero))
        store.row_zero[i] = <uint32_t>zero
        one_row_zero = one_row_zero and store.row_zero[i] == store.row_zero[0]
        store.multiplier[i] = e.multiplier[r]
        out_zero = e.out_zero[r]
        store.floor[i] = <float>(e.low - out_zero)
        store.ceiling[i] = <float>(e.high - out_zero)
        store.offset[i] = out_zero - e.low
        # The row's largest |value * multiplier|: the value, the sum of K
        # products of (A' - row zero) (B' - column zero) plus the bias, is
        # at most K * MAX_PRODUCT + |bias| (as start_unit bounds a unit's
        # columns).
        bias = <double>e.column_term[r] if e.column_term != NULL else 0.0
        scaled = fabs(<double>e.multiplier[r]) * (<double>e.k * MAX_PRODUCT + fabs(bias))
        largest_scaled = scaled if scaled > largest_scaled else largest_scaled
    terms.one_row_zero = one_row_zero
    terms.packs_clamp = packs_clamp_exactly(largest_scaled, e.low, e.high)
    terms.term = store.term
    terms.row_zero = store.row_zero
    terms.multiplier = store.multiplier
    terms.floor = store.floor
    terms.ceiling = store.ceiling
    terms.offset = store.offset
    terms.low = e.low


cdef inline uint8_t* row_terms_at(RowTerms* terms, Py_ssize_t row0, Py_ssize_t col0,
                                  const UnitOutput* unit) noexcept nogil:
    """Points the terms of a micro-tile's rows (row_terms_of_rows) at its
    columns' sums; returns where the tile's bytes go in the unit's (the
    whole tile: rows past M and columns past N land in the unit's scratch,
    never in the output)."""
    terms.column_sum = unit.column_sum + (col0 - unit.col0)
    return unit.bytes + (row0 - unit.row0) * unit.pitch + col0 - unit.col0


cdef inline void requantize_unit_rows(const int32_t* tile, Py_ssize_t row0, Py_ssize_t col0,
                                      const Epilogue* e, const Gemm* gemm,
                                      const UnitOutput* unit) noexcept nogil:
    """A micro-tile's int32 values into the unit's bytes by
    requantize_tile_rows (row_terms_of_rows, row_terms_at)."""
    cdef RowTermsStore store
    cdef RowTerms terms
    row_terms_of_rows(&terms, &store, row0, e, gemm)
    requantize_tile_rows(tile, &terms, row_terms_at(&terms, row0, col0, unit), unit.pitch)


cdef inline void narrow_rows(const int32_t* tile, Py_ssize_t tile_pitch, uint8_t* result,
                             Py_ssize_t pitch, Py_ssize_t row0, Py_ssize_t rows,
                             Py_ssize_t col0, Py_ssize_t cols,
                             const uint32_t* column_term, const uint32_t* column_sum,
                             const Epilogue* e) noexcept nogil:
    cdef Py_ssize_t i, r
    cdef int64_t row_zero
    cdef uint32_t row_term
    for i in range(rows):
        r = row0 + i
        row_zero = e.row_zero[r * e.row_zero_step]
        row_term = row_term_of(e, r, row_zero)
        if e.per_row:
            # One bias, multiplier and output zero point for the row; one
            # column zero point for every column.
            requantize_row_line(
                tile + i * tile_pitch, result + i * pitch, cols,
                per_row_term(e, r, row_term), <uint32_t>row_zero, column_sum, e.multiplier[r],
                e.out_zero[r], e.low, e.high)
        else:
            requantize_line(tile + i * tile_pitch, result + i * pitch, cols, column_term,
                            e.column_zero + col0, column_sum, row_term,
                            <uint32_t>row_zero, e.multiplier + r * e.multiplier_step + col0,
                            e.out_zero + r * e.out_zero_step + col0, e.low, e.high)


cdef inline void raw_rows(const int32_t* tile, Py_ssize_t tile_pitch, Py_ssize_t row0,
                          Py_ssize_t rows, Py_ssize_t col0, Py_ssize_t cols,
                          const uint32_t* column_term, const uint32_t* column_sum,
                          const Epilogue* e, const Gemm* gemm) noexcept nogil:
    """A tile's lines of a raw epilogue's exact values (cols <= NR) straight
    into the output, as int32 or, with to_float, as float32.  (Raw tiles
    take this per tile rather than run_unit's whole rows, so that a last
    one or two rows go with the block above them.)"""
    cdef int32_t values[NR]
    cdef Py_ssize_t i, r
    cdef int64_t row_zero
    cdef uint32_t row_term
    for i in range(rows):
        r = row0 + i
        row_zero = e.row_zero[r * e.row_zero_step]
        row_term = row_term_of(e, r, row_zero)
        if e.per_row:
            exact_row_line(tile + i * tile_pitch, values, cols, per_row_term(e, r, row_term),
                           <uint32_t>row_zero, column_sum)
        else:
            exact_line(tile + i * tile_pitch, values, cols, column_term, e.column_zero + col0,
                       column_sum, row_term, <uint32_t>row_zero)
        if e.to_float:
            store_float_line(values, cols, r, col0, e, gemm)
        else:
            store_int_line(values, cols, r, col0, gemm)


cdef inline void raw_tile(const int32_t* tile, Py_ssize_t row0, Py_ssize_t rows,
                          Py_ssize_t col0, const Epilogue* e, const Gemm* gemm,
                          const UnitOutput* unit) noexcept nogil:
    """raw_rows for a tile of NR columns inside a row-major output, from the
    unit's column vector (the bias less the one zero point of A times the
    column sums): one product per value, the column zero point's, where
    raw_rows takes two, in loops of NR values that the compiler unrolls into
    whole vectors.  (raw_rows' lines were a tenth of a 128 x 768 x 768
    MatMulIntegerToFloat with AVX-VNNI, this a twentieth.)"""
    cdef const uint32_t* column = unit.tile_column + (col0 - unit.col0)
    cdef const int32_t* column_zero = e.column_zero + col0
    cdef int32_t values[NR]
    cdef uint32_t row_term
    cdef Py_ssize_t i, c, r
    cdef int64_t row_zero = e.row_zero[0]
    for i in range(rows):
        r = row0 + i
        row_term = row_term_of(e, r, row_zero)
        for c in range(NR):
            values[c] = <int32_t>(<uint32_t>tile[i * NR + c] + column[c]
                                  - (<uint32_t>column_zero[c]) * row_term)
        if e.to_float:
            store_float_line(values, NR, r, col0, e, gemm)
        else:
            store_int_line(values, NR, r, col0, gemm)


cdef inline void store_int_line(const int32_t* values, Py_ssize_t count, Py_ssize_t r,
                                Py_ssize_t col0, const Gemm* gemm) noexcept nogil:
    cdef int32_t* out = <int32_t*>gemm.out + r * gemm.out_row_stride + col0 * gemm.out_col_stride
    cdef Py_ssize_t c, stride = gemm.out_col_stride
    if stride == 1:
        memcpy(out, values, count * sizeof(int32_t))
        return
    for c in range(count):
        out[c * stride] = values[c]


cdef inline void store_float_line(const int32_t* values, Py_ssize_t count, Py_ssize_t r,
                                  Py_ssize_t col0, const Epilogue* e,
                                  const Gemm* gemm) noexcept nogil:
    """count <= NR values as float32(value) * multiplier, then + bias: two
    roundings, as the rule (and NumPy) has them.  to_float is matmul's
    alone, whose output rows are contiguous (out_col_stride 1).  The line
    is made apart and then copied: written straight into the output, which
    the compiler cannot prove apart from the bias, the addition was
    scalar."""
    cdef const float* multiplier = e.multiplier + r * e.multiplier_step + col0
    cdef const float* bias = e.float_bias + col0 if e.float_bias != NULL else NULL
    cdef float line[NR]
    cdef Py_ssize_t c
    for c in range(count):
        line[c] = (<float>values[c]) * multiplier[c]
    if bias != NULL:
        for c in range(count):
            line[c] = line[c] + bias[c]
    memcpy(<float*>gemm.out + r * gemm.out_row_stride + col0, line, count * sizeof(float))


cdef void requantize_narrow(const int32_t* tile, Py_ssize_t row0, Py_ssize_t rows,
                            Py_ssize_t col0, Py_ssize_t cols, const Epilogue* e,
                            const UnitOutput* unit) noexcept nogil:
    cdef Py_ssize_t at = col0 - unit.col0
    cdef uint8_t* result = unit.bytes + (row0 - unit.row0) * unit.pitch + at
    # A whole tile's lines are NR long: a constant the compiler unrolls the
    # vectorized line for.
    if cols == NR:
        narrow_rows(tile, NR, result, unit.pitch, row0, rows, col0, NR, unit.column_term + at,
                    unit.column_sum + at, e)
    else:
        narrow_rows(tile, NR, result, unit.pitch, row0, rows, col0, cols, unit.column_term + at,
                    unit.column_sum + at, e)


cdef inline int64_t wide_value(const int64_t* tile, Py_ssize_t i, Py_ssize_t c, Py_ssize_t r,
                               Py_ssize_t col, const Epilogue* e) noexcept nogil:
    """The exact value of tile element (i, c), output (r, col)."""
    cdef int64_t row_zero = e.row_zero[r * e.row_zero_step]
    cdef int64_t row_term = e.row_sum[r] - e.k * row_zero if e.row_sum != NULL else 0
    cdef int64_t term = 0
    if e.column_term != NULL:
        term = e.column_term[r if e.per_row else col]
    return (tile[i * NR + c] + term - e.column_zero[0 if e.per_row else col] * row_term
            - row_zero * e.column_sum[col])


cdef void requantize_wide(const int64_t* tile, Py_ssize_t row0, Py_ssize_t rows,
                          Py_ssize_t col0, Py_ssize_t cols, const Epilogue* e,
                          const UnitOutput* unit) noexcept nogil:
    cdef uint8_t* result = unit.bytes + (row0 - unit.row0) * unit.pitch + col0 - unit.col0
    cdef Py_ssize_t i, r, c, col, at
    for i in range(rows):
        r = row0 + i
        for c in range(cols):
            col = col0 + c
            at = r if e.per_row else r * e.multiplier_step + col
            result[i * unit.pitch + c] = <uint8_t>requantize(
                wide_value(tile, i, c, r, col, e), e.multiplier[at],
                e.out_zero[r if e.per_row else r * e.out_zero_step + col], e.low, e.high)


cdef void finish_tile(const int32_t* tile, Py_ssize_t row0, Py_ssize_t col0,
                      const Epilogue* e, const Gemm* gemm, const UnitOutput* unit) noexcept nogil:
    """A micro-tile's sums S (the whole K, as int32: int32 values when the
    epilogue is narrow, else one block's) into the unit's bytes (the output,
    for raw sums)."""
    cdef Py_ssize_t rows = min(<Py_ssize_t>MR, gemm.m - row0)
    cdef Py_ssize_t cols = min(<Py_ssize_t>NR, gemm.n - col0)
    if unit.by_tile:
        requantize_unit_tile(tile, row0, col0, e, gemm, unit)
        return
    if unit.by_rows:
        requantize_unit_rows(tile, row0, col0, e, gemm, unit)
        return
    if unit.raw_tiles and cols == NR:
        raw_tile(tile, row0, rows, col0, e, gemm, unit)
        return
    if e.raw:
        raw_rows(tile, NR, row0, rows, col0, cols, unit.column_term + col0 - unit.col0,
                 unit.column_sum + col0 - unit.col0, e, gemm)
        return
    if e.narrow:
        requantize_narrow(tile, row0, rows, col0, cols, e, unit)
        return
    widen_and_finish(tile, row0, col0, e, gemm, unit)


cdef void widen_and_finish(const int32_t* tile, Py_ssize_t row0, Py_ssize_t col0,
                           const Epilogue* e, const Gemm* gemm,
                           const UnitOutput* unit) noexcept nogil:
    """A micro-tile's int32 sums through the int64 epilogue: out of
    finish_tile's line, whose every call (one per micro-tile) would
    otherwise set up this array's aligned stack frame."""
    cdef int64_t wide[MR * NR]
    cdef Py_ssize_t i
    for i in range(MR * NR):
        wide[i] = tile[i]
    finish_wide(wide, row0, col0, e, gemm, unit)


cdef inline void finish_wide(const int64_t* tile, Py_ssize_t row0, Py_ssize_t col0,
                             const Epilogue* e, const Gemm* gemm,
                             const UnitOutput* unit) noexcept nogil:
    cdef Py_ssize_t rows = min(<Py_ssize_t>MR, gemm.m - row0)
    cdef Py_ssize_t cols = min(<Py_ssize_t>NR, gemm.n - col0)
    requantize_wide(tile, row0, rows, col0, cols, e, unit)


cdef enum:
    # A short block of up to this many rows runs on microkernel_rows; with
    # more, on the full kernel over the zeroed block.  A pass of three to
    # five rows reads as many panel vectors per group as the full kernel for
    # fewer multiply-adds, and where the panel streams from L2 it is no
    # faster (four rows at K = 768: 1.15 micro-tiles' time).
    SHORT_BLOCK_ROWS = 2


cdef inline const uint8_t* direct_rows(const Gemm* gemm, Py_ssize_t row0, Py_ssize_t rows_here,
                                      Py_ssize_t* stride) noexcept nogil:
    """The start of the first of MR rows of A' from row0 on (before the
    steps' offsets), where they lie evenly spaced in A (their spacing into
    stride) and so can be the micro-kernel's block, a step at a time; NULL
    for a short block, whose rows past M are not there to read."""
    cdef Py_ssize_t i, spacing
    if rows_here != MR:
        return NULL
    if gemm.row_offset == NULL:
        stride[0] = gemm.lda
        return gemm.a + row0 * gemm.lda
    spacing = gemm.row_offset[row0 + 1] - gemm.row_offset[row0]
    for i in range(2, MR):
        if gemm.row_offset[row0 + i] - gemm.row_offset[row0 + i - 1] != spacing:
            return NULL
    stride[0] = spacing
    return gemm.a + gemm.row_offset[row0]


cdef inline void microkernel_direct(const Gemm* gemm, const uint8_t* rows, Py_ssize_t stride,
                                    Py_ssize_t k0, Py_ssize_t k1, const int8_t* panel,
                                    int32_t* tile) noexcept nogil:
    """The micro-kernel on values [k0, k1) of K of a block read where it lies
    (direct_rows), a pass per step's run, from the panel's group of k0: the
    runs are whole groups (step_length % 4 == 0, k0 and k1 multiples of 4)."""
    cdef Py_ssize_t step = k0 // gemm.step_length, at = k0, stop
    while at < k1:
        stop = min(k1, (step + 1) * gemm.step_length)
        if at == k0:
            microkernel(rows + gemm.step_offset[step] + at - step * gemm.step_length, stride,
                        (stop - at) // 4, panel, tile)
        else:
            microkernel_add(rows + gemm.step_offset[step] + at - step * gemm.step_length, stride,
                            (stop - at) // 4, panel + (at - k0) // 4 * GROUP_BYTES, tile)
        at = stop
        step = step + 1


cdef void run_unit(const Gemm* product, const Epilogue* common, Gemm* own,
                   Epilogue* own_epilogue, Py_ssize_t index, Py_ssize_t p, Py_ssize_t p_end,
                   Py_ssize_t q, Py_ssize_t q_end, uint8_t* scratch) noexcept nogil:
    """Micro-tiles [p, p_end) x panels [q, q_end) of product `index` of the
    batch, from the full K to the output.

    Per block of K: each micro-tile's rows of A are packed once and swept
    across the unit's panels.  With one block the micro-tiles go straight to
    the epilogue; with more, their sums gather in the scratch (int32 where
    the whole value fits, else int64) and the epilogue runs after the last.
    """
    # `own` and `own_epilogue` are the caller's copies of the two, made once
    # per run of units (a field read back soon after a copy's wide vector
    # stores waits for them instead of forwarding: on short products that
    # wait per unit was a tenth of the time); here only the batch member's
    # fields change.
    cdef Py_ssize_t a_member = product.a_index[index] if product.a_index != NULL else index
    cdef Py_ssize_t b_member = product.b_index[index] if product.b_index != NULL else index
    cdef const Gemm* gemm = own
    cdef const Epilogue* e = own_epilogue
    own.a = product.a + a_member * product.a_batch_stride
    own.b = product.b + b_member * product.b_batch_stride
    own.out = product.out + index * product.out_batch_stride * (4 if common.raw else 1)
    own_epilogue.column_sum = common.column_sum + b_member * common.column_sum_batch_stride
    if product.b_ready != NULL:
        ensure_packed(product, b_member, q)
    if common.row_sum != NULL:
        own_epilogue.row_sum = common.row_sum + a_member * common.row_sum_batch_stride
    if product.a_ready != NULL:
        ensure_row_sums(product, own, a_member, p, p_end)
    cdef int32_t tile[MR * NR]
    cdef uint8_t* block = scratch
    cdef uint8_t* next_block = scratch + MR * BLOCK_ROW_BYTES
    cdef uint8_t* swap
    # The row block packed ahead into next_block (-1: none).  A block packed
    # just before its first pass holds that pass up for its chains of loads,
    # widening and stores; packed during the block before, beside the
    # micro-kernel's first pass over that one, it costs about its
    # instructions alone.  (The packing was 7% of a first convolution with
    # AVX2; packing ahead took 3% off.)
    cdef Py_ssize_t ahead = -1
    cdef int32_t* sums32 = <int32_t*>(scratch + SLOT_A_BYTES)
    cdef int64_t* sums64 = <int64_t*>(scratch + SLOT_A_BYTES)
    cdef Py_ssize_t panel_size = gemm.groups * GROUP_BYTES
    cdef Py_ssize_t k = gemm.steps * gemm.step_length
    cdef Py_ssize_t blocks = ceil_div(gemm.groups, K_BLOCK_GROUPS)
    cdef Py_ssize_t width = q_end - q
    cdef Py_ssize_t ri, qi, g0, g1, i, at, start
    cdef bint narrow = e.narrow
    cdef Py_ssize_t rows_here, columns = min(width * NR, gemm.n - q * NR)
    # Panels from last_whole on (the last, when N is not a multiple of NR)
    # have fewer than NR columns: microkernel_columns.
    cdef Py_ssize_t last_whole = gemm.n // NR
    cdef UnitOutput unit
    # A' as it lies in A serves as the packed block when each step of a row
    # of the block is a run of A of whole groups, a pass per run
    # (microkernel_direct): the copying of each block, once per unit of
    # columns, was a twentieth of a 1 x 1 convolution on 7 x 7 pixels, and a
    # seventh of a 3 x 3 one on 56 x 56 (its filter rows' runs of 3 x 64
    # bytes).
    cdef bint direct = A_BYTES == 1 and gemm.a_flip == 0 and gemm.step_length % 4 == 0
    cdef const uint8_t* a_rows
    cdef const int8_t* panel
    cdef Py_ssize_t a_stride = 0, tail_rows
    cdef bint fuse_tail, split_tail
    cdef int32_t tail_tile[(MR + 2) * NR]
    cdef uint32_t row_term[MR]
    cdef TileTerms terms
    cdef uint8_t* tail_block = scratch + SLOT_A_BYTES
    start_unit(&unit, scratch, p * MR, q * NR, columns, e,
               gemm.out + p * MR * gemm.out_row_stride + q * NR
               if gemm.out_col_stride == 1 else NULL,
               gemm.out_row_stride, p_end * MR <= gemm.m and q_end * NR <= gemm.n)
    cdef bint whole_rows = narrow and not e.raw and not unit.by_tile and not unit.by_rows
    cdef bint by_tile = unit.by_tile
    cdef bint by_rows = unit.by_rows
    cdef RowTermsStore row_store
    cdef RowTerms row_terms
    # Set per row block below (by_tile, by_rows); cleared so that no path
    # reads an unset field.
    memset(&terms, 0, sizeof(terms))
    memset(&row_terms, 0, sizeof(row_terms))
    if blocks <= 1:
        # One block.  With int32 values, each micro-tile's sums go into the
        # rows of the unit's columns (the scratch of the sums across blocks,
        # unused here), and the rows are requantized whole, lines of up to
        # TILE_COLUMNS rather than NR: with a short K (attention's 64) the
        # epilogue is as much work as the products, and its fixed cost per
        # line is spread over eight times the values.
        # A short last block whose unit has others runs beside the block
        # before it, panel by panel, while the panel is in L1: alone, its
        # pass reread each panel from L2 and took two thirds of a full
        # block's time for one row (an image's 49th pixel).  Its packed
        # rows sit in the sums' scratch, which these epilogues leave unused
        # (the other blocks are packed at the scratch's start, or read where
        # they lie).
        # A tail of one or two rows goes with the block above it through
        # microkernel_tail: alone, two rows were bound by the panel's loads
        # and took longer than a whole micro-tile (attention's and BERT's 128
        # rows).  Packed, the two lie as one run in the sums' scratch.  The
        # tile's first and last MR rows are then two whole tiles for the
        # epilogue, which writes the rows between them twice, alike.
        tail_rows = gemm.m - (p_end - 1) * MR
        fuse_tail = not whole_rows and p_end - p >= 2 and tail_rows < MR
        split_tail = fuse_tail and tail_rows <= 2
        if fuse_tail:
            pack_a_block(gemm, (p_end - 1) * MR, tail_rows, 0, k,
                         tail_block + MR * BLOCK_ROW_BYTES if split_tail else tail_block)
        for ri in range(p, p_end - fuse_tail):
            if split_tail and ri == p_end - 2:
                a_rows = (direct_rows(gemm, ri * MR, MR, &a_stride)
                          if direct and gemm.steps == 1 else NULL)
                if a_rows == NULL:
                    pack_a_block(gemm, ri * MR, MR, 0, k, tail_block)
                    a_stride = BLOCK_ROW_BYTES
                    a_rows = tail_block
                else:
                    a_rows = a_rows + gemm.step_offset[0]
                for qi in range(q, q_end):
                    microkernel_tail(a_rows, a_stride, tail_block + MR * BLOCK_ROW_BYTES,
                                     BLOCK_ROW_BYTES, gemm.groups, gemm.b + qi * panel_size,
                                     tail_tile, MR + tail_rows)
                    finish_tile(tail_tile, ri * MR, qi * NR, e, gemm, &unit)
                    finish_tile(tail_tile + tail_rows * NR, ri * MR + tail_rows, qi * NR, e, gemm,
                                &unit)
                continue
            rows_here = min(<Py_ssize_t>MR, gemm.m - ri * MR)
            a_rows = direct_rows(gemm, ri * MR, rows_here, &a_stride) if direct else NULL
            if a_rows == NULL and ahead == ri:
                swap = block
                block = next_block
                next_block = swap
            elif a_rows == NULL:
                pack_a_block(gemm, ri * MR, rows_here, 0, k, block)
            if by_tile:
                # The rows' terms once for all the unit's panels, and each
                # micro-tile straight to the tile epilogue (with the
                # micro-kernel in microkernel_requantize where it can be, else
                # requantize_tile after it): through finish_tile
                # (its checks, the terms built anew) a tile's epilogue was a
                # quarter of attention's time on one AVX-VNNI core, and this
                # with the column terms kept in registers (_epilogue_ymm.pxi)
                # took 5% off it.
                tile_terms_of_rows(&terms, row_term, ri * MR, e, gemm, &unit)
            elif by_rows:
                row_terms_of_rows(&row_terms, &row_store, ri * MR, e, gemm)
            for qi in range(q, q_end):
                panel = gemm.b + qi * panel_size
                if (qi == q and not direct and ri + 1 < p_end - fuse_tail
                        and not (split_tail and ri + 1 == p_end - 2)):
                    pack_a_block(gemm, (ri + 1) * MR, min(<Py_ssize_t>MR, gemm.m - (ri + 1) * MR),
                                 0, k, next_block)
                    ahead = ri + 1
                if a_rows != NULL and qi >= last_whole and gemm.steps == 1:
                    # One run (a 1 x 1 convolution's filter rows) over a
                    # narrow last panel.  Not in microkernel_direct: there
                    # the call made the 3 x 3 convolutions over 56 x 56
                    # pixels, whose panels are all whole, 7% slower.
                    microkernel_columns(a_rows + gemm.step_offset[0], a_stride, gemm.groups,
                                        panel, tile, gemm.n - qi * NR)
                elif (a_rows != NULL and by_tile and gemm.steps == 1 and qi < last_whole
                      and not (fuse_tail and ri == p_end - 2)):
                    # One run read where it lies (a product's rows, a 1 x 1
                    # convolution's pixels), straight to the epilogue as a
                    # packed block below: on one AVX-VNNI core attention's
                    # products, whose rows are all read so, spent 27% of
                    # their time in requantize_tile's separate calls.
                    microkernel_requantize(a_rows + gemm.step_offset[0], a_stride, gemm.groups,
                                           panel, &terms,
                                           tile_terms_at(&terms, ri * MR, qi * NR, &unit),
                                           unit.pitch)
                    continue
                elif (by_rows and qi < last_whole and not (fuse_tail and ri == p_end - 2)
                      and (gemm.steps == 1 if a_rows != NULL else rows_here > SHORT_BLOCK_ROWS)):
                    # The per-row epilogue (a 1 x 1 convolution as filter x
                    # image) the same way, its rows' terms built once per
                    # block of rows: through finish_tile, building them per
                    # micro-tile and requantizing a stored tile, it was 7.5%
                    # of r50_1x1_28 on one AVX-512 VNNI core.
                    microkernel_requantize_rows(
                        a_rows + gemm.step_offset[0] if a_rows != NULL else block,
                        a_stride if a_rows != NULL else BLOCK_ROW_BYTES, gemm.groups, panel,
                        &row_terms, row_terms_at(&row_terms, ri * MR, qi * NR, &unit),
                        unit.pitch)
                    continue
                elif a_rows != NULL:
                    microkernel_direct(gemm, a_rows, a_stride, 0, k, panel, tile)
                elif (by_tile and rows_here > SHORT_BLOCK_ROWS and qi < last_whole
                      and not (fuse_tail and ri == p_end - 2)):
                    # The sums straight from the micro-kernel's registers to
                    # the epilogue (microkernel_requantize): with AVX2 on
                    # one core this took 5% off attention's products and 4%
                    # off a first convolution, against the tile stored,
                    # a call, and the tile and the terms loaded back.
                    microkernel_requantize(block, BLOCK_ROW_BYTES, gemm.groups, panel, &terms,
                                           tile_terms_at(&terms, ri * MR, qi * NR, &unit),
                                           unit.pitch)
                    continue
                elif rows_here > SHORT_BLOCK_ROWS and qi < last_whole:
                    microkernel(block, BLOCK_ROW_BYTES, gemm.groups, panel, tile)
                elif rows_here > SHORT_BLOCK_ROWS:
                    microkernel_columns(block, BLOCK_ROW_BYTES, gemm.groups, panel, tile,
                                        gemm.n - qi * NR)
                else:
                    microkernel_rows(block, BLOCK_ROW_BYTES, gemm.groups, panel, tile, rows_here)
                if fuse_tail and ri == p_end - 2:
                    finish_tile(tile, ri * MR, qi * NR, e, gemm, &unit)
                    microkernel_rows(tail_block, BLOCK_ROW_BYTES, gemm.groups, panel, tile,
                                     tail_rows)
                    finish_tile(tile, (p_end - 1) * MR, qi * NR, e, gemm, &unit)
                    continue
                if by_tile:
                    requantize_unit_tile_at(tile, &terms, ri * MR, qi * NR, &unit)
                    continue
                if not whole_rows:
                    finish_tile(tile, ri * MR, qi * NR, e, gemm, &unit)
                    continue
                for i in range(MR):
                    memcpy(sums32 + i * TILE_COLUMNS + (qi - q) * NR, tile + i * NR,
                           NR * sizeof(int32_t))
            if whole_rows:
                narrow_rows(sums32, TILE_COLUMNS,
                            unit.bytes + (ri * MR - unit.row0) * unit.pitch, unit.pitch, ri * MR,
                            rows_here, unit.col0, columns, unit.column_term, unit.column_sum, e)
        finish_unit(&unit, p_end, q_end, e, gemm)
        return
    g0 = 0
    while g0 < gemm.groups:
        g1 = min(g0 + K_BLOCK_GROUPS, gemm.groups)
        ahead = -1
        for ri in range(p, p_end):
            rows_here = min(<Py_ssize_t>MR, gemm.m - ri * MR)
            a_rows = direct_rows(gemm, ri * MR, rows_here, &a_stride) if direct else NULL
            if a_rows == NULL and ahead == ri:
                swap = block
                block = next_block
                next_block = swap
            elif a_rows == NULL:
                pack_a_block(gemm, ri * MR, rows_here, 4 * g0, min(k, 4 * g1), block)
            for qi in range(q, q_end):
                if qi == q and not direct and ri + 1 < p_end:
                    pack_a_block(gemm, (ri + 1) * MR, min(<Py_ssize_t>MR, gemm.m - (ri + 1) * MR),
                                 4 * g0, min(k, 4 * g1), next_block)
                    ahead = ri + 1
                if a_rows != NULL:
                    microkernel_direct(gemm, a_rows, a_stride, 4 * g0, 4 * g1,
                                       gemm.b + qi * panel_size + g0 * GROUP_BYTES, tile)
                elif rows_here > SHORT_BLOCK_ROWS and qi < last_whole:
                    microkernel(block, BLOCK_ROW_BYTES, g1 - g0,
                                gemm.b + qi * panel_size + g0 * GROUP_BYTES, tile)
                elif rows_here > SHORT_BLOCK_ROWS:
                    microkernel_columns(block, BLOCK_ROW_BYTES, g1 - g0,
                                        gemm.b + qi * panel_size + g0 * GROUP_BYTES, tile,
                                        gemm.n - qi * NR)
                else:
                    microkernel_rows(block, BLOCK_ROW_BYTES, g1 - g0,
                                     gemm.b + qi * panel_size + g0 * GROUP_BYTES, tile,
                                     rows_here)
                start = ((ri - p) * width + qi - q) * MR * NR
                if whole_rows:
                    # The row block's sums in rows of the unit's columns, as
                    # one block's are, for narrow_rows' lines of up to
                    # TILE_COLUMNS (a line per micro-tile row, NR long, was
                    # a twentieth of a portable 1 x 1 convolution of K =
                    # 512, two blocks).
                    start = (ri - p) * MR * TILE_COLUMNS + (qi - q) * NR
                    for i in range(MR):
                        add_line(sums32 + start + i * TILE_COLUMNS, tile + i * NR, g0 == 0)
                elif g0 == 0 and narrow:
                    memcpy(sums32 + start, tile, sizeof(tile))
                elif narrow:
                    for i in range(MR * NR):
                        sums32[start + i] += tile[i]
                elif g0 == 0:
                    for i in range(MR * NR):
                        sums64[start + i] = tile[i]
                else:
                    for i in range(MR * NR):
                        sums64[start + i] += tile[i]
        g0 = g1
    for ri in range(p, p_end):
        if whole_rows:
            narrow_rows(sums32 + (ri - p) * MR * TILE_COLUMNS, TILE_COLUMNS,
                        unit.bytes + (ri * MR - unit.row0) * unit.pitch, unit.pitch, ri * MR,
                        min(<Py_ssize_t>MR, gemm.m - ri * MR), unit.col0, columns,
                        unit.column_term, unit.column_sum, e)
            continue
        for qi in range(q, q_end):
            start = ((ri - p) * width + qi - q) * MR * NR
            if narrow:
                finish_tile(sums32 + start, ri * MR, qi * NR, e, gemm, &unit)
            else:
                finish_wide(sums64 + start, ri * MR, qi * NR, e, gemm, &unit)
    finish_unit(&unit, p_end, q_end, e, gemm)


cdef inline void add_line(int32_t* sums, const int32_t* line, bint first) noexcept nogil:
    """sums[:NR] <- line[:NR] (first) or sums + line, modulo 2**32."""
    cdef Py_ssize_t c
    if first:
        memcpy(sums, line, NR * sizeof(int32_t))
        return
    for c in range(NR):
        sums[c] = <int32_t>(<uint32_t>sums[c] + <uint32_t>line[c])


cdef inline void finish_unit(const UnitOutput* unit, Py_ssize_t p_end, Py_ssize_t q_end,
                             const Epilogue* e, const Gemm* gemm) noexcept nogil:
    """The unit's bytes into the output (raw sums are there already)."""
    if e.raw or unit.in_place:
        return
    store_unit(unit.bytes, min(p_end * MR, gemm.m) - unit.row0,
               min(q_end * NR, gemm.n) - unit.col0,
               gemm.out + unit.row0 * gemm.out_row_stride + unit.col0 * gemm.out_col_stride,
               gemm.out_row_stride, gemm.out_col_stride)


cdef void run_gemm(const Gemm* gemm, const Epilogue* e, int n_threads) noexcept nogil:
    """Every unit of every product of the batch, in parallel; each thread
    packs into its own slot of the scratch.

    The pool hands out contiguous runs of units, which run down the rows of
    a column of units (and then through the batch): a thread keeps reusing
    the same B' panels, which stay in its own L2.
    """
    cdef Py_ssize_t m_panels = ceil_div(gemm.m, MR)
    cdef Py_ssize_t n_panels = ceil_div(gemm.n, NR)
    cdef Py_ssize_t tiles_m = ceil_div(m_panels, TILE_M_PANELS)
    if (m_panels > TILE_M_PANELS and m_panels % TILE_M_PANELS == 1 and gemm.m % MR
            and gemm.groups <= K_BLOCK_GROUPS):
        # A lone short last block joins the unit above it (whose panels it
        # then reads from L1, run_unit); a whole block or several blocks of
        # K keep a unit of their own.
        tiles_m -= 1
    cdef Py_ssize_t tile_n_panels = TILE_COLUMNS // NR
    cdef Py_ssize_t tiles = tiles_m * ceil_div(n_panels, tile_n_panels)
    cdef TileJobs jobs
    jobs.gemm = gemm
    jobs.e = e
    jobs.tiles = tiles
    jobs.tiles_m = tiles_m
    jobs.m_panels = m_panels
    jobs.n_panels = n_panels
    jobs.tile_n_panels = tile_n_panels
    # A column of units shares its B' panels: where whole columns share out
    # evenly enough (the busiest thread at most 1/16 over an even share), a
    # chunk takes whole columns, so that no column is loaded into two
    # threads' caches; else single units (7 columns on 2 threads would
    # leave one thread 4 of them, 14% over).
    cdef Py_ssize_t columns = tiles * gemm.batch // tiles_m
    cdef Py_ssize_t busiest = ceil_div(columns, n_threads) * n_threads
    run_range(run_tiles, &jobs, tiles * gemm.batch,
              tiles_m if 16 * busiest <= 17 * columns else 1, n_threads)


cdef struct TileJobs:
    const Gemm* gemm
    const Epilogue* e
    Py_ssize_t tiles
    Py_ssize_t tiles_m
    Py_ssize_t m_panels
    Py_ssize_t n_panels
    Py_ssize_t tile_n_panels


cdef void run_tiles(void* context, Py_ssize_t start, Py_ssize_t stop, int slot) noexcept nogil:
    """Units [start, stop): unit job % tiles of product job // tiles."""
    cdef const TileJobs* t = <const TileJobs*>context
    cdef Gemm own = t.gemm[0]
    cdef Epilogue own_epilogue = t.e[0]
    cdef Py_ssize_t job, tile, p, q
    for job in range(start, stop):
        tile = job % t.tiles
        p = (tile % t.tiles_m) * TILE_M_PANELS
        q = (tile // t.tiles_m) * t.tile_n_panels
        run_unit(t.gemm, t.e, &own, &own_epilogue, job // t.tiles, p,
                 t.m_panels if tile % t.tiles_m == t.tiles_m - 1 else p + TILE_M_PANELS,
                 q, min(q + t.tile_n_panels, t.n_panels),
                 t.gemm.scratch + slot * SLOT_BYTES)


cdef extern from *:
    # sum of p[j] ^ flip over count bytes: psadbw against zero sums eight
    # bytes into a 64-bit lane, 32 (AVX2) or 16 (SSE2) bytes per step.  Row
    # sums are summed in the units now (ensure_row_sums), once per band of
    # rows; as a byte loop they were a fifth of attention's product.
    """
    #include <stddef.h>
    #include <stdint.h>
    #if defined(__AVX2__)
    #include <immintrin.h>
    #elif defined(__SSE2__)
    #include <emmintrin.h>
    #endif
    static inline int64_t qops_sum_bytes(const uint8_t* p, ptrdiff_t count, uint8_t flip) {
        int64_t total = 0;
        ptrdiff_t j = 0;
    #if defined(__AVX2__)
        __m256i flips = _mm256_set1_epi8((char)flip), zero = _mm256_setzero_si256();
        __m256i acc = zero;
        int64_t lanes[4];
        for (; j + 32 <= count; j += 32)
            acc = _mm256_add_epi64(acc, _mm256_sad_epu8(_mm256_xor_si256(
                _mm256_loadu_si256((const __m256i*)(p + j)), flips), zero));
        _mm256_storeu_si256((__m256i*)lanes, acc);
        total = lanes[0] + lanes[1] + lanes[2] + lanes[3];
    #elif defined(__SSE2__)
        __m128i flips = _mm_set1_epi8((char)flip), zero = _mm_setzero_si128(), acc = zero;
        int64_t lanes[2];
        for (; j + 16 <= count; j += 16)
            acc = _mm_add_epi64(acc, _mm_sad_epu8(_mm_xor_si128(
                _mm_loadu_si128((const __m128i*)(p + j)), flips), zero));
        _mm_storeu_si128((__m128i*)lanes, acc);
        total = lanes[0] + lanes[1];
    #endif
        for (; j < count; j++)
            total += p[j] ^ flip;
        return total;
    }
    """
    int64_t sum_values "qops_sum_bytes"(const uint8_t* p, Py_ssize_t count,
                                        uint8_t flip) noexcept nogil


cdef struct RowSums:
    const Gemm* gemm
    int64_t* sums


cdef void sum_rows(const Gemm* gemm, Py_ssize_t first, Py_ssize_t stop,
                   int64_t* sums) noexcept nogil:
    """sums[r] <- sum_k A'[r, k] for rows [first, stop) of gemm's A."""
    cdef Py_ssize_t r, s
    cdef const uint8_t* start
    cdef int64_t total
    for r in range(first, stop):
        start = row_start(gemm, r)
        total = 0
        for s in range(gemm.steps):
            total += sum_values(start + gemm.step_offset[s], gemm.step_length, gemm.a_flip)
        sums[r] = total


cdef void row_sums_range(void* context, Py_ssize_t first, Py_ssize_t stop, int slot) noexcept nogil:
    cdef const RowSums* job = <const RowSums*>context
    sum_rows(job.gemm, first, stop, job.sums)


cdef void row_sums(const Gemm* gemm, int64_t* sums, int n_threads) noexcept nogil:
    """sums[r] <- sum_k A'[r, k]."""
    cdef RowSums job
    job.gemm = gemm
    job.sums = sums
    run_range(row_sums_range, &job, gemm.m, 64, n_threads)


cdef inline bint fits_int32(int64_t k, int64_t largest_term) noexcept nogil:
    """Whether K products of 8-bit differences plus a term of magnitude
    `largest_term` stay inside int32."""
    return k <= (INT32_LIMIT - largest_term) // MAX_PRODUCT


cdef int64_t largest_magnitude(const int64_t[::1] values) noexcept:
    """max |value| (0 for none), saturated at INT64_MAX: a bias's largest
    term, in a loop (NumPy's abs and max on a vector of 2048 took 5 us of
    a 1 x 1 convolution's serial start)."""
    cdef Py_ssize_t i
    cdef int64_t largest = 0, value
    for i in range(values.shape[0]):
        value = values[i]
        if value < -INT64_MAX:
            return INT64_MAX
        value = -value if value < 0 else value
        largest = value if value > largest else largest
    return largest


def depth_fits_int32(Py_ssize_t depth):
    """Whether every sum of ``depth`` products of 8-bit differences fits
    int32 (so the raw epilogue can write it as one)."""
    return fits_int32(depth, 0)


# -- matrix multiply ------------------------------------------------------------------

def tile_shape():
    """(MR, NR): the rows and columns of this variant's micro-tile."""
    return MR, NR


def matrix_row_sums(const uint8_t[:, :, ::1] a, bint flip, int n_threads):
    """sum_k A'[i, r, k] as int64 (batches x M), A' = A ^ 0x80 when flip:
    the row sums matmul needs for a zero point of B, kept by a caller
    whose A is constant."""
    cdef Py_ssize_t batches = a.shape[0], m = a.shape[1], k = a.shape[2]
    cdef Py_ssize_t step_offset[1]
    cdef Gemm gemm
    sums = np.zeros((batches, m), np.int64)
    cdef int64_t[:, ::1] view = sums
    if batches == 0 or m == 0 or k == 0:
        return sums
    step_offset[0] = 0
    gemm.a = &a[0, 0, 0]
    gemm.a_batch_stride = m * k
    gemm.row_offset = NULL
    gemm.a_slack = 0
    gemm.lda = k
    gemm.m = m
    gemm.a_flip = 0x80 if flip else 0
    gemm.step_offset = step_offset
    gemm.steps = 1
    gemm.step_length = k
    with nogil:
        batch_row_sums(&gemm, batches, &view[0, 0], max(n_threads, 1))
    return sums


cdef void batch_row_sums(Gemm* gemm, Py_ssize_t batches, int64_t* sums,
                         int n_threads) noexcept nogil:
    """sums[i * M + r] <- sum_k A'[r, k] of A matrix i (a_batch_stride apart)."""
    cdef const uint8_t* a = gemm.a
    cdef Py_ssize_t index
    for index in range(batches):
        gemm.a = a + index * gemm.a_batch_stride
        row_sums(gemm, sums + index * gemm.m, n_threads)
    gemm.a = a


def pack_b_batches(const uint8_t[:, :, ::1] b, bint flip, int n_threads):
    """Pack every K x N matrix of b; returns (packed, colsum), one row per
    matrix, arrays of their own (a compiled operator's constant B)."""
    cdef Py_ssize_t batches = b.shape[0], k = b.shape[1], n = b.shape[2], index
    cdef Py_ssize_t size = max(packed_b_bytes(k, n), 1)
    cdef Py_ssize_t padded = max(ceil_div(n, NR) * NR, 1)
    # Packing writes every byte of every panel and every column sum.
    packed = (np.empty if k and n else np.zeros)((batches, size), dtype=np.int8)
    colsum = (np.empty if k and n else np.zeros)((batches, padded), dtype=np.int64)
    cdef int8_t[:, ::1] packed_view = packed
    cdef int64_t[:, ::1] colsum_view = colsum
    cdef PackBatches job
    if k and n:
        job.b = &b[0, 0, 0]
        job.k = k
        job.n = n
        job.flip = 0x80 if flip else 0
        job.packed = &packed_view[0, 0]
        job.packed_stride = packed_view.shape[1]
        job.colsum = &colsum_view[0, 0]
        job.colsum_stride = colsum_view.shape[1]
        with nogil:
            if batches >= n_threads > 1:
                # Enough matrices to keep every thread busy with whole ones.
                run_range(pack_batches, &job, batches, 1, n_threads)
            else:
                for index in range(batches):
                    pack_b_matrix(job.b + index * k * n, n, k, n, job.flip,
                                  job.packed + index * job.packed_stride,
                                  job.colsum + index * job.colsum_stride, n_threads)
    return packed, colsum


cdef struct PackBatches:
    const uint8_t* b
    Py_ssize_t k
    Py_ssize_t n
    uint8_t flip
    int8_t* packed
    Py_ssize_t packed_stride
    int64_t* colsum
    Py_ssize_t colsum_stride


cdef void pack_batches(void* context, Py_ssize_t start, Py_ssize_t stop,
                       int slot) noexcept nogil:
    cdef const PackBatches* job = <const PackBatches*>context
    cdef Py_ssize_t index
    for index in range(start, stop):
        pack_b_matrix(job.b + index * job.k * job.n, job.n, job.k, job.n, job.flip,
                      job.packed + index * job.packed_stride,
                      job.colsum + index * job.colsum_stride, 1)


def matmul(const uint8_t[:, :, ::1] a, bint a_flip, const int64_t[::1] a_index,
           const int8_t[:, ::1] b_packed, const int64_t[:, ::1] b_colsum,
           const int64_t[::1] b_index, Py_ssize_t n,
           const int32_t[::1] row_zero, const int32_t[::1] col_zero,
           const float[:, ::1] multiplier, const int32_t[:, ::1] out_zero,
           uint8_t[:, :, ::1] out, int32_t low, int32_t high, int n_threads, bint raw=False,
           bint per_row=False, bias=None, a_row_sums=None, b_source=None,
           bint b_source_flip=False, bint to_float=False, float_bias=None):
    """out[i] <- requantized a[a_index[i]] @ b[b_index[i]] for every output matrix i.

    B comes packed (b_packed and b_colsum, from pack_b_batches: a compiled
    operator's constant), or as it is (b_source: batches x K x N bytes, with
    b_packed and b_colsum None), to be packed during the run, column tile by
    column tile, by the threads that multiply it (b_source_flip: uint8 B, read
    as B' = B ^ 0x80, as pack_b_batches' flip).  A is read in place (a_flip:
    int8, read as A' = A ^ 0x80).  multiplier and out_zero are (1 or M) x N
    tables.  With raw, out holds the exact int32 products (M x 4N bytes per
    matrix) and multiplier, out_zero, low and high are not read; with
    to_float as well, it holds float32(product) * multiplier (+ float_bias,
    float32, N, when given) as float32 (MATRIX_MULTIPLY_INTEGER_TO_FLOAT).

    per_row: the requantization belongs to the rows (a pointwise convolution
    as filter x image, whose rows are output channels): multiplier and
    out_zero are M x 1, bias (int64, M, or None) is added to each row, and
    col_zero holds one zero point for every column.  a_row_sums (int64,
    a_batches x M) are the sums of A' per row when the caller keeps them (a
    constant A); else they are computed when a column zero point needs them.
    """
    cdef Gemm gemm
    cdef Epilogue e
    cdef Py_ssize_t step_offset[1]
    cdef const uint8_t[:, :, ::1] source
    cdef Py_ssize_t k = a.shape[2], b_batches, b_stride, colsum_stride
    cdef const int8_t* b_start
    cdef const int64_t* colsum_start
    cdef int32_t* ready = NULL
    if out.shape[0] == 0 or a.shape[1] == 0 or n == 0:
        return
    n_threads = max(n_threads, 1)
    keep = []
    during = b_source is not None
    if during:
        source = b_source
        if source.shape[1] != k or source.shape[2] != n:
            raise ValueError("matmul: b_source is not K x N")
        if k == 0:
            b_packed, b_colsum = pack_b_batches(source, b_source_flip, 1)  # zeros
            during = False
    if during:
        # Packed during the run, into this thread's workspace.
        b_batches = source.shape[0]
        b_stride = packed_b_bytes(k, n)
        colsum_stride = ceil_div(n, NR) * NR
        b_start = <int8_t*>workspace_bytes("packed b", b_batches * b_stride, keep)
        colsum_start = <int64_t*>workspace_bytes(
            "column sums", b_batches * colsum_stride * sizeof(int64_t), keep)
        ready = <int32_t*>workspace_bytes(
            "b column tiles", b_batches * ceil_div(n, TILE_COLUMNS) * sizeof(int32_t), keep)
    else:
        if (b_packed is None or b_colsum is None or b_colsum.shape[0] != b_packed.shape[0]
                or b_packed.shape[1] < packed_b_bytes(k, n) or b_colsum.shape[1] < n):
            raise ValueError("matmul: arguments do not cover the output")
        b_batches = b_packed.shape[0]
        b_stride = b_packed.shape[1]
        colsum_stride = b_colsum.shape[1]
        b_start = &b_packed[0, 0]
        colsum_start = &b_colsum[0, 0]
    check_matmul(a, a_index, b_batches, b_index, n, row_zero, col_zero, multiplier, out_zero,
                 out, raw, per_row, bias, a_row_sums, to_float, float_bias)
    cdef const float[::1] float_bias_view
    e.to_float = to_float
    e.float_bias = NULL
    if float_bias is not None:
        float_bias_view = float_bias
        e.float_bias = &float_bias_view[0]
    buffers = setup_matmul(&gemm, &e, step_offset, a, a_flip, a_index, b_start, b_stride,
                           colsum_start, colsum_stride, b_index, n, row_zero, col_zero,
                           multiplier, out_zero, out, low, high, raw, n_threads, per_row, bias,
                           a_row_sums, keep)
    gemm.b_ready = NULL
    if during:
        memset(ready, 0, b_batches * ceil_div(n, TILE_COLUMNS) * sizeof(int32_t))
        # The run's own workspace, written by ensure_packed.
        gemm.b_source = &source[0, 0, 0]
        gemm.b_source_flip = 0x80 if b_source_flip else 0
        gemm.b_panels = <int8_t*>b_start
        gemm.b_sums = <int64_t*>colsum_start
        gemm.b_sums_stride = colsum_stride
        gemm.b_ready = ready
        gemm.b_column_tiles = ceil_div(n, TILE_COLUMNS)
    with nogil:
        run_matmul(&gemm, &e, a.shape[0], n_threads)
    del buffers, keep  # what the run read through gemm and e


cdef int check_matmul(const uint8_t[:, :, ::1] a, const int64_t[::1] a_index,
                      Py_ssize_t b_batches, const int64_t[::1] b_index, Py_ssize_t n,
                      const int32_t[::1] row_zero, const int32_t[::1] col_zero,
                      const float[:, ::1] multiplier, const int32_t[:, ::1] out_zero,
                      uint8_t[:, :, ::1] out, bint raw, bint per_row, bias,
                      a_row_sums, bint to_float, float_bias) except -1:
    """The glue's contract, checked once: indices and vectors cover the
    output (ValueError otherwise: the run trusts it for every access)."""
    cdef Py_ssize_t a_batches = a.shape[0], m = a.shape[1], k = a.shape[2]
    cdef Py_ssize_t batches = out.shape[0], index
    cdef Py_ssize_t columns = 1 if per_row else n
    if (a_index.shape[0] != batches or b_index.shape[0] != batches
            or out.shape[1] != m or out.shape[2] != n * (4 if raw else 1)
            or row_zero.shape[0] < m or col_zero.shape[0] < columns
            or not (multiplier.shape[0] == m or (multiplier.shape[0] == 1 and not per_row))
            or multiplier.shape[1] < columns
            or not (out_zero.shape[0] == m or (out_zero.shape[0] == 1 and not per_row))
            or out_zero.shape[1] < columns
            or (bias is not None and (not per_row or np.shape(bias) != (m,)))
            or (a_row_sums is not None and np.shape(a_row_sums) != (a_batches, m))
            or (to_float and (not raw or per_row))
            or (float_bias is not None and (not to_float or np.shape(float_bias) != (n,)))):
        raise ValueError("matmul: arguments do not cover the output")
    for index in range(batches):
        if not (0 <= a_index[index] < a_batches and 0 <= b_index[index] < b_batches):
            raise ValueError("matmul: a batch index is out of range")
    if raw and not fits_int32(k, 0):
        raise ValueError("matmul: raw products need K that keeps every value inside int32")
    return 0


cdef object setup_matmul(Gemm* gemm, Epilogue* e, Py_ssize_t* step_offset,
                         const uint8_t[:, :, ::1] a, bint a_flip, const int64_t[::1] a_index,
                         const int8_t* b_start, Py_ssize_t b_stride,
                         const int64_t* colsum_start, Py_ssize_t colsum_stride,
                         const int64_t[::1] b_index, Py_ssize_t n,
                         const int32_t[::1] row_zero, const int32_t[::1] col_zero,
                         const float[:, ::1] multiplier, const int32_t[:, ::1] out_zero,
                         uint8_t[:, :, ::1] out, int32_t low, int32_t high, bint raw,
                         int n_threads, bint per_row, bias, a_row_sums, list keep):
    """The row-sum buffer, the scratch and the GEMM and epilogue
    descriptions of a checked product; returns the arrays they point into
    (the caller keeps them, and `keep`, until the run ends)."""
    cdef Py_ssize_t a_batches = a.shape[0], m = a.shape[1], k = a.shape[2], j
    cdef bint needs_row_sums = False
    cdef int64_t largest_bias = 0
    for j in range(1 if per_row else n):
        needs_row_sums = needs_row_sums or col_zero[j] != 0
    source_array = a
    if k == 0:
        # No products: S and every sum are 0; any in-bounds row will do.
        source_array = np.zeros((1, 1, 4), np.uint8)
    cdef const uint8_t[:, :, ::1] source = source_array
    # Row sums given by the caller are read, never written: the run fills
    # only a buffer of its own (e.row_sum then points at that).
    given = a_row_sums is not None and needs_row_sums and k
    sums = None
    cdef const int64_t[:, ::1] sums_view
    cdef const int64_t[::1] term_view
    e.row_sum = NULL
    e.row_sums_given = given
    if given:
        sums = np.ascontiguousarray(a_row_sums, np.int64)
        sums_view = sums
        e.row_sum = &sums_view[0, 0]
    gemm.a_ready = NULL
    if needs_row_sums and k and not given:
        # Each band of rows summed by the first unit that needs it
        # (ensure_row_sums), its state zeroed by run_matmul.
        gemm.a_sums = <int64_t*>workspace_bytes("row sums", a_batches * m * sizeof(int64_t), keep)
        gemm.a_sums_stride = m
        gemm.a_row_bands = row_bands(m)
        gemm.a_ready = <int32_t*>workspace_bytes(
            "row bands", a_batches * gemm.a_row_bands * sizeof(int32_t), keep)
        e.row_sum = gemm.a_sums
    terms = None
    e.column_term = NULL
    if bias is not None:
        terms = np.ascontiguousarray(bias, np.int64)
        largest_bias = largest_magnitude(terms)
        term_view = terms
        e.column_term = &term_view[0]
    step_offset[0] = 0
    gemm.a = &source[0, 0, 0]
    gemm.row_offset = NULL
    gemm.a_slack = 0
    gemm.lda = k
    gemm.m = m
    gemm.a_flip = 0x80 if a_flip else 0
    gemm.step_offset = step_offset
    gemm.steps = 1
    gemm.step_length = max(k, 1)
    gemm.groups = ceil_div(k, 4)
    gemm.b = b_start
    gemm.n = n
    gemm.out = &out[0, 0, 0]
    gemm.out_row_stride = n
    gemm.out_col_stride = 1
    gemm.batch = out.shape[0]
    gemm.a_index = &a_index[0]
    gemm.b_index = &b_index[0]
    gemm.a_batch_stride = m * k
    gemm.b_batch_stride = b_stride
    gemm.out_batch_stride = m * n
    gemm.scratch = workspace_bytes("scratch", scratch_bytes(n_threads), keep)
    e.row_sum_batch_stride = m
    e.column_sum_batch_stride = colsum_stride
    e.column_zero = &col_zero[0]
    e.column_sum = colsum_start
    e.row_zero = &row_zero[0]
    # One zero point for every row (per-tensor A, the usual case) lets the
    # epilogue fold it into the unit's column vectors (tile_epilogue).
    e.row_zero_step = 0
    for j in range(m):
        if row_zero[j] != row_zero[0]:
            e.row_zero_step = 1
            break
    e.k = k
    e.multiplier = &multiplier[0, 0]
    e.multiplier_step = multiplier.shape[1] if multiplier.shape[0] > 1 else 0
    e.out_zero = &out_zero[0, 0]
    e.out_zero_step = out_zero.shape[1] if out_zero.shape[0] > 1 else 0
    e.low = low
    e.high = high
    e.per_row = per_row
    e.narrow = fits_int32(k, largest_bias)
    e.raw = raw
    if raw and not e.narrow:
        raise ValueError("matmul: raw products need K that keeps every value inside int32")
    return source_array, sums, terms


cdef void run_matmul(Gemm* gemm, Epilogue* e, Py_ssize_t a_batches,
                     int n_threads) noexcept nogil:
    """Every product of the batch as one job of units (which sum the rows of
    A as they need them, when a column zero point asks for them)."""
    if gemm.a_ready != NULL:
        memset(gemm.a_ready, 0, a_batches * gemm.a_row_bands * sizeof(int32_t))
    run_gemm(gemm, e, n_threads)


# -- convolution -----------------------------------------------------------------------

def pack_filter(const uint8_t[:, ::1] filter, Py_ssize_t group_count,
                const Py_ssize_t[::1] source, bint flip, int n_threads, bint scratch=False):
    """Each group's filter as packed B, straight from its (out_channels, taps)
    rows: row k of B is tap source[k] of every output channel of the group
    (K rows past the last whole group of 4 are 0).  Returns (packed,
    colsum), one row per group; with ``scratch``, packed lies in this
    thread's workspace (a plain call's, used before its next request): a
    fresh array's pages faulted on their first stores, a third of the
    packing's time."""
    cdef Py_ssize_t out_channels = filter.shape[0], taps = filter.shape[1]
    cdef Py_ssize_t k = source.shape[0], groups = ceil_div(k, 4)
    cdef Py_ssize_t outputs = out_channels // group_count if group_count > 0 else 0
    cdef Py_ssize_t panels = ceil_div(outputs, NR)
    cdef Py_ssize_t kk
    if group_count < 1 or out_channels % group_count:
        raise ValueError("pack_filter: the groups do not divide the output channels")
    for kk in range(k):
        if not 0 <= source[kk] < taps:
            raise ValueError("pack_filter: a tap is outside the filter's rows")
    cdef Py_ssize_t packed_bytes = max(packed_b_bytes(k, outputs), 1)
    # Packing writes every byte of every panel (zeros past the output
    # channels and past K), and the column sums of the channels alone.
    if scratch and outputs and k:
        packed = workspace("filter packed", group_count * packed_bytes, np.int8).reshape(
            group_count, packed_bytes)
    else:
        packed = (np.empty if outputs and k else np.zeros)((group_count, packed_bytes), np.int8)
    colsum = np.zeros((group_count, max(panels * NR, 1)), np.int64)
    cdef int8_t[:, ::1] packed_view = packed
    cdef int64_t[:, ::1] colsum_view = colsum
    cdef PackFilter job
    cdef list keep = []
    cdef int threads = min(max(n_threads, 1), MAX_WORKERS + 1)
    if outputs and k:
        job.filter = &filter[0, 0]
        job.filter_end = job.filter + out_channels * taps
        job.columns_stride = round_up(taps * TRANSPOSED_WIDTH, 64)
        job.columns = workspace_bytes("filter columns", threads * job.columns_stride, keep)
        job.taps = taps
        job.source = &source[0]
        job.k = k
        job.flip = 0x80 if flip else 0
        job.outputs = outputs
        job.groups = groups
        job.packed = &packed_view[0, 0]
        job.packed_stride = packed_view.shape[1]
        job.colsum = &colsum_view[0, 0]
        job.colsum_stride = colsum_view.shape[1]
        with nogil:
            run_range(pack_filter_units, &job,
                      group_count * ceil_div(outputs, TRANSPOSED_WIDTH), 1, threads)
    return packed, colsum


cdef struct PackFilter:
    const uint8_t* filter       # out_channels rows of `taps` bytes
    const uint8_t* filter_end
    Py_ssize_t taps
    const Py_ssize_t* source
    Py_ssize_t k
    uint8_t flip
    Py_ssize_t outputs          # output channels per group
    Py_ssize_t groups           # groups of 4 k in a panel
    int8_t* packed
    Py_ssize_t packed_stride
    int64_t* colsum             # zeros
    Py_ssize_t colsum_stride
    uint8_t* columns            # per thread slot, taps x TRANSPOSED_WIDTH bytes
    Py_ssize_t columns_stride


# Output channels transposed at a time: whole 16 x 16 blocks of bytes (two
# panels where NR is 8, whose eight-byte runs a block wrote one at a time
# through the stack).  A variable: Cython takes no conditional in an enum.
cdef Py_ssize_t TRANSPOSED_WIDTH = max(<Py_ssize_t>NR, 16)


cdef void pack_filter_units(void* context, Py_ssize_t start, Py_ssize_t stop,
                            int slot) noexcept nogil:
    """Units [start, stop) of the groups' filters, each TRANSPOSED_WIDTH
    output channels (unit u: group u // units, its channels from (u %
    units) * TRANSPOSED_WIDTH on): their rows transposed into the slot's
    scratch (transpose_filter_rows), whose row t is tap t of those
    channels, as a row of B; then in each of the unit's panels every run of
    groups whose taps step evenly (a 1 x 1 filter's channels one apart, a
    3 x 3 one's at a tap nine) packed from those rows in place by the
    variant's pack_groups, and any other group from a copy of its four
    rows.  Gathering each column's four values from the filter's rows
    (evenly apart, one store) ran at 2 GB/s on a 3 x 3 filter of 256
    channels; the transpose is 16 x 16 bytes at a time in registers."""
    cdef const PackFilter* job = <const PackFilter*>context
    cdef uint8_t* columns = job.columns + slot * job.columns_stride
    cdef Py_ssize_t units = ceil_div(job.outputs, TRANSPOSED_WIDTH)
    cdef Py_ssize_t u, group, base, first
    for u in range(start, stop):
        group = u // units
        base = (u % units) * TRANSPOSED_WIDTH
        transpose_filter_rows(job.filter + (group * job.outputs + base) * job.taps, job.taps,
                              min(TRANSPOSED_WIDTH, job.outputs - base), job.flip,
                              job.filter_end, columns)
        first = base
        while first < min(base + TRANSPOSED_WIDTH, job.outputs):
            pack_filter_panel(job, columns + (first - base),
                              job.packed + group * job.packed_stride
                              + (first // NR) * job.groups * GROUP_BYTES,
                              job.colsum + group * job.colsum_stride + first,
                              min(<Py_ssize_t>NR, job.outputs - first))
            first = first + NR


cdef void pack_filter_panel(const PackFilter* job, const uint8_t* columns, int8_t* panel,
                            int64_t* sums, Py_ssize_t width) noexcept nogil:
    """One panel from its columns of the transposed rows (row t at columns
    + t * TRANSPOSED_WIDTH), its column sums into sums[:width].  Column sums
    gather in int32 for at most SUM_GROUPS groups, as pack_b_columns'."""
    cdef uint8_t staged[4 * NR]
    cdef int32_t partial[NR]
    cdef Py_ssize_t g, g0, g1, j, c, count, step, run
    cdef Py_ssize_t whole_groups = job.k // 4
    cdef const Py_ssize_t* at
    g0 = 0
    while g0 < job.groups:
        g1 = min(g0 + SUM_GROUPS, job.groups)
        memset(partial, 0, sizeof(partial))
        g = g0
        while g < g1:
            at = job.source + 4 * g
            step = at[1] - at[0] if g < whole_groups else 0
            run = 0
            if g < whole_groups:
                while (g + run < min(g1, whole_groups)
                       and evenly_apart(at + 4 * run, at[0] + 4 * run * step, step)):
                    run = run + 1
            if run:
                pack_groups(columns + at[0] * TRANSPOSED_WIDTH, step * TRANSPOSED_WIDTH, run, 0,
                            panel + g * GROUP_BYTES, partial)
                g = g + run
                continue
            count = min(<Py_ssize_t>4, job.k - 4 * g)
            for j in range(4):
                if j < count:
                    memcpy(staged + j * NR, columns + at[j] * TRANSPOSED_WIDTH, NR)
                else:
                    memset(staged + j * NR, 0, NR)
            pack_groups(staged, NR, 1, 0, panel + g * GROUP_BYTES, partial)
            g = g + 1
        for c in range(width):
            sums[c] += partial[c]
        g0 = g1


cdef inline bint evenly_apart(const Py_ssize_t* at, Py_ssize_t first,
                              Py_ssize_t step) noexcept nogil:
    """Whether a group's four taps are first, first + step, ... (step may be
    anything, 0 and negative alike: pack_groups reads rows ldb apart)."""
    return (at[0] == first and at[1] == first + step and at[2] == first + 2 * step
            and at[3] == first + 3 * step)


cdef void transpose_filter_rows(const uint8_t* rows, Py_ssize_t taps, Py_ssize_t width,
                                uint8_t flip, const uint8_t* end,
                                uint8_t* columns) noexcept nogil:
    """`width` (<= TRANSPOSED_WIDTH) rows of `taps` bytes, xor flip,
    transposed into `columns` (taps rows of TRANSPOSED_WIDTH bytes, zero
    past the width), 16 x 16 bytes a block (transpose_block16, which reads
    no further than `end`)."""
    cdef Py_ssize_t r0, t0, height
    cdef const uint8_t* source
    if width < TRANSPOSED_WIDTH:
        memset(columns, 0, taps * TRANSPOSED_WIDTH)
    for r0 in range(0, width, 16):
        height = min(<Py_ssize_t>16, width - r0)
        for t0 in range(0, taps, 16):
            source = rows + r0 * taps + t0
            transpose_block16(source, taps, height, min(<Py_ssize_t>16, taps - t0),
                              columns + t0 * TRANSPOSED_WIDTH + r0, TRANSPOSED_WIDTH, flip,
                              end - source)


cdef inline void fill_channel_run(uint8_t* target, Py_ssize_t pixel_stride,
                                  const uint8_t* source, Py_ssize_t shift, Py_ssize_t lo,
                                  Py_ssize_t hi, Py_ssize_t padded_w, uint8_t flip,
                                  uint8_t pad_value) noexcept nogil:
    """One channel along a row of the copy: positions [lo, hi) read source[wp + shift],
    the rest are padding."""
    cdef Py_ssize_t wp
    for wp in range(lo):
        target[wp * pixel_stride] = pad_value
    for wp in range(lo, hi):
        target[wp * pixel_stride] = source[wp + shift] ^ flip
    for wp in range(hi, padded_w):
        target[wp * pixel_stride] = pad_value


cdef inline void fill_channel_triple(uint8_t* target, const uint8_t* source, Py_ssize_t plane,
                                     Py_ssize_t shift, Py_ssize_t lo, Py_ssize_t hi,
                                     Py_ssize_t padded_w, uint8_t flip,
                                     uint8_t pad_value) noexcept nogil:
    """Three channels (planes `plane` bytes apart) along a row of a tight
    copy of three bytes a position (a network's first convolution): the
    row's bytes written in order, an interleaving loop the compiler
    vectorizes, where a channel at a time stored every third byte alone."""
    cdef Py_ssize_t wp
    cdef const uint8_t* first = source + shift
    cdef const uint8_t* second = first + plane
    cdef const uint8_t* third = second + plane
    memset(target, pad_value, 3 * lo)
    for wp in range(lo, hi):
        target[3 * wp] = first[wp] ^ flip
        target[3 * wp + 1] = second[wp] ^ flip
        target[3 * wp + 2] = third[wp] ^ flip
    memset(target + 3 * hi, pad_value, 3 * (padded_w - hi))


cdef enum:
    # Positions per batch of channel words, built contiguously (a loop the
    # compiler vectorizes) and then stored at the pixel stride.
    QUAD_BATCH = 64


cdef inline void fill_channel_quad(uint32_t* target, Py_ssize_t word_stride,
                                   const uint8_t* source, Py_ssize_t plane, Py_ssize_t shift,
                                   Py_ssize_t lo, Py_ssize_t hi, Py_ssize_t padded_w,
                                   uint32_t flip, uint32_t pad_value) noexcept nogil:
    """Four consecutive channels (planes `plane` bytes apart) along a row of the
    copy, one 32-bit store per position: a quarter of the byte stores."""
    cdef uint32_t words[QUAD_BATCH]
    cdef Py_ssize_t wp, i, count
    cdef uint32_t pad_word = pad_value * 0x01010101
    cdef const uint8_t* s0
    for wp in range(lo):
        target[wp * word_stride] = pad_word
    wp = lo
    while wp < hi:
        count = min(<Py_ssize_t>QUAD_BATCH, hi - wp)
        s0 = source + wp + shift
        for i in range(count):
            words[i] = ((s0[i] ^ flip) | ((s0[plane + i] ^ flip) << 8)
                        | ((s0[2 * plane + i] ^ flip) << 16) | ((s0[3 * plane + i] ^ flip) << 24))
        for i in range(count):
            target[(wp + i) * word_stride] = words[i]
        wp = wp + count
    for wp in range(hi, padded_w):
        target[wp * word_stride] = pad_word


cdef enum:
    # Positions per task of an unfolded copy without column padding: 32
    # positions of up to 512 channels are 16 KiB of the copy, which stay in L1
    # while every channel quad is written into them.
    POSITION_BLOCK = 32


cdef inline void fill_channel_octet(uint8_t* target, Py_ssize_t pixel_stride,
                                    const uint8_t* source, Py_ssize_t plane, Py_ssize_t shift,
                                    Py_ssize_t lo, Py_ssize_t hi, Py_ssize_t padded_w,
                                    uint8_t flip, uint8_t pad_value) noexcept nogil:
    """Eight consecutive channels (planes `plane` bytes apart) along a row of
    the copy: eight positions at a time, an 8 x 8 byte transpose turns eight
    8-byte reads (one per channel) into eight 8-byte stores (one per position)."""
    cdef uint64_t x[8]
    cdef uint64_t flips = 0x0101010101010101ULL * flip
    cdef uint64_t padding = 0x0101010101010101ULL * pad_value
    cdef Py_ssize_t wp, i
    cdef uint8_t* cell
    for wp in range(lo):
        memcpy(target + wp * pixel_stride, &padding, 8)
    wp = lo
    while wp + 8 <= hi:
        for i in range(8):
            memcpy(&x[i], source + i * plane + wp + shift, 8)
            x[i] ^= flips
        transpose_bytes(x)
        for i in range(8):
            memcpy(target + (wp + i) * pixel_stride, &x[i], 8)
        wp = wp + 8
    while wp < hi:
        cell = target + wp * pixel_stride
        for i in range(8):
            cell[i] = source[i * plane + wp + shift] ^ flip
        wp = wp + 1
    for wp in range(hi, padded_w):
        memcpy(target + wp * pixel_stride, &padding, 8)


cdef inline void fill_channel_blocks16(uint8_t* target, Py_ssize_t pixel_stride,
                                       const uint8_t* source, Py_ssize_t plane,
                                       Py_ssize_t blocks, Py_ssize_t lo, Py_ssize_t hi,
                                       Py_ssize_t shift, uint8_t flip,
                                       Py_ssize_t readable) noexcept nogil:
    """The first 16 * blocks channels (planes `plane` bytes apart) at
    positions [lo, hi) of a row of the copy, position wp reading
    source[wp + shift] (the image's bytes end `readable` bytes after
    source): 16 channels by 16 positions per transpose."""
    cdef Py_ssize_t block, wp, at
    for block in range(blocks):
        wp = lo
        while wp < hi:
            at = 16 * block * plane + wp + shift
            transpose_block16(source + at, plane, 16, min(<Py_ssize_t>16, hi - wp),
                              target + 16 * block + wp * pixel_stride, pixel_stride, flip,
                              readable - at)
            wp = wp + 16


cdef void fill_position_block(const uint8_t* image, Py_ssize_t first, Py_ssize_t count,
                              Py_ssize_t group_count, Py_ssize_t group_channels,
                              Py_ssize_t block_padded, Py_ssize_t positions,
                              uint8_t* interior, uint8_t flip) noexcept nogil:
    """Unfolded copy without column padding: positions [first, first + count)
    of the interior (consecutive in the image and in the copy), every channel."""
    cdef Py_ssize_t pixel_stride = group_count * block_padded
    cdef Py_ssize_t blocks16 = group_channels // 16
    cdef Py_ssize_t octets = group_channels // 8
    cdef Py_ssize_t quads = group_channels // 4
    cdef Py_ssize_t g, c, wp
    cdef const uint8_t* source
    cdef uint8_t* target
    for g in range(group_count):
        source = image + g * group_channels * positions + first
        target = interior + first * pixel_stride + g * block_padded
        fill_channel_blocks16(target, pixel_stride, source, positions, blocks16, 0, count, 0,
                              flip, (group_count * group_channels - g * group_channels)
                              * positions - first)
        for c in range(2 * blocks16, octets):
            fill_channel_octet(target + 8 * c, pixel_stride, source + 8 * c * positions,
                               positions, 0, 0, count, count, flip, 0)
        for c in range(2 * octets, quads):
            fill_channel_quad(<uint32_t*>(target + 4 * c), pixel_stride // 4,
                              source + 4 * c * positions, positions, 0, 0, count, count, flip, 0)
        for c in range(4 * quads, group_channels):
            fill_channel_run(target + c, pixel_stride, source + c * positions, 0, 0, count,
                             count, flip, 0)
        for c in range(group_channels, block_padded):
            for wp in range(count):
                target[c + wp * pixel_stride] = 0


cdef void fill_channels_last_row(const uint8_t* image, Py_ssize_t hp, Py_ssize_t group_count,
                                 Py_ssize_t group_channels, Py_ssize_t fold,
                                 Py_ssize_t block_padded, Py_ssize_t height, Py_ssize_t width,
                                 Py_ssize_t pad_top, Py_ssize_t pad_left, Py_ssize_t padded_w,
                                 Py_ssize_t dilation_w, uint8_t flip, uint8_t pad_value,
                                 uint8_t* buffer) noexcept nogil:
    """Row hp of the padded channels-last image: position (hp, wp) holds, per
    group, `fold` blocks of the group's channels (block j: input column
    wp + j * dilation_w), then zeros up to block_padded bytes.

    Unfolded (fold = 1), channels start 4-byte aligned (block_padded is a
    multiple of 4), so whole quads of channels go out as 32-bit words.
    """
    cdef Py_ssize_t pixel_stride = group_count * block_padded
    cdef Py_ssize_t ih = hp - pad_top
    cdef Py_ssize_t plane = height * width
    cdef Py_ssize_t g, j, c, wp, shift, lo, hi, quads, blocks16
    cdef bint inside = 0 <= ih < height
    cdef uint8_t* row = buffer + hp * padded_w * pixel_stride
    cdef uint8_t* target
    cdef const uint8_t* source
    for g in range(group_count):
        for j in range(fold):
            # Position wp reads input column wp + shift when inside the row;
            # padding rows are padding from end to end.
            shift = j * dilation_w - pad_left
            lo = min(max(-shift, 0), padded_w) if inside else padded_w
            hi = min(max(width - shift, lo), padded_w) if inside else padded_w
            source = image + ((g * group_channels) * height + (ih if inside else 0)) * width
            # (A tight copy's positions are not whole words apart.)
            quads = group_channels // 4 if fold == 1 and block_padded % 4 == 0 else 0
            blocks16 = quads // 4
            if blocks16:
                target = row + g * block_padded
                fill_channel_blocks16(target, pixel_stride, source, plane, blocks16, lo, hi,
                                      shift, flip, group_count * group_channels * plane
                                      - (source - image))
                for wp in range(lo):
                    memset(target + wp * pixel_stride, pad_value, 16 * blocks16)
                for wp in range(hi, padded_w):
                    memset(target + wp * pixel_stride, pad_value, 16 * blocks16)
            for c in range(2 * blocks16, quads // 2):
                fill_channel_octet(row + g * block_padded + 8 * c, pixel_stride,
                                   source + 8 * c * plane, plane, shift, lo, hi, padded_w,
                                   flip, pad_value)
            for c in range(2 * (quads // 2), quads):
                fill_channel_quad(<uint32_t*>(row + g * block_padded + 4 * c), pixel_stride // 4,
                                  source + 4 * c * plane, plane, shift, lo, hi, padded_w, flip,
                                  pad_value)
            if pixel_stride == 3 and group_channels == 3:
                fill_channel_triple(row, source, plane, shift, lo, hi, padded_w, flip, pad_value)
                continue
            for c in range(4 * quads, group_channels):
                fill_channel_run(row + g * block_padded + j * group_channels + c, pixel_stride,
                                 source + c * plane, shift, lo, hi, padded_w, flip, pad_value)
        for c in range(fold * group_channels, block_padded):
            target = row + g * block_padded + c
            for wp in range(padded_w):
                target[wp * pixel_stride] = 0


def conv2d(const uint8_t[:, :, :, ::1] image, bint input_flip, uint8_t input_zero,
           const int8_t[:, ::1] filter_packed, const int64_t[:, ::1] filter_colsum,
           Py_ssize_t kernel_h, Py_ssize_t kernel_w, Py_ssize_t fold, strides, dilations,
           start_padding, end_padding, const int32_t[::1] col_zero,
           const float[::1] multiplier, const int32_t[::1] out_zero, bias,
           uint8_t[:, :, ::1] out, int32_t low, int32_t high, int n_threads, bint raw=False,
           bint tight=False):
    """Grouped convolution as an implicit GEMM per image and group: output
    pixels are the rows of A, read through per-tap offsets in a padded
    channels-last copy of the image; the packed filter is B.

    With tight (one group, fold = kernel_w, dilation_w = 1), the copy holds
    each position's channels with no padding to 4 bytes and no folding, so a
    filter row's taps are the kernel_w positions' channels end to end: one
    run per step, as folded, from a copy kernel_w times smaller.  A network's
    first convolution (3 channels, 7 x 7) packs 7 runs of 21 per pixel.
    """
    cdef Convolution c
    cdef Gemm gemm
    cdef Epilogue e
    if not check_convolution(&c, image, filter_packed, filter_colsum, kernel_h, kernel_w, fold,
                             strides, dilations, start_padding, end_padding, col_zero,
                             multiplier, out_zero, bias, out, raw):
        return
    c.input_flip = input_flip
    n_threads = max(n_threads, 1)
    if tight and (c.group_count != 1 or fold != kernel_w or c.dilation_w != 1):
        raise ValueError("conv2d: a tight copy takes one group, fold kernel_w, dilation_w 1")
    c.tight = tight
    if tight:
        c.block_padded = c.group_channels
        c.pixel_stride = c.group_channels
    buffers = setup_convolution(&c, &gemm, &e, image, filter_packed, filter_colsum, input_zero,
                                col_zero, multiplier, out_zero, bias, out, low, high, raw,
                                n_threads)
    with nogil:
        run_convolution(&c, &gemm, &e, n_threads)
    del buffers  # what the run read through c, gemm and e


cdef struct Convolution:
    # conv2d's geometry and operands: checked (check_convolution), set up
    # (setup_convolution) and run (run_convolution).
    Py_ssize_t batch
    Py_ssize_t channels
    Py_ssize_t height
    Py_ssize_t width
    Py_ssize_t group_count
    Py_ssize_t group_channels
    Py_ssize_t group_outputs
    Py_ssize_t out_channels
    Py_ssize_t pixels
    Py_ssize_t out_h
    Py_ssize_t out_w
    Py_ssize_t kernel_h
    Py_ssize_t kernel_w
    Py_ssize_t fold
    Py_ssize_t stride_h
    Py_ssize_t stride_w
    Py_ssize_t dilation_h
    Py_ssize_t dilation_w
    Py_ssize_t pad_top
    Py_ssize_t pad_left
    Py_ssize_t padded_h
    Py_ssize_t padded_w
    Py_ssize_t block_padded       # bytes of a step's channels in the copy (a multiple of 4)
    Py_ssize_t steps              # kernel steps: taps, or filter rows when folded
    Py_ssize_t pixel_stride       # bytes per position of the copy
    Py_ssize_t image_bytes        # bytes per image of the copy
    Py_ssize_t chunk              # images copied at a time
    bint plane_runs               # the copy's interior is one run per channel
    bint needs_row_sums           # some filter zero point b_zp' is not 0
    bint input_flip
    bint tight                    # positions hold just their channels (see conv2d)
    uint8_t pad_value             # the input zero point as the copy stores it
    const uint8_t* image
    const int8_t* filter_packed
    Py_ssize_t packed_stride      # bytes per group of the packed filter
    const int64_t* filter_colsum
    Py_ssize_t colsum_stride
    uint8_t* out
    uint8_t* buffer               # the copies of a chunk of images
    int64_t* sums                 # their row sums, when needed
    int32_t row_zero              # the input zero point as A' (Epilogue.row_zero)
    const int64_t* terms          # the bias per output channel, or NULL


cdef bint check_convolution(Convolution* c, const uint8_t[:, :, :, ::1] image,
                            const int8_t[:, ::1] filter_packed,
                            const int64_t[:, ::1] filter_colsum, Py_ssize_t kernel_h,
                            Py_ssize_t kernel_w, Py_ssize_t fold, strides, dilations,
                            start_padding, end_padding, const int32_t[::1] col_zero,
                            const float[::1] multiplier, const int32_t[::1] out_zero, bias,
                            uint8_t[:, :, ::1] out, bint raw) except -1:
    """The geometry into ``c``; False when there is nothing to compute.  The
    glue's contract, checked once: the packed filter, the vectors and the
    output match the geometry, and every tap of every pixel reads inside the
    copy (ValueError otherwise: the run trusts it for every access)."""
    c.batch, c.channels = image.shape[0], image.shape[1]
    c.height, c.width = image.shape[2], image.shape[3]
    c.group_count = filter_packed.shape[0]
    c.out_channels, c.pixels = out.shape[1], out.shape[2] // (4 if raw else 1)
    c.kernel_h, c.kernel_w, c.fold = kernel_h, kernel_w, fold
    c.stride_h, c.stride_w = strides[0], strides[1]
    c.dilation_h, c.dilation_w = dilations[0], dilations[1]
    c.pad_top, c.pad_left = start_padding[0], start_padding[1]
    c.padded_h = c.height + c.pad_top + end_padding[0]
    c.padded_w = c.width + c.pad_left + end_padding[1]
    if c.batch == 0 or c.out_channels == 0 or c.pixels == 0:
        return False
    if (c.group_count < 1 or c.channels % c.group_count or c.out_channels % c.group_count
            or fold < 1):
        raise ValueError("conv2d: arguments do not match the convolution's geometry")
    c.group_channels = c.channels // c.group_count
    c.group_outputs = c.out_channels // c.group_count
    c.block_padded = round_up(fold * c.group_channels, 4)
    c.steps = kernel_h * (kernel_w // fold)
    c.pixel_stride = c.group_count * c.block_padded
    c.out_w = 0
    if c.stride_w > 0 and c.padded_w > (kernel_w - 1) * c.dilation_w:
        c.out_w = (c.padded_w - (kernel_w - 1) * c.dilation_w - 1) // c.stride_w + 1
    c.out_h = c.pixels // c.out_w if c.out_w > 0 else 0
    if (fold not in (1, kernel_w) or kernel_h < 1 or kernel_w < 1
            or c.stride_h < 1 or c.stride_w < 1 or c.dilation_h < 1 or c.dilation_w < 1
            or min(c.pad_top, c.pad_left, end_padding[0], end_padding[1]) < 0
            or c.out_w < 1 or c.out_h * c.out_w != c.pixels
            or (c.out_h - 1) * c.stride_h + (kernel_h - 1) * c.dilation_h >= c.padded_h
            or (c.out_w - 1) * c.stride_w + (kernel_w - 1) * c.dilation_w >= c.padded_w
            or filter_packed.shape[1] < packed_b_bytes(kernel_h * kernel_w * c.group_channels,
                                                       c.group_outputs)
            or filter_colsum.shape[0] != c.group_count
            or filter_colsum.shape[1] < c.group_outputs
            or col_zero.shape[0] != c.out_channels or multiplier.shape[0] != c.out_channels
            or out_zero.shape[0] != c.out_channels or out.shape[0] != c.batch
            or out.shape[2] != c.pixels * (4 if raw else 1)
            or (bias is not None and len(bias) != c.out_channels)):
        raise ValueError("conv2d: arguments do not match the convolution's geometry")
    return True


cdef object setup_convolution(Convolution* c, Gemm* gemm, Epilogue* e,
                              const uint8_t[:, :, :, ::1] image,
                              const int8_t[:, ::1] filter_packed,
                              const int64_t[:, ::1] filter_colsum, uint8_t input_zero,
                              const int32_t[::1] col_zero, const float[::1] multiplier,
                              const int32_t[::1] out_zero, bias, uint8_t[:, :, ::1] out,
                              int32_t low, int32_t high, bint raw, int n_threads):
    """Offsets, buffers and the GEMM and epilogue descriptions of a checked
    convolution; returns the arrays they point into (the caller keeps them
    until the run ends)."""
    cdef Py_ssize_t oh, ow, kh, kw, column
    cdef int64_t largest_bias = 0
    cdef int32_t zero_point = (input_zero ^ (0x80 if c.input_flip else 0))
    c.needs_row_sums = False
    for column in range(c.out_channels):
        c.needs_row_sums = c.needs_row_sums or col_zero[column] != 0
    terms = np.asarray(bias, np.int64) if bias is not None else np.zeros(1, np.int64)
    if bias is not None:
        largest_bias = largest_magnitude(terms)
    c.plane_runs = c.fold == 1 and c.padded_w == c.width and c.height > 0
    c.pad_value = <uint8_t>zero_point
    # Per pixel, its first tap's position; per step, the tap's distance from it.
    keep = []
    cdef Py_ssize_t* row_offset = <Py_ssize_t*>workspace_bytes(
        "row offsets", c.pixels * sizeof(Py_ssize_t), keep)
    cdef Py_ssize_t* step_offset = <Py_ssize_t*>workspace_bytes(
        "step offsets", c.steps * sizeof(Py_ssize_t), keep)
    # (Row by row: a division per pixel was 2% of a 3 x 3 convolution on 56 x 56.)
    for oh in range(c.out_h):
        for ow in range(c.out_w):
            row_offset[oh * c.out_w + ow] = (oh * c.stride_h * c.padded_w
                                             + ow * c.stride_w) * c.pixel_stride
    for kh in range(c.kernel_h):
        for kw in range(c.kernel_w // c.fold):
            step_offset[kh * (c.kernel_w // c.fold) + kw] = (
                (kh * c.dilation_h * c.padded_w + kw * c.dilation_w) * c.pixel_stride)
    # Images go through in chunks of up to CHUNK_BYTES of copies, each chunk
    # one batched GEMM per group.
    c.image_bytes = max(c.padded_h * c.padded_w * c.pixel_stride, 1)
    c.chunk = max(1, min(c.batch, CHUNK_BYTES // c.image_bytes))
    # A_SLACK bytes past the last run (gemm.a_slack).
    c.buffer = workspace_bytes("channels last", c.chunk * c.image_bytes + A_SLACK, keep)
    # Written before they are read (ensure_row_sums).
    c.sums = <int64_t*>workspace_bytes("row sums", c.chunk * c.pixels * sizeof(int64_t), keep)
    gemm.a_ready = NULL
    if c.needs_row_sums:
        # Summed by the units (ensure_row_sums), the states zeroed per GEMM.
        gemm.a_sums = c.sums
        gemm.a_sums_stride = c.pixels
        gemm.a_row_bands = row_bands(c.pixels)
        gemm.a_ready = <int32_t*>workspace_bytes(
            "row bands", c.chunk * gemm.a_row_bands * sizeof(int32_t), keep)
    cdef const int64_t[::1] term_view = terms
    c.image = &image[0, 0, 0, 0]
    c.filter_packed = &filter_packed[0, 0]
    c.packed_stride = filter_packed.shape[1]
    c.filter_colsum = &filter_colsum[0, 0]
    c.colsum_stride = filter_colsum.shape[1]
    c.out = &out[0, 0, 0]
    c.terms = &term_view[0] if bias is not None else NULL
    gemm.row_offset = row_offset
    gemm.a_slack = A_SLACK
    gemm.lda = 0
    gemm.m = c.pixels
    gemm.step_offset = step_offset
    gemm.steps = c.steps
    gemm.step_length = c.fold * c.group_channels
    gemm.groups = ceil_div(c.steps * gemm.step_length, 4)
    gemm.a_flip = 0  # the copy holds A'
    gemm.b_ready = NULL  # the filter comes packed
    gemm.scratch = workspace_bytes("scratch", scratch_bytes(n_threads), keep)
    gemm.n = c.group_outputs
    gemm.out_row_stride = 1
    gemm.out_col_stride = c.pixels
    gemm.a_index = NULL
    gemm.b_index = NULL
    gemm.a_batch_stride = c.image_bytes
    gemm.b_batch_stride = 0
    gemm.out_batch_stride = c.out_channels * c.pixels
    e.row_sum_batch_stride = c.pixels
    e.column_sum_batch_stride = 0
    c.row_zero = zero_point
    e.row_zero = &c.row_zero
    e.row_zero_step = 0
    e.k = c.group_channels * c.kernel_h * c.kernel_w
    e.column_zero = &col_zero[0]
    e.multiplier = &multiplier[0]
    e.out_zero = &out_zero[0]
    e.multiplier_step = 0
    e.out_zero_step = 0
    e.low = low
    e.high = high
    e.per_row = False
    e.row_sums_given = False
    e.narrow = fits_int32(e.k, largest_bias)
    e.raw = raw
    e.to_float = False
    e.float_bias = NULL
    if raw and not e.narrow:
        raise ValueError("conv2d: raw sums need K that keeps every value inside int32")
    return terms, keep


cdef void run_convolution(const Convolution* c, Gemm* gemm, Epilogue* e,
                          int n_threads) noexcept nogil:
    """Chunk by chunk: the images' channels-last copies, then per group one
    batched GEMM over the chunk (whose units sum their pixels' rows, when a
    filter zero point asks for them)."""
    cdef Py_ssize_t first = 0, count, member, group
    cdef Py_ssize_t plane = c.channels * c.height * c.width
    cdef Py_ssize_t out_image = c.out_channels * c.pixels * (4 if e.raw else 1)
    cdef const int32_t* column_zero = e.column_zero
    cdef const float* multiplier = e.multiplier
    cdef const int32_t* out_zero = e.out_zero
    while first < c.batch:
        count = min(c.chunk, c.batch - first)
        for member in range(count):
            fill_channels_last(c.image + (first + member) * plane, c.plane_runs, c.group_count,
                               c.group_channels, 1 if c.tight else c.fold, c.block_padded,
                               c.height, c.width,
                               c.padded_h, c.padded_w, c.pad_top, c.pad_left, c.dilation_w,
                               0x80 if c.input_flip else 0, c.pad_value,
                               c.buffer + member * c.image_bytes, n_threads)
        gemm.batch = count
        for group in range(c.group_count):
            gemm.b = c.filter_packed + group * c.packed_stride
            gemm.out = (c.out + first * out_image
                        + group * c.group_outputs * c.pixels * (4 if e.raw else 1))
            e.column_term = c.terms + group * c.group_outputs if c.terms != NULL else NULL
            e.column_sum = c.filter_colsum + group * c.colsum_stride
            e.column_zero = column_zero + group * c.group_outputs
            e.multiplier = multiplier + group * c.group_outputs
            e.out_zero = out_zero + group * c.group_outputs
            e.row_sum = NULL
            if c.needs_row_sums:
                memset(gemm.a_ready, 0, count * gemm.a_row_bands * sizeof(int32_t))
                e.row_sum = c.sums
            gemm.a = c.buffer + group * c.block_padded
            run_gemm(gemm, e, n_threads)
        first = first + count


cdef void fill_channels_last(const uint8_t* image, bint plane_runs, Py_ssize_t group_count,
                             Py_ssize_t group_channels, Py_ssize_t fold, Py_ssize_t block_padded,
                             Py_ssize_t height, Py_ssize_t width, Py_ssize_t padded_h,
                             Py_ssize_t padded_w, Py_ssize_t pad_top, Py_ssize_t pad_left,
                             Py_ssize_t dilation_w, uint8_t flip, uint8_t pad_value,
                             uint8_t* buffer, int n_threads) noexcept nogil:
    """The padded channels-last copy of one image, rows (or blocks of
    positions) in parallel."""
    cdef ChannelsLast job
    job.image = image
    job.group_count = group_count
    job.group_channels = group_channels
    job.fold = fold
    job.block_padded = block_padded
    job.height = height
    job.width = width
    job.pad_top = pad_top
    job.pad_left = pad_left
    job.padded_w = padded_w
    job.dilation_w = dilation_w
    job.flip = flip
    job.pad_value = pad_value
    job.buffer = buffer
    if plane_runs:
        # No column padding and one tap per step: the interior rows of a
        # channel are one run in the image and in the copy, copied in blocks
        # of positions; only the padding rows go row by row.
        job.padding_rows_only = True
        if padded_h > height:
            run_range(fill_rows, &job, padded_h, 1, n_threads)
        # At least a block per thread (a 7 x 7 image's 49 positions took
        # blocks of 32 and 17), each starting at a multiple of 8 positions.
        job.position_blocks = min(max(ceil_div(height * width, POSITION_BLOCK), n_threads),
                                  ceil_div(height * width, 8))
        run_range(fill_position_blocks, &job, job.position_blocks, 1, n_threads)
    else:
        job.padding_rows_only = False
        run_range(fill_rows, &job, padded_h, 1, n_threads)


cdef struct ChannelsLast:
    # fill_channels_last's arguments, for its tasks.
    const uint8_t* image
    Py_ssize_t group_count
    Py_ssize_t group_channels
    Py_ssize_t fold
    Py_ssize_t block_padded
    Py_ssize_t height
    Py_ssize_t width
    Py_ssize_t pad_top
    Py_ssize_t pad_left
    Py_ssize_t padded_w
    Py_ssize_t dilation_w
    uint8_t flip
    uint8_t pad_value
    uint8_t* buffer
    bint padding_rows_only
    Py_ssize_t position_blocks    # the interior's blocks of positions (fill_position_blocks)


cdef void fill_rows(void* context, Py_ssize_t start, Py_ssize_t stop, int slot) noexcept nogil:
    """Rows [start, stop) of the padded copy (only its padding rows, when
    padding_rows_only)."""
    cdef const ChannelsLast* j = <const ChannelsLast*>context
    cdef Py_ssize_t hp
    for hp in range(start, stop):
        if j.padding_rows_only and j.pad_top <= hp < j.pad_top + j.height:
            continue
        fill_channels_last_row(j.image, hp, j.group_count, j.group_channels, j.fold,
                               j.block_padded, j.height, j.width, j.pad_top, j.pad_left,
                               j.padded_w, j.dilation_w, j.flip, j.pad_value, j.buffer)


cdef void fill_position_blocks(void* context, Py_ssize_t start, Py_ssize_t stop,
                               int slot) noexcept nogil:
    """Blocks [start, stop) of the interior's position_blocks: block i from
    position i * positions // position_blocks (rounded down to 8) on."""
    cdef const ChannelsLast* j = <const ChannelsLast*>context
    cdef Py_ssize_t positions = j.height * j.width, run, first, end
    for run in range(start, stop):
        first = (run * positions // j.position_blocks) & ~7
        end = (positions if run + 1 == j.position_blocks
               else ((run + 1) * positions // j.position_blocks) & ~7)
        if end > first:
            fill_position_block(j.image, first, end - first, j.group_count, j.group_channels,
                                j.block_padded, positions,
                                j.buffer + j.pad_top * j.padded_w * j.group_count
                                * j.block_padded, j.flip)


# -- the peak probe ---------------------------------------------------------------------

cdef enum:
    # Probe tasks per thread: a thread that starts late still takes its
    # share, so the time is the threads' throughput, not the latest start.
    PROBE_TASKS = 16


ctypedef long long (*ProbeLoop)(long long rounds, int placement) noexcept nogil


cdef struct ProbeRun:
    ProbeLoop loop
    long long rounds                 # per task
    int placement


cdef void probe_task(void* context, Py_ssize_t index, int slot) noexcept nogil:
    cdef const ProbeRun* run = <const ProbeRun*>context
    run.loop(run.rounds, run.placement)


cdef void probe_on_threads(ProbeLoop loop, int placement, long long rounds,
                           int n_threads) noexcept nogil:
    """n_threads * rounds rounds of a probe loop, on n_threads threads of the pool."""
    cdef ProbeRun run
    run.loop = loop
    run.rounds = max(1, rounds // PROBE_TASKS)
    run.placement = placement
    run_tasks(probe_task, &run, n_threads * PROBE_TASKS, n_threads)


cdef object probe_gops(ProbeLoop loop, long long multiply_adds, int n_threads, double seconds):
    """GOPS of a probe loop doing multiply_adds per round: the fastest of its
    placements (_probe.pxd), each the best of three runs on n_threads
    threads at once, all in about ``seconds``."""
    import time

    cdef long long rounds = 1024
    cdef double elapsed = 0.0
    cdef int placement
    if n_threads < 1:
        raise ValueError("n_threads must be at least 1")
    while True:  # calibrate on one thread: runs long enough to time
        start = time.perf_counter()
        with nogil:
            probe_on_threads(loop, 0, rounds, 1)
        elapsed = time.perf_counter() - start
        if elapsed > 0.005 or rounds > (1 << 40):
            break
        rounds = rounds * 4
    rounds = <long long>(rounds * (seconds / (3.0 * PROBE_PLACEMENTS)) / max(elapsed, 1e-9))
    rounds = max(PROBE_TASKS, rounds - rounds % PROBE_TASKS)
    best = float("inf")
    for placement in range(PROBE_PLACEMENTS):
        for _ in range(3):
            start = time.perf_counter()
            with nogil:
                probe_on_threads(loop, placement, rounds, n_threads)
            best = min(best, time.perf_counter() - start)
    return 2.0 * multiply_adds * rounds * n_threads / best / 1e9


def peak_gops(int n_threads=1, double seconds=0.2):
    """The variant's arithmetic ceiling, in GOPS (two operations per
    multiply-add): a register-resident loop of its micro-kernel's own
    multiply-add instructions (PROBE_MIX) on ``n_threads`` threads at once,
    at each of its placements in the front end's lines, the best run of
    all, in about ``seconds``.  A kernel's share of it is the '% peak' of
    ``python -m qops bench``."""
    return probe_gops(probe_kernel, PROBE_MULTIPLY_ADDS, n_threads, seconds)


def check_placement(int placement):
    if not 0 <= placement < PROBE_PLACEMENTS:
        raise ValueError(f"placement must be 0 to {PROBE_PLACEMENTS - 1}, not {placement}")


def probe_result(long long rounds, int placement=0):
    """The probe loop's own result after ``rounds`` rounds on one thread, at
    placement ``placement``: ``rounds * PROBE_RESULT_PER_ROUND`` (as int32)
    when every chain of every round ran, the check that the loop timed is
    the loop counted."""
    cdef long long value
    check_placement(placement)
    with nogil:
        value = probe_kernel(rounds, placement)
    return value


include "_depthwise.pxi"
