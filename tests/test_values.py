"""Values a site can send, parsed without ever raising: Retry-After, exit-IP headers, Crawl-delay, the report."""

from __future__ import annotations

import email.utils
import json
import math
import random
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

from scrapy_polite.downloader.exit_ip import parse_exit_ip
from scrapy_polite.downloader.retry_after import parse_retry_after
from scrapy_polite.downloader.robots import crawl_delay as _crawl_delay
from scrapy_polite.downloader.splash import _target_headers
from scrapy_polite.report.model import build
from scrapy_polite.report.page import render
from scrapy_polite.report.records import check_line
from scrapy_polite.sandbox.config import LITERAL_RETRY_AFTER, SandboxConfig, SiteConfig

NOW = 1_800_000_000.0

#: Values no client can wait on: each must give None (the caller's cooldown), never raise.
UNUSABLE_RETRY_AFTER = [
    "Mon, 01 Jan 99999 00:00:00 GMT",
    "Mon, 01 Jan 12345678901234567890 00:00:00 GMT",
    "Mon, 01 Jan 9999999999 00:00:00 GMT",
    "Mon, 01 Jan 0 00:00:00 GMT",
    "Mon, 01 Jan 2030 00:00:00 +99999999999999999999",
    "\uff12\u79d2",  # fullwidth "2" and a CJK "seconds"
    "\u0663",  # an Arabic-Indic 3
    "\u00e9",
    "\xff\xfe",
    "",
    "   ",
    "\t\r\n",
    "-5",
    "-0",
    "0",
    "inf",
    "-inf",
    "nan",
    "1e9",
    "0x10",
    "1_000",
    "9" * 65,
    "9" * 8000,
    "Wed, 21 Oct 2026 07:28:00 GMT" * 40,
    "1" * 1_000_000,
    "soon",
]


@pytest.mark.once
@pytest.mark.parametrize("value", UNUSABLE_RETRY_AFTER, ids=lambda v: repr(v[:24]) + (f"+{len(v)}" if len(v) > 24 else ""))
def test_unusable_retry_after_is_none(value: str) -> None:
    assert parse_retry_after(value, now=NOW) is None
    assert parse_retry_after(value.encode("utf-8"), now=NOW) is None
    assert parse_retry_after(value.encode("latin-1", "replace"), now=NOW) is None


@pytest.mark.once
def test_usable_retry_after_still_parses() -> None:
    assert parse_retry_after("120", now=NOW) == 120
    assert parse_retry_after(b" 2.5 ", now=NOW) == 2.5
    # Huge but well-formed: the caller caps it at POLITE_RETRY_AFTER_MAX.
    assert parse_retry_after("9" * 40, now=NOW) == pytest.approx(1e40)
    date = email.utils.formatdate(NOW + 30, usegmt=True)
    assert parse_retry_after(date, now=NOW) == pytest.approx(30)
    assert parse_retry_after("Fri, 31 Dec 9999 23:59:59 GMT", now=NOW) > 1e11


@pytest.mark.once
def test_retry_after_never_raises_on_random_values() -> None:
    rng = random.Random(20261203)
    alphabet = "MonTueWedJanFebDec GMTUTC+-:,.0123456789 \t\u00e9\uff12"
    for _ in range(20_000):
        raw = bytes(rng.randrange(256) for _ in range(rng.randint(0, 80)))
        seconds = parse_retry_after(raw, now=NOW)
        assert seconds is None or (math.isfinite(seconds) and seconds > 0)
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        seconds = parse_retry_after(text, now=NOW)
        assert seconds is None or (math.isfinite(seconds) and seconds > 0)


@pytest.mark.once
@pytest.mark.parametrize("value", [
    "garbage", "999.1.1.1", "1.2.3", "1.2.3.4.5", "1.2.3.4, 5.6.7.8", "::g", "1" * 8192,
    "\uff11\uff12\uff17.0.0.1", "127.0.0.1\u00e9", "", "   ", "\x00", "-1", "4294967296",
])
def test_exit_ip_header_values_that_name_no_address(value: str) -> None:
    assert parse_exit_ip(value) is None
    assert parse_exit_ip(value.encode("utf-8")) is None


@pytest.mark.once
def test_exit_ip_header_values_that_name_an_address() -> None:
    assert parse_exit_ip(b" 127.0.0.10 ") == "127.0.0.10"
    assert parse_exit_ip("2001:DB8:0:0::1") == "2001:db8::1"


@pytest.mark.once
def test_exit_ip_never_raises_on_random_bytes() -> None:
    rng = random.Random(7)
    for _ in range(20_000):
        raw = bytes(rng.randrange(256) for _ in range(rng.randint(0, 70)))
        assert parse_exit_ip(raw) in (None, parse_exit_ip(raw.decode("latin-1")))


