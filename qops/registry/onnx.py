"""ONNX operator tables: ``DequantizeLinear`` and ``QuantizeLinear``.

Type constraints per opset (10, 13, 19, 21, 23, 24, 25, 28) as ``onnx.defs``
states them: 24 adds float8e8m0 scales (a power of two in one byte), 25 the
2-bit types int2 and uint2 and 28 the 6-bit floats float6e2m3 and
float6e3m2.  Opsets 26 and 27 changed neither operator, so a model of
either runs version 25.

``QuantizeLinear``'s input ``x`` is one of ``DequantizeLinear``'s output
types or ``int32``, in every opset.  Its scale is a float type, from opset 19
also ``int32`` (and from 24 float8e8m0); in opsets 19 and 21, where ``x`` and
the scale share one type parameter, an ``int32`` ``x`` needs an ``int32``
scale, and from opset 23 the two are independent.  Its output is one of
``DequantizeLinear``'s quantized types except ``int32``, which is dequantized
only.  From opset 23 ``DequantizeLinear``'s output type may differ from the
scale's (``output_dtype``); a float8e8m0 scale, not an output type, needs it.

Granularities: ``per-tensor`` (a scalar or a one-element 1-D scale), from
opset 13 ``per-axis`` (a 1-D scale of ``x.shape[axis]`` elements) and from
opset 21 ``blocked`` (the rank of ``x``, ``ceil(x.shape[axis] / block_size)``
elements along ``axis``).
"""

from __future__ import annotations

from qops.registry.schema import (
    Attribute,
    Constraint,
    ConstraintKind,
    Operator,
    Opset,
    ShapePattern,
    Slot,
    SlotKind,
    TensorSupport,
    VersionSupport,
)

OPSETS = (10, 13, 19, 21, 23, 24, 25, 28)

FLOAT8_TYPES = ("FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ")
_FLOAT8 = FLOAT8_TYPES

#: DequantizeLinear's T1 (quantized x and x_zero_point) per opset.
DEQUANTIZE_INPUT_TYPES = {
    10: ("INT8", "UINT8", "INT32"),
    13: ("INT8", "UINT8", "INT32"),
    19: ("INT8", "UINT8", "INT32") + _FLOAT8,
    21: ("INT8", "UINT8", "INT16", "UINT16", "INT32", "INT4", "UINT4") + _FLOAT8,
    23: ("INT8", "UINT8", "INT16", "UINT16", "INT32", "INT4", "UINT4") + _FLOAT8 + ("FLOAT4E2M1",),
    24: ("INT8", "UINT8", "INT16", "UINT16", "INT32", "INT4", "UINT4") + _FLOAT8 + ("FLOAT4E2M1",),
    25: ("INT8", "UINT8", "INT16", "UINT16", "INT32", "INT4", "UINT4") + _FLOAT8
        + ("FLOAT4E2M1", "UINT2", "INT2"),
    28: ("INT8", "UINT8", "INT16", "UINT16", "INT32", "INT4", "UINT4") + _FLOAT8
        + ("FLOAT4E2M1", "UINT2", "INT2", "FLOAT6E2M3", "FLOAT6E3M2"),
}

#: DequantizeLinear's output types (its T3 from opset 23; the scale's type before).
FLOAT_TYPES = {
    10: ("FLOAT32",),
    13: ("FLOAT32",),
    19: ("FLOAT32", "FLOAT16", "BFLOAT16"),
    21: ("FLOAT32", "FLOAT16", "BFLOAT16"),
    23: ("FLOAT32", "FLOAT16", "BFLOAT16"),
    24: ("FLOAT32", "FLOAT16", "BFLOAT16"),
    25: ("FLOAT32", "FLOAT16", "BFLOAT16"),
    28: ("FLOAT32", "FLOAT16", "BFLOAT16"),
}

#: DequantizeLinear's scale types (its T2): the output types, and from
#: opset 24 float8e8m0.
SCALE_TYPES = {
    opset: types + (("FLOAT8E8M0",) if opset >= 24 else ())
    for opset, types in FLOAT_TYPES.items()
}

