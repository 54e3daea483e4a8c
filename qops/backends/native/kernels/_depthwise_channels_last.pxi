# The depthwise convolution of small images (at most CHANNELS_LAST_OUTPUTS
# outputs per channel), channels-last: a task per block of channels and
# band of output rows, the padded rows the band reads copied channels-last
# (16 x 16 byte transposes), each output pixel's sums in int32 lanes across
# the block's channels and requantized there (qops_depthwise_channels_last.h),
# then transposed back into the channels' planes (or, for a session's
# channels-last tensors, read from and written to each pixel's run of
# channels).  The plane kernel (depthwise_pairs) walks one channel at a time,
# vectorized along a row: a 7 x 7 image gives it rows of 7 values, and a
# padded plane, weights and constants to make per 49 outputs.
# Included after _depthwise.pxi (sums_fit_int32, filter_tap).

cdef extern from "qops_depthwise_channels_last.h":
    # Channels per task: the lanes of every loop of the pixel kernel.
    enum: CHANNEL_BLOCK "QOPS_CHANNEL_BLOCK"
    void lay_weights "qops_depthwise_channels_last_lay_weights"(
        const int32_t* weights, Py_ssize_t count, int16_t* target) noexcept nogil
    void channels_last_pixel "qops_depthwise_channels_last_pixel"(
        const uint8_t* copy, const Py_ssize_t* tap_offset, Py_ssize_t count,
        const void* laid_weights, const uint32_t* terms, const float* multiplier,
        const float* floor_value, const float* ceiling_value, const int32_t* out_zero,
        uint8_t* result) noexcept nogil


cdef enum:
    # Outputs and padded input pixels per channel of the images depthwise2d
    # runs here, and of a task's band and copy (which then stay in L1).
    CHANNELS_LAST_OUTPUTS = 256
    CHANNELS_LAST_PADDED = 400


cdef struct ChannelsLastJob:
    const uint8_t* image
    Py_ssize_t image_bytes       # bytes per image (channels x height x width)
    Py_ssize_t height
    Py_ssize_t width
    Py_ssize_t padded_w
    Py_ssize_t padded_pixels
    Py_ssize_t pad_top
    Py_ssize_t pad_left
    const uint8_t* taps          # `count` bytes per channel
    Py_ssize_t count
    bint filter_signed
    const int32_t* filter_zero
    const Py_ssize_t* tap_offset # per tap, its pixel in the copy from the output's first
    Py_ssize_t channels
    Py_ssize_t blocks            # channel blocks per image
    Py_ssize_t stride_h
    Py_ssize_t stride_w
    uint8_t flip_input
    int32_t centre_zero
    const int32_t* bias
    const float* multiplier
    const int32_t* out_zero
    int32_t low
    int32_t high
    uint8_t* out
    Py_ssize_t out_h
    Py_ssize_t out_w
    uint8_t* scratch
    Py_ssize_t per_slot          # scratch bytes per slot
    const uint8_t* constants     # each block's constants (block_constants), or NULL:
                                 # each task makes its block's in its slot
    bint channels_last_input     # the image is (N, H, W, C)
    bint channels_last_output    # out is (N, out_h, out_w, C)
    Py_ssize_t span_h            # padded rows one output row reads
    Py_ssize_t band_rows         # output rows per task (band_rows_for)
    Py_ssize_t bands             # bands per image


cdef inline bint takes_channels_last(Py_ssize_t per_channel, Py_ssize_t channels,
                                     Py_ssize_t out_pixels,
                                     Py_ssize_t padded_pixels) noexcept nogil:
    """Whether depthwise2d runs channels-last: one output channel per input
    channel, an image small enough, and channels for two blocks at least
    (fewer leave a thread idle, and the block's lanes past them empty)."""
    return (per_channel == 1 and channels >= 2 * CHANNEL_BLOCK
            and out_pixels <= CHANNELS_LAST_OUTPUTS and padded_pixels <= CHANNELS_LAST_PADDED)


