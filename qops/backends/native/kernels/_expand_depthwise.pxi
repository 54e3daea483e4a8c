# -- a pointwise convolution and the depthwise convolution of its output ------------
# An inverted-residual block expands its image into several times as many
# channels (a 1 x 1 convolution) and then filters each channel on its own
# (a depthwise convolution).  Run one after the other, the expansion's whole
# output leaves the caches between them: MobileNetV2's 96 x 112 x 112 is
# 1.2 MB, written out and read back.  Here each task expands a block of
# channels into its own thread's planes, few enough to stay in L2, and the
# depthwise pair kernel filters them from there into the output.  Both
# halves are kernels of the two operators (run_gemm on the expansion's
# bound product, depthwise_plane, as depthwise2d's pair driver runs it):
# exact sums and the contract's requantization, so the bytes are the two
# calls', whichever depthwise kernel a call of its own would take.

cdef enum:
    # Bytes of expanded planes a task makes and filters: with the packed
    # image beside them, inside a core's L2 of 1 MB (Zen 4, Skylake-SP).
    # Blocks of half as many channels were slower on two threads
    # (docs/performance_notes.rst).
    EXPANDED_BLOCK_BYTES = 384 * 1024
    # Bytes past each slot's planes, a margin (the GEMM's stores end at the
    # last plane's last byte).
    PLANES_SLACK = 4096


cdef struct ExpandDepthwiseJob:
    const Gemm* gemm              # the expansion: filter rows as A, B packed in the run
    const Epilogue* epilogue
    const DepthwiseJob* depthwise
    uint8_t* planes               # per slot: block_rows planes of `pixels` bytes
    Py_ssize_t slot_planes_bytes
    uint8_t* scratch              # per slot: the GEMM's SLOT_BYTES
    Py_ssize_t block_rows         # channels per task, a multiple of MR
    Py_ssize_t blocks             # tasks per image
    Py_ssize_t m                  # expanded channels
    Py_ssize_t pixels             # per expanded plane
    Py_ssize_t out_plane          # per output plane
    uint8_t* out


cdef void expand_depthwise_tasks(void* context, Py_ssize_t start, Py_ssize_t stop,
                                 int slot) noexcept nogil:
    """Tasks [start, stop): block task % blocks of image task // blocks,
    expanded into this slot's planes (the GEMM inline, on this thread),
    then each of its channels filtered into the output."""
    cdef const ExpandDepthwiseJob* j = <const ExpandDepthwiseJob*>context
    cdef Gemm own
    cdef Epilogue own_epilogue
    cdef Py_ssize_t task, image, r0, rows, o
    cdef uint8_t* planes = j.planes + slot * j.slot_planes_bytes
    for task in range(start, stop):
        image = task // j.blocks
        r0 = (task % j.blocks) * j.block_rows
        rows = min(j.block_rows, j.m - r0)
        own = j.gemm[0]
        own_epilogue = j.epilogue[0]
        # Rows r0.. of the product alone: A's rows, and every per-row value
        # of the epilogue (a pointwise convolution's are per output channel).
        own.m = rows
        own.a = j.gemm.a + r0 * j.gemm.lda
        if own.a_packed != NULL:
            own.a_packed = j.gemm.a_packed + r0 * j.gemm.a_packed_stride
        own.batch = 1
        own.a_index = j.gemm.a_index + image
        own.b_index = j.gemm.b_index + image
        own.out = planes
        own.scratch = j.scratch + slot * SLOT_BYTES
        own_epilogue.multiplier = j.epilogue.multiplier + r0
        own_epilogue.out_zero = j.epilogue.out_zero + r0
        if own_epilogue.column_term != NULL:
            own_epilogue.column_term = j.epilogue.column_term + r0
        own_epilogue.row_zero = j.epilogue.row_zero + r0 * j.epilogue.row_zero_step
        if own_epilogue.row_sum != NULL:
            own_epilogue.row_sum = j.epilogue.row_sum + r0
        if own_epilogue.row_stores != NULL:
            own_epilogue.row_stores = <const RowTermsStore*>j.epilogue.row_stores + r0 // MR
        run_gemm(&own, &own_epilogue, 1)
        for o in range(r0, r0 + rows):
            depthwise_plane(j.depthwise, planes + (o - r0) * j.pixels, o,
                            j.out + (image * j.m + o) * j.out_plane, slot)


