"""Schema types of the operator registry.

Every table in :mod:`qops.registry` is built from the frozen, keyword-only
dataclasses below.  Each checks itself when it is constructed, so a typo in a
table (an unknown data type, an inverted dimension range, a constraint naming
a slot the operator does not have) fails at import time rather than at the
first call that happens to read it.

This module is pure Python: the registry imports nothing compiled, so it can
be read (by the documentation build, the command line, or a user) without the
kernels.
"""

from __future__ import annotations

import enum
import functools
import re
from dataclasses import dataclass, field
from typing import Optional, Union

__all__ = [
    "DATA_TYPES",
    "ARRAY_KIND",
    "FeatureLevel",
    "Opset",
    "SlotKind",
    "ShapePattern",
    "Slot",
    "TensorSupport",
    "Constraint",
    "Attribute",
    "VersionSupport",
    "Operator",
    "Version",
    "dtype_label",
]

#: Every element type a registry table may name, in the spelling of
#: DirectML's ``DML_TENSOR_DATA_TYPE`` / ONNX's ``TensorProto`` (upper case).
DATA_TYPES = (
    "INT2",
    "UINT2",
    "INT4",
    "UINT4",
    "INT8",
    "UINT8",
    "INT16",
    "UINT16",
    "INT32",
    "UINT32",
    "FLOAT4E2M1",
    "FLOAT6E2M3",
    "FLOAT6E3M2",
    "FLOAT8E4M3FN",
    "FLOAT8E4M3FNUZ",
    "FLOAT8E5M2",
    "FLOAT8E5M2FNUZ",
    "FLOAT8E8M0",
    "FLOAT16",
    "BFLOAT16",
    "FLOAT32",
)


def dtype_label(name: str) -> str:
    """The lower-case spelling of a registry data type used in messages."""
    return name.lower()


@functools.total_ordering
class FeatureLevel(enum.Enum):
    """Every DirectML feature level, in order.

    Members compare by version, so ``FeatureLevel.FL_2_1 < FeatureLevel.FL_4_0``.
    ``str()`` gives DirectML's spelling (``DML_FEATURE_LEVEL_4_0``) and
    :attr:`label` the short one (``4_0``).
    """

    FL_1_0 = (1, 0)
    FL_2_0 = (2, 0)
    FL_2_1 = (2, 1)
    FL_3_0 = (3, 0)
    FL_3_1 = (3, 1)
    FL_4_0 = (4, 0)
    FL_4_1 = (4, 1)
    FL_5_0 = (5, 0)
    FL_5_1 = (5, 1)
    FL_5_2 = (5, 2)
    FL_6_0 = (6, 0)
    FL_6_1 = (6, 1)
    FL_6_2 = (6, 2)
    FL_6_3 = (6, 3)
    FL_6_4 = (6, 4)

    def __lt__(self, other):
        if not isinstance(other, FeatureLevel):
            return NotImplemented
        return self.value < other.value

    def __hash__(self):
        return hash(self.value)

    @property
    def label(self) -> str:
        """The short spelling: ``"4_0"``."""
        return f"{self.value[0]}_{self.value[1]}"

    def __str__(self) -> str:
        return f"DML_FEATURE_LEVEL_{self.label}"

    @classmethod
    def parse(cls, value) -> "FeatureLevel":
        """Accept a member, ``"4_0"``, ``"4.0"``, ``"DML_FEATURE_LEVEL_4_0"`` or ``(4, 0)``.

        Raises ``ValueError`` (the API turns it into a ``ValidationError``) for
        anything else.
        """
        if isinstance(value, cls):
            return value
        pair = None
        if isinstance(value, tuple) and len(value) == 2 and all(
            isinstance(v, int) and not isinstance(v, bool) for v in value
        ):
            pair = value
        elif isinstance(value, str):
            match = re.fullmatch(r"(?:DML_FEATURE_LEVEL_)?(\d+)[._](\d+)", value.strip())
            if match:
                pair = (int(match.group(1)), int(match.group(2)))
        for member in cls:
            if member.value == pair:
                return member
        known = ", ".join(m.label for m in cls)
        raise ValueError(f"unknown DirectML feature level {value!r}; known levels: {known}")


