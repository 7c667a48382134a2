"""What the crawl does when the gate reports an event: stats, a log line, a signal, or closing the spider."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from scrapy_polite import compat
from scrapy_polite import signals as polite_signals
from scrapy_polite.errors import SpiderClosing
from scrapy_polite.gate.base import GateListeners

if TYPE_CHECKING:
    from scrapy_polite.downloader.maintenance import Maintenance
    from scrapy_polite.gate.base import Gate
    from scrapy_polite.gate.state import Lease
    from scrapy_polite.settings.config import PoliteConfig

logger = logging.getLogger(__name__)


class GateEvents:
    """The listeners the middleware hands the gate."""

    def __init__(self, crawler: Any, config: PoliteConfig, gate: Gate, maintenance: Maintenance) -> None:
        self.crawler = crawler
        self.config = config
        self.gate = gate
        self.maintenance = maintenance
        self.stats = crawler.stats

    def listeners(self) -> GateListeners:
        return GateListeners(
            on_stalled=self.stalled, on_all_unusable=self.all_unusable,
            on_session_repinned=self.session_repinned, on_orphans=self.orphans,
            on_outage_timeout=self.state_unreachable,
        )

    def orphans(self, process: str, count: int) -> None:
        self.stats.inc_value("polite/fleet/orphaned", count)

    def stalled(self, lease: Lease) -> None:
        self.stats.inc_value("polite/stalled")
        logger.info(
            "no answer via %s for %s after %.1f s: its host slot is free again, "
            "the endpoint stays busy until the answer or the download timeout",
            lease.endpoint.label, lease.host, self.config.stall_timeout,
        )

    def all_unusable(self) -> None:
        if self.maintenance.closing:
            return
        logger.error(
            "every endpoint is dead or removed (%d failures in a row each); "
            "closing the spider", self.config.endpoint_max_failures,
        )
        self.gate.close("no usable endpoints")
        self._close_spider("polite_no_usable_endpoints")

    def state_unreachable(self, down_for: float) -> None:
        """Redis away past ``POLITE_STATE_OUTAGE_TIMEOUT``: close rather than wait forever.

        The requests waiting at the gate take the usual close path (kept in JOBDIR,
        or counted in ``polite/dropped_at_close``); those in flight finish.
        """
        if self.maintenance.closing:
            return
        logger.error(
            "the shared state at %s has been unreachable for %.0f s "
            "(POLITE_STATE_OUTAGE_TIMEOUT=%g); closing the spider",
            self.gate.label, down_for, self.config.state_outage_timeout,
        )
        # The engine first, so the requests handed back to the scheduler stay there for JOBDIR.
        self._close_spider("polite_state_unreachable")
        self.gate.close("shared state unreachable", SpiderClosing)

    def session_repinned(self, session: str, old: str | None, reason: str) -> None:
        logger.warning("session %r leaves %s (%s); it gets a new endpoint", session, old, reason)
        self.stats.inc_value("polite/sessions/repinned")
        self.crawler.signals.send_catch_log(
            polite_signals.session_repinned, session=session, old=old, reason=reason
        )

    def _close_spider(self, reason: str) -> None:
        self.maintenance.closing = True
        compat.close_spider(self.crawler, reason)
