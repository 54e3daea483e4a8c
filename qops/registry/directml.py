"""DirectML operator tables.

Transcribed from the DirectML reference pages, each with the feature levels
of its tensor-support tables:

* ``DML_QUANTIZED_LINEAR_CONVOLUTION_OPERATOR_DESC`` (2_1, 4_0 and 5_2);
* ``DML_QUANTIZED_LINEAR_MATRIX_MULTIPLY_OPERATOR_DESC`` (2_1 and 4_0);
* for the integer operators ONNX's ConvInteger, MatMulInteger and
  DynamicQuantizeLinear map onto, ``DML_CONVOLUTION_INTEGER_OPERATOR_DESC``
  (2_1 and 4_0), ``DML_MATRIX_MULTIPLY_INTEGER_OPERATOR_DESC`` (2_1, 4_0
  and 5_2) and ``DML_DYNAMIC_QUANTIZE_LINEAR_OPERATOR_DESC`` (4_0);
* ``DML_ELEMENT_WISE_QUANTIZED_LINEAR_ADD_OPERATOR_DESC`` (4_0: onnxruntime's
  QLinearAdd);
* ``DML_MATRIX_MULTIPLY_INTEGER_TO_FLOAT_OPERATOR_DESC`` (6_2: onnxruntime's
  MatMulIntegerToFloat);
* ``DML_QUANTIZED_LINEAR_AVERAGE_POOLING_OPERATOR_DESC`` (6_2: onnxruntime's
  QLinearAveragePool and QLinearGlobalAveragePool);
* ``DML_ELEMENT_WISE_QUANTIZE_LINEAR_OPERATOR_DESC`` and
  ``DML_ELEMENT_WISE_DEQUANTIZE_LINEAR_OPERATOR_DESC`` (1_0, 2_1, 3_0, 6_0 and 6_2).
* ``DML_QUANTIZE_OPERATOR_DESC`` and ``DML_DEQUANTIZE_OPERATOR_DESC`` (6_3).

Slot order is the order of the fields in each ``*_OPERATOR_DESC`` structure.
"""

from __future__ import annotations

from dataclasses import replace

from qops.registry.schema import (
    Attribute,
    Constraint,
    ConstraintKind,
    FeatureLevel,
    Operator,
    ShapePattern,
    Slot,
    SlotKind,
    TensorSupport,
    VersionSupport,
)

INPUT = SlotKind.INPUT
OPTIONAL = SlotKind.OPTIONAL_INPUT
OUTPUT = SlotKind.OUTPUT
QUANTIZED = ("INT8", "UINT8")
SCALE = ("FLOAT32",)


#: DirectML's UINT fields.
UINT_MAX = 2**32 - 1


def _pattern(granularity, *sizes):
    return ShapePattern(granularity=granularity, sizes=tuple(sizes))


PER_TENSOR = _pattern("per-tensor", 1, 1, 1, 1)
PER_CHANNEL = _pattern("per-channel", 1, "OutputChannelCount", 1, 1)
PER_ROW = _pattern("per-row", 1, 1, "M", 1)
PER_COLUMN = _pattern("per-column", 1, 1, 1, "N")

# The convolutions' tensor slots, shared by QUANTIZED_LINEAR_CONVOLUTION and
# CONVOLUTION_INTEGER: names, kinds and shapes here, each operator's page's
# description where it differs (dataclasses.replace).  The height is absent
# for a 1-D convolution, where a feature level allows one.
CONVOLUTION_INPUT = Slot(
    name="input", source_name="InputTensor", kind=INPUT,
    description="{ BatchCount, InputChannelCount, [InputHeight], InputWidth }",
    shapes=(_pattern("data", "BatchCount", "InputChannelCount", "Height", "Width"),))
CONVOLUTION_INPUT_ZERO_POINT = Slot(
    name="input_zero_point", source_name="InputZeroPointTensor", kind=OPTIONAL,
    description="the input's zero point", shapes=(PER_TENSOR,))
CONVOLUTION_FILTER = Slot(
    name="filter", source_name="FilterTensor", kind=INPUT,
    description="{ FilterBatchCount, FilterChannelCount, [FilterHeight], FilterWidth }",
    shapes=(_pattern("data", "OutputChannelCount", "FilterChannelCount",
                     "FilterHeight", "FilterWidth"),))
CONVOLUTION_FILTER_ZERO_POINT = Slot(
    name="filter_zero_point", source_name="FilterZeroPointTensor", kind=OPTIONAL,
    description="the filter's zero point, per tensor or per output channel",
    shapes=(PER_TENSOR, PER_CHANNEL))
CONVOLUTION_OUTPUT = Slot(
    name="output", source_name="OutputTensor", kind=OUTPUT,
    description="{ BatchCount, OutputChannelCount, [OutputHeight], OutputWidth }",
    shapes=(_pattern("data", "BatchCount", "OutputChannelCount", "OutputHeight",
                     "OutputWidth"),))


def _rows(spec):
    """Support rows from ``(slot, min_dims, max_dims, dtypes[, "required"])``
    tuples ("required": an optional slot this version's table lists as an input)."""
    return tuple(
        TensorSupport(slot=row[0], min_dims=row[1], max_dims=row[2], dtypes=row[3],
                      required=row[4:] == ("required",))
        for row in spec
    )


_QLC_ATTRIBUTES = ("dimension_count", "strides", "dilations", "start_padding", "end_padding",
                   "group_count", "output_dtype")

