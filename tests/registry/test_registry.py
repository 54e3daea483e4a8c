"""The registry tables against the seed documents, row by row.

Every expected value below is transcribed by hand from the seed pages
(``../shared/seeds`` beside the project): 000 (DML_QUANTIZED_LINEAR_CONVOLUTION_OPERATOR_DESC),
002 (DML_QUANTIZED_LINEAR_MATRIX_MULTIPLY_OPERATOR_DESC, feature levels 2_1 and
4_0) and 004 (ONNX DequantizeLinear, opsets 10..23), or read from
``onnx.defs`` (QuantizeLinear, which has no seed page).  Where the seed files
are present, the transcription itself is checked against them too.
"""

from __future__ import annotations

import dataclasses
import glob
import os
import re
import subprocess
import sys
import textwrap

import pytest
from conftest import PROJECT_ROOT

import qops
from qops import FeatureLevel, registry
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

CONV = "QUANTIZED_LINEAR_CONVOLUTION"
MATMUL = "QUANTIZED_LINEAR_MATRIX_MULTIPLY"
#: The seed pages, beside the project's folder (``../shared/seeds`` from its root).
SEEDS = os.path.normpath(os.path.join(PROJECT_ROOT, os.pardir, "shared", "seeds"))

# ---------------------------------------------------------------------------
# Seed 000: DML_QUANTIZED_LINEAR_CONVOLUTION_OPERATOR_DESC, "Tensor support"
# (Tensor, Kind, Supported dimension counts, Supported data types)
# ---------------------------------------------------------------------------
CONV_2_1_TABLE = [
    ("InputTensor", "Input", "4", "INT8, UINT8"),
    ("InputScaleTensor", "Input", "4", "FLOAT32"),
    ("InputZeroPointTensor", "Optional input", "4", "INT8, UINT8"),
    ("FilterTensor", "Input", "4", "INT8, UINT8"),
    ("FilterScaleTensor", "Input", "4", "FLOAT32"),
    ("FilterZeroPointTensor", "Optional input", "4", "INT8, UINT8"),
    ("BiasTensor", "Optional input", "4", "INT32"),
    ("OutputScaleTensor", "Input", "4", "FLOAT32"),
    ("OutputZeroPointTensor", "Optional input", "4", "INT8, UINT8"),
    ("OutputTensor", "Output", "4", "INT8, UINT8"),
]

# The current page (seeds/later/directml_quantized_linear_convolution.md):
# 1-D convolutions from 4_0, a filter scale of 1 to 4 dimensions from 5_2.
CONV_4_0_TABLE = [
    ("InputTensor", "Input", "3 to 4", "INT8, UINT8"),
    ("InputScaleTensor", "Input", "1 to 4", "FLOAT32"),
    ("InputZeroPointTensor", "Optional input", "1 to 4", "INT8, UINT8"),
    ("FilterTensor", "Input", "3 to 4", "INT8, UINT8"),
    ("FilterScaleTensor", "Input", "3 to 4", "FLOAT32"),
    ("FilterZeroPointTensor", "Optional input", "1 to 4", "INT8, UINT8"),
    ("BiasTensor", "Optional input", "3 to 4", "INT32"),
    ("OutputScaleTensor", "Input", "1 to 4", "FLOAT32"),
    ("OutputZeroPointTensor", "Optional input", "1 to 4", "INT8, UINT8"),
    ("OutputTensor", "Output", "3 to 4", "INT8, UINT8"),
]
CONV_5_2_TABLE = [row if row[0] != "FilterScaleTensor" else (row[0], row[1], "1 to 4", row[3])
                  for row in CONV_4_0_TABLE]

# Seed 002: DML_QUANTIZED_LINEAR_MATRIX_MULTIPLY_OPERATOR_DESC, "Tensor support"
MATMUL_4_0_TABLE = [
    ("ATensor", "Input", "2 to 4", "INT8, UINT8"),
    ("AScaleTensor", "Input", "1 to 4", "FLOAT32"),
    ("AZeroPointTensor", "Optional input", "1 to 4", "INT8, UINT8"),
    ("BTensor", "Input", "2 to 4", "INT8, UINT8"),
    ("BScaleTensor", "Input", "1 to 4", "FLOAT32"),
    ("BZeroPointTensor", "Optional input", "1 to 4", "INT8, UINT8"),
    ("OutputScaleTensor", "Input", "1 to 4", "FLOAT32"),
    ("OutputZeroPointTensor", "Optional input", "1 to 4", "INT8, UINT8"),
    ("OutputTensor", "Output", "2 to 4", "INT8, UINT8"),
]
MATMUL_2_1_TABLE = [
    ("ATensor", "Input", "4", "INT8, UINT8"),
    ("AScaleTensor", "Input", "4", "FLOAT32"),
    ("AZeroPointTensor", "Optional input", "4", "INT8, UINT8"),
    ("BTensor", "Input", "4", "INT8, UINT8"),
    ("BScaleTensor", "Input", "4", "FLOAT32"),
    ("BZeroPointTensor", "Optional input", "4", "INT8, UINT8"),
    ("OutputScaleTensor", "Input", "4", "FLOAT32"),
    ("OutputZeroPointTensor", "Optional input", "4", "INT8, UINT8"),
    ("OutputTensor", "Output", "4", "INT8, UINT8"),
]

# The integer operators' tables, from the DirectML pages
# DML_CONVOLUTION_INTEGER_OPERATOR_DESC, DML_MATRIX_MULTIPLY_INTEGER_OPERATOR_DESC
# (feature levels 2_1 and 4_0) and DML_DYNAMIC_QUANTIZE_LINEAR_OPERATOR_DESC (4_0).
CONV_INTEGER = "CONVOLUTION_INTEGER"
MATMUL_INTEGER = "MATRIX_MULTIPLY_INTEGER"
DYNAMIC = "DYNAMIC_QUANTIZE_LINEAR"
CONV_INTEGER_2_1_TABLE = [
    ("InputTensor", "Input", "4", "INT8, UINT8"),
    ("InputZeroPointTensor", "Optional input", "4", "INT8, UINT8"),
    ("FilterTensor", "Input", "4", "INT8, UINT8"),
    ("FilterZeroPointTensor", "Optional input", "4", "INT8, UINT8"),
    ("OutputTensor", "Output", "4", "INT32"),
]
CONV_INTEGER_4_0_TABLE = [
    ("InputTensor", "Input", "3 to 4", "INT8, UINT8"),
    ("InputZeroPointTensor", "Optional input", "1 to 4", "INT8, UINT8"),
    ("FilterTensor", "Input", "3 to 4", "INT8, UINT8"),
    ("FilterZeroPointTensor", "Optional input", "1 to 4", "INT8, UINT8"),
    ("OutputTensor", "Output", "3 to 4", "INT32"),
]
MATMUL_INTEGER_2_1_TABLE = [
    ("ATensor", "Input", "4", "INT8, UINT8"),
    ("AZeroPointTensor", "Optional input", "4", "INT8, UINT8"),
    ("BTensor", "Input", "4", "INT8, UINT8"),
    ("BZeroPointTensor", "Optional input", "4", "INT8, UINT8"),
    ("OutputTensor", "Output", "4", "INT32"),
]
MATMUL_INTEGER_4_0_TABLE = [
    ("ATensor", "Input", "2 to 4", "INT8, UINT8"),
    ("AZeroPointTensor", "Optional input", "1 to 4", "INT8, UINT8"),
    ("BTensor", "Input", "2 to 4", "INT8, UINT8"),
    ("BZeroPointTensor", "Optional input", "2 to 4", "INT8, UINT8"),
    ("OutputTensor", "Output", "2 to 4", "INT32"),
]
# From 5_2 the B zero point may have 1 dimension (seeds/later/directml_matrix_multiply_integer.md).
MATMUL_INTEGER_5_2_TABLE = [row if row[0] != "BZeroPointTensor" else (row[0], row[1], "1 to 4", row[3])
                            for row in MATMUL_INTEGER_4_0_TABLE]
DYNAMIC_4_0_TABLE = [
    ("InputTensor", "Input", "1 to 8", "FLOAT32, FLOAT16"),
    ("OutputTensor", "Output", "1 to 8", "INT8, UINT8"),
    ("OutputScaleTensor", "Output", "1 to 8", "FLOAT32"),
    ("OutputZeroPointTensor", "Output", "1 to 8", "INT8, UINT8"),
]

