"""Sphinx configuration: the Markdown pages (MyST) and the API reference (autodoc, numpydoc
docstrings through napoleon). Builds offline: no intersphinx, no remote images.

    pip install ".[docs]" && python -m sphinx -W --keep-going -b html docs docs/_build/html
"""

from __future__ import annotations

import os
import re
import sys

# The source checkout, so that autodoc documents this tree even when another copy is installed.
sys.path.insert(0, os.path.abspath(".."))

import emulinalg
from emulinalg import _extras

# Without the docs extra: its one line and exit status, as the commands give them. Sphinx wraps
# any exception raised here, SystemExit included, in its multi-page crash report, hence _exit.
_MISSING = _extras.missing(
    "myst_parser", "furo", "matplotlib", extra="docs", needed_by="docs/conf.py"
)
if _MISSING:
    print(_MISSING, file=sys.stderr, flush=True)
    os._exit(_extras.MISSING_EXTRA)

project = "emulinalg"
author = "emulinalg contributors"
copyright = "emulinalg contributors, Apache-2.0"
release = emulinalg.__version__
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
# benchmarks/: records and plots, shown through {include} of each machine's README.md
exclude_patterns = ["_build", "benchmarks/**"]

myst_enable_extensions = ["dollarmath", "colon_fence"]
myst_heading_anchors = 3

autodoc_default_options = {"members": True, "member-order": "bysource"}
autodoc_typehints = "none"  # the numpydoc Parameters sections carry the types
napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_use_rtype = False

# MathJax is loaded by the browser when a page is read, not at build time.
html_theme = "furo"
html_title = f"emulinalg {release}"
html_static_path = []

# Docstrings write absolute values as plain-text maths (|A||B|), which reStructuredText reads as
# substitution references; escape bars outside inline literals (and leave grid tables alone).
_LITERAL = re.compile(r"(``.*?``)")


def _escape_bars(app, what, name, obj, options, lines):
    for i, line in enumerate(lines):
        text = line.strip()
        table = text[:1] in "|+" and text[-1:] in "|+"
        if "|" in line and not table:
            parts = _LITERAL.split(line)
            lines[i] = "".join(p if p.startswith("``") else p.replace("|", r"\|") for p in parts)


def setup(app):
    app.connect("autodoc-process-docstring", _escape_bars)
