"""``python -m qops bench``: qops against onnxruntime (and onnx.reference) on
the convolution and matrix-multiply cases of typical networks, and on
QuantizeLinear / DequantizeLinear of an activation and of a blocked int4
weight (with the bytes each moves per second).

Every figure is measured in the same run as the peer it is compared with;
the machine is shared, so ratios mean more than absolute times.  Every
output is judged against an exact oracle (:mod:`qops.reference`), qops' and
onnxruntime's alike: onnxruntime is a peer, and on CPUs without VNNI its
u8 x s8 kernels saturate int16 pair sums.  The exit status depends on qops
alone.  '% peak' divides the compiled GOPS by the ceiling of the kernel
variant's own multiply-add instructions, measured by a probe in the same
run (``qops.backends.native.kernels._peak_probes``).  The constant pairing ('compiled',
'ORT const') gives each side every constant a quantized model has: the
weights and every scale and zero point, initializers of onnxruntime's model
and bound slots of ``qops.compile``.  'ORT const % peak' divides
onnxruntime's constant GOPS by the same ceiling, so that their
quotient bounds what the compiled pairing can reach.  Where the CPU has no
8-bit dot product, onnxruntime runs a saturating AVX2 step of its own, whose
ceiling the header gives beside the exact one (the peer's probe): on Intel
cores and AMD Zen 4 it is about 30% higher, on AMD Zen 2 about the same.
``benchmarks/avx2_cpu.py`` runs the bench as such a CPU on one that has
VNNI.  Needs the ``bench`` extra (onnx, onnxruntime, matplotlib).
"""

from __future__ import annotations

