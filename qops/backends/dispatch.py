"""The one dispatch point: a validated call goes to the best implementation.

An operator's implementations register here with a priority and a
``supports`` predicate over the validated :class:`Call`: the reference
(NumPy, :mod:`qops.backends.reference`) supports everything at the lowest
priority, so a call always has somewhere to go; the compiled kernels
(:mod:`qops.backends.native.implementations`) register above it, the lean
per-call paths above them.  Every implementation is listed by
:func:`summary` (and ``qops.show_config()``), can be run by name
(:func:`execute`) and switched off and on (:func:`set_enabled`).

Importing this module loads nothing compiled: the implementations register
on first use.
"""

from __future__ import annotations

import threading

import numpy as np

from qops.backends.contract import Call, Implementation, Prepared, empty_output

__all__ = ["Call", "Implementation", "Prepared", "register", "implementations", "select",
           "execute", "prepare", "fast_path", "set_enabled", "generation", "summary",
           "register_helper", "helper"]


_TABLE: dict = {}
_DISABLED: set = set()
_LOCK = threading.Lock()
# Bumped whenever an implementation is switched on or off, so that fast
# paths made before are made again.
_GENERATION = [0]


def generation():
    return _GENERATION[0]


def _numpy_range(x, n_threads):
    return x.min(), x.max()


#: Helpers the front ends' value checks call, by name: NumPy's unless the
#: compiled kernels register their own on first use.  "float32 range":
#: ``(x.min(), x.max())`` of a float32 array, the same values.
_HELPERS = {"float32 range": _numpy_range}


def register_helper(name: str, function):
    _HELPERS[name] = function


def helper(name: str):
    """The value-check helper ``name`` (see ``_HELPERS``)."""
    _load()
    return _HELPERS[name]


def register(operator: str, name: str, run, *, supports=None, priority: int = 0, prepare=None,
             fast=None):
    entry = Implementation(operator, name, run, supports or (lambda call: True), priority,
                           prepare, fast)
    entries = [e for e in _TABLE.get(operator, []) if e.name != name] + [entry]
    _TABLE[operator] = sorted(entries, key=lambda e: -e.priority)
    return entry


_LOADED = []


def _load():
    """Register the implementations on first use: the reference always, the
    compiled ones when they are built."""
    if _LOADED:
        return
    with _LOCK:
        if _LOADED:
            return
        from qops.backends import reference

        reference.register_all(register)
        try:
            from qops.backends.native import implementations
        except ImportError:
            pass
        else:
            implementations.register_all(register)
            implementations.register_helpers(register_helper)
        _LOADED.append(True)


def implementations(operator: str):
    """Every implementation of ``operator``, best first (disabled ones too)."""
    _load()
    return tuple(_TABLE.get(operator, ()))


def _enabled(entry):
    return (entry.operator, entry.name) not in _DISABLED


def set_enabled(operator: str, name: str, enabled: bool = True):
    """Switch an implementation off (or on again).  The reference of an
    operator cannot be switched off: a call always has somewhere to go.
    Calls already planned keep the implementation they were planned with."""
    if not any(e.name == name for e in implementations(operator)):
        raise LookupError(f"{operator} has no implementation {name!r}")
    if name == "reference" and not enabled:
        raise ValueError("the reference implementation cannot be switched off")
    if enabled:
        _DISABLED.discard((operator, name))
    else:
        _DISABLED.add((operator, name))
    _GENERATION[0] += 1


def select(call, *, exclude=()):
    """The best enabled implementation that takes ``call``."""
    _load()
    for entry in _TABLE.get(call.operator.name, ()):
        if entry.name not in exclude and _enabled(entry) and entry.supports(call):
            return entry
    raise LookupError(f"no implementation of {call.operator.name} takes this call")


def _by_name(operator, name):
    for entry in implementations(operator):
        if entry.name == name:
            return entry
    raise LookupError(f"{operator} has no implementation {name!r}")


def prepare(call, implementation=None) -> Prepared:
    """The chosen (or named) implementation made ready for ``call``'s signature.
    A named one that does not take the call is a ``LookupError``."""
    if implementation is None:
        entry = select(call)
    else:
        entry = _by_name(call.operator.name, implementation)
        if not entry.supports(call):
            raise LookupError(f"{call.operator.name}: the {implementation!r} implementation "
                              "does not take this call")
    return entry.prepare(call) if entry.prepare is not None else Prepared(entry.run)


def execute(call, n_threads, *, out=None, implementation=None):
    """Run a validated call once (derive its values too); write into ``out``
    if given and return the result."""
    target = empty_output(call.output_shape, call.output_dtype) if out is None else out
    prepare(call, implementation).run_once(call, target, n_threads)
    return target


def fast_path(operator: str):
    """A new fast path of ``operator`` from its best enabled implementation
    that has one, or ``None``."""
    for entry in implementations(operator):
        if entry.fast is not None and _enabled(entry):
            return entry.fast()
    return None


def summary():
    """``{operator: [implementation names, best first]}`` (enabled ones)."""
    _load()
    return {op: [e.name for e in entries if _enabled(e)] for op, entries in _TABLE.items()}
