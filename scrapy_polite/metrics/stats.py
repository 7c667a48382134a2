"""PoliteStats: what a proxied crawl actually got, per host and per endpoint.

Counts come from :data:`scrapy_polite.signals.outcome_recorded`, one per
request attempt, kept in the bounded tables of :mod:`~scrapy_polite.metrics.tables`
(the rest are pooled under ``"(other)"``) whatever the length of the crawl.
"""

from __future__ import annotations

import logging
import os
import time
from collections import Counter
from typing import TYPE_CHECKING, Any, cast

from scrapy import signals

from scrapy_polite import signals as polite_signals
from scrapy_polite.metrics.closing import close_off_thread, closing_values
from scrapy_polite.metrics.fleet_publisher import Publisher, fleet_publisher
from scrapy_polite.metrics.increments import increments
from scrapy_polite.metrics.jsonl import JsonlSink, jsonl_path, report_path
from scrapy_polite.metrics.outcome import Outcome
from scrapy_polite.metrics.percentiles import REPORTED, seconds_at, summary_fields
from scrapy_polite.metrics.summary import format_summary
from scrapy_polite.metrics.tables import (
    MAX_ENDPOINTS,
    MAX_EXIT_IPS,
    MAX_EXIT_IPS_PER_HOST,
    MAX_HOSTS,
    Counts,
    HostStats,
    Tallied,
    Window,
    capped,
    distinct,
    histogram,
    to_ms,
)
from scrapy_polite.metrics.top import OTHER, admit, key_name
from scrapy_polite.runtime import Runtime, enabled_runtime

if TYPE_CHECKING:
    from hdrh.histogram import HdrHistogram
    from scrapy.crawler import Crawler

    from scrapy_polite.gate.redis.backend import RedisGate


logger = logging.getLogger(__name__)