@functools.total_ordering
@dataclass(frozen=True)
class Opset:
    """An ONNX opset number: of the default domain, or of a contrib operator
    domain (``"com.microsoft"``, onnxruntime's), whose numbers are its own."""

    number: int
    domain: str = ""

    def __post_init__(self):
        if not isinstance(self.number, int) or isinstance(self.number, bool) or self.number < 1:
            raise ValueError(f"an opset is a positive integer, not {self.number!r}")
        if self.domain == "ai.onnx":
            raise ValueError("the default domain is written \"\", not 'ai.onnx'")

    def __lt__(self, other):
        if not isinstance(other, Opset):
            return NotImplemented
        if other.domain != self.domain:
            raise TypeError(f"{self} and {other} belong to different domains")
        return self.number < other.number

    @property
    def label(self) -> str:
        """The number as a string: ``"21"``."""
        return str(self.number)

    def __str__(self) -> str:
        return f"{self.domain} opset {self.number}" if self.domain else f"opset {self.number}"


Version = Union[FeatureLevel, Opset]


class SlotKind(enum.Enum):
    """The DirectML tensor-support *Kind* column."""

    INPUT = "Input"
    OPTIONAL_INPUT = "Optional input"
    OUTPUT = "Output"


_SLOT_NAME = re.compile(r"[a-z][a-z0-9_]*")
_SYMBOL = re.compile(r"[A-Z][A-Za-z]*")


@dataclass(frozen=True, kw_only=True)
class ShapePattern:
    """One expected shape of a slot, as the reference page writes it.

    ``sizes`` holds integers and symbols (``"OutputChannelCount"``, ``"M"``)
    bound from the operator's main tensors.  A tensor with fewer dimensions
    than the pattern is matched against the pattern's trailing entries
    (DirectML right-aligns tensors of lower rank).
    """

    granularity: str
    sizes: tuple

    def __post_init__(self):
        if not self.granularity:
            raise ValueError("a shape pattern needs a granularity name")
        if not self.sizes:
            raise ValueError(f"shape pattern {self.granularity!r} has no sizes")
        for size in self.sizes:
            if isinstance(size, bool) or not (
                (isinstance(size, int) and size >= 1)
                or (isinstance(size, str) and _SYMBOL.fullmatch(size))
            ):
                raise ValueError(f"shape pattern {self.granularity!r}: bad size {size!r}")

    def text(self) -> str:
        return "{" + ", ".join(str(s) for s in self.sizes) + "}"


@dataclass(frozen=True, kw_only=True)
class Slot:
    """A tensor slot of an operator, in the order of the source's structure."""

    name: str
    source_name: str
    kind: SlotKind
    description: str = ""
    shapes: tuple = ()
    #: The structure's array field this slot is an element of, when the
    #: structure passes several tensors as one array (DirectML's
    #: ``QuantizationTensors``): its page gives the array one table row.
    array: str = ""

    def __post_init__(self):
        if not _SLOT_NAME.fullmatch(self.name):
            raise ValueError(f"slot name {self.name!r} is not snake_case")
        if not isinstance(self.kind, SlotKind):
            raise ValueError(f"slot {self.name}: kind must be a SlotKind, not {self.kind!r}")
        if self.array and (not _SYMBOL.fullmatch(self.array) or self.kind is SlotKind.OUTPUT):
            raise ValueError(f"slot {self.name}: array {self.array!r} must name an input array "
                             "field")
        granularities = [p.granularity for p in self.shapes]
        if len(set(granularities)) != len(granularities):
            raise ValueError(f"slot {self.name}: repeated granularity in {granularities}")
        for pattern in self.shapes:
            if not isinstance(pattern, ShapePattern):
                raise ValueError(f"slot {self.name}: shapes must be ShapePattern objects")

    @property
    def optional(self) -> bool:
        return self.kind is SlotKind.OPTIONAL_INPUT

    @property
    def is_output(self) -> bool:
        return self.kind is SlotKind.OUTPUT


