"""The documentation: its examples run, and its tables are the registry's.

* Every ``>>>`` example in ``docs/`` and in the docstrings of the ``qops``
  package runs as a doctest; Python examples may not hide in code blocks that
  no doctest reads.
* Every ``console`` block's ``python -m qops`` command prints what the page
  shows; every command in a ``sh`` block parses.
* The tables the ``qops-operator`` and ``qops-operators`` directives build are
  parsed back (with docutils, through the directives themselves) and compared
  with an independent walk of :mod:`qops.registry`; a registry that differs
  from a rendered table is caught.
* Each registry operator has its page, and the API reference lists every
  public name.

The site itself is built by ``.ci/run`` (``sphinx-build -W``); these tests need
docutils only (a test dependency), not Sphinx.
"""

from __future__ import annotations

import contextlib
import dataclasses
import doctest
import glob
import importlib
import io
import os
import re
import shlex
import sys

import numpy as np
import pytest
from conftest import PROJECT_ROOT as ROOT  # noqa: E402
from docutils import nodes
from docutils.core import publish_doctree
from docutils.parsers.rst import roles

import qops
from qops import registry
from qops.cli.main import build_parser, main

DOCS = os.path.join(ROOT, "docs")
sys.path.insert(0, os.path.join(DOCS, "_ext"))
import qops_registry_docs as extension  # noqa: E402

PAGES = sorted(
    path for path in glob.glob(os.path.join(DOCS, "**", "*.rst"), recursive=True)
    if not os.path.relpath(path, DOCS).startswith(("_build", "generated", "_templates"))
)
OPTIONS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def _page_id(path):
    return os.path.relpath(path, DOCS)


def _read(path):
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def _run_doctest(test):
    runner = doctest.DocTestRunner(optionflags=OPTIONS)
    report = io.StringIO()
    with np.printoptions(), contextlib.redirect_stdout(io.StringIO()):
        result = runner.run(test, out=report.write)
    assert result.failed == 0, f"{test.name}: {result.failed} of {result.attempted} examples " \
                               f"failed\n{report.getvalue()}"
    return result.attempted


# -- examples --------------------------------------------------------------------------


def test_the_docs_have_pages():
    names = {_page_id(p) for p in PAGES}
    for page in ("index.rst", "quickstart.rst", "feature_levels.rst", "numerics.rst", "onnx.rst",
                 "benchmarks.rst", "cli.rst", "api.rst", os.path.join("operators", "index.rst")):
        assert page in names


@pytest.mark.parametrize("path", PAGES, ids=_page_id)
def test_page_examples_run(path):
    text = _read(path)
    test = doctest.DocTestParser().get_doctest(text, {"__name__": "__main__"}, _page_id(path),
                                               path, 0)
    _run_doctest(test)


@pytest.mark.parametrize("path", PAGES, ids=_page_id)
def test_python_examples_are_doctests(path):
    """A Python code block would not be run: examples are ``>>>`` blocks."""
    for match in re.finditer(r"^\s*\.\. (code-block|code|sourcecode):: *(\S*)", _read(path), re.M):
        assert match.group(2) not in ("", "python", "python3", "py", "pycon", "ipython"), (
            f"{_page_id(path)}: a {match.group(0).strip()!r} block; write the example as a "
            "doctest (>>> lines) so the test suite runs it")


def _package_modules():
    names = []
    for path in glob.glob(os.path.join(ROOT, "qops", "**", "*.py"), recursive=True):
        relative = os.path.relpath(path, ROOT)[:-3].split(os.sep)
        if relative[-1] == "__init__":
            relative = relative[:-1]
        names.append(".".join(relative))
    return sorted(names)


MODULES = _package_modules()


def test_the_modules_are_the_checkout_s():
    assert os.path.dirname(qops.__file__) == os.path.join(ROOT, "qops")
    assert "qops" in MODULES and "qops.ops.convolution" in MODULES and "qops.registry" in MODULES


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    """Only Python sources are walked: compiled modules hold no examples."""
    module = importlib.import_module(name)
    for test in doctest.DocTestFinder(exclude_empty=True).find(module, name):
        _run_doctest(test)


def test_docstring_examples_exist():
    """The walk finds the examples it should (it is not vacuous)."""
    found = doctest.DocTestFinder(exclude_empty=True).find(registry, "qops.registry")
    assert sum(len(t.examples) for t in found) >= 2


# -- command lines -----------------------------------------------------------------------


