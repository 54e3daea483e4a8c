# -- depthwise convolution --------------------------------------------------------
# One input channel per group: a GEMM would have one row per group, so this
# runs directly, one (image, output channel) plane per task.
#
# Two kernels.  Every variant with a pair kernel (_depthwise_avx512.pxi,
# _depthwise_avx2.pxi, and _depthwise_sse2.pxi on any x86-64) runs
# horizontal strides 1 and 2, with sums that fit int32 with their bias,
# through it, driven by depthwise_pairs below.  Everything else takes the
# row kernel.  Both run one task per (image, output channel) on the
# process's pool (_qops_pool.pxd), as a range: each thread starts on its own
# segment of the planes, the same one call after call, so that it finds
# their input and output in its own cache.  (Handed out one at a time, the
# planes would move from core to core.)  The row kernel:
#
# Each task centres its input channel (x - x_zp, which fits int16) into a
# zero-padded plane split by column phase: with horizontal stride s, padded
# column c lives in phase c % s at index c // s.  Output column ow of tap
# (kh, kw) then reads phase (kw * dw) % s at index ow + (kw * dw) // s: every
# tap is one unit-stride loop over the output row, which the compiler
# vectorizes, and no column is computed only to be dropped.  Padding is 0
# after centring, so it contributes nothing; each pool slot's planes start
# zeroed (calloc) and every task writes the same interior, so the borders
# stay zero.  A sum has at
# most MAX_TAPS terms of magnitude <= 255 * 255: it fits int32.

from libc.stdint cimport int16_t
from libc.stdlib cimport calloc

from qops.backends.native.kernels._qops_pool cimport MAX_WORKERS


cdef inline int slots_for(int n_threads, Py_ssize_t tasks) noexcept nogil:
    """The pool slots a job of ``tasks`` tasks on ``n_threads`` threads can
    use (each needs its own scratch): at most one per thread, per task, and
    per worker the pool has, plus the caller."""
    cdef Py_ssize_t slots = min(<Py_ssize_t>max(1, n_threads), max(<Py_ssize_t>1, tasks))
    return <int>min(slots, <Py_ssize_t>MAX_WORKERS + 1)

cdef extern from *:
    # The centred plane never overlaps the image it is read from; saying so
    # lets the compiler vectorize the byte-to-int16 loops without a runtime
    # overlap test.
    ctypedef int16_t* int16_unaliased "int16_t * __restrict__"

cdef enum:
    # Filter taps per output channel: 4096 products of 8-bit differences
    # (255 * 255 each) leave room in int32 for a bias.
    MAX_TAPS = 4096
    # Rows are computed in whole vectors of 16 int32 lanes (one zmm), so the
    # loops have no scalar tails; the extra columns read zeros and are dropped.
    ROW_LANES = 16

#: The most filter taps the depthwise kernels take (the glue routes larger
#: filters to the GEMM kernels).
DEPTHWISE_MAX_TAPS = MAX_TAPS
#: Whether this variant has the pair kernel (every x86-64 one; a portable
#: build for another target runs the row kernel), which an expansion and its
#: depthwise convolution run as one job need (BoundExpandDepthwise).
PAIR_KERNEL = bool(DEPTHWISE_PAIRS)


cdef inline void centre_row(const uint8_t* source, Py_ssize_t count, Py_ssize_t step,
                            uint8_t flip, int32_t zero, int16_unaliased target) noexcept nogil:
    """target[i] <- (source[i * step] ^ flip) - zero; the common steps have
    loops of their own, which the compiler vectorizes."""
    cdef Py_ssize_t i
    if step == 1:
        for i in range(count):
            target[i] = <int16_t>((source[i] ^ flip) - zero)
    elif step == 2:
        for i in range(count):
            target[i] = <int16_t>((source[2 * i] ^ flip) - zero)
    else:
        for i in range(count):
            target[i] = <int16_t>((source[i * step] ^ flip) - zero)


