# The epilogues: a unit's int32 or int64 sums to its output (requantized
# bytes, or raw sums), by tile, by rows or by whole rows of the unit, and the
# unit's bytes stored.  Needs _qgemm.pxi's Gemm and Epilogue.

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


cdef extern from "qops_gemm_epilogues.h":
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
    # out, and the unit's column vectors modulo 2**32 (epilogues whose sums
    # fit int32), computed once per unit rather than once per micro-tile.
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


cdef inline bint tile_epilogue(const Epilogue* epilogue) noexcept nogil:
    """Whether requantize_tile's rule covers the epilogue: int32 values to
    bytes, one zero point of A, multipliers and output zero points per column
    (not per row), and at most 256 output integers."""
    return (epilogue.sums_fit_int32 and not epilogue.raw and not epilogue.per_row
            and epilogue.row_zero_step == 0 and epilogue.multiplier_step == 0
            and epilogue.out_zero_step == 0 and epilogue.high - epilogue.low <= 255)


cdef void start_unit(UnitOutput* unit, uint8_t* scratch, Py_ssize_t row0, Py_ssize_t col0,
                     Py_ssize_t cols, const Epilogue* epilogue, uint8_t* corner,
                     Py_ssize_t out_row_stride, bint inside) noexcept nogil:
    """The unit's output and column vectors.  corner (or NULL): the unit's
    first byte in a row-major output, where the epilogue writes directly when
    it can: when every tile it writes whole (by_tile, by_rows: rows past M
    and columns past N too) lies inside the output, or it writes only the
    values (the line forms)."""
    # Every loop below is a plain one the compiler vectorizes: on products
    # with a short K (attention's 64) this setup is redone for each unit.
    cdef Py_ssize_t c
    cdef uint32_t row_zero
    unit.row0 = row0
    unit.col0 = col0
    unit.by_tile = tile_epilogue(epilogue)
    unit.by_rows = (ROW_TILES and epilogue.per_row and epilogue.sums_fit_int32 and not epilogue.raw
                    and epilogue.high - epilogue.low <= 255)
    # Written in place, the bytes skip a copy through the scratch: on a
    # 128 x 512 x 784 product, a thousand row copies of 128 bytes.
    unit.in_place = (corner != NULL and not epilogue.raw
                     and (inside or not (unit.by_tile or unit.by_rows)))
    unit.bytes = corner if unit.in_place else scratch + SLOT_UNIT_OFFSET
    unit.pitch = out_row_stride if unit.in_place else TILE_COLUMNS
    unit.raw_tiles = (epilogue.raw and not epilogue.per_row and epilogue.row_zero_step == 0
                      and corner != NULL)
    if not epilogue.sums_fit_int32:
        return
    # Per-column vectors (a per-row epilogue's bias, multipliers and zero
    # points are the rows': only the column sums are read then).
    cdef const int64_t* column_term = (epilogue.column_term + col0
                                       if epilogue.column_term != NULL and not epilogue.per_row
                                       else NULL)
    cdef const int64_t* column_sum = epilogue.column_sum + col0
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
        row_zero = <uint32_t>epilogue.row_zero[0]
        for c in range(cols):
            unit.tile_column[c] = unit.column_term[c] - row_zero * unit.column_sum[c]
    if not unit.by_tile:
        return
    cdef const int32_t* column_zero = epilogue.column_zero + col0
    cdef const float* multiplier = epilogue.multiplier + col0
    cdef const int32_t* out_zero = epilogue.out_zero + col0
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
        largest_multiplier * (<double>epilogue.k * MAX_PRODUCT + <double>largest_bias),
        epilogue.low, epilogue.high)
    for c in range(cols):
        unit.tile_column_zero[c] = 1 if unit.unit_column_zero else <uint32_t>column_zero[c]
        unit.tile_multiplier[c] = multiplier[c]
        unit.tile_floor[c] = <float>(epilogue.low - out_zero[c])
        unit.tile_ceiling[c] = <float>(epilogue.high - out_zero[c])
        unit.tile_offset[c] = out_zero[c] - epilogue.low
    if cols < TILE_COLUMNS:
        # Zero past the unit's last column: whole micro-tiles read them.
        memset(&unit.tile_column[cols], 0, (TILE_COLUMNS - cols) * sizeof(uint32_t))
        memset(&unit.tile_column_zero[cols], 0, (TILE_COLUMNS - cols) * sizeof(uint32_t))
        memset(&unit.tile_multiplier[cols], 0, (TILE_COLUMNS - cols) * sizeof(float))
        memset(&unit.tile_floor[cols], 0, (TILE_COLUMNS - cols) * sizeof(float))
        memset(&unit.tile_ceiling[cols], 0, (TILE_COLUMNS - cols) * sizeof(float))
        memset(&unit.tile_offset[cols], 0, (TILE_COLUMNS - cols) * sizeof(int32_t))