# seeds/later/directml_matrix_multiply_integer_to_float.md (6_2).
INTEGER_TO_FLOAT_6_2_TABLE = [
    ("ATensor", "Input", "2 to 4", "INT32, INT16, INT8, UINT32, UINT16, UINT8"),
    ("AScaleTensor", "Input", "1 to 4", "FLOAT32, FLOAT16"),
    ("AZeroPointTensor", "Optional input", "1 to 4", "INT32, INT16, INT8, UINT32, UINT16, UINT8"),
    ("BTensor", "Input", "2 to 4", "INT32, INT16, INT8, UINT32, UINT16, UINT8"),
    ("BScaleTensor", "Input", "1 to 4", "FLOAT32, FLOAT16"),
    ("BZeroPointTensor", "Optional input", "1 to 4", "INT32, INT16, INT8, UINT32, UINT16, UINT8"),
    ("BiasTensor", "Optional input", "2 to 4", "FLOAT32, FLOAT16"),
    ("OutputTensor", "Output", "2 to 4", "FLOAT32, FLOAT16"),
]

# seeds/later/directml_quantized_linear_average_pooling.md (6_2).
AVERAGE_POOLING_6_2_TABLE = [
    ("InputTensor", "Input", "4 to 5", "INT8, UINT8"),
    ("InputScaleTensor", "Input", "1 to 5", "FLOAT32"),
    ("InputZeroPointTensor", "Optional input", "1 to 5", "INT8, UINT8"),
    ("OutputScaleTensor", "Input", "1 to 5", "FLOAT32"),
    ("OutputZeroPointTensor", "Optional input", "1 to 5", "INT8, UINT8"),
    ("OutputTensor", "Output", "4 to 5", "INT8, UINT8"),
]

# seeds/later/directml_element_wise_(de)quantize_linear.md: every level's
# table; the zero point is an input until 6_2.
_ZP_INPUT, _ZP_OPTIONAL = "Input", "Optional input"
_Q_INPUTS = {"1_0": "FLOAT32", "2_1": "FLOAT32, INT32", "3_0": "FLOAT32, INT32",
             "6_0": "FLOAT32, FLOAT16, INT32", "6_2": "FLOAT32, FLOAT16, INT32"}
_WIDE = "INT32, INT16, INT8, UINT32, UINT16, UINT8"


def _element_wise_table(level, input_types, scale_types, zero_types, output_types):
    dims = "4" if level in ("1_0", "2_1") else "1 to 8"
    zero_kind = _ZP_OPTIONAL if level == "6_2" else _ZP_INPUT
    return [("InputTensor", "Input", dims, input_types), ("ScaleTensor", "Input", dims, scale_types),
            ("ZeroPointTensor", zero_kind, dims, zero_types),
            ("OutputTensor", "Output", dims, output_types)]


QUANTIZE_TABLES = {
    level: _element_wise_table(level, _Q_INPUTS[level],
                               "FLOAT32, FLOAT16" if level >= "6_0" else "FLOAT32",
                               "UINT8" if level == "1_0" else "INT8, UINT8",
                               "UINT8" if level == "1_0" else "INT8, UINT8")
    for level in _Q_INPUTS}
DEQUANTIZE_TABLES = {
    level: _element_wise_table(level, "UINT8" if level == "1_0" else _WIDE,
                               "FLOAT32, FLOAT16" if level >= "6_0" else "FLOAT32",
                               "UINT8" if level == "1_0" else _WIDE,
                               "FLOAT32, FLOAT16" if level >= "6_0" else "FLOAT32")
    for level in _Q_INPUTS}

TABLES = [
    (CONV, FeatureLevel.FL_2_1, CONV_2_1_TABLE),
    (CONV, FeatureLevel.FL_4_0, CONV_4_0_TABLE),
    (CONV, FeatureLevel.FL_5_2, CONV_5_2_TABLE),
    (MATMUL, FeatureLevel.FL_2_1, MATMUL_2_1_TABLE),
    (MATMUL, FeatureLevel.FL_4_0, MATMUL_4_0_TABLE),
    (CONV_INTEGER, FeatureLevel.FL_2_1, CONV_INTEGER_2_1_TABLE),
    (CONV_INTEGER, FeatureLevel.FL_4_0, CONV_INTEGER_4_0_TABLE),
    (MATMUL_INTEGER, FeatureLevel.FL_2_1, MATMUL_INTEGER_2_1_TABLE),
    (MATMUL_INTEGER, FeatureLevel.FL_4_0, MATMUL_INTEGER_4_0_TABLE),
    (MATMUL_INTEGER, FeatureLevel.FL_5_2, MATMUL_INTEGER_5_2_TABLE),
    (DYNAMIC, FeatureLevel.FL_4_0, DYNAMIC_4_0_TABLE),
    ("MATRIX_MULTIPLY_INTEGER_TO_FLOAT", FeatureLevel.FL_6_2, INTEGER_TO_FLOAT_6_2_TABLE),
    ("QUANTIZED_LINEAR_AVERAGE_POOLING", FeatureLevel.FL_6_2, AVERAGE_POOLING_6_2_TABLE),
] + [("ELEMENT_WISE_QUANTIZE_LINEAR", FeatureLevel.parse(level), table)
     for level, table in QUANTIZE_TABLES.items()] + [
    ("ELEMENT_WISE_DEQUANTIZE_LINEAR", FeatureLevel.parse(level), table)
    for level, table in DEQUANTIZE_TABLES.items()]

# The structure fields in order (seed "Syntax" / struct-fields) and the
# contract's snake_case slot names ("Tensor" dropped).
CONV_FIELDS = ["InputTensor", "InputScaleTensor", "InputZeroPointTensor", "FilterTensor",
               "FilterScaleTensor", "FilterZeroPointTensor", "BiasTensor", "OutputScaleTensor",
               "OutputZeroPointTensor", "OutputTensor"]
CONV_SLOTS = ["input", "input_scale", "input_zero_point", "filter", "filter_scale",
              "filter_zero_point", "bias", "output_scale", "output_zero_point", "output"]
MATMUL_FIELDS = ["ATensor", "AScaleTensor", "AZeroPointTensor", "BTensor", "BScaleTensor",
                 "BZeroPointTensor", "OutputScaleTensor", "OutputZeroPointTensor", "OutputTensor"]
MATMUL_SLOTS = ["a", "a_scale", "a_zero_point", "b", "b_scale", "b_zero_point", "output_scale",
                "output_zero_point", "output"]

# Seed "Tensor constraints", in the seed's names.
SAME_TYPE = "same data type"
SAME_DIMS = "same dimension count"
CONV_CONSTRAINTS = {
    (SAME_DIMS, frozenset({"BiasTensor", "FilterTensor", "InputTensor", "OutputTensor"})),
    (SAME_TYPE, frozenset({"FilterTensor", "FilterZeroPointTensor"})),
    (SAME_TYPE, frozenset({"InputTensor", "InputZeroPointTensor"})),
    (SAME_TYPE, frozenset({"OutputTensor", "OutputZeroPointTensor"})),
}
MATMUL_CONSTRAINTS = {
    (SAME_DIMS, frozenset({"AScaleTensor", "AZeroPointTensor", "BScaleTensor",
                           "BZeroPointTensor", "OutputScaleTensor", "OutputZeroPointTensor"})),
    (SAME_DIMS, frozenset({"ATensor", "BTensor", "OutputTensor"})),
    (SAME_TYPE, frozenset({"BTensor", "BZeroPointTensor"})),
    (SAME_TYPE, frozenset({"OutputTensor", "OutputZeroPointTensor"})),
    (SAME_TYPE, frozenset({"ATensor", "AZeroPointTensor"})),
}

