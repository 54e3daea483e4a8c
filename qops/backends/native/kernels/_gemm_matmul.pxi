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
           bint b_source_flip=False, bint to_float=False, float_bias=None):
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

    per_row: the requantization belongs to the rows (a pointwise convolution
    as filter x image, whose rows are output channels): multiplier and
    out_zero are M x 1, bias (int64, M, or None) is added to each row, and
    col_zero holds one zero point for every column.  a_row_sums (int64,
    a_batches x M) are the sums of A' per row when the caller keeps them (a
    constant A); else they are computed when a column zero point needs them.
    """
    cdef Gemm gemm
    cdef Epilogue epilogue
    cdef Py_ssize_t step_offset[1]
    cdef const uint8_t[:, :, ::1] source
    cdef Py_ssize_t k = a.shape[2], b_batches, b_stride, colsum_stride
    cdef const int8_t* b_start
    cdef const int64_t* colsum_start
    cdef int32_t* ready = NULL
    if out.shape[0] == 0 or a.shape[1] == 0 or n == 0:
        return
    n_threads = max(n_threads, 1)
    keep = []
    during = b_source is not None
    if during:
        source = b_source
        if source.shape[1] != k or source.shape[2] != n:
            raise ValueError("matmul: b_source is not K x N")
        if k == 0:
            b_packed, b_colsum = pack_b_batches(source, b_source_flip, 1)  # zeros
            during = False
    if during:
        # Packed during the run, into this thread's workspace.
        b_batches = source.shape[0]
        b_stride = packed_b_bytes(k, n)
        colsum_stride = ceil_div(n, NR) * NR
        b_start = <int8_t*>workspace_bytes("packed b", b_batches * b_stride, keep)
        colsum_start = <int64_t*>workspace_bytes(
            "column sums", b_batches * colsum_stride * sizeof(int64_t), keep)
        ready = <int32_t*>workspace_bytes(
            "b column tiles", b_batches * ceil_div(n, TILE_COLUMNS) * sizeof(int32_t), keep)
    else:
        if (b_packed is None or b_colsum is None or b_colsum.shape[0] != b_packed.shape[0]
                or b_packed.shape[1] < packed_b_bytes(k, n) or b_colsum.shape[1] < n):
            raise ValueError("matmul: arguments do not cover the output")
        b_batches = b_packed.shape[0]
        b_stride = b_packed.shape[1]
        colsum_stride = b_colsum.shape[1]
        b_start = &b_packed[0, 0]
        colsum_start = &b_colsum[0, 0]
    check_matmul(a, a_index, b_batches, b_index, n, row_zero, col_zero, multiplier, out_zero,
                 out, raw, per_row, bias, a_row_sums, to_float, float_bias)
    cdef const float[::1] float_bias_view
    epilogue.to_float = to_float
    epilogue.float_bias = NULL
    if float_bias is not None:
        float_bias_view = float_bias
        epilogue.float_bias = &float_bias_view[0]
    buffers = setup_matmul(&gemm, &epilogue, step_offset, a, a_flip, a_index, b_start, b_stride,
                           colsum_start, colsum_stride, b_index, n, row_zero, col_zero,
                           multiplier, out_zero, out, low, high, raw, n_threads, per_row, bias,
                           a_row_sums, keep)
    gemm.b_ready = NULL
    if during:
        memset(ready, 0, b_batches * ceil_div(n, TILE_COLUMNS) * sizeof(int32_t))
        # The run's own workspace, written by ensure_packed.
        gemm.b_source = &source[0, 0, 0]
        gemm.b_source_flip = 0x80 if b_source_flip else 0
        gemm.b_panels = <int8_t*>b_start
        gemm.b_sums = <int64_t*>colsum_start
        gemm.b_sums_stride = colsum_stride
        gemm.b_ready = ready
        gemm.b_column_tiles = ceil_div(n, TILE_COLUMNS)
    with nogil:
        run_matmul(&gemm, &epilogue, a.shape[0], n_threads)
    del buffers, keep  # what the run read through gemm and e


cdef int check_matmul(const uint8_t[:, :, ::1] a, const int64_t[::1] a_index,
                      Py_ssize_t b_batches, const int64_t[::1] b_index, Py_ssize_t n,
                      const int32_t[::1] row_zero, const int32_t[::1] col_zero,
                      const float[:, ::1] multiplier, const int32_t[:, ::1] out_zero,
                      uint8_t[:, :, ::1] out, bint raw, bint per_row, bias,
                      a_row_sums, bint to_float, float_bias) except -1:
    """The glue's contract, checked once: indices and vectors cover the
    output (ValueError otherwise: the run trusts it for every access)."""
    cdef Py_ssize_t a_batches = a.shape[0], m = a.shape[1], k = a.shape[2]
    cdef Py_ssize_t batches = out.shape[0], index
    cdef Py_ssize_t columns = 1 if per_row else n
    if (a_index.shape[0] != batches or b_index.shape[0] != batches
            or out.shape[1] != m or out.shape[2] != n * (4 if raw else 1)
            or row_zero.shape[0] < m or col_zero.shape[0] < columns
            or not (multiplier.shape[0] == m or (multiplier.shape[0] == 1 and not per_row))
            or multiplier.shape[1] < columns
            or not (out_zero.shape[0] == m or (out_zero.shape[0] == 1 and not per_row))
            or out_zero.shape[1] < columns
            or (bias is not None and (not per_row or np.shape(bias) != (m,)))
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


cdef object setup_matmul(Gemm* gemm, Epilogue* epilogue, Py_ssize_t* step_offset,
                         const uint8_t[:, :, ::1] a, bint a_flip, const int64_t[::1] a_index,
                         const int8_t* b_start, Py_ssize_t b_stride,
                         const int64_t* colsum_start, Py_ssize_t colsum_stride,
                         const int64_t[::1] b_index, Py_ssize_t n,
                         const int32_t[::1] row_zero, const int32_t[::1] col_zero,
                         const float[:, ::1] multiplier, const int32_t[:, ::1] out_zero,
                         uint8_t[:, :, ::1] out, int32_t low, int32_t high, bint raw,
                         int n_threads, bint per_row, bias, a_row_sums, list keep):
    """The row-sum buffer, the scratch and the GEMM and epilogue
    descriptions of a checked product; returns the arrays they point into
    (the caller keeps them, and `keep`, until the run ends)."""
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
    if needs_row_sums and k and not given:
        # Each band of rows summed by the first unit that needs it
        # (ensure_row_sums), its state zeroed by run_matmul.
        gemm.a_sums = <int64_t*>workspace_bytes("row sums", a_batches * m * sizeof(int64_t), keep)
        gemm.a_sums_stride = m
        gemm.a_row_bands = row_bands(m)
        gemm.a_ready = <int32_t*>workspace_bytes(
            "row bands", a_batches * gemm.a_row_bands * sizeof(int32_t), keep)
        epilogue.row_sum = gemm.a_sums
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
    gemm.out = &out[0, 0, 0]
    gemm.out_row_stride = n
    gemm.out_col_stride = 1
    gemm.batch = out.shape[0]
    gemm.a_index = &a_index[0]
    gemm.b_index = &b_index[0]
    gemm.a_batch_stride = m * k
    gemm.b_batch_stride = b_stride
    gemm.out_batch_stride = m * n
    gemm.scratch = workspace_bytes("scratch", scratch_bytes(n_threads), keep)
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
    return source_array, sums, terms


cdef void run_matmul(Gemm* gemm, Epilogue* epilogue, Py_ssize_t a_batches,
                     int n_threads) noexcept nogil:
    """Every product of the batch as one job of units (which sum the rows of
    A as they need them, when a column zero point asks for them)."""
    if gemm.a_ready != NULL:
        memset(gemm.a_ready, 0, a_batches * gemm.a_row_bands * sizeof(int32_t))
    run_gemm(gemm, epilogue, n_threads)
