# The convolution's entry points: the filter packed once, the image in a
# channels-last copy whose runs are A's rows, and the run.  Needs the driver
# (_gemm_units.pxi).

def pack_filter(const uint8_t[:, ::1] filter, Py_ssize_t group_count,
                const Py_ssize_t[::1] source, bint flip, int n_threads, bint scratch=False):
    """Each group's filter as packed B, straight from its (out_channels, taps)
    rows: row k of B is tap source[k] of every output channel of the group
    (K rows past the last whole group of 4 are 0).  Returns (packed,
    colsum), one row per group; with ``scratch``, packed lies in this
    thread's workspace (a plain call's, used before its next request): a
    fresh array's pages would fault on their first stores."""
    cdef Py_ssize_t out_channels = filter.shape[0], taps = filter.shape[1]
    cdef Py_ssize_t k = source.shape[0], groups = ceil_div(k, 4)
    cdef Py_ssize_t outputs = out_channels // group_count if group_count > 0 else 0
    cdef Py_ssize_t panels = ceil_div(outputs, NR)
    cdef Py_ssize_t kk
    if group_count < 1 or out_channels % group_count:
        raise ValueError("pack_filter: the groups do not divide the output channels")
    for kk in range(k):
        if not 0 <= source[kk] < taps:
            raise ValueError("pack_filter: a tap is outside the filter's rows")
    cdef Py_ssize_t packed_bytes = max(packed_b_bytes(k, outputs), 1)
    # Packing writes every byte of every panel (zeros past the output
    # channels and past K), and the column sums of the channels alone.
    if scratch and outputs and k:
        packed = workspace("filter packed", group_count * packed_bytes, np.int8).reshape(
            group_count, packed_bytes)
    else:
        packed = (np.empty if outputs and k else np.zeros)((group_count, packed_bytes), np.int8)
    colsum = np.zeros((group_count, max(panels * NR, 1)), np.int64)
    cdef int8_t[:, ::1] packed_view = packed
    cdef int64_t[:, ::1] colsum_view = colsum
    cdef PackFilter job
    cdef list keep = []
    cdef int threads = min(max(n_threads, 1), MAX_WORKERS + 1)
    if outputs and k:
        job.filter = &filter[0, 0]
        job.filter_end = job.filter + out_channels * taps
        job.columns_stride = round_up(taps * TRANSPOSED_WIDTH, 64)
        job.columns = workspace_bytes("filter columns", threads * job.columns_stride, keep)
        job.taps = taps
        job.source = &source[0]
        job.k = k
        job.flip = 0x80 if flip else 0
        job.outputs = outputs
        job.groups = groups
        job.packed = &packed_view[0, 0]
        job.packed_stride = packed_view.shape[1]
        job.colsum = &colsum_view[0, 0]
        job.colsum_stride = colsum_view.shape[1]
        with nogil:
            run_range(pack_filter_units, &job,
                      group_count * ceil_div(outputs, TRANSPOSED_WIDTH), 1, threads)
    return packed, colsum


cdef struct PackFilter:
    const uint8_t* filter       # out_channels rows of `taps` bytes
    const uint8_t* filter_end
    Py_ssize_t taps
    const Py_ssize_t* source
    Py_ssize_t k
    uint8_t flip
    Py_ssize_t outputs          # output channels per group
    Py_ssize_t groups           # groups of 4 k in a panel
    int8_t* packed
    Py_ssize_t packed_stride
    int64_t* colsum             # zeros
    Py_ssize_t colsum_stride
    uint8_t* columns            # per thread slot, taps x TRANSPOSED_WIDTH bytes
    Py_ssize_t columns_stride


# Output channels transposed at a time: whole 16 x 16 blocks of bytes (two
# panels where NR is 8, whose eight-byte runs a block wrote one at a time
# through the stack).  A variable: Cython takes no conditional in an enum.
cdef Py_ssize_t TRANSPOSED_WIDTH = max(<Py_ssize_t>NR, 16)


