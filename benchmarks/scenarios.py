"""Benchmark scenarios: a sandbox, a spider, timed events and the physical limit.

Each scenario's *physical limit* is the most successful pages per second the
site (and the pool) allows, as a step function of time since the crawl
started, so a cap that shifts or proxies that die are accounted for.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from scrapy_polite.sandbox import ProxyConfig, SandboxConfig, SiteConfig
from scrapy_polite.settings.config import DEFAULTS

POLITE_DELAY_MEAN = sum(DEFAULTS["POLITE_DELAY"]) / 2


@dataclass
class Event:
    """A control action at *at* seconds after the crawl process started."""

    at: float
    action: str  # "host_rate" or "die"
    target: str | int
    value: float | None = None


@dataclass
class Scenario:
    """One row of the matrix."""

    name: str
    description: str
    config: SandboxConfig
    time_limit: float
    page_budget: int
    limit_note: str
    #: (event times after crawl start) -> pages/s allowed from time t (seconds after crawl start)
    limit_steps: list[tuple[float, float]]
    spider: str = "catalogue"
    users: int = 0
    via_gateway: bool = False
    events: list[Event] = field(default_factory=list)
    polite_settings: dict[str, Any] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    #: For the package: the first this many proxies are its pool (tier 0), the rest its expensive tier.
    cheap_tier: int | None = None
    #: A zoo scenario (``zoo.py``): its limits come from ``SiteConfig.limiter`` specs.
    zoo: bool = False
    #: Zoo checks: the most refusals (rate-limit and overload answers) a good client may draw, as a share.
    refusal_cap: float = 0.02
    #: ``limit_steps`` count from the site's first request (a limiter's schedule), not from the crawl's start.
    steps_from_first: bool = False

    def phased(self, shift: float) -> Scenario:
        """This scenario with its timed events, and the limits they set, *shift* seconds later."""
        if not shift or not self.events:
            return self
        return replace(self, events=[replace(e, at=e.at + shift) for e in self.events],
                       limit_steps=[(t + shift if t > 0 else t, v) for t, v in self.limit_steps])


def _site(**kw: Any) -> SiteConfig:
    """A site that, as nginx's ``limit_req`` does, refuses at once (its 429s skip the upstream's latency)."""
    kw.setdefault("name", "a")
    kw.setdefault("refuse_at_once", True)
    return SiteConfig(**kw)


def _catalogue_pages(pages: int, per_list: int = 20) -> int:
    """Successful pages a full crawl of a *pages*-item catalogue needs (index + lists + items)."""
    return 1 + -(-pages // per_list) + pages


def build(quick: bool) -> list[Scenario]:
    """The scenario list, shorter when *quick*."""
    q = quick
    out: list[Scenario] = []

    n = 8
    pages = 100 if q else 480
    out.append(Scenario(
        "per-ip", "1 req/s and 1 in flight per IP, Retry-After 2 s, 8 proxies",
        SandboxConfig(sites=[_site(pages=pages, per_ip_rate=1.0, per_ip_burst=1, per_ip_max_inflight=1,
                                   retry_after=2)], proxies=ProxyConfig(count=n, gateway=False)),
        time_limit=25 if q else 120, page_budget=_catalogue_pages(pages),
        limit_note=f"{n} proxies x 1 req/s", limit_steps=[(0.0, n * 1.0)],
    ))

    pages = 45 if q else 240
    out.append(Scenario(
        "host-cap", "3 req/s for the whole host (burst 1), 8 proxies",
        SandboxConfig(sites=[_site(pages=pages, host_rate=3.0, host_burst=1, retry_after=2)],
                      proxies=ProxyConfig(count=n, gateway=False)),
        time_limit=25 if q else 120, page_budget=_catalogue_pages(pages),
        limit_note="host_rate 3 req/s", limit_steps=[(0.0, 3.0)],
    ))

    pages = 150 if q else 720
    out.append(Scenario(
        "host-cap-fast", "10 req/s for the whole host (burst 1), above what POLITE_DELAY's spacing sends, "
                         "latency 40-160 ms, 8 proxies",
        SandboxConfig(sites=[_site(pages=pages, host_rate=10.0, host_burst=1, latency=[0.04, 0.16], retry_after=2)],
                      proxies=ProxyConfig(count=n, gateway=False)),
        time_limit=25 if q else 120, page_budget=_catalogue_pages(pages),
        limit_note="host_rate 10 req/s", limit_steps=[(0.0, 10.0)],
    ))

    drop, rise, end = (8.0, 16.0, 40.0) if q else (20.0, 40.0, 90.0)
    out.append(Scenario(
        "shifting", f"host cap 6 -> 2 req/s at {drop:g} s -> 6 at {rise:g} s (set by the runner)",
        SandboxConfig(sites=[_site(pages=600, host_rate=6.0, host_burst=1, retry_after=2)],
                      proxies=ProxyConfig(count=n, gateway=False)),
        time_limit=end, page_budget=_catalogue_pages(600),
        limit_note="the cap in force (6, 2, 6 req/s)",
        limit_steps=[(0.0, 6.0), (drop, 2.0), (rise, 6.0)],
        events=[Event(drop, "host_rate", "a", 2.0), Event(rise, "host_rate", "a", 6.0)],
    ))

    users = 20 if q else 60
    out.append(Scenario(
        "gateway", f"{users} login flows (login, account, orders) via a sticky gateway; "
                   "sessions bound to the exit IP; 2 req/s per IP",
        SandboxConfig(sites=[_site(per_ip_rate=2.0, per_ip_burst=2, latency=[0.01, 0.05])],
                      proxies=ProxyConfig(count=4, gateway=True, gateway_pool=16)),
        time_limit=25 if q else 90, page_budget=3 * users,
        limit_note="10 gateway sessions x 2 req/s", limit_steps=[(0.0, 20.0)],
        spider="accounts", users=users, via_gateway=True,
    ))

    scale = 1 if q else 3
    mh = [("fast", 2.0, 80 * scale), ("medium", 1.0, 40 * scale), ("slow", 0.5, 20 * scale)]
    # The crawl cannot end before its slowest host: pages over the time the limits allow.
    allowed = max(_catalogue_pages(p) / (n * r) for _, r, p in mh)
    out.append(Scenario(
        "multi-host", "3 sites at 2, 1 and 0.5 req/s per IP (Retry-After 2/2/4 s), latency 40-160 ms, 8 proxies",
        SandboxConfig(sites=[_site(name=nm, pages=p, per_ip_rate=r, per_ip_burst=1, latency=[0.04, 0.16],
                                   retry_after=4 if nm == "slow" else 2) for nm, r, p in mh],
                      proxies=ProxyConfig(count=n, gateway=False)),
        time_limit=25 if q else 120, page_budget=sum(_catalogue_pages(p) for _, _, p in mh),
        limit_note=f"every site's pages over the {allowed:.1f} s its per-IP limit needs (8 proxies x 2, 1, 0.5 req/s)",
        limit_steps=[(0.0, sum(_catalogue_pages(p) for _, _, p in mh) / allowed)],
    ))

    pages = 60 if q else 300
    out.append(Scenario(
        "both-bind", "1 req/s per IP and 3 req/s for the host at once, latency 40-160 ms, 4 proxies",
        SandboxConfig(sites=[_site(pages=pages, per_ip_rate=1.0, per_ip_burst=1, host_rate=3.0, host_burst=1,
                                   latency=[0.04, 0.16], retry_after=2)],
                      proxies=ProxyConfig(count=4, gateway=False)),
        time_limit=30 if q else 120, page_budget=_catalogue_pages(pages),
        limit_note="min(4 proxies x 1 req/s, host 3 req/s)", limit_steps=[(0.0, 3.0)],
    ))

    pages = 100 if q else 480
    out.append(Scenario(
        "bursty", "1 req/s per IP with a burst of 3 (nginx limit_req burst=2 nodelay), latency 40-160 ms, 8 proxies",
        SandboxConfig(sites=[_site(pages=pages, per_ip_rate=1.0, per_ip_burst=3, per_ip_max_inflight=1,
                                   latency=[0.04, 0.16], retry_after=2)], proxies=ProxyConfig(count=n, gateway=False)),
        time_limit=25 if q else 120, page_budget=_catalogue_pages(pages),
        limit_note=f"{n} proxies x 1 req/s (the burst of 3 per IP not counted)", limit_steps=[(0.0, n * 1.0)],
    ))

    n9, dead_at = 9, (6.0 if q else 30.0)
    pages = 120 if q else 600
    out.append(Scenario(
        "proxies-die", f"per-IP 1 req/s, 9 proxies; 3 of them die at {dead_at:g} s",
        SandboxConfig(sites=[_site(pages=pages, per_ip_rate=1.0, per_ip_burst=1, per_ip_max_inflight=1,
                                   retry_after=2)], proxies=ProxyConfig(count=n9, gateway=False)),
        time_limit=25 if q else 120, page_budget=_catalogue_pages(pages),
        limit_note="9, then 6 live proxies x 1 req/s", limit_steps=[(0.0, 9.0), (dead_at, 6.0)],
        events=[Event(dead_at, "die", i) for i in (6, 7, 8)],
    ))

    pages = 100 if q else 480
    out.append(Scenario(
        "unlimited", "no limits; 8 proxies (the limit is what POLITE_DELAY's spacing allows)",
        SandboxConfig(sites=[_site(pages=pages)], proxies=ProxyConfig(count=n, gateway=False)),
        time_limit=25 if q else 120, page_budget=_catalogue_pages(pages),
        limit_note=f"8 proxies / mean POLITE_DELAY {POLITE_DELAY_MEAN:g} s",
        limit_steps=[(0.0, n / POLITE_DELAY_MEAN)],
    ))
    return out


def overhead_scenario(quick: bool) -> Scenario:
    """An unlimited site for CPU cost per request; POLITE_DELAY=(0, 0), a wide host cap."""
    pages = 1000 if quick else 4000
    return Scenario(
        "overhead", "unlimited site, POLITE_DELAY=(0, 0), POLITE_HOST_CONCURRENCY=64; CPU per 1,000 requests",
        SandboxConfig(sites=[_site(pages=pages)], proxies=ProxyConfig(count=8, gateway=False)),
        time_limit=60 if quick else 180, page_budget=_catalogue_pages(pages),
        limit_note="n/a", limit_steps=[(0.0, float("inf"))],
        polite_settings={"POLITE_DELAY": (0, 0), "POLITE_HOST_CONCURRENCY": 64},
        settings={"LOG_LEVEL": "WARNING"},
    )


def limit_at(steps: list[tuple[float, float]], t: float) -> float:
    """The physical limit in force *t* seconds after the crawl started."""
    value = steps[0][1]
    for at, v in steps:
        if t >= at:
            value = v
    return value