cdef inline void accumulate_lanes(int32_t* sums, const int16_t* base, const Py_ssize_t* offsets,
                                  const int32_t* weights, Py_ssize_t count) noexcept nogil:
    """sums[i] <- sum over taps t of base[offsets[t] + i] * weights[t], i < ROW_LANES.

    The lanes' sums stay in one vector register across all taps."""
    cdef int32_t lanes[ROW_LANES]
    cdef const int16_t* source
    cdef int32_t weight
    cdef Py_ssize_t t, i
    for i in range(ROW_LANES):
        lanes[i] = 0
    for t in range(count):
        source = base + offsets[t]
        weight = weights[t]
        for i in range(ROW_LANES):
            lanes[i] += source[i] * weight
    for i in range(ROW_LANES):
        sums[i] = lanes[i]


cdef inline void split_pairs(const int16_t* line, Py_ssize_t count, int16_t* even,
                             int16_t* odd) noexcept nogil:
    """even[i] <- line[2i], odd[i] <- line[2i + 1]: each pair is read as one
    32-bit word and split, a loop the compiler vectorizes."""
    cdef Py_ssize_t i
    cdef uint32_t pair
    for i in range(count):
        memcpy(&pair, line + 2 * i, 4)
        even[i] = <int16_t>(pair & 0xFFFF)
        odd[i] = <int16_t>(pair >> 16)


cdef void fill_phases(const uint8_t* plane, Py_ssize_t height, Py_ssize_t width,
                      Py_ssize_t pad_top, Py_ssize_t pad_left, Py_ssize_t stride_w,
                      Py_ssize_t phase_pitch, Py_ssize_t phase_size, uint8_t flip,
                      int32_t zero, int16_t* phases, int16_t* line) noexcept nogil:
    """The interior of the centred, phase-split plane of one input channel.

    Stride 2 centres each padded row into `line` (padded width + 2 int16,
    zero padded) and splits it into its even and odd columns; other strides
    copy each phase's columns directly."""
    cdef Py_ssize_t ih, phase, first_column, first_index, count
    cdef Py_ssize_t filled_w = pad_left + width
    if stride_w == 2:
        for ih in range(height):
            memset(line, 0, pad_left * sizeof(int16_t))
            centre_row(plane + ih * width, width, 1, flip, zero, line + pad_left)
            memset(line + filled_w, 0, 2 * sizeof(int16_t))
            split_pairs(line, (filled_w + 1) // 2,
                        phases + (ih + pad_top) * phase_pitch,
                        phases + phase_size + (ih + pad_top) * phase_pitch)
        return
    for ih in range(height):
        for phase in range(stride_w):
            # Input columns of this phase: padded column phase + stride_w * index.
            first_column = (phase - pad_left) % stride_w
            if first_column < 0:
                first_column = first_column + stride_w
            if first_column >= width:
                continue
            count = (width - first_column + stride_w - 1) // stride_w
            first_index = (first_column + pad_left) // stride_w
            centre_row(plane + ih * width + first_column, count, stride_w, flip, zero,
                       phases + phase * phase_size + (ih + pad_top) * phase_pitch + first_index)