cdef void tile_terms_of_rows(TileTerms* terms, uint32_t* row_term, Py_ssize_t row0,
                             const Epilogue* epilogue, const Gemm* gemm,
                             const UnitOutput* unit) noexcept nogil:
    """The TileTerms of MR rows from row0 but their columns' vectors
    (tile_terms_at points those at a tile's columns): the row terms into
    row_term, which the terms then point at."""
    cdef Py_ssize_t i, r
    cdef int64_t row_zero = epilogue.row_zero[0]
    cdef uint32_t scale = unit.column_zero if unit.unit_column_zero else 1
    for i in range(MR):
        r = row0 + i
        row_term[i] = (<uint32_t>(epilogue.row_sum[r] - epilogue.k * row_zero) * scale
                       if epilogue.row_sum != NULL and r < gemm.m else 0)
    terms.row_term = row_term
    terms.low = epilogue.low
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
                                      const Epilogue* epilogue, const Gemm* gemm,
                                      const UnitOutput* unit) noexcept nogil:
    """requantize_unit_tile_at with the terms of the tile's rows."""
    cdef uint32_t row_term[MR]
    cdef TileTerms terms
    tile_terms_of_rows(&terms, row_term, row0, epilogue, gemm, unit)
    requantize_unit_tile_at(tile, &terms, row0, col0, unit)


cdef inline uint32_t row_term_of(const Epilogue* epilogue, Py_ssize_t r,
                                 int64_t row_zero) noexcept nogil:
    """rowsum(A'[r]) - K * a_zp'[r] modulo 2**32 (0 when no column zero point
    asks for row sums)."""
    if epilogue.row_sum == NULL:
        return 0
    return <uint32_t>(epilogue.row_sum[r] - epilogue.k * row_zero)


cdef inline uint32_t per_row_term(const Epilogue* epilogue, Py_ssize_t r,
                                  uint32_t row_term) noexcept nogil:
    """A per-row epilogue's term for row r: its bias less the one column zero
    point times the row term, modulo 2**32."""
    return ((<uint32_t>epilogue.column_term[r] if epilogue.column_term != NULL else 0)
            - (<uint32_t>epilogue.column_zero[0]) * row_term)


cdef struct RowTermsStore:
    # The arrays a RowTerms points at, for MR rows, and its shortcuts.
    uint32_t term[MR]
    uint32_t row_zero[MR]
    float multiplier[MR]
    float floor[MR]
    float ceiling[MR]
    int32_t offset[MR]
    bint one_row_zero
    bint packs_clamp


cdef inline void fill_row_store(RowTermsStore* store, Py_ssize_t row0, const Epilogue* epilogue,
                                const Gemm* gemm) noexcept nogil:
    """The RowTerms arrays and shortcuts of a micro-tile's rows from row0
    (rows past M take zero terms and the first row's zero point)."""
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
        zero = epilogue.row_zero[r * epilogue.row_zero_step]
        store.term[i] = per_row_term(epilogue, r, row_term_of(epilogue, r, zero))
        store.row_zero[i] = <uint32_t>zero
        one_row_zero = one_row_zero and store.row_zero[i] == store.row_zero[0]
        store.multiplier[i] = epilogue.multiplier[r]
        out_zero = epilogue.out_zero[r]
        store.floor[i] = <float>(epilogue.low - out_zero)
        store.ceiling[i] = <float>(epilogue.high - out_zero)
        store.offset[i] = out_zero - epilogue.low
        # The row's largest |value * multiplier|: the value, the sum of K
        # products of (A' - row zero) (B' - column zero) plus the bias, is
        # at most K * MAX_PRODUCT + |bias| (as start_unit bounds a unit's
        # columns).
        bias = <double>epilogue.column_term[r] if epilogue.column_term != NULL else 0.0
        scaled = (fabs(<double>epilogue.multiplier[r])
                  * (<double>epilogue.k * MAX_PRODUCT + fabs(bias)))
        largest_scaled = scaled if scaled > largest_scaled else largest_scaled
    store.one_row_zero = one_row_zero
    store.packs_clamp = packs_clamp_exactly(largest_scaled, epilogue.low, epilogue.high)