cdef inline Py_ssize_t band_rows_for(Py_ssize_t out_h, Py_ssize_t out_w, Py_ssize_t padded_w,
                                     Py_ssize_t stride_h, Py_ssize_t span_h) noexcept nogil:
    """Output rows per task: as many as keep the task's copy (the padded
    rows they read, a CHANNEL_BLOCK per pixel) and results inside the
    limits above, at least one; all of them for an image those take
    whole."""
    cdef Py_ssize_t rows = out_h
    while rows > 1 and (rows * out_w > CHANNELS_LAST_OUTPUTS
                        or ((rows - 1) * stride_h + span_h) * padded_w > CHANNELS_LAST_PADDED):
        rows -= 1
    return rows


cdef inline bint takes_in_bands(Py_ssize_t per_channel, Py_ssize_t channels,
                                Py_ssize_t out_pixels, Py_ssize_t count,
                                const int32_t* bias) noexcept nogil:
    """Whether the kernel takes a convolution's images kept channels-last
    (BoundDepthwise), their padded rows copied in bands where the whole
    image is too large for one copy: takes_channels_last's rule but for the
    padded size (past CHANNELS_LAST_OUTPUTS the plane kernel of channels-
    first images is as fast or faster: docs/performance_notes.rst), and
    every channel's sum inside int32."""
    return (takes_channels_last(per_channel, channels, out_pixels, 0)
            and sums_fit_int32(count, bias, channels))


cdef inline bint runs_channels_last(Py_ssize_t per_channel, Py_ssize_t channels,
                                    Py_ssize_t out_pixels, Py_ssize_t padded_pixels,
                                    Py_ssize_t count, const int32_t* bias) noexcept nogil:
    """depthwise2d's choice of this kernel: the images it takes, and every
    channel's sum inside int32 (``bias``: a value per channel, or NULL)."""
    return (takes_channels_last(per_channel, channels, out_pixels, padded_pixels)
            and sums_fit_int32(count, bias, channels))


cdef int channels_last(const uint8_t[:, :, :, ::1] image, bint input_signed,
                       int32_t centre_zero, const uint8_t[:, ::1] taps, bint filter_signed,
                       const int32_t[::1] filter_zero, Py_ssize_t kernel_h, Py_ssize_t kernel_w,
                       Py_ssize_t stride_h, Py_ssize_t stride_w, Py_ssize_t dilation_h,
                       Py_ssize_t dilation_w, Py_ssize_t pad_top, Py_ssize_t pad_left,
                       Py_ssize_t padded_w, Py_ssize_t padded_pixels,
                       const float[::1] multiplier, const int32_t[::1] out_zero,
                       const int32_t* bias, uint8_t[:, :, :, ::1] out, int32_t low,
                       int32_t high, int n_threads) except -1:
    """depthwise2d channels-last, its arguments checked by it (one output
    channel per input channel, every sum inside int32)."""
    cdef ChannelsLastJob job
    offsets = describe_channels_last(
        &job, image, input_signed, centre_zero, taps, filter_signed, filter_zero, kernel_h,
        kernel_w, stride_h, stride_w, dilation_h, dilation_w, pad_top, pad_left, padded_w,
        padded_pixels, multiplier, out_zero, bias, out, low, high)
    run_channels_last(&job, out.shape[0], n_threads)
    del offsets  # what job.tap_offset points into
    return 0


