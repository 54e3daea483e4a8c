"""Example models: common float topologies with random weights, quantized by
onnxruntime's quantizer in each of its formats.

Nothing is downloaded.  Each float model is written node by node with
``onnx.helper`` from the weights a ``numpy.random.Generator`` draws, batch
normalization already folded into the convolution biases (as exported
inference models have it), and is then quantized by
``onnxruntime.quantization`` as a user would quantize it:

* :func:`resnet50`, :func:`mobilenet_v2` and :func:`bert_layer` build the
  float models, each with size knobs for small, fast versions;
* :func:`quantize` writes the QDQ, QOperator or dynamically quantized model;
* :func:`optimized_by_onnxruntime` returns the graph onnxruntime actually runs
  (its QDQ groups fused into QLinearConv, QLinearMatMul, QGemm, ...);
* ``EXAMPLES`` names each model and format the tests and benchmarks use,
  and builds it (full size or small), cached on disk if asked.

Needs onnx, and onnxruntime for :func:`quantize` and
:func:`optimized_by_onnxruntime`.

Examples
--------
>>> import numpy as np
>>> from qops.onnx.examples import EXAMPLES, by_name
>>> example = by_name("mobilenet_v2-qoperator-per-channel")
>>> model = example.build(np.random.default_rng(0), small=True)  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import os
import tempfile
import warnings

import numpy as np

__all__ = ["resnet50", "mobilenet_v2", "bert_layer", "quantize", "optimized_by_onnxruntime",
           "op_types", "random_inputs", "ExampleModel", "EXAMPLES", "by_name", "FORMATS",
           "OPSET", "IR_VERSION"]

#: The default domain's opset of every float model (onnx.reference has the
#: blocked QuantizeLinear / DequantizeLinear from 21 on).
OPSET = 21
#: The IR version written into every float model: the one of opset 21, which
#: every onnxruntime release that knows opset 21 loads.
IR_VERSION = 10
#: The formats :func:`quantize` writes.
FORMATS = ("qdq", "qoperator", "dynamic")

# metadata_props key under which a float model records the sizes its
# symbolic input dimensions take by default (read by quantize()).
_DIMS_KEY = "qops.example.dims"


# -- Building graphs -----------------------------------------------------------------


class _Graph:
    """Nodes and initializers of a float model under construction."""

    def __init__(self, rng):
        self.rng = rng
        self.nodes = []
        self.initializers = []
        self._constants = {}

    def weight(self, name, shape, std, mean=0.0):
        """A float32 initializer of normal values, returned by name."""
        from onnx import numpy_helper

        values = self.rng.normal(mean, std, shape).astype(np.float32)
        self.initializers.append(numpy_helper.from_array(values, name))
        return name

    def constant(self, name, array):
        """An initializer of fixed value, written once however often it is asked for."""
        from onnx import numpy_helper

        array = np.asarray(array)
        key = (name, array.dtype.str, array.shape, array.tobytes())
        if key not in self._constants:
            self.initializers.append(numpy_helper.from_array(array, name))
            self._constants[key] = name
        return self._constants[key]

    def node(self, op_type, inputs, output, **attributes):
        """Append a node of one output named ``output`` (also its node name)."""
        from onnx import helper

        self.nodes.append(helper.make_node(op_type, inputs, [output], name=output, **attributes))
        return output

    def model(self, name, inputs, outputs, dims=None):
        from onnx import checker, helper

        graph = helper.make_graph(self.nodes, name, inputs, outputs,
                                  initializer=self.initializers)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                                  producer_name="qops.onnx.examples")
        model.ir_version = IR_VERSION
        if dims:
            helper.set_model_props(model, {_DIMS_KEY: json.dumps(dims)})
        checker.check_model(model)
        return model


def _conv(graph, x, name, in_channels, out_channels, kernel, stride=1, group=1, gain=math.sqrt(2)):
    """A convolution with its batch normalization folded in: He-scaled
    weights (``gain`` sqrt 2 before a ReLU keeps the second moment of the
    activations; 1 before a linear use) and a small bias."""
    fan_in = in_channels // group * kernel * kernel
    w = graph.weight(f"{name}.weight", (out_channels, in_channels // group, kernel, kernel),
                     gain / math.sqrt(fan_in))
    b = graph.weight(f"{name}.bias", (out_channels,), 0.05)
    pad = kernel // 2
    return graph.node("Conv", [x, w, b], name, kernel_shape=[kernel, kernel],
                      strides=[stride, stride], pads=[pad] * 4, group=group)


def _classifier(graph, x, features, classes):
    """GlobalAveragePool, Flatten and the fully connected layer (Gemm with
    the weight stored (classes, features), as torch exports it)."""
    pooled = graph.node("GlobalAveragePool", [x], "avgpool")
    flat = graph.node("Flatten", [pooled], "flatten", axis=1)
    w = graph.weight("fc.weight", (classes, features), 1 / math.sqrt(features))
    b = graph.weight("fc.bias", (classes,), 0.05)
    return graph.node("Gemm", [flat, w, b], "logits", transB=1)


def _image_model(graph, name, batch, image_size, classes):
    from onnx import TensorProto, helper

    inputs = [helper.make_tensor_value_info("input", TensorProto.FLOAT,
                                            [batch, 3, image_size, image_size])]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, classes])]
    return graph.model(name, inputs, outputs)


def resnet50(rng, image_size=224, width=64, blocks=(3, 4, 6, 3), batch=1, classes=1000):
    """ResNet-50 v1.5 (torchvision's layout) in float, batch norm folded.

    A 7x7 stride-2 convolution and ReLU, a 3x3 stride-2 max pool, then one
    stage of bottleneck blocks per entry of ``blocks`` (1x1, 3x3 carrying the
    stride, 1x1 expanding 4 times; a 1x1 projection shortcut on each stage's
    first block; Add and ReLU), global average pool, Flatten and Gemm.

    The random weights are He-scaled, and the last convolution of each
    residual branch is scaled by ``1 / sqrt(sum(blocks))`` so that the sum
    of all residual additions grows the activations' second moment by at
    most ``e``: the activations keep a unit scale through every layer, as
    batch normalization keeps them in a trained network.

    Parameters
    ----------
    rng : numpy.random.Generator
        Draws the weights.
    image_size : int
        Height and width of the input image.
    width : int
        Channels of the stem (64 in ResNet-50); stage ``i`` has
        ``width * 2**i`` bottleneck channels and four times as many outputs.
    blocks : sequence of int
        Bottleneck blocks per stage ((3, 4, 6, 3) in ResNet-50).
    batch : int
        Batch size of the input.
    classes : int
        Outputs of the classifier.

    Returns
    -------
    onnx.ModelProto
        Input ``input`` (batch, 3, image_size, image_size), output ``logits``
        (batch, classes).
    """
    graph = _Graph(rng)
    branch_gain = 1 / math.sqrt(sum(blocks))
    x = _conv(graph, "input", "conv1", 3, width, 7, stride=2)
    x = graph.node("Relu", [x], "relu1")
    x = graph.node("MaxPool", [x], "maxpool", kernel_shape=[3, 3], strides=[2, 2],
                   pads=[1, 1, 1, 1])
    channels = width
    for stage, count in enumerate(blocks):
        planes = width * 2 ** stage
        for index in range(count):
            name = f"layer{stage + 1}.{index}"
            stride = 2 if stage > 0 and index == 0 else 1
            h = _conv(graph, x, f"{name}.conv1", channels, planes, 1)
            h = graph.node("Relu", [h], f"{name}.relu1")
            h = _conv(graph, h, f"{name}.conv2", planes, planes, 3, stride=stride)
            h = graph.node("Relu", [h], f"{name}.relu2")
            h = _conv(graph, h, f"{name}.conv3", planes, planes * 4, 1, gain=branch_gain)
            shortcut = x
            if index == 0:
                shortcut = _conv(graph, x, f"{name}.downsample", channels, planes * 4, 1,
                                 stride=stride, gain=1.0)
            h = graph.node("Add", [h, shortcut], f"{name}.add")
            x = graph.node("Relu", [h], f"{name}.relu3")
            channels = planes * 4
    _classifier(graph, x, channels, classes)
    return _image_model(graph, "resnet50", batch, image_size, classes)


def _make_divisible(value, divisor=8):
    """torchvision's channel rounding for width multipliers: to a multiple of
    ``divisor``, never more than 10% below ``value``."""
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * value else rounded


#: MobileNetV2's inverted residual stages: expansion t, output channels c,
#: repeats n, first stride s.
MOBILENET_V2_STAGES = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                       (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))


def mobilenet_v2(rng, image_size=224, width_multiplier=1.0, batch=1, classes=1000):
    """MobileNetV2 (torchvision's layout) in float, batch norm folded.

    A 3x3 stride-2 convolution, then the inverted residual blocks of
    ``MOBILENET_V2_STAGES`` (1x1 expansion, 3x3 depthwise convolution
    with ``group`` = channels, linear 1x1 projection, Add when the block keeps
    its shape), a 1x1 convolution to 1280 channels, global average pool,
    Flatten and Gemm.  ReLU6 is ``Clip`` with its bounds 0 and 6 as inputs
    (opset 11 on), as exporters write it.

    Weights are He-scaled; the projections of blocks with a residual Add are
    scaled by ``1 / sqrt(number of such blocks)`` so that activations keep a
    unit scale through the network (see :func:`resnet50`).

    Parameters
    ----------
    rng : numpy.random.Generator
        Draws the weights.
    image_size : int
        Height and width of the input image.
    width_multiplier : float
        Scales every layer's channels (rounded to multiples of 8).
    batch : int
        Batch size of the input.
    classes : int
        Outputs of the classifier.

    Returns
    -------
    onnx.ModelProto
        Input ``input`` (batch, 3, image_size, image_size), output ``logits``
        (batch, classes).
    """
    graph = _Graph(rng)
    low = graph.constant("relu6.min", np.float32(0))
    high = graph.constant("relu6.max", np.float32(6))

    def relu6(x, name):
        return graph.node("Clip", [x, low, high], name)

    residual_blocks = sum(n - 1 for _, _, n, _ in MOBILENET_V2_STAGES)
    residual_gain = 1 / math.sqrt(residual_blocks)
    channels = _make_divisible(32 * width_multiplier)
    x = relu6(_conv(graph, "input", "features.0.conv", 3, channels, 3, stride=2),
              "features.0.relu6")
    layer = 1
    for expansion, c, repeats, first_stride in MOBILENET_V2_STAGES:
        out_channels = _make_divisible(c * width_multiplier)
        for index in range(repeats):
            name = f"features.{layer}"
            stride = first_stride if index == 0 else 1
            residual = stride == 1 and channels == out_channels
            hidden = channels * expansion
            h = x
            if expansion != 1:
                h = relu6(_conv(graph, h, f"{name}.expand", channels, hidden, 1),
                          f"{name}.expand.relu6")
            h = relu6(_conv(graph, h, f"{name}.depthwise", hidden, hidden, 3, stride=stride,
                            group=hidden), f"{name}.depthwise.relu6")
            h = _conv(graph, h, f"{name}.project", hidden, out_channels, 1,
                      gain=residual_gain if residual else 1.0)
            x = graph.node("Add", [h, x], f"{name}.add") if residual else h
            channels = out_channels
            layer += 1
    last_channels = _make_divisible(1280 * max(1.0, width_multiplier))
    x = relu6(_conv(graph, x, f"features.{layer}.conv", channels, last_channels, 1),
              f"features.{layer}.relu6")
    _classifier(graph, x, last_channels, classes)
    return _image_model(graph, "mobilenet_v2", batch, image_size, classes)


def bert_layer(rng, sequence=128, hidden=768, heads=12, intermediate=3072, batch=1):
    """One BERT-base encoder layer in float, with standard ONNX operators only.

    Self-attention (query, key and value MatMul + Add, Reshape and Transpose
    into heads, MatMul of queries and transposed keys, Div by the square root
    of the head size, Softmax, MatMul with the values, Transpose and Reshape
    back, the output MatMul + Add), residual Add and LayerNormalization; then
    the feed-forward network (MatMul + Add, GELU written out as
    ``x * 0.5 * (1 + Erf(x / sqrt 2))`` the way exporters write it, MatMul +
    Add), residual Add and LayerNormalization.

    The graph input has symbolic dimensions ``batch`` and ``sequence``; the
    Reshape targets use 0 and -1 so that any batch and sequence run.  The
    sizes given here are recorded in the model's metadata
    (``qops.example.dims``) as the ones :func:`quantize` calibrates with.

    Parameters
    ----------
    rng : numpy.random.Generator
        Draws the weights (normal with standard deviation
        ``1 / sqrt(fan in)``, layer-norm scales near 1).
    sequence, batch : int
        The default sizes of the symbolic input dimensions.
    hidden : int
        Width of the hidden states (768 in BERT-base).
    heads : int
        Attention heads; must divide ``hidden``.
    intermediate : int
        Width of the feed-forward network (3072 in BERT-base).

    Returns
    -------
    onnx.ModelProto
        Input ``hidden_states`` (batch, sequence, hidden), output ``output``
        of the same shape.
    """
    from onnx import TensorProto, helper

    if hidden % heads:
        raise ValueError(f"heads ({heads}) must divide hidden ({hidden})")
    head_size = hidden // heads
    graph = _Graph(rng)

    def dense(x, name, fan_in, fan_out):
        w = graph.weight(f"{name}.weight", (fan_in, fan_out), 1 / math.sqrt(fan_in))
        b = graph.weight(f"{name}.bias", (fan_out,), 0.02)
        y = graph.node("MatMul", [x, w], f"{name}.matmul")
        return graph.node("Add", [y, b], f"{name}.add")

    def layer_norm(x, name):
        scale = graph.weight(f"{name}.weight", (hidden,), 0.05, mean=1.0)
        bias = graph.weight(f"{name}.bias", (hidden,), 0.02)
        return graph.node("LayerNormalization", [x, scale, bias], name, axis=-1,
                          epsilon=1e-12)

    heads_shape = graph.constant("heads_shape", np.array([0, 0, heads, head_size], np.int64))
    hidden_shape = graph.constant("hidden_shape", np.array([0, 0, hidden], np.int64))

    def split_heads(x, name, perm):
        x = graph.node("Reshape", [x, heads_shape], f"{name}.reshape")
        return graph.node("Transpose", [x], f"{name}.transpose", perm=perm)

    x = "hidden_states"
    prefix = "attention.self"
    query = split_heads(dense(x, f"{prefix}.query", hidden, hidden), f"{prefix}.query",
                        [0, 2, 1, 3])
    key = split_heads(dense(x, f"{prefix}.key", hidden, hidden), f"{prefix}.key", [0, 2, 3, 1])
    value = split_heads(dense(x, f"{prefix}.value", hidden, hidden), f"{prefix}.value",
                        [0, 2, 1, 3])
    scores = graph.node("MatMul", [query, key], f"{prefix}.scores")
    root = graph.constant(f"{prefix}.sqrt_head_size", np.float32(math.sqrt(head_size)))
    scores = graph.node("Div", [scores, root], f"{prefix}.scaled_scores")
    probabilities = graph.node("Softmax", [scores], f"{prefix}.softmax", axis=-1)
    context = graph.node("MatMul", [probabilities, value], f"{prefix}.context")
    context = graph.node("Transpose", [context], f"{prefix}.context.transpose",
                         perm=[0, 2, 1, 3])
    context = graph.node("Reshape", [context, hidden_shape], f"{prefix}.context.reshape")
    attention = dense(context, "attention.output.dense", hidden, hidden)
    attention = graph.node("Add", [attention, x], "attention.output.residual")
    attention = layer_norm(attention, "attention.output.layer_norm")

    h = dense(attention, "intermediate.dense", hidden, intermediate)
    root2 = graph.constant("gelu.sqrt2", np.float32(math.sqrt(2)))
    one = graph.constant("gelu.one", np.float32(1))
    half = graph.constant("gelu.half", np.float32(0.5))
    g = graph.node("Div", [h, root2], "intermediate.gelu.div")
    g = graph.node("Erf", [g], "intermediate.gelu.erf")
    g = graph.node("Add", [g, one], "intermediate.gelu.add")
    g = graph.node("Mul", [h, g], "intermediate.gelu.mul")
    g = graph.node("Mul", [g, half], "intermediate.gelu")
    y = dense(g, "output.dense", intermediate, hidden)
    y = graph.node("Add", [y, attention], "output.residual")
    layer_norm(y, "output")

    shape = ["batch", "sequence", hidden]
    inputs = [helper.make_tensor_value_info("hidden_states", TensorProto.FLOAT, shape)]
    outputs = [helper.make_tensor_value_info("output", TensorProto.FLOAT, shape)]
    return graph.model("bert_layer", inputs, outputs,
                       dims={"batch": int(batch), "sequence": int(sequence)})


# -- Quantizing and optimizing ---------------------------------------------------------


def _input_shapes(model, dims):
    """Concrete (name, shape, numpy dtype) of each graph input that is not an initializer."""
    from onnx import helper

    recorded = {}
    for prop in model.metadata_props:
        if prop.key == _DIMS_KEY:
            recorded = json.loads(prop.value)
    recorded.update(dims or {})
    initializers = {tensor.name for tensor in model.graph.initializer}
    shapes = []
    for value in model.graph.input:
        if value.name in initializers:
            continue
        tensor_type = value.type.tensor_type
        shape = []
        for dim in tensor_type.shape.dim:
            if dim.HasField("dim_value"):
                shape.append(dim.dim_value)
            elif dim.dim_param in recorded:
                shape.append(int(recorded[dim.dim_param]))
            else:
                raise ValueError(f"input {value.name!r}: give the size of dimension "
                                 f"{dim.dim_param!r} in dims")
        dtype = helper.tensor_dtype_to_np_dtype(tensor_type.elem_type)
        shapes.append((value.name, tuple(shape), dtype))
    return shapes


def random_inputs(model, rng, dims=None):
    """One batch of feeds for ``model``: standard normal values (what
    normalized images and layer-normed hidden states look like) of its input
    shapes.

    Parameters
    ----------
    model : onnx.ModelProto
    rng : numpy.random.Generator or int
    dims : dict, optional
        Sizes of symbolic input dimensions by name, over the ones the model
        records (see :func:`bert_layer`).

    Returns
    -------
    dict of str to ndarray
    """
    rng = np.random.default_rng(rng)
    return {name: rng.normal(0, 1, shape).astype(dtype)
            for name, shape, dtype in _input_shapes(model, dims)}


@contextlib.contextmanager
def _quiet():
    """Silence the quantizer's warnings and log records (it logs to the root logger)."""
    logger = logging.getLogger()
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.setLevel(level)


def quantize(model, fmt, per_channel=False, rng=None, calibration_batches=4, dims=None):
    """Quantize a float model with onnxruntime's quantizer.

    ``"qdq"`` and ``"qoperator"`` go through ``quantize_static`` (formats
    ``QuantFormat.QDQ`` and ``QuantFormat.QOperator``), calibrated on
    ``calibration_batches`` batches of standard normal inputs, with uint8
    activations and int8 weights; ``"dynamic"`` goes through
    ``quantize_dynamic`` with int8 weights.  Every other option is the
    quantizer's default, which is what users get; no pre-processing
    (``quant_pre_process``) runs either.  The quantizer needs no other option
    to accept the models of this module.

    Parameters
    ----------
    model : onnx.ModelProto
        The float model.
    fmt : {"qdq", "qoperator", "dynamic"}
        The format to write.
    per_channel : bool
        Quantize weights per output channel instead of per tensor.
    rng : numpy.random.Generator or int, optional
        Draws the calibration inputs (unused by ``"dynamic"``).
    calibration_batches : int
        Batches fed to the calibrator.
    dims : dict, optional
        Sizes of symbolic input dimensions by name, over the ones the model
        records (see :func:`bert_layer`).

    Returns
    -------
    onnx.ModelProto
        The quantized model.

    Notes
    -----
    What the quantizer's defaults make of these models: in QDQ it drops the
    ReLU and ReLU6 (Clip) after a convolution, their range being the
    output's quantization range; a MatMul's bias Add becomes an Add of two
    quantized tensors (uint8 bias and its own scale, not an int32 bias);
    with ``per_channel`` the LayerNormalization scales stay per tensor;
    ``"dynamic"`` quantizes only the MatMuls by a constant weight (the
    attention's two MatMuls between activations stay in float).
    """
    import onnx
    from onnxruntime import quantization

    if fmt not in FORMATS:
        raise ValueError(f"fmt must be one of {FORMATS}, not {fmt!r}")
    rng = np.random.default_rng(rng)
    with tempfile.TemporaryDirectory() as directory:
        float_path = os.path.join(directory, "float.onnx")
        quantized_path = os.path.join(directory, "quantized.onnx")
        onnx.save(model, float_path)
        with _quiet():
            if fmt == "dynamic":
                quantization.quantize_dynamic(float_path, quantized_path,
                                              per_channel=per_channel,
                                              weight_type=quantization.QuantType.QInt8)
            else:
                batches = iter([random_inputs(model, rng, dims)
                                for _ in range(calibration_batches)])

                class CalibrationBatches(quantization.CalibrationDataReader):
                    def get_next(self):
                        return next(batches, None)

                quant_format = (quantization.QuantFormat.QDQ if fmt == "qdq"
                                else quantization.QuantFormat.QOperator)
                quantization.quantize_static(
                    float_path, quantized_path, CalibrationBatches(),
                    quant_format=quant_format, per_channel=per_channel,
                    activation_type=quantization.QuantType.QUInt8,
                    weight_type=quantization.QuantType.QInt8)
        return onnx.load(quantized_path)


#: Graph optimization levels by name (onnxruntime's GraphOptimizationLevel members).
_LEVELS = {"disable": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC",
           "extended": "ORT_ENABLE_EXTENDED", "layout": "ORT_ENABLE_LAYOUT",
           "all": "ORT_ENABLE_ALL"}


def optimized_by_onnxruntime(model, level="extended"):
    """The graph onnxruntime's CPU execution provider runs for ``model``.

    onnxruntime writes its optimized graph to
    ``SessionOptions.optimized_model_filepath``; this reads it back.

    ``"extended"`` (``ORT_ENABLE_EXTENDED``, the default) is the level at
    which onnxruntime fuses each QDQ group into its quantized operator
    (QLinearConv and QLinearMatMul, and ``com.microsoft`` QGemm, QLinearAdd,
    QLinearMul, QLinearSoftmax, QLinearGlobalAveragePool) and each
    dynamically quantized MatMulInteger group into ``com.microsoft``
    DynamicQuantizeMatMul or MatMulIntegerToFloat, in the models' own NCHW
    layout.  ``"basic"`` leaves the QDQ groups as they are (it folds
    constants and fuses float patterns such as GELU only).  From ``"layout"``
    (onnxruntime 1.20 on) and ``"all"`` up, the CPU provider rewrites
    quantized convolutions into its channels-last ``com.microsoft``
    QLinearConv and NhwcMaxPool between Transpose nodes (and float
    convolutions into NCHWc ones), layouts internal to it.

    Parameters
    ----------
    model : onnx.ModelProto
    level : {"extended", "basic", "layout", "all", "disable"}

    Returns
    -------
    onnx.ModelProto
    """
    import onnx
    import onnxruntime as ort

    if not hasattr(ort.GraphOptimizationLevel, _LEVELS.get(level, "")):
        raise ValueError(f"level must be one of {tuple(_LEVELS)} (\"layout\" from onnxruntime "
                         f"1.20 on), not {level!r}")
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "optimized.onnx")
        options = ort.SessionOptions()
        options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, _LEVELS[level])
        options.optimized_model_filepath = path
        options.log_severity_level = 3  # the note that the saved graph is hardware-specific
        ort.InferenceSession(model.SerializeToString(), options,
                             providers=["CPUExecutionProvider"])
        return onnx.load(path)


