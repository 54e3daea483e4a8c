"""onnxruntime's contrib operator tables (domain ``com.microsoft``): ``MatMulNBits``.

As onnxruntime's own schema states it (``com.microsoft`` MatMulNBits,
version 1, from ``onnxruntime.capi.onnxruntime_pybind11_state.
get_all_operator_schema()``): A is float, float16 or bfloat16 and so are
the scales, the bias and Y (T1); B is uint8 (T2), packed along K in one blob
of ``block_size * bits / 8`` bytes per block, low bits first; the zero
points are packed uint8 or of A's type (T3); ``g_idx`` is int32 (T4, and
deprecated).  ``bits`` is 2, 4 or 8 (the attribute's text; the operator's
text says 2 to 8), ``block_size`` a power of two of at least 16.
"""

from __future__ import annotations

from qops.registry.schema import (
    SOURCES,
    Attribute,
    Constraint,
    ConstraintKind,
    Operator,
    Opset,
    Slot,
    SlotKind,
    TensorSupport,
    VersionSupport,
)

DOMAIN = SOURCES["onnxruntime"]

#: T1: A, the scales, the bias and Y.
FLOAT_TYPES = ("FLOAT32", "FLOAT16", "BFLOAT16")
#: T3: the zero points, packed or of A's type.
ZERO_POINT_TYPES = ("UINT8", "FLOAT16", "FLOAT32", "BFLOAT16")

#: The widths of a quantized weight, in bits.
BITS = (2, 4, 8)
#: The smallest block.
MIN_BLOCK_SIZE = 16

MATMUL_N_BITS = Operator(
    name="MatMulNBits",
    function="matmul_n_bits",
    source="onnxruntime",
    reference="MatMulNBits",
    summary=("Y = A @ dequantized(B) + bias, B's weights of 2, 4 or 8 bits in blocks along K, "
             "each block with its own scale and zero point."),
    slots=(
        Slot(name="a", source_name="A", kind=SlotKind.INPUT,
             description="the input, (..., K), not quantized"),
        Slot(name="b", source_name="B", kind=SlotKind.INPUT,
             description=("the packed weights, (N, k_blocks, blob_size): blob_size = "
                          "block_size * bits / 8 bytes per block, low bits first")),
        Slot(name="scales", source_name="scales", kind=SlotKind.INPUT,
             description="one scale per block, (N, k_blocks), of A's type"),
        Slot(name="zero_points", source_name="zero_points", kind=SlotKind.OPTIONAL_INPUT,
             description=("one zero point per block: packed uint8, (N, ceil(k_blocks * bits "
                          "/ 8)), or of A's type, (N, k_blocks); 2**(bits - 1) when absent")),
        Slot(name="g_idx", source_name="g_idx", kind=SlotKind.OPTIONAL_INPUT,
             description="each k's block (deprecated): only the trivial k // block_size"),
        Slot(name="bias", source_name="bias", kind=SlotKind.OPTIONAL_INPUT,
             description="added to each row of the product, (N,)"),
        Slot(name="y", source_name="Y", kind=SlotKind.OUTPUT,
             description="the product, (..., N), of A's type"),
    ),
    attributes=(
        Attribute(name="k", source_name="K", kind="int", minimum=1,
                  description="the input feature count (rows of the weight matrix)"),
        Attribute(name="n", source_name="N", kind="int", minimum=1,
                  description="the output feature count (columns of the weight matrix)"),
        Attribute(name="bits", source_name="bits", kind="int", default=4, choices=BITS,
                  description="bits per quantized weight"),
        Attribute(name="block_size", source_name="block_size", kind="int",
                  minimum=MIN_BLOCK_SIZE,
                  description="weights per block along K: a power of two, at least 16"),
        Attribute(name="accuracy_level", source_name="accuracy_level", kind="int", default=0,
                  minimum=0, maximum=4,
                  description=("the least accuracy A may be computed in: 0 (unset), 1 "
                               "(float32), 2 (float16), 3 (bfloat16), 4 (int8)")),
        Attribute(name="weight_prepacked", source_name="weight_prepacked", kind="int",
                  default=0, choices=(0,),
                  description="0: B as the schema lays it out (prepacked layouts are CUDA's)"),
    ),
    versions=(
        VersionSupport(
            version=Opset(1, DOMAIN),
            tensors=(
                TensorSupport(slot="a", min_dims=1, max_dims=None, dtypes=FLOAT_TYPES),
                TensorSupport(slot="b", min_dims=3, max_dims=3, dtypes=("UINT8",)),
                TensorSupport(slot="scales", min_dims=1, max_dims=2, dtypes=FLOAT_TYPES),
                TensorSupport(slot="zero_points", min_dims=1, max_dims=2,
                              dtypes=ZERO_POINT_TYPES),
                TensorSupport(slot="g_idx", min_dims=1, max_dims=1, dtypes=("INT32",)),
                TensorSupport(slot="bias", min_dims=1, max_dims=1, dtypes=FLOAT_TYPES),
                TensorSupport(slot="y", min_dims=1, max_dims=None, dtypes=FLOAT_TYPES),
            ),
            constraints=(
                Constraint(kind=ConstraintKind.SAME_DTYPE, slots=("a", "scales", "bias", "y")),
                Constraint(kind=ConstraintKind.SAME_DIMENSION_COUNT, slots=("a", "y")),
            ),
            attributes=("k", "n", "bits", "block_size", "accuracy_level", "weight_prepacked"),
        ),
    ),
)

OPERATORS = (MATMUL_N_BITS,)
