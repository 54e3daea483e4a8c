"""MATRIX_MULTIPLY_INTEGER_TO_FLOAT: the public function, its validation and its plans."""

from __future__ import annotations

import numpy as np

from qops import reference, registry
from qops.backends.contract import Call
from qops.ops import arguments as _args
from qops.ops.common import expand_to_shared_rank
from qops.ops.geometry import matmul_output_shape
from qops.ops.plans import PlanCache
from qops.ops.validation import (
    Desc,
    check_attributes,
    check_patterns,
    check_tensors,
    fail,
    resolve_version,
)
from qops.registry import dtypes as _dtypes
from qops.threads import resolve_threads

__all__ = ["matrix_multiply_integer_to_float", "prepare", "check_values", "PLANS"]

OPERATOR = registry.get("MATRIX_MULTIPLY_INTEGER_TO_FLOAT")

SCALES = ("a_scale", "b_scale")
#: The scales and zero points: one dimension count between them (the page's constraint).
PARAMETERS = ("a_scale", "a_zero_point", "b_scale", "b_zero_point")
VALUE_SLOTS = ("a_scale", "a_zero_point", "b_scale", "b_zero_point", "bias")
_ZERO_POINTS = {"a_zero_point": "a", "b_zero_point": "b"}


def matrix_multiply_integer_to_float(a=None, a_scale=None, a_zero_point=None, b=None, b_scale=None,
                                     b_zero_point=None, bias=None, *, output_dtype=None,
                                     feature_level=None, out=None, n_threads=None):
    """DirectML ``MATRIX_MULTIPLY_INTEGER_TO_FLOAT`` (onnxruntime's MatMulIntegerToFloat).

    Parameters
    ----------
    a : ndarray of int8, uint8, int16, uint16, int32 or uint32, shape (..., M, K)
    a_scale, a_zero_point : number or ndarray
        Per tensor or per row of A: ``(1, 1, M, 1)`` (its trailing dimensions
        at lower ranks).  The zero point has A's type.
    b : ndarray, shape (..., K, N)
        A's type and dimension count; batch dimensions of size 1 broadcast.
    b_scale, b_zero_point : number or ndarray
        Per tensor or per column of B: ``(1, 1, 1, N)``.  The zero point has B's type.
    bias : ndarray of float32 or float16, optional
        The output's shape, or a 1-d array of ``N`` added to every row.
    output_dtype : float32 or float16, optional
        The output type when no scale or bias array gives it (default float32).
        Scales, bias and output share one type.
    feature_level, out, n_threads
        As for :func:`quantized_linear_convolution`.

    Returns
    -------
    ndarray of shape (..., M, N)
        ``float32(float32(acc) * float32(a_scale * b_scale))``, then
        ``+ bias`` (rounded once more), where ``acc`` is the exact sum of
        ``(a - a_zero_point) * (b - b_zero_point)``; a float16 output is that
        float32 value rounded once to float16.

    Raises
    ------
    qops.ValidationError
        For any argument the feature level does not accept, for scales that
        are not finite, and for sums that could reach 2**53 in magnitude
        (K times the largest differences), which float64 cannot hold exactly.

    Examples
    --------
    >>> import numpy as np
    >>> a = np.array([[1, 2], [3, 4]], np.uint8)
    >>> b = np.array([[1, 0], [0, 1]], np.uint8)
    >>> matrix_multiply_integer_to_float(a, 0.5, np.uint8(1), b, 0.25, None)
    array([[0.   , 0.125],
           [0.25 , 0.375]], dtype=float32)
    """
    slots = dict(a=a, a_scale=a_scale, a_zero_point=a_zero_point, b=b, b_scale=b_scale,
                 b_zero_point=b_zero_point, bias=bias)
    return PLANS.run(slots, dict(output_dtype=output_dtype), feature_level, out=out,
                     n_threads=resolve_threads(n_threads))


def _float_type(op, slots, attributes):
    """The scales', bias' and output's one type: ``output_dtype``, else the
    first of the scale and bias arrays', else float32 (numbers take it)."""
    if attributes["output_dtype"] is not None:
        return attributes["output_dtype"]
    for name in ("a_scale", "b_scale", "bias"):
        value = slots.get(name)
        if value is None or _args.is_python_number(value):
            continue
        dtype = _args.as_tensor(op, name, value).desc.dtype
        if dtype in ("FLOAT32", "FLOAT16"):  # any other is refused by the dtype checks
            return dtype
    return "FLOAT32"


def _row_bias(item, output_shape):
    """A 1-d bias of N: the same values added to every row.  It is checked
    as the output's sizes and kept as it is (the implementations broadcast
    it, as DirectML's strides of 0 would)."""
    note = f"expanded from a 1-d array of length {item.desc.shape[0]}"
    desc = Desc(item.desc.dtype, item.desc.dtype_text, tuple(output_shape), note)
    return _args.Slotted(item.array, desc)


