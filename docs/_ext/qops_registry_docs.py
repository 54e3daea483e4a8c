"""Sphinx directives that write the operator reference from :mod:`qops.registry`.

Every table about what an operator supports comes out of the registry when
the site is built; none is written by hand, and nothing generated is kept in
the repository.

``.. qops-operators::``
    One row per registry operator: page, function, source, versions, types.
``.. qops-operator:: NAME``
    An operator's slots, its tensor-support table for each feature level or
    opset that changed it (newest first, with what changed), and its
    attributes.
``.. qops-changes:: NAME``
    What each feature level or opset after the first changed.
``.. qops-dtypes::``
    Every registry data type and the NumPy or ml_dtypes type holding it.
``.. qops-markdown-table:: PATH``
    A Markdown pipe table (the benchmark results) as a table; other lines
    of the file become paragraphs.

The directives produce reStructuredText and parse it in place, so the text
functions below (:func:`operator_rst`, :func:`overview_rst`,
:func:`changes_rst`) are what ``tests/test_docs.py`` checks against the
registry.  The directive classes need docutils only; :func:`setup` registers
them with Sphinx.
"""

from __future__ import annotations

import os

from docutils import nodes
from docutils.parsers.rst import Directive, directives
from docutils.statemachine import StringList

__all__ = [
    "overview_rst",
    "operator_rst",
    "changes_rst",
    "dtypes_rst",
    "version_title",
    "register",
    "setup",
]


def _registry():
    from qops import registry

    return registry


# -- text ----------------------------------------------------------------------------


def _literal(text):
    return f"``{text}``"


def _types(dtypes):
    return ", ".join(d.lower() for d in dtypes)


def _dims(row):
    """A support row's dimension counts, as the reference pages write them."""
    if row.max_dims is None:
        return f"{row.min_dims} or more"
    if row.min_dims == row.max_dims:
        return str(row.min_dims)
    return f"{row.min_dims} to {row.max_dims}"


def _joined(words):
    words = list(words)
    if len(words) <= 1:
        return "".join(words)
    return ", ".join(words[:-1]) + " and " + words[-1]


def version_title(op, version):
    """A version table's heading: ``DML_FEATURE_LEVEL_4_0 and above``, ``Opset 21 and above``."""
    if op.source == "DirectML":
        return f"{version} and above"
    return f"Opset {version.number} and above"


def _version_word(op):
    return "feature level" if op.source == "DirectML" else "opset"


def _list_table(header, rows, widths=None):
    lines = [".. list-table::", "   :header-rows: 1"]
    if widths:
        lines.append("   :widths: " + " ".join(str(w) for w in widths))
    lines.append("")
    for row in [header] + list(rows):
        for index, cell in enumerate(row):
            text = str(cell) if str(cell) else "\\-"
            lines.append(("   * - " if index == 0 else "     - ") + text)
    lines.append("")
    return lines


def _title(text, underline):
    return [text, underline * len(text), ""]


def _slot_cell(op, slot):
    if op.source == "DirectML" and slot.source_name != slot.name:
        return f"{_literal(slot.name)} ({slot.source_name})"
    return _literal(slot.name)


def _row_cell(op, slots, name):
    """A support row's Tensor cell: its slot, or an array's slots and the array's name."""
    if len(slots) == 1 and not slots[0].array:
        return _slot_cell(op, slots[0])
    return f"{', '.join(_literal(s.name) for s in slots)} ({name})"


def _array_lines(op, row):
    """Which of an array row's types each of its slots takes."""
    from qops.registry.schema import ARRAY_KIND

    lines = []
    for slots, name, kind, _ in op.table_rows(row):
        if kind != ARRAY_KIND:
            continue
        parts = [f"{_literal(s.name)}"
                 + (" (optional)" if row.tensor(s.name).kind_text(s) != "Input" else "")
                 + f" takes {_types(row.tensor(s.name).dtypes)}" for s in slots]
        lines += [f"{_literal(name)}, element by element: " + "; ".join(parts) + ".", ""]
    return lines


def overview_rst(page_prefix="/operators/"):
    """The operators table: one row per registry operator, in registry order."""
    rows = []
    for op in _registry().operators():
        newest = op.versions[-1]
        versions = ", ".join(row.version.label for row in op.versions)
        rows.append((
            f":doc:`{op.name} <{page_prefix}{op.function}>`",
            f":func:`qops.{op.function}`",
            op.source,
            f"{_version_word(op)}s {versions}",
            _types(newest.tensor(op.inputs[0].name).dtypes),
            _types(newest.tensor(op.output.name).dtypes),
        ))
    header = ("Operator", "Function", "From", "Versions", "Input types (newest)",
              "Output types (newest)")
    return _list_table(header, rows)


#: What the symbols of the shape patterns stand for, where a name is not enough.
SYMBOLS = {
    "AxisLength": "``x.shape[axis]``",
    "BlockedShape": "the shape of ``x`` with ``ceil(x.shape[axis] / block_size)`` along ``axis``",
}


def _sizes(pattern):
    return "{" + ", ".join(str(s) for s in pattern.sizes) + "}"