QUANTIZED_LINEAR_CONVOLUTION = Operator(
    name="QUANTIZED_LINEAR_CONVOLUTION",
    function="quantized_linear_convolution",
    source="DirectML",
    reference="DML_QUANTIZED_LINEAR_CONVOLUTION_OPERATOR_DESC",
    summary=(
        "Forward 2-D convolution of quantized data: dequantize the input and the "
        "filter, convolve, add the bias, quantize the result."
    ),
    slots=(
        replace(CONVOLUTION_INPUT,
                description="{ InputBatchCount, InputChannelCount, InputHeight, InputWidth }"),
        Slot(name="input_scale", source_name="InputScaleTensor", kind=INPUT,
             description="scale for dequantizing the input", shapes=(PER_TENSOR,)),
        replace(CONVOLUTION_INPUT_ZERO_POINT, description="zero point for dequantizing the input"),
        replace(CONVOLUTION_FILTER, description="{ FilterBatchCount, FilterChannelCount, "
                                                "FilterHeight, FilterWidth }"),
        Slot(name="filter_scale", source_name="FilterScaleTensor", kind=INPUT,
             description="scale for dequantizing the filter", shapes=(PER_TENSOR, PER_CHANNEL)),
        replace(CONVOLUTION_FILTER_ZERO_POINT,
                description="zero point for dequantizing the filter"),
        Slot(name="bias", source_name="BiasTensor", kind=OPTIONAL,
             description="added to each output channel before quantizing",
             shapes=(_pattern("per-channel", 1, "OutputChannelCount", 1, 1),)),
        Slot(name="output_scale", source_name="OutputScaleTensor", kind=INPUT,
             description="scale for quantizing the output", shapes=(PER_TENSOR,)),
        Slot(name="output_zero_point", source_name="OutputZeroPointTensor", kind=OPTIONAL,
             description="zero point for quantizing the output", shapes=(PER_TENSOR,)),
        replace(CONVOLUTION_OUTPUT, description="{ OutputBatchCount, OutputChannelCount, "
                                                "OutputHeight, OutputWidth }"),
    ),
    attributes=(
        # The page says "only a value of 2 is supported", yet its tables from
        # 4_0 take 3-dimensional tensors: a 1-D convolution, which runs as a
        # 2-D one of height 1 (so 2 is what the kernels see).
        Attribute(name="dimension_count", source_name="DimensionCount", kind="int",
                  default=2, choices=(2,),
                  description="number of spatial dimensions the kernels run (a 1-D convolution "
                              "runs as a 2-D one of height 1)"),
        Attribute(name="strides", source_name="Strides", kind="ints", default=(1, 1), minimum=1,
                  maximum=UINT_MAX, description="filter step along each spatial dimension"),
        Attribute(name="dilations", source_name="Dilations", kind="ints", default=(1, 1), minimum=1,
                  maximum=UINT_MAX, description="spacing between filter elements"),
        Attribute(name="start_padding", source_name="StartPadding", kind="ints", default=(0, 0),
                  minimum=0, maximum=UINT_MAX, description="zeros before each spatial dimension"),
        Attribute(name="end_padding", source_name="EndPadding", kind="ints", default=(0, 0),
                  minimum=0, maximum=UINT_MAX, description="zeros after each spatial dimension"),
        Attribute(name="group_count", source_name="GroupCount", kind="int", default=1, minimum=1,
                  maximum=UINT_MAX,
                  description="number of groups; the input channel count gives depthwise"),
        Attribute(name="output_dtype", source_name="OutputTensor.DataType", kind="dtype",
                  description="output type when there is no output zero point"),
    ),
    constraints=(
        Constraint(kind=ConstraintKind.SAME_DIMENSION_COUNT,
                   slots=("bias", "filter", "input", "output")),
        Constraint(kind=ConstraintKind.SAME_DTYPE, slots=("output", "output_zero_point")),
        Constraint(kind=ConstraintKind.SAME_DTYPE, slots=("input", "input_zero_point")),
        Constraint(kind=ConstraintKind.SAME_DTYPE, slots=("filter", "filter_zero_point")),
    ),
    versions=(
        VersionSupport(
            version=FeatureLevel.FL_2_1,
            tensors=_rows((
                ("input", 4, 4, QUANTIZED),
                ("input_scale", 4, 4, SCALE),
                ("input_zero_point", 4, 4, QUANTIZED),
                ("filter", 4, 4, QUANTIZED),
                ("filter_scale", 4, 4, SCALE),
                ("filter_zero_point", 4, 4, QUANTIZED),
                ("bias", 4, 4, ("INT32",)),
                ("output_scale", 4, 4, SCALE),
                ("output_zero_point", 4, 4, QUANTIZED),
                ("output", 4, 4, QUANTIZED),
            )),
            attributes=_QLC_ATTRIBUTES,
            granularities=("data", "per-tensor", "per-channel"),
        ),
        VersionSupport(
            version=FeatureLevel.FL_4_0,
            tensors=_rows((
                ("input", 3, 4, QUANTIZED),
                ("input_scale", 1, 4, SCALE),
                ("input_zero_point", 1, 4, QUANTIZED),
                ("filter", 3, 4, QUANTIZED),
                ("filter_scale", 3, 4, SCALE),
                ("filter_zero_point", 1, 4, QUANTIZED),
                ("bias", 3, 4, ("INT32",)),
                ("output_scale", 1, 4, SCALE),
                ("output_zero_point", 1, 4, QUANTIZED),
                ("output", 3, 4, QUANTIZED),
            )),
            attributes=_QLC_ATTRIBUTES,
            granularities=("data", "per-tensor", "per-channel"),
        ),
        VersionSupport(
            version=FeatureLevel.FL_5_2,
            tensors=_rows((
                ("input", 3, 4, QUANTIZED),
                ("input_scale", 1, 4, SCALE),
                ("input_zero_point", 1, 4, QUANTIZED),
                ("filter", 3, 4, QUANTIZED),
                ("filter_scale", 1, 4, SCALE),
                ("filter_zero_point", 1, 4, QUANTIZED),
                ("bias", 3, 4, ("INT32",)),
                ("output_scale", 1, 4, SCALE),
                ("output_zero_point", 1, 4, QUANTIZED),
                ("output", 3, 4, QUANTIZED),
            )),
            attributes=_QLC_ATTRIBUTES,
            granularities=("data", "per-tensor", "per-channel"),
        ),
    ),
)

