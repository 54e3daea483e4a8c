# The matrix multiply's entry points: checks, the Gemm and Epilogue of a
# batch of products, and their run.  Needs the driver (_gemm_units.pxi).

def tile_shape():
    """(MR, NR): the rows and columns of this variant's micro-tile."""
    return MR, NR


def matrix_row_sums(const uint8_t[:, :, ::1] a, bint flip, int n_threads):
    """sum_k A'[i, r, k] as int64 (batches x M), A' = A ^ 0x80 when flip:
    the row sums matmul needs for a zero point of B, kept by a caller
    whose A is constant."""
    cdef Py_ssize_t batches = a.shape[0], m = a.shape[1], k = a.shape[2]
    cdef Py_ssize_t step_offset[1]
    cdef Gemm gemm
    sums = np.zeros((batches, m), np.int64)
    cdef int64_t[:, ::1] view = sums
    if batches == 0 or m == 0 or k == 0:
        return sums
    step_offset[0] = 0
    gemm.a = &a[0, 0, 0]
    gemm.a_batch_stride = m * k
    gemm.row_offset = NULL
    gemm.a_slack = 0
    gemm.lda = k
    gemm.m = m
    gemm.a_flip = 0x80 if flip else 0
    gemm.step_offset = step_offset
    gemm.steps = 1
    gemm.step_length = k
    with nogil:
        batch_row_sums(&gemm, batches, &view[0, 0], max(n_threads, 1))
    return sums


cdef void batch_row_sums(Gemm* gemm, Py_ssize_t batches, int64_t* sums,
                         int n_threads) noexcept nogil:
    """sums[i * M + r] <- sum_k A'[r, k] of A matrix i (a_batch_stride apart)."""
    cdef const uint8_t* a = gemm.a
    cdef Py_ssize_t index
    for index in range(batches):
        gemm.a = a + index * gemm.a_batch_stride
        row_sums(gemm, sums + index * gemm.m, n_threads)
    gemm.a = a


# The most rows of A a product may have to read B' narrowed (b_narrow): a
# block this short runs microkernel_narrow.  0 where the panels are bytes
# already, so that callers never ask for a copy there.
NARROW_MAX_ROWS = SHORT_BLOCK_ROWS if B_BYTES == 2 else 0


def narrow_panels(const int8_t[:, ::1] b_packed):
    """pack_b_batches' panels narrowed to one byte per value, in the same
    order (B' values are bytes however wide the panel holds them), for
    products of one or two rows (matmul's b_narrow); None where the
    variant's panels are bytes already."""
    if B_BYTES == 1:
        return None
    return np.asarray(b_packed).view(np.int16).astype(np.int8)


def pack_b_batches(const uint8_t[:, :, ::1] b, bint flip, int n_threads):
    """Pack every K x N matrix of b; returns (packed, colsum), one row per
    matrix, arrays of their own (a compiled operator's constant B)."""
    cdef Py_ssize_t batches = b.shape[0], k = b.shape[1], n = b.shape[2], index
    cdef Py_ssize_t size = max(packed_b_bytes(k, n), 1)
    cdef Py_ssize_t padded = max(ceil_div(n, NR) * NR, 1)
    # Packing writes every byte of every panel and every column sum.
    packed = (np.empty if k and n else np.zeros)((batches, size), dtype=np.int8)
    colsum = (np.empty if k and n else np.zeros)((batches, padded), dtype=np.int64)
    cdef int8_t[:, ::1] packed_view = packed
    cdef int64_t[:, ::1] colsum_view = colsum
    cdef PackBatches job
    if k and n:
        job.b = &b[0, 0, 0]
        job.k = k
        job.n = n
        job.flip = 0x80 if flip else 0
        job.packed = &packed_view[0, 0]
        job.packed_stride = packed_view.shape[1]
        job.colsum = &colsum_view[0, 0]
        job.colsum_stride = colsum_view.shape[1]
        with nogil:
            if batches >= n_threads > 1:
                # Enough matrices to keep every thread busy with whole ones.
                run_range(pack_batches, &job, batches, 1, n_threads)
            else:
                for index in range(batches):
                    pack_b_matrix(job.b + index * k * n, n, k, n, job.flip,
                                  job.packed + index * job.packed_stride,
                                  job.colsum + index * job.colsum_stride, n_threads)
    return packed, colsum