# Seed expected dimensions of the scale / zero point / bias tensors.
PER_TENSOR = ("per-tensor", "{1,1,1,1}")
PER_CHANNEL = ("per-channel", "{1,OutputChannelCount,1,1}")
PER_ROW = ("per-row", "{1,1,M,1}")
PER_COLUMN = ("per-column", "{1,1,1,N}")
CONV_SHAPES = {
    "InputScaleTensor": [PER_TENSOR],
    "InputZeroPointTensor": [PER_TENSOR],
    "FilterScaleTensor": [PER_TENSOR, PER_CHANNEL],
    "FilterZeroPointTensor": [PER_TENSOR, PER_CHANNEL],
    "BiasTensor": [PER_CHANNEL],
    "OutputScaleTensor": [PER_TENSOR],
    "OutputZeroPointTensor": [PER_TENSOR],
}
MATMUL_SHAPES = {
    "AScaleTensor": [PER_TENSOR, PER_ROW],
    "AZeroPointTensor": [PER_TENSOR, PER_ROW],
    "BScaleTensor": [PER_TENSOR, PER_COLUMN],
    "BZeroPointTensor": [PER_TENSOR, PER_COLUMN],
    "OutputScaleTensor": [PER_TENSOR, PER_ROW],
    "OutputZeroPointTensor": [PER_TENSOR, PER_ROW],
}
# Seed descriptions of the main tensors' dimensions.
MAIN_DIMENSIONS = {
    CONV: {
        "InputTensor": "{ InputBatchCount, InputChannelCount, InputHeight, InputWidth }",
        "FilterTensor": "{ FilterBatchCount, FilterChannelCount, FilterHeight, FilterWidth }",
        "OutputTensor": "{ OutputBatchCount, OutputChannelCount, OutputHeight, OutputWidth }",
    },
    MATMUL: {
        "ATensor": "{ BatchCount, ChannelCount, M, K }",
        "BTensor": "{ BatchCount, ChannelCount, K, N }",
        "OutputTensor": "{ BatchCount, ChannelCount, M, N }",
    },
}

# ---------------------------------------------------------------------------
# Seed 004: ONNX DequantizeLinear type constraints per opset, as the page spells them.
# ---------------------------------------------------------------------------
_DEQUANTIZE_T1_23 = {"tensor(float4e2m1)", "tensor(float8e4m3fn)", "tensor(float8e4m3fnuz)",
                     "tensor(float8e5m2)", "tensor(float8e5m2fnuz)", "tensor(int16)",
                     "tensor(int32)", "tensor(int4)", "tensor(int8)", "tensor(uint16)",
                     "tensor(uint4)", "tensor(uint8)"}
DEQUANTIZE_T1 = {
    # 28: from onnx.defs (no seed page), as 25 with the 6-bit floats.
    28: _DEQUANTIZE_T1_23 | {"tensor(int2)", "tensor(uint2)", "tensor(float6e2m3)",
                             "tensor(float6e3m2)"},
    25: _DEQUANTIZE_T1_23 | {"tensor(int2)", "tensor(uint2)"},
    24: _DEQUANTIZE_T1_23,
    23: {"tensor(float4e2m1)", "tensor(float8e4m3fn)", "tensor(float8e4m3fnuz)",
         "tensor(float8e5m2)", "tensor(float8e5m2fnuz)", "tensor(int16)", "tensor(int32)",
         "tensor(int4)", "tensor(int8)", "tensor(uint16)", "tensor(uint4)", "tensor(uint8)"},
    21: {"tensor(float8e4m3fn)", "tensor(float8e4m3fnuz)", "tensor(float8e5m2)",
         "tensor(float8e5m2fnuz)", "tensor(int16)", "tensor(int32)", "tensor(int4)",
         "tensor(int8)", "tensor(uint16)", "tensor(uint4)", "tensor(uint8)"},
    19: {"tensor(float8e4m3fn)", "tensor(float8e4m3fnuz)", "tensor(float8e5m2)",
         "tensor(float8e5m2fnuz)", "tensor(int32)", "tensor(int8)", "tensor(uint8)"},
    13: {"tensor(int32)", "tensor(int8)", "tensor(uint8)"},
    10: {"tensor(int32)", "tensor(int8)", "tensor(uint8)"},
}
#: x_scale's types (and the output's until opset 23, when output types became T3).
DEQUANTIZE_T2 = {
    28: {"tensor(bfloat16)", "tensor(float)", "tensor(float16)", "tensor(float8e8m0)"},
    25: {"tensor(bfloat16)", "tensor(float)", "tensor(float16)", "tensor(float8e8m0)"},
    24: {"tensor(bfloat16)", "tensor(float)", "tensor(float16)", "tensor(float8e8m0)"},
    23: {"tensor(bfloat16)", "tensor(float)", "tensor(float16)"},
    21: {"tensor(bfloat16)", "tensor(float)", "tensor(float16)"},
    19: {"tensor(bfloat16)", "tensor(float)", "tensor(float16)"},
    13: {"tensor(float)"},  # x_scale / y are tensor(float)
    10: {"tensor(float)"},
}
DEQUANTIZE_T3 = {"tensor(bfloat16)", "tensor(float)", "tensor(float16)"}
DEQUANTIZE_ATTRIBUTES = {10: set(), 13: {"axis"}, 19: {"axis"}, 21: {"axis", "block_size"},
                         23: {"axis", "block_size", "output_dtype"},
                         24: {"axis", "block_size", "output_dtype"},
                         25: {"axis", "block_size", "output_dtype"},
                         28: {"axis", "block_size", "output_dtype"}}
QUANTIZE_ATTRIBUTES = {10: set(), 13: {"axis"}, 19: {"axis", "saturate"},
                       21: {"axis", "saturate", "block_size", "output_dtype"},
                       23: {"axis", "saturate", "block_size", "output_dtype", "precision"},
                       24: {"axis", "saturate", "block_size", "output_dtype", "precision"},
                       25: {"axis", "saturate", "block_size", "output_dtype", "precision"},
                       28: {"axis", "saturate", "block_size", "output_dtype", "precision"}}
OPSETS = [10, 13, 19, 21, 23, 24, 25, 28]


def registry_type(onnx_type: str) -> str:
    """``tensor(float)`` -> ``FLOAT32``, ``tensor(int4)`` -> ``INT4``."""
    inner = re.fullmatch(r"tensor\((\w+)\)", onnx_type).group(1)
    return "FLOAT32" if inner == "float" else inner.upper()


def registry_types(onnx_types) -> set:
    return {registry_type(t) for t in onnx_types}


def dtypes_text(row: TensorSupport) -> str:
    return ", ".join(row.dtypes)


def _slot_by_source(op, source_name):
    matches = [s for s in op.slots if s.source_name == source_name]
    assert len(matches) == 1, f"{op.name}: {len(matches)} slots named {source_name}"
    return matches[0]


# ---------------------------------------------------------------------------
# The transcription above against the seed files themselves
# ---------------------------------------------------------------------------

def _seed(prefix):
    if not os.path.isdir(SEEDS):
        pytest.skip(f"the seed pages are not beside this checkout ({SEEDS} is absent)")
    paths = glob.glob(os.path.join(SEEDS, f"{prefix}_*.txt"))
    if not paths:
        pytest.skip(f"seed {prefix} is not among the pages in {SEEDS}")
    with open(paths[0], encoding="utf-8") as handle:
        return handle.read()


def _table_after(text, heading):
    start = text.index(heading)
    rows = []
    for line in text[start:].splitlines()[1:]:
        if line.startswith("#") and rows:
            break
        if line.startswith("| ") and not line.startswith("| Tensor") and not line.startswith("| ---"):
            rows.append(tuple(cell.strip() for cell in line.strip().strip("|").split("|")))
        elif rows and not line.strip():
            break
    return rows


@pytest.mark.parametrize("prefix, heading, table", [
    ("000", "## Tensor support", CONV_2_1_TABLE),
    ("002", "### DML_FEATURE_LEVEL_4_0 and above", MATMUL_4_0_TABLE),
    ("002", "### DML_FEATURE_LEVEL_2_1 and above", MATMUL_2_1_TABLE),
])
def test_transcribed_tables_match_seed_files(prefix, heading, table):
    assert _table_after(_seed(prefix), heading) == table


def _later_seed(name):
    path = os.path.join(SEEDS, "later", name)
    if not os.path.exists(path):
        pytest.skip(f"the later seed page {name} is not beside this checkout")
    with open(path, encoding="utf-8") as handle:
        return handle.read()


@pytest.mark.parametrize("page, heading, table", [
    ("directml_quantized_linear_convolution.md", "### DML_FEATURE_LEVEL_5_2 and above",
     CONV_5_2_TABLE),
    ("directml_quantized_linear_convolution.md", "### DML_FEATURE_LEVEL_4_0 and above",
     CONV_4_0_TABLE),
    ("directml_quantized_linear_convolution.md", "### DML_FEATURE_LEVEL_2_1 and above",
     CONV_2_1_TABLE),
    ("directml_matrix_multiply_integer.md", "### DML_FEATURE_LEVEL_5_2 and above",
     MATMUL_INTEGER_5_2_TABLE),
    ("directml_matrix_multiply_integer.md", "### DML_FEATURE_LEVEL_4_0 and above",
     MATMUL_INTEGER_4_0_TABLE),
    ("directml_convolution_integer.md", "### DML_FEATURE_LEVEL_4_0 and above",
     CONV_INTEGER_4_0_TABLE),
    ("directml_matrix_multiply_integer_to_float.md", "## Tensor support",
     INTEGER_TO_FLOAT_6_2_TABLE),
    ("directml_quantized_linear_average_pooling.md", "## Tensor support",
     AVERAGE_POOLING_6_2_TABLE),
] + [("directml_element_wise_quantize_linear.md", f"### DML_FEATURE_LEVEL_{level} and above",
      table) for level, table in QUANTIZE_TABLES.items()] + [
    ("directml_element_wise_dequantize_linear.md", f"### DML_FEATURE_LEVEL_{level} and above",
     table) for level, table in DEQUANTIZE_TABLES.items()])
