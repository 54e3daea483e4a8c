/* The GEMM's epilogues: a unit's bytes transposed into a column-major output. */
#ifndef QOPS_GEMM_EPILOGUES_H
#define QOPS_GEMM_EPILOGUES_H

/* A block of up to 16 rows by 16 columns of bytes (row i at source + i *
   pitch), each byte xor flip, transposed: column c's bytes, one per row, as a
   run at target + c * stride, for the first `columns` columns; each run
   `height` bytes.  With SSE2 (every x86-64), the four rounds of byte
   interleaving that transpose 16 x 16 bytes in registers: 16 loads, 64 unpacks
   and 16 stores where the 8 x 8 scalar transposes take about 350 operations.
   Nothing past row `height` is
   read (it may be another unit's), nor past a row's `columns` bytes unless all
   16 lie within the first `readable` bytes from source (a short block of an
   image's last positions, read whole where the next channel follows). */
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

#endif /* QOPS_GEMM_EPILOGUES_H */
