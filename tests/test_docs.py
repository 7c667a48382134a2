"""The docs: every setting has a line in the generated reference; the README stays short and its links hold."""

from __future__ import annotations

import re

import pytest
from conftest import ROOT

from scrapy_polite.settings.config import DEFAULTS
from scrapy_polite.settings.reference import DOCS, SCRAPY_SETTINGS, markdown_table

pytestmark = pytest.mark.once


def test_every_setting_has_exactly_one_doc_line_and_every_line_a_setting() -> None:
    documented = [name for key in DOCS for name in key.split(" / ")]
    assert sorted(set(DEFAULTS) - set(documented)) == [], "settings without a line in settings/reference.py"
    assert len(documented) == len(set(documented))
    assert set(documented) - set(DEFAULTS) <= SCRAPY_SETTINGS
    assert all(text.strip() for text in DOCS.values())
    table = markdown_table()
    for name in DEFAULTS:
        assert f"`{name}`" in table


def test_the_readme_is_short_and_links_into_the_docs() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    targets = re.findall(r"\]\((docs/[^)#\s]+)", readme)
    assert targets, "the README links into the docs"
    for target in targets:
        assert (ROOT / target).is_file(), target
    # The first screen: an install command that works from a checkout, and the two commands.
    first_screen = "\n".join(readme.splitlines()[:60])
    assert "pip install -e ." in first_screen
    assert "bash scripts/demo" in first_screen and "bash scripts/test" in first_screen
