/* MatMulNBits: float32 rows of A times a weight matrix of 2-, 4- or 8-bit
   codes in blocks along K, the weights dequantized a panel at a time and
   never whole.

   The rule (qops/reference/n_bits.py): w = (float32(q) - zp) * s,
   rounded; each output the chain acc = fma(a[k], w[k], acc) over k
   ascending from 0; then acc + bias.  The kernels keep it by giving each
   output one lane of a 16-column vector and walking k in order, so the
   width a CPU multiplies at (16 lanes, two 8-lane halves, or one at a
   time) never changes a result, nor does the thread count (threads take
   whole panels).

   B is first interleaved by panels of 16 columns (qops_nbits_interleave):
   byte i of block j of columns n0 .. n0 + 15 at
   panels + ((panel * k_blocks + j) * blob + i) * 16 + c, so that one
   16-byte load holds a byte of each column.  Columns past N are zero. */
#ifndef QOPS_MATMUL_N_BITS_H
#define QOPS_MATMUL_N_BITS_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

#include "qops_rounding.h"
#if defined(__AVX2__)
#include "qops_ymm.h"
#endif

#define QOPS_NBITS_COLUMNS 16
/* k per dequantized tile: 64 x 16 float32, 4 KiB, stays in L1. */
#define QOPS_NBITS_TILE_K 64
/* Rows whose sums a task keeps between tiles: 64 x 16 float32. */
#define QOPS_NBITS_ROWS 64
/* Rows that share each load of a dequantized tile's row (qops_nbits_panel):
   their sums stay in registers, 6 x 2 ymm or 8 zmm. */
#if defined(__AVX512F__)
#define QOPS_NBITS_ROW_GROUP 8
#else
#define QOPS_NBITS_ROW_GROUP 6
#endif

#if defined(__AVX512F__) || defined(__AVX2__)
/* A block's codes QOPS_NBITS_PREFETCH bytes ahead of where they are read,
   and the scales eight blocks ahead: one or two rows of A read each byte of
   the weights once, from memory, and the hardware's own prefetching alone
   left level 4's one-row loop waiting on them. */
#define QOPS_NBITS_PREFETCH 2048
static inline void qops_nbits_prefetch_block(const uint8_t* block, ptrdiff_t bytes,
                                             const float* scales) {
    const char* ahead = (const char*)block + QOPS_NBITS_PREFETCH;
    for (ptrdiff_t line = 0; line < bytes; line += 64) _mm_prefetch(ahead + line, _MM_HINT_T0);
    _mm_prefetch((const char*)(scales + 8 * QOPS_NBITS_COLUMNS), _MM_HINT_T0);
}
#endif

/* Inlined with `rows` constant, so that each count keeps only its rows'
   vectors. */
#if defined(__GNUC__)
#define QOPS_NBITS_ROWS_INLINE static inline __attribute__((always_inline))
#else
#define QOPS_NBITS_ROWS_INLINE static inline
#endif

/* Sixteen float32 lanes, one per column of a panel, as each width holds them. */
#if defined(__AVX512F__)
typedef __m512 qops_nbits_v16;
#elif defined(__AVX2__) && defined(__FMA__)
typedef struct { __m256 low, high; } qops_nbits_v16;
#else
typedef struct { float lane[QOPS_NBITS_COLUMNS]; } qops_nbits_v16;
#endif

static inline qops_nbits_v16 qops_nbits_load(const float* values) {
#if defined(__AVX512F__)
    return _mm512_loadu_ps(values);
#elif defined(__AVX2__) && defined(__FMA__)
    qops_nbits_v16 v = {_mm256_loadu_ps(values), _mm256_loadu_ps(values + 8)};
    return v;
#else
    qops_nbits_v16 v;
    memcpy(v.lane, values, sizeof v.lane);
    return v;
#endif
}

static inline void qops_nbits_store(float* target, qops_nbits_v16 v) {
#if defined(__AVX512F__)
    _mm512_storeu_ps(target, v);
#elif defined(__AVX2__) && defined(__FMA__)
    _mm256_storeu_ps(target, v.low);
    _mm256_storeu_ps(target + 8, v.high);
#else
    memcpy(target, v.lane, sizeof v.lane);
#endif
}

/* acc + a * w in each lane, rounded once (fmaf). */
static inline qops_nbits_v16 qops_nbits_fma(qops_nbits_v16 acc, float a, qops_nbits_v16 w) {
#if defined(__AVX512F__)
    return _mm512_fmadd_ps(_mm512_set1_ps(a), w, acc);
#elif defined(__AVX2__) && defined(__FMA__)
    const __m256 broadcast = _mm256_set1_ps(a);
    qops_nbits_v16 r = {_mm256_fmadd_ps(broadcast, w.low, acc.low),
                        _mm256_fmadd_ps(broadcast, w.high, acc.high)};
    return r;
#else
    for (int c = 0; c < QOPS_NBITS_COLUMNS; c++) acc.lane[c] = fmaf(a, w.lane[c], acc.lane[c]);
    return acc;
#endif
}

/* Panels first_panel .. first_panel + count - 1 of B (n rows of k_blocks
   blobs of `blob` bytes, rows `row_stride` bytes apart) interleaved as
   above; columns past n are zero. */
static inline void qops_nbits_interleave(const uint8_t* b, ptrdiff_t n, ptrdiff_t k_blocks,
                                         ptrdiff_t blob, ptrdiff_t row_stride,
                                         ptrdiff_t first_panel, ptrdiff_t count,
                                         uint8_t* panels) {
    const ptrdiff_t bytes = k_blocks * blob;
    for (ptrdiff_t p = first_panel; p < first_panel + count; p++) {
        uint8_t* target = panels + p * bytes * QOPS_NBITS_COLUMNS;
        const uint8_t* source[QOPS_NBITS_COLUMNS];
        int present = 0;
        while (present < QOPS_NBITS_COLUMNS && p * QOPS_NBITS_COLUMNS + present < n) {
            source[present] = b + (p * QOPS_NBITS_COLUMNS + present) * row_stride;
            present++;
        }
        if (present < QOPS_NBITS_COLUMNS) {
            memset(target, 0, (size_t)(bytes * QOPS_NBITS_COLUMNS));
        }
        /* Sixteen read streams, one write stream. */
        for (ptrdiff_t i = 0; i < bytes; i++) {
            for (int c = 0; c < present; c++) target[i * QOPS_NBITS_COLUMNS + c] = source[c][i];
        }
    }
}

/* One block's dequantization at the width: its 16 zero points and scales,
   the code mask; one byte of each of 16 columns widened; and the weights of
   one code of those bytes, (q - zero) * scale. */
#if defined(__AVX512F__)
typedef struct { __m512 zero, scale; __m512i mask; } qops_nbits_block;
typedef __m512i qops_nbits_codes;
#elif defined(__AVX2__) && defined(__FMA__)
typedef struct { __m256 zero_low, zero_high, scale_low, scale_high; __m256i mask; }
    qops_nbits_block;
typedef struct { __m256i low, high; } qops_nbits_codes;
#else
typedef struct { const float* zero; const float* scale; int mask; } qops_nbits_block;
typedef struct { uint8_t byte[QOPS_NBITS_COLUMNS]; } qops_nbits_codes;
#endif

static inline qops_nbits_block qops_nbits_block_of(const float* zeros, const float* scales,
                                                   int bits) {
    const int mask = (1 << bits) - 1;
#if defined(__AVX512F__)
    qops_nbits_block block = {_mm512_loadu_ps(zeros), _mm512_loadu_ps(scales),
                              _mm512_set1_epi32(mask)};
#elif defined(__AVX2__) && defined(__FMA__)
    qops_nbits_block block = {_mm256_loadu_ps(zeros), _mm256_loadu_ps(zeros + 8),
                              _mm256_loadu_ps(scales), _mm256_loadu_ps(scales + 8),
                              _mm256_set1_epi32(mask)};
#else
    qops_nbits_block block = {zeros, scales, mask};
#endif
    return block;
}

static inline qops_nbits_codes qops_nbits_codes_of(const uint8_t* line) {
#if defined(__AVX512F__)
    return _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)line));
#elif defined(__AVX2__) && defined(__FMA__)
    const __m128i bytes = _mm_loadu_si128((const __m128i*)line);
    qops_nbits_codes codes = {_mm256_cvtepu8_epi32(bytes),
                              _mm256_cvtepu8_epi32(_mm_srli_si128(bytes, 8))};
    return codes;
#else
    qops_nbits_codes codes;
    memcpy(codes.byte, line, sizeof codes.byte);
    return codes;
#endif
}

/* The weights of the code `shift` bits up in each column's byte. */
static inline qops_nbits_v16 qops_nbits_weights(qops_nbits_codes codes, int shift,
                                                const qops_nbits_block* block) {
#if defined(__AVX512F__)
    const __m512i q = _mm512_and_si512(_mm512_srl_epi32(codes, _mm_cvtsi32_si128(shift)),
                                       block->mask);
    return _mm512_mul_ps(_mm512_sub_ps(_mm512_cvtepi32_ps(q), block->zero), block->scale);
#elif defined(__AVX2__) && defined(__FMA__)
    const __m128i count = _mm_cvtsi32_si128(shift);
    const __m256i low = _mm256_and_si256(_mm256_srl_epi32(codes.low, count), block->mask);
    const __m256i high = _mm256_and_si256(_mm256_srl_epi32(codes.high, count), block->mask);
    qops_nbits_v16 w = {
        _mm256_mul_ps(_mm256_sub_ps(_mm256_cvtepi32_ps(low), block->zero_low),
                      block->scale_low),
        _mm256_mul_ps(_mm256_sub_ps(_mm256_cvtepi32_ps(high), block->zero_high),
                      block->scale_high)};
    return w;
#else
    qops_nbits_v16 w;
    for (int c = 0; c < QOPS_NBITS_COLUMNS; c++) {
        const int q = (codes.byte[c] >> shift) & block->mask;
        w.lane[c] = ((float)q - block->zero[c]) * block->scale[c];
    }
    return w;
#endif
}

/* The weights k = k0 .. k0 + count - 1 of one block of one panel (k0 a
   multiple of the codes a byte holds), dequantized: tile[k - k0] holds the
   16 columns' (q - zero) * scale, zeros and scales the block's 16 values. */
static inline void qops_nbits_dequantize(const uint8_t* block, int bits, ptrdiff_t k0,
                                         ptrdiff_t count, const float* zeros,
                                         const float* scales, qops_nbits_v16* tile) {
    const int per_byte = 8 / bits;
    const qops_nbits_block parameters = qops_nbits_block_of(zeros, scales, bits);
    const uint8_t* bytes = block + (k0 / per_byte) * QOPS_NBITS_COLUMNS;
    for (ptrdiff_t i = 0; i * per_byte < count; i++) {
        const qops_nbits_codes codes = qops_nbits_codes_of(bytes + i * QOPS_NBITS_COLUMNS);
        for (int t = 0; t < per_byte && i * per_byte + t < count; t++) {
            tile[i * per_byte + t] = qops_nbits_weights(codes, t * bits, &parameters);
        }
    }
}