cdef struct PackBatches:
    const uint8_t* b
    Py_ssize_t k
    Py_ssize_t n
    uint8_t flip
    int8_t* packed
    Py_ssize_t packed_stride
    int64_t* colsum
    Py_ssize_t colsum_stride


cdef void pack_batches(void* context, Py_ssize_t start, Py_ssize_t stop,
                       int slot) noexcept nogil:
    cdef const PackBatches* job = <const PackBatches*>context
    cdef Py_ssize_t index
    for index in range(start, stop):
        pack_b_matrix(job.b + index * job.k * job.n, job.n, job.k, job.n, job.flip,
                      job.packed + index * job.packed_stride,
                      job.colsum + index * job.colsum_stride, 1)


def matmul(const uint8_t[:, :, ::1] a, bint a_flip, const int64_t[::1] a_index,
           const int8_t[:, ::1] b_packed, const int64_t[:, ::1] b_colsum,
           const int64_t[::1] b_index, Py_ssize_t n,
           const int32_t[::1] row_zero, const int32_t[::1] col_zero,
           const float[:, ::1] multiplier, const int32_t[:, ::1] out_zero,
           uint8_t[:, :, ::1] out, int32_t low, int32_t high, int n_threads, bint raw=False,
           bint per_row=False, bias=None, a_row_sums=None, b_source=None,
           bint b_source_flip=False, bint to_float=False, float_bias=None, b_narrow=None):
    """out[i] <- requantized a[a_index[i]] @ b[b_index[i]] for every output matrix i.

    B comes packed (b_packed and b_colsum, from pack_b_batches: a compiled
    operator's constant), or as it is (b_source: batches x K x N bytes, with
    b_packed and b_colsum None), to be packed during the run, column tile by
    column tile, by the threads that multiply it (b_source_flip: uint8 B, read
    as B' = B ^ 0x80, as pack_b_batches' flip).  A is read in place (a_flip:
    int8, read as A' = A ^ 0x80).  multiplier and out_zero are (1 or M) x N
    tables.  With raw, out holds the exact int32 products (M x 4N bytes per
    matrix) and multiplier, out_zero, low and high are not read; with
    to_float as well, it holds float32(product) * multiplier (+ float_bias,
    float32, N, when given) as float32 (MATRIX_MULTIPLY_INTEGER_TO_FLOAT).

    b_narrow: narrow_panels(b_packed), read instead of b_packed by a short
    block of rows (a product of one or two rows: half the bytes).

    bias (int64, N, or None) is added to each column's exact sums (a
    convolution of one-pixel images as a product: its output channels'
    biases).

    per_row: the requantization belongs to the rows (a pointwise convolution
    as filter x image, whose rows are output channels): multiplier and
    out_zero are M x 1, bias (int64, M, or None) is added to each row
    instead, and col_zero holds one zero point for every column.  a_row_sums
    (int64, a_batches x M) are the sums of A' per row when the caller keeps
    them (a constant A); else they are computed when a column zero point
    needs them.
    """
    product = BoundProduct(a, a_flip, a_index, b_packed, b_colsum, b_index, n, row_zero,
                           col_zero, multiplier, out_zero, out.shape[0], low, high, raw,
                           per_row, bias, a_row_sums,
                           None if b_source is None else np.shape(b_source), b_source_flip,
                           to_float, float_bias, False, False, b_narrow)
    product.run(None, b_source, out, n_threads)


