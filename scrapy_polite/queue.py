"""A scheduler queue that hands out requests of the least loaded host first.

Scrapy's DownloaderAwarePriorityQueue counts requests in download slots,
but requests held at the polite gates are not in a slot yet: a saturated
host would keep winning and its waiting requests would fill
``CONCURRENT_REQUESTS``, starving other hosts. This queue counts what the
gate holds (in flight plus waiting) per host instead.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from scrapy.pqueues import DownloaderAwarePriorityQueue, DownloaderInterface

from . import compat
from .runtime import get_runtime

if TYPE_CHECKING:
    from scrapy.crawler import Crawler


class _GateInterface(DownloaderInterface):
    def __init__(self, crawler: Crawler) -> None:
        super().__init__(crawler)
        self._crawler = crawler

    def stats(self, possible_slots: Iterable[str]) -> list[tuple[int, str]]:
        gate = get_runtime(self._crawler).gate
        return [(gate.host_load(slot) + compat.active_downloads(self.downloader, slot), slot) for slot in possible_slots]


class PolitePriorityQueue(DownloaderAwarePriorityQueue):
    """DownloaderAwarePriorityQueue that also counts requests waiting at the gates."""

    def __init__(self, crawler: Crawler, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(crawler, *args, **kwargs)
        compat.set_downloader_interface(self, _GateInterface(crawler))
