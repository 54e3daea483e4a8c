# The requantization rule, once, for convolution and matrix multiply:
#     y = saturate(round_half_even(float32(float32(acc) * multiplier)) + zero_point)
# The multiplier, float32(float32(scale_a * scale_b) / output_scale), comes
# from qops.reference.requantization_multiplier (computed once per call, not
# per element).  The build never uses -ffast-math, so each float operation
# below rounds once in float32, as the NumPy reference does.

from libc.stdint cimport int32_t, int64_t

cdef extern from "<math.h>" nogil:
    float nearbyintf(float x)  # rounds half to even in the default rounding mode


cdef inline int32_t requantize(int64_t accumulator, float multiplier, int32_t zero_point,
                               int32_t low, int32_t high) noexcept nogil:
    cdef float value = (<float>accumulator) * multiplier
    cdef float rounded = nearbyintf(value)
    # Compare before converting: the rounded value may exceed the int32 range.
    if rounded <= <float>(low - zero_point):
        return low
    if rounded >= <float>(high - zero_point):
        return high
    return (<int32_t>rounded) + zero_point
