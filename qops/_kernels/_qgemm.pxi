# The quantized GEMM driver, its packers, the depthwise kernels and the entry
# points, shared by every SIMD variant.  A variant's .pyx defines MR, NR and
#     cdef void microkernel(const uint8_t* a, const int8_t* b, Py_ssize_t groups,
#                           int32_t* tile) noexcept nogil
# (tile <- the MR x NR int32 block of sum_k a * b over `groups` groups of 4 k)
# and then includes this file, so each variant compiles with its own flags.
#
# Arithmetic: the micro-kernel multiplies unsigned A' by signed B' (the
# vpdpbusd form).  int8 A is stored as A' = A + 128 (xor 0x80) and uint8 B as
# B' = B - 128, and the zero points move with them, so
#     sum_k (A - a_zp)(B - b_zp) = sum_k (A' - a_zp')(B' - b_zp')
#       = S - b_zp' * rowsum(A') - a_zp' * colsum(B') + K * a_zp' * b_zp'
# with S = sum_k A' B'.  |A' B'| <= 255 * 128, so S fits int32 for up to
# 65792 terms: the driver runs the micro-kernel over chunks of 65536 k and
# adds the chunks in int64; row and column sums and the corrections are int64
# too (a row sum of 255s passes int32 at K = 8.4 million).  Nothing wraps.

from cython.parallel cimport parallel, prange
from libc.stdint cimport int8_t, int32_t, int64_t, uint8_t
from libc.stdlib cimport free, malloc
from libc.string cimport memset

import numpy as np

from qops._kernels._openmp_helpers cimport omp_get_thread_num
from qops._kernels._requantize cimport requantize

# 16384 groups of 4 = 65536 k per int32 chunk (the bound above).
cdef enum:
    GROUPS_PER_CHUNK = 16384
    # Tiles of TILE_M_PANELS x TILE_N_PANELS micro-tiles are the unit of
    # parallel work: 32 rows of A' (TILE_M_PANELS * MR) stay in L1/L2 while
    # four B' panels stream past them.
    TILE_M_PANELS = 4
    TILE_N_PANELS = 4
    # K is walked in blocks of 64 groups (256 k): one B' panel slice is
    # 64 * NR * 4 = 8 KiB and the tile's four A' slices another 8 KiB, so a
    # block's operands stay in L1 while every micro-tile of the tile uses them.
    K_BLOCK_GROUPS = 64
    # int64 slots per thread: the tile's int64 sums, its int32 sums and one
    # int32 micro-tile (counted generously: no division in a constant, which
    # debug builds would not fold).
    SCRATCH_PER_THREAD = 2 * TILE_M_PANELS * TILE_N_PANELS * MR * NR + MR * NR


cdef struct Epilogue:
    const int32_t* row_zero     # a_zp' per row of the output
    const int32_t* col_zero     # b_zp' per column
    const float* multiplier     # requantization multiplier at [row * row_step + col * col_step]
    Py_ssize_t row_step         # 0 when it does not vary by row
    Py_ssize_t col_step         # 0 when it does not vary by column
    const int32_t* out_zero     # output zero point per row
    const int32_t* bias         # per row, or NULL
    int64_t k                   # the real K
    int32_t low
    int32_t high


cdef inline Py_ssize_t ceil_div(Py_ssize_t a, Py_ssize_t b) noexcept nogil:
    return (a + b - 1) // b


# -- packing --------------------------------------------------------------------

cdef void pack_a_rows(const uint8_t* a, Py_ssize_t lda, Py_ssize_t m, Py_ssize_t k, uint8_t flip,
                      uint8_t* packed, int64_t* rowsum, int n_threads) noexcept nogil:
    """Rows of A into MR-row panels laid out [group][row][4], zero padded, one
    panel per task; rowsum gets sum_k A' per row (0 for padding rows)."""
    cdef Py_ssize_t groups = ceil_div(k, 4)
    cdef Py_ssize_t panels = ceil_div(m, MR)
    cdef Py_ssize_t p, r, kk, row
    cdef uint8_t* target
    cdef const uint8_t* source
    cdef uint8_t value
    cdef int64_t total
    if n_threads > panels:
        n_threads = <int>panels
    if n_threads < 1:
        n_threads = 1
    memset(packed, 0, panels * groups * MR * 4)
    for p in prange(panels, nogil=True, num_threads=n_threads, schedule="static"):
        for r in range(MR):
            row = p * MR + r
            total = 0
            if row < m:
                source = a + row * lda
                target = packed + p * groups * MR * 4 + r * 4
                for kk in range(k):
                    value = source[kk] ^ flip
                    target[(kk >> 2) * MR * 4 + (kk & 3)] = value
                    total = total + value
            rowsum[row] = total