cdef class BoundProduct:
    """A batch of products as :func:`matmul` runs it, everything but the
    operand a call brings (A, or B's source) and the output checked and
    described once: the Gemm and Epilogue are kept, so that a call costs its
    run, a few pointers and this thread's workspaces (a network's pointwise
    convolution, whose filter and parameters never change, made them again
    on every call: more than its kernels' own time on small images).

    The arguments are matmul's, with ``out_batches`` for out (the products
    in the batch) and ``b_source_shape`` for b_source; with ``a_per_call``
    each call brings an A of a's shape (a is then only its shape's model,
    and a_row_sums must be None); with ``a_packed_once`` (a bound product run
    call after call) its rows' epilogue terms are made here once, and a
    constant A of short rows is packed here rather than by the units of every
    run; with ``b_narrow`` (narrow_panels(b_packed)) a short block of rows
    reads that.
    A call's operands are checked against the bound shapes (ValueError from
    :meth:`run`; :meth:`run_fresh` answers None instead); each call works on
    a copy of the descriptions, so one bound product may run in several
    threads at once.
    """
    cdef Gemm gemm
    cdef Epilogue epilogue
    cdef Py_ssize_t step_offset[1]
    cdef object kept           # the arrays the descriptions point into
    cdef Py_ssize_t a_batches, m, k, n, batches, out_columns
    cdef Py_ssize_t b_batches, b_stride, colsum_stride, column_tiles
    cdef bint during, a_per_call, sums_in_run, empty
    # run_fresh's output (set_output) and the most threads it runs on.
    cdef cnp.dtype fresh_dtype
    cdef int fresh_rank, fresh_threads
    cdef cnp.npy_intp fresh_dims[cnp.NPY_MAXDIMS]

    def __init__(self, const uint8_t[:, :, ::1] a, bint a_flip, const int64_t[::1] a_index,
                 const int8_t[:, ::1] b_packed, const int64_t[:, ::1] b_colsum,
                 const int64_t[::1] b_index, Py_ssize_t n,
                 const int32_t[::1] row_zero, const int32_t[::1] col_zero,
                 const float[:, ::1] multiplier, const int32_t[:, ::1] out_zero,
                 Py_ssize_t out_batches, int32_t low, int32_t high, bint raw=False,
                 bint per_row=False, bias=None, a_row_sums=None, b_source_shape=None,
                 bint b_source_flip=False, bint to_float=False, float_bias=None,
                 bint a_per_call=False, bint a_packed_once=False, b_narrow=None):
        cdef Py_ssize_t k = a.shape[2]
        self.a_batches, self.m, self.k, self.n = a.shape[0], a.shape[1], k, n
        self.batches = out_batches
        self.out_columns = n * (4 if raw else 1)
        self.a_per_call = a_per_call
        if a_per_call and a_row_sums is not None:
            raise ValueError("matmul: row sums are given for an A that each call brings")
        # An empty product runs nothing (its output has no values).
        self.empty = out_batches <= 0 or a.shape[1] == 0 or n <= 0
        if self.empty:
            return
        packed_zeros = None
        self.during = b_source_shape is not None
        if self.during:
            if tuple(b_source_shape)[1:] != (k, n):
                raise ValueError("matmul: b_source is not K x N")
            if k == 0:
                b_packed, b_colsum = packed_zeros = pack_b_batches(
                    np.zeros(b_source_shape, np.uint8), b_source_flip, 1)
                self.during = False
        if self.during:
            self.b_batches = b_source_shape[0]
            self.b_stride = packed_b_bytes(k, n)
            self.colsum_stride = ceil_div(n, NR) * NR
            self.column_tiles = unit_columns(n)
            self.gemm.b = NULL
            self.epilogue.column_sum = NULL
            self.gemm.b_source_flip = 0x80 if b_source_flip else 0
        else:
            if (b_packed is None or b_colsum is None or b_colsum.shape[0] != b_packed.shape[0]
                    or b_packed.shape[1] < packed_b_bytes(k, n) or b_colsum.shape[1] < n):
                raise ValueError("matmul: arguments do not cover the output")
            self.b_batches = b_packed.shape[0]
            self.b_stride = b_packed.shape[1]
            self.colsum_stride = b_colsum.shape[1]
        check_matmul(a, a_index, self.b_batches, b_index, n, row_zero, col_zero, multiplier,
                     out_zero, out_batches, raw, per_row, bias, a_row_sums,
                     to_float, float_bias)
        cdef const float[::1] float_bias_view
        self.epilogue.to_float = to_float
        self.epilogue.float_bias = NULL
        self.epilogue.row_stores = NULL
        if float_bias is not None:
            float_bias_view = float_bias
            self.epilogue.float_bias = &float_bias_view[0]
        described = describe_matmul(
            &self.gemm, &self.epilogue, self.step_offset, a, a_flip, a_index,
            NULL if self.during else &b_packed[0, 0], self.b_stride,
            NULL if self.during else &b_colsum[0, 0], self.colsum_stride, b_index, n,
            row_zero, col_zero, multiplier, out_zero, out_batches, low, high, raw, per_row,
            bias, a_row_sums)
        self.sums_in_run = described[3]
        cdef const int8_t[:, ::1] narrow_view
        if b_narrow is not None and not self.during and k:
            narrow_view = b_narrow
            if (B_BYTES != 2 or narrow_view.shape[0] != self.b_batches
                    or narrow_view.shape[1] * B_BYTES != self.b_stride):
                raise ValueError("matmul: b_narrow is not b_packed narrowed")
            self.gemm.b_narrow = &narrow_view[0, 0]
        packed_a = None
        if (a_packed_once and not a_per_call and 0 < k <= PREPACKED_A_MAX_K
                and not (A_BYTES == 1 and self.gemm.a_flip == 0)):
            # A constant A the units would pack block by block, unit after
            # unit, call after call: packed here once (by this thread alone,
            # which only a product run many times repays).
            packed_a = prepack_a(&self.gemm, self.a_batches)
        cdef uint8_t[::1] row_stores_view
        row_stores = None
        if (a_packed_once and not a_per_call and self.a_batches == 1 and not self.sums_in_run
                and self.epilogue.per_row and self.epilogue.sums_fit_int32 and not raw):
            # A filter's rows are the same call after call: their epilogue
            # terms are made here once, not by every unit of every call (on
            # a short K, as much work as the unit's sums).
            row_stores = row_stores_view = np.empty(row_stores_bytes(self.m), np.uint8)
            fill_row_stores(<RowTermsStore*>&row_stores_view[0], &self.epilogue, &self.gemm)
            self.epilogue.row_stores = &row_stores_view[0]
        self.kept = (described, a_index, b_packed, b_colsum, b_index, row_zero, col_zero,
                     multiplier, out_zero, float_bias, packed_zeros, packed_a, b_narrow,
                     row_stores)

    def run(self, a, b_source, uint8_t[:, :, ::1] out, int n_threads):
        """out <- the products, with ``a`` (with a_per_call, else None) and
        ``b_source`` (when bound with b_source_shape, else None)."""
        cdef const uint8_t[:, :, ::1] a_view
        cdef const uint8_t[:, :, ::1] source
        cdef const uint8_t* a_data = NULL
        cdef const uint8_t* source_data = NULL
        if self.empty:
            return
        if (out.shape[0] != self.batches or out.shape[1] != self.m
                or out.shape[2] != self.out_columns):
            raise ValueError("matmul: arguments do not cover the output "
                             "(out is not of the bound shape)")
        if self.a_per_call and self.k:
            a_view = a
            if (a_view.shape[0] != self.a_batches or a_view.shape[1] != self.m
                    or a_view.shape[2] != self.k):
                raise ValueError("matmul: arguments do not cover the output "
                                 "(a is not of the bound shape)")
            a_data = &a_view[0, 0, 0]
        if self.during:
            source = b_source
            if (source.shape[0] != self.b_batches or source.shape[1] != self.k
                    or source.shape[2] != self.n):
                raise ValueError("matmul: arguments do not cover the output "
                                 "(b_source is not of the bound shape)")
            source_data = &source[0, 0, 0]
        self.run_on(a_data, source_data, &out[0, 0, 0], n_threads)

    def set_output(self, shape, dtype, int most_threads):
        """Make :meth:`run_fresh` answer arrays of ``shape`` and ``dtype``
        (whose bytes are the bound output's), on at most ``most_threads``."""
        output_form(shape, dtype, self.batches * self.m * self.out_columns, self.fresh_dims,
                    &self.fresh_rank)
        self.fresh_threads = max(most_threads, 1)
        self.fresh_dtype = np.dtype(dtype)

    def run_fresh(self, operand, int n_threads):
        """A new output (:meth:`set_output`'s shape) of the products with
        ``operand`` as the call's one operand (A with a_per_call, else B's
        source); None, with nothing run, before set_output, for a product
        bound with no operand or both, or an empty one, and for an operand
        that is not a C-contiguous NumPy array of exactly the bound
        operand's bytes (the caller then takes :meth:`run`).  A compiled
        convolution's call after call: no views, memoryviews or Python
        output call on the way."""
        cdef cnp.ndarray out
        cdef const uint8_t* data = NULL
        if self.fresh_dtype is None or self.empty or self.a_per_call == self.during:
            return None
        if not bytes_taken(operand, self.a_batches * self.m * self.k if self.a_per_call
                           else self.b_batches * self.k * self.n, &data):
            return None
        out = empty_array(self.fresh_rank, self.fresh_dims, self.fresh_dtype)
        n_threads = min(n_threads, self.fresh_threads)
        if self.a_per_call:
            self.run_on(data, NULL, <uint8_t*>cnp.PyArray_DATA(out), n_threads)
        else:
            self.run_on(NULL, data, <uint8_t*>cnp.PyArray_DATA(out), n_threads)
        return out

    cdef int run_on(self, const uint8_t* a, const uint8_t* b_source, uint8_t* out,
                    int n_threads) except -1:
        """The run, on operands whose shapes the caller has checked: ``a``
        with a_per_call and K > 0, ``b_source`` when bound with its shape
        (else NULL each)."""
        cdef Gemm gemm = self.gemm
        cdef Epilogue epilogue = self.epilogue
        cdef int32_t* ready = NULL
        keep = []
        n_threads = max(n_threads, 1)
        if a != NULL:
            gemm.a = a
        gemm.out = out
        gemm.scratch = workspace_bytes("scratch", scratch_bytes(n_threads), keep)
        if self.sums_in_run:
            # Each band of rows summed by the first unit that needs it
            # (ensure_row_sums), its state zeroed by run_matmul.
            gemm.a_sums = <int64_t*>workspace_bytes(
                "row sums", self.a_batches * self.m * sizeof(int64_t), keep)
            gemm.a_ready = <int32_t*>workspace_bytes(
                "row-sum states", self.a_batches * gemm.a_row_states * sizeof(int32_t), keep)
            epilogue.row_sum = gemm.a_sums
        gemm.b_ready = NULL
        if self.during:
            # Packed during the run, into this thread's workspace, by the
            # first unit that reads each column tile (ensure_packed).
            gemm.b = <int8_t*>workspace_bytes("packed b", self.b_batches * self.b_stride, keep)
            epilogue.column_sum = <int64_t*>workspace_bytes(
                "column sums", self.b_batches * self.colsum_stride * sizeof(int64_t), keep)
            ready = <int32_t*>workspace_bytes(
                "b column tiles", self.b_batches * self.column_tiles * sizeof(int32_t), keep)
            memset(ready, 0, self.b_batches * self.column_tiles * sizeof(int32_t))
            gemm.b_source = b_source
            gemm.b_panels = <int8_t*>gemm.b
            gemm.b_sums = <int64_t*>epilogue.column_sum
            gemm.b_sums_stride = self.colsum_stride
            gemm.b_ready = ready
            gemm.b_column_tiles = self.column_tiles
        with nogil:
            run_matmul(&gemm, &epilogue, self.a_batches, n_threads)
        del keep  # what the run read through gemm and epilogue
        return 0


