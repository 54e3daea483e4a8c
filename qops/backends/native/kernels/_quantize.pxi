# QuantizeLinear and DequantizeLinear (and the quantized add, whose last
# step is QuantizeLinear's, and the quantized average pooling): typed loops over raw bytes, included
# by one module per instruction set (_quantize_<variant>.pyx), each compiled
# with its variant's flags so the same loops vectorize for it.
#
# The glue (qops.backends.native.quantize) views every array as bytes or float32
# vectors and describes the tensor as (outer, axis, inner) with how a row
# finds its scale; nothing here validates.  Work is split into rows that never
# share an output element, so results do not depend on the thread count.
#
# Each row is processed in pieces of at most ``PIECE`` elements through a
# float32 buffer on the thread's stack: load (and widen) the input, compute,
# then convert to the output type.  Every stage is a plain loop the compiler
# vectorizes; conversions follow the bit-level rules of NumPy (float16) and
# ml_dtypes (bfloat16, float8, float4), rounding to nearest even.

import numpy as np

from cpython.pycapsule cimport PyCapsule_New
from libc.stdint cimport int8_t, int16_t, int32_t, uint8_t, uint16_t, uint32_t
from libc.string cimport memset

from qops.backends.native.kernels._qops_pool cimport run_range
from qops.backends.native.kernels._rounding cimport round_half_even
from qops.backends.native.kernels._requantize cimport narrow_line


cdef extern from *:
    """
    #include <string.h>
    static inline uint32_t qops_bits_of(float value) {
        uint32_t bits; memcpy(&bits, &value, sizeof bits); return bits;
    }
    static inline float qops_float_of(uint32_t bits) {
        float value; memcpy(&value, &bits, sizeof value); return value;
    }
    """
    uint32_t bits_of "qops_bits_of"(float value) noexcept nogil
    float float_of "qops_float_of"(uint32_t bits) noexcept nogil


# Input kinds of DequantizeLinear's x (the glue's table must match).
cpdef enum:
    X_INT8 = 0
    X_UINT8 = 1
    X_INT16 = 2
    X_UINT16 = 3
    X_INT32 = 4
    X_INT4 = 5
    X_UINT4 = 6
    X_TABLE = 7     # float8 / float4: one float32 per byte value

# Float kinds: QuantizeLinear's x and division, DequantizeLinear's output;
# F_INT32 is a QuantizeLinear x only (widened to float32, nearest even).
cpdef enum:
    F_FLOAT32 = 0
    F_FLOAT16 = 1
    F_BFLOAT16 = 2
    F_INT32 = 3

# QuantizeLinear's output kinds.
cpdef enum:
    Q_INT8 = 0
    Q_UINT8 = 1
    Q_INT16 = 2
    Q_UINT16 = 3
    Q_INT4 = 4
    Q_UINT4 = 5
    Q_INT2 = 6
    Q_UINT2 = 7      # the integer kinds end here (kind <= Q_UINT2)
    Q_E4M3FN = 8
    Q_E4M3FNUZ = 9
    Q_E5M2 = 10
    Q_E5M2FNUZ = 11
    Q_E2M1 = 12      # the sub-byte floats from here: no infinity, no NaN
    Q_E2M3 = 13
    Q_E3M2 = 14

# The capsule name of the lean path's entry; its C type is
# qops.backends.native._lean.QuantizeTensor.
cdef const char* LEAN_ENTRY = b"qops.backends.native.kernels.quantize_float32_tensor"
cdef const char* LEAN_ADD_ENTRY = b"qops.backends.native.kernels.quantized_add_tensor"

cdef enum:
    PIECE = 512
    # Fewer elements than this run on the calling thread: a job on the pool
    # costs more than it saves.
    PARALLEL_MIN = 32768

# Elements per row of a per-tensor call: rows are what threads share out
# (the glue reads it too).
cpdef enum:
    ROW = 16384

# -- conversions --------------------------------------------------------------------

cdef inline uint16_t float16_bits(float value) noexcept nogil:
    """float32 to float16 as NumPy converts: nearest even, overflow to
    infinity, NaN keeping the payload's top bits (and staying NaN)."""
    cdef uint32_t bits = bits_of(value)
    cdef uint32_t sign = (bits >> 16) & 0x8000
    cdef uint32_t magnitude = bits & 0x7fffffff
    cdef uint32_t result
    if magnitude > 0x7f800000:
        result = 0x7c00 | ((magnitude & 0x007fffff) >> 13)
        if result == 0x7c00:
            result = 0x7c01
    elif magnitude >= 0x477ff000:      # 65520 and up round to infinity
        result = 0x7c00
    elif magnitude < 0x38800000:       # below 2**-14: a subnormal, in units of 2**-24
        result = <uint32_t>round_half_even(float_of(magnitude) * 16777216.0)
    else:
        result = ((magnitude + 0xfff + ((magnitude >> 13) & 1)) >> 13) - (112 << 10)
    return <uint16_t>(sign | result)


