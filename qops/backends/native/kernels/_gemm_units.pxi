# The driver: a product cut into units of micro-tiles x panels, run on the
# pool; per unit, each block of K's rows of A packed once and swept across
# the unit's panels by the variant's micro-kernels, then the epilogue.
# Needs the packers (_gemm_pack_a.pxi, _gemm_pack_b.pxi) and the epilogues.

cdef inline const uint8_t* rows_in_a(const Gemm* gemm, Py_ssize_t row0, Py_ssize_t rows_here,
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


cdef inline void microkernel_in_a(const Gemm* gemm, const uint8_t* rows, Py_ssize_t stride,
                                    Py_ssize_t k0, Py_ssize_t k1, const int8_t* panel,
                                    int32_t* tile) noexcept nogil:
    """The micro-kernel on values [k0, k1) of K of a block read where it lies
    (rows_in_a), a pass per step's run, from the panel's group of k0: the
    runs are whole groups (step_length % 4 == 0, k0 and k1 multiples of 4)."""
    cdef Py_ssize_t step = k0 // gemm.step_length, at = k0, stop
    while at < k1:
        stop = min(k1, (step + 1) * gemm.step_length)
        microkernel(rows + gemm.step_offset[step] + at - step * gemm.step_length, stride,
                    (stop - at) // 4, panel + (at - k0) // 4 * GROUP_BYTES, tile, MR, NR,
                    at != k0)
        at = stop
        step = step + 1


cdef inline void add_line(int32_t* sums, const int32_t* line, bint first) noexcept nogil:
    """sums[:NR] <- line[:NR] (first) or sums + line, modulo 2**32."""
    cdef Py_ssize_t c
    if first:
        memcpy(sums, line, NR * sizeof(int32_t))
        return
    for c in range(NR):
        sums[c] = <int32_t>(<uint32_t>sums[c] + <uint32_t>line[c])


# How a block of rows meets a panel (sweep_panel).  choose_forms picks the
# form once per block of rows, for its whole panels and for a narrow last
# one; the panel loop only looks it up.  The REQUANTIZE forms come last:
# they take the sums from the micro-kernel's registers to the epilogue and
# leave no tile behind.
cdef enum:
    PANEL_SUMS = 0             # the block (packed, or one run where it lies): a tile of sums
    PANEL_IN_A = 1             # rows read where they lie, a pass per step's run
    PANEL_NARROW = 2           # a short block on the panel narrowed to bytes (b_narrow)
    PANEL_REQUANTIZE = 3       # by tile, from the micro-kernel's registers
    PANEL_REQUANTIZE_ROWS = 4  # by rows (the per-row epilogue), likewise

# What becomes of the tile of sums a form leaves, one block of K.
cdef enum:
    END_TILE_TERMS = 0  # requantize_unit_tile_at, with the rows' terms
    END_FINISH = 1      # finish_tile
    END_GATHER = 2      # into the unit's rows of sums (requantize_int32_rows)
    END_WITH_TAIL = 3   # finish_tile, then the fused tail's rows below it

# How the tiles of several blocks of K add up in the scratch.
cdef enum:
    GATHER_ROWS = 0   # int32, in rows of the unit's columns (requantize_int32_rows)
    GATHER_INT32 = 1  # int32, a tile at a time
    GATHER_INT64 = 2  # int64, a tile at a time


cdef struct RowBlock:
    # A block of up to MR rows of a unit, as the panel loop sweeps it.
    Py_ssize_t row0
    Py_ssize_t rows
    const uint8_t* in_a     # its rows where they lie (rows_in_a), or NULL
    const uint8_t* operand  # what the one-run and packed forms read ...
    Py_ssize_t stride       # ... and its row stride
    Py_ssize_t kernel_rows  # the rows the micro-kernel computes (MR over a zeroed short block)
    int whole_form          # over panels of NR columns
    int last_form           # over a last panel of fewer
    int end


cdef struct UnitRun:
    # What every block of rows of a unit shares (run_unit).
    const Gemm* gemm
    const Epilogue* epilogue
    UnitOutput* unit
    Py_ssize_t p, p_end, q, q_end
    Py_ssize_t panel_size, k, last_whole, columns
    bint may_read_a    # rows may be read where they lie (A_BYTES 1, no flip, whole-group runs)
    bint packs_a       # blocks of rows are packed by the unit (not read in place or prepacked)
    bint whole_rows    # the epilogue takes the unit's rows whole (requantize_int32_rows)
    bint by_tile
    bint by_rows
    uint8_t* block       # the current block's packed rows ...
    uint8_t* next_block  # ... and the next one's, packed ahead
    Py_ssize_t ahead     # the block packed ahead into next_block (-1: none)
    int32_t* sums32      # the sums across blocks of K (the scratch past the packed blocks)
    int64_t* sums64
    int32_t* tile
    TileTerms* terms
    uint32_t* row_term
    RowTerms* row_terms
    RowTermsStore* row_store
    # A short tail fused with the block above it (one block of K only, and
    # not where the blocks requantize from registers: run_one_block).
    bint fuse_tail
    bint split_tail
    Py_ssize_t tail_rows
    uint8_t* tail_block
    int32_t* tail_tile


cdef inline void start_row_block(UnitRun* run, RowBlock* rows, Py_ssize_t ri, Py_ssize_t k0,
                                 Py_ssize_t k1) noexcept nogil:
    """Block ri's rows where they lie, or packed (values [k0, k1) of K),
    the packed block from next_block when it was packed ahead."""
    cdef const Gemm* gemm = run.gemm
    cdef uint8_t* swap
    rows.row0 = ri * MR
    rows.rows = min(<Py_ssize_t>MR, gemm.m - ri * MR)
    if gemm.a_packed != NULL:
        rows.in_a = NULL
        rows.operand = gemm.a_packed + rows.row0 * gemm.a_packed_stride + k0 * A_BYTES * A_SPREAD
        rows.stride = gemm.a_packed_stride
        return
    rows.in_a = rows_in_a(gemm, rows.row0, rows.rows, &rows.stride) if run.may_read_a else NULL
    if rows.in_a != NULL:
        rows.operand = rows.in_a + gemm.step_offset[0]
        return
    if run.ahead == ri:
        swap = run.block
        run.block = run.next_block
        run.next_block = swap
    else:
        pack_a_block(gemm, rows.row0, rows.rows, k0, k1, run.block)
    rows.operand = run.block
    rows.stride = BLOCK_ROW_BYTES


cdef inline void pack_ahead(UnitRun* run, Py_ssize_t ri, Py_ssize_t k0,
                            Py_ssize_t k1) noexcept nogil:
    """Block ri's rows packed into next_block, beside the micro-kernel's first
    pass over the block before (packed just before its own first pass, the
    block would hold that pass up for its loads, widening and stores)."""
    pack_a_block(run.gemm, ri * MR, min(<Py_ssize_t>MR, run.gemm.m - ri * MR), k0, k1,
                 run.next_block)
    run.ahead = ri


cdef inline void choose_forms(const UnitRun* run, RowBlock* rows, bint one_block,
                              bint with_tail) noexcept nogil:
    """The forms of a block of rows over whole and narrow panels, and the end
    of the tiles they leave.  A block with a fused tail (with_tail) stores
    its tiles; so do several blocks of K (not one_block), which gather."""
    cdef bint one_run = run.gemm.steps == 1
    cdef bint few = rows.rows <= SHORT_BLOCK_ROWS
    cdef bint in_a = rows.in_a != NULL
    cdef bint by_tile = one_block and run.by_tile and not with_tail
    cdef bint by_rows = one_block and run.by_rows and not with_tail
    # A short block's rows alone where they are few (microkernel_rows),
    # else the whole micro-kernel over the block zeroed past them.
    rows.kernel_rows = rows.rows if few else MR
    if B_BYTES == 2 and run.gemm.b_narrow != NULL and few and not in_a:
        rows.whole_form = PANEL_NARROW
    elif in_a and by_tile and one_run:
        rows.whole_form = PANEL_REQUANTIZE
    elif by_rows and (one_run if in_a else not few):
        rows.whole_form = PANEL_REQUANTIZE_ROWS
    elif in_a:
        rows.whole_form = PANEL_IN_A
    elif by_tile and not few:
        rows.whole_form = PANEL_REQUANTIZE
    else:
        rows.whole_form = PANEL_SUMS
    # A narrow last panel of one run read where it lies takes the micro-
    # kernel's narrow case, so that microkernel_in_a, which every panel of a
    # 3 x 3 convolution takes, carries none.
    rows.last_form = PANEL_IN_A if in_a and not (one_run and one_block) else PANEL_SUMS
    if rows.whole_form == PANEL_NARROW:
        rows.last_form = PANEL_NARROW
    if with_tail:
        rows.end = END_WITH_TAIL
    elif run.by_tile:
        rows.end = END_TILE_TERMS
    elif not run.whole_rows:
        rows.end = END_FINISH
    else:
        rows.end = END_GATHER


cdef always_inlined sweep_panel(const UnitRun* run, const RowBlock* rows, int form,
                               Py_ssize_t qi, Py_ssize_t g0, Py_ssize_t g1) noexcept nogil:
    """Groups [g0, g1) of K of a block of rows times panel qi, in `form`:
    inlined into the panel loops, where a call per panel is a visible share
    of a pointwise convolution over few channels (docs/performance_notes.rst)."""
    cdef const Gemm* gemm = run.gemm
    cdef const int8_t* panel = gemm.b + qi * run.panel_size + g0 * GROUP_BYTES
    if form == PANEL_SUMS:
        microkernel(rows.operand, rows.stride, g1 - g0, panel, run.tile, rows.kernel_rows,
                    min(<Py_ssize_t>NR, gemm.n - qi * NR), False)
    elif form == PANEL_IN_A:
        microkernel_in_a(gemm, rows.in_a, rows.stride, 4 * g0, 4 * g1, panel, run.tile)
    elif form == PANEL_NARROW:
        microkernel_narrow(rows.operand, rows.stride, g1 - g0,
                           gemm.b_narrow + (qi * run.panel_size + g0 * GROUP_BYTES) // B_BYTES,
                           run.tile, rows.kernel_rows)
    elif form == PANEL_REQUANTIZE:
        microkernel_requantize(rows.operand, rows.stride, g1 - g0, panel, run.terms,
                               tile_terms_at(run.terms, rows.row0, qi * NR, run.unit),
                               run.unit.pitch)
    else:
        microkernel_requantize_rows(rows.operand, rows.stride, g1 - g0, panel, run.row_terms,
                                    row_terms_at(run.row_terms, rows.row0, qi * NR, run.unit),
                                    run.unit.pitch)


cdef inline void end_tile(const UnitRun* run, const RowBlock* rows, Py_ssize_t qi) noexcept nogil:
    """The tile a form left for panel qi (one block of K), as rows.end says."""
    cdef Py_ssize_t i
    cdef int32_t* tile = run.tile
    if rows.end == END_TILE_TERMS:
        requantize_unit_tile_at(tile, run.terms, rows.row0, qi * NR, run.unit)
    elif rows.end == END_FINISH:
        finish_tile(tile, rows.row0, qi * NR, run.epilogue, run.gemm, run.unit)
    elif rows.end == END_GATHER:
        for i in range(MR):
            memcpy(run.sums32 + i * TILE_COLUMNS + (qi - run.q) * NR, tile + i * NR,
                   NR * sizeof(int32_t))
    else:
        finish_tile(tile, rows.row0, qi * NR, run.epilogue, run.gemm, run.unit)
        microkernel(run.tail_block, BLOCK_ROW_BYTES, run.gemm.groups,
                    run.gemm.b + qi * run.panel_size, tile, run.tail_rows, NR, False)
        finish_tile(tile, rows.row0 + MR, qi * NR, run.epilogue, run.gemm, run.unit)


cdef inline void run_split_tail(UnitRun* run, Py_ssize_t ri) noexcept nogil:
    """Block ri and the one or two rows of the tail below it, as one tile
    of MR + tail_rows rows per panel (microkernel_tail): alone, two rows
    were bound by the panel's loads.  The tile's first and last MR rows are
    then two whole tiles for the epilogue, which writes the rows between
    them twice, alike."""
    cdef const Gemm* gemm = run.gemm
    cdef Py_ssize_t qi, a_stride = 0
    cdef const uint8_t* a_rows = (rows_in_a(gemm, ri * MR, MR, &a_stride)
                                  if run.may_read_a and gemm.steps == 1 else NULL)
    if a_rows == NULL:
        pack_a_block(gemm, ri * MR, MR, 0, run.k, run.tail_block)
        a_stride = BLOCK_ROW_BYTES
        a_rows = run.tail_block
    else:
        a_rows = a_rows + gemm.step_offset[0]
    for qi in range(run.q, run.q_end):
        microkernel_tail(a_rows, a_stride, run.tail_block + MR * BLOCK_ROW_BYTES,
                         BLOCK_ROW_BYTES, gemm.groups, gemm.b + qi * run.panel_size,
                         run.tail_tile, MR + run.tail_rows)
        finish_tile(run.tail_tile, ri * MR, qi * NR, run.epilogue, gemm, run.unit)
        finish_tile(run.tail_tile + run.tail_rows * NR, ri * MR + run.tail_rows, qi * NR,
                    run.epilogue,
                    gemm, run.unit)


cdef inline void run_one_block(UnitRun* run) noexcept nogil:
    """A unit whose K is one block: each block of rows packed (or read where
    it lies) once and swept across the unit's panels straight to the
    epilogue.  A tail of fewer than MR rows below two or more blocks goes
    with the block above it, while that block's panels are in L1: alone,
    its pass reread them from L2.  Not where the blocks requantize from the
    micro-kernel's registers (by_tile, by_rows): there the tail is a block
    of its own over zeroed rows, so that the block above keeps that form."""
    cdef const Gemm* gemm = run.gemm
    cdef const Epilogue* epilogue = run.epilogue
    cdef UnitOutput* unit = run.unit
    cdef RowBlock rows
    cdef Py_ssize_t ri, qi, p_end = run.p_end
    cdef bint pack_next
    run.tail_rows = gemm.m - (p_end - 1) * MR
    # Not where the blocks requantize from the micro-kernel's registers
    # (by_tile, by_rows): a fused tail would send the block above it through
    # finish_tile, tile by tile, and the tail's own block takes the fused
    # form over its zeroed rows.
    run.fuse_tail = (not run.whole_rows and not run.by_tile and not run.by_rows
                     and p_end - run.p >= 2 and run.tail_rows < MR)
    run.split_tail = run.fuse_tail and run.tail_rows <= 2
    if run.fuse_tail:
        # The tail's packed rows sit in the sums' scratch, which these
        # epilogues leave unused.
        pack_a_block(gemm, (p_end - 1) * MR, run.tail_rows, 0, run.k,
                     run.tail_block + MR * BLOCK_ROW_BYTES if run.split_tail else run.tail_block)
    for ri in range(run.p, p_end - run.fuse_tail):
        if run.split_tail and ri == p_end - 2:
            run_split_tail(run, ri)
            continue
        start_row_block(run, &rows, ri, 0, run.k)
        choose_forms(run, &rows, True, run.fuse_tail and ri == p_end - 2)
        if run.by_tile:
            # The rows' terms once for all the unit's panels.
            tile_terms_of_rows(run.terms, run.row_term, rows.row0, epilogue, gemm, unit)
        elif run.by_rows:
            row_terms_of_rows(run.row_terms, run.row_store, rows.row0, epilogue, gemm)
        pack_next = (run.packs_a and ri + 1 < p_end - run.fuse_tail
                     and not (run.split_tail and ri + 1 == p_end - 2))
        for qi in range(run.q, run.q_end):
            if pack_next and qi == run.q:
                pack_ahead(run, ri + 1, 0, run.k)
            if qi < run.last_whole:
                sweep_panel(run, &rows, rows.whole_form, qi, 0, gemm.groups)
                if rows.whole_form < PANEL_REQUANTIZE:
                    end_tile(run, &rows, qi)
            else:
                sweep_panel(run, &rows, rows.last_form, qi, 0, gemm.groups)
                end_tile(run, &rows, qi)
        if run.whole_rows:
            requantize_int32_rows(run.sums32, TILE_COLUMNS,
                                  unit.bytes + (rows.row0 - unit.row0) * unit.pitch,
                                  unit.pitch, rows.row0, rows.rows, unit.col0, run.columns,
                                  unit.column_term, unit.column_sum, epilogue)


cdef inline void gather_tile(const UnitRun* run, int gather, bint first, Py_ssize_t ri,
                             Py_ssize_t qi) noexcept nogil:
    """A block of K's tile for block ri x panel qi into the sums across
    blocks: set by the first block, added to by the others."""
    cdef Py_ssize_t i
    cdef Py_ssize_t start = ((ri - run.p) * (run.q_end - run.q) + qi - run.q) * MR * NR
    cdef const int32_t* tile = run.tile
    if gather == GATHER_ROWS:
        start = (ri - run.p) * MR * TILE_COLUMNS + (qi - run.q) * NR
        for i in range(MR):
            add_line(run.sums32 + start + i * TILE_COLUMNS, tile + i * NR, first)
    elif gather == GATHER_INT32 and first:
        memcpy(run.sums32 + start, tile, MR * NR * sizeof(int32_t))
    elif gather == GATHER_INT32:
        for i in range(MR * NR):
            run.sums32[start + i] += tile[i]
    elif first:
        for i in range(MR * NR):
            run.sums64[start + i] = tile[i]
    else:
        for i in range(MR * NR):
            run.sums64[start + i] += tile[i]


cdef inline void run_blocks(UnitRun* run) noexcept nogil:
    """A unit whose K is several blocks: per block of K, each block of rows
    packed once and swept across the panels, its tiles gathered in the
    scratch (int32 where the whole value fits, else int64); the epilogue
    after the last."""
    cdef const Gemm* gemm = run.gemm
    cdef const Epilogue* epilogue = run.epilogue
    cdef UnitOutput* unit = run.unit
    cdef RowBlock rows
    cdef Py_ssize_t ri, qi, g0 = 0, g1, start
    cdef Py_ssize_t width = run.q_end - run.q
    cdef int gather = (GATHER_ROWS if run.whole_rows
                       else GATHER_INT32 if epilogue.sums_fit_int32 else GATHER_INT64)
    while g0 < gemm.groups:
        g1 = min(g0 + K_BLOCK_GROUPS, gemm.groups)
        run.ahead = -1
        for ri in range(run.p, run.p_end):
            start_row_block(run, &rows, ri, 4 * g0, min(run.k, 4 * g1))
            choose_forms(run, &rows, False, False)
            for qi in range(run.q, run.q_end):
                if qi == run.q and run.packs_a and ri + 1 < run.p_end:
                    pack_ahead(run, ri + 1, 4 * g0, min(run.k, 4 * g1))
                sweep_panel(run, &rows, rows.whole_form if qi < run.last_whole
                            else rows.last_form, qi, g0, g1)
                gather_tile(run, gather, g0 == 0, ri, qi)
        g0 = g1
    for ri in range(run.p, run.p_end):
        if run.whole_rows:
            requantize_int32_rows(run.sums32 + (ri - run.p) * MR * TILE_COLUMNS, TILE_COLUMNS,
                                  unit.bytes + (ri * MR - unit.row0) * unit.pitch, unit.pitch,
                                  ri * MR, min(<Py_ssize_t>MR, gemm.m - ri * MR), unit.col0,
                                  run.columns, unit.column_term, unit.column_sum, epilogue)
            continue
        for qi in range(run.q, run.q_end):
            start = ((ri - run.p) * width + qi - run.q) * MR * NR
            if epilogue.sums_fit_int32:
                finish_tile(run.sums32 + start, ri * MR, qi * NR, epilogue, gemm, unit)
            else:
                finish_wide(run.sums64 + start, ri * MR, qi * NR, epilogue, gemm, unit)


cdef void run_unit(const Gemm* product, const Epilogue* common, Gemm* own,
                   Epilogue* own_epilogue, Py_ssize_t index, Py_ssize_t p, Py_ssize_t p_end,
                   Py_ssize_t q, Py_ssize_t q_end, uint8_t* scratch) noexcept nogil:
    """Micro-tiles [p, p_end) x panels [q, q_end) of product `index` of the
    batch, from the full K to the output: the unit's epilogue chosen once
    (start_unit), then one block of K (run_one_block) or several
    (run_blocks)."""
    # `own` and `own_epilogue` are the caller's copies of the two, made once
    # per run of units (a field read back soon after a copy's wide vector
    # stores waits for them instead of forwarding); here only the batch
    # member's fields change.
    cdef Py_ssize_t a_member = product.a_index[index] if product.a_index != NULL else index
    cdef Py_ssize_t b_member = product.b_index[index] if product.b_index != NULL else index
    own.a = product.a + a_member * product.a_batch_stride
    if product.a_packed != NULL:
        own.a_packed = product.a_packed + a_member * product.a_packed_batch_stride
    own.b = product.b + b_member * product.b_batch_stride
    if product.b_narrow != NULL:
        own.b_narrow = product.b_narrow + b_member * product.b_batch_stride // B_BYTES
    own.out = product.out + index * product.out_batch_stride * (4 if common.raw else 1)
    own_epilogue.column_sum = common.column_sum + b_member * common.column_sum_batch_stride
    if product.b_ready != NULL:
        ensure_packed(product, b_member, q)
    if common.row_sum != NULL:
        own_epilogue.row_sum = common.row_sum + a_member * common.row_sum_batch_stride
    if product.a_ready != NULL:
        ensure_row_sums(product, own, a_member, p, p_end)
    cdef const Gemm* gemm = own
    cdef const Epilogue* epilogue = own_epilogue
    cdef int32_t tile[MR * NR]
    cdef int32_t tail_tile[(MR + 2) * NR]
    cdef uint32_t row_term[MR]
    cdef TileTerms terms
    cdef RowTermsStore row_store
    cdef RowTerms row_terms
    cdef UnitOutput unit
    cdef UnitRun run
    run.gemm = gemm
    run.epilogue = epilogue
    run.unit = &unit
    run.p = p
    run.p_end = p_end
    run.q = q
    run.q_end = q_end
    run.panel_size = gemm.groups * GROUP_BYTES
    run.k = gemm.steps * gemm.step_length
    # Panels from last_whole on (the last, when N is not a multiple of NR)
    # have fewer than NR columns.
    run.last_whole = gemm.n // NR
    run.columns = min((q_end - q) * NR, gemm.n - q * NR)
    run.may_read_a = A_BYTES == 1 and gemm.a_flip == 0 and gemm.step_length % 4 == 0
    run.packs_a = not run.may_read_a and gemm.a_packed == NULL
    run.block = scratch
    run.next_block = scratch + MR * BLOCK_ROW_BYTES
    run.ahead = -1
    run.sums32 = <int32_t*>(scratch + SLOT_A_BYTES)
    run.sums64 = <int64_t*>(scratch + SLOT_A_BYTES)
    run.tile = tile
    run.tail_tile = tail_tile
    run.tail_block = scratch + SLOT_A_BYTES
    run.terms = &terms
    run.row_term = row_term
    run.row_terms = &row_terms
    run.row_store = &row_store
    start_unit(&unit, scratch, p * MR, q * NR, run.columns, epilogue,
               gemm.out + p * MR * gemm.out_row_stride + q * NR
               if gemm.out_col_stride == 1 else NULL,
               gemm.out_row_stride, p_end * MR <= gemm.m and q_end * NR <= gemm.n)
    run.whole_rows = (epilogue.sums_fit_int32 and not epilogue.raw and not unit.by_tile
                      and not unit.by_rows)
    run.by_tile = unit.by_tile
    run.by_rows = unit.by_rows
    run.fuse_tail = False
    run.split_tail = False
    run.tail_rows = 0
    # Set per block of rows (by_tile, by_rows); cleared so that no path
    # reads an unset field.
    memset(&terms, 0, sizeof(terms))
    memset(&row_terms, 0, sizeof(row_terms))
    if ceil_div(gemm.groups, K_BLOCK_GROUPS) <= 1:
        run_one_block(&run)
    else:
        run_blocks(&run)
    finish_unit(&unit, p_end, q_end, epilogue, gemm)


cdef inline void finish_unit(const UnitOutput* unit, Py_ssize_t p_end, Py_ssize_t q_end,
                             const Epilogue* epilogue, const Gemm* gemm) noexcept nogil:
    """The unit's bytes into the output (raw sums are there already)."""
    if epilogue.raw or unit.in_place:
        return
    store_unit(unit.bytes, min(p_end * MR, gemm.m) - unit.row0,
               min(q_end * NR, gemm.n) - unit.col0,
               gemm.out + unit.row0 * gemm.out_row_stride + unit.col0 * gemm.out_col_stride,
               gemm.out_row_stride, gemm.out_col_stride)


cdef void run_gemm(const Gemm* gemm, const Epilogue* epilogue, int n_threads) noexcept nogil:
    """Every unit of every product of the batch, in parallel; each thread
    packs into its own slot of the scratch.

    The pool hands out contiguous runs of units, which run down the rows of
    a column of units (and then through the batch): a thread keeps reusing
    the same B' panels, which stay in its own L2.
    """
    cdef Py_ssize_t m_panels = ceil_div(gemm.m, MR)
    cdef Py_ssize_t n_panels = ceil_div(gemm.n, NR)
    cdef Py_ssize_t tile_n_panels = unit_panels(gemm.n)
    # A lone short last block joins the unit above it (whose panels it then
    # reads from L1 where it is fused with the unit's last block,
    # run_one_block); a whole block or several blocks of K keep a unit of
    # their own.
    cdef bint fold = folds_lone_band(gemm.m, gemm.groups)
    # Where B is packed during the product, each column of units by the
    # first unit to need it, whole columns per thread keep that packing in
    # one thread; lower bands are weighed for a B packed before.
    cdef bint packed_before = gemm.b_ready == NULL
    cdef Py_ssize_t band = (unit_band(m_panels, gemm.n, gemm.batch, fold, n_threads)
                            if packed_before else TILE_M_PANELS)
    cdef Py_ssize_t tiles_m = band_count(m_panels, band, fold)
    cdef Py_ssize_t tiles = tiles_m * unit_columns(gemm.n)
    cdef TileJobs jobs
    jobs.gemm = gemm
    jobs.epilogue = epilogue
    jobs.tiles = tiles
    jobs.tiles_m = tiles_m
    jobs.band = band
    jobs.m_panels = m_panels
    jobs.n_panels = n_panels
    jobs.tile_n_panels = tile_n_panels
    # A column of units shares its B' panels: where whole columns share out
    # evenly enough (the busiest thread at most 1/16 over an even share), a
    # chunk takes whole columns, so that no column is loaded into two
    # threads' caches; else single units (7 columns on 2 threads would
    # leave one thread 4 of them, 14% over).  Columns of a B packed before
    # count only when they have one width (of 128 and 32 columns, one
    # thread would take four fifths of the work).
    cdef Py_ssize_t columns = tiles * gemm.batch // tiles_m
    cdef Py_ssize_t busiest = ceil_div(columns, n_threads) * n_threads
    cdef bint whole_columns = (band == TILE_M_PANELS and 16 * busiest <= 17 * columns
                               and (not packed_before or gemm.n % (tile_n_panels * NR) == 0
                                    or columns >= BALANCED_UNITS_PER_THREAD * n_threads))
    run_range(run_tiles, &jobs, tiles * gemm.batch, tiles_m if whole_columns else 1, n_threads)


cdef inline bint folds_lone_band(Py_ssize_t m, Py_ssize_t groups) noexcept nogil:
    """Whether a last band of one short micro-tile may join the band above
    (run_one_block fuses it there): M ends in a short tile and K is one
    block."""
    return m % MR != 0 and groups <= K_BLOCK_GROUPS


cdef inline Py_ssize_t band_count(Py_ssize_t m_panels, Py_ssize_t band, bint fold) noexcept nogil:
    """Bands of units down M: `band` micro-tiles each, the last fewer; at
    TILE_M_PANELS a last band of one short micro-tile folded (`fold`) into
    the band above."""
    cdef Py_ssize_t count = ceil_div(m_panels, band)
    if fold and band == TILE_M_PANELS and count > 1 and m_panels % TILE_M_PANELS == 1:
        count -= 1
    return count


cdef enum:
    # unit_band weighs bands only where the product has fewer units than
    # this many per thread (more share out evenly at any height) ...
    BALANCED_UNITS_PER_THREAD = 4
    # ... and bands of at most this many units in all, on at most this many
    # threads (the simulation's steps grow with units times threads, and
    # it runs in every call).
    BALANCED_MOST_UNITS = 256
    BALANCED_MOST_THREADS = 8
    # A unit's fixed work (its epilogue's set-up, its B' column from L2), in
    # micro-tile rows by 16 columns.
    UNIT_COST = 2


cdef Py_ssize_t unit_band(Py_ssize_t m_panels, Py_ssize_t n, Py_ssize_t batch, bint fold,
                          int n_threads) noexcept nogil:
    """Micro-tiles down each unit: TILE_M_PANELS, unless the product has so
    few units that a lower band shares them out better among the threads.

    With AVX-512's 6 x 64 tiles, 49 pixel rows by 160 columns (a 7 x 7
    image's pointwise convolution to 160 channels) make one band of 9
    micro-tiles by two columns of units, of 128 and 32 columns: on two
    threads the wider takes four fifths of the time.  Each height is judged
    by the time its units take as the pool shares them out (pool_finish),
    each costing its micro-tiles times its 16-column slices plus UNIT_COST;
    the earliest finish wins, the higher band on a tie, and TILE_M_PANELS
    stays where it is within 1/16 of an even share.  The search stops at an
    even share."""
    cdef Py_ssize_t columns = unit_columns(n)
    cdef int threads = n_threads
    cdef Py_ssize_t band, best_band = TILE_M_PANELS, best_finish = -1, finish, units, total
    cdef Py_ssize_t cost[BALANCED_MOST_UNITS]
    if (threads <= 1 or threads > BALANCED_MOST_THREADS
            or band_count(m_panels, TILE_M_PANELS, fold) * columns * batch
            >= BALANCED_UNITS_PER_THREAD * threads):
        return TILE_M_PANELS
    for band in range(TILE_M_PANELS, 0, -1):
        units = band_count(m_panels, band, fold) * columns * batch
        if units > BALANCED_MOST_UNITS:
            break
        total = unit_costs(m_panels, n, band, band_count(m_panels, band, fold), units, cost)
        finish = pool_finish(cost, units, threads)
        if band == TILE_M_PANELS and 16 * finish * threads <= 17 * total:
            return TILE_M_PANELS
        if best_finish < 0 or finish < best_finish:
            best_band, best_finish = band, finish
        if best_finish <= ceil_div(total, threads):
            break
    return best_band


cdef Py_ssize_t unit_costs(Py_ssize_t m_panels, Py_ssize_t n, Py_ssize_t band,
                           Py_ssize_t tiles_m, Py_ssize_t units, Py_ssize_t* cost) noexcept nogil:
    """cost[job] for run_tiles' jobs (down the rows of a column of units,
    then the columns, then the batch); returns their sum."""
    cdef Py_ssize_t tile_n_panels = unit_panels(n), columns = unit_columns(n)
    cdef Py_ssize_t job, tile, row, column, slices, rows, total = 0
    for job in range(units):
        tile = job % (tiles_m * columns)
        row = tile % tiles_m
        column = tile // tiles_m
        # The unit's columns in slices of 16 (a narrow panel's quarter_rows).
        slices = ceil_div(min(n, (column + 1) * tile_n_panels * NR)
                          - column * tile_n_panels * NR, 16)
        rows = m_panels - row * band if row == tiles_m - 1 else band
        cost[job] = rows * slices + UNIT_COST
        total += cost[job]
    return total


cdef Py_ssize_t pool_finish(const Py_ssize_t* cost, Py_ssize_t count,
                            int threads) noexcept nogil:
    """When the last of `count` jobs of these costs ends, run as the pool's
    range runs them with grain 1 (qops_run_range): each thread starts on its
    own contiguous segment and takes half of what is left of a segment at a
    time, its own first, then the others' in turn.  At most
    BALANCED_MOST_THREADS threads."""
    cdef Py_ssize_t next_job[BALANCED_MOST_THREADS]
    cdef Py_ssize_t end_job[BALANCED_MOST_THREADS]
    cdef Py_ssize_t free_at[BALANCED_MOST_THREADS]
    cdef int turn[BALANCED_MOST_THREADS]
    cdef Py_ssize_t finish = 0, size, j
    cdef int s, t, first, active
    threads = <int>min(<Py_ssize_t>threads, count)
    active = threads
    for s in range(threads):
        next_job[s] = count * s // threads
        end_job[s] = count * (s + 1) // threads
        free_at[s] = 0
        turn[s] = 0
    while active:
        # The thread free first takes its next chunk.
        first = -1
        for t in range(threads):
            if turn[t] < threads and (first < 0 or free_at[t] < free_at[first]):
                first = t
        while turn[first] < threads:
            s = (first + turn[first]) % threads
            if next_job[s] < end_job[s]:
                size = (end_job[s] - next_job[s] + 1) // 2
                for j in range(next_job[s], next_job[s] + size):
                    free_at[first] += cost[j]
                next_job[s] += size
                break
            turn[first] += 1
        if turn[first] == threads:
            active -= 1
            finish = max(finish, free_at[first])
    return finish


cdef struct TileJobs:
    const Gemm* gemm
    const Epilogue* epilogue
    Py_ssize_t tiles
    Py_ssize_t tiles_m
    Py_ssize_t band               # micro-tiles down a unit (unit_band)
    Py_ssize_t m_panels
    Py_ssize_t n_panels
    Py_ssize_t tile_n_panels


cdef void run_tiles(void* context, Py_ssize_t start, Py_ssize_t stop, int slot) noexcept nogil:
    """Units [start, stop): unit job % tiles of product job // tiles."""
    cdef const TileJobs* t = <const TileJobs*>context
    cdef Gemm own = t.gemm[0]
    cdef Epilogue own_epilogue = t.epilogue[0]
    cdef Py_ssize_t job, tile, p, q
    for job in range(start, stop):
        tile = job % t.tiles
        p = (tile % t.tiles_m) * t.band
        q = (tile // t.tiles_m) * t.tile_n_panels
        run_unit(t.gemm, t.epilogue, &own, &own_epilogue, job // t.tiles, p,
                 t.m_panels if tile % t.tiles_m == t.tiles_m - 1 else p + t.band,
                 q, min(q + t.tile_n_panels, t.n_panels),
                 t.gemm.scratch + slot * SLOT_BYTES)


cdef extern from "qops_gemm_units.h":
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


cdef void row_sums_range(void* context, Py_ssize_t first, Py_ssize_t stop,
                         int slot) noexcept nogil:
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
    term, in a loop: it runs in the call's serial start, where NumPy's abs
    and max cost more."""
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


def pool_finish_of(costs, int threads):
    """pool_finish on ``costs`` (at most BALANCED_MOST_UNITS jobs, at most
    BALANCED_MOST_THREADS threads): when the last job ends as the pool's
    range runs them."""
    cdef Py_ssize_t cost[BALANCED_MOST_UNITS]
    cdef Py_ssize_t i, count = len(costs)
    if not 0 < count <= BALANCED_MOST_UNITS or not 1 <= threads <= BALANCED_MOST_THREADS:
        raise ValueError(f"pool_finish_of: 1 to {BALANCED_MOST_UNITS} jobs on 1 to "
                         f"{BALANCED_MOST_THREADS} threads")
    for i in range(count):
        cost[i] = costs[i]
    return pool_finish(cost, count, threads)


def unit_band_of(Py_ssize_t m, Py_ssize_t n, Py_ssize_t k, Py_ssize_t batch, int n_threads):
    """(band, TILE_M_PANELS): the micro-tiles down each unit of work that
    run_gemm gives a product of m rows by a packed K x N B on ``n_threads``
    threads (unit_band), and the most it gives."""
    return (unit_band(ceil_div(m, MR), n, batch, folds_lone_band(m, ceil_div(k, 4)), n_threads),
            TILE_M_PANELS)
