"""ELEMENT_WISE_QUANTIZED_LINEAR_ADD on the compiled kernels (built with the
quantize kernels, whose flags keep every float32 product and sum rounded on
its own).

Nothing here validates or loops over elements: the output is described as
rows of its trailing dimensions, each row reading A and B either element by
element or as one broadcast value (see ``quantized_add`` in
kernels/_quantize.pxi), and the offsets of the rows are computed with NumPy.
"""

from __future__ import annotations

import math

import numpy as np

from qops.backends.contract import Prepared
from qops.backends.native import variants as _simd
from qops.backends.native.kernels import _quantize_portable as _k
from qops.backends.native.quantize import _raw
from qops.registry import dtypes as _dtypes

#: Elements per row when A and B are both whole: rows are what threads share out.
_ROW = _k.ROW


def _rows(out_shape, a_shape, b_shape):
    """(inner, a_offsets, a_step, b_offsets, b_step): the output as rows of its
    last ``inner`` elements, where each operand is either whole along every
    trailing axis (step 1) or of size 1 along all of them (step 0); the
    offsets of each row's first element in each operand (C order)."""
    total = math.prod(out_shape)
    if tuple(a_shape) == tuple(b_shape) == tuple(out_shape):
        rows = max(-(-total // _ROW), 1)
        offsets = np.arange(rows, dtype=np.intp) * _ROW
        return _ROW, offsets, True, offsets, True
    n = len(out_shape)

    def status(shape, axis):
        # 1: whole, 0: broadcast, None: either (the output's size is 1).
        if out_shape[axis] == 1:
            return None
        return 1 if shape[axis] == out_shape[axis] else 0

    first, kinds = n, [None, None]
    while first > 0:
        axis = first - 1
        here = [status(a_shape, axis), status(b_shape, axis)]
        if any(k is not None and kinds[i] is not None and k != kinds[i]
               for i, k in enumerate(here)):
            break
        kinds = [kinds[i] if here[i] is None else here[i] for i in range(2)]
        first = axis
    inner = math.prod(out_shape[first:])

    def offsets(shape):
        strides = [math.prod(shape[axis + 1:]) for axis in range(n)]
        outer = out_shape[:first]
        result = np.zeros(outer, np.intp)
        for axis in range(first):
            if shape[axis] != 1:
                view = [1] * first
                view[axis] = outer[axis]
                result = result + (np.arange(outer[axis], dtype=np.intp)
                                   * strides[axis]).reshape(view)
        return np.ascontiguousarray(result.reshape(-1))

    return (inner, offsets(a_shape), kinds[0] != 0, offsets(b_shape), kinds[1] != 0)


def _flip_and_zero(array, zero_point):
    """(xor mask, zero point in offset binary) of an 8-bit operand."""
    signed = np.dtype(array.dtype) == np.int8
    zero = 0 if zero_point is None else int(np.asarray(zero_point).reshape(-1)[0])
    return (0x80, zero + 128) if signed else (0, zero)


def prepare_add(call, variant=None):
    """``run(call, out, n_threads)`` for add calls of this signature: the row
    geometry computed once."""
    arrays = call.arrays
    inner, a_offsets, a_step, b_offsets, b_step = _rows(
        call.output_shape, arrays["a"].shape, arrays["b"].shape)
    low, high = _dtypes.INTEGER_RANGES[_dtypes.name_of(call.output_dtype)]
    add = _simd.quantize_module(variant).quantized_add

    def derive(arrays, checked):
        a_flip, a_zero = _flip_and_zero(arrays["a"], arrays["a_zero_point"])
        b_flip, b_zero = _flip_and_zero(arrays["b"], arrays["b_zero_point"])
        zero = arrays["output_zero_point"]
        zero = 0 if zero is None else int(np.asarray(zero).reshape(-1)[0])
        return a_flip, a_zero, b_flip, b_zero, checked[0], checked[1], zero

    def run(call, out, n_threads):
        a_flip, a_zero, b_flip, b_zero, a_multiplier, b_multiplier, zero = call.values
        add(_raw(call.arrays["a"]), a_offsets, a_step, a_flip, a_zero, a_multiplier,
            _raw(call.arrays["b"]), b_offsets, b_step, b_flip, b_zero, b_multiplier,
            inner, zero, low, high, _raw(out), n_threads)

    return Prepared(run, derive)
