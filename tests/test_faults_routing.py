"""Fault cases of where a request goes and whom its answer blames: redirects to another host, a proxy
answering 502 for the site, a host every identity is benched for, and ``meta['proxy'] = None``.

Each is a real crawl against the sandbox, judged from the site's and the proxies' logs with the
checks of tests/faultcheck.py.
"""

from __future__ import annotations

import ipaddress
import re
import time
from collections import Counter
from typing import Any
from urllib.parse import urlsplit

import pytest
import pytest_twisted
import scrapy
from faultcheck import FAULT_AUTH, Catalogue, assert_clean, assert_pages_accounted, fault_crawl
from logcheck import items_fetched, max_inflight_host

from scrapy_polite import signals as polite_signals
from scrapy_polite.sandbox import FailureSpec, ProxyConfig, SandboxConfig, SiteConfig


def site(**kw: Any) -> SiteConfig:
    kw.setdefault("name", "a")
    kw.setdefault("latency", [0.01, 0.05])
    return SiteConfig(**kw)


def exit_ips(count: int, first: str = ProxyConfig.first_source) -> list[str]:
    """The exit IPs the sandbox gives its proxies, known before it starts (to flag them at the site)."""
    return [str(ipaddress.ip_address(first) + i) for i in range(count)]


class Pages(scrapy.Spider):
    """Item pages 1..pages of *base*, each through ``via`` (a redirect to it) if given, with *meta*."""

    name = "pages"

    def __init__(self, base: str = "", pages: int = 10, via: str = "", proxy_none: int = 0, **kw: Any) -> None:
        super().__init__(**kw)
        self.base, self.pages, self.via, self.proxy_none = base, int(pages), via, int(proxy_none)

    async def start(self) -> Any:
        for n in range(1, self.pages + 1):
            url = f"{self.base}/item/{n}"
            if self.via:
                url = f"{self.via}/status/302?to={url}"
            # The first *proxy_none* pages say "no proxy" as Scrapy spells it.
            meta = {"proxy": None} if n <= self.proxy_none else {}
            yield scrapy.Request(url, meta=meta, callback=self.parse, errback=self.failed)

    def parse(self, response: scrapy.http.Response) -> Any:
        yield {"url": response.url, "status": response.status}

    def failed(self, failure: Any) -> None:
        self.logger.info("gave up %s (%s)", failure.request.url, type(failure.value).__name__)


# -- 1. a redirect to another host is that host's ---------------------------------------------


@pytest_twisted.ensureDeferred
async def test_a_redirect_to_another_host_is_gated_throttled_and_counted_as_that_host(sandbox, tmp_path) -> None:
    sb = sandbox(SandboxConfig(sites=[site(name="a"), site(name="b", pages=20, latency=[0.2, 0.3])],
                               proxies=ProxyConfig(count=4, auth=FAULT_AUTH), max_runtime=120))
    a_host, b_host = (urlsplit(sb.site_url(n)).hostname for n in ("a", "b"))
    hosts: Counter[tuple[str, str]] = Counter()

    def on_outcome(outcome: Any) -> None:
        hosts[urlsplit(outcome.url).hostname, outcome.host] += 1

    run = await fault_crawl(Pages, {
        "POLITE_PROXIES": sb.proxy_urls, "POLITE_DELAY": (0.05, 0.1), "CLOSESPIDER_TIMEOUT": 60,
        # A cap of 1 on the host redirected to; 4 on the one redirecting.
        "DOWNLOAD_SLOTS": {a_host: {"concurrency": 4}, b_host: {"concurrency": 1}},
    }, tmp_path / "crawl.log", connect={polite_signals.outcome_recorded: on_outcome},
        base=sb.site_url("b"), via=sb.site_url("a"), pages=20)
    log = sb.log()
    assert run.stats["finish_reason"] == "finished"
    assert Counter(e["status"] for e in log if e["site"] == "a") == {302: 20}
    assert sorted(items_fetched(log, "b")) == list(range(1, 21))
    assert_pages_accounted(run, log, range(1, 21), site="b")
    # B's cap held while A's pages came in fours; each hop was recorded as its own host.
    assert max_inflight_host(log, "b") == 1
    assert hosts == {(a_host, a_host): 20, (b_host, b_host): 20}
    assert_clean(run)