cdef inline float float16_value(uint16_t half) noexcept nogil:
    cdef uint32_t sign = (<uint32_t>half & 0x8000) << 16
    cdef uint32_t magnitude = half & 0x7fff
    if magnitude >= 0x7c00:            # infinity and NaN (payload kept)
        return float_of(sign | 0x7f800000 | ((magnitude & 0x3ff) << 13))
    if magnitude < 0x400:              # zero and subnormals: exact in float32
        return float_of(sign | bits_of(<float>magnitude * <float>5.9604644775390625e-08))
    return float_of(sign | ((magnitude << 13) + (112 << 23)))


cdef inline uint16_t bfloat16_bits(float value) noexcept nogil:
    """float32 to bfloat16 as ml_dtypes converts: nearest even; NaN becomes
    the quiet NaN of its sign."""
    cdef uint32_t bits = bits_of(value)
    if (bits & 0x7fffffff) > 0x7f800000:
        return <uint16_t>(((bits >> 16) & 0x8000) | 0x7fc0)
    return <uint16_t>((bits + 0x7fff + ((bits >> 16) & 1)) >> 16)


cdef inline float bfloat16_value(uint16_t value) noexcept nogil:
    return float_of(<uint32_t>value << 16)


cdef inline float round_to(float value, int kind) noexcept nogil:
    """``value`` rounded to float16 or bfloat16 (and back); float32 as is."""
    if kind == F_FLOAT16:
        return float16_value(float16_bits(value))
    if kind == F_BFLOAT16:
        return bfloat16_value(bfloat16_bits(value))
    return value


cdef struct NarrowFloat:
    # How ml_dtypes stores one float8 / float4 type.
    int mantissa           # mantissa bits
    int bias               # exponent bias
    uint32_t largest       # code of the largest finite magnitude
    uint32_t sign_bit      # 0x80, 0x8 for float4, 0x20 for float6
    uint32_t overflow      # code beyond the largest (NaN or infinity; float4 saturates)
    uint32_t nan           # code of NaN (with the sign for the types that have signed NaN)
    bint unsigned_special  # fnuz: one NaN 0x80, no negative zero
    bint nan_is_zero       # float4 / float6 have no NaN: ml_dtypes gives the zero of the opposite sign


cdef NarrowFloat narrow_float(int kind) noexcept nogil:
    cdef NarrowFloat t
    t.unsigned_special = False
    t.nan_is_zero = False
    t.sign_bit = 0x80
    if kind == Q_E4M3FN:
        t.mantissa, t.bias, t.largest, t.overflow, t.nan = 3, 7, 0x7e, 0x7f, 0x7f
    elif kind == Q_E4M3FNUZ:
        t.mantissa, t.bias, t.largest, t.overflow, t.nan = 3, 8, 0x7f, 0x80, 0x80
        t.unsigned_special = True
    elif kind == Q_E5M2:
        t.mantissa, t.bias, t.largest, t.overflow, t.nan = 2, 15, 0x7b, 0x7c, 0x7e
    elif kind == Q_E5M2FNUZ:
        t.mantissa, t.bias, t.largest, t.overflow, t.nan = 2, 16, 0x7f, 0x80, 0x80
        t.unsigned_special = True
    elif kind == Q_E2M3:
        t.mantissa, t.bias, t.largest, t.overflow, t.nan = 3, 1, 0x1f, 0x1f, 0x0
        t.sign_bit = 0x20
        t.nan_is_zero = True
    elif kind == Q_E3M2:
        t.mantissa, t.bias, t.largest, t.overflow, t.nan = 2, 3, 0x1f, 0x1f, 0x0
        t.sign_bit = 0x20
        t.nan_is_zero = True
    else:
        t.mantissa, t.bias, t.largest, t.overflow, t.nan = 1, 1, 0x7, 0x7, 0x0
        t.sign_bit = 0x8
        t.nan_is_zero = True
    return t


cdef inline uint8_t narrow_bits(float value, const NarrowFloat* t) noexcept nogil:
    """float32 to a float8 / float4 code, nearest even, without saturation
    (out of range gives ``t.overflow``), as ml_dtypes converts."""
    cdef uint32_t bits = bits_of(value)
    cdef uint32_t magnitude = bits & 0x7fffffff
    cdef uint32_t sign = t.sign_bit if bits >> 31 else 0
    cdef int shift = 23 - t.mantissa
    cdef uint32_t code
    if magnitude > 0x7f800000:
        if t.nan_is_zero:
            return <uint8_t>(sign ^ t.sign_bit)
        return <uint8_t>(t.nan if t.unsigned_special else sign | t.nan)
    if magnitude < <uint32_t>(128 - t.bias) << 23:
        # Below the smallest normal: a count of the smallest subnormal, which
        # is also the code (2**mantissa is the smallest normal's code).
        code = <uint32_t>round_half_even(
            float_of(magnitude) * float_of(<uint32_t>(127 + t.bias - 1 + t.mantissa) << 23))
    else:
        code = ((magnitude + (<uint32_t>1 << (shift - 1)) - 1 + ((magnitude >> shift) & 1))
                >> shift) - (<uint32_t>(127 - t.bias) << t.mantissa)
    if code > t.largest:
        return <uint8_t>(t.overflow if t.unsigned_special else sign | t.overflow)
    if code == 0 and t.unsigned_special:
        return 0
    return <uint8_t>(sign | code)


