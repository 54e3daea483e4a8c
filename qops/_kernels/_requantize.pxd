# The requantization rule, once, for convolution and matrix multiply:
#     y = saturate(round_half_even(float32(float32(acc) * multiplier)) + zero_point)
# The multiplier, float32(float32(scale_a * scale_b) / output_scale), comes
# from qops.reference.requantization_multiplier (computed once per call, not
# per element).  The build never uses -ffast-math, so each float operation
# below rounds once in float32, as the NumPy reference does.

from libc.stdint cimport int32_t, int64_t


cdef inline int32_t requantize(int64_t accumulator, float multiplier, int32_t zero_point,
                               int32_t low, int32_t high) noexcept nogil:
    cdef float value = (<float>accumulator) * multiplier
    # 1.5 * 2**23: adding and subtracting it rounds a float32 of magnitude
    # below 2**22 to an integer, half to even, in the default rounding mode,
    # without a libm call (rintf and nearbyintf are calls on baseline x86-64).
    cdef float rounding_magic = 12582912.0
    # Clamping to the integers [low - zp, high - zp] first gives the same
    # result as rounding first, and keeps |value| under 2**17 for the trick.
    cdef float floor_value = <float>(low - zero_point)
    cdef float ceiling_value = <float>(high - zero_point)
    if value < floor_value:
        value = floor_value
    if value > ceiling_value:
        value = ceiling_value
    return (<int32_t>((value + rounding_magic) - rounding_magic)) + zero_point
