"""What the sdist ships: the package and its documentation, no test tree that cannot run."""

from __future__ import annotations

import email
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from conftest import ROOT

pytestmark = pytest.mark.once


@pytest.fixture(scope="module")
def sdist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An sdist of this checkout's tracked files, built from a copy (the checkout gets no egg-info)."""
    src = tmp_path_factory.mktemp("src")
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    for name in files.splitlines():
        if (ROOT / name).is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(ROOT / name, src / name)
    out = tmp_path_factory.mktemp("sdist")
    code = f"from setuptools import build_meta as b; b.build_sdist({str(out)!r})"
    subprocess.run([sys.executable, "-c", code], cwd=src, check=True, capture_output=True, timeout=120)
    (path,) = out.glob("scrapy_polite-*.tar.gz")
    return path


def test_the_sdist_ships_the_package_and_no_test_tree(sdist: Path) -> None:
    with tarfile.open(sdist) as tf:
        names = {n.split("/", 1)[1] for n in tf.getnames() if "/" in n}
        meta = email.message_from_bytes(tf.extractfile(next(n for n in tf.getnames() if n.endswith("/PKG-INFO")
                                                             and n.count("/") == 1)).read())  # type: ignore[union-attr]
    assert {"README.md", "LICENSE", "CHANGELOG.md", "pyproject.toml", "scrapy_polite/py.typed",
            "scrapy_polite/gate/redis/lua/acquire.lua"} <= names
    assert not [n for n in names if n.startswith(("tests/", "example_project/", "benchmarks/"))]
    # The splash extra holds Scrapy where scrapy-splash imports.
    requires = meta.get_all("Requires-Dist") or []
    assert any(r.startswith("scrapy") and "<2.16" in r and 'extra == "splash"' in r for r in requires), requires
