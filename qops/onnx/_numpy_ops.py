"""ONNX operators written in vectorized NumPy, where ``onnx.reference``'s
own are loops in Python (MaxPool: seconds for ResNet-50's first pooling) or
call a scalar function per element (Erf).

``implementation(node, attributes, opset)`` returns ``run(arguments) ->
outputs`` for a node these cover, or None, and the session then takes
``onnx.reference``'s.  Each gives what ``onnx.reference`` gives (the tests
compare them).
"""

from __future__ import annotations

import itertools
import math

import numpy as np


def _lowest(dtype):
    """The value a padded MaxPool position takes: below every element."""
    if np.issubdtype(dtype, np.integer):
        return np.iinfo(dtype).min
    return -np.inf


def _pool_geometry(sizes, kernel, strides, dilations, pads, auto_pad, ceil_mode):
    """(begins, ends, output sizes) per spatial axis, as ONNX's pooling
    defines them (ceil mode drops a window that would start in the end
    padding)."""
    rank = len(sizes)
    begins, ends, outputs = [], [], []
    for axis in range(rank):
        size, k, s, d = sizes[axis], kernel[axis], strides[axis], dilations[axis]
        extent = (k - 1) * d + 1
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            out = -(-size // s)
            total = max(0, (out - 1) * s + extent - size)
            small, large = total // 2, total - total // 2
            begin, end = (small, large) if auto_pad == "SAME_UPPER" else (large, small)
        elif auto_pad == "VALID":
            begin = end = 0
            out = (size - extent) // s + 1
        else:
            begin, end = pads[axis], pads[axis + rank]
            span = size + begin + end - extent
            out = (-(-span // s) if ceil_mode else span // s) + 1
            if ceil_mode and (out - 1) * s >= size + begin:
                out -= 1
        begins.append(begin)
        ends.append(end)
        outputs.append(max(out, 0))
    return begins, ends, outputs


def max_pool(node, attributes, opset):
    """MaxPool's first output (a node that asks for Indices is left to onnx.reference)."""
    if len([name for name in node.output if name]) != 1 or node.output[0] == "":
        return None
    kernel = attributes.get("kernel_shape")
    if not kernel:
        return None
    rank = len(kernel)
    strides = tuple(attributes.get("strides") or (1,) * rank)
    dilations = tuple(attributes.get("dilations") or (1,) * rank)
    pads = tuple(attributes.get("pads") or (0,) * (2 * rank))
    auto_pad = attributes.get("auto_pad", "NOTSET") or "NOTSET"
    ceil_mode = bool(attributes.get("ceil_mode", 0))
    if len(strides) != rank or len(dilations) != rank or len(pads) != 2 * rank:
        return None

    def run(arguments):
        x = np.asarray(arguments[0])
        if x.ndim != rank + 2:
            raise ValueError(f"MaxPool: X has {x.ndim} dimensions; kernel_shape has {rank} "
                             "values, so X takes "
                             f"{rank + 2}")
        begins, ends, outputs = _pool_geometry(x.shape[2:], kernel, strides, dilations, pads,
                                               auto_pad, ceil_mode)
        extents = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
        # Pad far enough for every window the output has, the extra with the lowest value.
        needed = [(o - 1) * s + e if o else 0 for o, s, e in zip(outputs, strides, extents)]
        after = [max(end, need - begin - size) for end, need, begin, size
                 in zip(ends, needed, begins, x.shape[2:])]
        padded = np.pad(x, [(0, 0), (0, 0)] + list(zip(begins, after)),
                        constant_values=_lowest(x.dtype))
        if not all(outputs):
            return [np.empty(x.shape[:2] + tuple(outputs), x.dtype)]
        # One strided view per kernel tap, folded by np.maximum: a pass over
        # the output per tap rather than a reduction over scattered windows.
        result = None
        for tap in itertools.product(*(range(k) for k in kernel)):
            view = padded[(slice(None), slice(None)) + tuple(
                slice(t * d, t * d + (o - 1) * s + 1, s)
                for t, d, o, s in zip(tap, dilations, outputs, strides))]
            result = view.copy() if result is None else np.maximum(result, view, out=result)
        return [result]

    return run


def erf(node, attributes, opset):
    """Erf by SciPy's vectorized ``special.erf`` (float32 in, float32 out),
    where SciPy is installed; onnx.reference maps ``math.erf`` over every
    element."""
    try:
        from scipy import special
    except ImportError:
        return None

    def run(arguments):
        x = np.asarray(arguments[0])
        if x.dtype.kind != "f":
            return [np.vectorize(math.erf)(x).astype(x.dtype)]
        return [special.erf(x).astype(x.dtype, copy=False)]

    return run


#: op_type -> implementation(node, attributes, opset), for the default domain.
IMPLEMENTATIONS = {"MaxPool": max_pool, "Erf": erf}
