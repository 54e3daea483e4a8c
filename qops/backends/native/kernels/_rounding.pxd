# Rounding a float32 to an integer, half to even, without a libm call
# (rintf and nearbyintf are calls on baseline x86-64): adding and
# subtracting 1.5 * 2**23 rounds a value of magnitude below 2**22 in the
# default rounding mode, in arithmetic the compiler vectorizes.  The kernels
# written in C round here (requantization, QuantizeLinear, the float16 and
# narrow-float conversions); the AVX-512 depthwise kernel rounds with
# vcvtps2dq in the default mode, the same rule.

cdef extern from "qops_rounding.h":
    float ROUNDING_MAGIC "QOPS_ROUNDING_MAGIC"
    double DOUBLE_ROUNDING_MAGIC "QOPS_DOUBLE_ROUNDING_MAGIC"


cdef inline float round_half_even(float value) noexcept nogil:
    """Half to even, for |value| < 2**22."""
    return (value + ROUNDING_MAGIC) - ROUNDING_MAGIC