cdef inline void point_row_terms(RowTerms* terms, const RowTermsStore* store,
                                 int32_t low) noexcept nogil:
    """terms <- the RowTerms of the rows whose arrays store holds, but for
    column_sum, which belongs to its columns."""
    terms.one_row_zero = store.one_row_zero
    terms.packs_clamp = store.packs_clamp
    terms.term = store.term
    terms.row_zero = store.row_zero
    terms.multiplier = store.multiplier
    terms.floor = store.floor
    terms.ceiling = store.ceiling
    terms.offset = store.offset
    terms.low = low


cdef inline void row_terms_of_rows(RowTerms* terms, RowTermsStore* store, Py_ssize_t row0,
                                   const Epilogue* epilogue, const Gemm* gemm) noexcept nogil:
    """The RowTerms of a micro-tile's rows from row0: the epilogue's
    precomputed block where it has them (row0 a multiple of MR, as every
    block of the units starts), else made in store."""
    if epilogue.row_stores != NULL and row0 % MR == 0:
        point_row_terms(terms, <const RowTermsStore*>epilogue.row_stores + row0 // MR,
                        epilogue.low)
        return
    fill_row_store(store, row0, epilogue, gemm)
    point_row_terms(terms, store, epilogue.low)


def row_stores_bytes(Py_ssize_t m):
    """Bytes of the RowTermsStore of every block of MR rows of m rows."""
    return ceil_div(m, MR) * sizeof(RowTermsStore)


cdef void fill_row_stores(RowTermsStore* stores, const Epilogue* epilogue,
                          const Gemm* gemm) noexcept nogil:
    """Every block's RowTermsStore (row_stores_bytes(gemm.m) bytes)."""
    cdef Py_ssize_t block
    for block in range(ceil_div(gemm.m, MR)):
        fill_row_store(&stores[block], block * MR, epilogue, gemm)


cdef inline uint8_t* row_terms_at(RowTerms* terms, Py_ssize_t row0, Py_ssize_t col0,
                                  const UnitOutput* unit) noexcept nogil:
    """Points the terms of a micro-tile's rows (row_terms_of_rows) at its
    columns' sums; returns where the tile's bytes go in the unit's (the
    whole tile: rows past M and columns past N land in the unit's scratch,
    never in the output)."""
    terms.column_sum = unit.column_sum + (col0 - unit.col0)
    return unit.bytes + (row0 - unit.row0) * unit.pitch + col0 - unit.col0


cdef inline void requantize_unit_rows(const int32_t* tile, Py_ssize_t row0, Py_ssize_t col0,
                                      const Epilogue* epilogue, const Gemm* gemm,
                                      const UnitOutput* unit) noexcept nogil:
    """A micro-tile's int32 values into the unit's bytes by
    requantize_tile_rows (row_terms_of_rows, row_terms_at)."""
    cdef RowTermsStore store
    cdef RowTerms terms
    row_terms_of_rows(&terms, &store, row0, epilogue, gemm)
    requantize_tile_rows(tile, &terms, row_terms_at(&terms, row0, col0, unit), unit.pitch)


cdef inline void requantize_int32_rows(const int32_t* tile, Py_ssize_t tile_pitch,
                                       uint8_t* result, Py_ssize_t pitch, Py_ssize_t row0,
                                       Py_ssize_t rows, Py_ssize_t col0, Py_ssize_t cols,
                                       const uint32_t* column_term, const uint32_t* column_sum,
                                       const Epilogue* epilogue) noexcept nogil:
    cdef Py_ssize_t i, r
    cdef int64_t row_zero
    cdef uint32_t row_term
    for i in range(rows):
        r = row0 + i
        row_zero = epilogue.row_zero[r * epilogue.row_zero_step]
        row_term = row_term_of(epilogue, r, row_zero)
        if epilogue.per_row:
            # One bias, multiplier and output zero point for the row; one
            # column zero point for every column.
            requantize_row_line(
                tile + i * tile_pitch, result + i * pitch, cols,
                per_row_term(epilogue, r,
                             row_term), <uint32_t>row_zero, column_sum, epilogue.multiplier[r],
                epilogue.out_zero[r], epilogue.low, epilogue.high)
        else:
            requantize_line(tile + i * tile_pitch, result + i * pitch, cols, column_term,
                            epilogue.column_zero + col0, column_sum, row_term,
                            <uint32_t>row_zero,
                            epilogue.multiplier + r * epilogue.multiplier_step + col0,
                            epilogue.out_zero + r * epilogue.out_zero_step + col0,
                            epilogue.low, epilogue.high)


