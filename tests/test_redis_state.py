"""The Redis gate (POLITE_STATE): real crawls, a real redis-server, the sandbox's access log."""

from __future__ import annotations

from collections import defaultdict

import pytest_twisted
from conftest import crawl
from example_project.spiders.accounts import AccountsSpider
from example_project.spiders.catalogue import CatalogueSpider
from logcheck import items_fetched, max_inflight_host, max_inflight_per_ip, min_spacing_per_ip, statuses

from scrapy_polite.sandbox import ProxyConfig, SandboxConfig, SiteConfig


def site(**kw) -> SiteConfig:
    kw.setdefault("name", "a")
    kw.setdefault("latency", [0.01, 0.05])
    return SiteConfig(**kw)


@pytest_twisted.ensureDeferred
async def test_one_process_keeps_every_limit_through_redis(sandbox, redis_server) -> None:
    sb = sandbox(SandboxConfig(sites=[site(pages=30, per_ip_max_inflight=1)], proxies=ProxyConfig(count=8)))
    result = await crawl(CatalogueSpider, {"POLITE_PROXIES": sb.proxy_urls, "POLITE_STATE": redis_server.url},
                         start_url=sb.site_url("a"))
    log = sb.log()
    fetched = items_fetched(log)
    assert sorted(fetched) == list(range(1, 31)) and set(fetched.values()) == {1}
    assert len(result.items) == 30
    assert max_inflight_per_ip(log) == 1
    assert max_inflight_host(log, "a") <= 2
    assert min_spacing_per_ip(log, "a") >= 0.8 - 0.02
    assert len({e["ip"] for e in log}) == 8
    assert statuses(log).get(429, 0) == 0


@pytest_twisted.ensureDeferred
async def test_sessions_stay_on_one_endpoint_through_redis(sandbox, redis_server) -> None:
    sb = sandbox(SandboxConfig(sites=[site()], proxies=ProxyConfig(count=8)))
    result = await crawl(AccountsSpider, {"POLITE_PROXIES": sb.proxy_urls, "POLITE_DELAY": (0.2, 0.4),
                                          "POLITE_STATE": redis_server.url},
                         start_url=sb.site_url("a"), users="12")
    log = sb.log()
    assert statuses(log).get(409, 0) == 0
    assert len(result.items) == 12 and all(i["status"] == 200 for i in result.items)
    ips_per_user = defaultdict(set)
    order = defaultdict(list)
    for e in sorted(log, key=lambda e: e["t_start"]):
        if e.get("user"):
            ips_per_user[e["user"]].add(e["ip"])
            order[e["user"]].append(e["path"].split("?")[0])
    assert len(ips_per_user) == 12 and all(len(ips) == 1 for ips in ips_per_user.values())
    assert all(steps == ["/login", "/account", "/account/orders"] for steps in order.values())
    assert len({next(iter(ips)) for ips in ips_per_user.values()}) == 8
