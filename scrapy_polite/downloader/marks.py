"""A spider middleware that hands the polite middleware the pages a callback marks as a challenge or ban."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from scrapy_polite.errors import ChallengeDetected
from scrapy_polite.runtime import enabled_runtime

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Response


class PoliteMarksMiddleware:
    """Turns :class:`~scrapy_polite.errors.ChallengeDetected` from a callback into a re-queue."""

    def __init__(self, crawler: Crawler) -> None:
        self.runtime = enabled_runtime(crawler)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> PoliteMarksMiddleware:
        return cls(crawler)

    def process_spider_exception(self, response: Response, exception: Exception, spider: Any = None) -> Any:
        if not isinstance(exception, ChallengeDetected) or self.runtime.middleware is None:
            return None
        return self.runtime.middleware.marked(response, exception.kind, exception.reason)
