# Generated from _tile_rows.pxi.tp by tools/generate_kernels.py: edit the template.
cdef inline void tile_rows(const uint8_t* a, Py_ssize_t a_stride, Py_ssize_t groups,
                           const int8_t* b, int32_t* tile, int rows, bint add) noexcept nogil:
    """The first `rows` (1 to MR) rows of a micro-tile in one pass over the
    panel (added to the tile's sums with `add`): per group of four k, the
    panel's four vectors of 16 columns and each row's four bytes of A
    broadcast, four vpdpbusd a row.  Inlined with `rows` and `add`
    constants: MR for the micro-kernel, fewer for microkernel_rows
    (_short_rows.pxi), each copy with only its own rows' registers."""
    cdef __m512i c00 = initial(tile + 0 * NR, add and rows > 0)
    cdef __m512i c01 = initial(tile + 0 * NR + 16, add and rows > 0)
    cdef __m512i c02 = initial(tile + 0 * NR + 32, add and rows > 0)
    cdef __m512i c03 = initial(tile + 0 * NR + 48, add and rows > 0)
    cdef __m512i c10 = initial(tile + 1 * NR, add and rows > 1)
    cdef __m512i c11 = initial(tile + 1 * NR + 16, add and rows > 1)
    cdef __m512i c12 = initial(tile + 1 * NR + 32, add and rows > 1)
    cdef __m512i c13 = initial(tile + 1 * NR + 48, add and rows > 1)
    cdef __m512i c20 = initial(tile + 2 * NR, add and rows > 2)
    cdef __m512i c21 = initial(tile + 2 * NR + 16, add and rows > 2)
    cdef __m512i c22 = initial(tile + 2 * NR + 32, add and rows > 2)
    cdef __m512i c23 = initial(tile + 2 * NR + 48, add and rows > 2)
    cdef __m512i c30 = initial(tile + 3 * NR, add and rows > 3)
    cdef __m512i c31 = initial(tile + 3 * NR + 16, add and rows > 3)
    cdef __m512i c32 = initial(tile + 3 * NR + 32, add and rows > 3)
    cdef __m512i c33 = initial(tile + 3 * NR + 48, add and rows > 3)
    cdef __m512i c40 = initial(tile + 4 * NR, add and rows > 4)
    cdef __m512i c41 = initial(tile + 4 * NR + 16, add and rows > 4)
    cdef __m512i c42 = initial(tile + 4 * NR + 32, add and rows > 4)
    cdef __m512i c43 = initial(tile + 4 * NR + 48, add and rows > 4)
    cdef __m512i c50 = initial(tile + 5 * NR, add and rows > 5)
    cdef __m512i c51 = initial(tile + 5 * NR + 16, add and rows > 5)
    cdef __m512i c52 = initial(tile + 5 * NR + 32, add and rows > 5)
    cdef __m512i c53 = initial(tile + 5 * NR + 48, add and rows > 5)
    cdef __m512i b0, b1, b2, b3, x
    cdef Py_ssize_t g
    cdef const uint8_t* a0 = a
    cdef const uint8_t* a1 = a + a_stride
    cdef const uint8_t* a2 = a + 2 * a_stride
    cdef const uint8_t* a3 = a + 3 * a_stride
    cdef const uint8_t* a4 = a + 4 * a_stride
    cdef const uint8_t* a5 = a + 5 * a_stride
    for g in range(0, 4 * groups, 4):
        b0 = _mm512_loadu_si512(b + 0)
        b1 = _mm512_loadu_si512(b + 64)
        b2 = _mm512_loadu_si512(b + 128)
        b3 = _mm512_loadu_si512(b + 192)
        in_register(b0)
        in_register(b1)
        in_register(b2)
        in_register(b3)
        x = broadcast4(a0 + g)
        c00 = _mm512_dpbusd_epi32(c00, x, b0)
        c01 = _mm512_dpbusd_epi32(c01, x, b1)
        c02 = _mm512_dpbusd_epi32(c02, x, b2)
        c03 = _mm512_dpbusd_epi32(c03, x, b3)
        if rows > 1:
            x = broadcast4(a1 + g)
            c10 = _mm512_dpbusd_epi32(c10, x, b0)
            c11 = _mm512_dpbusd_epi32(c11, x, b1)
            c12 = _mm512_dpbusd_epi32(c12, x, b2)
            c13 = _mm512_dpbusd_epi32(c13, x, b3)
        if rows > 2:
            x = broadcast4(a2 + g)
            c20 = _mm512_dpbusd_epi32(c20, x, b0)
            c21 = _mm512_dpbusd_epi32(c21, x, b1)
            c22 = _mm512_dpbusd_epi32(c22, x, b2)
            c23 = _mm512_dpbusd_epi32(c23, x, b3)
        if rows > 3:
            x = broadcast4(a3 + g)
            c30 = _mm512_dpbusd_epi32(c30, x, b0)
            c31 = _mm512_dpbusd_epi32(c31, x, b1)
            c32 = _mm512_dpbusd_epi32(c32, x, b2)
            c33 = _mm512_dpbusd_epi32(c33, x, b3)
        if rows > 4:
            x = broadcast4(a4 + g)
            c40 = _mm512_dpbusd_epi32(c40, x, b0)
            c41 = _mm512_dpbusd_epi32(c41, x, b1)
            c42 = _mm512_dpbusd_epi32(c42, x, b2)
            c43 = _mm512_dpbusd_epi32(c43, x, b3)
        if rows > 5:
            x = broadcast4(a5 + g)
            c50 = _mm512_dpbusd_epi32(c50, x, b0)
            c51 = _mm512_dpbusd_epi32(c51, x, b1)
            c52 = _mm512_dpbusd_epi32(c52, x, b2)
            c53 = _mm512_dpbusd_epi32(c53, x, b3)
        b += NR * 4
    store_sums_row(tile + 0 * NR, c00, c01, c02, c03)
    if rows > 1:
        store_sums_row(tile + 1 * NR, c10, c11, c12, c13)
    if rows > 2:
        store_sums_row(tile + 2 * NR, c20, c21, c22, c23)
    if rows > 3:
        store_sums_row(tile + 3 * NR, c30, c31, c32, c33)
    if rows > 4:
        store_sums_row(tile + 4 * NR, c40, c41, c42, c43)
    if rows > 5:
        store_sums_row(tile + 5 * NR, c50, c51, c52, c53)
