"""Sphinx configuration: Markdown pages (MyST) plus an API reference from docstrings.

Built by the test suite with warnings as errors (tests/test_docs.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

project = "django-eventmq"
author = "django-eventmq maintainers"
copyright = "2026, django-eventmq maintainers"
extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.napoleon"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]
myst_heading_anchors = 3
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "undoc-members": False}
# Annotations name types from other packages (zmq, typing aliases) that have
# no documentation here; they are not broken references.
nitpicky = False
suppress_warnings = ["myst.xref_missing"]
html_theme = "alabaster"
html_title = "django-eventmq"