/* One row of A (row[t] for the tile's k, t < count: never past K) times
   the weights qops_nbits_dequantize would write, each used as it is made:
   the tile is never stored (one row of A is decoding's whole product). */
static inline qops_nbits_v16 qops_nbits_dequantize_row(const uint8_t* block, int bits,
                                                       ptrdiff_t k0, ptrdiff_t count,
                                                       const float* zeros, const float* scales,
                                                       const float* row, qops_nbits_v16 acc) {
    const int per_byte = 8 / bits;
    const qops_nbits_block parameters = qops_nbits_block_of(zeros, scales, bits);
    const uint8_t* bytes = block + (k0 / per_byte) * QOPS_NBITS_COLUMNS;
    for (ptrdiff_t i = 0; i * per_byte < count; i++) {
        const qops_nbits_codes codes = qops_nbits_codes_of(bytes + i * QOPS_NBITS_COLUMNS);
        for (int t = 0; t < per_byte && i * per_byte + t < count; t++) {
            acc = qops_nbits_fma(acc, row[i * per_byte + t],
                                 qops_nbits_weights(codes, t * bits, &parameters));
        }
    }
    return acc;
}

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
/* A line's 16 columns of 4-bit codes as float32: k even (low nibbles) and k
   odd (high nibbles). */
typedef struct { qops_nbits_v16 even, odd; } qops_nbits_line4;

static inline qops_nbits_line4 qops_nbits_line4_of(const uint8_t* line) {
#if defined(__AVX512F__)
    const __m512i bytes = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)line));
    qops_nbits_line4 codes = {
        _mm512_cvtepi32_ps(_mm512_and_si512(bytes, _mm512_set1_epi32(0x0F))),
        _mm512_cvtepi32_ps(_mm512_srli_epi32(bytes, 4))};
#else
    const __m128i nibbles = _mm_set1_epi8(0x0F);
    const __m128i bytes = _mm_loadu_si128((const __m128i*)line);
    const __m128i even = _mm_and_si128(bytes, nibbles);
    const __m128i odd = _mm_and_si128(_mm_srli_epi16(bytes, 4), nibbles);
    qops_nbits_line4 codes = {
        {_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(even)),
         _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(even, 8)))},
        {_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(odd)),
         _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(odd, 8)))}};
#endif
    return codes;
}

/* (code - zero) * scale, each step rounded as the rule's are. */
static inline qops_nbits_v16 qops_nbits_scaled(qops_nbits_v16 code, qops_nbits_v16 zero,
                                               qops_nbits_v16 scale) {
#if defined(__AVX512F__)
    return _mm512_mul_ps(_mm512_sub_ps(code, zero), scale);
#else
    qops_nbits_v16 w = {_mm256_mul_ps(_mm256_sub_ps(code.low, zero.low), scale.low),
                        _mm256_mul_ps(_mm256_sub_ps(code.high, zero.high), scale.high)};
    return w;
#endif
}

#if defined(__AVX512F__)
/* qops_nbits_row_panels_4bit where every zero point is a whole number from
   0 to 15 and every scale's sixteenth is exact (whole_zeros): the same
   values in two instructions fewer a line.  A code q or'd into the float
   2**23's mantissa is the float 2**23 + q, and 2**23 + 16 q from the high
   nibble left in place; so (q - zero) * scale is ((2**23 + q) - (2**23 +
   zero)) * scale, and from the high nibble ((2**23 + 16 q) - (2**23 + 16
   zero)) * (scale / 16): each difference exact (whole numbers below
   2**24), each product the exact (q - zero) * scale rounded once, as the
   rule's.  One vpternlogd a code instead of a mask or shift and a
   conversion. */
QOPS_NBITS_ROWS_INLINE void qops_nbits_row_panels_4bit_whole(
        const float* row, ptrdiff_t row_stride, int rows, ptrdiff_t k, const uint8_t* panel,
        ptrdiff_t panel_bytes, ptrdiff_t block_size, ptrdiff_t blob, const float* zeros,
        const float* scales, ptrdiff_t parameters, int panels, qops_nbits_v16* sums) {
    const __m512 two_23 = _mm512_set1_ps(8388608.0f);
    const __m512i two_23_bits = _mm512_set1_epi32(0x4B000000);
    const __m512i low_nibble = _mm512_set1_epi32(0x0F), high_nibble = _mm512_set1_epi32(0xF0);
    __m512 zero_low[4], zero_high[4], scale[4], scale_high[4];
    for (ptrdiff_t k0 = 0, j = 0; k0 < k; k0 += block_size, j++) {
        const ptrdiff_t count = k - k0 < block_size ? k - k0 : block_size;
        for (int p = 0; p < panels; p++) {
            const __m512 zero = _mm512_loadu_ps(zeros + p * parameters + j * QOPS_NBITS_COLUMNS);
            scale[p] = _mm512_loadu_ps(scales + p * parameters + j * QOPS_NBITS_COLUMNS);
            zero_low[p] = _mm512_add_ps(zero, two_23);
            zero_high[p] = _mm512_fmadd_ps(zero, _mm512_set1_ps(16.0f), two_23);
            scale_high[p] = _mm512_mul_ps(scale[p], _mm512_set1_ps(0.0625f));
        }
        const uint8_t* bytes = panel + j * blob * QOPS_NBITS_COLUMNS;
        const float* values = row + k0;
        for (ptrdiff_t i = 0; 2 * i < count; i++) {
            __m512i line[4];
            for (int p = 0; p < panels; p++) {
                line[p] = _mm512_cvtepu8_epi32(_mm_loadu_si128(
                    (const __m128i*)(bytes + p * panel_bytes + i * QOPS_NBITS_COLUMNS)));
                /* (line & 0x0F) | 2**23's bits: 0xEA is (a & b) | c. */
                const __m512 low = _mm512_castsi512_ps(
                    _mm512_ternarylogic_epi32(line[p], low_nibble, two_23_bits, 0xEA));
                const __m512 w = _mm512_mul_ps(_mm512_sub_ps(low, zero_low[p]), scale[p]);
                for (int r = 0; r < rows; r++) {
                    sums[p * rows + r] = _mm512_fmadd_ps(
                        _mm512_set1_ps(values[r * row_stride + 2 * i]), w, sums[p * rows + r]);
                }
            }
            if (2 * i + 1 == count) break;  /* a last block of odd length */
            for (int p = 0; p < panels; p++) {
                const __m512 high = _mm512_castsi512_ps(
                    _mm512_ternarylogic_epi32(line[p], high_nibble, two_23_bits, 0xEA));
                const __m512 w = _mm512_mul_ps(_mm512_sub_ps(high, zero_high[p]),
                                               scale_high[p]);
                for (int r = 0; r < rows; r++) {
                    sums[p * rows + r] = _mm512_fmadd_ps(
                        _mm512_set1_ps(values[r * row_stride + 2 * i + 1]), w,
                        sums[p * rows + r]);
                }
            }
        }
    }
}
#endif

/* `rows` rows of A (1 to 4, row_stride floats apart) over `panels` (2 or
   4) neighbouring panels of 4-bit codes, both constants where it is
   inlined; panel p's chain of FMAs for row r in sums[p * rows + r]: a
   line's two k from one load, each weight made once for every row, with no
   shift counts or code loop to branch on (the general loop spent more on
   them than on its arithmetic); every chain the same steps in the same
   order as qops_nbits_row_two_panels' general loop.  whole_zeros: see
   qops_nbits_row_panels_4bit_whole (AVX-512 takes it; other widths need
   not). */
QOPS_NBITS_ROWS_INLINE void qops_nbits_row_panels_4bit(
        const float* row, ptrdiff_t row_stride, int rows, ptrdiff_t k, const uint8_t* panel,
        ptrdiff_t panel_bytes, ptrdiff_t block_size, ptrdiff_t blob, const float* zeros,
        const float* scales, ptrdiff_t parameters, int panels, int whole_zeros,
        qops_nbits_v16* sums) {
#if defined(__AVX512F__)
    if (whole_zeros) {
        qops_nbits_row_panels_4bit_whole(row, row_stride, rows, k, panel, panel_bytes,
                                         block_size, blob, zeros, scales, parameters, panels,
                                         sums);
        return;
    }
#else
    (void)whole_zeros;
#endif
    qops_nbits_v16 zero[4], scale[4];
    for (ptrdiff_t k0 = 0, j = 0; k0 < k; k0 += block_size, j++) {
        const ptrdiff_t count = k - k0 < block_size ? k - k0 : block_size;
        for (int p = 0; p < panels; p++) {
            zero[p] = qops_nbits_load(zeros + p * parameters + j * QOPS_NBITS_COLUMNS);
            scale[p] = qops_nbits_load(scales + p * parameters + j * QOPS_NBITS_COLUMNS);
        }
        const uint8_t* bytes = panel + j * blob * QOPS_NBITS_COLUMNS;
        const float* values = row + k0;
        for (ptrdiff_t i = 0; 2 * i < count; i++) {
            qops_nbits_line4 line[4];
            for (int p = 0; p < panels; p++) {
                line[p] = qops_nbits_line4_of(bytes + p * panel_bytes + i * QOPS_NBITS_COLUMNS);
                const qops_nbits_v16 w = qops_nbits_scaled(line[p].even, zero[p], scale[p]);
                for (int r = 0; r < rows; r++) {
                    sums[p * rows + r] = qops_nbits_fma(sums[p * rows + r],
                                                        values[r * row_stride + 2 * i], w);
                }
            }
            if (2 * i + 1 == count) break;  /* a last block of odd length */
            for (int p = 0; p < panels; p++) {
                const qops_nbits_v16 w = qops_nbits_scaled(line[p].odd, zero[p], scale[p]);
                for (int r = 0; r < rows; r++) {
                    sums[p * rows + r] = qops_nbits_fma(sums[p * rows + r],
                                                        values[r * row_stride + 2 * i + 1], w);
                }
            }
        }
    }
}
#endif

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
/* qops_nbits_row_panels_4bit's sums for `rows` rows over `panels` panels
   (rows * panels at most 8; constants where it is inlined), each row's
   outputs plus the bias: the 16 columns of each panel but the last and
   `columns` of the last, from out + r * out_stride. */
