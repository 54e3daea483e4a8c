"""Whole ONNX models on qops: :class:`InferenceSession`.

A session reads a model once and turns it into a flat list of prepared
calls:

1. Nodes whose inputs are all constants are run once, as the session is
   built (DequantizeLinear of a weight, shape arithmetic on initializers),
   and their outputs kept as constants.  DequantizeLinear nodes wait for
   step 2, which may fuse them, and are folded after it if it does not.
2. With ``fuse=True``, QDQ groups and dynamically quantized products are
   recognised (:mod:`qops.onnx._fusion`) and each becomes one call of a
   qops integer operator with its constant weights, biases, scales and zero
   points bound (convolutions and products compiled and prepacked once).
3. onnxruntime's quantized nodes (QLinearConv, QGemm, QLinearAdd, ...) run
   on qops' operators; QLinearConv and QLinearMatMul with constant weights
   are compiled once.
4. Every other node runs on ``onnx.reference``'s implementation of it, or
   on a vectorized NumPy one where that one loops in Python
   (:mod:`qops.onnx._numpy_ops`).

With channels-last tensors, a 1 x 1 expansion whose only reader is a
depthwise convolution (both channels-first) becomes one step of the pair.
A run is then a loop over the prepared calls, freeing each intermediate
value after its last reader.
"""

from __future__ import annotations

import dataclasses
import functools
import operator

import numpy as np

from qops.errors import QopsError, ValidationError
import qops as api
from qops.onnx import _blas, _fusion, _layout, _nodes, _numpy_ops, _qoperator
from qops.onnx._graph import (
    DEFAULT_DOMAIN,
    Graph,
    ModelError,
    UnsupportedNodeError,
    _subgraph_reads,
    attribute_values,
    load_model,
    node_error,
    operator_version,
)
from qops.threads import resolve_threads, threads_in_context, workers_kept_spinning

__all__ = ["InferenceSession", "NodeArg", "Step", "ModelError", "UnsupportedNodeError",
           "ModelRunError"]

#: Operators whose outputs are not a function of their inputs: never folded.
_NOT_FOLDED = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike",
                         "RandomUniformLike", "Multinomial", "Bernoulli", "Dropout"})


class ModelRunError(QopsError, RuntimeError):
    """A node failed while a model ran (for example, shapes its operator
    does not accept); the message names the node."""


@dataclasses.dataclass(frozen=True)
class NodeArg:
    """A model input or output, as onnxruntime's ``NodeArg`` describes it.

    Attributes
    ----------
    name : str
    shape : list
        One entry per dimension: an int, the name of a symbolic dimension
        (str), or None where the model says nothing.
    type : str
        ``"tensor(float)"``, ``"tensor(uint8)"``, ...
    """

    name: str
    shape: list
    type: str


@dataclasses.dataclass(frozen=True)
class Step:
    """One prepared call of a session.

    ``kind`` says what runs it (``"QDQ Conv"``, ``"qops QLinearAdd"``,
    ``"onnx.reference Softmax"``, ...); ``nodes`` names the model's nodes it
    stands for.
    """

    kind: str
    label: str
    inputs: tuple
    outputs: tuple
    nodes: tuple
    call: object = dataclasses.field(repr=False, compare=False)
    #: The model's node, for a step that runs one node as written.
    node: object = dataclasses.field(default=None, repr=False, compare=False)
    #: Whether the step reads its image (or operands) and writes its output
    #: channels-last, as (N, H, W, C) arrays: ``(input, output)``.
    channels_last: tuple = (False, False)


def _type_name(elem_type):
    from onnx import TensorProto

    try:
        return f"tensor({TensorProto.DataType.Name(elem_type).lower()})"
    except ValueError:
        return f"tensor(unknown {elem_type})"


def _written(outputs):
    """A step's output names as its run stores its results: omitted optional
    outputs at the end dropped (the call need not make them), any other
    omitted one stored under a name no step reads."""
    names = list(outputs)
    while names and not names[-1]:
        names.pop()
    return tuple(name or "\0omitted" for name in names)


def _node_arg(value):
    tensor = value.type.tensor_type
    shape = None
    if tensor.HasField("shape"):
        shape = []
        for dimension in tensor.shape.dim:
            if dimension.HasField("dim_value") and dimension.dim_value >= 0:
                shape.append(int(dimension.dim_value))
            elif dimension.HasField("dim_param"):
                shape.append(dimension.dim_param)
            else:
                shape.append(None)
    return NodeArg(value.name, shape, _type_name(tensor.elem_type))