cdef inline float to_integer(float q, float zero, float low, float high) noexcept nogil:
    """Round half to even, add the zero point, saturate to [low, high]; NaN
    counts as 0.  Beyond 2**22 in magnitude the rounding trick is inexact,
    but its result keeps the sign and stays beyond 2**21, far outside every
    range, so it saturates exactly as the true value would (infinities too)."""
    q = q if q == q else <float>0.0
    return to_integer_of_number(q, zero, low, high)


cdef inline float to_integer_of_number(float q, float zero, float low,
                                       float high) noexcept nogil:
    """to_integer of a q that is never NaN (finite or infinite)."""
    q = round_half_even(q) + zero
    q = q if q > low else low
    return q if q < high else high


# -- DequantizeLinear ---------------------------------------------------------------------

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


# -- QuantizeLinear ---------------------------------------------------------------------------

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


cdef extern from *:
    """
    /* Per-tensor float32 to 8-bit integers in SSE2 (the portable variant on
       x86-64, where the compiler's loop of to_integer spent about twice the
       instructions narrowing dwords to bytes without SSE4's packs): the
       division, NaN to 0, the clamp to the range less the zero point, then
       cvtps2dq, which rounds half to even in the default rounding mode, as
       to_integer does; the zero point added in int16 and packs to bytes.
       Returns how many leading elements were done.  The AVX variants keep
       the compiler's loop, which is as fast as their memory there. */
    #include <stddef.h>
    #include <stdint.h>
    #if defined(__SSE2__)
    #include <emmintrin.h>
    /* Four vectors of int32, each inside the output's range less its zero
       point, to 16 output bytes in order: the zero point added in int16,
       then signed or unsigned packs (the last step of the SSE2 loop below;
       the quantized add's loop takes the same step at either width). */
    static inline __m128i qops_bytes_sse2(const __m128i* values, __m128i zeros,
                                          int signed_out) {
        __m128i first = _mm_adds_epi16(_mm_packs_epi32(values[0], values[1]), zeros);
        __m128i second = _mm_adds_epi16(_mm_packs_epi32(values[2], values[3]), zeros);
        return signed_out ? _mm_packs_epi16(first, second) : _mm_packus_epi16(first, second);
    }
    #endif
    #if defined(__SSE2__) && !defined(__AVX2__)
    static ptrdiff_t qops_quantize_bytes(const float* x, ptrdiff_t count, float scale,
                                         float zero, float low, float high, int signed_out,
                                         uint8_t* out) {
        const __m128 scales = _mm_set1_ps(scale);
        const __m128 floor_value = _mm_set1_ps(low - zero);
        const __m128 ceiling = _mm_set1_ps(high - zero);
        const __m128i zeros = _mm_set1_epi16((int16_t)zero);
        __m128i values[4];
        __m128 q;
        ptrdiff_t i;
        int part;
        for (i = 0; i + 16 <= count; i += 16) {
            for (part = 0; part < 4; part++) {
                q = _mm_div_ps(_mm_loadu_ps(x + i + 4 * part), scales);
                q = _mm_and_ps(q, _mm_cmpord_ps(q, q));
                values[part] = _mm_cvtps_epi32(_mm_min_ps(_mm_max_ps(q, floor_value), ceiling));
            }
            _mm_storeu_si128((__m128i*)(out + i), qops_bytes_sse2(values, zeros, signed_out));
        }
        return i;
    }
    #else
    static ptrdiff_t qops_quantize_bytes(const float* x, ptrdiff_t count, float scale,
                                         float zero, float low, float high, int signed_out,
                                         uint8_t* out) {
        return 0;
    }
    #endif
    """
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


# -- ELEMENT_WISE_QUANTIZED_LINEAR_ADD ------------------------------------------------------
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