class PoliteStats:
    """Exports ``polite/`` stats, a periodic log line, JSONL and Prometheus.

    It hears each attempt through ``outcome_recorded``, and asks *runtime*'s gate for the
    sessions, endpoint health and waiting requests it reports.
    """

    def __init__(self, crawler: Crawler, runtime: Runtime) -> None:
        self.crawler = crawler
        self.config = runtime.config
        self.runtime = runtime
        self.stats = crawler.stats
        self.started = time.time()
        self.window = Window(self.config.stats_window)
        self._latency = Tallied(histogram())
        self._wait = Tallied(histogram())
        self.hosts: dict[str, HostStats] = {}
        #: Host rows folded into OTHER during the crawl (the table keeps 2 x MAX_HOSTS names at most).
        self._hosts_folded = 0
        self._host_histograms = 0  # hosts with a latency histogram (POLITE_STATS_TOP)
        self.endpoints: dict[str, Counts] = {}
        self.exit_ips: Counter[str] = Counter()
        self.exit_ip_sources: Counter[str] = Counter()
        self.exceptions: Counter[str] = Counter()
        self.ok = 0
        self.total = 0
        self.rate_limited = 0
        self.bans = 0
        self.challenges = 0
        self.gave_up = 0
        # The spider when the crawl builds it (its arguments included), else its class.
        spider = getattr(crawler, "spider", None) or crawler.spidercls
        self._jsonl = JsonlSink(jsonl_path(self.config.stats_jsonl, spider), self.config.stats_jsonl_max_bytes)
        self._report_source = self._jsonl.path  # kept when writing stops on an error
        self._report_path = report_path(self.config.report_html, spider)
        self._loop: Any = None
        self._publish_loop: Any = None
        #: Where the snapshots go for the ``fleet`` command, once the spider opens on a shared gate.
        self._publisher: Publisher | None = None
        self._prom: Any = None
        # Names with series of their own in Prometheus (POLITE_STATS_TOP each); the rest share OTHER.
        self._prom_hosts: set[str] = set()
        self._prom_endpoints: set[str] = set()
        polite_signals.connect(crawler, {
            polite_signals.outcome_recorded: self.record,
            polite_signals.request_gave_up: self._gave_up,
            polite_signals.host_throttle_changed: self._throttle_changed,
            signals.spider_opened: self._opened,
            signals.spider_closed: self._closed,
        })

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> PoliteStats:
        return cls(crawler, enabled_runtime(crawler))

    # -- recording --------------------------------------------------------

    def record(self, outcome: Outcome, **_: Any) -> None:
        """One attempt (``outcome_recorded``; the signal's other arguments in ``**_``, which pydispatch
        passes on as they are where it sorts them out on every call for a fixed signature)."""
        ok, limited = outcome.success, outcome.rate_limited
        ban, challenge = outcome.is_ban(self.config.ban_codes), outcome.challenge
        if outcome.revises:
            self._unrecord_page(outcome)
        self.total += 1
        self.ok += ok
        self.rate_limited += limited
        self.bans += ban
        self.challenges += challenge
        self.window.add(outcome.time, ok, limited)
        if outcome.host not in self.hosts:  # the common case needs no room made
            folded = admit(self.hosts, outcome.host, MAX_HOSTS, _unlisted_host)
            if folded:
                self._hosts_folded += len(folded)
                self._fold_host_keys(folded)
        endpoint = capped(self.endpoints, outcome.endpoint, MAX_ENDPOINTS) if outcome.endpoint else None
        self._count_keys(outcome, endpoint)
        h = self._count_rows(outcome, endpoint, ban)
        if self._jsonl.path:
            self._jsonl.write(outcome.to_dict())
        if self._prom is not None:
            self._observe_prometheus(outcome, endpoint, h)

    def _count_keys(self, outcome: Outcome, endpoint: str | None) -> None:
        """The attempt in the live ``polite/`` stats keys."""
        host, source = outcome.host, outcome.exit_ip_source or "unknown"
        self.exit_ip_sources[source] += 1
        inc = increments(self.stats)
        inc("polite/attempts")
        inc(f"polite/status/{outcome.label}")
        inc(f"polite/exit_ip_source/{source}")
        if outcome.success:
            inc("polite/success")
        if outcome.rate_limited:
            inc("polite/rate_limited")
            inc(f"polite/rate_limited/host/{host}")
            if endpoint:
                inc(f"polite/rate_limited/endpoint/{key_name(endpoint)}")
        if outcome.challenge:
            inc("polite/challenges")
            inc(f"polite/challenges/host/{host}")
            if endpoint:
                inc(f"polite/challenges/endpoint/{key_name(endpoint)}")
        if outcome.tier is not None:
            inc(f"polite/tier/{outcome.tier}/requests")
            inc(f"polite/tier/{outcome.tier}/bytes", outcome.size or 0)
        if outcome.exception:
            self.exceptions[outcome.exception] += 1
            inc(f"polite/exception/{outcome.exception}")

    def _count_rows(self, outcome: Outcome, endpoint: str | None, ban: bool) -> HostStats:
        """The attempt in its host's and endpoint's rows and in the histograms; returns the host's row."""
        label, ok, limited, challenge = outcome.label, outcome.success, outcome.rate_limited, outcome.challenge
        h = self.hosts.get(outcome.host)
        if h is None:
            h = self.hosts[outcome.host] = HostStats(latency=self._host_histograms < self.config.stats_top)
            self._host_histograms += h.latency is not None
        h.add(label, ok, limited, ban, challenge)
        if endpoint:
            e = self.endpoints.get(endpoint)
            if e is None:
                e = self.endpoints[endpoint] = Counts()
            e.add(label, ok, limited, ban, challenge)
        if outcome.exit_ip:
            h.exit_ips[capped(h.exit_ips, outcome.exit_ip, MAX_EXIT_IPS_PER_HOST)] += 1
            self.exit_ips[capped(self.exit_ips, outcome.exit_ip, MAX_EXIT_IPS)] += 1
        if outcome.latency is not None:
            ms = max(1, to_ms(outcome.latency))
            self._latency.add(ms)
            h.add_latency(ms)
        if outcome.endpoint:
            self._wait.add(to_ms(outcome.wait))
        return h

    @property
    def latency(self) -> HdrHistogram:
        """Every answer's latency (ms)."""
        return self._latency.hist

    @property
    def wait(self) -> HdrHistogram:
        """Every leased attempt's wait at the gate (ms)."""
        return self._wait.hist

    def _observe_prometheus(self, outcome: Outcome, endpoint: str | None, h: HostStats) -> None:
        """The attempt in Prometheus: ``POLITE_STATS_TOP`` hosts and endpoints get series of their own."""
        top = self.config.stats_top
        ph = capped(self._prom_hosts, outcome.host, top)
        pe = capped(self._prom_endpoints, endpoint, top) if endpoint else None
        self._prom_hosts.add(ph)
        if pe is not None:
            self._prom_endpoints.add(pe)
        self._prom.observe(outcome, outcome.label, ph, pe, distinct(h.exit_ips))
        self._prom.set_rates(*self.pages_per_min(outcome.time))

    def _fold_host_keys(self, names: list[str]) -> None:
        """Move the live per-host stats keys of *names* to OTHER's, so their number stays bounded."""
        table = self.stats.get_stats()
        for kind in ("rate_limited", "challenges"):
            for name in names:
                value = table.pop(f"polite/{kind}/host/{name}", None)
                if value:
                    self.stats.inc_value(f"polite/{kind}/host/{OTHER}", value)
        self._host_histograms = sum(h.latency is not None for h in self.hosts.values())

    def _unrecord_page(self, outcome: Outcome) -> None:
        """Take back the page the attempt's first record counted (its status, ok, attempt)."""
        label = str(outcome.status) if outcome.status is not None else "unknown"
        self.total -= 1
        self.ok -= 1
        inc = self.stats.inc_value
        inc("polite/attempts", -1)
        inc("polite/success", -1)
        inc(f"polite/status/{label}", -1)
        if outcome.tier is not None:  # one request, one answer: this record counts them again
            inc(f"polite/tier/{outcome.tier}/requests", -1)
            inc(f"polite/tier/{outcome.tier}/bytes", -(outcome.size or 0))
        for table, key in ((self.hosts, outcome.host), (self.endpoints, outcome.endpoint)):
            counts = (table.get(key) or table.get(OTHER)) if key else None
            if counts is not None:
                counts.total -= 1
                counts.ok -= 1
                counts.statuses[label] -= 1

    def _gave_up(self, request: Any = None, reason: str = "") -> None:
        self.gave_up += 1

    def _throttle_changed(self, host: str, reason: str, events: list[dict[str, Any]] | None = None,
                          evidence: dict[str, Any] | None = None) -> None:
        """Each change the throttle made to *host*, as a throttle event line of the JSONL."""
        now = time.time()
        for event in events or ():
            self.write_event({"event": "throttle", "time": now, "host": host, **event, "reason": reason,
                              "evidence": evidence or {}})

    def write_event(self, event: dict[str, Any]) -> None:
        """Write *event* (a dict with ``"event"``, its kind, and ``"time"``) as a line of the JSONL.

        Per-attempt lines have no ``"event"`` key: readers of attempts skip the lines that do.
        """
        self._jsonl.write(event)

    # -- views --------------------------------------------------------------

    def pages_per_min(self, now: float | None = None) -> tuple[float, float]:
        """(successful pages/min over the window, over the whole run)."""
        now = time.time() if now is None else now
        overall = self.ok * 60.0 / max(1e-9, now - self.started)
        return self.window.rate_per_min(now, self.started), overall

    def percentile(self, p: float, host: str | None = None) -> float | None:
        """Download latency percentile in seconds (overall or for *host*)."""
        hist = self.latency if host is None else self.hosts[host].latency
        return seconds_at(hist, p)

    def summary(self, sessions: bool = True) -> dict[str, Any]:
        """The crawl so far; *sessions*: with the session map (a walk of every session in the gate)."""
        now = time.time()
        window, overall = self.pages_per_min(now)
        return {
            "elapsed": round(now - self.started, 3),
            "pages_per_min": round(overall, 2),
            "pages_per_min_window": round(window, 2),
            "success_rate": round(self.ok / self.total, 4) if self.total else None,
            "attempts": self.total,
            "success": self.ok,
            "rate_limited": self.rate_limited,
            "bans": self.bans,
            "challenges": self.challenges,
            "gave_up": self.gave_up,
            "exceptions": dict(self.exceptions),
            **summary_fields(self.latency, "latency"),
            **summary_fields(self.wait, "wait"),
            "exit_ips": distinct(self.exit_ips),
            "requests_per_exit_ip": dict(self.exit_ips),
            "exit_ip_sources": dict(self.exit_ip_sources),
            "hosts": {
                host: {
                    **h.as_dict(),
                    "exit_ips": distinct(h.exit_ips),
                    "requests_per_exit_ip": dict(h.exit_ips),
                    **summary_fields(h.latency, "latency"),
                }
                for host, h in self.hosts.items()
            },
            "endpoints": {ep: e.as_dict() for ep, e in self.endpoints.items()},
            **({"sessions": self.runtime.gate.sessions()} if sessions else {}),
        }

    # -- lifecycle ----------------------------------------------------------

    def _opened(self, spider: Any) -> None:
        self.started = time.time()
        if self.config.log_interval > 0:
            from twisted.internet import task

            self._loop = task.LoopingCall(self._log)
            self._loop.start(self.config.log_interval, now=False)
        if self._shared:
            from twisted.internet import task

            from scrapy_polite.metrics.fleet import PUBLISH_INTERVAL

            self._publisher = fleet_publisher(cast("RedisGate", self.runtime.gate))
            self._publish_loop = task.LoopingCall(self._publish)
            self._publish_loop.start(PUBLISH_INTERVAL, now=False)
        if self.config.prometheus_port is not None:
            from scrapy_polite.metrics.prometheus import PrometheusExporter

            try:
                self._prom = PrometheusExporter(self.config.prometheus_address, self.config.prometheus_port)
            except OSError as exc:
                logger.error(
                    "no Prometheus metrics, cannot listen on %s:%s: %s",
                    self.config.prometheus_address, self.config.prometheus_port, exc,
                )
            else:
                logger.info("Prometheus metrics on %s", self._prom.url)

    @property
    def _shared(self) -> bool:
        """Whether the gate is shared with other processes, so the fleet can see these stats."""
        return self.runtime.gate.shared

    def _publish(self, finished: bool = False, summary: dict[str, Any] | None = None) -> None:
        from scrapy_polite.metrics.fleet import snapshot

        if self._publisher is not None:
            self._publisher(snapshot(self, finished, summary))

    @property
    def prometheus_url(self) -> str | None:
        """Where the metrics are served (``None`` when Prometheus is off)."""
        return self._prom.url if self._prom is not None else None

    def _log(self) -> None:
        window, overall = self.pages_per_min()
        health = self.runtime.gate.health_counts()
        p50, p95, p99 = (self.percentile(p) for p in REPORTED)
        logger.info(
            "%.1f pages/min now, %.1f overall; %d/%d ok, 429s %.1f%%; "
            "P50 %s P95 %s P99 %s; endpoints %d healthy, %d cooling, %d dead; %d waiting",
            window, overall, self.ok, self.total,
            100.0 * self.rate_limited / self.total if self.total else 0.0,
            *(f"{p:.3f}s" if p is not None else "-" for p in (p50, p95, p99)),
            health["healthy"], health["cooling"], health["dead"], self.runtime.gate.waiting(),
        )

    def _closed(self, spider: Any, reason: str) -> Any:
        s = self.summary()
        for loop in (self._loop, self._publish_loop):
            if loop is not None and loop.running:
                loop.stop()
        if self._shared:
            self._publish(finished=True, summary=s)  # before the middleware stops the gate
        self._jsonl.close()
        self._export(s, spider)
        if self._report_path and self._report_source:
            self._write_report(self._report_path, self._report_source, spider)
        prom, self._prom = self._prom, None
        return None if prom is None else close_off_thread(prom)

    def _write_report(self, output: str, path: str, spider: Any) -> None:
        """POLITE_REPORT_HTML: the HTML report of this run's JSONL (its rotated ``.1`` file first)."""
        from scrapy_polite.report.page import write_report

        paths = [p for p in (path + ".1", path) if os.path.exists(p)]
        try:
            data = write_report(paths, output, f"{getattr(spider, 'name', 'crawl')}: scrapy-polite crawl report")
        except OSError as exc:
            logger.error("could not write the report %s: %s", output, exc)
            return
        logger.info("report of %d records written to %s", data.records, output)

    def _export(self, s: dict[str, Any], spider: Any) -> None:
        """The closing ``polite/`` stats keys, and the summary table in the log."""
        values = closing_values(s, self.config.stats_top, self._hosts_folded, self.config.stats_sessions_map)
        for key, value in values.items():
            self.stats.set_value(key, value)
        logger.info("scrapy-polite summary:\n%s", format_summary(s), extra={"spider": spider})


def _unlisted_host() -> HostStats:
    """OTHER's row of folded hosts: no latency histogram of its own."""
    return HostStats(latency=False)
