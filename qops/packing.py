"""Sub-byte tensors as ONNX stores them: 4-bit types two to a byte, 2-bit
types four to a byte, 6-bit types four in three bytes.

ONNX lays the elements (in C order) end to end in one stream of bits, ``b``
bits an element, each byte holding the next eight bits lowest first: element
``n`` takes bits ``b * n .. b * n + b - 1`` of the stream, and bit ``m`` of
the stream is bit ``m % 8`` of byte ``m // 8``.  For 4-bit and 2-bit types
every element lies within one byte; a 6-bit element may straddle two.  The
bytes are ``ceil(b * count / 8)``, and the bits past the last element are 0.
ml_dtypes arrays hold one element a byte instead.  :func:`pack_4bit` /
:func:`unpack_4bit`, :func:`pack_2bit` / :func:`unpack_2bit` and
:func:`pack_6bit` / :func:`unpack_6bit` convert between the two, and
:class:`Packed4Bit`, :class:`Packed2Bit` and :class:`Packed6Bit` name packed
bytes with their type and shape so that :func:`qops.dequantize_linear` takes
them directly (4-bit and 2-bit codes are read in place, without an unpacked
copy).
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from qops.errors import DTypeValidationError, ValidationError
from qops.registry import dtypes as _dtypes

__all__ = ["pack_4bit", "unpack_4bit", "Packed4Bit", "pack_2bit", "unpack_2bit", "Packed2Bit",
           "pack_6bit", "unpack_6bit", "Packed6Bit", "PackedBits"]

#: The types of each packed width.
_TYPES = {4: _dtypes.FOUR_BIT, 2: _dtypes.TWO_BIT, 6: _dtypes.SIX_BIT}


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
    return (count * bits + 7) // 8


def _group(bits):
    """``(elements, bytes)`` of the shortest whole run of the bit stream: the
    fewest elements that end on a byte boundary, and the bytes they fill."""
    elements = 8 // math.gcd(8, bits)
    return elements, elements * bits // 8


def _pack(x, bits, where):
    x = np.asarray(x)
    _narrow_dtype(x.dtype, bits, where)
    elements, nbytes = _group(bits)
    codes = _CODE_OF_BYTE[x.dtype][np.ascontiguousarray(x).reshape(-1).view(np.uint8)]
    count = codes.size
    padding = -count % elements
    if padding:
        codes = np.concatenate([codes, np.zeros(padding, np.uint8)])
    # Each group's bits as one word (at most 24 of them), then its bytes.
    codes = codes.reshape(-1, elements).astype(np.uint32)
    words = codes[:, 0].copy()
    for j in range(1, elements):
        words |= codes[:, j] << np.uint32(bits * j)
    packed = np.empty((words.size, nbytes), np.uint8)
    for k in range(nbytes):
        packed[:, k] = (words >> np.uint32(8 * k)) & np.uint32(0xFF)
    return packed.reshape(-1)[:packed_size(count, bits)].copy()


def _unpack(packed):
    bits = packed.BITS
    elements, nbytes = _group(bits)
    raw = packed.raw
    padding = -raw.size % nbytes
    if padding:
        raw = np.concatenate([raw, np.zeros(padding, np.uint8)])
    raw = raw.reshape(-1, nbytes).astype(np.uint32)
    words = raw[:, 0].copy()
    for k in range(1, nbytes):
        words |= raw[:, k] << np.uint32(8 * k)
    mask = np.uint32((1 << bits) - 1)
    codes = np.empty((words.size, elements), np.uint8)
    for j in range(elements):
        codes[:, j] = (words >> np.uint32(bits * j)) & mask
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


def pack_6bit(x):
    """``x`` (a float6e2m3 or float6e3m2 array) as ONNX stores it: four
    elements in three bytes, the elements' 6-bit codes end to end from the
    lowest bit of the first byte, elements in C order.

    Returns
    -------
    ndarray of uint8, shape ``(ceil(6 * x.size / 8),)``
        The bits past the last element are 0.

    Examples
    --------
    >>> import ml_dtypes, numpy as np
    >>> pack_6bit(np.array([1.0, -0.125, 7.5], ml_dtypes.float6_e2m3fn))
    array([ 72, 248,   1], dtype=uint8)
    """
    return _pack(x, 6, "pack_6bit")


def unpack_6bit(raw, dtype, shape):
    """Packed bytes (as :func:`pack_6bit` makes them) back to an ml_dtypes array.

    Parameters
    ----------
    raw : bytes-like or array of uint8
        Exactly ``ceil(6 * prod(shape) / 8)`` bytes (any array shape; read in C order).
    dtype : dtype-like
        float6e2m3 or float6e3m2.
    shape : tuple of int

    Returns
    -------
    ndarray of ``dtype`` and ``shape`` (a new array)
    """
    return _unpack(Packed6Bit(raw, dtype, shape))


class PackedBits:
    """A sub-byte tensor in ONNX's packed layout: ``raw`` bytes, ``dtype`` and
    ``shape`` (see :class:`Packed4Bit`, :class:`Packed2Bit` and :class:`Packed6Bit`).

    :func:`qops.dequantize_linear` takes one as ``x`` (and reads 4-bit and
    2-bit elements in place); anything else that needs the values gets them
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


class Packed6Bit(PackedBits):
    """A float6e2m3 or float6e3m2 tensor packed four elements in three
    bytes, the codes end to end from the lowest bit (:func:`pack_6bit`)."""

    __slots__ = ()
    BITS = 6