@dataclass(frozen=True, kw_only=True)
class TensorSupport:
    """One row of a tensor-support table: dimension counts and data types.

    ``max_dims`` of ``None`` means any number of dimensions (ONNX's N-D).
    ``required`` marks an optional slot that this version's table lists as an
    input (DirectML made some zero points optional at a later level).
    """

    slot: str
    min_dims: int
    max_dims: Optional[int]
    dtypes: tuple
    required: bool = False

    def __post_init__(self):
        if isinstance(self.min_dims, bool) or not isinstance(self.min_dims, int) or self.min_dims < 0:
            raise ValueError(f"{self.slot}: min_dims must be a non-negative int")
        if self.max_dims is not None and (
            not isinstance(self.max_dims, int) or self.max_dims < self.min_dims
        ):
            raise ValueError(
                f"{self.slot}: dimension range {self.min_dims} to {self.max_dims} is inverted"
            )
        if not self.dtypes:
            raise ValueError(f"{self.slot}: no data types")
        for dtype in self.dtypes:
            if dtype not in DATA_TYPES:
                raise ValueError(f"{self.slot}: unknown data type {dtype!r}")
        if len(set(self.dtypes)) != len(self.dtypes):
            raise ValueError(f"{self.slot}: repeated data type in {self.dtypes}")

    def allows_dims(self, ndim: int) -> bool:
        return ndim >= self.min_dims and (self.max_dims is None or ndim <= self.max_dims)

    def dims_text(self) -> str:
        """As the reference tables write it: ``4``, ``2 to 4``, ``0 or more``."""
        if self.max_dims is None:
            return f"{self.min_dims} or more"
        if self.min_dims == self.max_dims:
            return str(self.min_dims)
        return f"{self.min_dims} to {self.max_dims}"

    def dtypes_text(self) -> str:
        return ", ".join(dtype_label(d) for d in self.dtypes)

    def kind_text(self, slot) -> str:
        """The table's Kind column for ``slot`` at this version."""
        return SlotKind.INPUT.value if self.required else slot.kind.value


#: The Kind column of the one row a reference table gives an array of input tensors.
ARRAY_KIND = "Array of inputs"


def _union(groups):
    """The members of ``groups`` in order of first appearance."""
    return tuple(dict.fromkeys(item for group in groups for item in group))


class ConstraintKind(enum.Enum):
    SAME_DTYPE = "same data type"
    SAME_DIMENSION_COUNT = "same dimension count"
    SAME_SIZES = "same sizes"


@dataclass(frozen=True, kw_only=True)
class Constraint:
    """A cross-slot constraint from a reference page's *Tensor constraints*."""

    kind: ConstraintKind
    slots: tuple

    def __post_init__(self):
        if not isinstance(self.kind, ConstraintKind):
            raise ValueError(f"constraint kind must be a ConstraintKind, not {self.kind!r}")
        if len(self.slots) < 2 or len(set(self.slots)) != len(self.slots):
            raise ValueError(f"a constraint joins two or more distinct slots, not {self.slots}")

    def text(self) -> str:
        names = list(self.slots)
        joined = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
        what = {ConstraintKind.SAME_DTYPE: "data type",
                ConstraintKind.SAME_DIMENSION_COUNT: "dimension count",
                ConstraintKind.SAME_SIZES: "sizes"}[self.kind]
        return f"{joined} must have the same {what}"