cdef object describe_channels_last(
        ChannelsLastJob* job, const uint8_t[:, :, :, ::1] image, bint input_signed,
        int32_t centre_zero, const uint8_t[:, ::1] taps, bint filter_signed,
        const int32_t[::1] filter_zero, Py_ssize_t kernel_h, Py_ssize_t kernel_w,
        Py_ssize_t stride_h, Py_ssize_t stride_w, Py_ssize_t dilation_h, Py_ssize_t dilation_w,
        Py_ssize_t pad_top, Py_ssize_t pad_left, Py_ssize_t padded_w, Py_ssize_t padded_pixels,
        const float[::1] multiplier, const int32_t[::1] out_zero, const int32_t* bias,
        uint8_t[:, :, :, ::1] out, int32_t low, int32_t high):
    """``job`` for these operands (checked by depthwise2d); returns the tap
    offsets' array, which job.tap_offset points into."""
    cdef Py_ssize_t t, count = kernel_h * kernel_w
    offsets = np.empty(count, np.intp)
    cdef Py_ssize_t[::1] tap_offset = offsets
    for t in range(count):
        tap_offset[t] = (t // kernel_w) * dilation_h * padded_w + (t % kernel_w) * dilation_w
    job.image = &image[0, 0, 0, 0]
    job.image_bytes = image.shape[1] * image.shape[2] * image.shape[3]
    job.height = image.shape[2]
    job.width = image.shape[3]
    job.padded_w = padded_w
    job.padded_pixels = padded_pixels
    job.pad_top = pad_top
    job.pad_left = pad_left
    job.taps = &taps[0, 0]
    job.count = count
    job.filter_signed = filter_signed
    job.filter_zero = &filter_zero[0]
    job.tap_offset = &tap_offset[0]
    job.channels = out.shape[1]
    job.blocks = ceil_div(job.channels, CHANNEL_BLOCK)
    job.stride_h = stride_h
    job.stride_w = stride_w
    job.flip_input = 0x80 if input_signed else 0
    job.centre_zero = centre_zero
    job.bias = bias
    job.multiplier = &multiplier[0]
    job.out_zero = &out_zero[0]
    job.low = low
    job.high = high
    job.out = &out[0, 0, 0, 0]
    job.out_h = out.shape[2]
    job.out_w = out.shape[3]
    job.constants = NULL
    job.channels_last_input = False
    job.channels_last_output = False
    job.span_h = (kernel_h - 1) * dilation_h + 1
    job.band_rows = band_rows_for(job.out_h, job.out_w, padded_w, stride_h, job.span_h)
    job.bands = ceil_div(job.out_h, job.band_rows)
    return offsets


cdef inline Py_ssize_t constants_bytes(Py_ssize_t count) noexcept nogil:
    """Bytes of one block's constants (block_constants), a multiple of 64:
    the laid weights (room for (count + 1) x CHANNEL_BLOCK int32, lay_weights'
    widest layout), then the terms, multipliers, floors, ceilings and output
    zero points (a CHANNEL_BLOCK of 4-byte values each)."""
    return ((count + 1) * CHANNEL_BLOCK * 4 + 5 * CHANNEL_BLOCK * 4 + 63) & ~63


cdef inline Py_ssize_t results_bytes(Py_ssize_t pixels) noexcept nogil:
    """Bytes of a task's requantized results, a CHANNEL_BLOCK per pixel, and
    64 more (the transposes back read whole 16-byte rows), to a multiple of
    64."""
    return (pixels * CHANNEL_BLOCK + 64 + 63) & ~63


cdef void block_constants(const ChannelsLastJob* job, Py_ssize_t first, int32_t* weights,
                          uint8_t* target) noexcept nogil:
    """Channels [first, first + CHANNEL_BLOCK)'s constants into target
    (constants_bytes), through ``weights`` (count x CHANNEL_BLOCK int32 of
    scratch): the weights w - w_zp laid as the pixel kernel reads them (0
    past the last channel, so that those lanes sum to 0 whatever the copy
    holds there), and per channel the term (the bias less the input zero
    point times the weights' sum, modulo 2**32), the multiplier, the clamp's
    floor and ceiling less the output zero point, and that zero point."""
    cdef Py_ssize_t count = job.count, c, t
    cdef Py_ssize_t block = min(<Py_ssize_t>CHANNEL_BLOCK, job.channels - first)
    cdef int16_t* laid = <int16_t*>target
    cdef uint32_t* terms = <uint32_t*>(target + (count + 1) * CHANNEL_BLOCK * 4)
    cdef float* multiplier = <float*>(terms + CHANNEL_BLOCK)
    cdef float* floor_value = multiplier + CHANNEL_BLOCK
    cdef float* ceiling_value = floor_value + CHANNEL_BLOCK
    cdef int32_t* out_zero = <int32_t*>(ceiling_value + CHANNEL_BLOCK)
    cdef int64_t weight_sum
    cdef int32_t zero
    for c in range(CHANNEL_BLOCK):
        if c < block:
            weight_sum = 0
            for t in range(count):
                weights[t * CHANNEL_BLOCK + c] = filter_tap(
                    job.taps + (first + c) * count, t, job.filter_signed,
                    job.filter_zero[first + c])
                weight_sum = weight_sum + weights[t * CHANNEL_BLOCK + c]
            terms[c] = <uint32_t>((job.bias[first + c] if job.bias != NULL else 0)
                                  - job.centre_zero * weight_sum)
            multiplier[c] = job.multiplier[first + c]
            zero = job.out_zero[first + c]
            out_zero[c] = zero
            floor_value[c] = <float>(job.low - zero)
            ceiling_value[c] = <float>(job.high - zero)
        else:
            for t in range(count):
                weights[t * CHANNEL_BLOCK + c] = 0
            terms[c] = 0
            multiplier[c] = 0
            out_zero[c] = 0
            floor_value[c] = 0
            ceiling_value[c] = 0
    lay_weights(weights, count, laid)


cdef int run_channels_last(ChannelsLastJob* job, Py_ssize_t batch, int n_threads) except -1:
    """Every (image, block of channels, band of output rows) as tasks on the
    pool."""
    # Per slot: the band's padded copy (bytes) and results; unless the job
    # has the blocks' constants made, the weights (int32) and a block's
    # constants.
    job.per_slot = (copy_bytes(job) + results_bytes(job.band_rows * job.out_w))
    if job.constants == NULL:
        job.per_slot += job.count * CHANNEL_BLOCK * sizeof(int32_t) + constants_bytes(job.count)
    cdef Py_ssize_t tasks = batch * job.blocks * job.bands
    cdef int threads = slots_for(n_threads, tasks)
    job.scratch = <uint8_t*>malloc(threads * job.per_slot + 64)
    if job.scratch == NULL:
        raise MemoryError()
    with nogil:
        run_range(channels_last_tasks, job, tasks, 1, threads)
    free(job.scratch)
    return 0


cdef inline Py_ssize_t copy_bytes(const ChannelsLastJob* job) noexcept nogil:
    """Bytes of a band's padded copy, a multiple of 64."""
    return (((job.band_rows - 1) * job.stride_h + job.span_h) * job.padded_w * CHANNEL_BLOCK
            + 63) & ~63


cdef void channels_last_tasks(void* context, Py_ssize_t start, Py_ssize_t stop,
                              int slot) noexcept nogil:
    """Tasks [start, stop): each a band of output rows of a block of
    channels of an image, a block's bands in turn (its constants stay in
    the thread's cache)."""
    cdef ChannelsLastJob* job = <ChannelsLastJob*>context
    cdef Py_ssize_t task, per_image = job.blocks * job.bands
    for task in range(start, stop):
        channels_last_block(job, task // per_image,
                            (task % per_image) // job.bands * CHANNEL_BLOCK,
                            task % job.bands, slot)


cdef void channels_last_block(const ChannelsLastJob* job, Py_ssize_t index, Py_ssize_t first,
                              Py_ssize_t band, int slot) noexcept nogil:
    """Output rows [band * band_rows, ...) of channels [first, first +
    CHANNEL_BLOCK) (or to the last) of image `index`."""
    cdef Py_ssize_t count = job.count, pixels = job.out_h * job.out_w
    cdef Py_ssize_t block = min(<Py_ssize_t>CHANNEL_BLOCK, job.channels - first)
    cdef Py_ssize_t first_row = band * job.band_rows
    cdef Py_ssize_t rows = min(job.band_rows, job.out_h - first_row)
    cdef Py_ssize_t band_pixels = rows * job.out_w, first_pixel = first_row * job.out_w
    # The band's first padded row, the copy's row 0.
    cdef Py_ssize_t top = first_row * job.stride_h
    cdef uint8_t* base = <uint8_t*>(((<size_t>(job.scratch + slot * job.per_slot)) + 63)
                                    & ~(<size_t>63))
    cdef uint8_t* copy = base
    cdef uint8_t* results = copy + copy_bytes(job)
    cdef int32_t* weights
    cdef const uint8_t* constants
    if job.constants != NULL:
        constants = job.constants + (first // CHANNEL_BLOCK) * constants_bytes(count)
    else:
        # The slot's weights, then its block's constants, after the results.
        weights = <int32_t*>(results + results_bytes(job.band_rows * job.out_w))
        block_constants(job, first, weights, <uint8_t*>(weights + count * CHANNEL_BLOCK))
        constants = <uint8_t*>(weights + count * CHANNEL_BLOCK)
    cdef const int16_t* laid = <const int16_t*>constants
    cdef const uint32_t* terms = <const uint32_t*>(constants + (count + 1) * CHANNEL_BLOCK * 4)
    cdef const float* multiplier = <const float*>(terms + CHANNEL_BLOCK)
    cdef const float* floor_value = multiplier + CHANNEL_BLOCK
    cdef const float* ceiling_value = floor_value + CHANNEL_BLOCK
    cdef const int32_t* out_zero = <const int32_t*>(ceiling_value + CHANNEL_BLOCK)
    cdef const uint8_t* image = job.image + index * job.image_bytes
    cdef Py_ssize_t oh, ow, pixel
    copy_block_channels_last(job, image, first, block, top,
                             (rows - 1) * job.stride_h + job.span_h, copy)
    cdef uint8_t* out
    pixel = 0
    for oh in range(first_row, first_row + rows):
        for ow in range(job.out_w):
            channels_last_pixel(
                copy + ((oh * job.stride_h - top) * job.padded_w + ow * job.stride_w)
                * CHANNEL_BLOCK, job.tap_offset, count, laid, terms, multiplier, floor_value,
                ceiling_value, out_zero, results + pixel * CHANNEL_BLOCK)
            pixel = pixel + 1
    cdef Py_ssize_t p0, c0
    if job.channels_last_output:
        # The block's run of each output pixel.
        out = job.out + (index * pixels + first_pixel) * job.channels + first
        for pixel in range(band_pixels):
            memcpy(out + pixel * job.channels, results + pixel * CHANNEL_BLOCK, block)
        return
    # Back into the channels' planes: 16 pixels by 16 channels a transpose.
    out = job.out + (index * job.channels + first) * pixels + first_pixel
    for c0 in range(0, block, 16):
        for p0 in range(0, band_pixels, 16):
            transpose_block16(results + p0 * CHANNEL_BLOCK + c0, CHANNEL_BLOCK,
                              min(<Py_ssize_t>16, band_pixels - p0),
                              min(<Py_ssize_t>16, block - c0), out + c0 * pixels + p0, pixels, 0,
                              (band_pixels - p0) * CHANNEL_BLOCK - c0)


cdef void copy_block_channels_last(const ChannelsLastJob* job, const uint8_t* image,
                                   Py_ssize_t first, Py_ssize_t block, Py_ssize_t top,
                                   Py_ssize_t copy_rows, uint8_t* copy) noexcept nogil:
    """The padded copy of channels [first, first + block) over padded rows
    [top, top + copy_rows): pixel (h, w) of the padded image at copy + ((h -
    top) * padded_w + w) * CHANNEL_BLOCK, a byte per channel (^ flip), the
    padding the centred zero point (its difference 0)."""
    cdef Py_ssize_t plane = job.height * job.width, h, c0, w0
    cdef const uint8_t* source
    cdef uint8_t* target
    cdef Py_ssize_t end = job.channels * plane  # the image's bytes from its start
    cdef Py_ssize_t w
    # The image's rows in the band.
    cdef Py_ssize_t h_start = max(<Py_ssize_t>0, top - job.pad_top)
    cdef Py_ssize_t h_stop = min(job.height, top + copy_rows - job.pad_top)
    memset(copy, <uint8_t>job.centre_zero, copy_rows * job.padded_w * CHANNEL_BLOCK)
    if job.channels_last_input:
        # The block's run of each pixel of a channels-last image.
        for h in range(h_start, h_stop):
            target = copy + ((h + job.pad_top - top) * job.padded_w + job.pad_left) * CHANNEL_BLOCK
            source = image + h * job.width * job.channels + first
            for w in range(job.width):
                copy_flipped(target + w * CHANNEL_BLOCK, source + w * job.channels, block,
                             job.flip_input)
        return
    for h in range(h_start, h_stop):
        target = copy + ((h + job.pad_top - top) * job.padded_w + job.pad_left) * CHANNEL_BLOCK
        for c0 in range(0, block, 16):
            for w0 in range(0, job.width, 16):
                source = image + (first + c0) * plane + h * job.width + w0
                transpose_block16(source, plane, min(<Py_ssize_t>16, block - c0),
                                  min(<Py_ssize_t>16, job.width - w0),
                                  target + w0 * CHANNEL_BLOCK + c0, CHANNEL_BLOCK,
                                  job.flip_input, end - (source - image))


cdef class BoundDepthwise:
    """A depthwise convolution of one image shape with its filter and
    parameters bound, as a compiled operator calls it again and again: each
    call brings the images alone (:meth:`run_fresh`).  Where depthwise2d runs
    the images channels-last, each block's constants (the laid weights and
    per-channel terms: block_constants) are made here once, not by every
    task of every call, and the output is made here; elsewhere
    :attr:`takes` is False and :meth:`run_fresh` answers None.  Images
    kept channels-last (``channels_last_input`` or ``channels_last_output``)
    it takes by takes_in_bands instead: whatever their padded size, in bands
    of output rows.

    The arguments are depthwise2d's, with the image's and the output's
    shapes for the arrays, and the output's dtype; where it takes the
    images, depthwise2d runs once here on a zero image, so that everything
    it checks is checked.  With ``channels_last_input`` the images come
    (N, H, W, C) (the shapes given stay channels-first), and with
    ``channels_last_output`` the outputs are made (N, OH, OW, C): each
    block's copy then reads, and its results go out as, a run of the
    block's channels per pixel, with no transposition.
    """
    cdef ChannelsLastJob job
    cdef object kept               # the arrays the job points into
    cdef Py_ssize_t batch, image_bytes
    cdef cnp.dtype out_dtype
    cdef cnp.npy_intp dims[4]
    cdef readonly bint takes

    def __init__(self, image_shape, bint input_signed, int32_t input_zero,
                 const uint8_t[:, ::1] taps, bint filter_signed,
                 const int32_t[::1] filter_zero, Py_ssize_t kernel_h, Py_ssize_t kernel_w,
                 strides, dilations, start_padding, end_padding,
                 const float[::1] multiplier, const int32_t[::1] out_zero, bias, out_shape,
                 out_dtype, int32_t low, int32_t high, bint channels_last_input=False,
                 bint channels_last_output=False):
        cdef Py_ssize_t i, block
        cdef const int32_t[::1] bias_view
        cdef const int32_t* bias_pointer = NULL
        cdef int32_t* weights
        cdef uint8_t[::1] constants_view
        image_shape, out_shape = tuple(image_shape), tuple(out_shape)
        if len(image_shape) != 4 or len(out_shape) != 4:
            raise ValueError("depthwise2d: the image and the output are 4-D")
        cdef Py_ssize_t padded_h = image_shape[2] + start_padding[0] + end_padding[0]
        cdef Py_ssize_t padded_w = image_shape[3] + start_padding[1] + end_padding[1]
        # Images kept channels-last are taken at any size, in bands of
        # output rows; the images of a channels-first call only where
        # depthwise2d itself runs them channels-last.
        cdef bint in_bands = channels_last_input or channels_last_output
        # The images' shapes first (arithmetic alone), so that no other
        # depthwise convolution runs the zero image below.
        self.takes = (out_shape[0] * out_shape[1] * out_shape[2] * out_shape[3] > 0
                      and image_shape[1] > 0
                      and (takes_in_bands(out_shape[1] // image_shape[1], out_shape[1],
                                          out_shape[2] * out_shape[3], 0, NULL)
                           if in_bands else
                           takes_channels_last(out_shape[1] // image_shape[1], out_shape[1],
                                               out_shape[2] * out_shape[3],
                                               padded_h * padded_w)))
        if not self.takes:
            return
        image = np.zeros(image_shape, np.uint8)
        out = np.empty(out_shape, np.uint8)
        # Run once on a zero image: everything depthwise2d checks is checked.
        depthwise2d(image, input_signed, input_zero, taps, filter_signed, filter_zero, kernel_h,
                    kernel_w, strides, dilations, start_padding, end_padding, multiplier,
                    out_zero, bias, out, low, high, 1)
        if bias is not None:
            bias_view = bias
            bias_pointer = &bias_view[0]
        # Then the whole choice: depthwise2d's, as it makes it, or the bands'.
        self.takes = (takes_in_bands(out_shape[1] // image_shape[1], out_shape[1],
                                     out_shape[2] * out_shape[3], kernel_h * kernel_w,
                                     bias_pointer) if in_bands else
                      runs_channels_last(out_shape[1] // image_shape[1], out_shape[1],
                                         out_shape[2] * out_shape[3], padded_h * padded_w,
                                         kernel_h * kernel_w, bias_pointer))
        if not self.takes:
            return
        self.out_dtype = np.dtype(out_dtype)
        if self.out_dtype.itemsize != 1:
            raise ValueError("depthwise2d: the output has a byte per value")
        for i in range(4):
            self.dims[i] = out.shape[(0, 2, 3, 1)[i] if channels_last_output else i]
        self.batch = out.shape[0]
        self.image_bytes = image.size
        offsets = describe_channels_last(
            &self.job, image, input_signed, input_zero + (128 if input_signed else 0), taps,
            filter_signed, filter_zero, kernel_h, kernel_w, strides[0], strides[1],
            dilations[0], dilations[1], start_padding[0], start_padding[1], padded_w,
            padded_h * padded_w, multiplier, out_zero, bias_pointer, out, low, high)
        self.job.channels_last_input = channels_last_input
        self.job.channels_last_output = channels_last_output
        # Each block's constants on a cache line of its own.
        constants = np.empty(self.job.blocks * constants_bytes(self.job.count) + 64, np.uint8)
        constants_view = constants
        cdef uint8_t* first = &constants_view[0]
        first += -<size_t>first & 63
        scratch = np.empty(self.job.count * CHANNEL_BLOCK, np.int32)
        weights = <int32_t*>cnp.PyArray_DATA(scratch)
        for block in range(self.job.blocks):
            block_constants(&self.job, block * CHANNEL_BLOCK, weights,
                            first + block * constants_bytes(self.job.count))
        self.job.constants = first
        self.kept = (offsets, constants, taps, filter_zero, multiplier, out_zero, bias)

    def run_fresh(self, image, int n_threads):
        """A new output of the convolution of ``image``, or None (nothing
        run) where it does not take it: not channels-last, or not a
        C-contiguous NumPy array of the bound image's bytes."""
        cdef cnp.ndarray out
        cdef ChannelsLastJob job
        cdef const uint8_t* data = NULL
        if not self.takes or not bytes_taken(image, self.image_bytes, &data):
            return None
        out = empty_array(4, self.dims, self.out_dtype)
        job = self.job
        job.image = data
        job.out = <uint8_t*>cnp.PyArray_DATA(out)
        run_channels_last(&job, self.batch, n_threads)
        return out