cdef extern from *:
    """
    /* The quantized add's rule on whole vectors, where the variant has them.
       Each operand's byte b becomes the float 2**23 + (b ^ flip): with
       AVX-512, by one xor of its zero-extended dword with the bits of 2**23
       and the flip; with AVX2 and SSE2, by unpacking the flipped bytes with
       zeros and then with the words 0x4B00, which makes each dword
       0x4B0000xx, that float itself (four vectors per load, in an order
       within 128-bit lanes that the packs undo, so no permute).  Less
       2**23 + its zero point, that is float32(b ^ flip - zero) exactly; then
       times its multiplier, and the two products' float32 sum, as the rule
       has them.  The last step of QuantizeLinear: vcvtps2dq rounds half to
       even (the default rounding mode), the zero point is added in int16 and
       packs saturate to the output's range.  Saturation clamps as the rule
       does, since the bounds are integers; only a sum past int32 needs a
       clamp first, and only above (vcvtps2dq turns any too large or too
       small sum into INT32_MIN, which saturates to the low end), so the
       loops clamp only where the multipliers let a sum pass 2**30
       (qops_add_needs_ceiling).  An operand of step 0 is one value, its term
       computed once the same way.  The compiler's loop spent about twice
       the instructions (its rounding trick, masks for the wrapping casts, a
       byte unpack tree).  Returns how many leading elements were done; the
       caller's loop does the rest. */
    #include <stdint.h>
    #include <stddef.h>

    /* Whether a sum may reach 2**30: each term is at most 255 times its
       multiplier, and float32 rounding adds a few parts in 2**24. */
    static inline int qops_add_needs_ceiling(float a_multiplier, float b_multiplier) {
        double a = a_multiplier < 0 ? -(double)a_multiplier : (double)a_multiplier;
        double b = b_multiplier < 0 ? -(double)b_multiplier : (double)b_multiplier;
        return 255.0 * (a + b) >= 1073741824.0;
    }

    #if defined(__AVX512F__) && defined(__AVX512BW__)
    #include <immintrin.h>
    #define QOPS_ADD_STEP 64
    #define QOPS_TWO_23 0x4B000000

    static inline __m512 qops_add_term(const uint8_t* x, __m512i bits, __m512 base,
                                       __m512 multiplier) {
        __m512 value = _mm512_castsi512_ps(_mm512_xor_si512(
            _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)x)), bits));
        return _mm512_mul_ps(_mm512_sub_ps(value, base), multiplier);
    }

    /* packs work within 128-bit lanes: the bytes' dwords come out as group j
       of every vector, for each j, and one permute puts them in order. */
    static inline ptrdiff_t qops_add_loop(
            const uint8_t* a, int a_step, uint8_t a_flip, int32_t a_zero, float a_multiplier,
            const uint8_t* b, int b_step, uint8_t b_flip, int32_t b_zero, float b_multiplier,
            ptrdiff_t count, int32_t zero, int32_t high, uint8_t* out, int signed_out,
            int ceiling_clamp) {
        const __m512i a_bits = _mm512_set1_epi32(QOPS_TWO_23 | a_flip);
        const __m512i b_bits = _mm512_set1_epi32(QOPS_TWO_23 | b_flip);
        const __m512 a_base = _mm512_set1_ps(8388608.0f + (float)a_zero);
        const __m512 b_base = _mm512_set1_ps(8388608.0f + (float)b_zero);
        const __m512 a_multipliers = _mm512_set1_ps(a_multiplier);
        const __m512 b_multipliers = _mm512_set1_ps(b_multiplier);
        const __m512 ceiling = _mm512_set1_ps((float)(high - zero));
        const __m512 a_one = _mm512_set1_ps((float)((int32_t)(a[0] ^ a_flip) - a_zero) * a_multiplier);
        const __m512 b_one = _mm512_set1_ps((float)((int32_t)(b[0] ^ b_flip) - b_zero) * b_multiplier);
        const __m512i zeros = _mm512_set1_epi16((int16_t)zero);
        const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13,
                                                2, 6, 10, 14, 3, 7, 11, 15);
        __m512i values[4], first, second, bytes;
        __m512 sum;
        ptrdiff_t i;
        int part;
        for (i = 0; i + QOPS_ADD_STEP <= count; i += QOPS_ADD_STEP) {
            for (part = 0; part < 4; part++) {
                sum = _mm512_add_ps(
                    a_step ? qops_add_term(a + i + 16 * part, a_bits, a_base, a_multipliers)
                           : a_one,
                    b_step ? qops_add_term(b + i + 16 * part, b_bits, b_base, b_multipliers)
                           : b_one);
                values[part] = _mm512_cvtps_epi32(ceiling_clamp ? _mm512_min_ps(sum, ceiling)
                                                                : sum);
            }
            first = _mm512_adds_epi16(_mm512_packs_epi32(values[0], values[1]), zeros);
            second = _mm512_adds_epi16(_mm512_packs_epi32(values[2], values[3]), zeros);
            bytes = signed_out ? _mm512_packs_epi16(first, second)
                               : _mm512_packus_epi16(first, second);
            _mm512_storeu_si512((void*)(out + i), _mm512_permutexvar_epi32(order, bytes));
        }
        return i;
    }

    #elif defined(__AVX2__) || defined(__SSE2__)
    /* AVX2, and SSE2 (the portable variant on x86-64) at half the width: the
       same loop over the names below. */
    #if defined(__AVX2__)
    #include <immintrin.h>
    #define QOPS_ADD_STEP 32
    typedef __m256 qops_add_float;
    typedef __m256i qops_add_int;
    #define qops_add_load(p) _mm256_loadu_si256((const __m256i*)(p))
    #define qops_add_store(p, v) _mm256_storeu_si256((__m256i*)(p), (v))
    #define qops_add_setzero _mm256_setzero_si256
    #define qops_add_set1_epi8 _mm256_set1_epi8
    #define qops_add_set1_epi16 _mm256_set1_epi16
    #define qops_add_set1_ps _mm256_set1_ps
    #define qops_add_xor _mm256_xor_si256
    #define qops_add_unpacklo_epi8 _mm256_unpacklo_epi8
    #define qops_add_unpackhi_epi8 _mm256_unpackhi_epi8
    #define qops_add_unpacklo_epi16 _mm256_unpacklo_epi16
    #define qops_add_unpackhi_epi16 _mm256_unpackhi_epi16
    #define qops_add_as_float _mm256_castsi256_ps
    #define qops_add_sub_ps _mm256_sub_ps
    #define qops_add_mul_ps _mm256_mul_ps
    #define qops_add_add_ps _mm256_add_ps
    #define qops_add_min_ps _mm256_min_ps
    #define qops_add_to_int _mm256_cvtps_epi32
    #define qops_add_packs_epi32 _mm256_packs_epi32
    #define qops_add_adds_epi16 _mm256_adds_epi16
    #define qops_add_packs_epi16 _mm256_packs_epi16
    #define qops_add_packus_epi16 _mm256_packus_epi16
    #else
    #include <emmintrin.h>
    #define QOPS_ADD_STEP 16
    typedef __m128 qops_add_float;
    typedef __m128i qops_add_int;
    #define qops_add_load(p) _mm_loadu_si128((const __m128i*)(p))
    #define qops_add_store(p, v) _mm_storeu_si128((__m128i*)(p), (v))
    #define qops_add_setzero _mm_setzero_si128
    #define qops_add_set1_epi8 _mm_set1_epi8
    #define qops_add_set1_epi16 _mm_set1_epi16
    #define qops_add_set1_ps _mm_set1_ps
    #define qops_add_xor _mm_xor_si128
    #define qops_add_unpacklo_epi8 _mm_unpacklo_epi8
    #define qops_add_unpackhi_epi8 _mm_unpackhi_epi8
    #define qops_add_unpacklo_epi16 _mm_unpacklo_epi16
    #define qops_add_unpackhi_epi16 _mm_unpackhi_epi16
    #define qops_add_as_float _mm_castsi128_ps
    #define qops_add_sub_ps _mm_sub_ps
    #define qops_add_mul_ps _mm_mul_ps
    #define qops_add_add_ps _mm_add_ps
    #define qops_add_min_ps _mm_min_ps
    #define qops_add_to_int _mm_cvtps_epi32
    #define qops_add_packs_epi32 _mm_packs_epi32
    #define qops_add_adds_epi16 _mm_adds_epi16
    #define qops_add_packs_epi16 _mm_packs_epi16
    #define qops_add_packus_epi16 _mm_packus_epi16
    #endif

    /* One register of an operand's bytes to four vectors of terms (the
       unpacks' order within 128-bit lanes, which the packs undo). */
    static inline void qops_add_terms(const uint8_t* x, qops_add_int flip, qops_add_float base,
                                      qops_add_float multiplier, qops_add_float* terms) {
        const qops_add_int zeros = qops_add_setzero();
        const qops_add_int high_words = qops_add_set1_epi16(0x4B00);
        qops_add_int bytes = qops_add_xor(qops_add_load(x), flip);
        qops_add_int low_half = qops_add_unpacklo_epi8(bytes, zeros);
        qops_add_int high_half = qops_add_unpackhi_epi8(bytes, zeros);
        int part;
        terms[0] = qops_add_as_float(qops_add_unpacklo_epi16(low_half, high_words));
        terms[1] = qops_add_as_float(qops_add_unpackhi_epi16(low_half, high_words));
        terms[2] = qops_add_as_float(qops_add_unpacklo_epi16(high_half, high_words));
        terms[3] = qops_add_as_float(qops_add_unpackhi_epi16(high_half, high_words));
        for (part = 0; part < 4; part++)
            terms[part] = qops_add_mul_ps(qops_add_sub_ps(terms[part], base), multiplier);
    }

    static inline ptrdiff_t qops_add_loop(
            const uint8_t* a, int a_step, uint8_t a_flip, int32_t a_zero, float a_multiplier,
            const uint8_t* b, int b_step, uint8_t b_flip, int32_t b_zero, float b_multiplier,
            ptrdiff_t count, int32_t zero, int32_t high, uint8_t* out, int signed_out,
            int ceiling_clamp) {
        const qops_add_int a_flips = qops_add_set1_epi8((char)a_flip);
        const qops_add_int b_flips = qops_add_set1_epi8((char)b_flip);
        const qops_add_float a_base = qops_add_set1_ps(8388608.0f + (float)a_zero);
        const qops_add_float b_base = qops_add_set1_ps(8388608.0f + (float)b_zero);
        const qops_add_float a_multipliers = qops_add_set1_ps(a_multiplier);
        const qops_add_float b_multipliers = qops_add_set1_ps(b_multiplier);
        const qops_add_float ceiling = qops_add_set1_ps((float)(high - zero));
        const qops_add_int zeros = qops_add_set1_epi16((int16_t)zero);
        qops_add_float a_terms[4], b_terms[4], sum;
        qops_add_int values[4], first, second;
        ptrdiff_t i;
        int part;
        a_terms[0] = a_terms[1] = a_terms[2] = a_terms[3] = qops_add_set1_ps(
            (float)((int32_t)(a[0] ^ a_flip) - a_zero) * a_multiplier);
        b_terms[0] = b_terms[1] = b_terms[2] = b_terms[3] = qops_add_set1_ps(
            (float)((int32_t)(b[0] ^ b_flip) - b_zero) * b_multiplier);
        for (i = 0; i + QOPS_ADD_STEP <= count; i += QOPS_ADD_STEP) {
            if (a_step)
                qops_add_terms(a + i, a_flips, a_base, a_multipliers, a_terms);
            if (b_step)
                qops_add_terms(b + i, b_flips, b_base, b_multipliers, b_terms);
            for (part = 0; part < 4; part++) {
                sum = qops_add_add_ps(a_terms[part], b_terms[part]);
                values[part] = qops_add_to_int(ceiling_clamp ? qops_add_min_ps(sum, ceiling)
                                                             : sum);
            }
            first = qops_add_adds_epi16(qops_add_packs_epi32(values[0], values[1]), zeros);
            second = qops_add_adds_epi16(qops_add_packs_epi32(values[2], values[3]), zeros);
            qops_add_store(out + i, signed_out ? qops_add_packs_epi16(first, second)
                                               : qops_add_packus_epi16(first, second));
        }
        return i;
    }
    #endif

    #if defined(QOPS_ADD_STEP)
    static inline ptrdiff_t qops_add_vectors(
            const uint8_t* a, int a_step, uint8_t a_flip, int32_t a_zero, float a_multiplier,
            const uint8_t* b, int b_step, uint8_t b_flip, int32_t b_zero, float b_multiplier,
            ptrdiff_t count, int32_t zero, int32_t low, int32_t high, uint8_t* out) {
        /* A loop per output signedness and clamp, each with its own steps. */
        int clamp = qops_add_needs_ceiling(a_multiplier, b_multiplier);
        if (low < 0 && clamp)
            return qops_add_loop(a, a_step, a_flip, a_zero, a_multiplier, b, b_step, b_flip,
                                 b_zero, b_multiplier, count, zero, high, out, 1, 1);
        if (low < 0)
            return qops_add_loop(a, a_step, a_flip, a_zero, a_multiplier, b, b_step, b_flip,
                                 b_zero, b_multiplier, count, zero, high, out, 1, 0);
        if (clamp)
            return qops_add_loop(a, a_step, a_flip, a_zero, a_multiplier, b, b_step, b_flip,
                                 b_zero, b_multiplier, count, zero, high, out, 0, 1);
        return qops_add_loop(a, a_step, a_flip, a_zero, a_multiplier, b, b_step, b_flip,
                             b_zero, b_multiplier, count, zero, high, out, 0, 0);
    }
    #else
    static inline ptrdiff_t qops_add_vectors(
            const uint8_t* a, int a_step, uint8_t a_flip, int32_t a_zero, float a_multiplier,
            const uint8_t* b, int b_step, uint8_t b_flip, int32_t b_zero, float b_multiplier,
            ptrdiff_t count, int32_t zero, int32_t low, int32_t high, uint8_t* out) {
        return 0;
    }
    #endif
    """
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


