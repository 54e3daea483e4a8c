"""Compiled operators: constant operands validated and packed once.

DirectML's model of an operator initialized with weights it owns
(``DML_TENSOR_FLAG_OWNED_BY_DML``): :func:`compile` binds a convolution's
filter, filter scale and zero point and bias, or a matrix multiply's B and
its scale and zero point, plus the attributes, and returns a callable taking
the other slots.
"""

from __future__ import annotations

import threading

import numpy as np

from qops import registry
from qops.backends import dispatch
from qops.errors import ValidationError
from qops.ops import convolution, matmul
from qops.ops.geometry import one_d_attributes
from qops.ops.plans import Binder, FastPath, PlanCache, signature_tail
from qops.ops.validation import TensorDesc, check_attributes, fail, resolve_version
from qops.threads import resolve_threads

__all__ = ["compile", "CompiledOperator"]

#: The slots a compiled operator owns, per operator.
CONSTANT_SLOTS = {
    "QUANTIZED_LINEAR_CONVOLUTION": ("filter", "filter_scale", "filter_zero_point", "bias"),
    "QUANTIZED_LINEAR_MATRIX_MULTIPLY": ("b", "b_scale", "b_zero_point"),
}
#: Each compilable operator's front end (its prepare, value checks and value slots).
_FRONT_ENDS = {
    "QUANTIZED_LINEAR_CONVOLUTION": convolution,
    "QUANTIZED_LINEAR_MATRIX_MULTIPLY": matmul,
}


class PackCache:
    """Constant operands in kernel layouts, packed on first use and then only
    read, so that concurrent calls share them without waiting on each other."""

    def __init__(self):
        self._entries = {}
        self._lock = threading.Lock()

    def get(self, key, pack):
        entry = self._entries.get(key)
        if entry is None:
            with self._lock:
                entry = self._entries.get(key)
                if entry is None:
                    entry = self._entries[key] = pack()
        return entry

    def keys(self):
        return self._entries.keys()


class CompiledOperator:
    """A callable bound to constant operands; see :func:`compile`.

    Calls from several threads at once are safe and run in parallel: the
    packed operands are written once, under a lock, and only read afterwards.
    """

    def __init__(self, operator, version, constants, attributes):
        self.operator = operator
        self.feature_level = version
        self._constants = constants
        self._attributes = attributes
        self._packed = PackCache()
        front_end = _FRONT_ENDS[operator.name]
        self._plans = PlanCache(front_end.prepare, front_end.check_values, front_end.VALUE_SLOTS,
                                recent=True)
        self.runtime_slots = tuple(s.name for s in operator.inputs
                                   if s.name not in CONSTANT_SLOTS[operator.name])
        self._runtime_names = frozenset(self.runtime_slots)
        # The operator's fast path (small matrix multiplies, once a call of
        # their signature has been validated), learning this operator's own.
        self._fast = FastPath(operator.name)
        # The attributes and level never change: their part of every call's
        # plan key is made once.
        self._tail = signature_tail(attributes, version)
        # The recent form's kernel run bound to its plan: a network's calls
        # (see Binder); the plans' steps were about 4 of their 7
        # microseconds of Python, and the 7 a tenth of an attention product
        # (12 x 128 x 64 x 128) with AVX-512 VNNI.
        self._binder = Binder()
        self._data_names = self.runtime_slots[:1]

    @property
    def constants(self):
        """The bound constant operands, by slot name."""
        return dict(self._constants)

    @property
    def attributes(self):
        """The bound attributes, by name."""
        return dict(self._attributes)

    def _too_many_positional(self):
        fail(self.operator, f"takes at most {len(self.runtime_slots)} positional slots "
                            f"({', '.join(self.runtime_slots)})")

    def __reduce__(self):
        # Its caches and locks stay behind: a copy (another process, a dask
        # worker) compiles the same constants again and packs them on its
        # first call.
        return (_recompile, (self.operator.name, self.feature_level, self._constants,
                             self._attributes))

    def __repr__(self):
        bound = ", ".join(f"{k}={getattr(v, 'shape', v)}" for k, v in self._constants.items())
        return f"<compiled {self.operator.name} at {self.feature_level}: {bound}>"

    def __call__(self, *args, out=None, n_threads=None, **slots):
        if args:
            if len(args) > len(self.runtime_slots):
                self._too_many_positional()
            for name, value in zip(self.runtime_slots, args):
                if name in slots:
                    fail(self.operator, f"{name} given twice", slot=name)
                slots[name] = value
        if not self._runtime_names.issuperset(slots):
            bound = set(slots) & set(self._constants)
            name = sorted(bound or set(slots) - self._runtime_names)[0]
            why = "is bound at compile time" if bound else "is not a slot of this operator"
            fail(self.operator, f"{name} {why}; the call takes {', '.join(self.runtime_slots)}",
                 slot=name)
        # In slot order, whatever order the keywords came in: the plans key
        # calls by their slots' values in order.
        slots = {name: slots.get(name) for name in self.runtime_slots}
        bound = self._binder.bound
        if bound is not None and out is None:
            data = slots[self.runtime_slots[0]]
            if (type(data) is np.ndarray and data.dtype == bound.form[0]
                    and data.shape == bound.form[1]
                    and all(slots[name] is value
                            for name, value in zip(self.runtime_slots[1:], bound.parameters))
                    and bound.generation == dispatch.generation()):
                return bound.run(n_threads, data)
        return self._planned(slots, out, n_threads, self._fast.get())

    def _planned(self, slots, out, n_threads, fast):
        """The call through the plans (slots in slot order), then its kernel
        run bound for calls like it."""
        result = self._plans.run(slots, self._attributes, self.feature_level, out=out,
                                 n_threads=resolve_threads(n_threads), packed=self._packed,
                                 constants=self._constants, fast=fast, tail=self._tail)
        if out is None:
            self._binder.bind(self._plans, slots, self._data_names, self._packed)
        return result


