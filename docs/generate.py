"""Write one reStructuredText page per registry operator, and an index."""

import os

from qops import registry
from qops._render import describe, overview


def write_operator_pages(directory):
    os.makedirs(directory, exist_ok=True)
    names = []
    for op in registry.operators():
        names.append(op.name)
        title = f"{op.name}"
        body = describe(op, style="rst")
        with open(os.path.join(directory, f"{op.name}.rst"), "w") as handle:
            handle.write(f"{title}\n{'=' * len(title)}\n\n")
            for block in body.split("\n\n"):
                handle.write(block + "\n\n")
            handle.write(f".. autofunction:: qops.{op.function}\n")
    with open(os.path.join(directory, "operators.rst"), "w") as handle:
        handle.write("Operators\n=========\n\n" + overview(style="rst") + "\n\n")
        handle.write(".. toctree::\n   :maxdepth: 1\n\n")
        for name in names:
            handle.write(f"   {name}\n")