# -- 2. a proxy answering 502 for the site is blamed; the site's own 502s are not -------------


@pytest_twisted.ensureDeferred
async def test_a_proxy_answering_its_own_502_is_backed_off_and_no_page_is_lost(sandbox, tmp_path) -> None:
    sb = sandbox(SandboxConfig(sites=[site(pages=60, latency=[0.05, 0.1])], proxies=ProxyConfig(count=4, auth=FAULT_AUTH),
                               failures=[FailureSpec(proxy=0, mode="badgateway", at=0.0)], max_runtime=120))
    run = await fault_crawl(Catalogue, {
        "POLITE_PROXIES": sb.proxy_urls, "POLITE_DELAY": (0.1, 0.2), "CLOSESPIDER_TIMEOUT": 60,
    }, tmp_path / "crawl.log", start_url=sb.site_url("a"))
    log = sb.log()
    assert run.stats["finish_reason"] == "finished"
    assert sorted(items_fetched(log)) == list(range(1, 61))
    assert_pages_accounted(run, log, range(1, 61))
    assert not run.gave_up
    bad_ip = sb.proxy_exit_ips[0]
    assert bad_ip not in {e["ip"] for e in log}  # it never reached the site
    # The proxies' own log: the bad one answered 502 each time it was tried, and it lost its turn:
    # backed off, it took a small share of the attempts, not the quarter (or more) of a free proxy.
    proxied = [e for e in sb.proxy_log() if e["method"] != "CONNECT"]
    bad = [e for e in proxied if e["proxy"] == 0]
    assert bad and all(e["status"] == 502 for e in bad)
    assert len(bad) <= 0.1 * len(proxied), (len(bad), len(proxied))
    assert run.stats["polite/blame/endpoint_gateway"] >= 2
    assert run.stats["polite/endpoint_failures"] >= run.stats["polite/blame/endpoint_gateway"]
    assert run.stats.get("polite/requeued/proxy", 0) >= run.stats["polite/blame/endpoint_gateway"]
    assert_clean(run)


@pytest_twisted.ensureDeferred
async def test_the_site_s_own_502s_blame_no_proxy(sandbox, tmp_path) -> None:
    sb = sandbox(SandboxConfig(sites=[site(pages=10)], proxies=ProxyConfig(count=4, auth=FAULT_AUTH), max_runtime=120))
    base = sb.site_url("a")

    class Mixed(Pages):
        async def start(self) -> Any:
            async for request in super().start():
                yield request
            for n in range(1, 6):  # the site's own 502s, whichever proxy asks
                yield scrapy.Request(f"{base}/status/502?n={n}", callback=self.parse, errback=self.failed)

    run = await fault_crawl(Mixed, {
        "POLITE_PROXIES": sb.proxy_urls, "POLITE_DELAY": (0.1, 0.2), "CLOSESPIDER_TIMEOUT": 60,
    }, tmp_path / "crawl.log", base=base, pages=10)
    log = sb.log()
    assert run.stats["finish_reason"] == "finished"
    assert sorted(items_fetched(log)) == list(range(1, 11))
    # Each 502 page was the site's: Scrapy's retries (RETRY_TIMES 2) sent it three times, through
    # several proxies, and none of them was blamed.
    tries = Counter(e["path"] for e in log if e["path"].startswith("/status/502"))
    assert set(tries.values()) == {3}, tries
    assert len({e["ip"] for e in log if e["path"].startswith("/status/502")}) >= 2
    assert not run.stats.get("polite/endpoint_failures")
    assert not run.stats.get("polite/blame/endpoint_gateway")
    assert_clean(run)


# -- 3. a host every identity is benched for ----------------------------------------------------

_BLOCKED = re.compile(r"WARNING: (\S+) is blocked: .* the first comes back in (\d+) s")