def _blocks(language):
    """``(page, lines)`` of every ``.. code-block:: language`` block of the docs."""
    blocks = []
    for path in PAGES:
        lines = _read(path).splitlines()
        for index, line in enumerate(lines):
            if line.strip() != f".. code-block:: {language}":
                continue
            indent = len(line) - len(line.lstrip())
            body = []
            for following in lines[index + 1:]:
                if following.strip() and len(following) - len(following.lstrip()) <= indent:
                    break
                body.append(following)
            text = "\n".join(body)
            blocks.append((_page_id(path), [b.strip() for b in text.strip("\n").splitlines()]))
    return blocks


def _console_sessions():
    sessions = []
    for page, lines in _blocks("console"):
        command = None
        for line in lines:
            if line.startswith("$ "):
                command = [line[2:], []]
                sessions.append((page, command))
            elif command is not None:
                command[1].append(line)
    return sessions


CONSOLE = _console_sessions()


def test_console_examples_exist():
    assert len(CONSOLE) >= 4


@pytest.mark.parametrize("page, session", CONSOLE, ids=lambda v: v if isinstance(v, str) else None)
def test_console_examples_print_what_they_show(page, session):
    command, shown = session
    argv = shlex.split(command)
    assert argv[:3] == ["python", "-m", "qops"], f"{page}: only python -m qops commands are run"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = main(argv[3:])
    assert out.getvalue().strip() == "\n".join(shown).strip(), f"{page}: {command}"
    valid = "valid;" in out.getvalue()
    assert status == (0 if valid else 1)


def test_shell_commands_parse():
    parser = build_parser()
    checked = 0
    for page, lines in _blocks("sh"):
        for line in lines:
            argv = shlex.split(line, comments=True)
            if argv[:3] != ["python", "-m", "qops"]:
                continue
            try:
                args, extra = parser.parse_known_args(argv[3:])
            except SystemExit:
                pytest.fail(f"{page}: {line!r} does not parse")
            assert args.command, f"{page}: {line!r} names no command"
            assert all("=" in e for e in extra) and (not extra or args.command == "validate"), (
                f"{page}: {line!r}: unrecognized {extra}")
            checked += 1
    assert checked >= 5


# -- registry tables ---------------------------------------------------------------------

_ROLES_REGISTERED = False


def _doctree(source):
    global _ROLES_REGISTERED
    if not _ROLES_REGISTERED:
        extension.register()
        for role in ("doc", "func", "class", "mod", "attr", "data"):
            roles.register_generic_role(role, nodes.literal)
        _ROLES_REGISTERED = True
    tree = publish_doctree(source, settings_overrides={
        "report_level": 5, "halt_level": 5, "doctitle_xform": False,
        "warning_stream": io.StringIO()})
    problems = [m.astext() for m in tree.findall(nodes.system_message) if m["level"] >= 2]
    assert not problems, problems
    return tree


def _table_rows(table):
    def cells(row):
        return [entry.astext().strip() for entry in row.findall(nodes.entry)]
    header = [cells(r) for r in table.findall(nodes.row) if isinstance(r.parent, nodes.thead)]
    body = [cells(r) for r in table.findall(nodes.row) if isinstance(r.parent, nodes.tbody)]
    return header[0], body


def _sections(tree):
    return {s[0].astext(): s for s in tree.findall(nodes.section)}


def _first_table(section):
    return next(iter(section.findall(nodes.table)))


def _parse_dims(text):
    """``4``, ``2 to 4``, ``0 or more`` -> (min, max)."""
    match = re.fullmatch(r"(\d+)(?: to (\d+)| or (more))?", text)
    assert match, f"dimension counts {text!r}"
    low = int(match.group(1))
    if match.group(3):
        return low, None
    return low, int(match.group(2)) if match.group(2) else low


def _slot_of(cell):
    return cell.split(" (")[0]


def _page_rows(op):
    """``(array, slots)`` per row of a reference page's table: one slot a
    row, but one row for the slots a structure passes as one array."""
    rows = []
    for slot in op.slots:
        if slot.array and rows and rows[-1][0] == slot.array:
            rows[-1][1].append(slot)
        else:
            rows.append((slot.array, [slot]))
    return rows


