"""PoliteStats: what a proxied crawl actually got, per host and per endpoint.

Counts come from :data:`scrapy_polite.signals.outcome_recorded`, one per
request attempt. Memory is bounded whatever the length of the crawl:
counters, fixed-size HDR histograms, a ring of per-second buckets for the
sliding window, and caps on how many hosts, endpoints and exit IPs are
tracked one by one (the rest are pooled under ``"(other)"``).
"""

from __future__ import annotations

import logging
import os
import time
from collections import Counter, deque
from typing import TYPE_CHECKING, Any

from hdrh.histogram import HdrHistogram
from scrapy import signals

from scrapy_polite import signals as polite_signals
from scrapy_polite.metrics.jsonl import JsonlSink, jsonl_path, report_path
from scrapy_polite.metrics.outcome import Outcome
from scrapy_polite.metrics.percentiles import REPORTED, seconds_at, summary_fields
from scrapy_polite.metrics.summary import format_summary
from scrapy_polite.metrics.top import OTHER, admit, key_name
from scrapy_polite.runtime import enabled_runtime

if TYPE_CHECKING:
    from scrapy.crawler import Crawler


logger = logging.getLogger(__name__)

#: Latencies are recorded in milliseconds, 1 ms to 1 h, 3 significant digits
#: (0.1 %) overall. Per host 2 digits (1 %) keep a histogram near 18 KB.
_HIST_RANGE = (1, 3_600_000)
_DIGITS_OVERALL = 3
_DIGITS_HOST = 2
#: Beyond these, names are pooled under OTHER so a broad crawl or a rotating
#: gateway with millions of exits cannot grow memory without bound (hosts: the
#: busiest MAX_HOSTS keep their rows, see :func:`~scrapy_polite.metrics.top.admit`).
MAX_HOSTS = 500
MAX_ENDPOINTS = 5000
MAX_EXIT_IPS = 1024
MAX_EXIT_IPS_PER_HOST = 256


def _histogram(digits: int = _DIGITS_OVERALL) -> HdrHistogram:
    return HdrHistogram(*_HIST_RANGE, digits)


def _ms(seconds: float) -> int:
    return min(_HIST_RANGE[1], max(0, int(seconds * 1000)))


def _capped(table: dict[str, Any] | set[str], key: str, limit: int) -> str:
    return key if key in table or len(table) < limit else OTHER


def fold_top(table: dict[str, dict[str, Any]], n: int) -> tuple[dict[str, dict[str, Any]], int]:
    """The *n* rows of *table* with the most attempts, plus one OTHER row summing the rest.

    Returns (rows, how many names were folded into OTHER), so per-host and
    per-endpoint stats stay at most *n* + 1 keys a kind however broad the crawl.
    """
    ranked = sorted(table, key=lambda k: (k == OTHER, -table[k]["attempts"], k))
    top = {k: table[k] for k in ranked[:n] if k != OTHER}
    rest = [table[k] for k in table if k not in top]
    if not rest:
        return top, 0
    statuses: Counter[str] = Counter()
    other: dict[str, Any] = {"attempts": 0, "success": 0, "statuses": statuses}
    for row in rest:
        other["attempts"] += row["attempts"]
        other["success"] += row["success"]
        statuses.update(row["statuses"])
    top[OTHER] = other
    return top, sum(k != OTHER for k in table) - (len(top) - 1)


def _distinct(counter: Counter[str]) -> int:
    """Distinct names tracked; the pooled OTHER bucket is not one of them."""
    return len(counter) - (OTHER in counter)


class _Window:
    """Successes, 429s and attempts per second over the last *seconds* seconds."""

    def __init__(self, seconds: float) -> None:
        self.seconds = int(max(1, seconds))
        self._buckets: deque[list[int]] = deque()  # [second, ok, rate_limited, total]

    def add(self, now: float, ok: bool, rate_limited: bool = False) -> None:
        sec = int(now)
        if not self._buckets or self._buckets[-1][0] != sec:
            self._buckets.append([sec, 0, 0, 0])
        bucket = self._buckets[-1]
        bucket[1] += ok
        bucket[2] += rate_limited
        bucket[3] += 1
        self._trim(now)

    def _trim(self, now: float) -> None:
        while self._buckets and self._buckets[0][0] + 1 <= now - self.seconds:
            self._buckets.popleft()

    def rate_per_min(self, now: float, started: float) -> float:
        """Successes per minute over ``(now - seconds, now]``; the oldest second counts pro rata."""
        self._trim(now)
        start = now - self.seconds
        ok = sum(b[1] * min(1.0, b[0] + 1 - start) for b in self._buckets)
        span = min(self.seconds, max(1e-9, now - started))
        return ok * 60.0 / span


