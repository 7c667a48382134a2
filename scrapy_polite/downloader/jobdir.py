"""Requests still waiting at the gate when the spider closes: back to the scheduler, for ``JOBDIR`` to keep."""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy_polite import compat
from scrapy_polite.downloader.proxy_meta import forget_attempt

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler


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
