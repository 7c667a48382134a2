"""Real crawls through the sandbox's proxy fleet, checked on the site's access log."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import defaultdict

import pytest
import pytest_twisted
from conftest import ROOT, crawl
from example_project.spiders.accounts import AccountsSpider
from example_project.spiders.catalogue import CatalogueSpider
from logcheck import (
    items_fetched,
    max_inflight_host,
    max_inflight_per_ip,
    min_spacing_per_ip,
    refetched,
    statuses,
)
from test_stats import read_jsonl

from scrapy_polite.errors import PoliteConfigError
from scrapy_polite.metrics.stats import PoliteStats
from scrapy_polite.sandbox import FailureSpec, ProxyConfig, SandboxConfig, SiteConfig


def site(**kw) -> SiteConfig:
    kw.setdefault("name", "a")
    kw.setdefault("latency", [0.01, 0.05])
    return SiteConfig(**kw)


@pytest.mark.timing
@pytest_twisted.ensureDeferred
async def test_one_request_per_exit_ip_host_cap_and_spacing(sandbox) -> None:
    sb = sandbox(SandboxConfig(sites=[site(pages=40, per_ip_max_inflight=1)], proxies=ProxyConfig(count=8)))
    result = await crawl(CatalogueSpider, {"POLITE_PROXIES": sb.proxy_urls}, start_url=sb.site_url("a"))
    log = sb.log()
    fetched = items_fetched(log)
    assert sorted(fetched) == list(range(1, 41)) and set(fetched.values()) == {1}
    assert len(result.items) == 40
    assert max_inflight_per_ip(log) == 1
    assert max_inflight_host(log, "a") <= 2
    assert min_spacing_per_ip(log, "a") >= 0.8 - 0.1  # measured at the site, after a proxy hop
    assert set(e["ip"] for e in log) <= set(sb.proxy_exit_ips)
    assert len({e["ip"] for e in log}) == 8  # the whole pool was used
    assert statuses(log).get(429, 0) == 0 and statuses(log).get(403, 0) == 0


@pytest_twisted.ensureDeferred
async def test_host_cap_is_configurable(sandbox) -> None:
    sb = sandbox(SandboxConfig(sites=[site(pages=30, latency=[0.3, 0.4])], proxies=ProxyConfig(count=8)))
    await crawl(CatalogueSpider, {"POLITE_PROXIES": sb.proxy_urls, "POLITE_HOST_CONCURRENCY": 4,
                                  "POLITE_DELAY": (0.1, 0.2)}, start_url=sb.site_url("a"))
    log = sb.log()
    assert max_inflight_host(log, "a") == 4
    assert max_inflight_per_ip(log) == 1


@pytest.mark.parametrize("via", ["gateway", "list"])
@pytest_twisted.ensureDeferred
async def test_sticky_login_flows_keep_one_identity(sandbox, via: str) -> None:
    sb = sandbox(SandboxConfig(sites=[site()], proxies=ProxyConfig(count=8, gateway=True)))
    proxies = [sb.gateway_template] if via == "gateway" else sb.proxy_urls
    result = await crawl(AccountsSpider, {"POLITE_PROXIES": proxies, "POLITE_GATEWAY_SESSIONS": 8,
                                          "POLITE_DELAY": (0.2, 0.4)},
                         start_url=sb.site_url("a"), users="20")
    log = sb.log()
    assert statuses(log).get(409, 0) == 0
    assert len(result.items) == 20 and all(i["status"] == 200 for i in result.items)
    ips_per_user = defaultdict(set)
    order = defaultdict(list)
    for e in sorted(log, key=lambda e: e["t_start"]):
        if e.get("user"):
            ips_per_user[e["user"]].add(e["ip"])
            order[e["user"]].append(e["path"].split("?")[0])
    assert len(ips_per_user) == 20 and all(len(ips) == 1 for ips in ips_per_user.values())
    assert all(steps == ["/login", "/account", "/account/orders"] for steps in order.values())
    assert len({next(iter(ips)) for ips in ips_per_user.values()}) == 8  # spread over the pool
    sessions = result.crawler.stats.get_value("polite/sessions_map")
    assert set(sessions) == {f"user{i}" for i in range(20)}
    assert all(label and "pass" not in label for label in sessions.values())


@pytest_twisted.ensureDeferred
async def test_dead_and_hanging_proxies_lose_nothing(sandbox) -> None:
    cfg = SandboxConfig(
        sites=[site(pages=40)],
        proxies=ProxyConfig(count=6),
        failures=[FailureSpec(proxy=1, mode="hang", at=0.0), FailureSpec(proxy=3, mode="die", at=2.0)],
    )
    sb = sandbox(cfg)
    result = await crawl(CatalogueSpider, {"POLITE_PROXIES": sb.proxy_urls, "DOWNLOAD_TIMEOUT": 2,
                                           "POLITE_ENDPOINT_BACKOFF": (5, 60)},
                         start_url=sb.site_url("a"))
    log = sb.log()
    assert sorted(items_fetched(log)) == list(range(1, 41))
    # Once each, but for an answer the dying proxy may never have relayed.
    assert refetched(log, undelivered_ips=[sb.proxy_exit_ips[3]]) == []
    assert len({i["id"] for i in result.items}) == 40
    assert result.stats.get("polite/endpoint_failures", 0) >= 2
    assert result.stats.get("polite/requeued/proxy", 0) >= 2
    assert not result.stats.get("polite/gave_up")
    assert sb.proxy_exit_ips[1] not in {e["ip"] for e in log}  # the hanging one never got through


@pytest_twisted.ensureDeferred
async def test_every_endpoint_dead_closes_with_reason(sandbox) -> None:
    sb = sandbox(SandboxConfig(sites=[site()], proxies=ProxyConfig(count=2),
                               failures=[FailureSpec(proxy=0, mode="refuse", at=0.0),
                                         FailureSpec(proxy=1, mode="refuse", at=0.0)]))
    result = await crawl(CatalogueSpider, {"POLITE_PROXIES": sb.proxy_urls, "POLITE_ENDPOINT_MAX_FAILURES": 2,
                                           "POLITE_ENDPOINT_BACKOFF": (0.2, 1)},
                         start_url=sb.site_url("a"))
    assert result.stats["finish_reason"] == "polite_no_usable_endpoints"


@pytest.mark.slow
@pytest_twisted.ensureDeferred
async def test_three_hosts_with_different_limits_none_starves(sandbox) -> None:
    sites = [site(name="fast", pages=30), site(name="mid", pages=15, latency=[0.2, 0.3]),
             site(name="slow", pages=8, latency=[0.5, 0.8])]
    sb = sandbox(SandboxConfig(sites=sites, proxies=ProxyConfig(count=6)))
    start_urls = " ".join(sb.site_url(s.name) for s in sites)
    await crawl(CatalogueSpider, {"POLITE_PROXIES": sb.proxy_urls, "CONCURRENT_REQUESTS": 8},
                start_url=start_urls)
    log = sb.log()
    t0 = min(e["t_start"] for e in log)
    for s in sites:
        assert sorted(items_fetched(log, s.name)) == list(range(1, s.pages + 1))
        entries = sorted(e["t_start"] - t0 for e in log if e["site"] == s.name)
        # Each host starts early and never waits long for a turn while it has work.
        assert entries[0] < 3.0
        assert max(b - a for a, b in zip(entries, entries[1:])) < 6.0
        assert max_inflight_host(log, s.name) <= 2


@pytest.mark.slow
@pytest_twisted.ensureDeferred
async def test_proxies_file_is_reread_at_runtime(sandbox, tmp_path) -> None:
    sb = sandbox(SandboxConfig(sites=[site(pages=30)], proxies=ProxyConfig(count=4)))
    path = tmp_path / "proxies.txt"
    path.write_text("\n".join(sb.proxy_urls[:2]) + "\n")
    from twisted.internet.task import LoopingCall

    grown_at: list[float] = []

    def grow() -> None:  # the file is replaced once the crawl is under way
        if len(sb.log()) >= 6 and not grown_at:
            path.write_text("# grown\n" + "\n".join(sb.proxy_urls[2:]) + "\n")
            os.utime(path, (1e9, 1e9 + 1))
            grown_at.append(time.time())

    watcher = LoopingCall(grow)
    watcher.start(0.1)
    try:
        result = await crawl(CatalogueSpider, {"POLITE_PROXIES_FILE": str(path), "POLITE_DELAY": (0.4, 0.6),
                                               "POLITE_PROXIES_FILE_CHECK_INTERVAL": 0.5},
                             start_url=sb.site_url("a"))
    finally:
        watcher.stop()
    log = sb.log()
    early = {e["ip"] for e in log if e["t_start"] < grown_at[0]}
    # After one check interval, plus the spacing of a grant made just before it, only the new file counts.
    late = {e["ip"] for e in log if e["t_start"] > grown_at[0] + 0.5 + 0.6 + 0.2}
    assert early == set(sb.proxy_exit_ips[:2])
    assert late and late <= set(sb.proxy_exit_ips[2:])
    assert sorted(items_fetched(log)) == list(range(1, 31))
    assert result.stats.get("polite/pool_reloads") == 1


@pytest_twisted.ensureDeferred
async def test_bad_setting_stops_crawl_at_startup() -> None:
    with pytest.raises(PoliteConfigError, match=r"POLITE_HOST_CONCURRENCY=-1 is invalid"):
        await crawl(CatalogueSpider, {"POLITE_PROXIES": ["http://127.0.0.1:9"], "POLITE_HOST_CONCURRENCY": -1})


def test_bad_setting_from_scrapy_crawl_command() -> None:
    env = {**os.environ, "POLITE_PROXIES_FILE": ""}
    proc = subprocess.run(
        [sys.executable, "-m", "scrapy", "crawl", "catalogue", "-s", "POLITE_PROXIES=socks5://127.0.0.1:1080"],
        cwd=ROOT / "example_project", env=env, capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode != 0
    assert "POLITE_PROXIES='socks5://127.0.0.1:1080' is invalid" in proc.stderr
    assert "Scrapy cannot use socks5 proxies" in proc.stderr


@pytest_twisted.ensureDeferred
async def test_proxy_auth_matches_endpoint_and_credentials_stay_masked(sandbox, caplog) -> None:
    sb = sandbox(SandboxConfig(sites=[site(pages=15)], proxies=ProxyConfig(count=3, auth=("alice", "s3cret"))))
    wrong = sb.proxy_urls[0].replace("s3cret", "wrong")
    proxies = [wrong, *sb.proxy_urls[1:]]
    result = await crawl(CatalogueSpider, {"POLITE_PROXIES": proxies, "POLITE_ENDPOINT_BACKOFF": (30, 60)},
                         start_url=sb.site_url("a"))
    log = sb.log()
    assert sorted(items_fetched(log)) == list(range(1, 16))
    # The endpoint with the wrong password got 407s, was backed off, and its requests went elsewhere.
    assert result.stats.get("polite/status/407", 0) >= 1
    assert sb.proxy_exit_ips[0] not in {e["ip"] for e in log}
    assert {e["ip"] for e in log} == set(sb.proxy_exit_ips[1:])
    text = caplog.text + repr(result.stats)
    assert "s3cret" not in text and "wrong" not in text


@pytest_twisted.ensureDeferred
async def test_ban_benches_endpoint_for_that_host_only(sandbox) -> None:
    sb = sandbox(SandboxConfig(sites=[site(name="a"), site(name="b", pages=6)], proxies=ProxyConfig(count=4)))
    urls = f"{sb.site_url('a')}/status/403 {sb.site_url('b')}"
    result = await crawl(CatalogueSpider, {"POLITE_PROXIES": sb.proxy_urls, "POLITE_DELAY": (0.1, 0.2)},
                         start_url=urls)
    log = sb.log()
    banned = [e for e in log if e["site"] == "a" and e["path"] == "/status/403"]
    # Tried through three different endpoints (two re-queues), then handed to the spider as a 403.
    assert len(banned) == 3 and len({e["ip"] for e in banned}) == 3
    assert result.stats["polite/bans"] == 3
    # Site b is still served through the endpoints site a benched.
    assert {e["ip"] for e in banned} <= {e["ip"] for e in log if e["site"] == "b"}
    assert sorted(items_fetched(log, "b")) == list(range(1, 7))


@pytest_twisted.ensureDeferred
async def test_polite_enabled_false_leaves_the_crawl_alone(sandbox) -> None:
    sb = sandbox(SandboxConfig(sites=[site(pages=5)], proxies=ProxyConfig(count=2)))
    result = await crawl(CatalogueSpider, {"POLITE_ENABLED": False}, start_url=sb.site_url("a"))
    log = sb.log()
    assert sorted(items_fetched(log)) == [1, 2, 3, 4, 5]
    assert {e["ip"] for e in log} == {"127.0.0.1"}  # direct, no proxy
    assert not any(key.startswith("polite/") for key in result.stats)


@pytest_twisted.ensureDeferred
async def test_a_request_that_spends_its_budget_is_given_up_once_and_marked(sandbox, tmp_path, caplog) -> None:

    sb = sandbox(SandboxConfig(sites=[site()], proxies=ProxyConfig(count=3)))
    url = sb.site_url("a") + "/status/429"  # always rate-limited
    jsonl = tmp_path / "s.jsonl"
    with caplog.at_level("ERROR", logger="scrapy_polite.downloader.middleware"):
        result = await crawl(CatalogueSpider, {
            "POLITE_PROXIES": sb.proxy_urls, "POLITE_RATE_RETRY_TIMES": 2, "POLITE_COOLDOWN": (0.1, 0.2),
            "POLITE_DELAY": (0.05, 0.1), "POLITE_STATS_JSONL": str(jsonl),
        }, start_url=url)
    assert [e["status"] for e in sb.log()] == [429, 429, 429]  # the first try and its two re-queues
    records = read_jsonl(jsonl)
    assert [(r["status"], r["requeues"], r["gave_up"]) for r in records] == [
        (429, 0, False), (429, 1, False), (429, 2, True)]
    assert result.stats["polite/gave_up"] == result.stats["polite/gave_up/rate"] == 1
    assert result.stats["polite/requeued/rate"] == 2
    assert result.crawler.get_extension(PoliteStats).summary()["gave_up"] == 1
    (error,) = [r.getMessage() for r in caplog.records if "gave up" in r.getMessage()]
    assert url in error and "after 2 rate re-queue(s)" in error


@pytest_twisted.ensureDeferred
async def test_requests_waiting_at_the_gate_when_the_spider_closes_are_dropped_quietly(sandbox, caplog) -> None:
    sb = sandbox(SandboxConfig(sites=[site(pages=40)], proxies=ProxyConfig(count=2)))
    with caplog.at_level("INFO"):
        result = await crawl(CatalogueSpider, {"POLITE_PROXIES": sb.proxy_urls, "POLITE_DELAY": (1.0, 1.2),
                                               "CLOSESPIDER_TIMEOUT": 2.5}, start_url=sb.site_url("a"))
    assert result.stats["finish_reason"] == "closespider_timeout"
    dropped = result.stats["polite/dropped_at_close"]
    assert dropped >= 5  # item pages were waiting for one of the two endpoints
    assert not result.stats.get("polite/gave_up")
    assert [r for r in caplog.records if r.levelname == "ERROR"] == []
    assert any(f"{dropped} request(s) still waiting at the gate were not sent" in r.getMessage()
               for r in caplog.records)


@pytest_twisted.ensureDeferred
async def test_a_paused_crawl_keeps_the_requests_waiting_at_the_gate_in_jobdir(sandbox, tmp_path) -> None:
    sb = sandbox(SandboxConfig(sites=[site(pages=30)], proxies=ProxyConfig(count=2)))
    settings = {"POLITE_PROXIES": sb.proxy_urls, "POLITE_DELAY": (0.3, 0.4), "JOBDIR": str(tmp_path / "job")}
    first = await crawl(CatalogueSpider, {**settings, "CLOSESPIDER_TIMEOUT": 2.0}, start_url=sb.site_url("a"))
    assert first.stats["finish_reason"] == "closespider_timeout"
    kept = first.stats["polite/kept_at_close"]
    assert kept == first.stats["polite/dropped_at_close"] >= 3
    done_first = set(items_fetched(sb.log()))
    assert len(done_first) < 30
    second = await crawl(CatalogueSpider, settings, start_url=sb.site_url("a"))
    assert second.stats["finish_reason"] == "finished"
    # Resumed from JOBDIR: every item page fetched once across the two runs.
    fetched = items_fetched(sb.log())
    assert sorted(fetched) == list(range(1, 31)) and set(fetched.values()) == {1}