class InferenceSession:
    """Run an ONNX model with qops' integer operators.

    Parameters
    ----------
    model : str, path-like, bytes or onnx.ModelProto
        The model (initializers stored inside it).
    n_threads : int, optional
        Threads of every operator of a run (default: qops' global setting).
    fuse : bool, default True
        Recognise QDQ groups and dynamically quantized products and run each
        as one qops operator.  ``False`` runs every node as written (the
        quantized nodes onnxruntime's quantizer writes still run on qops).
    channels_last : bool, default True
        Keep the tensors that only convolutions and quantized adds write and
        read as (N, H, W, C) arrays between those steps, so that no step
        transposes them; the results are the same bit for bit.  Graph inputs
        and outputs are always as the model says.  Where the model has a
        depthwise convolution and fixed input shapes, the session runs once
        on zeros as it is built to learn its images' sizes (the kernel takes
        small ones); a model whose run fails on zeros keeps those
        convolutions channels-first.  With ``fuse`` too, a channels-first
        1 x 1 expansion whose only reader is a depthwise convolution runs
        with it as one step, the expanded tensor never stored whole.

    Raises
    ------
    qops.ValidationError
        (:class:`ModelError`) for a model that cannot be read or is
        malformed, and (:class:`UnsupportedNodeError`, also a
        :class:`qops.UnsupportedError`) for a node that nothing here runs,
        naming the node, its type and its domain.

    Notes
    -----
    ``run`` may be called from several threads at once: each run keeps its
    values to itself, and the prepared operators are only read.

    Examples
    --------
    >>> session = qops.onnx.InferenceSession("model.onnx")  # doctest: +SKIP
    >>> [y] = session.run(None, {"x": image})                # doctest: +SKIP
    """

    def __init__(self, model, n_threads=None, *, fuse=True, channels_last=True):
        self._n_threads = None if n_threads is None else resolve_threads(n_threads)
        proto = load_model(model)
        graph = Graph(proto)
        self._graph = graph
        self._fused = bool(fuse)
        self._inputs = []
        for value in graph.inputs:
            if not value.type.HasField("tensor_type"):
                raise ModelError(f"input {value.name!r} is not a tensor; qops sessions take "
                                 "tensors", given=value.name)
            self._inputs.append(_node_arg(value))
        for value in graph.outputs:
            if not value.type.HasField("tensor_type") and value.type.WhichOneof("value"):
                raise UnsupportedNodeError(f"output {value.name!r} is a "
                                           f"{value.type.WhichOneof('value')}; qops sessions "
                                           "return tensors", given=value.name)
        self._outputs = [_node_arg(value) for value in graph.outputs]
        self._input_checks = {arg.name: _InputCheck(arg, value)
                              for arg, value in zip(self._inputs, graph.inputs)}
        self._defaults = {name: array for name, (_, array) in graph.overridable.items()}
        self._default_checks = {name: _InputCheck(_node_arg(value), value)
                                for name, (value, _) in graph.overridable.items()}
        self._runners = {}
        self._check_every_node()
        self._fold(keep_dequantize=True)
        groups = _fusion.Matcher(graph, self._reference_runner, _contrib_rules()).groups() \
            if fuse else []
        steps = self._steps(groups)
        steps = self._live(steps)
        steps = self._live(self._fold_steps(steps))
        if channels_last and _numpy_ops.native_tables() is not None:
            # (Without the compiled kernels a layout would be a transposition.)
            shapes = self._probed_shapes(steps) if any(
                getattr(getattr(step.call, "layouts", None), "takes", None) is not None
                for step in steps) else {}
            steps = _layout.channels_last(steps, {arg.name for arg in self._inputs},
                                          graph.graph_outputs, graph.constants, shapes)
            if fuse:
                steps = self._fused_convolutions(steps, shapes)
        self._steps_list = steps
        self._plan_frees()
        self._constants_env = {name: graph.constants[name] for name in self._constant_reads}
        # An omitted optional input reads as None.
        self._constants_env[""] = None
        self._program = tuple((_getter(step.inputs), step.call, _written(step.outputs), frees,
                               step)
                              for step, frees in zip(self._steps_list, self._frees))

    # -- onnxruntime's interface ----------------------------------------------------------

    def get_inputs(self):
        """The model's inputs (initializers excluded), as :class:`NodeArg`."""
        return list(self._inputs)

    def get_outputs(self):
        """The model's outputs, as :class:`NodeArg`."""
        return list(self._outputs)

    def get_overridable_initializers(self):
        """Initializers that are also graph inputs (IR version 4 and later):
        a feed of the same name replaces the stored value."""
        return [_node_arg(value) for value, _ in self._graph.overridable.values()]

    def get_providers(self):
        return ["QopsExecutionProvider"]

    @property
    def steps(self):
        """The prepared calls a run makes, in order (:class:`Step`)."""
        return tuple(self._steps_list)

    def run(self, output_names, input_feed, run_options=None):
        """Run the model.

        Parameters
        ----------
        output_names : list of str or None
            The outputs wanted, in order; None for every output.
        input_feed : dict
            Input name -> array, one for every input of :meth:`get_inputs`.
        run_options : None
            Accepted for onnxruntime's signature; unused.

        Returns
        -------
        list of ndarray
            New arrays, which the caller owns.

        Raises
        ------
        qops.ValidationError
            For an unknown, missing or extra feed, or one of the wrong dtype,
            rank or fixed dimension, naming the input; and for an unknown
            output name.
        ModelRunError
            When a node fails on the values it is given, naming the node.
        """
        del run_options
        wanted = self._wanted(output_names)
        feeds = self._checked_feeds(input_feed)
        values = dict(self._constants_env)
        values.update(feeds)
        n_threads = resolve_threads(self._n_threads)
        # Workers wait for the next step spinning, as each step may come after
        # single-threaded work longer than their usual spin.
        with threads_in_context(n_threads), workers_kept_spinning(n_threads > 1):
            for arguments_of, call, outputs, frees, step in self._program:
                try:
                    results = call(arguments_of(values), n_threads)
                except ValidationError as error:
                    raise type(error)(f"{step.label} [{step.kind}]: {error}") from error
                except Exception as error:  # noqa: BLE001 - named and re-raised
                    raise ModelRunError(f"{step.label} [{step.kind}] failed: "
                                        f"{type(error).__name__}: {error}") from error
                if len(results) < len(outputs):
                    raise ModelRunError(f"{step.label} [{step.kind}] made {len(results)} "
                                        f"outputs; the model names {len(outputs)}")
                for name, value in zip(outputs, results):
                    values[name] = value
                for name in frees:
                    values.pop(name, None)
        return self._owned([values[name] for name in wanted], feeds)

    # -- building ---------------------------------------------------------------------------

    def _check_every_node(self):
        """Every node has an implementation here, and as many inputs and
        outputs as its operator's schema allows: fail now, naming it, if not."""
        for node in self._graph.nodes:
            _check_arity(node, self._graph.opset(node))
            if self._qops_rule(node) is None:
                self._reference_runner(node, required=True)

    def _qops_rule(self, node):
        """``(adapter, opset)`` of a node qops runs, else None."""
        if node.domain == _nodes.CONTRIB_DOMAIN:
            adapter = _nodes.CONTRIB_ADAPTERS.get(node.op_type)
            return None if adapter is None else (adapter, 1)
        if node.domain not in ("", "ai.onnx"):
            return None
        adapter = _nodes.ADAPTERS.get(node.op_type)
        if adapter is None:
            return None
        try:
            version = operator_version(node.op_type, self._graph.opsets[DEFAULT_DOMAIN])
        except ValidationError as error:
            raise node_error(node, str(error), UnsupportedNodeError) from None
        if version > _nodes.NEWEST_OPSET and node.op_type in _REGISTRY_OPERATORS:
            # As the direct functions: a version the tables lack is not guessed.
            raise node_error(node, f"opset {self._graph.opsets[DEFAULT_DOMAIN]} puts "
                                   f"{node.op_type} at its version {version}, which qops does "
                                   f"not describe (the newest it knows: {_nodes.NEWEST_OPSET})",
                             UnsupportedNodeError)
        # Other versions past qops' newest only add types: run at its newest.
        return adapter, min(version, _nodes.NEWEST_OPSET)

    def _reference_runner(self, node, required=False):
        """``run(arguments) -> outputs`` of onnx.reference's implementation of
        ``node`` (cached), or None (an error if ``required``)."""
        key = id(node)
        if key in self._runners:
            return self._runners[key]
        runner = None
        try:
            runner = (_numpy_runner(node, self._graph.opset(node))
                      or _reference_runner(node, self._graph))
        except Exception as error:  # noqa: BLE001 - any failure to load is the node's
            if required:
                domain = node.domain or "ai.onnx"
                known = ", ".join([*_nodes.CONTRIB_ADAPTERS, *_numpy_ops.CONTRIB_IMPLEMENTATIONS]) \
                    if node.domain == _nodes.CONTRIB_DOMAIN else None
                detail = f" (qops runs {known} of that domain)" if known else ""
                raise node_error(
                    node, f"neither qops nor onnx.reference runs {node.op_type} of domain "
                          f"{domain} at opset {self._graph.opset(node)}{detail}: "
                          f"{type(error).__name__}: {error}", UnsupportedNodeError) from None
        self._runners[key] = runner
        return runner

    def _node_call(self, node):
        """(kind, call) of one node as written."""
        rule = self._qops_rule(node)
        if rule is not None:
            prepared = _prepared_qlinear(node, self._graph)
            if prepared is not None:
                return prepared
            adapter, opset = rule
            attributes = attribute_values(node)
            prepared = (_prepared_per_tensor(node, self._graph, adapter, attributes, opset)
                        or _prepared_dynamic_quantize(node, adapter, attributes, opset))
            if prepared is not None:
                return prepared

            def call(arguments, n_threads):
                return adapter(arguments, attributes, opset)

            return f"qops {node.op_type}", call
        runner = self._reference_runner(node, required=True)
        source = ("numpy" if _numpy_runner(node, self._graph.opset(node)) is not None
                  else "onnx.reference")

        def call(arguments, n_threads):
            return runner(arguments)

        call.layouts = _layout.following(runner)
        return f"{source} {node.op_type}", call

    def _fold(self, keep_dequantize):
        """Run the nodes whose inputs are all constants; keep their outputs."""
        graph = self._graph
        kept = []
        for node in graph.nodes:
            reads = list(node.input) + sorted(_subgraph_reads(node))
            foldable = (node.op_type not in _NOT_FOLDED and all(
                not name or name in graph.constants for name in reads)
                and not (keep_dequantize and node.op_type == "DequantizeLinear"))
            if not foldable:
                kept.append(node)
                continue
            _, call = self._node_call(node)
            arguments = [graph.constants[name] if name else None for name in reads]
            self._keep_constants(node.output, self._evaluate(node, call, arguments))
        graph.set_nodes(kept)

    def _evaluate(self, node, call, arguments=None):
        graph = self._graph
        if arguments is None:
            arguments = [graph.constants[name] if name else None for name in node.input]
        try:
            return call(arguments, resolve_threads(self._n_threads))
        except QopsError as error:
            raise node_error(node, f"on its constant inputs: {error}") from None
        except Exception as error:  # noqa: BLE001
            raise node_error(node, f"fails on its constant inputs: {type(error).__name__}: "
                                   f"{error}") from None

    def _keep_constants(self, names, values):
        for name, value in zip(names, values):
            if name:
                array = np.asarray(value)
                array.flags.writeable = False
                self._graph.constants[name] = array
                self._graph.types[name] = array.dtype

    def _steps(self, groups):
        graph = self._graph
        anchors = {group.anchor: group for group in groups}
        consumed = set()
        for group in groups:
            consumed |= group.consumed
        steps = []
        for index, node in enumerate(graph.nodes):
            group = anchors.get(index)
            if group is not None:
                names = tuple(graph.nodes[i].name or graph.nodes[i].op_type
                              for i in sorted(group.consumed))
                steps.append(Step(group.kind, group.label, tuple(group.inputs),
                                  tuple(group.outputs), names, group.call))
            elif index not in consumed:
                kind, call = self._node_call(node)
                # A subgraph's reads of outer values come after the node's inputs.
                reads = tuple(sorted(_subgraph_reads(node)))
                steps.append(Step(kind, f"node {node.name or node.op_type}",
                                  tuple(node.input) + reads, tuple(node.output),
                                  (node.name or node.op_type,), call, node))
        return steps

    def _live(self, steps):
        """The steps whose outputs a graph output needs, in order."""
        needed = set(self._graph.graph_outputs)
        live = []
        for step in reversed(steps):
            if any(name in needed for name in step.outputs if name):
                live.append(step)
                needed.update(name for name in step.inputs if name)
        return live[::-1]

    def _fold_steps(self, steps):
        """Steps whose inputs are all constants, run now (DequantizeLinear of
        weights that no group took, among others)."""
        graph = self._graph
        kept = []
        for step in steps:
            node = step.node
            if node is not None and node.op_type in _NOT_FOLDED or not all(
                    not name or name in graph.constants for name in step.inputs):
                kept.append(step)
                continue
            arguments = [graph.constants[name] if name else None for name in step.inputs]
            if node is None:
                try:
                    values = step.call(arguments, resolve_threads(self._n_threads))
                except Exception as error:  # noqa: BLE001 - named and re-raised
                    raise ModelError(f"{step.label} [{step.kind}] fails on its constant inputs: "
                                     f"{type(error).__name__}: {error}") from None
            else:
                values = self._evaluate(node, step.call, arguments)
            self._keep_constants(step.outputs, values)
        return kept

    def _fused_convolutions(self, steps, shapes):
        """``steps`` with each channels-first convolution whose output only
        the next step reads, a convolution the kernels run together with it
        (a 1 x 1 expansion and its depthwise convolution), replaced by one
        step of the pair (CompiledOperator.followed_runner): the expanded
        tensor is never stored whole.  Needs the image's shape."""
        readers = {}
        for step in steps:
            for name in step.inputs:
                readers[name] = readers.get(name, 0) + 1
        fused, index = [], 0
        while index < len(steps):
            step = steps[index]
            following = steps[index + 1] if index + 1 < len(steps) else None
            pair = None
            if (following is not None and step.channels_last == (False, False)
                    and following.channels_last == (False, False)
                    and len(step.outputs) == 1 and following.inputs[:1] == step.outputs
                    and readers.get(step.outputs[0]) == 1
                    and step.outputs[0] not in self._graph.graph_outputs
                    and shapes.get(step.inputs[0]) is not None):
                first = getattr(step.call, "compiled", None)
                second = getattr(following.call, "compiled", None)
                if first is not None and second is not None:
                    pair = first.followed_runner(second, shapes[step.inputs[0]])
            if pair is None:
                fused.append(step)
                index += 1
                continue

            def call(arguments, n_threads, pair=pair):
                return [pair(n_threads, arguments[0])]

            fused.append(Step(f"{step.kind} + {following.kind}",
                              f"{step.label} + {following.label}", step.inputs[:1],
                              following.outputs, step.nodes + following.nodes, call))
            index += 2
        return fused

    def _probed_shapes(self, steps):
        """Every value's shape in a run of ``steps`` on zeros, where each
        input's shape is fixed (the model's shapes do not always say them:
        ONNX's inference stops at a contrib node); {} where one is not, or
        the run fails."""
        feeds = {}
        for arg, check in self._input_checks.items():
            shape = check.arg.shape
            if check.dtype is None or shape is None or not all(
                    isinstance(size, int) for size in shape):
                return {}
            feeds[arg] = np.zeros(shape, check.dtype)
        values = dict(self._graph.constants)
        values.update(feeds)
        values.update(self._defaults)
        values[""] = None
        n_threads = resolve_threads(self._n_threads)
        try:
            with np.errstate(all="ignore"):
                for step in steps:
                    results = step.call([values[name] for name in step.inputs], n_threads)
                    values.update(zip(step.outputs, results))
        except Exception:  # noqa: BLE001 - no shapes, no layouts that need them
            return {}
        return {name: np.shape(value) for name, value in values.items()
                if isinstance(value, np.ndarray)}

    def _plan_frees(self):
        """For each step, the values no later step (nor the caller) reads."""
        last_read = {}
        for position, step in enumerate(self._steps_list):
            for name in step.inputs:
                if name:
                    last_read[name] = position
        outputs = self._graph.graph_outputs
        frees = [[] for _ in self._steps_list]
        for name, position in last_read.items():
            if name not in outputs and name not in self._graph.constants:
                frees[position].append(name)
        self._frees = [tuple(names) for names in frees]
        self._constant_reads = {name for name in last_read if name in self._graph.constants}
        self._constant_reads |= {name for name in outputs if name in self._graph.constants}

    # -- running ----------------------------------------------------------------------------

    def _wanted(self, output_names):
        names = [arg.name for arg in self._outputs]
        if output_names is None:
            return names
        if isinstance(output_names, str):
            raise ValidationError("output_names is a list of names (or None), not a string",
                                  given=output_names)
        output_names = list(output_names)
        unknown = [name for name in output_names if name not in names]
        if unknown:
            raise ValidationError(f"{unknown[0]!r} is not an output of the model; its outputs "
                                  f"are {', '.join(names)}", given=unknown[0], allowed=names)
        return list(output_names)

    def _checked_feeds(self, input_feed):
        if not isinstance(input_feed, dict):
            raise ValidationError(f"input_feed is a {type(input_feed).__name__}; give a dict "
                                  "of input name to array", given=type(input_feed).__name__)
        unknown = [name for name in input_feed
                   if name not in self._input_checks and name not in self._default_checks]
        if unknown:
            known = ", ".join(self._input_checks) or "none"
            raise ValidationError(f"input {unknown[0]!r} is not an input of the model; its "
                                  f"inputs are {known}", given=unknown[0],
                                  allowed=list(self._input_checks))
        feeds = {}
        for name, check in self._input_checks.items():
            if name not in input_feed:
                raise ValidationError(f"input {name!r} is missing: the model needs "
                                      f"{check.describe()}", slot=name)
            feeds[name] = check(input_feed[name])
        for name, check in self._default_checks.items():
            feeds[name] = check(input_feed[name]) if name in input_feed else self._defaults[name]
        return feeds

    def _owned(self, values, feeds):
        """The outputs as new arrays: whatever is a constant, a feed, a view or
        already returned is copied.  An array whose base is a buffer of qops'
        output allocator (:mod:`qops.backends.native._outputs`) is a kernel's
        new output, the caller's as it is (a view of it has the array itself
        as its base, and is copied)."""
        buffer_type = _output_buffer_type()
        fed = {id(value) for value in feeds.values()}
        constant = {id(value) for value in self._constants_env.values()}
        seen, owned = set(), []
        for value in values:
            if isinstance(value, (list, tuple)):  # a sequence (an output of undeclared type)
                owned.append([np.array(item, copy=True) for item in value])
                continue
            array = np.asarray(value)
            fresh = buffer_type is not None and type(array.base) is buffer_type
            if (array is not value or id(array) in seen or id(array) in fed
                    or id(array) in constant or (array.base is not None and not fresh)
                    or not array.flags.writeable):
                array = np.array(array, copy=True)
            seen.add(id(array))
            owned.append(array)
        return owned


