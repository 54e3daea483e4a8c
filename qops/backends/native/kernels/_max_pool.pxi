# MaxPool of byte planes (include/qops_max_pool.h), for the model session's
# MaxPool of uint8 and int8 tensors (qops.onnx._numpy_ops states the same
# rule in NumPy).  A plane is a task; each thread keeps its padded row in its
# own part of the scratch.

cdef extern from "qops_max_pool.h":
    ctypedef struct qops_max_pool_geometry:
        Py_ssize_t height, width, out_height, out_width
        Py_ssize_t kernel_h, kernel_w, stride_h, stride_w, dilation_h, dilation_w
        Py_ssize_t pad_top, pad_left, row_length
        uint8_t flip
    Py_ssize_t max_pool_row_length "qops_max_pool_row_length"(
        const qops_max_pool_geometry* geometry) noexcept nogil
    void max_pool_plane "qops_max_pool_plane"(
        const qops_max_pool_geometry* geometry, const uint8_t* x, uint8_t* out,
        uint8_t* row) noexcept nogil
    cdef enum:
        MAX_POOL_ROW_SLACK "QOPS_MAX_POOL_ROW_SLACK"
    void max_pool_channels_last_row "qops_max_pool_channels_last_row"(
        const qops_max_pool_geometry* geometry, Py_ssize_t channels, Py_ssize_t oy,
        const uint8_t* x, uint8_t* out) noexcept nogil


cdef inline Py_ssize_t whole_lines(Py_ssize_t size) noexcept nogil:
    """size rounded up to whole 64-byte cache lines."""
    return (size + 63) // 64 * 64


cdef struct MaxPoolJob:
    qops_max_pool_geometry geometry
    const uint8_t* x
    uint8_t* out
    uint8_t* scratch
    # Each thread's part of the scratch (its padded row), whole cache lines
    # apart: threads writing one line would take turns holding it.
    Py_ssize_t scratch_pitch


cdef void max_pool_range(void* context, Py_ssize_t start, Py_ssize_t stop,
                         int slot) noexcept nogil:
    cdef const MaxPoolJob* job = <const MaxPoolJob*>context
    cdef const qops_max_pool_geometry* g = &job.geometry
    cdef Py_ssize_t plane
    cdef uint8_t* row = job.scratch + slot * job.scratch_pitch
    for plane in range(start, stop):
        max_pool_plane(g, job.x + plane * g.height * g.width,
                       job.out + plane * g.out_height * g.out_width, row)


def max_pool_bytes(const uint8_t[:, :, ::1] x, uint8_t[:, :, ::1] out, kernel, strides,
                   dilations, start_padding, bint signed_bytes, int n_threads):
    """out[p] <- the 2-D MaxPool of plane x[p]: windows of kernel (h, w) taps
    ``dilations`` apart, ``strides`` apart, from -start_padding (positions
    outside the plane take no part; a window of none gives the lowest byte).
    int8 planes come as their bytes with ``signed_bytes``.  Each argument is
    checked against the output's geometry (ValueError)."""
    cdef MaxPoolJob job
    cdef qops_max_pool_geometry* g = &job.geometry
    cdef Py_ssize_t planes = x.shape[0], threads = max(1, n_threads)
    cdef uint8_t[::1] scratch
    g.height, g.width = x.shape[1], x.shape[2]
    g.out_height, g.out_width = out.shape[1], out.shape[2]
    g.kernel_h, g.kernel_w = kernel
    g.stride_h, g.stride_w = strides
    g.dilation_h, g.dilation_w = dilations
    g.pad_top, g.pad_left = start_padding
    g.flip = 0x80 if signed_bytes else 0
    if (out.shape[0] != planes or min(g.kernel_h, g.kernel_w, g.stride_h, g.stride_w,
                                          g.dilation_h, g.dilation_w) < 1
            or g.pad_top < 0 or g.pad_left < 0):
        raise ValueError("max_pool_bytes: the arguments do not describe the output")
    g.row_length = max_pool_row_length(g)
    if planes == 0 or g.out_height == 0 or g.out_width == 0:
        return
    job.scratch_pitch = whole_lines(g.row_length + MAX_POOL_ROW_SLACK)
    scratch = np.empty(threads * job.scratch_pitch, np.uint8)
    job.x = &x[0, 0, 0] if x.shape[1] and x.shape[2] else NULL
    job.out = &out[0, 0, 0]
    job.scratch = &scratch[0]
    if job.x == NULL:
        # No position inside: every window gives the lowest value.
        out[:, :, :] = g.flip
        return
    with nogil:
        run_range(max_pool_range, &job, planes, 1,
                  <int>threads if planes * g.height * g.width >= PARALLEL_MIN else 1)


cdef struct MaxPoolRowsJob:
    qops_max_pool_geometry geometry
    Py_ssize_t channels
    const uint8_t* x
    uint8_t* out


cdef void max_pool_rows_range(void* context, Py_ssize_t start, Py_ssize_t stop,
                              int slot) noexcept nogil:
    cdef const MaxPoolRowsJob* job = <const MaxPoolRowsJob*>context
    cdef const qops_max_pool_geometry* g = &job.geometry
    cdef Py_ssize_t row, image
    for row in range(start, stop):
        image = row // g.out_height
        max_pool_channels_last_row(g, job.channels, row % g.out_height,
                                   job.x + image * g.height * g.width * job.channels,
                                   job.out + image * g.out_height * g.out_width * job.channels)


def max_pool_channels_last(const uint8_t[:, :, :, ::1] x, uint8_t[:, :, :, ::1] out, kernel,
                           strides, dilations, start_padding, bint signed_bytes,
                           int n_threads):
    """max_pool_bytes for channels-last images: out[n, oy, ox, c] <- the
    MaxPool of channel c of x[n] (N x H x W x C), the same windows and
    values; output rows are the tasks.  The batch, channels, kernel,
    strides, dilations and padding are checked (ValueError); the output's
    height and width are the caller's (each window is clipped to the image,
    and one with no position inside gives the lowest value)."""
    cdef MaxPoolRowsJob job
    cdef qops_max_pool_geometry* g = &job.geometry
    cdef Py_ssize_t rows = out.shape[0] * out.shape[1]
    g.height, g.width = x.shape[1], x.shape[2]
    g.out_height, g.out_width = out.shape[1], out.shape[2]
    g.kernel_h, g.kernel_w = kernel
    g.stride_h, g.stride_w = strides
    g.dilation_h, g.dilation_w = dilations
    g.pad_top, g.pad_left = start_padding
    g.flip = 0x80 if signed_bytes else 0
    g.row_length = 0  # (the planes' padded row; unused here)
    job.channels = x.shape[3]
    if (out.shape[0] != x.shape[0] or out.shape[3] != x.shape[3]
            or min(g.kernel_h, g.kernel_w, g.stride_h, g.stride_w, g.dilation_h,
                   g.dilation_w) < 1 or g.pad_top < 0 or g.pad_left < 0):
        raise ValueError("max_pool_channels_last: the arguments do not describe the output")
    if rows == 0 or g.out_width == 0 or job.channels == 0:
        return
    job.x = &x[0, 0, 0, 0] if g.height and g.width else NULL
    job.out = &out[0, 0, 0, 0]
    if job.x == NULL:
        # No position inside: every window gives the lowest value.
        out[:, :, :, :] = g.flip
        return
    with nogil:
        run_range(max_pool_rows_range, &job, rows, 1,
                  <int>max(1, n_threads) if out.shape[0] * g.height * g.width * job.channels
                  >= PARALLEL_MIN else 1)
