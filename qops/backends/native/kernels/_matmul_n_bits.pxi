# MatMulNBits: float32 rows of A (or, at accuracy level 4, their int8 codes
# per block) times 2-, 4- or 8-bit weights in blocks along K, a panel of 16
# columns at a time (the C and its rules: include/qops_matmul_n_bits.h).  Tasks are (panel, group of rows) pairs:
# each writes its own outputs, and every output's sum runs in one task in
# the rule's order, so the thread count never changes a result.

cdef extern from "qops_matmul_n_bits.h":
    enum:
        NBITS_COLUMNS "QOPS_NBITS_COLUMNS"
        NBITS_ROWS "QOPS_NBITS_ROWS"
        NBITS_ROW_GROUP "QOPS_NBITS_ROW_GROUP"
        NBITS_PREFILL_ROWS "QOPS_NBITS_PREFILL_ROWS"
        NBITS_PREFILL_PANELS "QOPS_NBITS_PREFILL_PANELS"
        NBITS_PREFILL_MIN_ROWS "QOPS_NBITS_PREFILL_MIN_ROWS"
        NBITS_INT8_GROUP "QOPS_NBITS_INT8_GROUP"
        NBITS_INT8_PREFILL "QOPS_NBITS_INT8_PREFILL"
        NBITS_INT8_PREFILL_ROWS "QOPS_NBITS_INT8_PREFILL_ROWS"
        NBITS_INT8_PREFILL_MIN_ROWS "QOPS_NBITS_INT8_PREFILL_MIN_ROWS"
        NBITS_QUADS "QOPS_NBITS_QUADS"
    void nbits_interleave "qops_nbits_interleave"(
        const uint8_t* b, Py_ssize_t n, Py_ssize_t k_blocks, Py_ssize_t blob,
        Py_ssize_t row_stride, Py_ssize_t first_panel, Py_ssize_t count,
        uint8_t* panels) noexcept nogil
    void nbits_quads_layout "qops_nbits_quads_layout"(
        const uint8_t* lines, Py_ssize_t bytes, uint8_t* target) noexcept nogil
    void nbits_panel "qops_nbits_panel"(
        const float* a, Py_ssize_t a_stride, Py_ssize_t rows, const uint8_t* panel,
        Py_ssize_t k, int bits, Py_ssize_t block_size, Py_ssize_t blob, const float* zeros,
        const float* scales, const float* bias, Py_ssize_t columns, float* out,
        Py_ssize_t out_stride) noexcept nogil
    void nbits_pack_rows "qops_nbits_pack_rows"(
        const float* a, Py_ssize_t a_stride, Py_ssize_t rows, Py_ssize_t k,
        float* packed) noexcept nogil
    void nbits_rows_panels "qops_nbits_rows_panels"(
        const float* packed, Py_ssize_t rows, const uint8_t* panels, Py_ssize_t panel_bytes,
        Py_ssize_t count, Py_ssize_t k, int bits, Py_ssize_t block_size, Py_ssize_t blob,
        const float* zeros, const float* scales, Py_ssize_t parameters, const float* bias,
        Py_ssize_t columns, float* out, Py_ssize_t out_stride, void* sums) noexcept nogil

    enum: NBITS_ROW_PANELS "QOPS_NBITS_ROW_PANELS"
    void nbits_row_four_panels "qops_nbits_row_four_panels"(
        const float* row, Py_ssize_t k, const uint8_t* panel, Py_ssize_t panel_bytes,
        int bits, Py_ssize_t block_size, Py_ssize_t blob, const float* zeros,
        const float* scales, Py_ssize_t parameters, int whole_zeros, const float* bias,
        Py_ssize_t columns, float* out) noexcept nogil
    void nbits_row_two_panels "qops_nbits_row_two_panels"(
        const float* row, Py_ssize_t k, const uint8_t* panel, Py_ssize_t panel_bytes,
        int bits, Py_ssize_t block_size, Py_ssize_t blob, const float* zeros,
        const float* scales, Py_ssize_t parameters, int whole_zeros, const float* bias,
        Py_ssize_t columns, float* out) noexcept nogil
    enum: NBITS_STREAM_ROWS "QOPS_NBITS_STREAM_ROWS"
    void nbits_rows_two_panels "qops_nbits_rows_two_panels"(
        const float* a, Py_ssize_t a_stride, Py_ssize_t rows, Py_ssize_t k,
        const uint8_t* panel, Py_ssize_t panel_bytes, int bits, Py_ssize_t block_size,
        Py_ssize_t blob, const float* zeros, const float* scales, Py_ssize_t parameters,
        int whole_zeros, const float* bias, Py_ssize_t columns, float* out,
        Py_ssize_t out_stride) noexcept nogil
    int nbits_quantize_row "qops_nbits_quantize_row"(
        const float* x, Py_ssize_t k, Py_ssize_t block_size, int8_t* codes, float* scales,
        int32_t* sums) noexcept nogil
    void nbits_pack_codes "qops_nbits_pack_codes"(
        const int8_t* codes, Py_ssize_t padded_k, Py_ssize_t rows, int32_t* packed) noexcept nogil
    void nbits_rows_panel_int8_4bit "qops_nbits_rows_panel_int8_4bit"(
        const int32_t* packed, Py_ssize_t padded_k, const float* a_scales,
        const int32_t* a_sums, Py_ssize_t rows, const uint8_t* panel, Py_ssize_t k_blocks,
        Py_ssize_t block_size, Py_ssize_t blob, const uint8_t* zeros, const float* scales,
        const float* bias, Py_ssize_t columns, float* out, Py_ssize_t out_stride) noexcept nogil
    void nbits_panel_int8 "qops_nbits_panel_int8"(
        const int8_t* a_codes, Py_ssize_t padded_k, const float* a_scales,
        const int32_t* a_sums, Py_ssize_t rows, const uint8_t* panel, Py_ssize_t k_blocks,
        int bits, Py_ssize_t block_size, Py_ssize_t blob, const uint8_t* zeros,
        const float* scales, const float* bias, Py_ssize_t columns, float* out,
        Py_ssize_t out_stride) noexcept nogil