_MATMUL_SCALE_SLOTS = ("a_scale", "a_zero_point", "b_scale", "b_zero_point",
                       "output_scale", "output_zero_point")

QUANTIZED_LINEAR_MATRIX_MULTIPLY = Operator(
    name="QUANTIZED_LINEAR_MATRIX_MULTIPLY",
    function="quantized_linear_matrix_multiply",
    source="DirectML",
    reference="DML_QUANTIZED_LINEAR_MATRIX_MULTIPLY_OPERATOR_DESC",
    summary=(
        "Batched matrix multiply of quantized data: dequantize A and B, multiply, "
        "quantize the result.  A batch dimension of size 1 broadcasts."
    ),
    slots=(
        Slot(name="a", source_name="ATensor", kind=INPUT,
             description="{ BatchCount, ChannelCount, M, K }",
             shapes=(_pattern("data", "BatchCount", "ChannelCount", "M", "K"),)),
        Slot(name="a_scale", source_name="AScaleTensor", kind=INPUT,
             description="scale for dequantizing A", shapes=(PER_TENSOR, PER_ROW)),
        Slot(name="a_zero_point", source_name="AZeroPointTensor", kind=OPTIONAL,
             description="zero point for dequantizing A", shapes=(PER_TENSOR, PER_ROW)),
        Slot(name="b", source_name="BTensor", kind=INPUT,
             description="{ BatchCount, ChannelCount, K, N }",
             shapes=(_pattern("data", "BatchCount", "ChannelCount", "K", "N"),)),
        Slot(name="b_scale", source_name="BScaleTensor", kind=INPUT,
             description="scale for dequantizing B", shapes=(PER_TENSOR, PER_COLUMN)),
        Slot(name="b_zero_point", source_name="BZeroPointTensor", kind=OPTIONAL,
             description="zero point for dequantizing B", shapes=(PER_TENSOR, PER_COLUMN)),
        Slot(name="output_scale", source_name="OutputScaleTensor", kind=INPUT,
             description="scale for quantizing the output", shapes=(PER_TENSOR, PER_ROW)),
        Slot(name="output_zero_point", source_name="OutputZeroPointTensor", kind=OPTIONAL,
             description="zero point for quantizing the output", shapes=(PER_TENSOR, PER_ROW)),
        Slot(name="output", source_name="OutputTensor", kind=OUTPUT,
             description="{ BatchCount, ChannelCount, M, N }",
             shapes=(_pattern("data", "BatchCount", "ChannelCount", "M", "N"),)),
    ),
    attributes=(
        Attribute(name="output_dtype", source_name="OutputTensor.DataType", kind="dtype",
                  description="output type when there is no output zero point"),
    ),
    constraints=(
        Constraint(kind=ConstraintKind.SAME_DIMENSION_COUNT, slots=_MATMUL_SCALE_SLOTS),
        Constraint(kind=ConstraintKind.SAME_DIMENSION_COUNT, slots=("a", "b", "output")),
        Constraint(kind=ConstraintKind.SAME_DTYPE, slots=("b", "b_zero_point")),
        Constraint(kind=ConstraintKind.SAME_DTYPE, slots=("output", "output_zero_point")),
        Constraint(kind=ConstraintKind.SAME_DTYPE, slots=("a", "a_zero_point")),
    ),
    versions=(
        VersionSupport(
            version=FeatureLevel.FL_2_1,
            tensors=_rows((
                ("a", 4, 4, QUANTIZED),
                ("a_scale", 4, 4, SCALE),
                ("a_zero_point", 4, 4, QUANTIZED),
                ("b", 4, 4, QUANTIZED),
                ("b_scale", 4, 4, SCALE),
                ("b_zero_point", 4, 4, QUANTIZED),
                ("output_scale", 4, 4, SCALE),
                ("output_zero_point", 4, 4, QUANTIZED),
                ("output", 4, 4, QUANTIZED),
            )),
            attributes=("output_dtype",),
            granularities=("data", "per-tensor", "per-row", "per-column"),
        ),
        VersionSupport(
            version=FeatureLevel.FL_4_0,
            tensors=_rows((
                ("a", 2, 4, QUANTIZED),
                ("a_scale", 1, 4, SCALE),
                ("a_zero_point", 1, 4, QUANTIZED),
                ("b", 2, 4, QUANTIZED),
                ("b_scale", 1, 4, SCALE),
                ("b_zero_point", 1, 4, QUANTIZED),
                ("output_scale", 1, 4, SCALE),
                ("output_zero_point", 1, 4, QUANTIZED),
                ("output", 2, 4, QUANTIZED),
            )),
            attributes=("output_dtype",),
            granularities=("data", "per-tensor", "per-row", "per-column"),
        ),
    ),
)

_CONVOLUTION_ATTRIBUTES = tuple(a for a in QUANTIZED_LINEAR_CONVOLUTION.attributes
                                if a.name != "output_dtype")

