"""The crawl's start and end for the gate, and the middleware's periodic work between them.

The periodic work: notice the engine closing, expire lost leases, reload the proxies file.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from scrapy_polite import compat
from scrapy_polite.downloader.jobdir import report_dropped
from scrapy_polite.errors import SpiderClosing
from scrapy_polite.pool.watcher import ProxiesFileWatcher

if TYPE_CHECKING:
    from twisted.internet.defer import Deferred

    from scrapy_polite.gate.base import Gate
    from scrapy_polite.settings.config import PoliteConfig

logger = logging.getLogger(__name__)

ENGINE_WATCH_INTERVAL = 0.5
LEASE_EXPIRY_INTERVAL = 5.0


def announce(config: PoliteConfig, crawler: Any, spider: Any) -> None:
    """Log the pool and limits the crawl starts with, and drop Scrapy's delay on ``DOWNLOAD_SLOTS`` hosts."""
    cfg = config
    labels = [e.label for e in cfg.endpoints]
    shown = ", ".join(labels[:5]) + (f", ... (+{len(labels) - 5})" if len(labels) > 5 else "")
    logger.info(
        "%(n)d endpoints [%(shown)s]; host concurrency %(hc)d (max %(hm)d), "
        "%(ec)d request(s) per endpoint, delay %(lo).2f-%(hi).2f s%(adaptive)s",
        {
            "n": len(labels), "shown": shown, "hc": cfg.host_concurrency,
            "hm": cfg.host_concurrency_max, "ec": cfg.endpoint_concurrency,
            "lo": cfg.delay[0], "hi": cfg.delay[1],
            "adaptive": ", adaptive" if cfg.adaptive else "",
        },
        extra={"spider": spider},
    )
    if cfg.host_overrides:
        # The gates space these hosts by their DOWNLOAD_SLOTS delay; Scrapy's slot must not add its own.
        compat.drop_slot_delays(getattr(crawler.engine, "downloader", None))
        for host, limits in cfg.host_overrides.items():
            logger.info(
                "%s (DOWNLOAD_SLOTS): host concurrency %d (max %d), delay %.2f-%.2f s",
                host, limits.concurrency, limits.concurrency_max, *limits.delay, extra={"spider": spider},
            )
    for label in cfg.duplicates:
        logger.warning("duplicate proxy %s ignored", label, extra={"spider": spider})


class Maintenance:
    """Three looping calls, started when the spider opens and stopped when it closes."""

    def __init__(self, crawler: Any, config: PoliteConfig, gate: Gate) -> None:
        self.crawler = crawler
        self.config = config
        self.gate = gate
        self.stats = crawler.stats
        #: Set once the engine is seen closing (or the middleware closes the spider itself).
        self.closing = False
        self._engine_ran = False
        self._loops: list[Any] = []

    def opened(self, spider: Any) -> None:
        """The spider opened: say what the crawl starts with, start the gate and the loops."""
        announce(self.config, self.crawler, spider)
        self.stats.set_value("polite/endpoints", len(self.config.endpoints))
        self.gate.start()
        self.start()

    def closed(self, spider: Any, reason: str) -> Deferred | None:
        """The spider closed: stop the loops, write the gate's closing stats, stop the gate.

        Returns what to wait for: a shared gate hands back what this process holds.
        """
        self.stop()
        gate = self.gate
        self.stats.set_value("polite/sessions", len(gate.sessions()))
        if gate.outages:
            self.stats.set_value("polite/state_outages", gate.outages)
        if gate.reasserted:
            self.stats.set_value("polite/state_reasserted", gate.reasserted)
        report_dropped(self.stats, reason, spider)
        return gate.stop()

    def start(self) -> None:
        from twisted.internet import task

        calls = [(self.watch_engine, ENGINE_WATCH_INTERVAL), (self.expire_leases, LEASE_EXPIRY_INTERVAL)]
        if self.config.proxies_file:
            watcher = ProxiesFileWatcher(self.config, self.gate, self.stats)
            calls.append((watcher.check, self.config.proxies_file_check_interval))
        for call, interval in calls:
            loop = task.LoopingCall(call)
            loop.start(interval, now=False)
            self._loops.append(loop)

    def stop(self) -> None:
        for loop in self._loops:
            if loop.running:
                loop.stop()
        self._loops.clear()

    def watch_engine(self) -> None:
        """Release waiters once the engine starts closing, so it need not wait for them."""
        engine = getattr(self.crawler, "engine", None)
        # The engine runs only once its engine_started handlers are done (a browser starting, say).
        self._engine_ran = self._engine_ran or bool(getattr(engine, "running", False))
        if self._engine_ran and compat.engine_closing(engine):
            self.closing = True
            self.gate.close("spider closing", SpiderClosing)

    def expire_leases(self) -> None:
        for lease in self.gate.expire_leases(self.config.lease_timeout):
            self.stats.inc_value("polite/leases_expired")
            logger.warning(
                "released %s for %s after %.0f s without an answer "
                "(the request never reached the downloader or never came back)",
                lease.endpoint.label, lease.host, self.config.lease_timeout,
            )
