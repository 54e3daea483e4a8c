"""The README's commands, example and operator table stay true."""

import contextlib
import io
import os
import re

import numpy as np
from conftest import PROJECT_ROOT as ROOT

from qops.registry.render import overview

README = open(os.path.join(ROOT, "README.md")).read()


def test_first_lines_are_the_install_and_test_commands():
    block = re.search(r"```sh\n(.*?)```", README, re.S).group(1).strip().splitlines()
    assert block[0].startswith("pip install -e . && python -m qops")
    assert block[1] == 'pip install -e ".[test]" && pytest'
    ci = open(os.path.join(ROOT, ".ci", "run")).read()
    assert block[1] in ci


def test_the_example_runs_and_prints_what_it_says():
    code = re.search(r"```python\n(.*?)```", README, re.S).group(1)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README example", "exec"), {})
    claimed = re.search(r"# (.*)$", code.strip().splitlines()[-1]).group(1)
    assert out.getvalue().strip() == claimed
    # The quantized ramp is linspace(-1, 1, 5) / 0.25 rounded: -4, -2, 0, 2, 4.
    assert claimed.endswith(str(np.array([-4, -2, 0, 2, 4], np.int8)))


def test_the_operator_table_is_the_registry_s():
    table = re.search(r"<!-- operators:begin -->\n(.*?)\n<!-- operators:end -->", README, re.S).group(1)
    assert table.strip() == overview(style="markdown").strip()


def test_the_compile_example_equals_the_function():
    blocks = re.findall(r"```python\n(.*?)```", README, re.S)
    namespace = {}
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compile(blocks[0], "README example", "exec"), namespace)
    first = namespace["y"]
    exec(compile(blocks[1], "README compile example", "exec"), namespace)
    assert np.array_equal(namespace["y"], first)


def test_the_packing_example_does_what_its_comments_say():
    import qops

    block = next(b for b in re.findall(r"```python\n(.*?)```", README, re.S) if "pack_4bit" in b)
    namespace = {"np": np, "qops": qops}
    exec(compile(block, "README packing example", "exec"), namespace)
    assert namespace["raw"].tolist() == [0xE1, 0x83, 0x07]
    assert np.array_equal(qops.unpack_4bit(namespace["raw"], "int4", namespace["w"].shape),
                          namespace["w"])
    assert namespace["y"].tolist() == [[0.5, -1.0, 1.5, -4.0, 3.5]]
