"""Pages rendered in a real headless Chromium (scrapy-playwright) through the pool, judged on the site's log."""

from __future__ import annotations

import os
import re
import shutil
from collections import defaultdict
from typing import Any
from urllib.parse import urlsplit

import pytest
import pytest_twisted
import scrapy
from conftest import crawl
from faultcheck import assert_no_traceback, fault_crawl

from scrapy_polite.sandbox import ProxyConfig, SandboxConfig, SiteConfig

#: CI installs Chromium and scrapy-playwright and sets this, so a missing one fails there instead of skipping.
REQUIRED = os.environ.get("POLITE_TEST_REQUIRE_BROWSER") == "1"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
try:
    import scrapy_playwright  # noqa: F401

    MISSING = None if CHROMIUM else "Chromium is not installed (apt-get install chromium)"
except ImportError:
    MISSING = "scrapy-playwright is not installed (pip install 'scrapy-polite[playwright]')"

pytestmark = [pytest.mark.browser]

HANDLER = "scrapy_playwright.handler.ScrapyPlaywrightDownloadHandler"
RICH_RE = re.compile(r"^/(?:rich|asset/rich-|api/rich)/?(\d+)")


@pytest.fixture(autouse=True)
def _browser() -> None:
    if MISSING is not None:
        if REQUIRED:
            pytest.fail(f"{MISSING} (POLITE_TEST_REQUIRE_BROWSER=1)")
        pytest.skip(MISSING)


def browser_settings(sb: Any, **extra: Any) -> dict[str, Any]:
    return {
        "POLITE_PROXIES": sb.proxy_urls,
        "DOWNLOAD_HANDLERS": {"http": HANDLER, "https": HANDLER},
        "PLAYWRIGHT_LAUNCH_OPTIONS": {"executable_path": CHROMIUM, "headless": True},
        "PLAYWRIGHT_DEFAULT_NAVIGATION_TIMEOUT": 10_000,
        "CONCURRENT_REQUESTS": 16,
        **extra,
    }


def site(**kw: Any) -> SiteConfig:
    kw.setdefault("name", "a")
    kw.setdefault("latency", [0.01, 0.03])
    return SiteConfig(**kw)


def exit_ips(sb: Any) -> dict[int, str]:
    """Each proxy's exit IP by the proxy's port (an endpoint label names the port)."""
    return {urlsplit(u).port: ip for u, ip in zip(sb.proxy_urls, sb.proxy_exit_ips)}


def rich_page(e: dict[str, Any]) -> int | None:
    """The rich page an access-log entry belongs to (its document or one of its sub-resources)."""
    path = e["path"].split("?")[0]
    m = re.match(r"^/rich/(\d+)$", path) or re.match(r"^/asset/rich-(\d+)\.\w+$", path)
    m = m or re.match(r"^/api/rich/(\d+)$", path)
    return int(m.group(1)) if m else None


class RichSpider(scrapy.Spider):
    """Renders /rich/1..pages, waits for the page's fetch() answer, records the lease."""

    name = "rich"

    def __init__(self, start_url: str = "", pages: str = "8", **kw: Any) -> None:
        super().__init__(**kw)
        self.start_url, self.pages = start_url, int(pages)

    async def start(self):
        from scrapy_playwright.page import PageMethod

        for n in range(1, self.pages + 1):
            yield scrapy.Request(
                f"{self.start_url}/rich/{n}",
                meta={"playwright": True, "playwright_page_methods": [PageMethod("wait_for_selector", "#api.done")]},
            )

    def parse(self, response):
        yield {
            "n": int(response.css("span.id::text").get()), "api_ip": response.css("#api::text").get(),
            "endpoint": response.meta["polite_endpoint"], "render": response.meta.get("polite_render"),
            "peer": response.headers.get("X-Sandbox-Peer-IP", b"").decode(),
        }


@pytest_twisted.ensureDeferred
async def test_page_and_sub_resources_leave_through_the_leased_endpoint_one_page_at_a_time(
    sandbox, tmp_path
) -> None:
    sb = sandbox(SandboxConfig(sites=[site(pages=12)], proxies=ProxyConfig(count=4, gateway=False)))
    jsonl = tmp_path / "attempts.jsonl"
    run = await fault_crawl(
        RichSpider, browser_settings(sb, POLITE_DELAY=(0.05, 0.1), POLITE_HOST_CONCURRENCY=4,
                                     POLITE_STATS_JSONL=str(jsonl)),
        tmp_path / "crawl.log", start_url=sb.site_url("a"), pages="12",
    )
    log = sb.log()
    items = {i["n"]: i for i in run.result.items}
    assert sorted(items) == list(range(1, 13))
    exit_ip = exit_ips(sb)
    by_page: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for e in log:
        n = rich_page(e)
        if n is not None:
            by_page[n].append(e)
    for n, entries in by_page.items():
        kinds = {e["path"].rsplit(".", 1)[-1] if "/asset/" in e["path"] else e["path"].split("/")[1] for e in entries}
        assert kinds >= {"rich", "css", "js", "png", "api"}, (n, kinds)
        leased = exit_ip[urlsplit(items[n]["endpoint"]).port]
        # The document and every sub-resource came from the leased endpoint's exit IP.
        assert {e["ip"] for e in entries} == {leased}, (n, entries)
        assert items[n]["api_ip"] == leased and items[n]["peer"] == leased
        assert items[n]["render"] is not None and items[n]["render"] > 0
    # Two pages never rendered through one endpoint at once: per exit IP, page spans do not overlap.
    spans: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for entries in by_page.values():
        spans[entries[0]["ip"]].append((min(e["t_start"] for e in entries), max(e["t_end"] for e in entries)))
    for ip, ss in spans.items():
        ss.sort()
        assert all(b[0] >= a[1] for a, b in zip(ss, ss[1:])), (ip, ss)
    assert len(spans) == 4  # the whole pool rendered
    stats = run.stats
    assert stats["polite/rendered"] == 12
    assert stats["playwright/context_count"] == 4  # one context per endpoint, not per page
    import json

    records = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert len(records) == 12 and all(r["render"] > 0 and r["exit_ip"] in exit_ip.values() for r in records)
    assert_no_traceback(run.log_text)
