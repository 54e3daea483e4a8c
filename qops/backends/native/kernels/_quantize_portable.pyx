# cython: language_level=3
"""QuantizeLinear and DequantizeLinear kernels, portable C: loops the compiler vectorizes for the baseline instruction set."""

include "_quantize.pxi"
