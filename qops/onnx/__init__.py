"""ONNX's quantized operators on qops (needs the ``onnx`` extra).

* :func:`run_node` runs one ``NodeProto`` of QLinearConv, QLinearMatMul,
  QuantizeLinear, DequantizeLinear, ConvInteger, MatMulInteger or
  DynamicQuantizeLinear on NumPy inputs, with ONNX's semantics, and of
  onnxruntime's ``com.microsoft`` QLinearAdd (the residual add its quantizer
  writes into CNNs), MatMulIntegerToFloat (its dynamically quantized
  matrix multiply), QLinearAveragePool and QLinearGlobalAveragePool.
* :class:`InferenceSession` runs a whole quantized model (QDQ groups fused
  onto qops' integer operators, onnxruntime's quantized nodes on qops,
  everything else on ``onnx.reference``), with onnxruntime's interface.
* :func:`reference_ops` returns operator classes for
  ``onnx.reference.ReferenceEvaluator(model, new_ops=...)``, so that a whole
  quantized model runs in the reference evaluator with qops doing the
  quantized nodes.

Examples
--------
>>> import numpy as np
>>> from onnx import helper
>>> import qops.onnx
>>> node = helper.make_node("QuantizeLinear", ["x", "scale", "zero"], ["y"])
>>> x = np.array([-1.0, 0.0, 0.26, 1.0], np.float32)
>>> qops.onnx.run_node(node, [x, np.float32(0.5), np.uint8(128)])
[array([126, 128, 129, 130], dtype=uint8)]
"""

from __future__ import annotations

import numpy as np

from qops.errors import UnsupportedError, ValidationError
from qops.onnx._graph import operator_version
from qops.onnx._nodes import ADAPTERS, CONTRIB_ADAPTERS, CONTRIB_DOMAIN, NEWEST_OPSET

__all__ = ["InferenceSession", "NodeArg", "run_node", "reference_ops", "supported_operators",
           "operator_version", "NEWEST_OPSET"]


def __getattr__(name):
    # The session module imports onnx's evaluator: loaded when first asked for.
    if name in ("InferenceSession", "NodeArg", "Step", "ModelError", "UnsupportedNodeError",
                "ModelRunError"):
        from qops.onnx import session

        return getattr(session, name)
    raise AttributeError(f"module 'qops.onnx' has no attribute {name!r}")


def supported_operators(domain=""):
    """The operator types :func:`run_node` runs in ``domain``: ONNX's
    default domain (``""``), or onnxruntime's ``"com.microsoft"``."""
    if domain in ("", "ai.onnx"):
        return tuple(ADAPTERS)
    if domain == CONTRIB_DOMAIN:
        return tuple(CONTRIB_ADAPTERS)
    return ()


def _attributes(node):
    from onnx import helper

    values = {}
    for attribute in node.attribute:
        value = helper.get_attribute_value(attribute)
        values[attribute.name] = value.decode() if isinstance(value, bytes) else value
    return values


def _as_array(value):
    """An input as NumPy: ``TensorProto``s (packed 4-bit ones too) are unpacked."""
    if value is None:
        return None
    from onnx import TensorProto, numpy_helper

    if isinstance(value, TensorProto):
        return numpy_helper.to_array(value)
    return value


def _inputs(node, inputs):
    names = list(node.input)
    if isinstance(inputs, dict):
        values = [inputs.get(name) if name else None for name in names]
    else:
        values = list(inputs)
        if len(values) > len(names):
            raise ValidationError(f"{node.op_type}: {len(values)} inputs given; the node has "
                                  f"{len(names)}", given=len(values))
        values += [None] * (len(names) - len(values))
        values = [value if name else None for name, value in zip(names, values)]
    return [_as_array(value) for value in values]


def run_node(node, inputs, opset=None):
    """Run one ONNX node on NumPy inputs.

    Parameters
    ----------
    node : onnx.NodeProto
        A node whose ``op_type`` is one of :func:`supported_operators` of its
        domain (ONNX's default, or ``com.microsoft``).
    inputs : sequence or dict
        The node's inputs in order (``None`` for an omitted optional one), or
        a mapping from the node's input names.  Narrow types (int4, float8,
        float4) come as ml_dtypes arrays or as ``TensorProto`` objects, packed
        4-bit ones included.
    opset : int, optional
        The default domain's opset (default: the newest qops implements).

    Returns
    -------
    list of ndarray
        The node's outputs, as ONNX defines them.

    Raises
    ------
    qops.ValidationError
        For inputs or attributes the operator (at that opset) does not accept.
    """
    if node.domain == CONTRIB_DOMAIN:
        adapter = CONTRIB_ADAPTERS.get(node.op_type)
        if adapter is None:
            raise UnsupportedError(
                f"{node.op_type} ({CONTRIB_DOMAIN}) is not an operator qops runs; of that domain "
                f"it runs {', '.join(CONTRIB_ADAPTERS)}", given=node.op_type)
        return adapter(_inputs(node, inputs), _attributes(node), 1)
    if node.domain not in ("", "ai.onnx"):
        raise UnsupportedError(f"{node.op_type}: domain {node.domain!r} is neither ONNX's "
                               f"default nor {CONTRIB_DOMAIN!r}", given=node.domain)
    adapter = ADAPTERS.get(node.op_type)
    if adapter is None:
        raise UnsupportedError(f"{node.op_type} is not an operator qops runs; it runs "
                               f"{', '.join(ADAPTERS)}", given=node.op_type)
    version = operator_version(node.op_type, NEWEST_OPSET if opset is None else int(opset))
    values, attributes = _inputs(node, inputs), _attributes(node)
    if version <= NEWEST_OPSET:
        return adapter(values, attributes, version)
    # A newer version only adds types (the 6-bit floats of opset 28); everything
    # qops implements runs as at its newest opset.
    try:
        return adapter(values, attributes, NEWEST_OPSET)
    except ValidationError as error:
        raise UnsupportedError(
            f"{error} (the model's opset {opset} has {node.op_type} version {version}; qops "
            f"implements it up to version {NEWEST_OPSET}, whose types are the ones above)",
            given=node.op_type) from None


def reference_ops():
    """Operator classes for ``onnx.reference.ReferenceEvaluator(..., new_ops=...)``.

    Each class runs its node through :func:`run_node` at the model's opset.

    Returns
    -------
    list of type
        One ``onnx.reference.op_run.OpRun`` subclass per supported operator.
    """
    from qops.onnx._reference import operator_classes

    return operator_classes(run_node)