@pytest.mark.parametrize("state", ["memory", "redis"])
@pytest_twisted.ensureDeferred
async def test_a_host_with_every_identity_benched_is_said_once_and_given_up(sandbox, tmp_path, request, state) -> None:
    settings = {}
    if state == "redis":
        settings = {"POLITE_STATE": request.getfixturevalue("redis_server").url}
    # Site a challenges every exit IP of the pool; site b is fine.
    sb = sandbox(SandboxConfig(sites=[site(name="a", flagged_ips=exit_ips(3), flag_time=600), site(name="b", pages=20)],
                               proxies=ProxyConfig(count=3, auth=FAULT_AUTH), max_runtime=120))
    a_host = urlsplit(sb.site_url("a")).hostname
    started = time.monotonic()
    run = await fault_crawl(Catalogue, {
        **settings, "POLITE_PROXIES": sb.proxy_urls, "POLITE_DELAY": (0.1, 0.2), "POLITE_COOLDOWN": (0.1, 0.2),
        "CLOSESPIDER_TIMEOUT": 60,
    }, tmp_path / "crawl.log", start_url=" ".join(
        [sb.site_url("a") + p for p in ("/", "/list/1", "/list/2", "/list/3")] + [sb.site_url("b")]))
    elapsed = time.monotonic() - started
    log = sb.log()
    # The crawl finished its other work and closed, not at its time limit.
    assert run.stats["finish_reason"] == "finished" and elapsed < 40, elapsed
    assert sorted(items_fetched(log, "b")) == list(range(1, 21))
    # Each identity was challenged at a, then benched for it: once (with Redis, the bench is written
    # just after the lease is given back, and one more request may have been granted meanwhile).
    a_log = [e for e in log if e["site"] == "a"]
    assert all(e["challenge"] for e in a_log)
    assert {e["ip"] for e in a_log} == set(sb.proxy_exit_ips)
    assert len(a_log) <= (3 if state == "memory" else 6), a_log
    said = [m.groups() for line in run.log_text.splitlines() if (m := _BLOCKED.search(line))]
    assert len(said) == 1 and said[0][0] == a_host and 1700 <= int(said[0][1]) <= 1800, said
    assert run.stats["polite/host_blocked"] == 1
    # Its four pages were given up with the reason, none silently.
    assert sorted(urlsplit(url).path for url, _ in run.gave_up) == ["/", "/list/1", "/list/2", "/list/3"]
    assert all(reason.startswith("host_blocked: ") for _, reason in run.gave_up), run.gave_up
    assert run.stats["polite/gave_up/host_blocked"] == 4
    assert_clean(run)


@pytest_twisted.ensureDeferred
async def test_a_blocked_host_can_wait_for_its_first_identity_back(sandbox, tmp_path) -> None:
    # Every exit IP is flagged for the site's first 8 s (the crawl's first challenges come well within
    # them, even on a loaded machine); each is benched 8 s after its challenge, by when the site lets
    # it in; then the pages come.
    sb = sandbox(SandboxConfig(sites=[site(name="a", pages=10, flagged_ips=exit_ips(2), flag_time=8)],
                               proxies=ProxyConfig(count=2, auth=FAULT_AUTH), max_runtime=120))
    run = await fault_crawl(Catalogue, {
        "POLITE_PROXIES": sb.proxy_urls, "POLITE_DELAY": (0.1, 0.2), "POLITE_COOLDOWN": (0.1, 0.2),
        "POLITE_HOST_BLOCKED": "wait", "POLITE_CHALLENGE_BENCH": 8, "CLOSESPIDER_TIMEOUT": 60,
    }, tmp_path / "crawl.log", start_url=sb.site_url("a"))
    log = sorted(sb.log(), key=lambda e: e["t_start"])
    assert run.stats["finish_reason"] == "finished"
    assert sorted(items_fetched(log)) == list(range(1, 11))
    assert_pages_accounted(run, log, range(1, 11))
    assert not run.gave_up
    said = [m.groups() for line in run.log_text.splitlines() if (m := _BLOCKED.search(line))]
    assert len(said) == 1 and 2 <= int(said[0][1]) <= 8, said
    assert run.stats["polite/host_blocked"] == 1
    # Nothing went to the site while both identities were benched.
    challenges = [e for e in log if e["challenge"]]
    assert sorted(e["ip"] for e in challenges) == sorted(sb.proxy_exit_ips)
    back = challenges[0]["t_end"] + 8
    assert not [e for e in log if challenges[-1]["t_end"] < e["t_start"] < back - 0.5]
    assert_clean(run)