CONVOLUTION_INTEGER = Operator(
    name="CONVOLUTION_INTEGER",
    function="convolution_integer",
    source="DirectML",
    reference="DML_CONVOLUTION_INTEGER_OPERATOR_DESC",
    summary=(
        "Forward convolution of integer data with the zero points subtracted: the exact "
        "int32 sums, unrequantized (ONNX ConvInteger)."
    ),
    slots=(CONVOLUTION_INPUT,
           replace(CONVOLUTION_INPUT_ZERO_POINT, description="zero point subtracted from the input"),
           CONVOLUTION_FILTER,
           replace(CONVOLUTION_FILTER_ZERO_POINT,
                   description="zero point subtracted from the filter"),
           CONVOLUTION_OUTPUT),
    attributes=_CONVOLUTION_ATTRIBUTES,
    constraints=(
        Constraint(kind=ConstraintKind.SAME_DTYPE, slots=("input", "input_zero_point")),
        Constraint(kind=ConstraintKind.SAME_DTYPE, slots=("filter", "filter_zero_point")),
    ),
    versions=(
        VersionSupport(
            version=FeatureLevel.FL_2_1,
            tensors=_rows((
                ("input", 4, 4, QUANTIZED),
                ("input_zero_point", 4, 4, QUANTIZED),
                ("filter", 4, 4, QUANTIZED),
                ("filter_zero_point", 4, 4, QUANTIZED),
                ("output", 4, 4, ("INT32",)),
            )),
            attributes=tuple(a.name for a in _CONVOLUTION_ATTRIBUTES),
            granularities=("data", "per-tensor", "per-channel"),
        ),
        VersionSupport(
            version=FeatureLevel.FL_4_0,
            tensors=_rows((
                ("input", 3, 4, QUANTIZED),
                ("input_zero_point", 1, 4, QUANTIZED),
                ("filter", 3, 4, QUANTIZED),
                ("filter_zero_point", 1, 4, QUANTIZED),
                ("output", 3, 4, ("INT32",)),
            )),
            constraints=(
                Constraint(kind=ConstraintKind.SAME_DIMENSION_COUNT,
                           slots=("filter_zero_point", "input_zero_point")),
                Constraint(kind=ConstraintKind.SAME_DIMENSION_COUNT,
                           slots=("filter", "input", "output")),
            ),
            attributes=tuple(a.name for a in _CONVOLUTION_ATTRIBUTES),
            granularities=("data", "per-tensor", "per-channel"),
        ),
    ),
)

MATRIX_MULTIPLY_INTEGER = Operator(
    name="MATRIX_MULTIPLY_INTEGER",
    function="matrix_multiply_integer",
    source="DirectML",
    reference="DML_MATRIX_MULTIPLY_INTEGER_OPERATOR_DESC",
    summary=(
        "Batched matrix multiply of integer data with the zero points subtracted: the exact "
        "int32 products, unrequantized (ONNX MatMulInteger)."
    ),
    slots=(
        Slot(name="a", source_name="ATensor", kind=INPUT,
             description="{ BatchCount, ChannelCount, M, K }",
             shapes=(_pattern("data", "BatchCount", "ChannelCount", "M", "K"),)),
        Slot(name="a_zero_point", source_name="AZeroPointTensor", kind=OPTIONAL,
             description="zero point subtracted from A", shapes=(PER_TENSOR, PER_ROW)),
        Slot(name="b", source_name="BTensor", kind=INPUT,
             description="{ BatchCount, ChannelCount, K, N }",
             shapes=(_pattern("data", "BatchCount", "ChannelCount", "K", "N"),)),
        Slot(name="b_zero_point", source_name="BZeroPointTensor", kind=OPTIONAL,
             description="zero point subtracted from B", shapes=(PER_TENSOR, PER_COLUMN)),
        Slot(name="output", source_name="OutputTensor", kind=OUTPUT,
             description="{ BatchCount, ChannelCount, M, N }",
             shapes=(_pattern("data", "BatchCount", "ChannelCount", "M", "N"),)),
    ),
    attributes=(),
    constraints=(
        Constraint(kind=ConstraintKind.SAME_DTYPE, slots=("a", "a_zero_point")),
        Constraint(kind=ConstraintKind.SAME_DTYPE, slots=("b", "b_zero_point")),
    ),
    versions=(
        VersionSupport(
            version=FeatureLevel.FL_2_1,
            tensors=_rows((
                ("a", 4, 4, QUANTIZED),
                ("a_zero_point", 4, 4, QUANTIZED),
                ("b", 4, 4, QUANTIZED),
                ("b_zero_point", 4, 4, QUANTIZED),
                ("output", 4, 4, ("INT32",)),
            )),
            granularities=("data", "per-tensor", "per-row", "per-column"),
        ),
        VersionSupport(
            version=FeatureLevel.FL_4_0,
            tensors=_rows((
                ("a", 2, 4, QUANTIZED),
                ("a_zero_point", 1, 4, QUANTIZED),
                ("b", 2, 4, QUANTIZED),
                ("b_zero_point", 2, 4, QUANTIZED),
                ("output", 2, 4, ("INT32",)),
            )),
            constraints=(
                Constraint(kind=ConstraintKind.SAME_DIMENSION_COUNT,
                           slots=("a", "b", "b_zero_point", "output")),
            ),
            granularities=("data", "per-tensor", "per-row", "per-column"),
        ),
        VersionSupport(
            version=FeatureLevel.FL_5_2,
            tensors=_rows((
                ("a", 2, 4, QUANTIZED),
                ("a_zero_point", 1, 4, QUANTIZED),
                ("b", 2, 4, QUANTIZED),
                ("b_zero_point", 1, 4, QUANTIZED),
                ("output", 2, 4, ("INT32",)),
            )),
            constraints=(
                Constraint(kind=ConstraintKind.SAME_DIMENSION_COUNT, slots=("a", "b", "output")),
            ),
            granularities=("data", "per-tensor", "per-row", "per-column"),
        ),
    ),
)

DYNAMIC_QUANTIZE_LINEAR = Operator(
    name="DYNAMIC_QUANTIZE_LINEAR",
    function="dynamic_quantize_linear",
    source="DirectML",
    reference="DML_DYNAMIC_QUANTIZE_LINEAR_OPERATOR_DESC",
    summary=(
        "Quantize with a scale and zero point computed from the input's range (which "
        "always includes 0): y = saturate(round(x / scale) + zero_point)."
    ),
    slots=(
        Slot(name="input", source_name="InputTensor", kind=INPUT,
             description="the values to quantize", shapes=()),
        Slot(name="output", source_name="OutputTensor", kind=OUTPUT,
             description="the quantized values, shaped as the input", shapes=()),
        Slot(name="output_scale", source_name="OutputScaleTensor", kind=OUTPUT,
             description="the scale used (one element)", shapes=()),
        Slot(name="output_zero_point", source_name="OutputZeroPointTensor", kind=OUTPUT,
             description="the zero point used (one element)", shapes=()),
    ),
    attributes=(
        # The types it may take are the output row's below, checked with it.
        Attribute(name="output_dtype", source_name="OutputTensor.DataType", kind="dtype",
                  default="UINT8",
                  description="the output's type (ONNX's DynamicQuantizeLinear: uint8)"),
    ),
    constraints=(
        Constraint(kind=ConstraintKind.SAME_DIMENSION_COUNT,
                   slots=("input", "output_scale", "output", "output_zero_point")),
        Constraint(kind=ConstraintKind.SAME_DTYPE, slots=("output", "output_zero_point")),
    ),
    versions=(
        VersionSupport(
            version=FeatureLevel.FL_4_0,
            tensors=_rows((
                ("input", 1, 8, ("FLOAT32", "FLOAT16")),
                ("output", 1, 8, QUANTIZED),
                ("output_scale", 1, 8, SCALE),
                ("output_zero_point", 1, 8, QUANTIZED),
            )),
            attributes=("output_dtype",),
        ),
    ),
)

