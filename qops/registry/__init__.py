"""The operator registry: what each operator accepts, per feature level or opset.

The tables are data (:mod:`qops.registry.directml`, :mod:`qops.registry.onnx`,
:mod:`qops.registry.contrib` for onnxruntime's ``com.microsoft`` operators)
built from the schema types of :mod:`qops.registry.schema`.  Validation,
dispatch, the command line and the documentation all read them; nothing else
restates them.

>>> from qops import registry
>>> [op.name for op in registry.operators()]  # doctest: +NORMALIZE_WHITESPACE
['QUANTIZED_LINEAR_CONVOLUTION', 'QUANTIZED_LINEAR_MATRIX_MULTIPLY', 'CONVOLUTION_INTEGER',
 'MATRIX_MULTIPLY_INTEGER', 'DYNAMIC_QUANTIZE_LINEAR', 'ELEMENT_WISE_QUANTIZED_LINEAR_ADD',
 'MATRIX_MULTIPLY_INTEGER_TO_FLOAT', 'QUANTIZED_LINEAR_AVERAGE_POOLING',
 'ELEMENT_WISE_QUANTIZE_LINEAR', 'ELEMENT_WISE_DEQUANTIZE_LINEAR', 'QUANTIZE', 'DEQUANTIZE',
 'DequantizeLinear', 'QuantizeLinear', 'MatMulNBits']
>>> registry.get("QUANTIZED_LINEAR_MATRIX_MULTIPLY").introduced
<FeatureLevel.FL_2_1: (2, 1)>
"""

from __future__ import annotations

from qops.registry import contrib, directml, onnx
from qops.registry.schema import (
    DATA_TYPES,
    Attribute,
    Constraint,
    ConstraintKind,
    FeatureLevel,
    Operator,
    SOURCES,
    Opset,
    ShapePattern,
    Slot,
    SlotKind,
    TensorSupport,
    VersionSupport,
)

__all__ = [
    "get",
    "operators",
    "DATA_TYPES",
    "Attribute",
    "Constraint",
    "ConstraintKind",
    "FeatureLevel",
    "Operator",
    "Opset",
    "SOURCES",
    "ShapePattern",
    "Slot",
    "SlotKind",
    "TensorSupport",
    "VersionSupport",
]

_OPERATORS = directml.OPERATORS + onnx.OPERATORS + contrib.OPERATORS


def _index():
    index = {}
    for operator in _OPERATORS:
        for key in {operator.name, operator.name.lower(), operator.function}:
            if key in index and index[key] is not operator:
                raise ValueError(f"two operators answer to {key!r}")
            index[key] = operator
    return index


_BY_NAME = _index()


def operators() -> tuple:
    """Every operator the registry knows: DirectML's, ONNX's, then onnxruntime's, in table order."""
    return _OPERATORS


def get(name: str) -> Operator:
    """An operator's schema by registry name (``"QuantizeLinear"``) or function name.

    Raises
    ------
    KeyError
        With the known names, when ``name`` is not one of them.
    """
    try:
        return _BY_NAME[name]
    except (KeyError, TypeError):
        pass
    if isinstance(name, str) and name.lower() in _BY_NAME:
        return _BY_NAME[name.lower()]
    known = ", ".join(op.name for op in _OPERATORS)
    raise KeyError(f"unknown operator {name!r}; known operators: {known}")


#: The newest DirectML feature level and ONNX opset the tables describe.
NEWEST_FEATURE_LEVEL = max(FeatureLevel)
NEWEST_OPSET = Opset(max(onnx.OPSETS))
