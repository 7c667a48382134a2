"""Each shim of scrapy_polite.compat against the real Scrapy objects of a running crawl."""

from __future__ import annotations

from typing import Any

import pytest
import pytest_twisted
import scrapy
from conftest import crawl
from scrapy import signals
from scrapy.pqueues import DownloaderAwarePriorityQueue

from scrapy_polite import compat

#: A page the downloader serves without a network (Scrapy's data: handler).
PAGE = "data:text/html,<p>hello</p>"
PLAIN = {"ADDONS": {}, "SCHEDULER_PRIORITY_QUEUE": "scrapy.pqueues.DownloaderAwarePriorityQueue"}


class Probe(scrapy.Spider):
    """Looks at the engine while the crawl runs, then asks it to close through the shim."""

    name = "probe"
    seen: dict[str, Any]

    async def start(self):
        yield scrapy.Request(PAGE, meta={"download_slot": "slot-a"}, dont_filter=True)

    def start_requests(self):  # Scrapy < 2.13 style, unused from 2.13 on
        yield scrapy.Request(PAGE, meta={"download_slot": "slot-a"}, dont_filter=True)

    def parse(self, response: Any) -> None:
        engine = self.crawler.engine
        self.seen["scheduler"] = compat.engine_scheduler(engine)
        self.seen["real_scheduler"] = engine._slot.scheduler
        self.seen["closing_while_running"] = compat.engine_closing(engine)
        self.seen["downloader"] = engine.downloader
        self.crawler.signals.connect(self.closed_signal, signal=signals.spider_closed)
        compat.close_spider(self.crawler, "compat_probe")

    def closed_signal(self, spider: Any, reason: str) -> None:
        self.seen["closing_after_close"] = compat.engine_closing(self.crawler.engine)


class Downloading(scrapy.Spider):
    """Counts the downloads of its slot while one is in the downloader."""

    name = "downloading"
    seen: dict[str, Any]

    async def start(self):
        yield scrapy.Request(PAGE, meta={"download_slot": "slot-a"}, dont_filter=True)

    def start_requests(self):
        yield scrapy.Request(PAGE, meta={"download_slot": "slot-a"}, dont_filter=True)

    def parse(self, response: Any) -> None:
        pass


@pytest_twisted.ensureDeferred
async def test_scheduler_closing_and_close_spider() -> None:
    seen: dict[str, Any] = {}
    result = await crawl(type("P", (Probe,), {"seen": seen}), PLAIN)
    assert seen["scheduler"] is seen["real_scheduler"] is not None
    assert seen["closing_while_running"] is False
    assert seen["closing_after_close"] is True
    assert result.stats["finish_reason"] == "compat_probe"
    assert compat.engine_scheduler(None) is None and compat.engine_closing(None) is False


@pytest_twisted.ensureDeferred
async def test_active_downloads_counts_the_slot() -> None:
    counts: list[tuple[int, int]] = []

    def reached(request: Any, spider: Any) -> None:
        downloader = spider.crawler.engine.downloader
        counts.append((compat.active_downloads(downloader, "slot-a"), compat.active_downloads(downloader, "other")))

    def on_crawler(crawler: Any) -> None:
        crawler.signals.connect(reached, signal=signals.request_reached_downloader)

    await crawl(type("D", (Downloading,), {"seen": {}}), PLAIN, _on_crawler=on_crawler)
    assert counts == [(1, 0)]


@pytest_twisted.ensureDeferred
async def test_set_downloader_interface_is_what_the_queue_asks() -> None:
    asked: list[list[str]] = []

    class Interface:
        def __init__(self, real: Any) -> None:
            self.real = real

        def stats(self, slots: Any) -> list[tuple[int, str]]:
            asked.append(sorted(slots))
            return self.real.stats(slots)

        def get_slot_key(self, request: Any) -> str:
            return self.real.get_slot_key(request)

    class Queue(DownloaderAwarePriorityQueue):
        def __init__(self, crawler: Any, *args: Any, **kwargs: Any) -> None:
            super().__init__(crawler, *args, **kwargs)
            compat.set_downloader_interface(self, Interface(self._downloader_interface))

    await crawl(type("D", (Downloading,), {"seen": {}}), {**PLAIN, "SCHEDULER_PRIORITY_QUEUE": Queue})
    assert ["slot-a"] in asked
    with pytest.raises(RuntimeError, match="_downloader_interface"):
        compat.set_downloader_interface(object(), Interface(None))


@pytest_twisted.ensureDeferred
async def test_drop_slot_delays_reaches_the_slots_the_downloader_builds() -> None:
    delays: list[float] = []
    handlers: list[Any] = []  # the signals hold weak references

    def on_crawler(crawler: Any) -> None:
        def opened(spider: Any) -> None:
            compat.drop_slot_delays(crawler.engine.downloader)

        def reached(request: Any, spider: Any) -> None:
            delays.append(crawler.engine.downloader.slots["slot-a"].delay)

        handlers.extend((opened, reached))
        crawler.signals.connect(opened, signal=signals.spider_opened)
        crawler.signals.connect(reached, signal=signals.request_reached_downloader)

    settings = {**PLAIN, "DOWNLOAD_SLOTS": {"slot-a": {"delay": 5.0, "concurrency": 2}}}
    result = await crawl(type("D", (Downloading,), {"seen": {}}), settings, _on_crawler=on_crawler)
    assert delays == [0.0]
    assert result.crawler.settings.getdict("DOWNLOAD_SLOTS") == {"slot-a": {"delay": 5.0, "concurrency": 2}}
    compat.drop_slot_delays(object())  # a downloader without per-slot settings: nothing to do