# One element at any rank up to 8 (the page: "the expected number of
# elements ... is 1"), right-aligned at lower ranks as every pattern is.
ONE_ELEMENT = _pattern("per-tensor", *(1,) * 8)


def _one_element(name, source_name, kind, description):
    return Slot(name=name, source_name=source_name, kind=kind, description=description,
                shapes=(ONE_ELEMENT,))


_ADD_SLOTS = ("a", "a_scale", "a_zero_point", "b", "b_scale", "b_zero_point", "output_scale",
              "output_zero_point", "output")

ELEMENT_WISE_QUANTIZED_LINEAR_ADD = Operator(
    name="ELEMENT_WISE_QUANTIZED_LINEAR_ADD",
    function="element_wise_quantized_linear_add",
    source="DirectML",
    reference="DML_ELEMENT_WISE_QUANTIZED_LINEAR_ADD_OPERATOR_DESC",
    summary=(
        "Element-wise sum of two quantized tensors: dequantize A and B, add, quantize the "
        "result (onnxruntime's QLinearAdd).  Dimensions of size 1 broadcast."
    ),
    slots=(
        Slot(name="a", source_name="ATensor", kind=INPUT,
             description="the left-hand-side inputs"),
        _one_element("a_scale", "AScaleTensor", INPUT, "scale for dequantizing A"),
        _one_element("a_zero_point", "AZeroPointTensor", OPTIONAL,
                     "zero point for dequantizing A (default 0)"),
        Slot(name="b", source_name="BTensor", kind=INPUT,
             description="the right-hand-side inputs"),
        _one_element("b_scale", "BScaleTensor", INPUT, "scale for dequantizing B"),
        _one_element("b_zero_point", "BZeroPointTensor", OPTIONAL,
                     "zero point for dequantizing B (default 0)"),
        _one_element("output_scale", "OutputScaleTensor", INPUT,
                     "scale for quantizing the output"),
        _one_element("output_zero_point", "OutputZeroPointTensor", OPTIONAL,
                     "zero point for quantizing the output (default 0)"),
        Slot(name="output", source_name="OutputTensor", kind=OUTPUT,
             description="the sums, shaped as A and B broadcast together"),
    ),
    attributes=(
        Attribute(name="output_dtype", source_name="OutputTensor.DataType", kind="dtype",
                  description="output type when there is no output zero point"),
    ),
    constraints=(
        Constraint(kind=ConstraintKind.SAME_DIMENSION_COUNT, slots=_ADD_SLOTS),
        Constraint(kind=ConstraintKind.SAME_DTYPE, slots=("b", "b_zero_point")),
        Constraint(kind=ConstraintKind.SAME_DTYPE, slots=("output", "output_zero_point")),
        Constraint(kind=ConstraintKind.SAME_DTYPE, slots=("a", "a_zero_point")),
    ),
    versions=(
        VersionSupport(
            version=FeatureLevel.FL_4_0,
            tensors=_rows((
                ("a", 1, 8, QUANTIZED),
                ("a_scale", 1, 8, SCALE),
                ("a_zero_point", 1, 8, QUANTIZED),
                ("b", 1, 8, QUANTIZED),
                ("b_scale", 1, 8, SCALE),
                ("b_zero_point", 1, 8, QUANTIZED),
                ("output_scale", 1, 8, SCALE),
                ("output_zero_point", 1, 8, QUANTIZED),
                ("output", 1, 8, QUANTIZED),
            )),
            attributes=("output_dtype",),
            granularities=("per-tensor",),
        ),
    ),
)

#: The integer types of MATRIX_MULTIPLY_INTEGER_TO_FLOAT's operands, in the page's order.
WIDE_INTEGERS = ("INT32", "INT16", "INT8", "UINT32", "UINT16", "UINT8")
FLOATS = ("FLOAT32", "FLOAT16")