@functools.cache
def _output_buffer_type():
    """The type of qops' output buffers (an output array's ``base``), or None
    where the kernels are not built."""
    try:
        from qops.backends.native._outputs import OutputBuffer
    except ImportError:
        return None
    return OutputBuffer


class _InputCheck:
    """A feed's dtype, rank and fixed dimensions, checked against the model."""

    def __init__(self, arg, value):
        from qops.onnx._graph import element_dtype

        self.arg = arg
        self.dtype = element_dtype(value.type.tensor_type.elem_type)

    def describe(self):
        shape = "any shape" if self.arg.shape is None else (
            "shape [" + ", ".join("?" if d is None else str(d) for d in self.arg.shape) + "]")
        return f"{self.arg.type} of {shape}"

    def __call__(self, value):
        name = self.arg.name
        try:
            array = value if type(value) is np.ndarray else np.asarray(value)
        except (ValueError, TypeError) as error:
            raise ValidationError(f"input {name!r} is not an array: {error}", slot=name,
                                  given=type(value).__name__) from None
        if self.dtype is not None and array.dtype != self.dtype:
            raise ValidationError(f"input {name!r} has dtype {array.dtype}; the model takes "
                                  f"{self.arg.type} ({self.dtype})", slot=name,
                                  given=str(array.dtype), allowed=str(self.dtype))
        shape = self.arg.shape
        if shape is not None:
            if array.ndim != len(shape):
                raise ValidationError(f"input {name!r} has {array.ndim} dimensions "
                                      f"{tuple(array.shape)}; the model takes {len(shape)} "
                                      f"({self.describe()})", slot=name, given=array.shape)
            for axis, (size, expected) in enumerate(zip(array.shape, shape)):
                if isinstance(expected, int) and size != expected:
                    raise ValidationError(f"input {name!r} has shape {tuple(array.shape)}; the "
                                          f"model takes {self.describe()} (axis {axis} is "
                                          f"{expected})", slot=name, given=array.shape)
        return array


