"""Sphinx configuration: MyST Markdown pages, built with -W (warnings are errors) in scripts/test."""

from __future__ import annotations

import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS.parent))

from scrapy_polite import __version__  # noqa: E402
from scrapy_polite.settings.reference import markdown_table  # noqa: E402

project = "scrapy-polite"
author = "scrapy-polite contributors"
copyright = "scrapy-polite contributors"  # noqa: A001
release = version = __version__

extensions = ["myst_parser", "sphinxcontrib.mermaid"]
# ```mermaid blocks (GitHub renders them too) as diagrams.
myst_fence_as_directive = ["mermaid"]
source_suffix = {".md": "markdown"}
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence", "dollarmath"]
exclude_patterns = ["_build", "_generated"]
html_theme = "furo"
html_title = f"scrapy-polite {version}"
# The settings reference is generated from the settings the package defines.
(DOCS / "_generated").mkdir(exist_ok=True)
_table = DOCS / "_generated" / "settings-table.md"
if not _table.exists() or _table.read_text() != markdown_table():
    _table.write_text(markdown_table())
