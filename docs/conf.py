"""Sphinx configuration of the helios documentation site.

Build it from the repository root with
``uv run --group docs sphinx-build -W --keep-going -n -b html docs docs/_build/html``.
The four packages are imported from the workspace environment; nothing is fetched
from the network.
"""

from __future__ import annotations

import builtins
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "_ext"))

project = "helios"
author = "The helios authors"
copyright = "The helios authors"
release = "0.1.0"
version = "0.1"

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "helios_api",
]

source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]
templates_path: list[str] = []

# Markdown pages (MyST).
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

# The API reference, from the docstrings (Google style).
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_typehints_description_target = "documented_params"
autodoc_typehints_format = "short"
autodoc_preserve_defaults = True
autodoc_class_signature = "mixed"
autoclass_content = "class"
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_include_init_with_doc = False
napoleon_use_rtype = False
napoleon_attr_annotations = True

# Every cross-reference must resolve. What lives outside helios (torch, the standard
# library, builtins) has no page here and no inventory to link to offline.
nitpicky = True
_external_modules = sorted({*sys.stdlib_module_names, "torch", "numpy", "pytest", "_pytest"})
_builtin_names = sorted(name for name in dir(builtins) if not name.startswith("_"))
nitpick_ignore_regex = [
    (r"py:.*", rf"(?:{'|'.join(map(re.escape, _external_modules))})(?:\..+)?"),
    (r"py:.*", rf"(?:{'|'.join(map(re.escape, _builtin_names))})"),
]

# HTML output.
html_theme = "furo"
html_title = "helios"
html_static_path = ["_static"]
html_css_files = ["helios.css"]
html_show_sourcelink = False
html_theme_options = {
    "navigation_with_keys": True,
}