# The page's Syntax block has no output scale or zero point (its Members
# section documents both, and its table lists neither): the Syntax and the
# table are what is transcribed.
MATRIX_MULTIPLY_INTEGER_TO_FLOAT = Operator(
    name="MATRIX_MULTIPLY_INTEGER_TO_FLOAT",
    function="matrix_multiply_integer_to_float",
    source="DirectML",
    reference="DML_MATRIX_MULTIPLY_INTEGER_TO_FLOAT_OPERATOR_DESC",
    summary=(
        "Batched matrix multiply of integer data to floating point: the exact sums of "
        "(A - a_zero_point) (B - b_zero_point), times a_scale * b_scale, plus the bias "
        "(onnxruntime's MatMulIntegerToFloat)."
    ),
    slots=(
        Slot(name="a", source_name="ATensor", kind=INPUT,
             description="{ [BatchCount], [ChannelCount], M, K }",
             shapes=(_pattern("data", "BatchCount", "ChannelCount", "M", "K"),)),
        Slot(name="a_scale", source_name="AScaleTensor", kind=INPUT,
             description="scale for dequantizing A", shapes=(PER_TENSOR, PER_ROW)),
        Slot(name="a_zero_point", source_name="AZeroPointTensor", kind=OPTIONAL,
             description="zero point for dequantizing A", shapes=(PER_TENSOR, PER_ROW)),
        Slot(name="b", source_name="BTensor", kind=INPUT,
             description="{ [BatchCount], [ChannelCount], K, N }",
             shapes=(_pattern("data", "BatchCount", "ChannelCount", "K", "N"),)),
        Slot(name="b_scale", source_name="BScaleTensor", kind=INPUT,
             description="scale for dequantizing B", shapes=(PER_TENSOR, PER_COLUMN)),
        Slot(name="b_zero_point", source_name="BZeroPointTensor", kind=OPTIONAL,
             description="zero point for dequantizing B", shapes=(PER_TENSOR, PER_COLUMN)),
        Slot(name="bias", source_name="BiasTensor", kind=OPTIONAL,
             description="added to the output; the output's sizes",
             shapes=(_pattern("data", "BatchCount", "ChannelCount", "M", "N"),)),
        Slot(name="output", source_name="OutputTensor", kind=OUTPUT,
             description="{ [BatchCount], [ChannelCount], M, N }",
             shapes=(_pattern("data", "BatchCount", "ChannelCount", "M", "N"),)),
    ),
    attributes=(
        Attribute(name="output_dtype", source_name="OutputTensor.DataType", kind="dtype",
                  choices=FLOATS,
                  description="output type when neither a scale array nor the bias gives it"),
    ),
    constraints=(
        Constraint(kind=ConstraintKind.SAME_DIMENSION_COUNT,
                   slots=("a_scale", "a_zero_point", "b_scale", "b_zero_point")),
        Constraint(kind=ConstraintKind.SAME_DIMENSION_COUNT, slots=("a", "bias", "b", "output")),
        Constraint(kind=ConstraintKind.SAME_SIZES, slots=("bias", "output")),
        Constraint(kind=ConstraintKind.SAME_DTYPE, slots=("a", "a_zero_point", "b", "b_zero_point")),
        Constraint(kind=ConstraintKind.SAME_DTYPE, slots=("a_scale", "bias", "b_scale", "output")),
    ),
    versions=(
        VersionSupport(
            version=FeatureLevel.FL_6_2,
            tensors=_rows((
                ("a", 2, 4, WIDE_INTEGERS),
                ("a_scale", 1, 4, FLOATS),
                ("a_zero_point", 1, 4, WIDE_INTEGERS),
                ("b", 2, 4, WIDE_INTEGERS),
                ("b_scale", 1, 4, FLOATS),
                ("b_zero_point", 1, 4, WIDE_INTEGERS),
                ("bias", 2, 4, FLOATS),
                ("output", 2, 4, FLOATS),
            )),
            attributes=("output_dtype",),
            granularities=("data", "per-tensor", "per-row", "per-column"),
        ),
    ),
)

POOLING_PER_CHANNEL = _pattern("per-channel", 1, "ChannelCount", 1, 1)


def _pooling_parameter(name, source_name, kind, description):
    return Slot(name=name, source_name=source_name, kind=kind, description=description,
                shapes=(PER_TENSOR, POOLING_PER_CHANNEL))


# The page gives the parameters' shapes in their 4-D form; a 5-D input's
# are the same with a depth of 1 ({1, ChannelCount, 1, 1, 1}).
QUANTIZED_LINEAR_AVERAGE_POOLING = Operator(
    name="QUANTIZED_LINEAR_AVERAGE_POOLING",
    function="quantized_linear_average_pooling",
    source="DirectML",
    reference="DML_QUANTIZED_LINEAR_AVERAGE_POOLING_OPERATOR_DESC",
    summary=(
        "Average of quantized values over a sliding 2-D or 3-D window: dequantize, "
        "average, quantize (onnxruntime's QLinearAveragePool and QLinearGlobalAveragePool)."
    ),
    slots=(
        Slot(name="input", source_name="InputTensor", kind=INPUT,
             description="{ BatchCount, ChannelCount, [Depth], Height, Width }",
             shapes=(_pattern("data", "BatchCount", "ChannelCount", "Height", "Width"),)),
        _pooling_parameter("input_scale", "InputScaleTensor", INPUT,
                           "scale for dequantizing the input"),
        _pooling_parameter("input_zero_point", "InputZeroPointTensor", OPTIONAL,
                           "zero point for dequantizing the input"),
        _pooling_parameter("output_scale", "OutputScaleTensor", INPUT,
                           "scale for quantizing the output"),
        _pooling_parameter("output_zero_point", "OutputZeroPointTensor", OPTIONAL,
                           "zero point for quantizing the output"),
        Slot(name="output", source_name="OutputTensor", kind=OUTPUT,
             description="{ BatchCount, ChannelCount, [OutputDepth], OutputHeight, OutputWidth }",
             shapes=(_pattern("data", "BatchCount", "ChannelCount", "OutputHeight",
                              "OutputWidth"),)),
    ),
    attributes=(
        Attribute(name="window_size", source_name="WindowSize", kind="ints", default=(1, 1, 1),
                  minimum=1, maximum=UINT_MAX,
                  description="the window's size along each spatial dimension (required)"),
        Attribute(name="strides", source_name="Strides", kind="ints", default=(1, 1, 1),
                  minimum=1, maximum=UINT_MAX, description="window step along each spatial dimension"),
        Attribute(name="start_padding", source_name="StartPadding", kind="ints", default=(0, 0, 0),
                  minimum=0, maximum=UINT_MAX, description="padding before each spatial dimension"),
        Attribute(name="end_padding", source_name="EndPadding", kind="ints", default=(0, 0, 0),
                  minimum=0, maximum=UINT_MAX, description="padding after each spatial dimension"),
        Attribute(name="dilations", source_name="Dilations", kind="ints", default=(1, 1, 1),
                  minimum=1, maximum=UINT_MAX, description="spacing between window elements"),
        Attribute(name="include_padding", source_name="IncludePadding", kind="bool",
                  default=False,
                  description="count padding elements in each window's divisor"),
        Attribute(name="output_dtype", source_name="OutputTensor.DataType", kind="dtype",
                  description="output type when there is no output zero point"),
    ),
    constraints=(
        Constraint(kind=ConstraintKind.SAME_DIMENSION_COUNT, slots=("input", "output")),
        Constraint(kind=ConstraintKind.SAME_DTYPE, slots=("input", "input_zero_point")),
        Constraint(kind=ConstraintKind.SAME_DTYPE, slots=("output", "output_zero_point")),
    ),
    versions=(
        VersionSupport(
            version=FeatureLevel.FL_6_2,
            tensors=_rows((
                ("input", 4, 5, QUANTIZED),
                ("input_scale", 1, 5, SCALE),
                ("input_zero_point", 1, 5, QUANTIZED),
                ("output_scale", 1, 5, SCALE),
                ("output_zero_point", 1, 5, QUANTIZED),
                ("output", 4, 5, QUANTIZED),
            )),
            attributes=("window_size", "strides", "start_padding", "end_padding", "dilations",
                        "include_padding", "output_dtype"),
            granularities=("data", "per-tensor", "per-channel"),
        ),
    ),
)

