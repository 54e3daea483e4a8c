"""The reference implementations: :mod:`qops.reference`'s NumPy statements
at the dispatch point, below every compiled one, taking every call.

They are also where the integer operators' output type is enforced: their
exact sums are int64, DirectML's output INT32, and a sum int32 cannot hold
is refused (ONNX runtimes wrap it) before anything is written.
"""

from __future__ import annotations

import numpy as np

from qops import reference
from qops.errors import fail
from qops.registry import dtypes as _dtypes

__all__ = ["register_all"]

_SPATIAL = ("strides", "dilations", "start_padding", "end_padding", "group_count")
_INT32 = np.iinfo(np.int32)


def _convolution(call, out, n_threads):
    result = reference.quantized_linear_convolution(
        **call.arrays, **{k: call.attributes[k] for k in _SPATIAL},
        output_dtype=call.output_dtype)
    out[...] = result.reshape(out.shape)  # a 1-D convolution ran with height 1


def _matmul(call, out, n_threads):
    out[...] = reference.quantized_linear_matrix_multiply(**call.arrays,
                                                          output_dtype=call.output_dtype)


def _dequantize(call, out, n_threads):
    out[...] = reference.dequantize_linear(
        **call.arrays, axis=call.attributes["axis"], block_size=call.attributes["block_size"],
        output_dtype=call.output_dtype)


def _quantize(call, out, n_threads):
    precision = call.attributes["precision"]
    out[...] = reference.quantize_linear(
        **call.arrays, axis=call.attributes["axis"], block_size=call.attributes["block_size"],
        saturate=call.attributes["saturate"], output_dtype=call.output_dtype,
        precision=_dtypes.to_numpy(precision) if precision else None)


def as_int32_output(call, sums, out):
    """Write exact sums into an int32 ``out``, or refuse them if one does not fit."""
    if sums.size and (sums.min() < _INT32.min or sums.max() > _INT32.max):
        fail(call.operator, "an exact sum is outside int32, the output type; it would wrap")
    out[...] = sums.reshape(out.shape)  # a 1-D convolution ran with height 1


def _convolution_integer(call, out, n_threads):
    as_int32_output(call, reference.convolution_integer(
        **call.arrays, **{k: call.attributes[k] for k in _SPATIAL}), out)


def _matmul_integer(call, out, n_threads):
    as_int32_output(call, reference.matrix_multiply_integer(**call.arrays), out)


def integer_to_float(call, out, n_threads):
    # The operands' values may be new since the plan's checks: check again.
    arrays = call.arrays
    reason = reference.inexact_sums(arrays["a"], arrays["a_zero_point"], arrays["b"],
                                    arrays["b_zero_point"])
    if reason:
        fail(call.operator, reason, slot="b")
    result = reference.matrix_multiply_integer_to_float(**call.arrays,
                                                        output_dtype=call.output_dtype)
    out[...] = result.reshape(out.shape)  # parameters of a higher rank than the output's


def _average_pooling(call, out, n_threads):
    result = reference.quantized_linear_average_pooling(
        **call.arrays, **{k: v for k, v in call.attributes.items() if k != "output_dtype"},
        output_dtype=call.output_dtype)
    out[...] = result.reshape(out.shape)  # a 2-D pooling ran with depth 1


def _element_wise_quantize(call, out, n_threads):
    arrays = call.arrays
    out[...] = reference.element_wise_quantize_linear(arrays["input"], arrays["scale"],
                                                      arrays["zero_point"], call.output_dtype)


def _element_wise_dequantize(call, out, n_threads):
    arrays = call.arrays
    out[...] = reference.element_wise_dequantize_linear(arrays["input"], arrays["scale"],
                                                        arrays["zero_point"])


def _quantize_blocks(call, out, n_threads):
    arrays = call.arrays
    out[...] = reference.quantize_blocks(arrays["input"], arrays["scale"], arrays["zero_point"],
                                         call.output_dtype)


def _dequantize_blocks(call, out, n_threads):
    arrays = call.arrays
    out[...] = reference.dequantize_blocks(arrays["input"], arrays["scale"], arrays["zero_point"],
                                           call.output_dtype)


def _dynamic_quantize(call, out, n_threads):
    out[...] = reference.dynamic_quantize_linear(call.arrays["input"], call.output_dtype)[0]


def _add(call, out, n_threads):
    out[...] = reference.element_wise_quantized_linear_add(**call.arrays,
                                                           output_dtype=call.output_dtype)


def _matmul_n_bits(call, out, n_threads):
    arrays, attributes = call.arrays, call.attributes
    out[...] = reference.matmul_n_bits(
        arrays["a"], arrays["b"], arrays["scales"], arrays["zero_points"], bias=arrays["bias"],
        **{name: attributes[name] for name in ("k", "n", "bits", "block_size", "accuracy_level")})


def register_all(register):
    """Put every operator's reference at the dispatch point, priority 0."""
    for operator, run in (("QUANTIZED_LINEAR_CONVOLUTION", _convolution),
                          ("QUANTIZED_LINEAR_MATRIX_MULTIPLY", _matmul),
                          ("CONVOLUTION_INTEGER", _convolution_integer),
                          ("MATRIX_MULTIPLY_INTEGER", _matmul_integer),
                          ("MATRIX_MULTIPLY_INTEGER_TO_FLOAT", integer_to_float),
                          ("QUANTIZED_LINEAR_AVERAGE_POOLING", _average_pooling),
                          ("ELEMENT_WISE_QUANTIZE_LINEAR", _element_wise_quantize),
                          ("ELEMENT_WISE_DEQUANTIZE_LINEAR", _element_wise_dequantize),
                          ("QUANTIZE", _quantize_blocks),
                          ("DEQUANTIZE", _dequantize_blocks),
                          ("DYNAMIC_QUANTIZE_LINEAR", _dynamic_quantize),
                          ("ELEMENT_WISE_QUANTIZED_LINEAR_ADD", _add),
                          ("DequantizeLinear", _dequantize),
                          ("QuantizeLinear", _quantize),
                          ("MatMulNBits", _matmul_n_bits)):
        register(operator, "reference", run, priority=0)
