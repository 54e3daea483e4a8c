"""Table-driven validation: every check that reads the registry.

The operator modules (:mod:`qops.ops`) turn user arguments into
:class:`Desc` objects (an element type and a shape), then call the checks
here in order: the version, the attributes, each slot's dimension count and
data type, the cross-slot constraints and the expected shapes.  Messages
follow one pattern::

    OPERATOR: <slot> has <what was given>; <version> supports <what it allows>
    (<what was given> from <first version that allows it>)
"""

from __future__ import annotations

import math
import operator as _operator
from dataclasses import dataclass

import numpy as np

from qops.errors import (
    DTypeUnsupportedError,
    DTypeValidationError,
    UnsupportedError,
    ValidationError,
    fail,  # noqa: F401 - the operator-prefixed error, re-exported
)
from qops.registry import NEWEST_FEATURE_LEVEL, NEWEST_OPSET
from qops.registry import dtypes as _dtypes
from qops.registry.schema import (
    ConstraintKind,
    FeatureLevel,
    Operator,
    Opset,
    SOURCES,
    SlotKind,
    dtype_label,
)

__all__ = ["TensorDesc", "Desc", "fail", "resolve_version", "check_attributes",
           "check_tensors", "check_slot", "check_constraints", "check_patterns", "plural"]


@dataclass(frozen=True)
class TensorDesc:
    """A tensor described by its element type and sizes, without data.

    Pass it to :func:`qops.validate` in place of an array to check a call
    that has no data yet (DirectML's own ``DML_TENSOR_DESC``).

    Parameters
    ----------
    dtype : dtype-like or str
        ``np.int8``, ``"uint8"``, ``"float8e4m3fn"``, ``ml_dtypes.int4`` ...
    sizes : sequence of int
        The shape; ``()`` for a scalar.
    """

    dtype: object
    sizes: tuple

    def __post_init__(self):
        sizes = self.sizes
        if isinstance(sizes, (int, np.integer)):
            sizes = (sizes,)
        try:
            sizes = tuple(_operator.index(s) for s in sizes)
        except TypeError:
            raise ValidationError(f"TensorDesc sizes must be integers, not {self.sizes!r}") from None
        if any(s < 0 for s in sizes):
            raise ValidationError(f"TensorDesc sizes must not be negative: {sizes}")
        object.__setattr__(self, "sizes", sizes)

    @property
    def shape(self):
        return self.sizes

    @property
    def ndim(self):
        return len(self.sizes)


@dataclass(frozen=True)
class Desc:
    """What validation knows of one slot: registry type name, shape, how it was made.

    ``dtype`` is ``None`` for a NumPy type the registry has no name for;
    ``dtype_text`` then still names it.  ``note`` says how shorthand was
    expanded (``"expanded from a scalar"``), for messages.
    """

    dtype: object
    dtype_text: str
    shape: tuple
    note: str = ""

    @property
    def ndim(self):
        return len(self.shape)

    def shape_text(self):
        text = shape_text(self.shape)
        return f"{text} ({self.note})" if self.note else text


