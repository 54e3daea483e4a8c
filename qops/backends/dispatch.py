"""The one dispatch point: a validated call goes to the best implementation.

Implementations register per operator with a priority and a ``supports``
predicate over the validated :class:`~qops.ops.arguments.Call`; the reference
(NumPy) implementation supports everything at the lowest priority, so a call
always has somewhere to go.  Compiled kernels register above it.
"""

from __future__ import annotations

from dataclasses import dataclass
import sys
from typing import Callable

import numpy as np

from qops.registry import dtypes as _dtypes
from qops import reference
from qops.threads import resolve_threads

__all__ = ["Implementation", "register", "implementations", "select", "execute", "prepare",
           "summary"]


@dataclass(frozen=True)
class Implementation:
    """``run(call, out, n_threads)`` writes the result of ``call`` into ``out``.

    ``prepare(call)``, when given, does the part of ``run`` that depends only
    on the call's signature (dtypes, shapes, attributes) and returns a
    ``run`` for every call with that signature.
    """

    operator: str
    name: str
    run: Callable
    supports: Callable
    priority: int
    prepare: Callable = None


_TABLE: dict = {}


def register(operator: str, name: str, run, *, supports=None, priority: int = 0, prepare=None):
    entry = Implementation(operator, name, run, supports or (lambda call: True), priority,
                           prepare)
    entries = [e for e in _TABLE.get(operator, []) if e.name != name] + [entry]
    _TABLE[operator] = sorted(entries, key=lambda e: -e.priority)
    return entry


def implementations(operator: str):
    _load_native()
    return tuple(_TABLE.get(operator, ()))


_native_loaded = False


def _load_native():
    """Register the compiled kernels on first use, so importing qops (and its
    registry) loads nothing compiled; without built kernels the reference runs."""
    global _native_loaded
    if _native_loaded:
        return
    try:
        from qops.backends.native import gemm as _native, variants as _simd
        _simd.selected()
    except ImportError:
        _native_loaded = True
        return
    _native.register(sys.modules[__name__])
    _native_loaded = True


def select(call, *, exclude=()):
    _load_native()
    for entry in _TABLE.get(call.operator.name, ()):
        if entry.name not in exclude and entry.supports(call):
            return entry
    raise LookupError(f"no implementation of {call.operator.name} takes this call")


def execute(call, *, out=None, n_threads=None, implementation=None):
    """Run a validated call; write into ``out`` if given and return the result."""
    threads = resolve_threads(n_threads)
    entry = select(call) if implementation is None else next(
        e for e in implementations(call.operator.name) if e.name == implementation)
    target = np.empty(call.output_shape, call.output_dtype) if out is None else out
    entry.run(call, target, threads)
    return target


def prepare(call):
    """``run(call, out, n_threads)`` for every call with this call's signature:
    the implementation chosen and its signature-only work done once."""
    entry = select(call)
    return entry.prepare(call) if entry.prepare is not None else entry.run


def summary():
    _load_native()
    return {op: [e.name for e in entries] for op, entries in _TABLE.items()}


# -- the reference implementations -------------------------------------------

def _run_convolution(call, out, n_threads):
    keep = ("strides", "dilations", "start_padding", "end_padding", "group_count")
    attributes = {k: call.attributes[k] for k in keep}
    out[...] = reference.quantized_linear_convolution(
        **call.arrays, **attributes, output_dtype=call.output_dtype)


def _run_matmul(call, out, n_threads):
    out[...] = reference.quantized_linear_matrix_multiply(**call.arrays, output_dtype=call.output_dtype)


def _run_dequantize(call, out, n_threads):
    out[...] = reference.dequantize_linear(
        **call.arrays, axis=call.attributes["axis"], block_size=call.attributes["block_size"])


def _run_quantize(call, out, n_threads):
    precision = call.attributes["precision"]
    out[...] = reference.quantize_linear(
        **call.arrays, axis=call.attributes["axis"], block_size=call.attributes["block_size"],
        saturate=call.attributes["saturate"], output_dtype=call.output_dtype,
        precision=_dtypes.to_numpy(precision) if precision else None)


def _run_convolution_integer(call, out, n_threads):
    keep = ("strides", "dilations", "start_padding", "end_padding", "group_count")
    sums = reference.convolution_integer(**call.arrays,
                                         **{k: call.attributes[k] for k in keep})
    out[...] = sums.reshape(out.shape)  # a 1-D convolution ran with height 1


def _run_matmul_integer(call, out, n_threads):
    out[...] = reference.matrix_multiply_integer(**call.arrays)


for _name, _run in (("QUANTIZED_LINEAR_CONVOLUTION", _run_convolution),
                    ("CONVOLUTION_INTEGER", _run_convolution_integer),
                    ("MATRIX_MULTIPLY_INTEGER", _run_matmul_integer),
                    ("QUANTIZED_LINEAR_MATRIX_MULTIPLY", _run_matmul),
                    ("DequantizeLinear", _run_dequantize),
                    ("QuantizeLinear", _run_quantize)):
    register(_name, "reference", _run, priority=0)
