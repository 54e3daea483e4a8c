/* MaxPool of byte planes: every window's largest byte, a window's positions
   outside the plane taking no part (as padding by the lowest value does), a
   window with none inside giving the lowest value.

   Bytes compare as unsigned; int8 planes come with flip = 0x80, which every
   byte is xor-ed with as it is read and written (the sign bit flipped keeps
   int8's order in uint8's).  Each output row takes its rows' maximum first
   (a pass over whole rows) into a padded row, then each output its taps of
   that row.

   Both passes go a vector register's bytes at a time (32 with AVX2, else
   16) in GCC's vector types, the last chunk of a
   row ending at its end and overlapping the ones before: a pass writes a
   function of what it reads elsewhere, so an element done twice comes out
   the same.  (Loops the compiler vectorizes alone end in as many scalar
   iterations as a vector has lanes less one: most of a 56-byte row.)  Rows
   shorter than a chunk go a byte at a time. */
#ifndef QOPS_MAX_POOL_H
#define QOPS_MAX_POOL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    ptrdiff_t height, width, out_height, out_width;
    ptrdiff_t kernel_h, kernel_w, stride_h, stride_w, dilation_h, dilation_w;
    ptrdiff_t pad_top, pad_left;
    /* The padded row's length: pad_left + width and enough after it for
       every tap of the last output (qops_max_pool_row_length). */
    ptrdiff_t row_length;
    uint8_t flip;
} qops_max_pool_geometry;

static inline ptrdiff_t qops_max_pool_row_length(const qops_max_pool_geometry* g) {
    const ptrdiff_t last_tap = g->out_width > 0
        ? (g->out_width - 1) * g->stride_w + (g->kernel_w - 1) * g->dilation_w + 1 : 0;
    const ptrdiff_t whole = g->pad_left + g->width;
    return last_tap > whole ? last_tap : whole;
}

/* A vector register's bytes: SSE2 has no 32-byte one to hold them. */
#if defined(__AVX2__)
#define QOPS_MAX_POOL_CHUNK 32
#else
#define QOPS_MAX_POOL_CHUNK 16
#endif
/* Scratch past the padded row, for the stride-2 loads of its last chunk
   (two chunks' bytes). */
#define QOPS_MAX_POOL_ROW_SLACK 64

typedef uint8_t qops_max_pool_bytes __attribute__((vector_size(QOPS_MAX_POOL_CHUNK)));