def _slot_shapes(slot):
    return "; ".join(_sizes(p) if p.granularity == "data" else f"{p.granularity} {_sizes(p)}"
                     for p in slot.shapes)


def _slot_meaning(slot):
    # A main tensor's description is its shape, which the Shapes column shows.
    return "" if slot.description.startswith("{") else slot.description


def _change_lines(op, previous, row):
    """Bullets saying what ``row`` changes from ``previous``."""
    lines = []
    for slot in op.slots:
        before, after = previous.tensor(slot.name), row.tensor(slot.name)
        if (before.min_dims, before.max_dims) != (after.min_dims, after.max_dims):
            lines.append(f"{_literal(slot.name)}: dimension counts {_dims(before)} "
                         f"become {_dims(after)}")
        added = [d for d in after.dtypes if d not in before.dtypes]
        dropped = [d for d in before.dtypes if d not in after.dtypes]
        if added:
            lines.append(f"{_literal(slot.name)}: adds {_types(added)}")
        if dropped:
            lines.append(f"{_literal(slot.name)}: drops {_types(dropped)}")
    for granularity in row.granularities:
        if granularity not in previous.granularities:
            lines.append(f"adds {granularity} quantization")
    for attribute in row.attributes:
        if attribute not in previous.attributes:
            lines.append(f"adds the {_literal(attribute)} attribute")
    old = {c.text() for c in previous.constraints}
    new = {c.text() for c in row.constraints}
    lines += [f"new constraint: {text}" for text in sorted(new - old)]
    lines += [f"constraint lifted: {text}" for text in sorted(old - new)]
    return lines


def changes_rst(op):
    """One bullet list per version after the first: what it changed."""
    lines = []
    for previous, row in zip(op.versions, op.versions[1:]):
        lines.append(f"**{row.version}** (from {previous.version}):")
        lines.append("")
        lines += [f"- {line}" for line in _change_lines(op, previous, row) or ["no change"]]
        lines.append("")
    if not lines:
        lines = [f"{op.name} has one {_version_word(op)} entry, {op.introduced}: every later "
                 f"{_version_word(op)} supports exactly what it does.", ""]
    return lines


def dtypes_rst():
    """Each registry data type, the array type that holds it and its range."""
    from qops.registry import dtypes as _dtypes

    rows = []
    for name in _registry().DATA_TYPES:
        dtype = _dtypes.to_numpy(name)
        module = "ml_dtypes" if dtype.type.__module__.startswith("ml_dtypes") else "numpy"
        bounds = _dtypes.INTEGER_RANGES.get(name)
        if bounds:
            values = f"integers {bounds[0]} to {bounds[1]}"
        else:
            import ml_dtypes

            values = f"floating point, largest finite {float(ml_dtypes.finfo(dtype).max):g}"
        rows.append((_literal(name.lower()), f"``{module}.{dtype.type.__name__}``", values))
    return _list_table(("Data type", "Array type", "Values"), rows)


def operator_rst(op):
    """Slots, tensor support per version (newest first) and attributes of ``op``."""
    word = _version_word(op)
    lines = _title("Slots", "-")
    lines += [f"The tensors of :func:`qops.{op.function}`, in the order of the "
              + ("DirectML operator description's fields" if op.source == "DirectML"
                 else "ONNX operator's inputs and outputs")
              + ": each input is the argument of that name; the output is what the function "
                "returns (or writes into ``out``).", ""]
    lines += _list_table(
        ("Slot", "Kind", "Shapes", "Meaning"),
        [(_slot_cell(op, s), s.kind.value, _slot_shapes(s), _slot_meaning(s)) for s in op.slots],
        widths=(3, 2, 4, 5))
    if op.source == "DirectML":
        lines += ["Shapes are written with the most dimensions a version allows; a tensor with "
                  "fewer dimensions matches their trailing sizes.", ""]
    symbols = sorted({size for slot in op.slots for p in slot.shapes for size in p.sizes
                      if size in SYMBOLS})
    for symbol in symbols:
        lines += [f"``{symbol}`` is {SYMBOLS[symbol]}.", ""]

    lines += _title("Tensor support", "-")
    lines += [f"{op.name} was introduced in {op.introduced}. Each table holds from its {word} "
              f"until the next one listed; newest first.", ""]
    previous_of = dict(zip([r.version for r in op.versions[1:]], op.versions))
    for row in reversed(op.versions):
        lines += _title(version_title(op, row.version), "~")
        lines += _list_table(
            ("Tensor", "Kind", "Supported dimension counts", "Supported data types"),
            [(_row_cell(op, slots, name), kind, _dims(support), _types(support.dtypes))
             for slots, name, kind, support in op.table_rows(row)],
            widths=(3, 2, 2, 5))
        lines += _array_lines(op, row)
        constraints = tuple(op.constraints) + tuple(row.constraints)
        if constraints:
            lines += ["Constraints:", ""] + [f"- {c.text()}" for c in constraints] + [""]
        granularities = [g for g in row.granularities if g != "data"]
        if granularities:
            lines += [f"Quantization granularities: {_joined(granularities)}.", ""]
        if row.attributes:
            lines += ["Attributes: " + ", ".join(_literal(a) for a in row.attributes) + ".", ""]
        previous = previous_of.get(row.version)
        if previous is not None:
            lines += [f"Changes from {previous.version}:", ""]
            lines += [f"- {line}" for line in _change_lines(op, previous, row) or ["none"]]
            lines.append("")

    if op.attributes:
        lines += _title("Attributes", "-")
        rows = []
        for attribute in op.attributes:
            since = op.first_version(lambda r, n=attribute.name: n in r.attributes)
            default = "" if attribute.default is None else _literal(repr(attribute.default))
            rows.append((_literal(attribute.name), attribute.source_name, attribute.kind, default,
                         since.label if since is not None else "never", attribute.description))
        lines += _list_table(("Name", "Source", "Kind", "Default", f"From {word}", "Meaning"), rows,
                             widths=(3, 3, 1, 2, 2, 5))
    return lines


