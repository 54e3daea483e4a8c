# cython: language_level=3
"""QuantizeLinear and DequantizeLinear kernels, loops vectorized for AVX-512 (built with the AVX-512 VNNI variant's flags)."""

include "_quantize.pxi"
