"""Turning user arguments into arrays and descriptions, before validation.

Each public function hands its slots here one by one.  A slot may be an
array (anything ``np.asarray`` accepts), a :class:`~qops.TensorDesc` (for
:func:`qops.validate`), a Python number (shorthand for a per-tensor scale or
zero point) or ``None``.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import numpy as np

from qops.errors import DTypeValidationError
from qops.packing import PackedBits
from qops.ops.validation import Desc, TensorDesc, fail, shape_text
from qops.registry import dtypes as _dtypes
from qops.registry.schema import Operator


@dataclass
class Slotted:
    """One normalized slot: its array (``None`` for a TensorDesc) and its Desc."""

    array: object
    desc: Desc


def desc_of(array_or_desc, note=""):
    dtype = array_or_desc.dtype
    if isinstance(array_or_desc, TensorDesc):
        try:
            name = _dtypes.parse_dtype(dtype)
            text = _dtypes.label(_dtypes.to_numpy(name))
        except ValueError:
            name, text = None, str(dtype)
        return Desc(dtype=name, dtype_text=text, shape=tuple(array_or_desc.sizes), note=note)
    return Desc(dtype=_dtypes.name_of(dtype), dtype_text=_dtypes.label(dtype),
                shape=tuple(array_or_desc.shape), note=note)


def is_python_number(value):
    return isinstance(value, numbers.Number) and not isinstance(value, np.generic)


def as_tensor(op: Operator, slot: str, value):
    """An input that must be a tensor (not a Python number)."""
    if value is None:
        return None
    if isinstance(value, TensorDesc):
        return Slotted(None, desc_of(value))
    if isinstance(value, PackedBits):  # kept packed: DequantizeLinear's kernels read it as is
        return Slotted(value, desc_of(value))
    if is_python_number(value):
        fail(op, f"{slot} must be an array, not the number {value!r}", slot=slot, given=value)
    try:
        array = np.asarray(value)
    except Exception as error:  # ragged lists, objects NumPy cannot hold
        fail(op, f"{slot} cannot be read as an array: {error}", slot=slot)
    if array.dtype == object:
        fail(op, f"{slot} cannot be read as an array of numbers", slot=slot)
    return Slotted(array, desc_of(array))


def required_tensor(op: Operator, slot: str, value):
    """:func:`as_tensor` of a slot the operator cannot run without: missing,
    it is named here, before anything reads its shape."""
    item = as_tensor(op, slot, value)
    if item is None:
        fail(op, f"{slot} is required ({op.slot(slot).source_name})", slot=slot)
    return item


def as_parameter(op: Operator, slot: str, value, *, number_dtype):
    """A scale, zero point or bias: an array, or a Python number given the
    registry type ``number_dtype`` (``None``: the number's natural type)."""
    if value is None or not is_python_number(value):
        return as_tensor(op, slot, value)
    if isinstance(value, bool):
        fail(op, f"{slot} must be a number, not {value!r}", slot=slot, given=value)
    if number_dtype is None or number_dtype not in _dtypes.DATA_TYPES_SET:
        number_dtype = "FLOAT32" if isinstance(value, float) else "INT32"
    dtype = _dtypes.to_numpy(number_dtype)
    if number_dtype in _dtypes.INTEGER_RANGES:
        if not isinstance(value, numbers.Integral):
            fail(op, f"{slot} is {value!r}; as {_dtypes.label(dtype)} it must be a whole number",
                 slot=slot, given=value)
        low, high = _dtypes.INTEGER_RANGES[number_dtype]
        if not low <= value <= high:
            fail(op, f"{slot} is {value}; {_dtypes.label(dtype)} holds {low} to {high}",
                 slot=slot, given=value, allowed=(low, high))
    elif isinstance(value, complex):
        fail(op, f"{slot} must be real, not {value!r}", slot=slot, given=value)
    # A float past the type's range becomes infinity, which the value
    # checks then reject with the reason; NumPy's overflow warning would
    # only repeat it.
    with np.errstate(over="ignore"):
        array = np.array(value, dtype=dtype)
    return Slotted(array, desc_of(array))


def expand(slotted, shape, note):
    """Reshape a shorthand parameter to its DirectML shape, remembering how."""
    if slotted is None:
        return None
    if slotted.array is None:
        return Slotted(None, Desc(slotted.desc.dtype, slotted.desc.dtype_text, tuple(shape), note))
    return Slotted(slotted.array.reshape(shape), desc_of(slotted.array.reshape(shape), note))


def shorthand_note(slotted):
    """How a 0-d or 1-d parameter will be described once expanded."""
    ndim = slotted.desc.ndim
    if ndim == 0:
        return "expanded from a scalar"
    return f"expanded from a 1-d array of length {slotted.desc.shape[0]}"


def registry_dtype(slotted):
    return None if slotted is None else slotted.desc.dtype


def check_out(op: Operator, out, shape, dtype, inputs):
    """``out=`` must be a writeable, C-contiguous array of exactly the output's
    shape and dtype that shares no memory with an input."""
    if out is None:
        return
    # Every call with out= comes here, compiled and recent ones too: the
    # usual case in one test, each failure then told apart by _explain_out
    # (which lets an ndarray subclass that is otherwise right pass).
    if not (type(out) is np.ndarray and out.shape == shape and out.dtype == dtype
            and out.flags.c_contiguous and out.flags.writeable):
        _explain_out(op, out, shape, dtype)
    for name, array in inputs.items():
        if type(array) is not np.ndarray:
            if isinstance(array, PackedBits):
                array = array.raw
            elif not isinstance(array, np.ndarray):
                continue
        if np.may_share_memory(out, array):
            fail(op, f"out overlaps {name}; pass a separate array", slot="out", given=name)


def _explain_out(op, out, shape, dtype):
    """Raise for an ``out=`` that check_out's one test refused."""
    if not isinstance(out, np.ndarray):
        fail(op, f"out must be a NumPy array, not {type(out).__name__}", slot="out")
    if tuple(out.shape) != tuple(shape):
        fail(op, f"out has shape {shape_text(out.shape)}; the output has shape {shape_text(shape)}",
             slot="out", given=tuple(out.shape), allowed=tuple(shape))
    if out.dtype != dtype:
        fail(op, f"out has dtype {_dtypes.label(out.dtype)}; the output is {_dtypes.label(dtype)}",
             DTypeValidationError, slot="out", given=_dtypes.label(out.dtype))
    if not out.flags.c_contiguous:
        fail(op, "out must be C-contiguous", slot="out")
    if not out.flags.writeable:
        fail(op, "out is read-only", slot="out")


def arrays_of(given):
    """Each slot's array (``None`` where absent or only described), and whether
    every present slot has data, as a call that runs needs."""
    arrays = {name: (item.array if item is not None else None) for name, item in given.items()}
    complete = not any(item is not None and item.array is None for item in given.values())
    return arrays, complete