QOPS_NBITS_ROWS_INLINE void qops_nbits_rows_panels_4bit_out(
        const float* a, ptrdiff_t a_stride, int rows, int panels, ptrdiff_t k,
        const uint8_t* panel, ptrdiff_t panel_bytes, ptrdiff_t block_size, ptrdiff_t blob,
        const float* zeros, const float* scales, ptrdiff_t parameters, int whole_zeros,
        const float* bias, ptrdiff_t columns, float* out, ptrdiff_t out_stride) {
    static const float no_sums[QOPS_NBITS_COLUMNS];
    qops_nbits_v16 sums[8];
    for (int i = 0; i < panels * rows; i++) sums[i] = qops_nbits_load(no_sums);
    qops_nbits_row_panels_4bit(a, a_stride, rows, k, panel, panel_bytes, block_size, blob, zeros,
                               scales, parameters, panels, whole_zeros, sums);
    for (int r = 0; r < rows; r++) {
        float line[4 * QOPS_NBITS_COLUMNS];
        for (int p = 0; p < panels; p++) {
            qops_nbits_store(line + p * QOPS_NBITS_COLUMNS, sums[p * rows + r]);
        }
        for (ptrdiff_t c = 0; c < (panels - 1) * QOPS_NBITS_COLUMNS + columns; c++) {
            out[r * out_stride + c] = bias ? line[c] + bias[c] : line[c];
        }
    }
}
#endif

/* One row of A over two neighbouring panels (the second panel_bytes after
   the first, its parameters `parameters` floats after the first's): the
   two panels' chains of FMAs are independent, so each waits less on its
   last FMA.  Outputs as qops_nbits_panel gives them: 16 of the first panel,
   `columns` of the second, at out and out + 16. */
static inline void qops_nbits_row_two_panels(const float* row, ptrdiff_t k,
                                             const uint8_t* panel, ptrdiff_t panel_bytes,
                                             int bits, ptrdiff_t block_size, ptrdiff_t blob,
                                             const float* zeros, const float* scales,
                                             ptrdiff_t parameters, int whole_zeros,
                                             const float* bias, ptrdiff_t columns, float* out) {
    static const float no_sums[QOPS_NBITS_COLUMNS];
    const int per_byte = 8 / bits;
    qops_nbits_v16 first = qops_nbits_load(no_sums), second = first;
#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
    if (bits == 4) {
        qops_nbits_rows_panels_4bit_out(row, 0, 1, 2, k, panel, panel_bytes, block_size, blob,
                                        zeros, scales, parameters, whole_zeros, bias, columns,
                                        out, 0);
        return;
    }
#else
    (void)whole_zeros;  /* one form without AVX2 and FMA */
#endif
    for (ptrdiff_t k0 = 0, j = 0; k0 < k; k0 += block_size, j++) {
        const ptrdiff_t count = k - k0 < block_size ? k - k0 : block_size;
        const qops_nbits_block first_block = qops_nbits_block_of(
            zeros + j * QOPS_NBITS_COLUMNS, scales + j * QOPS_NBITS_COLUMNS, bits);
        const qops_nbits_block second_block = qops_nbits_block_of(
            zeros + parameters + j * QOPS_NBITS_COLUMNS,
            scales + parameters + j * QOPS_NBITS_COLUMNS, bits);
        const uint8_t* bytes = panel + j * blob * QOPS_NBITS_COLUMNS;
        for (ptrdiff_t i = 0; i * per_byte < count; i++) {
            const qops_nbits_codes first_codes = qops_nbits_codes_of(
                bytes + i * QOPS_NBITS_COLUMNS);
            const qops_nbits_codes second_codes = qops_nbits_codes_of(
                bytes + panel_bytes + i * QOPS_NBITS_COLUMNS);
            for (int t = 0; t < per_byte && i * per_byte + t < count; t++) {
                const float value = row[k0 + i * per_byte + t];
                first = qops_nbits_fma(first, value,
                                       qops_nbits_weights(first_codes, t * bits, &first_block));
                second = qops_nbits_fma(second, value, qops_nbits_weights(
                    second_codes, t * bits, &second_block));
            }
        }
    }
    float line[2 * QOPS_NBITS_COLUMNS];
    qops_nbits_store(line, first);
    qops_nbits_store(line + QOPS_NBITS_COLUMNS, second);
    for (ptrdiff_t c = 0; c < QOPS_NBITS_COLUMNS + columns; c++) {
        out[c] = bias ? line[c] + bias[c] : line[c];
    }
}

/* Panels a row of A takes at a time: four where AVX-512 has the registers
   for four chains of FMAs (with two, each waits on its last FMA's latency),
   else two. */
#if defined(__AVX512F__)
#define QOPS_NBITS_ROW_PANELS 4
#else
#define QOPS_NBITS_ROW_PANELS 2
#endif

/* One row of A over four neighbouring panels, as two calls of
   qops_nbits_row_two_panels give them (the same values): 48 columns of the
   first three, `columns` of the fourth, at out. */
static inline void qops_nbits_row_four_panels(const float* row, ptrdiff_t k,
                                              const uint8_t* panel, ptrdiff_t panel_bytes,
                                              int bits, ptrdiff_t block_size, ptrdiff_t blob,
                                              const float* zeros, const float* scales,
                                              ptrdiff_t parameters, int whole_zeros,
                                              const float* bias, ptrdiff_t columns, float* out) {
#if defined(__AVX512F__)
    if (bits == 4) {
        qops_nbits_rows_panels_4bit_out(row, 0, 1, 4, k, panel, panel_bytes, block_size, blob,
                                        zeros, scales, parameters, whole_zeros, bias, columns,
                                        out, 0);
        return;
    }
#endif
    qops_nbits_row_two_panels(row, k, panel, panel_bytes, bits, block_size, blob, zeros, scales,
                              parameters, whole_zeros, bias, QOPS_NBITS_COLUMNS, out);
    qops_nbits_row_two_panels(row, k, panel + 2 * panel_bytes, panel_bytes, bits, block_size,
                              blob, zeros + 2 * parameters, scales + 2 * parameters, parameters,
                              whole_zeros, bias ? bias + 2 * QOPS_NBITS_COLUMNS : NULL, columns,
                              out + 2 * QOPS_NBITS_COLUMNS);
}

/* Rows of A a panel pass streams together, each weight made once for all
   of them: up to four where AVX-512 has the registers for their chains
   over two panels (and the weights' parameters); three with AVX2, whose
   sixteen registers spill some of a third row's chains and still beat the
   tiles, while a fourth row spilled more and lost to them
   (docs/performance_notes.rst); else one. */
#if defined(__AVX512F__)
#define QOPS_NBITS_STREAM_ROWS 4
#elif defined(__AVX2__) && defined(__FMA__)
#define QOPS_NBITS_STREAM_ROWS 3
#else
#define QOPS_NBITS_STREAM_ROWS 1
#endif

/* `rows` rows of A, a_stride apart, over two neighbouring panels, as
   qops_nbits_row_two_panels gives each row (the same values): row r's 16
   columns of the first panel and `columns` of the second at out + r *
   out_stride.  Up to QOPS_NBITS_STREAM_ROWS rows of 4-bit codes stream
   together; other codes, or more rows, take the rows in turn. */
static inline void qops_nbits_rows_two_panels(const float* a, ptrdiff_t a_stride,
                                              ptrdiff_t rows, ptrdiff_t k,
                                              const uint8_t* panel, ptrdiff_t panel_bytes,
                                              int bits, ptrdiff_t block_size, ptrdiff_t blob,
                                              const float* zeros, const float* scales,
                                              ptrdiff_t parameters, int whole_zeros,
                                              const float* bias, ptrdiff_t columns, float* out,
                                              ptrdiff_t out_stride) {
#if QOPS_NBITS_STREAM_ROWS > 1
    if (bits == 4 && rows >= 2 && rows <= QOPS_NBITS_STREAM_ROWS) {
        if (rows == 2) {
            qops_nbits_rows_panels_4bit_out(a, a_stride, 2, 2, k, panel, panel_bytes, block_size,
                                            blob, zeros, scales, parameters, whole_zeros, bias,
                                            columns, out, out_stride);
        } else if (rows == 3) {
            qops_nbits_rows_panels_4bit_out(a, a_stride, 3, 2, k, panel, panel_bytes, block_size,
                                            blob, zeros, scales, parameters, whole_zeros, bias,
                                            columns, out, out_stride);
        } else {
            qops_nbits_rows_panels_4bit_out(a, a_stride, 4, 2, k, panel, panel_bytes, block_size,
                                            blob, zeros, scales, parameters, whole_zeros, bias,
                                            columns, out, out_stride);
        }
        return;
    }
#endif
    for (ptrdiff_t r = 0; r < rows; r++) {
        qops_nbits_row_two_panels(a + r * a_stride, k, panel, panel_bytes, bits, block_size,
                                  blob, zeros, scales, parameters, whole_zeros, bias, columns,
                                  out + r * out_stride);
    }
}

/* One panel of 16 columns for rows 0 .. rows - 1 of A (float32, rows
   a_stride apart), K = k: out[r * out_stride + c] for the first `columns`
   columns.  zeros and scales: the panel's 16 columns' values for each
   block in turn (k_blocks x 16 float32); bias: 16 values or NULL. */