@dataclass(frozen=True, kw_only=True)
class Attribute:
    """A non-tensor parameter of an operator.

    ``kind`` is one of ``"int"``, ``"ints"`` (one per spatial dimension),
    ``"bool"`` or ``"dtype"``.  ``minimum`` and ``maximum`` bound every
    integer; ``choices`` (if given) lists the only accepted values.
    """

    name: str
    source_name: str
    kind: str
    default: object = None
    minimum: Optional[int] = None
    maximum: Optional[int] = None
    choices: tuple = ()
    description: str = ""

    _KINDS = ("int", "ints", "bool", "dtype")

    def __post_init__(self):
        if not _SLOT_NAME.fullmatch(self.name):
            raise ValueError(f"attribute name {self.name!r} is not snake_case")
        if self.kind not in self._KINDS:
            raise ValueError(f"attribute {self.name}: kind {self.kind!r} not in {self._KINDS}")
        if self.minimum is not None and self.maximum is not None and self.maximum < self.minimum:
            raise ValueError(f"attribute {self.name}: range {self.minimum} to {self.maximum} is inverted")
        if self.kind == "dtype":
            unknown = [c for c in self.choices if c not in DATA_TYPES]
            if unknown:
                raise ValueError(f"attribute {self.name}: unknown data types {unknown}")


@dataclass(frozen=True, kw_only=True)
class VersionSupport:
    """What one feature level or opset supports, from that version on.

    ``granularities`` names the shape patterns (of :attr:`Slot.shapes`)
    allowed at this version; ``attributes`` the attribute names it accepts.
    """

    version: object
    tensors: tuple
    constraints: tuple = ()
    attributes: tuple = ()
    granularities: tuple = ()

    def __post_init__(self):
        if not isinstance(self.version, (FeatureLevel, Opset)):
            raise ValueError(f"version must be a FeatureLevel or an Opset, not {self.version!r}")
        slots = [t.slot for t in self.tensors]
        if len(set(slots)) != len(slots):
            raise ValueError(f"{self.version}: a slot has two support rows")

    def tensor(self, slot: str) -> TensorSupport:
        for row in self.tensors:
            if row.slot == slot:
                return row
        raise KeyError(slot)


#: Where an operator's text comes from, and the ONNX domain of its opsets
#: (None: DirectML's feature levels).
SOURCES = {"DirectML": None, "ONNX": "", "onnxruntime": "com.microsoft"}