#: QuantizeLinear's scale types: DequantizeLinear's, and from opset 19 int32
#: (ONNX's T1, shared with x, in 19 and 21; its own T2 from 23).
QUANTIZE_SCALE_TYPES = {
    opset: types + (("INT32",) if opset >= 19 else ())
    for opset, types in SCALE_TYPES.items()
}

#: QuantizeLinear's quantized output types: DequantizeLinear's T1 without int32.
QUANTIZE_OUTPUT_TYPES = {
    opset: tuple(t for t in types if t != "INT32")
    for opset, types in DEQUANTIZE_INPUT_TYPES.items()
}

#: QuantizeLinear's input types (T1): DequantizeLinear's output types and int32.
QUANTIZE_INPUT_TYPES = {opset: types + ("INT32",) for opset, types in FLOAT_TYPES.items()}

PER_TENSOR = ShapePattern(granularity="per-tensor", sizes=(1,))
PER_AXIS = ShapePattern(granularity="per-axis", sizes=("AxisLength",))
BLOCKED = ShapePattern(granularity="blocked", sizes=("BlockedShape",))

#: The first opset of each granularity.
GRANULARITIES = {
    10: ("per-tensor",),
    13: ("per-tensor", "per-axis"),
    19: ("per-tensor", "per-axis"),
    21: ("per-tensor", "per-axis", "blocked"),
    23: ("per-tensor", "per-axis", "blocked"),
    24: ("per-tensor", "per-axis", "blocked"),
    25: ("per-tensor", "per-axis", "blocked"),
    28: ("per-tensor", "per-axis", "blocked"),
}

_AXIS = Attribute(
    name="axis", source_name="axis", kind="int", default=1,
    description="the quantization axis for per-axis and blocked quantization; negative counts from the back",
)
_BLOCK_SIZE = Attribute(
    name="block_size", source_name="block_size", kind="int", default=0, minimum=0,
    description="elements per scale along axis (blocked quantization); 0 means not blocked",
)
_SATURATE = Attribute(
    name="saturate", source_name="saturate", kind="bool", default=True,
    description=("float8 outputs: clamp out-of-range values to the largest finite value "
                 "(float4 and float6 always saturate)"),
)
_OUTPUT_DTYPE = Attribute(
    name="output_dtype", source_name="output_dtype", kind="dtype",
    description="the quantized output type when there is no zero point (default uint8)",
)
_DEQUANTIZE_OUTPUT_DTYPE = Attribute(
    name="output_dtype", source_name="output_dtype", kind="dtype", choices=FLOAT_TYPES[23],
    description="the output type (default: x_scale's), which the product is rounded to",
)
_PRECISION = Attribute(
    name="precision", source_name="precision", kind="dtype", choices=FLOAT_TYPES[23],
    description="the float type the division x / y_scale is computed in",
)


def _scale_dims(opset):
    # Blocked scales have the rank of x, so from opset 21 a scale may have any rank.
    return None if opset >= 21 else 1


def _dequantize_version(opset):
    quantized = DEQUANTIZE_INPUT_TYPES[opset]
    constraints = [Constraint(kind=ConstraintKind.SAME_DTYPE, slots=("x", "x_zero_point"))]
    if opset < 23:
        # Until output_dtype (opset 23) the scale's type is the output's.
        constraints.append(Constraint(kind=ConstraintKind.SAME_DTYPE, slots=("x_scale", "y")))
    return VersionSupport(
        version=Opset(opset),
        tensors=(
            TensorSupport(slot="x", min_dims=0, max_dims=None, dtypes=quantized),
            TensorSupport(slot="x_scale", min_dims=0, max_dims=_scale_dims(opset),
                          dtypes=SCALE_TYPES[opset]),
            TensorSupport(slot="x_zero_point", min_dims=0, max_dims=_scale_dims(opset), dtypes=quantized),
            TensorSupport(slot="y", min_dims=0, max_dims=None, dtypes=FLOAT_TYPES[opset]),
        ),
        constraints=tuple(constraints),
        attributes=tuple(
            name for name, since in (("axis", 13), ("block_size", 21), ("output_dtype", 23))
            if opset >= since
        ),
        granularities=GRANULARITIES[opset],
    )


