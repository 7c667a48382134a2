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
from faultcheck import assert_no_traceback, assert_pages_accounted, fault_crawl

from scrapy_polite.sandbox import FailureSpec, ProxyConfig, SandboxConfig, SiteConfig

#: CI installs Chromium and scrapy-playwright and sets this, so a missing one fails there instead of skipping.
REQUIRED = os.environ.get("POLITE_TEST_REQUIRE_BROWSER") == "1"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
try:
    import scrapy_playwright  # noqa: F401

    MISSING = None if CHROMIUM else "Chromium is not installed (apt-get install chromium)"
except ImportError:
    MISSING = "scrapy-playwright is not installed (pip install 'scrapy-polite[playwright]')"

CHROMIUM_ARGS = ["--renderer-process-limit=2", "--disable-features=site-per-process", "--disable-gpu"]
HANDLER = "scrapy_playwright.handler.ScrapyPlaywrightDownloadHandler"
RICH_RE = re.compile(r"^/(?:rich|asset/rich-|api/rich)/?(\d+)")


@pytest.fixture
def browser() -> None:
    """Skips a browser test where Chromium or scrapy-playwright is missing (fails where they are required)."""
    if MISSING is not None:
        if REQUIRED:
            pytest.fail(f"{MISSING} (POLITE_TEST_REQUIRE_BROWSER=1)")
        pytest.skip(MISSING)