@dataclass(frozen=True, kw_only=True)
class Operator:
    """An operator's schema: its slots, attributes and per-version support.

    ``versions`` is ordered oldest first; the row that applies at version
    ``v`` is the newest row whose version is not after ``v`` (the reference
    pages' "and above" headings).
    """

    name: str
    function: str
    source: str
    summary: str
    slots: tuple
    attributes: tuple
    versions: tuple
    constraints: tuple = ()
    reference: str = ""
    _by_slot: dict = field(default=None, init=False, repr=False, compare=False)
    _support_at: dict = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self):
        if self.source not in SOURCES:
            raise ValueError(f"{self.name}: unknown source {self.source!r}")
        if any(isinstance(row.version, Opset) and row.version.domain != SOURCES[self.source]
               for row in self.versions):
            raise ValueError(f"{self.name}: a {self.source} operator's opsets are of domain "
                             f"{SOURCES[self.source]!r}")
        if not self.versions:
            raise ValueError(f"{self.name}: no versions")
        names = [s.name for s in self.slots]
        if len(set(names)) != len(names):
            raise ValueError(f"{self.name}: repeated slot name")
        if not any(s.is_output for s in self.slots):
            raise ValueError(f"{self.name}: needs an output slot")
        attribute_names = {a.name for a in self.attributes}
        if attribute_names & set(names):
            raise ValueError(f"{self.name}: an attribute shares a slot's name")
        version_type = type(self.versions[0].version)
        arrays = self._arrays()
        previous = None
        for row in self.versions:
            if type(row.version) is not version_type:
                raise ValueError(f"{self.name}: versions mix feature levels and opsets")
            if previous is not None and not previous < row.version:
                raise ValueError(f"{self.name}: versions are not in increasing order")
            previous = row.version
            if sorted(t.slot for t in row.tensors) != sorted(names):
                raise ValueError(f"{self.name} {row.version}: support rows do not cover every slot")
            for constraint in tuple(row.constraints) + tuple(self.constraints):
                unknown = set(constraint.slots) - set(names)
                if unknown:
                    raise ValueError(f"{self.name}: constraint names unknown slots {sorted(unknown)}")
            unknown = set(row.attributes) - attribute_names
            if unknown:
                raise ValueError(f"{self.name} {row.version}: unknown attributes {sorted(unknown)}")
            granularities = {p.granularity for s in self.slots for p in s.shapes}
            unknown = set(row.granularities) - granularities
            if unknown:
                raise ValueError(f"{self.name} {row.version}: unknown granularities {sorted(unknown)}")
            for members in arrays.values():
                dims = {(row.tensor(s.name).min_dims, row.tensor(s.name).max_dims) for s in members}
                if len(dims) > 1:
                    raise ValueError(f"{self.name} {row.version}: the slots of array "
                                     f"{members[0].array} differ in dimension counts")
        object.__setattr__(self, "_by_slot", {s.name: s for s in self.slots})
        object.__setattr__(self, "_support_at", {})

    def _arrays(self) -> dict:
        """``{array field: its slots}``; one array's slots must be adjacent."""
        arrays = {}
        for index, slot in enumerate(self.slots):
            if not slot.array:
                continue
            members = arrays.setdefault(slot.array, [])
            if members and self.slots[index - 1] is not members[-1]:
                raise ValueError(f"{self.name}: the slots of array {slot.array} are not adjacent")
            members.append(slot)
        return arrays

    # -- reading the table -------------------------------------------------

    @property
    def introduced(self):
        """The first feature level or opset that has this operator."""
        return self.versions[0].version

    @property
    def output(self) -> Slot:
        """The main output: the first output slot (DirectML's OutputTensor)."""
        return next(s for s in self.slots if s.is_output)

    @property
    def outputs(self) -> tuple:
        return tuple(s for s in self.slots if s.is_output)

    @property
    def inputs(self) -> tuple:
        return tuple(s for s in self.slots if not s.is_output)

    def slot(self, name: str) -> Slot:
        return self._by_slot[name]

    def attribute(self, name: str) -> Attribute:
        for attribute in self.attributes:
            if attribute.name == name:
                return attribute
        raise KeyError(name)

    def support(self, version) -> Optional[VersionSupport]:
        """The support row in force at ``version``; ``None`` before the operator existed."""
        try:
            return self._support_at[version]
        except KeyError:
            pass
        current = None
        for row in self.versions:
            if row.version <= version:
                current = row
        self._support_at[version] = current  # a cache of a pure function of the table
        return current

    def table_rows(self, version_row) -> tuple:
        """``version_row`` as the reference page's table lists it: one
        ``(slots, source name, kind, TensorSupport)`` per slot, except that
        the slots of one array (:attr:`Slot.array`) share a row, named after
        the array, of kind ``ARRAY_KIND`` ("Array of inputs"), whose data types are theirs
        in slot order."""
        rows, done = [], set()
        for slot in self.slots:
            support = version_row.tensor(slot.name)
            if not slot.array:
                rows.append(((slot,), slot.source_name, support.kind_text(slot), support))
                continue
            if slot.array in done:
                continue
            done.add(slot.array)
            members = tuple(s for s in self.slots if s.array == slot.array)
            merged = TensorSupport(
                slot=slot.array, min_dims=support.min_dims, max_dims=support.max_dims,
                dtypes=_union(version_row.tensor(s.name).dtypes for s in members))
            rows.append((members, slot.array, ARRAY_KIND, merged))
        return tuple(rows)

    def constraints_at(self, version) -> tuple:
        row = self.support(version)
        return tuple(self.constraints) + (tuple(row.constraints) if row else ())

    def first_version(self, predicate, after=None):
        """The first declared version whose row satisfies ``predicate``.

        With ``after``, only versions later than it are considered.
        """
        for row in self.versions:
            if after is not None and not after < row.version:
                continue
            if predicate(row):
                return row.version
        return None