#: The default domain's operators whose every version the registry states.
_REGISTRY_OPERATORS = ("QuantizeLinear", "DequantizeLinear")


def _check_arity(node, opset):
    """A node of ONNX's default domain has the input and output counts its
    schema allows."""
    if node.domain not in ("", "ai.onnx") or opset is None:
        return
    from onnx import defs

    try:
        schema = defs.get_schema(node.op_type, opset, "")
    except (defs.SchemaError, TypeError):
        return  # an unknown operator: the implementation check names it
    inputs = len(node.input)
    outputs = len(node.output)
    if not schema.min_input <= inputs <= schema.max_input:
        raise node_error(node, f"it has {inputs} inputs; {node.op_type} takes "
                               f"{schema.min_input} to {schema.max_input}")
    if outputs > schema.max_output:
        raise node_error(node, f"it has {outputs} outputs; {node.op_type} makes at most "
                               f"{schema.max_output}")


def _getter(names):
    """``arguments_of(values)``: a step's inputs read from a run's values."""
    if len(names) == 1:
        (name,) = names
        return lambda values: (values[name],)
    if not names:
        return lambda values: ()
    return operator.itemgetter(*names)


def _contrib_rules():
    """The com.microsoft adapters the fusions reuse (QLinearMul, QLinearSoftmax)."""
    return {name: _nodes.CONTRIB_ADAPTERS[name] for name in ("QLinearMul", "QLinearSoftmax")
            if name in _nodes.CONTRIB_ADAPTERS}