cdef inline void raw_rows(const int32_t* tile, Py_ssize_t tile_pitch, Py_ssize_t row0,
                          Py_ssize_t rows, Py_ssize_t col0, Py_ssize_t cols,
                          const uint32_t* column_term, const uint32_t* column_sum,
                          const Epilogue* epilogue, const Gemm* gemm) noexcept nogil:
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
        row_zero = epilogue.row_zero[r * epilogue.row_zero_step]
        row_term = row_term_of(epilogue, r, row_zero)
        if epilogue.per_row:
            exact_row_line(tile + i * tile_pitch, values, cols, per_row_term(epilogue, r,
                                                                             row_term),
                           <uint32_t>row_zero, column_sum)
        else:
            exact_line(tile + i * tile_pitch, values, cols, column_term,
                       epilogue.column_zero + col0,
                       column_sum, row_term, <uint32_t>row_zero)
        if epilogue.to_float:
            store_float_line(values, cols, r, col0, epilogue, gemm)
        else:
            store_int_line(values, cols, r, col0, gemm)


cdef inline void raw_tile(const int32_t* tile, Py_ssize_t row0, Py_ssize_t rows,
                          Py_ssize_t col0, const Epilogue* epilogue, const Gemm* gemm,
                          const UnitOutput* unit) noexcept nogil:
    """raw_rows for a tile of NR columns inside a row-major output, from the
    unit's column vector (the bias less the one zero point of A times the
    column sums): one product per value, the column zero point's, where
    raw_rows takes two, in loops of NR values that the compiler unrolls into
    whole vectors."""
    cdef const uint32_t* column = unit.tile_column + (col0 - unit.col0)
    cdef const int32_t* column_zero = epilogue.column_zero + col0
    cdef int32_t values[NR]
    cdef uint32_t row_term
    cdef Py_ssize_t i, c, r
    cdef int64_t row_zero = epilogue.row_zero[0]
    for i in range(rows):
        r = row0 + i
        row_term = row_term_of(epilogue, r, row_zero)
        for c in range(NR):
            values[c] = <int32_t>(<uint32_t>tile[i * NR + c] + column[c]
                                  - (<uint32_t>column_zero[c]) * row_term)
        if epilogue.to_float:
            store_float_line(values, NR, r, col0, epilogue, gemm)
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
                                  Py_ssize_t col0, const Epilogue* epilogue,
                                  const Gemm* gemm) noexcept nogil:
    """count <= NR values as float32(value) * multiplier, then + bias: two
    roundings, as the rule (and NumPy) has them.  to_float is matmul's
    alone, whose output rows are contiguous (out_col_stride 1).  The line
    is made apart and then copied: written straight into the output, which
    the compiler cannot prove apart from the bias, the addition was
    scalar."""
    cdef const float* multiplier = epilogue.multiplier + r * epilogue.multiplier_step + col0
    cdef const float* bias = epilogue.float_bias + col0 if epilogue.float_bias != NULL else NULL
    cdef float line[NR]
    cdef Py_ssize_t c
    for c in range(count):
        line[c] = (<float>values[c]) * multiplier[c]
    if bias != NULL:
        for c in range(count):
            line[c] = line[c] + bias[c]
    memcpy(<float*>gemm.out + r * gemm.out_row_stride + col0, line, count * sizeof(float))


cdef void requantize_int32_tile(const int32_t* tile, Py_ssize_t row0, Py_ssize_t rows,
                                Py_ssize_t col0, Py_ssize_t cols, const Epilogue* epilogue,
                                const UnitOutput* unit) noexcept nogil:
    cdef Py_ssize_t at = col0 - unit.col0
    cdef uint8_t* result = unit.bytes + (row0 - unit.row0) * unit.pitch + at
    # A whole tile's lines are NR long: a constant the compiler unrolls the
    # vectorized line for.
    if cols == NR:
        requantize_int32_rows(tile, NR, result, unit.pitch, row0, rows, col0, NR,
                              unit.column_term + at, unit.column_sum + at, epilogue)
    else:
        requantize_int32_rows(tile, NR, result, unit.pitch, row0, rows, col0, cols,
                              unit.column_term + at, unit.column_sum + at, epilogue)


