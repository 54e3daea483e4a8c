# QuantizeLinear: rows of x divided by their scale, rounded half to even,
# offset and saturated (or converted to a narrow float), a piece at a time;
# the lean path's per-tensor entry and the conversions the tests call.
# Needs the conversions and DequantizeLinear's jobs.

cdef inline void integer_range(int out_kind, float* low, float* high) noexcept nogil:
    if out_kind == Q_INT8:
        low[0], high[0] = -128.0, 127.0
    elif out_kind == Q_UINT8:
        low[0], high[0] = 0.0, 255.0
    elif out_kind == Q_INT16:
        low[0], high[0] = -32768.0, 32767.0
    elif out_kind == Q_UINT16:
        low[0], high[0] = 0.0, 65535.0
    elif out_kind == Q_INT4:
        low[0], high[0] = -8.0, 7.0
    elif out_kind == Q_UINT4:
        low[0], high[0] = 0.0, 15.0
    elif out_kind == Q_INT2:
        low[0], high[0] = -2.0, 1.0
    else:
        low[0], high[0] = 0.0, 3.0


cdef inline uint8_t code_mask(int out_kind) noexcept nogil:
    """ml_dtypes keeps a signed 4-bit (2-bit) value in the low four (two)
    bits of its byte; the high bits are 0."""
    if out_kind == Q_INT4:
        return 0xf
    if out_kind == Q_INT2:
        return 0x3
    return 0xff


cdef extern from "qops_quantize_linear.h":
    Py_ssize_t quantize_bytes "qops_quantize_bytes"(
        const float* x, Py_ssize_t count, float scale, float zero, float low, float high,
        int signed_out, uint8_t* out) noexcept nogil


cdef void quantize_float32_to_integers(const float* x, Py_ssize_t count, const float* scale,
                                       const float* zero, bint vector, uint8_t* out,
                                       int out_kind) noexcept nogil:
    """float32 x, float32 division, an integer output: the common case in
    one pass per element (x and out already offset to the row)."""
    cdef Py_ssize_t j
    cdef float s = scale[0], z = zero[0], low, high
    cdef uint16_t* words = <uint16_t*>out
    cdef uint8_t mask = code_mask(out_kind)
    integer_range(out_kind, &low, &high)
    if out_kind == Q_INT16 or out_kind == Q_UINT16:
        if vector:
            for j in range(count):
                words[j] = <uint16_t><int32_t>to_integer(x[j] / scale[j], zero[j], low, high)
        else:
            for j in range(count):
                words[j] = <uint16_t><int32_t>to_integer(x[j] / s, z, low, high)
    elif vector:
        for j in range(count):
            out[j] = (<uint8_t><int32_t>to_integer(x[j] / scale[j], zero[j], low, high)) & mask
    else:
        j = 0
        if out_kind == Q_UINT8 or out_kind == Q_INT8:
            j = quantize_bytes(x, count, s, z, low, high, out_kind == Q_INT8, out)
        for j in range(j, count):
            out[j] = (<uint8_t><int32_t>to_integer(x[j] / s, z, low, high)) & mask