class CompiledMatrixMultiply(CompiledOperator):
    """A compiled QUANTIZED_LINEAR_MATRIX_MULTIPLY.  Its runtime slots are
    named parameters, so that a small product reaches the operator's fast
    path (qops.backends.native._lean) without gathering keywords into a
    dictionary first: at a few thousand multiply-adds that was a third of
    the call."""

    def __init__(self, operator, version, constants, attributes):
        super().__init__(operator, version, constants, attributes)
        self._b, self._b_scale, self._b_zero_point = (
            constants.get(name) for name in CONSTANT_SLOTS[operator.name])

    def __call__(self, a=None, a_scale=None, a_zero_point=None, output_scale=None,
                 output_zero_point=None, *args, out=None, n_threads=None, **slots):
        if args:
            self._too_many_positional()
        fast = self._fast.get() if not slots else None
        if fast is not None:
            result = fast.run(a, a_scale, a_zero_point, self._b, self._b_scale,
                              self._b_zero_point, output_scale, output_zero_point, out, n_threads)
            if result is not None:
                return result
        bound = self._binder.bound
        if (bound is not None and out is None and not slots and type(a) is np.ndarray
                and a.dtype == bound.form[0] and a.shape == bound.form[1]):
            kept = bound.parameters
            if (a_scale is kept[0] and a_zero_point is kept[1] and output_scale is kept[2]
                    and output_zero_point is kept[3]
                    and bound.generation == dispatch.generation()):
                return bound.run(n_threads, a)
        named = dict(a=a, a_scale=a_scale, a_zero_point=a_zero_point, output_scale=output_scale,
                     output_zero_point=output_zero_point)  # in slot order, as the plans key
        if slots:  # a bound or unknown slot: the general call says which
            return super().__call__(out=out, n_threads=n_threads, **named, **slots)
        return self._planned(named, out, n_threads, fast)


_CLASSES = {"QUANTIZED_LINEAR_MATRIX_MULTIPLY": CompiledMatrixMultiply}


