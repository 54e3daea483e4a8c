# A vector kept in a register where it is used: an empty asm that takes the
# value in a vector register and gives it back there.  Without it the
# compiler folds a panel vector's load into each multiply that reads it,
# and a pass of few rows (_short_rows.pxi) issues a load per multiply-add:
# three rows of AVX-512 VNNI issued 15 loads per 12 vpdpbusd, more than the
# two load ports take while the multipliers do 12.

cdef extern from "qops_registers.h":
    void in_register "qops_in_register"(...) noexcept nogil