cdef inline int64_t wide_value(const int64_t* tile, Py_ssize_t i, Py_ssize_t c, Py_ssize_t r,
                               Py_ssize_t col, const Epilogue* epilogue) noexcept nogil:
    """The exact value of tile element (i, c), output (r, col)."""
    cdef int64_t row_zero = epilogue.row_zero[r * epilogue.row_zero_step]
    cdef int64_t row_term = (epilogue.row_sum[r] - epilogue.k * row_zero
                             if epilogue.row_sum != NULL else 0)
    cdef int64_t term = 0
    if epilogue.column_term != NULL:
        term = epilogue.column_term[r if epilogue.per_row else col]
    return (tile[i * NR + c] + term
            - epilogue.column_zero[0 if epilogue.per_row else col] * row_term
            - row_zero * epilogue.column_sum[col])


cdef void requantize_int64_tile(const int64_t* tile, Py_ssize_t row0, Py_ssize_t rows,
                                Py_ssize_t col0, Py_ssize_t cols, const Epilogue* epilogue,
                                const UnitOutput* unit) noexcept nogil:
    cdef uint8_t* result = unit.bytes + (row0 - unit.row0) * unit.pitch + col0 - unit.col0
    cdef Py_ssize_t i, r, c, col, at
    for i in range(rows):
        r = row0 + i
        for c in range(cols):
            col = col0 + c
            at = r if epilogue.per_row else r * epilogue.multiplier_step + col
            result[i * unit.pitch + c] = <uint8_t>requantize(
                wide_value(tile, i, c, r, col, epilogue), epilogue.multiplier[at],
                 epilogue.out_zero[r if epilogue.per_row else r * epilogue.out_zero_step + col],
                 epilogue.low, epilogue.high)


cdef void finish_tile(const int32_t* tile, Py_ssize_t row0, Py_ssize_t col0,
                      const Epilogue* epilogue, const Gemm* gemm,
                      const UnitOutput* unit) noexcept nogil:
    """A micro-tile's sums S (the whole K, as int32: int32 values when the
    sums fit int32, else one block's) into the unit's bytes (the output,
    for raw sums)."""
    cdef Py_ssize_t rows = min(<Py_ssize_t>MR, gemm.m - row0)
    cdef Py_ssize_t cols = min(<Py_ssize_t>NR, gemm.n - col0)
    if unit.by_tile:
        requantize_unit_tile(tile, row0, col0, epilogue, gemm, unit)
        return
    if unit.by_rows:
        requantize_unit_rows(tile, row0, col0, epilogue, gemm, unit)
        return
    if unit.raw_tiles and cols == NR:
        raw_tile(tile, row0, rows, col0, epilogue, gemm, unit)
        return
    if epilogue.raw:
        raw_rows(tile, NR, row0, rows, col0, cols, unit.column_term + col0 - unit.col0,
                 unit.column_sum + col0 - unit.col0, epilogue, gemm)
        return
    if epilogue.sums_fit_int32:
        requantize_int32_tile(tile, row0, rows, col0, cols, epilogue, unit)
        return
    widen_and_finish(tile, row0, col0, epilogue, gemm, unit)


cdef void widen_and_finish(const int32_t* tile, Py_ssize_t row0, Py_ssize_t col0,
                           const Epilogue* epilogue, const Gemm* gemm,
                           const UnitOutput* unit) noexcept nogil:
    """A micro-tile's int32 sums through the int64 epilogue: out of
    finish_tile's line, whose every call (one per micro-tile) would
    otherwise set up this array's aligned stack frame."""
    cdef int64_t wide[MR * NR]
    cdef Py_ssize_t i
    for i in range(MR * NR):
        wide[i] = tile[i]
    finish_wide(wide, row0, col0, epilogue, gemm, unit)


cdef inline void finish_wide(const int64_t* tile, Py_ssize_t row0, Py_ssize_t col0,
                             const Epilogue* epilogue, const Gemm* gemm,
                             const UnitOutput* unit) noexcept nogil:
    cdef Py_ssize_t rows = min(<Py_ssize_t>MR, gemm.m - row0)
    cdef Py_ssize_t cols = min(<Py_ssize_t>NR, gemm.n - col0)
    requantize_int64_tile(tile, row0, rows, col0, cols, epilogue, unit)


cdef enum:
    # A short block of up to this many rows runs on microkernel_rows; with
    # more, on the full kernel over the zeroed block.  A pass of three to
    # five rows reads as many panel vectors per group as the full kernel for
    # fewer multiply-adds, and where the panel streams from L2 it is no
    # faster.
    SHORT_BLOCK_ROWS = 2
