"""qops: quantized linear operators with exact semantics.

DirectML's ``QUANTIZED_LINEAR_CONVOLUTION`` and
``QUANTIZED_LINEAR_MATRIX_MULTIPLY`` (and the integer operators
``CONVOLUTION_INTEGER``, ``MATRIX_MULTIPLY_INTEGER`` and
``DYNAMIC_QUANTIZE_LINEAR``) and ONNX's ``QuantizeLinear`` and
``DequantizeLinear`` on NumPy arrays, validated against DirectML feature
levels and ONNX opsets by a declarative registry (:mod:`qops.registry`).
"""

from qops import reference, registry, threads
from qops.config import show_config
from qops.errors import (
    DTypeUnsupportedError,
    DTypeValidationError,
    QopsError,
    UnsupportedError,
    ValidationError,
)
from qops.ops.compiled import CompiledOperator, compile
from qops.ops.convolution import quantized_linear_convolution
from qops.ops.dml_quantize import dequantize, quantize
from qops.ops.element_wise_quantize import (
    element_wise_dequantize_linear,
    element_wise_quantize_linear,
)
from qops.ops.elementwise import element_wise_quantized_linear_add
from qops.ops.integer import convolution_integer, dynamic_quantize_linear, matrix_multiply_integer
from qops.ops.integer_to_float import matrix_multiply_integer_to_float
from qops.ops.matmul import quantized_linear_matrix_multiply
from qops.ops.matmul_n_bits import matmul_n_bits
from qops.ops.pooling import quantized_linear_average_pooling
from qops.packing import (
    Packed2Bit,
    Packed4Bit,
    Packed6Bit,
    pack_2bit,
    pack_4bit,
    pack_6bit,
    unpack_2bit,
    unpack_4bit,
    unpack_6bit,
)
from qops.ops.quantize import dequantize_linear, quantize_linear
from qops.ops.dry_run import Validated, validate
from qops.ops.validation import TensorDesc
from qops.registry.schema import FeatureLevel, Opset
from qops.threads import get_num_threads, set_num_threads
from qops.version import __version__

__all__ = [
    "__version__",
    "registry",
    "reference",
    "quantized_linear_convolution",
    "quantized_linear_matrix_multiply",
    "dequantize_linear",
    "quantize_linear",
    "convolution_integer",
    "matrix_multiply_integer",
    "dynamic_quantize_linear",
    "element_wise_quantized_linear_add",
    "matrix_multiply_integer_to_float",
    "quantized_linear_average_pooling",
    "element_wise_quantize_linear",
    "element_wise_dequantize_linear",
    "quantize",
    "dequantize",
    "matmul_n_bits",
    "pack_4bit",
    "unpack_4bit",
    "Packed4Bit",
    "pack_2bit",
    "unpack_2bit",
    "Packed2Bit",
    "pack_6bit",
    "unpack_6bit",
    "Packed6Bit",
    "validate",
    "Validated",
    "compile",
    "CompiledOperator",
    "TensorDesc",
    "FeatureLevel",
    "Opset",
    "QopsError",
    "ValidationError",
    "UnsupportedError",
    "DTypeValidationError",
    "DTypeUnsupportedError",
    "show_config",
    "get_num_threads",
    "set_num_threads",
]