def support_mismatches(tree, op):
    """Differences between the rendered tensor-support tables and ``op``."""
    problems = []
    sections = _sections(tree)
    titles = [s for s in sections if s.endswith(" and above")]
    expected_titles = []
    for row in reversed(op.versions):
        # Independently of the extension's wording: the version's own spelling.
        title = (f"{row.version} and above" if op.source == "DirectML"
                 else f"Opset {row.version.number} and above")
        expected_titles.append(title)
        if title not in sections:
            problems.append(f"no table for {row.version}")
            continue
        header, body = _table_rows(_first_table(sections[title]))
        if header != ["Tensor", "Kind", "Supported dimension counts", "Supported data types"]:
            problems.append(f"{title}: header {header}")
        groups = _page_rows(op)
        if len(body) != len(groups):
            problems.append(f"{title}: {len(body)} rows for {len(groups)} slots or arrays")
        for (array, slots), cells in zip(groups, body):
            names = ", ".join(slot.name for slot in slots)
            supports = [next(t for t in row.tensors if t.slot == slot.name) for slot in slots]
            if _slot_of(cells[0]) != names or (array and f"({array})" not in cells[0]):
                problems.append(f"{title}: row {cells[0]!r} where {names} belongs")
            # An optional slot a version's table lists as an input reads "Input".
            kind = ("Array of inputs" if array
                    else "Input" if supports[0].required else slots[0].kind.value)
            if cells[1] != kind:
                problems.append(f"{title}: {names} kind {cells[1]!r}")
            for support in supports:
                if _parse_dims(cells[2]) != (support.min_dims, support.max_dims):
                    problems.append(f"{title}: {support.slot} dimension counts {cells[2]!r}")
            # An array's row lists its slots' types in slot order, each once.
            dtypes = list(dict.fromkeys(d for support in supports for d in support.dtypes))
            if [t.strip().upper() for t in cells[3].split(",")] != dtypes:
                problems.append(f"{title}: {names} data types {cells[3]!r}")
    if titles != expected_titles:
        problems.append(f"version tables {titles}, expected {expected_titles}")
    return problems


@pytest.mark.parametrize("op", registry.operators(), ids=lambda op: op.name)
def test_support_tables_equal_the_registry(op):
    tree = _doctree(f".. qops-operator:: {op.name}\n")
    assert support_mismatches(tree, op) == []


@pytest.mark.parametrize("op", registry.operators(), ids=lambda op: op.name)
def test_slot_and_attribute_tables_equal_the_registry(op):
    sections = _sections(_doctree(f".. qops-operator:: {op.name}\n"))
    header, body = _table_rows(_first_table(sections["Slots"]))
    assert [_slot_of(cells[0]) for cells in body] == [s.name for s in op.slots]
    assert [cells[1] for cells in body] == [s.kind.value for s in op.slots]
    for slot, cells in zip(op.slots, body):
        for pattern in slot.shapes:
            assert pattern.granularity in cells[2] or pattern.granularity == "data"
            assert all(str(size) in cells[2] for size in pattern.sizes)
    if not op.attributes:
        assert "Attributes" not in sections
        return
    header, body = _table_rows(_first_table(sections["Attributes"]))
    assert [cells[0] for cells in body] == [a.name for a in op.attributes]
    for attribute, cells in zip(op.attributes, body):
        first = next((r.version for r in op.versions if attribute.name in r.attributes), None)
        assert cells[4] == (first.label if first else "never")
        assert cells[3] == ("-" if attribute.default is None else repr(attribute.default))


def test_a_registry_that_differs_from_the_tables_is_caught():
    op = registry.get("QUANTIZED_LINEAR_MATRIX_MULTIPLY")
    tree = _doctree(f".. qops-operator:: {op.name}\n")

    def changed(row, slot, **fields):
        tensors = tuple(dataclasses.replace(t, **fields) if t.slot == slot else t
                        for t in row.tensors)
        return dataclasses.replace(row, tensors=tensors)

    newest, oldest = op.versions[-1], op.versions[0]
    fewer_types = dataclasses.replace(op, versions=(oldest,
                                                    changed(newest, "a", dtypes=("UINT8",))))
    assert any("a data types" in p for p in support_mismatches(tree, fewer_types))
    other_dims = dataclasses.replace(op, versions=(changed(oldest, "b", min_dims=3), newest))
    assert any("b dimension counts" in p for p in support_mismatches(tree, other_dims))
    one_version = dataclasses.replace(op, versions=(oldest,))
    assert support_mismatches(tree, one_version)