import functools
import math
import os
import platform
import sys
import time
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Case:
    """One benchmark case: a convolution (NCHW, OIHW), a matrix multiply, a
    quantize / dequantize of ``x_shape`` (per tensor, per axis 1, or in
    blocks of ``block`` along axis 1; ``quantized`` is the integer type,
    ``packed`` gives dequantize the 4-bit input two to a byte; ``source``
    is quantize's input type, int32 for a requantization of sums, and
    ``opset`` the model's, 28 for the 6-bit floats), an ``add``
    of two quantized tensors of ``x_shape`` (QLinearAdd), an
    ``integer_to_float`` product (MatMulIntegerToFloat: ``quantized`` is A's
    type, ``b_type`` B's), or a ``pool`` of ``x_shape`` (QLinearAveragePool,
    ``kernel`` x ``kernel`` windows; QLinearGlobalAveragePool when the window
    is the whole image)."""

    name: str
    kind: str
    batch: int = 1
    channels: int = 0
    size: int = 0
    out_channels: int = 0
    kernel: int = 1
    stride: int = 1
    pad: int = 0
    dilation: int = 1
    groups: int = 1
    a_shape: tuple = ()
    b_shape: tuple = ()
    small: bool = False
    x_shape: tuple = ()
    granularity: str = "per-tensor"
    block: int = 0
    quantized: str = "uint8"
    packed: bool = False
    b_type: str = "uint8"
    source: str = "float32"
    opset: int = 21

    @property
    def is_quantize(self):
        return self.kind in ("quantize", "dequantize")

    @property
    def has_compiled(self):
        """Whether the case has a compiled form (and onnxruntime a constant-weight one)."""
        return self.kind in ("conv", "matmul")

    def bytes_moved(self):
        """Bytes read and written: x, the output, scales and zero points
        (4-bit values count half a byte when packed, one byte unpacked)."""
        count = math.prod(self.x_shape)
        if self.kind == "add":
            return 3 * count + 15  # A, B and the output; six one-element parameters
        if self.kind == "pool":
            return count + self.x_shape[0] * self.x_shape[1] * self.output_size() ** 2
        params = self._parameter_count()
        if self.quantized == "int4":
            quantized = (count + 1) // 2 if self.packed else count
            params_bytes = params * 4 + (params if not self.packed else (params + 1) // 2)
        else:
            quantized = count
            params_bytes = params * 5
        # 6-bit values count a byte each: qops and the peers hold one per byte.
        return quantized + np.dtype(self.source).itemsize * count + params_bytes

    def _parameter_count(self):
        if self.granularity == "per-tensor":
            return 1
        if self.granularity == "per-axis":
            return self.x_shape[1]
        return self.x_shape[0] * -(-self.x_shape[1] // self.block) * math.prod(self.x_shape[2:])

    def output_size(self):
        size = self.x_shape[-1] if self.kind == "pool" else self.size
        span = self.dilation * (self.kernel - 1) + 1
        return (size + 2 * self.pad - span) // self.stride + 1

    @property
    def is_global(self):
        return self.kind == "pool" and self.kernel == self.x_shape[-1] and not self.pad

    def operations(self):
        """Multiply-adds times two."""
        if self.kind == "conv":
            out = self.output_size()
            return (2 * self.batch * self.out_channels * out * out
                    * (self.channels // self.groups) * self.kernel * self.kernel)
        if self.is_quantize or self.kind in ("add", "pool"):
            return 0
        batch = int(np.prod(np.broadcast_shapes(self.a_shape[:-2], self.b_shape[:-2])))
        return 2 * batch * self.a_shape[-2] * self.a_shape[-1] * self.b_shape[-1]


def _conv(name, channels, size, out_channels, kernel=1, stride=1, pad=0, dilation=1, groups=1,
          batch=1):
    return Case(name=name, kind="conv", batch=batch, channels=channels, size=size,
                out_channels=out_channels, kernel=kernel, stride=stride, pad=pad,
                dilation=dilation, groups=groups)


CASES = (
    _conv("r50_conv1", 3, 224, 64, kernel=7, stride=2, pad=3),
    _conv("r50_3x3_56", 64, 56, 64, kernel=3, pad=1),
    _conv("r50_1x1_28", 512, 28, 128),
    _conv("r50_3x3_14", 256, 14, 256, kernel=3, pad=1),
    _conv("r50_3x3_14_b8", 256, 14, 256, kernel=3, pad=1, batch=8),
    _conv("r50_1x1_7", 512, 7, 2048),
    _conv("mbv2_dw_56", 144, 56, 144, kernel=3, pad=1, groups=144),
    _conv("mbv2_dw_112_s2", 96, 112, 96, kernel=3, stride=2, pad=1, groups=96),
    _conv("dilated_56", 64, 56, 64, kernel=3, pad=2, dilation=2),
    Case(name="bert_qkv", kind="matmul", a_shape=(128, 768), b_shape=(768, 768)),
    Case(name="bert_ffn1", kind="matmul", a_shape=(128, 768), b_shape=(768, 3072)),
    Case(name="bert_ffn2", kind="matmul", a_shape=(128, 3072), b_shape=(3072, 768)),
    Case(name="attn_batched", kind="matmul", a_shape=(1, 12, 128, 64), b_shape=(1, 12, 64, 128)),
    Case(name="square_1024", kind="matmul", a_shape=(1024, 1024), b_shape=(1024, 1024)),
    Case(name="tiny_4", kind="matmul", a_shape=(4, 4), b_shape=(4, 4), small=True),
    Case(name="quantize_f32_u8", kind="quantize", x_shape=(1, 256, 56, 56)),
    Case(name="dequantize_u8_f32", kind="dequantize", x_shape=(1, 256, 56, 56)),
    Case(name="quantize_f32_u8_per_axis", kind="quantize", x_shape=(1, 256, 56, 56),
         granularity="per-axis"),
    Case(name="dequantize_int4_blocked", kind="dequantize", x_shape=(4096, 4096),
         granularity="blocked", block=32, quantized="int4"),
    Case(name="dequantize_int4_blocked_packed", kind="dequantize", x_shape=(4096, 4096),
         granularity="blocked", block=32, quantized="int4", packed=True),
    # The int32 sums of a convolution requantized per output channel (opset
    # 23: x int32, scales float32), and the 6-bit floats of opset 28.
    Case(name="requantize_i32_i8_per_axis", kind="quantize", x_shape=(1, 256, 56, 56),
         granularity="per-axis", quantized="int8", source="int32", opset=23),
    Case(name="quantize_f32_float6e2m3", kind="quantize", x_shape=(1, 256, 56, 56),
         quantized="float6_e2m3fn", opset=28),
    Case(name="dequantize_float6e3m2_f32_per_axis", kind="dequantize", x_shape=(1, 256, 56, 56),
         granularity="per-axis", quantized="float6_e3m2fn", opset=28),
    Case(name="r50_residual_add", kind="add", x_shape=(1, 256, 56, 56)),
    Case(name="r50_global_pool", kind="pool", x_shape=(1, 2048, 7, 7), kernel=7),
    Case(name="pool_3x3_56", kind="pool", x_shape=(1, 256, 56, 56), kernel=3, pad=1),
    Case(name="bert_qkv_to_float", kind="integer_to_float", a_shape=(128, 768),
         b_shape=(768, 768)),
    Case(name="bert_qkv_to_float_u8s8", kind="integer_to_float", a_shape=(128, 768),
         b_shape=(768, 768), b_type="int8"),
)


def operands(case, seed=0):
    """(constants, runtime slots, attributes) for qops, uint8 activations,
    int8 per-channel filters (per-tensor B), uint8 output; for the quantize
    cases ({}, the call's slots, its attributes)."""
    rng = np.random.default_rng(seed)
    if case.is_quantize:
        return _quantize_operands(case, rng)
    if case.kind == "add":
        return {}, dict(
            a=rng.integers(0, 256, case.x_shape, dtype=np.uint8), a_scale=np.float32(0.0173),
            a_zero_point=np.uint8(120), b=rng.integers(0, 256, case.x_shape, dtype=np.uint8),
            b_scale=np.float32(0.0231), b_zero_point=np.uint8(131),
            output_scale=np.float32(0.0412), output_zero_point=np.uint8(128)), {}
    if case.kind == "pool":
        return {}, dict(input=rng.integers(0, 256, case.x_shape, dtype=np.uint8),
                        input_scale=np.float32(0.0173), input_zero_point=np.uint8(120),
                        output_scale=np.float32(0.0123), output_zero_point=np.uint8(128)), dict(
            window_size=(case.kernel,) * 2, strides=(case.stride,) * 2,
            start_padding=(case.pad,) * 2, end_padding=(case.pad,) * 2)
    if case.kind == "integer_to_float":
        a_info, b_info = np.iinfo(case.quantized), np.iinfo(case.b_type)
        columns = case.b_shape[-1]
        return {}, dict(
            a=rng.integers(a_info.min, a_info.max + 1, case.a_shape).astype(case.quantized),
            b=rng.integers(b_info.min, b_info.max + 1, case.b_shape).astype(case.b_type),
            a_scale=np.float32(0.0173),
            b_scale=rng.uniform(0.001, 0.02, columns).astype(np.float32),
            a_zero_point=np.asarray(3, case.quantized),
            b_zero_point=rng.integers(0, 5, columns).astype(case.b_type),
            bias=rng.standard_normal(columns).astype(np.float32)), {}
    if case.kind == "conv":
        constants = dict(
            filter=rng.integers(-128, 128, (case.out_channels, case.channels // case.groups,
                                            case.kernel, case.kernel), dtype=np.int8),
            filter_scale=rng.uniform(0.001, 0.01, case.out_channels).astype(np.float32),
            bias=rng.integers(-5000, 5000, case.out_channels, dtype=np.int32))
        runtime = dict(
            input=rng.integers(0, 256, (case.batch, case.channels, case.size, case.size),
                               dtype=np.uint8),
            input_scale=np.float32(0.02), input_zero_point=np.uint8(128),
            output_scale=np.float32(0.5), output_zero_point=np.uint8(128))
        attributes = dict(strides=(case.stride,) * 2, dilations=(case.dilation,) * 2,
                          start_padding=(case.pad,) * 2, end_padding=(case.pad,) * 2,
                          group_count=case.groups)
        return constants, runtime, attributes
    constants = dict(b=rng.integers(-128, 128, case.b_shape, dtype=np.int8),
                     b_scale=np.float32(0.01))
    runtime = dict(a=rng.integers(0, 256, case.a_shape, dtype=np.uint8), a_scale=np.float32(0.02),
                   a_zero_point=np.uint8(128), output_scale=np.float32(0.5),
                   output_zero_point=np.uint8(128))
    return constants, runtime, {}


def _quantize_operands(case, rng):
    import ml_dtypes

    import qops

    shape = case.x_shape
    quantized = np.dtype(getattr(ml_dtypes, case.quantized, None) or case.quantized)
    floating = quantized.name.startswith("float")  # ml_dtypes' floats (and int4) are kind "V"
    if floating:  # a float type's zero point is 0; its values are finite floats
        info = ml_dtypes.finfo(quantized)
        zero_of = lambda size: np.zeros(size, quantized)  # noqa: E731
    else:
        info = ml_dtypes.iinfo(quantized)
        low, high = int(info.min), int(info.max) + 1
        zero_of = lambda size: rng.integers(low, high, size).astype(quantized)  # noqa: E731
    # int32 sums of a few thousand products of 8-bit values, each channel's
    # scale bringing them to the 8-bit range.
    unit = 4000.0 if case.source == "int32" else 0.02
    if case.granularity == "per-tensor":
        scale = np.float32(unit)
        zero_point = np.zeros((), quantized) if floating else np.asarray(128, quantized)
        attributes = {}
    elif case.granularity == "per-axis":
        scale = rng.uniform(0.5 * unit, 1.5 * unit, shape[1]).astype(np.float32)
        zero_point = zero_of(shape[1])
        attributes = {"axis": 1}
    else:
        blocks = list(shape)
        blocks[1] = -(-shape[1] // case.block)
        scale = rng.uniform(0.5 * unit, 1.5 * unit, blocks).astype(np.float32)
        zero_point = zero_of(blocks)
        attributes = {"axis": 1, "block_size": case.block}
    if case.opset != 21:
        attributes["opset"] = case.opset
    if case.kind == "quantize":
        if case.source == "int32":
            x = rng.integers(-600_000, 600_000, shape).astype(np.int32)
        else:
            x = rng.standard_normal(shape).astype(np.float32) * 3.0
        return {}, {"x": x, "y_scale": scale, "y_zero_point": zero_point}, attributes
    if floating:
        x = (rng.standard_normal(shape) * float(info.max) / 3).astype(quantized)
    else:
        x = rng.integers(low, high, shape).astype(quantized)
    if case.packed:
        x = qops.Packed4Bit(qops.pack_4bit(x), quantized, shape)
    return {}, {"x": x, "x_scale": scale, "x_zero_point": zero_point}, attributes


def _oracle_on_one_thread(case, constants, runtime, attributes):
    """:func:`exact_output` with NumPy's BLAS on the calling thread alone:
    the oracle's float64 products would leave BLAS worker threads spinning
    for tens of milliseconds, on the second core the next timing needs.
    Without threadpoolctl (the ``bench`` extra has it), as it is."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return exact_output(case, constants, runtime, attributes)
    with threadpool_limits(limits=1, user_api="blas"):
        return exact_output(case, constants, runtime, attributes)


def exact_output(case, constants, runtime, attributes):
    """The case's exact output by :mod:`qops.reference` (NumPy: exact integer
    sums, then the contract's float32 steps), to judge every result against."""
    from qops import reference

    if case.is_quantize:
        return _exact_quantize_output(case, runtime, attributes)
    if case.kind == "add":
        rank = len(case.x_shape)
        return reference.element_wise_quantized_linear_add(
            **{k: np.asarray(v).reshape((1,) * rank) if np.ndim(v) == 0 else v
               for k, v in runtime.items()}, output_dtype=np.dtype(np.uint8))
    if case.kind == "pool":
        image = runtime["input"][:, :, None]
        return reference.quantized_linear_average_pooling(
            image, *(np.asarray(runtime[k]).reshape((1,) * 5) for k in (
                "input_scale", "input_zero_point", "output_scale", "output_zero_point")),
            window_size=(1,) + attributes["window_size"], strides=(1,) + attributes["strides"],
            dilations=(1, 1, 1), start_padding=(0,) + attributes["start_padding"],
            end_padding=(0,) + attributes["end_padding"], include_padding=False,
            output_dtype=np.dtype(np.uint8))[:, :, 0]
    if case.kind == "integer_to_float":
        return reference.matrix_multiply_integer_to_float(
            runtime["a"], runtime["a_scale"], runtime["a_zero_point"], runtime["b"],
            runtime["b_scale"], runtime["b_zero_point"], runtime["bias"])

    def per_tensor(value, rank=4):
        return np.asarray(value).reshape((1,) * rank)

    if case.kind == "conv":
        channels = (1, case.out_channels, 1, 1)
        return reference.quantized_linear_convolution(
            runtime["input"], per_tensor(runtime["input_scale"]),
            per_tensor(runtime["input_zero_point"]), constants["filter"],
            constants["filter_scale"].reshape(channels), None,
            constants["bias"].reshape(channels), per_tensor(runtime["output_scale"]),
            per_tensor(runtime["output_zero_point"]), strides=attributes["strides"],
            dilations=attributes["dilations"], start_padding=attributes["start_padding"],
            end_padding=attributes["end_padding"], group_count=attributes["group_count"],
            output_dtype=np.dtype(np.uint8))
    rank = len(case.a_shape)
    return reference.quantized_linear_matrix_multiply(
        runtime["a"], per_tensor(runtime["a_scale"], rank),
        per_tensor(runtime["a_zero_point"], rank), constants["b"],
        per_tensor(constants["b_scale"], rank), None, per_tensor(runtime["output_scale"], rank),
        per_tensor(runtime["output_zero_point"], rank), output_dtype=np.dtype(np.uint8))


def _exact_quantize_output(case, runtime, attributes):
    from qops import reference

    axis, block = attributes.get("axis", 1), attributes.get("block_size", 0)
    if case.kind == "quantize":
        return reference.quantize_linear(runtime["x"], runtime["y_scale"],
                                         runtime["y_zero_point"], axis=axis, block_size=block)
    x = np.asarray(runtime["x"])  # a packed 4-bit tensor unpacks to its values
    return reference.dequantize_linear(x, runtime["x_scale"], runtime["x_zero_point"], axis=axis,
                                       block_size=block)


def _quantize_onnx_model(case, runtime, attributes):
    """A one-node QuantizeLinear / DequantizeLinear model.  4-bit tensors are
    initializers (onnxruntime takes no int4 arrays as inputs); the scale is
    an input, so nothing is folded at session creation."""
    from onnx import TensorProto, helper, numpy_helper

    from qops.registry import dtypes as _dtypes

    attributes = {k: v for k, v in attributes.items() if k != "opset"}
    names = list(runtime)
    values = {k: np.asarray(v) for k, v in runtime.items()}  # packed x: its values
    constant = [k for k in names if _dtypes.name_of(values[k].dtype) in _dtypes.FOUR_BIT]
    inputs = [k for k in names if k not in constant]
    op = "QuantizeLinear" if case.kind == "quantize" else "DequantizeLinear"
    node = helper.make_node(op, names, ["y"], **attributes)
    out_type = (helper.np_dtype_to_tensor_dtype(np.asarray(runtime["y_zero_point"]).dtype)
                if case.kind == "quantize" else TensorProto.FLOAT)
    graph = helper.make_graph(
        [node], case.name,
        [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(values[k].dtype),
                                       list(values[k].shape)) for k in inputs],
        [helper.make_tensor_value_info("y", out_type, None)],
        initializer=[numpy_helper.from_array(values[k], k) for k in constant])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", case.opset)])
    model.ir_version = 10 if case.opset <= 21 else 11
    return model, {k: values[k] for k in inputs}


_CONTRIB_INPUTS = {
    "add": ("QLinearAdd", ["A", "A_scale", "A_zero_point", "B", "B_scale", "B_zero_point",
                           "C_scale", "C_zero_point"],
            ["a", "a_scale", "a_zero_point", "b", "b_scale", "b_zero_point", "output_scale",
             "output_zero_point"]),
    "pool": ("QLinearAveragePool", ["X", "x_scale", "x_zero_point", "y_scale", "y_zero_point"],
             ["input", "input_scale", "input_zero_point", "output_scale", "output_zero_point"]),
    "integer_to_float": ("MatMulIntegerToFloat", ["A", "B", "a_scale", "b_scale",
                                                  "a_zero_point", "b_zero_point", "bias"],
                         ["a", "b", "a_scale", "b_scale", "a_zero_point", "b_zero_point",
                          "bias"]),
}


def _contrib_onnx_model(case, runtime, constant_weights=False):
    """A one-node com.microsoft QLinearAdd / QLinearAveragePool /
    MatMulIntegerToFloat model: the operands are inputs, the parameters
    initializers (as onnxruntime's quantizer writes them); with
    ``constant_weights``, MatMulIntegerToFloat as a dynamically quantized
    model has it: B and its parameters initializers, A's scale and zero
    point inputs (DynamicQuantizeLinear makes them for each run)."""
    from onnx import TensorProto, helper, numpy_helper

    op_type, names, slots = _CONTRIB_INPUTS[case.kind]
    values = {name: np.asarray(runtime[slot]) for name, slot in zip(names, slots)}
    # (QLinearAdd's B is the other activation, never a weight.)
    operands = (("A", "a_scale", "a_zero_point")
                if constant_weights and case.kind == "integer_to_float" else ("A", "B", "X"))
    attributes = {}
    if case.is_global:
        op_type = "QLinearGlobalAveragePool"
    elif case.kind == "pool":
        attributes = dict(kernel_shape=[case.kernel] * 2, strides=[case.stride] * 2,
                          pads=[case.pad] * 4)
    node = helper.make_node(op_type, names, ["y"], domain="com.microsoft", **attributes)
    out_type = TensorProto.FLOAT if case.kind == "integer_to_float" else TensorProto.UINT8
    graph = helper.make_graph(
        [node], case.name,
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(values[n].dtype),
                                       list(values[n].shape)) for n in operands if n in values],
        [helper.make_tensor_value_info("y", out_type, None)],
        initializer=[numpy_helper.from_array(values[n], n) for n in names
                     if n not in operands])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 10
    return model, {n: values[n] for n in operands if n in values}


def _onnx_model(case, constants, runtime, attributes, constant_weights):
    """A one-node QLinearConv / QLinearMatMul model; its weights and every
    scale and zero point are graph inputs or, with ``constant_weights``,
    initializers, as a quantized model has them (onnxruntime then prepacks
    the weights and takes its fixed-parameter requantization path)."""
    from onnx import TensorProto, helper, numpy_helper

    if case.kind == "conv":
        weights = {"w": constants["filter"],
                   "w_scale": constants["filter_scale"],
                   "w_zero_point": np.zeros(case.out_channels, np.int8),
                   "B": constants["bias"]}
        activations = {"x": runtime["input"], "x_scale": runtime["input_scale"],
                       "x_zero_point": runtime["input_zero_point"]}
        names = ["x", "x_scale", "x_zero_point", "w", "w_scale", "w_zero_point", "y_scale",
                 "y_zero_point", "B"]
        node = helper.make_node("QLinearConv", names, ["y"], kernel_shape=[case.kernel] * 2,
                                strides=[case.stride] * 2, pads=[case.pad] * 4,
                                dilations=[case.dilation] * 2, group=case.groups)
    else:
        weights = {"b": constants["b"], "b_scale": constants["b_scale"],
                   "b_zero_point": np.int8(0)}
        activations = {"a": runtime["a"], "a_scale": runtime["a_scale"],
                       "a_zero_point": runtime["a_zero_point"]}
        names = ["a", "a_scale", "a_zero_point", "b", "b_scale", "b_zero_point", "y_scale",
                 "y_zero_point"]
        node = helper.make_node("QLinearMatMul", names, ["y"])
    activations.update(y_scale=runtime["output_scale"], y_zero_point=runtime["output_zero_point"])
    if constant_weights:  # only the data is fed
        data = "x" if case.kind == "conv" else "a"
        weights.update({k: v for k, v in activations.items() if k != data})
        activations = {data: activations[data]}
    values = dict(activations, **weights)

    def info(name):
        array = np.asarray(values[name])
        return helper.make_tensor_value_info(
            name, helper.np_dtype_to_tensor_dtype(array.dtype), list(array.shape))

    inputs = list(activations) + ([] if constant_weights else list(weights))
    initializers = ([numpy_helper.from_array(np.asarray(v), k) for k, v in weights.items()]
                    if constant_weights else [])
    feeds = {name: np.asarray(values[name]) for name in inputs}
    graph = helper.make_graph([node], case.name, [info(n) for n in inputs],
                              [helper.make_tensor_value_info("y", TensorProto.UINT8, None)],
                              initializer=initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10  # what onnxruntime 1.18 and later load
    return model, feeds


def onnxruntime_runner(case, constants, runtime, attributes, constant_weights, threads):
    import onnxruntime

    if case.is_quantize:
        model, feeds = _quantize_onnx_model(case, runtime, attributes)
    elif case.kind in _CONTRIB_INPUTS:
        model, feeds = _contrib_onnx_model(case, runtime, constant_weights)
    else:
        model, feeds = _onnx_model(case, constants, runtime, attributes, constant_weights)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = onnxruntime.InferenceSession(model.SerializeToString(), options,
                                           providers=["CPUExecutionProvider"])
    return lambda: session.run(None, feeds)[0]


def reference_runner(case, constants, runtime, attributes):
    from onnx.reference import ReferenceEvaluator

    model, feeds = _onnx_model(case, constants, runtime, attributes, False)
    evaluator = ReferenceEvaluator(model)
    return lambda: evaluator.run(None, feeds)[0]


def qops_runners(case, constants, runtime, attributes, threads):
    """(the plain function, the compiled operator) as callables; the quantize
    operators do not compile (None)."""
    import qops

    if case.is_quantize:
        # Into a preallocated output (out=), as onnxruntime's runs reuse its
        # arena: a fresh 64 MB array would time the page faults of the
        # allocation, not the kernel.
        function = qops.quantize_linear if case.kind == "quantize" else qops.dequantize_linear
        out = function(**runtime, **attributes, n_threads=threads)
        return lambda: function(**runtime, **attributes, out=out, n_threads=threads), None
    if case.kind == "add":
        out = qops.element_wise_quantized_linear_add(**runtime, n_threads=threads)
        return lambda: qops.element_wise_quantized_linear_add(
            **runtime, out=out, n_threads=threads), None
    if case.kind == "pool":
        out = qops.quantized_linear_average_pooling(**runtime, **attributes, n_threads=threads)
        return lambda: qops.quantized_linear_average_pooling(
            **runtime, **attributes, out=out, n_threads=threads), None
    if case.kind == "integer_to_float":
        # As an onnxruntime-quantized model has it (A and B of two types
        # when they differ): through qops.onnx's adapter.
        from qops.onnx._nodes import matmul_integer_to_float

        _, _, slots = _CONTRIB_INPUTS["integer_to_float"]
        inputs = [runtime[slot] for slot in slots]
        return lambda: matmul_integer_to_float(inputs, {}, 1)[0], None
    # The compiled pairing binds every constant a quantized model has: the
    # weights and every scale and zero point; only the data is given per call.
    data = "input" if case.kind == "conv" else "a"
    parameters = {k: v for k, v in runtime.items() if k != data}
    if case.kind == "conv":
        plain = lambda: qops.quantized_linear_convolution(  # noqa: E731
            **runtime, **constants, **attributes, n_threads=threads)
        compiled_op = qops.compile("QUANTIZED_LINEAR_CONVOLUTION", **constants, **parameters,
                                   **attributes)
    else:
        plain = lambda: qops.quantized_linear_matrix_multiply(  # noqa: E731
            **runtime, **constants, n_threads=threads)
        compiled_op = qops.compile("QUANTIZED_LINEAR_MATRIX_MULTIPLY", **constants,
                                   **parameters)
    image = runtime[data]
    compiled = lambda: compiled_op(image, n_threads=threads)  # noqa: E731
    return plain, compiled


def best_time(function, budget=0.25, repeats=5):
    """The best per-call time of ``repeats`` batches, each long enough to time."""
    function()
    start = time.perf_counter()
    function()
    once = max(time.perf_counter() - start, 1e-7)
    number = max(1, int(budget / repeats / once))
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(number):
            function()
        best = min(best, (time.perf_counter() - start) / number)
    return best


def _progress(index, total, name, stream):
    width = 30
    done = int(width * index / total)
    stream.write(f"\r[{'#' * done}{'.' * (width - done)}] {index}/{total} {name:<30}")
    stream.flush()


def _same_bits(a, b):
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a.view(np.uint8),
                                                                         b.view(np.uint8))


def _exact(result, oracle):
    """Whether ``result`` has the oracle's bytes (a reshape aside: onnxruntime
    and qops agree on the element order)."""
    result = np.asarray(result)
    return result.size == oracle.size and _same_bits(result.reshape(oracle.shape), oracle)


# -- the machine ----------------------------------------------------------------------------

def cpu_name():
    """The CPU's model name, and on Linux its family and model numbers (a
    hypervisor often shows only the vendor's brand)."""
    fields = {}
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
                if not line.strip():
                    break
    except OSError:
        pass
    name = fields.get("model name") or platform.processor() or platform.machine()
    if "cpu family" in fields and "model" in fields:
        name += f" (family {fields['cpu family']}, model {fields['model']})"
    return name


def has_dot_product():
    """Whether the CPU has an 8-bit dot-product instruction (AVX-512 VNNI or
    AVX-VNNI), with which onnxruntime's u8 x s8 kernels are exact; ``None``
    off x86-64.  Asked of CPUID in this process, as onnxruntime asks it (a
    process shown an AVX2-only CPU, benchmarks/avx2_cpu.py, is answered
    as onnxruntime is)."""
    from qops.backends.native.kernels import _platform

    return _platform.cpu_dot_product()


def machine(threads, probe_seconds=0.3):
    """What the figures were measured on: the CPU, its instruction sets, the
    kernel variant in use and the measured ceiling of that variant's
    multiply-add instructions on ``threads`` threads."""
    from qops.backends.native import variants as _simd
    from qops.backends.native.kernels import _peak_probes, _platform

    variant = _simd.selected()
    probe = _peak_probes.probe(variant)
    features = _platform.cpu_features()
    dot_product = has_dot_product()
    # Without an 8-bit dot product onnxruntime runs a saturating step of its
    # own: its ceiling too, where the variant's instructions can measure it.
    peer = _peak_probes.peer_probe(variant) if dot_product is False else None
    return {
        "cpu": cpu_name(),
        "instruction sets": [name for name in _simd.VARIANTS if features.get(name)],
        "variant": variant,
        "available": list(_simd.available()),
        "threads": threads,
        "dot product": dot_product,
        "peak_gops": probe.peak_gops(threads, probe_seconds),
        "peak_mix": probe.mix,
        "peer_peak_gops": peer.peak_gops(threads, probe_seconds) if peer else None,
        "peer_peak_mix": peer.mix if peer else None,
    }


def machine_line(info):
    sets = ", ".join(name for name in info["instruction sets"] if name != "portable") or "none"
    dot = {True: "yes", False: "no", None: "unknown"}[info.get("dot product")]
    return (f"Measured on {info['cpu']}; SIMD: {sets}; 8-bit dot product (VNNI): {dot}; "
            f"{info['threads']} threads; qops kernels "
            f"{info['variant']} (available: {', '.join(info['available'])}); the {info['variant']} "
            f"peak, {info['peak_mix']}, measured {info['peak_gops']:.1f} GOPS"
            + (f"; onnxruntime's step here, {info['peer_peak_mix']}, "
               f"{info['peer_peak_gops']:.1f} GOPS "
               f"({info['peer_peak_gops'] / info['peak_gops']:.2f}x the exact peak)"
               if info.get("peer_peak_gops") else "") + ".")


# -- measuring ------------------------------------------------------------------------------

def _peer(make, oracle):
    """onnxruntime's runner made by ``make`` and whether its output is exact,
    or ``(None, "error")`` when it cannot run (the peer's failure is
    reported, not the run's)."""
    try:
        runner = make()
        exact = _exact(runner(), oracle)
    except Exception as error:  # noqa: BLE001 - onnxruntime raises its own types
        print(f"onnxruntime failed: {type(error).__name__}: {error}", file=sys.stderr)
        return None, "error"
    return runner, exact


def _ratio(numerator, denominator):
    return None if numerator is None or denominator is None else numerator / denominator


def _timed_rounds(functions, peers, oracle, budget, rounds):
    """The best time per call of each qops function and each onnxruntime
    session over ``rounds`` rounds, and each session's exactness.

    ``functions`` and ``peers`` map keys to qops callables and to makers of
    onnxruntime runners.  A round times every qops function, then each
    session, made afresh and freed after its timing: once a session has run,
    its worker threads spin for tens of milliseconds and take the second
    core from any other thread pool, qops' or the other session's (on a
    2-core machine an OpenMP region then waits a scheduler period for its
    second thread), and a session's threads stop when it is freed.  Rounds
    spread each library's timings over the case's time, so that a burst of
    load on the shared host slows the best time of neither more than the
    other's; each round takes ``budget / rounds`` seconds per timing.
    Returns ``(times, exactness)``: a session that fails is reported once,
    its time None and its exactness "error"."""
    times = dict.fromkeys([*functions, *peers], math.inf)
    exactness = {}
    share = budget / max(rounds, 1)
    for _ in range(max(rounds, 1)):
        for key, function in functions.items():
            times[key] = min(times[key], best_time(function, share))
        for key, make in peers.items():
            if exactness.get(key) == "error":
                continue
            runner, exact = _peer(make, oracle)
            exactness[key] = exact if exact == "error" else exactness.get(key, True) and exact
            if runner is not None:
                times[key] = min(times[key], best_time(runner, share))
            del runner
    return {key: None if value == math.inf else value for key, value in times.items()}, exactness


def _session_runner(case, runtime, threads):
    """A qops session of the one-node model onnxruntime's constant pairing
    runs (every parameter and weight an initializer): what a model's node
    of this case runs on, its constants bound once."""
    import qops.onnx

    model, feeds = _contrib_onnx_model(case, runtime, True)
    session = qops.onnx.InferenceSession(model, n_threads=threads)
    return lambda: session.run(None, feeds)[0]


def _function_row(case, runtime, attributes, threads, budget, rounds):
    """qops against onnxruntime on a case without a compiled convolution or
    matrix multiply (quantize, dequantize, add, pooling, integer to float);
    the com.microsoft ones (add, pooling, integer to float) also in the
    constant pairing: one model with every constant an initializer, run by
    a qops session and by onnxruntime."""
    plain, _ = qops_runners(case, {}, runtime, attributes, threads)
    oracle = _oracle_on_one_thread(case, {}, runtime, attributes)
    functions = {"qops": plain}
    peers = {"ort": lambda: onnxruntime_runner(case, {}, runtime, attributes, False, threads)}
    if case.kind in _CONTRIB_INPUTS:
        functions["qops_compiled"] = _session_runner(case, runtime, threads)
        peers["ort_constant"] = lambda: onnxruntime_runner(case, {}, runtime, attributes, True,
                                                           threads)
    row = {"case": case.name, "gop": 0.0,
           "exact": all(_exact(function(), oracle) for function in functions.values())}
    times, exactness = _timed_rounds(functions, peers, oracle, budget, rounds)
    row.update(times)
    row["ort_exact"] = ("error" if "error" in exactness.values()
                        else all(exactness.values()))
    row["speed_vs_ort"] = _ratio(row["ort"], row["qops"])
    if exactness.get("ort") == "error" and case.is_quantize:
        # What onnxruntime does not run (int32 x, the 6-bit floats), onnx.reference does.
        model, feeds = _quantize_onnx_model(case, runtime, attributes)
        from onnx.reference import ReferenceEvaluator

        evaluator = ReferenceEvaluator(model)
        evaluate = lambda: evaluator.run(None, feeds)[0]  # noqa: E731
        row["reference_exact"] = _exact(evaluate(), oracle)
        row["reference"] = best_time(evaluate, budget)
    for key in ("qops_compiled", "ort_constant", "gops", "gops_compiled", "peak", "ort_peak",
                "speed_vs_ort_constant", "gbps", "ort_gbps"):
        row.setdefault(key, None)
    row["speed_vs_ort_constant"] = _ratio(row["ort_constant"], row["qops_compiled"])
    if case.operations():
        row["gops"] = case.operations() / row["qops"] / 1e9
    else:
        row["gbps"] = case.bytes_moved() / row["qops"] / 1e9
        row["ort_gbps"] = _ratio(case.bytes_moved() / 1e9, row["ort"])
    return row


#: Rounds per case (``--rounds``'s default).
ROUNDS = 3


def run(cases=CASES, threads=2, budget=0.25, peak_gops=None, progress=sys.stderr,
        rounds=ROUNDS):
    """Measure every case; returns one dict per case.  ``peak_gops`` is the
    ceiling '% peak' divides by (None: no such column); each time is the
    best of ``rounds`` rounds (:func:`_timed_rounds`)."""
    rows = []
    for index, case in enumerate(cases):
        if progress:
            _progress(index, len(cases), case.name, progress)
        constants, runtime, attributes = operands(case)
        if not case.has_compiled:
            rows.append(_function_row(case, runtime, attributes, threads, budget, rounds))
            continue
        oracle = _oracle_on_one_thread(case, constants, runtime, attributes)
        plain, compiled = qops_runners(case, constants, runtime, attributes, threads)
        row = {"case": case.name, "gop": case.operations() / 1e9,
               "exact": _exact(plain(), oracle) and _exact(compiled(), oracle)}
        times, exactness = _timed_rounds(
            {"qops": plain, "qops_compiled": compiled},
            {key: functools.partial(onnxruntime_runner, case, constants, runtime, attributes,
                                    constant_weights, threads)
             for key, constant_weights in (("ort", False), ("ort_constant", True))},
            oracle, budget, rounds)
        row.update(times)
        row["ort_exact"] = ("error" if "error" in exactness.values()
                            else all(exactness.values()))
        if case.small:
            row["reference"] = best_time(reference_runner(case, constants, runtime, attributes),
                                         budget)
        row["gops"] = case.operations() / row["qops"] / 1e9
        row["gops_compiled"] = case.operations() / row["qops_compiled"] / 1e9
        row["peak"] = row["gops_compiled"] / peak_gops if peak_gops else None
        # onnxruntime's constant-weight session against the same exact
        # ceiling: past 100% its instructions do more per cycle than the
        # exact ones can (the saturating AVX2 step), so "compiled vs ORT
        # const" can reach at most % peak over this.
        row["ort_peak"] = (case.operations() / row["ort_constant"] / 1e9 / peak_gops
                           if peak_gops and row["ort_constant"] else None)
        row["speed_vs_ort"] = _ratio(row["ort"], row["qops"])
        row["speed_vs_ort_constant"] = _ratio(row["ort_constant"], row["qops_compiled"])
        row["gbps"] = row["ort_gbps"] = None
        rows.append(row)
    if progress:
        _progress(len(cases), len(cases), "done", progress)
        progress.write("\n")
    return rows


def geometric_mean(values):
    values = list(values)
    return math.exp(sum(math.log(v) for v in values) / len(values))


def _cell(value, form):
    """A table cell; blank where the case has no such figure."""
    return "" if value is None else form.format(value)


def _yes(value):
    return "yes" if value else "NO"


def _peer_cell(value):
    return value if isinstance(value, str) else ("yes" if value else "no")


def table(rows, info=None):
    """A Markdown table of the measurements, after a line naming the machine
    (``info``, from :func:`machine`)."""
    header = ("case", "qops ms", "ORT ms", "qops vs ORT", "compiled ms", "ORT const ms",
              "compiled vs ORT const", "GOPS", "GOPS compiled", "% peak", "ORT const % peak",
              "GB/s", "ORT GB/s", "exact", "ORT exact")
    lines = ([machine_line(info), ""] if info else []) + [
        "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        lines.append("| " + " | ".join([
            row["case"], f"{row['qops'] * 1e3:.3f}",
            _cell(row["ort"] and row["ort"] * 1e3, "{:.3f}"),
            _cell(row["speed_vs_ort"], "{:.2f}x"),
            _cell(row["qops_compiled"] and row["qops_compiled"] * 1e3, "{:.3f}"),
            _cell(row["ort_constant"] and row["ort_constant"] * 1e3, "{:.3f}"),
            _cell(row["speed_vs_ort_constant"], "{:.2f}x"),
            _cell(row["gops"], "{:.1f}"), _cell(row["gops_compiled"], "{:.1f}"),
            _cell(row["peak"] and 100 * row["peak"], "{:.0f}%"),
            _cell(row.get("ort_peak") and 100 * row["ort_peak"], "{:.0f}%"),
            _cell(row.get("gbps"), "{:.1f}"), _cell(row.get("ort_gbps"), "{:.1f}"),
            _yes(row["exact"]), _peer_cell(row["ort_exact"])]) + " |")
    # One mean per kind of case: the convolution and matrix-multiply cases
    # (which have a compiled pairing) and the others (quantize, dequantize,
    # add, integer to float).
    for label, group in (("geometric mean, convolution and matrix multiply",
                          [r for r in rows if r["gop"]]),
                         ("geometric mean, the other operators",
                          [r for r in rows if not r["gop"]])):
        plain = [r["speed_vs_ort"] for r in group if r["speed_vs_ort"]]
        if not plain:
            continue
        compiled = [r["speed_vs_ort_constant"] for r in group if r["speed_vs_ort_constant"]]
        lines.append(f"| {label} | | | "
                     f"{geometric_mean(plain):.2f}x | | | "
                     + (f"{geometric_mean(compiled):.2f}x" if compiled else "")
                     + " |" * (len(header) - 6))
    small = [r for r in rows if "reference" in r]
    for row in small:
        judged = ("" if "reference_exact" not in row else
                  "; onnx.reference's output " + ("is exact" if row["reference_exact"]
                                                  else "differs from the exact one"))
        lines.append(f"\n{row['case']}: onnx.reference {row['reference'] * 1e3:.3f} ms; "
                     f"qops is {row['reference'] / row['qops']:.2f}x its speed{judged}")
    return "\n".join(lines)