def _numpy_runner(node, opset=None):
    """A vectorized NumPy implementation of the node, where qops has one."""
    if node.domain == _nodes.CONTRIB_DOMAIN:
        implementation = _numpy_ops.CONTRIB_IMPLEMENTATIONS.get(node.op_type)
    elif node.domain in ("", "ai.onnx"):
        implementation = (_numpy_ops.IMPLEMENTATIONS.get(node.op_type)
                          or _blas.IMPLEMENTATIONS.get(node.op_type))
    else:
        return None
    if implementation is None:
        return None
    return implementation(node, attribute_values(node), opset)


def _reference_runner(node, graph):
    """onnx.reference's implementation of one node, as ``run(arguments)``."""
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    opsets = [helper.make_opsetid(domain, version) for domain, version in graph.opsets.items()]
    # The inputs' element types, where known: an operator whose function
    # depends on them (Gelu's CastLike of its constants) is built from them.
    typed = []
    for name in dict.fromkeys(name for name in node.input if name):
        dtype = graph.types.get(name)
        if dtype is not None:
            try:
                elem_type = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
            except (KeyError, TypeError, ValueError):
                continue
            typed.append(helper.make_tensor_value_info(name, elem_type, None))
    single = helper.make_model(helper.make_graph([node], "node", typed, []),
                               opset_imports=opsets, functions=list(graph.model.functions))
    single.ir_version = graph.model.ir_version or 10
    evaluator = ReferenceEvaluator(single)
    (implementation,) = evaluator.rt_nodes_
    count = len(node.input)
    reads = sorted(_subgraph_reads(node))

    if implementation.need_context():
        def run(arguments):
            # The subgraphs' outer reads follow the node's own inputs.
            context = dict(graph.constants)
            context.update(zip(reads, arguments[count:]))
            return list(implementation.run(*arguments[:count], context=context))
    else:
        def run(arguments):
            return list(implementation.run(*arguments))

    return run


def _prepared_add(node, graph):
    """com.microsoft QLinearAdd with constant per-tensor float32 scales and
    zero points: the add with its parameters bound, else None."""
    names = list(node.input) + [""] * 8
    constants = graph.constants
    values = [constants.get(names[i]) for i in (1, 2, 4, 5, 6, 7)]
    if any(value is None or value.size != 1 for value in values):
        return None
    scales, zeros = values[0::2], values[1::2]
    if any(scale.dtype != np.float32 for scale in scales) or any(
            zero.dtype not in (np.uint8, np.int8) or zero.dtype != zeros[0].dtype
            for zero in zeros):
        return None
    scalars = [value.reshape(())[()] for value in values]
    call = _fusion.add_call(*scalars)
    for variable, fixed in ((0, 3), (3, 0)):
        constant = constants.get(names[fixed])
        if constant is not None and constant.size == 1 and constant.dtype == zeros[0].dtype:
            return _add_by_table(call, variable, constant, zeros[0].dtype)

    def run(arguments, n_threads):
        return call([arguments[0], arguments[3]], n_threads)

    run.layouts = _layout.ElementwiseLayouts((0, 3))
    return "qops QLinearAdd (bound)", run


def _add_by_table(call, variable, constant, dtype):
    """A bound QLinearAdd whose other operand is a constant of one value: a
    function of the variable operand's byte alone, so a 256-entry table, made
    by the add itself on every byte, looked up (GELU's + 1 between a
    QOperator model's nodes)."""
    every_byte = _qoperator.EVERY_BYTE[np.dtype(dtype)]
    pair = [every_byte, constant.reshape(())] if variable == 0 else [constant.reshape(()),
                                                                      every_byte]
    table = np.ascontiguousarray(call(pair, 1)[0].reshape(-1))

    def run(arguments, n_threads):
        x = arguments[variable]
        if type(x) is not np.ndarray or x.dtype != dtype:
            return call([arguments[0], arguments[3]], n_threads)
        y = _qoperator.apply_lookup_table(x, table)
        return [y.reshape(np.broadcast_shapes(x.shape, constant.shape))]

    return "qops QLinearAdd (by table)", run


