"""Groups of QDQ and dynamically quantized nodes, recognised and prepared as
one call of a qops integer operator.

A group is anchored at the node that ends it (a QuantizeLinear, or the
last node of a dynamic matrix multiply's chain) and owns its inner nodes;
the DequantizeLinear nodes that open it are left in the graph for any
other reader (the session drops them when nothing else reads them).  Every
pattern asks for what makes the fused call mean the same as the nodes:

* activations quantized per tensor to int8 or uint8, by constant scales
  (float32) and zero points;
* each value inside the group read by the next node only, and no graph
  output;
* a weight that is a constant DequantizeLinear input, per tensor or per
  output channel;
* for Add, Mul, pooling and Softmax, scales of the group's own; for the
  operators that only move values (Reshape, MaxPool, ...), the same scale
  and zero point on both sides, so that ``Q(op(DQ(x))) == op(x)`` exactly.

Relu and Clip between a convolution or product and its QuantizeLinear fold
into the saturation range: ``Q(clip(v, a, b)) == clip(Q(v), Q(a), Q(b))``
since quantizing is monotone.  A group that matches nothing stays as the
nodes it is, and runs as written.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

import qops as api
from qops.errors import QopsError, UnsupportedError
from qops.onnx import _layout, _nodes, _numpy_ops, _qoperator
from qops.onnx._graph import DEFAULT_DOMAIN, attribute_values
from qops.onnx._numpy_ops import native_tables
from qops.registry import dtypes as _dtypes

_BYTES = (np.dtype(np.uint8), np.dtype(np.int8))

#: The operators that only move, pick or compare values: with one scale and
#: zero point on both sides they run on the integers as they are.
MOVEMENT_OPERATORS = frozenset({
    "MaxPool", "Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze", "Slice", "Concat",
    "Split", "Pad", "Gather", "Resize"})


@dataclasses.dataclass(frozen=True)
class Quantization:
    """A QuantizeLinear's or DequantizeLinear's constant parameters."""

    scale: np.ndarray
    zero_point: np.ndarray
    axis: int

    @property
    def dtype(self):
        return self.zero_point.dtype

    @property
    def per_tensor(self):
        return self.scale.size == 1 and self.zero_point.size == 1

    def scalar_scale(self):
        return np.float32(self.scale.reshape(()))

    def scalar_zero_point(self):
        """The zero point as a NumPy scalar: compiled operators bind a call's
        form only when its parameters are immutable objects."""
        return self.zero_point.reshape(())[()]

    def same_as(self, other):
        return (self.per_tensor and other.per_tensor and self.dtype == other.dtype
                and self.scalar_scale() == other.scalar_scale()
                and self.scalar_zero_point() == other.scalar_zero_point())


#: The weight types a DequantizeLinear -> MatMul pair runs as MatMulNBits, and their bits.
_N_BITS = {"INT2": 2, "UINT2": 2, "INT4": 4, "UINT4": 4, "INT8": 8, "UINT8": 8}


def _blobs(codes, bits, block_size):
    """Unsigned ``codes`` (rows x count) packed as MatMulNBits packs B: each
    row in blocks of ``block_size`` (the last padded with 0), ``bits`` each,
    low bits first: (rows, blocks, block_size * bits // 8) uint8.  With
    ``block_size`` 1, one blob of all the row's codes (zero points)."""
    rows, count = codes.shape
    per_byte = 8 // bits
    if block_size == 1:
        block_size = -(-count // per_byte) * per_byte
    blocks = -(-count // block_size)
    padded = np.zeros((rows, blocks * block_size), np.uint32)
    padded[:, :count] = codes
    grouped = padded.reshape(rows, -1, per_byte) << (np.arange(per_byte, dtype=np.uint32) * bits)
    return np.ascontiguousarray(
        grouped.sum(axis=2).astype(np.uint8).reshape(rows, blocks, block_size * bits // 8))


@dataclasses.dataclass
class Group:
    """A recognised group: the nodes it replaces and its prepared call.

    ``inputs`` are the names the call reads (``None`` for an omitted one),
    ``outputs`` the names it writes; ``call(arguments, n_threads)`` returns
    the outputs' values in order.
    """

    kind: str
    anchor: int
    consumed: frozenset
    inputs: list
    outputs: list
    call: object
    label: str


#: Elementwise float nodes a byte chain (Matcher._byte_chain) takes, and the
#: most of them in one chain.
_CHAIN_OPERATORS = frozenset({"Erf", "Add", "Sub", "Mul", "Div"})
_CHAIN_MOST_NODES = 8


def _is(node, op_type):
    return node is not None and node.op_type == op_type and node.domain in ("", "ai.onnx")


class Matcher:
    """Finds groups in a :class:`qops.onnx._graph.Graph`.

    ``runner_for(node)`` gives the ``onnx.reference`` implementation of a
    node (for the movement operators, run on integers);
    ``softmax`` and ``multiply`` are the QLinearSoftmax and QLinearMul rules
    (onnxruntime's), or None where they are not available.
    """

    def __init__(self, graph, runner_for, contrib=None):
        self.graph = graph
        self.runner_for = runner_for
        self.contrib = contrib or {}
        self.claimed = set()

    # -- reading Q and DQ ---------------------------------------------------------------

    def constant(self, name):
        if not name:
            return None
        return self.graph.constants.get(name)

    def dequantized(self, name):
        """(DequantizeLinear's index, its x, its Quantization, x's dtype) for a
        value a plain DequantizeLinear makes, else None."""
        index = self.graph.producer.get(name)
        if index is None:
            return None
        node = self.graph.nodes[index]
        if not _is(node, "DequantizeLinear"):
            return None
        attributes = attribute_values(node)
        if attributes.get("block_size", 0) or attributes.get("output_dtype", 1) != 1:
            return None
        inputs = list(node.input) + ["", ""]
        scale, zero_point = self.constant(inputs[1]), self.constant(inputs[2])
        if scale is None or scale.dtype != np.float32 or (inputs[2] and zero_point is None):
            return None
        dtype = zero_point.dtype if zero_point is not None else self.graph.types.get(inputs[0])
        if dtype is None:
            return None
        if zero_point is None:
            zero_point = np.zeros(scale.shape, dtype)
        if scale.size == 1 and zero_point.size == 1:  # one value of any rank: per tensor
            scale, zero_point = scale.reshape(()), zero_point.reshape(())
        if zero_point.dtype != dtype or zero_point.shape != scale.shape:
            return None
        if not np.all(np.isfinite(scale)) or not np.all(scale > 0):
            return None
        return index, inputs[0], Quantization(scale, zero_point, int(attributes.get("axis", 1))), dtype

    def activation(self, name):
        """``dequantized(name)`` of an 8-bit tensor quantized per tensor."""
        found = self.dequantized(name)
        if found is None or found[3] not in _BYTES or not found[2].per_tensor:
            return None
        return found

    def quantizer(self, node):
        """The Quantization of a QuantizeLinear to int8 or uint8, per tensor."""
        if not _is(node, "QuantizeLinear"):
            return None
        attributes = attribute_values(node)
        if attributes.get("block_size", 0) or attributes.get("precision", 0):
            return None
        inputs = list(node.input) + ["", ""]
        scale, zero_point = self.constant(inputs[1]), self.constant(inputs[2])
        if scale is None or scale.dtype != np.float32 or scale.size != 1 or (
                inputs[2] and zero_point is None):
            return None
        if not (np.isfinite(scale).all() and (scale > 0).all()):
            return None
        if zero_point is None:
            code = attributes.get("output_dtype", 0)
            dtype = np.dtype(np.uint8) if not code else _nodes._onnx_dtype(code)
            zero_point = np.zeros((), dtype)
        if zero_point.dtype not in _BYTES or zero_point.size != 1:
            return None
        return Quantization(scale, zero_point, 1)

    def sole_producer(self, name, reader):
        """The node making ``name`` if ``reader`` (an index) is its one reader."""
        if self.graph.sole_consumer(name) != reader:
            return None, None
        index = self.graph.producer.get(name)
        if index is None or index in self.claimed:
            return None, None
        return index, self.graph.nodes[index]

    # -- the patterns ---------------------------------------------------------------------

    def groups(self):
        """Every group, claiming each node once (earlier anchors first)."""
        found = []
        for index, node in enumerate(self.graph.nodes):
            if index in self.claimed:
                continue
            group = None
            if _is(node, "QuantizeLinear"):
                group = self._quantized_group(index, node) or self._byte_chain(index, node)
            elif _is(node, "MatMulInteger"):
                group = self._dynamic_matmul(index, node)
            elif _is(node, "Split"):
                group = self._split(index, node)
            elif _is(node, "MatMul"):
                group = self._weight_only_matmul(index, node)
            elif _is(node, "Erf"):
                group = self._gelu(index, node)
            elif _is(node, "Softmax"):
                group = self._scaled_softmax(index, node)
            if group is not None:
                self.claimed |= group.consumed
                found.append(group)
        return found

    def _quantized_group(self, q_index, q_node):
        output = self.quantizer(q_node)
        if output is None:
            return None
        middle_index, middle = self.sole_producer(q_node.input[0], q_index)
        if middle is None or middle.domain not in ("", "ai.onnx"):
            return None
        clamp, consumed = None, {q_index, middle_index}
        if middle.op_type in ("Relu", "Clip"):
            clamp = self._activation_range(middle, output)
            if clamp is None:
                return None
            inner_index, inner = self.sole_producer(middle.input[0], middle_index)
            if (inner is None or inner.domain not in ("", "ai.onnx")
                    or inner.op_type not in ("Conv", "MatMul", "Gemm")):
                return None
            consumed.add(inner_index)
            middle = inner
        build = {"Conv": self._conv, "MatMul": self._matmul, "Gemm": self._gemm,
                 "Add": self._binary, "Mul": self._binary, "AveragePool": self._pool,
                 "GlobalAveragePool": self._pool, "Softmax": self._softmax}.get(middle.op_type)
        if build is None and middle.op_type in MOVEMENT_OPERATORS and clamp is None:
            build = self._movement
        if build is None:
            return None
        try:
            made = build(middle, output, clamp)
        except QopsError:
            # Constants the operator refuses (a bias of the wrong length, ...):
            # the nodes run as written and say what is wrong, naming themselves.
            return None
        if made is None:
            return None
        kind, inputs, call = made
        return Group(kind, q_index, frozenset(consumed), inputs, [q_node.output[0]], call,
                     f"{middle.name or middle.op_type} ({kind})")

    def _weight_only_matmul(self, index, node):
        """MatMul(float32 A, DequantizeLinear(a constant 2-, 4- or 8-bit
        weight blocked along K)): MatMulNBits on the weight as it is stored,
        never dequantized whole (within float32 rounding of the two nodes:
        the weights are DEQUANTIZE's, the sums the MatMulNBits rule's)."""
        inputs = list(node.input)
        if len(inputs) != 2 or self.graph.types.get(inputs[0]) != np.float32:
            return None
        dq_index, dq = self.sole_producer(inputs[1], index)
        if dq is None or not _is(dq, "DequantizeLinear"):
            return None
        attributes = attribute_values(dq)
        block_size = int(attributes.get("block_size", 0))
        # MatMulNBits' own checks (a power of two, at least 16) come with compile.
        if (block_size <= 0 or attributes.get("axis", 1) not in (0, -2)
                or attributes.get("output_dtype", 1) != 1):
            return None
        names = list(dq.input) + ["", ""]
        weight, scale = self.constant(names[0]), self.constant(names[1])
        zero_point = self.constant(names[2]) if names[2] else None
        if weight is None or scale is None or (names[2] and zero_point is None):
            return None
        bits = _N_BITS.get(_dtypes.name_of(weight.dtype))
        if bits is None or weight.ndim != 2 or scale.dtype != np.float32:
            return None
        k, n = weight.shape
        k_blocks = -(-k // block_size)
        if scale.shape != (k_blocks, n) or (zero_point is not None and (
                zero_point.shape != scale.shape or zero_point.dtype != weight.dtype)):
            return None
        # Signed codes move up by 2**(bits - 1), and their zero points with them.
        offset = 2 ** (bits - 1) if _dtypes.name_of(weight.dtype).startswith("INT") else 0
        codes = weight.astype(np.int64) + offset
        zeros = (np.zeros(scale.shape, np.int64) if zero_point is None
                 else zero_point.astype(np.int64)) + offset
        try:
            compiled = api.compile(
                "MatMulNBits", b=_blobs(codes.T, bits, block_size),
                scales=np.ascontiguousarray(scale.T), zero_points=_blobs(zeros.T, bits, 1)[:, 0],
                k=k, n=n, bits=bits, block_size=block_size)
        except QopsError:
            return None

        def call(arguments, n_threads):
            return [compiled(arguments[0], n_threads=n_threads)]

        return Group("DQ MatMul (MatMulNBits)", index, frozenset({index, dq_index}),
                     [inputs[0]], [node.output[0]], call,
                     f"{node.name or node.op_type} (DQ MatMul as MatMulNBits)")

    def _activation_range(self, node, output):
        """The integer range a Relu or Clip before ``output``'s quantizer leaves."""
        info = np.iinfo(output.dtype)
        low, high = info.min, info.max
        if node.op_type == "Relu":
            return max(low, int(output.scalar_zero_point())), high
        attributes = attribute_values(node)
        opset = self.graph.opsets.get(DEFAULT_DOMAIN, 0)
        if opset < 11:
            bounds = [attributes.get("min"), attributes.get("max")]
        else:
            names = list(node.input) + ["", ""]
            bounds = []
            for name in names[1:3]:
                if not name:
                    bounds.append(None)
                    continue
                value = self.constant(name)
                if value is None or value.size != 1:
                    return None
                bounds.append(float(value.reshape(())))
        quantized = []
        for bound in bounds:
            if bound is None:
                quantized.append(None)
                continue
            if math.isnan(bound):
                return None
            quantized.append(int(api.quantize_linear(
                np.float32(bound), output.scalar_scale(), output.zero_point.reshape(()))))
        return (low if quantized[0] is None else max(low, quantized[0]),
                high if quantized[1] is None else min(high, quantized[1]))

    def _weight(self, name, axis_of_channels, rank):
        """A constant 8-bit weight behind a DequantizeLinear, per tensor or
        per channel along ``axis_of_channels``: (weight, scale, zero point)."""
        found = self.dequantized(name)
        if found is None:
            return None
        _, x_name, quantization, dtype = found
        weight = self.constant(x_name)
        if weight is None or dtype not in _BYTES or weight.ndim != rank:
            return None
        if quantization.per_tensor:
            return weight, quantization.scalar_scale(), quantization.scalar_zero_point()
        axis = quantization.axis + rank if quantization.axis < 0 else quantization.axis
        if (axis != axis_of_channels or quantization.scale.ndim != 1
                or quantization.scale.size != weight.shape[axis]):
            return None
        return weight, quantization.scale, quantization.zero_point

    def _bias(self, name, scale_product):
        """A constant int32 bias behind a DequantizeLinear whose scale is the
        product of the input's and the weight's (as quantizers write it)."""
        found = self.dequantized(name)
        if found is None:
            return None
        _, x_name, quantization, dtype = found
        bias = self.constant(x_name)
        if bias is None or dtype != np.int32 or bias.ndim != 1:
            return None
        if np.any(quantization.zero_point != 0):
            return None
        try:
            given, expected = np.broadcast_arrays(quantization.scale,
                                                  np.asarray(scale_product, np.float32))
        except ValueError:
            return None
        if not np.allclose(given, expected, rtol=2.0 ** -20, atol=0):
            return None
        return bias

    def _conv(self, node, output, clamp):
        x = self.activation(node.input[0])
        if x is None:
            return None
        _, x_name, x_quantization, _ = x
        attributes = attribute_values(node)
        weight = self._weight(node.input[1], 0, 4)
        squeeze = False
        if weight is None:
            weight = self._weight(node.input[1], 0, 3)
            squeeze = weight is not None
        if weight is None:
            return None
        kernel_shape = attributes.get("kernel_shape")
        if kernel_shape is not None and tuple(kernel_shape) != tuple(weight[0].shape[2:]):
            return None  # a node at odds with its weight: as written, where it fails by name
        filter_, filter_scale, filter_zero_point = weight
        bias = None
        if len(node.input) > 2 and node.input[2]:
            bias = self._bias(node.input[2], np.float32(x_quantization.scalar_scale()
                                                        * np.asarray(filter_scale, np.float32)))
            if bias is None:
                return None
        if np.ndim(filter_scale) == 1:
            filter_scale = np.asarray(filter_scale, np.float32)
        return "QDQ Conv", [x_name], _conv_call(
            filter_, filter_scale, filter_zero_point, bias, attributes, squeeze,
            x_quantization.scalar_scale(), x_quantization.scalar_zero_point(), output, clamp)

    def _matmul(self, node, output, clamp):
        a = self.activation(node.input[0])
        if a is None:
            return None
        _, a_name, a_quantization, _ = a
        weight = self._weight(node.input[1], 1, 2)
        if weight is not None:
            b, b_scale, b_zero_point = weight
            return "QDQ MatMul", [a_name], _matmul_call(
                b, b_scale, b_zero_point, a_quantization, output, clamp)
        other = self.activation(node.input[1])
        if other is None:
            return None
        _, b_name, b_quantization, _ = other
        parameters = [a_quantization.scalar_scale(), a_quantization.zero_point.reshape(()),
                      b_quantization.scalar_scale(), b_quantization.zero_point.reshape(()),
                      output.scalar_scale(), output.zero_point.reshape(())]

        literal = _literal((a_quantization, b_quantization), output, np.matmul)

        def call(arguments, n_threads):
            a_value, b_value = arguments
            try:
                (y,) = _nodes.qlinear_matmul([a_value, parameters[0], parameters[1], b_value,
                                              parameters[2], parameters[3], parameters[4],
                                              parameters[5]], {}, 21)
            except UnsupportedError:  # past DirectML's 4 dimensions: as written
                y = literal(arguments)
            return [_clamped(y, clamp)]

        return "QDQ MatMul", [a_name, b_name], call

    def _gemm(self, node, output, clamp):
        attributes = attribute_values(node)
        if float(attributes.get("alpha", 1.0)) != 1.0:
            return None
        a = self.activation(node.input[0])
        if a is None:
            return None
        _, a_name, a_quantization, _ = a
        trans_b = bool(attributes.get("transB", 0))
        weight = self._weight(node.input[1], 0 if trans_b else 1, 2)
        if weight is None:
            return None
        b, b_scale, b_zero_point = weight
        filter_ = b if trans_b else b.T
        channels = filter_.shape[0]
        bias = None
        if len(node.input) > 2 and node.input[2]:
            if float(attributes.get("beta", 1.0)) != 1.0:
                return None
            bias = self._bias(node.input[2], np.float32(a_quantization.scalar_scale()
                                                        * np.asarray(b_scale, np.float32)))
            if bias is None or bias.size not in (1, channels):
                return None
            bias = np.broadcast_to(bias, (channels,))
        conv = _conv_call(np.ascontiguousarray(filter_)[:, :, None, None],
                          np.asarray(b_scale, np.float32) if np.ndim(b_scale) else b_scale,
                          b_zero_point, bias, {}, False, a_quantization.scalar_scale(),
                          a_quantization.scalar_zero_point(), output, clamp)
        trans_a = bool(attributes.get("transA", 0))

        def call(arguments, n_threads):
            (a_value,) = arguments
            a_value = np.asarray(a_value)
            if a_value.ndim != 2:
                raise api.ValidationError(f"Gemm: A has {a_value.ndim} dimensions; Gemm takes 2",
                                          slot="A", given=a_value.shape)
            if trans_a:
                a_value = a_value.T
            rows = a_value.shape[0]
            (y,) = conv([np.ascontiguousarray(a_value)[:, :, None, None]], n_threads)
            return [y.reshape(rows, channels)]

        return "QDQ Gemm", [a_name], call

    def _binary(self, node, output, clamp):
        if len(node.input) != 2:
            return None
        a, b = self.activation(node.input[0]), self.activation(node.input[1])
        if a is None or b is None or not (a[3] == b[3] == output.dtype):
            return None
        fixed = [a[2].scalar_scale(), a[2].scalar_zero_point(), b[2].scalar_scale(),
                 b[2].scalar_zero_point(), output.scalar_scale(), output.scalar_zero_point()]
        literal = _literal((a[2], b[2]), output,
                           np.add if node.op_type == "Add" else np.multiply)
        if node.op_type == "Add":
            add = add_call(*fixed)

            def call(arguments, n_threads):
                try:
                    return add(arguments, n_threads)
                except UnsupportedError:  # past DirectML's 8 dimensions: as written
                    return [literal(arguments)]

            call.layouts = _layout.ElementwiseLayouts((0, 1))
            return "QDQ Add", [a[1], b[1]], call
        rule = self.contrib.get("QLinearMul")
        if rule is None:
            return None

        def call(arguments, n_threads):
            a_value, b_value = arguments
            return rule([a_value, fixed[0], fixed[1], b_value, fixed[2], fixed[3], fixed[4],
                         fixed[5]], {}, 1)

        return f"QDQ {node.op_type}", [a[1], b[1]], call

    def _pool(self, node, output, clamp):
        x = self.activation(node.input[0])
        if x is None or x[3] != output.dtype:
            return None
        attributes = attribute_values(node)
        # DirectML's output size is the floor: ceil_mode runs as written.
        if any(d != 1 for d in attributes.get("dilations") or ()) or attributes.get("ceil_mode"):
            return None
        rule = (_nodes.qlinear_global_average_pool if node.op_type == "GlobalAveragePool"
                else _nodes.qlinear_average_pool)
        kept = {k: v for k, v in attributes.items()
                if k in ("kernel_shape", "strides", "pads", "auto_pad", "count_include_pad",
                         "ceil_mode")}
        fixed = [x[2].scalar_scale(), x[2].zero_point.reshape(()), output.scalar_scale(),
                 output.zero_point.reshape(())]
        runner = self.runner_for(node)
        literal = None if runner is None else _literal((x[2],), output,
                                                       lambda value: runner([value])[0])

        def call(arguments, n_threads):
            try:
                return rule([arguments[0], *fixed], kept, 1)
            except UnsupportedError:  # past DirectML's 3 spatial axes: as written
                if literal is None:
                    raise
                return [literal(arguments)]

        bound = (_bound_global_average(fixed, x[3], call)
                 if node.op_type == "GlobalAveragePool" else None)
        return f"QDQ {node.op_type}", [x[1]], bound or call

    def _softmax(self, node, output, clamp):
        rule = self.contrib.get("QLinearSoftmax")
        x = self.activation(node.input[0])
        if rule is None or x is None or x[3] != output.dtype:
            return None
        attributes = attribute_values(node)
        opset = self.graph.opsets.get(DEFAULT_DOMAIN, 13)
        kept = {"axis": int(attributes.get("axis", -1 if opset >= 13 else 1)),
                "opset": opset}
        fixed = [x[2].scalar_scale(), x[2].zero_point.reshape(()), output.scalar_scale(),
                 output.zero_point.reshape(())]

        def call(arguments, n_threads):
            return rule([arguments[0], *fixed], kept, 1)

        return "QDQ Softmax", [x[1]], call

    def _movement(self, node, output, clamp):
        data_inputs = list(node.input) if node.op_type == "Concat" else list(node.input[:1])
        quantized = []
        for name in data_inputs:
            found = self.activation(name)
            if found is None or not found[2].same_as(output):
                return None
            quantized.append(found[1])
        if node.op_type == "Split" or len([o for o in node.output if o]) != 1:
            return None
        attributes = attribute_values(node)
        if node.op_type == "Resize" and (
                attributes.get("mode", "nearest") != "nearest"
                or attributes.get("coordinate_transformation_mode") == "tf_crop_and_resize"):
            # Crop and resize writes extrapolation_value, a float, outside the crop.
            return None
        others = list(node.input[len(data_inputs):])
        replaced = {}
        if node.op_type == "Pad":
            # Before opset 11 the padding value is an attribute the integers
            # cannot take; from 11 on it is an input, quantized here.
            if self.graph.opsets.get(DEFAULT_DOMAIN, 0) < 11:
                return None
            if attributes.get("mode", "constant") == "constant":
                value = np.zeros((), np.float32)
                if len(others) >= 2 and others[1]:
                    value = self.constant(others[1])
                    if value is None or value.size != 1:
                        return None
                others += [""] * (2 - len(others))
                replaced[1] = api.quantize_linear(
                    np.asarray(value, np.float32).reshape(()), output.scalar_scale(),
                    output.zero_point.reshape(()))
        runner = self.runner_for(node)
        if runner is None:
            return None
        count = len(quantized)

        def call(arguments, n_threads):
            rest = list(arguments[count:])
            for position, value in replaced.items():
                rest[position] = value
            return [runner(list(arguments[:count]) + rest)[0]]

        if count == 1 and not replaced:
            call.layouts = _layout.following(runner)
        return f"QDQ {node.op_type} on integers", quantized + others, call

    def _split(self, index, node):
        """DQ(x) -> Split -> a QuantizeLinear on each part, every one with x's
        scale and zero point: the split on the integers.  The group runs where
        the first part's QuantizeLinear was, so every part exists before any
        of their readers runs."""
        x = self.activation(node.input[0])
        if x is None or not node.output or not all(node.output):
            return None
        quantizers = []
        for name in node.output:
            reader = self.graph.sole_consumer(name)
            if reader is None or reader in self.claimed:
                return None
            q_node = self.graph.nodes[reader]
            output = self.quantizer(q_node)
            if output is None or not x[2].same_as(output) or q_node.input[0] != name:
                return None
            quantizers.append((reader, q_node))
        runner = self.runner_for(node)
        if runner is None:
            return None

        def call(arguments, n_threads):
            return runner(list(arguments))

        anchor = min(reader for reader, _ in quantizers)
        consumed = frozenset({index} | {reader for reader, _ in quantizers})
        return Group("QDQ Split on integers", anchor, consumed, [x[1]] + list(node.input[1:]),
                     [q_node.output[0] for _, q_node in quantizers], call,
                     f"{node.name or 'Split'} (QDQ Split on integers)")

    # -- dynamic quantization -------------------------------------------------------------

    def _dynamic_matmul(self, index, node):
        """DynamicQuantizeLinear -> MatMulInteger(x, constant W) -> Cast(float)
        -> Mul(scale of x * scale of W) [-> Add(constant bias)] as
        MATRIX_MULTIPLY_INTEGER_TO_FLOAT."""
        inputs = list(node.input) + ["", ""]
        a_name, b_name, a_zero_name, b_zero_name = inputs[:4]
        dynamic = self.graph.producer_node(a_name)
        if (not _is(dynamic, "DynamicQuantizeLinear") or len(dynamic.output) != 3
                or not all(dynamic.output) or dynamic.output[0] != a_name):
            return None
        scale_name = dynamic.output[1]
        if a_zero_name and a_zero_name != dynamic.output[2]:
            return None
        b = self.constant(b_name)
        if b is None or b.ndim != 2 or b.dtype not in _BYTES:
            return None
        b_zero_point = self.constant(b_zero_name) if b_zero_name else np.zeros((), b.dtype)
        if b_zero_point is None or b_zero_point.size not in (1, b.shape[1]):
            return None
        cast_index, cast = self.sole_producer_of_reader(node.output[0], index)
        if not _is(cast, "Cast") or attribute_values(cast).get("to") != 1:
            return None
        mul_index, mul = self.sole_producer_of_reader(cast.output[0], cast_index)
        if not _is(mul, "Mul") or len(mul.input) != 2:
            return None
        multiplier = mul.input[1] if mul.input[0] == cast.output[0] else mul.input[0]
        b_scale = self._scale_factor(multiplier, scale_name)
        if b_scale is None or b_scale.size not in (1, b.shape[1]):
            return None
        consumed = {index, cast_index, mul_index}
        end, bias = mul, None
        add_index, add = self.sole_producer_of_reader(mul.output[0], mul_index)
        if _is(add, "Add") and len(add.input) == 2:
            other = add.input[1] if add.input[0] == mul.output[0] else add.input[0]
            value = self.constant(other)
            if (value is not None and value.dtype == np.float32 and value.ndim == 1
                    and value.size == b.shape[1]):
                bias, end = value, add
                consumed.add(add_index)
        if b.dtype == np.int8:
            # DynamicQuantizeLinear's output is uint8 and the operator takes one
            # type: b + 128 and its zero point + 128 leave every difference as it was.
            b, b_zero_point = (np.bitwise_xor(np.ascontiguousarray(v).view(np.uint8), 0x80)
                               for v in (b, np.asarray(b_zero_point, np.int8)))
        b_scale_row = b_scale.reshape(1, -1) if b_scale.size > 1 else b_scale.reshape(())
        b_zero_row = (b_zero_point.reshape(1, -1) if b_zero_point.size > 1
                      else b_zero_point.reshape(()))
        columns = b.shape[1]
        # B, its parameters and the bias bound and packed once.
        compiled = api.compile("MATRIX_MULTIPLY_INTEGER_TO_FLOAT", b=np.ascontiguousarray(b),
                               b_scale=b_scale_row, b_zero_point=b_zero_row, bias=bias)
        compiled(np.zeros((1, b.shape[0]), np.uint8), np.float32(1), np.uint8(0), n_threads=1)

        def call(arguments, n_threads):
            a_value, a_scale, a_zero_point = arguments
            a_value = np.asarray(a_value)
            if a_zero_point is None:  # MatMulInteger without a_zero_point: zero
                a_zero_point = np.zeros((), a_value.dtype)
            lead = a_value.shape[:-1]
            rows = np.ascontiguousarray(a_value.reshape(-1, a_value.shape[-1]))
            y = compiled(rows, np.asarray(a_scale, np.float32).reshape(())[()],
                         np.asarray(a_zero_point).reshape(())[()], n_threads=n_threads)
            shape = lead + (columns,)
            return [y if y.shape == shape else y.reshape(shape)]

        label = f"{node.name or 'MatMulInteger'} (dynamic MatMul)"
        return Group("dynamic MatMul", max(consumed), frozenset(consumed),
                     [a_name, scale_name, a_zero_name], [end.output[0]], call, label)

    # -- float operators --------------------------------------------------------------

    def _single_float32(self, name):
        """A constant float32 of one value (any rank), else None."""
        value = self.constant(name)
        if value is None or value.dtype != np.float32 or value.size != 1:
            return None
        return value

    def _other_input(self, node, name):
        """The input of a two-input ``node`` that is not ``name`` (None if
        ``name`` is not one of them)."""
        if len(node.input) != 2 or name not in node.input:
            return None
        return node.input[1] if node.input[0] == name else node.input[0]

    def _gelu(self, index, node):
        """GELU's erf form, Div(x, c) -> Erf -> Add(., c') -> Mul(x, .) ->
        Mul(., c''), with constant float32 scalars and float32 x, as one call
        that makes each step as the nodes do (tables.gelu_float32): one pass
        over x instead of five."""
        native = native_tables()
        if native is None or len(node.input) != 1 or len(node.output) != 1:
            return None
        div_index, div = self.sole_producer(node.input[0], index)
        if not _is(div, "Div") or len(div.input) != 2:
            return None
        x, divisor = div.input[0], self._single_float32(div.input[1])
        if divisor is None or self.graph.types.get(x) != np.float32:
            return None
        add_index, add = self.sole_producer_of_reader(node.output[0], index)
        if not _is(add, "Add"):
            return None
        addend = self._single_float32(self._other_input(add, node.output[0]))
        times_index, times = self.sole_producer_of_reader(add.output[0], add_index)
        if not _is(times, "Mul") or self._other_input(times, add.output[0]) != x:
            return None
        last_index, last = self.sole_producer_of_reader(times.output[0], times_index)
        if addend is None or not _is(last, "Mul"):
            return None
        factor = self._single_float32(self._other_input(last, times.output[0]))
        if factor is None:
            return None
        # The constants' shapes broadcast with x's as the nodes broadcast them
        # (a constant of one value may still add leading ones).
        constant_shapes = [divisor.shape, addend.shape, factor.shape]
        divisor, addend, factor = (value.reshape(())[()] for value in (divisor, addend, factor))

        def call(arguments, n_threads):
            (value,) = arguments
            value = np.asarray(value)
            if value.dtype != np.float32:
                raise TypeError(f"Gelu: x is {value.dtype}; the model declares float32")
            y = native.gelu_float32(value, divisor, addend, factor, n_threads=n_threads)
            return [y.reshape(np.broadcast_shapes(value.shape, *constant_shapes))]

        consumed = {div_index, index, add_index, times_index, last_index}
        return Group("qops Gelu (fused)", max(consumed), frozenset(consumed), [x],
                     [last.output[0]], call, f"{last.name or 'Mul'} (qops Gelu (fused))")

    def _byte_chain(self, q_index, q_node):
        """DQ(x) -> a chain of elementwise float nodes (Erf, and Add, Sub, Mul
        or Div with a constant float32 of one value) -> Q, 8-bit x and output
        quantized per tensor: a function of x's byte alone, so one 256-entry
        table, made at once by the very steps the nodes take (the DQ and Q
        nodes' own rule, each node's implementation here) on every byte, and
        looked up.  GELU's Div -> Erf between a QOperator model's QLinear
        nodes is one: three passes over the tensor and two float buffers,
        where the lookup is one pass over bytes."""
        output = self.quantizer(q_node)
        if output is None:
            return None
        chain, name, reader = [], q_node.input[0], q_index
        while len(chain) < _CHAIN_MOST_NODES:
            index, node = self.sole_producer(name, reader)
            if node is None or node.op_type not in _CHAIN_OPERATORS or node.domain not in (
                    "", "ai.onnx") or len(node.output) != 1:
                return None
            if node.op_type == "Erf":
                if len(node.input) != 1:
                    return None
                chained = node.input[0]
            else:
                if len(node.input) != 2:
                    return None
                if self._single_float32(node.input[1]) is not None:
                    chained = node.input[0]
                elif self._single_float32(node.input[0]) is not None:
                    chained = node.input[1]
                else:
                    return None
            chain.append((index, node, chained))
            found = self.activation(chained)
            if found is not None:
                break
            name, reader = chained, index
        else:
            return None
        dq_index, x_name, _, x_dtype = found
        if self.graph.types.get(x_name) not in (None, x_dtype):
            return None
        chain.reverse()
        dq_node = self.graph.nodes[dq_index]
        try:
            table, shape = self._chain_table(dq_node, x_dtype, chain, q_node)
        except Exception:  # noqa: BLE001 - a chain the nodes cannot run: left to them
            return None
        consumed = {q_index} | {index for index, _, _ in chain}
        if self.graph.sole_consumer(dq_node.output[0]) == chain[0][0]:
            consumed.add(dq_index)

        def call(arguments, n_threads):
            x = np.asarray(arguments[0])
            if x.dtype != x_dtype:
                raise TypeError(f"DequantizeLinear: x is {x.dtype}; the chain takes {x_dtype}")
            y = _qoperator.apply_lookup_table(x, table)
            return [y.reshape(np.broadcast_shapes(x.shape, shape))]

        steps = " -> ".join(node.op_type for _, node, _ in chain)
        return Group("qops byte chain (lookup)", q_index, frozenset(consumed), [x_name],
                     [q_node.output[0]], call,
                     f"{q_node.name or 'QuantizeLinear'} (DQ -> {steps} -> Q, one lookup)")

    def _chain_table(self, dq_node, x_dtype, chain, q_node):
        """The chain's output byte for each input byte (``table[b]`` for the
        byte b, as raw bytes are read), and the shape its constants broadcast
        to (x's shape then broadcasts with it)."""
        def constants(node):
            """A Q or DQ node's scale and zero point (None where omitted)."""
            return [self.constant(name) if name else None for name in node.input[1:]]

        every_byte = _qoperator.EVERY_BYTE[np.dtype(x_dtype)]
        value = _nodes.dequantize_linear([every_byte] + constants(dq_node),
                                         attribute_values(dq_node), self.graph.opset(dq_node))[0]
        shape = ()
        for _, node, chained in chain:
            arguments = [value if name == chained else self.constant(name)
                         for name in node.input]
            for argument in arguments:
                if argument is not value:
                    shape = np.broadcast_shapes(shape, argument.shape)
            implementation = _numpy_ops.IMPLEMENTATIONS.get(node.op_type)
            run = (None if implementation is None
                   else implementation(node, attribute_values(node), self.graph.opset(node)))
            run = run or self.runner_for(node)
            value = np.asarray(run(arguments)[0])
        y = _nodes.quantize_linear([value] + constants(q_node), attribute_values(q_node),
                                   self.graph.opset(q_node))[0]
        return np.ascontiguousarray(y.reshape(-1)), shape

    def _scaled_softmax(self, index, node):
        """Div(x, c) or Mul(x, c) -> Softmax, with a constant float32 c of one
        value and float32 x (attention's scaled scores), as one call
        (:func:`qops.onnx._numpy_ops.softmax` with the step before it): the
        kernels divide or multiply as they read x, where two passes over the
        scores and a buffer of them would be."""
        if native_tables() is None or len(node.input) != 1 or len(node.output) != 1:
            return None
        scale_index, scale = self.sole_producer(node.input[0], index)
        if not (_is(scale, "Div") or _is(scale, "Mul")) or len(scale.input) != 2:
            return None
        x, constant = scale.input[0], self._single_float32(scale.input[1])
        if constant is None and _is(scale, "Mul"):
            x, constant = scale.input[1], self._single_float32(scale.input[0])
        if constant is None or self.graph.types.get(x) != np.float32:
            return None
        run = _numpy_ops.softmax(node, attribute_values(node), self.graph.opset(node),
                                 before=(scale.op_type, constant))
        if run is None:
            return None

        def call(arguments, n_threads):
            return run(arguments)

        consumed = {scale_index, index}
        return Group("qops Softmax (fused)", index, frozenset(consumed), [x], [node.output[0]],
                     call, f"{node.name or 'Softmax'} (qops Softmax (fused))")

    def sole_producer_of_reader(self, name, producer_index):
        """The one node reading ``name`` (made by ``producer_index``)."""
        reader = self.graph.sole_consumer(name)
        if reader is None or reader in self.claimed or reader <= producer_index:
            return None, None
        return reader, self.graph.nodes[reader]

    def _scale_factor(self, multiplier, a_scale_name):
        """W's scale in ``multiplier = Mul(a_scale, W's scale)`` (float32)."""
        node = self.graph.producer_node(multiplier)
        if not _is(node, "Mul") or len(node.input) != 2:
            return None
        first, second = node.input
        if first == a_scale_name:
            other = second
        elif second == a_scale_name:
            other = first
        else:
            return None
        value = self.constant(other)
        if value is None or value.dtype != np.float32 or value.ndim > 1:
            return None
        return value


def _literal(inputs, output, function):
    """``Q(function(DQ(x), ...))``: a group as its nodes compute it, for the
    operands a fused operator does not take (qops' Q and DQ are onnx.reference's
    bit for bit, and ``function`` is the float operator's NumPy form)."""
    def run(arguments):
        values = [api.dequantize_linear(value, quantization.scalar_scale(),
                                        quantization.zero_point.reshape(()))
                  for value, quantization in zip(arguments, inputs)]
        return api.quantize_linear(function(*values), output.scalar_scale(),
                                   output.zero_point.reshape(()))

    return run


def add_call(a_scale, a_zero_point, b_scale, b_zero_point, output_scale, output_zero_point):
    """The quantized add with every parameter bound (NumPy scalars, which the
    operator's fast path takes without validating them again), the shorter
    operand's shape with ones before it; two scalars, or anything else the
    fast path declines, go through the adapter, which broadcasts them as
    ONNX does."""
    parameters = (a_scale, a_zero_point, b_scale, b_zero_point, output_scale, output_zero_point)

    def call(arguments, n_threads):
        a, b = arguments
        if type(a) is np.ndarray and type(b) is np.ndarray and (a.ndim or b.ndim):
            # ONNX's broadcasting lines the shapes up from the right: the
            # operator's, once the shorter has ones before it (a bias of N
            # beside M x N rows).
            if a.ndim < b.ndim:
                a = a.reshape((1,) * (b.ndim - a.ndim) + a.shape)
            elif b.ndim < a.ndim:
                b = b.reshape((1,) * (a.ndim - b.ndim) + b.shape)
            return [api.element_wise_quantized_linear_add(
                a, a_scale, a_zero_point, b, b_scale, b_zero_point, output_scale,
                output_zero_point, n_threads=n_threads)]
        return _nodes.qlinear_add([a, parameters[0], parameters[1], b, parameters[2],
                                   parameters[3], parameters[4], parameters[5]], {}, 1)

    return call


def _clamped(y, clamp):
    if clamp is not None:
        info = np.iinfo(y.dtype)
        if clamp != (info.min, info.max):
            np.clip(y, clamp[0], clamp[1], out=y)
    return y


#: The fewest channels, in and out, of a convolution that a session gives
#: channels-last tensors, and the fewest out of one it has make them.  With
#: fewer (a network's first stages: 16 to 32 channels over 56 x 56 to
#: 112 x 112 pixels) the products' rows are short or their tiles' columns
#: mostly empty, and the channels-first form, the image as B and the filter
#: as A, is the faster one; a product of a few channels' image (RGB, or a
#: bottleneck's 32) into more, whose image the implicit GEMM copies
#: channels-last either way, is as fast or faster storing its rows as they
#: are (docs/performance_notes.rst).
CHANNELS_LAST_MIN_CHANNELS = 64


def _conv_call(filter_, filter_scale, filter_zero_point, bias, attributes, squeeze,
               input_scale, input_zero_point, output, clamp):
    """A compiled convolution with every constant bound; reads the image."""
    spatial = 1 if squeeze else 2
    if squeeze:
        filter_ = filter_[:, :, None, :]
    strides = tuple(attributes.get("strides") or (1,) * spatial)
    dilations = tuple(attributes.get("dilations") or (1,) * spatial)
    group = int(attributes.get("group") or 1)
    auto_pad = attributes.get("auto_pad", "NOTSET") or "NOTSET"
    if squeeze:
        strides, dilations = (1, *strides), (1, *dilations)
    output_scale, output_zero_point = output.scalar_scale(), output.scalar_zero_point()
    # Every parameter bound: the multipliers and the epilogue are made once.
    constants = dict(filter=np.ascontiguousarray(filter_), filter_scale=filter_scale,
                     filter_zero_point=filter_zero_point, bias=bias, input_scale=input_scale,
                     input_zero_point=input_zero_point, output_scale=output_scale,
                     output_zero_point=output_zero_point)
    compiled_by_padding = {}

    def operator_for(padding):
        """The compiled convolution with this padding and its data runner."""
        made = compiled_by_padding.get(padding)
        if made is None:
            operator = api.compile(
                "QUANTIZED_LINEAR_CONVOLUTION", strides=strides, dilations=dilations,
                start_padding=padding[0], end_padding=padding[1], group_count=group,
                **constants)
            # Every slot but the image is bound, so the runner exists.
            made = compiled_by_padding[padding] = (operator, operator.data_runner())
        return made

    def compiled_for(padding):
        """run(n_threads, image) of the convolution with this padding."""
        return operator_for(padding)[1]

    fixed_padding = None
    if auto_pad == "NOTSET":
        ones = (1,) * (spatial)
        start, end = _nodes.conv_padding("NOTSET", attributes.get("pads"), ones, ones, ones, ones)
        if squeeze:
            start, end = (0, *start), (0, *end)
        fixed_padding = (tuple(start), tuple(end))
        # Packed now, and errors in the constants surface as the session is built:
        # one call on the smallest image the filter takes.
        extent = [(k - 1) * d + 1 for k, d in zip(filter_.shape[2:], dilations)]
        compiled_for(fixed_padding)(
            1, np.zeros((1, filter_.shape[1] * group, *extent), np.dtype(input_zero_point.dtype)))

    def call(arguments, n_threads):
        x = arguments[0]
        if squeeze:
            x = np.asarray(x)[:, :, None, :]
        padding = fixed_padding
        if padding is None:
            sizes = np.shape(x)[2:]
            start, end = _nodes.conv_padding(auto_pad, None, sizes, filter_.shape[2:],
                                             strides, dilations)
            padding = (tuple(start), tuple(end))
        y = compiled_for(padding)(n_threads, np.ascontiguousarray(x))
        y = _clamped(y, clamp)
        return [y[:, :, 0, :] if squeeze else y]

    if fixed_padding is None or squeeze:
        return call
    full_range = np.iinfo(np.asarray(output_zero_point).dtype)
    if clamp in (None, (full_range.min, full_range.max)):
        # A network's usual node: one runner, the image as it comes (a
        # strided one is copied on the runner's general path, anything else
        # is the operator's to check).
        runner = compiled_for(fixed_padding)

        def direct(arguments, n_threads):
            return [runner(n_threads, arguments[0])]

        call = direct
        # The compiled operator, for a session that runs this convolution and
        # the next as one (InferenceSession._fused_convolutions).
        call.compiled = operator_for(fixed_padding)[0]
    # Channels-last layouts where the kernels take them (the implicit GEMM,
    # pixel rows, and the depthwise kernel for small images) and gain by them
    # (see CHANNELS_LAST_MIN_CHANNELS).
    depthwise = group > 1 and filter_.shape[1] == 1 and filter_.shape[0] == group
    channels, out_channels = filter_.shape[1] * group, filter_.shape[0]
    wide = min(channels, out_channels) >= CHANNELS_LAST_MIN_CHANNELS
    writes = out_channels >= CHANNELS_LAST_MIN_CHANNELS
    if (group == 1 or depthwise) and (wide or (writes and not depthwise)):
        def in_layouts(input_channels_last, output_channels_last):
            """The call on images and outputs kept channels-last where asked."""
            runner = operator_for(fixed_padding)[0].channels_last_runner(
                input_channels_last, output_channels_last)

            def run(arguments, n_threads):
                return [_clamped(runner(n_threads, arguments[0]), clamp)]

            return run

        call.layouts = _layout.ConvolutionLayouts(
            in_layouts, takes=operator_for(fixed_padding)[0].takes_channels_last if depthwise
            else None, reads=wide, writes=writes)
    return call


def _matmul_call(b, b_scale, b_zero_point, a_quantization, output, clamp):
    """A compiled product by a constant 2-D B; A of any rank as rows."""
    columns = b.shape[1]
    b_scale = (np.asarray(b_scale, np.float32).reshape(1, columns) if np.ndim(b_scale)
               else b_scale)
    b_zero_point = (np.asarray(b_zero_point).reshape(1, columns) if np.ndim(b_zero_point)
                    else b_zero_point)
    compiled = api.compile(
        "QUANTIZED_LINEAR_MATRIX_MULTIPLY", b=np.ascontiguousarray(b), b_scale=b_scale,
        b_zero_point=b_zero_point, a_scale=a_quantization.scalar_scale(),
        a_zero_point=a_quantization.scalar_zero_point(), output_scale=output.scalar_scale(),
        output_zero_point=output.scalar_zero_point())
    depth = b.shape[0]
    # B packed now, as the session is built: one call of one row.
    compiled(np.zeros((1, depth), a_quantization.dtype), n_threads=1)

    def call(arguments, n_threads):
        a = np.asarray(arguments[0])
        if a.ndim == 0 or a.shape[-1] != depth:
            raise api.ValidationError(f"MatMul: A has shape {a.shape}; B has {depth} rows",
                                      slot="A", given=a.shape)
        lead = a.shape[:-1]
        rows = np.ascontiguousarray(a.reshape(-1, depth))
        y = compiled(rows, n_threads=n_threads)
        return [_clamped(y, clamp).reshape(lead + (columns,))]

    return call


def _bound_global_average(fixed, dtype, call):
    """A global average pooling's call with its parameters (``fixed``: the
    scales and zero points, checked by running ``call`` once) bound to the
    kernel (:func:`qops.backends.native.pooling.bound_global_average`) for
    2-D images of ``dtype``, else ``call``; None where the kernels are not
    built or the operator refuses the parameters."""
    if native_tables() is None:
        return None
    try:
        call([np.zeros((1, 1, 1, 1), dtype)], 1)
    except QopsError:
        return None
    from qops.backends.native import pooling

    pool = pooling.bound_global_average(*fixed)

    def taken(x, pixels):
        """Whether the kernel takes ``x`` as it is: the operator's dtype, 4-D,
        not empty, C-contiguous, and window sums inside int32 (up to the
        operator's MAX_WINDOW; past it the operator's path decides)."""
        return (type(x) is np.ndarray and x.dtype == dtype and x.ndim == 4 and x.size
                and x.flags.c_contiguous and pixels(x.shape) <= pooling.MAX_WINDOW)

    def bound(arguments, n_threads):
        x = arguments[0]
        if taken(x, lambda shape: shape[2] * shape[3]):
            return [pool(x, n_threads)]
        return call(arguments, n_threads)

    def channels_last():
        """The pooling of (N, H, W, C) images (its output's bytes are the
        same in both layouts)."""
        pool_rows = pooling.bound_global_average(*fixed, channels_last=True)

        def run(arguments, n_threads):
            x = arguments[0]
            if taken(x, lambda shape: shape[1] * shape[2]):
                return [pool_rows(x, n_threads)]
            x = np.asarray(x).transpose(_layout.TO_CHANNELS_FIRST)
            return call([np.ascontiguousarray(x)], n_threads)

        return run

    bound.layouts = _layout.ReaderLayouts(channels_last)
    return bound