def prepare(slots: dict, attributes: dict, feature_level=None, *, out=None) -> Call:
    """Normalize and validate a MATRIX_MULTIPLY_INTEGER_TO_FLOAT call; raise before
    anything runs."""
    op = OPERATOR
    version = resolve_version(op, feature_level)
    attributes = check_attributes(op, version, attributes)
    given = {name: _args.as_tensor(op, name, slots.get(name)) for name in ("a", "b")}
    for name, paired in _ZERO_POINTS.items():
        given[name] = _args.as_parameter(op, name, slots.get(name),
                                         number_dtype=_args.registry_dtype(given[paired]))
    float_type = _float_type(op, slots, attributes)
    for name in ("a_scale", "b_scale", "bias"):
        value = slots.get(name)
        given[name] = _args.as_parameter(op, name, value, number_dtype=float_type)
        if _args.is_python_number(value) and not isinstance(value, complex):
            held = given[name].array.item()
            if held != value and (held == 0 or not np.isfinite(held)):
                fail(op, f"{name} is {value!r}, which {_dtypes.label(_dtypes.to_numpy(float_type))} "
                         "(the scales' type here) cannot hold; give it as an array of that "
                         "type or choose the other type", slot=name, given=value)

    expand_to_shared_rank(op, version, given, PARAMETERS, "a")

    descs = {name: (item.desc if item is not None else None) for name, item in given.items()}
    output_shape = matmul_output_shape(op, descs)
    bias = given["bias"]
    if bias is not None and output_shape and bias.desc.ndim == 1:
        if bias.desc.shape[0] != output_shape[-1]:
            fail(op, f"bias has shape {bias.desc.shape_text()}; a 1-d bias has one value per "
                     f"column, N = {output_shape[-1]} (or give the output's sizes, "
                     f"{tuple(output_shape)})", slot="bias", given=tuple(bias.desc.shape))
        given["bias"] = _row_bias(bias, output_shape)
        descs["bias"] = given["bias"].desc
    descs["output"] = Desc(dtype=float_type, dtype_text=_dtypes.label(_dtypes.to_numpy(float_type)),
                           shape=tuple(output_shape or (descs["a"].shape if descs["a"] else ())))
    check_tensors(op, version, descs)
    output_shape = matmul_output_shape(op, descs, strict=True)
    symbols = {"M": descs["a"].shape[-2], "N": descs["b"].shape[-1]}
    granularity = check_patterns(op, version, descs, symbols, PARAMETERS)

    output_dtype = _dtypes.to_numpy(float_type)
    arrays, complete = _args.arrays_of(given)
    multiplier = None
    if all(arrays[name] is not None for name in SCALES):
        multiplier = multipliers(op, arrays)
    if complete:
        _args.check_out(op, out, output_shape, output_dtype, arrays)
        check_exact_sums(op, arrays)
    return Call(operator=op, version=version, arrays=arrays if complete else None,
                attributes=attributes, output_shape=tuple(output_shape),
                output_dtype=output_dtype, granularity=granularity, checked=multiplier)


def multipliers(op, arrays):
    """The scales finite (and the bias), then ``float32(a_scale * b_scale)``,
    which must be finite too."""
    for name in ("a_scale", "b_scale", "bias"):
        values = arrays[name]
        if values is not None and not np.all(np.isfinite(values)):
            fail(op, f"{name} has NaN or infinite values; it must be finite", slot=name)
    with np.errstate(over="ignore"):
        multiplier = reference.integer_to_float_multipliers(arrays["a_scale"], arrays["b_scale"])
    if not np.all(np.isfinite(multiplier)):
        fail(op, "float32(a_scale * b_scale) overflows float32; choose scales whose product is "
                 "finite", slot="b_scale")
    return multiplier


def check_exact_sums(op, arrays):
    """Sums that could reach 2**53 are refused: float64 would not hold them.
    The implementations check again per call (a planned call's value checks
    see only the parameters)."""
    reason = reference.inexact_sums(arrays["a"], arrays["a_zero_point"], arrays["b"],
                                    arrays["b_zero_point"])
    if reason:
        fail(op, reason, slot="b")


def check_values(template, arrays):
    """A planned call's value checks: the scales, the bias and the multipliers."""
    return multipliers(template.operator, arrays)


# Validation reads the values of A and B only for 32-bit operands' bound
# on the sums, which every implementation checks again per call (as on any
# planned call): a call like the last may take the recent-call shortcut.
PLANS = PlanCache(prepare, check_values, VALUE_SLOTS, recent=True)
