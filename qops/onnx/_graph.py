"""An ONNX model read once into what a session needs: its nodes in an order
that runs them, its constants as arrays, who produces and who consumes each
value, and the element type of every value that can be known before a run.

Everything wrong with the model's structure is a :class:`ModelError`
(a :class:`qops.ValidationError`) naming the node or value at fault: a
session refuses a malformed model when it is built, never in the middle of
a run.
"""

from __future__ import annotations

import heapq

import numpy as np

from qops.errors import UnsupportedError, ValidationError

DEFAULT_DOMAIN = ""


class ModelError(ValidationError):
    """A model qops cannot read or run, found when the session is built.

    Attributes
    ----------
    node : str or None
        The name of the node at fault (its output's name if it has none).
    op_type, domain : str or None
        The node's type and domain.
    """

    def __init__(self, message, *, node=None, op_type=None, domain=None, **fields):
        super().__init__(message, **fields)
        self.node = node
        self.op_type = op_type
        self.domain = domain


class UnsupportedNodeError(ModelError, UnsupportedError):
    """A node of a type (or with attributes) that neither qops nor
    ``onnx.reference`` runs."""


def node_label(node):
    """How errors name a node: its name, else its first output's name."""
    if node.name:
        return node.name
    outputs = [name for name in node.output if name]
    return f"(unnamed, output {outputs[0]!r})" if outputs else "(unnamed)"


def node_error(node, message, cls=ModelError):
    """A ``cls`` naming the node, its type and its domain."""
    domain = node.domain or "ai.onnx"
    return cls(f"node {node_label(node)} ({node.op_type}, domain {domain}): {message}",
               node=node_label(node), op_type=node.op_type, domain=domain)


def operator_version(op_type, opset):
    """The version of ``op_type`` in effect at ``opset`` of the default domain
    (the newest version introduced at or before ``opset``)."""
    from onnx import defs

    try:
        return defs.get_schema(op_type, opset, "").since_version
    except defs.SchemaError:
        raise UnsupportedError(f"{op_type} does not exist at opset {opset}",
                               given=opset) from None


def load_model(model):
    """A ``ModelProto`` from a path, bytes or a ``ModelProto``."""
    import onnx

    if isinstance(model, onnx.ModelProto):
        return model
    try:
        if isinstance(model, (bytes, bytearray, memoryview)):
            return onnx.load_model_from_string(bytes(model))
        if isinstance(model, str) or hasattr(model, "__fspath__"):
            return onnx.load(model)
    except OSError as error:
        raise ModelError(f"the model cannot be read: {error}", given=str(model)) from None
    except Exception as error:  # noqa: BLE001 - protobuf's decode errors have no common base
        raise ModelError(f"the model is not a valid ONNX model: {type(error).__name__}: {error}",
                         given=type(model).__name__) from None
    raise ModelError(f"model is a {type(model).__name__}; give a path, bytes or an "
                     "onnx.ModelProto", given=type(model).__name__)


def attribute_values(node):
    """A node's attributes as Python values (strings decoded)."""
    from onnx import helper

    values = {}
    for attribute in node.attribute:
        try:
            value = helper.get_attribute_value(attribute)
        except Exception as error:  # noqa: BLE001 - a malformed attribute of any kind
            raise node_error(node, f"attribute {attribute.name!r} cannot be read: {error}") from None
        values[attribute.name] = value.decode(errors="replace") if isinstance(value, bytes) else value
    return values


def element_dtype(elem_type):
    """The NumPy (or ml_dtypes) dtype of an ONNX element type code, or None."""
    from onnx import helper

    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(int(elem_type)))
    except Exception:  # noqa: BLE001 - unknown or UNDEFINED codes
        return None