class _Counts:
    """Attempts, successes and answers of one host or endpoint."""

    __slots__ = ("statuses", "ok", "total", "rate_limited", "bans", "challenges")

    def __init__(self) -> None:
        self.statuses: Counter[str] = Counter()
        self.ok = 0
        self.total = 0
        self.rate_limited = 0
        self.bans = 0
        self.challenges = 0

    def add(self, label: str, ok: bool, rate_limited: bool, ban: bool, challenge: bool = False) -> None:
        self.statuses[label] += 1
        self.total += 1
        self.ok += ok
        self.rate_limited += rate_limited
        self.bans += ban
        self.challenges += challenge

    def merge(self, other: _Counts) -> None:
        """Add *other*'s counts to these (a name folded into OTHER)."""
        self.statuses.update(other.statuses)
        self.ok += other.ok
        self.total += other.total
        self.rate_limited += other.rate_limited
        self.bans += other.bans
        self.challenges += other.challenges

    def as_dict(self) -> dict[str, Any]:
        return {
            "attempts": self.total,
            "success": self.ok,
            "rate_limited": self.rate_limited,
            "bans": self.bans,
            "challenges": self.challenges,
            "statuses": dict(self.statuses),
        }


class HostStats(_Counts):
    """Per-host counts plus a latency histogram and requests per exit IP.

    The histogram (about 18 KB) only for the first ``POLITE_STATS_TOP`` hosts:
    a broad crawl's hosts keep their counts at a few hundred bytes each.
    """

    __slots__ = ("latency", "exit_ips")

    def __init__(self, latency: bool = True) -> None:
        super().__init__()
        self.latency: HdrHistogram | None = _histogram(_DIGITS_HOST) if latency else None
        self.exit_ips: Counter[str] = Counter()

    def merge(self, other: _Counts) -> None:
        super().merge(other)
        if isinstance(other, HostStats):
            for ip, n in other.exit_ips.items():
                self.exit_ips[_capped(self.exit_ips, ip, MAX_EXIT_IPS_PER_HOST)] += n
            if self.latency is not None and other.latency is not None:
                self.latency.add(other.latency)


