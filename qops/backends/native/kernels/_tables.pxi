# onnxruntime's QOperator nodes that qops.onnx._qoperator states as tables
# (each table made there, by the node's rule, in NumPy):
# - lookup_bytes: every output byte looked up by one input byte (a 256-entry
#   table: QLinearSigmoid, QLinearLeakyRelu, QLinearMul by one value) or by
#   a pair of bytes (QLinearMul's 65536-entry table of every product);
# - mul_bytes: QLinearMul of two tensors of one shape, by its rule;
# - softmax_rows: QLinearSoftmax along rows, from its table of exponentials.
# Rows never share an output byte, and each row's float32 sum runs in
# element order, so results do not depend on the thread count.

from libc.math cimport INFINITY


cdef extern from "qops_lookup.h":
    void lookup_bytes256 "qops_lookup_bytes256"(
        const uint8_t* x, Py_ssize_t count, const uint8_t* table, uint8_t* out) noexcept nogil
    int lookup_allow_vbmi "qops_lookup_allow_vbmi"(int allowed) noexcept nogil


def lookup_takes_vbmi(bint allowed=True):
    """Lets this module's 256-entry lookups take AVX-512 VBMI where the CPU
    has it (``allowed``), or keeps them on the sixteen rows; returns whether
    they take it now (the tests run both ways; the default is to take it)."""
    return bool(lookup_allow_vbmi(allowed))


cdef struct Lookup:
    const uint8_t* first
    const uint8_t* second   # NULL: the table is indexed by first alone
    const uint8_t* table
    uint8_t* out
    Py_ssize_t count


cdef void lookup_range(void* context, Py_ssize_t start, Py_ssize_t stop,
                       int slot) noexcept nogil:
    """Elements [start * ROW, stop * ROW) of the job (the last ROW short)."""
    cdef const Lookup* job = <const Lookup*>context
    cdef Py_ssize_t i, last = min(stop * ROW, job.count)
    cdef const uint8_t* table = job.table
    cdef const uint8_t* first = job.first
    cdef const uint8_t* second = job.second
    cdef uint8_t* out = job.out
    if second == NULL:
        lookup_bytes256(first + start * ROW, last - start * ROW, table, out + start * ROW)
    else:
        for i in range(start * ROW, last):
            out[i] = table[(<Py_ssize_t>first[i] << 8) | second[i]]


def lookup_bytes(const uint8_t[::1] first, second, const uint8_t[::1] table,
                 uint8_t[::1] out, int n_threads):
    """out[i] <- table[first[i]] (a table of 256 bytes), or with ``second``
    (bytes, as many as first) table[first[i] * 256 + second[i]] (65536).
    The sizes are checked (ValueError): every index then lies in the table."""
    cdef const uint8_t[::1] second_view
    cdef Lookup job
    cdef Py_ssize_t count = first.shape[0]
    if out.shape[0] != count or table.shape[0] != (256 if second is None else 65536):
        raise ValueError("lookup_bytes: the arrays do not cover the output")
    job.second = NULL
    if second is not None:
        second_view = second
        if second_view.shape[0] != count:
            raise ValueError("lookup_bytes: the arrays do not cover the output")
        if count:
            job.second = &second_view[0]
    if count == 0:
        return
    job.first = &first[0]
    job.table = &table[0]
    job.out = &out[0]
    job.count = count
    with nogil:
        run_range(lookup_range, &job, (count + ROW - 1) // ROW, 1,
                  n_threads if count >= PARALLEL_MIN else 1)


cdef extern from "qops_quantized_mul.h":
    void mul_bytes_c "qops_mul_bytes"(
        const uint8_t* a, const uint8_t* b, Py_ssize_t count, int is_signed, int32_t a_zero,
        int32_t b_zero, float multiplier, float y_zero, uint8_t* out) noexcept nogil


cdef struct MulBytes:
    const uint8_t* a
    const uint8_t* b
    uint8_t* out
    Py_ssize_t count
    int is_signed
    int32_t a_zero, b_zero
    float multiplier, y_zero


cdef void mul_range(void* context, Py_ssize_t start, Py_ssize_t stop, int slot) noexcept nogil:
    """Elements [start * ROW, stop * ROW) of the job (the last ROW short)."""
    cdef const MulBytes* job = <const MulBytes*>context
    cdef Py_ssize_t first = start * ROW, last = min(stop * ROW, job.count)
    mul_bytes_c(job.a + first, job.b + first, last - first, job.is_signed, job.a_zero,
                job.b_zero, job.multiplier, job.y_zero, job.out + first)


