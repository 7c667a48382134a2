"""A crawl with the in-memory state loads neither the Redis backend nor redis-py."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import ROOT

from scrapy_polite.sandbox import ProxyConfig, SandboxConfig, SiteConfig

CHILD = """
import json, sys
sys.path.insert(0, sys.argv[3])
from scrapy.crawler import CrawlerProcess
from example_project.spiders.catalogue import CatalogueSpider

process = CrawlerProcess({
    "ADDONS": {"scrapy_polite.Addon": 500}, "POLITE_PROXIES": json.loads(sys.argv[1]),
    "POLITE_DELAY": (0.0, 0.0), "LOG_LEVEL": "WARNING",
    "TWISTED_REACTOR": "twisted.internet.asyncioreactor.AsyncioSelectorReactor",
})
crawler = process.create_crawler(CatalogueSpider)
process.crawl(crawler, start_url=sys.argv[2])
process.start()
loaded = sorted(m for m in sys.modules if m == "redis" or m.startswith(("redis.", "scrapy_polite.gate.redis")))
print(json.dumps({"items": crawler.stats.get_value("item_scraped_count", 0), "loaded": loaded}))
"""


@pytest.mark.once
def test_a_memory_state_crawl_does_not_import_the_redis_backend(sandbox) -> None:
    sb = sandbox(SandboxConfig(sites=[SiteConfig(name="a", pages=5, latency=[0.01, 0.02])],
                               proxies=ProxyConfig(count=3)))
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(sb.proxy_urls), sb.site_url("a"), str(ROOT / "example_project")],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["items"] == 5
    assert out["loaded"] == []
