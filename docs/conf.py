"""Sphinx configuration of the qops documentation.

Build it with ``sphinx-build -W --keep-going -n docs docs/_build/html`` (or
``make -C docs html``).  The operator tables come from the registry through
the directives of ``_ext/qops_registry_docs.py``; the API pages are written
by autosummary into ``api/generated/``.  Neither is kept in the repository.
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
# Document the checkout this file belongs to, whichever qops is installed.
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(HERE, "_ext"))

import qops  # noqa: E402

project = "qops"
author = "qops contributors"
copyright = "qops contributors"
release = qops.__version__
version = ".".join(release.split(".")[:2])

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "numpydoc",
    "qops_registry_docs",
]

exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]
templates_path = ["_templates"]
default_role = "literal"
pygments_style = "sphinx"

# -- API reference --------------------------------------------------------------------
autosummary_generate = True
autosummary_imported_members = False
autodoc_typehints = "none"
autodoc_member_order = "bysource"
numpydoc_show_class_members = False
numpydoc_attributes_as_param_list = False
numpydoc_xref_param_type = False

# -- HTML -----------------------------------------------------------------------------
html_theme = "pydata_sphinx_theme"
html_title = f"qops {release}"
html_theme_options = {
    "navigation_depth": 2,
    "show_toc_level": 2,
    "secondary_sidebar_items": ["page-toc"],
    "header_links_before_dropdown": 8,
    "footer_start": ["copyright"],
    "footer_end": ["sphinx-version", "theme-version"],
}
html_show_sourcelink = False
html_static_path = ["_static"]
html_css_files = ["qops.css"]
# The guide's pages have no subpages: no left sidebar for them.
html_sidebars = {page: [] for page in ("index", "quickstart", "feature_levels", "numerics",
                                       "onnx", "benchmarks", "cli")}

# -- Cross-references -----------------------------------------------------------------
# The build reaches no network, so there is no intersphinx inventory for the
# standard library; and docstrings may name the modules that hold the
# registry's tables and the operator glue, which are not part of the API.
nitpick_ignore = [("py:class", "enum.Enum")]
nitpick_ignore_regex = [("py:mod", r"qops\.(registry\.(directml|onnx|contrib|schema)|ops)")]
