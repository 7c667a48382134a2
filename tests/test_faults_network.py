"""Fault cases on the network path: hanging targets and proxies, a proxy that dies and comes back, 407s.

Each one is a real crawl against the sandbox, judged from the site's access log with the
checks of tests/faultcheck.py.
"""

from __future__ import annotations

import re
import socket
import time
from datetime import datetime

import pytest
import pytest_twisted
from faultcheck import FAULT_AUTH, Catalogue, assert_clean, assert_pages_accounted, fault_crawl
from logcheck import items_fetched, max_inflight_host

from scrapy_polite.runtime import get_runtime
from scrapy_polite.sandbox import FailureSpec, ProxyConfig, SandboxConfig, SiteConfig


def site(**kw) -> SiteConfig:
    kw.setdefault("name", "a")
    kw.setdefault("latency", [0.01, 0.05])
    return SiteConfig(**kw)


def every_page_once(run, sb, pages: int, undelivered_ips: tuple[str, ...] = ()) -> list[dict]:
    """The crawl finished with every item page fetched exactly once and none given up; the site's log."""
    log = sb.log()
    assert run.stats["finish_reason"] == "finished"
    assert_pages_accounted(run, log, range(1, pages + 1), undelivered_ips=undelivered_ips)
    assert sorted(items_fetched(log)) == list(range(1, pages + 1))
    assert not run.gave_up
    return log


def dead_endpoints(run) -> int:
    return get_runtime(run.result.crawler).gate.health_counts()["dead"]


@pytest_twisted.ensureDeferred
async def test_hanging_target_urls_are_given_up_and_no_healthy_proxy_dies(sandbox, tmp_path) -> None:
    hanging = {5, 15, 25}
    sb = sandbox(SandboxConfig(sites=[site(pages=30, hang_items=sorted(hanging))], proxies=ProxyConfig(count=8, auth=FAULT_AUTH),
                               max_runtime=120))
    run = await fault_crawl(Catalogue, {
        "POLITE_PROXIES": sb.proxy_urls, "DOWNLOAD_TIMEOUT": 1.5, "POLITE_DELAY": (0.1, 0.2),
        "CLOSESPIDER_TIMEOUT": 40,
    }, tmp_path / "crawl.log", start_url=sb.site_url("a"))
    log = sb.log()
    assert run.stats["finish_reason"] == "finished"
    assert_pages_accounted(run, log, range(1, 31))
    fetched = items_fetched(log)
    assert sorted(fetched) == sorted(set(range(1, 31)) - hanging) and set(fetched.values()) == {1}
    # Each hanging page: the first try and POLITE_TIMEOUT_RETRY_TIMES (2) re-queues, then given up once.
    given_up = sorted((int(url.rsplit("/", 1)[1]), reason) for url, reason in run.gave_up)
    assert [n for n, _ in given_up] == sorted(hanging)
    assert all(reason.startswith("timeout: ") for _, reason in given_up), given_up
    # The site logs a hanging request once its client is gone: the last ones a moment after the crawl.
    paths = {f"/item/{n}" for n in hanging}
    for _ in range(30):
        tries = [e for e in sb.log() if e["path"] in paths]
        if len(tries) >= 3 * len(hanging):
            break
        time.sleep(0.1)
    assert len(tries) == 3 * len(hanging) and all(e["status"] == 0 for e in tries)
    assert run.stats["polite/gave_up/timeout"] == len(hanging)
    assert dead_endpoints(run) == 0
    assert {e["ip"] for e in log} == set(sb.proxy_exit_ips)  # the whole pool in use
    assert_clean(run)


_STALLED = re.compile(r"^(\S+ \S+) \[scrapy_polite\.[\w.]+\] INFO: no answer via (\S+) for")


def _log_time(stamp: str) -> float:
    return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()


@pytest.mark.parametrize("state", ["memory", "redis"])
@pytest_twisted.ensureDeferred
async def test_a_hanging_proxy_gives_its_host_slot_back_within_the_stall_timeout(
    sandbox, tmp_path, request, state: str
) -> None:
    settings = {}
    if state == "redis":
        settings = {"POLITE_STATE": request.getfixturevalue("redis_server").url, "POLITE_STATE_LEASE_TTL": 2}
    sb = sandbox(SandboxConfig(sites=[site(pages=30, latency=[0.2, 0.3])], proxies=ProxyConfig(count=4, auth=FAULT_AUTH),
                               failures=[FailureSpec(proxy=0, mode="hang", at=0.0)], max_runtime=120))
    run = await fault_crawl(Catalogue, {
        **settings, "POLITE_PROXIES": sb.proxy_urls, "DOWNLOAD_TIMEOUT": 4, "POLITE_STALL_TIMEOUT": 0.5,
        "POLITE_DELAY": (0.1, 0.2), "POLITE_ENDPOINT_BACKOFF": (0.5, 2), "CLOSESPIDER_TIMEOUT": 40,
    }, tmp_path / "crawl.log", start_url=sb.site_url("a"))
    log = every_page_once(run, sb, 30)
    # The rest of the pool carried the crawl; the hanging proxy never reached the site.
    assert {e["ip"] for e in log} == set(sb.proxy_exit_ips[1:])
    assert max_inflight_host(log, "a") <= 2
    hung = sb.proxy_urls[0].rsplit(":", 1)[1]
    stalls = [_log_time(m.group(1)) for line in run.log_text.splitlines()
              if (m := _STALLED.match(line)) and m.group(2).endswith(f":{hung}")]
    assert stalls and run.stats["polite/stalled"] >= len(stalls)
    # While the hanging proxy still held its request (and the crawl had other pages to send), the
    # host had both its slots for the others: given back at the stall timeout, not at the download
    # timeout 3.5 s later.
    windows = [[e for e in log if at <= e["t_start"] <= at + 3.0] for at in stalls]
    busy = [during for during in windows if len(during) >= 3]
    assert busy, stalls
    for during in busy:
        assert max(e["inflight_host"] for e in during) == 2, during
    assert_clean(run)