def shape_text(shape):
    return "(" + ", ".join(str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"


def plural(count, word):
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def resolve_version(op: Operator, feature_level=None, opset=None):
    """The feature level or opset a call is checked against.

    ``None`` means the newest the registry knows.  A DirectML operator takes
    ``feature_level`` only, an ONNX operator ``opset`` only.
    """
    if op.source == "DirectML":
        if opset is not None:
            fail(op, f"opset={opset!r} given; a DirectML operator takes feature_level", slot="opset")
        if feature_level is None:
            version = NEWEST_FEATURE_LEVEL
        else:
            try:
                version = FeatureLevel.parse(feature_level)
            except ValueError as error:
                fail(op, str(error), slot="feature_level", given=feature_level)
    else:
        if feature_level is not None:
            fail(op, f"feature_level={feature_level!r} given; an {op.source} operator takes opset",
                 slot="feature_level")
        domain = SOURCES[op.source]
        if opset is None:
            version = NEWEST_OPSET if not domain else op.versions[-1].version
        else:
            if isinstance(opset, Opset) and opset.domain == domain:
                version = opset
            elif isinstance(opset, (int, np.integer)) and not isinstance(opset, bool) and opset >= 1:
                version = Opset(int(opset), domain)
            else:
                fail(op, f"opset must be a positive integer, not {opset!r}", slot="opset", given=opset)
    # A contrib domain's versions are its table's alone; the default domain's
    # may run past the tables.
    if isinstance(version, Opset) and not version.domain and NEWEST_OPSET < version:
        in_effect = _version_in_effect(op.name, version.number)
        if in_effect is None:
            fail(op, f"{version} is newer than the newest opset qops describes "
                     f"({NEWEST_OPSET.number}); its type constraints may differ",
                 UnsupportedError, slot="opset", given=version)
        row = op.support(Opset(in_effect))
        if row is None or row.version.number != in_effect:
            fail(op, f"{version} puts {op.name} at its version {in_effect}, which qops does not "
                     f"describe (the newest it knows: {op.versions[-1].version.number})",
                 UnsupportedError, slot="opset", given=version)
        version = Opset(in_effect)
    if op.support(version) is None:
        fail(op, f"introduced in {op.introduced}; {version} was requested",
             UnsupportedError, given=version, first_version=op.introduced)
    return version


def _version_in_effect(name, opset):
    """The version of ONNX operator ``name`` in effect at ``opset`` as the
    installed onnx states it (an opset past qops' tables may keep an
    operator's last version), or None: no onnx, or an opset newer than the
    installed onnx's own newest, of which it knows no more than qops."""
    try:
        from onnx import defs
    except ImportError:
        return None
    try:
        if opset > defs.onnx_opset_version():
            return None
        return defs.get_schema(name, opset, "").since_version
    except Exception:  # noqa: BLE001 - any failure: nothing is known
        return None


def _is_default(attribute, value):
    """Whether ``value`` is the attribute's default; anything odd is not."""
    if value is None:
        return True
    try:
        if attribute.kind == "ints":
            return tuple(int(v) for v in value) == tuple(attribute.default)
        return bool(value == attribute.default)
    except (TypeError, ValueError):
        return False


def check_attributes(op: Operator, version, attributes: dict) -> dict:
    """Check attribute availability at ``version`` and their values.

    Returns the attributes with defaults filled in (``ints`` as tuples).
    Attributes a version does not have are accepted only at their default.
    """
    support = op.support(version)
    known = {a.name for a in op.attributes}
    unknown = sorted(set(attributes) - known)
    if unknown:
        fail(op, f"unknown argument {unknown[0]!r}; {op.name} takes "
                 + ", ".join(a.name for a in op.attributes), slot=unknown[0])
    result = {}
    for attribute in op.attributes:
        value = attributes.get(attribute.name)
        if attribute.name not in support.attributes:
            if not _is_default(attribute, value):
                first = op.first_version(lambda row, n=attribute.name: n in row.attributes, after=version)
                since = f" ({attribute.name} from {first})" if first else ""
                fail(op, f"{attribute.name}={value!r} given; {version} has no {attribute.name}{since}",
                     UnsupportedError, slot=attribute.name, given=value, first_version=first)
            result[attribute.name] = attribute.default
            continue
        result[attribute.name] = _check_attribute_value(op, attribute, value)
    return result


def _as_int(op, attribute, value):
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        fail(op, f"{attribute.name} must be an integer, not {value!r}", slot=attribute.name, given=value)
    return int(value)


def _check_attribute_value(op, attribute, value):
    if value is None:
        return attribute.default
    if attribute.kind == "bool":
        if not isinstance(value, (bool, np.bool_, int, np.integer)) or int(value) not in (0, 1):
            fail(op, f"{attribute.name} must be True or False, not {value!r}", slot=attribute.name,
                 given=value)
        return bool(value)
    if attribute.kind == "dtype":
        try:
            name = _dtypes.parse_dtype(value)
        except ValueError as error:
            fail(op, f"{attribute.name}: {error}", DTypeValidationError, slot=attribute.name, given=value)
        if attribute.choices and name not in attribute.choices:
            allowed = ", ".join(dtype_label(c) for c in attribute.choices)
            fail(op, f"{attribute.name} is {dtype_label(name)}; it must be one of {allowed}",
                 DTypeValidationError, slot=attribute.name, given=dtype_label(name),
                 allowed=tuple(dtype_label(c) for c in attribute.choices))
        return name
    if attribute.kind == "ints":
        if isinstance(value, np.ndarray) and value.ndim == 1:
            value = value.tolist()
        if not isinstance(value, (list, tuple)):
            fail(op, f"{attribute.name} takes a list or tuple of one integer per spatial dimension, "
                     f"not {value!r}", slot=attribute.name, given=value)
        values = tuple(value)
        values = tuple(_as_int(op, attribute, v) for v in values)
        expected = len(attribute.default)
        if len(values) != expected:
            fail(op, f"{attribute.name} has {plural(len(values), 'value')}; DimensionCount is {expected}, "
                     f"so it takes {expected}", slot=attribute.name, given=values)
        for v in values:
            _check_bounds(op, attribute, v)
        return values
    number = _as_int(op, attribute, value)
    _check_bounds(op, attribute, number)
    return number


def _check_bounds(op, attribute, value):
    if attribute.minimum is not None and value < attribute.minimum:
        fail(op, f"{attribute.name} has {value}; it must be at least {attribute.minimum}",
             slot=attribute.name, given=value)
    if attribute.maximum is not None and value > attribute.maximum:
        fail(op, f"{attribute.name} has {value}; it must be at most {attribute.maximum}",
             slot=attribute.name, given=value)
    if attribute.choices and value not in attribute.choices:
        allowed = ", ".join(str(c) for c in attribute.choices)
        fail(op, f"{attribute.name} is {value}; only {allowed} is supported",
             UnsupportedError, slot=attribute.name, given=value, allowed=attribute.choices)


def _dims_phrase(ndim):
    return plural(ndim, "dimension")


def check_tensors(op: Operator, version, descs: dict):
    """Per-slot dimension counts and data types, then the cross-slot constraints.

    ``descs`` maps slot names to :class:`Desc` or ``None`` (absent).  The
    output slot is checked too when it is present.
    """
    row = op.support(version)
    for slot in op.slots:
        desc = descs.get(slot.name)
        if desc is None:
            if slot.kind is SlotKind.INPUT:
                fail(op, f"{slot.name} is required ({slot.source_name})", slot=slot.name)
            if not slot.is_output and row.tensor(slot.name).required:
                first = op.first_version(lambda r, n=slot.name: not r.tensor(n).required,
                                         after=version)
                since = f" (optional from {first})" if first else ""
                fail(op, f"{slot.name} is required at {version}{since}", UnsupportedError,
                     slot=slot.name, first_version=first)
            continue
        check_slot(op, version, slot.name, desc)
    check_constraints(op, version, descs)


def check_slot(op: Operator, version, name: str, desc):
    """One slot's dimension count and data type against the version's row."""
    row = op.support(version).tensor(name)
    if not row.allows_dims(desc.ndim):
        first = op.first_version(
            lambda r, n=desc.ndim: r.tensor(name).allows_dims(n), after=version)
        tail = f" ({row_dims(op, first, name)} from {first})" if first else ""
        fail(op, f"{name} has {_dims_phrase(desc.ndim)}"
                 + (f" {desc.shape_text()}" if desc.note else "")
                 + f"; {version} supports {row.dims_text()}{tail}",
             UnsupportedError, slot=name, given=desc.ndim, allowed=row.dims_text(),
             first_version=first)
    if desc.dtype not in row.dtypes:
        first = None
        if desc.dtype is not None:
            first = op.first_version(lambda r, t=desc.dtype: t in r.tensor(name).dtypes,
                                     after=version)
        tail = f" ({desc.dtype_text} from {first})" if first else ""
        fail(op, f"{name} has dtype {desc.dtype_text}; {version} supports "
                 f"{row.dtypes_text()}{tail}",
             DTypeUnsupportedError, slot=name, given=desc.dtype_text,
             allowed=tuple(dtype_label(t) for t in row.dtypes), first_version=first)


def check_constraints(op: Operator, version, descs: dict):
    """The cross-slot constraints among the slots present in ``descs``."""
    for constraint in op.constraints_at(version):
        present = [(name, descs[name]) for name in constraint.slots if descs.get(name) is not None]
        if len(present) < 2:
            continue
        if constraint.kind is ConstraintKind.SAME_DTYPE:
            values = {d.dtype_text for _, d in present}
            if len(values) > 1:
                given = ", ".join(f"{n} is {d.dtype_text}" for n, d in present)
                # The slot blamed is the first whose type differs from the first slot's.
                odd = next(n for n, d in present if d.dtype_text != present[0][1].dtype_text)
                fail(op, f"{constraint.text()}; {given}", DTypeValidationError,
                     slot=odd, given=given)
        elif constraint.kind is ConstraintKind.SAME_SIZES:
            if len({tuple(d.shape) for _, d in present}) > 1:
                given = ", ".join(f"{n} has {d.shape_text()}" for n, d in present)
                fail(op, f"{constraint.text()}; {given}", slot=present[0][0], given=given)
        else:
            values = {d.ndim for _, d in present}
            if len(values) > 1:
                given = ", ".join(f"{n} has {d.ndim}"
                                  + (f" {d.shape_text()}" if d.note else "") for n, d in present)
                fail(op, f"{constraint.text()}; {given}", slot=present[-1][0], given=given)


def row_dims(op, version, slot):
    return op.support(version).tensor(slot).dims_text()


def resolve_pattern(pattern, symbols, ndim):
    """The concrete shape ``pattern`` expects of a tensor of ``ndim`` dimensions.

    ``None`` when the tensor has more dimensions than the pattern.
    """
    sizes = pattern.sizes
    if ndim > len(sizes):
        return None
    tail = sizes[len(sizes) - ndim:]
    return tuple(symbols[s] if isinstance(s, str) else s for s in tail)


def check_patterns(op: Operator, version, descs: dict, symbols: dict, slots) -> dict:
    """Check each of ``slots`` against the shape patterns its version allows.

    Returns ``{slot: granularity}`` for the slots present.
    """
    allowed = op.support(version).granularities
    matched = {}
    for name in slots:
        desc = descs.get(name)
        if desc is None:
            continue
        patterns = [p for p in op.slot(name).shapes if p.granularity in allowed]
        for pattern in patterns:
            if resolve_pattern(pattern, symbols, desc.ndim) == tuple(desc.shape):
                matched[name] = pattern.granularity
                break
        else:
            options = []
            used = set()
            for pattern in patterns:
                expected = resolve_pattern(pattern, symbols, desc.ndim)
                if expected is None:
                    continue
                option = f"{shape_text(expected)} {pattern.granularity}"
                if any(o.startswith(shape_text(expected) + " ") for o in options):
                    continue  # at low rank two granularities can look alike
                options.append(option)
                used.update(s for s in pattern.sizes if isinstance(s, str))
            bound = ", ".join(f"{s} = {symbols[s]}" for s in sorted(used) if s in symbols)
            expected_text = " or ".join(options) if options else "no shape of that rank"
            fail(op, f"{name} has shape {desc.shape_text()}; expected {expected_text}"
                     + (f" ({bound})" if bound else ""),
                 slot=name, given=tuple(desc.shape), allowed=tuple(options))
    return matched


def check_scale_values(op: Operator, name: str, array: np.ndarray):
    """Scales must be positive and finite (DirectML calls 0 undefined behaviour)."""
    if array.size == 1 and 0.0 < array.item() < math.inf:
        return
    values = np.asarray(array, dtype=np.float64)
    bad = ~(np.isfinite(values) & (values > 0))
    if bad.any():
        first = values[bad].flat[0]
        count = int(bad.sum())
        where = ("" if values.size == 1
                 else f" ({count} of {values.size} elements, first {float(first)!r})")
        fault = _scale_fault(first)
        article = "an" if fault[0] in "aeiou" else "a"
        fail(op, f"{name} has {article} {fault} value{where}; scales must be positive and finite",
             slot=name, given=float(first))


def _scale_fault(value):
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "infinite"
    if value == 0:
        return "zero"
    return "negative"