cdef void pack_column_tiles(void* context, Py_ssize_t start, Py_ssize_t stop,
                            int slot) noexcept nogil:
    """Column tiles [start, stop) of every image's B (tile t of image t //
    column tiles), packed before any task multiplies them."""
    cdef const ExpandDepthwiseJob* j = <const ExpandDepthwiseJob*>context
    cdef Py_ssize_t tiles = j.gemm.b_column_tiles, index
    for index in range(start, stop):
        ensure_packed(j.gemm, index // tiles, (index % tiles) * unit_panels(j.gemm.n))


cdef class BoundExpandDepthwise:
    """A compiled pointwise convolution (``expand``: its BoundProduct, filter
    as A and each image as B, as gemm.prepare_pointwise binds it) and a
    compiled depthwise convolution of its output, run as one: the
    depthwise convolution's arguments are depthwise2d's, its image the
    expansion's output (``input_signed``: of int8).  ``takes`` says whether
    the kernels run the pair so (the pair kernel of this variant, strides of
    at most 2 across, one output channel per channel, every sum inside
    int32, and an expansion whose rows' sums come made); :meth:`run_fresh`
    is then the pair's call into a new output (set_output's form).
    """
    cdef BoundProduct expand
    cdef DepthwiseJob depthwise
    cdef uint8_t* depthwise_block
    cdef readonly bint takes
    cdef Py_ssize_t block_rows, blocks, pixels, out_plane, batch, image_bytes
    cdef object kept
    cdef cnp.dtype fresh_dtype
    cdef int fresh_rank
    cdef cnp.npy_intp fresh_dims[cnp.NPY_MAXDIMS]

    def __cinit__(self):
        self.depthwise_block = NULL

    def __dealloc__(self):
        free(self.depthwise_block)

    def __init__(self, BoundProduct expand, Py_ssize_t height, Py_ssize_t width,
                 bint input_signed, int32_t input_zero, const uint8_t[:, ::1] taps,
                 bint filter_signed, const int32_t[::1] filter_zero, Py_ssize_t kernel_h,
                 Py_ssize_t kernel_w, strides, dilations, start_padding, end_padding,
                 const float[::1] multiplier, const int32_t[::1] out_zero, bias,
                 Py_ssize_t out_h, Py_ssize_t out_w, int32_t low, int32_t high):
        cdef Py_ssize_t m = expand.m, count = kernel_h * kernel_w
        cdef Py_ssize_t stride_h = strides[0], stride_w = strides[1]
        cdef Py_ssize_t dilation_h = dilations[0], dilation_w = dilations[1]
        cdef Py_ssize_t pad_top = start_padding[0], pad_left = start_padding[1]
        cdef Py_ssize_t padded_h = height + pad_top + end_padding[0]
        cdef Py_ssize_t padded_w = width + pad_left + end_padding[1]
        cdef const int32_t[::1] bias_view
        cdef const int32_t* bias_ptr = NULL
        self.expand = expand
        self.pixels = height * width
        self.out_plane = out_h * out_w
        self.batch = expand.batches
        self.image_bytes = expand.b_batches * expand.k * expand.n
        self.takes = False
        # The expansion as prepare_pointwise binds it: one filter, each image
        # packed during the run, its rows' terms made before.
        if (expand.empty or not expand.during or expand.a_per_call or expand.sums_in_run
                or not expand.epilogue.per_row or expand.epilogue.raw or expand.a_batches != 1
                or expand.n != self.pixels or expand.b_batches != self.batch):
            return
        # The pair kernel, one output channel per expanded channel.
        if (not DEPTHWISE_PAIRS or stride_w > 2 or count > MAX_TAPS or m == 0
                or out_h == 0 or out_w == 0 or taps.shape[0] != m
                or (bias is not None and (not isinstance(bias, np.ndarray)
                                          or bias.dtype != np.int32 or bias.shape != (m,)))):
            return
        if bias is not None:
            bias = np.ascontiguousarray(bias)
            bias_view = bias
            bias_ptr = &bias_view[0]
        if not sums_fit_int32(count, bias_ptr, m):
            return
        # depthwise2d's contract: per-channel vectors complete, every tap of
        # every output inside the padded plane.
        if (taps.shape[1] != count or multiplier.shape[0] != m
                or out_zero.shape[0] != m or filter_zero.shape[0] != m
                or stride_h < 1 or stride_w < 1 or dilation_h < 1 or dilation_w < 1
                or min(pad_top, pad_left, end_padding[0], end_padding[1]) < 0
                or (out_h - 1) * stride_h + (kernel_h - 1) * dilation_h >= padded_h
                or (out_w - 1) * stride_w + (kernel_w - 1) * dilation_w >= padded_w):
            raise ValueError("BoundExpandDepthwise: arguments do not match the convolution's "
                             "geometry")
        # Scratch comes from each call's workspaces; the description's own
        # is one slot's, unused.
        self.depthwise_block = describe_pairs(
            &self.depthwise, m, height, width, input_signed, input_zero, &taps[0, 0],
            filter_signed, &filter_zero[0], kernel_h, kernel_w, stride_h, stride_w, dilation_h,
            dilation_w, pad_top, pad_left, &multiplier[0], &out_zero[0], bias_ptr, m, out_h,
            out_w, low, high, 1)
        # As many channels a task as keep its planes in L2, in whole micro-
        # tiles, and at least four tasks an image where the channels allow.
        self.block_rows = MR * max(1, min(EXPANDED_BLOCK_BYTES // max(self.pixels, 1) // MR,
                                          ceil_div(ceil_div(m, MR), 4)))
        self.blocks = ceil_div(m, self.block_rows)
        self.kept = (taps, filter_zero, multiplier, out_zero, bias)
        self.takes = True

    def set_output(self, shape, dtype):
        """Make :meth:`run_fresh` answer arrays of ``shape`` and ``dtype``
        (whose bytes are the depthwise convolution's output)."""
        output_form(shape, dtype, self.batch * self.expand.m * self.out_plane, self.fresh_dims,
                    &self.fresh_rank)
        self.fresh_dtype = np.dtype(dtype)

    def run_fresh(self, image, int n_threads):
        """A new output of the two convolutions on ``image`` (the expansion's
        image, a C-contiguous NumPy array of exactly its bytes); None, with
        nothing run, for any other operand, before set_output, or where the
        kernels do not take the pair."""
        cdef cnp.ndarray out
        cdef const uint8_t* data = NULL
        if not self.takes or self.fresh_dtype is None:
            return None
        if not bytes_taken(image, self.image_bytes, &data):
            return None
        out = empty_array(self.fresh_rank, self.fresh_dims, self.fresh_dtype)
        self.run_on(data, <uint8_t*>cnp.PyArray_DATA(out), n_threads)
        return out

    cdef int run_on(self, const uint8_t* image, uint8_t* out, int n_threads) except -1:
        cdef BoundProduct expand = self.expand
        cdef Gemm gemm = expand.gemm
        cdef Epilogue epilogue = expand.epilogue
        cdef DepthwiseJob depthwise = self.depthwise
        cdef ExpandDepthwiseJob job
        cdef Py_ssize_t tasks = self.batch * self.blocks
        cdef int threads = slots_for(n_threads, tasks)
        keep = []
        # B packed into this thread's workspaces, as BoundProduct.run_on has
        # it packed during its run, but every column tile first, on every
        # thread (pack_column_tiles), before any task multiplies.
        gemm.b = <int8_t*>workspace_bytes("packed b", expand.b_batches * expand.b_stride, keep)
        epilogue.column_sum = <int64_t*>workspace_bytes(
            "column sums", expand.b_batches * expand.colsum_stride * sizeof(int64_t), keep)
        cdef int32_t* ready = <int32_t*>workspace_bytes(
            "b column tiles", expand.b_batches * expand.column_tiles * sizeof(int32_t), keep)
        memset(ready, 0, expand.b_batches * expand.column_tiles * sizeof(int32_t))
        gemm.b_source = image
        gemm.b_panels = <int8_t*>gemm.b
        gemm.b_sums = <int64_t*>epilogue.column_sum
        gemm.b_sums_stride = expand.colsum_stride
        gemm.b_ready = ready
        gemm.b_column_tiles = expand.column_tiles
        gemm.out = NULL
        # Each slot's depthwise plane starts unfilled (its padding is made by
        # its first task).
        depthwise.scratch = workspace_bytes("depthwise planes", threads * depthwise.per_slot, keep)
        depthwise.ready = workspace_bytes("depthwise ready", threads, keep)
        memset(depthwise.ready, 0, threads)
        job.gemm = &gemm
        job.epilogue = &epilogue
        job.depthwise = &depthwise
        job.slot_planes_bytes = round_up(self.block_rows * self.pixels, 64) + PLANES_SLACK
        job.planes = workspace_bytes("expanded planes", threads * job.slot_planes_bytes, keep)
        job.scratch = workspace_bytes("scratch", scratch_bytes(threads), keep)
        job.block_rows = self.block_rows
        job.blocks = self.blocks
        job.m = expand.m
        job.pixels = self.pixels
        job.out_plane = self.out_plane
        job.out = out
        with nogil:
            run_range(pack_column_tiles, &job, expand.b_batches * expand.column_tiles, 1,
                      threads)
            run_range(expand_depthwise_tasks, &job, tasks, 1, threads)
        del keep  # what the run read through its descriptions
        return 0
