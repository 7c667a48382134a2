"""The settings table: every POLITE_* setting the package reads is in it, fills its config field, keeps its
bounds, and has a row in the docs' settings page."""

from __future__ import annotations

import dataclasses
import re
import runpy
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT
from scrapy.settings import Settings

from scrapy_polite.errors import PoliteConfigError
from scrapy_polite.settings.config import PoliteConfig, read, register_defaults
from scrapy_polite.settings.reference import markdown_table
from scrapy_polite.settings.table import BY_NAME, RETIRED, SCRAPY_SETTINGS, SETTINGS, Setting
from scrapy_polite.tune.trial import FILE_SETTING, REQUESTS_SETTING

#: A setting name in source or docs text (``POLITE_*`` and the bare prefix are not names).
NAME_RE = re.compile(r"\bPOLITE_[A-Z0-9_]*[A-Z0-9]\b")
#: The config fields no single POLITE_* setting fills: the pool built from the proxy settings, and
#: values read from Scrapy's own settings (RETRY_TIMES, DOWNLOAD_SLOTS).
NOT_SETTINGS = {"endpoints", "duplicates", "endpoint_tiers", "retry_times", "host_overrides"}
#: Settings polite-tune gives its trial crawls: internal, not the project's to set.
TRIAL_SETTINGS = {FILE_SETTING, REQUESTS_SETTING}

BOUNDED = [s for s in SETTINGS if s.minimum is not None or s.maximum is not None]
CHOOSING = [s for s in SETTINGS if s.choices]


def test_every_setting_has_one_entry_and_fills_the_config_field_named_after_it() -> None:
    names = [s.name for s in SETTINGS]
    assert len(names) == len(set(names))
    fields = {f.name for f in dataclasses.fields(PoliteConfig)}
    assert sorted(s.field for s in SETTINGS if s.field not in fields) == [], "table entries without a config field"
    assert sorted(fields - {s.field for s in SETTINGS} - NOT_SETTINGS) == [], "config fields without a table entry"


def test_every_polite_name_the_package_reads_is_in_the_table() -> None:
    found: dict[str, set[str]] = {}
    for path in (ROOT / "scrapy_polite").rglob("*.py"):
        for name in NAME_RE.findall(path.read_text()):
            found.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    unknown = {name: sorted(paths) for name, paths in found.items() if name not in BY_NAME and name not in TRIAL_SETTINGS and name not in RETIRED}
    assert unknown == {}, "POLITE_ names in the package that are no setting of the table"


def test_the_settings_page_has_one_row_per_setting_with_its_default() -> None:
    runpy.run_path(str(ROOT / "docs" / "conf.py"))  # writes the page the docs include, as the build does
    page = (ROOT / "docs" / "_generated" / "settings-table.md").read_text()
    assert page == markdown_table()
    assert "_generated/settings-table.md" in (ROOT / "docs" / "settings.md").read_text()
    rows = {name: line for line in page.splitlines()[2:] for name in re.findall(r"`([A-Z_]+)`", line.split(" | ")[0])}
    assert set(rows) == set(BY_NAME) | {s.name for s in SCRAPY_SETTINGS}
    assert len(page.splitlines()) - 2 == sum(not s.joined for s in SETTINGS) + len(SCRAPY_SETTINGS)
    # Strings in double quotes, whole seconds without ".0".
    assert rows["POLITE_STATE"].split(" | ")[1] == f'`"{BY_NAME["POLITE_STATE"].default}"`'
    assert rows["POLITE_RETRY_AFTER_MAX"].split(" | ")[1] == f'`{int(BY_NAME["POLITE_RETRY_AFTER_MAX"].default)}`'
    assert rows["POLITE_HOST_PAUSE_ENDPOINTS"] == rows["POLITE_HOST_PAUSE_WINDOW"]  # read together, one row


