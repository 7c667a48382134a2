"""PoliteStats: what a proxied crawl actually got, per host and per endpoint.

Counts come from :data:`scrapy_polite.signals.outcome_recorded`, one per
request attempt. Memory is bounded: counters, one HDR histogram per host,
and a ring of per-second buckets for the sliding window.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections import Counter, deque
from typing import TYPE_CHECKING, Any

from hdrh.histogram import HdrHistogram
from scrapy import signals
from scrapy.exceptions import NotConfigured

from . import signals as polite_signals
from .outcome import Outcome
from .runtime import get_runtime

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)

#: Latencies are recorded in milliseconds, 1 ms to 1 h, 3 significant digits.
_HIST_ARGS = (1, 3_600_000, 3)


def _histogram() -> HdrHistogram:
    return HdrHistogram(*_HIST_ARGS)


class _Window:
    """Successes and attempts per second over the last *seconds* seconds."""

    def __init__(self, seconds: float) -> None:
        self.seconds = int(max(1, seconds))
        self._buckets: deque[list[int]] = deque()  # [second, ok, total]

    def add(self, now: float, ok: bool) -> None:
        sec = int(now)
        if not self._buckets or self._buckets[-1][0] != sec:
            self._buckets.append([sec, 0, 0])
        bucket = self._buckets[-1]
        bucket[1] += ok
        bucket[2] += 1
        self._trim(now)

    def _trim(self, now: float) -> None:
        while self._buckets and self._buckets[0][0] <= int(now) - self.seconds:
            self._buckets.popleft()

    def rate_per_min(self, now: float, started: float) -> float:
        self._trim(now)
        ok = sum(b[1] for b in self._buckets)
        span = min(self.seconds, max(1e-9, now - started))
        return ok * 60.0 / span


class HostStats:
    __slots__ = ("statuses", "latency", "exit_ips", "ok", "total")

    def __init__(self) -> None:
        self.statuses: Counter[str] = Counter()
        self.latency = _histogram()
        self.exit_ips: Counter[str] = Counter()
        self.ok = 0
        self.total = 0


class PoliteStats:
    """Exports ``polite/`` stats, a periodic log line, JSONL and Prometheus."""

    def __init__(self, crawler: Crawler) -> None:
        rt = get_runtime(crawler)
        if not rt.config.enabled:
            raise NotConfigured("POLITE_ENABLED is False")
        self.crawler = crawler
        self.config = rt.config
        self.runtime = rt
        self.stats = crawler.stats
        self.started = time.time()
        self.window = _Window(self.config.stats_window)
        self.latency = _histogram()
        self.hosts: dict[str, HostStats] = {}
        self.endpoints: dict[str, Counter[str]] = {}
        self.ok = 0
        self.total = 0
        self.rate_limited = 0
        self._jsonl: Any = None
        self._jsonl_path = self.config.stats_jsonl
        self._loop: Any = None
        self._prom: Any = None
        rt.stats = self
        crawler.signals.connect(self.record, signal=polite_signals.outcome_recorded)
        crawler.signals.connect(self._opened, signal=signals.spider_opened)
        crawler.signals.connect(self._closed, signal=signals.spider_closed)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> PoliteStats:
        return cls(crawler)

    # -- recording --------------------------------------------------------

    def record(self, outcome: Outcome) -> None:
        now = outcome.time
        label = str(outcome.status) if outcome.status is not None else outcome.exception or "unknown"
        ok = outcome.success
        self.total += 1
        self.ok += ok
        self.rate_limited += outcome.rate_limited
        self.window.add(now, ok)
        inc = self.stats.inc_value
        inc("polite/attempts")
        inc(f"polite/status/{label}")
        if ok:
            inc("polite/success")
        if outcome.rate_limited:
            inc("polite/rate_limited")
            inc(f"polite/rate_limited/host/{outcome.host}")
            if outcome.endpoint:
                inc(f"polite/rate_limited/endpoint/{outcome.endpoint}")
        if outcome.exception:
            inc(f"polite/exception/{outcome.exception}")
        h = self.hosts.get(outcome.host)
        if h is None:
            h = self.hosts[outcome.host] = HostStats()
        h.statuses[label] += 1
        h.total += 1
        h.ok += ok
        if outcome.endpoint:
            self.endpoints.setdefault(outcome.endpoint, Counter())[label] += 1
        if outcome.exit_ip:
            h.exit_ips[outcome.exit_ip] += 1
        if outcome.latency is not None:
            ms = max(1, int(outcome.latency * 1000))
            self.latency.record_value(ms)
            h.latency.record_value(ms)
        if self._jsonl_path:
            self._write_jsonl(outcome)
        if self._prom is not None:
            self._prom.observe(outcome, label)

    def _write_jsonl(self, outcome: Outcome) -> None:
        if self._jsonl is None:
            self._jsonl = open(self._jsonl_path, "a", encoding="utf-8", buffering=1)  # noqa: SIM115
        self._jsonl.write(json.dumps(outcome.to_dict(), separators=(",", ":")) + "\n")
        if self._jsonl.tell() >= self.config.stats_jsonl_max_bytes:
            # Keep one rotated file: the newest data always fits the cap twice over.
            self._jsonl.close()
            os.replace(self._jsonl_path, self._jsonl_path + ".1")
            self._jsonl = None

    # -- views --------------------------------------------------------------

    def pages_per_min(self, now: float | None = None) -> tuple[float, float]:
        """(successful pages/min over the window, over the whole run)."""
        now = time.time() if now is None else now
        overall = self.ok * 60.0 / max(1e-9, now - self.started)
        return self.window.rate_per_min(now, self.started), overall

    def percentile(self, p: float, host: str | None = None) -> float | None:
        """Download latency percentile in seconds (overall or for *host*)."""
        hist = self.latency if host is None else self.hosts[host].latency
        if hist.get_total_count() == 0:
            return None
        return hist.get_value_at_percentile(p) / 1000.0

    def summary(self) -> dict[str, Any]:
        now = time.time()
        window, overall = self.pages_per_min(now)
        return {
            "pages_per_min": round(overall, 2),
            "pages_per_min_window": round(window, 2),
            "success_rate": round(self.ok / self.total, 4) if self.total else None,
            "attempts": self.total,
            "success": self.ok,
            "rate_limited": self.rate_limited,
            "latency_p50": self.percentile(50),
            "latency_p95": self.percentile(95),
            "latency_p99": self.percentile(99),
            "hosts": {
                host: {
                    "attempts": h.total,
                    "success": h.ok,
                    "statuses": dict(h.statuses),
                    "exit_ips": len(h.exit_ips),
                    "requests_per_exit_ip": dict(h.exit_ips),
                    "latency_p50": self.percentile(50, host),
                    "latency_p95": self.percentile(95, host),
                }
                for host, h in self.hosts.items()
            },
            "endpoints": {ep: dict(c) for ep, c in self.endpoints.items()},
            "sessions": self.runtime.gate.sessions(),
        }

    # -- lifecycle ----------------------------------------------------------

    def _opened(self, spider: Any) -> None:
        self.started = time.time()
        if self.config.log_interval > 0:
            from twisted.internet import task

            self._loop = task.LoopingCall(self._log)
            self._loop.start(self.config.log_interval, now=False)
        if self.config.prometheus_port is not None:
            from .prometheus import PrometheusExporter

            self._prom = PrometheusExporter(self.config.prometheus_address, self.config.prometheus_port)

    def _log(self) -> None:
        window, overall = self.pages_per_min()
        health = self.runtime.gate.health_counts()
        p50, p95 = self.percentile(50), self.percentile(95)
        logger.info(
            "scrapy-polite: %.1f pages/min now, %.1f overall; %d/%d ok, 429s %.1f%%; "
            "P50 %s P95 %s; endpoints %d healthy, %d cooling, %d dead; %d waiting",
            window, overall, self.ok, self.total,
            100.0 * self.rate_limited / self.total if self.total else 0.0,
            f"{p50:.3f}s" if p50 is not None else "-", f"{p95:.3f}s" if p95 is not None else "-",
            health["healthy"], health["cooling"], health["dead"], self.runtime.gate.waiting(),
        )

    def _closed(self, spider: Any, reason: str) -> None:
        if self._loop is not None and self._loop.running:
            self._loop.stop()
        if self._jsonl is not None:
            self._jsonl.close()
            self._jsonl = None
        s = self.summary()
        set_value = self.stats.set_value
        set_value("polite/pages_per_min", s["pages_per_min"])
        set_value("polite/success_rate", s["success_rate"])
        for p in (50, 95, 99):
            if s[f"latency_p{p}"] is not None:
                set_value(f"polite/latency/p{p}", s[f"latency_p{p}"])
        for host, h in s["hosts"].items():
            set_value(f"polite/host/{host}/exit_ips", h["exit_ips"])
            for label, n in h["statuses"].items():
                set_value(f"polite/host/{host}/status/{label}", n)
            if h["latency_p95"] is not None:
                set_value(f"polite/host/{host}/latency/p50", h["latency_p50"])
                set_value(f"polite/host/{host}/latency/p95", h["latency_p95"])
        for ep, counts in s["endpoints"].items():
            for label, n in counts.items():
                set_value(f"polite/endpoint/{ep}/status/{label}", n)
        set_value("polite/sessions_map", s["sessions"])
        logger.info("scrapy-polite summary:\n%s", format_summary(s), extra={"spider": spider})


def format_summary(s: dict[str, Any]) -> str:
    """A readable end-of-run table per host and per endpoint."""
    def fmt(v: float | None) -> str:
        return "-" if v is None else f"{v:.3f}s"

    lines = [
        f"  successful pages/min {s['pages_per_min']:.1f}, success rate "
        f"{(s['success_rate'] or 0) * 100:.1f}%, {s['attempts']} attempts, "
        f"{s['rate_limited']} rate-limited, P50 {fmt(s['latency_p50'])} P95 {fmt(s['latency_p95'])}",
        f"  {'host':<28} {'attempts':>8} {'ok':>6} {'429':>5} {'exit IPs':>8} {'P50':>8} {'P95':>8}",
    ]
    for host, h in sorted(s["hosts"].items()):
        lines.append(
            f"  {host:<28} {h['attempts']:>8} {h['success']:>6} {h['statuses'].get('429', 0):>5} "
            f"{h['exit_ips']:>8} {fmt(h['latency_p50']):>8} {fmt(h['latency_p95']):>8}"
        )
    lines.append(f"  {'endpoint':<44} statuses")
    for ep, counts in sorted(s["endpoints"].items()):
        shown = ", ".join(f"{k}: {v}" for k, v in sorted(counts.items()))
        lines.append(f"  {ep:<44} {shown}")
    return "\n".join(lines)