static inline void qops_nbits_panel(const float* a, ptrdiff_t a_stride, ptrdiff_t rows,
                                    const uint8_t* panel, ptrdiff_t k, int bits,
                                    ptrdiff_t block_size, ptrdiff_t blob, const float* zeros,
                                    const float* scales, const float* bias, ptrdiff_t columns,
                                    float* out, ptrdiff_t out_stride) {
    static const float no_sums[QOPS_NBITS_COLUMNS];
    qops_nbits_v16 tile[QOPS_NBITS_TILE_K];
    qops_nbits_v16 sums[QOPS_NBITS_ROWS];
    /* A tile never straddles two blocks: both are powers of two. */
    const ptrdiff_t step = block_size < QOPS_NBITS_TILE_K ? block_size : QOPS_NBITS_TILE_K;
    for (ptrdiff_t r0 = 0; r0 < rows; r0 += QOPS_NBITS_ROWS) {
        const ptrdiff_t height = rows - r0 < QOPS_NBITS_ROWS ? rows - r0 : QOPS_NBITS_ROWS;
        for (ptrdiff_t r = 0; r < height; r++) sums[r] = qops_nbits_load(no_sums);
        for (ptrdiff_t k0 = 0; k0 < k; k0 += step) {
            const ptrdiff_t j = k0 / block_size;
            const ptrdiff_t count = k - k0 < step ? k - k0 : step;
            if (height == 1) {
                sums[0] = qops_nbits_dequantize_row(
                    panel + j * blob * QOPS_NBITS_COLUMNS, bits, k0 - j * block_size, count,
                    zeros + j * QOPS_NBITS_COLUMNS, scales + j * QOPS_NBITS_COLUMNS,
                    a + r0 * a_stride + k0, sums[0]);
                continue;
            }
            qops_nbits_dequantize(panel + j * blob * QOPS_NBITS_COLUMNS, bits,
                                  k0 - j * block_size, count, zeros + j * QOPS_NBITS_COLUMNS,
                                  scales + j * QOPS_NBITS_COLUMNS, tile);
            ptrdiff_t r = 0;
            /* QOPS_NBITS_ROW_GROUP rows at a time, each tile row loaded once
               for all their sums: enough chains of FMAs that none waits on
               its last (four rows, eight chains of AVX2, had none to spare). */
            for (; r + QOPS_NBITS_ROW_GROUP <= height; r += QOPS_NBITS_ROW_GROUP) {
                const float* row = a + (r0 + r) * a_stride + k0;
                qops_nbits_v16 group[QOPS_NBITS_ROW_GROUP];
                for (int g = 0; g < QOPS_NBITS_ROW_GROUP; g++) group[g] = sums[r + g];
                for (ptrdiff_t t = 0; t < count; t++) {
                    const qops_nbits_v16 w = tile[t];
                    for (int g = 0; g < QOPS_NBITS_ROW_GROUP; g++) {
                        group[g] = qops_nbits_fma(group[g], row[g * a_stride + t], w);
                    }
                }
                for (int g = 0; g < QOPS_NBITS_ROW_GROUP; g++) sums[r + g] = group[g];
            }
            /* Four rows at a time: each tile row loaded once for four sums. */
            for (; r + 4 <= height; r += 4) {
                const float* row = a + (r0 + r) * a_stride + k0;
                qops_nbits_v16 s0 = sums[r], s1 = sums[r + 1], s2 = sums[r + 2];
                qops_nbits_v16 s3 = sums[r + 3];
                for (ptrdiff_t t = 0; t < count; t++) {
                    const qops_nbits_v16 w = tile[t];
                    s0 = qops_nbits_fma(s0, row[t], w);
                    s1 = qops_nbits_fma(s1, row[a_stride + t], w);
                    s2 = qops_nbits_fma(s2, row[2 * a_stride + t], w);
                    s3 = qops_nbits_fma(s3, row[3 * a_stride + t], w);
                }
                sums[r] = s0;
                sums[r + 1] = s1;
                sums[r + 2] = s2;
                sums[r + 3] = s3;
            }
            for (; r < height; r++) {
                const float* row = a + (r0 + r) * a_stride + k0;
                qops_nbits_v16 acc = sums[r];
                for (ptrdiff_t t = 0; t < count; t++) acc = qops_nbits_fma(acc, row[t], tile[t]);
                sums[r] = acc;
            }
        }
        for (ptrdiff_t r = 0; r < height; r++) {
            float line[QOPS_NBITS_COLUMNS];
            float* target = out + (r0 + r) * out_stride;
            qops_nbits_store(line, sums[r]);
            for (ptrdiff_t c = 0; c < columns; c++) target[c] = bias ? line[c] + bias[c] : line[c];
        }
    }
}

/* Many rows of A (prefill): a task takes up to QOPS_NBITS_PREFILL_ROWS rows
   and a few panels.  The rows are first packed in groups of
   QOPS_NBITS_ROW_GROUP, each group's values k-major and zero past the last
   row (qops_nbits_pack_rows), so that a group's broadcasts read one stream
   in order, every group is whole (no slower loop for a remainder of rows),
   and each tile of a panel is dequantized once for all the task's rows.
   K runs in tiles of QOPS_NBITS_PREFILL_K, and each tile of the rows serves
   all the task's panels while it is in cache: streamed again for every
   panel, the rows of A were more bytes than the weights.  The sums are the
   rule's chains as qops_nbits_panel's (k ascending from 0.0f, one fmaf a
   weight), so the two give the same bits. */
#define QOPS_NBITS_PREFILL_ROWS (32 * QOPS_NBITS_ROW_GROUP)
/* k per tile of the prefill path: 256 x 16 float32 weights, 16 KiB. */
#define QOPS_NBITS_PREFILL_K 256
/* Most panels a prefill task takes: its sums, QOPS_NBITS_PREFILL_ROWS x 16
   float32 a panel, 96 KiB for eight (AVX2), stay in L2 beside a tile of
   the rows (192 x 256 float32, 192 KiB). */
#define QOPS_NBITS_PREFILL_PANELS 8
/* Fewest rows that take the prefill path: below, the weights' bytes set the
   time, and the rows a last group pads with zeros cost more than packing
   saves (docs/performance_notes.rst). */
#define QOPS_NBITS_PREFILL_MIN_ROWS 32

/* Rows first_row .. first_row + rows - 1 of A (row r at a + r * a_stride),
   as whole groups: packed[(g * k + kk) * QOPS_NBITS_ROW_GROUP + i] holds
   row g * QOPS_NBITS_ROW_GROUP + i at kk, zero for a row past `rows`. */
static inline void qops_nbits_pack_rows(const float* a, ptrdiff_t a_stride, ptrdiff_t rows,
                                        ptrdiff_t k, float* packed) {
    const ptrdiff_t groups = (rows + QOPS_NBITS_ROW_GROUP - 1) / QOPS_NBITS_ROW_GROUP;
    for (ptrdiff_t g = 0; g < groups; g++) {
        float* target = packed + g * k * QOPS_NBITS_ROW_GROUP;
        for (int i = 0; i < QOPS_NBITS_ROW_GROUP; i++) {
            const ptrdiff_t r = g * QOPS_NBITS_ROW_GROUP + i;
            float* column = target + i;
            if (r < rows) {
                const float* row = a + r * a_stride;
                for (ptrdiff_t kk = 0; kk < k; kk++) column[kk * QOPS_NBITS_ROW_GROUP] = row[kk];
            } else {
                for (ptrdiff_t kk = 0; kk < k; kk++) column[kk * QOPS_NBITS_ROW_GROUP] = 0.0f;
            }
        }
    }
}

/* `rows` (at most QOPS_NBITS_PREFILL_ROWS) packed rows times `count` panels
   (at most QOPS_NBITS_PREFILL_PANELS, panel_bytes apart from `panels`, their
   zeros and scales `parameters` floats apart): panel q's columns of those
   rows into out + 16 q (row r at out + r * out_stride; the first `columns`
   columns from there), plus bias where given.  sums: room for
   QOPS_NBITS_PREFILL_ROWS * count vectors, the caller's. */
static inline void qops_nbits_rows_panels(const float* packed, ptrdiff_t rows,
                                          const uint8_t* panels, ptrdiff_t panel_bytes,
                                          ptrdiff_t count, ptrdiff_t k, int bits,
                                          ptrdiff_t block_size, ptrdiff_t blob,
                                          const float* zeros, const float* scales,
                                          ptrdiff_t parameters, const float* bias,
                                          ptrdiff_t columns, float* out, ptrdiff_t out_stride,
                                          qops_nbits_v16* sums) {
    static const float no_sums[QOPS_NBITS_COLUMNS];
    qops_nbits_v16 tile[QOPS_NBITS_PREFILL_K];
    const ptrdiff_t groups = (rows + QOPS_NBITS_ROW_GROUP - 1) / QOPS_NBITS_ROW_GROUP;
    const ptrdiff_t height = groups * QOPS_NBITS_ROW_GROUP;
    /* Each dequantize call stays in one block: both are powers of two. */
    const ptrdiff_t step = block_size < QOPS_NBITS_TILE_K ? block_size : QOPS_NBITS_TILE_K;
    for (ptrdiff_t r = 0; r < count * height; r++) sums[r] = qops_nbits_load(no_sums);
    for (ptrdiff_t kc = 0; kc < k; kc += QOPS_NBITS_PREFILL_K) {
        const ptrdiff_t depth = k - kc < QOPS_NBITS_PREFILL_K ? k - kc : QOPS_NBITS_PREFILL_K;
        for (ptrdiff_t q = 0; q < count; q++) {
            const uint8_t* panel = panels + q * panel_bytes;
            for (ptrdiff_t k0 = kc; k0 < kc + depth; k0 += step) {
                const ptrdiff_t j = k0 / block_size;
                const ptrdiff_t span = kc + depth - k0 < step ? kc + depth - k0 : step;
                qops_nbits_dequantize(panel + j * blob * QOPS_NBITS_COLUMNS, bits,
                                      k0 - j * block_size, span,
                                      zeros + q * parameters + j * QOPS_NBITS_COLUMNS,
                                      scales + q * parameters + j * QOPS_NBITS_COLUMNS,
                                      tile + (k0 - kc));
            }
            for (ptrdiff_t g = 0; g < groups; g++) {
                const float* values = packed + (g * k + kc) * QOPS_NBITS_ROW_GROUP;
                qops_nbits_v16* group_sums = sums + q * height + g * QOPS_NBITS_ROW_GROUP;
                qops_nbits_v16 group[QOPS_NBITS_ROW_GROUP];
                for (int i = 0; i < QOPS_NBITS_ROW_GROUP; i++) group[i] = group_sums[i];
                for (ptrdiff_t t = 0; t < depth; t++) {
                    const qops_nbits_v16 w = tile[t];
                    for (int i = 0; i < QOPS_NBITS_ROW_GROUP; i++) {
                        group[i] = qops_nbits_fma(group[i], values[t * QOPS_NBITS_ROW_GROUP + i],
                                                  w);
                    }
                }
                for (int i = 0; i < QOPS_NBITS_ROW_GROUP; i++) group_sums[i] = group[i];
            }
        }
    }
    for (ptrdiff_t q = 0; q < count; q++) {
        const ptrdiff_t first = q * QOPS_NBITS_COLUMNS;
        const ptrdiff_t width = columns - first < QOPS_NBITS_COLUMNS ? columns - first
                                                                     : QOPS_NBITS_COLUMNS;
        for (ptrdiff_t r = 0; r < rows; r++) {
            float line[QOPS_NBITS_COLUMNS];
            float* target = out + r * out_stride + first;
            qops_nbits_store(line, sums[q * height + r]);
            for (ptrdiff_t c = 0; c < width; c++) {
                target[c] = bias ? line[c] + bias[first + c] : line[c];
            }
        }
    }
}

/* Accuracy level 4: A quantized to int8 per block (the caller's, with its
   scales and each block's sum of codes, rows padded with zero codes to whole
   blocks), and each block's integer sum exact:
       s = sum over the block of a_q[k] * q[k] - zp * sum of a_q   (int32)
       acc = fmaf(float32(s), float32(a_scale * scale), acc)   blocks in order
   then acc + bias.  Integers are exact whatever the compiler vectorizes, and
   the one float step a block is the same fmaf at every width.  Blocks are at
   most QOPS_NBITS_INT8_BLOCK, so that s fits int32 (127 * 255 * 4096). */
#define QOPS_NBITS_INT8_BLOCK 4096

/* Level 4's own layout of a panel's 4-bit codes: each 64 bytes (four lines,
   k 8g .. 8g + 7 of the 16 columns) rewritten so that column c's int32, at
   (c / 8) * 32 + (c % 8) * 4, holds k 8g .. 8g + 3 in its bytes' low
   nibbles and k 8g + 4 .. 8g + 7 in their high ones.  One mask then gives
   eight columns' four codes each, one int32 a column, as vpmaddubsw and
   vpdpbusd take them; the interleaved lines needed two unpacks and two
   lane moves for that.  Blocks are whole groups (a block is at least 16 k). */
