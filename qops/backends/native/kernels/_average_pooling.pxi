# QUANTIZED_LINEAR_AVERAGE_POOLING: window sums of bytes, separable per
# axis, requantized.  Needs _quantize.pxi's shared declarations.

#
# One 3-D pooling (a 2-D one has depth 1) over planes of bytes: int8 input
# arrives flipped (x ^ 0x80 = x + 128), its zero point shifted to match.
# Threads share out planes (batch x channel).  A window's sum is taken in
# two passes, as the sum of a box is: per output row, the image rows its
# windows cover are added column by column into a row of column sums, with
# zeros standing for the padding on either side; then each output's sum
# adds the window's columns of that row.  A 3 x 3 window costs six additions
# per output instead of nine, and every loop runs over a whole row without
# a branch, so it vectorizes.  The glue sends windows of at most 2**23
# elements, whose sums of bytes fit int32.

cdef struct PoolJob:
    const uint8_t* input
    uint8_t* out
    const int32_t* counts        # per output position: the elements each divisor counts
    const int32_t* inside        # per output position: the window's elements inside the input
    const int32_t* in_zero       # per channel
    const double* in_scale
    const double* out_scale
    const int32_t* out_zero
    # Per thread (slot), at slot * slot_length: a row of column sums
    # (row_length: start[2] zeros, the image's width, zeros to the last
    # window), then a row of window sums (out_size[2]).
    int32_t* rows
    Py_ssize_t row_length
    Py_ssize_t slot_length
    uint8_t flip                 # 0x80 for int8 input (read as x + 128), else 0
    bint whole                   # one window that is the whole plane (a global pooling)
    Py_ssize_t channels
    Py_ssize_t size[3]           # input depth, height, width
    Py_ssize_t out_size[3]
    Py_ssize_t window[3]
    Py_ssize_t stride[3]
    Py_ssize_t dilation[3]
    Py_ssize_t start[3]
    double low
    double high


cdef enum:
    # Outputs per pass of the float steps (a local row of int32 results,
    # then narrowed to bytes: each loop one element width).
    POOL_CHUNK = 64


cdef inline void finish_pooled(const PoolJob* job, const int32_t* sums, Py_ssize_t position,
                               Py_ssize_t count, Py_ssize_t channel, Py_ssize_t channel_step,
                               uint8_t* out) noexcept nogil:
    """out[i] <- the output byte of sums[i], i < count: output position
    position + i (or position itself for every i, with channel_step 1) and
    channel channel + i * channel_step (a global pooling's run of planes)."""
    # Every field in a local: the output is bytes, which may alias anything,
    # so fields read through the pointer would be reloaded after each store
    # and the loop would not vectorize.
    cdef const int32_t* inside = job.inside + position
    cdef const int32_t* counts = job.counts + position
    cdef const int32_t* in_zero = job.in_zero + channel
    cdef const double* in_scale = job.in_scale + channel
    cdef const double* out_scale = job.out_scale + channel
    cdef const int32_t* out_zero = job.out_zero + channel
    cdef Py_ssize_t position_step = 1 - channel_step
    cdef double low = job.low, high = job.high, value
    cdef int32_t values[POOL_CHUNK]
    cdef Py_ssize_t first = 0, i, n, at, c
    while first < count:
        n = min(<Py_ssize_t>POOL_CHUNK, count - first)
        for i in range(n):
            at = (first + i) * position_step
            c = (first + i) * channel_step
            # S * input_scale and output_scale * count are exact in double;
            # the quotient is the one rounding.
            value = (<double>(sums[first + i] - inside[at] * in_zero[c]) * in_scale[c]
                     / (out_scale[c] * <double>counts[at]))
            value = min(max(value, -1073741824.0), 1073741824.0)
            value = (value + DOUBLE_ROUNDING_MAGIC) - DOUBLE_ROUNDING_MAGIC
            values[i] = <int32_t>min(max(value + out_zero[c], low), high)
        narrow_line(values, out + first, n)
        first = first + n


# Rows of a pooling are short (56 outputs, a 7 x 7 plane's 49 bytes), often
# shorter than one vector of bytes: a plain loop over bytes would run
# element by element.  add_image_row (like narrow_line) takes blocks of a
# fixed length, which the compiler vectorizes at that length, and only the
# last few elements alone.

cdef inline void add_image_row(int32_t* columns, const uint8_t* row, Py_ssize_t width,
                               uint8_t flip) noexcept nogil:
    """columns[w] += row[w] ^ flip, w < width."""
    cdef Py_ssize_t block, j, blocks = width // 8
    for block in range(blocks):
        for j in range(8):
            columns[block * 8 + j] += row[block * 8 + j] ^ flip
    for j in range(blocks * 8, width):
        columns[j] += row[j] ^ flip


cdef extern from "qops_average_pooling.h":
    int32_t plane_sum "qops_plane_sum"(const uint8_t* image, Py_ssize_t size,
                                       uint8_t flip) noexcept nogil


cdef void pool_whole_planes(void* context, Py_ssize_t first, Py_ssize_t stop,
                            int slot) noexcept nogil:
    """Planes [first, stop) of a global pooling: POOL_CHUNK planes' sums,
    then their float steps in one pass (cut where a batch member ends, so
    that the channels run on)."""
    cdef const PoolJob* job = <const PoolJob*>context
    cdef Py_ssize_t plane_size = job.size[0] * job.size[1] * job.size[2]
    cdef Py_ssize_t plane = first, count, i, channel
    cdef int32_t totals[POOL_CHUNK]
    while plane < stop:
        channel = plane % job.channels
        count = min(<Py_ssize_t>POOL_CHUNK, stop - plane, job.channels - channel)
        for i in range(count):
            totals[i] = plane_sum(job.input + (plane + i) * plane_size, plane_size, job.flip)
        finish_pooled(job, totals, 0, count, channel, 1, job.out + plane)
        plane = plane + count


