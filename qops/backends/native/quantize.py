"""QuantizeLinear, DequantizeLinear and DynamicQuantizeLinear on the compiled kernels.

Nothing here validates (:mod:`qops.ops` has) and nothing loops over
elements: this layer views arrays as bytes, turns scales and zero points into
float32 vectors (``derive``, kept by the plan for the next call with the same
values), and describes the tensor's shape as the rows the kernels split
between threads (see ``row_geometry`` in kernels/_quantize.pxi).
"""

from __future__ import annotations

import math

import numpy as np

from qops import reference
from qops.backends.contract import Prepared, empty_output, run_prepared
from qops.backends.native import _lean
from qops.backends.native import variants as _simd
from qops.backends.native.kernels import _quantize_portable as _k
from qops.packing import PackedBits
from qops.reference.quantize import division_type
from qops.threads import resolve_threads
from qops.registry import dtypes as _dtypes

_X_KINDS = {
    "INT8": _k.X_INT8, "UINT8": _k.X_UINT8, "INT16": _k.X_INT16, "UINT16": _k.X_UINT16,
    "INT32": _k.X_INT32, "INT4": _k.X_INT4, "UINT4": _k.X_UINT4,
}
_FLOAT_KINDS = {"FLOAT32": _k.F_FLOAT32, "FLOAT16": _k.F_FLOAT16, "BFLOAT16": _k.F_BFLOAT16}
#: QuantizeLinear's x kinds: the floats, and int32 (widened to float32 first).
_QUANTIZE_X_KINDS = dict(_FLOAT_KINDS, INT32=_k.F_INT32)
_Q_KINDS = {
    "INT8": _k.Q_INT8, "UINT8": _k.Q_UINT8, "INT16": _k.Q_INT16, "UINT16": _k.Q_UINT16,
    "INT4": _k.Q_INT4, "UINT4": _k.Q_UINT4, "INT2": _k.Q_INT2, "UINT2": _k.Q_UINT2,
    "FLOAT8E4M3FN": _k.Q_E4M3FN,
    "FLOAT8E4M3FNUZ": _k.Q_E4M3FNUZ, "FLOAT8E5M2": _k.Q_E5M2, "FLOAT8E5M2FNUZ": _k.Q_E5M2FNUZ,
    "FLOAT4E2M1": _k.Q_E2M1, "FLOAT6E2M3": _k.Q_E2M3, "FLOAT6E3M2": _k.Q_E3M2,
}

#: Elements per row of a per-tensor call (the kernels' own), and about how
#: many a row of blocks along the last axis takes: rows are what threads share out.
_ROW = _k.ROW
_BLOCK_ROW = 4096


# float32 of every byte value of the types the kernels read through a table
# (packed codes index the first 2**bits entries: the canonical codes).
_TABLES = {name: _dtypes.byte_values(name)
           for name in _dtypes.FOUR_BIT + _dtypes.TWO_BIT + _dtypes.SIX_BIT
           + tuple(sorted(_dtypes.FLOAT8))}
_NO_TABLE = np.zeros(1, np.float32)


_BYTE = np.dtype(np.uint8)


def _raw(array):
    """A C-contiguous copy or view of ``array``'s elements as flat bytes."""
    if array.flags.c_contiguous:
        # The usual operand, viewed in the fewest steps: a call's fixed cost
        # (uint8 needs no view, whose new array was half of this).
        if array.dtype is _BYTE:
            return array.ravel()
        if array.dtype.itemsize == 1:
            return array.ravel().view(_BYTE)
    array = np.ascontiguousarray(array).reshape(-1)
    if array.dtype.itemsize == 1:
        return array.view(np.uint8)
    return array.view(np.uint16 if array.dtype.itemsize == 2 else np.uint32).view(np.uint8)