static inline void qops_nbits_quads_layout(const uint8_t* lines, ptrdiff_t bytes,
                                           uint8_t* target) {
    ptrdiff_t g = 0;
    for (; g + 64 <= bytes; g += 64) {
        uint8_t group[64];
        for (int c = 0; c < QOPS_NBITS_COLUMNS; c++) {
            for (int i = 0; i < 4; i++) {
                /* Codes k = i and i + 4: lines i / 2 and i / 2 + 2, nibble i % 2. */
                const int shift = 4 * (i % 2);
                const int low = (lines[g + (i / 2) * QOPS_NBITS_COLUMNS + c] >> shift) & 0x0F;
                const int high = (lines[g + (i / 2 + 2) * QOPS_NBITS_COLUMNS + c] >> shift)
                                 & 0x0F;
                group[(c / 8) * 32 + (c % 8) * 4 + i] = (uint8_t)(low | high << 4);
            }
        }
        memcpy(target + g, group, sizeof group);
    }
    /* A panel is whole groups wherever the kernels read this layout; any
       other bytes are copied as they are, so that none is left unset. */
    if (g < bytes) memcpy(target + g, lines + g, (size_t)(bytes - g));
}

/* Many rows at level 4 on 4-bit codes (prefill): a task takes one panel and
   up to QOPS_NBITS_INT8_PREFILL_ROWS rows, packed in groups of four
   (qops_nbits_pack_codes).  Each run of a block's codes (in level 4's
   layout, qops_nbits_quads_layout) is unmasked once for all the task's
   rows, as quads of k per column (qops_nbits_quads_4bit), so that a row's
   four codes of A are one broadcast and each vpmaddubsw (vpdpbusd) makes a
   column's pair sums (its sum); a group's four rows share each load of the
   run.  Sums, block rule and order are qops_nbits_rows_4bit's, so the
   two give the same bits. */
/* Level 4's quantization of one row of A (qops.reference.n_bits.
   quantize_a_blocks, its steps in float32 in its order): per block of
   block_size values (zeros past k), amax = max |x|; a zero amax gives scale
   0 and codes 0, else scale = amax / 127, inverse = 127 / amax and each code
   rint(x * inverse) (ties to even) clamped to [-127, 127], a zero x's 0 where
   the inverse overflows; sums[j] is block j's sum of codes.  Returns 0
   where a value is not finite (the rule then does not apply and nothing
   written is read), else 1. */
static inline int qops_nbits_quantize_row(const float* x, ptrdiff_t k, ptrdiff_t block_size,
                                          int8_t* codes, float* scales, int32_t* sums) {
    const ptrdiff_t k_blocks = (k + block_size - 1) / block_size;
    int finite = 1;
    for (ptrdiff_t j = 0; j < k_blocks; j++) {
        const float* values = x + j * block_size;
        const ptrdiff_t count = k - j * block_size < block_size ? k - j * block_size
                                                                : block_size;
        float amax = 0.0f;
        for (ptrdiff_t i = 0; i < count; i++) {
            const float magnitude = fabsf(values[i]);
            amax = magnitude > amax ? magnitude : amax;
            /* NaN and the infinities: neither is below float32's largest value. */
            finite &= magnitude <= 3.40282347e38f;
        }
        int8_t* block_codes = codes + j * block_size;
        int32_t sum = 0;
        if (amax > 0.0f) {
            const float inverse = 127.0f / amax;
            scales[j] = amax / 127.0f;
            for (ptrdiff_t i = 0; i < count; i++) {
                float code = (values[i] * inverse + QOPS_ROUNDING_MAGIC) - QOPS_ROUNDING_MAGIC;
                /* 0 * inf (a subnormal amax's inverse) is NaN: the zero's code is 0. */
                code = code != code ? 0.0f : code;
                code = code < -127.0f ? -127.0f : code > 127.0f ? 127.0f : code;
                block_codes[i] = (int8_t)code;
                sum += (int32_t)code;
            }
        } else {
            scales[j] = 0.0f;
            for (ptrdiff_t i = 0; i < count; i++) block_codes[i] = 0;
        }
        for (ptrdiff_t i = count; i < block_size; i++) block_codes[i] = 0;
        sums[j] = sum;
    }
    return finite;
}

/* Rows a group: the kernel's window loop names its four rows' sums. */
#define QOPS_NBITS_INT8_GROUP 4
#define QOPS_NBITS_INT8_PREFILL_ROWS (32 * QOPS_NBITS_INT8_GROUP)
/* Fewest rows that take it (below, the weights' bytes set the time). */
#define QOPS_NBITS_INT8_PREFILL_MIN_ROWS 16
/* Quads per unpacked run: 64 x 64 bytes, 4 KiB in L1. */
#define QOPS_NBITS_INT8_RUN_QUADS 64

/* Rows of A's codes (padded_k apart, padded_k a multiple of 4) as whole
   groups of four: packed[(g * quads + q) * 4 + i] holds row 4 g + i's codes
   4 q .. 4 q + 3 as one int32, zero for a row past `rows`. */
static inline void qops_nbits_pack_codes(const int8_t* codes, ptrdiff_t padded_k, ptrdiff_t rows,
                                         int32_t* packed) {
    const ptrdiff_t quads = padded_k / 4;
    const ptrdiff_t groups = (rows + QOPS_NBITS_INT8_GROUP - 1) / QOPS_NBITS_INT8_GROUP;
    for (ptrdiff_t g = 0; g < groups; g++) {
        for (int i = 0; i < QOPS_NBITS_INT8_GROUP; i++) {
            const ptrdiff_t r = g * QOPS_NBITS_INT8_GROUP + i;
            int32_t* target = packed + g * quads * QOPS_NBITS_INT8_GROUP + i;
            for (ptrdiff_t q = 0; q < quads; q++) {
                int32_t four = 0;
                if (r < rows) memcpy(&four, codes + r * padded_k + 4 * q, sizeof four);
                target[q * QOPS_NBITS_INT8_GROUP] = four;
            }
        }
    }
}

#if defined(__AVX2__)
/* Codes k = 2p and 2p + 1 of 16 columns (their bytes interleaved at
   `lines`) as int16 pairs, eight columns a vector. */
typedef struct { __m256i half[2]; } qops_nbits_code_pairs;

static inline qops_nbits_code_pairs qops_nbits_code_pairs_of(const uint8_t* lines, ptrdiff_t p,
                                                             int bits, __m256i masks) {
    const int per_byte = 8 / bits;
    /* per_byte is 1, 2 or 4: shifts, not divisions. */
    const int byte_shift = bits == 8 ? 0 : bits == 4 ? 1 : 2;
    const ptrdiff_t first = 2 * p, second = 2 * p + 1;
    const __m128i first_bytes = _mm_loadu_si128(
        (const __m128i*)(lines + (first >> byte_shift) * QOPS_NBITS_COLUMNS));
    const __m128i second_bytes = _mm_loadu_si128(
        (const __m128i*)(lines + (second >> byte_shift) * QOPS_NBITS_COLUMNS));
    const __m128i first_shift = _mm_cvtsi32_si128((int)(first & (per_byte - 1)) * bits);
    const __m128i second_shift = _mm_cvtsi32_si128((int)(second & (per_byte - 1)) * bits);
    qops_nbits_code_pairs pairs;
    for (int half = 0; half < 2; half++) {
        const __m256i a = _mm256_cvtepu8_epi32(half ? _mm_srli_si128(first_bytes, 8)
                                                    : first_bytes);
        const __m256i b = _mm256_cvtepu8_epi32(half ? _mm_srli_si128(second_bytes, 8)
                                                    : second_bytes);
        const __m256i low = _mm256_and_si256(_mm256_srl_epi32(a, first_shift), masks);
        const __m256i high = _mm256_and_si256(_mm256_srl_epi32(b, second_shift), masks);
        pairs.half[half] = _mm256_or_si256(low, _mm256_slli_epi32(high, 16));
    }
    return pairs;
}

/* Row codes 2p and 2p + 1 as one int32 of two int16, broadcast. */
static inline __m256i qops_nbits_row_pair(const int8_t* row, ptrdiff_t p) {
    return _mm256_set1_epi32((int32_t)(uint16_t)(int16_t)row[2 * p]
                             | (int32_t)((uint32_t)(uint16_t)(int16_t)row[2 * p + 1] << 16));
}
#endif

/* The codes of `count` k (even) from their interleaved bytes at `lines`,
   as pairs of k per column: pairs[k / 2][c] = (code k, code k + 1). */
static inline void qops_nbits_int8_pairs(const uint8_t* lines, ptrdiff_t count, int bits,
                                         int16_t (*pairs)[QOPS_NBITS_COLUMNS][2]) {
#if defined(__AVX2__)
    const __m256i masks = _mm256_set1_epi32((1 << bits) - 1);
    for (ptrdiff_t p = 0; p < count / 2; p++) {
        const qops_nbits_code_pairs codes = qops_nbits_code_pairs_of(lines, p, bits, masks);
        _mm256_storeu_si256((__m256i*)pairs[p][0], codes.half[0]);
        _mm256_storeu_si256((__m256i*)pairs[p][8], codes.half[1]);
    }
#else
    const int per_byte = 8 / bits;
    const int mask = (1 << bits) - 1;
    for (ptrdiff_t k = 0; k < count; k++) {
        const uint8_t* line = lines + (k / per_byte) * QOPS_NBITS_COLUMNS;
        for (int c = 0; c < QOPS_NBITS_COLUMNS; c++) {
            pairs[k / 2][c][k % 2] = (int16_t)((line[c] >> ((k % per_byte) * bits)) & mask);
        }
    }
#endif
}

/* rows x 16 exact sums of one tile of `count` k (even: a block is at least
   16): sums[r][c] += sum over k of codes[k][c] * row_r[k], the codes held as
   pairs of k per column (pairs[k / 2][c][k % 2]) so that one vpmaddwd makes
   eight columns' two products, exactly (|code| <= 255, |row| <= 127). */
static inline void qops_nbits_int8_sums(const int16_t (*pairs)[QOPS_NBITS_COLUMNS][2],
                                        ptrdiff_t count, const int8_t* row,
                                        int32_t* sums) {
#if defined(__AVX2__)
    __m256i low = _mm256_loadu_si256((const __m256i*)sums);
    __m256i high = _mm256_loadu_si256((const __m256i*)(sums + 8));
    for (ptrdiff_t p = 0; p < count / 2; p++) {
        const __m256i a = qops_nbits_row_pair(row, p);
        low = _mm256_add_epi32(low, _mm256_madd_epi16(
            _mm256_loadu_si256((const __m256i*)pairs[p][0]), a));
        high = _mm256_add_epi32(high, _mm256_madd_epi16(
            _mm256_loadu_si256((const __m256i*)pairs[p][8]), a));
    }
    _mm256_storeu_si256((__m256i*)sums, low);
    _mm256_storeu_si256((__m256i*)(sums + 8), high);
#else
    for (ptrdiff_t p = 0; p < count / 2; p++) {
        const int32_t first = row[2 * p], second = row[2 * p + 1];
        for (int c = 0; c < QOPS_NBITS_COLUMNS; c++) {
            sums[c] += pairs[p][c][0] * first + pairs[p][c][1] * second;
        }
    }
#endif
}