# -- QUANTIZED_LINEAR_AVERAGE_POOLING ------------------------------------------------------
#
# One 3-D pooling (a 2-D one has depth 1) over planes of bytes: int8 input
# arrives flipped (x ^ 0x80 = x + 128), its zero point shifted to match.
# Threads share out planes (batch x channel).  A window's sum is taken in
# two passes, as the sum of a box is: per output row, the image rows its
# windows cover are added column by column into a row of column sums, with
# zeros standing for the padding on either side; then each output's sum
# adds the window's columns of that row.  A 3 x 3 window costs six additions
# per output instead of nine, and every loop runs over a whole row without
# a branch, so it vectorizes.  The glue sends windows of at most 2**23
# elements, whose sums of bytes fit int32.

cdef extern from *:
    """
    #define QOPS_DOUBLE_ROUNDING_MAGIC 6755399441055744.0
    """
    double DOUBLE_ROUNDING_MAGIC "QOPS_DOUBLE_ROUNDING_MAGIC"


cdef struct PoolJob:
    const uint8_t* input
    uint8_t* out
    const int32_t* counts        # per output position: the elements each divisor counts
    const int32_t* inside        # per output position: the window's elements inside the input
    const int32_t* in_zero       # per channel
    const double* in_scale
    const double* out_scale
    const int32_t* out_zero
    # Per thread (slot), at slot * slot_length: a row of column sums
    # (row_length: start[2] zeros, the image's width, zeros to the last
    # window), then a row of window sums (out_size[2]).
    int32_t* rows
    Py_ssize_t row_length
    Py_ssize_t slot_length
    uint8_t flip                 # 0x80 for int8 input (read as x + 128), else 0
    bint whole                   # one window that is the whole plane (a global pooling)
    Py_ssize_t channels
    Py_ssize_t size[3]           # input depth, height, width
    Py_ssize_t out_size[3]
    Py_ssize_t window[3]
    Py_ssize_t stride[3]
    Py_ssize_t dilation[3]
    Py_ssize_t start[3]
    double low
    double high