def _layout(shape, granularity, axis, block_size):
    """Keyword arguments of the kernels' row geometry for x of ``shape``."""
    size = math.prod(shape)
    if granularity == "per-tensor":
        return dict(segments=True, outer=1, axis_len=size, inner=1, block=min(_ROW, max(size, 1)),
                    group=1, param_outer=0, param_axis=0, vector=False)
    outer = math.prod(shape[:axis])
    length = shape[axis]
    inner = math.prod(shape[axis + 1:])
    if granularity == "per-axis":
        if inner == 1:  # the last axis, in effect: one scale per element of each row
            return dict(segments=False, outer=outer, axis_len=1, inner=length, block=1,
                        group=1, param_outer=0, param_axis=0, vector=True)
        return dict(segments=False, outer=outer, axis_len=length, inner=inner, block=1, group=1,
                    param_outer=0, param_axis=1, vector=False)
    blocks = -(-length // block_size)
    if inner == 1:  # blocks of consecutive elements, a row of them at a time
        return dict(segments=True, outer=outer, axis_len=length, inner=1, block=block_size,
                    group=max(1, _BLOCK_ROW // block_size), param_outer=blocks, param_axis=1,
                    vector=False)
    return dict(segments=False, outer=outer, axis_len=length, inner=inner, block=block_size,
                group=1, param_outer=blocks * inner, param_axis=inner, vector=True)


def _parameter(value, dtype=np.float32):
    return np.ascontiguousarray(np.asarray(value).astype(dtype).reshape(-1))


def _zero(zero_point, quantized_name, size):
    """The zero point as float32 (exact for the integer types); the float
    types' and int32's are 0, which ONNX leaves out."""
    if (zero_point is None or quantized_name not in _dtypes.INTEGER_RANGES
            or quantized_name == "INT32"):
        return np.zeros(size, np.float32)
    return _parameter(zero_point)


def prepare_dequantize(call, variant=None):
    """``run(call, out, n_threads)`` for dequantize calls of this signature:
    the kinds, the row geometry and the kernels chosen once."""
    x = call.arrays["x"]
    packed = x.BITS if isinstance(x, PackedBits) else 0
    # The kernels read 4-bit and 2-bit codes packed; 6-bit codes, which
    # straddle bytes, are unpacked first (one byte each, read through the table).
    unpack_first = packed == 6
    if unpack_first:
        packed = 0
    name = _dtypes.name_of(x.dtype)
    kind = _X_KINDS.get(name, _k.X_TABLE)
    # Packed codes are read through the table where no kind-specific loop reads them.
    table = _TABLES.get(name, _NO_TABLE) if packed or kind == _k.X_TABLE else _NO_TABLE
    layout = _layout(x.shape, call.granularity["x_scale"], call.attributes["axis"],
                     call.attributes["block_size"])
    out_kind = _FLOAT_KINDS[_dtypes.name_of(call.output_dtype)]
    dequantize = _simd.quantize_module(variant).dequantize

    def derive(arrays, checked):
        scale = _parameter(arrays["x_scale"])
        return scale, _zero(arrays["x_zero_point"], name, scale.size)

    def run(call, out, n_threads):
        x = call.arrays["x"]
        scale, zero = call.values
        if unpack_first:
            x = x.unpack()
        dequantize(x.raw if packed else _raw(x), kind, packed, table, scale, zero, **layout,
                   out=_raw(out), out_kind=out_kind, n_threads=n_threads)

    return Prepared(run, derive)


def prepare_quantize(call, variant=None):
    """``run(call, out, n_threads)`` for quantize calls of this signature."""
    arrays = call.arrays
    x = arrays["x"]
    precision = call.attributes["precision"]
    compute = division_type(x.dtype, np.asarray(arrays["y_scale"]).dtype,
                            _dtypes.to_numpy(precision) if precision else None)
    out_name = _dtypes.name_of(call.output_dtype)
    layout = _layout(x.shape, call.granularity["y_scale"], call.attributes["axis"],
                     call.attributes["block_size"])
    kinds = dict(x_kind=_QUANTIZE_X_KINDS[_dtypes.name_of(x.dtype)],
                 compute=_FLOAT_KINDS[_dtypes.name_of(compute)], out_kind=_Q_KINDS[out_name],
                 saturate=bool(call.attributes["saturate"]))
    quantize = _simd.quantize_module(variant).quantize
    zero_point_given = call.arrays["y_zero_point"] is not None

    def derive(arrays, checked):
        # The scale in the division's type, carried as float32 (exact); an
        # int32 scale is made float32 first, as the reference does.
        scale = np.asarray(arrays["y_scale"])
        if scale.dtype.kind in "iu":
            scale = scale.astype(np.float32)
        scale = _parameter(scale.astype(compute))
        return scale, _zero(arrays["y_zero_point"], out_name, scale.size)

    def run(call, out, n_threads):
        scale, zero = call.values
        quantize(_raw(call.arrays["x"]), scale=scale, zero=zero, **layout, out=_raw(out),
                 zero_point_given=zero_point_given, n_threads=n_threads, **kinds)

    return Prepared(run, derive)


# -- a model's lone per-tensor nodes --------------------------------------------------------
#
# A model session's QuantizeLinear of its input and DequantizeLinear of its
# output run once a run, after the rest of the run has left their Python
# path out of the caches: there each layer of calls between the node and
# its kernel costs (docs/performance_notes.rst).  These bind the parameters
# and call the kernels with nothing between.


def bound_quantize_per_tensor(scale, zero_point):
    """``run(x, n_threads)``: QuantizeLinear of float32 ``x`` per tensor, at the
    defaults, with the float32 ``scale`` and the int8 or uint8 ``zero_point``
    (NumPy scalars, or arrays of one value) bound; None where the lean path
    does not take ``x`` (not a C-contiguous float32 array, or empty) or the
    values, and the caller then runs the operator."""
    entry = _simd.quantize_module().lean_entry()

    def run(x, n_threads):
        return _lean.quantize_per_tensor(entry, x, scale, zero_point, None, n_threads)

    return run


def bound_dynamic_quantize():
    """``run(x, n_threads)``: DynamicQuantizeLinear of float32 ``x`` to uint8
    as ``(y, scale, zero_point)`` (the last two NumPy scalars), as the
    operator computes them: the range on the kernels, the scale and zero
    point by the reference's statement, then QuantizeLinear's per-tensor
    kernel; None where ``x`` is not a C-contiguous float32 array of values,
    its range is not finite, or the lean kernel refuses the scale (a range
    inside float32's subnormals, say), and the caller then runs the
    operator, which says what is wrong or follows ONNX's arithmetic."""
    entry = _simd.quantize_module().lean_entry()
    of_range = reference.dynamic_quantize_parameters_of_range

    def run(x, n_threads):
        if not (type(x) is np.ndarray and x.dtype == np.float32 and x.flags.c_contiguous
                and x.size):
            return None
        n_threads = resolve_threads(n_threads)
        least, greatest = float32_range(x, n_threads)
        if not (math.isfinite(least) and math.isfinite(greatest)):
            return None
        scale, zero = of_range(least, greatest, np.uint8)
        y = _lean.quantize_per_tensor(entry, x, scale, zero, None, n_threads)
        return None if y is None else (y, scale, zero)

    return run


def bound_dequantize_per_tensor(scale, zero_point):
    """``run(x, n_threads)``: DequantizeLinear to float32 per tensor of ``x``,
    of ``zero_point``'s type (int8 or uint8) and C-contiguous as the caller
    checked, with the float32 ``scale`` and the ``zero_point`` (one value
    each, checked by the operator) bound."""
    dequantize = _simd.quantize_module().dequantize
    kind = _X_KINDS[_dtypes.name_of(np.asarray(zero_point).dtype)]
    scale, zero = _parameter(scale), _parameter(zero_point)
    out_kind = _FLOAT_KINDS["FLOAT32"]

    def run(x, n_threads):
        out = empty_output(x.shape, np.float32)
        if out.size:
            dequantize(_raw(x), kind, 0, _NO_TABLE, scale, zero,
                       **_layout(x.shape, "per-tensor", 0, 0), out=_raw(out),
                       out_kind=out_kind, n_threads=n_threads)
        return out

    return run


def float32_range(x, n_threads):
    """``(x.min(), x.max())`` of a float32 array, the same values (NaN for
    both where x has a NaN), in one pass on the pool's threads where
    NumPy's are two passes on one; an empty x is NumPy's to refuse."""
    if x.size == 0:
        return x.min(), x.max()
    least, greatest = _simd.quantize_module().range_float32(
        np.ascontiguousarray(x).reshape(-1), resolve_threads(n_threads))
    return np.float32(least), np.float32(greatest)


def prepare_dynamic_quantize(call, variant=None):
    """DynamicQuantizeLinear: the scale and zero point the front end's value
    checks computed (``call.checked``), then QuantizeLinear's per-tensor
    kernel.  A scale QuantizeLinear refuses (a range inside float32's
    subnormals, or past its largest value) follows ONNX's arithmetic through
    the reference instead."""
    x = call.arrays["input"]
    layout = _layout(x.shape, "per-tensor", 1, 0)
    kinds = dict(x_kind=_FLOAT_KINDS[_dtypes.name_of(x.dtype)], compute=_FLOAT_KINDS["FLOAT32"],
                 out_kind=_Q_KINDS[_dtypes.name_of(call.output_dtype)], saturate=True)
    quantize = _simd.quantize_module(variant).quantize

    def run(call, out, n_threads):
        scale, zero_point = call.checked
        if not 0 < scale < np.inf:
            out[...] = reference.dynamic_quantize_linear(call.arrays["input"],
                                                         call.output_dtype)[0]
            return
        quantize(_raw(call.arrays["input"]), scale=np.full(1, scale, np.float32),
                 zero=np.full(1, zero_point, np.float32), **layout, out=_raw(out),
                 zero_point_given=True, n_threads=n_threads, **kinds)

    return Prepared(run)


#: A validated call run once, on a named variant with ``variant=`` (the tests
#: run every variant so).
run_dequantize = run_prepared(prepare_dequantize)
run_quantize = run_prepared(prepare_quantize)
run_dynamic_quantize = run_prepared(prepare_dynamic_quantize)


def dequantize_supported(call):
    arrays = call.arrays
    x = arrays["x"]
    if x.size == 0:
        return False
    # int32 with a zero point: ONNX's reference subtracts in float64 and
    # rounds the exact product to the output type once, which the kernels'
    # float32 product equals for a float32 output only.
    if (arrays["x_zero_point"] is not None and x.dtype == np.int32
            and call.output_dtype != np.float32):
        return False
    return True


def quantize_supported(call):
    return call.arrays["x"].size > 0


# -- ELEMENT_WISE_QUANTIZE_LINEAR / ELEMENT_WISE_DEQUANTIZE_LINEAR ---------------------------
#
# A call whose scale and zero point vary along one axis at most is ONNX's
# QuantizeLinear / DequantizeLinear of that form (the division in float32):
# the same kernels, with the parameters' values along the axis.

_NARROW_INPUTS = ("INT8", "UINT8", "INT16", "UINT16")


def element_wise_supported(call):
    """Per-tensor or per-axis parameters; float32 / float16 input to
    quantize, 8- and 16-bit input to dequantize (int32 and uint32 follow
    ONNX's reference arithmetic on the reference)."""
    x = call.arrays["input"]
    if call.granularity["scale"] == "broadcast" or x.size == 0:
        return False
    name = _dtypes.name_of(x.dtype)
    if call.operator.name == "ELEMENT_WISE_QUANTIZE_LINEAR":
        return name in ("FLOAT32", "FLOAT16")
    return name in _NARROW_INPUTS


def _along(value, length, dtype):
    """A parameter's values along the one axis it may vary on, ``length`` of them."""
    flat = np.asarray(value).reshape(-1).astype(dtype)
    return np.ascontiguousarray(np.broadcast_to(flat, (length,)) if flat.size == 1 else flat)


def _directml_run(call, variant, layout):
    """``run(call, out, n_threads)`` of a DirectML quantize (float ``input``,
    the division in float32) or dequantize call on the QuantizeLinear /
    DequantizeLinear kernels, its parameters as float32 vectors in
    ``call.values`` read by ``layout``'s row geometry."""
    x = call.arrays["input"]
    name = _dtypes.name_of(x.dtype)
    module = _simd.quantize_module(variant)
    if name in _FLOAT_KINDS:
        kinds = dict(x_kind=_FLOAT_KINDS[name], compute=_FLOAT_KINDS["FLOAT32"],
                     out_kind=_Q_KINDS[_dtypes.name_of(call.output_dtype)], saturate=True,
                     zero_point_given=call.arrays["zero_point"] is not None)

        def run(call, out, n_threads):
            scale, zero = call.values
            module.quantize(_raw(call.arrays["input"]), scale=scale, zero=zero, **layout,
                            out=_raw(out), n_threads=n_threads, **kinds)
        return run

    packed = x.BITS if isinstance(x, PackedBits) else 0
    # Packed codes are read through the table of the type's byte values.
    table = _TABLES[name] if packed else _NO_TABLE
    out_kind = _FLOAT_KINDS[_dtypes.name_of(call.output_dtype)]

    def run(call, out, n_threads):
        scale, zero = call.values
        x = call.arrays["input"]
        module.dequantize(x.raw if packed else _raw(x), _X_KINDS[name], packed, table, scale,
                          zero, **layout, out=_raw(out), out_kind=out_kind, n_threads=n_threads)
    return run


def prepare_element_wise(call, variant=None):
    """``run(call, out, n_threads)`` for element-wise quantize and dequantize
    calls of this signature on the QuantizeLinear / DequantizeLinear kernels."""
    x = call.arrays["input"]
    form, axis = call.granularity["scale"], call.attributes["axis"]
    length = 1 if form == "per-tensor" else x.shape[axis]

    def derive(arrays, checked):
        zero = (np.zeros(length, np.float32) if arrays["zero_point"] is None
                else _along(arrays["zero_point"], length, np.float32))
        return _along(arrays["scale"], length, np.float32), zero

    return Prepared(_directml_run(call, variant, _layout(x.shape, form, axis, 0)), derive)


__all__ = ["prepare_dequantize", "prepare_quantize", "prepare_dynamic_quantize",
           "run_dequantize", "run_quantize", "run_dynamic_quantize", "dequantize_supported",
           "quantize_supported", "element_wise_supported", "prepare_element_wise"]


# -- QUANTIZE / DEQUANTIZE (DirectML 6_3) ------------------------------------------------------
#
# Parameters blocked along one axis at most are an ONNX QuantizeLinear /
# DequantizeLinear form with the division in float32: per tensor, per axis,
# or blocked once the parameters are widened to ONNX's blocked shape (x's
# sizes, with the number of blocks along the blocked axis), which is the
# layout the kernels' row geometry reads.

_ONNX_FORMS = ("per-tensor", "per-axis", "blocked")


def blocks_supported(call):
    """The forms ONNX states (not blocks along several axes), on non-empty tensors."""
    return call.granularity["scale"] in _ONNX_FORMS and call.arrays["input"].size > 0


def _onnx_blocked(value, shape, axis):
    """``value`` at ``shape``'s sizes on every axis but ``axis``, where it
    keeps one value per block (ONNX's blocked shape)."""
    value = np.asarray(value)
    target = list(shape)
    target[axis] = value.shape[axis]
    return reference.expand_blocks(value, target)


def prepare_blocks(call, variant=None):
    """``run(call, out, n_threads)`` for QUANTIZE and DEQUANTIZE calls of
    this signature on the QuantizeLinear / DequantizeLinear kernels."""
    x = call.arrays["input"]
    form = call.granularity["scale"]
    axis, block_size = call.attributes["axis"], call.attributes["block_size"]
    shape = tuple(x.shape)

    def flat(value):
        if form == "blocked":
            value = _onnx_blocked(value, shape, axis)
        return _parameter(value)

    def derive(arrays, checked):
        scale = flat(arrays["scale"])
        zero = (np.zeros(scale.size, np.float32) if arrays["zero_point"] is None
                else flat(arrays["zero_point"]))
        return scale, zero

    return Prepared(_directml_run(call, variant, _layout(shape, form, axis, block_size)), derive)


run_blocks = run_prepared(prepare_blocks)

__all__ += ["blocks_supported", "prepare_blocks", "run_blocks"]
