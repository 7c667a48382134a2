"""HostThrottle: the Scrapy extension around :class:`~scrapy_polite.throttle.policy.ThrottlePolicy`.

Logs each change once with its evidence, sends ``host_throttle_changed`` (the
stats write it as a throttle event line), reports the end of pauses and parks,
and takes a robots.txt ``Crawl-delay`` as the host's minimum spacing.
"""

from __future__ import annotations

import logging
import math
import time
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from scrapy import signals

from scrapy_polite import signals as polite_signals
from scrapy_polite.downloader.pace import throttle_handlers
from scrapy_polite.metrics.throttle_events import evidence_text, throttle_events
from scrapy_polite.runtime import enabled_runtime, get_runtime
from scrapy_polite.throttle.policy import ThrottlePolicy

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)


class HostThrottle:
    """Scrapy extension around :class:`ThrottlePolicy`: logging, signals, robots."""

    def __init__(self, crawler: Crawler) -> None:
        rt = enabled_runtime(crawler)
        self.crawler = crawler
        self.policy = ThrottlePolicy(rt.config, rt.gate, notify=self._notify)
        # The middleware tells what each answer said through the pace signals.
        polite_signals.connect(crawler, throttle_handlers(self.policy))
        # Bounded as the host memory: a host's Crawl-delay outlives its eviction there.
        self._robots_seen: OrderedDict[str, None] = OrderedDict()
        self._robots_max = max(1, rt.config.host_memory)
        self._stats_hosts: set[str] = set()
        self._stats_top = rt.config.stats_top
        self._resume_calls: list[Any] = []
        crawler.signals.connect(self._closed, signal=signals.spider_closed)
        if crawler.settings.getbool("ROBOTSTXT_OBEY"):
            crawler.signals.connect(self._response_received, signal=signals.response_received)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> HostThrottle:
        return cls(crawler)

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

    def _closed(self, spider: Any = None) -> None:
        for call in self._resume_calls:
            if call.active():
                call.cancel()
        self._resume_calls.clear()

    def _response_received(self, response: Any, request: Any, spider: Any = None) -> None:
        """Use a robots.txt ``Crawl-delay`` as the host's minimum spacing."""
        if not request.url.endswith("/robots.txt") or response.status != 200:
            return
        from scrapy_polite.downloader.proxy_meta import host_key

        host = host_key(request, get_runtime(self.crawler).config.host_key)
        if host in self._robots_seen:
            return
        self._robots_seen[host] = None
        if len(self._robots_seen) > self._robots_max:
            self._robots_seen.popitem(last=False)
        delay = _crawl_delay(response.text if hasattr(response, "text") else "", robots_agent(self.crawler.settings))
        if delay is None:
            return
        rt = get_runtime(self.crawler)
        spacing = min(delay, rt.config.retry_after_max)
        rt.gate.set_host_min_delay(host, spacing)
        if spacing < delay:
            logger.warning(
                "%s robots.txt Crawl-delay %g s capped at POLITE_RETRY_AFTER_MAX: %.1f s is "
                "the minimum spacing", host, delay, spacing,
            )
        else:
            logger.info("%s robots.txt Crawl-delay %.1f s is the minimum spacing", host, delay)


def robots_agent(settings: Any) -> str:
    """The agent robots.txt rules are read for: ``ROBOTSTXT_USER_AGENT``, else ``USER_AGENT`` (as RobotsTxtMiddleware)."""
    return settings.get("ROBOTSTXT_USER_AGENT") or settings.get("USER_AGENT") or "*"


def _crawl_delay(text: str, agent: str = "*") -> float | None:
    """The ``Crawl-delay`` robots.txt gives *agent*, parsed by Protego (Scrapy's parser).

    ``None`` unless it is a positive finite number of seconds: the site writes it.
    """
    from protego import Protego

    try:
        delay = float(Protego.parse(text).crawl_delay(agent) or 0)
    except Exception:  # a broken robots.txt must not break the crawl
        return None
    return delay if math.isfinite(delay) and delay > 0 else None