cdef enum:
    # Outputs per pass of the float steps (a local row of int32 results,
    # then narrowed to bytes: each loop one element width).
    POOL_CHUNK = 64


cdef inline void finish_pooled(const PoolJob* job, const int32_t* sums, Py_ssize_t position,
                               Py_ssize_t count, Py_ssize_t channel, Py_ssize_t channel_step,
                               uint8_t* out) noexcept nogil:
    """out[i] <- the output byte of sums[i], i < count: output position
    position + i (or position itself for every i, with channel_step 1) and
    channel channel + i * channel_step (a global pooling's run of planes)."""
    # Every field in a local: the output is bytes, which may alias anything,
    # so fields read through the pointer would be reloaded after each store
    # and the loop would not vectorize.
    cdef const int32_t* inside = job.inside + position
    cdef const int32_t* counts = job.counts + position
    cdef const int32_t* in_zero = job.in_zero + channel
    cdef const double* in_scale = job.in_scale + channel
    cdef const double* out_scale = job.out_scale + channel
    cdef const int32_t* out_zero = job.out_zero + channel
    cdef Py_ssize_t position_step = 1 - channel_step
    cdef double low = job.low, high = job.high, value
    cdef int32_t values[POOL_CHUNK]
    cdef Py_ssize_t first = 0, i, n, at, c
    while first < count:
        n = min(<Py_ssize_t>POOL_CHUNK, count - first)
        for i in range(n):
            at = (first + i) * position_step
            c = (first + i) * channel_step
            # S * input_scale and output_scale * count are exact in double;
            # the quotient is the one rounding.
            value = (<double>(sums[first + i] - inside[at] * in_zero[c]) * in_scale[c]
                     / (out_scale[c] * <double>counts[at]))
            value = min(max(value, -1073741824.0), 1073741824.0)
            value = (value + DOUBLE_ROUNDING_MAGIC) - DOUBLE_ROUNDING_MAGIC
            values[i] = <int32_t>min(max(value + out_zero[c], low), high)
        narrow_line(values, out + first, n)
        first = first + n