def mul_bytes(const uint8_t[::1] a, const uint8_t[::1] b, bint is_signed, int32_t a_zero,
              int32_t b_zero, float multiplier, float y_zero, uint8_t[::1] out, int n_threads):
    """QLinearMul of two tensors of one shape by its rule (qops_quantized_mul.h):
    a, b and out as bytes (int8 where is_signed), a finite multiplier.  The
    sizes and the multiplier are checked (ValueError)."""
    cdef MulBytes job
    cdef Py_ssize_t count = a.shape[0]
    if not (multiplier == multiplier and abs(multiplier) < INFINITY):
        raise ValueError("mul_bytes: the multiplier is not finite")
    if b.shape[0] != count or out.shape[0] != count:
        raise ValueError("mul_bytes: the arrays do not cover the output")
    if count == 0:
        return
    job.a = &a[0]
    job.b = &b[0]
    job.out = &out[0]
    job.count = count
    job.is_signed = is_signed
    job.a_zero = a_zero
    job.b_zero = b_zero
    job.multiplier = multiplier
    job.y_zero = y_zero
    with nogil:
        run_range(mul_range, &job, (count + ROW - 1) // ROW, 1,
                  n_threads if count >= PARALLEL_MIN else 1)


cdef struct SoftmaxRows:
    const uint8_t* x        # rows of `length` bytes, read as x ^ flip
    uint8_t flip            # 0x80 for int8 (order kept: v -> v + 128)
    const float* table      # table[255 + d], d = x - max(x) of the row
    double multiplier       # floor(float32(1 / y_scale)), finite
    double zero_point       # y's, of its own type
    double low
    double high
    uint8_t* out
    Py_ssize_t length


cdef void softmax_range(void* context, Py_ssize_t start, Py_ssize_t stop,
                        int slot) noexcept nogil:
    """Rows [start, stop): e = table[255 + x - max(x)], the float32 sum of
    the row's e in element order, then for each element
    rint(float64(e) * multiplier / float64(sum)) + zero_point, clamped (an e
    of 0 gives 0 before the zero point)."""
    cdef const SoftmaxRows* job = <const SoftmaxRows*>context
    cdef Py_ssize_t row, j, first, count, length = job.length
    cdef const uint8_t* x
    cdef uint8_t* out
    cdef uint8_t top, flip = job.flip
    cdef float total
    cdef float exps[PIECE]
    cdef double divisor, quotient
    # rint(q) + zero_point clamped to [low, high] is rint of q clamped to
    # [low, high] less the zero point (integers, and rint keeps order), plus
    # the zero point: the clamped value is small enough for the float64 form
    # of round_half_even's sum (|q| < 2**51).
    cdef double floor = job.low - job.zero_point, ceiling = job.high - job.zero_point
    for row in range(start, stop):
        x = job.x + row * length
        out = job.out + row * length
        top = 0
        for j in range(length):
            top = max(top, <uint8_t>(x[j] ^ flip))
        total = 0.0
        for j in range(length):
            total = total + job.table[255 + <Py_ssize_t>(x[j] ^ flip) - top]
        divisor = <double>total
        first = 0
        while first < length:
            count = min(<Py_ssize_t>PIECE, length - first)
            for j in range(count):
                exps[j] = job.table[255 + <Py_ssize_t>(x[first + j] ^ flip) - top]
            # Plain selects and float64 arithmetic: the loop vectorizes.
            for j in range(count):
                quotient = <double>exps[j] * job.multiplier / divisor if exps[j] != 0.0 else 0.0
                quotient = min(max(quotient, floor), ceiling)
                quotient = (quotient + DOUBLE_ROUNDING_MAGIC) - DOUBLE_ROUNDING_MAGIC
                out[first + j] = <uint8_t>(<int32_t>(quotient + job.zero_point))
            first += count


def softmax_rows(const uint8_t[:, ::1] x, bint signed, const float[::1] table,
                 double multiplier, int32_t zero_point, uint8_t[:, ::1] out, int n_threads):
    """QLinearSoftmax along each row of x (uint8, or int8 bytes when signed)
    into out (bytes of x's type), by softmax_range's rule; multiplier must be
    finite.  The shapes are checked (ValueError)."""
    cdef SoftmaxRows job
    cdef Py_ssize_t rows = x.shape[0], length = x.shape[1]
    if (out.shape[0] != rows or out.shape[1] != length or table.shape[0] != 256
            or not (multiplier == multiplier and abs(multiplier) < INFINITY)):
        raise ValueError("softmax_rows: the arrays do not cover the output")
    if rows == 0 or length == 0:
        return
    job.x = &x[0, 0]
    job.flip = 0x80 if signed else 0
    job.table = &table[0]
    job.multiplier = multiplier
    job.zero_point = zero_point
    job.low = -128.0 if signed else 0.0
    job.high = 127.0 if signed else 255.0
    job.out = &out[0, 0]
    job.length = length
    with nogil:
        run_range(softmax_range, &job, rows, max(1, PARALLEL_MIN // (8 * length)),
                  n_threads if rows * length >= PARALLEL_MIN // 4 else 1)
