"""The contract between the front ends and the implementations.

A front end (:mod:`qops.ops`) validates a call into a :class:`Call`; an
:class:`Implementation` registered at the dispatch point
(:mod:`qops.backends.dispatch`) runs it, through a :class:`Prepared` made
once per signature.  Both sides import this module, and nothing else of
each other.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

__all__ = ["Call", "Prepared", "Implementation", "run_prepared"]


@dataclass
class Call:
    """A validated call: what dispatch hands to an implementation.

    ``arrays`` holds every input slot (``None`` where absent) in the shapes
    validation accepted; ``attributes`` every attribute with defaults filled
    in.  ``granularity`` names each scale's and zero point's pattern
    (``"per-tensor"``, ``"per-channel"`` ...).  ``checked`` is what the value
    checks derived on the way (a convolution's or matrix multiply's
    requantization multipliers); ``values`` what the implementation derived
    from the arrays' values for its kernels (see :class:`Prepared`).
    ``packed`` is a compiled operator's cache of its constant operands in
    kernel layouts (``None`` for a plain call).
    """

    operator: object
    version: object
    arrays: dict
    attributes: dict
    output_shape: tuple
    output_dtype: np.dtype
    granularity: dict = field(default_factory=dict)
    packed: object = None
    checked: object = None
    values: object = None


@dataclass(frozen=True)
class Prepared:
    """An implementation made ready for one signature (dtypes, shapes,
    attributes).

    ``derive(arrays, checked)``, when given, turns a call's scale, zero-point
    and bias values into what ``run`` reads (kernel-ready vectors); the plan
    keeps its result for the next call with the same values.
    ``run(call, out, n_threads)`` writes the result into ``out``, reading
    ``call.values``.
    ``bind(call)``, when given, returns ``run_data(*data, out, n_threads)``:
    the same run for calls that differ from ``call`` only in the data of
    their data operands, with what ``run`` reads from the call taken once
    (or ``None`` where it cannot bind).  The data operands are a compiled
    operator's one runtime operand (``call.packed`` holds its constants),
    or every data operand of a plain call in slot order (``call.packed`` is
    ``None``).  A compiled operator's ``run_data`` may carry
    ``run_data.fresh(*data, n_threads)``: the same run into a new output it
    makes itself, or ``None`` (nothing run) for data it does not take as
    they are, which then go to ``run_data``.
    ``bind_channels_last(call, input_channels_last, output_channels_last)``,
    when given (a convolution's), binds a compiled operator's calls on images
    kept channels-last: it returns ``run(image, n_threads)``, which takes the
    image as (N, H, W, C) bytes when ``input_channels_last`` (else as the
    call's (N, C, H, W)) and returns a new output, (N, OH, OW, OC) when
    ``output_channels_last``, or ``None`` (nothing run) for an image it does
    not take as it is; the bind itself returns ``None`` where it cannot.
    ``bind_parameters(call)``, when given (a product with a float output), binds
    a compiled operator's calls that bring A's zero point and scale with A:
    it returns ``run(a, a_zero_point, multiplier, n_threads)``, the run into a
    new output with A's zero point (one integer) and the multipliers (as the
    value checks make them from the call's scales) given per call and
    everything else taken from ``call`` once, or ``None`` where it cannot.
    ``bind_followed(call, following, following_prepared)``, when given (a
    1 x 1 convolution's), binds a compiled operator's calls followed by
    another compiled operator's on their output (``following``: that
    operator's call, its values derived by ``following_prepared``): it
    returns ``run(image, n_threads)``, the two as one run of the kernels
    into a new output of the second (``None``, nothing run, for an image it
    does not take as it is), or ``None`` where the kernels do not run the
    pair.  ``followed_arguments(call, image_dtype)``, when given (a
    depthwise convolution's on its own kernels), is what such a pair reads
    of the second operator's call.
    """

    run: Callable
    derive: Callable = None
    bind: Callable = None
    bind_channels_last: Callable = None
    bind_parameters: Callable = None
    bind_followed: Callable = None
    followed_arguments: Callable = None

    def run_once(self, call, out, n_threads):
        """Derive the call's values (when this derives any), then run it."""
        if self.derive is not None:
            call.values = self.derive(call.arrays, call.checked)
        self.run(call, out, n_threads)


def run_prepared(prepare):
    """``run(call, out, n_threads, **options)`` that prepares the call
    (``prepare(call, **options)``, say a kernel variant) and runs it once."""
    def run(call, out, n_threads, **options):
        prepare(call, **options).run_once(call, out, n_threads)
    return run


@dataclass(frozen=True)
class Implementation:
    """One way to run an operator.

    ``run(call, out, n_threads)`` computes a validated call; ``prepare(call)``,
    when given, does the signature-only part once and returns a
    :class:`Prepared`.  ``fast``, when given, makes a fast path: an object
    whose ``run(...)`` takes the operator function's own arguments and
    returns the result, or ``None`` when the call is not one it takes (the
    caller then validates and dispatches).  ``supports(call)`` says whether
    it takes a validated call.
    """

    operator: str
    name: str
    run: Callable
    supports: Callable
    priority: int
    prepare: Callable = None
    fast: Callable = None


#: Outputs of at least this many bytes start on a cache line, and their
#: memory is reused (qops.backends.native._outputs).
ALIGNED_OUTPUT_BYTES = 4096


def _large_output_function():
    try:  # the compiled buffers; without the kernels, NumPy's arrays aligned by hand
        from qops.backends.native._outputs import empty
    except ImportError:
        return _aligned_numpy_empty
    return empty


def _aligned_numpy_empty(shape, dtype):
    out = np.empty(shape, dtype)
    if not out.ctypes.data % 64:
        return out
    buffer = np.empty(out.nbytes + 64, np.uint8)
    start = -buffer.ctypes.data % 64
    return buffer[start:start + out.nbytes].view(out.dtype).reshape(out.shape)


_large_output = None


def empty_output(shape, dtype):
    """A new output array; from ALIGNED_OUTPUT_BYTES on, its data starts on a
    64-byte cache line and its memory is reused from outputs already freed.

    The kernels' threads write neighbouring blocks of the output: where a
    block's edge falls inside a cache line, the line passes between the
    cores for each row, which on a 128 x 768 product took a tenth of the
    time.  np.empty starts large arrays 16 bytes past a line half the time,
    and maps each one afresh, faulting its pages in on every call, whenever
    malloc's threshold says so (see qops.backends.native._outputs).
    """
    global _large_output
    dtype = np.dtype(dtype)
    if math.prod(shape) * dtype.itemsize < ALIGNED_OUTPUT_BYTES:
        return np.empty(shape, dtype)
    if _large_output is None:
        _large_output = _large_output_function()
    return _large_output(shape, dtype)