# Rows of a pooling are short (56 outputs, a 7 x 7 plane's 49 bytes), often
# shorter than one vector of bytes: a plain loop over bytes would run
# element by element.  add_image_row (like narrow_line) takes blocks of a
# fixed length, which the compiler vectorizes at that length, and only the
# last few elements alone.

cdef inline void add_image_row(int32_t* columns, const uint8_t* row, Py_ssize_t width,
                               uint8_t flip) noexcept nogil:
    """columns[w] += row[w] ^ flip, w < width."""
    cdef Py_ssize_t block, j, blocks = width // 8
    for block in range(blocks):
        for j in range(8):
            columns[block * 8 + j] += row[block * 8 + j] ^ flip
    for j in range(blocks * 8, width):
        columns[j] += row[j] ^ flip


cdef extern from *:
    """
    /* The sum of a plane's bytes (^ flip): psadbw adds 8 bytes at a time
       (SSE2, in every x86-64 variant), the last few alone.  Planes of a
       global pooling are short (a 7 x 7 image's 49 bytes), too short for
       the compiler's vectorized loops, which then ran byte by byte.  Other
       CPUs take the plain loop. */
    #if defined(__SSE2__) && defined(__x86_64__)
    #include <emmintrin.h>
    static inline int32_t qops_plane_sum(const uint8_t* image, Py_ssize_t size, uint8_t flip) {
        const __m128i mask = _mm_set1_epi8((char)flip), zero = _mm_setzero_si128();
        __m128i lanes = _mm_setzero_si128();
        Py_ssize_t i = 0;
        uint64_t total;
        for (; i + 16 <= size; i += 16)
            lanes = _mm_add_epi64(lanes, _mm_sad_epu8(
                _mm_xor_si128(_mm_loadu_si128((const __m128i*)(image + i)), mask), zero));
        total = (uint64_t)_mm_cvtsi128_si64(lanes)
                + (uint64_t)_mm_cvtsi128_si64(_mm_unpackhi_epi64(lanes, lanes));
        for (; i < size; i++)
            total += (uint8_t)(image[i] ^ flip);
        return (int32_t)total;
    }
    #else
    static inline int32_t qops_plane_sum(const uint8_t* image, Py_ssize_t size, uint8_t flip) {
        uint32_t total = 0;
        Py_ssize_t i;
        for (i = 0; i < size; i++)
            total += (uint8_t)(image[i] ^ flip);
        return (int32_t)total;
    }
    #endif
    """
    int32_t plane_sum "qops_plane_sum"(const uint8_t* image, Py_ssize_t size,
                                       uint8_t flip) noexcept nogil


cdef void pool_whole_planes(void* context, Py_ssize_t first, Py_ssize_t stop,
                            int slot) noexcept nogil:
    """Planes [first, stop) of a global pooling: POOL_CHUNK planes' sums,
    then their float steps in one pass (cut where a batch member ends, so
    that the channels run on)."""
    cdef const PoolJob* job = <const PoolJob*>context
    cdef Py_ssize_t plane_size = job.size[0] * job.size[1] * job.size[2]
    cdef Py_ssize_t plane = first, count, i, channel
    cdef int32_t totals[POOL_CHUNK]
    while plane < stop:
        channel = plane % job.channels
        count = min(<Py_ssize_t>POOL_CHUNK, stop - plane, job.channels - channel)
        for i in range(count):
            totals[i] = plane_sum(job.input + (plane + i) * plane_size, plane_size, job.flip)
        finish_pooled(job, totals, 0, count, channel, 1, job.out + plane)
        plane = plane + count


