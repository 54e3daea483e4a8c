"""ONNX's own backend node test cases for QuantizeLinear and DequantizeLinear,
regenerated from the installed onnx with
``onnx.backend.test.case.node.collect_testcases`` and run through qops.

Each case is one node with its inputs and expected output (written by ONNX's
authors) in a model that declares its opset; qops runs it at that opset,
through the direct functions, through ``qops.onnx.run_node`` and through an
``InferenceSession`` of the case's model, and must give the expected bits
each way.
"""

import functools
import warnings

import numpy as np
import pytest
from conftest import assert_bits_equal
from onnx import helper, numpy_helper

import qops
import qops.onnx
from qops.onnx import InferenceSession

OPERATORS = ("QuantizeLinear", "DequantizeLinear")


@functools.lru_cache(maxsize=None)
def _cases():
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the generators of other operators' cases warn
        cases = collect_testcases()
    found = {}
    for case in cases:
        nodes = case.model.graph.node
        if len(nodes) == 1 and nodes[0].op_type in OPERATORS:
            found[case.name] = case
    return found


def _case_names():
    return sorted(_cases())


def _array(value):
    """A data set entry as an array (TensorProto for the ml_dtypes types)."""
    if isinstance(value, np.ndarray) or np.isscalar(value) or isinstance(value, np.generic):
        return np.asarray(value)
    return numpy_helper.to_array(value)


def _qops_dtype(array):
    """The registry's name of the array's type (None for one it lacks)."""
    return qops.registry.dtypes.name_of(array.dtype)


def test_the_cases_were_found():
    names = _case_names()
    assert sum(n.startswith("test_quantizelinear") for n in names) >= 10
    assert sum(n.startswith("test_dequantizelinear") for n in names) >= 10


def _declared_opset(model):
    return next(entry.version for entry in model.opset_import if entry.domain in ("", "ai.onnx"))


@pytest.mark.parametrize("name", _case_names())
@pytest.mark.parametrize("n_threads", [1, 2])
def test_onnx_backend_case(name, n_threads):
    case = _cases()[name]
    opset = _declared_opset(case.model)
    node = case.model.graph.node[0]
    attributes = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    (inputs, outputs), = case.data_sets[:1]
    arrays = [_array(v) for v in inputs]
    expected = _array(outputs[0])
    assert all(_qops_dtype(a) is not None for a in arrays + [expected]), (
        f"{name}: a type the registry lacks ({', '.join(str(a.dtype) for a in arrays)})")
    given = dict(zip(node.input, arrays))
    slots = [given.get(node.input[i]) if i < len(node.input) else None for i in range(3)]
    # Given as the case gives them: some cases pair a 0-d scale with a
    # one-element 1-D zero point, which qops takes as per tensor, as ONNX does.
    kwargs = {}
    if "axis" in attributes:
        kwargs["axis"] = attributes["axis"]
    if "block_size" in attributes:
        kwargs["block_size"] = attributes["block_size"]
    if node.op_type == "QuantizeLinear":
        if "saturate" in attributes:
            kwargs["saturate"] = bool(attributes["saturate"])
        if "output_dtype" in attributes:
            kwargs["output_dtype"] = helper.tensor_dtype_to_np_dtype(attributes["output_dtype"])
        if "precision" in attributes:
            kwargs["precision"] = helper.tensor_dtype_to_np_dtype(attributes["precision"])
        got = qops.quantize_linear(*slots, opset=opset, n_threads=n_threads, **kwargs)
    else:
        if "output_dtype" in attributes:
            kwargs["output_dtype"] = helper.tensor_dtype_to_np_dtype(attributes["output_dtype"])
        got = qops.dequantize_linear(*slots, opset=opset, n_threads=n_threads, **kwargs)
    assert_bits_equal(got, expected, f"{name} at opset {opset}")


@pytest.mark.parametrize("name", _case_names())
def test_onnx_backend_case_through_qops_onnx(name):
    case = _cases()[name]
    opset = _declared_opset(case.model)
    node = case.model.graph.node[0]
    (inputs, outputs), = case.data_sets[:1]
    arrays = [_array(v) for v in inputs]
    expected = _array(outputs[0])
    (got,) = qops.onnx.run_node(node, arrays, opset=opset)
    assert_bits_equal(got, expected, f"{name} through run_node at opset {opset}")
    session = InferenceSession(case.model)
    feeds = {value.name: array for value, array in zip(case.model.graph.input, arrays)}
    (got,) = session.run(None, feeds)
    assert_bits_equal(got, expected, f"{name} through a session at opset {opset}")
