"""4-bit tensors two to a byte, as ONNX stores int4, uint4 and float4e2m1.

ONNX packs element ``2i`` into the low nibble of byte ``i`` and element
``2i + 1`` into its high nibble (elements in C order); an odd count leaves the
last byte's high nibble 0.  ml_dtypes arrays hold one element a byte instead.
:func:`pack_4bit` and :func:`unpack_4bit` convert between the two, and
:class:`Packed4Bit` names packed bytes with their type and shape so that
:func:`qops.dequantize_linear` reads them directly, without an unpacked copy.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from qops.errors import DTypeValidationError, ValidationError
from qops.registry import dtypes as _dtypes

__all__ = ["pack_4bit", "unpack_4bit", "Packed4Bit"]

def _nibble_of_byte(name):
    """The 4-bit code of the value ml_dtypes reads from each byte of an
    unpacked array: an array made by viewing bytes may hold any byte, and
    converting its value back gives the code."""
    dtype = _dtypes.to_numpy(name)
    return _dtypes.byte_values(name).astype(dtype).view(np.uint8) & np.uint8(0x0F)


_NIBBLE_OF_BYTE = {np.dtype(_dtypes.to_numpy(name)): _nibble_of_byte(name)
                   for name in _dtypes.FOUR_BIT}


def _four_bit_dtype(dtype, where):
    try:
        name = _dtypes.parse_dtype(dtype)
    except ValueError as error:
        raise DTypeValidationError(f"{where}: {error}", given=str(dtype)) from None
    if name not in _dtypes.FOUR_BIT:
        raise DTypeValidationError(
            f"{where}: dtype {_dtypes.label(_dtypes.to_numpy(name))} is not a 4-bit type; "
            "int4, uint4 and float4e2m1 are", given=_dtypes.label(_dtypes.to_numpy(name)))
    return _dtypes.to_numpy(name)


def _shape(shape, where):
    if isinstance(shape, numbers.Integral):
        shape = (shape,)
    try:
        shape = tuple(shape)
    except TypeError:
        raise ValidationError(f"{where}: shape must be a tuple of sizes, not {shape!r}",
                              given=shape) from None
    if not all(isinstance(d, numbers.Integral) and not isinstance(d, bool) and d >= 0
               for d in shape):
        raise ValidationError(f"{where}: shape {shape!r} must hold non-negative integers",
                              given=shape)
    return tuple(int(d) for d in shape)


def packed_size(count):
    """Bytes that hold ``count`` 4-bit elements."""
    return (count + 1) // 2


def pack_4bit(x):
    """``x`` (an int4, uint4 or float4e2m1 array) as ONNX stores it: two
    elements a byte, the first in the low nibble, elements in C order.

    Returns
    -------
    ndarray of uint8, shape ``(ceil(x.size / 2),)``
        An odd count leaves the last high nibble 0.
    """
    x = np.asarray(x)
    _four_bit_dtype(x.dtype, "pack_4bit")
    codes = np.ascontiguousarray(x).reshape(-1).view(np.uint8)
    nibbles = _NIBBLE_OF_BYTE[x.dtype][codes]
    if nibbles.size % 2:
        nibbles = np.concatenate([nibbles, np.zeros(1, np.uint8)])
    return nibbles[0::2] | (nibbles[1::2] << np.uint8(4))


def unpack_4bit(raw, dtype, shape):
    """Packed bytes (as :func:`pack_4bit` makes them) back to an ml_dtypes array.

    Parameters
    ----------
    raw : bytes-like or array of uint8
        Exactly ``ceil(prod(shape) / 2)`` bytes (any array shape; read in C order).
    dtype : dtype-like
        int4, uint4 or float4e2m1.
    shape : tuple of int

    Returns
    -------
    ndarray of ``dtype`` and ``shape`` (a new array)
    """
    packed = Packed4Bit(raw, dtype, shape)
    count = packed.size
    nibbles = np.empty(2 * packed.raw.size, np.uint8)
    nibbles[0::2] = packed.raw & np.uint8(0x0F)
    nibbles[1::2] = packed.raw >> np.uint8(4)
    return nibbles[:count].view(packed.dtype).reshape(packed.shape)


class Packed4Bit:
    """A 4-bit tensor in ONNX's packed layout: ``raw`` bytes, ``dtype`` and ``shape``.

    :func:`qops.dequantize_linear` takes one as ``x`` and reads the nibbles
    in place; anything else that needs the values gets them unpacked
    (``np.asarray(packed)`` or :meth:`unpack`).  ``raw`` is kept, not copied.
    """

    __slots__ = ("raw", "dtype", "shape")

    def __init__(self, raw, dtype, shape):
        self.dtype = _four_bit_dtype(dtype, "Packed4Bit")
        self.shape = _shape(shape, "Packed4Bit")
        if isinstance(raw, (bytes, bytearray, memoryview)):
            raw = np.frombuffer(raw, np.uint8)
        raw = np.asarray(raw)
        if raw.dtype != np.uint8:
            raise DTypeValidationError(f"Packed4Bit: raw bytes must be uint8, not {raw.dtype}",
                                       given=str(raw.dtype))
        self.raw = np.ascontiguousarray(raw).reshape(-1)
        expected = packed_size(self.size)
        if self.raw.size != expected:
            raise ValidationError(
                f"Packed4Bit: {self.size} elements of shape {self.shape} take {expected} bytes; "
                f"raw has {self.raw.size}", given=self.raw.size, allowed=(expected,))

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        return math.prod(self.shape)

    @property
    def nbytes(self):
        return self.raw.nbytes

    def unpack(self):
        """The elements as an ml_dtypes array of ``shape``."""
        return unpack_4bit(self.raw, self.dtype, self.shape)

    def __array__(self, dtype=None, copy=None):
        values = self.unpack()
        return values if dtype is None else values.astype(dtype)

    def __repr__(self):
        return (f"Packed4Bit({_dtypes.label(self.dtype)}, shape={self.shape}, "
                f"{self.raw.size} bytes)")
