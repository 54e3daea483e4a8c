"""QUANTIZED_LINEAR_MATRIX_MULTIPLY: arguments in, validated :class:`Call` out."""

from __future__ import annotations

from qops import registry
from qops.ops.validation import check_attributes, check_patterns, check_tensors, fail, resolve_version, shape_text
from qops.registry.schema import ConstraintKind
from qops.ops import arguments as _args
from qops.ops.common import finish_requantized, output_desc

OPERATOR = registry.get("QUANTIZED_LINEAR_MATRIX_MULTIPLY")

SLOTS = tuple(slot.name for slot in OPERATOR.inputs)
SCALES = ("a_scale", "b_scale", "output_scale")
_ZERO_POINTS = {"a_zero_point": "a", "b_zero_point": "b"}


def _parameter_group(version):
    """The slots the registry says must share one dimension count with the scales."""
    return next(c.slots for c in OPERATOR.constraints_at(version)
                if c.kind is ConstraintKind.SAME_DIMENSION_COUNT and "a_scale" in c.slots)


def prepare(slots: dict, attributes: dict, feature_level=None, *, out=None) -> _args.Call:
    """Normalize and validate a matrix-multiply call; raise before anything runs."""
    op = OPERATOR
    version = resolve_version(op, feature_level)
    attributes = check_attributes(op, version, attributes)

    given = {name: _args.as_tensor(op, name, slots.get(name)) for name in ("a", "b")}
    for name, paired in _ZERO_POINTS.items():
        given[name] = _args.as_parameter(op, name, slots.get(name),
                                         number_dtype=_args.registry_dtype(given[paired]))
    for name in SCALES:
        given[name] = _args.as_parameter(op, name, slots.get(name), number_dtype="FLOAT32")
    output_dtype = attributes["output_dtype"] or _args.registry_dtype(given["a"])
    given["output_zero_point"] = _args.as_parameter(
        op, "output_zero_point", slots.get("output_zero_point"), number_dtype=output_dtype)

    # Shorthand: a number or 0-d array is per-tensor, all ones at the rank the
    # other scales and zero points share (they must share one), else A's rank.
    group = _parameter_group(version)
    explicit = {given[n].desc.ndim for n in group if given.get(n) is not None and given[n].desc.ndim}
    a_rank = given["a"].desc.ndim if given["a"] is not None else 4
    rank = explicit.pop() if len(explicit) == 1 else a_rank
    if not OPERATOR.support(version).tensor("a_scale").allows_dims(rank):
        rank = a_rank  # the explicit rank is wrong at this level; report it, not the shorthand
    for name in group:
        item = given.get(name)
        if item is not None and item.desc.ndim == 0 and rank > 0:
            given[name] = _args.expand(item, (1,) * rank, _args.shorthand_note(item))

    descs = {name: (item.desc if item is not None else None) for name, item in given.items()}
    output_shape = _output_shape(op, descs)
    descs["output"] = output_desc(attributes["output_dtype"], descs["output_zero_point"],
                                  descs["a"], output_shape or (descs["a"].shape if descs["a"] else ()))
    if descs["output"] is None:
        del descs["output"]
    check_tensors(op, version, descs)
    output_shape = _output_shape(op, descs, strict=True)
    symbols = {"M": descs["a"].shape[-2], "N": descs["b"].shape[-1]}
    granularity = check_patterns(op, version, descs, symbols, group)

    return finish_requantized(op, version, given, descs, attributes, output_shape, granularity,
                              SCALES, out)


def _output_shape(op, descs, strict=False):
    """``(*broadcast batch, M, N)``.

    Before the dimension checks (``strict`` false) it answers ``None`` for
    shapes that do not fit, so those checks report first; after them, an
    error.
    """
    a, b = descs["a"], descs["b"]
    if a is None or b is None or a.ndim < 2 or b.ndim < 2 or a.ndim != b.ndim:
        if strict:
            fail(op, f"a {shape_text(a.shape)} and b {shape_text(b.shape)} are not matrices of one rank")
        return None
    if not strict:
        broadcastable = all(l == r or 1 in (l, r) for l, r in zip(a.shape[:-2], b.shape[:-2]))
        if a.shape[-1] != b.shape[-2] or not broadcastable:
            return None
    if a.shape[-1] != b.shape[-2]:
        fail(op, f"a has shape {shape_text(a.shape)} and b {shape_text(b.shape)}: a has K = "
                 f"{a.shape[-1]} columns but b has {b.shape[-2]} rows", slot="b",
             given=b.shape, allowed=a.shape[-1])
    batch = []
    for axis, (left, right) in enumerate(zip(a.shape[:-2], b.shape[:-2])):
        if left != right and 1 not in (left, right):
            fail(op, f"a {shape_text(a.shape)} and b {shape_text(b.shape)} differ in batch dimension "
                     f"{axis} ({left} and {right}); only a size of 1 broadcasts", slot="b",
                 given=b.shape)
        batch.append(max(left, right) if min(left, right) else 0)
    return tuple(batch) + (a.shape[-2], b.shape[-1])
