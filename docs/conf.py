"""Sphinx configuration.  The operator pages are generated from the registry
at build time (see ``_generate``); none of their tables is written by hand."""

import os
import sys

sys.path.insert(0, os.path.abspath(os.path.dirname(__file__)))

project = "qops"
author = "qops contributors"
extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon"]
exclude_patterns = ["_build"]
html_theme = "alabaster"


def _generate(app):
    from generate import write_operator_pages

    write_operator_pages(os.path.join(app.srcdir, "generated"))


def setup(app):
    app.connect("builder-inited", _generate)