cdef void pack_b_matrix(const uint8_t* b, Py_ssize_t ldb, Py_ssize_t k, Py_ssize_t n, uint8_t flip,
                        int8_t* packed, int64_t* colsum, int n_threads) noexcept nogil:
    """Columns of a K x N matrix B into NR-column panels laid out
    [group][column][4], zero padded, one panel per task; colsum gets sum_k B'
    per column.  Each row of a panel is a contiguous read of NR bytes."""
    cdef Py_ssize_t groups = ceil_div(k, 4)
    cdef Py_ssize_t panels = ceil_div(n, NR)
    cdef Py_ssize_t q, c, kk, columns
    cdef int8_t* panel
    cdef int8_t* target
    cdef const uint8_t* source
    cdef int64_t* sums
    if n_threads > panels:
        n_threads = <int>panels
    memset(packed, 0, panels * groups * NR * 4)
    memset(colsum, 0, panels * NR * sizeof(int64_t))
    for q in prange(panels, nogil=True, num_threads=n_threads, schedule="static"):
        panel = packed + q * groups * NR * 4
        sums = colsum + q * NR
        columns = min(<Py_ssize_t>NR, n - q * NR)
        for kk in range(k):
            source = b + kk * ldb + q * NR
            target = panel + (kk >> 2) * NR * 4 + (kk & 3)
            for c in range(columns):
                target[c * 4] = <int8_t>(source[c] ^ flip)
        # Column sums from the finished panel (k padding is zero).
        for kk in range(groups):
            target = panel + kk * NR * 4
            for c in range(columns):
                sums[c] += target[c * 4] + target[c * 4 + 1] + target[c * 4 + 2] + target[c * 4 + 3]