@pytest_twisted.ensureDeferred
async def test_a_host_moves_up_a_tier_before_it_is_blocked(sandbox, tmp_path) -> None:
    sb = sandbox(SandboxConfig(sites=[site(name="a", pages=10, flagged_ips=exit_ips(4), flag_time=600)],
                               proxies=ProxyConfig(count=4, auth=FAULT_AUTH), max_runtime=120))
    urls = sb.proxy_urls
    run = await fault_crawl(Catalogue, {
        "POLITE_PROXY_TIERS": [urls[:2], urls[2:]], "POLITE_DELAY": (0.1, 0.2), "POLITE_COOLDOWN": (0.1, 0.2),
        "CLOSESPIDER_TIMEOUT": 60,
    }, tmp_path / "crawl.log", start_url=" ".join(sb.site_url("a") + p for p in ("/", "/list/1", "/list/2")))
    log = sb.log()
    assert run.stats["finish_reason"] == "finished"
    # The cheap tier was tried and burned, then the dear one, and only then was the host blocked.
    assert sorted(e["ip"] for e in log) == sorted(sb.proxy_exit_ips)
    lines = run.log_text.splitlines()
    moved = [i for i, line in enumerate(lines) if "moves from proxy tier 0 to tier 1" in line]
    blocked = [i for i, line in enumerate(lines) if _BLOCKED.search(line)]
    assert len(moved) == 1 and len(blocked) == 1 and moved[0] < blocked[0]
    assert run.stats["polite/host_blocked"] == 1
    # Each page given up once, with its reason: its challenge budget spent (POLITE_CHALLENGE_RETRY_TIMES),
    # or its host blocked; the pages still waiting when the host was blocked were given up then.
    assert sorted(urlsplit(url).path for url, _ in run.gave_up) == ["/", "/list/1", "/list/2"]
    reasons = Counter(reason.split(":")[0] for _, reason in run.gave_up)
    assert set(reasons) <= {"challenge", "host_blocked"} and reasons["host_blocked"] >= 1, reasons
    assert_clean(run)


# -- 6. meta['proxy'] = None ---------------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_meta_proxy_none_goes_direct_and_the_rest_through_the_pool(sandbox, tmp_path) -> None:
    sb = sandbox(SandboxConfig(sites=[site(pages=20)], proxies=ProxyConfig(count=3, auth=FAULT_AUTH), max_runtime=120))
    run = await fault_crawl(Pages, {
        "POLITE_PROXIES": sb.proxy_urls, "POLITE_DELAY": (0.05, 0.1), "CLOSESPIDER_TIMEOUT": 60,
    }, tmp_path / "crawl.log", base=sb.site_url("a"), pages=20, proxy_none=8)
    log = sb.log()
    assert run.stats["finish_reason"] == "finished"
    assert sorted(items_fetched(log)) == list(range(1, 21))
    assert_pages_accounted(run, log, range(1, 21))
    pool = set(sb.proxy_exit_ips)
    ip_of = {int(e["path"].rsplit("/", 1)[1]): e["ip"] for e in log}
    assert all(ip_of[n] not in pool for n in range(1, 9)), ip_of  # straight from the crawler
    assert all(ip_of[n] in pool for n in range(9, 21)), ip_of
    assert not [e for e in sb.proxy_log() if "/item/" in e["target"] and int(e["target"].rsplit("/", 1)[1]) <= 8]
    assert run.stats["polite/bypassed/no_proxy"] == 8
    assert_clean(run)