def _prepared_per_tensor(node, graph, adapter, attributes, opset):
    """QuantizeLinear (float32 to 8 bits) or DequantizeLinear (8 bits to
    float32) with a constant float32 scale and 8-bit zero point of one value
    each, at the defaults: the kernels called with the parameters bound (a
    model's input and output nodes, which run once a run, cold); else None.
    An input the bound form does not take runs through the adapter."""
    if node.domain not in ("", "ai.onnx") or node.op_type not in ("QuantizeLinear",
                                                                   "DequantizeLinear"):
        return None
    names = list(node.input) + [""] * 3
    scale, zero_point = (graph.constants.get(name) if name else None for name in names[1:3])
    quantizing = node.op_type == "QuantizeLinear"
    defaults = {"axis", "saturate"} | ({"output_dtype"} if quantizing else set())
    # One value each, of rank 1 at most (as the adapter reads per-tensor pairs).
    if (scale is None or zero_point is None or scale.dtype != np.float32 or scale.size != 1
            or zero_point.size != 1 or max(scale.ndim, zero_point.ndim) > 1
            or zero_point.dtype not in (np.uint8, np.int8)
            or any(attributes[name] for name in set(attributes) - defaults)
            or _numpy_ops.native_tables() is None):
        return None
    if quantizing and attributes.get("output_dtype") and _nodes._onnx_dtype(
            attributes["output_dtype"]) != zero_point.dtype:
        return None
    scale, zero_point = scale.reshape(()), zero_point.reshape(())
    input_dtype = np.dtype(np.float32) if quantizing else zero_point.dtype
    try:  # the operator checks the parameters once
        adapter([np.zeros(1, input_dtype), scale, zero_point], attributes, opset)
    except QopsError:
        return None  # the adapter then says what is wrong, naming the node
    from qops.backends.native import quantize

    bound = (quantize.bound_quantize_per_tensor if quantizing
             else quantize.bound_dequantize_per_tensor)(scale, zero_point)

    def call(arguments, n_threads):
        x = arguments[0]
        if type(x) is np.ndarray and x.dtype == input_dtype and x.flags.c_contiguous:
            result = bound(x, n_threads)
            if result is not None:
                return [result]
        return adapter(arguments, attributes, opset)

    return f"qops {node.op_type} (bound)", call


def _prepared_dynamic_quantize(node, adapter, attributes, opset):
    """DynamicQuantizeLinear of float32 on the kernels, with no call through
    the operator's front end (a dynamically quantized model's every layer
    has four); None for another node.  An input the bound form does not
    take runs through the adapter."""
    if (node.domain not in ("", "ai.onnx") or node.op_type != "DynamicQuantizeLinear"
            or _numpy_ops.native_tables() is None):
        return None
    from qops.backends.native import quantize

    bound = quantize.bound_dynamic_quantize()

    def call(arguments, n_threads):
        result = bound(arguments[0], n_threads) if arguments else None
        if result is None:
            return adapter(arguments, attributes, opset)
        y, scale, zero_point = result
        # ONNX's scale and zero point are scalars.
        return [y, np.asarray(scale), np.asarray(zero_point)]

    return "qops DynamicQuantizeLinear (bound)", call


def _prepared_global_average(node, graph):
    """com.microsoft QLinearGlobalAveragePool, channels first, with constant
    per-tensor float32 scales and 8-bit zero points: bound to the kernel
    (:func:`qops.onnx._fusion._bound_global_average`); else None."""
    names = list(node.input) + [""] * 5
    values = [graph.constants.get(name) if name else None for name in names[1:5]]
    attributes = attribute_values(node)
    if (attributes.get("channels_last") or any(value is None or value.size != 1
                                               or value.ndim > 1 for value in values)
            or any(value.dtype != np.float32 for value in values[0::2])
            or values[1].dtype not in (np.uint8, np.int8)
            or values[3].dtype not in (np.uint8, np.int8)):
        return None
    fixed = [value.reshape(()) for value in values]
    adapter = _nodes.CONTRIB_ADAPTERS["QLinearGlobalAveragePool"]

    def call(arguments, n_threads):
        return adapter([arguments[0], *fixed], attributes, 1)

    bound = _fusion._bound_global_average(fixed, values[1].dtype, call)
    return None if bound is None else ("qops QLinearGlobalAveragePool (bound)", bound)


def _prepared_qgemm(node, graph):
    """com.microsoft QGemm with everything but A constant (C of one row at
    most): with alpha 1 and a quantized output, the compiled 1 x 1
    convolution (:func:`_qgemm_as_convolution`); else B' compiled once on
    MATRIX_MULTIPLY_INTEGER, the multipliers made once, onnxruntime's
    requantization after; else None.  An A the prepared form does not take
    runs through the adapter, which names what is wrong."""
    names = list(node.input) + [""] * 9
    constants = graph.constants
    if any(names[i] and names[i] not in constants for i in range(1, 9)) or (
            names[3] not in constants):
        return None
    values = [constants.get(name) if name else None for name in names[:9]]
    b, c = values[3], values[6]
    attributes = attribute_values(node)
    trans_a, trans_b = bool(attributes.get("transA", 0)), bool(attributes.get("transB", 0))
    if b.ndim != 2 or (c is not None and c.ndim == 2 and c.shape[0] != 1):
        return None
    k = b.shape[1] if trans_b else b.shape[0]
    a_zero = values[2]
    a_dtype = np.dtype(np.uint8) if a_zero is None else a_zero.dtype
    if a_dtype not in (np.uint8, np.int8):
        return None
    sample = np.zeros((k, 1) if trans_a else (1, k), a_dtype)
    try:
        _, b_columns, a_zero_point, tail = _qoperator.qgemm_checked(
            sample, *values[1:3], b, *values[4:9], alpha=attributes.get("alpha", 1.0),
            trans_a=trans_a, trans_b=trans_b)
        product = api.compile("MATRIX_MULTIPLY_INTEGER", b=b_columns,
                              a_zero_point=np.asarray(a_zero_point, a_dtype),
                              b_zero_point=tail.b_zero_point)
    except QopsError as error:
        raise node_error(node, str(error)) from None
    adapter = _nodes.CONTRIB_ADAPTERS["QGemm"]
    convolution = _qgemm_as_convolution(values, attributes, b_columns, a_dtype, a_zero_point)
    if convolution is not None:
        def call(arguments, n_threads):
            a = arguments[0]
            if not (type(a) is np.ndarray and a.dtype == a_dtype and a.ndim == 2
                    and a.shape[0 if trans_a else 1] == k):
                return adapter(arguments, attributes, 1)
            a = a.T if trans_a else a
            (y,) = convolution([np.ascontiguousarray(a)[:, :, None, None]], n_threads)
            return [y.reshape(a.shape[0], -1)]

        return "qops QGemm (compiled)", call
    # Every slot but A is bound, so the runner exists.
    run_product = product.data_runner()

    def call(arguments, n_threads):
        a = arguments[0]
        if not (type(a) is np.ndarray and a.dtype == a_dtype and a.ndim == 2
                and a.shape[0 if trans_a else 1] == k):
            return adapter(arguments, attributes, 1)
        sums = run_product(n_threads, np.ascontiguousarray(a.T if trans_a else a))
        return [tail.requantized(sums)]

    return "qops QGemm (compiled)", call


#: The largest magnitude of one product of two 8-bit values less their zero points.
_LARGEST_PRODUCT = 255 * 255