cdef void pool_planes(void* context, Py_ssize_t first, Py_ssize_t stop, int slot) noexcept nogil:
    cdef const PoolJob* job = <const PoolJob*>context
    cdef Py_ssize_t plane, channel, od, oh, ow, kd, kh, kw, i_d, i_h
    cdef Py_ssize_t width = job.size[2], out_width = job.out_size[2], stride_w = job.stride[2]
    cdef Py_ssize_t dilation_w = job.dilation[2]
    cdef Py_ssize_t plane_size = job.size[0] * job.size[1] * job.size[2]
    cdef Py_ssize_t out_plane = job.out_size[0] * job.out_size[1] * job.out_size[2]
    cdef const uint8_t* image
    cdef const int32_t* window_columns
    cdef uint8_t* out
    cdef int32_t* columns = job.rows + slot * job.slot_length
    cdef int32_t* image_columns = columns + job.start[2]
    cdef int32_t* sums = columns + job.row_length
    cdef uint8_t flip = job.flip
    for plane in range(first, stop):
        channel = plane % job.channels
        image = job.input + plane * plane_size
        out = job.out + plane * out_plane
        for od in range(job.out_size[0]):
            for oh in range(job.out_size[1]):
                # The column sums of the image rows under this output row's windows.
                memset(image_columns, 0, width * sizeof(int32_t))
                for kd in range(job.window[0]):
                    i_d = od * job.stride[0] - job.start[0] + kd * job.dilation[0]
                    if i_d < 0 or i_d >= job.size[0]:
                        continue
                    for kh in range(job.window[1]):
                        i_h = oh * job.stride[1] - job.start[1] + kh * job.dilation[1]
                        if 0 <= i_h < job.size[1]:
                            add_image_row(image_columns,
                                          image + (i_d * job.size[1] + i_h) * width, width, flip)
                # Output ow's window starts at column ow * stride_w of the row
                # (whose first start[2] columns are the left padding's zeros).
                memset(sums, 0, out_width * sizeof(int32_t))
                for kw in range(job.window[2]):
                    window_columns = columns + kw * dilation_w
                    if stride_w == 1:
                        for ow in range(out_width):
                            sums[ow] += window_columns[ow]
                    else:
                        for ow in range(out_width):
                            sums[ow] += window_columns[ow * stride_w]
                finish_pooled(job, sums, (od * job.out_size[1] + oh) * out_width, out_width,
                              channel, 0, out + (od * job.out_size[1] + oh) * out_width)


def average_pooling(const uint8_t[::1] input, uint8_t flip, Py_ssize_t channels, tuple size,
                    tuple out_size,
                    tuple window, tuple stride, tuple dilation, tuple start,
                    const int32_t[::1] counts, const int32_t[::1] inside,
                    const int32_t[::1] in_zero, const double[::1] in_scale,
                    const double[::1] out_scale, const int32_t[::1] out_zero,
                    int32_t low, int32_t high, uint8_t[::1] out, int n_threads):
    """QUANTIZED_LINEAR_AVERAGE_POOLING of planes of ``size`` into ``out``
    (the glue has checked every size, offset and vector length)."""
    cdef PoolJob job
    cdef Py_ssize_t axis, planes
    cdef int threads = max(n_threads, 1)
    if out.shape[0] == 0:
        return
    if out.shape[0] * window[0] * window[1] * window[2] < PARALLEL_MIN:
        threads = 1
    # A row of column sums reaches from the left padding's first column to
    # the last column of the last window (zeros past the image's width).
    job.row_length = max(<Py_ssize_t>start[2] + <Py_ssize_t>size[2],
                         (<Py_ssize_t>out_size[2] - 1) * <Py_ssize_t>stride[2]
                         + (<Py_ssize_t>window[2] - 1) * <Py_ssize_t>dilation[2] + 1)
    # Each thread's rows start on a cache line of their own, one line apart:
    # threads that wrote into one line would take it from each other on
    # every row.
    job.slot_length = (job.row_length + <Py_ssize_t>out_size[2] + 31) // 16 * 16
    cdef int32_t[::1] rows = np.zeros(threads * job.slot_length + 16, np.int32)
    job.rows = &rows[0] + (-(<size_t>&rows[0]) // 4) % 16
    job.input = &input[0]
    job.flip = flip
    job.whole = (tuple(out_size) == (1, 1, 1) and tuple(window) == tuple(size)
                 and tuple(dilation) == (1, 1, 1) and not any(start))
    job.out = &out[0]
    job.counts = &counts[0]
    job.inside = &inside[0]
    job.in_zero = &in_zero[0]
    job.in_scale = &in_scale[0]
    job.out_scale = &out_scale[0]
    job.out_zero = &out_zero[0]
    job.channels = channels
    for axis in range(3):
        job.size[axis] = size[axis]
        job.out_size[axis] = out_size[axis]
        job.window[axis] = window[axis]
        job.stride[axis] = stride[axis]
        job.dilation[axis] = dilation[axis]
        job.start[axis] = start[axis]
    job.low = low
    job.high = high
    planes = out.shape[0] // (out_size[0] * out_size[1] * out_size[2])
    with nogil:
        run_range(pool_whole_planes if job.whole else pool_planes, &job, planes, 1, threads)
