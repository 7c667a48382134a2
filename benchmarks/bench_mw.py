"""Plain-Scrapy proxy assignment used by the baseline clients: round-robin, as a user would write it."""

from __future__ import annotations

import itertools
from typing import Any


class RoundRobinProxyMiddleware:
    """Sets ``meta['proxy']`` to the next URL of ``BENCH_PROXIES`` on every request (retries included)."""

    def __init__(self, proxies: list[str]) -> None:
        self._cycle = itertools.cycle(proxies)

    @classmethod
    def from_crawler(cls, crawler: Any) -> RoundRobinProxyMiddleware:
        return cls(crawler.settings.getlist("BENCH_PROXIES"))

    def process_request(self, request: Any, spider: Any = None) -> None:
        request.meta["proxy"] = next(self._cycle)
