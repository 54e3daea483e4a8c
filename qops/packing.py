"""Sub-byte tensors as ONNX stores them: 4-bit types two to a byte, 2-bit
types four to a byte.

ONNX packs element ``k * i + j`` of a tensor of ``k`` elements a byte into
bits ``b * j .. b * j + b - 1`` of byte ``i`` (``b`` bits an element, the
first element in the lowest bits, elements in C order); a count that is not
a multiple of ``k`` leaves the last byte's high bits 0.  ml_dtypes arrays
hold one element a byte instead.  :func:`pack_4bit` / :func:`unpack_4bit`
and :func:`pack_2bit` / :func:`unpack_2bit` convert between the two, and
:class:`Packed4Bit` and :class:`Packed2Bit` name packed bytes with their
type and shape so that :func:`qops.dequantize_linear` reads them directly,
without an unpacked copy.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from qops.errors import DTypeValidationError, ValidationError
from qops.registry import dtypes as _dtypes

__all__ = ["pack_4bit", "unpack_4bit", "Packed4Bit", "pack_2bit", "unpack_2bit", "Packed2Bit",
           "PackedBits"]

#: The types of each packed width.
_TYPES = {4: _dtypes.FOUR_BIT, 2: _dtypes.TWO_BIT}


def _code_of_byte(name, bits):
    """The ``bits``-bit code of the value ml_dtypes reads from each byte of an
    unpacked array: an array made by viewing bytes may hold any byte, and
    converting its value back gives the code."""
    dtype = _dtypes.to_numpy(name)
    return _dtypes.byte_values(name).astype(dtype).view(np.uint8) & np.uint8((1 << bits) - 1)


_CODE_OF_BYTE = {np.dtype(_dtypes.to_numpy(name)): _code_of_byte(name, bits)
                 for bits, names in _TYPES.items() for name in names}


def _narrow_dtype(dtype, bits, where):
    try:
        name = _dtypes.parse_dtype(dtype)
    except ValueError as error:
        raise DTypeValidationError(f"{where}: {error}", given=str(dtype)) from None
    if name not in _TYPES[bits]:
        names = ", ".join(_dtypes.label(_dtypes.to_numpy(n)) for n in _TYPES[bits])
        raise DTypeValidationError(
            f"{where}: dtype {_dtypes.label(_dtypes.to_numpy(name))} is not a {bits}-bit type; "
            f"{names} are", given=_dtypes.label(_dtypes.to_numpy(name)))
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


def packed_size(count, bits=4):
    """Bytes that hold ``count`` elements of ``bits`` bits."""
    per_byte = 8 // bits
    return (count + per_byte - 1) // per_byte


def _pack(x, bits, where):
    x = np.asarray(x)
    _narrow_dtype(x.dtype, bits, where)
    per_byte = 8 // bits
    codes = _CODE_OF_BYTE[x.dtype][np.ascontiguousarray(x).reshape(-1).view(np.uint8)]
    padding = -codes.size % per_byte
    if padding:
        codes = np.concatenate([codes, np.zeros(padding, np.uint8)])
    codes = codes.reshape(-1, per_byte)
    packed = codes[:, 0].copy()
    for j in range(1, per_byte):
        packed |= codes[:, j] << np.uint8(bits * j)
    return packed


def _unpack(packed):
    bits = packed.BITS
    per_byte = 8 // bits
    mask = np.uint8((1 << bits) - 1)
    codes = np.empty((packed.raw.size, per_byte), np.uint8)
    for j in range(per_byte):
        codes[:, j] = (packed.raw >> np.uint8(bits * j)) & mask
    return codes.reshape(-1)[:packed.size].view(packed.dtype).reshape(packed.shape)


def pack_4bit(x):
    """``x`` (an int4, uint4 or float4e2m1 array) as ONNX stores it: two
    elements a byte, the first in the low nibble, elements in C order.

    Returns
    -------
    ndarray of uint8, shape ``(ceil(x.size / 2),)``
        An odd count leaves the last high nibble 0.
    """
    return _pack(x, 4, "pack_4bit")


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
    return _unpack(Packed4Bit(raw, dtype, shape))


def pack_2bit(x):
    """``x`` (an int2 or uint2 array) as ONNX stores it: four elements a
    byte, the first in the two lowest bits, elements in C order.

    Returns
    -------
    ndarray of uint8, shape ``(ceil(x.size / 4),)``
        A count that is not a multiple of four leaves the last byte's high bits 0.

    Examples
    --------
    >>> import ml_dtypes, numpy as np
    >>> pack_2bit(np.array([1, -1, 0, -2, 1], ml_dtypes.int2))
    array([141,   1], dtype=uint8)
    """
    return _pack(x, 2, "pack_2bit")


def unpack_2bit(raw, dtype, shape):
    """Packed bytes (as :func:`pack_2bit` makes them) back to an ml_dtypes array.

    Parameters
    ----------
    raw : bytes-like or array of uint8
        Exactly ``ceil(prod(shape) / 4)`` bytes (any array shape; read in C order).
    dtype : dtype-like
        int2 or uint2.
    shape : tuple of int

    Returns
    -------
    ndarray of ``dtype`` and ``shape`` (a new array)
    """
    return _unpack(Packed2Bit(raw, dtype, shape))


class PackedBits:
    """A sub-byte tensor in ONNX's packed layout: ``raw`` bytes, ``dtype`` and
    ``shape`` (see :class:`Packed4Bit` and :class:`Packed2Bit`).

    :func:`qops.dequantize_linear` takes one as ``x`` and reads the packed
    elements in place; anything else that needs the values gets them
    unpacked (``np.asarray(packed)`` or :meth:`unpack`).  ``raw`` is kept,
    not copied.
    """

    __slots__ = ("raw", "dtype", "shape")
    #: Bits an element.
    BITS = 0

    def __init__(self, raw, dtype, shape):
        kind = type(self).__name__
        self.dtype = _narrow_dtype(dtype, self.BITS, kind)
        self.shape = _shape(shape, kind)
        if isinstance(raw, (bytes, bytearray, memoryview)):
            raw = np.frombuffer(raw, np.uint8)
        raw = np.asarray(raw)
        if raw.dtype != np.uint8:
            raise DTypeValidationError(f"{kind}: raw bytes must be uint8, not {raw.dtype}",
                                       given=str(raw.dtype))
        self.raw = np.ascontiguousarray(raw).reshape(-1)
        expected = packed_size(self.size, self.BITS)
        if self.raw.size != expected:
            raise ValidationError(
                f"{kind}: {self.size} elements of shape {self.shape} take {expected} bytes; "
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
        return _unpack(self)

    def __array__(self, dtype=None, copy=None):
        values = self.unpack()
        return values if dtype is None else values.astype(dtype)

    def __repr__(self):
        return (f"{type(self).__name__}({_dtypes.label(self.dtype)}, shape={self.shape}, "
                f"{self.raw.size} bytes)")


class Packed4Bit(PackedBits):
    """An int4, uint4 or float4e2m1 tensor packed two elements a byte, the
    first in the low nibble (:func:`pack_4bit`)."""

    __slots__ = ()
    BITS = 4


class Packed2Bit(PackedBits):
    """An int2 or uint2 tensor packed four elements a byte, the first in the
    two lowest bits (:func:`pack_2bit`)."""

    __slots__ = ()
    BITS = 2
