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
                    requantize_row(row, &out[index, o, oh, 0], out_w,
                                   bias_ptr[o] if bias_ptr != NULL else 0, multiplier[o],
                                   out_zero[o], low, high, count)
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
                                   zero_o, low, high, count)
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
                                int32_t low, int32_t high, Py_ssize_t taps) noexcept nogil:
    """One output row; in int32 lanes when `taps` products and the bias fit int32."""
    cdef Py_ssize_t i
    if fits_int32(taps, bias if bias >= 0 else -bias):
        requantize_sums(sums, target, count, <uint32_t>bias, multiplier, zero_point, low, high)
        return
    for i in range(count):
        target[i] = <uint8_t>requantize(sums[i] + bias, multiplier, zero_point, low, high)