cdef void quantize_piece(const uint8_t* x, int x_kind, int compute, Py_ssize_t start,
                         Py_ssize_t count, const float* scale, const float* zero, bint vector,
                         uint8_t* out, int out_kind, bint saturate,
                         bint zero_point_given) noexcept nogil:
    cdef float buffer[PIECE]
    cdef const float* source = buffer
    cdef float* values = buffer
    cdef Py_ssize_t j
    cdef float s, z, q, low, high, largest
    cdef uint8_t* bytes_out
    cdef uint16_t* words_out
    cdef uint8_t mask
    cdef NarrowFloat t
    # x, widened to float32 and rounded to the division's type.
    if x_kind == F_FLOAT32:
        source = (<const float*>x) + start
        if compute != F_FLOAT32:
            for j in range(count):
                values[j] = round_to(source[j], compute)
            source = values
    elif x_kind == F_FLOAT16:
        for j in range(count):
            values[j] = float16_value((<const uint16_t*>x)[start + j])
        if compute == F_BFLOAT16:
            for j in range(count):
                values[j] = round_to(values[j], compute)
    elif x_kind == F_INT32:
        # float32(x) first (C's conversion rounds to nearest even), then the
        # division's type.
        for j in range(count):
            values[j] = <float>(<const int32_t*>x)[start + j]
        if compute != F_FLOAT32:
            for j in range(count):
                values[j] = round_to(values[j], compute)
    else:
        for j in range(count):
            values[j] = bfloat16_value((<const uint16_t*>x)[start + j])
        if compute == F_FLOAT16:
            for j in range(count):
                values[j] = round_to(values[j], compute)
    # The division, in float32 and then rounded to the division's type: for
    # float16 and bfloat16 that is the correctly rounded quotient (float32
    # carries more than twice their digits), as NumPy and ml_dtypes divide.
    if vector:
        for j in range(count):
            values[j] = source[j] / scale[j]
    else:
        s = scale[0]
        for j in range(count):
            values[j] = source[j] / s
    if compute != F_FLOAT32:
        for j in range(count):
            values[j] = round_to(values[j], compute)

    bytes_out = out + start
    words_out = (<uint16_t*>out) + start
    if out_kind <= Q_UINT2:
        integer_range(out_kind, &low, &high)
        if vector:
            for j in range(count):
                values[j] = to_integer(values[j], zero[j], low, high)
        else:
            z = zero[0]
            for j in range(count):
                values[j] = to_integer(values[j], z, low, high)
        if out_kind == Q_INT16 or out_kind == Q_UINT16:
            for j in range(count):
                words_out[j] = <uint16_t><int32_t>values[j]
        else:
            mask = code_mask(out_kind)
            for j in range(count):
                bytes_out[j] = (<uint8_t><int32_t>values[j]) & mask
        return

    t = narrow_float(out_kind)
    if out_kind >= Q_E2M1:
        # ONNX adds the (zero) zero point before the cast: -0 becomes +0.
        if zero_point_given:
            for j in range(count):
                if values[j] == 0:
                    values[j] = 0.0
    elif saturate:
        # Clamp to the largest finite value (infinities too); NaN stays NaN.
        largest = float_of(((<uint32_t>(127 + (t.largest >> t.mantissa) - t.bias)) << 23)
                           | ((t.largest & ((1u << t.mantissa) - 1)) << (23 - t.mantissa)))
        for j in range(count):
            q = values[j]
            if q > largest:
                values[j] = largest
            elif q < -largest:
                values[j] = -largest
    for j in range(count):
        bytes_out[j] = narrow_bits(values[j], &t)


cdef inline void quantize_row(const uint8_t* x, int x_kind, int compute, Py_ssize_t start,
                              Py_ssize_t count, const float* scale, const float* zero,
                              bint vector, uint8_t* out, int out_kind, bint saturate,
                              bint zero_point_given) noexcept nogil:
    cdef Py_ssize_t done = 0, step
    if x_kind == F_FLOAT32 and compute == F_FLOAT32 and out_kind <= Q_UINT2:
        quantize_float32_to_integers((<const float*>x) + start, count, scale, zero, vector,
                                     out + start * (2 if out_kind == Q_INT16
                                                    or out_kind == Q_UINT16 else 1), out_kind)
        return
    while done < count:
        step = min(<Py_ssize_t>PIECE, count - done)
        quantize_piece(x, x_kind, compute, start + done, step, scale, zero, vector, out,
                       out_kind, saturate, zero_point_given)
        if vector:
            scale += step
            zero += step
        done += step


cdef void quantize_job_row(const Job* job, Py_ssize_t r) noexcept nogil:
    cdef Py_ssize_t start, count, param, done = 0, step
    row_geometry(job, r, &start, &count, &param)
    if not job.segments:
        quantize_row(job.x, job.x_kind, job.compute, start, count, job.scale + param,
                     job.zero + param, job.vector, job.out, job.out_kind, job.saturate,
                     job.zero_point_given)
        return
    while done < count:
        step = min(job.block, count - done)
        quantize_row(job.x, job.x_kind, job.compute, start + done, step, job.scale + param,
                     job.zero + param, False, job.out, job.out_kind, job.saturate,
                     job.zero_point_given)
        param += job.param_axis
        done += step