@pytest.mark.once
@pytest.mark.parametrize("written,expected", [
    ("2.5", 2.5),
    ("1e9", 1e9),  # taken as written here; HostThrottle caps it at POLITE_RETRY_AFTER_MAX
    ("inf", None),
    ("nan", None),
    ("-5", None),
    ("0", None),
    ("1e400", None),
    ("soon", None),
    ("", None),
    ("9" * 5000, None),
])
def test_crawl_delay_values(written: str, expected: float | None) -> None:
    assert _crawl_delay(f"User-agent: *\nCrawl-delay: {written}\n") == expected


def test_splash_target_headers_of_no_header_type_are_dropped() -> None:
    for raw in ({"X-A": [1, None]}, {"X-A": 1.5}, {5: "a"}, {"X-A": [[1]]}, [("X-A", 1.5)], [{"value": "x"}]):
        assert dict(_target_headers({"headers": raw})) == {}
    assert _target_headers({"headers": {"Retry-After": "7"}}).get(b"Retry-After") == b"7"


# -- the report ------------------------------------------------------------------------------

GOOD = {"time": NOW, "host": "a", "endpoint": "http://127.0.0.1:1", "status": 200, "latency": 0.05,
        "wait": 0.1, "exit_ip": "127.0.0.10", "exit_ip_source": "header", "rate_limited": False}
BAD_LINES = {
    "NaN time": ('{"time": NaN, "status": 200}', "bad time"),
    "Infinity time": ('{"time": Infinity, "status": 200}', "bad time"),
    "-Infinity time": ('{"time": -Infinity}', "bad time"),
    "huge time": ('{"time": 1e300, "status": 200}', "bad time"),
    "huge int time": ('{"time": 1' + "0" * 400 + "}", "bad time"),
    "negative time": ('{"time": -5}', "bad time"),
    "string time": ('{"time": "yesterday"}', "bad time"),
    "boolean time": ('{"time": true}', "bad time"),
    "no time": ('{"status": 200}', "bad time"),
    "NaN latency": (json.dumps({**GOOD, "latency": math.nan}), "bad latency"),
    "Infinity latency": (json.dumps({**GOOD, "latency": math.inf}), "bad latency"),
    "negative latency": (json.dumps({**GOOD, "latency": -1}), "bad latency"),
    "string latency": (json.dumps({**GOOD, "latency": "fast"}), "bad latency"),
    "Infinity wait": (json.dumps({**GOOD, "wait": math.inf}), "bad wait"),
    "huge wait": (json.dumps({**GOOD, "wait": 1e300}), "bad wait"),
    "not JSON": ('{"time": 1800000000, "status": 2', "not JSON"),
    "nested": ("[" * 100_000, "not JSON"),
    "digits": ("1" * 5000, "not JSON"),
    "list": ("[1, 2, 3]", "not an object"),
    "number": ("1800000000", "not an object"),
    "string": ('"hello"', "not an object"),
    "null": ("null", "not an object"),
}


@pytest.mark.once
@pytest.mark.parametrize("name", list(BAD_LINES))
def test_report_lines_that_hold_no_record(name: str) -> None:
    line, reason = BAD_LINES[name]
    assert check_line(line) == reason


@pytest.mark.once
def test_report_skips_and_counts_bad_lines(tmp_path: Path) -> None:
    src = tmp_path / "stats.jsonl"
    good = [json.dumps({**GOOD, "time": NOW + i}) for i in range(5)]
    bad = [line for line, _ in BAD_LINES.values()]
    src.write_text("\n".join([good[0], *bad[:8], *good[1:3], *bad[8:], *good[3:]]) + "\n")
    data = build([src])
    assert data.records == 5 and data.ok == 5
    assert sum(data.skipped.values()) == len(BAD_LINES)
    assert data.skipped["not JSON"] == 3 and data.skipped["not an object"] == 4
    html = render(data, sources=["stats.jsonl"])
    assert f"{len(BAD_LINES)} lines skipped (" in html and "3 not JSON" in html
    out = tmp_path / "r.html"
    proc = subprocess.run([sys.executable, "-m", "scrapy_polite", "report", str(src), "-o", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "5 records, 5 successful pages" in proc.stdout
    assert f"; {len(BAD_LINES)} lines skipped (" in proc.stdout and "9 bad time" in proc.stdout


# -- the sandbox's hostile site ----------------------------------------------------------------


@pytest.mark.once
def test_hostile_site_config_round_trip() -> None:
    sites = [SiteConfig(name=form, retry_after_form=form, extra_headers=[["X-Exit-IP", "\u00e9" * 3]])
             for form in LITERAL_RETRY_AFTER]
    cfg = SandboxConfig(sites=sites)
    again = SandboxConfig.from_dict(json.loads(json.dumps(cfg.to_dict())))
    assert again == cfg
    with pytest.raises(ValueError, match="extra_headers"):
        SiteConfig(name="x", extra_headers=[["X-A", "a\r\nX-Injected: 1"]])
