"""Fixtures: a real sandbox (site + proxy fleet) and real in-process crawls."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from scrapy import signals
from scrapy.crawler import Crawler, CrawlerRunner

from scrapy_polite.sandbox import Sandbox, SandboxConfig

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "example_project"))
# The round-robin proxy middleware that stands for plain Scrapy in the benchmarks.
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests"))

BASE_SETTINGS: dict[str, Any] = {
    "ADDONS": {"scrapy_polite.Addon": 500},
    "TELNETCONSOLE_ENABLED": False,
    "LOG_LEVEL": "INFO",
    "DOWNLOAD_TIMEOUT": 5,
    "POLITE_LOG_INTERVAL": 0,
    "CLOSESPIDER_TIMEOUT": 120,
    "ROBOTSTXT_OBEY": False,
}


@pytest.fixture
def sandbox(tmp_path: Path):
    """Start sandboxes from configs; every one is stopped after the test."""
    started: list[Sandbox] = []

    def start(cfg: SandboxConfig) -> Sandbox:
        sb = Sandbox(cfg, workdir=tmp_path / f"sandbox{len(started)}")
        sb.start()
        started.append(sb)
        return sb

    yield start
    for sb in started:
        sb.stop()


class CrawlResult:
    def __init__(self, crawler: Crawler, items: list[dict[str, Any]]) -> None:
        self.crawler = crawler
        self.items = items
        self.stats: dict[str, Any] = crawler.stats.get_stats()


async def crawl(
    spidercls: type, settings: dict[str, Any], _on_crawler: Any = None, **spider_kwargs: Any
) -> CrawlResult:
    """Run one real crawl on the test's reactor and collect its items.

    *_on_crawler* is called with the crawler before it starts (to connect signals).
    """
    runner = CrawlerRunner({**BASE_SETTINGS, **settings})
    crawler = runner.create_crawler(spidercls)
    if _on_crawler is not None:
        _on_crawler(crawler)
    items: list[dict[str, Any]] = []

    def on_item(item: Any) -> None:
        items.append(dict(item))

    crawler.signals.connect(on_item, signal=signals.item_scraped)
    await crawler.crawl(**spider_kwargs)
    return CrawlResult(crawler, items)


@pytest.fixture
def redis_server(tmp_path: Path):
    """A fresh real Redis server (see tests/redis_server.py), stopped after the test."""
    from redis_server import RedisServer

    server = RedisServer(tmp_path / "redis")
    yield server
    server.stop()