def test_transcribed_tables_match_later_seed_pages(page, heading, table):
    """The current pages' tables; the integer pages add a Dimensions column,
    which the registry's shape patterns hold instead."""
    rows = _table_after(_later_seed(page), heading)
    assert [(r[0], r[1], r[-2], r[-1]) for r in rows] == table


def test_transcribed_dequantize_types_match_seed_file():
    text = _seed("004")
    sections = re.split(r"^## DequantizeLinear - (\d+)", text, flags=re.M)
    found = {}
    for number, body in zip(sections[1::2], sections[2::2]):
        t1 = re.search(r"• T1? in \(([^)]*\)[^:]*)\):", body).group(1)
        found[int(number)] = {t.strip() for t in t1.split(",")}
    assert sorted(found) == [10, 13, 19, 21, 23]  # 24 and 25: the later seed page
    assert found == {opset: DEQUANTIZE_T1[opset] for opset in found}


def _later_onnx_sections():
    """The later seed's QuantizeLinear / DequantizeLinear 23-25 sections:
    ``(op, opset) -> (inputs and outputs {name: type parameter}, attribute
    names, {type parameter: set of types})``."""
    text = _later_seed("onnx_quantize_dequantize_23_to_25.md")
    sections = re.split(r'^### <a name="(\w+)-(\d+)"></a>', text, flags=re.M)
    found = {}
    for op, number, body in zip(sections[1::3], sections[2::3], sections[3::3]):
        def part(title):
            return body.split(f"#### {title}")[1].split("####")[0]
        formals = dict(re.findall(r"<dt><tt>(\w+)</tt>(?: \(optional\))? : (\w+)</dt>",
                                  part("Inputs") + part("Outputs")))
        attributes = set(re.findall(r"<dt><tt>(\w+)</tt> : ", part("Attributes")))
        types = {param: {t.strip() for t in listed.split(",")}
                 for param, listed in re.findall(r"<dt><tt>(T\d)</tt> : ([^<]*)</dt>",
                                                 part("Type Constraints"))}
        found[(op, int(number))] = (formals, attributes, types)
    return found


def test_onnx_tables_match_the_later_seed_page():
    """QuantizeLinear / DequantizeLinear 23, 24 and 25 as the page writes
    them: each slot's types and each opset's attributes (QuantizeLinear's int32
    x and y_scale included)."""
    sections = _later_onnx_sections()
    assert sorted(sections) == [(op, n) for op in ("DequantizeLinear", "QuantizeLinear")
                                for n in (23, 24, 25)]
    for (name, opset), (formals, attributes, types) in sections.items():
        row = registry.get(name).support(Opset(opset))
        assert row.version == Opset(opset)
        assert set(row.attributes) == attributes, (name, opset)
        for slot, param in formals.items():
            listed = registry_types(types[param])
            assert set(row.tensor(slot).dtypes) == listed, (name, opset, slot)


# ---------------------------------------------------------------------------
# seeds/later/directml_quantize.md and directml_dequantize.md (6_3): the
# scale and zero point are one array, QuantizationTensors, with one table row.
# ---------------------------------------------------------------------------
_BLOCK_TYPES = "INT8, INT4, UINT8, UINT4"
_ARRAY_ROW = ("QuantizationTensors", "Array of inputs", "1 to 8",
              "FLOAT32, FLOAT16, INT8, INT4, UINT8, UINT4")
QUANTIZE_6_3_TABLE = [("InputTensor", "Input", "1 to 8", "FLOAT32, FLOAT16"), _ARRAY_ROW,
                      ("OutputTensor", "Output", "1 to 8", _BLOCK_TYPES)]
DEQUANTIZE_6_3_TABLE = [("InputTensor", "Input", "1 to 8", _BLOCK_TYPES), _ARRAY_ROW,
                        ("OutputTensor", "Output", "1 to 8", "FLOAT32, FLOAT16")]
_QUANTIZATION_PAGES = [("QUANTIZE", "directml_quantize.md", QUANTIZE_6_3_TABLE),
                       ("DEQUANTIZE", "directml_dequantize.md", DEQUANTIZE_6_3_TABLE)]


@pytest.mark.parametrize("name, page, table", _QUANTIZATION_PAGES)
def test_quantization_tables_match_their_pages(name, page, table):
    """The page's rows as it writes them, and as the registry renders them
    (the CLI's and the docs' tables)."""
    from qops.registry import render

    assert _table_after(_later_seed(page), "## Tensor support") == table
    op = registry.get(name)
    assert op.support(FeatureLevel.FL_6_2) is None
    assert op.introduced is FeatureLevel.FL_6_3
    assert [tuple(row) for row in render.support_rows(op, op.support(FeatureLevel.FL_6_4))] == table
    assert "introduced in **DML_FEATURE_LEVEL_6_3**" in _later_seed(page)


@pytest.mark.parametrize("name, page, table", _QUANTIZATION_PAGES)
def test_quantization_array_is_split_by_role(name, page, table):
    """The page's structure fields in order, the array's elements as slots:
    the scale first, the zero point (SCALE_ZERO_POINT only) second, and the
    array's types divided between them."""
    text = _later_seed(page)
    struct = text.split("```cpp")[1].split("```")[0]
    fields = re.findall(r"(\w+);", struct)
    assert fields == ["InputTensor", "QuantizationType", "QuantizationTensorCount",
                      "QuantizationTensors", "OutputTensor"]
    op = registry.get(name)
    assert [s.name for s in op.slots] == ["input", "scale", "zero_point", "output"]
    assert [s.source_name for s in op.slots] == ["InputTensor", "QuantizationTensors[0]",
                                                 "QuantizationTensors[1]", "OutputTensor"]
    assert [s.array for s in op.slots] == ["", "QuantizationTensors", "QuantizationTensors", ""]
    assert [s.kind for s in op.slots] == [SlotKind.INPUT, SlotKind.INPUT,
                                          SlotKind.OPTIONAL_INPUT, SlotKind.OUTPUT]
    row = op.support(FeatureLevel.FL_6_3)
    assert dtypes_text(row.tensor("scale")) == "FLOAT32, FLOAT16"
    assert dtypes_text(row.tensor("zero_point")) == _BLOCK_TYPES
    listed = set(_ARRAY_ROW[3].split(", "))
    assert set(row.tensor("scale").dtypes) | set(row.tensor("zero_point").dtypes) == listed
    assert not set(row.tensor("scale").dtypes) & set(row.tensor("zero_point").dtypes)


@pytest.mark.parametrize("name, page, table", _QUANTIZATION_PAGES)
def test_quantization_constraints(name, page, table):
    """The page's one constraint (the shared dimension count, the array's
    elements included), and qops' rules where the page is silent: the zero
    point has the scale's sizes and the quantized tensor's type, and
    DEQUANTIZE's output has the scale's type."""
    text = _later_seed(page)
    sentence = text.split("## Tensor constraints")[1].strip().splitlines()[0]
    assert sentence.endswith("must have the same *DimensionCount*.")
    on_page = set(re.findall(r"\*(\w+)\*", sentence.split(" must ")[0]))
    assert on_page == {"InputTensor", "OutputTensor", "QuantizationTensors"}
    op = registry.get(name)
    by_field = {s.name: s.array or s.source_name for s in op.slots}
    constraints = op.constraints_at(FeatureLevel.FL_6_3)
    dims = [c for c in constraints if c.kind is ConstraintKind.SAME_DIMENSION_COUNT]
    assert len(dims) == 1 and {by_field[s] for s in dims[0].slots} == on_page
    assert set(dims[0].slots) == {"input", "scale", "zero_point", "output"}
    own = {(c.kind, frozenset(c.slots)) for c in constraints if c not in dims}
    quantized = "output" if name == "QUANTIZE" else "input"
    expected = {(ConstraintKind.SAME_SIZES, frozenset({"scale", "zero_point"})),
                (ConstraintKind.SAME_DTYPE, frozenset({quantized, "zero_point"}))}
    if name == "DEQUANTIZE":
        expected.add((ConstraintKind.SAME_DTYPE, frozenset({"output", "scale"})))
    assert own == expected
    assert op.support(FeatureLevel.FL_6_3).attributes == ("output_dtype",)