# ELEMENT_WISE_QUANTIZE_LINEAR and ELEMENT_WISE_DEQUANTIZE_LINEAR: every
# tensor has the input's sizes (DirectML broadcasts a scale or zero point by
# strides of 0, which qops takes as NumPy's broadcasting at one dimension
# count).  Their zero point is an input until 6_2, optional from it.
_ELEMENT_WISE = ("input", "output", "scale", "zero_point")
_FOUR = ("4", 4, 4)
_ANY = ("1 to 8", 1, 8)
_WIDE_INTEGERS_QDQ = ("INT32", "INT16", "INT8", "UINT32", "UINT16", "UINT8")


def _element_wise_slots(input_description, output_description):
    return (
        Slot(name="input", source_name="InputTensor", kind=INPUT, description=input_description),
        Slot(name="scale", source_name="ScaleTensor", kind=INPUT,
             description="the scales, the input's sizes (broadcast)"),
        Slot(name="zero_point", source_name="ZeroPointTensor", kind=OPTIONAL,
             description="the zero points, the input's sizes (broadcast); 0 when absent"),
        Slot(name="output", source_name="OutputTensor", kind=OUTPUT,
             description=output_description),
    )


def _element_wise_rows(levels):
    """One version per ``(level, dims, input, scale, zero point, output)``."""
    rows = []
    for level, dims, input_types, scale_types, zero_types, output_types in levels:
        low, high = dims[1], dims[2]
        required = () if level >= FeatureLevel.FL_6_2 else ("required",)
        rows.append(VersionSupport(
            version=level,
            tensors=_rows((("input", low, high, input_types), ("scale", low, high, scale_types),
                           ("zero_point", low, high, zero_types) + required,
                           ("output", low, high, output_types)))))
    return tuple(rows)


ELEMENT_WISE_QUANTIZE_LINEAR = Operator(
    name="ELEMENT_WISE_QUANTIZE_LINEAR",
    function="element_wise_quantize_linear",
    source="DirectML",
    reference="DML_ELEMENT_WISE_QUANTIZE_LINEAR_OPERATOR_DESC",
    summary=("Quantize every element: clamp(round(input / scale) + zero_point), the scale "
             "and zero point broadcast to the input's sizes."),
    slots=_element_wise_slots("the values to quantize", "the quantized values"),
    constraints=(
        Constraint(kind=ConstraintKind.SAME_DIMENSION_COUNT, slots=_ELEMENT_WISE),
        Constraint(kind=ConstraintKind.SAME_SIZES, slots=_ELEMENT_WISE),
        Constraint(kind=ConstraintKind.SAME_DTYPE, slots=("output", "zero_point")),
    ),
    attributes=(
        Attribute(name="output_dtype", source_name="OutputTensor.DataType", kind="dtype",
                  description="output type when there is no zero point"),
    ),
    versions=tuple(replace(row, attributes=("output_dtype",)) for row in _element_wise_rows((
        (FeatureLevel.FL_1_0, _FOUR, ("FLOAT32",), ("FLOAT32",), ("UINT8",), ("UINT8",)),
        (FeatureLevel.FL_2_1, _FOUR, ("FLOAT32", "INT32"), ("FLOAT32",), QUANTIZED, QUANTIZED),
        (FeatureLevel.FL_3_0, _ANY, ("FLOAT32", "INT32"), ("FLOAT32",), QUANTIZED, QUANTIZED),
        (FeatureLevel.FL_6_0, _ANY, ("FLOAT32", "FLOAT16", "INT32"), ("FLOAT32", "FLOAT16"),
         QUANTIZED, QUANTIZED),
        (FeatureLevel.FL_6_2, _ANY, ("FLOAT32", "FLOAT16", "INT32"), ("FLOAT32", "FLOAT16"),
         QUANTIZED, QUANTIZED),
    ))),
)

