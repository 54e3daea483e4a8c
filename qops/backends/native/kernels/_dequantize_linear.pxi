# DequantizeLinear: rows of x loaded (and widened) a piece at a time,
# scaled, and converted to the output type; per tensor, per axis and
# blocked.  Needs the conversions.

cdef inline float int4_value(uint32_t nibble) noexcept nogil:
    return <float>(<int32_t>(nibble ^ 8) - 8)


cdef inline void dequantize_span(const uint8_t* x, int x_kind, int packed, Py_ssize_t start,
                          Py_ssize_t count, float s, float z, const float* table,
                          float* out) noexcept nogil:
    """One scale, float32 output: elements ``start .. start + count`` in one
    pass, (x - z) * s (the common case, so no staging buffer)."""
    cdef Py_ssize_t i, j, first, pairs
    cdef uint32_t byte
    out += start
    if packed == 2:
        # Four elements a byte, the first in the lowest two bits: through
        # the table (its first four entries are the canonical codes).
        for j in range(count):
            i = start + j
            out[j] = (table[(x[i >> 2] >> ((i & 3) << 1)) & 3] - z) * s
        return
    if packed:
        # Two elements a byte, the first in the low nibble.
        j = 0
        if start & 1 and count > 0:
            out[0] = (table[x[start >> 1] >> 4] - z) * s
            j = 1
        first = (start + j) >> 1
        pairs = (count - j) >> 1
        if x_kind == X_INT4:
            for i in range(pairs):
                byte = x[first + i]
                out[j + 2 * i] = (int4_value(byte & 0xf) - z) * s
                out[j + 2 * i + 1] = (int4_value(byte >> 4) - z) * s
        elif x_kind == X_UINT4:
            for i in range(pairs):
                byte = x[first + i]
                out[j + 2 * i] = (<float>(byte & 0xf) - z) * s
                out[j + 2 * i + 1] = (<float>(byte >> 4) - z) * s
        else:
            for i in range(pairs):
                byte = x[first + i]
                out[j + 2 * i] = (table[byte & 0xf] - z) * s
                out[j + 2 * i + 1] = (table[byte >> 4] - z) * s
        j += 2 * pairs
        if j < count:
            out[j] = (table[x[first + pairs] & 0xf] - z) * s
        return
    if x_kind == X_INT8:
        for j in range(count):
            out[j] = (<float>(<const int8_t*>x)[start + j] - z) * s
    elif x_kind == X_UINT8:
        for j in range(count):
            out[j] = (<float>x[start + j] - z) * s
    elif x_kind == X_INT16:
        for j in range(count):
            out[j] = (<float>(<const int16_t*>x)[start + j] - z) * s
    elif x_kind == X_UINT16:
        for j in range(count):
            out[j] = (<float>(<const uint16_t*>x)[start + j] - z) * s
    elif x_kind == X_INT32:
        for j in range(count):
            out[j] = (<float>(<const int32_t*>x)[start + j] - z) * s
    elif x_kind == X_INT4:
        for j in range(count):
            out[j] = (int4_value(x[start + j] & 0xf) - z) * s
    elif x_kind == X_UINT4:
        for j in range(count):
            out[j] = (<float>(x[start + j] & 0xf) - z) * s
    else:
        for j in range(count):
            out[j] = (table[x[start + j]] - z) * s


cdef void load_values(const uint8_t* x, int x_kind, int packed, Py_ssize_t start,
                      Py_ssize_t count, const float* table, float* values) noexcept nogil:
    """Elements ``start .. start + count`` of x widened to float32 (exact for
    every type but int32, which rounds once, as NumPy's conversion does)."""
    cdef Py_ssize_t i, j, first, pairs
    cdef uint32_t byte
    if packed == 2:
        for j in range(count):
            i = start + j
            values[j] = table[(x[i >> 2] >> ((i & 3) << 1)) & 3]
    elif packed:
        # Two elements a byte, the first in the low nibble.
        j = 0
        if start & 1 and count > 0:
            values[0] = table[x[start >> 1] >> 4]
            j = 1
        first = (start + j) >> 1
        pairs = (count - j) >> 1
        if x_kind == X_INT4:
            for i in range(pairs):
                byte = x[first + i]
                values[j + 2 * i] = int4_value(byte & 0xf)
                values[j + 2 * i + 1] = int4_value(byte >> 4)
        elif x_kind == X_UINT4:
            for i in range(pairs):
                byte = x[first + i]
                values[j + 2 * i] = <float>(byte & 0xf)
                values[j + 2 * i + 1] = <float>(byte >> 4)
        else:
            for i in range(pairs):
                byte = x[first + i]
                values[j + 2 * i] = table[byte & 0xf]
                values[j + 2 * i + 1] = table[byte >> 4]
        j += 2 * pairs
        if j < count:
            values[j] = table[x[first + pairs] & 0xf]
    elif x_kind == X_INT8:
        for j in range(count):
            values[j] = (<const int8_t*>x)[start + j]
    elif x_kind == X_UINT8:
        for j in range(count):
            values[j] = x[start + j]
    elif x_kind == X_INT16:
        for j in range(count):
            values[j] = (<const int16_t*>x)[start + j]
    elif x_kind == X_UINT16:
        for j in range(count):
            values[j] = (<const uint16_t*>x)[start + j]
    elif x_kind == X_INT32:
        for j in range(count):
            values[j] = <float>(<const int32_t*>x)[start + j]
    elif x_kind == X_INT4:
        for j in range(count):
            values[j] = int4_value(x[start + j] & 0xf)
    elif x_kind == X_UINT4:
        for j in range(count):
            values[j] = x[start + j] & 0xf
    else:
        for j in range(count):
            values[j] = table[x[start + j]]


