"""POLITE_HOST_KEY decides the host key everywhere: the gates and the throttle's robots.txt Crawl-delay.

Real crawls against the sandbox, judged from the site's access log.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest_twisted
from conftest import crawl
from example_project.spiders.catalogue import CatalogueSpider
from logcheck import items_fetched, min_spacing_per_ip

from scrapy_polite.sandbox import ProxyConfig, SandboxConfig, SiteConfig


class GroupSlots:
    """Puts every request in one named download slot, as a project grouping hosts would."""

    def process_request(self, request: Any, spider: Any = None) -> None:
        request.meta["download_slot"] = "group"


@pytest_twisted.ensureDeferred
async def test_a_crawl_delay_applies_to_the_host_key_the_gates_use(sandbox) -> None:
    sb = sandbox(SandboxConfig(sites=[SiteConfig(name="a", pages=4, latency=[0.01, 0.02], robots_crawl_delay=1.0)],
                               proxies=ProxyConfig(count=1)))
    result = await crawl(CatalogueSpider, {
        "POLITE_PROXIES": sb.proxy_urls, "POLITE_HOST_KEY": "hostname", "ROBOTSTXT_OBEY": True,
        "POLITE_DELAY": (0.05, 0.1), "POLITE_COOLDOWN": (0.1, 0.2),
        "DOWNLOADER_MIDDLEWARES": {GroupSlots: 100},
    }, start_url=sb.site_url("a"))
    log = [e for e in sb.log() if e["path"] != "/robots.txt"]
    assert sorted(items_fetched(log)) == [1, 2, 3, 4]
    assert Counter(e["status"] for e in log) == {200: len(log)}
    # The gates key on the hostname (POLITE_HOST_KEY), so the Crawl-delay must too: 1 s, not POLITE_DELAY.
    assert min_spacing_per_ip(log, "a") >= 0.8
    assert result.stats.get("polite/gave_up") is None
