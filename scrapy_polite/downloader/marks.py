"""A spider middleware that tells the polite middleware of the pages a callback marks as a challenge or ban."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from scrapy_polite import signals as polite_signals
from scrapy_polite.errors import ChallengeDetected
from scrapy_polite.runtime import enabled_runtime

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response


class PoliteMarksMiddleware:
    """Turns :class:`~scrapy_polite.errors.ChallengeDetected` from a callback into a re-queue.

    The downloader middleware, which holds the attempt's lease, hears of the page through
    ``page_marked`` and answers with the requests to send again.
    """

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> PoliteMarksMiddleware:
        enabled_runtime(crawler)  # NotConfigured with POLITE_ENABLED = False
        return cls(crawler)

    def process_spider_exception(self, response: Response, exception: Exception, spider: Any = None) -> Any:
        if not isinstance(exception, ChallengeDetected):
            return None
        answers = self.crawler.signals.send_catch_log(
            polite_signals.page_marked, response=response, kind=exception.kind, reason=exception.reason
        )
        if not answers:  # the polite middleware is not enabled: the exception goes on
            return None
        again: list[Request] = []
        for _, result in answers:
            if isinstance(result, list):
                again.extend(result)
        return again
