"""onnxruntime's QOperator tables on the compiled kernels (byte lookups and
QLinearSoftmax's rows), QLinearMul of two tensors of one shape, float32
erf, LayerNormalization and Softmax for a model session's Erf,
LayerNormalization and Softmax, and MaxPool of bytes for its MaxPool.

:mod:`qops.onnx._qoperator` states each node's rule in NumPy, makes its
table by that rule, and calls these where the kernels are built (NumPy's
``take`` widens every index to 64 bits first, and a softmax there is a
dozen passes over the tensor); :mod:`qops.onnx._numpy_ops` states erf's
approximation and calls :func:`erf_float32` likewise.  Nothing here validates values: the callers
pass checked arrays; the kernels check only that the arrays cover the output.
"""

from __future__ import annotations

import functools

import numpy as np

from qops.backends.native import variants as _simd
from qops.threads import resolve_threads


def built(variant=None):
    """Whether the compiled kernels here are built (for ``variant``, default
    the selected one's): the callers' NumPy statements run alone otherwise."""
    return _built(variant or _simd.selected())


@functools.lru_cache(maxsize=None)
def _built(variant):
    try:
        module = _simd.quantize_module(variant)
    except ImportError:
        return False
    return all(hasattr(module, name)
               for name in ("lookup_bytes", "mul_bytes", "softmax_rows", "erf_float32",
                            "gelu_float32", "layer_normalization_rows", "max_pool_bytes",
                            "max_pool_channels_last", "softmax_float32_rows"))


def lookup(first, table, second=None, *, n_threads=None, variant=None):
    """``table`` looked up by each raw byte of ``first``: a 256-entry table;
    with ``second`` (of first's shape), by each pair of bytes, entry
    ``(first << 8) | second`` of a 65536-entry table.

    Returns a new array of first's shape and table's (8-bit) dtype.
    """
    module = _simd.quantize_module(variant)
    first = np.asarray(first, order="C")
    if second is not None and np.shape(second) != first.shape:
        raise ValueError(f"lookup: second has shape {np.shape(second)}, first {first.shape}")
    out = np.empty(first.shape, table.dtype)
    module.lookup_bytes(first.view(np.uint8).reshape(-1),
                        None if second is None
                        else np.asarray(second, order="C").view(np.uint8).reshape(-1),
                        np.asarray(table, order="C").view(np.uint8).reshape(-1),
                        out.view(np.uint8).reshape(-1), resolve_threads(n_threads))
    return out


def mul(a, b, zero_points, multiplier, *, n_threads=None, variant=None):
    """QLinearMul of ``a`` and ``b`` (one shape, one 8-bit type) by the rule of
    :func:`qops.onnx._qoperator.qlinear_mul`, computed rather than looked up:
    ``zero_points`` (a's, b's, y's) as integers, ``multiplier`` float32 and
    finite.
    Returns a new array of a's shape and dtype."""
    module = _simd.quantize_module(variant)
    a, b = np.asarray(a, order="C"), np.asarray(b, order="C")
    if b.shape != a.shape or b.dtype != a.dtype:
        raise ValueError(f"mul: b is {b.dtype} {b.shape}, a {a.dtype} {a.shape}")
    out = np.empty(a.shape, a.dtype)
    module.mul_bytes(a.view(np.uint8).reshape(-1), b.view(np.uint8).reshape(-1),
                     a.dtype == np.int8, int(zero_points[0]), int(zero_points[1]),
                     np.float32(multiplier), np.float32(zero_points[2]),
                     out.view(np.uint8).reshape(-1), resolve_threads(n_threads))
    return out


def softmax_rows(rows, table, multiplier, zero_point, *, n_threads=None, variant=None):
    """QLinearSoftmax along each row of the 2-D ``rows`` (uint8 or int8), from
    its float32 ``table`` of exponentials (``table[255 + x - max(x)]``),
    ``multiplier`` (finite: ``floor(float32(1 / y_scale))``) and the output's
    ``zero_point``.  Returns a new array of rows' shape and dtype."""
    module = _simd.quantize_module(variant)
    rows = np.ascontiguousarray(rows)
    out = np.empty(rows.shape, rows.dtype)
    module.softmax_rows(rows.view(np.uint8), rows.dtype == np.int8,
                        np.ascontiguousarray(table, np.float32), float(multiplier),
                        int(zero_point), out.view(np.uint8), resolve_threads(n_threads))
    return out


def erf_float32(x, *, n_threads=None, variant=None):
    """erf of float32 ``x`` by the approximation of
    :func:`qops.onnx._numpy_ops.erf_float32`, with an exponential of the
    kernel's own (include/qops_erf.h): a new float32 array of x's shape."""
    module = _simd.quantize_module(variant)
    x = np.asarray(x, np.float32, order="C")
    out = np.empty(x.shape, np.float32)
    module.erf_float32(x.reshape(-1), out.reshape(-1), resolve_threads(n_threads))
    return out