def test_an_array_s_slots_must_be_adjacent_and_share_dimension_counts():
    def slot(name, array="", kind=SlotKind.INPUT):
        return Slot(name=name, source_name=name.title(), kind=kind, array=array)

    def operator(slots, dims):
        rows = tuple(TensorSupport(slot=s.name, min_dims=1, max_dims=dims.get(s.name, 4),
                                   dtypes=("INT8",)) for s in slots)
        return Operator(name="X", function="x", source="DirectML", summary="", slots=slots,
                        attributes=(), versions=(VersionSupport(version=FeatureLevel.FL_6_3,
                                                                tensors=rows),))

    out = slot("out", kind=SlotKind.OUTPUT)
    good = operator((slot("a", "Arr"), slot("b", "Arr"), out), {})
    assert [(r[1], r[2]) for r in good.table_rows(good.versions[0])] == [
        ("Arr", "Array of inputs"), ("Out", "Output")]
    with pytest.raises(ValueError, match="not adjacent"):
        operator((slot("a", "Arr"), slot("c"), slot("b", "Arr"), out), {})
    with pytest.raises(ValueError, match="differ in dimension counts"):
        operator((slot("a", "Arr"), slot("b", "Arr"), out), {"b": 8})
    with pytest.raises(ValueError, match="input array"):
        slot("o", "Arr", SlotKind.OUTPUT)


# ---------------------------------------------------------------------------
# DirectML tables
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("name, fields, slots", [(CONV, CONV_FIELDS, CONV_SLOTS),
                                                 (MATMUL, MATMUL_FIELDS, MATMUL_SLOTS)])
def test_slots_follow_structure_order(name, fields, slots):
    op = registry.get(name)
    assert [s.source_name for s in op.slots] == fields
    assert [s.name for s in op.slots] == slots
    assert op.output.source_name == "OutputTensor"
    assert [s.name for s in op.inputs] == slots[:-1]


@pytest.mark.parametrize("name, level, table", TABLES,
                         ids=[f"{n}-{l.label}" for n, l, _ in TABLES])
def test_tensor_support_rows(name, level, table):
    op = registry.get(name)
    support = op.support(level)
    assert support is not None
    assert len(support.tensors) == len(table)
    for source_name, kind, dims, dtypes in table:
        slot = _slot_by_source(op, source_name)
        assert slot.source_name == source_name
        row = support.tensor(slot.name)
        assert row.kind_text(op.slot(slot.name)) == kind, source_name
        assert row.dims_text() == dims, source_name
        assert dtypes_text(row) == dtypes, source_name
        assert set(row.dtypes) == set(dtypes.split(", ")), source_name


@pytest.mark.parametrize("name, level, table", TABLES,
                         ids=[f"{n}-{l.label}" for n, l, _ in TABLES])
def test_dimension_counts_allowed_exactly(name, level, table):
    op = registry.get(name)
    support = op.support(level)
    for source_name, _, dims, _ in table:
        row = support.tensor(_slot_by_source(op, source_name).name)
        low, _, high = dims.partition(" to ")
        allowed = set(range(int(low), int(high or low) + 1))
        for ndim in range(0, 9):
            assert row.allows_dims(ndim) == (ndim in allowed), (source_name, ndim)


def _constraint_set(op, level):
    names = {s.name: s.source_name for s in op.slots}
    return {(c.kind.value, frozenset(names[s] for s in c.slots)) for c in op.constraints_at(level)}


@pytest.mark.parametrize("name, level, expected", [
    (CONV, FeatureLevel.FL_2_1, CONV_CONSTRAINTS),
    (CONV, FeatureLevel.FL_4_0, CONV_CONSTRAINTS),
    (CONV, FeatureLevel.FL_5_2, CONV_CONSTRAINTS),
    (MATMUL, FeatureLevel.FL_2_1, MATMUL_CONSTRAINTS),
    (MATMUL, FeatureLevel.FL_4_0, MATMUL_CONSTRAINTS),
    ("QUANTIZED_LINEAR_AVERAGE_POOLING", FeatureLevel.FL_6_2, {
        (SAME_DIMS, frozenset({"InputTensor", "OutputTensor"})),
        (SAME_TYPE, frozenset({"InputTensor", "InputZeroPointTensor"})),
        (SAME_TYPE, frozenset({"OutputTensor", "OutputZeroPointTensor"})),
    }),
    ("MATRIX_MULTIPLY_INTEGER_TO_FLOAT", FeatureLevel.FL_6_2, {
        (SAME_DIMS, frozenset({"AScaleTensor", "AZeroPointTensor", "BScaleTensor",
                               "BZeroPointTensor"})),
        (SAME_DIMS, frozenset({"ATensor", "BiasTensor", "BTensor", "OutputTensor"})),
        ("same sizes", frozenset({"BiasTensor", "OutputTensor"})),
        (SAME_TYPE, frozenset({"ATensor", "AZeroPointTensor", "BTensor", "BZeroPointTensor"})),
        (SAME_TYPE, frozenset({"AScaleTensor", "BiasTensor", "BScaleTensor", "OutputTensor"})),
    }),
    (MATMUL_INTEGER, FeatureLevel.FL_5_2, {
        (SAME_DIMS, frozenset({"ATensor", "BTensor", "OutputTensor"})),
        (SAME_TYPE, frozenset({"BTensor", "BZeroPointTensor"})),
        (SAME_TYPE, frozenset({"ATensor", "AZeroPointTensor"})),
    }),
])
def test_tensor_constraints(name, level, expected):
    assert ConstraintKind.SAME_DTYPE.value == SAME_TYPE
    assert ConstraintKind.SAME_DIMENSION_COUNT.value == SAME_DIMS
    assert _constraint_set(registry.get(name), level) == expected


@pytest.mark.parametrize("name, shapes", [(CONV, CONV_SHAPES), (MATMUL, MATMUL_SHAPES)])
def test_expected_shapes(name, shapes):
    op = registry.get(name)
    for source_name, expected in shapes.items():
        slot = _slot_by_source(op, source_name)
        got = [(p.granularity, p.text().replace(" ", "")) for p in slot.shapes]
        assert got == expected, source_name
    granularities = op.support(FeatureLevel.FL_2_1).granularities
    for source_name, expected in shapes.items():
        for granularity, _ in expected:
            assert granularity in granularities


@pytest.mark.parametrize("name", [CONV, MATMUL])
def test_main_tensor_dimensions_as_seed_writes_them(name):
    op = registry.get(name)
    for source_name, text in MAIN_DIMENSIONS[name].items():
        assert _slot_by_source(op, source_name).description == text


@pytest.mark.parametrize("name, versions", [
    (CONV, [FeatureLevel.FL_2_1, FeatureLevel.FL_4_0, FeatureLevel.FL_5_2]),
    (MATMUL, [FeatureLevel.FL_2_1, FeatureLevel.FL_4_0]),
    (MATMUL_INTEGER, [FeatureLevel.FL_2_1, FeatureLevel.FL_4_0, FeatureLevel.FL_5_2]),
])
def test_availability(name, versions):
    op = registry.get(name)
    assert op.source == "DirectML"
    assert op.introduced is FeatureLevel.FL_2_1
    assert [row.version for row in op.versions] == versions
    assert op.support(FeatureLevel.FL_1_0) is None
    assert op.support(FeatureLevel.FL_2_0) is None
    # "and above": a level uses the newest row not after it.
    for level in FeatureLevel:
        row = op.support(level)
        if level < FeatureLevel.FL_2_1:
            assert row is None
        else:
            expected = max(v for v in versions if v <= level)
            assert row.version is expected, level


def test_matmul_rows_in_force_between_levels():
    op = registry.get(MATMUL)
    assert op.support(FeatureLevel.FL_3_1).tensor("a").dims_text() == "4"
    assert op.support(FeatureLevel.FL_4_1).tensor("a").dims_text() == "2 to 4"
    assert op.support(FeatureLevel.FL_6_4).tensor("a_scale").dims_text() == "1 to 4"


def test_dimension_count_attribute_only_2():
    op = registry.get(CONV)
    attribute = op.attribute("dimension_count")
    assert attribute.source_name == "DimensionCount"
    assert attribute.default == 2
    assert tuple(attribute.choices) == (2,)
    assert "dimension_count" in op.support(FeatureLevel.FL_2_1).attributes


