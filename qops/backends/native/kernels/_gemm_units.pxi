# The driver: a product cut into units of micro-tiles x panels, run on the
# pool; per unit, each block of K's rows of A packed once and swept across
# the unit's panels by the variant's micro-kernels, then the epilogue.
# Needs the packers (_gemm_pack_a.pxi, _gemm_pack_b.pxi) and the epilogues.

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