def layer_normalization(rows, scale, bias, epsilon, *, n_threads=None, variant=None):
    """Each row of the float32 matrix ``rows`` normalized by the steps of
    :func:`qops.onnx._numpy_ops.layer_normalization` (its sums in a fixed
    order of the kernel's own, include/qops_layer_normalization.h), times
    ``scale`` plus ``bias`` (None, or float32 of the rows' length): a new
    float32 array of rows' shape."""
    module = _simd.quantize_module(variant)
    rows = np.ascontiguousarray(rows, np.float32)
    out = np.empty(rows.shape, np.float32)
    module.layer_normalization_rows(rows, np.ascontiguousarray(scale, np.float32).reshape(-1),
                                    None if bias is None
                                    else np.ascontiguousarray(bias, np.float32).reshape(-1),
                                    np.float32(epsilon), out, resolve_threads(n_threads))
    return out


def gelu_float32(x, divisor, addend, factor, *, factor_first=False, n_threads=None,
                 variant=None):
    """``(x * (erf(x / divisor) + addend)) * factor`` of float32 ``x``, each
    step rounded as the nodes Div, Erf (:func:`erf_float32`), Add, Mul and Mul
    round it; with ``factor_first``, ONNX's Gelu function's order, ``(factor *
    x) * (addend + erf(x / divisor))``: a new float32 array of x's shape."""
    module = _simd.quantize_module(variant)
    x = np.asarray(x, np.float32, order="C")
    out = np.empty(x.shape, np.float32)
    module.gelu_float32(x.reshape(-1), out.reshape(-1), np.float32(divisor),
                        np.float32(addend), np.float32(factor), resolve_threads(n_threads),
                        bool(factor_first))
    return out


def max_pool_bytes(x, kernel, strides, dilations, start_padding, outputs, *, n_threads=None,
                   variant=None):
    """The 2-D MaxPool of the uint8 or int8 tensor ``x`` (N x C x H x W): windows
    of ``kernel`` taps ``dilations`` apart, ``strides`` apart, starting
    ``start_padding`` before the image, ``outputs`` (height, width) of them;
    positions outside the image take no part, and a window with none inside
    gives the dtype's lowest value.  A new array of x's dtype."""
    module = _simd.quantize_module(variant)
    x = np.ascontiguousarray(x)
    out = np.empty(x.shape[:2] + tuple(outputs), x.dtype)
    planes = x.shape[0] * x.shape[1]
    module.max_pool_bytes(x.view(np.uint8).reshape(planes, *x.shape[2:]),
                          out.view(np.uint8).reshape(planes, *out.shape[2:]),
                          tuple(kernel), tuple(strides), tuple(dilations),
                          tuple(start_padding), x.dtype == np.int8, resolve_threads(n_threads))
    return out


def max_pool_channels_last(x, kernel, strides, dilations, start_padding, outputs, *,
                           n_threads=None, variant=None):
    """:func:`max_pool_bytes` of a channels-last tensor ``x`` (N x H x W x C):
    a new N x OH x OW x C array of x's dtype, the same values."""
    module = _simd.quantize_module(variant)
    x = np.ascontiguousarray(x)
    out = np.empty((x.shape[0], *outputs, x.shape[3]), x.dtype)
    module.max_pool_channels_last(x.view(np.uint8), out.view(np.uint8), tuple(kernel),
                                  tuple(strides), tuple(dilations), tuple(start_padding),
                                  x.dtype == np.int8, resolve_threads(n_threads))
    return out


def softmax_float32(x, *, divisor=None, multiplier=None, n_threads=None, variant=None):
    """The softmax of float32 ``x`` along its last axis by the steps of
    :func:`qops.onnx._numpy_ops.softmax` (exp, include/qops_exp.h, and the
    sums in a fixed order of the kernel's own), after ``x / divisor`` or
    ``x * multiplier`` (a float32 scalar, rounded as NumPy rounds it) where
    one is given: a new float32 array of x's shape."""
    module = _simd.quantize_module(variant)
    x = np.ascontiguousarray(x, np.float32)
    out = np.empty(x.shape, np.float32)
    if x.ndim == 0:
        raise ValueError("softmax_float32: x is a scalar; it needs an axis")
    rows = x.reshape(-1, x.shape[-1]) if x.shape[-1] else x.reshape(0, 0)
    module.softmax_float32_rows(rows, out.reshape(rows.shape),
                                None if divisor is None else np.float32(divisor),
                                None if multiplier is None else np.float32(multiplier),
                                resolve_threads(n_threads))
    return out