def depthwise2d(const uint8_t[:, :, :, ::1] image, bint input_signed, int32_t input_zero,
                const uint8_t[:, ::1] taps, bint filter_signed, const int32_t[::1] filter_zero,
                Py_ssize_t kernel_h, Py_ssize_t kernel_w, strides, dilations, start_padding,
                end_padding, const float[::1] multiplier, const int32_t[::1] out_zero, bias,
                uint8_t[:, :, :, ::1] out, int32_t low, int32_t high, int n_threads):
    """out[b, o] = requantize(sum over taps of (x[b, o // m] - x_zp)(w[o] - w_zp[o]) + bias[o])
    with m = out_channels // channels.  taps is (out_channels, kernel_h * kernel_w) bytes;
    multiplier, out_zero and bias have one value per output channel."""
    cdef Py_ssize_t batch = out.shape[0], out_channels = out.shape[1]
    cdef Py_ssize_t out_h = out.shape[2], out_w = out.shape[3]
    cdef Py_ssize_t channels = image.shape[1], height = image.shape[2], width = image.shape[3]
    cdef Py_ssize_t stride_h = strides[0], stride_w = strides[1]
    cdef Py_ssize_t dilation_h = dilations[0], dilation_w = dilations[1]
    cdef Py_ssize_t pad_top = start_padding[0], pad_left = start_padding[1]
    cdef Py_ssize_t padded_h = height + pad_top + end_padding[0]
    cdef Py_ssize_t padded_w = width + pad_left + end_padding[1]
    cdef Py_ssize_t count = kernel_h * kernel_w
    cdef Py_ssize_t per_channel, phase_pitch, phase_size, t
    cdef Py_ssize_t row_length = round_up(out_w, ROW_LANES)
    cdef int32_t centre_zero
    cdef uint8_t flip_input = 0x80 if input_signed else 0
    cdef const int32_t* bias_ptr = NULL
    cdef const int32_t[::1] bias_view
    if batch == 0 or out_channels == 0 or out_h == 0 or out_w == 0:
        return
    if count > MAX_TAPS:
        raise ValueError("depthwise2d: too many filter taps for an int32 sum")
    # The glue's contract, checked once: per-channel vectors are complete and
    # every tap of every output reads inside the padded plane.
    if (channels == 0 or out_channels % channels or out_channels < channels
            or taps.shape[0] != out_channels or taps.shape[1] != count
            or multiplier.shape[0] != out_channels or out_zero.shape[0] != out_channels
            or filter_zero.shape[0] != out_channels or out.shape[0] != image.shape[0]
            or (bias is not None and len(bias) != out_channels)
            or stride_h < 1 or stride_w < 1 or dilation_h < 1 or dilation_w < 1
            or min(pad_top, pad_left, end_padding[0], end_padding[1]) < 0
            or (out_h - 1) * stride_h + (kernel_h - 1) * dilation_h >= padded_h
            or (out_w - 1) * stride_w + (kernel_w - 1) * dilation_w >= padded_w):
        raise ValueError("depthwise2d: arguments do not match the convolution's geometry")
    per_channel = out_channels // channels
    if bias is not None:
        bias_view = bias
        bias_ptr = &bias_view[0]
    # Inputs are read as unsigned bytes; a signed input is shifted by 128 and
    # so is its zero point, which leaves every difference unchanged.
    centre_zero = input_zero + (128 if input_signed else 0)
    if runs_channels_last(per_channel, out_channels, out_h * out_w, padded_h * padded_w, count,
                          bias_ptr):
        channels_last(image, input_signed, centre_zero, taps, filter_signed, filter_zero,
                      kernel_h, kernel_w, stride_h, stride_w, dilation_h, dilation_w, pad_top,
                      pad_left, padded_w, padded_h * padded_w, multiplier, out_zero, bias_ptr,
                      out, low, high, n_threads)
        return
    if DEPTHWISE_PAIRS and stride_w <= 2 and sums_fit_int32(count, bias_ptr, out_channels):
        depthwise_pairs(image, input_signed, input_zero, taps, filter_signed, filter_zero,
                        kernel_h, kernel_w, stride_h, stride_w, dilation_h, dilation_w,
                        pad_top, pad_left, multiplier, out_zero, bias_ptr, out, low, high,
                        n_threads)
        return
    # Wide enough for the padded row length at the furthest tap column.
    phase_pitch = max(ceil_div(padded_w, stride_w),
                      row_length + ((kernel_w - 1) * dilation_w) // stride_w)
    phase_size = padded_h * phase_pitch
    # Per tap, where its reads start in the phases, for output row 0.
    offsets = np.empty(count, np.intp)
    cdef Py_ssize_t[::1] tap_offset = offsets
    for t in range(count):
        tap_offset[t] = (((t % kernel_w) * dilation_w) % stride_w * phase_size
                         + (t // kernel_w) * dilation_h * phase_pitch
                         + ((t % kernel_w) * dilation_w) // stride_w)
    # int16 phases, then int32 row sums, weights and the row's bytes, per slot.
    cdef RowJob row_job
    row_job.per_slot = (ceil_div(stride_w * phase_size, 2) + row_length + count + row_length // 4
                    + ceil_div(padded_w + 2, 2))
    cdef int threads = slots_for(n_threads, batch * out_channels)
    row_job.scratch = <int32_t*>calloc(threads * row_job.per_slot, sizeof(int32_t))
    if row_job.scratch == NULL:
        raise MemoryError()
    row_job.image = &image[0, 0, 0, 0]
    row_job.image_stride = channels * height * width
    row_job.height = height
    row_job.width = width
    row_job.taps = &taps[0, 0]
    row_job.count = count
    row_job.filter_signed = filter_signed
    row_job.filter_zero = &filter_zero[0]
    row_job.per_channel = per_channel
    row_job.out_channels = out_channels
    row_job.pad_top = pad_top
    row_job.pad_left = pad_left
    row_job.stride_h = stride_h
    row_job.stride_w = stride_w
    row_job.phase_pitch = phase_pitch
    row_job.phase_size = phase_size
    row_job.flip_input = flip_input
    row_job.centre_zero = centre_zero
    row_job.tap_offset = &tap_offset[0]
    row_job.bias = bias_ptr
    row_job.multiplier = &multiplier[0]
    row_job.out_zero = &out_zero[0]
    row_job.low = low
    row_job.high = high
    row_job.out = &out[0, 0, 0, 0]
    row_job.out_h = out_h
    row_job.out_w = out_w
    row_job.row_length = row_length
    with nogil:
        run_range(depthwise_row_tasks, &row_job, batch * out_channels, 1, threads)
    free(row_job.scratch)


cdef struct RowJob:
    # The row kernel's arguments and geometry, for its tasks.
    const uint8_t* image
    Py_ssize_t image_stride       # bytes per image
    Py_ssize_t height
    Py_ssize_t width
    const uint8_t* taps           # `count` bytes per output channel
    Py_ssize_t count
    bint filter_signed
    const int32_t* filter_zero
    Py_ssize_t per_channel
    Py_ssize_t out_channels
    Py_ssize_t pad_top
    Py_ssize_t pad_left
    Py_ssize_t stride_h
    Py_ssize_t stride_w
    Py_ssize_t phase_pitch
    Py_ssize_t phase_size
    uint8_t flip_input
    int32_t centre_zero
    const Py_ssize_t* tap_offset
    const int32_t* bias
    const float* multiplier
    const int32_t* out_zero
    int32_t low
    int32_t high
    uint8_t* out
    Py_ssize_t out_h
    Py_ssize_t out_w
    Py_ssize_t row_length
    int32_t* scratch              # per slot: phases, row sums, weights, row bytes, a line
    Py_ssize_t per_slot


cdef void depthwise_row_tasks(void* context, Py_ssize_t start, Py_ssize_t stop,
                             int slot) noexcept nogil:
    cdef Py_ssize_t job
    for job in range(start, stop):
        depthwise_row_task(context, job, slot)


cdef void depthwise_row_task(void* context, Py_ssize_t job_index, int slot) noexcept nogil:
    """Output channel job_index % out_channels of image job_index // out_channels."""
    cdef const RowJob* j = <const RowJob*>context
    cdef Py_ssize_t index = job_index // j.out_channels
    cdef Py_ssize_t o = job_index % j.out_channels
    cdef int16_t* phases = <int16_t*>(j.scratch + slot * j.per_slot)
    cdef int32_t* row = j.scratch + slot * j.per_slot + ceil_div(j.stride_w * j.phase_size, 2)
    cdef int32_t* weights = row + j.row_length
    cdef uint8_t* row_bytes = <uint8_t*>(weights + j.count)
    cdef int16_t* line = <int16_t*>(row_bytes + j.row_length)
    cdef const uint8_t* channel_taps = j.taps + o * j.count
    cdef Py_ssize_t t, oh, ow
    cdef int64_t bias_o
    for t in range(j.count):
        if j.filter_signed:
            weights[t] = <int8_t>channel_taps[t] - j.filter_zero[o]
        else:
            weights[t] = channel_taps[t] - j.filter_zero[o]
    fill_phases(j.image + index * j.image_stride + (o // j.per_channel) * j.height * j.width,
                j.height, j.width, j.pad_top, j.pad_left, j.stride_w, j.phase_pitch,
                j.phase_size, j.flip_input, j.centre_zero, phases, line)
    bias_o = j.bias[o] if j.bias != NULL else 0
    for oh in range(j.out_h):
        for ow in range(j.row_length // ROW_LANES):
            accumulate_lanes(row + ow * ROW_LANES,
                             phases + oh * j.stride_h * j.phase_pitch + ow * ROW_LANES,
                             j.tap_offset, weights, j.count)
        requantize_row(row, row_bytes, j.row_length, bias_o, j.multiplier[o], j.out_zero[o],
                       j.low, j.high, j.count)
        memcpy(j.out + (job_index * j.out_h + oh) * j.out_w, row_bytes, j.out_w)


cdef inline void requantize_row(const int32_t* sums, uint8_t* target, Py_ssize_t count,
                                int64_t bias, float multiplier, int32_t zero_point,
                                int32_t low, int32_t high, Py_ssize_t taps) noexcept nogil:
    """One output row; in int32 lanes when `taps` products and the bias fit int32."""
    cdef Py_ssize_t i
    if fits_int32(taps, bias if bias >= 0 else -bias):
        requantize_sums(sums, target, count, <uint32_t>bias, multiplier, zero_point, low, high)
        return
    for i in range(count):
        target[i] = <uint8_t>requantize(sums[i] + bias, multiplier, zero_point, low, high)


cdef bint sums_fit_int32(Py_ssize_t taps, const int32_t* bias, Py_ssize_t count) noexcept nogil:
    """Whether every channel's sum plus its bias fits int32."""
    cdef int64_t largest = 0
    cdef Py_ssize_t o
    if bias != NULL:
        for o in range(count):
            largest = max(largest, bias[o] if bias[o] >= 0 else -<int64_t>bias[o])
    return fits_int32(taps, largest)


cdef struct DepthwiseJob:
    # depthwise_pairs' arguments and geometry, for its tasks.
    const uint8_t* image
    Py_ssize_t image_stride       # bytes per image
    Py_ssize_t plane_stride       # bytes per input channel
    const uint8_t* taps           # kernel_h * kernel_w bytes per output channel
    bint filter_signed
    const int32_t* filter_zero
    bint input_signed
    int32_t input_zero
    Py_ssize_t kernel_h
    Py_ssize_t kernel_w
    bint paired
    Py_ssize_t columns
    Py_ssize_t stride_h
    bint interleaved
    Py_ssize_t width
    Py_ssize_t pad_top
    Py_ssize_t pad_left
    Py_ssize_t image_rows
    Py_ssize_t first_chunk
    Py_ssize_t chunks
    const uint32_t* masks
    const Py_ssize_t* offsets
    const int32_t* kernel_rows
    Py_ssize_t span
    Py_ssize_t pitch
    const float* multiplier
    const int32_t* out_zero
    const int32_t* bias
    uint8_t* out
    Py_ssize_t out_h
    Py_ssize_t out_w
    Py_ssize_t out_channels
    Py_ssize_t per_channel
    int32_t low
    int32_t high
    uint8_t* scratch              # per slot: the plane, then the weight pairs
    Py_ssize_t per_slot
    Py_ssize_t plane_bytes
    uint8_t* ready                # per slot: its plane's padding is filled


cdef void depthwise_tasks(void* context, Py_ssize_t start, Py_ssize_t stop,
                          int slot) noexcept nogil:
    cdef Py_ssize_t job
    for job in range(start, stop):
        depthwise_task(context, job, slot)


cdef void depthwise_task(void* context, Py_ssize_t job, int slot) noexcept nogil:
    """Output channel job % out_channels of image job // out_channels."""
    cdef const DepthwiseJob* d = <const DepthwiseJob*>context
    cdef Py_ssize_t index = job // d.out_channels
    cdef Py_ssize_t o = job % d.out_channels
    depthwise_plane(d, d.image + index * d.image_stride + (o // d.per_channel) * d.plane_stride,
                    o, d.out + job * d.out_h * d.out_w, slot)


cdef void depthwise_plane(const DepthwiseJob* d, const uint8_t* source, Py_ssize_t o,
                          uint8_t* target, int slot) noexcept nogil:
    """Output channel o's plane into ``target`` from its input channel's
    plane ``source`` (height x width bytes), in pool slot ``slot``'s scratch."""
    cdef int16_t* plane = <int16_t*>(d.scratch + slot * d.per_slot)
    cdef int32_t* weights = <int32_t*>(d.scratch + slot * d.per_slot + d.plane_bytes)
    cdef const uint8_t* taps = d.taps + o * d.kernel_h * d.kernel_w
    cdef Py_ssize_t i, kh, t, kw
    cdef int32_t first, second
    cdef int64_t weight_sum = 0, weight_magnitude = 0
    cdef int64_t bias_o = d.bias[o] if d.bias != NULL else 0
    if not d.ready[slot]:
        for i in range(d.plane_bytes // <Py_ssize_t>sizeof(int16_t)):
            plane[i] = <int16_t>d.input_zero
        d.ready[slot] = 1
    for kh in range(d.kernel_h):
        for t in range(d.columns):
            kw = 2 * t if d.paired else t
            first = filter_tap(taps, kh * d.kernel_w + kw, d.filter_signed, d.filter_zero[o])
            second = 0
            if d.paired and kw + 1 < d.kernel_w:
                second = filter_tap(taps, kh * d.kernel_w + kw + 1, d.filter_signed,
                                    d.filter_zero[o])
            weights[kh * d.columns + t] = <int32_t>((<uint32_t>first & 0xFFFF)
                                                    | (<uint32_t>second << 16))
            weight_sum = weight_sum + first + second
            weight_magnitude = (weight_magnitude + (first if first >= 0 else -first)
                                + (second if second >= 0 else -second))
    depthwise_widen_plane(source, d.input_signed, d.width, d.pad_top, d.image_rows, d.pad_left,
                          d.first_chunk, d.chunks, d.masks, d.pitch, <uint8_t>d.input_zero, plane)
    depthwise_pairs_plane(plane, d.pitch, d.stride_h, d.span, d.kernel_rows, d.offsets, d.columns,
                          weights, d.out_h, d.out_w, d.interleaved,
                          <int32_t><uint32_t>(bias_o - d.input_zero * weight_sum),
                          (bias_o if bias_o >= 0 else -bias_o) + 255 * weight_magnitude,
                          d.multiplier[o], d.out_zero[o], d.low, d.high, target)


cdef void depthwise_pairs(const uint8_t[:, :, :, ::1] image, bint input_signed, int32_t input_zero,
                          const uint8_t[:, ::1] taps, bint filter_signed,
                          const int32_t[::1] filter_zero, Py_ssize_t kernel_h,
                          Py_ssize_t kernel_w, Py_ssize_t stride_h, Py_ssize_t stride_w,
                          Py_ssize_t dilation_h, Py_ssize_t dilation_w, Py_ssize_t pad_top,
                          Py_ssize_t pad_left, const float[::1] multiplier,
                          const int32_t[::1] out_zero, const int32_t* bias,
                          uint8_t[:, :, :, ::1] out, int32_t low, int32_t high,
                          int n_threads) except *:
    """depthwise2d through the variant's pair kernel (_depthwise_avx512.pxi,
    _depthwise_avx2.pxi, _depthwise_sse2.pxi), for horizontal strides 1
    and 2 and sums that fit int32 with their bias; one task per (image,
    output channel), on the process's pool as a range (describe_pairs)."""
    cdef DepthwiseJob d
    cdef int threads = slots_for(n_threads, out.shape[0] * out.shape[1])
    cdef uint8_t* block = describe_pairs(
        &d, image.shape[1], image.shape[2], image.shape[3], input_signed, input_zero,
        &taps[0, 0], filter_signed, &filter_zero[0], kernel_h, kernel_w, stride_h, stride_w,
        dilation_h, dilation_w, pad_top, pad_left, &multiplier[0], &out_zero[0], bias,
        out.shape[1], out.shape[2], out.shape[3], low, high, threads)
    d.image = &image[0, 0, 0, 0]
    d.out = &out[0, 0, 0, 0]
    with nogil:
        run_range(depthwise_tasks, &d, out.shape[0] * d.out_channels, 1, threads)
    free(block)


cdef uint8_t* describe_pairs(DepthwiseJob* d, Py_ssize_t channels, Py_ssize_t height,
                           Py_ssize_t width, bint input_signed, int32_t input_zero,
                           const uint8_t* taps, bint filter_signed, const int32_t* filter_zero,
                           Py_ssize_t kernel_h, Py_ssize_t kernel_w, Py_ssize_t stride_h,
                           Py_ssize_t stride_w, Py_ssize_t dilation_h, Py_ssize_t dilation_w,
                           Py_ssize_t pad_top, Py_ssize_t pad_left, const float* multiplier,
                           const int32_t* out_zero, const int32_t* bias,
                           Py_ssize_t out_channels, Py_ssize_t out_h, Py_ssize_t out_w,
                           int32_t low, int32_t high, int threads) except NULL:
    """The pair kernel's description of a depthwise convolution of images of
    ``channels`` x ``height`` x ``width`` into ``out_channels`` x ``out_h`` x
    ``out_w``, with scratch for ``threads`` pool slots (d.image and d.out
    are the caller's to set); returns the one allocation it points into,
    which the caller frees.

    Each thread (pool slot) has an int16 plane, rows `pitch` apart, 64-byte
    aligned, filled with the input zero point by its first task; each task widens its input
    channel's rows into it (plane row pad_top + ih, column pad_left + iw), so
    padding stays x_zp.  The plane has a row for every output row rounded
    up to four and a column for every block's loads.  Term c of a kernel
    row starts at column offsets[c]: taps 2c and 2c + 1 paired (dilation 1),
    else tap c alone.  The sums are of x * (w - w_zp), x_zp included, so the
    accumulators start at bias - x_zp * (sum of w - w_zp): modulo 2**32, and
    exact at the end, where the value fits int32."""
    cdef Py_ssize_t blocks, columns_read, rows, end_column, i, r, t, kh, low_lane, high_lane
    d.out_channels = out_channels
    d.per_channel = out_channels // channels
    d.paired = dilation_w == 1
    d.columns = ceil_div(kernel_w, 2) if d.paired else kernel_w
    # Blocks span 32 plane columns (stride 2: in pairs); the loads reach 32
    # columns plus the furthest term and its pair partner past a block.  (The
    # AVX2 and SSE2 kernels' passes span 16 columns or fewer and their loads
    # 16 or 8: inside the same.)
    blocks = ceil_div(out_w, 32) if stride_w == 1 else round_up(ceil_div(out_w, 16), 2)
    columns_read = 32 * blocks + (kernel_w - 1) * dilation_w + 2
    d.pitch = round_up(columns_read, 32)
    # Four output rows read `span` plane rows.
    d.span = 3 * stride_h + (kernel_h - 1) * dilation_h + 1
    rows = (round_up(out_h, 4) - 1) * stride_h + (kernel_h - 1) * dilation_h + 1
    d.image_rows = max(0, min(height, rows - pad_top))
    # The 32-column chunks that hold image columns, and their masks.
    d.first_chunk = pad_left // 32
    end_column = min(pad_left + width, columns_read)
    d.chunks = max(0, ceil_div(end_column, 32) - d.first_chunk)
    d.plane_bytes = round_up(rows * d.pitch * sizeof(int16_t), 64)
    d.per_slot = d.plane_bytes + round_up(kernel_h * d.columns * sizeof(int32_t), 64)
    d.image = NULL
    d.image_stride = channels * height * width
    d.plane_stride = height * width
    d.taps = taps
    d.filter_signed = filter_signed
    d.filter_zero = filter_zero
    d.input_signed = input_signed
    d.input_zero = input_zero
    d.kernel_h = kernel_h
    d.kernel_w = kernel_w
    d.stride_h = stride_h
    d.interleaved = stride_w == 1
    d.width = width
    d.pad_top = pad_top
    d.pad_left = pad_left
    d.multiplier = multiplier
    d.out_zero = out_zero
    d.bias = bias
    d.out = NULL
    d.out_h = out_h
    d.out_w = out_w
    d.low = low
    d.high = high
    # One block: the scratch (64-byte aligned), then the offsets, the kernel
    # rows, the masks and the slots' ready flags.
    cdef Py_ssize_t scratch_bytes = threads * d.per_slot + 64
    cdef Py_ssize_t offsets_at = round_up(scratch_bytes, 8)
    cdef Py_ssize_t rows_at = offsets_at + d.columns * <Py_ssize_t>sizeof(Py_ssize_t)
    cdef Py_ssize_t masks_at = rows_at + round_up(4 * d.span * sizeof(int32_t), 8)
    cdef Py_ssize_t ready_at = masks_at + round_up(max(d.chunks, 1) * sizeof(uint32_t), 8)
    cdef uint8_t* block = <uint8_t*>malloc(ready_at + threads)
    if block == NULL:
        raise MemoryError()
    d.scratch = block + (64 - (<size_t>block) % 64) % 64
    cdef Py_ssize_t* offsets = <Py_ssize_t*>(block + offsets_at)
    cdef int32_t* kernel_rows = <int32_t*>(block + rows_at)
    cdef uint32_t* masks = <uint32_t*>(block + masks_at)
    d.ready = block + ready_at
    memset(d.ready, 0, threads)
    d.offsets = offsets
    d.kernel_rows = kernel_rows
    d.masks = masks
    for t in range(d.columns):
        offsets[t] = 2 * t if d.paired else t * dilation_w
    # Plane row i of a group of four output rows feeds output row r with
    # kernel row (i - r * stride_h) / dilation_h, when that is one.
    for i in range(d.span):
        for r in range(4):
            kernel_rows[4 * i + r] = -1
            kh = i - r * stride_h
            if kh >= 0 and kh % dilation_h == 0 and kh // dilation_h < kernel_h:
                kernel_rows[4 * i + r] = kh // dilation_h
    for t in range(d.chunks):
        low_lane = min(max(pad_left - 32 * (d.first_chunk + t), 0), 32)
        high_lane = min(max(pad_left + width - 32 * (d.first_chunk + t), 0), 32)
        masks[t] = <uint32_t>(((<uint64_t>1 << high_lane) - 1)
                              & ~((<uint64_t>1 << low_lane) - 1))
    return block


cdef inline int32_t filter_tap(const uint8_t* taps, Py_ssize_t t, bint filter_signed,
                               int32_t zero) noexcept nogil:
    """w - w_zp of tap t of a channel's taps."""
    if filter_signed:
        return <int8_t>taps[t] - zero
    return taps[t] - zero
