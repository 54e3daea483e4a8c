"""Plans: what validating a call concluded, kept for the next call like it.

Everything validation checks except scale values and ``out=`` depends only
on the call's signature: the operator, the feature level, each slot's
dtype and shape (or absence), the attributes.  A :class:`Plan` records, for
one signature, the validated call's layout and the implementation prepared
for it; a later call with the same signature checks only the values (scales
and their requantization multiplier, ``out=``) and runs.  A call whose
signature cannot be told without looking at values (Python integers, lists,
unhashable attributes) takes the full path.
"""

from __future__ import annotations

import dataclasses
import threading

import numpy as np

from qops.backends import dispatch as _dispatch
from qops.ops.packing import Packed4Bit
from qops.registry import FeatureLevel
from qops.ops import arguments as _args
from qops.ops.common import check_multiplier, check_scale_values

#: Plans kept per cache; an overflowing cache starts again.
CAPACITY = 256


def lean_cache():
    """A new cache of lean matrix-multiply signatures, or ``None`` when the
    compiled lean path is not built."""
    try:
        from qops.backends.native._lean import LeanCache
    except ImportError:
        return None
    return LeanCache()


def _lean_plan(slots, call):
    """The lean path's plan for a validated matrix multiply, when it runs one."""
    if call.operator.name != "QUANTIZED_LINEAR_MATRIX_MULTIPLY":
        return None
    from qops.backends.native import _lean

    return _lean.lean_plan(slots, call)

class _Unkeyable(Exception):
    """A value whose validation cannot be told from its type alone."""


def _slot_signature(value):
    kind = type(value)
    if kind is np.ndarray or isinstance(value, np.generic):
        return value.dtype, value.shape
    if value is None:
        return None
    if kind is float:
        # A float only ever passes as a scale, whose value is checked per call.
        return float
    raise _Unkeyable


def _attribute_signature(value):
    if value is None or type(value) in (int, str):
        return value
    if type(value) is bool:  # kept apart from the integers 0 and 1
        return (bool, value)
    if type(value) in (tuple, list) and all(type(item) is int for item in value):
        return tuple(value)
    if isinstance(value, FeatureLevel):
        return value
    if isinstance(value, (type, np.dtype)):
        return np.dtype(value)
    raise _Unkeyable


def signature(slots, attributes, feature_level):
    """A hashable key, or ``None`` when the call must take the full path."""
    try:
        return (_attribute_signature(feature_level), *map(_slot_signature, slots.values()),
                *map(_attribute_signature, attributes.values()))
    except (_Unkeyable, TypeError):
        return None


@dataclasses.dataclass(frozen=True)
class Plan:
    """One validated signature: each slot's array layout, the scale slots to
    check per call, and the prepared implementation.  ``check_values``, when
    given, replaces the scale and multiplier checks: it is called with the
    template and the call's arrays and checks every value that can fail."""

    template: _args.Call
    layout: tuple     # (slot, dtype, shape) for every slot, shape None when absent
    scales: tuple
    run: object       # run(call, out, n_threads)
    lean: object = None  # the lean path's form of this signature, if it has one
    # The scale values last found valid (their bytes): the same values pass
    # again without the checks, which cost more than the comparison when a
    # scale is per channel.  One entry, replaced whole: safe across threads.
    passed: list = dataclasses.field(default_factory=lambda: [None], compare=False)
    check_values: object = None

    def __call__(self, slots, out, n_threads, packed=None):
        arrays = {}
        for name, dtype, shape in self.layout:
            if shape is None:
                arrays[name] = None
                continue
            value = slots.get(name)
            if isinstance(value, Packed4Bit):  # read packed by the kernels
                arrays[name] = value
                continue
            value = np.asarray(value, dtype)
            arrays[name] = value if value.shape == shape else value.reshape(shape)
        operator = self.template.operator
        if self.check_values is not None:
            self.check_values(self.template, arrays)
        else:
            scale_bytes = tuple(arrays[name].tobytes() for name in self.scales)
            if scale_bytes != self.passed[0]:
                for name in self.scales:
                    check_scale_values(operator, name, arrays[name])
                check_multiplier(operator, *(arrays[name] for name in self.scales), self.scales)
                self.passed[0] = scale_bytes
        template = self.template
        call = _args.Call(operator, template.version, arrays, template.attributes,
                          template.output_shape, template.output_dtype, template.granularity,
                          packed)
        if out is None:
            out = np.empty(call.output_shape, call.output_dtype)
        else:
            _args.check_out(operator, out, call.output_shape, call.output_dtype, arrays)
        self.run(call, out, n_threads)
        return out


class PlanCache:
    """Plans by signature, for one operator (and one compiled operator's constants)."""

    def __init__(self, prepare, scales, check_values=None):
        self._prepare = prepare
        self._scales = scales
        self._check_values = check_values
        self._plans = {}
        self._lock = threading.Lock()

    def run(self, slots, attributes, feature_level, *, out, n_threads, packed=None,
            constants=None, lean=None):
        """Validate (fully the first time a signature is seen) and run.

        ``constants`` are slots fixed for this cache (a compiled operator's);
        they are validated with the first call and not part of the key.
        ``lean`` (a :class:`qops.backends.native._lean.LeanCache`) learns the signatures
        its path can run, so that later calls like this one take it.
        """
        key = signature(slots, attributes, feature_level)
        plan = self._plans.get(key) if key is not None else None
        every_slot = dict(slots, **constants) if constants else slots
        if plan is None:
            call = self._prepare(every_slot, dict(attributes), feature_level, out=out)
            call.packed = packed
            plan = self._plan(call, every_slot if lean is not None and key is not None else None)
            if key is not None:
                with self._lock:
                    if len(self._plans) >= CAPACITY:
                        self._plans.clear()
                    self._plans[key] = plan
        result = plan(every_slot, out, n_threads, packed)
        if lean is not None and plan.lean is not None:
            lean.add(plan.lean)  # after a successful run: only calls that pass are learnt
        return result

    def _plan(self, call, slots=None):
        layout = tuple((name, None if array is None else array.dtype,
                        None if array is None else array.shape)
                       for name, array in call.arrays.items())
        template = dataclasses.replace(call, arrays=None, packed=None)
        return Plan(template=template, layout=layout, scales=self._scales,
                    run=_dispatch.prepare(call), check_values=self._check_values,
                    lean=None if slots is None else _lean_plan(slots, call))

    def clear(self):
        self._plans.clear()

    def __len__(self):
        return len(self._plans)