def op_types(model):
    """The sorted ``(domain, op_type)`` pairs of a model's graph, the default
    domain as ``""``."""
    return sorted({("" if node.domain == "ai.onnx" else node.domain, node.op_type)
                   for node in model.graph.node})


# -- The table ------------------------------------------------------------------------


#: The float builders and the keyword arguments of their small versions.
_ARCHITECTURES = {
    "resnet50": (resnet50, dict(image_size=32, width=8, classes=10)),
    "mobilenet_v2": (mobilenet_v2, dict(image_size=32, width_multiplier=0.25, classes=10)),
    "bert_layer": (bert_layer, dict(sequence=16, hidden=64, heads=2, intermediate=128)),
}


@dataclasses.dataclass(frozen=True)
class ExampleModel:
    """One float architecture quantized in one format.

    Attributes
    ----------
    architecture : {"resnet50", "mobilenet_v2", "bert_layer"}
        The float builder (:func:`resnet50`, ...).
    fmt : {"qdq", "qoperator", "dynamic"}
        The format :func:`quantize` writes.
    per_channel : bool
        Weights quantized per output channel.
    """

    architecture: str
    fmt: str
    per_channel: bool = False

    @property
    def name(self):
        """``architecture-fmt[-per-tensor|-per-channel]``, e.g.
        ``resnet50-qdq-per-channel``; a dynamic model is named without it."""
        if self.fmt == "dynamic":
            return f"{self.architecture}-dynamic"
        granularity = "per-channel" if self.per_channel else "per-tensor"
        return f"{self.architecture}-{self.fmt}-{granularity}"

    def float_model(self, rng, small=False, cache_dir=None):
        """The float model that :meth:`build` quantizes when given the same ``rng``.

        Parameters
        ----------
        rng : numpy.random.Generator or int
            Draws the weights; give the same seed as to :meth:`build` to get
            the float model of that quantized model.
        small : bool
            Build the small version (see :meth:`build`).
        cache_dir : str or os.PathLike, optional
            A folder where the model is saved as
            ``{architecture}-float[-small].onnx`` and loaded from on later
            calls.  The cache is keyed by architecture and size only, so
            give the same seed every time.

        Returns
        -------
        onnx.ModelProto
        """
        weights_seed, _ = _seeds(rng)
        return self._float_model(weights_seed, small, cache_dir)

    def _float_model(self, weights_seed, small, cache_dir):
        builder, small_sizes = _ARCHITECTURES[self.architecture]
        suffix = "-small" if small else ""
        return _cached(cache_dir, f"{self.architecture}-float{suffix}",
                       lambda: builder(np.random.default_rng(weights_seed),
                                       **(small_sizes if small else {})))

    def build(self, rng, small=False, cache_dir=None):
        """The quantized model: :meth:`float_model` through :func:`quantize`.

        Parameters
        ----------
        rng : numpy.random.Generator or int
            Draws the float weights and the calibration inputs.
        small : bool
            Build the small version (CNNs at 32 x 32 with a fraction of the
            channels, a BERT layer of sequence 16, hidden 64, 2 heads).
        cache_dir : str or os.PathLike, optional
            A folder where the float and quantized models are saved (as
            ``{name}[-small].onnx``) and loaded from on later calls; keyed by
            name and size only, so give the same seed every time.

        Returns
        -------
        onnx.ModelProto
        """
        weights_seed, calibration_seed = _seeds(rng)
        suffix = "-small" if small else ""

        def make():
            float_model = self._float_model(weights_seed, small, cache_dir)
            return quantize(float_model, self.fmt, self.per_channel, rng=calibration_seed)

        return _cached(cache_dir, f"{self.name}{suffix}", make)