def _qgemm_as_convolution(values, attributes, b_columns, a_dtype, a_zero_point):
    """A QGemm of alpha 1 with a quantized output as the compiled 1 x 1
    convolution (A's rows its images), or None.  Its rule is then the
    convolution's: the exact sums plus C as the bias, times
    ``float32(a_scale * b_scale) / y_scale`` (onnxruntime's multiplier, whose
    ``alpha * a_scale`` is ``a_scale``), rounded half to even, plus the zero
    point, saturated; the whole requantization in the kernels' epilogue."""
    a_scale, b_scale, b_zero, c, y_scale, y_zero = (values[i] for i in (1, 4, 5, 6, 7, 8))
    k, n = b_columns.shape
    # The integer product the other form runs refuses a K whose sums may
    # leave int32; the convolution would sum them in int64: that K stays there.
    if (float(attributes.get("alpha", 1.0)) != 1.0 or y_scale is None or y_zero is None
            or k * _LARGEST_PRODUCT > np.iinfo(np.int32).max
            or a_scale.size != 1 or y_scale.size != 1 or y_zero.size != 1
            or y_zero.dtype not in (np.uint8, np.int8)
            or any(scale.dtype != np.float32 for scale in (a_scale, b_scale, y_scale))
            or b_scale.size not in (1, n) or (b_zero is not None and b_zero.size not in (1, n))
            or (c is not None and (c.dtype != np.int32 or c.size not in (1, n)))):
        return None
    bias = None if c is None else np.ascontiguousarray(np.broadcast_to(c.reshape(-1), (n,)))
    try:
        return _fusion._conv_call(
            np.ascontiguousarray(b_columns.T)[:, :, None, None],
            b_scale.reshape(-1) if b_scale.size > 1 else np.float32(b_scale.reshape(())),
            None if b_zero is None else (b_zero.reshape(-1) if b_zero.size > 1
                                         else b_zero.reshape(())),
            bias, {}, False, np.float32(a_scale.reshape(())),
            np.asarray(a_zero_point, a_dtype).reshape(())[()],
            _fusion.Quantization(y_scale, y_zero, 1), None)
    except QopsError:
        return None


def _prepared_n_bits(node, graph):
    """com.microsoft MatMulNBits with B and its parameters constant: compiled
    once (B interleaved, the parameters made once on the first run); else None."""
    names = list(node.input) + [""] * 6
    constants = graph.constants
    if any(names[i] and names[i] not in constants for i in range(1, 6)) or not names[1]:
        return None
    bound = {slot: constants[names[i]] for i, slot in
             enumerate(("a", "b", "scales", "zero_points", "g_idx", "bias")) if i and names[i]}
    try:
        compiled = api.compile("MatMulNBits", **bound,
                               **_nodes.n_bits_keywords(attribute_values(node)))
    except QopsError as error:
        raise node_error(node, str(error)) from None
    return "qops MatMulNBits (compiled)", lambda arguments, n_threads: [
        compiled(arguments[0], n_threads=n_threads)]


def _prepared_integer_to_float(node, graph):
    """com.microsoft MatMulIntegerToFloat with B (2-D), b_scale, b_zero_point
    and the bias constant: compiled once, for A's type as the model declares
    it (MATRIX_MULTIPLY_INTEGER_TO_FLOAT, B packed once); else None.  An A of
    the other byte type than B meets B taken to A's type by ``x ^ 0x80`` with
    its zero point, which leaves every difference, and so every sum, as the
    adapter's (which moves the smaller operand, usually A on every call);
    uint8 A, as DynamicQuantizeLinear makes it, is then read where it lies.
    A call the compiled form does not take (A of another type, of one or
    more than four dimensions, a scale or zero point per row) is the
    adapter's."""
    names = list(node.input) + [""] * 7
    constants = graph.constants
    b = constants.get(names[1]) if names[1] else None
    if b is None or b.ndim != 2 or b.dtype not in (np.uint8, np.int8):
        return None
    if any(names[i] and names[i] not in constants for i in (3, 5, 6)) or not names[3]:
        return None
    b_scale, bias = constants[names[3]], constants.get(names[6]) if names[6] else None
    b_zero_point = constants[names[5]] if names[5] else np.zeros((), b.dtype)
    columns = b.shape[1]
    if (b_scale.dtype != np.float32 or b_scale.size not in (1, columns) or b_scale.ndim > 1
            or b_zero_point.dtype != b.dtype or b_zero_point.size not in (1, columns)
            or b_zero_point.ndim > 1):
        return None
    if bias is not None and (bias.dtype != np.float32 or bias.shape != (columns,)):
        return None
    scale_row = b_scale.reshape(1, -1) if b_scale.size > 1 else b_scale.reshape(())
    zero_row = b_zero_point.reshape(1, -1) if b_zero_point.size > 1 else b_zero_point.reshape(())
    # A's scale and zero point constant too (one value each): bound as well,
    # so that a call brings A alone (the compiled operator's bound form).
    a_scale_constant = constants.get(names[2]) if names[2] else None
    a_zero_constant = constants.get(names[4]) if names[4] else None
    a_bound = (a_scale_constant is not None and a_scale_constant.dtype == np.float32
               and a_scale_constant.size == 1 and (not names[4] or (
                   a_zero_constant is not None and a_zero_constant.size == 1
                   and a_zero_constant.dtype in (np.uint8, np.int8))))

    def compiled_for(dtype):
        """The operator with B in ``dtype`` (A's) and whether A's parameters
        are bound with it."""
        weight, zero = b, zero_row
        if dtype != b.dtype:
            weight, zero = _nodes.other_byte_type(b, zero_row, "b")
        parameters = {}
        if a_bound and (a_zero_constant is None or a_zero_constant.dtype == dtype):
            parameters = dict(a_scale=a_scale_constant.reshape(())[()],
                              a_zero_point=(np.zeros((), dtype) if a_zero_constant is None
                                            else a_zero_constant).reshape(())[()])
        return (api.compile("MATRIX_MULTIPLY_INTEGER_TO_FLOAT", b=np.ascontiguousarray(weight),
                            b_scale=scale_row, b_zero_point=zero, bias=bias, **parameters),
                bool(parameters))

    # One form, made now (a run only reads it): A's type as the model declares
    # it, else B's; an A of the other type is the adapter's.
    declared = graph.types.get(names[0])
    a_dtype = np.dtype(b.dtype if declared is None else declared)
    if a_dtype not in (np.uint8, np.int8):
        return None
    try:
        compiled, a_parameters_bound = compiled_for(a_dtype)
    except QopsError:
        return None
    adapter = _nodes.CONTRIB_ADAPTERS["MatMulIntegerToFloat"]

    def call(arguments, n_threads):
        a, _, a_scale, _, a_zero_point = (list(arguments) + [None] * 5)[:5]
        if a_zero_point is None and type(a) is np.ndarray:
            a_zero_point = np.zeros((), a.dtype)
        # (The adapter takes A of 2 to 4 dimensions and refuses others.)
        if not (type(a) is np.ndarray and 2 <= a.ndim <= 4 and a.shape[-1] == b.shape[0]
                and a.dtype == a_dtype and type(a_zero_point) is np.ndarray
                and a_zero_point.dtype == a.dtype and a_zero_point.size == 1
                and type(a_scale) is np.ndarray and a_scale.dtype == np.float32
                and a_scale.size == 1):
            return adapter(arguments, {}, 1)
        rows = np.ascontiguousarray(a.reshape(-1, a.shape[-1]))
        if a_parameters_bound and a_scale is a_scale_constant and (
                a_zero_point is a_zero_constant or a_zero_constant is None and not names[4]):
            y = compiled(rows, n_threads=n_threads)
        elif a_parameters_bound:
            return adapter(arguments, {}, 1)
        else:
            y = compiled(rows, a_scale.reshape(())[()], a_zero_point.reshape(())[()],
                         n_threads=n_threads)
        shape = a.shape[:-1] + (columns,)
        # (A view would be copied where the run returns it.)
        return [y if y.shape == shape else y.reshape(shape)]

    return "qops MatMulIntegerToFloat (compiled)", call