def test_convolution_attributes_are_the_structure_fields():
    op = registry.get(CONV)
    sources = {a.name: a.source_name for a in op.attributes}
    for name, source in [("dimension_count", "DimensionCount"), ("strides", "Strides"),
                         ("dilations", "Dilations"), ("start_padding", "StartPadding"),
                         ("end_padding", "EndPadding"), ("group_count", "GroupCount")]:
        assert sources[name] == source
        assert name in op.support(FeatureLevel.FL_2_1).attributes
    # Contract defaults: strides and dilations ones, paddings zeros, group_count 1.
    assert tuple(op.attribute("strides").default) == (1, 1)
    assert tuple(op.attribute("dilations").default) == (1, 1)
    assert tuple(op.attribute("start_padding").default) == (0, 0)
    assert tuple(op.attribute("end_padding").default) == (0, 0)
    assert op.attribute("group_count").default == 1


# ---------------------------------------------------------------------------
# ONNX tables
# ---------------------------------------------------------------------------

onnx_defs = pytest.importorskip("onnx.defs")


def _schema(name, opset):
    """onnx.defs' schema of ``name`` at version ``opset``; a skip naming it
    where the installed onnx is older than that version."""
    try:
        schema = onnx_defs.get_schema(name, opset)
    except onnx_defs.SchemaError:
        schema = None
    if schema is None or schema.since_version != opset:
        import onnx

        pytest.skip(f"the installed onnx {onnx.__version__} has no {name} version {opset}")
    return schema


def _onnx_types(schema, formal):
    """The allowed registry types of one input/output of an ONNX schema."""
    by_param = {c.type_param_str: set(c.allowed_type_strs) for c in schema.type_constraints}
    return registry_types(by_param.get(formal.type_str, {formal.type_str}))


def _onnx_slot_types(schema):
    return {f.name: _onnx_types(schema, f) for f in list(schema.inputs) + list(schema.outputs)}


@pytest.mark.parametrize("name", ["DequantizeLinear", "QuantizeLinear"])
def test_onnx_opsets(name):
    op = registry.get(name)
    assert op.source == "ONNX"
    assert [row.version.number for row in op.versions] == OPSETS
    assert op.introduced == Opset(10)
    assert op.support(Opset(9)) is None


@pytest.mark.parametrize("opset", OPSETS)
def test_dequantize_types_per_seed(opset):
    row = registry.get("DequantizeLinear").support(Opset(opset))
    assert row.version == Opset(opset)
    t1, t2 = registry_types(DEQUANTIZE_T1[opset]), registry_types(DEQUANTIZE_T2[opset])
    assert set(row.tensor("x").dtypes) == t1
    assert set(row.tensor("x_zero_point").dtypes) == t1
    assert set(row.tensor("x_scale").dtypes) == t2
    assert set(row.tensor("y").dtypes) == registry_types(DEQUANTIZE_T3 if opset >= 23 else
                                                         DEQUANTIZE_T2[opset])


@pytest.mark.parametrize("opset", OPSETS)
def test_dequantize_types_against_onnx_schema(opset):
    schema = _schema("DequantizeLinear", opset)
    assert schema.since_version == opset
    onnx_types = _onnx_slot_types(schema)
    row = registry.get("DequantizeLinear").support(Opset(opset))
    assert "INT32" in onnx_types["x"]  # x includes int32 in every opset
    for slot in ("x", "x_scale", "x_zero_point", "y"):
        assert set(row.tensor(slot).dtypes) == onnx_types[slot], slot


@pytest.mark.parametrize("opset", OPSETS)
def test_quantize_types_against_onnx_schema(opset):
    """QuantizeLinear: every slot takes exactly ONNX's types, int32 x (every
    opset) and int32 y_scale (from 19) included."""
    schema = _schema("QuantizeLinear", opset)
    assert schema.since_version == opset
    onnx_types = _onnx_slot_types(schema)
    output_param = "T3" if opset >= 23 else "T2"
    assert schema.outputs[0].type_str == output_param
    row = registry.get("QuantizeLinear").support(Opset(opset))
    for slot in ("x", "y_scale", "y_zero_point", "y"):
        assert set(row.tensor(slot).dtypes) == onnx_types[slot], slot
    assert "INT32" in row.tensor("x").dtypes
    assert ("INT32" in row.tensor("y_scale").dtypes) == (opset >= 19)
    assert ("FLOAT8E8M0" in row.tensor("y_scale").dtypes) == (opset >= 24)
    six_bit = {"FLOAT6E2M3", "FLOAT6E3M2"}
    assert (six_bit <= set(row.tensor("y").dtypes)) == (opset >= 28)
    assert not six_bit & set(row.tensor("y").dtypes) or opset >= 28


#: Every opset onnx.defs knows up to one past qops' newest.
ALL_OPSETS = range(1, registry.NEWEST_OPSET.number + 2)


@pytest.mark.parametrize("name", ["DequantizeLinear", "QuantizeLinear"])
def test_rows_are_onnx_defs_versions(name):
    """The registry's rows are exactly the operator's versions in onnx.defs up
    to the newest qops describes: each opset's row is the one ONNX's schema
    lookup resolves to (26 and 27 resolve to 25, 28 to 28)."""
    op = registry.get(name)
    since = {}
    for opset in ALL_OPSETS:
        try:
            since[opset] = onnx_defs.get_schema(name, opset).since_version
        except onnx_defs.SchemaError:
            since[opset] = None
    described = [o for o in ALL_OPSETS if o <= registry.NEWEST_OPSET.number]
    if since[described[-1]] != OPSETS[-1]:
        _schema(name, OPSETS[-1])  # an older onnx: skipped, naming the version it lacks
    assert sorted({since[o] for o in described if since[o]}) == OPSETS
    for opset in described:
        row = op.support(Opset(opset))
        assert (row.version.number if row else None) == since[opset], opset
    assert [since[o] for o in (25, 26, 27, 28)] == [25, 25, 25, 28]


@pytest.mark.parametrize("name", ["DequantizeLinear", "QuantizeLinear"])
def test_onnx_has_no_version_past_the_registry(name):
    """A version the installed onnx defines beyond the registry's newest is
    reported by name, as a skip: a new onnx release is news, not a failure."""
    import onnx

    versions = sorted({schema.since_version for schema in onnx_defs.get_all_schemas_with_history()
                       if schema.name == name and schema.domain in ("", "ai.onnx")})
    newer = [version for version in versions if version > OPSETS[-1]]
    if newer:
        pytest.skip(f"onnx {onnx.__version__} defines {name} version(s) "
                    f"{', '.join(map(str, newer))}, past the registry's newest ({OPSETS[-1]})")
    assert versions == [version for version in OPSETS if version <= versions[-1]]


@pytest.mark.parametrize("name", ["DequantizeLinear", "QuantizeLinear"])
@pytest.mark.parametrize("opset", OPSETS)
def test_rows_against_onnx_defs(name, opset):
    """Slot by slot, each row's types, attributes and optional slots are what
    onnx.defs states for that version, and the attribute defaults ONNX's."""
    schema = _schema(name, opset)
    op = registry.get(name)
    row = op.support(Opset(opset))
    onnx_types = _onnx_slot_types(schema)
    assert {t.slot for t in row.tensors} == set(onnx_types)
    for slot, types in onnx_types.items():
        assert set(row.tensor(slot).dtypes) == types, (slot, sorted(types))
    assert set(row.attributes) == set(schema.attributes)
    for formal in schema.inputs:
        optional = formal.option == onnx_defs.OpSchema.FormalParameterOption.Optional
        assert op.slot(formal.name).optional == optional, formal.name
    for attribute_name, attribute in schema.attributes.items():
        default = attribute.default_value
        ours = op.attribute(attribute_name).default
        if attribute_name in ("output_dtype", "precision"):
            # ONNX writes "not given" as 0; qops as None.
            assert default.i == 0 and ours is None
        else:
            assert default.i == int(ours), attribute_name


def _shared_type_pairs(schema):
    """Formal parameters that share one type parameter in the ONNX schema."""
    params = {c.type_param_str for c in schema.type_constraints}
    formals = list(schema.inputs) + list(schema.outputs)
    groups = {}
    for formal in formals:
        if formal.type_str in params:
            groups.setdefault(formal.type_str, set()).add(formal.name)
    return {frozenset(g) for g in groups.values() if len(g) > 1}