cdef void dequantize_piece(const uint8_t* x, int x_kind, int packed, Py_ssize_t start,
                           Py_ssize_t count, const float* scale, const float* zero, bint vector,
                           const float* table, uint8_t* out, int out_kind) noexcept nogil:
    """Elements ``start .. start + count`` (count <= PIECE) of x into out."""
    cdef float buffer[PIECE]
    cdef float* values = buffer
    cdef Py_ssize_t j
    cdef float s, z
    cdef uint16_t* halves
    if out_kind == F_FLOAT32 and not vector:
        dequantize_span(x, x_kind, packed, start, count, scale[0], zero[0], table, <float*>out)
        return
    if out_kind == F_FLOAT32:
        values = (<float*>out) + start
    load_values(x, x_kind, packed, start, count, table, values)
    # (x - zero point) * scale in float32; an absent zero point is 0, and
    # x - 0 is x (-0 and NaN included).
    if vector:
        for j in range(count):
            values[j] = (values[j] - zero[j]) * scale[j]
    else:
        s = scale[0]
        z = zero[0]
        for j in range(count):
            values[j] = (values[j] - z) * s
    if out_kind == F_FLOAT16:
        halves = (<uint16_t*>out) + start
        for j in range(count):
            halves[j] = float16_bits(values[j])
    elif out_kind == F_BFLOAT16:
        halves = (<uint16_t*>out) + start
        for j in range(count):
            halves[j] = bfloat16_bits(values[j])


cdef inline void dequantize_row(const uint8_t* x, int x_kind, int packed, Py_ssize_t start,
                                Py_ssize_t count, const float* scale, const float* zero,
                                bint vector, const float* table, uint8_t* out,
                                int out_kind) noexcept nogil:
    cdef Py_ssize_t done = 0, step
    if out_kind == F_FLOAT32 and not vector:
        dequantize_span(x, x_kind, packed, start, count, scale[0], zero[0], table, <float*>out)
        return
    while done < count:
        step = min(<Py_ssize_t>PIECE, count - done)
        dequantize_piece(x, x_kind, packed, start + done, step, scale, zero, vector, table, out,
                         out_kind)
        if vector:
            scale += step
            zero += step
        done += step


cdef struct Job:
    # One call: the inputs' and outputs' addresses, the kinds, and the row
    # geometry (see row_geometry).
    const uint8_t* x
    int x_kind
    int packed
    int compute
    const float* table
    const float* scale
    const float* zero
    uint8_t* out
    int out_kind
    bint saturate
    bint zero_point_given
    bint segments
    Py_ssize_t axis_len
    Py_ssize_t inner
    Py_ssize_t block
    Py_ssize_t group
    Py_ssize_t param_outer
    Py_ssize_t param_axis
    bint vector


