"""The package as a Scrapy component: the user's settings and meta win, Scrapy's conventions hold.

Real crawls against the sandbox, judged from the site's access log.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import pytest_twisted
import scrapy
from conftest import crawl
from example_project.spiders.catalogue import CatalogueSpider
from logcheck import items_fetched, max_inflight_host, min_spacing_per_ip
from scrapy import signals
from scrapy.utils.response import response_status_message

from scrapy_polite.runtime import get_runtime
from scrapy_polite.sandbox import ProxyConfig, SandboxConfig, SiteConfig
from scrapy_polite.settings.config import DEFAULTS

MIDDLEWARE = "scrapy_polite.downloader.middleware.PoliteProxyMiddleware"
STATS = "scrapy_polite.metrics.stats.PoliteStats"
FAST = {"POLITE_DELAY": (0.05, 0.1), "POLITE_COOLDOWN": (0.1, 0.2)}


def site(**kw: Any) -> SiteConfig:
    kw.setdefault("name", "a")
    kw.setdefault("latency", [0.01, 0.03])
    return SiteConfig(**kw)


class Paths(scrapy.Spider):
    """Requests ``paths`` of ``base`` with ``meta``; records what reaches the callback or errback."""

    name = "paths"

    def __init__(self, base: str = "", paths: str = "", meta: Any = None, **kw: Any) -> None:
        super().__init__(**kw)
        self.base, self.paths, self.req_meta = base, paths.split(), dict(meta or {})
        self.got: list[Any] = []

    async def start(self):
        for r in self.start_requests():
            yield r

    def start_requests(self):
        for path in self.paths:
            yield scrapy.Request(self.base + path, meta=dict(self.req_meta), dont_filter=True, errback=self.failed)

    def parse(self, response: Any) -> None:
        self.got.append(response.status)

    def failed(self, failure: Any) -> None:
        response = getattr(failure.value, "response", None)
        self.got.append(("error", response.status if response is not None else type(failure.value).__name__))


@contextmanager
def _state(tmp_path: Path, state: str) -> Iterator[str]:
    """``POLITE_STATE`` for *state*: ``"memory"``, or the URL of a fresh redis-server, stopped after."""
    if state == "memory":
        yield "memory"
        return
    from redis_server import RedisServer

    server = RedisServer(tmp_path / "redis")
    try:
        yield server.url
    finally:
        server.stop()


def _spider(result: Any) -> Any:
    return result.crawler.spider


def _hits(log: list[dict[str, Any]], path: str) -> list[dict[str, Any]]:
    return [e for e in log if e["path"] == path]


# -- the add-on -----------------------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_addon_keeps_components_as_written_and_answers_defaults(sandbox) -> None:
    sb = sandbox(SandboxConfig(sites=[site(pages=3)], proxies=ProxyConfig(count=2)))
    result = await crawl(
        CatalogueSpider,
        {"POLITE_PROXIES": sb.proxy_urls, "DOWNLOADER_MIDDLEWARES": {MIDDLEWARE: 640},
         "EXTENSIONS": {STATS: None}, "POLITE_HOST_CONCURRENCY": 3, **FAST},
        start_url=sb.site_url("a"),
    )
    settings = result.crawler.settings
    middlewares = {(k if isinstance(k, str) else f"{k.__module__}.{k.__name__}"): v
                   for k, v in settings.getdict("DOWNLOADER_MIDDLEWARES").items()}
    extensions = {(k if isinstance(k, str) else f"{k.__module__}.{k.__name__}"): v
                  for k, v in settings.getdict("EXTENSIONS").items()}
    assert middlewares[MIDDLEWARE] == 640
    assert extensions[STATS] is None
    assert not any(type(e).__name__ == "PoliteStats" for e in result.crawler.extensions.middlewares)
    # The crawl still went through the pool, with the middleware where the project put it.
    log = sb.log()
    assert sorted(items_fetched(log)) == [1, 2, 3]
    assert {e["ip"] for e in log} <= set(sb.proxy_exit_ips)
    # The defaults answer inside the crawl; what the project set wins.
    assert settings.get("POLITE_STALL_TIMEOUT") == DEFAULTS["POLITE_STALL_TIMEOUT"]
    assert settings.getpriority("POLITE_STALL_TIMEOUT") == 0
    assert settings.getint("POLITE_HOST_CONCURRENCY") == 3


@pytest_twisted.ensureDeferred
async def test_a_host_concurrency_above_scrapys_per_domain_default_is_reached(sandbox) -> None:
    # Scrapy's download slot is meant to hold a host at CONCURRENT_REQUESTS_PER_DOMAIN (8): the add-on lifts it.
    sb = sandbox(SandboxConfig(sites=[site(latency=[0.3, 0.3])], proxies=ProxyConfig(count=16)))
    paths = " ".join(f"/item/{i}" for i in range(1, 49))
    result = await crawl(Paths, {"POLITE_PROXIES": sb.proxy_urls, "POLITE_DELAY": 0, "POLITE_HOST_CONCURRENCY": 12,
                                 "CONCURRENT_REQUESTS": 32}, base=sb.site_url("a"), paths=paths)
    assert result.crawler.settings.getint("CONCURRENT_REQUESTS_PER_DOMAIN") == 12
    log = sb.log()
    assert sorted(items_fetched(log)) == list(range(1, 49))
    assert 8 < max_inflight_host(log, "a") <= 12


def test_a_per_domain_limit_the_project_set_stays() -> None:
    from scrapy.settings import Settings

    from scrapy_polite.addon import Addon

    ours = Settings({"POLITE_HOST_CONCURRENCY": 4, "POLITE_ADAPTIVE": True})
    Addon().update_settings(ours)
    assert ours.getint("CONCURRENT_REQUESTS_PER_DOMAIN") == 16  # the adaptive search's ceiling, 4x
    theirs = Settings({"POLITE_HOST_CONCURRENCY": 12, "CONCURRENT_REQUESTS_PER_DOMAIN": 4})
    Addon().update_settings(theirs)
    assert theirs.getint("CONCURRENT_REQUESTS_PER_DOMAIN") == 4
    low = Settings({"POLITE_HOST_CONCURRENCY": 2})
    Addon().update_settings(low)
    assert low.getint("CONCURRENT_REQUESTS_PER_DOMAIN") == 8  # Scrapy's default already lets 2 through


def _effective(crawler: Any) -> dict[str, Any]:
    """The crawl's settings and its enabled components, minus the add-on's own names."""
    values = {
        k: v for k, v in crawler.settings.copy_to_dict().items() if k != "ADDONS" and not k.startswith("POLITE_")
    }
    values["_downloader_mw"] = [type(m).__name__ for m in crawler.engine.downloader.middleware.middlewares]
    values["_extensions"] = sorted(type(e).__name__ for e in crawler.extensions.middlewares)
    return values


@pytest_twisted.ensureDeferred
async def test_polite_enabled_false_is_scrapy_without_the_addon() -> None:
    seen: list[dict[str, Any]] = []

    handlers: list[Any] = []  # the signal holds weak references

    def on_crawler(crawler: Any) -> None:
        handlers.append(lambda spider: seen.append(_effective(crawler)))
        crawler.signals.connect(handlers[-1], signal=signals.spider_opened)

    base = {"RETRY_HTTP_CODES": [500, 429], "DOWNLOAD_DELAY": 0.01, "AUTOTHROTTLE_ENABLED": True,
            "SCHEDULER_PRIORITY_QUEUE": "scrapy.pqueues.DownloaderAwarePriorityQueue"}
    page = "data:text/plain,hello"
    await crawl(Paths, {**base, "ADDONS": {}}, _on_crawler=on_crawler, base=page, paths="")
    off = await crawl(Paths, {**base, "POLITE_ENABLED": False}, _on_crawler=on_crawler, base=page, paths="")
    assert seen[0] == seen[1]
    assert not any(k.startswith("polite/") for k in off.stats)
    assert off.crawler.settings.get("POLITE_DELAY") == DEFAULTS["POLITE_DELAY"]


# -- re-queues honour the request's wishes ------------------------------------------------------


async def _limited(sandbox: Any, meta: dict[str, Any], **settings: Any) -> tuple[Any, list[dict[str, Any]]]:
    sb = sandbox(SandboxConfig(sites=[site()], proxies=ProxyConfig(count=2)))
    result = await crawl(Paths, {"POLITE_PROXIES": sb.proxy_urls, **FAST, **settings},
                         base=sb.site_url("a"), paths="/status/429", meta=meta)
    return result, _hits(sb.log(), "/status/429")


@pytest_twisted.ensureDeferred
async def test_dont_retry_is_not_requeued(sandbox) -> None:
    result, hits = await _limited(sandbox, {"dont_retry": True})
    assert len(hits) == 1
    assert _spider(result).got == [("error", 429)]  # on as it came: HttpErrorMiddleware filters it
    assert result.stats["polite/not_requeued/dont_retry"] == 1
    assert result.stats["polite/rate_limited"] == 1
    assert "retry/count" not in result.stats and not result.stats.get("polite/gave_up")


@pytest_twisted.ensureDeferred
async def test_handle_httpstatus_list_gets_the_429_and_the_throttle_hears_it(sandbox) -> None:
    for meta in ({"handle_httpstatus_list": [429]}, {"handle_httpstatus_all": True}):
        result, hits = await _limited(sandbox, meta)
        assert len(hits) == 1, meta
        assert _spider(result).got == [429]
        assert result.stats["polite/not_requeued/handle_httpstatus"] == 1
        assert result.stats["polite/rate_limited"] == 1
        assert result.stats.get("polite/throttle/changes", 0) >= 1  # the host was slowed down


@pytest_twisted.ensureDeferred
async def test_max_retry_times_caps_the_requeues_and_retry_stats_count_them(sandbox) -> None:
    result, hits = await _limited(sandbox, {"max_retry_times": 2})
    assert len(hits) == 3  # the first attempt and two re-queues, not POLITE_RATE_RETRY_TIMES (10)
    assert _spider(result).got == [("error", 429)]
    assert result.stats["polite/gave_up/rate"] == 1
    assert result.stats["retry/count"] == 2
    # The reason RetryMiddleware itself would name for a 429.
    assert result.stats[f"retry/reason_count/{response_status_message(429)}"] == 2
    assert result.stats["retry/max_reached"] == 1


# -- a pre-set meta['proxy'] --------------------------------------------------------------------


@pytest.mark.parametrize("state", ["memory", "redis"])
@pytest_twisted.ensureDeferred
async def test_preset_proxy_in_the_pool_is_leased_on_it_outside_bypasses(sandbox, tmp_path, state: str) -> None:
    with _state(tmp_path, state) as url:
        await _preset_proxy_case(sandbox, url)


async def _preset_proxy_case(sandbox: Any, state: str) -> None:
    sb = sandbox(SandboxConfig(sites=[site(pages=4)], proxies=ProxyConfig(count=3)))
    pool, outside = sb.proxy_urls[:2], sb.proxy_urls[2]
    paths = " ".join(f"/item/{i}" for i in range(1, 5))
    inside = await crawl(Paths, {"POLITE_PROXIES": pool, "POLITE_DELAY": (0.5, 0.55), "POLITE_STATE": state},
                         base=sb.site_url("a"), paths=paths, meta={"proxy": pool[1]})
    log = sb.log()
    assert {e["ip"] for e in log} == {sb.proxy_exit_ips[1]}  # that endpoint only
    assert min_spacing_per_ip(log, "a") >= 0.35  # under its gates (a bypass would not wait)
    assert "polite/bypassed/preset_proxy" not in inside.stats
    assert inside.stats["polite/attempts"] == 4
    before = len(log)
    out = await crawl(Paths, {"POLITE_PROXIES": pool, "POLITE_STATE": state, **FAST}, base=sb.site_url("a"), paths=paths,
                      meta={"proxy": outside})
    later = sb.log()[before:]
    assert {e["ip"] for e in later} == {sb.proxy_exit_ips[2]}
    assert out.stats["polite/bypassed/preset_proxy"] == 4
    assert "polite/attempts" not in out.stats


@pytest_twisted.ensureDeferred
async def test_a_retry_of_the_packages_own_proxy_is_leased_afresh(sandbox) -> None:
    # With credentials, which HttpProxyMiddleware moves from meta['proxy'] into a header.
    sb = sandbox(SandboxConfig(sites=[site()], proxies=ProxyConfig(count=3, auth=("alice", "s3cret"))))
    result = await crawl(Paths, {"POLITE_PROXIES": sb.proxy_urls, "RETRY_TIMES": 2, "RETRY_HTTP_CODES": [500],
                                 **FAST}, base=sb.site_url("a"), paths="/status/500")
    hits = _hits(sb.log(), "/status/500")
    assert len(hits) == 3
    assert len({e["ip"] for e in hits}) == 3  # each RetryMiddleware retry took a new lease
    assert "polite/bypassed/preset_proxy" not in result.stats


# -- robots.txt Crawl-delay for the crawler's agent ---------------------------------------------


@pytest_twisted.ensureDeferred
async def test_robots_crawl_delay_of_the_crawlers_agent(sandbox) -> None:
    cfg = SandboxConfig(sites=[site(pages=3, robots_crawl_delay=0.1, robots_agent_delays={"PoliteBot": 1.0})],
                        proxies=ProxyConfig(count=1))
    assert SandboxConfig.from_dict(cfg.to_dict()) == cfg
    sb = sandbox(cfg)
    result = await crawl(CatalogueSpider, {"POLITE_PROXIES": sb.proxy_urls, "ROBOTSTXT_OBEY": True,
                                           "USER_AGENT": "PoliteBot/1.0 (+https://example.org)", **FAST},
                         start_url=sb.site_url("a"))
    log = [e for e in sb.log() if e["path"] != "/robots.txt"]
    assert sorted(items_fetched(log)) == [1, 2, 3]
    # The agent's 1 s, not the 0.1 s of `*` (nor POLITE_DELAY's 0.05-0.1 s); the slack is the time
    # from a grant to the site, which a loaded machine stretches for one request and not the next.
    assert min_spacing_per_ip(log, "a") >= 0.8
    assert Counter(e["status"] for e in log) == {200: len(log)}
    assert result.stats.get("polite/gave_up") is None


# -- DOWNLOAD_SLOTS as per-host overrides -------------------------------------------------------


@pytest.mark.parametrize("state", ["memory", "redis"])
@pytest_twisted.ensureDeferred
async def test_download_slots_entry_overrides_the_polite_defaults_for_its_host(sandbox, tmp_path, state) -> None:
    with _state(tmp_path, state) as url:
        await _download_slots_case(sandbox, url)


async def _download_slots_case(sandbox: Any, state: str) -> None:
    sb = sandbox(SandboxConfig(sites=[site(name="a", pages=6, latency=[0.3, 0.4]),
                                      site(name="b", pages=9, latency=[0.3, 0.4])],
                               proxies=ProxyConfig(count=4)))
    b_host = urlsplit(sb.site_url("b")).hostname
    result = await crawl(
        CatalogueSpider,
        {"POLITE_PROXIES": sb.proxy_urls, "POLITE_HOST_CONCURRENCY": 1, "POLITE_DELAY": (1.0, 1.2),
         "DOWNLOAD_SLOTS": {b_host: {"concurrency": 3, "delay": 0.2, "randomize_delay": False}},
         "POLITE_STATE": state},
        start_url=f"{sb.site_url('a')} {sb.site_url('b')}",
    )
    log = sb.log()
    assert sorted(items_fetched(log, "a")) == list(range(1, 7))
    assert sorted(items_fetched(log, "b")) == list(range(1, 10))
    # Site a keeps the POLITE_* defaults: one at a time, each endpoint 1 s apart.
    assert max_inflight_host(log, "a") == 1
    assert min_spacing_per_ip(log, "a") >= 0.8  # room for a loaded machine's transit time
    # Site b has its DOWNLOAD_SLOTS entry: three at a time, 0.2 s apart per endpoint.
    assert max_inflight_host(log, "b") == 3
    assert 0.1 <= min_spacing_per_ip(log, "b") < 0.8
    limits = get_runtime(result.crawler).config.host_limits(b_host)
    assert (limits.concurrency, limits.concurrency_max, limits.delay) == (3, 3, (0.2, 0.2))