class PoliteStats:
    """Exports ``polite/`` stats, a periodic log line, JSONL and Prometheus.

    """

    def __init__(self, crawler: Crawler) -> None:
        rt = enabled_runtime(crawler)
        self.crawler = crawler
        self.config = rt.config
        self.runtime = rt
        self.stats = crawler.stats
        self.started = time.time()
        self.window = _Window(self.config.stats_window)
        self.latency = _histogram()
        self.wait = _histogram()
        self.hosts: dict[str, HostStats] = {}
        #: Host rows folded into OTHER during the crawl (the table keeps 2 x MAX_HOSTS names at most).
        self._hosts_folded = 0
        self._host_histograms = 0  # hosts with a latency histogram (POLITE_STATS_TOP)
        self.endpoints: dict[str, _Counts] = {}
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
        self._prom: Any = None
        # Names with series of their own in Prometheus (POLITE_STATS_TOP each); the rest share OTHER.
        self._prom_hosts: set[str] = set()
        self._prom_endpoints: set[str] = set()
        rt.stats = self
        polite_signals.connect(crawler, {
            polite_signals.outcome_recorded: self.record,
            polite_signals.request_gave_up: self._gave_up,
            polite_signals.host_throttle_changed: self._throttle_changed,
            signals.spider_opened: self._opened,
            signals.spider_closed: self._closed,
        })

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> PoliteStats:
        return cls(crawler)

    # -- recording --------------------------------------------------------

    def record(self, outcome: Outcome) -> None:
        label = outcome.label
        ok = outcome.success
        limited = outcome.rate_limited
        ban, challenge = outcome.is_ban(self.config.ban_codes), outcome.challenge
        if outcome.revises:
            self._unrecord_page(outcome)
        self.total += 1
        self.ok += ok
        self.rate_limited += limited
        self.bans += ban
        self.challenges += challenge
        self.window.add(outcome.time, ok, limited)
        host = outcome.host
        folded = admit(self.hosts, host, MAX_HOSTS, lambda: HostStats(latency=False))
        if folded:
            self._hosts_folded += len(folded)
            self._fold_host_keys(folded)
        endpoint = _capped(self.endpoints, outcome.endpoint, MAX_ENDPOINTS) if outcome.endpoint else None
        source = outcome.exit_ip_source or "unknown"
        self.exit_ip_sources[source] += 1
        inc = self.stats.inc_value
        inc("polite/attempts")
        inc(f"polite/status/{label}")
        inc(f"polite/exit_ip_source/{source}")
        if ok:
            inc("polite/success")
        if limited:
            inc("polite/rate_limited")
            inc(f"polite/rate_limited/host/{host}")
            if endpoint:
                inc(f"polite/rate_limited/endpoint/{key_name(endpoint)}")
        if challenge:
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
        h = self.hosts.get(host)
        if h is None:
            h = self.hosts[host] = HostStats(latency=self._host_histograms < self.config.stats_top)
            self._host_histograms += h.latency is not None
        h.add(label, ok, limited, ban, challenge)
        if endpoint:
            e = self.endpoints.get(endpoint)
            if e is None:
                e = self.endpoints[endpoint] = _Counts()
            e.add(label, ok, limited, ban, challenge)
        if outcome.exit_ip:
            h.exit_ips[_capped(h.exit_ips, outcome.exit_ip, MAX_EXIT_IPS_PER_HOST)] += 1
            self.exit_ips[_capped(self.exit_ips, outcome.exit_ip, MAX_EXIT_IPS)] += 1
        if outcome.latency is not None:
            ms = max(1, _ms(outcome.latency))
            self.latency.record_value(ms)
            if h.latency is not None:
                h.latency.record_value(ms)
        if outcome.endpoint:
            self.wait.record_value(_ms(outcome.wait))
        if self._jsonl.path:
            self._jsonl.write(outcome.to_dict())
        if self._prom is not None:
            top = self.config.stats_top
            ph = _capped(self._prom_hosts, host, top)
            pe = _capped(self._prom_endpoints, endpoint, top) if endpoint else None
            self._prom_hosts.add(ph)
            if pe is not None:
                self._prom_endpoints.add(pe)
            self._prom.observe(outcome, label, ph, pe, _distinct(h.exit_ips))
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
            "exit_ips": _distinct(self.exit_ips),
            "requests_per_exit_ip": dict(self.exit_ips),
            "exit_ip_sources": dict(self.exit_ip_sources),
            "hosts": {
                host: {
                    **h.as_dict(),
                    "exit_ips": _distinct(h.exit_ips),
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

        if self.runtime.publisher is not None:
            self.runtime.publisher(snapshot(self, finished, summary))

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
        return None if prom is None else _close_off_thread(prom)

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
        set_value = self.stats.set_value
        for key in ("pages_per_min", "pages_per_min_window", "success_rate", "exit_ips"):
            set_value(f"polite/{key}", s[key])
        for name in ("latency", "wait"):
            for p in REPORTED:
                if s[f"{name}_p{p}"] is not None:
                    set_value(f"polite/{name}/p{p}", s[f"{name}_p{p}"])
        for ip, n in s["requests_per_exit_ip"].items():
            set_value(f"polite/exit_ip/{ip}", n)
        top = self.config.stats_top
        hosts, folded = fold_top(s["hosts"], top)
        set_value("polite/hosts_folded", folded + self._hosts_folded)
        for host, h in hosts.items():
            prefix = f"polite/host/{host}"
            for key in ("attempts", "success", "exit_ips"):
                if key in h:
                    set_value(f"{prefix}/{key}", h[key])
            for label, n in h["statuses"].items():
                set_value(f"{prefix}/status/{label}", n)
            for p in REPORTED:
                if h.get(f"latency_p{p}") is not None:
                    set_value(f"{prefix}/latency/p{p}", h[f"latency_p{p}"])
        endpoints, folded = fold_top(s["endpoints"], top)
        set_value("polite/endpoints_folded", folded)
        for ep, e in endpoints.items():
            set_value(f"polite/endpoint/{key_name(ep)}/attempts", e["attempts"])
            for label, n in e["statuses"].items():
                set_value(f"polite/endpoint/{key_name(ep)}/status/{label}", n)
        sessions, cap = s["sessions"], self.config.stats_sessions_map
        if cap:
            set_value("polite/sessions_map", dict(sorted(sessions.items())[:cap]))
        set_value("polite/sessions_map_left_out", max(0, len(sessions) - cap))
        logger.info("scrapy-polite summary:\n%s", format_summary(s), extra={"spider": spider})


async def _close_off_thread(prom: Any) -> None:
    """Stopping the HTTP server takes up to its 0.5 s poll: not on the reactor thread."""
    from scrapy.utils.defer import maybe_deferred_to_future
    from twisted.internet.threads import deferToThread

    await maybe_deferred_to_future(deferToThread(prom.close))