class Graph:
    """A model's main graph, analysed.

    Attributes
    ----------
    nodes : list of onnx.NodeProto
        In an order in which each node's inputs exist before it runs.
    constants : dict
        Value name -> ndarray: the initializers and the Constant nodes' values.
    inputs, outputs : list of onnx.ValueInfoProto
        The graph's inputs that are not initializers, and its outputs.
    overridable : dict
        Name -> (ValueInfoProto, ndarray): initializers that are also graph
        inputs (IR version 4 and later), the defaults of optional feeds.
    opsets : dict
        Domain -> opset version (the default domain under ``""``).
    types : dict
        Value name -> dtype, where shape inference or the model says it.
    """

    def __init__(self, model):
        graph = model.graph
        self.model = model
        self.opsets = {}
        for entry in model.opset_import:
            domain = "" if entry.domain in ("", "ai.onnx") else entry.domain
            self.opsets[domain] = int(entry.version)
        if DEFAULT_DOMAIN not in self.opsets:
            raise ModelError("the model imports no opset of ONNX's default domain",
                             given=dict(self.opsets))
        self.constants = {}
        for tensor in graph.initializer:
            self.constants[tensor.name] = _tensor_array(tensor)
        for sparse in graph.sparse_initializer:
            raise ModelError(f"sparse initializer {sparse.values.name!r}: sparse tensors are not "
                             "supported", given=sparse.values.name)
        # From IR version 4 an initializer that is also a graph input is a
        # default a feed may override (as onnxruntime has it): not a constant.
        self.overridable = {}
        if model.ir_version >= 4:
            for value in graph.input:
                if value.name in self.constants:
                    self.overridable[value.name] = (value, self.constants.pop(value.name))
        self.inputs = [value for value in graph.input
                       if value.name not in self.constants and value.name not in self.overridable]
        self.outputs = list(graph.output)
        names = [value.name for value in self.inputs] + list(self.overridable)
        if len(set(names)) != len(names):
            raise ModelError(f"the graph's inputs repeat a name: {names}", given=names)
        nodes = []
        for node in graph.node:
            texts = [node.op_type, node.domain, node.name, *node.input, *node.output]
            if not all(isinstance(text, str) for text in texts):
                # protobuf gives bytes for a string field that is not UTF-8.
                raise ModelError("a node's type, domain, name or value names are not valid "
                                 f"UTF-8 text: {texts!r:.200}", given=repr(node.op_type))
            if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
                self._constant_node(node)
            else:
                nodes.append(node)
        self.graph_outputs = {value.name for value in self.outputs}
        self.set_nodes(_topological_order(nodes, set(self.constants) | set(names)))
        for name in self.graph_outputs:
            if name not in self.producer and name not in self.constants and name not in names:
                raise ModelError(f"graph output {name!r} is produced by no node, initializer or "
                                 "input", given=name)
        self.types = self._element_types(model)

    def set_nodes(self, nodes):
        """Take ``nodes`` (in running order) as the graph's, and index them."""
        self.nodes = list(nodes)
        self.producer = {}
        self.consumers = {}
        for index, node in enumerate(self.nodes):
            for name in node.output:
                if name:
                    self.producer[name] = index
            for name in list(node.input) + sorted(_subgraph_reads(node)):
                if name:
                    self.consumers.setdefault(name, []).append(index)

    def _constant_node(self, node):
        from onnx import numpy_helper

        if len(node.output) != 1 or not node.output[0]:
            raise node_error(node, "a Constant node has one output")
        if len(node.attribute) != 1:
            raise node_error(node, f"a Constant node has one attribute, not {len(node.attribute)}")
        attribute = node.attribute[0]
        try:
            if attribute.name == "value":
                value = _tensor_array(attribute.t)
            elif attribute.name == "sparse_value":
                raise node_error(node, "sparse constants are not supported")
            else:
                value = np.asarray(attribute_values(node)[attribute.name])
                if attribute.name in ("value_float", "value_floats"):
                    value = value.astype(np.float32)
                elif attribute.name in ("value_int", "value_ints"):
                    value = value.astype(np.int64)
                elif attribute.name == "value_strings":  # bytes each: as text, as onnx.reference
                    value = np.asarray([item.decode(errors="replace") if isinstance(item, bytes)
                                        else item for item in value.tolist()])
                elif attribute.name != "value_string":
                    raise node_error(node, f"unknown attribute {attribute.name!r}")
        except ModelError:
            raise
        except Exception as error:  # noqa: BLE001
            raise node_error(node, f"its value cannot be read: {error}") from None
        del numpy_helper
        if node.output[0] in self.constants:
            raise node_error(node, f"{node.output[0]!r} is defined twice")
        self.constants[node.output[0]] = value

    def _element_types(self, model):
        """Element types from the graph's declarations and ONNX's shape
        inference (which knows the default domain's operators only; what it
        cannot type stays unknown)."""
        import onnx

        types = {}
        declared = list(model.graph.input) + list(model.graph.output) + list(model.graph.value_info)
        try:
            inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
            declared += list(inferred.graph.value_info)
        except Exception:  # noqa: BLE001 - inference is a help, never a requirement
            pass
        for value in declared:
            if value.type.HasField("tensor_type"):
                dtype = element_dtype(value.type.tensor_type.elem_type)
                if dtype is not None:
                    types.setdefault(value.name, dtype)
        for name, array in self.constants.items():
            types[name] = array.dtype
        for name, (_, array) in self.overridable.items():
            types[name] = array.dtype
        return types

    def sole_consumer(self, name):
        """The index of the one node reading ``name``, if only one does and it
        is not a graph output; else None."""
        users = self.consumers.get(name, ())
        if len(users) != 1 or name in self.graph_outputs:
            return None
        return users[0]

    def producer_node(self, name):
        index = self.producer.get(name)
        return None if index is None else self.nodes[index]

    def opset(self, node):
        return self.opsets.get("" if node.domain in ("", "ai.onnx") else node.domain)


