# The conversions between float32 and the narrow types (float16, bfloat16,
# float8, float4, float6) and to integers, each rounding to nearest even.
# Needs _quantize.pxi's kinds.

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
