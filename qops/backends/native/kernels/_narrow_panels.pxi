# microkernel_narrow (_variant.pxd) for the variants with no kernel of their
# own for it: each chunk of the narrowed panel widened into L1, then the
# variant's microkernel_rows.  Included by each such variant; those whose
# panels are bytes already (B_BYTES 1) are never given a narrowed panel.

from libc.stdint cimport int16_t, uint32_t

cdef enum:
    # Groups widened at a time: NR * 4 * 64 int16 (4 KiB with NR = 8) stay
    # in L1 beside the block's packed rows.
    NARROW_CHUNK_GROUPS = 64


cdef void microkernel_narrow(const uint8_t* a, Py_ssize_t a_stride, Py_ssize_t groups,
                             const int8_t* narrow, int32_t* tile,
                             Py_ssize_t rows) noexcept nogil:
    cdef int16_t wide[NARROW_CHUNK_GROUPS * 4 * NR]
    cdef int32_t part[MR * NR]
    cdef Py_ssize_t g0 = 0, count, i
    while g0 < groups:
        count = min(<Py_ssize_t>NARROW_CHUNK_GROUPS, groups - g0)
        for i in range(count * 4 * NR):
            wide[i] = narrow[g0 * 4 * NR + i]
        microkernel_rows(a + g0 * 4 * A_BYTES * A_SPREAD, a_stride, count,
                         <const int8_t*>wide, tile if g0 == 0 else part, rows)
        if g0:
            # Modulo 2**32, as the whole sums fit int32 (_variant.pxd).
            for i in range(rows * NR):
                tile[i] = <int32_t>(<uint32_t>tile[i] + <uint32_t>part[i])
        g0 += count