cdef enum:
    # A constant A is packed once where K is at most this: with few values
    # per row the units' packing is much of their work.  With more, a unit
    # packs each block into L1 just before its first panel, the next block
    # beside that panel's pass, and reading packed rows from L2 instead was
    # slower (docs/performance_notes.rst).
    PREPACKED_A_MAX_K = 48


cdef object prepack_a(Gemm* gemm, Py_ssize_t a_batches):
    """Every row of every member of A packed as the units pack it (pack_a_block,
    a block of K at a time), whole rows of K end to end, into an array of
    its own, which gemm.a_packed then points into; returns the array."""
    cdef Py_ssize_t m = gemm.m, k = gemm.steps * gemm.step_length
    cdef Py_ssize_t stride = round_up(k, 4) * A_BYTES * A_SPREAD
    cdef Py_ssize_t blocks = ceil_div(m, MR), member, ri, r, k0, k1
    cdef Py_ssize_t member_bytes = blocks * MR * stride
    packed = np.zeros(a_batches * member_bytes + 64, np.uint8)
    block = np.empty(MR * BLOCK_ROW_BYTES, np.uint8)
    cdef uint8_t[::1] packed_view = packed
    cdef uint8_t[::1] block_view = block
    cdef uint8_t* start = &packed_view[0] + (-(<Py_ssize_t>&packed_view[0]) & 63)
    cdef const uint8_t* a = gemm.a
    with nogil:
        for member in range(a_batches):
            gemm.a = a + member * gemm.a_batch_stride
            for ri in range(blocks):
                k0 = 0
                while k0 < k:
                    k1 = min(k, k0 + 4 * K_BLOCK_GROUPS)
                    pack_a_block(gemm, ri * MR, min(<Py_ssize_t>MR, m - ri * MR), k0, k1,
                                 &block_view[0])
                    for r in range(MR):
                        memcpy(start + member * member_bytes + (ri * MR + r) * stride
                               + k0 * A_BYTES * A_SPREAD,
                               &block_view[0] + r * BLOCK_ROW_BYTES,
                               round_up(k1 - k0, 4) * A_BYTES * A_SPREAD)
                    k0 = k1
        gemm.a = a
    gemm.a_packed = start
    gemm.a_packed_stride = stride
    gemm.a_packed_batch_stride = member_bytes
    return packed