def _prepared_qlinear(node, graph):
    """QLinearConv, QLinearMatMul, QGemm, MatMulNBits or MatMulIntegerToFloat
    with every parameter but the data constant, compiled once, or QLinearAdd
    with its parameters bound; None for any other node."""
    if node.domain == _nodes.CONTRIB_DOMAIN and node.op_type == "QLinearAdd":
        return _prepared_add(node, graph)
    if node.domain == _nodes.CONTRIB_DOMAIN and node.op_type == "QGemm":
        return _prepared_qgemm(node, graph)
    if node.domain == _nodes.CONTRIB_DOMAIN and node.op_type == "MatMulNBits":
        return _prepared_n_bits(node, graph)
    if node.domain == _nodes.CONTRIB_DOMAIN and node.op_type == "QLinearGlobalAveragePool":
        return _prepared_global_average(node, graph)
    if node.domain == _nodes.CONTRIB_DOMAIN and node.op_type == "MatMulIntegerToFloat":
        return _prepared_integer_to_float(node, graph)
    if node.domain not in ("", "ai.onnx") or node.op_type not in ("QLinearConv", "QLinearMatMul"):
        return None
    names = list(node.input) + [""] * 9
    constants = graph.constants

    def constant(position):
        return constants.get(names[position]) if names[position] else None

    # Everything but the data (input 0) is constant, the scales float32.
    if any(names[i] and names[i] not in constants for i in range(1, 9)) or (
            names[3] not in constants):
        return None
    if any(constant(i) is None or constant(i).dtype != np.float32 for i in (1, 4, 6)):
        return None
    if node.op_type == "QLinearConv":
        x_scale, x_zero, w, w_scale, w_zero, y_scale, y_zero = (constant(i) for i in
                                                                 (1, 2, 3, 4, 5, 6, 7))
        bias = constant(8)
        if names[8] and bias is None:
            return None
        if x_scale.size != 1 or y_scale.size != 1 or w.ndim not in (3, 4):
            return None
        x_zero = np.zeros((), np.uint8) if x_zero is None else x_zero
        y_zero = np.zeros((), np.uint8) if y_zero is None else y_zero
        if x_zero.size != 1 or y_zero.size != 1 or y_zero.dtype not in (np.uint8, np.int8):
            return None
        if w_scale.size > 1 and (w_scale.ndim != 1 or w_scale.size != w.shape[0]):
            return None
        output = _fusion.Quantization(y_scale, y_zero, 1)
        w_scale_slot = w_scale if w_scale.size > 1 else np.float32(w_scale.reshape(()))
        w_zero_slot = None if w_zero is None else (
            w_zero if w_zero.size > 1 else w_zero.reshape(()))
        try:
            call = _fusion._conv_call(w if w.ndim == 4 else w, w_scale_slot, w_zero_slot, bias,
                                      attribute_values(node), w.ndim == 3,
                                      np.float32(x_scale.reshape(())), x_zero.reshape(())[()],
                                      output, None)
        except QopsError as error:
            raise node_error(node, str(error)) from None

        def run(arguments, n_threads):
            return call(arguments[:1], n_threads)

        # Its calls in other layouts, and with the next convolution, read the
        # image, the node's first input, alone.
        run.layouts = getattr(call, "layouts", None)
        run.compiled = getattr(call, "compiled", None)
        return "qops QLinearConv (compiled)", run
    a_scale, a_zero, b, b_scale, b_zero, y_scale, y_zero = (constant(i) for i in range(1, 8))
    if b.ndim != 2 or a_scale.size != 1 or y_scale.size != 1 or b.dtype not in (np.uint8, np.int8):
        return None
    a_zero = np.zeros((), np.uint8) if a_zero is None else a_zero
    y_zero = np.zeros((), np.uint8) if y_zero is None else y_zero
    if a_zero.size != 1 or y_zero.size != 1 or y_zero.dtype not in (np.uint8, np.int8):
        return None
    if b_scale.size > 1 and b_scale.size != b.shape[1]:
        return None
    b_zero = np.zeros((), b.dtype) if b_zero is None else b_zero
    if b_zero.size > 1 and b_zero.size != b.shape[1]:
        return None
    input_quantization = _fusion.Quantization(a_scale, a_zero, 1)
    output = _fusion.Quantization(y_scale, y_zero, 1)
    try:
        call = _fusion._matmul_call(
            b, b_scale.reshape(-1) if b_scale.size > 1 else np.float32(b_scale.reshape(())),
            b_zero.reshape(-1) if b_zero.size > 1 else b_zero.reshape(()), input_quantization,
            output, None)
    except QopsError as error:
        raise node_error(node, str(error)) from None

    def matmul(arguments, n_threads):
        a = np.asarray(arguments[0])
        if a.ndim == 1:
            return [call([a[None, :]], n_threads)[0][0]]
        return call(arguments[:1], n_threads)

    return "qops QLinearMatMul (compiled)", matmul
