"""The docs: the README stays short and its links hold (the settings page: test_settings_table.py)."""

from __future__ import annotations

import re

import pytest
from conftest import ROOT

pytestmark = pytest.mark.once


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
