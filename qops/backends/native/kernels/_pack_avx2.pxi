# Packing four rows of B into a panel of quads ([group][column][4 k], B_BYTES
# 1) with AVX2 byte and word unpacks, for the AMX variant (the AVX-512 VNNI
# one packs with its own zmm unpacks).  Cython names of their own keep these
# declarations apart from a variant's.

cdef extern from "<immintrin.h>" nogil:
    ctypedef struct pack_vector "__m256i":
        pass
    pack_vector pack_bytes "_mm256_set1_epi8"(char value)
    pack_vector pack_words "_mm256_set1_epi16"(short value)
    pack_vector pack_xor "_mm256_xor_si256"(pack_vector a, pack_vector b)
    pack_vector interleave_low_bytes "_mm256_unpacklo_epi8"(pack_vector a, pack_vector b)
    pack_vector interleave_high_bytes "_mm256_unpackhi_epi8"(pack_vector a, pack_vector b)
    pack_vector interleave_low_words "_mm256_unpacklo_epi16"(pack_vector a, pack_vector b)
    pack_vector interleave_high_words "_mm256_unpackhi_epi16"(pack_vector a, pack_vector b)
    pack_vector join_halves "_mm256_permute2x128_si256"(pack_vector a, pack_vector b, int control)
    pack_vector pair_sums "_mm256_maddubs_epi16"(pack_vector unsigned_bytes,
                                                 pack_vector signed_bytes)
    pack_vector quad_sums "_mm256_madd_epi16"(pack_vector a, pack_vector b)
    pack_vector add_lanes "_mm256_add_epi32"(pack_vector a, pack_vector b)

cdef extern from "qops_pack_avx2.h":
    pack_vector pack_load "qops_pack_load"(const void* p) nogil
    void pack_store "qops_pack_store"(void* p, pack_vector value) nogil


cdef inline void add_column_sums(int32_t* sums, pack_vector packed) noexcept nogil:
    """sums[c] += the four signed bytes of column c (8 columns): maddubs pairs
    them with ones (|pair| <= 256, no saturation), madd adds the pairs."""
    cdef pack_vector total = quad_sums(pair_sums(pack_bytes(1), packed), pack_words(1))
    pack_store(sums, add_lanes(pack_load(sums), total))


cdef inline void pack_quads32(const uint8_t* row0, const uint8_t* row1, const uint8_t* row2,
                              const uint8_t* row3, uint8_t flip, int8_t* target,
                              int32_t* sums) noexcept nogil:
    """32 columns of four rows into one group of a panel: column c's bytes
    (row0..row3) at target[4c..4c+3]; sums[c] += their sum as signed bytes."""
    cdef pack_vector mask = pack_bytes(<char>flip)
    cdef pack_vector a0 = pack_xor(pack_load(row0), mask)
    cdef pack_vector a1 = pack_xor(pack_load(row1), mask)
    cdef pack_vector a2 = pack_xor(pack_load(row2), mask)
    cdef pack_vector a3 = pack_xor(pack_load(row3), mask)
    # Within each 128-bit half: rows 0/1 and 2/3 byte-interleaved, then the
    # pairs word-interleaved into 4-byte columns.
    cdef pack_vector low01 = interleave_low_bytes(a0, a1)
    cdef pack_vector high01 = interleave_high_bytes(a0, a1)
    cdef pack_vector low23 = interleave_low_bytes(a2, a3)
    cdef pack_vector high23 = interleave_high_bytes(a2, a3)
    cdef pack_vector q0 = interleave_low_words(low01, low23)    # columns 0-3 | 16-19
    cdef pack_vector q1 = interleave_high_words(low01, low23)   # columns 4-7 | 20-23
    cdef pack_vector q2 = interleave_low_words(high01, high23)  # columns 8-11 | 24-27
    cdef pack_vector q3 = interleave_high_words(high01, high23) # columns 12-15 | 28-31
    cdef pack_vector s0 = join_halves(q0, q1, 0x20)
    cdef pack_vector s1 = join_halves(q2, q3, 0x20)
    cdef pack_vector s2 = join_halves(q0, q1, 0x31)
    cdef pack_vector s3 = join_halves(q2, q3, 0x31)
    pack_store(target, s0)
    pack_store(target + 32, s1)
    pack_store(target + 64, s2)
    pack_store(target + 96, s3)
    add_column_sums(sums, s0)
    add_column_sums(sums + 8, s1)
    add_column_sums(sums + 16, s2)
    add_column_sums(sums + 24, s3)


cdef void pack_groups(const uint8_t* rows, Py_ssize_t ldb, Py_ssize_t count, uint8_t flip,
                      int8_t* target, int32_t* sums) noexcept nogil:
    """NR columns of 4 * count rows into count groups of a panel, 32 columns
    of a group at a time (pack_quads32)."""
    cdef Py_ssize_t g, c
    for g in range(count):
        for c in range(0, NR, 32):
            pack_quads32(rows + c, rows + ldb + c, rows + 2 * ldb + c, rows + 3 * ldb + c, flip,
                         target + 4 * c, sums + c)
        rows += 4 * ldb
        target += 4 * NR