cdef void pool_planes(void* context, Py_ssize_t first, Py_ssize_t stop, int slot) noexcept nogil:
    cdef const PoolJob* job = <const PoolJob*>context
    cdef Py_ssize_t plane, channel, od, oh, ow, kd, kh, kw, i_d, i_h
    cdef Py_ssize_t width = job.size[2], out_width = job.out_size[2], stride_w = job.stride[2]
    cdef Py_ssize_t dilation_w = job.dilation[2]
    cdef Py_ssize_t plane_size = job.size[0] * job.size[1] * job.size[2]
    cdef Py_ssize_t out_plane = job.out_size[0] * job.out_size[1] * job.out_size[2]
    cdef const uint8_t* image
    cdef const int32_t* window_columns
    cdef uint8_t* out
    cdef int32_t* columns = job.rows + slot * job.slot_length
    cdef int32_t* image_columns = columns + job.start[2]
    cdef int32_t* sums = columns + job.row_length
    cdef uint8_t flip = job.flip
    for plane in range(first, stop):
        channel = plane % job.channels
        image = job.input + plane * plane_size
        out = job.out + plane * out_plane
        for od in range(job.out_size[0]):
            for oh in range(job.out_size[1]):
                # The column sums of the image rows under this output row's windows.
                memset(image_columns, 0, width * sizeof(int32_t))
                for kd in range(job.window[0]):
                    i_d = od * job.stride[0] - job.start[0] + kd * job.dilation[0]
                    if i_d < 0 or i_d >= job.size[0]:
                        continue
                    for kh in range(job.window[1]):
                        i_h = oh * job.stride[1] - job.start[1] + kh * job.dilation[1]
                        if 0 <= i_h < job.size[1]:
                            add_image_row(image_columns,
                                          image + (i_d * job.size[1] + i_h) * width, width, flip)
                # Output ow's window starts at column ow * stride_w of the row
                # (whose first start[2] columns are the left padding's zeros).
                memset(sums, 0, out_width * sizeof(int32_t))
                for kw in range(job.window[2]):
                    window_columns = columns + kw * dilation_w
                    if stride_w == 1:
                        for ow in range(out_width):
                            sums[ow] += window_columns[ow]
                    else:
                        for ow in range(out_width):
                            sums[ow] += window_columns[ow * stride_w]
                finish_pooled(job, sums, (od * job.out_size[1] + oh) * out_width, out_width,
                              channel, 0, out + (od * job.out_size[1] + oh) * out_width)


def average_pooling(const uint8_t[::1] input, uint8_t flip, Py_ssize_t channels, tuple size,
                    tuple out_size,
                    tuple window, tuple stride, tuple dilation, tuple start,
                    const int32_t[::1] counts, const int32_t[::1] inside,
                    const int32_t[::1] in_zero, const double[::1] in_scale,
                    const double[::1] out_scale, const int32_t[::1] out_zero,
                    int32_t low, int32_t high, uint8_t[::1] out, int n_threads):
    """QUANTIZED_LINEAR_AVERAGE_POOLING of planes of ``size`` into ``out``
    (the glue has checked every size, offset and vector length)."""
    cdef PoolJob job
    cdef Py_ssize_t axis, planes
    cdef int threads = max(n_threads, 1)
    if out.shape[0] == 0:
        return
    if out.shape[0] * window[0] * window[1] * window[2] < PARALLEL_MIN:
        threads = 1
    # A row of column sums reaches from the left padding's first column to
    # the last column of the last window (zeros past the image's width).
    job.row_length = max(<Py_ssize_t>start[2] + <Py_ssize_t>size[2],
                         (<Py_ssize_t>out_size[2] - 1) * <Py_ssize_t>stride[2]
                         + (<Py_ssize_t>window[2] - 1) * <Py_ssize_t>dilation[2] + 1)
    # Each thread's rows start on a cache line of their own, one line apart:
    # threads that wrote into one line would take it from each other on
    # every row.
    job.slot_length = (job.row_length + <Py_ssize_t>out_size[2] + 31) // 16 * 16
    cdef int32_t[::1] rows = np.zeros(threads * job.slot_length + 16, np.int32)
    job.rows = &rows[0] + (-(<size_t>&rows[0]) // 4) % 16
    job.input = &input[0]
    job.flip = flip
    job.whole = (tuple(out_size) == (1, 1, 1) and tuple(window) == tuple(size)
                 and tuple(dilation) == (1, 1, 1) and not any(start))
    job.out = &out[0]
    job.counts = &counts[0]
    job.inside = &inside[0]
    job.in_zero = &in_zero[0]
    job.in_scale = &in_scale[0]
    job.out_scale = &out_scale[0]
    job.out_zero = &out_zero[0]
    job.channels = channels
    for axis in range(3):
        job.size[axis] = size[axis]
        job.out_size[axis] = out_size[axis]
        job.window[axis] = window[axis]
        job.stride[axis] = stride[axis]
        job.dilation[axis] = dilation[axis]
        job.start[axis] = start[axis]
    job.low = low
    job.high = high
    planes = out.shape[0] // (out_size[0] * out_size[1] * out_size[2])
    with nogil:
        run_range(pool_whole_planes if job.whole else pool_planes, &job, planes, 1, threads)
