"""qops: quantized linear operators with exact semantics.

DirectML's ``QUANTIZED_LINEAR_CONVOLUTION`` and
``QUANTIZED_LINEAR_MATRIX_MULTIPLY`` (and the integer operators
``CONVOLUTION_INTEGER``, ``MATRIX_MULTIPLY_INTEGER`` and
``DYNAMIC_QUANTIZE_LINEAR``) and ONNX's ``QuantizeLinear`` and
``DequantizeLinear`` on NumPy arrays, validated against DirectML feature
levels and ONNX opsets by a declarative registry (:mod:`qops.registry`).
"""

__version__ = "0.1.0"

from qops import registry
from qops.config import show_config
from qops.threads import get_num_threads, set_num_threads
from qops.errors import DTypeUnsupportedError, DTypeValidationError, QopsError, UnsupportedError, ValidationError
from qops.ops.packing import Packed4Bit, pack_4bit, unpack_4bit
from qops.ops.validation import TensorDesc
from qops.ops.api import Validated, convolution_integer, dynamic_quantize_linear, matrix_multiply_integer, dequantize_linear, quantize_linear, quantized_linear_convolution, quantized_linear_matrix_multiply, validate
from qops.ops.compiled import CompiledOperator, compile
from qops.registry.schema import FeatureLevel, Opset
from qops import reference

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
    "pack_4bit",
    "unpack_4bit",
    "Packed4Bit",
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
