"""HostThrottle: the Scrapy extension around :class:`~scrapy_polite.throttle.policy.ThrottlePolicy`.

Logs each change once with its evidence, sends ``host_throttle_changed`` (the
stats write it as a throttle event line), reports the end of pauses and parks,
and has a robots.txt ``Crawl-delay`` read as the host's minimum spacing (:mod:`~scrapy_polite.downloader.robots`).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from scrapy import signals

from scrapy_polite import signals as polite_signals
from scrapy_polite.downloader.loop_lag import LoopLag
from scrapy_polite.downloader.pace import throttle_handlers
from scrapy_polite.downloader.robots import CrawlDelay, robots_agent
from scrapy_polite.metrics.throttle_events import evidence_text, throttle_events
from scrapy_polite.runtime import enabled_runtime, get_runtime
from scrapy_polite.throttle.policy import ThrottlePolicy
from scrapy_polite.timers import call_later

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)


class HostThrottle:
    """Scrapy extension around :class:`ThrottlePolicy`: logging, signals, robots."""

    def __init__(self, crawler: Crawler) -> None:
        rt = enabled_runtime(crawler)
        self.crawler = crawler
        self.policy = ThrottlePolicy(rt.config, rt.gate, notify=self._notify)
        self.loop_lag = LoopLag(call_later)
        # The middleware tells what each answer said through the pace signals; a clean answer's
        # latency is the site's once the crawler's own loop lag is taken off.
        polite_signals.connect(crawler, {**throttle_handlers(self.policy), polite_signals.pace_ok: self._ok})
        self._stats_hosts: set[str] = set()
        self._stats_top = rt.config.stats_top
        self._resume_calls: list[Any] = []
        crawler.signals.connect(self._opened, signal=signals.spider_opened)
        crawler.signals.connect(self._closed, signal=signals.spider_closed)
        if crawler.settings.getbool("ROBOTSTXT_OBEY"):
            # Kept here: a signal holds its receiver weakly.
            self.robots = CrawlDelay(rt.gate, rt.config, robots_agent(crawler.settings))
            crawler.signals.connect(self.robots.response_received, signal=signals.response_received)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> HostThrottle:
        return cls(crawler)

    def _ok(self, lease: Any, status: int, headers: Any = None, latency: float | None = None, **_: Any) -> None:
        self.policy.ok(lease, status, headers, self.loop_lag.site_latency(latency))

    def _notify(
        self, host: str, old: dict[str, Any], new: dict[str, Any], reason: str, evidence: dict[str, Any] | None = None
    ) -> None:
        stats = self.crawler.stats
        stats.inc_value("polite/throttle/changes")
        if host in self._stats_hosts or len(self._stats_hosts) < self._stats_top:
            self._stats_hosts.add(host)
            stats.set_value(f"polite/throttle/{host}/concurrency", new["concurrency"])
        else:  # POLITE_STATS_TOP hosts have keys of their own; the rest are counted together
            stats.inc_value("polite/throttle/(other)/changes")
        evidence = evidence or {}
        now = time.monotonic()
        events = throttle_events(old, new, evidence, now)
        logger.log(
            logging.WARNING if "park" in evidence else logging.INFO,
            "%s concurrency %d -> %d, delay %.2f-%.2f -> %.2f-%.2f s, "
            "host interval %.2f -> %.2f s%s (%s%s)",
            host, old["concurrency"], new["concurrency"], *old["delay"], *new["delay"],
            old["interval"], new["interval"],
            f", paused {new['paused_until'] - now:.1f} s" if new["paused_until"] > now else "",
            reason, evidence_text(evidence),
        )
        self.crawler.signals.send_catch_log(
            polite_signals.host_throttle_changed, host=host, old=old, new=new, reason=reason,
            events=events, evidence=evidence,
        )
        if any(e["change"] in ("pause", "park") for e in events):
            self._watch_resume(host, new["paused_until"], "park" in evidence)

    def _watch_resume(self, host: str, until: float, parked: bool) -> None:
        """Log and signal the end of a pause or park, unless a later one extended it."""
        from twisted.internet import reactor

        def resumed() -> None:
            h = get_runtime(self.crawler).gate.host(host)
            if h.paused_until > until + 1e-6 or not self.crawler.crawling:
                return  # extended (its own watch reports it), or the crawl is over
            change = "unpark" if parked else "resume"
            snap = self.policy._snapshot(host)
            logger.info("%s %s after %.1f s", host, "unparked" if parked else "resumed",
                        until - started)
            self.crawler.signals.send_catch_log(
                polite_signals.host_throttle_changed, host=host, old=snap, new=snap,
                reason=f"{change}: the {'park' if parked else 'pause'} is over",
                events=[{"change": change, "from": round(until - started, 3), "to": 0.0}], evidence={},
            )

        started = time.monotonic()
        self._resume_calls = [c for c in self._resume_calls if c.active()]
        self._resume_calls.append(reactor.callLater(max(0.0, until - started), resumed))  # type: ignore[attr-defined,arg-type]

    def _opened(self, spider: Any = None) -> None:
        self.loop_lag.start()

    def _closed(self, spider: Any = None) -> None:
        self.loop_lag.stop()
        for call in self._resume_calls:
            if call.active():
                call.cancel()
        self._resume_calls.clear()