def test_every_row_says_what_its_settings_do() -> None:
    for previous, setting in zip((None, *SETTINGS), SETTINGS):
        if setting.joined:
            assert previous is not None and not setting.doc, setting.name
        else:
            assert setting.doc.strip(), setting.name
    assert all(s.doc.strip() for s in SCRAPY_SETTINGS)


def test_the_addon_registers_the_table_s_defaults_and_each_is_a_valid_value() -> None:
    settings = Settings()
    register_defaults(settings)
    for setting in SETTINGS:
        assert settings.get(setting.name) == setting.default, setting.name
        read(settings, setting.name)  # a default the table's own parser refused would stop every crawl


def _below(setting: Setting) -> Any:
    assert setting.minimum is not None
    return setting.minimum / 2 if 0 < setting.minimum < 1 else setting.minimum - 1


def _rejected(name: str, value: Any) -> PoliteConfigError:
    with pytest.raises(PoliteConfigError) as info:
        read(Settings({name: value}), name)
    assert str(info.value).startswith(f"{name}=") and " is invalid: expected " in str(info.value)
    return info.value


@pytest.mark.parametrize("setting", BOUNDED, ids=lambda s: s.name)
def test_the_bounds_of_the_table_are_enforced(setting: Setting) -> None:
    if setting.minimum is not None:
        assert read(Settings({setting.name: setting.minimum}), setting.name) == setting.minimum
        assert f">= {setting.minimum}" in _rejected(setting.name, _below(setting)).expected
    if setting.maximum is not None:
        assert read(Settings({setting.name: setting.maximum}), setting.name) == setting.maximum
        assert f"<= {setting.maximum:g}" in _rejected(setting.name, setting.maximum * 2).expected


@pytest.mark.parametrize("setting", CHOOSING, ids=lambda s: s.name)
def test_the_allowed_values_of_the_table_are_enforced(setting: Setting) -> None:
    for allowed in setting.choices:
        found = read(Settings({setting.name: allowed}), setting.name)
        assert found == allowed or found == {allowed}
    assert repr(setting.choices[0]) in _rejected(setting.name, "not-one-of-them").expected


def test_derived_values_are_set_when_the_config_is_built_and_a_reload_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "proxies.txt"
    path.write_text("http://127.0.0.1:8001\n")
    cfg = PoliteConfig.from_settings(Settings({
        "POLITE_PROXIES_FILE": str(path), "POLITE_PROXY_TIERS": [["http://127.0.0.1:8002"]],
        "POLITE_ADAPTIVE": True, "POLITE_DELAY": (0.5, 1.0), "POLITE_DELAY_FLOOR": 0.7, "DOWNLOAD_TIMEOUT": 30,
    }))
    assert cfg.host_concurrency_max == 4 * cfg.host_concurrency
    assert cfg.delay_floor == 0.5 and cfg.lease_timeout == 90.0
    assert cfg.endpoint_tiers == {"http://127.0.0.1:8001": 0, "http://127.0.0.1:8002": 1}
    before = dict(vars(cfg))
    path.write_text("http://127.0.0.1:8001\nhttp://127.0.0.1:8003\n")
    endpoints, _ = cfg.load_endpoints(reload=True)
    assert sorted(e.key for e in endpoints) == [f"http://127.0.0.1:800{n}" for n in (1, 2, 3)]
    assert vars(cfg) == before
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.delay_floor = 0.1  # type: ignore[misc]



def test_a_setting_no_longer_read_is_said_at_start_up(caplog: pytest.LogCaptureFixture) -> None:
    settings = Settings({"POLITE_PROXIES": ["http://127.0.0.1:8000"], "POLITE_RECOVERY_WINDOW": 5})
    with caplog.at_level("WARNING", logger="scrapy_polite.settings.config"):
        config = PoliteConfig.from_settings(settings)
    assert [r.getMessage().split(" ")[0] for r in caplog.records] == ["POLITE_RECOVERY_WINDOW"]
    assert not hasattr(config, "recovery_window")
