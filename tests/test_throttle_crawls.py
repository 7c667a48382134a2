"""The throttle against real limits: each host's rate found from its own 429s, judged from the site's log.

Every check comes from the sandbox's access log, or from the throttle's own
change signals where the question is what it decided.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest
import pytest_twisted
from conftest import crawl
from example_project.spiders.catalogue import CatalogueSpider
from logcheck import items_fetched, quiet_after, statuses

from scrapy_polite.sandbox import ProxyConfig, SandboxConfig, SiteConfig

pytestmark = pytest.mark.slow


def site(**kw: Any) -> SiteConfig:
    kw.setdefault("name", "a")
    kw.setdefault("latency", [0.04, 0.16])
    kw.setdefault("per_ip_burst", 1)
    return SiteConfig(**kw)


async def adaptive_crawl(sb: Any, names: str = "a", **settings: Any) -> Any:
    """One adaptive crawl of the sandbox's sites *names*."""
    return await crawl(CatalogueSpider, {"POLITE_PROXIES": sb.proxy_urls, "POLITE_ADAPTIVE": True, **settings},
                       start_url=" ".join(sb.site_url(n) for n in names.split()))


def check_log(log: list[dict[str, Any]], result: Any, sites: dict[str, tuple[int, float]], max_429: float) -> None:
    """Nothing lost, no block, nobody back inside a Retry-After, and few 429s (*sites*: name -> pages, Retry-After)."""
    counts = statuses(log)
    assert counts.get(403, 0) == 0
    for name, (pages, retry_after) in sites.items():
        assert sorted(items_fetched(log, name)) == list(range(1, pages + 1)), name
        early = [g for g, _ in quiet_after(log, site=name) if g < retry_after - 0.05]
        assert not early, f"{name}: {len(early)} requests inside a Retry-After window"
    assert not result.stats.get("polite/gave_up")
    share = counts.get(429, 0) / len(log)
    assert share <= max_429, f"{share:.1%} of requests answered 429"


def per_ip_gaps(log: list[dict[str, Any]], name: str, after: float) -> list[float]:
    starts: dict[str, list[float]] = defaultdict(list)
    for e in sorted(log, key=lambda e: e["t_start"]):
        if e["site"] == name and e["t_start"] >= after:
            starts[e["ip"]].append(e["t_start"])
    return sorted(b - a for ts in starts.values() for a, b in zip(ts, ts[1:]))


def median(values: list[float]) -> float:
    return values[len(values) // 2]


@pytest.mark.parametrize("adaptive", [False, True])
@pytest_twisted.ensureDeferred
async def test_a_per_ip_limit_is_found_and_each_ip_kept_under_it(sandbox, adaptive: bool) -> None:
    sb = sandbox(SandboxConfig(sites=[site(pages=60, per_ip_rate=1.0, retry_after=2)], proxies=ProxyConfig(count=8)))
    result = await crawl(CatalogueSpider, {"POLITE_PROXIES": sb.proxy_urls, "POLITE_ADAPTIVE": adaptive},
                         start_url=sb.site_url("a"))
    log = sb.log()
    # About 70 requests: one 429 is 1.4% of them, and a loaded machine draws one or two more (6 of
    # 70 seen in a CI run). The 2% target is the benchmark's; a spacing never raised draws far more.
    check_log(log, result, {"a": (60, 2.0)}, max_429=0.12)
    assert statuses(log).get(429, 0) > 0, "the scenario must draw 429s"
    # After the first 429s, each IP's requests are a second apart or more, as the site allows.
    first_429 = min(e["t_start"] for e in log if e["status"] == 429)
    gaps = per_ip_gaps(log, "a", first_429 + 1)
    assert gaps and sum(g < 0.95 for g in gaps) <= 0.15 * len(gaps), gaps[:10]


@pytest_twisted.ensureDeferred
async def test_a_host_wide_limit_is_held_by_the_host_rate_and_its_retry_after_kept_by_every_ip(sandbox) -> None:
    sb = sandbox(SandboxConfig(sites=[site(pages=50, host_rate=3.0, host_burst=1, retry_after=2)],
                               proxies=ProxyConfig(count=8)))
    result = await adaptive_crawl(sb)
    log = sb.log()
    # A host-wide bucket with no burst refuses irregular arrivals under its rate: a short crawl's
    # start-up and probes draw up to a fifth of its requests (the benchmark's 2% target is not met).
    check_log(log, result, {"a": (50, 2.0)}, max_429=0.25)
    # A Retry-After of under three of each IP's spacings (2 s; 8 IPs at 3 req/s space 2.7 s) is
    # kept by every IP: no request leaves inside one (those already granted were on their way).
    for refused in (e for e in log if e["status"] == 429):
        inside = [e for e in log if refused["t_end"] + 0.1 < e["t_start"] < refused["t_end"] + 2.0 - 0.1]
        assert not inside, (refused, inside)
    ok = [e["t_start"] for e in log if e["status"] == 200]
    half = ok[len(ok) // 2:]
    # Near the host's 3 req/s, not held far under it (how near is the benchmark's to say).
    assert len(half) / (half[-1] - half[0]) >= 0.6 * 3.0


@pytest_twisted.ensureDeferred
async def test_three_hosts_with_different_per_ip_limits_are_each_found_independently(sandbox) -> None:
    limits = {"fast": (2.0, 80), "medium": (1.0, 40), "slow": (0.5, 30)}
    sb = sandbox(SandboxConfig(sites=[site(name=n, pages=p, per_ip_rate=r, retry_after=2)
                                      for n, (r, p) in limits.items()], proxies=ProxyConfig(count=8)))
    result = await adaptive_crawl(sb, " ".join(limits), POLITE_DELAY_FLOOR=0.3)
    log = sb.log()
    check_log(log, result, {n: (p, 2.0) for n, (_, p) in limits.items()}, max_429=0.12)
    t0 = min(e["t_start"] for e in log)
    for name in limits:
        # The first round at POLITE_DELAY's rate costs a host slower than that up to one 429 per
        # IP (8 of the slow host's ~40 requests): past each IP's first, few more.
        site_log = [e for e in log if e["site"] == name]
        refused = [e["ip"] for e in site_log if e["status"] == 429]
        assert len(refused) - len(set(refused)) <= 0.15 * len(site_log), (name, refused)
    # The fast host is not slowed to the slow one's spacing.
    fast, slow = per_ip_gaps(log, "fast", t0 + 2), per_ip_gaps(log, "slow", t0 + 2)
    assert fast and slow and median(fast) < 0.6 * median(slow)


@pytest_twisted.ensureDeferred
async def test_per_ip_and_host_wide_limits_binding_at_once(sandbox) -> None:
    # 4 IPs at 1 req/s each (4 req/s) and 3 req/s for the host: both bind within a few 429s.
    sb = sandbox(SandboxConfig(sites=[site(pages=50, per_ip_rate=1.0, host_rate=3.0, host_burst=1, retry_after=2)],
                               proxies=ProxyConfig(count=4)))
    result = await adaptive_crawl(sb)
    log = sb.log()
    check_log(log, result, {"a": (50, 2.0)}, max_429=0.25)  # the 2% target is the benchmark's; a loaded machine draws more
    gaps = per_ip_gaps(log, "a", min(e["t_start"] for e in log))
    assert gaps and sum(g < 1.0 - 0.05 for g in gaps) <= 0.1 * len(gaps)  # under the per-IP limit
    ok = [e["t_start"] for e in log if e["status"] == 200]
    half = ok[len(ok) // 2:]
    assert len(half) / (half[-1] - half[0]) >= 0.6 * 3.0  # and near the host's (the benchmark says how near)