cdef void pack_filter_units(void* context, Py_ssize_t start, Py_ssize_t stop,
                            int slot) noexcept nogil:
    """Units [start, stop) of the groups' filters, each TRANSPOSED_WIDTH
    output channels (unit u: group u // units, its channels from (u %
    units) * TRANSPOSED_WIDTH on): their rows transposed into the slot's
    scratch (transpose_filter_rows), whose row t is tap t of those
    channels, as a row of B; then in each of the unit's panels every run of
    groups whose taps step evenly (a 1 x 1 filter's channels one apart, a
    3 x 3 one's at a tap nine) packed from those rows in place by the
    variant's pack_groups, and any other group from a copy of its four
    rows.  Gathering each column's four values from the filter's rows
    (evenly apart, one store) ran at 2 GB/s on a 3 x 3 filter of 256
    channels; the transpose is 16 x 16 bytes at a time in registers."""
    cdef const PackFilter* job = <const PackFilter*>context
    cdef uint8_t* columns = job.columns + slot * job.columns_stride
    cdef Py_ssize_t units = ceil_div(job.outputs, TRANSPOSED_WIDTH)
    cdef Py_ssize_t u, group, base, first
    for u in range(start, stop):
        group = u // units
        base = (u % units) * TRANSPOSED_WIDTH
        transpose_filter_rows(job.filter + (group * job.outputs + base) * job.taps, job.taps,
                              min(TRANSPOSED_WIDTH, job.outputs - base), job.flip,
                              job.filter_end, columns)
        first = base
        while first < min(base + TRANSPOSED_WIDTH, job.outputs):
            pack_filter_panel(job, columns + (first - base),
                              job.packed + group * job.packed_stride
                              + (first // NR) * job.groups * GROUP_BYTES,
                              job.colsum + group * job.colsum_stride + first,
                              min(<Py_ssize_t>NR, job.outputs - first))
            first = first + NR


cdef void pack_filter_panel(const PackFilter* job, const uint8_t* columns, int8_t* panel,
                            int64_t* sums, Py_ssize_t width) noexcept nogil:
    """One panel from its columns of the transposed rows (row t at columns
    + t * TRANSPOSED_WIDTH), its column sums into sums[:width].  Column sums
    gather in int32 for at most SUM_GROUPS groups, as pack_b_columns'."""
    cdef uint8_t staged[4 * NR]
    cdef int32_t partial[NR]
    cdef Py_ssize_t g, g0, g1, j, c, count, step, run
    cdef Py_ssize_t whole_groups = job.k // 4
    cdef const Py_ssize_t* at
    g0 = 0
    while g0 < job.groups:
        g1 = min(g0 + SUM_GROUPS, job.groups)
        memset(partial, 0, sizeof(partial))
        g = g0
        while g < g1:
            at = job.source + 4 * g
            step = at[1] - at[0] if g < whole_groups else 0
            run = 0
            if g < whole_groups:
                while (g + run < min(g1, whole_groups)
                       and evenly_apart(at + 4 * run, at[0] + 4 * run * step, step)):
                    run = run + 1
            if run:
                pack_groups(columns + at[0] * TRANSPOSED_WIDTH, step * TRANSPOSED_WIDTH, run, 0,
                            panel + g * GROUP_BYTES, partial)
                g = g + run
                continue
            count = min(<Py_ssize_t>4, job.k - 4 * g)
            for j in range(4):
                if j < count:
                    memcpy(staged + j * NR, columns + at[j] * TRANSPOSED_WIDTH, NR)
                else:
                    memset(staged + j * NR, 0, NR)
            pack_groups(staged, NR, 1, 0, panel + g * GROUP_BYTES, partial)
            g = g + 1
        for c in range(width):
            sums[c] += partial[c]
        g0 = g1


cdef inline bint evenly_apart(const Py_ssize_t* at, Py_ssize_t first,
                              Py_ssize_t step) noexcept nogil:
    """Whether a group's four taps are first, first + step, ... (step may be
    anything, 0 and negative alike: pack_groups reads rows ldb apart)."""
    return (at[0] == first and at[1] == first + step and at[2] == first + 2 * step
            and at[3] == first + 3 * step)


cdef void transpose_filter_rows(const uint8_t* rows, Py_ssize_t taps, Py_ssize_t width,
                                uint8_t flip, const uint8_t* end,
                                uint8_t* columns) noexcept nogil:
    """`width` (<= TRANSPOSED_WIDTH) rows of `taps` bytes, xor flip,
    transposed into `columns` (taps rows of TRANSPOSED_WIDTH bytes, zero
    past the width), 16 x 16 bytes a block (transpose_block16, which reads
    no further than `end`)."""
    cdef Py_ssize_t r0, t0, height
    cdef const uint8_t* source
    if width < TRANSPOSED_WIDTH:
        memset(columns, 0, taps * TRANSPOSED_WIDTH)
    for r0 in range(0, width, 16):
        height = min(<Py_ssize_t>16, width - r0)
        for t0 in range(0, taps, 16):
            source = rows + r0 * taps + t0
            transpose_block16(source, taps, height, min(<Py_ssize_t>16, taps - t0),
                              columns + t0 * TRANSPOSED_WIDTH + r0, TRANSPOSED_WIDTH, flip,
                              end - source)


cdef inline void fill_channel_run(uint8_t* target, Py_ssize_t pixel_stride,
                                  const uint8_t* source, Py_ssize_t shift, Py_ssize_t lo,
                                  Py_ssize_t hi, Py_ssize_t padded_w, uint8_t flip,
                                  uint8_t pad_value) noexcept nogil:
    """One channel along a row of the copy: positions [lo, hi) read source[wp + shift],
    the rest are padding."""
    cdef Py_ssize_t wp
    for wp in range(lo):
        target[wp * pixel_stride] = pad_value
    for wp in range(lo, hi):
        target[wp * pixel_stride] = source[wp + shift] ^ flip
    for wp in range(hi, padded_w):
        target[wp * pixel_stride] = pad_value


cdef inline void fill_channel_triple(uint8_t* target, const uint8_t* source, Py_ssize_t plane,
                                     Py_ssize_t shift, Py_ssize_t lo, Py_ssize_t hi,
                                     Py_ssize_t padded_w, uint8_t flip,
                                     uint8_t pad_value) noexcept nogil:
    """Three channels (planes `plane` bytes apart) along a row of an unpadded
    copy of three bytes a position (a network's first convolution): the
    row's bytes written in order, an interleaving loop the compiler
    vectorizes, where a channel at a time stored every third byte alone."""
    cdef Py_ssize_t wp
    cdef const uint8_t* first = source + shift
    cdef const uint8_t* second = first + plane
    cdef const uint8_t* third = second + plane
    memset(target, pad_value, 3 * lo)
    for wp in range(lo, hi):
        target[3 * wp] = first[wp] ^ flip
        target[3 * wp + 1] = second[wp] ^ flip
        target[3 * wp + 2] = third[wp] ^ flip
    memset(target + 3 * hi, pad_value, 3 * (padded_w - hi))


cdef enum:
    # Positions per batch of channel words, built contiguously (a loop the
    # compiler vectorizes) and then stored at the pixel stride.
    QUAD_BATCH = 64


cdef inline void fill_channel_quad(uint32_t* target, Py_ssize_t word_stride,
                                   const uint8_t* source, Py_ssize_t plane, Py_ssize_t shift,
                                   Py_ssize_t lo, Py_ssize_t hi, Py_ssize_t padded_w,
                                   uint32_t flip, uint32_t pad_value) noexcept nogil:
    """Four consecutive channels (planes `plane` bytes apart) along a row of the
    copy, one 32-bit store per position: a quarter of the byte stores."""
    cdef uint32_t words[QUAD_BATCH]
    cdef Py_ssize_t wp, i, count
    cdef uint32_t pad_word = pad_value * 0x01010101
    cdef const uint8_t* s0
    for wp in range(lo):
        target[wp * word_stride] = pad_word
    wp = lo
    while wp < hi:
        count = min(<Py_ssize_t>QUAD_BATCH, hi - wp)
        s0 = source + wp + shift
        for i in range(count):
            words[i] = ((s0[i] ^ flip) | ((s0[plane + i] ^ flip) << 8)
                        | ((s0[2 * plane + i] ^ flip) << 16) | ((s0[3 * plane + i] ^ flip) << 24))
        for i in range(count):
            target[(wp + i) * word_stride] = words[i]
        wp = wp + count
    for wp in range(hi, padded_w):
        target[wp * word_stride] = pad_word


cdef enum:
    # Positions per task of an unfolded copy without column padding: 32
    # positions of up to 512 channels are 16 KiB of the copy, which stay in L1
    # while every channel quad is written into them.
    POSITION_BLOCK = 32


cdef inline void fill_channel_octet(uint8_t* target, Py_ssize_t pixel_stride,
                                    const uint8_t* source, Py_ssize_t plane, Py_ssize_t shift,
                                    Py_ssize_t lo, Py_ssize_t hi, Py_ssize_t padded_w,
                                    uint8_t flip, uint8_t pad_value) noexcept nogil:
    """Eight consecutive channels (planes `plane` bytes apart) along a row of
    the copy: eight positions at a time, an 8 x 8 byte transpose turns eight
    8-byte reads (one per channel) into eight 8-byte stores (one per position)."""
    cdef uint64_t x[8]
    cdef uint64_t flips = 0x0101010101010101ULL * flip
    cdef uint64_t padding = 0x0101010101010101ULL * pad_value
    cdef Py_ssize_t wp, i
    cdef uint8_t* cell
    for wp in range(lo):
        memcpy(target + wp * pixel_stride, &padding, 8)
    wp = lo
    while wp + 8 <= hi:
        for i in range(8):
            memcpy(&x[i], source + i * plane + wp + shift, 8)
            x[i] ^= flips
        transpose_bytes(x)
        for i in range(8):
            memcpy(target + (wp + i) * pixel_stride, &x[i], 8)
        wp = wp + 8
    while wp < hi:
        cell = target + wp * pixel_stride
        for i in range(8):
            cell[i] = source[i * plane + wp + shift] ^ flip
        wp = wp + 1
    for wp in range(hi, padded_w):
        memcpy(target + wp * pixel_stride, &padding, 8)


cdef inline void fill_channel_blocks16(uint8_t* target, Py_ssize_t pixel_stride,
                                       const uint8_t* source, Py_ssize_t plane,
                                       Py_ssize_t blocks, Py_ssize_t lo, Py_ssize_t hi,
                                       Py_ssize_t shift, uint8_t flip,
                                       Py_ssize_t readable) noexcept nogil:
    """The first 16 * blocks channels (planes `plane` bytes apart) at
    positions [lo, hi) of a row of the copy, position wp reading
    source[wp + shift] (the image's bytes end `readable` bytes after
    source): 16 channels by 16 positions per transpose."""
    cdef Py_ssize_t block, wp, at
    for block in range(blocks):
        wp = lo
        while wp < hi:
            at = 16 * block * plane + wp + shift
            transpose_block16(source + at, plane, 16, min(<Py_ssize_t>16, hi - wp),
                              target + 16 * block + wp * pixel_stride, pixel_stride, flip,
                              readable - at)
            wp = wp + 16


cdef void fill_position_block(const uint8_t* image, Py_ssize_t first, Py_ssize_t count,
                              Py_ssize_t group_count, Py_ssize_t group_channels,
                              Py_ssize_t block_padded, Py_ssize_t positions,
                              uint8_t* interior, uint8_t flip) noexcept nogil:
    """Unfolded copy without column padding: positions [first, first + count)
    of the interior (consecutive in the image and in the copy), every channel."""
    cdef Py_ssize_t pixel_stride = group_count * block_padded
    cdef Py_ssize_t blocks16 = group_channels // 16
    cdef Py_ssize_t octets = group_channels // 8
    cdef Py_ssize_t quads = group_channels // 4
    cdef Py_ssize_t g, c, wp
    cdef const uint8_t* source
    cdef uint8_t* target
    for g in range(group_count):
        source = image + g * group_channels * positions + first
        target = interior + first * pixel_stride + g * block_padded
        fill_channel_blocks16(target, pixel_stride, source, positions, blocks16, 0, count, 0,
                              flip, (group_count * group_channels - g * group_channels)
                              * positions - first)
        for c in range(2 * blocks16, octets):
            fill_channel_octet(target + 8 * c, pixel_stride, source + 8 * c * positions,
                               positions, 0, 0, count, count, flip, 0)
        for c in range(2 * octets, quads):
            fill_channel_quad(<uint32_t*>(target + 4 * c), pixel_stride // 4,
                              source + 4 * c * positions, positions, 0, 0, count, count, flip, 0)
        for c in range(4 * quads, group_channels):
            fill_channel_run(target + c, pixel_stride, source + c * positions, 0, 0, count,
                             count, flip, 0)
        for c in range(group_channels, block_padded):
            for wp in range(count):
                target[c + wp * pixel_stride] = 0


cdef void fill_channels_last_row(const uint8_t* image, Py_ssize_t hp, Py_ssize_t group_count,
                                 Py_ssize_t group_channels, Py_ssize_t taps_per_run,
                                 Py_ssize_t block_padded, Py_ssize_t height, Py_ssize_t width,
                                 Py_ssize_t pad_top, Py_ssize_t pad_left, Py_ssize_t padded_w,
                                 Py_ssize_t dilation_w, uint8_t flip, uint8_t pad_value,
                                 uint8_t* buffer) noexcept nogil:
    """Row hp of the padded channels-last image: position (hp, wp) holds, per
    group, `taps_per_run` blocks of the group's channels (block j: input column
    wp + j * dilation_w), then zeros up to block_padded bytes.

    Unfolded (taps_per_run = 1), channels start 4-byte aligned (block_padded is a
    multiple of 4), so whole quads of channels go out as 32-bit words.
    """
    cdef Py_ssize_t pixel_stride = group_count * block_padded
    cdef Py_ssize_t ih = hp - pad_top
    cdef Py_ssize_t plane = height * width
    cdef Py_ssize_t g, j, c, wp, shift, lo, hi, quads, blocks16
    cdef bint inside = 0 <= ih < height
    cdef uint8_t* row = buffer + hp * padded_w * pixel_stride
    cdef uint8_t* target
    cdef const uint8_t* source
    for g in range(group_count):
        for j in range(taps_per_run):
            # Position wp reads input column wp + shift when inside the row;
            # padding rows are padding from end to end.
            shift = j * dilation_w - pad_left
            lo = min(max(-shift, 0), padded_w) if inside else padded_w
            hi = min(max(width - shift, lo), padded_w) if inside else padded_w
            source = image + ((g * group_channels) * height + (ih if inside else 0)) * width
            # (An unpadded copy's positions are not whole words apart.)
            quads = group_channels // 4 if taps_per_run == 1 and block_padded % 4 == 0 else 0
            blocks16 = quads // 4
            if blocks16:
                target = row + g * block_padded
                fill_channel_blocks16(target, pixel_stride, source, plane, blocks16, lo, hi,
                                      shift, flip, group_count * group_channels * plane
                                      - (source - image))
                for wp in range(lo):
                    memset(target + wp * pixel_stride, pad_value, 16 * blocks16)
                for wp in range(hi, padded_w):
                    memset(target + wp * pixel_stride, pad_value, 16 * blocks16)
            for c in range(2 * blocks16, quads // 2):
                fill_channel_octet(row + g * block_padded + 8 * c, pixel_stride,
                                   source + 8 * c * plane, plane, shift, lo, hi, padded_w,
                                   flip, pad_value)
            for c in range(2 * (quads // 2), quads):
                fill_channel_quad(<uint32_t*>(row + g * block_padded + 4 * c), pixel_stride // 4,
                                  source + 4 * c * plane, plane, shift, lo, hi, padded_w, flip,
                                  pad_value)
            if pixel_stride == 3 and group_channels == 3:
                fill_channel_triple(row, source, plane, shift, lo, hi, padded_w, flip, pad_value)
                continue
            for c in range(4 * quads, group_channels):
                fill_channel_run(row + g * block_padded + j * group_channels + c, pixel_stride,
                                 source + c * plane, shift, lo, hi, padded_w, flip, pad_value)
        for c in range(taps_per_run * group_channels, block_padded):
            target = row + g * block_padded + c
            for wp in range(padded_w):
                target[wp * pixel_stride] = 0


def conv2d(const uint8_t[:, :, :, ::1] image, bint input_flip, uint8_t input_zero,
           const int8_t[:, ::1] filter_packed, const int64_t[:, ::1] filter_colsum,
           Py_ssize_t kernel_h, Py_ssize_t kernel_w, Py_ssize_t taps_per_run, strides, dilations,
           start_padding, end_padding, const int32_t[::1] col_zero,
           const float[::1] multiplier, const int32_t[::1] out_zero, bias,
           uint8_t[:, :, ::1] out, int32_t low, int32_t high, int n_threads, bint raw=False,
           bint unpadded=False, bint channels_last_input=False,
           bint channels_last_output=False):
    """Grouped convolution as an implicit GEMM per image and group: output
    pixels are the rows of A, read through per-tap offsets in a padded
    channels-last copy of the image; the packed filter is B.

    The image is (N, C, H, W), or (N, H, W, C) with channels_last_input; out
    is (N, OC, pixels) bytes, or (N, pixels, OC) with channels_last_output,
    each pixel's output channels then one run (the product's rows stored as
    they are, where channels-first stores them transposed).

    With unpadded (one group, taps_per_run = kernel_w, dilation_w = 1), the copy holds
    each position's channels with no padding to 4 bytes and no folding, so a
    filter row's taps are the kernel_w positions' channels end to end: one
    run per step, as folded, from a copy kernel_w times smaller.  A network's
    first convolution (3 channels, 7 x 7) packs 7 runs of 21 per pixel.
    """
    cdef Convolution conv
    cdef Gemm gemm
    cdef Epilogue epilogue
    n_threads = max(n_threads, 1)
    buffers = describe_convolution(&conv, &gemm, &epilogue, image, input_flip, input_zero,
                                   filter_packed, filter_colsum, kernel_h, kernel_w,
                                   taps_per_run, strides, dilations, start_padding,
                                   end_padding, col_zero, multiplier, out_zero, bias, out, low,
                                   high, raw, unpadded, n_threads, channels_last_input,
                                   channels_last_output)
    if buffers is None:
        return
    with nogil:
        run_convolution(&conv, &gemm, &epilogue, n_threads)
    del buffers  # what the run read through c, gemm and e


cdef object describe_convolution(
        Convolution* conv, Gemm* gemm, Epilogue* epilogue, const uint8_t[:, :, :, ::1] image,
        bint input_flip, uint8_t input_zero, const int8_t[:, ::1] filter_packed,
        const int64_t[:, ::1] filter_colsum, Py_ssize_t kernel_h, Py_ssize_t kernel_w,
        Py_ssize_t taps_per_run, strides, dilations, start_padding, end_padding,
        const int32_t[::1] col_zero, const float[::1] multiplier, const int32_t[::1] out_zero,
        bias, uint8_t[:, :, ::1] out, int32_t low, int32_t high, bint raw, bint unpadded,
        int n_threads, bint channels_last_input=False, bint channels_last_output=False):
    """conv2d's operands checked (check_convolution) and described; returns
    what setup_convolution returns, or None when there is nothing to
    compute."""
    conv.channels_last_input = channels_last_input
    conv.channels_last_output = channels_last_output
    if not check_convolution(conv, image, filter_packed, filter_colsum, kernel_h, kernel_w,
                             taps_per_run, strides, dilations, start_padding, end_padding,
                             col_zero, multiplier, out_zero, bias, out, raw):
        return None
    conv.input_flip = input_flip
    if unpadded and (conv.group_count != 1 or taps_per_run != kernel_w or conv.dilation_w != 1):
        raise ValueError("conv2d: an unpadded copy takes one group, taps_per_run kernel_w, "
                         "dilation_w 1")
    conv.unpadded = unpadded
    if unpadded:
        conv.block_padded = conv.group_channels
        conv.pixel_stride = conv.group_channels
    return setup_convolution(conv, gemm, epilogue, image, filter_packed, filter_colsum,
                             input_zero, col_zero, multiplier, out_zero, bias, out, low, high,
                             raw, n_threads)


cdef struct Convolution:
    # conv2d's geometry and operands: checked (check_convolution), set up
    # (setup_convolution) and run (run_convolution).
    Py_ssize_t batch
    Py_ssize_t channels
    Py_ssize_t height
    Py_ssize_t width
    Py_ssize_t group_count
    Py_ssize_t group_channels
    Py_ssize_t group_outputs
    Py_ssize_t out_channels
    Py_ssize_t pixels
    Py_ssize_t out_h
    Py_ssize_t out_w
    Py_ssize_t kernel_h
    Py_ssize_t kernel_w
    Py_ssize_t taps_per_run
    Py_ssize_t stride_h
    Py_ssize_t stride_w
    Py_ssize_t dilation_h
    Py_ssize_t dilation_w
    Py_ssize_t pad_top
    Py_ssize_t pad_left
    Py_ssize_t padded_h
    Py_ssize_t padded_w
    Py_ssize_t block_padded       # bytes of a step's channels in the copy (a multiple of 4)
    Py_ssize_t steps              # kernel steps: taps, or filter rows when folded
    Py_ssize_t pixel_stride       # bytes per position of the copy
    Py_ssize_t image_bytes        # bytes per image of the copy
    Py_ssize_t chunk              # images copied at a time
    bint plane_runs               # the copy's interior is one run per channel
    bint needs_row_sums           # some filter zero point b_zp' is not 0
    bint input_flip
    bint unpadded                    # positions hold just their channels (see conv2d)
    bint channels_last_input      # the image is (N, H, W, C)
    bint channels_last_output     # out is (N, pixels, OC)
    uint8_t pad_value             # the input zero point as the copy stores it
    const uint8_t* image
    const int8_t* filter_packed
    Py_ssize_t packed_stride      # bytes per group of the packed filter
    const int64_t* filter_colsum
    Py_ssize_t colsum_stride
    uint8_t* out
    uint8_t* buffer               # the copies of a chunk of images
    int64_t* sums                 # their row sums, when needed
    int32_t row_zero              # the input zero point as A' (Epilogue.row_zero)
    const int64_t* terms          # the bias per output channel, or NULL


cdef class BoundConvolution:
    """conv2d with its filter and parameters bound, for one image shape (a
    compiled operator's convolution, called again and again): checked and
    described once, its offsets made once, so that a call
    (:meth:`run_fresh`) costs its run, this thread's workspaces and a new
    output.

    The arguments are conv2d's, with the image's shape for the image, the
    bytes' shape conv2d writes (``out_shape``) for out, and the shape and
    dtype of the output arrays :meth:`run_fresh` makes (the same bytes).
    """
    cdef Convolution conv
    cdef Gemm gemm
    cdef Epilogue epilogue
    cdef object kept               # the arrays the descriptions point into
    cdef Py_ssize_t image_bytes
    cdef bint empty
    cdef int most_threads, fresh_rank
    cdef cnp.dtype fresh_dtype
    cdef cnp.npy_intp fresh_dims[cnp.NPY_MAXDIMS]

    def __init__(self, image_shape, bint input_flip, uint8_t input_zero,
                 const int8_t[:, ::1] filter_packed, const int64_t[:, ::1] filter_colsum,
                 Py_ssize_t kernel_h, Py_ssize_t kernel_w, Py_ssize_t taps_per_run, strides,
                 dilations, start_padding, end_padding, const int32_t[::1] col_zero,
                 const float[::1] multiplier, const int32_t[::1] out_zero, bias, out_shape,
                 int32_t low, int32_t high, fresh_shape, fresh_dtype, int most_threads,
                 bint raw=False, bint unpadded=False, bint channels_last_input=False,
                 bint channels_last_output=False):
        cdef Py_ssize_t[::1] row_view, step_view
        image = np.zeros(tuple(image_shape), np.uint8)
        out = np.empty(tuple(out_shape), np.uint8)
        output_form(fresh_shape, fresh_dtype, out.size, self.fresh_dims, &self.fresh_rank)
        self.fresh_dtype = np.dtype(fresh_dtype)
        self.image_bytes = image.size
        self.most_threads = max(most_threads, 1)
        described = describe_convolution(
            &self.conv, &self.gemm, &self.epilogue, image, input_flip, input_zero, filter_packed,
            filter_colsum, kernel_h, kernel_w, taps_per_run, strides, dilations, start_padding,
            end_padding, col_zero, multiplier, out_zero, bias, out, low, high, raw, unpadded, 1,
            channels_last_input, channels_last_output)
        self.empty = described is None
        if self.empty:
            return
        # The offsets are this object's (the thread's workspaces hold only
        # what one call uses); the epilogue's row zero is this object's
        # conv.row_zero already.
        row_offsets = np.empty(max(self.conv.pixels, 1), np.intp)
        step_offsets = np.empty(max(self.conv.steps, 1), np.intp)
        row_view, step_view = row_offsets, step_offsets
        memcpy(&row_view[0], self.gemm.row_offset, self.conv.pixels * sizeof(Py_ssize_t))
        memcpy(&step_view[0], self.gemm.step_offset, self.conv.steps * sizeof(Py_ssize_t))
        self.gemm.row_offset = &row_view[0]
        self.gemm.step_offset = &step_view[0]
        self.kept = (described[0], row_offsets, step_offsets, filter_packed, filter_colsum,
                     col_zero, multiplier, out_zero)

    def run_fresh(self, image, int n_threads):
        """A new output of the convolution of ``image``, or None (nothing
        run) unless it is a C-contiguous NumPy array of the bound image's
        bytes."""
        cdef cnp.ndarray out
        cdef Convolution conv
        cdef Gemm gemm
        cdef Epilogue epilogue
        cdef const uint8_t* data = NULL
        if self.empty or not bytes_taken(image, self.image_bytes, &data):
            return None
        out = empty_array(self.fresh_rank, self.fresh_dims, self.fresh_dtype)
        conv, gemm, epilogue = self.conv, self.gemm, self.epilogue
        n_threads = max(1, min(n_threads, self.most_threads))
        keep = []
        conv.image = data
        conv.out = <uint8_t*>cnp.PyArray_DATA(out)
        convolution_workspaces(&conv, &gemm, n_threads, keep)
        with nogil:
            run_convolution(&conv, &gemm, &epilogue, n_threads)
        del keep  # what the run read through conv and gemm
        return out


cdef bint check_convolution(Convolution* conv, const uint8_t[:, :, :, ::1] image,
                            const int8_t[:, ::1] filter_packed,
                            const int64_t[:, ::1] filter_colsum, Py_ssize_t kernel_h,
                            Py_ssize_t kernel_w, Py_ssize_t taps_per_run, strides, dilations,
                            start_padding, end_padding, const int32_t[::1] col_zero,
                            const float[::1] multiplier, const int32_t[::1] out_zero, bias,
                            uint8_t[:, :, ::1] out, bint raw) except -1:
    """The geometry into ``c``; False when there is nothing to compute.  The
    glue's contract, checked once: the packed filter, the vectors and the
    output match the geometry, and every tap of every pixel reads inside the
    copy (ValueError otherwise: the run trusts it for every access)."""
    conv.batch = image.shape[0]
    if conv.channels_last_input:
        conv.height, conv.width, conv.channels = image.shape[1], image.shape[2], image.shape[3]
    else:
        conv.channels, conv.height, conv.width = image.shape[1], image.shape[2], image.shape[3]
    conv.group_count = filter_packed.shape[0]
    if conv.channels_last_output:
        conv.pixels, conv.out_channels = out.shape[1], out.shape[2] // (4 if raw else 1)
        if out.shape[2] != conv.out_channels * (4 if raw else 1):
            raise ValueError("conv2d: arguments do not match the convolution's geometry")
    else:
        conv.out_channels, conv.pixels = out.shape[1], out.shape[2] // (4 if raw else 1)
    conv.kernel_h, conv.kernel_w, conv.taps_per_run = kernel_h, kernel_w, taps_per_run
    conv.stride_h, conv.stride_w = strides[0], strides[1]
    conv.dilation_h, conv.dilation_w = dilations[0], dilations[1]
    conv.pad_top, conv.pad_left = start_padding[0], start_padding[1]
    conv.padded_h = conv.height + conv.pad_top + end_padding[0]
    conv.padded_w = conv.width + conv.pad_left + end_padding[1]
    if conv.batch == 0 or conv.out_channels == 0 or conv.pixels == 0:
        return False
    if (conv.group_count < 1 or conv.channels % conv.group_count
        or conv.out_channels % conv.group_count
            or taps_per_run < 1):
        raise ValueError("conv2d: arguments do not match the convolution's geometry")
    conv.group_channels = conv.channels // conv.group_count
    conv.group_outputs = conv.out_channels // conv.group_count
    conv.block_padded = round_up(taps_per_run * conv.group_channels, 4)
    conv.steps = kernel_h * (kernel_w // taps_per_run)
    conv.pixel_stride = conv.group_count * conv.block_padded
    conv.out_w = 0
    if conv.stride_w > 0 and conv.padded_w > (kernel_w - 1) * conv.dilation_w:
        conv.out_w = (conv.padded_w - (kernel_w - 1) * conv.dilation_w - 1) // conv.stride_w + 1
    conv.out_h = conv.pixels // conv.out_w if conv.out_w > 0 else 0
    if (taps_per_run not in (1, kernel_w) or kernel_h < 1 or kernel_w < 1
            or conv.stride_h < 1 or conv.stride_w < 1 or conv.dilation_h < 1 or conv.dilation_w < 1
            or min(conv.pad_top, conv.pad_left, end_padding[0], end_padding[1]) < 0
            or conv.out_w < 1 or conv.out_h * conv.out_w != conv.pixels
            or (conv.out_h - 1) * conv.stride_h + (kernel_h - 1) * conv.dilation_h >= conv.padded_h
            or (conv.out_w - 1) * conv.stride_w + (kernel_w - 1) * conv.dilation_w >= conv.padded_w
            or filter_packed.shape[1] < packed_b_bytes(kernel_h * kernel_w * conv.group_channels,
                                                       conv.group_outputs)
            or filter_colsum.shape[0] != conv.group_count
            or filter_colsum.shape[1] < conv.group_outputs
            or col_zero.shape[0] != conv.out_channels or multiplier.shape[0] != conv.out_channels
            or out_zero.shape[0] != conv.out_channels or out.shape[0] != conv.batch
            or (not conv.channels_last_output and out.shape[2] != conv.pixels * (4 if raw else 1))
            or (bias is not None and len(bias) != conv.out_channels)):
        raise ValueError("conv2d: arguments do not match the convolution's geometry")
    return True


cdef object setup_convolution(Convolution* conv, Gemm* gemm, Epilogue* epilogue,
                              const uint8_t[:, :, :, ::1] image,
                              const int8_t[:, ::1] filter_packed,
                              const int64_t[:, ::1] filter_colsum, uint8_t input_zero,
                              const int32_t[::1] col_zero, const float[::1] multiplier,
                              const int32_t[::1] out_zero, bias, uint8_t[:, :, ::1] out,
                              int32_t low, int32_t high, bint raw, int n_threads):
    """Offsets, buffers and the GEMM and epilogue descriptions of a checked
    convolution; returns the arrays they point into (the caller keeps them
    until the run ends)."""
    cdef Py_ssize_t oh, ow, kh, kw, column
    cdef int64_t largest_bias = 0
    cdef int32_t zero_point = (input_zero ^ (0x80 if conv.input_flip else 0))
    conv.needs_row_sums = False
    for column in range(conv.out_channels):
        conv.needs_row_sums = conv.needs_row_sums or col_zero[column] != 0
    terms = np.asarray(bias, np.int64) if bias is not None else np.zeros(1, np.int64)
    if bias is not None:
        largest_bias = largest_magnitude(terms)
    conv.plane_runs = (conv.taps_per_run == 1 and conv.padded_w == conv.width and conv.height > 0
                       and not conv.channels_last_input)
    conv.pad_value = <uint8_t>zero_point
    # Per pixel, its first tap's position; per step, the tap's distance from it.
    keep = []
    cdef Py_ssize_t* row_offset = <Py_ssize_t*>workspace_bytes(
        "row offsets", conv.pixels * sizeof(Py_ssize_t), keep)
    cdef Py_ssize_t* step_offset = <Py_ssize_t*>workspace_bytes(
        "step offsets", conv.steps * sizeof(Py_ssize_t), keep)
    # Row by row: no division per pixel.
    for oh in range(conv.out_h):
        for ow in range(conv.out_w):
            row_offset[oh * conv.out_w + ow] = (oh * conv.stride_h * conv.padded_w
                                             + ow * conv.stride_w) * conv.pixel_stride
    for kh in range(conv.kernel_h):
        for kw in range(conv.kernel_w // conv.taps_per_run):
            step_offset[kh * (conv.kernel_w // conv.taps_per_run) + kw] = (
                (kh * conv.dilation_h * conv.padded_w + kw * conv.dilation_w) * conv.pixel_stride)
    # Images go through in chunks of up to CHUNK_BYTES of copies, each chunk
    # one batched GEMM per group.
    conv.image_bytes = max(conv.padded_h * conv.padded_w * conv.pixel_stride, 1)
    conv.chunk = max(1, min(conv.batch, CHUNK_BYTES // conv.image_bytes))
    gemm.a_ready = NULL
    gemm.a_packed = NULL
    gemm.b_narrow = NULL
    if conv.needs_row_sums:
        # Summed by the units (ensure_row_sums), the states zeroed per GEMM.
        gemm.a_sums_stride = conv.pixels
        gemm.a_row_states = row_sum_states(conv.pixels)
    convolution_workspaces(conv, gemm, n_threads, keep)
    cdef const int64_t[::1] term_view = terms
    conv.image = &image[0, 0, 0, 0]
    conv.filter_packed = &filter_packed[0, 0]
    conv.packed_stride = filter_packed.shape[1]
    conv.filter_colsum = &filter_colsum[0, 0]
    conv.colsum_stride = filter_colsum.shape[1]
    conv.out = &out[0, 0, 0]
    conv.terms = &term_view[0] if bias is not None else NULL
    gemm.row_offset = row_offset
    gemm.a_slack = A_SLACK
    gemm.lda = 0
    gemm.m = conv.pixels
    gemm.step_offset = step_offset
    gemm.steps = conv.steps
    gemm.step_length = conv.taps_per_run * conv.group_channels
    gemm.groups = ceil_div(conv.steps * gemm.step_length, 4)
    gemm.a_flip = 0  # the copy holds A'
    gemm.b_ready = NULL  # the filter comes packed
    gemm.n = conv.group_outputs
    if conv.channels_last_output:
        gemm.out_row_stride = conv.out_channels
        gemm.out_col_stride = 1
    else:
        gemm.out_row_stride = 1
        gemm.out_col_stride = conv.pixels
    gemm.a_index = NULL
    gemm.b_index = NULL
    gemm.a_batch_stride = conv.image_bytes
    gemm.b_batch_stride = 0
    gemm.out_batch_stride = conv.out_channels * conv.pixels
    epilogue.row_sum_batch_stride = conv.pixels
    epilogue.column_sum_batch_stride = 0
    conv.row_zero = zero_point
    epilogue.row_zero = &conv.row_zero
    epilogue.row_zero_step = 0
    epilogue.k = conv.group_channels * conv.kernel_h * conv.kernel_w
    epilogue.column_zero = &col_zero[0]
    epilogue.multiplier = &multiplier[0]
    epilogue.out_zero = &out_zero[0]
    epilogue.multiplier_step = 0
    epilogue.out_zero_step = 0
    epilogue.low = low
    epilogue.high = high
    epilogue.per_row = False
    epilogue.row_sums_given = False
    epilogue.sums_fit_int32 = fits_int32(epilogue.k, largest_bias)
    epilogue.raw = raw
    epilogue.to_float = False
    epilogue.float_bias = NULL
    epilogue.row_stores = NULL
    if raw and not epilogue.sums_fit_int32:
        raise ValueError("conv2d: raw sums need K that keeps every value inside int32")
    return terms, keep


cdef int convolution_workspaces(Convolution* conv, Gemm* gemm, int n_threads,
                                list keep) except -1:
    """A described convolution's buffers for one run, from this thread's
    workspaces (``keep`` holds any made fresh until the run ends): the
    channels-last copies, their row sums and bands where a filter zero point
    asks for them, the threads' scratch."""
    # A_SLACK bytes past the last run (gemm.a_slack).
    conv.buffer = workspace_bytes("channels last", conv.chunk * conv.image_bytes + A_SLACK, keep)
    # Written before they are read (ensure_row_sums).
    conv.sums = <int64_t*>workspace_bytes("row sums", conv.chunk * conv.pixels * sizeof(int64_t),
                                          keep)
    if conv.needs_row_sums:
        gemm.a_sums = conv.sums
        gemm.a_ready = <int32_t*>workspace_bytes(
            "row-sum states", conv.chunk * gemm.a_row_states * sizeof(int32_t), keep)
    gemm.scratch = workspace_bytes("scratch", scratch_bytes(n_threads), keep)
    return 0


cdef void run_convolution(const Convolution* conv, Gemm* gemm, Epilogue* epilogue,
                          int n_threads) noexcept nogil:
    """Chunk by chunk: the images' channels-last copies, then per group one
    batched GEMM over the chunk (whose units sum their pixels' rows, when a
    filter zero point asks for them)."""
    cdef Py_ssize_t first = 0, count, member, group
    cdef Py_ssize_t plane = conv.channels * conv.height * conv.width
    cdef Py_ssize_t out_image = conv.out_channels * conv.pixels * (4 if epilogue.raw else 1)
    cdef const int32_t* column_zero = epilogue.column_zero
    cdef const float* multiplier = epilogue.multiplier
    cdef const int32_t* out_zero = epilogue.out_zero
    while first < conv.batch:
        count = min(conv.chunk, conv.batch - first)
        for member in range(count):
            fill_channels_last(conv.image + (first + member) * plane, conv.channels_last_input,
                               conv.channels, conv.plane_runs,
                               conv.group_count, conv.group_channels,
                               1 if conv.unpadded else conv.taps_per_run, conv.block_padded,
                               conv.height, conv.width, conv.padded_h, conv.padded_w,
                               conv.pad_top, conv.pad_left, conv.dilation_w,
                               0x80 if conv.input_flip else 0, conv.pad_value,
                               conv.buffer + member * conv.image_bytes, n_threads)
        gemm.batch = count
        for group in range(conv.group_count):
            gemm.b = conv.filter_packed + group * conv.packed_stride
            gemm.out = (conv.out + first * out_image
                        + group * conv.group_outputs * (1 if conv.channels_last_output
                                                        else conv.pixels)
                        * (4 if epilogue.raw else 1))
            epilogue.column_term = (conv.terms + group * conv.group_outputs
                                    if conv.terms != NULL else NULL)
            epilogue.column_sum = conv.filter_colsum + group * conv.colsum_stride
            epilogue.column_zero = column_zero + group * conv.group_outputs
            epilogue.multiplier = multiplier + group * conv.group_outputs
            epilogue.out_zero = out_zero + group * conv.group_outputs
            epilogue.row_sum = NULL
            if conv.needs_row_sums:
                memset(gemm.a_ready, 0, count * gemm.a_row_states * sizeof(int32_t))
                epilogue.row_sum = conv.sums
            gemm.a = conv.buffer + group * conv.block_padded
            run_gemm(gemm, epilogue, n_threads)
        first = first + count


cdef void fill_channels_last(const uint8_t* image, bint channels_last, Py_ssize_t channels,
                             bint plane_runs, Py_ssize_t group_count,
                             Py_ssize_t group_channels, Py_ssize_t taps_per_run,
                             Py_ssize_t block_padded,
                             Py_ssize_t height, Py_ssize_t width, Py_ssize_t padded_h,
                             Py_ssize_t padded_w, Py_ssize_t pad_top, Py_ssize_t pad_left,
                             Py_ssize_t dilation_w, uint8_t flip, uint8_t pad_value,
                             uint8_t* buffer, int n_threads) noexcept nogil:
    """The padded channels-last copy of one image (``channels_last``: an
    image of H rows of W x ``channels`` bytes, copied by rows with no
    transposition, a run of bytes per tap), rows (or blocks of positions) in
    parallel."""
    cdef ChannelsLast job
    job.image = image
    job.channels = channels
    job.group_count = group_count
    job.group_channels = group_channels
    job.taps_per_run = taps_per_run
    job.block_padded = block_padded
    job.height = height
    job.width = width
    job.pad_top = pad_top
    job.pad_left = pad_left
    job.padded_w = padded_w
    job.dilation_w = dilation_w
    job.flip = flip
    job.pad_value = pad_value
    job.buffer = buffer
    if channels_last:
        run_range(copy_rows, &job, padded_h, 1, n_threads)
    elif plane_runs:
        # No column padding and one tap per step: the interior rows of a
        # channel are one run in the image and in the copy, copied in blocks
        # of positions; only the padding rows go row by row.
        job.padding_rows_only = True
        if padded_h > height:
            run_range(fill_rows, &job, padded_h, 1, n_threads)
        # At least a block per thread (a 7 x 7 image's 49 positions took
        # blocks of 32 and 17), each starting at a multiple of 8 positions.
        job.position_blocks = min(max(ceil_div(height * width, POSITION_BLOCK), n_threads),
                                  ceil_div(height * width, 8))
        run_range(fill_position_blocks, &job, job.position_blocks, 1, n_threads)
    else:
        job.padding_rows_only = False
        run_range(fill_rows, &job, padded_h, 1, n_threads)


cdef struct ChannelsLast:
    # fill_channels_last's arguments, for its tasks.
    const uint8_t* image
    Py_ssize_t channels           # a channels-last image's bytes per position
    Py_ssize_t group_count
    Py_ssize_t group_channels
    Py_ssize_t taps_per_run
    Py_ssize_t block_padded
    Py_ssize_t height
    Py_ssize_t width
    Py_ssize_t pad_top
    Py_ssize_t pad_left
    Py_ssize_t padded_w
    Py_ssize_t dilation_w
    uint8_t flip
    uint8_t pad_value
    uint8_t* buffer
    bint padding_rows_only
    Py_ssize_t position_blocks    # the interior's blocks of positions (fill_position_blocks)


cdef void fill_rows(void* context, Py_ssize_t start, Py_ssize_t stop, int slot) noexcept nogil:
    """Rows [start, stop) of the padded copy (only its padding rows, when
    padding_rows_only)."""
    cdef const ChannelsLast* j = <const ChannelsLast*>context
    cdef Py_ssize_t hp
    for hp in range(start, stop):
        if j.padding_rows_only and j.pad_top <= hp < j.pad_top + j.height:
            continue
        fill_channels_last_row(j.image, hp, j.group_count, j.group_channels, j.taps_per_run,
                               j.block_padded, j.height, j.width, j.pad_top, j.pad_left,
                               j.padded_w, j.dilation_w, j.flip, j.pad_value, j.buffer)


cdef void fill_position_blocks(void* context, Py_ssize_t start, Py_ssize_t stop,
                               int slot) noexcept nogil:
    """Blocks [start, stop) of the interior's position_blocks: block i from
    position i * positions // position_blocks (rounded down to 8) on."""
    cdef const ChannelsLast* j = <const ChannelsLast*>context
    cdef Py_ssize_t positions = j.height * j.width, run, first, end
    for run in range(start, stop):
        first = (run * positions // j.position_blocks) & ~7
        end = (positions if run + 1 == j.position_blocks
               else ((run + 1) * positions // j.position_blocks) & ~7)
        if end > first:
            fill_position_block(j.image, first, end - first, j.group_count, j.group_channels,
                                j.block_padded, positions,
                                j.buffer + j.pad_top * j.padded_w * j.group_count
                                * j.block_padded, j.flip)


cdef void copy_rows(void* context, Py_ssize_t start, Py_ssize_t stop, int slot) noexcept nogil:
    """Rows [start, stop) of a channels-last image's copy: row hp holds what
    fill_channels_last_row writes there, read from the image's row hp -
    pad_top."""
    cdef const ChannelsLast* j = <const ChannelsLast*>context
    cdef Py_ssize_t pixel_stride = j.group_count * j.block_padded
    cdef Py_ssize_t run_bytes = j.taps_per_run * j.group_channels
    cdef Py_ssize_t hp, ih, wp, iw, g, t, lo, hi
    cdef bint inside
    cdef uint8_t* row
    cdef uint8_t* target
    cdef const uint8_t* image_row
    # One tap a position and no bytes between the groups: the interior of a
    # row is the image's row, byte for byte.
    cdef bint whole_rows = (j.taps_per_run == 1 and j.flip == 0
                            and pixel_stride == j.channels)
    for hp in range(start, stop):
        ih = hp - j.pad_top
        inside = 0 <= ih < j.height
        row = j.buffer + hp * j.padded_w * pixel_stride
        image_row = j.image + (ih if inside else 0) * j.width * j.channels
        if whole_rows and inside:
            lo = min(j.pad_left, j.padded_w)
            hi = min(j.pad_left + j.width, j.padded_w)
            memset(row, j.pad_value, lo * pixel_stride)
            memcpy(row + lo * pixel_stride, image_row, (hi - lo) * pixel_stride)
            memset(row + hi * pixel_stride, j.pad_value, (j.padded_w - hi) * pixel_stride)
            continue
        if run_bytes == j.block_padded and not inside:
            memset(row, j.pad_value, j.padded_w * pixel_stride)
            continue
        for wp in range(j.padded_w):
            for g in range(j.group_count):
                target = row + wp * pixel_stride + g * j.block_padded
                for t in range(j.taps_per_run):
                    iw = wp + t * j.dilation_w - j.pad_left
                    if inside and 0 <= iw < j.width:
                        copy_flipped(target + t * j.group_channels,
                                     image_row + iw * j.channels + g * j.group_channels,
                                     j.group_channels, j.flip)
                    else:
                        memset(target + t * j.group_channels, j.pad_value, j.group_channels)
                if j.block_padded > run_bytes:
                    memset(target + run_bytes, 0, j.block_padded - run_bytes)
