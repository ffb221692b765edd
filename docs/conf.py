"""Sphinx configuration of the pyspectral docs.

Build (from the repository root; warnings are errors):

    pip install -e ".[docs]"
    python -m sphinx -W --keep-going -b html docs docs/_build/html

Pages are Markdown (MyST); the API reference is generated from the docstrings
(autodoc); the gallery runs every script in ``examples/`` (sphinx-gallery) and
shows its source with its output.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Document the checkout, not some other installed pyspectral.
sys.path.insert(0, str(ROOT))
# Where Julia is usable, start it before torch loads (pyspectral imports torch),
# the order PythonCall recommends: the gallery's Julia example then runs as a
# user runs it, without pyspectral's import-order warning. Elsewhere nothing
# starts, and that example says why it stops.
os.environ.setdefault("PYSPECTRAL_START_JULIA", "auto")

import pyspectral  # noqa: E402

project = "pyspectral"
author = "the pyspectral authors"
copyright = "the pyspectral authors"  # noqa: A001
release = pyspectral.__version__
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.mathjax",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
    "sphinx_copybutton",
    "sphinx_gallery.gen_gallery",
]

source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build", "gallery/*.ipynb", "**.codeobj.json"]

# MyST: $...$ / $$...$$ maths, anchors for headings down to ###, so that
# [text](page.md#a-heading) links resolve (and are checked: -W).
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "deflist"]
myst_heading_anchors = 3

# The docstrings are reST in torch.linalg's style (``.. math::``, ``Returns:``).
autodoc_default_options = {"members": False, "undoc-members": False}
autodoc_typehints = "signature"
autodoc_member_order = "bysource"
napoleon_google_docstring = True
napoleon_numpy_docstring = False

html_theme = "furo"
html_title = f"pyspectral {release}"
html_static_path = []

# The gallery: every script in examples/ runs at build time; an error is a
# build error. A script that needs what is not there (Julia) says so in its
# output and returns.
sphinx_gallery_conf = {
    "examples_dirs": str(ROOT / "examples"),
    "gallery_dirs": "gallery",
    "filename_pattern": r".*\.py$",
    "ignore_pattern": r"(__init__|/_[^/]*)\.py$",
    "abort_on_example_error": True,
    "download_all_examples": False,
    "plot_gallery": "True",
    "min_reported_time": 0,
    "within_subsection_order": "FileNameSortKey",
    "show_memory": False,
    "line_numbers": False,
    "capture_repr": (),
}

# Quieter and reproducible: the examples seed their own generators.
os.environ.setdefault("PYTHONHASHSEED", "0")
