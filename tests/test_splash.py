"""Real crawls through scrapy-splash, a Splash double and the sandbox, checked on the site's log.

scrapy-splash 0.11 only imports on Scrapy < 2.16, so these run in the
oldest environment (Scrapy 2.13) and are skipped elsewhere.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from typing import Any

import pytest

pytest.importorskip(
    "scrapy_splash",
    reason="scrapy-splash is not installed or does not import on this Scrapy (it needs Scrapy < 2.16)",
    exc_type=ImportError,
)

import pytest_twisted  # noqa: E402
import scrapy  # noqa: E402
from conftest import CrawlResult, crawl  # noqa: E402
from logcheck import (  # noqa: E402
    items_fetched,
    max_inflight_host,
    max_inflight_per_ip,
    min_spacing_per_ip,
    quiet_after,
    statuses,
)
from scrapy.http import Headers  # noqa: E402
from scrapy_splash import SplashRequest  # noqa: E402
from scrapy_splash.responsetypes import responsetypes  # noqa: E402
from splash_double import SplashDouble  # noqa: E402

from scrapy_polite import session_meta  # noqa: E402
from scrapy_polite.downloader.splash import classify, fresh_request, remember_original, set_proxy  # noqa: E402
from scrapy_polite.runtime import get_runtime  # noqa: E402
from scrapy_polite.sandbox import FailureSpec, ProxyConfig, SandboxConfig, SiteConfig  # noqa: E402

pytestmark = [
    pytest.mark.splash,
    # scrapy-splash 0.11 predates Scrapy 2.13's start(): its spider middleware needs start_requests().
    pytest.mark.filterwarnings("ignore::scrapy.exceptions.ScrapyDeprecationWarning"),
    pytest.mark.filterwarnings("ignore:SplashAwareDupeFilter is deprecated:DeprecationWarning"),
]

#: scrapy-splash's documented session script: cookies in and out, the page's status and headers.
LUA_SESSION = """
function main(splash)
  splash:init_cookies(splash.args.cookies)
  assert(splash:go{splash.args.url, headers=splash.args.headers})
  local entries = splash:history()
  local last_response = entries[#entries].response
  return {
    url = splash:url(),
    headers = last_response.headers,
    http_status = last_response.status,
    cookies = splash:get_cookies(),
    html = splash:html(),
  }
end
"""
#: The same without ``assert``: a 429 page comes back with its status and headers (Retry-After).
LUA_STATUS = LUA_SESSION.replace("assert(splash:go{splash.args.url, headers=splash.args.headers})",
                                 "splash:go{splash.args.url, headers=splash.args.headers}")


def splash_settings(double: SplashDouble, **extra: Any) -> dict[str, Any]:
    """scrapy-splash's documented settings, plus the polite add-on from BASE_SETTINGS."""
    return {
        "SPLASH_URL": double.url,
        "DOWNLOADER_MIDDLEWARES": {
            "scrapy_splash.SplashCookiesMiddleware": 723,
            "scrapy_splash.SplashMiddleware": 725,
            "scrapy.downloadermiddlewares.httpcompression.HttpCompressionMiddleware": 810,
        },
        "SPIDER_MIDDLEWARES": {"scrapy_splash.SplashDeduplicateArgsMiddleware": 100},
        "DUPEFILTER_CLASS": "scrapy_splash.SplashAwareDupeFilter",
        "REQUEST_FINGERPRINTER_CLASS": "scrapy_splash.SplashRequestFingerprinter",
        **extra,
    }


def proxy_used(response: Any) -> str | None:
    """The proxy the double really fetched through (scrapy-splash keeps Splash's own headers apart)."""
    headers = getattr(response, "splash_response_headers", None) or response.headers
    value = headers.get(b"X-Splash-Double-Proxy")
    return value.decode() if value else None


class SplashCatalogueSpider(scrapy.Spider):
    """The example catalogue spider, every page rendered through Splash."""

    name = "splash_catalogue"

    def __init__(self, start_url: str, endpoint: str = "render.html", lua: str = LUA_SESSION,
                 splash_args: dict[str, Any] | None = None, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.start_url = start_url
        self.endpoint = endpoint
        self.lua = lua
        self.splash_args = splash_args or {}

    def page(self, url: str, callback: Any) -> SplashRequest:
        args = dict(self.splash_args)
        kwargs: dict[str, Any] = {}
        if self.endpoint == "execute":
            args["lua_source"] = self.lua
            kwargs["cache_args"] = ["lua_source"]
        elif self.endpoint == "render.json":
            args["html"] = 1
        return SplashRequest(url, callback, endpoint=self.endpoint, args=args, **kwargs)

    def start_requests(self) -> Any:
        yield self.page(self.start_url, self.parse)

    def parse(self, response: Any) -> Any:
        for href in response.css("a::attr(href)").getall():
            if "/list/" in href or "/item/" in href:
                yield self.page(response.urljoin(href), self.parse_page)

    def parse_page(self, response: Any) -> Any:
        item_id = response.css("span.id::text").get()
        if item_id is not None:
            yield {"id": int(item_id), "url": response.url, "endpoint": response.meta.get("polite_endpoint"),
                   "proxy_used": proxy_used(response), "requeues": response.meta.get("polite_requeues", 0)}
        yield from self.parse(response)


class SplashAccountsSpider(scrapy.Spider):
    """login -> account -> orders per user, through Splash ``execute`` with scrapy-splash's cookie jar."""

    name = "splash_accounts"

    def __init__(self, start_url: str, users: str = "10", *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.base = start_url.rstrip("/")
        self.users = [f"user{i}" for i in range(int(users))]

    def step(self, url: str, user: str, callback: Any, **kwargs: Any) -> SplashRequest:
        return SplashRequest(url, callback, endpoint="execute", args={"lua_source": LUA_SESSION},
                             cache_args=["lua_source"], session_id=user, meta=session_meta(user),
                             dont_filter=True, **kwargs)

    def start_requests(self) -> Any:
        for user in self.users:
            yield self.step(f"{self.base}/login?user={user}", user, self.logged_in)

    def logged_in(self, response: Any) -> Any:
        user = response.meta["polite_session"]
        yield self.step(response.urljoin("/account"), user, self.account)

    def account(self, response: Any) -> Any:
        user = response.meta["polite_session"]
        yield self.step(response.urljoin("/account/orders"), user, self.orders,
                        cb_kwargs={"seen": response.css("span.user::text").get()})

    def orders(self, response: Any, seen: str | None) -> Any:
        yield {"user": seen, "session": response.meta.get("polite_session"), "status": response.status,
               "endpoint": response.meta.get("polite_endpoint")}


@pytest.fixture
def splash():
    double = SplashDouble().start()
    yield double
    double.stop()


def site(**kw: Any) -> SiteConfig:
    kw.setdefault("name", "a")
    kw.setdefault("latency", [0.01, 0.05])
    return SiteConfig(**kw)


def assert_no_lease_left(result: CrawlResult) -> None:
    """Both passes of every Splash request gave their lease back."""
    gate = get_runtime(result.crawler).gate
    assert {k: st.inflight for k, st in gate.endpoints.items() if st.inflight} == {}
    assert {h: st.inflight for h, st in gate.hosts.items() if st.inflight} == {}


def max_concurrent_per_proxy(records: list[dict[str, Any]]) -> int:
    """Most Splash requests naming one proxy at the same time, as the double saw them."""
    events = sorted([(r["t_start"], 1, r["proxy"]) for r in records if r["proxy"]]
                    + [(r["t_end"], -1, r["proxy"]) for r in records if r["proxy"]],
                    key=lambda e: (e[0], e[1]))
    now: dict[str, int] = defaultdict(int)
    peak = 0
    for _, delta, proxy in events:
        now[proxy] += delta
        peak = max(peak, now[proxy])
    return peak


@pytest.mark.parametrize("endpoint", ["render.html", "render.json", "execute"])
@pytest_twisted.ensureDeferred
async def test_splash_one_request_per_exit_ip_and_host_cap(sandbox, splash, endpoint: str) -> None:
    sb = sandbox(SandboxConfig(sites=[site(pages=24, per_ip_max_inflight=1)],
                               proxies=ProxyConfig(count=8, auth=("polite", "s3cret"))))
    result = await crawl(SplashCatalogueSpider,
                         splash_settings(splash, POLITE_PROXIES=sb.proxy_urls, POLITE_DELAY=(0.3, 0.6)),
                         start_url=sb.site_url("a"), endpoint=endpoint)
    log = sb.log()
    fetched = items_fetched(log)
    assert sorted(fetched) == list(range(1, 25)) and set(fetched.values()) == {1}
    assert len(result.items) == 24
    assert all(i["proxy_used"] == i["endpoint"] for i in result.items)
    assert max_inflight_per_ip(log) == 1
    assert max_inflight_host(log, "a") <= 2
    # Spacing starts at the lease (first pass); the hop through the scheduler and Splash adds jitter.
    assert min_spacing_per_ip(log, "a") >= 0.3 - 0.1
    assert set(e["ip"] for e in log) <= set(sb.proxy_exit_ips)
    assert len({e["ip"] for e in log}) == 8
    assert statuses(log).get(429, 0) == 0
    records = splash.records()
    assert {r["endpoint"] for r in records} == {endpoint}
    assert all(r["proxy"] in sb.proxy_urls for r in records)  # credentials reached Splash
    assert max_concurrent_per_proxy(records) == 1
    assert result.stats.get(f"splash/{endpoint}/request_count") == len(records)
    assert result.stats.get("polite/success") == len(records)
    assert_no_lease_left(result)


@pytest_twisted.ensureDeferred
async def test_splash_sessions_keep_their_exit_ip(sandbox, splash) -> None:
    sb = sandbox(SandboxConfig(sites=[site()], proxies=ProxyConfig(count=8)))
    result = await crawl(SplashAccountsSpider,
                         splash_settings(splash, POLITE_PROXIES=sb.proxy_urls, POLITE_DELAY=(0.2, 0.4)),
                         start_url=sb.site_url("a"), users="16")
    log = sb.log()
    assert statuses(log).get(409, 0) == 0 and statuses(log).get(401, 0) == 0
    assert len(result.items) == 16 and all(i["status"] == 200 for i in result.items)
    assert {i["user"] for i in result.items} == {f"user{i}" for i in range(16)}
    ips_per_user: dict[str, set[str]] = defaultdict(set)
    order: dict[str, list[str]] = defaultdict(list)
    for e in sorted(log, key=lambda e: e["t_start"]):
        if e.get("user"):
            ips_per_user[e["user"]].add(e["ip"])
            order[e["user"]].append(e["path"].split("?")[0])
    assert len(ips_per_user) == 16 and all(len(ips) == 1 for ips in ips_per_user.values())
    assert all(steps == ["/login", "/account", "/account/orders"] for steps in order.values())
    assert len({next(iter(ips)) for ips in ips_per_user.values()}) == 8
    assert max_inflight_per_ip(log) == 1
    assert set(result.stats["polite/sessions_map"]) == {f"user{i}" for i in range(16)}
    assert_no_lease_left(result)


@pytest.mark.parametrize("endpoint", ["render.html", "execute"])
@pytest_twisted.ensureDeferred
async def test_a_paused_splash_crawl_keeps_the_requests_waiting_at_the_gate_in_jobdir(
    sandbox, splash, tmp_path, endpoint: str
) -> None:
    sb = sandbox(SandboxConfig(sites=[site(pages=20)], proxies=ProxyConfig(count=2)))
    settings = splash_settings(splash, POLITE_PROXIES=sb.proxy_urls, POLITE_DELAY=(0.3, 0.4),
                               JOBDIR=str(tmp_path / "job"))
    first = await crawl(SplashCatalogueSpider, {**settings, "CLOSESPIDER_TIMEOUT": 2.0},
                        start_url=sb.site_url("a"), endpoint=endpoint)
    assert first.stats["finish_reason"] == "closespider_timeout"
    assert first.stats["polite/kept_at_close"] == first.stats["polite/dropped_at_close"] >= 3
    assert len(items_fetched(sb.log())) < 20
    second = await crawl(SplashCatalogueSpider, settings, start_url=sb.site_url("a"), endpoint=endpoint)
    assert second.stats["finish_reason"] == "finished"
    # Resumed from JOBDIR: every item page rendered once across the two runs, through its lease.
    fetched = items_fetched(sb.log())
    assert sorted(fetched) == list(range(1, 21)) and set(fetched.values()) == {1}
    assert all(i["proxy_used"] == i["endpoint"] for i in first.items + second.items)
    assert max_concurrent_per_proxy(splash.records()) == 1
    assert_no_lease_left(second)


@pytest.mark.parametrize("endpoint,lua", [
    ("execute", LUA_STATUS),    # magic response: http_status 429 and the page's Retry-After
    ("execute", LUA_SESSION),   # assert(splash:go(...)) fails: ScriptError with "http429"
    ("render.html", None),      # RenderError 502 whose info is the page's HTTP 429
], ids=["execute-status", "execute-assert", "render.html"])
@pytest_twisted.ensureDeferred
async def test_target_429_through_splash_cools_endpoint_and_requeues(sandbox, splash, endpoint: str,
                                                                     lua: str | None) -> None:
    sb = sandbox(SandboxConfig(
        sites=[site(pages=8, per_ip_rate=0.5, per_ip_burst=1, retry_after=1, strikes_to_block=None)],
        proxies=ProxyConfig(count=3),
    ))
    result = await crawl(SplashCatalogueSpider,
                         splash_settings(splash, POLITE_PROXIES=sb.proxy_urls, POLITE_DELAY=(0.2, 0.3),
                                         POLITE_COOLDOWN=(1.0, 1.5)),
                         start_url=sb.site_url("a"), endpoint=endpoint, lua=lua or LUA_SESSION)
    log = sb.log()
    fetched = items_fetched(log)
    assert sorted(fetched) == list(range(1, 9)) and set(fetched.values()) == {1}
    assert len({i["id"] for i in result.items}) == 8
    # A re-queued attempt went through the endpoint it was leased, not the one its first body named.
    assert any(i["requeues"] for i in result.items)
    assert all(i["proxy_used"] == i["endpoint"] for i in result.items)
    assert statuses(log).get(429, 0) > 0
    assert result.stats.get("polite/rate_limited", 0) > 0
    assert result.stats.get("polite/requeued/rate", 0) > 0
    assert not result.stats.get("polite/gave_up")
    # Each re-queue named its new endpoint in the body: no IP came back before its cooldown.
    assert min(g for g, _ in quiet_after(log)) >= 1.0 - 0.05
    assert max_inflight_per_ip(log) == 1
    assert max_concurrent_per_proxy(splash.records()) == 1
    assert_no_lease_left(result)


@pytest_twisted.ensureDeferred
async def test_splash_overloaded_503_is_not_the_targets_rate_limit(sandbox, splash) -> None:
    sb = sandbox(SandboxConfig(sites=[site(pages=10)], proxies=ProxyConfig(count=4)))
    splash.overload(3, retry_after=30)
    started = time.monotonic()
    result = await crawl(SplashCatalogueSpider,
                         splash_settings(splash, POLITE_PROXIES=sb.proxy_urls, POLITE_DELAY=(0.2, 0.3),
                                         RETRY_TIMES=5),
                         start_url=sb.site_url("a"), endpoint="render.json")
    log = sb.log()
    records = splash.records()
    assert sum(r["overloaded"] for r in records) == 3
    assert sorted(items_fetched(log)) == list(range(1, 11))
    assert all(i["proxy_used"] == i["endpoint"] for i in result.items)
    assert result.stats.get("polite/rate_limited", 0) == 0
    assert result.stats.get("polite/splash_errors") == 3
    assert result.stats.get("retry/count") == 3  # RetryMiddleware handled them
    assert not result.stats.get("polite/throttle/changes")
    gate = get_runtime(result.crawler).gate
    host = next(iter(gate.hosts))
    assert gate.hosts[host].limit == 2 and gate.hosts[host].paused_until < time.monotonic()
    assert all(st.unhealthy_until < started + 1 for st in gate.endpoints.values())
    assert time.monotonic() - started < 25  # the 30 s Retry-After of Splash's 503 was not obeyed
    assert max_concurrent_per_proxy(records) == 1
    assert_no_lease_left(result)


@pytest_twisted.ensureDeferred
async def test_dead_and_hanging_proxies_behind_splash(sandbox, splash) -> None:
    cfg = SandboxConfig(sites=[site(pages=16)], proxies=ProxyConfig(count=5),
                        failures=[FailureSpec(proxy=1, mode="refuse", at=0.0),
                                  FailureSpec(proxy=3, mode="hang", at=0.0)])
    sb = sandbox(cfg)
    result = await crawl(SplashCatalogueSpider,
                         splash_settings(splash, POLITE_PROXIES=sb.proxy_urls, POLITE_DELAY=(0.2, 0.3),
                                         POLITE_ENDPOINT_BACKOFF=(10, 60), DOWNLOAD_TIMEOUT=10),
                         start_url=sb.site_url("a"), endpoint="render.html",
                         splash_args={"resource_timeout": 1})
    log = sb.log()
    fetched = items_fetched(log)
    assert sorted(fetched) == list(range(1, 17)) and set(fetched.values()) == {1}
    assert all(i["proxy_used"] == i["endpoint"] for i in result.items)
    assert result.stats.get("polite/endpoint_failures", 0) >= 2
    assert result.stats.get("polite/requeued/proxy", 0) >= 2
    assert not result.stats.get("polite/gave_up")
    seen = {e["ip"] for e in log}
    assert sb.proxy_exit_ips[1] not in seen and sb.proxy_exit_ips[3] not in seen
    assert max_inflight_per_ip(log) == 1
    assert_no_lease_left(result)


def splash_answer(status: int, body: Any, *, endpoint: str = "execute", content_type: str = "application/json",
                  proxy: str | None = "http://127.0.0.1:3128", **splash_args: Any) -> tuple[Any, Any]:
    """A processed SplashRequest and Splash's answer as SplashMiddleware hands it on (magic applied)."""
    args = {**splash_args, **({"proxy": proxy} if proxy else {})}
    request = SplashRequest("http://127.0.1.1:8080/item/1", endpoint=endpoint, args=args)
    request.meta["_splash_processed"] = True
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = Headers({"Content-Type": content_type})
    cls = responsetypes.from_args(headers=headers)
    return request, cls(f"http://127.0.0.1:8050/{endpoint}", status=status, headers=headers, body=raw,
                        request=request)


@pytest.mark.parametrize("status,body,extra,kind,target", [
    (200, {"html": "<p>ok</p>", "http_status": 429, "headers": {"Retry-After": "7"}}, {}, "target", 429),
    (200, {"html": "<p>ok</p>", "http_status": 200}, {}, "target", 200),
    (400, {"error": 400, "type": "ScriptError", "info": {"type": "LUA_ERROR", "error": "http429"}}, {}, "target", 429),
    (502, {"error": 502, "type": "RenderError", "info": {"type": "HTTP", "code": 429, "text": "Too Many Requests"}},
     {}, "target", 429),
    (502, {"error": 502, "type": "RenderError", "info": {"type": "Network", "code": 101, "text": "refused"}},
     {}, "proxy", None),
    (503, {"error": 503, "type": "ServerOverloaded", "description": "Splash is overloaded"}, {}, "splash", None),
    (504, {"error": 504, "type": "GlobalTimeoutError", "info": {"timeout": 30}}, {}, "splash", None),
    (400, {"error": 400, "type": "BadOption", "info": {"argument": "url"}}, {}, "splash", None),
    (503, b"<h1>Service Unavailable</h1>", {"content_type": "text/html"}, "splash", None),
    (429, b"<h1>Too Many Requests</h1>", {"content_type": "text/html", "endpoint": "render.html",
                                          "http_status_from_error_code": 1}, "target", 429),
], ids=["magic-429", "magic-200", "script-http429", "render-error-http", "render-error-network",
        "overloaded", "timeout", "bad-option", "front-proxy-html-503", "render.html-status"])
def test_classify_splash_answers(status: int, body: Any, extra: dict[str, Any], kind: str,
                                 target: int | None) -> None:
    request, response = splash_answer(status, body, **extra)
    answer = classify(request, response)
    assert (answer.kind, answer.status) == (kind, target)
    if kind == "splash":
        assert answer.headers.get(b"Retry-After") is None
    if isinstance(body, dict) and body.get("headers"):
        assert answer.headers.get(b"Retry-After") == b"7"


def test_fresh_request_starts_over_from_the_original() -> None:
    original = SplashRequest("http://127.0.1.1:8080/item/1", endpoint="execute",
                             args={"lua_source": LUA_SESSION}, meta={"polite_session": "u1", "download_timeout": 5})
    remember_original(original)
    set_proxy(original, "http://user:pass@127.0.0.1:3001")
    processed = original.replace(url="http://127.0.0.1:8050/execute", method="POST", body=b'{"proxy": "old"}',
                                 priority=original.priority + 100)
    processed.meta.update(_splash_processed=True, download_slot="127.0.1.1", download_timeout=35,
                          dont_obey_robotstxt=True, polite_rate_retries=1)
    fresh = fresh_request(processed)
    assert fresh is not None and fresh.url == original.url and fresh.method == "GET" and fresh.body == b""
    assert fresh.priority == original.priority and fresh.dont_filter
    assert "proxy" not in fresh.meta["splash"]["args"] and fresh.meta["splash"]["args"]["lua_source"] == LUA_SESSION
    assert "_splash_processed" not in fresh.meta and "download_slot" not in fresh.meta
    assert "dont_obey_robotstxt" not in fresh.meta and fresh.meta["download_timeout"] == 5
    assert fresh.meta["polite_session"] == "u1" and fresh.meta["polite_rate_retries"] == 1
