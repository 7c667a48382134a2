"""Requests still waiting at the gate when the spider closes: back to the scheduler, for ``JOBDIR`` to keep."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from scrapy_polite import compat
from scrapy_polite.downloader.proxy_meta import forget_attempt

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)


def dropped_at_close(crawler: Crawler, request: Request) -> None:
    """Count *request*, failed at the gate by the spider closing, and keep it for ``JOBDIR`` if there is one."""
    crawler.stats.inc_value("polite/dropped_at_close")
    if keep_for_next_run(crawler, request):
        crawler.stats.inc_value("polite/kept_at_close")


def report_dropped(stats: Any, reason: str, spider: Any) -> None:
    """One line at close on the requests the gate still held: none is lost without a word."""
    dropped = stats.get_value("polite/dropped_at_close", 0)
    if dropped:
        logger.info(
            "%d request(s) still waiting at the gate were not sent, as the spider closed "
            "(%s); %d kept in JOBDIR for the next run",
            dropped, reason, stats.get_value("polite/kept_at_close", 0), extra={"spider": spider},
        )


def keep_for_next_run(crawler: Crawler, request: Request) -> bool:
    """Hand *request*, which never left the gate, back to the scheduler; whether it was kept.

    Without the package it would still be in the scheduler, so a paused crawl
    (``JOBDIR``, Ctrl-C) must not lose it. The scheduler is still open here: the
    engine closes it after the downloader has emptied. It bypasses the dupefilter,
    which has already seen it.
    """
    if not crawler.settings.get("JOBDIR"):
        return False
    scheduler = compat.engine_scheduler(crawler.engine)
    if scheduler is None:
        return False
    kept = request.replace(dont_filter=True)
    forget_attempt(kept.meta)
    return bool(scheduler.enqueue_request(kept))