static inline qops_max_pool_bytes qops_max_pool_load(const uint8_t* p) {
    qops_max_pool_bytes v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline qops_max_pool_bytes qops_max_pool_max(qops_max_pool_bytes a, qops_max_pool_bytes b) {
    const qops_max_pool_bytes a_larger = (qops_max_pool_bytes)(a > b);
    return (a & a_larger) | (b & ~a_larger);
}

static inline uint8_t qops_max_u8(uint8_t a, uint8_t b) { return a > b ? a : b; }

/* The bytes row[i * stride] of a chunk of outputs from row on. */
static inline qops_max_pool_bytes qops_max_pool_taps(const uint8_t* row, ptrdiff_t stride) {
    if (stride == 1) return qops_max_pool_load(row);
    if (stride == 2) {
        const qops_max_pool_bytes low = qops_max_pool_load(row);
        const qops_max_pool_bytes high = qops_max_pool_load(row + QOPS_MAX_POOL_CHUNK);
#if QOPS_MAX_POOL_CHUNK == 32 && defined(__clang__)
        return __builtin_shufflevector(low, high, 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24,
                                       26, 28, 30, 32, 34, 36, 38, 40, 42, 44, 46, 48, 50, 52,
                                       54, 56, 58, 60, 62);
#elif QOPS_MAX_POOL_CHUNK == 32
        return __builtin_shuffle(low, high,
                                 (qops_max_pool_bytes){0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20,
                                                       22, 24, 26, 28, 30, 32, 34, 36, 38, 40,
                                                       42, 44, 46, 48, 50, 52, 54, 56, 58, 60,
                                                       62});
#elif defined(__clang__)
        return __builtin_shufflevector(low, high, 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24,
                                       26, 28, 30);
#else
        return __builtin_shuffle(low, high, (qops_max_pool_bytes){0, 2, 4, 6, 8, 10, 12, 14, 16,
                                                                  18, 20, 22, 24, 26, 28, 30});
#endif
    }
    qops_max_pool_bytes v;
    for (int lane = 0; lane < QOPS_MAX_POOL_CHUNK; lane++) v[lane] = row[lane * stride];
    return v;
}

/* The start of each chunk of a row of n >= QOPS_MAX_POOL_CHUNK bytes: 0,
   QOPS_MAX_POOL_CHUNK, ..., then n - QOPS_MAX_POOL_CHUNK. */
#define QOPS_MAX_POOL_CHUNKS(start, n)                                               \
    for (ptrdiff_t start = 0, last_ = (n) - QOPS_MAX_POOL_CHUNK, done_ = 0; !done_;  \
         done_ = start == last_,                                                     \
         start = start + QOPS_MAX_POOL_CHUNK < last_ ? start + QOPS_MAX_POOL_CHUNK : last_)

/* One plane.  row is scratch of g->row_length + QOPS_MAX_POOL_ROW_SLACK
   bytes.  The geometry is read into locals first: byte stores could alias it. */
static inline void qops_max_pool_plane(const qops_max_pool_geometry* g,
                                       const uint8_t* restrict x, uint8_t* restrict out,
                                       uint8_t* restrict row) {
    const uint8_t flip = g->flip;
    const ptrdiff_t height = g->height, width = g->width;
    const ptrdiff_t out_height = g->out_height, out_width = g->out_width;
    const ptrdiff_t kernel_h = g->kernel_h, kernel_w = g->kernel_w;
    const ptrdiff_t stride_h = g->stride_h, stride_w = g->stride_w;
    const ptrdiff_t dilation_h = g->dilation_h, dilation_w = g->dilation_w;
    const ptrdiff_t pad_top = g->pad_top;
    const qops_max_pool_bytes flips = (qops_max_pool_bytes){0} + flip;
    /* The lowest value (0 after the flip) outside the plane's columns. */
    memset(row, 0, (size_t)(g->row_length + QOPS_MAX_POOL_ROW_SLACK));
    uint8_t* restrict inside = row + g->pad_left;
    for (ptrdiff_t oy = 0; oy < out_height; oy++) {
        /* The window's rows inside the plane: first, count, step. */
        const ptrdiff_t top = oy * stride_h - pad_top;
        ptrdiff_t ky = 0, rows = 0;
        while (ky < kernel_h && top + ky * dilation_h < 0) ky++;
        const ptrdiff_t first_row = top + ky * dilation_h;
        for (; ky < kernel_h && top + ky * dilation_h < height; ky++) rows++;
        const uint8_t* first = rows ? x + first_row * width : x;
        const ptrdiff_t pitch = dilation_h * width;
        if (rows == 0) {
            memset(inside, 0, (size_t)width);
        } else if (width >= QOPS_MAX_POOL_CHUNK) {
            QOPS_MAX_POOL_CHUNKS(start, width) {
                qops_max_pool_bytes v = qops_max_pool_load(first + start) ^ flips;
                for (ptrdiff_t r = 1; r < rows; r++)
                    v = qops_max_pool_max(v, qops_max_pool_load(first + r * pitch + start) ^ flips);
                memcpy(inside + start, &v, sizeof v);
            }
        } else {
            for (ptrdiff_t i = 0; i < width; i++) {
                uint8_t v = (uint8_t)(first[i] ^ flip);
                for (ptrdiff_t r = 1; r < rows; r++)
                    v = qops_max_u8(v, (uint8_t)(first[r * pitch + i] ^ flip));
                inside[i] = v;
            }
        }
        uint8_t* restrict target = out + oy * out_width;
        if (out_width >= QOPS_MAX_POOL_CHUNK) {
            QOPS_MAX_POOL_CHUNKS(start, out_width) {
                const uint8_t* taps = row + start * stride_w;
                qops_max_pool_bytes v = qops_max_pool_taps(taps, stride_w);
                for (ptrdiff_t kx = 1; kx < kernel_w; kx++)
                    v = qops_max_pool_max(v, qops_max_pool_taps(taps + kx * dilation_w, stride_w));
                v ^= flips;
                memcpy(target + start, &v, sizeof v);
            }
        } else {
            for (ptrdiff_t ox = 0; ox < out_width; ox++) {
                const uint8_t* taps = row + ox * stride_w;
                uint8_t v = taps[0];
                for (ptrdiff_t kx = 1; kx < kernel_w; kx++)
                    v = qops_max_u8(v, taps[kx * dilation_w]);
                target[ox] = (uint8_t)(v ^ flip);
            }
        }
    }
}


/* Output row oy of a channels-last image (height rows of width x channels
   bytes, out_width x channels bytes an output row): each output pixel's
   channels the largest of its taps' runs, compared as the planes' bytes
   are (flipped), a chunk of channels at a time over the whole window (the
   last chunk ending at the last channel, as the planes' rows do). */
static inline void qops_max_pool_channels_last_row(const qops_max_pool_geometry* g,
                                                   ptrdiff_t channels, ptrdiff_t oy,
                                                   const uint8_t* restrict x,
                                                   uint8_t* restrict out) {
    const uint8_t flip = g->flip;
    const qops_max_pool_bytes flips = (qops_max_pool_bytes){0} + flip;
    const ptrdiff_t height = g->height, width = g->width, out_width = g->out_width;
    const ptrdiff_t kernel_h = g->kernel_h, kernel_w = g->kernel_w;
    const ptrdiff_t dilation_h = g->dilation_h, dilation_w = g->dilation_w;
    const ptrdiff_t top = oy * g->stride_h - g->pad_top;
    /* The window's rows inside the image: first, count. */
    ptrdiff_t ky = 0, rows = 0;
    while (ky < kernel_h && top + ky * dilation_h < 0) ky++;
    const ptrdiff_t first_row = top + ky * dilation_h;
    for (; ky < kernel_h && top + ky * dilation_h < height; ky++) rows++;
    for (ptrdiff_t ox = 0; ox < out_width; ox++) {
        uint8_t* restrict target = out + (oy * out_width + ox) * channels;
        const ptrdiff_t left = ox * g->stride_w - g->pad_left;
        ptrdiff_t kx = 0, columns = 0;
        while (kx < kernel_w && left + kx * dilation_w < 0) kx++;
        const ptrdiff_t first_column = left + kx * dilation_w;
        for (; kx < kernel_w && left + kx * dilation_w < width; kx++) columns++;
        if (rows == 0 || columns == 0) {
            /* The lowest value. */
            memset(target, flip, (size_t)channels);
            continue;
        }
        const uint8_t* corner = x + (first_row * width + first_column) * channels;
        const ptrdiff_t row_pitch = dilation_h * width * channels;
        const ptrdiff_t column_pitch = dilation_w * channels;
        if (channels >= QOPS_MAX_POOL_CHUNK) {
            QOPS_MAX_POOL_CHUNKS(start, channels) {
                qops_max_pool_bytes v = (qops_max_pool_bytes){0};  /* the lowest, flipped */
                for (ptrdiff_t r = 0; r < rows; r++)
                    for (ptrdiff_t c = 0; c < columns; c++)
                        v = qops_max_pool_max(v, qops_max_pool_load(
                            corner + r * row_pitch + c * column_pitch + start) ^ flips);
                v ^= flips;
                memcpy(target + start, &v, sizeof v);
            }
        } else {
            for (ptrdiff_t i = 0; i < channels; i++) {
                uint8_t v = 0;  /* the lowest, flipped */
                for (ptrdiff_t r = 0; r < rows; r++)
                    for (ptrdiff_t c = 0; c < columns; c++)
                        v = qops_max_u8(v, (uint8_t)(corner[r * row_pitch + c * column_pitch + i]
                                                     ^ flip));
                target[i] = (uint8_t)(v ^ flip);
            }
        }
    }
}

#undef QOPS_MAX_POOL_CHUNKS

#endif /* QOPS_MAX_POOL_H */
