"""QUANTIZED_LINEAR_MATRIX_MULTIPLY: the public function, its validation and its plans."""

from __future__ import annotations

import numpy as np

from qops import registry
from qops.backends import dispatch
from qops.backends.contract import Call
from qops.ops.common import (
    expand_to_shared_rank,
    finish_requantized,
    output_desc,
    requantization,
    requantized_slots,
)
from qops.ops.geometry import matmul_output_shape
from qops.ops.plans import Binder, FastPath, PlanCache
from qops.ops.validation import check_attributes, check_patterns, check_tensors, resolve_version
from qops.registry.schema import ConstraintKind
from qops.threads import resolve_threads

__all__ = ["quantized_linear_matrix_multiply", "prepare", "check_values", "PLANS", "FAST",
           "BINDER"]

OPERATOR = registry.get("QUANTIZED_LINEAR_MATRIX_MULTIPLY")

SLOTS = tuple(slot.name for slot in OPERATOR.inputs)
SCALES = ("a_scale", "b_scale", "output_scale")
#: The slots whose values a call's value work depends on (the plans' value cache key).
VALUE_SLOTS = ("a_scale", "a_zero_point", "b_scale", "b_zero_point", "output_scale",
               "output_zero_point")
_ZERO_POINTS = {"a_zero_point": "a", "b_zero_point": "b"}


def quantized_linear_matrix_multiply(a=None, a_scale=None, a_zero_point=None, b=None, b_scale=None,
                                     b_zero_point=None, output_scale=None, output_zero_point=None, *,
                                     output_dtype=None, feature_level=None, out=None, n_threads=None):
    """DirectML ``QUANTIZED_LINEAR_MATRIX_MULTIPLY``: batched matrix multiply of quantized data.

    Parameters
    ----------
    a : ndarray of uint8 or int8, shape (..., M, K)
        4 dimensions at feature level 2_1, 2 to 4 from 4_0.
    a_scale, a_zero_point : number or ndarray
        Per tensor or per row of A: ``(1, 1, M, 1)`` (trailing dimensions of it
        at lower ranks).
    b : ndarray of uint8 or int8, shape (..., K, N)
        The same number of dimensions as ``a``; batch dimensions of size 1 broadcast.
    b_scale, b_zero_point : number or ndarray
        Per tensor or per column of B: ``(1, 1, 1, N)``.
    output_scale, output_zero_point : number or ndarray
        Per tensor or per row of the output: ``(1, 1, M, 1)``.  The zero
        point's type is the output's.
    output_dtype : dtype-like, optional
        The output type when there is no output zero point (default: A's).
    feature_level, out, n_threads
        As for :func:`quantized_linear_convolution`.

    Returns
    -------
    ndarray of shape (..., M, N)
        Requantized exactly as for the convolution, with
        ``m = float32(float32(a_scale * b_scale) / output_scale)``.

    Examples
    --------
    >>> import numpy as np
    >>> a = np.array([[1, 2], [3, 4]], np.uint8)
    >>> b = np.array([[1, -1], [1, 1]], np.int8)
    >>> quantized_linear_matrix_multiply(a=a, a_scale=1.0, b=b, b_scale=1.0, output_scale=1.0,
    ...                                  output_dtype=np.int8)
    array([[3, 1],
           [7, 1]], dtype=int8)
    """
    default = output_dtype is None and feature_level is None
    bound = BINDER.bound
    if (bound is not None and default and out is None and type(a) is np.ndarray
            and type(b) is np.ndarray and (a.dtype, a.shape, b.dtype, b.shape) == bound.form):
        kept = bound.parameters
        if (a_scale is kept[0] and a_zero_point is kept[1] and b_scale is kept[2]
                and b_zero_point is kept[3] and output_scale is kept[4]
                and output_zero_point is kept[5] and bound.generation == dispatch.generation()):
            return bound.run(n_threads, a, b)
    fast = FAST.get() if default else None
    if fast is not None:
        result = fast.run(a, a_scale, a_zero_point, b, b_scale, b_zero_point, output_scale,
                          output_zero_point, out, n_threads)
        if result is not None:
            return result
    slots = dict(a=a, a_scale=a_scale, a_zero_point=a_zero_point, b=b, b_scale=b_scale,
                 b_zero_point=b_zero_point, output_scale=output_scale,
                 output_zero_point=output_zero_point)
    result = PLANS.run(slots, dict(output_dtype=output_dtype), feature_level, out=out,
                       n_threads=resolve_threads(n_threads), fast=fast)
    if default and out is None:
        BINDER.bind(PLANS, slots, DATA_SLOTS)
    return result


def _parameter_group(version):
    """The slots the registry says must share one dimension count with the scales."""
    return next(c.slots for c in OPERATOR.constraints_at(version)
                if c.kind is ConstraintKind.SAME_DIMENSION_COUNT and "a_scale" in c.slots)


def prepare(slots: dict, attributes: dict, feature_level=None, *, out=None) -> Call:
    """Normalize and validate a matrix-multiply call; raise before anything runs."""
    op = OPERATOR
    version = resolve_version(op, feature_level)
    attributes = check_attributes(op, version, attributes)

    given = requantized_slots(op, slots, ("a", "b"), _ZERO_POINTS, SCALES,
                              attributes["output_dtype"])

    group = _parameter_group(version)
    expand_to_shared_rank(op, version, given, group, "a")

    descs = {name: (item.desc if item is not None else None) for name, item in given.items()}
    output_shape = matmul_output_shape(op, descs)
    descs["output"] = output_desc(attributes["output_dtype"], descs["output_zero_point"],
                                  descs["a"], output_shape or (descs["a"].shape if descs["a"] else ()))
    if descs["output"] is None:
        del descs["output"]
    check_tensors(op, version, descs)
    output_shape = matmul_output_shape(op, descs, strict=True)
    symbols = {"M": descs["a"].shape[-2], "N": descs["b"].shape[-1]}
    granularity = check_patterns(op, version, descs, symbols, group)

    return finish_requantized(op, version, given, descs, attributes, output_shape, granularity,
                              SCALES, out)


def check_values(template, arrays):
    """A planned call's value checks: scales and their multipliers."""
    return requantization(template.operator, arrays, SCALES)


#: Validated signatures of the plain function, its fast path (small products
#: of the signatures validated before: see qops.backends.native._lean), and
#: its recent form bound to the kernels (a network's repeated call: see Binder).
PLANS = PlanCache(prepare, check_values, VALUE_SLOTS, recent=True)
FAST = FastPath(OPERATOR.name)
BINDER = Binder()
DATA_SLOTS = ("a", "b")