@pytest.mark.parametrize("opset", OPSETS)
def test_quantize_same_type_constraints_against_onnx(opset):
    op = registry.get("QuantizeLinear")
    got = {frozenset(c.slots) for c in op.constraints_at(Opset(opset))
           if c.kind is ConstraintKind.SAME_DTYPE}
    assert got == _shared_type_pairs(_schema("QuantizeLinear", opset))


@pytest.mark.parametrize("opset", OPSETS)
def test_dequantize_same_type_constraints_per_seed(opset):
    # Seed: x_zero_point and x are T1; x_scale determines the output type y
    # until opset 23, whose output_dtype may name another.
    op = registry.get("DequantizeLinear")
    got = {frozenset(c.slots) for c in op.constraints_at(Opset(opset))
           if c.kind is ConstraintKind.SAME_DTYPE}
    expected = {frozenset({"x", "x_zero_point"})}
    if opset < 23:
        expected.add(frozenset({"x_scale", "y"}))
    assert got == expected


@pytest.mark.parametrize("opset", OPSETS)
def test_attributes_per_opset(opset):
    dq = registry.get("DequantizeLinear").support(Opset(opset))
    q = registry.get("QuantizeLinear").support(Opset(opset))
    assert set(dq.attributes) == DEQUANTIZE_ATTRIBUTES[opset]
    assert set(q.attributes) == QUANTIZE_ATTRIBUTES[opset]
    assert set(q.attributes) == set(_schema("QuantizeLinear", opset).attributes)
    assert set(dq.attributes) == set(_schema("DequantizeLinear", opset).attributes)


def test_onnx_attribute_defaults():
    dq, q = registry.get("DequantizeLinear"), registry.get("QuantizeLinear")
    assert dq.attribute("axis").default == 1
    assert dq.attribute("block_size").default == 0
    assert q.attribute("axis").default == 1
    assert q.attribute("block_size").default == 0
    assert q.attribute("saturate").default is True


@pytest.mark.parametrize("name", ["DequantizeLinear", "QuantizeLinear"])
def test_onnx_slots_and_granularities(name):
    op = registry.get(name)
    prefix = "x" if name == "DequantizeLinear" else "y"
    output = "y"
    assert [s.name for s in op.slots] == ["x", f"{prefix}_scale", f"{prefix}_zero_point", output]
    assert [s.kind for s in op.slots] == [SlotKind.INPUT, SlotKind.INPUT,
                                          SlotKind.OPTIONAL_INPUT, SlotKind.OUTPUT]
    expected = {10: {"per-tensor"}, 13: {"per-tensor", "per-axis"},
                19: {"per-tensor", "per-axis"}, 21: {"per-tensor", "per-axis", "blocked"},
                23: {"per-tensor", "per-axis", "blocked"}, 24: {"per-tensor", "per-axis", "blocked"},
                25: {"per-tensor", "per-axis", "blocked"},
                28: {"per-tensor", "per-axis", "blocked"}}
    for opset, granularities in expected.items():
        row = op.support(Opset(opset))
        assert set(row.granularities) == granularities
        scale = row.tensor(f"{prefix}_scale")
        # a scalar everywhere, 1-D (per-axis) from 13, the rank of x (blocked) from 21
        assert scale.allows_dims(0)
        if opset >= 13:
            assert scale.allows_dims(1)
        assert scale.allows_dims(3) == (opset >= 21)
        assert row.tensor("x").allows_dims(0) and row.tensor("x").allows_dims(6)


# ---------------------------------------------------------------------------
# FeatureLevel
# ---------------------------------------------------------------------------

LEVELS = ["1_0", "2_0", "2_1", "3_0", "3_1", "4_0", "4_1", "5_0", "5_1", "5_2",
          "6_0", "6_1", "6_2", "6_3", "6_4"]


def test_feature_levels_every_level_in_order():
    assert qops.FeatureLevel is FeatureLevel
    members = list(FeatureLevel)
    assert [m.label for m in members] == LEVELS
    assert [str(m) for m in members] == [f"DML_FEATURE_LEVEL_{l}" for l in LEVELS]
    assert sorted(reversed(members)) == members
    for lower, higher in zip(members, members[1:]):
        assert lower < higher and higher > lower and lower <= higher and not higher < lower
    assert max(FeatureLevel) is FeatureLevel.FL_6_4
    assert min(FeatureLevel) is FeatureLevel.FL_1_0


@pytest.mark.parametrize("value", ["2_1", "2.1", (2, 1), "DML_FEATURE_LEVEL_2_1",
                                   FeatureLevel.FL_2_1])
def test_feature_level_parse_accepts(value):
    assert FeatureLevel.parse(value) is FeatureLevel.FL_2_1


@pytest.mark.parametrize("label", LEVELS)
def test_feature_level_parse_every_level(label):
    major, minor = (int(p) for p in label.split("_"))
    member = FeatureLevel.parse(label)
    assert member.label == label
    assert FeatureLevel.parse(f"{major}.{minor}") is member
    assert FeatureLevel.parse((major, minor)) is member
    assert FeatureLevel.parse(f"DML_FEATURE_LEVEL_{label}") is member


@pytest.mark.parametrize("value", ["2_2", "9_9", "2", "21", "", "2_1_0", "latest",
                                   "DML_FEATURE_LEVEL_", (2, 2), (2,), (2, 1, 0), 2.1, 21,
                                   None, (True, 1), ("2", "1")])
def test_feature_level_parse_rejects(value):
    with pytest.raises(ValueError):
        FeatureLevel.parse(value)


# ---------------------------------------------------------------------------
# The schema types check themselves
# ---------------------------------------------------------------------------

def _row(slot="x", low=1, high=4, dtypes=("INT8",)):
    return TensorSupport(slot=slot, min_dims=low, max_dims=high, dtypes=dtypes)


def _operator(**overrides):
    slots = (Slot(name="x", source_name="XTensor", kind=SlotKind.INPUT),
             Slot(name="y", source_name="YTensor", kind=SlotKind.OUTPUT))
    fields = dict(
        name="TOY", function="toy", source="DirectML", summary="toy", slots=slots, attributes=(),
        versions=(VersionSupport(version=FeatureLevel.FL_2_1,
                                 tensors=(_row("x"), _row("y"))),),
    )
    fields.update(overrides)
    return Operator(**fields)


def test_toy_operator_is_valid():
    op = _operator()
    assert op.introduced is FeatureLevel.FL_2_1
    assert op.support(FeatureLevel.FL_4_0).tensor("x").dims_text() == "1 to 4"


@pytest.mark.parametrize("build", [
    lambda: _row(dtypes=("INT7",)),
    lambda: _row(dtypes=("int8",)),
    lambda: _row(dtypes=("FLOAT64",)),
    lambda: _row(dtypes=()),
    lambda: _row(dtypes=("INT8", "INT8")),
], ids=["INT7", "lowercase", "FLOAT64", "none", "repeated"])
def test_unknown_dtype_rejected(build):
    with pytest.raises((ValueError, TypeError)):
        build()


@pytest.mark.parametrize("low, high", [(4, 2), (2, 1), (-1, 4)])
def test_inverted_dimension_range_rejected(low, high):
    with pytest.raises((ValueError, TypeError)):
        _row(low=low, high=high)


def test_constraint_naming_unknown_slot_rejected():
    bad = Constraint(kind=ConstraintKind.SAME_DTYPE, slots=("x", "z"))
    with pytest.raises((ValueError, TypeError)) as info:
        _operator(constraints=(bad,))
    assert "z" in str(info.value)
    row = VersionSupport(version=FeatureLevel.FL_2_1, tensors=(_row("x"), _row("y")),
                         constraints=(bad,))
    with pytest.raises((ValueError, TypeError)):
        _operator(versions=(row,))


def test_constraint_needs_two_distinct_slots():
    with pytest.raises((ValueError, TypeError)):
        Constraint(kind=ConstraintKind.SAME_DTYPE, slots=("x",))
    with pytest.raises((ValueError, TypeError)):
        Constraint(kind=ConstraintKind.SAME_DTYPE, slots=("x", "x"))
    with pytest.raises((ValueError, TypeError)):
        Constraint(kind="same data type", slots=("x", "y"))


