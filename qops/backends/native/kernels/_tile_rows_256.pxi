# Generated from _tile_rows.pxi.tp by tools/generate_kernels.py: edit the template.
cdef inline void tile_rows(const uint8_t* a, Py_ssize_t a_stride, Py_ssize_t groups,
                           const int8_t* b, int32_t* tile, int rows, bint add) noexcept nogil:
    """The first `rows` (1 to MR) rows of a micro-tile in one pass over the
    panel (added to the tile's sums with `add`): per step, the panel's two
    vectors and each row's four bytes of A broadcast, two multiply_add a
    row; lane c of a row's accumulators is column c's sum, stored as it is.
    Inlined with `rows` and `add` constants: MR for the micro-kernel, fewer
    for microkernel_rows (_short_rows.pxi), each copy with only its own
    rows' registers."""
    cdef __m256i c00 = initial(tile + 0 * NR, add and rows > 0)
    cdef __m256i c01 = initial(tile + 0 * NR + 8, add and rows > 0)
    cdef __m256i c10 = initial(tile + 1 * NR, add and rows > 1)
    cdef __m256i c11 = initial(tile + 1 * NR + 8, add and rows > 1)
    cdef __m256i c20 = initial(tile + 2 * NR, add and rows > 2)
    cdef __m256i c21 = initial(tile + 2 * NR + 8, add and rows > 2)
    cdef __m256i c30 = initial(tile + 3 * NR, add and rows > 3)
    cdef __m256i c31 = initial(tile + 3 * NR + 8, add and rows > 3)
    cdef __m256i c40 = initial(tile + 4 * NR, add and rows > 4)
    cdef __m256i c41 = initial(tile + 4 * NR + 8, add and rows > 4)
    cdef __m256i c50 = initial(tile + 5 * NR, add and rows > 5)
    cdef __m256i c51 = initial(tile + 5 * NR + 8, add and rows > 5)
    cdef __m256i b0, b1, x
    cdef Py_ssize_t g, s, step
    cdef const uint8_t* a0 = a
    cdef const uint8_t* a1 = a + a_stride
    cdef const uint8_t* a2 = a + 2 * a_stride
    cdef const uint8_t* a3 = a + 3 * a_stride
    cdef const uint8_t* a4 = a + 4 * a_stride
    cdef const uint8_t* a5 = a + 5 * a_stride
    # A group's steps in one iteration (two for AVX2): the loop's own
    # instructions once a group, where the loop is bound by the instructions
    # it issues.
    for g in range(groups):
      for s in range(STEPS_PER_GROUP):
        step = STEPS_PER_GROUP * g + s
        b0 = _mm256_loadu_si256(b)
        b1 = _mm256_loadu_si256(b + 32)
        in_register(b0)
        in_register(b1)
        x = broadcast_step(a0, step)
        c00 = multiply_add(c00, x, b0)
        c01 = multiply_add(c01, x, b1)
        if rows > 1:
            x = broadcast_step(a1, step)
            c10 = multiply_add(c10, x, b0)
            c11 = multiply_add(c11, x, b1)
        if rows > 2:
            x = broadcast_step(a2, step)
            c20 = multiply_add(c20, x, b0)
            c21 = multiply_add(c21, x, b1)
        if rows > 3:
            x = broadcast_step(a3, step)
            c30 = multiply_add(c30, x, b0)
            c31 = multiply_add(c31, x, b1)
        if rows > 4:
            x = broadcast_step(a4, step)
            c40 = multiply_add(c40, x, b0)
            c41 = multiply_add(c41, x, b1)
        if rows > 5:
            x = broadcast_step(a5, step)
            c50 = multiply_add(c50, x, b0)
            c51 = multiply_add(c51, x, b1)
        b += 64
    store_sums_row(tile + 0 * NR, c00, c01)
    if rows > 1:
        store_sums_row(tile + 1 * NR, c10, c11)
    if rows > 2:
        store_sums_row(tile + 2 * NR, c20, c21)
    if rows > 3:
        store_sums_row(tile + 3 * NR, c30, c31)
    if rows > 4:
        store_sums_row(tile + 4 * NR, c40, c41)
    if rows > 5:
        store_sums_row(tile + 5 * NR, c50, c51)
