"""The package's layers: no import cycle, and each layer imports only downwards.

The graph is read from the sources (imports inside functions included, and
the Cython modules' imports and cimports), so a cycle hidden behind a
function-level import fails here too.
"""

import ast
import os
import re

import pytest

import qops

ROOT = os.path.dirname(os.path.abspath(qops.__file__))


def _module_name(path):
    relative = os.path.relpath(path, os.path.dirname(ROOT))
    parts = os.path.splitext(relative)[0].split(os.sep)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _sources():
    found = {}
    for folder, _, files in os.walk(ROOT):
        for name in files:
            if name.endswith((".py", ".pyx")):
                path = os.path.join(folder, name)
                found[_module_name(path)] = path
    return found


SOURCES = _sources()
_CYTHON_IMPORT = re.compile(r"^\s*(?:from\s+([\w.]+)\s+c?import\s+([\w, ()]+)|c?import\s+([\w.]+))",
                            re.M)


def _resolve(module, package):
    """``from package import module``: the module if it is one, else the package."""
    full = f"{package}.{module}"
    return full if full in SOURCES else package


def _imports(name, path):
    """The qops modules a module imports, anywhere in it."""
    text = open(path, encoding="utf-8").read()
    found = set()
    if path.endswith(".pyx"):
        for match in _CYTHON_IMPORT.finditer(text):
            package, names, plain = match.groups()
            if plain:
                found.add(plain)
            elif package:
                for item in names.replace("(", "").replace(")", "").split(","):
                    item = item.split(" as ")[0].strip()
                    if item:
                        found.add(_resolve(item, package))
        return {m for m in found if m.split(".")[0] == "qops"}
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            package = node.module or ""
            if node.level:
                base = name.split(".")
                if not path.endswith("__init__.py"):
                    base = base[:-1]
                base = base[:len(base) - (node.level - 1)]
                package = ".".join(base + ([node.module] if node.module else []))
            for alias in node.names:
                found.add(_resolve(alias.name, package))
    return {m for m in found if m.split(".")[0] == "qops" and m != name}


GRAPH = {name: {m for m in _imports(name, path) if m in SOURCES}
         for name, path in SOURCES.items()}


def _cycles(graph):
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_graph_is_read_from_every_module():
    assert len(GRAPH) >= 40
    assert "qops.backends.dispatch" in GRAPH["qops.ops.plans"]
    assert "qops.backends.native.kernels._qops_pool" in GRAPH["qops.threads"], (
        "a function-level import is in the graph")


def test_there_is_no_import_cycle():
    assert _cycles(GRAPH) == []


def test_the_cycle_check_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


#: Modules every layer may import: the exceptions and the version.
FOUNDATIONS = {"qops.errors", "qops.version"}
#: Each layer and the layers it may import (itself included); a module not
#: under a layer here (qops, qops.onnx, qops.cli ...) is above them all.
LAYERS = {
    "qops.registry": {"qops.registry"},
    "qops.reference": {"qops.reference", "qops.registry"},
    # qops.packing: the 4-bit storage format, which front ends and kernels both read.
    "qops.backends": {"qops.backends", "qops.reference", "qops.registry", "qops.threads",
                      "qops.packing"},
    "qops.ops": {"qops.ops", "qops.backends.dispatch", "qops.backends.contract", "qops.reference",
                 "qops.registry", "qops.threads", "qops.packing"},
    "qops.packing": {"qops.packing", "qops.registry"},
}


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_each_layer_imports_only_the_layers_below_it(layer):
    allowed = LAYERS[layer] | FOUNDATIONS
    wrong = sorted((module, target) for module, targets in GRAPH.items()
                   if module == layer or module.startswith(layer + ".")
                   for target in targets
                   if not any(target == a or target.startswith(a + ".") for a in allowed))
    assert wrong == []
