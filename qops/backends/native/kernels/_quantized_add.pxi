# ELEMENT_WISE_QUANTIZED_LINEAR_ADD: both operands dequantized, added and
# requantized by QuantizeLinear's rule, over runs of broadcast rows.
# Needs the conversions.

#
# The output as rows of `inner` elements (the last row may be shorter); row r
# reads A from a + a_offset[r] and B from b + b_offset[r], each either
# element by element (step 1) or one value for the whole row (step 0: an
# operand broadcast along the row).  Bytes are read as offset binary (xor
# flip turns int8 into v + 128), whose zero point the glue shifted to match.

cdef struct AddJob:
    const uint8_t* a
    const uint8_t* b
    const Py_ssize_t* a_offset
    const Py_ssize_t* b_offset
    Py_ssize_t inner
    Py_ssize_t total
    bint a_step
    bint b_step
    uint8_t a_flip
    uint8_t b_flip
    int32_t a_zero
    int32_t b_zero
    float a_multiplier
    float b_multiplier
    int32_t zero             # the output's zero point and range
    int32_t low
    int32_t high
    uint8_t* out


cdef extern from "qops_quantized_add.h":
    Py_ssize_t add_vectors "qops_add_vectors"(
        const uint8_t* a, int a_step, uint8_t a_flip, int32_t a_zero, float a_multiplier,
        const uint8_t* b, int b_step, uint8_t b_flip, int32_t b_zero, float b_multiplier,
        Py_ssize_t count, int32_t zero, int32_t low, int32_t high, uint8_t* out) noexcept nogil


cdef inline void add_run(const uint8_t* a, Py_ssize_t a_step, const uint8_t* b,
                         Py_ssize_t b_step, Py_ssize_t count, const AddJob* job,
                         uint8_t* out) noexcept nogil:
    """out[i] <- the output byte of A[i * a_step] + B[i * b_step], i < count:
    float32(x - zp) * multiplier for each, their float32 sum, then
    QuantizeLinear's last step (to_integer; steps are constants where this is
    inlined, so the loop vectorizes).  The glue's multipliers keep every
    product finite, so the sum is never NaN: to_integer_of_number."""
    # The job's fields in locals: the output is bytes, which may alias
    # anything, so fields read through the pointer would be reloaded after
    # every store and the loop would not vectorize.
    cdef uint8_t a_flip = job.a_flip, b_flip = job.b_flip
    cdef int32_t a_zero = job.a_zero, b_zero = job.b_zero
    cdef float a_multiplier = job.a_multiplier, b_multiplier = job.b_multiplier
    cdef float zero = job.zero, low = job.low, high = job.high
    cdef Py_ssize_t i = 0
    if count >= 64:
        i = add_vectors(a, a_step, a_flip, a_zero, a_multiplier, b, b_step, b_flip, b_zero,
                        b_multiplier, count, job.zero, job.low, job.high, out)
    for i in range(i, count):
        out[i] = <uint8_t><int32_t>to_integer_of_number(
            (<float>(<int32_t>(a[i * a_step] ^ a_flip) - a_zero)) * a_multiplier
            + (<float>(<int32_t>(b[i * b_step] ^ b_flip) - b_zero)) * b_multiplier,
            zero, low, high)


cdef void add_rows(void* context, Py_ssize_t start, Py_ssize_t stop, int slot) noexcept nogil:
    cdef const AddJob* job = <const AddJob*>context
    cdef Py_ssize_t r, first, count
    cdef const uint8_t* a
    cdef const uint8_t* b
    for r in range(start, stop):
        first = r * job.inner
        count = min(job.inner, job.total - first)
        a = job.a + job.a_offset[r]
        b = job.b + job.b_offset[r]
        if job.a_step and job.b_step:
            add_run(a, 1, b, 1, count, job, job.out + first)
        elif job.b_step:
            add_run(a, 0, b, 1, count, job, job.out + first)
        elif job.a_step:
            add_run(a, 1, b, 0, count, job, job.out + first)
        else:
            add_run(a, 0, b, 0, count, job, job.out + first)


def quantized_add(const uint8_t[::1] a, const Py_ssize_t[::1] a_offset, bint a_step,
                  uint8_t a_flip, int32_t a_zero, float a_multiplier,
                  const uint8_t[::1] b, const Py_ssize_t[::1] b_offset, bint b_step,
                  uint8_t b_flip, int32_t b_zero, float b_multiplier,
                  Py_ssize_t inner, int32_t zero_point, int32_t low, int32_t high,
                  uint8_t[::1] out, int n_threads):
    """ELEMENT_WISE_QUANTIZED_LINEAR_ADD into ``out`` (rows as above; the
    offsets hold one entry per row, and the glue has checked every read)."""
    cdef AddJob job
    cdef Py_ssize_t total = out.shape[0]
    if total == 0:
        return
    job.a = &a[0]
    job.b = &b[0]
    job.a_offset = &a_offset[0]
    job.b_offset = &b_offset[0]
    job.inner = inner
    job.total = total
    job.a_step = a_step
    job.b_step = b_step
    job.a_flip = a_flip
    job.b_flip = b_flip
    job.a_zero = a_zero
    job.b_zero = b_zero
    job.a_multiplier = a_multiplier
    job.b_multiplier = b_multiplier
    job.zero = zero_point
    job.low = low
    job.high = high
    job.out = &out[0]
    with nogil:
        run_range(add_rows, &job, a_offset.shape[0], 1,
                  1 if total < PARALLEL_MIN else n_threads)


cdef void add_tensor_rows(void* context, Py_ssize_t start, Py_ssize_t stop,
                          int slot) noexcept nogil:
    """Rows [start, stop) of ROW elements of an add of two whole operands."""
    cdef const AddJob* job = <const AddJob*>context
    cdef Py_ssize_t r, first
    for r in range(start, stop):
        first = r * ROW
        add_run(job.a + first, 1, job.b + first, 1, min(<Py_ssize_t>ROW, job.total - first), job,
                job.out + first)


cdef void quantized_add_tensor(const uint8_t* a, uint8_t a_flip, int32_t a_zero,
                               float a_multiplier, const uint8_t* b, uint8_t b_flip,
                               int32_t b_zero, float b_multiplier, Py_ssize_t count,
                               int32_t zero_point, int32_t low, int32_t high, uint8_t* out,
                               int n_threads) noexcept nogil:
    """quantized_add of two operands of one shape (count bytes each, rows
    of ROW as the glue makes them), for the lean path; count > 0."""
    cdef AddJob job
    job.a = a
    job.b = b
    job.a_offset = NULL
    job.b_offset = NULL
    job.inner = ROW
    job.total = count
    job.a_step = True
    job.b_step = True
    job.a_flip = a_flip
    job.b_flip = b_flip
    job.a_zero = a_zero
    job.b_zero = b_zero
    job.a_multiplier = a_multiplier
    job.b_multiplier = b_multiplier
    job.zero = zero_point
    job.low = low
    job.high = high
    job.out = out
    run_range(add_tensor_rows, &job, (count + ROW - 1) // ROW, 1,
              1 if count < PARALLEL_MIN else n_threads)


def lean_add_entry():
    """A capsule holding :func:`quantized_add_tensor` (``LEAN_ADD_ENTRY``)."""
    return PyCapsule_New(<void*>quantized_add_tensor, LEAN_ADD_ENTRY, NULL)