# -- directives ----------------------------------------------------------------------


def _parse(directive, lines):
    """Parse generated reStructuredText, section titles included, in place."""
    container = nodes.section()
    container.document = directive.state.document
    state = directive.state
    styles, level = state.memo.title_styles, state.memo.section_level
    state.memo.title_styles, state.memo.section_level = [], 0
    try:
        state.nested_parse(StringList(lines, source=f"<registry: {directive.name}>"),
                           directive.content_offset, container, match_titles=True)
    finally:
        state.memo.title_styles, state.memo.section_level = styles, level
    return container.children


def _operator(directive):
    name = directive.arguments[0]
    try:
        return _registry().get(name)
    except KeyError as error:
        raise directive.error(str(error.args[0])) from None


class OperatorsDirective(Directive):
    """``.. qops-operators::``: the table of every registry operator."""

    option_spec = {"pages": directives.unchanged}

    def run(self):
        return _parse(self, overview_rst(self.options.get("pages", "/operators/")))


class OperatorDirective(Directive):
    """``.. qops-operator:: NAME``: slots, tensor support per version, attributes."""

    required_arguments = 1

    def run(self):
        return _parse(self, operator_rst(_operator(self)))


class ChangesDirective(Directive):
    """``.. qops-changes:: NAME``: what each later version changed."""

    required_arguments = 1

    def run(self):
        return _parse(self, changes_rst(_operator(self)))


class DTypesDirective(Directive):
    """``.. qops-dtypes::``: the data types and the array types that hold them."""

    def run(self):
        return _parse(self, dtypes_rst())


def read_markdown_table(text):
    """``(header, rows, other_lines)`` of the first pipe table in ``text``."""
    header, rows, other = None, [], []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("|") and stripped.endswith("|"):
            cells = [c.strip() for c in stripped[1:-1].split("|")]
            if all(set(c) <= set("-: ") and c for c in cells):
                continue  # the separator line
            if header is None:
                header = cells
            else:
                rows.append(cells)
        elif stripped:
            other.append(stripped)
    return header, rows, other


def _plain_table(header, rows):
    table = nodes.table()
    group = nodes.tgroup(cols=len(header))
    table += group
    for _ in header:
        group += nodes.colspec(colwidth=1)

    def row_node(cells):
        row = nodes.row()
        for cell in cells:
            entry = nodes.entry()
            entry += nodes.paragraph(text=cell)
            row += entry
        return row

    head = nodes.thead()
    head += row_node(header)
    body = nodes.tbody()
    for cells in rows:
        body += row_node(list(cells) + [""] * (len(header) - len(cells)))
    group += head
    group += body
    return table


class MarkdownTableDirective(Directive):
    """``.. qops-dtypes::``
    Every registry data type and the NumPy or ml_dtypes type holding it.
``.. qops-markdown-table:: PATH``: a pipe table file, relative to the page."""

    required_arguments = 1

    def run(self):
        env = getattr(self.state.document.settings, "env", None)
        if env is not None:
            relative, path = env.relfn2path(self.arguments[0], env.docname)
            env.note_dependency(relative)
        else:
            source = self.state.document.current_source or ""
            path = os.path.join(os.path.dirname(source), self.arguments[0])
        try:
            with open(path, encoding="utf-8") as handle:
                header, rows, other = read_markdown_table(handle.read())
        except OSError as error:
            raise self.error(f"cannot read {self.arguments[0]}: {error}") from None
        if header is None:
            raise self.error(f"{self.arguments[0]} has no pipe table")
        return [_plain_table(header, rows)] + [nodes.paragraph(text=line) for line in other]


DIRECTIVES = {
    "qops-operators": OperatorsDirective,
    "qops-operator": OperatorDirective,
    "qops-changes": ChangesDirective,
    "qops-dtypes": DTypesDirective,
    "qops-markdown-table": MarkdownTableDirective,
}


def register():
    """Register the directives with plain docutils (the tests parse with it)."""
    for name, directive in DIRECTIVES.items():
        directives.register_directive(name, directive)


def setup(app):
    for name, directive in DIRECTIVES.items():
        app.add_directive(name, directive)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
