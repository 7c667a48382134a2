"""Hostile values of every POLITE_* setting: a PoliteConfigError naming the setting, the value and
what is expected, never another exception and never a value that quietly changes the behaviour."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from typing import Any

import pytest
from conftest import ROOT
from scrapy.settings import Settings

from scrapy_polite.addon import Addon
from scrapy_polite.errors import PoliteConfigError
from scrapy_polite.sandbox import ProxyConfig, SandboxConfig, SiteConfig
from scrapy_polite.settings.config import DEFAULTS, PoliteConfig

PROXIES = {"POLITE_PROXIES": ["http://127.0.0.1:8001"]}

#: What a settings.py typo, a bad -s or a Scrapyd setting= can give.
HOSTILE: list[Any] = [
    float("nan"), float("inf"), float("-inf"), 10**30, 1e300, -1, -1e300, "abc", "nan", "inf", "-inf",
    "1e999", "", " ", [None], [float("nan")], {"a": 1}, object(), True, b"1", "429 420",
]


def config(**settings: Any) -> PoliteConfig:
    return PoliteConfig.from_settings(Settings({**PROXIES, **settings}))


def rejects(name: str, value: Any, expected: str) -> PoliteConfigError:
    with pytest.raises(PoliteConfigError) as info:
        config(**{name: value})
    message = str(info.value)
    assert message.startswith(f"{name}="), message
    assert expected in message, message
    return info.value


def test_every_setting_takes_hostile_values_without_crashing() -> None:
    slipped = []
    for name in sorted(DEFAULTS):
        for value in HOSTILE:
            try:
                cfg = config(**{name: value})
            except PoliteConfigError as exc:
                if exc.setting not in (name, "POLITE_PROXIES") or "is invalid: expected " not in str(exc):
                    slipped.append((name, value, str(exc)))
                continue
            except Exception as exc:
                slipped.append((name, value, f"{type(exc).__name__}: {exc}"))
                continue
            # Accepted: every number the config holds is a finite one.
            for field_value in vars(cfg).values():
                numbers = field_value if isinstance(field_value, (tuple, frozenset)) else (field_value,)
                if any(isinstance(n, float) and not math.isfinite(n) for n in numbers):
                    slipped.append((name, value, f"accepted as {field_value!r}"))
    assert not slipped, "\n".join(repr(s) for s in slipped)


def test_rate_limit_codes_must_list_a_status() -> None:
    rejects("POLITE_RATE_LIMIT_CODES", [], "expected at least one HTTP status")
    rejects("POLITE_RATE_LIMIT_CODES", "", "expected at least one HTTP status")
    rejects("POLITE_RATE_LIMIT_CODES", [99], "an integer >= 100")
    rejects("POLITE_RATE_LIMIT_CODES", ["429x"], "POLITE_RATE_LIMIT_CODES='429x' is invalid: expected an integer")
    rejects("POLITE_RATE_LIMIT_CODES", [None], "POLITE_RATE_LIMIT_CODES=None is invalid: expected an integer")


@pytest.mark.parametrize("value", [["429x"], [None], [], "429x", "  "])
def test_the_addon_rejects_bad_rate_limit_codes_with_the_config_error(value: Any) -> None:
    settings = Settings({**PROXIES, "POLITE_RATE_LIMIT_CODES": value})
    with pytest.raises(PoliteConfigError, match=r"^POLITE_RATE_LIMIT_CODES="):
        Addon().update_settings(settings)


def test_the_addon_takes_the_codes_from_the_validated_reading() -> None:
    settings = Settings({**PROXIES, "POLITE_RATE_LIMIT_CODES": "429 420",
                         "RETRY_HTTP_CODES": [500, 420, 429, "503"]})
    Addon().update_settings(settings)
    assert [int(c) for c in settings.getlist("RETRY_HTTP_CODES")] == [500, 503]
    assert PoliteConfig.from_settings(settings).rate_limit_codes == {429, 420}


@pytest.mark.parametrize("value", [float("nan"), "nan", float("inf"), "inf", [float("nan")], ["nan"]])
def test_a_nan_or_infinite_delay_is_rejected(value: Any) -> None:
    rejects("POLITE_DELAY", value, "a finite number")


def test_a_single_delay_number_works_from_the_command_line_too() -> None:
    assert config(POLITE_DELAY="0.6").delay == pytest.approx((0.4, 0.8))
    assert config(POLITE_DELAY=0.6).delay == pytest.approx((0.4, 0.8))
    rejects("POLITE_DELAY", -1, "a number >= 0.0")


@pytest.mark.parametrize("value", [float("inf"), float("-inf"), 1e300, 10**30])
def test_an_infinite_or_huge_concurrency_is_rejected(value: Any) -> None:
    error = rejects("POLITE_HOST_CONCURRENCY", value, "an integer")
    assert "POLITE_HOST_CONCURRENCY=" in str(error)


def test_prometheus_port_must_be_a_port() -> None:
    rejects("POLITE_PROMETHEUS_PORT", 70000, "an integer <= 65535")
    rejects("POLITE_PROMETHEUS_PORT", float("inf"), "an integer")
    assert config(POLITE_PROMETHEUS_PORT="65535").prometheus_port == 65535
    assert config(POLITE_PROMETHEUS_PORT="").prometheus_port is None


def test_gateway_sessions_have_an_upper_bound() -> None:
    rejects("POLITE_GATEWAY_SESSIONS", 10**6, "an integer <= 10000")
    rejects("POLITE_GATEWAY_SESSIONS", float("inf"), "an integer")
    assert config(POLITE_GATEWAY_SESSIONS="10000").gateway_sessions == 10000


@pytest.mark.parametrize(
    "name",
    ["POLITE_BAN_DURATION", "POLITE_RETRY_AFTER_MAX", "POLITE_STATE_PIN_TTL",
     "POLITE_STATE_LEASE_TTL", "POLITE_LOG_INTERVAL", "POLITE_PROXIES_FILE_CHECK_INTERVAL",
     "POLITE_STATE_OUTAGE_TIMEOUT", "POLITE_LEASE_TIMEOUT"],
)
def test_durations_are_finite_and_bounded(name: str) -> None:
    rejects(name, float("inf"), "a finite number")
    rejects(name, "nan", "a finite number")
    rejects(name, 1e12, "a number <= 2.592e+06")


@pytest.mark.parametrize("name", ["POLITE_COOLDOWN", "POLITE_ENDPOINT_BACKOFF", "POLITE_PARK_TIME"])
def test_ranges_are_finite(name: str) -> None:
    rejects(name, (1.0, float("inf")), "a finite number")
    rejects(name, "1,nan", "a finite number")
    rejects(name, float("nan"), "a finite number")


@pytest.mark.parametrize("name", ["POLITE_PROMETHEUS_ADDRESS", "POLITE_STATE_NAMESPACE"])
def test_blank_strings_are_rejected(name: str) -> None:
    rejects(name, "  ", "a non-empty string")


def test_state_outage_timeout() -> None:
    assert config().state_outage_timeout == 300.0
    assert config(POLITE_STATE_OUTAGE_TIMEOUT="0").state_outage_timeout == 0.0  # wait forever
    rejects("POLITE_STATE_OUTAGE_TIMEOUT", -1, "a number >= 0.0")


def test_a_path_object_is_a_proxies_file(tmp_path) -> None:
    path = tmp_path / "proxies.txt"
    path.write_text("http://127.0.0.1:8002\n")
    cfg = PoliteConfig.from_settings(Settings({"POLITE_PROXIES_FILE": path}))
    assert cfg.proxies_file == str(path) and [e.key for e in cfg.endpoints] == ["http://127.0.0.1:8002"]


def test_an_undecodable_proxies_file_names_its_line_not_its_content(tmp_path) -> None:
    path = tmp_path / "proxies.txt"
    path.write_bytes(b"http://u:s3cret@127.0.0.1:8001\n# caf\xe9 (Latin-1)\nhttp://u:s3cret@127.0.0.1:8002\n")
    error = rejects_file(path)
    assert f"POLITE_PROXIES_FILE='{path}, line 2' is invalid: expected UTF-8 text" in str(error)


def test_a_bad_proxies_file_line_is_named_without_its_credentials(tmp_path) -> None:
    path = tmp_path / "proxies.txt"
    path.write_text("http://u:s3cret@127.0.0.1:8001\nsocks5://u:s3cret@127.0.0.1:1080\n")
    error = rejects_file(path)
    assert "line 2" in str(error) and "Scrapy cannot use socks5 proxies" in str(error)
    path.write_text("http://u:s3cret@127.0.0.1:x\n")
    assert "line 1" in str(rejects_file(path))


def rejects_file(path) -> PoliteConfigError:
    with pytest.raises(PoliteConfigError) as info:
        PoliteConfig.from_settings(Settings({"POLITE_PROXIES_FILE": str(path)}))
    assert "s3cret" not in str(info.value) and "caf" not in str(info.value)
    return info.value


def scrapy_crawl(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "POLITE_PROXIES_FILE": ""}
    return subprocess.run(
        [sys.executable, "-m", "scrapy", "crawl", "catalogue", *args],
        cwd=ROOT / "example_project", env=env, capture_output=True, text=True, timeout=60,
    )


def test_rejected_rate_limit_codes_from_scrapy_crawl_command() -> None:
    proc = scrapy_crawl("-s", "POLITE_PROXIES=http://127.0.0.1:9", "-s", "POLITE_RATE_LIMIT_CODES=429x")
    assert proc.returncode != 0
    assert "POLITE_RATE_LIMIT_CODES='429x' is invalid: expected an integer" in proc.stderr
    assert "ValueError: invalid literal" not in proc.stderr


def test_accepted_rate_limit_codes_from_scrapy_crawl_command(sandbox) -> None:
    sb = sandbox(SandboxConfig(sites=[SiteConfig(name="a", latency=[0.01, 0.02])], proxies=ProxyConfig(count=2)))
    proc = scrapy_crawl(
        "-a", f"start_url={sb.site_url('a')}/status/420", "-s", f"POLITE_PROXIES={' '.join(sb.proxy_urls)}",
        "-s", "POLITE_RATE_LIMIT_CODES=429 420", "-s", "POLITE_RATE_RETRY_TIMES=1",
        "-s", "POLITE_COOLDOWN=0.1,0.2", "-s", "POLITE_DELAY=0.05,0.1", "-s", "POLITE_LOG_INTERVAL=0",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    # 420 is a rate signal: the first try and one re-queue, then given up.
    assert [e["status"] for e in sb.log()] == [420, 420]
    assert "'polite/requeued/rate': 1" in proc.stderr and "'polite/gave_up/rate': 1" in proc.stderr


def test_output_files_need_a_writable_directory_unless_a_placeholder_names_it(tmp_path) -> None:
    base = {"POLITE_PROXIES": ["http://127.0.0.1:9"]}
    jsonl = str(tmp_path / "run.jsonl")
    for name, extra in (("POLITE_STATS_JSONL", {}), ("POLITE_REPORT_HTML", {"POLITE_STATS_JSONL": jsonl})):
        with pytest.raises(PoliteConfigError, match=f"^{name}="):
            PoliteConfig.from_settings(Settings({**base, **extra, name: str(tmp_path / "missing" / "out")}))
        cfg = PoliteConfig.from_settings(Settings({**base, **extra, name: str(tmp_path / "%(name)s" / "out")}))
        assert cfg.stats_jsonl is not None
    PoliteConfig.from_settings(Settings({**base, "POLITE_STATS_JSONL": jsonl, "POLITE_REPORT_HTML": "report.html"}))