cdef inline void row_geometry(const Job* job, Py_ssize_t r, Py_ssize_t* start,
                              Py_ssize_t* count, Py_ssize_t* param) noexcept nogil:
    """Row ``r``'s first element, length and parameter offset.

    ``segments``: x is (outer, axis_len), cut along the axis into blocks of
    ``block`` elements (the last may be shorter) with one scale each, and a
    row is ``group`` consecutive blocks of one outer index; block k of the
    row has its scale at ``param + k * param_axis``.  Otherwise x is (outer,
    axis_len, inner) and a row is the ``inner`` elements of one (outer, axis)
    index, with one scale (or, ``vector``, one per element) at ``param``."""
    cdef Py_ssize_t blocks, groups, o, a
    if job.segments:
        blocks = (job.axis_len + job.block - 1) // job.block
        groups = (blocks + job.group - 1) // job.group
        o = r // groups
        a = (r - o * groups) * job.group  # the row's first block
        start[0] = o * job.axis_len + a * job.block
        count[0] = min(job.group * job.block, job.axis_len - a * job.block)
        param[0] = o * job.param_outer + a * job.param_axis
    else:
        o = r // job.axis_len
        a = r - o * job.axis_len
        start[0] = r * job.inner
        count[0] = job.inner
        param[0] = o * job.param_outer + (a // job.block) * job.param_axis


cdef Py_ssize_t row_count(const Job* job, Py_ssize_t outer) noexcept nogil:
    cdef Py_ssize_t blocks
    if job.segments:
        blocks = (job.axis_len + job.block - 1) // job.block
        return outer * ((blocks + job.group - 1) // job.group)
    return outer * job.axis_len


cdef void dequantize_blocks(const Job* job, Py_ssize_t start, Py_ssize_t count,
                           Py_ssize_t param) noexcept nogil:
    """A row of short blocks (at most PIECE / 2 elements each), float32
    output: the values widened a piece of whole blocks at a time, then each
    block scaled out of that buffer, which no other pointer can alias: the
    per-block loop needs no overlap checks."""
    cdef float buffer[PIECE]
    cdef Py_ssize_t per_piece = (PIECE // job.block) * job.block
    cdef Py_ssize_t done = 0, n, b, j, end
    cdef float s, z
    cdef float* out = (<float*>job.out) + start
    while done < count:
        n = min(per_piece, count - done)
        load_values(job.x, job.x_kind, job.packed, start + done, n, job.table, buffer)
        b = 0
        while b < n:
            end = min(b + job.block, n)
            s = job.scale[param]
            z = job.zero[param]
            for j in range(b, end):
                out[done + j] = (buffer[j] - z) * s
            param += job.param_axis
            b = end
        done += n


cdef void dequantize_job_row(const Job* job, Py_ssize_t r) noexcept nogil:
    cdef Py_ssize_t start, count, param, done = 0, step
    row_geometry(job, r, &start, &count, &param)
    if not job.segments:
        dequantize_row(job.x, job.x_kind, job.packed, start, count, job.scale + param,
                       job.zero + param, job.vector, job.table, job.out, job.out_kind)
        return
    if job.out_kind == F_FLOAT32 and job.block <= PIECE // 2:
        dequantize_blocks(job, start, count, param)
        return
    if job.out_kind == F_FLOAT32:
        while done < count:
            step = min(job.block, count - done)
            dequantize_span(job.x, job.x_kind, job.packed, start + done, step,
                            job.scale[param], job.zero[param], job.table, <float*>job.out)
            param += job.param_axis
            done += step
        return
    while done < count:
        step = min(job.block, count - done)
        dequantize_row(job.x, job.x_kind, job.packed, start + done, step, job.scale + param,
                       job.zero + param, False, job.table, job.out, job.out_kind)
        param += job.param_axis
        done += step


cdef Job make_job(const uint8_t[::1] x, const float[::1] scale, const float[::1] zero,
                  uint8_t[::1] out, bint segments, Py_ssize_t axis_len, Py_ssize_t inner,
                  Py_ssize_t block, Py_ssize_t group, Py_ssize_t param_outer,
                  Py_ssize_t param_axis, bint vector):
    cdef Job job
    job.x_kind = 0
    job.packed = 0
    job.compute = F_FLOAT32
    job.table = NULL
    job.out_kind = 0
    job.saturate = False
    job.zero_point_given = False
    job.x = &x[0] if x.shape[0] else NULL
    job.scale = &scale[0]
    job.zero = &zero[0]
    job.out = &out[0] if out.shape[0] else NULL
    job.segments = segments
    job.axis_len = axis_len
    job.inner = inner
    job.block = block
    job.group = group
    job.param_outer = param_outer
    job.param_axis = param_axis
    job.vector = vector
    return job


def dequantize(const uint8_t[::1] x, int x_kind, int packed, const float[::1] table,
               const float[::1] scale, const float[::1] zero, bint segments, Py_ssize_t outer,
               Py_ssize_t axis_len, Py_ssize_t inner, Py_ssize_t block, Py_ssize_t group,
               Py_ssize_t param_outer, Py_ssize_t param_axis, bint vector, uint8_t[::1] out,
               int out_kind, int n_threads):
    """DequantizeLinear over the whole tensor (see :func:`row_geometry`).

    ``x``: the elements' bytes (``packed`` 4: two 4-bit elements a byte,
    2: four 2-bit elements a byte, 0: one element per byte or more);
    ``table``: float32 of each byte value for ``X_TABLE`` and packed input;
    ``scale`` / ``zero``: float32, indexed by the row's parameter offset
    (``vector``: one per element of the row); ``out``: the output's bytes.
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
    job.packed = packed
    job.table = &table[0]
    job.out_kind = out_kind
    with nogil:
        run_range(dequantize_rows, &job, rows, 1,
                  1 if total < PARALLEL_MIN else n_threads)


cdef void dequantize_rows(void* context, Py_ssize_t start, Py_ssize_t stop,
                          int slot) noexcept nogil:
    cdef Py_ssize_t r
    for r in range(start, stop):
        dequantize_job_row(<const Job*>context, r)
