"""The kernels' generated files (tools/generate_kernels.py) are what their
Tempita templates render: regenerating changes nothing, and every template
in the kernel folder is rendered by the tool."""

import importlib.util
from pathlib import Path

import pytest

TOOL = Path(__file__).parents[4] / "tools" / "generate_kernels.py"


def generator():
    spec = importlib.util.spec_from_file_location("generate_kernels", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GENERATOR = generator()


@pytest.mark.parametrize("path", sorted(GENERATOR.rendered()), ids=lambda path: path.name)
def test_a_generated_file_is_its_templates_rendering(path):
    assert path.read_text() == GENERATOR.rendered()[path], (
        f"{path.name} differs from its template: run python tools/generate_kernels.py")


def test_every_template_is_rendered():
    templates = {str(path.relative_to(GENERATOR.KERNELS))
                 for path in GENERATOR.KERNELS.rglob("*.tp")}
    assert templates == set(GENERATOR.TEMPLATES)


def test_the_check_fails_on_a_stale_file(tmp_path, monkeypatch):
    """--check reports a generated file that differs (here: a copy of the
    folder with one file edited) and writes nothing."""
    (tmp_path / "include").mkdir()
    for path in GENERATOR.KERNELS.rglob("*.tp"):
        (tmp_path / path.relative_to(GENERATOR.KERNELS)).write_text(path.read_text())
    for path, text in GENERATOR.rendered().items():
        (tmp_path / path.relative_to(GENERATOR.KERNELS)).write_text(text)
    monkeypatch.setattr(GENERATOR, "KERNELS", tmp_path)
    assert GENERATOR.main(["--check"]) == 0
    stale = tmp_path / "_tile_shortcuts.pxi"
    stale.write_text(stale.read_text() + "# edited\n")
    assert GENERATOR.main(["--check"]) == 1
    assert stale.read_text().endswith("# edited\n")
    assert GENERATOR.main([]) == 0
    assert GENERATOR.main(["--check"]) == 0