@pytest.mark.parametrize("build", [
    lambda: TensorSupport(slot="x", min_dims=1, max_dims=4, dtypes=("INT8",), colour="red"),
    lambda: Slot(name="x", source_name="XTensor", kind=SlotKind.INPUT, optional=True),
    lambda: Constraint(kind=ConstraintKind.SAME_DTYPE, slots=("x", "y"), strict=True),
    lambda: ShapePattern(granularity="per-tensor", sizes=(1,), rank=1),
    lambda: Attribute(name="a", source_name="A", kind="int", ceiling=3),
    lambda: VersionSupport(version=FeatureLevel.FL_2_1, tensors=(), since="2_1"),
    lambda: _operator(aliases=("t",)),
    lambda: TensorSupport("x", 1, 4, ("INT8",)),  # keyword-only
], ids=["TensorSupport", "Slot", "Constraint", "ShapePattern", "Attribute", "VersionSupport",
        "Operator", "positional"])
def test_unknown_keyword_fields_rejected(build):
    with pytest.raises(TypeError):
        build()


def test_versions_out_of_order_rejected():
    v21 = VersionSupport(version=FeatureLevel.FL_2_1, tensors=(_row("x"), _row("y")))
    v40 = VersionSupport(version=FeatureLevel.FL_4_0, tensors=(_row("x"), _row("y")))
    assert [r.version for r in _operator(versions=(v21, v40)).versions] == [
        FeatureLevel.FL_2_1, FeatureLevel.FL_4_0]
    for versions in [(v40, v21), (v21, v21), ()]:
        with pytest.raises((ValueError, TypeError)):
            _operator(versions=versions)
    mixed = VersionSupport(version=Opset(13), tensors=(_row("x"), _row("y")))
    with pytest.raises((ValueError, TypeError)):
        _operator(versions=(v21, mixed))


@pytest.mark.parametrize("build", [
    lambda: Slot(name="XTensor", source_name="XTensor", kind=SlotKind.INPUT),
    lambda: Slot(name="x", source_name="XTensor", kind="Input"),
    lambda: ShapePattern(granularity="per-tensor", sizes=(0, 1)),
    lambda: ShapePattern(granularity="per-tensor", sizes=()),
    lambda: Attribute(name="a", source_name="A", kind="float"),
    lambda: VersionSupport(version="2_1", tensors=()),
    lambda: VersionSupport(version=FeatureLevel.FL_2_1, tensors=(_row("x"), _row("x"))),
    lambda: _operator(source="CUDA"),
    lambda: _operator(versions=(VersionSupport(version=FeatureLevel.FL_2_1,
                                               tensors=(_row("x"),)),)),
    lambda: _operator(slots=(Slot(name="x", source_name="X", kind=SlotKind.INPUT),)),
    lambda: Opset(0),
], ids=["slot-name", "slot-kind", "size-0", "no-sizes", "attribute-kind", "version-type",
        "two-rows", "source", "rows-miss-slot", "no-output", "opset-0"])
def test_other_table_mistakes_rejected(build):
    with pytest.raises((ValueError, TypeError)):
        build()


@pytest.mark.parametrize("instance, field", [
    (lambda: registry.get(CONV), "name"),
    (lambda: registry.get(CONV).slot("input"), "kind"),
    (lambda: registry.get(CONV).support(FeatureLevel.FL_2_1), "tensors"),
    (lambda: registry.get(CONV).support(FeatureLevel.FL_2_1).tensor("input"), "max_dims"),
    (lambda: registry.get(CONV).constraints[0], "slots"),
    (lambda: registry.get(CONV).attribute("strides"), "default"),
    (lambda: registry.get(CONV).slot("filter_scale").shapes[0], "sizes"),
    (lambda: Opset(13), "number"),
])
def test_instances_are_frozen(instance, field):
    obj = instance()
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(obj, field, None)


def test_registry_tables_are_tuples():
    # Frozen all the way down: no list a caller could mutate in place.
    for op in registry.operators():
        assert isinstance(op.slots, tuple) and isinstance(op.versions, tuple)
        for row in op.versions:
            assert isinstance(row.tensors, tuple)
            for tensor in row.tensors:
                assert isinstance(tensor.dtypes, tuple)


# ---------------------------------------------------------------------------
# registry.get / operators
# ---------------------------------------------------------------------------

NAMES = [(CONV, "quantized_linear_convolution"), (MATMUL, "quantized_linear_matrix_multiply"),
         (CONV_INTEGER, "convolution_integer"), (MATMUL_INTEGER, "matrix_multiply_integer"),
         (DYNAMIC, "dynamic_quantize_linear"),
         ("ELEMENT_WISE_QUANTIZED_LINEAR_ADD", "element_wise_quantized_linear_add"),
         ("MATRIX_MULTIPLY_INTEGER_TO_FLOAT", "matrix_multiply_integer_to_float"),
         ("QUANTIZED_LINEAR_AVERAGE_POOLING", "quantized_linear_average_pooling"),
         ("ELEMENT_WISE_QUANTIZE_LINEAR", "element_wise_quantize_linear"),
         ("ELEMENT_WISE_DEQUANTIZE_LINEAR", "element_wise_dequantize_linear"),
         ("QUANTIZE", "quantize"), ("DEQUANTIZE", "dequantize"),
         ("DequantizeLinear", "dequantize_linear"), ("QuantizeLinear", "quantize_linear"),
         ("MatMulNBits", "matmul_n_bits")]


def test_integer_operator_availability_and_constraints():
    for name, first in ((CONV_INTEGER, FeatureLevel.FL_2_1), (MATMUL_INTEGER, FeatureLevel.FL_2_1),
                        (DYNAMIC, FeatureLevel.FL_4_0)):
        op = registry.get(name)
        assert op.introduced is first
        assert op.support(FeatureLevel.FL_2_0) is None
    assert _constraint_set(registry.get(CONV_INTEGER), FeatureLevel.FL_4_0) == {
        (SAME_TYPE, frozenset({"InputTensor", "InputZeroPointTensor"})),
        (SAME_TYPE, frozenset({"FilterTensor", "FilterZeroPointTensor"})),
        (SAME_DIMS, frozenset({"FilterZeroPointTensor", "InputZeroPointTensor"})),
        (SAME_DIMS, frozenset({"FilterTensor", "InputTensor", "OutputTensor"}))}
    assert _constraint_set(registry.get(MATMUL_INTEGER), FeatureLevel.FL_4_0) == {
        (SAME_TYPE, frozenset({"ATensor", "AZeroPointTensor"})),
        (SAME_TYPE, frozenset({"BTensor", "BZeroPointTensor"})),
        (SAME_DIMS, frozenset({"ATensor", "BTensor", "BZeroPointTensor", "OutputTensor"}))}
    assert _constraint_set(registry.get(DYNAMIC), FeatureLevel.FL_4_0) == {
        (SAME_DIMS, frozenset({"InputTensor", "OutputScaleTensor", "OutputTensor",
                               "OutputZeroPointTensor"})),
        (SAME_TYPE, frozenset({"OutputTensor", "OutputZeroPointTensor"}))}
    assert [s.source_name for s in registry.get(DYNAMIC).outputs] == [
        "OutputTensor", "OutputScaleTensor", "OutputZeroPointTensor"]


def test_operators_lists_every_operator():
    assert [op.name for op in registry.operators()] == [n for n, _ in NAMES]
    assert [op.function for op in registry.operators()] == [f for _, f in NAMES]


@pytest.mark.parametrize("name, function", NAMES)
def test_get_by_registry_and_function_name(name, function):
    op = registry.get(name)
    assert op.name == name
    assert registry.get(function) is op
    assert callable(getattr(qops, function))


@pytest.mark.parametrize("bad", ["QUANTIZED_LINEAR_CONV", "Quantizer", "", "QLinearConv", None, 3])
def test_get_unknown_name(bad):
    with pytest.raises(KeyError) as info:
        registry.get(bad)
    message = str(info.value)
    for name, _ in NAMES:
        assert name in message


# ---------------------------------------------------------------------------
# The registry is pure Python
# ---------------------------------------------------------------------------

def _run(code):
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=120)


def test_registry_imports_nothing_compiled():
    result = _run("""
        import sys
        import qops.registry
        loaded = sorted(m for m in sys.modules if m == "qops.backends.native.kernels" or m.startswith("qops.backends.native.kernels."))
        print(loaded)
        assert not loaded, loaded
    """)
    assert result.returncode == 0, result.stdout + result.stderr


def test_registry_readable_without_kernels():
    """With the compiled kernels unavailable, the registry still loads and reads."""
    result = _run("""
        import sys
        sys.modules["qops.backends.native.kernels"] = None  # any import of it fails
        from qops import registry
        op = registry.get("QUANTIZED_LINEAR_MATRIX_MULTIPLY")
        print(op.support(registry.FeatureLevel.FL_4_0).tensor("a").dims_text())
        print(len(registry.operators()))
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["2", "to", "4", str(len(NAMES))]
