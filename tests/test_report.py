"""The report tells each host's story: throttle events in the JSONL, timelines, comparisons, capped tables.

Real crawls against the sandbox; the site's access log and the crawl's own log are the ground truth.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tracemalloc
from collections import Counter, defaultdict
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
import scrapy
from conftest import ROOT, crawl
from faultcheck import assert_no_traceback, assert_pages_accounted, fault_crawl
from logcheck import statuses
from test_stats import _chromium, check_report_structure, chromium_dom

from scrapy_polite.errors import PoliteConfigError
from scrapy_polite.report.model import ReportData, build
from scrapy_polite.report.page import render
from scrapy_polite.sandbox import ProxyConfig, SandboxConfig, SiteConfig

#: The INFO (WARNING for a park) line the throttle logs for each decision.
DECISION = re.compile(
    r"(?P<host>\S+) concurrency (?P<c0>\d+) -> (?P<c1>\d+), delay (?P<d0>[\d.]+-[\d.]+) -> "
    r"(?P<d1>[\d.]+-[\d.]+) s, host interval (?P<i0>[\d.]+) -> (?P<i1>[\d.]+) s(?:, paused [\d.]+ s)? "
    r"\((?P<reason>.*)\)$"
)


class ItemSpider(scrapy.Spider):
    """Item pages 1..pages; with *slots*, page n goes to download slot ``s{n % slots}`` (a host of its own)."""

    name = "items"

    def __init__(self, base: str, pages: int, slots: int = 0, **kw: Any) -> None:
        super().__init__(**kw)
        self.base, self.pages, self.slots = base, int(pages), int(slots)

    async def start(self) -> Any:
        for n in range(1, self.pages + 1):
            meta = {"download_slot": f"s{n % self.slots}"} if self.slots else {}
            yield scrapy.Request(f"{self.base}/item/{n}", meta=meta)

    def parse(self, response: scrapy.http.Response) -> Any:
        yield {"url": response.url}


def split_jsonl(path: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(per-attempt records, throttle events) of a stats JSONL."""
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    return [r for r in lines if "event" not in r], [r for r in lines if r.get("event") == "throttle"]


def decisions(log_text: str) -> list[dict[str, str]]:
    return [m.groupdict() for line in log_text.splitlines() if (m := DECISION.search(line))]