cdef int check_matmul(const uint8_t[:, :, ::1] a, const int64_t[::1] a_index,
                      Py_ssize_t b_batches, const int64_t[::1] b_index, Py_ssize_t n,
                      const int32_t[::1] row_zero, const int32_t[::1] col_zero,
                      const float[:, ::1] multiplier, const int32_t[:, ::1] out_zero,
                      Py_ssize_t batches, bint raw, bint per_row, bias,
                      a_row_sums, bint to_float, float_bias) except -1:
    """The glue's contract, checked once: indices and vectors cover the
    output of ``batches`` products (ValueError otherwise: the run trusts it
    for every access; BoundProduct.run checks each output's shape)."""
    cdef Py_ssize_t a_batches = a.shape[0], m = a.shape[1], k = a.shape[2]
    cdef Py_ssize_t index
    cdef Py_ssize_t columns = 1 if per_row else n
    if (a_index.shape[0] != batches or b_index.shape[0] != batches
            or row_zero.shape[0] < m or col_zero.shape[0] < columns
            or not (multiplier.shape[0] == m or (multiplier.shape[0] == 1 and not per_row))
            or multiplier.shape[1] < columns
            or not (out_zero.shape[0] == m or (out_zero.shape[0] == 1 and not per_row))
            or out_zero.shape[1] < columns
            or (bias is not None and np.shape(bias) != ((m,) if per_row else (n,)))
            or (a_row_sums is not None and np.shape(a_row_sums) != (a_batches, m))
            or (to_float and (not raw or per_row))
            or (float_bias is not None and (not to_float or np.shape(float_bias) != (n,)))):
        raise ValueError("matmul: arguments do not cover the output")
    for index in range(batches):
        if not (0 <= a_index[index] < a_batches and 0 <= b_index[index] < b_batches):
            raise ValueError("matmul: a batch index is out of range")
    if raw and not fits_int32(k, 0):
        raise ValueError("matmul: raw products need K that keeps every value inside int32")
    return 0


