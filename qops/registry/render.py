"""Tensor-support tables rendered from the registry, for the CLI and the docs.

Nothing here knows an operator: every row comes from :mod:`qops.registry`.
"""

from __future__ import annotations

from qops.registry.schema import ARRAY_KIND, Operator, SlotKind

HEADER = ("Tensor", "Kind", "Supported dimension counts", "Supported data types")


def support_rows(op: Operator, version_row):
    """The seed-style rows of one version: (source name, kind, dims, dtypes);
    an array of tensors is one row, as its page has it (see :func:`array_lines`)."""
    return [(name, kind, support.dims_text(), ", ".join(support.dtypes))
            for _, name, kind, support in op.table_rows(version_row)]


def array_lines(op: Operator, version_row):
    """What each element of an array row takes, one entry per slot:
    ``QuantizationTensors[0] (scale): FLOAT32, FLOAT16``."""
    lines = []
    for slots, _, kind, _ in op.table_rows(version_row):
        if kind != ARRAY_KIND:
            continue
        for slot in slots:
            support = version_row.tensor(slot.name)
            optional = ", optional" if support.kind_text(slot) != SlotKind.INPUT.value else ""
            lines.append(f"{slot.source_name} ({slot.name}): {', '.join(support.dtypes)}{optional}")
    return lines


def table(rows, header=HEADER, style="text"):
    """Rows as aligned plain text, a Markdown pipe table or an RST grid table."""
    rows = [tuple(str(c) for c in row) for row in rows]
    widths = [max(len(str(h)), *(len(r[i]) for r in rows)) if rows else len(str(h))
              for i, h in enumerate(header)]
    if style == "markdown":
        lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("-" * len(h) for h in header) + " |"]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
        return "\n".join(lines)
    if style == "rst":
        rule = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
        head_rule = rule.replace("-", "=")

        def line(cells):
            return "|" + "|".join(f" {c:<{w}} " for c, w in zip(cells, widths)) + "|"
        return "\n".join([rule, line(header), head_rule] + [x for r in rows for x in (line(r), rule)])
    lines = ["  ".join(f"{h:<{w}}" for h, w in zip(header, widths)).rstrip(),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(f"{c:<{w}}" for c, w in zip(row, widths)).rstrip() for row in rows]
    return "\n".join(lines)


def version_heading(op: Operator, version):
    if op.source == "DirectML":
        return f"{version} and above"
    return f"{version} and above"


def describe(op: Operator, version=None, style="text"):
    """An operator's full description: slots, support tables (newest first,
    as the reference pages order them), constraints, attributes."""
    out = [f"{op.name} ({op.source}; qops.{op.function})", op.summary, ""]
    rows = list(op.versions)
    if version is not None:
        current = op.support(version)
        rows = [current] if current is not None else []
        if current is None:
            out.append(f"Not available at {version}: introduced in {op.introduced}.")
    out.append(f"Introduced in {op.introduced}.")
    for row in reversed(rows):
        out += ["", f"Tensor support, {version_heading(op, row.version)}:", ""]
        out.append(table(support_rows(op, row), style=style))
        out.append("")
        arrays = array_lines(op, row)
        if arrays:
            out += ["Array elements: " + "; ".join(arrays) + ".", ""]
        constraints = tuple(op.constraints) + tuple(row.constraints)
        if constraints:
            out.append("Constraints: " + "; ".join(c.text() for c in constraints) + ".")
        if row.granularities:
            granularities = [g for g in row.granularities if g != "data"]
            out.append("Granularities: " + ", ".join(granularities) + ".")
        if row.attributes:
            out.append("Attributes: " + ", ".join(row.attributes) + ".")
    shaped = [s for s in op.slots if s.shapes and any(p.granularity != "data" for p in s.shapes)]
    if shaped and op.source == "DirectML":
        out += ["", "Expected shapes:", ""]
        out.append(table([(s.name, ", ".join(f"{p.text()} {p.granularity}" for p in s.shapes))
                          for s in shaped], header=("Slot", "Shapes"), style=style))
    if op.attributes:
        out += ["", "Attributes:", ""]
        out.append(table([(a.name, a.source_name, a.kind, "" if a.default is None else a.default,
                           a.description) for a in op.attributes],
                         header=("Name", "Source field", "Kind", "Default", "Meaning"), style=style))
    return "\n".join(out)


def overview(style="text"):
    """One line per operator: name, function, source, versions."""
    from qops import registry

    rows = []
    for op in registry.operators():
        versions = ", ".join(row.version.label for row in op.versions)
        kind = "feature levels" if op.source == "DirectML" else "opsets"
        domain = getattr(op.versions[0].version, "domain", "")
        if domain:
            kind = f"{domain} opset" if len(op.versions) == 1 else f"{domain} opsets"
        newest = op.versions[-1]
        first_input = newest.tensor(op.inputs[0].name)
        output = newest.tensor(op.output.name)
        rows.append((op.name, f"qops.{op.function}", op.source, f"{kind} {versions}",
                     first_input.dtypes_text(), output.dtypes_text()))
    return table(rows, header=("Operator", "Function", "From", "Versions",
                               "Input types (newest)", "Output types (newest)"), style=style)
