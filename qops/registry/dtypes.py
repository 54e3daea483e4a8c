"""Registry data-type names and the NumPy / ml_dtypes types that hold them."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from qops.registry.onnx import FLOAT8_TYPES
from qops.registry.schema import DATA_TYPES, dtype_label

__all__ = ["to_numpy", "name_of", "parse_dtype", "INTEGER_RANGES", "FLOAT8", "NARROW_FLOATS",
           "FOUR_BIT", "TWO_BIT", "SIX_BIT", "SUB_BYTE_FLOATS", "byte_values", "label"]

_NUMPY = {
    "INT2": np.dtype(ml_dtypes.int2),
    "UINT2": np.dtype(ml_dtypes.uint2),
    "INT4": np.dtype(ml_dtypes.int4),
    "UINT4": np.dtype(ml_dtypes.uint4),
    "INT8": np.dtype(np.int8),
    "UINT8": np.dtype(np.uint8),
    "INT16": np.dtype(np.int16),
    "UINT16": np.dtype(np.uint16),
    "INT32": np.dtype(np.int32),
    "UINT32": np.dtype(np.uint32),
    "FLOAT4E2M1": np.dtype(ml_dtypes.float4_e2m1fn),
    "FLOAT6E2M3": np.dtype(ml_dtypes.float6_e2m3fn),
    "FLOAT6E3M2": np.dtype(ml_dtypes.float6_e3m2fn),
    "FLOAT8E4M3FN": np.dtype(ml_dtypes.float8_e4m3fn),
    "FLOAT8E4M3FNUZ": np.dtype(ml_dtypes.float8_e4m3fnuz),
    "FLOAT8E5M2": np.dtype(ml_dtypes.float8_e5m2),
    "FLOAT8E5M2FNUZ": np.dtype(ml_dtypes.float8_e5m2fnuz),
    "FLOAT8E8M0": np.dtype(ml_dtypes.float8_e8m0fnu),
    "FLOAT16": np.dtype(np.float16),
    "BFLOAT16": np.dtype(ml_dtypes.bfloat16),
    "FLOAT32": np.dtype(np.float32),
}
assert set(_NUMPY) == set(DATA_TYPES)
DATA_TYPES_SET = frozenset(DATA_TYPES)

_BY_NUMPY = {dtype: name for name, dtype in _NUMPY.items()}

# Spellings users reach for besides the registry's: NumPy's, ml_dtypes', ONNX's.
_ALIASES = {
    "float": "FLOAT32",
    "half": "FLOAT16",
    "float8_e4m3fn": "FLOAT8E4M3FN",
    "float8_e4m3fnuz": "FLOAT8E4M3FNUZ",
    "float8_e5m2": "FLOAT8E5M2",
    "float8_e5m2fnuz": "FLOAT8E5M2FNUZ",
    "float4_e2m1fn": "FLOAT4E2M1",
    "float4e2m1fn": "FLOAT4E2M1",
    "float6_e2m3fn": "FLOAT6E2M3",
    "float6e2m3fn": "FLOAT6E2M3",
    "float6_e3m2fn": "FLOAT6E3M2",
    "float6e3m2fn": "FLOAT6E3M2",
    "float8_e8m0fnu": "FLOAT8E8M0",
    "float8e8m0fnu": "FLOAT8E8M0",
}

#: Inclusive value ranges of the integer types.
INTEGER_RANGES = {
    "INT2": (-2, 1),
    "UINT2": (0, 3),
    "INT4": (-8, 7),
    "UINT4": (0, 15),
    "INT8": (-128, 127),
    "UINT8": (0, 255),
    "INT16": (-32768, 32767),
    "UINT16": (0, 65535),
    "INT32": (-(2**31), 2**31 - 1),
    "UINT32": (0, 2**32 - 1),
}

FLOAT8 = frozenset(FLOAT8_TYPES)
#: The 6-bit floats (opset 28), which ONNX stores four in three bytes.
SIX_BIT = ("FLOAT6E2M3", "FLOAT6E3M2")
#: The float types narrower than a byte: no infinity and no NaN, so a value
#: past the largest finite one saturates whatever ``saturate`` says.
SUB_BYTE_FLOATS = frozenset({"FLOAT4E2M1"} | set(SIX_BIT))
NARROW_FLOATS = FLOAT8 | SUB_BYTE_FLOATS
#: The types ONNX stores two to a byte, and four to a byte.
FOUR_BIT = ("INT4", "UINT4", "FLOAT4E2M1")
TWO_BIT = ("INT2", "UINT2")


def byte_values(name: str) -> np.ndarray:
    """float32 of the value ml_dtypes reads from each of the 256 byte values
    of a one-byte type (NaN payloads included).

    An unpacked 4-bit or 2-bit array's byte is read whole: ml_dtypes takes a
    float4's sign from any of its four high bits (0x12 is -1.0), and a
    float6's from either of its two.  The first ``2**bits`` entries of a
    sub-byte type are its canonical codes.
    """
    values = np.arange(256, dtype=np.uint8).view(_NUMPY[name]).astype(np.float32)
    return np.ascontiguousarray(values)


def to_numpy(name: str) -> np.dtype:
    """The NumPy dtype holding registry type ``name``."""
    return _NUMPY[name]


def name_of(dtype) -> str | None:
    """The registry name of a NumPy dtype, or ``None`` if the registry has none."""
    try:
        return _BY_NUMPY.get(np.dtype(dtype))
    except TypeError:
        return None


def label(dtype) -> str:
    """A dtype as messages print it: the registry spelling if there is one."""
    name = name_of(dtype)
    return dtype_label(name) if name else str(np.dtype(dtype))


def parse_dtype(value) -> str:
    """A registry type name from a dtype-like: ``np.int8``, ``"uint4"``,
    ``"FLOAT8E4M3FN"``, ``ml_dtypes.bfloat16``, ``np.dtype("float16")``.

    Raises ``ValueError`` for a value that names no registry type.
    """
    if isinstance(value, str):
        key = value.strip()
        if key.upper() in _NUMPY:
            return key.upper()
        if key.lower() in _ALIASES:
            return _ALIASES[key.lower()]
    try:
        name = name_of(value)
    except Exception:  # an object NumPy cannot read as a dtype
        name = None
    if name is None:
        known = ", ".join(dtype_label(n) for n in DATA_TYPES)
        raise ValueError(f"{value!r} is not a data type qops knows; known types: {known}")
    return name

