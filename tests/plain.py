"""What a user would write without scrapy-polite: proxies assigned round-robin."""

from __future__ import annotations

import itertools
from typing import Any


class RoundRobinProxyMiddleware:
    def __init__(self, proxies: list[str]) -> None:
        self._cycle = itertools.cycle(proxies)

    @classmethod
    def from_crawler(cls, crawler: Any) -> RoundRobinProxyMiddleware:
        return cls(crawler.settings.getlist("PLAIN_PROXIES"))

    def process_request(self, request: Any, spider: Any = None) -> None:
        request.meta["proxy"] = next(self._cycle)