cdef void pack_b_im2col(const uint8_t* image, Py_ssize_t channels, Py_ssize_t height,
                        Py_ssize_t width, Py_ssize_t kernel_h, Py_ssize_t kernel_w,
                        Py_ssize_t stride_h, Py_ssize_t stride_w, Py_ssize_t dilation_h,
                        Py_ssize_t dilation_w, Py_ssize_t pad_top, Py_ssize_t pad_left,
                        Py_ssize_t out_w, Py_ssize_t pixels, uint8_t pad_value, uint8_t flip,
                        const Py_ssize_t* k_offsets, int8_t* packed, int64_t* colsum,
                        Py_ssize_t* base_scratch, int n_threads) noexcept nogil:
    """The implicit im2col matrix of one image and group (K = channels * kernel
    rows and columns, N = output pixels) packed as B, one panel of NR pixels
    per task.  Padding reads the input zero point, whose centred value is 0.

    ``k_offsets`` holds, per k, the row offset, column offset and channel
    plane of its filter tap (3 * K values): no division in the loop.
    ``base_scratch`` holds 3 * NR + 1 values per thread.
    """
    cdef Py_ssize_t k = channels * kernel_h * kernel_w
    cdef Py_ssize_t groups = ceil_div(k, 4)
    cdef Py_ssize_t panels = ceil_div(pixels, NR)
    cdef Py_ssize_t q, c, kk, pixel, ih, iw, columns, row_offset, column_offset
    cdef Py_ssize_t runs, run, first, end, lo, hi
    cdef Py_ssize_t* bases
    cdef Py_ssize_t* segments
    cdef const uint8_t* source
    cdef int8_t* panel
    cdef int8_t* target
    cdef const uint8_t* plane
    cdef int64_t* sums
    cdef int8_t padding = <int8_t>(pad_value ^ flip)
    if n_threads > panels:
        n_threads = <int>panels
    memset(packed, 0, panels * groups * NR * 4)
    memset(colsum, 0, panels * NR * sizeof(int64_t))
    with parallel(num_threads=n_threads):
        # Each thread's input row and column of every pixel of its panel.
        bases = base_scratch + omp_get_thread_num() * (3 * NR + 1)
        segments = bases + 2 * NR
        for q in prange(panels, schedule="static"):
            panel = packed + q * groups * NR * 4
            sums = colsum + q * NR
            columns = min(<Py_ssize_t>NR, pixels - q * NR)
            # Runs of pixels on one output row: segments[i] to segments[i + 1].
            runs = 0
            for c in range(columns):
                pixel = q * NR + c
                bases[c] = (pixel // out_w) * stride_h - pad_top
                bases[NR + c] = (pixel % out_w) * stride_w - pad_left
                if c == 0 or bases[c] != bases[c - 1]:
                    segments[runs] = c
                    runs = runs + 1
            segments[runs] = columns
            # k outer, pixels inner: within a run the input columns advance by
            # the stride, so the in-bounds pixels form one range, copied
            # without per-element tests; the rest read the padding value.
            for kk in range(k):
                row_offset = k_offsets[3 * kk]
                column_offset = k_offsets[3 * kk + 1]
                plane = image + k_offsets[3 * kk + 2]
                target = panel + (kk >> 2) * NR * 4 + (kk & 3)
                for run in range(runs):
                    first = segments[run]
                    end = segments[run + 1]
                    ih = bases[first] + row_offset
                    lo = end
                    hi = end
                    if 0 <= ih < height:
                        iw = bases[NR + first] + column_offset
                        lo = first + (ceil_div(-iw, stride_w) if iw < 0 else 0)
                        hi = first + (ceil_div(width - iw, stride_w) if width > iw else 0)
                        lo = min(lo, end)
                        hi = max(min(hi, end), lo)
                        # The input column of pixel c is iw + (c - first) * stride_w.
                        source = plane + ih * width + iw + (lo - first) * stride_w
                        for c in range(hi - lo):
                            target[(lo + c) * 4] = <int8_t>(source[c * stride_w] ^ flip)
                    for c in range(first, lo):
                        target[c * 4] = padding
                    for c in range(hi, end):
                        target[c * 4] = padding
            # Column sums from the finished panel (k padding is zero).
            for kk in range(groups):
                target = panel + kk * NR * 4
                for c in range(columns):
                    sums[c] += target[c * 4] + target[c * 4 + 1] + target[c * 4 + 2] + target[c * 4 + 3]


# -- the driver -----------------------------------------------------------------

cdef inline void requantize_tile(const int64_t* accumulator, Py_ssize_t row0, Py_ssize_t rows,
                                 Py_ssize_t col0, Py_ssize_t cols, const int64_t* a_rowsum,
                                 const int64_t* b_colsum, const Epilogue* epilogue, uint8_t* out,
                                 Py_ssize_t ldc) noexcept nogil:
    """Fold the zero points into one micro-tile of sums and requantize it:
    acc - b_zp'[c] (rowsum[r] - K a_zp'[r]) - a_zp'[r] colsum[c] + bias[r].

    Everything the inner loop reads is first copied into locals: stores through
    uint8_t* may alias any memory, and would otherwise force reloads of the
    epilogue's fields on every element and block vectorization.
    """
    cdef Py_ssize_t i, c, row
    cdef int64_t row_sum_term, row_zero, bias
    cdef int32_t out_zero
    cdef int32_t low = epilogue.low, high = epilogue.high
    cdef Py_ssize_t col_step = epilogue.col_step
    cdef const int64_t* sums
    cdef int64_t column_terms[NR]
    cdef int64_t column_zero[NR]
    cdef float multipliers[NR]
    cdef const float* multiplier
    cdef uint8_t* target
    for c in range(cols):
        column_zero[c] = epilogue.col_zero[col0 + c]
        column_terms[c] = b_colsum[col0 + c]
    for i in range(rows):
        row = row0 + i
        row_zero = epilogue.row_zero[row]
        row_sum_term = a_rowsum[row] - epilogue.k * row_zero
        bias = epilogue.bias[row] if epilogue.bias != NULL else 0
        out_zero = epilogue.out_zero[row]
        multiplier = epilogue.multiplier + row * epilogue.row_step + col0 * col_step
        for c in range(cols):
            multipliers[c] = multiplier[c * col_step]
        sums = accumulator + i * NR
        target = out + row * ldc + col0
        for c in range(cols):
            target[c] = <uint8_t>requantize(
                sums[c] - column_zero[c] * row_sum_term - row_zero * column_terms[c] + bias,
                multipliers[c], out_zero, low, high)


cdef void run_gemm(const uint8_t* a_packed, const int64_t* a_rowsum, Py_ssize_t m,
                   const int8_t* b_packed, const int64_t* b_colsum, Py_ssize_t n,
                   Py_ssize_t groups, const Epilogue* epilogue, uint8_t* out, Py_ssize_t ldc,
                   int64_t* scratch, int n_threads) noexcept nogil:
    """out[i * ldc + j] (i < m, j < n) <- requantized (A B)[i, j].

    Each tile of TILE_M_PANELS x TILE_N_PANELS micro-tiles walks K in blocks
    of K_BLOCK_GROUPS groups, so the A' and B' slices it multiplies stay in
    L1; sums gather in int32 over at most GROUPS_PER_CHUNK groups, then in
    int64.  ``scratch`` holds SCRATCH_PER_THREAD int64 slots per thread.
    """
    cdef Py_ssize_t m_panels = ceil_div(m, MR)
    cdef Py_ssize_t n_panels = ceil_div(n, NR)
    cdef Py_ssize_t tiles_m = ceil_div(m_panels, TILE_M_PANELS)
    cdef Py_ssize_t tiles = tiles_m * ceil_div(n_panels, TILE_N_PANELS)
    cdef Py_ssize_t tile, p, q, rows, cols, g0, chunk_end, count, i, ri, qi, cells
    cdef int64_t* wide
    cdef int32_t* narrow
    cdef int32_t* block
    cdef int32_t* target
    if n_threads > tiles:
        n_threads = <int>tiles
    if n_threads < 1:
        n_threads = 1
    with parallel(num_threads=n_threads):
        wide = scratch + omp_get_thread_num() * SCRATCH_PER_THREAD
        narrow = <int32_t*>(wide + TILE_M_PANELS * TILE_N_PANELS * MR * NR)
        block = narrow + TILE_M_PANELS * TILE_N_PANELS * MR * NR
        for tile in prange(tiles, schedule="dynamic"):
            p = (tile % tiles_m) * TILE_M_PANELS
            q = (tile // tiles_m) * TILE_N_PANELS
            rows = min(p + TILE_M_PANELS, m_panels) - p
            cols = min(q + TILE_N_PANELS, n_panels) - q
            cells = rows * cols * MR * NR
            memset(wide, 0, cells * sizeof(int64_t))
            g0 = 0
            while g0 < groups:
                chunk_end = min(g0 + <Py_ssize_t>GROUPS_PER_CHUNK, groups)
                memset(narrow, 0, cells * sizeof(int32_t))
                while g0 < chunk_end:
                    count = min(<Py_ssize_t>K_BLOCK_GROUPS, chunk_end - g0)
                    for qi in range(cols):
                        for ri in range(rows):
                            microkernel(a_packed + ((p + ri) * groups + g0) * MR * 4,
                                        b_packed + ((q + qi) * groups + g0) * NR * 4, count,
                                        block)
                            target = narrow + (qi * rows + ri) * MR * NR
                            for i in range(MR * NR):
                                target[i] = target[i] + block[i]
                    g0 = g0 + count
                for i in range(cells):
                    wide[i] = wide[i] + narrow[i]
            # Requantize while the tile is in cache.
            for qi in range(cols):
                for ri in range(rows):
                    requantize_tile(wide + (qi * rows + ri) * MR * NR, (p + ri) * MR,
                                    min(<Py_ssize_t>MR, m - (p + ri) * MR), (q + qi) * NR,
                                    min(<Py_ssize_t>NR, n - (q + qi) * NR), a_rowsum, b_colsum,
                                    epilogue, out, ldc)


cdef int64_t* thread_scratch(int n_threads) except NULL:
    cdef int64_t* scratch = <int64_t*>malloc(n_threads * SCRATCH_PER_THREAD * sizeof(int64_t))
    if scratch == NULL:
        raise MemoryError()
    return scratch


# -- entry points (arguments validated and shaped by qops/_native.py) ------------

cdef void set_multiplier(Epilogue* epilogue, const float[:, :] multiplier) noexcept:
    """A (rows or 1) x (columns or 1) table, possibly a broadcast view (stride 0)."""
    epilogue.multiplier = &multiplier[0, 0]
    epilogue.row_step = multiplier.strides[0] // sizeof(float) if multiplier.shape[0] > 1 else 0
    epilogue.col_step = multiplier.strides[1] // sizeof(float) if multiplier.shape[1] > 1 else 0


def pack_a(const uint8_t[:, ::1] a, bint flip):
    """Pack the rows of a (bytes of a uint8 or int8 matrix); returns (packed, rowsum)."""
    cdef Py_ssize_t m = a.shape[0], k = a.shape[1]
    packed = np.empty(ceil_div(m, MR) * ceil_div(k, 4) * MR * 4, dtype=np.uint8)
    rowsum = np.empty(ceil_div(m, MR) * MR, dtype=np.int64)
    cdef uint8_t[::1] packed_view = packed
    cdef int64_t[::1] rowsum_view = rowsum
    with nogil:
        pack_a_rows(&a[0, 0] if m and k else NULL, k, m, k, 0x80 if flip else 0,
                    &packed_view[0] if packed_view.shape[0] else NULL, &rowsum_view[0], 1)
    return packed, rowsum


def conv2d(const uint8_t[:, :, :, ::1] image, const uint8_t[::1] filter_packed,
           const int64_t[::1] filter_rowsum, Py_ssize_t out_channels, Py_ssize_t group_count,
           Py_ssize_t kernel_h, Py_ssize_t kernel_w, strides, dilations, start_padding,
           Py_ssize_t out_h, Py_ssize_t out_w, bint flip_input, uint8_t input_zero,
           const int32_t[::1] row_zero, const int32_t[::1] col_zero, const float[:, :] multiplier,
           const int32_t[::1] out_zero, bias, uint8_t[:, :, ::1] out, int32_t low, int32_t high,
           int n_threads):
    """Grouped convolution as per-image, per-group GEMMs: filter rows (packed
    once, per group consecutive) times the packed implicit im2col of the image.

    out is (batch, out_channels, out_h * out_w) bytes.
    """
    cdef Py_ssize_t batch = image.shape[0], channels = image.shape[1]
    cdef Py_ssize_t height = image.shape[2], width = image.shape[3]
    cdef Py_ssize_t group_channels = channels // group_count
    cdef Py_ssize_t group_outputs = out_channels // group_count
    cdef Py_ssize_t k = group_channels * kernel_h * kernel_w
    cdef Py_ssize_t groups = ceil_div(k, 4)
    cdef Py_ssize_t pixels = out_h * out_w
    cdef Py_ssize_t a_panel_bytes = ceil_div(group_outputs, MR) * groups * MR * 4
    cdef Py_ssize_t a_panel_rows = ceil_div(group_outputs, MR) * MR
    cdef Py_ssize_t stride_h = strides[0], stride_w = strides[1]
    cdef Py_ssize_t dilation_h = dilations[0], dilation_w = dilations[1]
    cdef Py_ssize_t pad_top = start_padding[0], pad_left = start_padding[1]
    cdef Py_ssize_t index, group, first
    cdef Epilogue epilogue
    cdef const int32_t[::1] bias_view
    cdef const int32_t* bias_ptr = NULL
    cdef const uint8_t* image_ptr
    if batch == 0 or out_channels == 0 or pixels == 0:
        return
    # The glue's contract, checked once: packed filter, per-channel and
    # per-pixel vectors and the output all match the geometry.
    if (group_count < 1 or channels % group_count or out_channels % group_count
            or filter_packed.shape[0] != group_count * a_panel_bytes
            or filter_rowsum.shape[0] != group_count * a_panel_rows
            or row_zero.shape[0] != out_channels or out_zero.shape[0] != out_channels
            or col_zero.shape[0] < pixels
            or multiplier.shape[0] not in (1, out_channels) or multiplier.shape[1] != 1
            or out.shape[0] != batch or out.shape[1] != out_channels or out.shape[2] != pixels
            or (bias is not None and len(bias) != out_channels)
            or stride_h < 1 or stride_w < 1 or dilation_h < 1 or dilation_w < 1):
        raise ValueError("conv2d: arguments do not match the convolution's geometry")
    if bias is not None:
        bias_view = bias
        bias_ptr = &bias_view[0]
    # With no channels or an empty image, im2col reads nothing but padding.
    image_ptr = &image[0, 0, 0, 0] if channels and height and width else NULL
    b_packed = np.empty(ceil_div(pixels, NR) * groups * NR * 4, dtype=np.int8)
    b_colsum = np.empty(ceil_div(pixels, NR) * NR, dtype=np.int64)
    cdef int8_t[::1] b_view = b_packed
    cdef int64_t[::1] colsum_view = b_colsum
    epilogue.col_zero = &col_zero[0]
    set_multiplier(&epilogue, multiplier)
    cdef const float* multiplier_base = epilogue.multiplier
    epilogue.k = k
    epilogue.low = low
    epilogue.high = high
    # Per k: the filter tap's row and column offsets and its channel plane.
    offsets = np.empty(3 * max(k, 1), dtype=np.intp)
    cdef Py_ssize_t[::1] k_offsets = offsets
    cdef Py_ssize_t kk
    for kk in range(k):
        k_offsets[3 * kk] = ((kk // kernel_w) % kernel_h) * dilation_h
        k_offsets[3 * kk + 1] = (kk % kernel_w) * dilation_w
        k_offsets[3 * kk + 2] = (kk // (kernel_h * kernel_w)) * height * width
    bases = np.empty((3 * NR + 1) * max(n_threads, 1), dtype=np.intp)
    cdef Py_ssize_t[::1] base_scratch = bases
    cdef int64_t* scratch = thread_scratch(n_threads)
    try:
        with nogil:
            for index in range(batch):
                for group in range(group_count):
                    first = group * group_outputs
                    pack_b_im2col(image_ptr + (index * channels + group * group_channels)
                                  * height * width if image_ptr != NULL else NULL,
                                  group_channels, height, width, kernel_h, kernel_w, stride_h,
                                  stride_w, dilation_h, dilation_w, pad_top, pad_left, out_w,
                                  pixels, input_zero, 0x80 if flip_input else 0, &k_offsets[0],
                                  &b_view[0] if b_view.shape[0] else NULL, &colsum_view[0],
                                  &base_scratch[0], n_threads)
                    epilogue.row_zero = &row_zero[first]
                    epilogue.multiplier = multiplier_base + first * epilogue.row_step
                    epilogue.out_zero = &out_zero[first]
                    epilogue.bias = bias_ptr + first if bias_ptr != NULL else NULL
                    run_gemm(&filter_packed[group * a_panel_bytes] if a_panel_bytes else NULL,
                             &filter_rowsum[group * a_panel_rows], group_outputs,
                             &b_view[0] if b_view.shape[0] else NULL, &colsum_view[0], pixels,
                             groups, &epilogue, &out[index, first, 0], pixels, scratch,
                             n_threads)
    finally:
        free(scratch)


# -- depthwise convolution --------------------------------------------------------
# One input channel per group: a GEMM would have one row per group, so these
# run directly.  Each output row is accumulated tap by tap over the range of
# output columns whose input column is inside the image (padding adds real
# zeros, which contribute nothing), a loop the compiler vectorizes.  A sum has
# at most MAX_TAPS terms of magnitude <= 255 * 255: it fits int32.

cdef enum:
    MAX_TAPS = 4096


def depthwise2d(const uint8_t[:, :, :, ::1] image, bint input_signed, int32_t input_zero,
                const uint8_t[:, ::1] taps, bint filter_signed, const int32_t[::1] filter_zero,
                Py_ssize_t kernel_h, Py_ssize_t kernel_w, strides, dilations, start_padding,
                const float[::1] multiplier, const int32_t[::1] out_zero, bias,
                uint8_t[:, :, :, ::1] out, int32_t low, int32_t high, int n_threads):
    """out[b, o] = requantize(sum over taps of (x[b, o // m] - x_zp)(w[o] - w_zp[o]) + bias[o])
    with m = out_channels // channels.  taps is (out_channels, kernel_h * kernel_w) bytes;
    multiplier, out_zero and bias have one value per output channel."""
    cdef Py_ssize_t batch = out.shape[0], out_channels = out.shape[1]
    cdef Py_ssize_t out_h = out.shape[2], out_w = out.shape[3]
    cdef Py_ssize_t channels = image.shape[1], height = image.shape[2], width = image.shape[3]
    cdef Py_ssize_t per_channel = out_channels // channels
    cdef Py_ssize_t stride_h = strides[0], stride_w = strides[1]
    cdef Py_ssize_t dilation_h = dilations[0], dilation_w = dilations[1]
    cdef Py_ssize_t pad_top = start_padding[0], pad_left = start_padding[1]
    cdef Py_ssize_t count = kernel_h * kernel_w
    cdef Py_ssize_t job, index, o, oh, ow, kh, kw, ih, first, last, t
    cdef const int32_t* bias_ptr = NULL
    cdef const int32_t[::1] bias_view
    cdef int32_t* row
    cdef int32_t* weights
    cdef int32_t weight, centre_zero
    cdef int64_t offset
    cdef const uint8_t* source
    cdef uint8_t* target
    cdef uint8_t flip_input = 0x80 if input_signed else 0
    if batch == 0 or out_channels == 0 or out_h == 0 or out_w == 0:
        return
    if count > MAX_TAPS:
        raise ValueError("depthwise2d: too many filter taps for an int32 sum")
    # The glue's contract, checked once: every per-channel vector is complete.
    if (taps.shape[0] != out_channels or taps.shape[1] != count or out_channels % channels
            or out_channels < channels or out.shape[0] != image.shape[0]
            or stride_h < 1 or stride_w < 1 or dilation_h < 1 or dilation_w < 1
            or multiplier.shape[0] != out_channels or out_zero.shape[0] != out_channels
            or filter_zero.shape[0] != out_channels
            or (bias is not None and len(bias) != out_channels)):
        raise ValueError("depthwise2d: per-channel arguments do not match the output")
    if bias is not None:
        bias_view = bias
        bias_ptr = &bias_view[0]
    # Inputs are read as unsigned bytes; a signed input is shifted by 128 and
    # so is its zero point, which leaves every difference unchanged.
    centre_zero = input_zero + (128 if input_signed else 0)
    cdef int32_t* scratch = <int32_t*>malloc(n_threads * (out_w + count) * sizeof(int32_t))
    if scratch == NULL:
        raise MemoryError()
    try:
        with nogil, parallel(num_threads=n_threads):
            row = scratch + omp_get_thread_num() * (out_w + count)
            weights = row + out_w
            for job in prange(batch * out_channels, schedule="dynamic"):
                index = job // out_channels
                o = job % out_channels
                for t in range(count):
                    if filter_signed:
                        weights[t] = <int8_t>taps[o, t] - filter_zero[o]
                    else:
                        weights[t] = taps[o, t] - filter_zero[o]
                for oh in range(out_h):
                    for ow in range(out_w):
                        row[ow] = 0
                    for kh in range(kernel_h):
                        ih = oh * stride_h - pad_top + kh * dilation_h
                        if ih < 0 or ih >= height:
                            continue
                        source = &image[index, o // per_channel, ih, 0]
                        for kw in range(kernel_w):
                            weight = weights[kh * kernel_w + kw]
                            offset = kw * dilation_w - pad_left
                            # Output columns whose input column is inside the row.
                            first = 0 if offset >= 0 else ceil_div(-offset, stride_w)
                            last = ceil_div(width - offset, stride_w) if width > offset else 0
                            if last > out_w:
                                last = out_w
                            for ow in range(first, last):
                                row[ow] = row[ow] + ((source[ow * stride_w + offset] ^ flip_input)
                                                     - centre_zero) * weight
                    target = &out[index, o, oh, 0]
                    for ow in range(out_w):
                        target[ow] = <uint8_t>requantize(
                            <int64_t>row[ow] + (bias_ptr[o] if bias_ptr != NULL else 0),
                            multiplier[o], out_zero[o], low, high)
    finally:
        free(scratch)


def depthwise2d_flat(const uint8_t[:, :, :, ::1] image, bint input_signed, int32_t input_zero,
                     const uint8_t[:, ::1] taps, bint filter_signed,
                     const int32_t[::1] filter_zero, Py_ssize_t kernel_h, Py_ssize_t kernel_w,
                     Py_ssize_t stride, dilations, start_padding, end_padding,
                     const float[::1] multiplier, const int32_t[::1] out_zero, bias,
                     uint8_t[:, :, :, ::1] out, int32_t low, int32_t high, int n_threads):
    """Depthwise convolution with one stride for both dimensions, on flattened planes.

    Each job centres and zero-pads one input channel into a plane of pitch
    Wp = padded width; output (oh, ow) then reads padded element
    stride * (oh * Wp + ow) + kh * dh * Wp + kw * dw, so each filter tap is one
    long loop over oh * Wp + ow (columns ow >= out_w are computed and dropped),
    which the compiler vectorizes without short-row tails.  Padding is stored
    as 0 (centred), so it contributes nothing.
    """
    cdef Py_ssize_t batch = out.shape[0], out_channels = out.shape[1]
    cdef Py_ssize_t out_h = out.shape[2], out_w = out.shape[3]
    cdef Py_ssize_t channels = image.shape[1], height = image.shape[2], width = image.shape[3]
    cdef Py_ssize_t dilation_h = dilations[0], dilation_w = dilations[1]
    cdef Py_ssize_t pad_top = start_padding[0], pad_left = start_padding[1]
    cdef Py_ssize_t padded_h = height + pad_top + end_padding[0]
    cdef Py_ssize_t pitch = width + pad_left + end_padding[1]
    cdef Py_ssize_t count = kernel_h * kernel_w
    cdef Py_ssize_t per_channel, slots, plane_size, job, index, o, t, p, ih, iw, shift, oh, ow
    cdef Py_ssize_t per_thread
    cdef int32_t* padded
    cdef int32_t* sums
    cdef int32_t* weights
    cdef const uint8_t* source_row
    cdef uint8_t* target
    cdef int32_t weight, centre_zero, zero_o
    cdef int64_t bias_o
    cdef float multiplier_o
    cdef uint8_t flip_input = 0x80 if input_signed else 0
    cdef const int32_t* bias_ptr = NULL
    cdef const int32_t[::1] bias_view
    if batch == 0 or out_channels == 0 or out_h == 0 or out_w == 0:
        return
    if count > MAX_TAPS:
        raise ValueError("depthwise2d_flat: too many filter taps for an int32 sum")
    if (channels == 0 or out_channels % channels or out_channels < channels
            or taps.shape[0] != out_channels or taps.shape[1] != count
            or multiplier.shape[0] != out_channels or out_zero.shape[0] != out_channels
            or filter_zero.shape[0] != out_channels or out.shape[0] != image.shape[0]
            or (bias is not None and len(bias) != out_channels)
            or stride < 1 or dilation_h < 1 or dilation_w < 1
            or (out_h - 1) * stride + (kernel_h - 1) * dilation_h >= padded_h
            or (out_w - 1) * stride + (kernel_w - 1) * dilation_w >= pitch):
        raise ValueError("depthwise2d_flat: arguments do not match the convolution's geometry")
    per_channel = out_channels // channels
    if bias is not None:
        bias_view = bias
        bias_ptr = &bias_view[0]
    centre_zero = input_zero + (128 if input_signed else 0)
    slots = out_h * pitch
    # The furthest read: stride * (slots - 1) plus the largest tap shift.
    plane_size = max(padded_h * pitch,
                     stride * (slots - 1) + (kernel_h - 1) * dilation_h * pitch
                     + (kernel_w - 1) * dilation_w + 1)
    per_thread = plane_size + slots + count
    cdef int32_t* scratch = <int32_t*>malloc(n_threads * per_thread * sizeof(int32_t))
    if scratch == NULL:
        raise MemoryError()
    try:
        with nogil, parallel(num_threads=n_threads):
            padded = scratch + omp_get_thread_num() * per_thread
            sums = padded + plane_size
            weights = sums + slots
            for job in prange(batch * out_channels, schedule="dynamic"):
                index = job // out_channels
                o = job % out_channels
                for t in range(count):
                    if filter_signed:
                        weights[t] = <int8_t>taps[o, t] - filter_zero[o]
                    else:
                        weights[t] = taps[o, t] - filter_zero[o]
                # The centred, zero-padded input plane.
                memset(padded, 0, plane_size * sizeof(int32_t))
                for ih in range(height):
                    source_row = &image[index, o // per_channel, ih, 0]
                    for iw in range(width):
                        padded[(ih + pad_top) * pitch + iw + pad_left] = (
                            (source_row[iw] ^ flip_input) - centre_zero)
                for p in range(slots):
                    sums[p] = 0
                for t in range(count):
                    weight = weights[t]
                    shift = (t // kernel_w) * dilation_h * pitch + (t % kernel_w) * dilation_w
                    accumulate_taps(sums, padded + shift, slots, stride, weight)
                bias_o = bias_ptr[o] if bias_ptr != NULL else 0
                multiplier_o = multiplier[o]
                zero_o = out_zero[o]
                for oh in range(out_h):
                    target = &out[index, o, oh, 0]
                    requantize_row(sums + oh * pitch, target, out_w, bias_o, multiplier_o,
                                   zero_o, low, high)
    finally:
        free(scratch)


cdef inline void accumulate_taps(int32_t* sums, const int32_t* source, Py_ssize_t count,
                                 Py_ssize_t stride, int32_t weight) noexcept nogil:
    """sums[i] += source[i * stride] * weight; unit stride gets its own loop
    so that the compiler vectorizes it."""
    cdef Py_ssize_t i
    if stride == 1:
        for i in range(count):
            sums[i] += source[i] * weight
    else:
        for i in range(count):
            sums[i] += source[i * stride] * weight


cdef inline void requantize_row(const int32_t* sums, uint8_t* target, Py_ssize_t count,
                                int64_t bias, float multiplier, int32_t zero_point,
                                int32_t low, int32_t high) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(count):
        target[i] = <uint8_t>requantize(sums[i] + bias, multiplier, zero_point, low, high)


# -- batched matrix multiply --------------------------------------------------------

def pack_b_batches(const uint8_t[:, :, ::1] b, bint flip, int n_threads):
    """Pack every K x N matrix of b; returns (packed, colsum), one row per matrix."""
    cdef Py_ssize_t batches = b.shape[0], k = b.shape[1], n = b.shape[2], index
    cdef Py_ssize_t size = ceil_div(n, NR) * ceil_div(k, 4) * NR * 4
    cdef Py_ssize_t padded = ceil_div(n, NR) * NR
    packed = np.empty((batches, max(size, 1)), dtype=np.int8)
    colsum = np.empty((batches, max(padded, 1)), dtype=np.int64)
    cdef int8_t[:, ::1] packed_view = packed
    cdef int64_t[:, ::1] colsum_view = colsum
    if k and n:
        with nogil:
            if batches >= n_threads > 1:
                # Enough matrices to keep every thread busy with whole ones.
                for index in prange(batches, num_threads=n_threads, schedule="dynamic"):
                    pack_b_matrix(&b[index, 0, 0], n, k, n, 0x80 if flip else 0,
                                  &packed_view[index, 0], &colsum_view[index, 0], 1)
            else:
                for index in range(batches):
                    pack_b_matrix(&b[index, 0, 0], n, k, n, 0x80 if flip else 0,
                                  &packed_view[index, 0], &colsum_view[index, 0], n_threads)
    else:
        packed[...] = 0
        colsum[...] = 0
    return packed, colsum


def matmul(const uint8_t[:, :, ::1] a, bint a_flip, const int64_t[::1] a_index,
           const int8_t[:, ::1] b_packed, const int64_t[:, ::1] b_colsum,
           const int64_t[::1] b_index, Py_ssize_t n,
           const int32_t[::1] row_zero, const int32_t[::1] col_zero, const float[:, :] multiplier,
           const int32_t[::1] out_zero, uint8_t[:, :, ::1] out, int32_t low, int32_t high,
           int n_threads):
    """out[i] <- requantized a[a_index[i]] @ b[b_index[i]] for every output matrix i.

    The A matrices are packed here, in parallel; B comes packed (once per
    call, or once per compiled operator).
    """
    cdef Py_ssize_t a_batches = a.shape[0], m = a.shape[1], k = a.shape[2]
    cdef Py_ssize_t batches = out.shape[0], groups = ceil_div(k, 4), index
    cdef Py_ssize_t a_size = ceil_div(m, MR) * groups * MR * 4
    cdef Py_ssize_t a_rows = ceil_div(m, MR) * MR
    cdef Py_ssize_t b_size = ceil_div(n, NR) * groups * NR * 4
    cdef Epilogue epilogue
    if batches == 0 or m == 0 or n == 0:
        return
    # The glue's contract, checked once: indices and vectors cover the output.
    if (a_index.shape[0] != batches or b_index.shape[0] != batches
            or out.shape[1] != m or out.shape[2] != n
            or b_packed.shape[1] < b_size or b_colsum.shape[1] < n
            or row_zero.shape[0] < m or col_zero.shape[0] < n or out_zero.shape[0] < m
            or (multiplier.shape[0] != 1 and multiplier.shape[0] < m)
            or (multiplier.shape[1] != 1 and multiplier.shape[1] < n)):
        raise ValueError("matmul: arguments do not cover the output")
    for index in range(batches):
        if not (0 <= a_index[index] < a_batches and 0 <= b_index[index] < b_packed.shape[0]):
            raise ValueError("matmul: a batch index is out of range")
    packed = np.empty((a_batches, max(a_size, 1)), dtype=np.uint8)
    rowsum = np.empty((a_batches, a_rows), dtype=np.int64)
    cdef uint8_t[:, ::1] a_packed = packed
    cdef int64_t[:, ::1] a_rowsum = rowsum
    epilogue.row_zero = &row_zero[0]
    epilogue.col_zero = &col_zero[0]
    set_multiplier(&epilogue, multiplier)
    epilogue.out_zero = &out_zero[0]
    epilogue.bias = NULL
    epilogue.k = k
    epilogue.low = low
    epilogue.high = high
    cdef int64_t* scratch = thread_scratch(n_threads)
    try:
        with nogil:
            if k:
                if a_batches >= n_threads:
                    for index in prange(a_batches, num_threads=n_threads, schedule="static"):
                        pack_a_rows(&a[index, 0, 0], k, m, k, 0x80 if a_flip else 0,
                                    &a_packed[index, 0], &a_rowsum[index, 0], 1)
                else:
                    for index in range(a_batches):
                        pack_a_rows(&a[index, 0, 0], k, m, k, 0x80 if a_flip else 0,
                                    &a_packed[index, 0], &a_rowsum[index, 0], n_threads)
            else:
                memset(&a_rowsum[0, 0], 0, a_batches * a_rows * sizeof(int64_t))
            if batches >= n_threads > 1:
                # Whole matrices per thread: one parallel region instead of
                # one per matrix.  Each thread passes its own scratch slot; the
                # inner GEMM runs on one thread (a nested team of one).
                for index in prange(batches, num_threads=n_threads, schedule="dynamic"):
                    run_gemm(&a_packed[a_index[index], 0], &a_rowsum[a_index[index], 0], m,
                             &b_packed[b_index[index], 0], &b_colsum[b_index[index], 0], n,
                             groups, &epilogue, &out[index, 0, 0], n,
                             scratch + omp_get_thread_num() * SCRATCH_PER_THREAD, 1)
            else:
                for index in range(batches):
                    run_gemm(&a_packed[a_index[index], 0], &a_rowsum[a_index[index], 0], m,
                             &b_packed[b_index[index], 0], &b_colsum[b_index[index], 0], n,
                             groups, &epilogue, &out[index, 0, 0], n, scratch, n_threads)
    finally:
        free(scratch)