def _quantize_version(opset):
    quantized = QUANTIZE_OUTPUT_TYPES[opset]
    constraints = [Constraint(kind=ConstraintKind.SAME_DTYPE, slots=("y", "y_zero_point"))]
    if opset in (19, 21):
        # T1 is shared by x and y_scale in these two opsets only.
        constraints.append(Constraint(kind=ConstraintKind.SAME_DTYPE, slots=("x", "y_scale")))
    return VersionSupport(
        version=Opset(opset),
        tensors=(
            TensorSupport(slot="x", min_dims=0, max_dims=None, dtypes=QUANTIZE_INPUT_TYPES[opset]),
            TensorSupport(slot="y_scale", min_dims=0, max_dims=_scale_dims(opset),
                          dtypes=QUANTIZE_SCALE_TYPES[opset]),
            TensorSupport(slot="y_zero_point", min_dims=0, max_dims=_scale_dims(opset), dtypes=quantized),
            TensorSupport(slot="y", min_dims=0, max_dims=None, dtypes=quantized),
        ),
        constraints=tuple(constraints),
        attributes=tuple(
            name
            for name, since in (("axis", 13), ("saturate", 19), ("block_size", 21),
                                ("output_dtype", 21), ("precision", 23))
            if opset >= since
        ),
        granularities=GRANULARITIES[opset],
    )


DEQUANTIZE_LINEAR = Operator(
    name="DequantizeLinear",
    function="dequantize_linear",
    source="ONNX",
    reference="DequantizeLinear",
    summary="y = (x - x_zero_point) * x_scale, per tensor, per axis or per block.",
    slots=(
        Slot(name="x", source_name="x", kind=SlotKind.INPUT,
             description="the quantized tensor"),
        Slot(name="x_scale", source_name="x_scale", kind=SlotKind.INPUT,
             description="scale; its type is the output type unless output_dtype says another",
             shapes=(PER_TENSOR, PER_AXIS, BLOCKED)),
        Slot(name="x_zero_point", source_name="x_zero_point", kind=SlotKind.OPTIONAL_INPUT,
             description="zero point, same shape as x_scale (0 when absent)",
             shapes=(PER_TENSOR, PER_AXIS, BLOCKED)),
        Slot(name="y", source_name="y", kind=SlotKind.OUTPUT,
             description="the dequantized tensor, shape of x"),
    ),
    attributes=(_AXIS, _BLOCK_SIZE, _DEQUANTIZE_OUTPUT_DTYPE),
    versions=tuple(_dequantize_version(opset) for opset in OPSETS),
)

QUANTIZE_LINEAR = Operator(
    name="QuantizeLinear",
    function="quantize_linear",
    source="ONNX",
    reference="QuantizeLinear",
    summary=(
        "y = saturate(round_half_even(x / y_scale) + y_zero_point), per tensor, "
        "per axis or per block."
    ),
    slots=(
        Slot(name="x", source_name="x", kind=SlotKind.INPUT,
             description="the tensor to quantize"),
        Slot(name="y_scale", source_name="y_scale", kind=SlotKind.INPUT,
             description="scale", shapes=(PER_TENSOR, PER_AXIS, BLOCKED)),
        Slot(name="y_zero_point", source_name="y_zero_point", kind=SlotKind.OPTIONAL_INPUT,
             description="zero point, same shape as y_scale; its type is the output type",
             shapes=(PER_TENSOR, PER_AXIS, BLOCKED)),
        Slot(name="y", source_name="y", kind=SlotKind.OUTPUT,
             description="the quantized tensor, shape of x"),
    ),
    attributes=(_AXIS, _SATURATE, _BLOCK_SIZE, _OUTPUT_DTYPE, _PRECISION),
    versions=tuple(_quantize_version(opset) for opset in OPSETS),
)

OPERATORS = (DEQUANTIZE_LINEAR, QUANTIZE_LINEAR)