def quantize(const uint8_t[::1] x, int x_kind, int compute, const float[::1] scale,
             const float[::1] zero, bint segments, Py_ssize_t outer, Py_ssize_t axis_len,
             Py_ssize_t inner, Py_ssize_t block, Py_ssize_t group, Py_ssize_t param_outer,
             Py_ssize_t param_axis, bint vector, uint8_t[::1] out, int out_kind, bint saturate,
             bint zero_point_given, int n_threads):
    """QuantizeLinear over the whole tensor (rows as for :func:`dequantize`).

    ``scale``: float32 values already rounded to the division's type
    ``compute``; ``zero``: the zero points as float32 (0 when absent).
    """
    cdef Py_ssize_t total = outer * axis_len * (1 if segments else inner)
    cdef Py_ssize_t r, rows
    cdef Job job
    if total == 0:
        return
    job = make_job(x, scale, zero, out, segments, axis_len, inner, block, group, param_outer,
                   param_axis, vector)
    rows = row_count(&job, outer)
    job.x_kind = x_kind
    job.compute = compute
    job.out_kind = out_kind
    job.saturate = saturate
    job.zero_point_given = zero_point_given
    with nogil:
        run_range(quantize_rows, &job, rows, 1, 1 if total < PARALLEL_MIN else n_threads)


cdef void quantize_rows(void* context, Py_ssize_t start, Py_ssize_t stop, int slot) noexcept nogil:
    cdef Py_ssize_t r
    for r in range(start, stop):
        quantize_job_row(<const Job*>context, r)


# -- the lean path's entry -----------------------------------------------------------------

cdef void quantize_float32_tensor(const float* x, Py_ssize_t count, float scale, float zero,
                                  uint8_t* out, bint to_int8, int n_threads) noexcept nogil:
    """Per-tensor QuantizeLinear of float32 ``x`` to int8 (``to_int8``) or
    uint8, as :func:`quantize` computes it for that call; reached from
    qops.backends.native._lean through :func:`lean_entry` without building any Python
    object."""
    cdef TensorJob job
    job.x = x
    job.count = count
    job.scale = scale
    job.zero = zero
    job.out = out
    job.out_kind = Q_INT8 if to_int8 else Q_UINT8
    run_range(quantize_tensor_rows, &job, (count + ROW - 1) // ROW, 1,
              1 if count < PARALLEL_MIN else n_threads)


cdef struct TensorJob:
    const float* x
    Py_ssize_t count
    float scale
    float zero
    uint8_t* out
    int out_kind


cdef void quantize_tensor_rows(void* context, Py_ssize_t start, Py_ssize_t stop,
                               int slot) noexcept nogil:
    """Rows [start, stop) of ROW elements of a per-tensor quantization."""
    cdef const TensorJob* job = <const TensorJob*>context
    cdef Py_ssize_t first = start * ROW
    quantize_float32_to_integers(job.x + first, min(stop * ROW, job.count) - first, &job.scale,
                                 &job.zero, False, job.out + first, job.out_kind)


def lean_entry():
    """A capsule holding :func:`quantize_float32_tensor` (``LEAN_ENTRY``)."""
    return PyCapsule_New(<void*>quantize_float32_tensor, LEAN_ENTRY, NULL)


# -- conversions exposed for the tests ------------------------------------------------------

def convert_float32(const float[::1] values, int kind, uint8_t[::1] out):
    """float32 values to float16 / bfloat16 (``F_*``, two bytes each) or a
    float8 / float4 code (``Q_E*``, one byte each), without saturation."""
    cdef Py_ssize_t j
    cdef NarrowFloat t
    cdef uint16_t* words = <uint16_t*>&out[0]
    with nogil:
        if kind == F_FLOAT16:
            for j in range(values.shape[0]):
                words[j] = float16_bits(values[j])
        elif kind == F_BFLOAT16:
            for j in range(values.shape[0]):
                words[j] = bfloat16_bits(values[j])
        else:
            t = narrow_float(kind)
            for j in range(values.shape[0]):
                out[j] = narrow_bits(values[j], &t)


def widen_float16(const uint16_t[::1] values, float[::1] out):
    """float16 bits to float32, as NumPy converts."""
    cdef Py_ssize_t j
    with nogil:
        for j in range(values.shape[0]):
            out[j] = float16_value(values[j])