class Page(HTMLParser):
    """Tags with their attributes, the text of each table cell, and what each <figure> holds."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.rows: list[list[str]] = []
        self.figure: str | None = None
        self.in_figure: Counter[tuple[str, str]] = Counter()  # (figure id, tag/class)
        self.text: list[str] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        self.tags.append((tag, a))
        if tag == "figure":
            self.figure = a.get("id")
        elif self.figure:
            self.in_figure[(self.figure, f"{tag}.{a.get('class') or ''}")] += 1
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "figure":
            self.figure = None
        elif tag in ("td", "th") and self._cell is not None:
            self.rows[-1].append("".join(self._cell).strip())
            self._cell = None

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._cell is not None:
            self._cell.append(data)


def parse(html: str) -> Page:
    page = Page()
    page.feed(html)
    return page


def start_site(sandbox: Any, proxies: int, **site: Any) -> Any:
    """A sandbox with site "a" (never blocking an IP) behind *proxies* proxies with exit IPs of their own."""
    cfg = SiteConfig(**{"name": "a", "latency": [0.01, 0.03], "strikes_to_block": None, **site})
    return sandbox(SandboxConfig(sites=[cfg], proxies=ProxyConfig(count=proxies, gateway=False)))


def assert_events_match_the_log(
    log_text: str, events: list[dict[str, Any]], host: str, retry_after: float
) -> dict[tuple[float, str], list[dict[str, Any]]]:
    """One event per value each logged decision changed, in the same order, with the same numbers and evidence.

    Returns the events by decision (time, reason); the ends of pauses, which are no decision, left out.
    """
    logged = decisions(log_text)
    assert logged and events
    groups: dict[tuple[float, str], list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        assert set(e) >= {"event", "time", "host", "change", "from", "to", "reason", "evidence"}, e
        if e["change"] not in ("resume", "unpark"):
            groups[(e["time"], e["reason"])].append(e)
    assert len(groups) == len(logged)
    for line, ((_, reason), group) in zip(logged, groups.items()):
        assert line["host"] == host and reason in line["reason"], (line, reason)
        by_change = {e["change"]: e for e in group}
        if line["c0"] != line["c1"]:
            assert (by_change["concurrency"]["from"], by_change["concurrency"]["to"]) == (
                int(line["c0"]), int(line["c1"]))
        else:
            assert "concurrency" not in by_change
        if line["d0"] != line["d1"]:
            lo = by_change["spacing"]["to"][0]
            assert abs(lo - float(line["d1"].split("-")[0])) <= 0.005 + 1e-6  # the log shows 2 decimals
        if line["i0"] != line["i1"]:
            rate = by_change["host_rate"]["to"]
            interval = 1 / rate if rate else 0.0
            assert abs(interval - float(line["i1"])) <= 0.005 + 1e-6
        # The evidence a 429 decision acted on is in the log line and in its events alike.
        if reason.startswith("429 via"):
            ev = group[0]["evidence"]
            assert ev["status"] == 429 and ev["signal"] == "rate"
            assert f"Retry-After {ev['retry_after']:g} s" in line["reason"]
            assert ev["retry_after"] == pytest.approx(retry_after, abs=0.01)
        # Where a cut met the host's limit, when the host rate moved: in both too.
        limit = group[0]["evidence"].get("host_limit")
        if limit is not None and "host_rate" in by_change:
            assert f"host limit met at {limit['ceiling']:.2f} req/s" in line["reason"]
    return groups


async def throttled_crawl(sb: Any, jsonl: Path, pages: int, settings: dict[str, Any]) -> tuple[Any, list]:
    """Pages 1..*pages* of site "a" at host concurrency 4, a host-wide pause after 2 endpoints' 429s
    within 2 s; checked for tracebacks and lost pages. (The fault run, the site's access log.)"""
    run = await fault_crawl(
        ItemSpider,
        {"POLITE_PROXIES": sb.proxy_urls, "POLITE_HOST_CONCURRENCY": 4, "POLITE_HOST_PAUSE_ENDPOINTS": 2,
         "POLITE_HOST_PAUSE_WINDOW": 2, "POLITE_STATS_JSONL": str(jsonl), "CLOSESPIDER_TIMEOUT": 30, **settings},
        jsonl.parent / "crawl.log", base=sb.site_url("a"), pages=pages,
    )
    log = sb.log()
    assert_no_traceback(run.log_text)
    assert_pages_accounted(run, log, range(1, pages + 1))
    return run, log


# -- throttle events -----------------------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_throttle_events_match_the_log_and_show_in_the_report(sandbox, tmp_path: Path) -> None:
    # 2 req/s per IP against 3 endpoints spaced 0.3-0.35 s, all busy: the per-IP limit binds.
    sb = start_site(sandbox, 3, pages=40, per_ip_rate=2, retry_after=1)
    jsonl = tmp_path / "stats.jsonl"
    run, log = await throttled_crawl(sb, jsonl, 30, {"POLITE_DELAY": (0.3, 0.35)})
    records, events = split_jsonl(jsonl)
    host = "127.0.1.1"

    # Attempt lines are what they were: one per request the site saw; readers of attempts skip events.
    assert Counter(r["status"] for r in records) == statuses(log)
    assert statuses(log)[429] > 0
    assert build([jsonl]).records == len(log)

    groups = assert_events_match_the_log(run.log_text, events, host, retry_after=1.0)
    signals = Counter(g[0]["evidence"]["signal"] for (_, r), g in groups.items() if r.startswith("429 via"))
    assert signals["rate"] > 0, signals  # the per-IP limit bound and was found
    assert sum(signals.values()) <= statuses(log)[429]

    # The report shows those events: the throttle table and the host's timeline, one marker per change.
    report = tmp_path / "report.html"
    report.write_text(render(build([jsonl]), sources=["stats.jsonl"]))
    changed = Counter(e["change"] for e in events)
    for html in (report.read_text(), chromium_dom(report, tmp_path) if _chromium() else None):
        if html is None:
            continue
        check_report_structure(html)
        page = parse(html)
        (row,) = [r for r in page.rows if r and r[0] == host and len(r) == 10 and r[1] == str(len(events))]
        assert row[2:4] == [str(signals["rate"]), "0"]
        assert row[8:10] == [str(changed["pause"]), str(changed["park"])]
        markers = page.in_figure[("fig-host-0", "circle.event")]
        levels: list[float] = []  # each level the host-wide limit was met at, as the events tell it
        for e in events:
            met = ((e.get("evidence") or {}).get("host_limit") or {}).get("ceiling")
            if met is not None and (not levels or levels[-1] != met):
                levels.append(met)
        assert markers == sum(changed[c] for c in ("concurrency", "spacing", "host_rate")) + len(levels)
        assert page.in_figure[("fig-host-0", "rect.pause")] == changed["pause"]
        assert page.in_figure[("fig-host-0", "rect.rl")] > 0  # 429s/min beside the throttle's state


@pytest_twisted.ensureDeferred
async def test_a_host_wide_limit_shows_as_host_rate_events_and_in_the_report(sandbox, tmp_path: Path) -> None:
    # 3 req/s for the whole host against 6 endpoints spaced 0.05-0.1 s: a host rate holds the cap.
    sb = start_site(sandbox, 6, pages=20, host_rate=3, retry_after=1)
    jsonl = tmp_path / "stats.jsonl"
    run, log = await throttled_crawl(sb, jsonl, 10, {"POLITE_DELAY": (0.05, 0.1)})
    _, events = split_jsonl(jsonl)
    host = "127.0.1.1"
    groups = assert_events_match_the_log(run.log_text, events, host, retry_after=1.0)
    signals = Counter(g[0]["evidence"]["signal"] for (_, r), g in groups.items() if r.startswith("429 via"))
    assert signals["rate"] > 0, signals
    # The cap is held by a host rate: the events say where the limit was met, and so does the report.
    rates = [e for e in events if e["change"] == "host_rate"]
    assert rates and any((e.get("evidence") or {}).get("host_limit") for e in rates)
    page = parse(render(build([jsonl])))
    (row,) = [r for r in page.rows if r and r[0] == host and len(r) == 10 and r[1] == str(len(events))]
    assert row[2] == str(signals["rate"])
    assert row[6].endswith("req/s") and row[7].endswith("req/s")



@pytest_twisted.ensureDeferred
async def test_a_spent_host_wide_quota_pauses_the_host_and_the_report_shades_each_pause(sandbox, tmp_path: Path) -> None:
    # 6 requests per 3 s window for the whole host, stated on every answer, against 4 endpoints: each time the
    # quota is spent the host waits for the window's reset (a pause), then resumes.
    sb = start_site(sandbox, 4, pages=30, limiter={"kind": "fixed_window", "limit": 6, "window": 3.0,
                                                   "scope": "host"})
    jsonl = tmp_path / "stats.jsonl"
    run, _ = await throttled_crawl(sb, jsonl, 24, {"POLITE_DELAY": (0.05, 0.1)})
    _, events = split_jsonl(jsonl)
    host = "127.0.1.1"
    pauses = [e for e in events if e["change"] == "pause"]
    resumes = [e for e in events if e["change"] == "resume"]
    assert pauses and resumes, Counter(e["change"] for e in events)
    assert len(resumes) == run.log_text.count(f"{host} resumed after") <= len(pauses)
    # Each resume ends a pause written before it, after the time that pause held the host.
    for r in resumes:
        assert any(p["time"] <= r["time"] and abs(p["to"] - r["from"]) < 0.01 for p in pauses), (r, pauses)

    page = parse(render(build([jsonl])))
    (row,) = [r for r in page.rows if r and r[0] == host and len(r) == 10]
    assert row[1] == str(len(events)) and row[8] == str(len(pauses))
    assert page.in_figure[("fig-host-0", "rect.pause")] == len(pauses)

# -- two runs compared ---------------------------------------------------------------------------


def per_run(log: list[dict[str, Any]]) -> dict[str, Any]:
    n = len(log)
    ok = sum(e["status"] == 200 for e in log)
    return {"attempts": n, "ok": ok, "429": sum(e["status"] == 429 for e in log)}


@pytest_twisted.ensureDeferred
async def test_two_real_runs_compared_side_by_side(sandbox, tmp_path: Path) -> None:
    # The same site crawled twice: tight spacing that draws 429s, then the spacing the site allows, with
    # a margin over its 0.5 s that a loaded machine's delays between gate and site cannot eat (0.55 s drew
    # a 429 once in CI, with two pytest workers and the oldest environment's suite running beside it).
    runs = {}
    for name, delay in (("tight", (0.05, 0.1)), ("spaced", (0.7, 0.75))):
        sb = start_site(sandbox, 4, pages=16, per_ip_rate=2, retry_after=1)
        jsonl = tmp_path / f"{name}.jsonl"
        await crawl(ItemSpider, {"POLITE_PROXIES": sb.proxy_urls, "POLITE_DELAY": delay,
                                 "POLITE_HOST_CONCURRENCY": 4, "POLITE_STATS_JSONL": str(jsonl)},
                    base=sb.site_url("a"), pages=12)
        runs[name] = per_run(sb.log())
    assert runs["tight"]["429"] > 0 and runs["spaced"]["429"] == 0
    out = tmp_path / "compare.html"
    proc = subprocess.run([sys.executable, "-m", "scrapy_polite", "report", str(tmp_path / "tight.jsonl"),
                           "--compare", str(tmp_path / "spaced.jsonl"), "-o", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert f"A {runs['tight']['attempts']} records" in proc.stdout
    assert f"B {runs['spaced']['attempts']} records" in proc.stdout
    page = parse(out.read_text())
    cells = {(a["data-host"], a["data-metric"]) for t, a in page.tags if t == "tr" and "data-host" in a}
    assert {h for h, _ in cells} == {"overall", "127.0.1.1"}
    table = [r for r in page.rows if len(r) == 5]
    metrics: dict[tuple[str, str], list[str]] = {}
    current = ""
    for r in table[1:]:
        current = r[0] or current
        metrics[(current, r[1])] = r[2:]
    for host in ("overall", "127.0.1.1"):
        a_429, b_429, diff = metrics[(host, "429s")]
        assert (int(a_429), int(b_429)) == (runs["tight"]["429"], runs["spaced"]["429"])
        assert diff.startswith(f"{-runs['tight']['429']:+d}")
        a_ok, b_ok, _ = metrics[(host, "success rate")]
        # Shown with one decimal.
        assert float(a_ok.rstrip("%")) == pytest.approx(100 * runs["tight"]["ok"] / runs["tight"]["attempts"],
                                                        abs=0.051)
        assert b_ok == "100%"
    for metric in ("pages/min", "latency P50", "latency P95"):
        assert all(v != "-" for v in metrics[("overall", metric)]), metric
    ids = [a.get("id") for t, a in page.tags if t == "figure"]
    assert ids == ["fig-throughput-a", "fig-throughput-b"]


# -- capped tables ---------------------------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_tables_show_the_top_hosts_and_endpoints_and_fold_the_rest(sandbox, tmp_path: Path) -> None:
    sb = start_site(sandbox, 6, pages=40, latency=[0.005, 0.01])
    jsonl = tmp_path / "stats.jsonl"
    # 7 download slots, each a host of its own, with 36 pages: slots get 6, 5 or 5 pages each.
    await crawl(ItemSpider, {"POLITE_PROXIES": sb.proxy_urls, "POLITE_DELAY": (0.01, 0.02),
                             "POLITE_HOST_CONCURRENCY": 3, "POLITE_STATS_JSONL": str(jsonl)},
                base=sb.site_url("a"), pages=36, slots=7)
    log = sb.log()
    records, _ = split_jsonl(jsonl)
    per_host = Counter(r["host"] for r in records)
    per_ip = Counter(e["ip"] for e in log)
    assert len(per_host) == 7 and sum(per_host.values()) == len(log) == 36
    out = tmp_path / "r.html"
    proc = subprocess.run([sys.executable, "-m", "scrapy_polite", "report", str(jsonl), "--top", "3",
                           "-o", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    html = out.read_text()
    page = parse(html)
    hosts = [r for r in page.rows if len(r) == 9 and r[0] != "host"]
    ranked = sorted(per_host.items(), key=lambda kv: (-kv[1], kv[0]))
    assert [(r[0], int(r[1])) for r in hosts] == [*ranked[:3], ("(other)", sum(n for _, n in ranked[3:]))]
    assert "4 more hosts folded into the (other) row" in html
    endpoints = [r for r in page.rows if len(r) == 3 and r[0] != "endpoint"]
    assert len(endpoints) == 4 and endpoints[-1][0] == "(other)"
    assert sum(int(r[1]) for r in endpoints) == sum(per_ip.values())
    assert sorted(int(r[1]) for r in endpoints[:3]) == sorted(per_ip.values())[-3:]
    assert "3 more endpoints folded into the (other) row" in html
    assert [a.get("id") for t, a in page.tags if t == "figure" and a.get("id", "").startswith("fig-host-")] == [
        "fig-host-0", "fig-host-1", "fig-host-2"]
    bad = subprocess.run([sys.executable, "-m", "scrapy_polite", "report", str(jsonl), "--top", "0"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--top" in bad.stderr


@pytest.mark.once
def test_a_host_busy_late_in_a_broad_crawl_gets_its_report_row_and_every_other_is_counted() -> None:
    from scrapy_polite.report.model import MAX_NAMES

    data = ReportData()
    many = MAX_NAMES + 1000
    for i in range(many):  # one answer each from many hosts, then one busy host
        data.add({"time": 1_700_000_000 + i / 100, "status": 200, "host": f"h{i}", "latency": 0.05})
    for i in range(50):
        data.add({"time": 1_700_000_100 + i / 100, "status": 200, "host": "late", "latency": 0.05})
    assert len(data.hosts) <= MAX_NAMES + 1
    top, other, folded = data.top_hosts(5)
    assert top[0][0] == "late" and top[0][1].total == 50 and "(other)" not in dict(top)
    assert other is not None and other.total == many - 4 and folded == many - 4
    assert sum(g.total for _, g in top) + other.total == data.records == many + 50


@pytest.mark.once
def test_the_throttle_table_shows_the_host_limit_last_met_and_where_it_fell_from() -> None:
    data = ReportData()
    data.add({"time": 1_700_000_000, "status": 200, "host": "a", "latency": 0.05})

    def rate_change(t: float, to: float, limit: dict[str, Any] | None) -> None:
        data.add({"event": "throttle", "time": 1_700_000_000 + t, "host": "a", "change": "host_rate", "from": 6.0,
                  "to": to, "reason": "r", "evidence": {"status": 429, "host_limit": limit}})

    rate_change(1.0, 5.5, {"ceiling": 6.1, "fell_from": None, "holds_below": 6.1, "hold": 6.0})
    page = parse(render(data))
    assert [r for r in page.rows if r and r[0] == "a" and len(r) == 10][0][7] == "6.1 req/s"
    rate_change(2.0, 2.0, {"ceiling": 2.2, "fell_from": 6.1, "holds_below": 2.2, "hold": 3.0})
    rate_change(3.0, 2.2, None)  # a climb with nothing new known: the last limit stands
    rate_change(4.0, 2.4, {"ceiling": "2.3", "fell_from": None})  # not a number: ignored
    page = parse(render(data))
    assert [r for r in page.rows if r and r[0] == "a" and len(r) == 10][0][7] == "2.2 req/s (fell from 6.1)"
    # The timeline draws each level the limit was met at, once: 6.1, then 2.2.
    assert page.in_figure[("fig-host-0", "circle.event")] == 4 + 2  # four host-rate changes, two levels
    html = render(data)
    assert "host_limit 6.1 at" in html and "host_limit 2.2 at" in html and "limit met (req/s)" in html


@pytest.mark.once
def test_report_memory_per_host_is_small() -> None:
    """Folding many hosts keeps a few KiB each, not a histogram of ~100 KiB per host."""
    data = ReportData()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    hosts = 200
    for i in range(hosts * 100):
        data.add({"time": 1_700_000_000 + i / 50, "status": 429 if i % 17 == 0 else 200, "host": f"h{i % hosts}",
                  "endpoint": f"e{i % 8}", "latency": 0.02 + (i % 97) / 400, "rate_limited": i % 17 == 0})
    for i in range(hosts * 10):
        data.add({"event": "throttle", "time": 1_700_000_000 + i / 5, "host": f"h{i % hosts}",
                  "change": "spacing", "from": [0.1, 0.2], "to": [0.1 + i / 1e4, 0.2], "reason": "r",
                  "evidence": {"blame": "per-ip"}})
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    grown = sum(s.size_diff for s in after.compare_to(before, "filename"))
    assert data.records == hosts * 100 and len(data.hosts) == hosts
    assert grown / hosts < 24 * 1024, grown / hosts


@pytest.mark.once
def test_throttle_events_name_each_changed_value() -> None:
    from scrapy_polite.metrics.throttle_events import throttle_events

    old = {"concurrency": 4, "delay": (0.3, 0.35), "interval": 0.0, "paused_until": 0.0}
    new = {"concurrency": 2, "delay": (0.5, 0.52), "interval": 0.5, "paused_until": 101.0}
    assert throttle_events(old, new, {"blame": "host"}, now=100.0) == [
        {"change": "concurrency", "from": 4, "to": 2},
        {"change": "spacing", "from": [0.3, 0.35], "to": [0.5, 0.52]},
        {"change": "host_rate", "from": None, "to": 2.0},
        {"change": "pause", "from": 0.0, "to": 1.0},
    ]
    assert throttle_events(new, {**new, "paused_until": 160.0}, {"park": 1}, now=100.5)[-1] == {
        "change": "park", "from": 0.5, "to": 59.5}
    assert throttle_events(new, new, {}, now=100.0) == []
    assert throttle_events(new, {**new, "paused_until": 101.0}, {}, now=102.0) == []  # a pause already over


# -- the report at spider close ---------------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_report_html_setting_writes_the_report_at_close(sandbox, tmp_path: Path) -> None:
    sb = start_site(sandbox, 3, pages=12, per_ip_rate=3, retry_after=1)
    await crawl(ItemSpider, {"POLITE_PROXIES": sb.proxy_urls, "POLITE_DELAY": (0.05, 0.1),
                             "POLITE_STATS_JSONL": str(tmp_path / "%(name)s.jsonl"),
                             "POLITE_REPORT_HTML": str(tmp_path / "%(name)s-report.html")},
                base=sb.site_url("a"), pages=10)
    log = sb.log()
    html = (tmp_path / "items-report.html").read_text()
    check_report_structure(html)
    ok = sum(e["status"] == 200 for e in log)
    assert f"<b>{ok}</b><span>successful pages</span>" in html
    assert f"<b>{len(log)}</b><span>attempts</span>" in html
    # Written after the last line of the JSONL: every throttle event of the run is in it.
    _, events = split_jsonl(tmp_path / "items.jsonl")
    assert events and f"{len(events)} throttle events" in html
    assert 'id="fig-host-0"' in html


@pytest.mark.parametrize(("settings", "expected"), [
    ({"POLITE_REPORT_HTML": "report.html"}, r"^POLITE_REPORT_HTML='report.html' is invalid: .*POLITE_STATS_JSONL"),
    ({"POLITE_REPORT_HTML": "%(region)s.html", "POLITE_STATS_JSONL": "s.jsonl"},
     r"^POLITE_REPORT_HTML=.* is invalid: .*the spider has no 'region'"),
])
@pytest_twisted.ensureDeferred
async def test_report_html_is_validated_at_start_up(sandbox, tmp_path: Path, monkeypatch, settings: dict,
                                                    expected: str) -> None:
    monkeypatch.chdir(tmp_path)
    sb = start_site(sandbox, 2, pages=2)
    with pytest.raises(PoliteConfigError, match=expected):
        await crawl(ItemSpider, {"POLITE_PROXIES": sb.proxy_urls, **settings}, base=sb.site_url("a"), pages=2)
    assert sb.log() == [] and list(tmp_path.glob("*.html")) == []
