# Packing A: MR rows of A' per block of K, contiguous in the variant's
# A_BYTES, from where they lie (a matrix's rows or a convolution's runs).
# Needs _qgemm.pxi's Gemm.

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


cdef extern from "qops_gemm_pack_a.h":
    void copy_short "qops_copy_short"(uint8_t* target, const uint8_t* source, uint8_t flip,
                                      int wide) noexcept nogil
    # count bytes of source ^ flip (a channels-last image's run of channels).
    void copy_flipped "qops_copy_flipped"(uint8_t* target, const uint8_t* source,
                                          Py_ssize_t count, uint8_t flip) noexcept nogil


cdef extern from "qops_gemm_pack_a.h":
    void spread_pairs "qops_spread_pairs"(uint8_t* row, Py_ssize_t pairs) noexcept nogil


cdef inline void copy_widened(uint8_t* target, const uint8_t* source, Py_ssize_t count,
                              uint8_t flip) noexcept nogil:
    """copy_values for int16 A' (A_BYTES 2): whole runs of A_SLACK values by
    copy_short, then the rest, rather than the compiler's loop, which peels
    a head and a tail around each run."""
    while count >= A_SLACK:
        copy_short(target, source, flip, True)
        target = target + 2 * A_SLACK
        source = source + A_SLACK
        count = count - A_SLACK
    copy_values(target, source, count, flip)


cdef inline void zero_row_end(uint8_t* target, Py_ssize_t count) noexcept nogil:
    """count (< 4) values of zeros: the padding of a packed row to a whole
    group, in stores of known size rather than a memset call per row."""
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
    # the general loop reloads them after each copy).
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