cdef tuple describe_matmul(Gemm* gemm, Epilogue* epilogue, Py_ssize_t* step_offset,
                           const uint8_t[:, :, ::1] a, bint a_flip, const int64_t[::1] a_index,
                           const int8_t* b_start, Py_ssize_t b_stride,
                           const int64_t* colsum_start, Py_ssize_t colsum_stride,
                           const int64_t[::1] b_index, Py_ssize_t n,
                           const int32_t[::1] row_zero, const int32_t[::1] col_zero,
                           const float[:, ::1] multiplier, const int32_t[:, ::1] out_zero,
                           Py_ssize_t batches, int32_t low, int32_t high, bint raw,
                           bint per_row, bias, a_row_sums):
    """The GEMM and epilogue descriptions of a checked product, all but the
    output and this call's workspaces (the scratch, and the row sums when
    the run makes them: BoundProduct.run); returns the arrays they point
    into (the caller keeps them while it runs) and whether the run sums
    A's rows."""
    cdef Py_ssize_t a_batches = a.shape[0], m = a.shape[1], k = a.shape[2], j
    cdef bint needs_row_sums = False
    cdef int64_t largest_bias = 0
    for j in range(1 if per_row else n):
        needs_row_sums = needs_row_sums or col_zero[j] != 0
    source_array = a
    if k == 0:
        # No products: S and every sum are 0; any in-bounds row will do.
        source_array = np.zeros((1, 1, 4), np.uint8)
    cdef const uint8_t[:, :, ::1] source = source_array
    # Row sums given by the caller are read, never written: the run fills
    # only a buffer of its own (e.row_sum then points at that).
    given = a_row_sums is not None and needs_row_sums and k
    sums = None
    cdef const int64_t[:, ::1] sums_view
    cdef const int64_t[::1] term_view
    epilogue.row_sum = NULL
    epilogue.row_sums_given = given
    if given:
        sums = np.ascontiguousarray(a_row_sums, np.int64)
        sums_view = sums
        epilogue.row_sum = &sums_view[0, 0]
    gemm.a_ready = NULL
    gemm.a_sums = NULL
    gemm.a_packed = NULL
    gemm.b_narrow = NULL
    sums_in_run = bool(needs_row_sums and k and not given)
    if sums_in_run:
        gemm.a_sums_stride = m
        gemm.a_row_states = row_sum_states(m)
    terms = None
    epilogue.column_term = NULL
    if bias is not None:
        terms = np.ascontiguousarray(bias, np.int64)
        largest_bias = largest_magnitude(terms)
        term_view = terms
        epilogue.column_term = &term_view[0]
    step_offset[0] = 0
    gemm.a = &source[0, 0, 0]
    gemm.row_offset = NULL
    gemm.a_slack = 0
    gemm.lda = k
    gemm.m = m
    gemm.a_flip = 0x80 if a_flip else 0
    gemm.step_offset = step_offset
    gemm.steps = 1
    gemm.step_length = max(k, 1)
    gemm.groups = ceil_div(k, 4)
    gemm.b = b_start
    gemm.n = n
    gemm.out = NULL
    gemm.out_row_stride = n
    gemm.out_col_stride = 1
    gemm.batch = batches
    gemm.a_index = &a_index[0]
    gemm.b_index = &b_index[0]
    gemm.a_batch_stride = m * k
    gemm.b_batch_stride = b_stride
    gemm.out_batch_stride = m * n
    gemm.scratch = NULL
    epilogue.row_sum_batch_stride = m
    epilogue.column_sum_batch_stride = colsum_stride
    epilogue.column_zero = &col_zero[0]
    epilogue.column_sum = colsum_start
    epilogue.row_zero = &row_zero[0]
    # One zero point for every row (per-tensor A, the usual case) lets the
    # epilogue fold it into the unit's column vectors (tile_epilogue).
    epilogue.row_zero_step = 0
    for j in range(m):
        if row_zero[j] != row_zero[0]:
            epilogue.row_zero_step = 1
            break
    epilogue.k = k
    epilogue.multiplier = &multiplier[0, 0]
    epilogue.multiplier_step = multiplier.shape[1] if multiplier.shape[0] > 1 else 0
    epilogue.out_zero = &out_zero[0, 0]
    epilogue.out_zero_step = out_zero.shape[1] if out_zero.shape[0] > 1 else 0
    epilogue.low = low
    epilogue.high = high
    epilogue.per_row = per_row
    epilogue.sums_fit_int32 = fits_int32(k, largest_bias)
    epilogue.raw = raw
    if raw and not epilogue.sums_fit_int32:
        raise ValueError("matmul: raw products need K that keeps every value inside int32")
    return source_array, sums, terms, sums_in_run


cdef void run_matmul(Gemm* gemm, Epilogue* epilogue, Py_ssize_t a_batches,
                     int n_threads) noexcept nogil:
    """Every product of the batch as one job of units (which sum the rows of
    A as they need them, when a column zero point asks for them)."""
    if gemm.a_ready != NULL:
        memset(gemm.a_ready, 0, a_batches * gemm.a_row_states * sizeof(int32_t))
    run_gemm(gemm, epilogue, n_threads)
