# Packing B: a product's B (a filter, a compiled operator's B, a call's B or a
# 1 x 1 convolution's image) into NR-column panels of B', once, and the
# column sums the epilogue needs.  Needs _qgemm.pxi's Gemm and constants.

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
    # row's line in one of four L1 sets).  A panel of a whole line (NR = 64)
    # takes one group at a time, each row's two lines read together.
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


cdef extern from "qops_gemm_pack_b.h":
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
    cdef Py_ssize_t tile_panels = unit_panels(gemm.n)
    cdef Py_ssize_t tile = q // tile_panels
    cdef int32_t* state = gemm.b_ready + b_member * gemm.b_column_tiles + tile
    cdef Py_ssize_t k = gemm.steps * gemm.step_length
    if state_load(state) == PACKED:
        return
    if state_claim(state, UNPACKED, PACKING):
        pack_b_span(gemm.b_source + b_member * k * gemm.n, gemm.n, k, gemm.n,
                    gemm.b_source_flip, gemm.b_panels + b_member * gemm.b_batch_stride,
                    gemm.b_sums + b_member * gemm.b_sums_stride, tile * tile_panels * NR,
                    tile_panels * NR)
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
    own before the product (a job per matrix of a batch)."""
    # Every unit of a band of rows starts at the same micro-tile: its state.
    cdef int32_t* state = gemm.a_ready + a_member * gemm.a_row_states + p
    if state_load(state) == PACKED:
        return
    if state_claim(state, UNPACKED, PACKING):
        sum_rows(own, p * MR, min(p_end * MR, own.m),
                 gemm.a_sums + a_member * gemm.a_sums_stride)
        state_store(state, PACKED)
        return
    wait_for(state)


cdef inline Py_ssize_t row_sum_states(Py_ssize_t m) noexcept nogil:
    """Row-sum states over m rows: one per micro-tile, as a band of run_gemm's
    units may start at any (unit_band), and its state is its first tile's
    (a state past a band's first tile is never used)."""
    return ceil_div(m, MR)


def packed_b_bytes(Py_ssize_t k, Py_ssize_t n):
    """Bytes of a K x N matrix packed into panels."""
    return ceil_div(n, NR) * ceil_div(k, 4) * GROUP_BYTES