def chart(rows, path):
    """A bar chart of speed against onnxruntime, both pairings, log scale."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r["case"] for r in rows]
    positions = np.arange(len(rows))
    figure, axes = plt.subplots(figsize=(11, 4.5))
    axes.bar(positions - 0.2, [r["speed_vs_ort"] or np.nan for r in rows], 0.4,
             label="qops function / ORT, weights as inputs")
    axes.bar(positions + 0.2, [r["speed_vs_ort_constant"] or np.nan for r in rows], 0.4,
             label="qops compiled / ORT, constant weights")
    axes.axhline(1.0, color="black", linewidth=0.8)
    axes.set_yscale("log")
    axes.set_ylabel("speed relative to onnxruntime (higher is faster)")
    axes.set_xticks(positions, names, rotation=45, ha="right")
    axes.legend()
    axes.set_title("qops against onnxruntime, same run, same thread count")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def choose_variant(name):
    """Make the kernels run variant ``name`` in this process (``QOPS_SIMD``);
    an error message, or ``None`` when done."""
    from qops.backends.native import variants as _simd

    runnable = _simd.available()
    if name not in runnable:
        return (f"--simd {name}: this machine runs {', '.join(runnable)} "
                f"(known variants: {', '.join(_simd.VARIANTS)})")
    if _simd._selected is not None and _simd._selected != name:
        return (f"--simd {name}: this process already runs {_simd._selected}; start a new "
                "process (python -m qops bench --simd ...)")
    os.environ["QOPS_SIMD"] = name
    return None


def main(args):
    selected = [c for c in CASES if not args.cases or c.name in args.cases]
    unknown = set(args.cases or ()) - {c.name for c in CASES}
    if unknown:
        print(f"error: unknown cases {sorted(unknown)}; known: {[c.name for c in CASES]}",
              file=sys.stderr)
        return 2
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        print("error: the benchmark needs the bench extra: pip install -e \".[bench]\"",
              file=sys.stderr)
        return 2
    if getattr(args, "simd", None):
        problem = choose_variant(args.simd)
        if problem:
            print(f"error: {problem}", file=sys.stderr)
            return 2
    info = machine(args.threads)
    rows = run(selected, threads=args.threads, budget=args.budget, peak_gops=info["peak_gops"],
               rounds=args.rounds)
    text = table(rows, info)
    print(text)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "bench.md"), "w") as handle:
        handle.write(text + "\n")
    try:
        chart(rows, os.path.join(args.out, "bench.png"))
    except ImportError:
        print("(no chart: matplotlib is not installed)", file=sys.stderr)
    wrong = [r["case"] for r in rows if not r["exact"]]
    if wrong:
        print(f"qops differs from the exact result on: {', '.join(wrong)}", file=sys.stderr)
        return 1
    return 0