@pytest_twisted.ensureDeferred
async def test_a_proxy_that_dies_and_comes_back_is_used_again(sandbox, tmp_path) -> None:
    # 60 pages: the crawl goes on for seconds after the proxy is back (and its backoff's re-check).
    sb = sandbox(SandboxConfig(sites=[site(pages=60, latency=[0.1, 0.2])], proxies=ProxyConfig(count=3, auth=FAULT_AUTH),
                               failures=[FailureSpec(proxy=0, mode="die", at=1.0),
                                         FailureSpec(proxy=0, mode="recover", at=3.0)], max_runtime=120))
    run = await fault_crawl(Catalogue, {
        "POLITE_PROXIES": sb.proxy_urls, "POLITE_DELAY": (0.2, 0.3), "POLITE_ENDPOINT_BACKOFF": (0.5, 1),
        "CLOSESPIDER_TIMEOUT": 40,
    }, tmp_path / "crawl.log", start_url=sb.site_url("a"))
    revived = sb.proxy_exit_ips[0]
    log = every_page_once(run, sb, 60, undelivered_ips=(revived,))
    t0 = min(e["t_start"] for e in log)
    assert any(e["ip"] == revived and e["t_start"] < t0 + 1.0 for e in log)
    assert len([e for e in log if e["ip"] == revived and e["t_start"] > t0 + 3.0]) >= 3  # back in use
    # The refusals while it was down count against the endpoint; the requests its death cut
    # short say nothing certain about it: they are re-queued on the timeout budget.
    assert run.stats["polite/endpoint_failures"] >= 1
    assert run.stats.get("polite/requeued/proxy", 0) >= 1
    assert run.stats.get("polite/blame/endpoint", 0) == 0
    assert dead_endpoints(run) == 0
    assert_clean(run)


def _port_containing_429() -> int:
    """A free loopback port whose digits contain 429 (4290, 14290, ...)."""
    for base in (4290, 14290, 24290, 34290, 42900, 44290, 54290):
        for port in range(base, base + 10):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
                return port
    pytest.skip("no free port containing 429")


@pytest_twisted.ensureDeferred
async def test_a_proxy_answering_407_is_benched_also_on_connect_and_on_a_port_containing_429(
    sandbox, tmp_path
) -> None:
    port = _port_containing_429()
    sb = sandbox(SandboxConfig(
        sites=[site(name="a", pages=30), site(name="s", pages=30, tls=True)],
        proxies=ProxyConfig(count=4, ports=[port], auth=FAULT_AUTH), failures=[FailureSpec(proxy=0, mode="deny", at=0.0)],
        max_runtime=120,
    ))
    assert sb.proxy_urls[0].endswith(f":{port}")
    run = await fault_crawl(Catalogue, {
        "POLITE_PROXIES": sb.proxy_urls, "POLITE_DELAY": (0.2, 0.3), "POLITE_ENDPOINT_BACKOFF": (0.3, 0.6),
        # Never dead: the denying endpoint is tried again after each backoff, on either site.
        "POLITE_ENDPOINT_MAX_FAILURES": 50, "CLOSESPIDER_TIMEOUT": 40,
    }, tmp_path / "crawl.log", start_url=f"{sb.site_url('a')} {sb.site_url('s')}")
    log = sb.log()
    assert run.stats["finish_reason"] == "finished"
    for name in ("a", "s"):
        fetched = items_fetched(log, name)
        assert sorted(fetched) == list(range(1, 31)) and set(fetched.values()) == {1}, name
    assert not run.gave_up
    assert sb.proxy_exit_ips[0] not in {e["ip"] for e in log}
    # 407 answers (plain http) and TunnelError 407s (CONNECT, port ...429...) are the endpoint's failures;
    # which site each of its attempts went to is the gate's choice, so both kinds are usual, one is certain.
    plain, tunnel = run.stats.get("polite/status/407", 0), run.log_text.count("failed (TunnelError 407)")
    assert plain + tunnel >= 2, (plain, tunnel)
    assert run.stats.get("polite/requeued/rate", 0) == 0 and not run.stats.get("polite/rate_limited")
    st = get_runtime(run.result.crawler).gate.endpoints[get_runtime(run.result.crawler).config.endpoints[0].key]
    assert st.failures >= 2 and st.requests == st.failures
    assert_clean(run)