def test_an_array_row_that_differs_from_the_registry_is_caught():
    """QUANTIZE's QuantizationTensors row unites its scale's and zero point's
    types: a registry that changes either no longer matches the page."""
    op = registry.get("QUANTIZE")
    tree = _doctree(f".. qops-operator:: {op.name}\n")
    assert support_mismatches(tree, op) == []
    (row,) = op.versions
    tensors = tuple(dataclasses.replace(t, dtypes=("INT8", "UINT8")) if t.slot == "zero_point"
                    else t for t in row.tensors)
    fewer = dataclasses.replace(op, versions=(dataclasses.replace(row, tensors=tensors),))
    assert any("scale, zero_point data types" in p for p in support_mismatches(tree, fewer))
    ungrouped = dataclasses.replace(op, slots=tuple(dataclasses.replace(s, array="")
                                                    for s in op.slots))
    assert any("rows for" in p for p in support_mismatches(tree, ungrouped))


def test_the_operator_overview_equals_the_registry():
    tree = _doctree(".. qops-operators::\n")
    (table,) = list(tree.findall(nodes.table))
    header, body = _table_rows(table)
    assert header[:4] == ["Operator", "Function", "From", "Versions"]
    assert len(body) == len(registry.operators())
    for op, cells in zip(registry.operators(), body):
        assert cells[0].split(" <")[0] == op.name
        assert cells[1] == f"qops.{op.function}"
        assert cells[2] == op.source
        assert re.findall(r"\d+(?:_\d+)?", cells[3]) == [r.version.label for r in op.versions]
        newest = op.versions[-1]
        inputs = next(t for t in newest.tensors if t.slot == op.inputs[0].name)
        assert [t.strip().upper() for t in cells[4].split(",")] == list(inputs.dtypes)


def test_changes_list_what_4_0_relaxes():
    text = "\n".join(extension.changes_rst(registry.get("QUANTIZED_LINEAR_MATRIX_MULTIPLY")))
    assert "``a``: dimension counts 4 become 2 to 4" in text
    assert "``a_scale``: dimension counts 4 become 1 to 4" in text
    text = "\n".join(extension.changes_rst(registry.get("QuantizeLinear")))
    assert "adds the ``block_size`` attribute" in text and "adds float4e2m1" in text


def test_every_operator_has_its_page():
    index = _read(os.path.join(DOCS, "operators", "index.rst"))
    for op in registry.operators():
        path = os.path.join(DOCS, "operators", f"{op.function}.rst")
        assert os.path.exists(path), f"no page for {op.name}"
        assert re.search(rf"^\.\. qops-operator:: {op.name}$", _read(path), re.M)
        assert re.search(rf"^   {op.function}$", index, re.M), f"{op.name} not in the toctree"


def test_no_page_types_a_support_table():
    for path in PAGES:
        assert "Supported data types" not in _read(path), (
            f"{_page_id(path)}: tensor-support tables come from the registry directives")


def test_the_benchmark_table_reads():
    text = _read(os.path.join(ROOT, "benchmarks", "results", "bench.md"))
    header, rows, other = extension.read_markdown_table(text)
    assert header[0] == "case" and rows
    assert all(len(row) == len(header) for row in rows)


# -- API reference ---------------------------------------------------------------------


def _documented_objects():
    """Objects named by the API page's autosummary and data entries."""
    documented, module = [], "qops"
    in_autosummary = False
    for line in _read(os.path.join(DOCS, "api.rst")).splitlines():
        match = re.match(r"\.\. (currentmodule|module|automodule):: (\S+)", line)
        if match:
            if match.group(1) != "automodule":
                module = match.group(2)
            else:
                documented.append(importlib.import_module(match.group(2)))
            in_autosummary = False
            continue
        if line.startswith(".. autosummary::"):
            in_autosummary = True
            continue
        match = re.match(r"\.\. data:: (\S+)", line)
        if match:
            documented.append(getattr(importlib.import_module(module), match.group(1)))
            continue
        if in_autosummary and re.match(r"   [A-Za-z_]\w*$", line):
            documented.append(getattr(importlib.import_module(module), line.strip()))
        elif line and not line.startswith(" "):
            in_autosummary = False
    return documented


def test_the_api_reference_lists_every_public_name():
    documented = _documented_objects()
    public = [(f"qops.{n}", getattr(qops, n)) for n in qops.__all__ if n != "__version__"]
    public += [(f"qops.registry.{n}", getattr(registry, n)) for n in registry.__all__]
    public += [(f"qops.reference.{n}", getattr(qops.reference, n)) for n in qops.reference.__all__]
    missing = [name for name, obj in public if not any(obj is d for d in documented)]
    assert missing == []
