# cython: language_level=3
"""QuantizeLinear and DequantizeLinear kernels, loops vectorized for AVX2."""

include "_quantize.pxi"