ELEMENT_WISE_DEQUANTIZE_LINEAR = Operator(
    name="ELEMENT_WISE_DEQUANTIZE_LINEAR",
    function="element_wise_dequantize_linear",
    source="DirectML",
    reference="DML_ELEMENT_WISE_DEQUANTIZE_LINEAR_OPERATOR_DESC",
    summary=("Dequantize every element: (input - zero_point) * scale, the scale and zero "
             "point broadcast to the input's sizes."),
    slots=_element_wise_slots("the quantized values", "the dequantized values"),
    constraints=(
        Constraint(kind=ConstraintKind.SAME_DIMENSION_COUNT, slots=_ELEMENT_WISE),
        Constraint(kind=ConstraintKind.SAME_SIZES, slots=_ELEMENT_WISE),
        Constraint(kind=ConstraintKind.SAME_DTYPE, slots=("input", "zero_point")),
        Constraint(kind=ConstraintKind.SAME_DTYPE, slots=("output", "scale")),
    ),
    attributes=(),
    versions=_element_wise_rows((
        (FeatureLevel.FL_1_0, _FOUR, ("UINT8",), ("FLOAT32",), ("UINT8",), ("FLOAT32",)),
        (FeatureLevel.FL_2_1, _FOUR, _WIDE_INTEGERS_QDQ, ("FLOAT32",), _WIDE_INTEGERS_QDQ,
         ("FLOAT32",)),
        (FeatureLevel.FL_3_0, _ANY, _WIDE_INTEGERS_QDQ, ("FLOAT32",), _WIDE_INTEGERS_QDQ,
         ("FLOAT32",)),
        (FeatureLevel.FL_6_0, _ANY, _WIDE_INTEGERS_QDQ, ("FLOAT32", "FLOAT16"),
         _WIDE_INTEGERS_QDQ, ("FLOAT32", "FLOAT16")),
        (FeatureLevel.FL_6_2, _ANY, _WIDE_INTEGERS_QDQ, ("FLOAT32", "FLOAT16"),
         _WIDE_INTEGERS_QDQ, ("FLOAT32", "FLOAT16")),
    )),
)

# QUANTIZE and DEQUANTIZE pass their scale and zero point as one array,
# QuantizationTensors, whose page row lists every type either may have:
# qops gives each element its own slot (the scale first; the zero point,
# present for DML_QUANTIZATION_TYPE_SCALE_ZERO_POINT, second) and splits the
# types by role.  The page's one constraint is the shared dimension count;
# the others are qops' rules where the page is silent (docs/operators/quantize.rst).
_QUANTIZE_SLOTS = ("input", "scale", "zero_point", "output")
_BLOCK_INTEGERS = ("INT8", "INT4", "UINT8", "UINT4")
_BLOCK_FLOATS = ("FLOAT32", "FLOAT16")


def _quantization_slots(input_description, output_description):
    return (
        Slot(name="input", source_name="InputTensor", kind=INPUT, description=input_description),
        Slot(name="scale", source_name="QuantizationTensors[0]", kind=INPUT,
             array="QuantizationTensors",
             description="the scales: along each dimension a size that divides the input's, "
                         "one scale per block of input size / scale size elements"),
        Slot(name="zero_point", source_name="QuantizationTensors[1]", kind=OPTIONAL,
             array="QuantizationTensors",
             description="the zero points, the scale's sizes (SCALE_ZERO_POINT); "
                         "0 when absent (SCALE)"),
        Slot(name="output", source_name="OutputTensor", kind=OUTPUT,
             description=output_description),
    )


def _quantization_version(input_types, output_types):
    return (VersionSupport(
        version=FeatureLevel.FL_6_3,
        tensors=_rows((("input", 1, 8, input_types), ("scale", 1, 8, _BLOCK_FLOATS),
                       ("zero_point", 1, 8, _BLOCK_INTEGERS), ("output", 1, 8, output_types))),
        attributes=("output_dtype",)),)


QUANTIZE = Operator(
    name="QUANTIZE",
    function="quantize",
    source="DirectML",
    reference="DML_QUANTIZE_OPERATOR_DESC",
    summary=("Quantize to 8 or 4 bits: saturate(round(input / scale) + zero_point), each "
             "scale and zero point applying to a block of the input."),
    slots=_quantization_slots("the values to quantize", "the quantized values, the input's sizes"),
    constraints=(
        Constraint(kind=ConstraintKind.SAME_DIMENSION_COUNT, slots=_QUANTIZE_SLOTS),
        Constraint(kind=ConstraintKind.SAME_SIZES, slots=("scale", "zero_point")),
        Constraint(kind=ConstraintKind.SAME_DTYPE, slots=("output", "zero_point")),
    ),
    attributes=(
        Attribute(name="output_dtype", source_name="OutputTensor.DataType", kind="dtype",
                  description="the output type (required); a zero point has it"),
    ),
    versions=_quantization_version(_BLOCK_FLOATS, _BLOCK_INTEGERS),
)

DEQUANTIZE = Operator(
    name="DEQUANTIZE",
    function="dequantize",
    source="DirectML",
    reference="DML_DEQUANTIZE_OPERATOR_DESC",
    summary=("Dequantize 8- or 4-bit values: (input - zero_point) * scale, each scale and "
             "zero point applying to a block of the input."),
    slots=_quantization_slots("the quantized values",
                              "the dequantized values, the input's sizes and the scale's type"),
    constraints=(
        Constraint(kind=ConstraintKind.SAME_DIMENSION_COUNT, slots=_QUANTIZE_SLOTS),
        Constraint(kind=ConstraintKind.SAME_SIZES, slots=("scale", "zero_point")),
        Constraint(kind=ConstraintKind.SAME_DTYPE, slots=("input", "zero_point")),
        Constraint(kind=ConstraintKind.SAME_DTYPE, slots=("output", "scale")),
    ),
    attributes=(
        Attribute(name="output_dtype", source_name="OutputTensor.DataType", kind="dtype",
                  description="the output type: the scale's (its default)"),
    ),
    versions=_quantization_version(_BLOCK_INTEGERS, _BLOCK_FLOATS),
)

OPERATORS = (QUANTIZED_LINEAR_CONVOLUTION, QUANTIZED_LINEAR_MATRIX_MULTIPLY, CONVOLUTION_INTEGER,
             MATRIX_MULTIPLY_INTEGER, DYNAMIC_QUANTIZE_LINEAR, ELEMENT_WISE_QUANTIZED_LINEAR_ADD,
             MATRIX_MULTIPLY_INTEGER_TO_FLOAT, QUANTIZED_LINEAR_AVERAGE_POOLING,
             ELEMENT_WISE_QUANTIZE_LINEAR, ELEMENT_WISE_DEQUANTIZE_LINEAR, QUANTIZE, DEQUANTIZE)
