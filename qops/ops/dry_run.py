"""``qops.validate``: a dry run of a call, every check and no kernel (the
checks themselves, which every call runs, are :mod:`qops.ops.validation`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qops import registry
from qops.errors import DTypeValidationError, ValidationError
from qops.ops import (
    convolution,
    dml_quantize,
    element_wise_quantize,
    elementwise,
    integer,
    integer_to_float,
    matmul,
    matmul_n_bits,
    pooling,
    quantize,
)
from qops.ops.validation import TensorDesc, fail, shape_text
from qops.registry import dtypes as _dtypes

__all__ = ["validate", "Validated", "PREPARE"]

#: Each operator's validation (its front end's ``prepare``), by registry name.
PREPARE = {
    "QUANTIZED_LINEAR_CONVOLUTION": convolution.prepare,
    "QUANTIZED_LINEAR_MATRIX_MULTIPLY": matmul.prepare,
    "DequantizeLinear": quantize.prepare_dequantize,
    "QuantizeLinear": quantize.prepare_quantize,
    "CONVOLUTION_INTEGER": integer.prepare_convolution_integer,
    "MATRIX_MULTIPLY_INTEGER": integer.prepare_matrix_multiply_integer,
    "DYNAMIC_QUANTIZE_LINEAR": integer.prepare_dynamic_quantize,
    "ELEMENT_WISE_QUANTIZED_LINEAR_ADD": elementwise.prepare_add,
    "MATRIX_MULTIPLY_INTEGER_TO_FLOAT": integer_to_float.prepare,
    "QUANTIZED_LINEAR_AVERAGE_POOLING": pooling.prepare,
    "ELEMENT_WISE_QUANTIZE_LINEAR": element_wise_quantize.prepare_quantize,
    "ELEMENT_WISE_DEQUANTIZE_LINEAR": element_wise_quantize.prepare_dequantize,
    "QUANTIZE": dml_quantize.prepare_quantize,
    "DEQUANTIZE": dml_quantize.prepare_dequantize,
    "MatMulNBits": matmul_n_bits.prepare,
}


@dataclass(frozen=True)
class Validated:
    """What :func:`validate` found: the version checked and the output it implies."""

    operator: str
    version: object
    output_shape: tuple
    output_dtype: str
    granularity: dict

    def __str__(self):
        granularity = ", ".join(f"{k} {v}" for k, v in self.granularity.items())
        text = (f"{self.operator} at {self.version}: valid; output {self.output_dtype} "
                f"{shape_text(self.output_shape)}")
        return text + (f" ({granularity})" if granularity else "")


def validate(name, *, feature_level=None, opset=None, **slots):
    """Check a call without running it.

    Parameters
    ----------
    name : str
        Registry name (``"QUANTIZED_LINEAR_CONVOLUTION"``) or function name.
    feature_level, opset
        The DirectML feature level or ONNX opset to check against (default: newest).
    **slots
        Tensor slots as arrays or :class:`qops.TensorDesc`, numbers for the
        scalar shorthand, attributes by name, and optionally the output slot
        (``output`` / ``y``) to check its description too.

    Returns
    -------
    Validated
        The output shape and type the call would produce.

    Raises
    ------
    qops.ValidationError
        The same error (and message) the operator function would raise.
    """
    try:
        op = registry.get(name)
    except KeyError as error:
        raise ValidationError(str(error.args[0]), given=name) from None
    slot_names = {s.name for s in op.inputs}
    output_name = op.output.name
    given_output = slots.pop(output_name, None)
    tensors = {k: v for k, v in slots.items() if k in slot_names}
    attributes = {k: v for k, v in slots.items() if k not in slot_names}
    if op.source == "DirectML" and opset is not None:
        fail(op, f"opset={opset!r} given; a DirectML operator takes feature_level", slot="opset")
    if op.source != "DirectML" and feature_level is not None:
        fail(op, f"feature_level={feature_level!r} given; an {op.source} operator takes opset",
             slot="feature_level")
    call = PREPARE[op.name](tensors, attributes,
                            feature_level if op.source == "DirectML" else opset)
    if given_output is not None:
        _check_output(op, given_output, call)
    return Validated(op.name, call.version, tuple(call.output_shape),
                     _dtypes.label(call.output_dtype), dict(call.granularity))


def _check_output(op, given, call):
    name = op.output.name
    desc = given if isinstance(given, TensorDesc) else np.asarray(given)
    shape = tuple(desc.sizes) if isinstance(desc, TensorDesc) else tuple(desc.shape)
    try:
        dtype = _dtypes.to_numpy(_dtypes.parse_dtype(desc.dtype))
    except ValueError:
        dtype = None
    if dtype != call.output_dtype:
        fail(op, f"{name} has dtype {desc.dtype}; the call produces {_dtypes.label(call.output_dtype)}",
             DTypeValidationError, slot=name, given=str(desc.dtype))
    if shape != tuple(call.output_shape):
        fail(op, f"{name} has shape {shape_text(shape)}; the call produces "
                 f"{shape_text(call.output_shape)}", slot=name, given=shape)