def _seeds(rng):
    """Seeds of the weights and of the calibration inputs: two streams of
    their own, so that a float model taken from the cache leaves the
    calibration unchanged."""
    weights_seed, calibration_seed = np.random.default_rng(rng).integers(2 ** 63, size=2)
    return int(weights_seed), int(calibration_seed)


def _cached(cache_dir, key, make):
    import onnx

    if cache_dir is None:
        return make()
    path = os.path.join(os.fspath(cache_dir), f"{key}.onnx")
    if os.path.exists(path):
        return onnx.load(path)
    model = make()
    os.makedirs(os.fspath(cache_dir), exist_ok=True)
    # Written under a temporary name first, so that a concurrent or
    # interrupted run never leaves half a model behind under the real name.
    partial = f"{path}.{os.getpid()}.partial"
    onnx.save(model, partial)
    os.replace(partial, path)
    return model


#: Every model x format the tests and benchmarks use.
EXAMPLES = tuple(
    [ExampleModel(architecture, fmt, per_channel)
     for architecture in ("resnet50", "mobilenet_v2")
     for fmt in ("qdq", "qoperator") for per_channel in (False, True)]
    + [ExampleModel("bert_layer", fmt, per_channel)
       for fmt in ("qdq", "qoperator") for per_channel in (False, True)]
    + [ExampleModel("bert_layer", "dynamic")])


def by_name(name):
    """The entry of ``EXAMPLES`` called ``name``."""
    for example in EXAMPLES:
        if example.name == name:
            return example
    raise KeyError(f"no example model {name!r}; there are {', '.join(e.name for e in EXAMPLES)}")