#if defined(__AVX2__)
/* Iterations of qops_nbits_sums_4bit summed in int16 before they are
   widened: each adds at most 2 * 15 * 128 to an element, and 8 * 3840 =
   30720 < 32768, so that vpmaddubsw never saturates and the sums are exact. */
#define QOPS_NBITS_INT16_ITERATIONS 8

/* A row's exact sums of `count` k (a multiple of 4) of 4-bit codes for 16
   columns, columns 0-7 and 8-15 in two vectors. */
typedef struct { __m256i low, high; } qops_nbits_sums16;


/* The sums of one run of `count` k (whole groups of 8) for `rows` (1 or 2)
   rows of A, `row_stride` apart, from the codes in level 4's layout at
   `lines` (qops_nbits_quads_layout): two loads a group, each masked into
   eight columns' quads of k 0-3 and shifted and masked into their quads of
   k 4-7, and a row's four codes one broadcast; vpmaddubsw makes a column's
   two pair sums in int16, widened every QOPS_NBITS_INT16_ITERATIONS / 2
   groups.  (With AVX-512 and VNNI, qops_nbits_rows_4bit sums in zmm.) */
QOPS_NBITS_ROWS_INLINE void qops_nbits_sums_4bit(const uint8_t* lines, ptrdiff_t count,
                                                 const int8_t* row, ptrdiff_t row_stride,
                                                 int rows, qops_nbits_sums16* sums) {
    const __m256i nibbles = _mm256_set1_epi8(0x0F);
    const ptrdiff_t groups = count / 8;
    const __m256i ones = _mm256_set1_epi16(1);
    for (int r = 0; r < rows; r++) {
        sums[r].low = _mm256_setzero_si256();
        sums[r].high = _mm256_setzero_si256();
    }
    ptrdiff_t g = 0;
    while (g < groups) {
        /* Two vpmaddubsw a group into each int16 sum. */
        const ptrdiff_t window = QOPS_NBITS_INT16_ITERATIONS / 2;
        const ptrdiff_t stop = groups - g < window ? groups : g + window;
        __m256i low16[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
        __m256i high16[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
        for (; g < stop; g++) {
            const __m256i first_bytes = _mm256_loadu_si256((const __m256i*)(lines + 64 * g));
            const __m256i second_bytes = _mm256_loadu_si256(
                (const __m256i*)(lines + 64 * g + 32));
            const __m256i low_early = _mm256_and_si256(first_bytes, nibbles);
            const __m256i low_late = _mm256_and_si256(_mm256_srli_epi16(first_bytes, 4),
                                                      nibbles);
            const __m256i high_early = _mm256_and_si256(second_bytes, nibbles);
            const __m256i high_late = _mm256_and_si256(_mm256_srli_epi16(second_bytes, 4),
                                                       nibbles);
            for (int r = 0; r < rows; r++) {
                int32_t early, late;
                memcpy(&early, row + r * row_stride + 8 * g, sizeof early);
                memcpy(&late, row + r * row_stride + 8 * g + 4, sizeof late);
                const __m256i a_early = _mm256_set1_epi32(early);
                const __m256i a_late = _mm256_set1_epi32(late);
                low16[r] = _mm256_add_epi16(low16[r], _mm256_add_epi16(
                    _mm256_maddubs_epi16(low_early, a_early),
                    _mm256_maddubs_epi16(low_late, a_late)));
                high16[r] = _mm256_add_epi16(high16[r], _mm256_add_epi16(
                    _mm256_maddubs_epi16(high_early, a_early),
                    _mm256_maddubs_epi16(high_late, a_late)));
            }
        }
        for (int r = 0; r < rows; r++) {
            sums[r].low = _mm256_add_epi32(sums[r].low, _mm256_madd_epi16(low16[r], ones));
            sums[r].high = _mm256_add_epi32(sums[r].high, _mm256_madd_epi16(high16[r], ones));
        }
    }
}

#if defined(__FMA__)
/* `rows` (1 or 2) rows of A (codes padded_k apart, their blocks' scales and
   sums k_blocks apart) by a panel of 4-bit codes, the rule's every step in
   registers: per block its exact sums, minus zp * the row's sum, then
   fmaf(float32(s), float32(a_scale * scale), acc), blocks in order; each
   row's 16 accumulators stored to result + r * QOPS_NBITS_COLUMNS. */
QOPS_NBITS_ROWS_INLINE void qops_nbits_rows_4bit(const int8_t* row, ptrdiff_t padded_k,
                                                 const float* a_scales, const int32_t* a_sums,
                                                 int rows, const uint8_t* panel,
                                                 ptrdiff_t k_blocks, ptrdiff_t block_size,
                                                 ptrdiff_t blob, const uint8_t* zeros,
                                                 const float* scales, float* result) {
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
    /* A group's 64 bytes are the panel's 16 columns in order, one zmm: the
       same sums and steps as below, half the instructions. */
    const __m512i nibbles = _mm512_set1_epi8(0x0F);
    __m512 acc[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
    for (ptrdiff_t j = 0; j < k_blocks; j++) {
        const uint8_t* lines = panel + j * blob * QOPS_NBITS_COLUMNS;
        const int8_t* values = row + j * block_size;
        qops_nbits_prefetch_block(lines, blob * QOPS_NBITS_COLUMNS,
                                  scales + j * QOPS_NBITS_COLUMNS);
        /* Two sets of sums, so that no vpdpbusd waits on the one before. */
        __m512i early_sums[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
        __m512i late_sums[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
        for (ptrdiff_t g = 0; 8 * g < block_size; g++) {
            const __m512i bytes = _mm512_loadu_si512((const void*)(lines + 64 * g));
            const __m512i early = _mm512_and_si512(bytes, nibbles);
            const __m512i late = _mm512_and_si512(_mm512_srli_epi16(bytes, 4), nibbles);
            for (int r = 0; r < rows; r++) {
                int32_t first, second;
                memcpy(&first, values + r * padded_k + 8 * g, sizeof first);
                memcpy(&second, values + r * padded_k + 8 * g + 4, sizeof second);
                early_sums[r] = _mm512_dpbusd_epi32(early_sums[r], early,
                                                    _mm512_set1_epi32(first));
                late_sums[r] = _mm512_dpbusd_epi32(late_sums[r], late,
                                                   _mm512_set1_epi32(second));
            }
        }
        const __m512i block_zeros = _mm512_cvtepu8_epi32(
            _mm_loadu_si128((const __m128i*)(zeros + j * QOPS_NBITS_COLUMNS)));
        const __m512 block_scales = _mm512_loadu_ps(scales + j * QOPS_NBITS_COLUMNS);
        for (int r = 0; r < rows; r++) {
            const __m512i exact = _mm512_sub_epi32(
                _mm512_add_epi32(early_sums[r], late_sums[r]),
                _mm512_mullo_epi32(block_zeros, _mm512_set1_epi32(a_sums[r * k_blocks + j])));
            acc[r] = _mm512_fmadd_ps(
                _mm512_cvtepi32_ps(exact),
                _mm512_mul_ps(_mm512_set1_ps(a_scales[r * k_blocks + j]), block_scales), acc[r]);
        }
    }
    for (int r = 0; r < rows; r++) _mm512_storeu_ps(result + r * QOPS_NBITS_COLUMNS, acc[r]);
#else
    __m256 low[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    __m256 high[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (ptrdiff_t j = 0; j < k_blocks; j++) {
        qops_nbits_sums16 block[2];
        qops_nbits_prefetch_block(panel + j * blob * QOPS_NBITS_COLUMNS,
                                  blob * QOPS_NBITS_COLUMNS, scales + j * QOPS_NBITS_COLUMNS);
        qops_nbits_sums_4bit(panel + j * blob * QOPS_NBITS_COLUMNS, block_size,
                             row + j * block_size, padded_k, rows, block);
        const __m128i block_zeros = _mm_loadu_si128(
            (const __m128i*)(zeros + j * QOPS_NBITS_COLUMNS));
        const __m256i block_zeros_low = _mm256_cvtepu8_epi32(block_zeros);
        const __m256i block_zeros_high = _mm256_cvtepu8_epi32(_mm_srli_si128(block_zeros, 8));
        const __m256 block_scales_low = _mm256_loadu_ps(scales + j * QOPS_NBITS_COLUMNS);
        const __m256 block_scales_high = _mm256_loadu_ps(scales + j * QOPS_NBITS_COLUMNS + 8);
        for (int r = 0; r < rows; r++) {
            const __m256i a_sum = _mm256_set1_epi32(a_sums[r * k_blocks + j]);
            const __m256 a_scale = _mm256_set1_ps(a_scales[r * k_blocks + j]);
            const __m256i exact_low = _mm256_sub_epi32(
                block[r].low, _mm256_mullo_epi32(block_zeros_low, a_sum));
            const __m256i exact_high = _mm256_sub_epi32(
                block[r].high, _mm256_mullo_epi32(block_zeros_high, a_sum));
            low[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(exact_low),
                                     _mm256_mul_ps(a_scale, block_scales_low), low[r]);
            high[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(exact_high),
                                      _mm256_mul_ps(a_scale, block_scales_high), high[r]);
        }
    }
    for (int r = 0; r < rows; r++) {
        _mm256_storeu_ps(result + r * QOPS_NBITS_COLUMNS, low[r]);
        _mm256_storeu_ps(result + r * QOPS_NBITS_COLUMNS + 8, high[r]);
    }
#endif
}
#endif

#if defined(__FMA__)
#define QOPS_NBITS_INT8_PREFILL 1
/* Level-4 4-bit codes are laid out by qops_nbits_quads_layout where the
   kernels have AVX2 and FMA (one and two rows, and many). */
#define QOPS_NBITS_QUADS 1
/* `count` quads (even) of a block's codes in level 4's layout (two quads,
   64 bytes, a group) as two vectors a quad: columns 0-7's four codes each,
   one int32 a column, then columns 8-15's. */
static inline void qops_nbits_quads_4bit(const uint8_t* lines, ptrdiff_t count, __m256i* run) {
    const __m256i nibbles = _mm256_set1_epi8(0x0F);
    for (ptrdiff_t g = 0; 2 * g < count; g++) {
        const __m256i first = _mm256_loadu_si256((const __m256i*)(lines + 64 * g));
        const __m256i second = _mm256_loadu_si256((const __m256i*)(lines + 64 * g + 32));
        run[4 * g] = _mm256_and_si256(first, nibbles);
        run[4 * g + 1] = _mm256_and_si256(second, nibbles);
        run[4 * g + 2] = _mm256_and_si256(_mm256_srli_epi16(first, 4), nibbles);
        run[4 * g + 3] = _mm256_and_si256(_mm256_srli_epi16(second, 4), nibbles);
    }
}

/* One row's four codes (``value``, broadcast) times a quad of codes of the
   run's two halves, into that row's two sums (its named registers once
   inlined): int32 by vpdpbusd with VNNI, else int16 pair sums by
   vpmaddubsw, exact for the window the caller widens after. */
QOPS_NBITS_ROWS_INLINE void qops_nbits_row_quads(__m256i* first, __m256i* second,
                                                 __m256i codes_first, __m256i codes_second,
                                                 int32_t value) {
    const __m256i a = _mm256_set1_epi32(value);
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
    *first = _mm256_dpbusd_epi32(*first, codes_first, a);
    *second = _mm256_dpbusd_epi32(*second, codes_second, a);
#else
    *first = qops_add_epi16_in_place(*first, _mm256_maddubs_epi16(codes_first, a));
    *second = qops_add_epi16_in_place(*second, _mm256_maddubs_epi16(codes_second, a));
#endif
}

/* A group's sums over one part of a run (quads b0 .. b0 + span of it): into
   sums (zero first where the part starts its block).  Inlined twice: with
   sums in registers for a part that is a whole block, in memory for parts
   of a longer block. */
QOPS_NBITS_ROWS_INLINE void qops_nbits_part_sums(const __m256i* run, const int32_t* values,
                                                 ptrdiff_t b0, ptrdiff_t span, int first_part,
                                                 __m256i* sums) {
#if !(defined(__AVX512VNNI__) && defined(__AVX512VL__))
    const __m256i ones = _mm256_set1_epi16(1);
#endif
    if (first_part) {
        for (int i = 0; i < 2 * QOPS_NBITS_INT8_GROUP; i++) sums[i] = _mm256_setzero_si256();
    }
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
    /* vpdpbusd: four codes by four row codes into int32 at once
       (no int16 window to widen).  A loop of its own, the sums read and
       written in place: the AVX2 loop's windows, shared, ran slower here
       (docs/performance_notes.rst). */
    __m256i first0 = sums[0], second0 = sums[1], first1 = sums[2];
    __m256i second1 = sums[3], first2 = sums[4], second2 = sums[5];
    __m256i first3 = sums[6], second3 = sums[7];
    for (ptrdiff_t q = b0; q < b0 + span; q++) {
        const __m256i codes_first = run[2 * q], codes_second = run[2 * q + 1];
        const int32_t* four = values + q * QOPS_NBITS_INT8_GROUP;
        qops_nbits_row_quads(&first0, &second0, codes_first, codes_second, four[0]);
        qops_nbits_row_quads(&first1, &second1, codes_first, codes_second, four[1]);
        qops_nbits_row_quads(&first2, &second2, codes_first, codes_second, four[2]);
        qops_nbits_row_quads(&first3, &second3, codes_first, codes_second, four[3]);
    }
    sums[0] = first0;
    sums[1] = second0;
    sums[2] = first1;
    sums[3] = second1;
    sums[4] = first2;
    sums[5] = second2;
    sums[6] = first3;
    sums[7] = second3;
#else
    for (ptrdiff_t w0 = b0; w0 < b0 + span; w0 += QOPS_NBITS_INT16_ITERATIONS) {
        const ptrdiff_t stop = b0 + span - w0 < QOPS_NBITS_INT16_ITERATIONS
                                   ? b0 + span : w0 + QOPS_NBITS_INT16_ITERATIONS;
        __m256i first0 = _mm256_setzero_si256(), second0 = _mm256_setzero_si256();
        __m256i first1 = _mm256_setzero_si256(), second1 = _mm256_setzero_si256();
        __m256i first2 = _mm256_setzero_si256(), second2 = _mm256_setzero_si256();
        __m256i first3 = _mm256_setzero_si256(), second3 = _mm256_setzero_si256();
        for (ptrdiff_t q = w0; q < stop; q++) {
            const __m256i codes_first = run[2 * q], codes_second = run[2 * q + 1];
            const int32_t* four = values + q * QOPS_NBITS_INT8_GROUP;
            qops_nbits_row_quads(&first0, &second0, codes_first, codes_second, four[0]);
            qops_nbits_row_quads(&first1, &second1, codes_first, codes_second, four[1]);
            qops_nbits_row_quads(&first2, &second2, codes_first, codes_second, four[2]);
            qops_nbits_row_quads(&first3, &second3, codes_first, codes_second, four[3]);
        }
        sums[0] = _mm256_add_epi32(sums[0], _mm256_madd_epi16(first0, ones));
        sums[1] = _mm256_add_epi32(sums[1], _mm256_madd_epi16(second0, ones));
        sums[2] = _mm256_add_epi32(sums[2], _mm256_madd_epi16(first1, ones));
        sums[3] = _mm256_add_epi32(sums[3], _mm256_madd_epi16(second1, ones));
        sums[4] = _mm256_add_epi32(sums[4], _mm256_madd_epi16(first2, ones));
        sums[5] = _mm256_add_epi32(sums[5], _mm256_madd_epi16(second2, ones));
        sums[6] = _mm256_add_epi32(sums[6], _mm256_madd_epi16(first3, ones));
        sums[7] = _mm256_add_epi32(sums[7], _mm256_madd_epi16(second3, ones));
    }
#endif
}

/* The block rule for one row: acc + float32(sums - zeros * a_sum) *
   float32(a_scale * scales), the columns in the run's order.  The exact
   difference is taken in float32 by one fused step, with no vpmulld: the
   sums (at most 15 * 127 a k, 4096 k a block), the zero points' term (15 *
   127 * 4096) and their difference are integers below 2**24, so each is a
   float32 and the step rounds nothing. */
static inline void qops_nbits_block_rule(const __m256i* sums, const __m256* zeros,
                                         const __m256* scales, int32_t a_sum, float a_scale,
                                         __m256* acc) {
    const __m256 sum = _mm256_set1_ps((float)a_sum);
    const __m256 scale = _mm256_set1_ps(a_scale);
    for (int h = 0; h < 2; h++) {
        const __m256 exact = _mm256_fnmadd_ps(zeros[h], sum, _mm256_cvtepi32_ps(sums[h]));
        acc[h] = _mm256_fmadd_ps(exact, _mm256_mul_ps(scale, scales[h]), acc[h]);
    }
}

/* The block rule for a group's four rows (g), block j; a padded row reads
   the last real row's scale and sum: its results are never stored. */
QOPS_NBITS_ROWS_INLINE void qops_nbits_group_rule(const __m256i* sums, ptrdiff_t g,
                                                  ptrdiff_t rows, ptrdiff_t j,
                                                  ptrdiff_t k_blocks, const int32_t* a_sums,
                                                  const float* a_scales, const __m256* zeros,
                                                  const __m256* scales,
                                                  __m256* accumulators) {
    for (int i = 0; i < QOPS_NBITS_INT8_GROUP; i++) {
        const ptrdiff_t r = g * QOPS_NBITS_INT8_GROUP + i;
        const ptrdiff_t source = r < rows ? r : rows - 1;
        qops_nbits_block_rule(sums + 2 * i, zeros, scales, a_sums[source * k_blocks + j],
                              a_scales[source * k_blocks + j], accumulators + 2 * r);
    }
}

/* `rows` (at most QOPS_NBITS_INT8_PREFILL_ROWS) rows of codes, packed, with
   their blocks' scales and sums (k_blocks apart) by one panel of 4-bit
   codes; the panel's columns of those rows into out (row r at
   out + r * out_stride, `columns` of them), plus bias where given.  Sums
   and accumulators hold columns 0-7 and 8-15, as the run does. */
static inline void qops_nbits_rows_panel_int8_4bit(const int32_t* packed, ptrdiff_t padded_k,
                                                   const float* a_scales, const int32_t* a_sums,
                                                   ptrdiff_t rows, const uint8_t* panel,
                                                   ptrdiff_t k_blocks, ptrdiff_t block_size,
                                                   ptrdiff_t blob, const uint8_t* zeros,
                                                   const float* scales, const float* bias,
                                                   ptrdiff_t columns, float* out,
                                                   ptrdiff_t out_stride) {
    __m256i run[2 * QOPS_NBITS_INT8_RUN_QUADS];
    /* A run's blocks (at most one per 4 quads): zero points and scales. */
    __m256 run_zeros[2 * (QOPS_NBITS_INT8_RUN_QUADS / 4)];
    __m256 run_scales[2 * (QOPS_NBITS_INT8_RUN_QUADS / 4)];
    /* Per row: its block's int32 sums so far (a block may be longer than a
       run), and its accumulators. */
    __m256i block_sums[2 * QOPS_NBITS_INT8_PREFILL_ROWS];
    __m256 accumulators[2 * QOPS_NBITS_INT8_PREFILL_ROWS];
    const ptrdiff_t quads = padded_k / 4;
    const ptrdiff_t block_quads = block_size / 4;
    /* Both powers of two: a run is whole blocks, or part of one. */
    const ptrdiff_t span = block_quads < QOPS_NBITS_INT8_RUN_QUADS ? block_quads
                                                                   : QOPS_NBITS_INT8_RUN_QUADS;
    const ptrdiff_t groups = (rows + QOPS_NBITS_INT8_GROUP - 1) / QOPS_NBITS_INT8_GROUP;
    const ptrdiff_t height = groups * QOPS_NBITS_INT8_GROUP;
    for (ptrdiff_t r = 0; r < 2 * height; r++) accumulators[r] = _mm256_setzero_ps();
    for (ptrdiff_t q0 = 0; q0 < quads; q0 += QOPS_NBITS_INT8_RUN_QUADS) {
        const ptrdiff_t count = quads - q0 < QOPS_NBITS_INT8_RUN_QUADS ? quads - q0
                                                                       : QOPS_NBITS_INT8_RUN_QUADS;
        qops_nbits_quads_4bit(panel + (q0 / block_quads * blob + 2 * (q0 % block_quads))
                                          * QOPS_NBITS_COLUMNS,
                              count, run);
        /* The run's parts, one block or part of one each: their blocks and
           whether each starts or ends its block (found here, not in the
           groups' loop, where a division a part cost as much as its sums). */
        const ptrdiff_t parts = count / span;
        ptrdiff_t part_block[QOPS_NBITS_INT8_RUN_QUADS / 4];
        int part_first[QOPS_NBITS_INT8_RUN_QUADS / 4], part_last[QOPS_NBITS_INT8_RUN_QUADS / 4];
        for (ptrdiff_t b = 0; b < parts; b++) {
            const ptrdiff_t q = q0 + b * span;
            part_block[b] = q / block_quads;
            part_first[b] = q % block_quads == 0;
            part_last[b] = (q + span) % block_quads == 0;
        }
        for (ptrdiff_t b = 0; b < parts; b++) {
            const ptrdiff_t j = part_block[b];
            const __m128i block_zeros = _mm_loadu_si128(
                (const __m128i*)(zeros + j * QOPS_NBITS_COLUMNS));
            const __m256i zeros_low = _mm256_cvtepu8_epi32(block_zeros);
            const __m256i zeros_high = _mm256_cvtepu8_epi32(_mm_srli_si128(block_zeros, 8));
            const __m256 scales_low = _mm256_loadu_ps(scales + j * QOPS_NBITS_COLUMNS);
            const __m256 scales_high = _mm256_loadu_ps(scales + j * QOPS_NBITS_COLUMNS + 8);
            run_zeros[2 * b] = _mm256_cvtepi32_ps(zeros_low);
            run_zeros[2 * b + 1] = _mm256_cvtepi32_ps(zeros_high);
            run_scales[2 * b] = scales_low;
            run_scales[2 * b + 1] = scales_high;
        }
        for (ptrdiff_t g = 0; g < groups; g++) {
            const int32_t* values = packed + (g * quads + q0) * QOPS_NBITS_INT8_GROUP;
            for (ptrdiff_t b = 0; b < parts; b++) {
                const ptrdiff_t b0 = b * span;
                const ptrdiff_t j = part_block[b];
                const int first_part = part_first[b];
                const int last_part = part_last[b];
#if !(defined(__AVX512VNNI__) && defined(__AVX512VL__))
                /* With VNNI they stay in memory: in registers they ran slower there
                   (docs/performance_notes.rst). */
                if (first_part && last_part) {
                    /* A whole block: its sums stay in registers. */
                    __m256i whole[2 * QOPS_NBITS_INT8_GROUP];
                    qops_nbits_part_sums(run, values, b0, span, 1, whole);
                    qops_nbits_group_rule(whole, g, rows, j, k_blocks, a_sums, a_scales,
                                          run_zeros + 2 * b, run_scales + 2 * b, accumulators);
                    continue;
                }
#endif
                /* Part of a longer block: its sums so far in memory. */
                __m256i* sums = block_sums + 2 * g * QOPS_NBITS_INT8_GROUP;
                qops_nbits_part_sums(run, values, b0, span, first_part, sums);
                if (!last_part) continue;
                qops_nbits_group_rule(sums, g, rows, j, k_blocks, a_sums, a_scales,
                                      run_zeros + 2 * b, run_scales + 2 * b, accumulators);
            }
        }
    }
    for (ptrdiff_t r = 0; r < rows; r++) {
        float line[QOPS_NBITS_COLUMNS];
        float* target = out + r * out_stride;
        _mm256_storeu_ps(line, accumulators[2 * r]);
        _mm256_storeu_ps(line + 8, accumulators[2 * r + 1]);
        for (ptrdiff_t c = 0; c < columns; c++) target[c] = bias ? line[c] + bias[c] : line[c];
    }
}
#endif
#endif

#if !defined(QOPS_NBITS_INT8_PREFILL)
/* Where the kernels have no AVX2 and FMA the prefill path is not taken
   (QOPS_NBITS_INT8_PREFILL 0); this plain statement of it, the same rule in
   the same order, keeps the header whole at every width. */
#define QOPS_NBITS_INT8_PREFILL 0
#define QOPS_NBITS_QUADS 0
static inline void qops_nbits_rows_panel_int8_4bit(const int32_t* packed, ptrdiff_t padded_k,
                                                   const float* a_scales, const int32_t* a_sums,
                                                   ptrdiff_t rows, const uint8_t* panel,
                                                   ptrdiff_t k_blocks, ptrdiff_t block_size,
                                                   ptrdiff_t blob, const uint8_t* zeros,
                                                   const float* scales, const float* bias,
                                                   ptrdiff_t columns, float* out,
                                                   ptrdiff_t out_stride) {
    const ptrdiff_t quads = padded_k / 4;
    for (ptrdiff_t r = 0; r < rows; r++) {
        const int32_t* values = packed
                                + (r / QOPS_NBITS_INT8_GROUP) * quads * QOPS_NBITS_INT8_GROUP
                                + r % QOPS_NBITS_INT8_GROUP;
        float* target = out + r * out_stride;
        for (ptrdiff_t c = 0; c < columns; c++) {
            float acc = 0.0f;
            for (ptrdiff_t j = 0; j < k_blocks; j++) {
                int32_t sum = 0;
                for (ptrdiff_t kk = 0; kk < block_size; kk++) {
                    const ptrdiff_t k = j * block_size + kk;
                    int8_t a[4];
                    memcpy(a, &values[(k / 4) * QOPS_NBITS_INT8_GROUP], sizeof a);
                    const uint8_t byte = panel[(j * blob + kk / 2) * QOPS_NBITS_COLUMNS + c];
                    sum += a[k % 4] * ((kk % 2) ? byte >> 4 : byte & 0x0F);
                }
                const ptrdiff_t at = j * QOPS_NBITS_COLUMNS + c;
                const int32_t exact = sum - zeros[at] * a_sums[r * k_blocks + j];
                acc = fmaf((float)exact, a_scales[r * k_blocks + j] * scales[at], acc);
            }
            target[c] = bias ? acc + bias[c] : acc;
        }
    }
}
#endif

/* One row's 16 exact sums of `count` k straight from the interleaved bytes
   (AVX2: the pairs never stored; elsewhere through the pair tile). */
static inline void qops_nbits_int8_row(const uint8_t* lines, ptrdiff_t count, int bits,
                                       const int8_t* row,
                                       int16_t (*pairs)[QOPS_NBITS_COLUMNS][2], int32_t* sums) {
#if defined(__AVX2__)
    (void)pairs;
    const __m256i masks = _mm256_set1_epi32((1 << bits) - 1);
    __m256i low = _mm256_loadu_si256((const __m256i*)sums);
    __m256i high = _mm256_loadu_si256((const __m256i*)(sums + 8));
    for (ptrdiff_t p = 0; p < count / 2; p++) {
        const qops_nbits_code_pairs codes = qops_nbits_code_pairs_of(lines, p, bits, masks);
        const __m256i a = qops_nbits_row_pair(row, p);
        low = _mm256_add_epi32(low, _mm256_madd_epi16(codes.half[0], a));
        high = _mm256_add_epi32(high, _mm256_madd_epi16(codes.half[1], a));
    }
    _mm256_storeu_si256((__m256i*)sums, low);
    _mm256_storeu_si256((__m256i*)(sums + 8), high);
#else
    qops_nbits_int8_pairs(lines, count, bits, pairs);
    qops_nbits_int8_sums((const int16_t (*)[QOPS_NBITS_COLUMNS][2])pairs, count, row, sums);
#endif
}

static inline void qops_nbits_panel_int8(const int8_t* a_codes, ptrdiff_t padded_k,
                                         const float* a_scales, const int32_t* a_sums,
                                         ptrdiff_t rows, const uint8_t* panel, ptrdiff_t k_blocks,
                                         int bits, ptrdiff_t block_size, ptrdiff_t blob,
                                         const uint8_t* zeros, const float* scales,
                                         const float* bias, ptrdiff_t columns, float* out,
                                         ptrdiff_t out_stride) {
    const int per_byte = 8 / bits;
    int16_t pairs[QOPS_NBITS_TILE_K / 2][QOPS_NBITS_COLUMNS][2];
    float sums[QOPS_NBITS_ROWS][QOPS_NBITS_COLUMNS];
    int32_t block_sums[QOPS_NBITS_ROWS][QOPS_NBITS_COLUMNS];
    const ptrdiff_t step = block_size < QOPS_NBITS_TILE_K ? block_size : QOPS_NBITS_TILE_K;
#if defined(__AVX2__) && defined(__FMA__)
    if (bits == 4) {
        /* Two rows at a time through every block, their sums in registers,
           each line's codes unpacked once for both. */
        float lines[2][QOPS_NBITS_COLUMNS];
        for (ptrdiff_t r = 0; r < rows; r += 2) {
            const int pair = r + 1 < rows;
            if (pair) {
                qops_nbits_rows_4bit(a_codes + r * padded_k, padded_k, a_scales + r * k_blocks,
                                     a_sums + r * k_blocks, 2, panel, k_blocks, block_size, blob,
                                     zeros, scales, lines[0]);
            } else {
                qops_nbits_rows_4bit(a_codes + r * padded_k, padded_k, a_scales + r * k_blocks,
                                     a_sums + r * k_blocks, 1, panel, k_blocks, block_size, blob,
                                     zeros, scales, lines[0]);
            }
            for (int i = 0; i <= pair; i++) {
                float* target = out + (r + i) * out_stride;
                for (ptrdiff_t c = 0; c < columns; c++) {
                    target[c] = bias ? lines[i][c] + bias[c] : lines[i][c];
                }
            }
        }
        return;
    }
#endif
    for (ptrdiff_t r0 = 0; r0 < rows; r0 += QOPS_NBITS_ROWS) {
        const ptrdiff_t height = rows - r0 < QOPS_NBITS_ROWS ? rows - r0 : QOPS_NBITS_ROWS;
        memset(sums, 0, sizeof sums[0] * (size_t)height);
        for (ptrdiff_t j = 0; j < k_blocks; j++) {
            memset(block_sums, 0, sizeof block_sums[0] * (size_t)height);
            const uint8_t* block = panel + j * blob * QOPS_NBITS_COLUMNS;
            for (ptrdiff_t k0 = 0; k0 < block_size; k0 += step) {
                if (height == 1) {
                    qops_nbits_int8_row(block + (k0 / per_byte) * QOPS_NBITS_COLUMNS, step, bits,
                                        a_codes + r0 * padded_k + j * block_size + k0, pairs,
                                        block_sums[0]);
                    continue;
                }
                qops_nbits_int8_pairs(block + (k0 / per_byte) * QOPS_NBITS_COLUMNS, step,
                                      bits, pairs);
                for (ptrdiff_t r = 0; r < height; r++) {
                    qops_nbits_int8_sums((const int16_t (*)[QOPS_NBITS_COLUMNS][2])pairs, step,
                                         a_codes + (r0 + r) * padded_k + j * block_size + k0,
                                         block_sums[r]);
                }
            }
            for (ptrdiff_t r = 0; r < height; r++) {
                const float a_scale = a_scales[(r0 + r) * k_blocks + j];
                const int32_t a_sum = a_sums[(r0 + r) * k_blocks + j];
                for (int c = 0; c < QOPS_NBITS_COLUMNS; c++) {
                    const int32_t exact = block_sums[r][c]
                                          - zeros[j * QOPS_NBITS_COLUMNS + c] * a_sum;
                    const float scale = a_scale * scales[j * QOPS_NBITS_COLUMNS + c];
                    sums[r][c] = fmaf((float)exact, scale, sums[r][c]);
                }
            }
        }
        for (ptrdiff_t r = 0; r < height; r++) {
            float* target = out + (r0 + r) * out_stride;
            for (ptrdiff_t c = 0; c < columns; c++) {
                target[c] = bias ? sums[r][c] + bias[c] : sums[r][c];
            }
        }
    }
}

#endif /* QOPS_MATMUL_N_BITS_H */
