"""Readable NumPy statements of each operator.

These functions are the definition the fast kernels are tested against.
They take arrays already normalized and validated by :mod:`qops.ops`
(DirectML-shaped scales and zero points, zero points possibly ``None``) and
compute the contract's numerics step by step; they never validate.  Call the
public functions (:func:`qops.quantized_linear_convolution` ...) for checked
arguments.
"""

from qops.reference._requantize import requantization_multiplier, requantize
from qops.reference.convolution import quantized_linear_convolution
from qops.reference.elementwise import add_multipliers, element_wise_quantized_linear_add
from qops.reference.integer import (
    convolution_integer,
    dynamic_quantize_linear,
    dynamic_quantize_parameters,
    dynamic_quantize_parameters_of_range,
    inexact_sums,
    integer_to_float_multipliers,
    matrix_multiply_integer,
    matrix_multiply_integer_to_float,
    sum_bound,
)
from qops.reference.matmul import quantized_linear_matrix_multiply
from qops.reference.n_bits import matmul_n_bits
from qops.reference.pooling import quantized_linear_average_pooling
from qops.reference.quantize import (
    dequantize_blocks,
    dequantize_linear,
    element_wise_dequantize_linear,
    element_wise_quantize_linear,
    expand_blocks,
    quantize_blocks,
    quantize_linear,
)

__all__ = [
    "quantized_linear_convolution",
    "quantized_linear_matrix_multiply",
    "matmul_n_bits",
    "dequantize_linear",
    "quantize_linear",
    "convolution_integer",
    "matrix_multiply_integer",
    "matrix_multiply_integer_to_float",
    "integer_to_float_multipliers",
    "inexact_sums",
    "quantized_linear_average_pooling",
    "element_wise_quantize_linear",
    "element_wise_dequantize_linear",
    "quantize_blocks",
    "dequantize_blocks",
    "expand_blocks",
    "sum_bound",
    "dynamic_quantize_linear",
    "dynamic_quantize_parameters",
    "dynamic_quantize_parameters_of_range",
    "element_wise_quantized_linear_add",
    "add_multipliers",
    "requantize",
    "requantization_multiplier",
]
