"""PoliteStats, the JSONL log, Prometheus and the HTML report, checked against ground truth.

Crawls run against the sandbox; its access log says what the target really
answered and which IP it saw, and every number the package reports is
compared with it.
"""

from __future__ import annotations

import gc
import json
import math
import re
import shutil
import subprocess
import sys
import time
import tracemalloc
import urllib.error
import urllib.request
from collections import Counter, defaultdict
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import pytest_twisted
import scrapy
from conftest import ROOT, crawl
from logcheck import statuses
from scrapy import signals
from scrapy.utils.test import get_crawler

from scrapy_polite import signals as polite_signals
from scrapy_polite.downloader.exit_ip import parse_probe_body
from scrapy_polite.downloader.middleware import PoliteProxyMiddleware
from scrapy_polite.errors import PoliteConfigError
from scrapy_polite.metrics.outcome import Outcome
from scrapy_polite.metrics.stats import PoliteStats
from scrapy_polite.metrics.summary import format_summary
from scrapy_polite.metrics.tables import MAX_EXIT_IPS, MAX_EXIT_IPS_PER_HOST, MAX_HOSTS
from scrapy_polite.metrics.top import OTHER
from scrapy_polite.report.model import ReportData, build
from scrapy_polite.report.page import render
from scrapy_polite.sandbox import ProxyConfig, SandboxConfig, SiteConfig
from scrapy_polite.settings.config import PoliteConfig

NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class MixSpider(scrapy.Spider):
    """Item pages, missing items (404) and /status/404; scrapes Prometheus once when idle."""

    name = "mix"
    handle_httpstatus_list = [404]

    def __init__(self, base: str, pages: int, missing: str = "", **kw: Any) -> None:
        super().__init__(**kw)
        self.base, self.pages = base, int(pages)
        self.missing = [int(m) for m in missing.split()]
        self.metrics: str | None = None

    @classmethod
    def from_crawler(cls, crawler: Any, *args: Any, **kwargs: Any) -> MixSpider:
        spider = super().from_crawler(crawler, *args, **kwargs)
        crawler.signals.connect(spider.idle, signal=signals.spider_idle)
        return spider

    async def start(self) -> Any:
        for n in range(1, self.pages + 1):
            yield scrapy.Request(f"{self.base}/item/{n}")
        for n in self.missing:
            yield scrapy.Request(f"{self.base}/item/{n}")
        yield scrapy.Request(f"{self.base}/status/404")

    def parse(self, response: scrapy.http.Response) -> Any:
        yield {"url": response.url, "status": response.status}

    def idle(self) -> None:
        url = self.crawler.get_extension(PoliteStats).prometheus_url
        if url and self.metrics is None:
            with NO_PROXY.open(url, timeout=5) as resp:
                self.metrics = resp.read().decode()


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The per-attempt records (event lines, such as the throttle's, are left out)."""
    return [r for line in path.read_text().splitlines() if "event" not in (r := json.loads(line))]


def path_of(url: str) -> str:
    return urlsplit(url).path


def per_url(records: list[dict[str, Any]], log: list[dict[str, Any]]) -> tuple[dict, dict]:
    """Per path: [(status, exit IP)] in time order, from the package and from the target."""
    ours: dict[str, list[tuple[int, str | None]]] = defaultdict(list)
    for r in sorted(records, key=lambda r: r["time"]):
        ours[path_of(r["url"])].append((r["status"], r["exit_ip"]))
    truth: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for e in sorted(log, key=lambda e: e["t_start"]):
        truth[e["path"]].append((e["status"], e["ip"]))
    return dict(ours), dict(truth)


def hdr_percentile(values_ms: list[int], p: float) -> int:
    """The exact value HdrHistogram approximates: the ceil(p/100 * n)-th smallest, rounded half up."""
    ordered = sorted(values_ms)
    rank = max(1, int(p / 100.0 * len(ordered) + 0.5))
    return ordered[rank - 1]


def assert_close_percentile(reported_s: float, values_ms: list[int], p: float, digits: int) -> None:
    exact = hdr_percentile(values_ms, p)
    got = round(reported_s * 1000)
    # HDR reports the top of the value's bucket: never below, at most 10**-digits above.
    assert exact <= got <= exact * (1 + 2 * 10**-digits) + 1, (p, exact, got)


def metric_values(text: str, name: str) -> dict[str, float]:
    out = {}
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            labels, value = line.rsplit(" ", 1)
            out[labels] = float(value)
    return out


def site(**kw: Any) -> SiteConfig:
    kw.setdefault("name", "a")
    kw.setdefault("latency", [0.01, 0.04])
    return SiteConfig(**kw)


# -- real crawls -----------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_stats_match_the_access_log_with_429s_and_404s(sandbox, tmp_path: Path) -> None:
    sb = sandbox(SandboxConfig(sites=[site(pages=40, per_ip_rate=2, per_ip_burst=1)],
                               proxies=ProxyConfig(count=6, gateway=False)))
    jsonl = tmp_path / "stats.jsonl"
    result = await crawl(
        MixSpider,
        {"POLITE_PROXIES": sb.proxy_urls, "POLITE_DELAY": (0.1, 0.2), "POLITE_HOST_CONCURRENCY": 4,
         "POLITE_STATS_JSONL": str(jsonl), "POLITE_PROMETHEUS_PORT": 0},
        base=sb.site_url("a"), pages="36", missing="41 42 43 44 45",
    )
    log = sb.log()
    records = read_jsonl(jsonl)
    stats = result.stats
    label_to_ip = {f"http://127.0.0.1:{urlsplit(u).port}": ip for u, ip in zip(sb.proxy_urls, sb.proxy_exit_ips)}
    # Stats keys name an endpoint by host:port, one segment between slashes (monitoring tools split on /).
    key_to_ip = {f"127.0.0.1:{urlsplit(u).port}": ip for u, ip in zip(sb.proxy_urls, sb.proxy_exit_ips)}
    endpoint_keys = [k for k in stats if "endpoint/" in k]
    assert endpoint_keys and all(len(k.split("/")) in (3, 4, 5) for k in endpoint_keys)
    assert {k.split("/")[2] for k in stats if k.startswith("polite/endpoint/")} == set(key_to_ip)

    # Every attempt is one record and one access-log line; the statuses agree.
    truth = statuses(log)
    assert truth[429] > 0 and truth[404] == 6 and truth[200] == 36
    assert Counter(r["status"] for r in records) == truth
    assert {s: stats.get(f"polite/status/{s}") for s in truth} == dict(truth)
    assert stats["polite/attempts"] == len(log)
    assert stats["polite/success"] == truth[200]
    assert stats["polite/rate_limited"] == truth[429] == stats["polite/rate_limited/host/127.0.1.1"]
    host = "127.0.1.1"
    assert {s: stats.get(f"polite/host/{host}/status/{s}") for s in truth} == dict(truth)
    assert stats[f"polite/host/{host}/success"] == truth[200]
    assert not stats.get("polite/gave_up")

    # Per endpoint: what the package counted for each proxy is what the target saw from its exit IP.
    for key, ip in key_to_ip.items():
        seen = Counter(e["status"] for e in log if e["ip"] == ip)
        counted = {s: stats[f"polite/endpoint/{key}/status/{s}"] for s in seen}
        assert counted == dict(seen), key
        assert stats.get(f"polite/rate_limited/endpoint/{key}", 0) == seen[429]

    # The exit IP of every response is the IP the target saw, attempt by attempt, from the header.
    ours, theirs = per_url(records, log)
    assert ours == theirs
    assert {r["exit_ip_source"] for r in records} == {"header"}
    assert all(label_to_ip[r["endpoint"]] == r["exit_ip"] for r in records)
    assert {ip: stats[f"polite/exit_ip/{ip}"] for ip in sb.proxy_exit_ips} == Counter(e["ip"] for e in log)
    assert stats["polite/exit_ips"] == stats[f"polite/host/{host}/exit_ips"] == len({e["ip"] for e in log})

    # Latency split: download latency covers the server's time, gate waits carry the cooldowns.
    by_path: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in sorted(records, key=lambda r: r["time"]):
        by_path[path_of(r["url"])].append(r)
    server = {p: [e["t_end"] - e["t_start"] for e in sorted(es, key=lambda e: e["t_start"])]
              for p, es in _group(log).items()}
    for p, rs in by_path.items():
        assert [r["requeues"] for r in rs] == list(range(len(rs)))
        for r, took in zip(rs, server[p]):
            assert took - 0.01 <= r["latency"] < took + 0.5
    requeued_waits = [r["wait"] for r in records if r["requeues"]]
    assert requeued_waits and max(requeued_waits) > 1.0  # Retry-After 2 s, waited at the gate
    assert max(r["latency"] for r in records) < 1.0

    # Percentiles agree with the per-record latencies within histogram precision.
    lat_ms = [max(1, int(r["latency"] * 1000)) for r in records]
    for p in (50, 95, 99):
        assert_close_percentile(stats[f"polite/latency/p{p}"], lat_ms, p, digits=3)
        assert_close_percentile(stats[f"polite/host/{host}/latency/p{p}"], lat_ms, p, digits=2)

    # Pages/min is successful pages over the run's duration.
    expected = truth[200] * 60.0 / stats["elapsed_time_seconds"]
    assert stats["polite/pages_per_min"] == pytest.approx(expected, rel=0.02)
    assert stats["polite/success_rate"] == pytest.approx(truth[200] / len(log), abs=1e-4)

    # Prometheus served the same counts while the crawl ran, and freed its port at the end.
    text = result.crawler.spider.metrics
    assert text is not None
    assert sum(metric_values(text, "polite_requests_total").values()) == len(log)
    assert sum(metric_values(text, "polite_rate_limited_total").values()) == truth[429]
    assert metric_values(text, "polite_success_total") == {f'polite_success_total{{host="{host}"}}': 36.0}
    assert metric_values(text, "polite_exit_ips") == {f'polite_exit_ips{{host="{host}"}}': 6.0}
    assert 'polite_download_latency_seconds_count{host="127.0.1.1"}' in text
    assert "polite_gate_wait_seconds_bucket" in text

    # The report renders from this run's JSONL.
    out = tmp_path / "report.html"
    proc = subprocess.run([sys.executable, "-m", "scrapy_polite", "report", str(jsonl), "-o", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    html = out.read_text()
    check_report_structure(html)
    assert f"<b>{truth[200]}</b><span>successful pages</span>" in html


def _group(log: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in log:
        out[e["path"]].append(e)
    return out


@pytest.mark.parametrize("source", ["static", "probe", "none"])
@pytest_twisted.ensureDeferred
async def test_exit_ip_without_provider_header(sandbox, tmp_path: Path, source: str) -> None:
    # The proxies send their exit IP under a header the package is not told about.
    # The IP-echo service answers slower than the target: the first pages through an endpoint
    # would come back before its probe does, unless the probe holds the endpoint.
    cfg = SandboxConfig(sites=[site(name="a", latency=[0.03, 0.05], pages=12), site(name="echo", latency=[0.4, 0.5])],
                        proxies=ProxyConfig(count=3, gateway=False, exit_ip_header="X-Unlisted-Exit"))
    sb = sandbox(cfg)
    settings: dict[str, Any] = {"POLITE_DELAY": (0.05, 0.1), "POLITE_STATS_JSONL": str(tmp_path / "s.jsonl")}
    if source == "static":
        settings["POLITE_PROXIES"] = [{"url": u, "exit_ip": ip} for u, ip in zip(sb.proxy_urls, sb.proxy_exit_ips)]
    else:
        settings["POLITE_PROXIES"] = sb.proxy_urls
    if source == "probe":
        settings["POLITE_EXIT_IP_PROBE_URL"] = sb.site_url("echo") + "/ip"
    result = await crawl(MixSpider, settings, base=sb.site_url("a"), pages="12")
    log = sb.log()
    records = read_jsonl(tmp_path / "s.jsonl")
    target = [e for e in log if e["site"] == "a"]
    assert len(records) == len(target) == 13
    ours, theirs = per_url(records, target)
    if source == "none":
        # Unknown stays unknown: never the proxy's own address (response.ip_address).
        assert {r["exit_ip"] for r in records} == {None}
        assert {r["exit_ip_source"] for r in records} == {None}
        assert result.stats["polite/exit_ip_source/unknown"] == 13
        return
    assert ours == theirs
    assert {r["exit_ip_source"] for r in records} == {source}
    assert result.stats[f"polite/exit_ip_source/{source}"] == 13
    if source == "probe":
        probes = [e for e in log if e["site"] == "echo"]
        assert sorted(e["ip"] for e in probes) == sorted(sb.proxy_exit_ips)  # one per endpoint
        assert {e["path"] for e in probes} == {"/ip"}
        assert result.stats["polite/exit_ip_probe/ok"] == 3
        # One request at a time per exit IP, the probes included.
        by_ip: dict[str, list[tuple[float, float]]] = defaultdict(list)
        for e in log:
            by_ip[e["ip"]].append((e["t_start"], e["t_end"]))
        for spans in by_ip.values():
            spans.sort()
            assert all(end <= nxt_start + 0.005 for (_, end), (nxt_start, _) in zip(spans, spans[1:]))
        exit_ips = result.crawler.get_downloader_middleware(PoliteProxyMiddleware).exit_ips
        assert sorted(exit_ips.probed(u) for u in sb.proxy_urls) == sorted(sb.proxy_exit_ips)


@pytest.mark.parametrize("connect_headers", [True, False], ids=["scrapy-proxy-headers", "plain"])
@pytest_twisted.ensureDeferred
async def test_https_exit_ip_comes_from_the_connect_reply(sandbox, tmp_path: Path, caplog, connect_headers) -> None:
    # Through a tunnel the proxy's exit-IP header is on the CONNECT reply, which plain Scrapy drops.
    if connect_headers:
        pytest.importorskip("scrapy_proxy_headers", reason="scrapy-proxy-headers needs Scrapy >= 2.14.2")
    sb = sandbox(SandboxConfig(sites=[site(name="a", tls=True, latency=[0.03, 0.05], pages=12)],
                               proxies=ProxyConfig(count=3, gateway=False)))
    settings: dict[str, Any] = {"POLITE_PROXIES": sb.proxy_urls, "POLITE_DELAY": (0.05, 0.1),
                                "POLITE_STATS_JSONL": str(tmp_path / "s.jsonl")}
    if connect_headers:
        settings["DOWNLOAD_HANDLERS"] = {"https": "scrapy_proxy_headers.HTTP11ProxyDownloadHandler"}
    with caplog.at_level("WARNING", logger="scrapy_polite.downloader.middleware"):
        result = await crawl(MixSpider, settings, base=sb.site_url("a"), pages="12")
    records = read_jsonl(tmp_path / "s.jsonl")
    target = [e for e in sb.log() if e["site"] == "a"]
    assert len(records) == len(target) == 13
    assert len([e for e in sb.proxy_log() if e["method"] == "CONNECT"]) < 13  # tunnels were reused
    warnings = [r for r in caplog.records if "carry no exit IP" in r.getMessage()]
    if connect_headers:
        ours, theirs = per_url(records, target)
        assert ours == theirs
        assert result.stats["polite/exit_ip_source/header"] == 13
        assert warnings == []
    else:
        assert {r["exit_ip"] for r in records} == {None}
        assert len(warnings) == 1 and "scrapy-proxy-headers" in warnings[0].getMessage()


# -- units on PoliteStats -------------------------------------------------------


def make_stats(tmp_path: Path, **settings: Any) -> PoliteStats:
    crawler = get_crawler(settings_dict={"POLITE_PROXIES": ["http://127.0.0.1:9"], **settings})
    return PoliteStats.from_crawler(crawler)


def synthetic(n: int, start: int = 0, t0: float = 1_700_000_000.0, unique_ips: bool = False) -> Iterator[Outcome]:
    for i in range(start, start + n):
        status = 429 if i % 10 == 0 else 404 if i % 17 == 0 else 200
        ip = f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}" if unique_ips else f"127.0.0.{10 + i % 8}"
        yield Outcome(
            time=t0 + i * 0.01, url=f"http://h{i % 3}.test/item/{i}", host=f"h{i % 3}.test",
            endpoint=f"http://127.0.0.1:{9000 + i % 8}", session=None, status=status, exception=None,
            wait=(i % 50) / 100, latency=0.005 + (i % 997) / 1000, exit_ip=ip, exit_ip_source="header",
            requeues=i % 3, rate_limited=status == 429,
        )


def test_memory_does_not_grow_with_responses(tmp_path: Path) -> None:
    stats = make_stats(tmp_path)
    for o in synthetic(20_000, unique_ips=True):  # fills every cap and the window
        stats.record(o)
    gc.collect()
    outcomes = list(synthetic(100_000, start=20_000, unique_ips=True))
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for o in outcomes:
            stats.record(o)
        del o
        gc.collect()
        growth = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert stats.total == 120_000
    print(f"PoliteStats grew by {growth} bytes over 100k responses")
    assert growth < 64 * 1024, f"grew by {growth} bytes over 100k responses"
    assert len(stats.exit_ips) <= MAX_EXIT_IPS + 1
    assert all(len(h.exit_ips) <= MAX_EXIT_IPS_PER_HOST + 1 for h in stats.hosts.values())
    assert stats.summary()["exit_ips"] == MAX_EXIT_IPS  # pooled overflow is not an IP


def test_a_host_busy_late_in_a_broad_crawl_gets_its_row_and_the_tables_stay_bounded(tmp_path: Path) -> None:
    stats = make_stats(tmp_path)

    def outcome(i: int, host: str) -> Outcome:
        return Outcome(
            time=1_700_000_000.0 + i * 0.01, url=f"http://{host}/", host=host, endpoint="http://127.0.0.1:9000",
            session=None, status=429, exception=None, wait=0.0, latency=0.05, exit_ip="127.0.0.10",
            exit_ip_source="header", requeues=0, rate_limited=True,
        )

    n = 10 * MAX_HOSTS
    for i in range(n):  # one 429 each from many hosts, then one busy host
        stats.record(outcome(i, f"h{i}.test"))
    for i in range(300):
        stats.record(outcome(n + i, "late.test"))
    for i in range(3 * MAX_HOSTS):  # more newcomers: the busy host keeps its row
        stats.record(outcome(n + 300 + i, f"new{i}.test"))
    assert len(stats.hosts) <= 2 * MAX_HOSTS
    assert stats.hosts["late.test"].total == 300
    assert sum(h.total for h in stats.hosts.values()) == stats.total == n + 300 + 3 * MAX_HOSTS
    live = {k: v for k, v in stats.stats.get_stats().items() if k.startswith("polite/rate_limited/host/")}
    assert len(live) <= 2 * MAX_HOSTS + 1 and sum(live.values()) == stats.total
    assert live["polite/rate_limited/host/late.test"] == 300 and live[f"polite/rate_limited/host/{OTHER}"] > 0
    assert sum(h.latency is not None for h in stats.hosts.values()) <= stats.config.stats_top
    top = stats.summary()["hosts"]
    assert max(top, key=lambda k: top[k]["attempts"]) == OTHER and top["late.test"]["attempts"] == 300
    # Every name without a row of its own at the end is counted, folded early or at close.
    stats._export(stats.summary(), None)
    names = n + 1 + 3 * MAX_HOSTS
    assert stats.stats.get_value("polite/hosts_folded") == names - stats.config.stats_top


def test_summary_table_reads_per_host_and_per_endpoint(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    stats = make_stats(tmp_path)
    for o in synthetic(3000):
        stats.record(o)
    stats.crawler.signals.send_catch_log(polite_signals.request_gave_up, request=None, reason="rate: 429")
    with caplog.at_level("INFO", logger="scrapy_polite.metrics.stats"):
        stats._log()
    assert re.search(r"pages/min now, [\d.]+ overall; \d+/3000 ok, 429s 10\.0%; P50 [\d.]+s P95 [\d.]+s P99 [\d.]+s",
                     caplog.text)
    s = stats.summary()
    assert s["gave_up"] == 1
    assert s["attempts"] == 3000 and s["rate_limited"] == 300
    assert s["success"] == sum(o.success for o in synthetic(3000))
    assert set(s["hosts"]) == {"h0.test", "h1.test", "h2.test"} and len(s["endpoints"]) == 8
    assert all(h["latency_p99"] is not None and h["exit_ips"] == 8 for h in s["hosts"].values())
    lines = format_summary(s).splitlines()
    header = next(line for line in lines if line.strip().startswith("host"))
    assert header.split() == ["host", "attempts", "ok", "429", "403", "exit", "IPs", "P50", "P95", "P99", "other"]
    row = next(line for line in lines if line.strip().startswith("h1.test")).split()
    h1 = s["hosts"]["h1.test"]
    assert row[:4] == ["h1.test", "1000", str(h1["success"]), str(h1["statuses"]["429"])]
    assert row[-2:] == ["404:", str(h1["statuses"]["404"])]
    ep_header = next(i for i, line in enumerate(lines) if line.strip().startswith("endpoint"))
    assert len(lines) - ep_header - 1 == 8
    assert "pages/min" in lines[0] and "rate-limited 300 (10.0%)" in lines[1] and "P99" in lines[2]


def test_window_counts_only_recent_successes(tmp_path: Path) -> None:
    stats = make_stats(tmp_path, POLITE_STATS_WINDOW=10)
    t0 = 1_700_000_000.0
    stats.started = t0

    def ok_at(t: float) -> Outcome:
        return Outcome(time=t, url="http://h/x", host="h", endpoint="e", session=None, status=200,
                       exception=None, wait=0.0, latency=0.01, exit_ip=None, exit_ip_source=None,
                       requeues=0, rate_limited=False)

    for s in range(20):
        stats.record(ok_at(t0 + s + 0.5))  # 1/s for 20 s
    for s in range(20, 30):
        for _ in range(3):
            stats.record(ok_at(t0 + s + 0.5))  # 3/s for 10 s
    window, overall = stats.pages_per_min(now=t0 + 30.0)
    assert window == pytest.approx(3 * 60.0)
    assert overall == pytest.approx(50 * 2.0)


def test_jsonl_is_flushed_per_line_and_rotates_at_the_cap(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    cap = 4096
    stats = make_stats(tmp_path, POLITE_STATS_JSONL=str(path), POLITE_STATS_JSONL_MAX_BYTES=cap)
    outcomes = list(synthetic(200))
    stats.record(outcomes[0])
    assert json.loads(path.read_text())["url"] == outcomes[0].url  # on disk before close
    for o in outcomes[1:]:
        stats.record(o)
    stats._closed(None, "finished")
    current, rotated = path.read_bytes(), Path(str(path) + ".1").read_bytes()
    assert 0 < len(current) <= cap and 0 < len(rotated) <= cap
    assert not Path(str(path) + ".2").exists()
    lines = [json.loads(x) for x in rotated.splitlines() + current.splitlines()]
    # The newest records, in order, none cut in half.
    assert [r["url"] for r in lines] == [o.url for o in outcomes[-len(lines):]]
    assert lines[-1] == outcomes[-1].to_dict()
    assert set(lines[0]) >= {"host", "endpoint", "session", "status", "exception", "wait", "latency",
                             "exit_ip", "exit_ip_source", "requeues", "rate_limited"}


def test_probe_url_setting_is_validated() -> None:
    from scrapy.settings import Settings

    base = {"POLITE_PROXIES": ["http://127.0.0.1:9"]}
    assert PoliteConfig.from_settings(Settings(base)).exit_ip_probe_url is None
    cfg = PoliteConfig.from_settings(Settings({**base, "POLITE_EXIT_IP_PROBE_URL": "https://127.0.0.1/ip"}))
    assert cfg.exit_ip_probe_url == "https://127.0.0.1/ip" and cfg.exit_ip_probe_timeout == 10.0
    with pytest.raises(PoliteConfigError, match="POLITE_EXIT_IP_PROBE_URL"):
        PoliteConfig.from_settings(Settings({**base, "POLITE_EXIT_IP_PROBE_URL": "127.0.0.1/ip"}))


def test_probe_body_parsing() -> None:
    assert parse_probe_body(b'{"ip": "203.0.113.7"}') == "203.0.113.7"
    assert parse_probe_body(b'{"origin": "203.0.113.7, 10.0.0.1"}') == "203.0.113.7"
    assert parse_probe_body(b"2001:db8::1\n") == "2001:db8::1"
    assert parse_probe_body(b"<html>blocked</html>") is None
    assert parse_probe_body(b'{"ip": 7}') is None
    assert parse_probe_body(b"") is None


def test_prometheus_serves_on_a_free_loopback_port(tmp_path: Path) -> None:
    from scrapy_polite.metrics.prometheus import PrometheusExporter

    exporter = PrometheusExporter("127.0.0.1", 0)
    try:
        assert exporter.address == "127.0.0.1" and exporter.port > 0
        for o in synthetic(30):
            exporter.observe(o, str(o.status))
        with NO_PROXY.open(exporter.url, timeout=5) as resp:
            text = resp.read().decode()
        assert sum(metric_values(text, "polite_requests_total").values()) == 30
        assert sum(metric_values(text, "polite_rate_limited_total").values()) == 3
    finally:
        exporter.close()
    with pytest.raises(urllib.error.URLError):
        NO_PROXY.open(exporter.url, timeout=2)


# -- the HTML report --------------------------------------------------------


def write_synthetic_jsonl(path: Path) -> list[Outcome]:
    """Ten minutes of a crawl whose host starts rate limiting in the middle."""
    outcomes = []
    t0 = 1_700_000_000.0
    i = 0
    for second in range(600):
        for k in range(3):
            i += 1
            limited = 240 <= second < 330 and k == 0
            status = 429 if limited else 404 if i % 23 == 0 else 403 if i % 97 == 0 else 200
            exception = None if i % 211 else "TimeoutError"
            outcomes.append(Outcome(
                time=t0 + second + k / 3, url=f"http://shop.test/item/{i}", host="shop.test",
                endpoint=f"http://127.0.0.1:{9000 + i % 6}", session=None,
                status=None if exception else status, exception=exception, wait=0.2 * (i % 7),
                latency=0.02 + 0.3 * ((i * 7919) % 100) / 100 + (2.0 if i % 50 == 0 else 0),
                exit_ip=f"127.0.0.{10 + i % 6}", exit_ip_source="header", requeues=0, rate_limited=limited and not exception,
            ))
    path.write_text("".join(json.dumps(o.to_dict()) + "\n" for o in outcomes) + '{"partial": \n')
    return outcomes


class _Collector(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


FIGURES = ("fig-throughput", "fig-latency", "fig-status-endpoint", "fig-exit-ips")


def check_report_structure(html: str) -> _Collector:
    parsed = _Collector()
    parsed.feed(html)
    tags = [t for t, _ in parsed.tags]
    # Self-contained: nothing is fetched.
    for tag, attrs in parsed.tags:
        assert tag not in ("script", "link", "img", "iframe", "object", "embed"), tag
        for name in ("src", "href", "xlink:href", "srcset"):
            assert name not in attrs, (tag, attrs)
    assert "@import" not in html and "url(" not in html
    ids = [a.get("id") for t, a in parsed.tags if t == "figure"]
    hosts = [i for i in ids if i and i.startswith("fig-host-")]  # a throttle timeline per host
    assert [i for i in ids if i not in hosts] == list(FIGURES)
    assert tags.count("svg") == 4 + len(hosts)
    return parsed


def test_report_structure_without_a_browser(tmp_path: Path) -> None:
    src = tmp_path / "stats.jsonl"
    outcomes = write_synthetic_jsonl(src)
    data = build([src])
    assert data.records == len(outcomes)
    ok = sum(o.success for o in outcomes)
    assert data.ok == ok and data.pages_per_min() == pytest.approx(ok * 60 / (outcomes[-1].time - outcomes[0].time))
    html = render(data, sources=["stats.jsonl"])
    parsed = check_report_structure(html)
    assert "2023-11-14 22:13:20 UTC to 2023-11-14 22:23:19 UTC (10.0 min)" in html
    # Throughput: one point per bin; 429 bars exactly in the rate-limited stretch.
    width, points = data.series()
    assert width == 5 and len(points) == 120
    limited = [m for m, _, rl in points if rl > 0]
    assert min(limited) == pytest.approx(4.0 + 2.5 / 60) and max(limited) == pytest.approx(5.5 - 2.5 / 60)
    assert sum(rl * width / 60 for _, _, rl in points) == pytest.approx(sum(o.rate_limited for o in outcomes))
    circles = [a for t, a in parsed.tags if t == "circle"]
    assert len(circles) == 120
    # Latency percentiles are marked; endpoint and exit-IP bars cover every one of them.
    for p in ("P50", "P95", "P99"):
        assert re.search(rf">{p} \d+ ms<|>{p} [\d.]+ s<", html), p
    assert all(f"http://127.0.0.1:{9000 + k}" in html for k in range(6))
    assert all(f">127.0.0.{10 + k}<" in html for k in range(6))
    assert ">TimeoutError<" in html


def test_report_command_line(tmp_path: Path) -> None:
    src = tmp_path / "stats.jsonl"
    write_synthetic_jsonl(src)
    out = tmp_path / "r.html"
    proc = subprocess.run([sys.executable, "-m", "scrapy_polite", "report", str(src), "-o", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "1800 records" in proc.stdout
    check_report_structure(out.read_text())
    bad = subprocess.run([sys.executable, "-m", "scrapy_polite", "report", str(tmp_path / "missing.jsonl")],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "missing.jsonl" in bad.stderr


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def chromium_flags(tmp_path: Path) -> list[str]:
    return [
        "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars",
        # Anything the page tried to fetch would fail: it must need nothing.
        "--proxy-server=127.0.0.1:9", "--host-resolver-rules=MAP * ~NOTFOUND",
        f"--user-data-dir={tmp_path / 'profile'}",
    ]


def chromium_dom(report: Path, tmp_path: Path) -> str:
    """The DOM headless Chromium builds from the *report* file, offline."""
    chromium = _chromium()
    assert chromium is not None
    dom = subprocess.run([chromium, *chromium_flags(tmp_path), "--dump-dom", report.as_uri()],
                         capture_output=True, text=True, timeout=60)
    assert dom.returncode == 0, dom.stderr[-2000:]
    return dom.stdout


@pytest.mark.once  # the report is static HTML: how it renders does not depend on Scrapy
@pytest.mark.skipif(_chromium() is None, reason="headless Chromium not installed (apt-get install chromium)")
def test_report_renders_in_headless_chromium(tmp_path: Path) -> None:
    src = tmp_path / "stats.jsonl"
    write_synthetic_jsonl(src)
    report = tmp_path / "report.html"
    report.write_text(render(build([src]), sources=["stats.jsonl"]))
    check_report_structure(chromium_dom(report, tmp_path))
    flags = chromium_flags(tmp_path)
    chromium = _chromium()
    assert chromium is not None
    shot = tmp_path / "report.png"
    run = subprocess.run([chromium, *flags, "--window-size=1000,2600", f"--screenshot={shot}", report.as_uri()],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr[-2000:]
    png = shot.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20_000
    width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
    assert (width, height) == (1000, 2600)


def test_report_data_is_bounded_in_time_buckets() -> None:
    data = ReportData()
    for s in range(0, 50_000, 1):
        data.add({"time": 1_700_000_000 + s, "status": 200, "host": "h", "endpoint": "e", "latency": 0.1})
    assert len(data.buckets) <= 20_000 and data.resolution == 4
    width, points = data.series()
    assert len(points) <= 120 and sum(ok * (width / 60) for _, ok, _ in points) == pytest.approx(50_000, rel=0.01)
    assert math.isclose(data.pages_per_min(), 50_000 * 60 / 49_999)


def test_fleet_merge_equals_one_process_that_saw_everything(tmp_path: Path) -> None:
    """Two processes' snapshots, merged, say what one process seeing every outcome says."""
    from scrapy_polite.metrics.fleet import merge, snapshot

    parts = [make_stats(tmp_path), make_stats(tmp_path)]
    whole = make_stats(tmp_path)
    for o in synthetic(3000):
        # Fast answers went through one process, slow ones through the other: only an
        # exact merge of the histograms gives the percentiles of the whole.
        parts[o.latency > 0.3].record(o)
        whole.record(o)
    snaps = [json.loads(json.dumps(snapshot(p, finished=True))) for p in parts]  # as stored in Redis
    merged = merge(snaps)
    expected = whole.summary()
    keys = ("attempts", "success", "rate_limited", "bans", "exceptions", "exit_ips", "requests_per_exit_ip",
            "latency_p50", "latency_p95", "latency_p99", "wait_p50", "wait_p95", "wait_p99")
    assert {k: merged[k] for k in keys} == {k: expected[k] for k in keys}
    assert merged["processes"] == 2 and merged["running"] == 0
    for host, h in expected["hosts"].items():
        m = merged["hosts"][host]
        for k in ("attempts", "success", "rate_limited", "statuses", "exit_ips", "latency_p50", "latency_p95"):
            assert m[k] == h[k], (host, k)
    assert {ep: e["statuses"] for ep, e in merged["endpoints"].items()} == {
        ep: e["statuses"] for ep, e in expected["endpoints"].items()}
    assert merged["success_rate"] == expected["success_rate"]
    assert "successful pages of 3000 attempts" in format_summary(merged)


def test_fleet_snapshots_round_trip_through_redis_and_old_ones_leave_the_index(tmp_path: Path, redis_server) -> None:
    import redis

    from scrapy_polite.gate.redis.state import Keys
    from scrapy_polite.metrics.fleet import SNAPSHOT_TTL, snapshot
    from scrapy_polite.metrics.fleet_store import clear_snapshots, publish_commands, read_snapshots

    stats = make_stats(tmp_path)
    for o in synthetic(200):
        stats.record(o)
    keys = Keys("t")
    client = redis.Redis.from_url(redis_server.url)
    old = {**snapshot(stats, finished=True), "updated": time.time() - SNAPSHOT_TTL - 60}
    publish_commands(client.pipeline(), keys, "old-proc", old).execute()
    publish_commands(client.pipeline(), keys, "new-proc", snapshot(stats)).execute()
    assert client.zrange(keys.stats_procs, 0, -1) == [b"new-proc"]
    client.close()
    (snap,) = read_snapshots(redis_server.url, "t")
    assert snap["process"] == "new-proc" and snap["attempts"] == 200 and not snap["finished"]
    assert read_snapshots(redis_server.url, "other") == []
    assert clear_snapshots(redis_server.url, "t") == 1
    assert read_snapshots(redis_server.url, "t") == []


def test_a_page_marked_after_the_fact_is_one_attempt_and_one_request_of_its_tier(tmp_path: Path) -> None:
    stats = make_stats(tmp_path)
    page = Outcome(
        time=1_700_000_000.0, url="http://a.test/item/3", host="a.test", endpoint="http://127.0.0.1:9000",
        session=None, status=200, exception=None, wait=0.0, latency=0.05, exit_ip="127.0.0.10",
        exit_ip_source="header", requeues=0, rate_limited=False, verdict="ok", tier=0, size=100,
    )
    stats.record(page)
    stats.record(Outcome(**{**page.to_dict(), "verdict": "challenge", "revises": True}))
    get = stats.stats.get_value
    assert (get("polite/attempts"), get("polite/success", 0), stats.challenges) == (1, 0, 1)
    assert (get("polite/tier/0/requests"), get("polite/tier/0/bytes")) == (1, 100)


def test_endpoint_stats_keys_are_one_segment_per_endpoint() -> None:
    from scrapy_polite.metrics.top import key_name
    from scrapy_polite.pool.endpoints import expand

    endpoints, _ = expand(
        ["http://u:pw@10.0.0.1:8000", "https://10.0.0.2:8443", "http://u-session-{session}:pw@gw.example:7000"], 2
    )
    names = [key_name(e.label) for e in endpoints]
    assert names[:2] == ["10.0.0.1:8000", "https:10.0.0.2:8443"]
    assert all("/" not in n and "pw" not in n for n in names) and len(set(names)) == len(names) == 4


def test_a_tallied_histogram_reads_as_recording_each_value_would() -> None:
    """Values counted first, then recorded a distinct value at a time (on reading, or past the tally's
    size), give the histogram recording each value makes: counts, percentiles, extremes."""
    import random

    from scrapy_polite.metrics.tables import TALLY_MAX, Tallied, histogram

    rng = random.Random(7)
    values = [max(1, int(rng.lognormvariate(3, 1.2))) for _ in range(5000)]
    values += list(range(1, TALLY_MAX + 200))  # past the tally's size: recorded on the way
    direct, tallied = histogram(), Tallied(histogram())
    for i, v in enumerate(values):
        direct.record_value(v)
        tallied.add(v)
        if i == 100:
            assert tallied.hist.get_total_count() == 101  # read halfway: what came so far
    hist = tallied.hist
    assert hist.get_total_count() == direct.get_total_count() == len(values)
    assert (hist.get_min_value(), hist.get_max_value()) == (direct.get_min_value(), direct.get_max_value())
    for p in (50, 90, 95, 99, 99.9):
        assert hist.get_value_at_percentile(p) == direct.get_value_at_percentile(p)
    assert hist.encode() == direct.encode()