def _tensor_array(tensor):
    from onnx import external_data_helper, numpy_helper

    if external_data_helper.uses_external_data(tensor):
        raise ModelError(f"initializer {tensor.name!r} keeps its data in an external file; load "
                         "the model with onnx.load (which reads it) and pass the ModelProto",
                         given=tensor.name)
    try:
        array = numpy_helper.to_array(tensor)
    except Exception as error:  # noqa: BLE001 - malformed data of any kind
        raise ModelError(f"initializer {tensor.name!r} cannot be read: {error}",
                         given=tensor.name) from None
    array = np.asarray(array)
    array.flags.writeable = False
    return array


def _subgraph_reads(node):
    """Names a node's subgraphs (If, Loop, Scan) read from the outer scope."""
    from onnx import AttributeProto

    reads = set()
    for attribute in node.attribute:
        graphs = ([attribute.g] if attribute.type == AttributeProto.GRAPH
                  else list(attribute.graphs) if attribute.type == AttributeProto.GRAPHS else [])
        for graph in graphs:
            defined = {value.name for value in graph.input} | {t.name for t in graph.initializer}
            for inner in graph.node:
                defined.update(inner.output)
            for inner in graph.node:
                reads.update(name for name in inner.input if name and name not in defined)
                reads.update(_subgraph_reads(inner) - defined)
    return reads


def _topological_order(nodes, available):
    """The nodes in an order that runs them (the model's own where it does),
    or a ModelError naming a node whose input nothing defines, a value
    defined twice, or a cycle."""
    producer = {}
    for index, node in enumerate(nodes):
        for name in node.output:
            if not name:
                continue
            if name in producer or name in available:
                raise node_error(node, f"output {name!r} is already defined")
            producer[name] = index
    needs = []
    for node in nodes:
        reads = {name for name in node.input if name} | _subgraph_reads(node)
        for name in reads:
            if name not in producer and name not in available:
                raise node_error(node, f"input {name!r} is no graph input, initializer or "
                                       "node output")
        needs.append({producer[name] for name in reads if name in producer})
    order, placed = [], [False] * len(nodes)
    waiting = {index: len(deps) for index, deps in enumerate(needs)}
    dependents = {}
    for index, deps in enumerate(needs):
        for dep in deps:
            dependents.setdefault(dep, []).append(index)
    # The lowest ready index first: a model already in order keeps it.
    ready = [index for index, count in waiting.items() if count == 0]
    heapq.heapify(ready)
    while ready:
        index = heapq.heappop(ready)
        order.append(nodes[index])
        placed[index] = True
        for user in dependents.get(index, ()):
            waiting[user] -= 1
            if waiting[user] == 0:
                heapq.heappush(ready, user)
    if len(order) != len(nodes):
        stuck = next(node for node, done in zip(nodes, placed) if not done)
        raise node_error(stuck, "the graph has a cycle through this node")
    return order