def compile(name, *, feature_level=None, **constants_and_attributes):
    """Bind constant operands and attributes, validate and pack them once.

    Parameters
    ----------
    name : str
        ``"QUANTIZED_LINEAR_CONVOLUTION"`` or ``"QUANTIZED_LINEAR_MATRIX_MULTIPLY"``
        (or the function names).
    feature_level : optional
        As for the operator functions.
    **constants_and_attributes
        Convolution: ``filter``, ``filter_scale``, optional ``filter_zero_point``
        and ``bias``, and any of ``strides``, ``dilations``, ``start_padding``,
        ``end_padding``, ``group_count``, ``output_dtype``.  Matrix multiply:
        ``b``, ``b_scale``, optional ``b_zero_point``, and ``output_dtype``.

    Returns
    -------
    CompiledOperator
        Call it with the remaining slots by keyword (or positionally in slot
        order) plus ``out=`` and ``n_threads=``; its results equal the plain
        function's bit for bit.
    """
    try:
        op = registry.get(name)
    except KeyError as error:
        raise ValidationError(str(error.args[0]), given=name) from None
    if op.name not in CONSTANT_SLOTS:
        fail(op, "only convolution and matrix multiply compile; call the function directly")
    version = resolve_version(op, feature_level)
    constant_names = CONSTANT_SLOTS[op.name]
    slot_names = {s.name for s in op.inputs}
    constants = {k: v for k, v in constants_and_attributes.items() if k in constant_names}
    runtime = sorted(k for k in constants_and_attributes if k in slot_names and k not in constant_names)
    if runtime:
        fail(op, f"{runtime[0]} is given when the operator is called, not compiled", slot=runtime[0])
    attributes = {k: v for k, v in constants_and_attributes.items() if k not in slot_names}
    # A 3-dimensional filter is a 1-D convolution's: one value per attribute.
    one_d = op.name == "QUANTIZED_LINEAR_CONVOLUTION" and np.ndim(constants.get("filter")) == 3
    check_attributes(op, version, one_d_attributes(op, attributes) if one_d else attributes)
    for slot in op.inputs:
        if slot.name in constant_names and not slot.optional and constants.get(slot.name) is None:
            fail(op, f"{slot.name} is required to compile ({slot.source_name})", slot=slot.name)
    # Validate the constants by validating a call whose other slots are the
    # simplest valid ones: every error left is about the constants or attributes.
    _FRONT_ENDS[op.name].prepare(dict(_stand_ins(op, constants, attributes), **constants),
                                 dict(attributes), version)
    frozen = {k: np.array(v, copy=True) if isinstance(v, np.ndarray) else v
              for k, v in constants.items()}
    for array in frozen.values():
        if isinstance(array, np.ndarray):
            array.flags.writeable = False
    return _CLASSES.get(op.name, CompiledOperator)(op, version, frozen, attributes)


def _stand_ins(op, constants, attributes):
    """Descriptions of the runtime slots that fit the constants (shapes only)."""
    if op.name == "QUANTIZED_LINEAR_CONVOLUTION":
        weights = np.asarray(constants.get("filter")) if constants.get("filter") is not None else None
        if weights is None or weights.ndim not in (3, 4):
            return {"input": None, "input_scale": 1.0, "output_scale": 1.0}
        groups = attributes.get("group_count") or 1
        dilations = attributes.get("dilations") or (1, 1)
        sizes = [max(1, int(d) * (int(k) - 1) + 1) for d, k in zip(dilations, weights.shape[2:])]
        stand_in = TensorDesc("uint8", (1, weights.shape[1] * int(groups), *sizes))
        return {"input": stand_in, "input_scale": 1.0, "output_scale": 1.0}
    b = np.asarray(constants.get("b")) if constants.get("b") is not None else None
    if b is None or b.ndim < 2:
        return {"a": None, "a_scale": 1.0, "output_scale": 1.0}
    return {"a": TensorDesc("uint8", (1,) * (b.ndim - 2) + (1, b.shape[-2])), "a_scale": 1.0,
            "output_scale": 1.0}


def _recompile(name, feature_level, constants, attributes):
    """A pickled :class:`CompiledOperator` on arrival."""
    return compile(name, feature_level=feature_level, **constants, **attributes)