from qops.backends.native.kernels._qops_pool cimport run_range, run_tasks

#: Columns per panel of the interleaved weights.
PANEL_COLUMNS = NBITS_COLUMNS


cdef struct NBitsQuantizeRows:
    const float* rows
    Py_ssize_t k, block_size, k_blocks
    int8_t* codes
    float* scales
    int32_t* sums
    uint8_t* finite


cdef void nbits_quantize_rows(void* context, Py_ssize_t start, Py_ssize_t stop,
                              int slot) noexcept nogil:
    cdef const NBitsQuantizeRows* job = <const NBitsQuantizeRows*>context
    cdef Py_ssize_t r
    for r in range(start, stop):
        job.finite[r] = nbits_quantize_row(job.rows + r * job.k, job.k, job.block_size,
                                           job.codes + r * job.k_blocks * job.block_size,
                                           job.scales + r * job.k_blocks,
                                           job.sums + r * job.k_blocks)


def matmul_n_bits_quantize_rows(const float[:, ::1] rows, Py_ssize_t block_size, int n_threads):
    """Level 4's A: ``(codes, scales, sums)`` of each row of ``rows`` (M x K
    float32) by qops.reference.n_bits.quantize_a_blocks' rule, bit for bit,
    or None where a value is not finite (that rule then does not apply)."""
    cdef Py_ssize_t m = rows.shape[0], k = rows.shape[1]
    cdef NBitsQuantizeRows job
    if block_size < 1 or k < 1:
        raise ValueError("matmul_n_bits_quantize_rows: K and the block size must be positive")
    job.k_blocks = (k + block_size - 1) // block_size
    codes = np.empty((m, job.k_blocks * block_size), np.int8)
    scales = np.empty((m, job.k_blocks), np.float32)
    sums = np.empty((m, job.k_blocks), np.int32)
    finite = np.empty(m, np.uint8)
    if m == 0:
        return codes, scales, sums
    cdef int8_t[:, ::1] codes_view = codes
    cdef float[:, ::1] scales_view = scales
    cdef int32_t[:, ::1] sums_view = sums
    cdef uint8_t[::1] finite_view = finite
    job.rows = &rows[0, 0]
    job.k, job.block_size = k, block_size
    job.codes, job.scales, job.sums = &codes_view[0, 0], &scales_view[0, 0], &sums_view[0, 0]
    job.finite = &finite_view[0]
    cdef Py_ssize_t r
    with nogil:
        run_range(nbits_quantize_rows, &job, m, max(1, PARALLEL_MIN // k),
                  n_threads if m * k >= PARALLEL_MIN else 1)
    for r in range(m):
        if not finite_view[r]:
            return None
    return codes, scales, sums


cdef struct NBitsInterleave:
    const uint8_t* b
    Py_ssize_t n, k_blocks, blob, row_stride
    uint8_t* panels


cdef void nbits_interleave_task(void* context, Py_ssize_t index, int slot) noexcept nogil:
    cdef const NBitsInterleave* job = <const NBitsInterleave*>context
    nbits_interleave(job.b, job.n, job.k_blocks, job.blob, job.row_stride, index, 1,
                     job.panels)


def matmul_n_bits_interleave(const uint8_t[:, :, ::1] b, int n_threads):
    """B (N, k_blocks, blob) as panels of 16 columns: (panels, k_blocks * blob * 16)
    bytes, byte i of column c of a panel at i * 16 + c; columns past N zero."""
    cdef NBitsInterleave job
    cdef Py_ssize_t n = b.shape[0]
    cdef Py_ssize_t panels = (n + NBITS_COLUMNS - 1) // NBITS_COLUMNS
    cdef Py_ssize_t bytes = b.shape[1] * b.shape[2]
    result = np.empty((panels, bytes * NBITS_COLUMNS), np.uint8)
    cdef uint8_t[:, ::1] view = result
    if panels == 0 or bytes == 0:
        return result
    job.b = &b[0, 0, 0]
    job.n = n
    job.k_blocks = b.shape[1]
    job.blob = b.shape[2]
    job.row_stride = bytes
    job.panels = &view[0, 0]
    with nogil:
        run_tasks(nbits_interleave_task, &job, panels, max(1, n_threads))
    return result


#: Whether level 4's kernels read 4-bit codes in their own layout
#: (matmul_n_bits_quads), not as interleaved.
LEVEL_FOUR_QUADS = bool(NBITS_QUADS)


cdef struct NBitsQuads:
    const uint8_t* panels
    Py_ssize_t panel_bytes
    uint8_t* target


cdef void nbits_quads_task(void* context, Py_ssize_t index, int slot) noexcept nogil:
    cdef const NBitsQuads* job = <const NBitsQuads*>context
    nbits_quads_layout(job.panels + index * job.panel_bytes, job.panel_bytes,
                       job.target + index * job.panel_bytes)


def matmul_n_bits_quads(const uint8_t[:, ::1] panels, int n_threads):
    """Interleaved panels of 4-bit codes in level 4's layout (qops_nbits_quads_layout)."""
    cdef NBitsQuads job
    result = np.empty((panels.shape[0], panels.shape[1]), np.uint8)
    cdef uint8_t[:, ::1] view = result
    if panels.shape[0] == 0 or panels.shape[1] == 0:
        return result
    job.panels = &panels[0, 0]
    job.panel_bytes = panels.shape[1]
    job.target = &view[0, 0]
    with nogil:
        run_tasks(nbits_quads_task, &job, panels.shape[0], max(1, n_threads))
    return result


cdef struct NBitsProduct:
    const float* a
    Py_ssize_t rows, k, n, block_size, blob, panel_bytes, k_blocks, panels
    int bits
    # Every zero point a whole number from 0 to 15 and every scale's
    # sixteenth exact: the streaming row kernels' shorter form of the same
    # values (AVX-512).
    bint whole_zeros
    const uint8_t* weights
    const float* zeros
    const float* scales
    const float* bias
    float* out
    # The prefill path's rows packed in whole groups (qops_nbits_pack_rows),
    # QOPS_NBITS_PREFILL_ROWS rows a chunk; its tasks' panels (at most
    # QOPS_NBITS_PREFILL_PANELS) and how many tasks a chunk has; each
    # thread's room for a task's sums.
    float* packed
    Py_ssize_t task_panels, chunk_tasks, sums_bytes
    char* sums


cdef void nbits_product_task(void* context, Py_ssize_t index, int slot) noexcept nogil:
    cdef const NBitsProduct* job = <const NBitsProduct*>context
    cdef Py_ssize_t panel = index % job.panels
    cdef Py_ssize_t first_row = (index // job.panels) * NBITS_ROWS
    cdef Py_ssize_t rows = min(<Py_ssize_t>NBITS_ROWS, job.rows - first_row)
    cdef Py_ssize_t first_column = panel * NBITS_COLUMNS
    cdef Py_ssize_t parameters = job.k_blocks * NBITS_COLUMNS
    nbits_panel(job.a + first_row * job.k, job.k, rows, job.weights + panel * job.panel_bytes,
                job.k, job.bits, job.block_size, job.blob, job.zeros + panel * parameters,
                job.scales + panel * parameters,
                NULL if job.bias == NULL else job.bias + first_column,
                min(<Py_ssize_t>NBITS_COLUMNS, job.n - first_column),
                job.out + first_row * job.n + first_column, job.n)


cdef void nbits_row_tasks(void* context, Py_ssize_t start, Py_ssize_t stop,
                         int slot) noexcept nogil:
    cdef Py_ssize_t index
    for index in range(start, stop):
        nbits_row_task(context, index, slot)


cdef void nbits_row_task(void* context, Py_ssize_t index, int slot) noexcept nogil:
    """Panels NBITS_ROW_PANELS index on for one row of A, four or two
    together, or for up to NBITS_STREAM_ROWS rows, two together; the last
    one alone."""
    cdef const NBitsProduct* job = <const NBitsProduct*>context
    cdef Py_ssize_t panel = NBITS_ROW_PANELS * index
    cdef Py_ssize_t left = job.panels - panel
    cdef Py_ssize_t first_column = panel * NBITS_COLUMNS
    cdef Py_ssize_t parameters = job.k_blocks * NBITS_COLUMNS
    cdef Py_ssize_t last = min(panel + NBITS_ROW_PANELS, job.panels)
    if job.rows > 1:
        # Two panels at a time (the registers hold two panels' chains of
        # NBITS_STREAM_ROWS rows), the last one alone.
        while panel + 2 <= last:
            first_column = panel * NBITS_COLUMNS
            nbits_rows_two_panels(
                job.a, job.k, job.rows, job.k, job.weights + panel * job.panel_bytes,
                job.panel_bytes, job.bits, job.block_size, job.blob,
                job.zeros + panel * parameters, job.scales + panel * parameters, parameters,
                job.whole_zeros, NULL if job.bias == NULL else job.bias + first_column,
                min(<Py_ssize_t>NBITS_COLUMNS, job.n - first_column - NBITS_COLUMNS),
                job.out + first_column, job.n)
            panel += 2
        if panel < last:
            nbits_product_task(context, panel, slot)
        return
    if NBITS_ROW_PANELS == 4 and left >= 4:
        nbits_row_four_panels(
            job.a, job.k, job.weights + panel * job.panel_bytes, job.panel_bytes, job.bits,
            job.block_size, job.blob, job.zeros + panel * parameters,
            job.scales + panel * parameters, parameters, job.whole_zeros,
            NULL if job.bias == NULL else job.bias + first_column,
            min(<Py_ssize_t>NBITS_COLUMNS, job.n - first_column - 3 * NBITS_COLUMNS),
            job.out + first_column)
        return
    if left < 2:
        nbits_product_task(context, panel, slot)
        return
    nbits_row_two_panels(job.a, job.k, job.weights + panel * job.panel_bytes, job.panel_bytes,
                         job.bits, job.block_size, job.blob, job.zeros + panel * parameters,
                         job.scales + panel * parameters, parameters, job.whole_zeros,
                         NULL if job.bias == NULL else job.bias + first_column,
                         min(<Py_ssize_t>NBITS_COLUMNS, job.n - first_column - NBITS_COLUMNS),
                         job.out + first_column)
    if left == 3:
        nbits_product_task(context, panel + 2, slot)


cdef void nbits_pack_task(void* context, Py_ssize_t index, int slot) noexcept nogil:
    """Chunk `index` of the rows, packed for nbits_prefill_task."""
    cdef const NBitsProduct* job = <const NBitsProduct*>context
    cdef Py_ssize_t first_row = index * NBITS_PREFILL_ROWS
    nbits_pack_rows(job.a + first_row * job.k, job.k,
                    min(<Py_ssize_t>NBITS_PREFILL_ROWS, job.rows - first_row), job.k,
                    job.packed + first_row * job.k)


cdef void nbits_prefill_task(void* context, Py_ssize_t index, int slot) noexcept nogil:
    """A few panels for one chunk of packed rows; the tasks of a chunk come
    together, so that the threads share its rows in cache."""
    cdef const NBitsProduct* job = <const NBitsProduct*>context
    cdef Py_ssize_t panel = (index % job.chunk_tasks) * job.task_panels
    cdef Py_ssize_t first_row = (index // job.chunk_tasks) * NBITS_PREFILL_ROWS
    cdef Py_ssize_t first_column = panel * NBITS_COLUMNS
    cdef Py_ssize_t parameters = job.k_blocks * NBITS_COLUMNS
    nbits_rows_panels(job.packed + first_row * job.k,
                      min(<Py_ssize_t>NBITS_PREFILL_ROWS, job.rows - first_row),
                      job.weights + panel * job.panel_bytes, job.panel_bytes,
                      min(job.task_panels, job.panels - panel), job.k, job.bits,
                      job.block_size, job.blob, job.zeros + panel * parameters,
                      job.scales + panel * parameters, parameters,
                      NULL if job.bias == NULL else job.bias + first_column,
                      job.n - first_column, job.out + first_row * job.n + first_column, job.n,
                      <void*>(job.sums + slot * job.sums_bytes))


def matmul_n_bits(const float[:, ::1] a, const uint8_t[:, ::1] panels,
                  const float[:, ::1] zeros, const float[:, ::1] scales, bias,
                  Py_ssize_t n, int bits, Py_ssize_t block_size, float[:, ::1] out,
                  int n_threads, bint whole_zeros=False):
    """out (M x N) <- a (M x K) times the interleaved weights by the rule of
    include/qops_matmul_n_bits.h.  zeros and scales: (panels, k_blocks * 16)
    float32, each panel's 16 columns per block; bias: N float32 or None.
    whole_zeros: the caller's word that every zero point is a whole number
    from 0 to 15 and every scale's sixteenth exact (whole_zeros_hold), for
    the streaming row kernels' shorter form; the values are the same."""
    cdef NBitsProduct job
    cdef const float[::1] bias_view
    cdef Py_ssize_t groups = (a.shape[0] + NBITS_ROWS - 1) // NBITS_ROWS
    job.rows = a.shape[0]
    job.k = a.shape[1]
    job.n = n
    job.bits = bits
    job.whole_zeros = whole_zeros
    job.block_size = block_size
    job.blob = block_size * bits // 8
    job.panels = panels.shape[0]
    job.panel_bytes = panels.shape[1]
    job.k_blocks = (job.k + block_size - 1) // block_size
    if job.rows == 0 or n == 0 or job.k == 0:
        return
    job.a = &a[0, 0]
    job.weights = &panels[0, 0]
    job.zeros = &zeros[0, 0]
    job.scales = &scales[0, 0]
    job.bias = NULL
    if bias is not None:
        bias_view = bias
        job.bias = &bias_view[0]
    job.out = &out[0, 0]
    cdef float[::1] packed
    cdef uint8_t[::1] sums
    cdef int threads = max(1, n_threads)
    cdef Py_ssize_t chunks = (job.rows + NBITS_PREFILL_ROWS - 1) // NBITS_PREFILL_ROWS
    job.packed = NULL
    if job.rows >= NBITS_PREFILL_MIN_ROWS:
        # Whole groups past the last row, zero: room for the last chunk's.
        packed = np.empty(((job.rows + NBITS_ROW_GROUP - 1) // NBITS_ROW_GROUP)
                          * NBITS_ROW_GROUP * job.k, np.float32)
        job.packed = &packed[0]
        # Panels a task: as many as keep every thread two tasks of a chunk
        # (the results are the same whatever the count: each sum is one
        # task's chain).
        job.task_panels = max(1, min(<Py_ssize_t>NBITS_PREFILL_PANELS,
                                     job.panels // (2 * threads)))
        job.chunk_tasks = (job.panels + job.task_panels - 1) // job.task_panels
        # A vector of sums is 64 bytes at every width; 64 more to align.
        job.sums_bytes = NBITS_PREFILL_ROWS * job.task_panels * 64 + 64
        sums = np.empty(threads * job.sums_bytes + 64, np.uint8)
        # Vectors' alignment: the kernel stores whole registers there.
        job.sums = <char*>&sums[0] + (64 - (<Py_ssize_t>&sums[0]) % 64) % 64
    with nogil:
        if job.rows == 1 or (job.rows <= NBITS_STREAM_ROWS and job.bits == 4):
            run_range(nbits_row_tasks, &job,
                      (job.panels + NBITS_ROW_PANELS - 1) // NBITS_ROW_PANELS, 1, threads)
        elif job.rows < NBITS_PREFILL_MIN_ROWS:
            run_tasks(nbits_product_task, &job, job.panels * groups, threads)
        else:
            run_tasks(nbits_pack_task, &job, chunks, threads)
            run_tasks(nbits_prefill_task, &job, job.chunk_tasks * chunks, threads)


cdef struct NBitsInt8Product:
    const int8_t* codes
    const float* a_scales
    const int32_t* a_sums
    Py_ssize_t rows, padded_k, n, block_size, blob, panel_bytes, k_blocks, panels
    int bits
    const uint8_t* weights
    const uint8_t* zeros
    const float* scales
    const float* bias
    float* out
    # The prefill path's codes in groups of four rows (qops_nbits_pack_codes).
    int32_t* packed


cdef void nbits_int8_tasks(void* context, Py_ssize_t start, Py_ssize_t stop,
                          int slot) noexcept nogil:
    cdef Py_ssize_t index
    for index in range(start, stop):
        nbits_int8_task(context, index, slot)


cdef void nbits_int8_task(void* context, Py_ssize_t index, int slot) noexcept nogil:
    cdef const NBitsInt8Product* job = <const NBitsInt8Product*>context
    cdef Py_ssize_t panel = index % job.panels
    cdef Py_ssize_t first_row = (index // job.panels) * NBITS_ROWS
    cdef Py_ssize_t rows = min(<Py_ssize_t>NBITS_ROWS, job.rows - first_row)
    cdef Py_ssize_t first_column = panel * NBITS_COLUMNS
    cdef Py_ssize_t parameters = job.k_blocks * NBITS_COLUMNS
    nbits_panel_int8(job.codes + first_row * job.padded_k, job.padded_k,
                     job.a_scales + first_row * job.k_blocks,
                     job.a_sums + first_row * job.k_blocks, rows,
                     job.weights + panel * job.panel_bytes, job.k_blocks, job.bits,
                     job.block_size, job.blob, job.zeros + panel * parameters,
                     job.scales + panel * parameters,
                     NULL if job.bias == NULL else job.bias + first_column,
                     min(<Py_ssize_t>NBITS_COLUMNS, job.n - first_column),
                     job.out + first_row * job.n + first_column, job.n)


cdef void nbits_pack_codes_task(void* context, Py_ssize_t index, int slot) noexcept nogil:
    """Chunk `index` of the rows' codes, packed for nbits_int8_prefill_task."""
    cdef const NBitsInt8Product* job = <const NBitsInt8Product*>context
    cdef Py_ssize_t first_row = index * NBITS_INT8_PREFILL_ROWS
    nbits_pack_codes(job.codes + first_row * job.padded_k, job.padded_k,
                     min(<Py_ssize_t>NBITS_INT8_PREFILL_ROWS, job.rows - first_row),
                     job.packed + first_row * (job.padded_k // 4))


cdef void nbits_int8_prefill_task(void* context, Py_ssize_t index, int slot) noexcept nogil:
    """One panel for one chunk of packed rows, the chunk's tasks together."""
    cdef const NBitsInt8Product* job = <const NBitsInt8Product*>context
    cdef Py_ssize_t panel = index % job.panels
    cdef Py_ssize_t first_row = (index // job.panels) * NBITS_INT8_PREFILL_ROWS
    cdef Py_ssize_t first_column = panel * NBITS_COLUMNS
    cdef Py_ssize_t parameters = job.k_blocks * NBITS_COLUMNS
    nbits_rows_panel_int8_4bit(job.packed + first_row * (job.padded_k // 4), job.padded_k,
                               job.a_scales + first_row * job.k_blocks,
                               job.a_sums + first_row * job.k_blocks,
                               min(<Py_ssize_t>NBITS_INT8_PREFILL_ROWS, job.rows - first_row),
                               job.weights + panel * job.panel_bytes, job.k_blocks,
                               job.block_size, job.blob, job.zeros + panel * parameters,
                               job.scales + panel * parameters,
                               NULL if job.bias == NULL else job.bias + first_column,
                               min(<Py_ssize_t>NBITS_COLUMNS, job.n - first_column),
                               job.out + first_row * job.n + first_column, job.n)


def matmul_n_bits_int8(const int8_t[:, ::1] codes, const float[:, ::1] a_scales,
                       const int32_t[:, ::1] a_sums, const uint8_t[:, ::1] panels,
                       const uint8_t[:, ::1] zeros, const float[:, ::1] scales, bias,
                       Py_ssize_t n, int bits, Py_ssize_t block_size, float[:, ::1] out,
                       int n_threads):
    """out (M x N) by the level-4 rule (include/qops_matmul_n_bits.h): A as
    int8 codes per block (M x k_blocks * block_size) with each block's scale
    and sum of codes; zeros: integer zero points as bytes, (panels,
    k_blocks * 16).  4-bit panels must be in level 4's layout
    (matmul_n_bits_quads) where LEVEL_FOUR_QUADS is true, interleaved
    elsewhere."""
    cdef NBitsInt8Product job
    cdef const float[::1] bias_view
    cdef Py_ssize_t groups = (codes.shape[0] + NBITS_ROWS - 1) // NBITS_ROWS
    job.rows = codes.shape[0]
    job.padded_k = codes.shape[1]
    job.n = n
    job.bits = bits
    job.block_size = block_size
    job.blob = block_size * bits // 8
    job.panels = panels.shape[0]
    job.panel_bytes = panels.shape[1]
    job.k_blocks = a_scales.shape[1]
    if job.rows == 0 or n == 0 or job.padded_k == 0:
        return
    job.codes = &codes[0, 0]
    job.a_scales = &a_scales[0, 0]
    job.a_sums = &a_sums[0, 0]
    job.weights = &panels[0, 0]
    job.zeros = &zeros[0, 0]
    job.scales = &scales[0, 0]
    job.bias = NULL
    if bias is not None:
        bias_view = bias
        job.bias = &bias_view[0]
    job.out = &out[0, 0]
    cdef int32_t[::1] packed
    cdef int threads = max(1, n_threads)
    cdef Py_ssize_t chunks = (job.rows + NBITS_INT8_PREFILL_ROWS - 1) // NBITS_INT8_PREFILL_ROWS
    cdef bint prefill = (NBITS_INT8_PREFILL and bits == 4
                         and job.rows >= NBITS_INT8_PREFILL_MIN_ROWS)
    job.packed = NULL
    if prefill:
        # Whole groups past the last row, zero.
        packed = np.empty(((job.rows + NBITS_INT8_GROUP - 1) // NBITS_INT8_GROUP)
                          * NBITS_INT8_GROUP * (job.padded_k // 4), np.int32)
        job.packed = &packed[0]
    with nogil:
        if prefill:
            run_tasks(nbits_pack_codes_task, &job, chunks, threads)
            run_tasks(nbits_int8_prefill_task, &job, job.panels * chunks, threads)
        else:
            run_range(nbits_int8_tasks, &job, job.panels * groups, 1, threads)