def browser_settings(sb: Any, **extra: Any) -> dict[str, Any]:
    return {
        "POLITE_PROXIES": sb.proxy_urls,
        "DOWNLOAD_HANDLERS": {"http": HANDLER, "https": HANDLER},
        # Few renderer processes: a new one per page costs more than the page on a busy machine.
        "PLAYWRIGHT_LAUNCH_OPTIONS": {"executable_path": CHROMIUM, "headless": True, "args": CHROMIUM_ARGS},
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


class PagesSpider(scrapy.Spider):
    """Renders ``path`` for n in 1..pages, each with ``meta_for(n)``."""

    name = "pages"
    path = "/item/{n}"

    def __init__(self, start_url: str = "", pages: str = "8", **kw: Any) -> None:
        super().__init__(**kw)
        self.start_url, self.pages = start_url, int(pages)

    def meta_for(self, n: int) -> dict[str, Any]:
        return {"playwright": True}

    async def start(self):
        for n in range(1, self.pages + 1):
            yield scrapy.Request(self.start_url + self.path.format(n=n), meta=self.meta_for(n))


class RichSpider(PagesSpider):
    """Renders /rich/1..pages, waits for the page's fetch() answer, records the lease."""

    name = "rich"
    path = "/rich/{n}"

    def meta_for(self, n: int) -> dict[str, Any]:
        from scrapy_playwright.page import PageMethod

        return {"playwright": True, "playwright_page_methods": [PageMethod("wait_for_selector", "#api.done")]}

    def parse(self, response):
        yield {
            "n": int(response.css("span.id::text").get()), "api_ip": response.css("#api::text").get(),
            "endpoint": response.meta["polite_endpoint"], "render": response.meta.get("polite_render"),
            "peer": response.headers.get("X-Sandbox-Peer-IP", b"").decode(),
        }


@pytest.mark.browser
@pytest_twisted.ensureDeferred
async def test_page_and_sub_resources_leave_through_the_leased_endpoint_one_page_at_a_time(
    sandbox, tmp_path, browser
) -> None:
    sb = sandbox(SandboxConfig(sites=[site(pages=8)], proxies=ProxyConfig(count=4, gateway=False)))
    jsonl = tmp_path / "attempts.jsonl"
    run = await fault_crawl(
        RichSpider, browser_settings(sb, POLITE_DELAY=(0.05, 0.1), POLITE_HOST_CONCURRENCY=4,
                                     POLITE_STATS_JSONL=str(jsonl)),
        tmp_path / "crawl.log", start_url=sb.site_url("a"), pages="8",
    )
    log = sb.log()
    items = {i["n"]: i for i in run.result.items}
    assert sorted(items) == list(range(1, 9))
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
    assert stats["polite/rendered"] == 8
    assert stats["playwright/context_count"] == 4  # one context per endpoint, not per page
    import json

    records = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert len(records) == 8 and all(r["render"] > 0 and r["exit_ip"] in exit_ip.values() for r in records)
    assert_no_traceback(run.log_text)


class LimitedSpider(PagesSpider):
    """Renders /limited/1..pages (each answers 429 once), keeping the page to check it is fresh."""

    name = "limited"
    path = "/limited/{n}"

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.page_ids: list[int] = []

    def meta_for(self, n: int) -> dict[str, Any]:
        return {"playwright": True, "playwright_include_page": True}

    async def parse(self, response):
        page = response.meta["playwright_page"]
        self.page_ids.append(id(page))
        await page.close()
        yield {"url": response.url, "status": response.status, "requeues": response.meta.get("polite_requeues")}


@pytest.mark.browser
@pytest_twisted.ensureDeferred
async def test_a_429_on_the_document_re_queues_it_with_a_fresh_page(sandbox, tmp_path, browser) -> None:
    sb = sandbox(SandboxConfig(sites=[site(pages=4)], proxies=ProxyConfig(count=4, gateway=False)))
    run = await fault_crawl(
        LimitedSpider, browser_settings(sb, POLITE_DELAY=(0.05, 0.1), POLITE_HOST_CONCURRENCY=4),
        tmp_path / "crawl.log", start_url=sb.site_url("a"), pages="4",
    )
    log = sorted((e for e in sb.log() if e["path"].startswith("/limited/")), key=lambda e: e["t_start"])
    by_path: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in log:
        by_path[e["path"]].append(e)
    assert sorted(by_path) == [f"/limited/{n}" for n in range(1, 5)]
    for path, entries in by_path.items():
        # One 429, then one 200 after the Retry-After (1 s): re-queued, not retried at once, not lost.
        assert [e["status"] for e in entries] == [429, 200], (path, entries)
        assert entries[1]["t_start"] - entries[0]["t_end"] >= 1.0 - 0.05
    items = run.result.items
    assert len(items) == 4 and all(i["status"] == 200 and i["requeues"] == 1 for i in items)
    stats = run.stats
    assert stats["polite/requeued/rate"] == 4
    # Each attempt had a page of its own: the 429's page was closed, not reused.
    assert stats["playwright/page_count"] == 8
    assert len(set(run.result.crawler.spider.page_ids)) == 4
    assert_no_traceback(run.log_text)


class BrowserLoginSpider(scrapy.Spider):
    """Per user: /login/js (the page's script sets the session cookie), then /account, /account/orders."""

    name = "browser_login"

    def __init__(self, start_url: str = "", users: str = "4", **kw: Any) -> None:
        super().__init__(**kw)
        self.start_url, self.users = start_url, int(users)

    def _req(self, path: str, user: str, callback: Any) -> scrapy.Request:
        return scrapy.Request(
            f"{self.start_url}{path}", callback=callback, dont_filter=True,
            meta={"playwright": True, "polite_session": user, "user": user},
        )

    async def start(self):
        for k in range(1, self.users + 1):
            yield self._req(f"/login/js?user=u{k}", f"u{k}", self.after_login)

    def after_login(self, response):
        yield self._req("/account", response.meta["user"], self.after_account)

    def after_account(self, response):
        yield self._req("/account/orders", response.meta["user"], self.done)

    def done(self, response):
        yield {"user": response.meta["user"], "status": response.status,
               "shown": response.css("span.user::text").get(), "endpoint": response.meta["polite_endpoint"]}


@pytest.mark.browser
@pytest_twisted.ensureDeferred
async def test_a_login_flow_in_one_session_keeps_its_cookies_and_exit_ip_across_context_eviction(
    sandbox, tmp_path, browser
) -> None:
    sb = sandbox(SandboxConfig(sites=[site()], proxies=ProxyConfig(count=4, gateway=False)))
    # Two contexts for four sessions: a session's context is closed between its steps and reopened
    # with the cookies the page's script set, which only the browser holds.
    run = await fault_crawl(
        BrowserLoginSpider, browser_settings(sb, POLITE_DELAY=(0.05, 0.1), POLITE_HOST_CONCURRENCY=4,
                                             POLITE_PLAYWRIGHT_MAX_CONTEXTS=2),
        tmp_path / "crawl.log", start_url=sb.site_url("a"), users="4",
    )
    log = sorted((e for e in sb.log() if e["path"] != "/favicon.ico"), key=lambda e: e["t_start"])
    assert {e["status"] for e in log} == {200}, [e for e in log if e["status"] != 200]
    ips: dict[str, set[str]] = defaultdict(set)
    steps: dict[str, list[str]] = defaultdict(list)
    for e in log:
        if e.get("user"):
            ips[e["user"]].add(e["ip"])
            steps[e["user"]].append(e["path"].split("?")[0])
    assert sorted(steps) == ["u1", "u2", "u3", "u4"]
    assert all(s == ["/login/js", "/account", "/account/orders"] for s in steps.values()), steps
    assert all(len(v) == 1 for v in ips.values()), ips
    items = run.result.items
    assert sorted(i["user"] for i in items) == ["u1", "u2", "u3", "u4"]
    assert all(i["status"] == 200 and i["shown"] == i["user"] for i in items)
    stats = run.stats
    assert stats["playwright/context_count/max_concurrent"] <= 2
    assert stats.get("polite/playwright/contexts_closed", 0) >= 1  # the bound was in force
    assert_no_traceback(run.log_text)


class ManySpider(PagesSpider):
    """Renders /item/1..pages; at idle, counts the browser's open contexts."""

    name = "many"

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.open_contexts: list[int] = []

    @classmethod
    def from_crawler(cls, crawler: Any, *args: Any, **kwargs: Any) -> ManySpider:
        spider = super().from_crawler(crawler, *args, **kwargs)
        crawler.signals.connect(spider._idle, signal=scrapy.signals.spider_idle)
        return spider

    def _idle(self) -> None:
        handlers = self.crawler.engine.downloader.handlers._handlers.values()
        for h in handlers:
            if getattr(h, "browser", None) is not None:
                self.open_contexts.append(len(h.browser.contexts))

    def meta_for(self, n: int) -> dict[str, Any]:
        # One page in ten in a session of its own: each needs a context beyond the endpoints' ones.
        session = {"polite_session": f"s{n}"} if n % 10 == 0 else {}
        return {"playwright": True, "playwright_page_goto_kwargs": {"wait_until": "domcontentloaded"}, **session}

    def parse(self, response):
        yield {"n": int(response.css("span.id::text").get())}


@pytest.mark.slow
@pytest.mark.browser
@pytest_twisted.ensureDeferred
async def test_contexts_do_not_leak_over_a_200_page_crawl(sandbox, tmp_path, browser) -> None:
    sb = sandbox(SandboxConfig(sites=[site(pages=200, latency=[0.0, 0.0])], proxies=ProxyConfig(count=8, gateway=False)))
    # A plain crawl at INFO: at DEBUG, scrapy-playwright logs every browser request and answer.
    result = await crawl(
        ManySpider, browser_settings(sb, POLITE_DELAY=(0.01, 0.02), POLITE_HOST_CONCURRENCY=8,
                                     POLITE_PLAYWRIGHT_MAX_CONTEXTS=8, CLOSESPIDER_TIMEOUT=250),
        start_url=sb.site_url("a"), pages="200",
    )
    assert sorted(i["n"] for i in result.items) == list(range(1, 201))
    stats = result.stats
    assert stats["playwright/page_count"] == 200 and stats["playwright/page_count/closed"] == 200
    # Eight endpoints and twenty sessions, eight contexts at most: closed to make room, never piled up.
    assert stats["playwright/context_count/max_concurrent"] <= 8
    assert stats["playwright/context_count"] >= 8 + 20 and stats["polite/playwright/contexts_closed"] >= 20
    assert stats["playwright/context_count"] - stats["polite/playwright/contexts_closed"] <= 8
    opened = result.crawler.spider.open_contexts
    assert opened and max(opened) <= 8
    # Every page came from an exit IP of the pool.
    assert {e["ip"] for e in sb.log()} <= set(sb.proxy_exit_ips)


@pytest.mark.browser
@pytest_twisted.ensureDeferred
async def test_blocked_resource_types_never_reach_the_site(sandbox, tmp_path, browser) -> None:
    sb = sandbox(SandboxConfig(sites=[site(pages=3)], proxies=ProxyConfig(count=3, gateway=False)))
    run = await fault_crawl(
        RichSpider, browser_settings(sb, POLITE_DELAY=(0.05, 0.1), POLITE_HOST_CONCURRENCY=3,
                                     POLITE_PLAYWRIGHT_BLOCK=["image", "stylesheet"]),
        tmp_path / "crawl.log", start_url=sb.site_url("a"), pages="3",
    )
    paths = [e["path"] for e in sb.log()]
    assert not [p for p in paths if p.endswith((".png", ".css"))], paths
    assert sum(p.endswith(".js") for p in paths) == 3 and sum(p.startswith("/api/") for p in paths) == 3
    assert len(run.result.items) == 3
    assert run.stats["playwright/request_count/aborted"] == 6


@pytest.mark.once
def test_the_context_takes_the_endpoint_credentials_apart_and_its_name_has_none() -> None:
    from scrapy_polite.downloader.playwright import context_name, proxy_settings
    from scrapy_polite.gate.state import Lease
    from scrapy_polite.pool.endpoints import expand

    assert proxy_settings("http://us%40er:p%3Ass@10.0.0.1:8000") == {
        "server": "http://10.0.0.1:8000", "username": "us@er", "password": "p:ss",
    }
    assert proxy_settings("http://10.0.0.1:8000") == {"server": "http://10.0.0.1:8000"}
    endpoint = expand(["http://user:s3cret@10.0.0.1:8000"], 1, "POLITE_PROXIES")[0][0]
    lease = Lease(endpoint=endpoint, host="a", session=None, granted_at=0.0, waited=0.0)
    assert context_name(lease, None) == "polite:http://10.0.0.1:8000"
    lease = Lease(endpoint=endpoint, host="a", session="u1", granted_at=0.0, waited=0.0)
    assert context_name(lease, "mobile") == "polite:http://10.0.0.1:8000|session=u1|mobile"
    assert "s3cret" not in context_name(lease, "mobile")


@pytest.mark.once
def test_playwright_settings_are_validated() -> None:
    from scrapy.settings import Settings

    from scrapy_polite.errors import PoliteConfigError
    from scrapy_polite.settings.config import PLAYWRIGHT_CONTEXTS_DEFAULT, PoliteConfig

    def cfg(**s: Any) -> PoliteConfig:
        return PoliteConfig.from_settings(Settings({"POLITE_PROXIES": ["http://127.0.0.1:8001"], **s}))

    assert cfg().playwright_max_contexts == PLAYWRIGHT_CONTEXTS_DEFAULT
    assert cfg(PLAYWRIGHT_MAX_CONTEXTS=5).playwright_max_contexts == 5
    assert cfg(PLAYWRIGHT_MAX_CONTEXTS=5, POLITE_PLAYWRIGHT_MAX_CONTEXTS=3).playwright_max_contexts == 3
    with pytest.raises(PoliteConfigError, match=r"POLITE_PLAYWRIGHT_MAX_CONTEXTS=6 .*<= PLAYWRIGHT_MAX_CONTEXTS \(5\)"):
        cfg(PLAYWRIGHT_MAX_CONTEXTS=5, POLITE_PLAYWRIGHT_MAX_CONTEXTS=6)
    assert cfg(POLITE_PLAYWRIGHT_BLOCK="image font").playwright_block == {"image", "font"}
    with pytest.raises(PoliteConfigError, match="POLITE_PLAYWRIGHT_BLOCK"):
        cfg(POLITE_PLAYWRIGHT_BLOCK=["document"])


@pytest.mark.browser
@pytest_twisted.ensureDeferred
async def test_a_proxy_the_browser_cannot_reach_is_blamed_and_its_page_rendered_elsewhere(
    sandbox, tmp_path, browser
) -> None:
    sb = sandbox(SandboxConfig(sites=[site(pages=6)], proxies=ProxyConfig(count=3, gateway=False),
                               failures=[FailureSpec(proxy=0, mode="refuse")]))
    run = await fault_crawl(
        ManySpider, browser_settings(sb, POLITE_DELAY=(0.05, 0.1), POLITE_HOST_CONCURRENCY=3),
        tmp_path / "crawl.log", start_url=sb.site_url("a"), pages="6",
    )
    log = sb.log()
    assert_pages_accounted(run, log, range(1, 7))
    assert not run.gave_up and sorted(i["n"] for i in run.result.items) == list(range(1, 7))
    assert sb.proxy_exit_ips[0] not in {e["ip"] for e in log}
    assert run.stats["polite/requeued/proxy"] >= 1 and run.stats["polite/endpoint_failures"] >= 1
    assert "ERR_PROXY_CONNECTION_FAILED" in run.log_text
