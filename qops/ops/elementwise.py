"""ELEMENT_WISE_QUANTIZED_LINEAR_ADD: the public function, its validation and its plans."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from qops import registry
from qops.backends.contract import Call
from qops.ops import arguments as _args
from qops.ops.common import finish_requantized, output_desc, requantized_slots
from qops.ops.plans import FastPath, PlanCache
from qops.ops.validation import (
    check_attributes,
    check_patterns,
    check_scale_values,
    check_tensors,
    fail,
    resolve_version,
    shape_text,
)
from qops.reference import add_multipliers
from qops.threads import resolve_threads

__all__ = ["element_wise_quantized_linear_add", "prepare_add", "check_add_values", "ADD_PLANS"]

ADD = registry.get("ELEMENT_WISE_QUANTIZED_LINEAR_ADD")

SCALES = ("a_scale", "b_scale", "output_scale")
PARAMETERS = ("a_scale", "a_zero_point", "b_scale", "b_zero_point", "output_scale",
              "output_zero_point")
_ZERO_POINTS = {"a_zero_point": "a", "b_zero_point": "b"}
#: |x - zero point| of 8-bit values is at most 255: a multiplier up to
#: float32's largest over 255 keeps each product finite, so the sum of two
#: is never inf - inf.
_LARGEST_MULTIPLIER = float(np.finfo(np.float32).max) / 255


def element_wise_quantized_linear_add(a=None, a_scale=None, a_zero_point=None, b=None,
                                      b_scale=None, b_zero_point=None, output_scale=None,
                                      output_zero_point=None, *, output_dtype=None,
                                      feature_level=None, out=None, n_threads=None):
    """DirectML ``ELEMENT_WISE_QUANTIZED_LINEAR_ADD`` (onnxruntime's QLinearAdd).

    Parameters
    ----------
    a, b : ndarray of uint8 or int8
        1 to 8 dimensions, the same number for both; a dimension of size 1 in
        one of them broadcasts against the other's (NumPy's rule, as DirectML
        expresses it with a stride of 0).
    a_scale, b_scale, output_scale : number or ndarray of float32
        One element each, positive and finite; as arrays, with the inputs'
        dimension count (a number or a 0-d array is shorthand).
    a_zero_point, b_zero_point : number or ndarray, optional
        One element each, the type of ``a`` and ``b``; default 0.
    output_zero_point : number or ndarray, optional
        One element, the output's type; default 0.
    output_dtype : dtype-like, optional
        The output type when there is no output zero point (default: A's).
    feature_level : str or FeatureLevel, optional
        From ``4_0``, the level that introduced the operator (default: the newest).
    out : ndarray, optional
        Where to write the result: C-contiguous, of the output's shape and type.
    n_threads : int, optional
        Threads to use (default: :func:`qops.get_num_threads`).

    Returns
    -------
    ndarray of the output type, shaped as ``a`` and ``b`` broadcast together
        ``saturate(round_half_even(float32(float32(a - a_zp) * ma)
        + float32(float32(b - b_zp) * mb)) + output_zero_point)`` with
        ``ma = float32(a_scale / output_scale)`` and ``mb = float32(b_scale /
        output_scale)``, each step rounded to float32 (see
        :func:`qops.reference.element_wise_quantized_linear_add`).

    Examples
    --------
    >>> import numpy as np
    >>> a = np.array([[10, 20, 30]], np.uint8)
    >>> b = np.array([[1], [2]], np.uint8)
    >>> element_wise_quantized_linear_add(a=a, a_scale=0.5, b=b, b_scale=1.0, output_scale=1.0)
    array([[ 6, 11, 16],
           [ 7, 12, 17]], dtype=uint8)
    """
    if output_dtype is None and feature_level is None:
        fast = ADD_FAST.get()
        if fast is not None:
            result = fast.run(a, a_scale, a_zero_point, b, b_scale, b_zero_point, output_scale,
                              output_zero_point, out,
                              resolve_threads() if n_threads is None else n_threads)
            if result is not None:
                return result
    slots = dict(a=a, a_scale=a_scale, a_zero_point=a_zero_point, b=b, b_scale=b_scale,
                 b_zero_point=b_zero_point, output_scale=output_scale,
                 output_zero_point=output_zero_point)
    return ADD_PLANS.run(slots, dict(output_dtype=output_dtype), feature_level, out=out,
                         n_threads=resolve_threads(n_threads))


def broadcast_shape(op, a_shape, b_shape):
    """The output's shape: A's and B's dimension by dimension, where a 1 takes
    the other's size; anything else that differs is refused."""
    shape = []
    for axis, (left, right) in enumerate(zip(a_shape, b_shape)):
        if left != right and 1 not in (left, right):
            fail(op, f"a has shape {shape_text(a_shape)} and b {shape_text(b_shape)}; "
                     f"dimension {axis} differs ({left} and {right}) and neither is 1, so they "
                     "do not broadcast", slot="b", given=tuple(b_shape))
        shape.append(right if left == 1 else left)
    return tuple(shape)


def prepare_add(slots: dict, attributes: dict, feature_level=None, *, out=None) -> Call:
    """Normalize and validate an ELEMENT_WISE_QUANTIZED_LINEAR_ADD call; raise
    before anything runs.  ``checked`` holds the two multipliers."""
    op = ADD
    version = resolve_version(op, feature_level)
    attributes = check_attributes(op, version, attributes)
    given = requantized_slots(op, slots, ("a", "b"), _ZERO_POINTS, SCALES,
                              attributes["output_dtype"])
    # A number or 0-d array is one element at A's dimension count.
    rank = given["a"].desc.ndim if given["a"] is not None else 1
    for name in PARAMETERS:
        item = given.get(name)
        if item is not None and item.desc.ndim == 0 and rank > 0:
            given[name] = _args.expand(item, (1,) * rank, _args.shorthand_note(item))

    descs = {name: (item.desc if item is not None else None) for name, item in given.items()}
    descs["output"] = output_desc(attributes["output_dtype"], descs["output_zero_point"],
                                  descs["a"], descs["a"].shape if descs["a"] else ())
    if descs["output"] is None:
        del descs["output"]
    # Dimension counts and types first; then whether A and B broadcast.
    check_tensors(op, version, descs)
    shape = broadcast_shape(op, descs["a"].shape, descs["b"].shape)
    descs["output"] = replace(descs["output"], shape=shape)
    granularity = check_patterns(op, version, descs, {}, PARAMETERS)
    return finish_requantized(op, version, given, descs, attributes, shape, granularity, SCALES,
                              out, multipliers=add_values)


def add_values(op, arrays):
    """The scales positive and finite, and what they derive: the multipliers
    ``(float32(a_scale / output_scale), float32(b_scale / output_scale))``,
    each at most float32's largest / 255 so that no product is infinite."""
    for name in SCALES:
        check_scale_values(op, name, arrays[name])
    with np.errstate(over="ignore"):
        multipliers = add_multipliers(arrays["a_scale"], arrays["b_scale"],
                                      arrays["output_scale"])
    for name, multiplier in zip(("a_scale", "b_scale"), multipliers):
        value = float(multiplier.reshape(-1)[0])
        if not value <= _LARGEST_MULTIPLIER:
            fail(op, f"{name} / output_scale is {value!r} in float32; it must be at most "
                     f"{_LARGEST_MULTIPLIER:.6g} (float32's largest / 255) so that every "
                     "product is finite: choose a larger output_scale", slot="output_scale")
    return tuple(float(m.reshape(-1)[0]) for m in multipliers)


def check_add_values(template, arrays):
    """A planned call's value checks: :func:`add_values`."""
    return add_values(template.operator, arrays)


# The multipliers depend on the scales alone: kept per set of values.
ADD_PLANS = PlanCache(prepare_add, check_add_values, PARAMETERS, recent=True)
#: The lean path of an add of two operands of one shape with scalar parameters.
ADD_FAST = FastPath("ELEMENT_WISE_QUANTIZED_LINEAR_ADD")
