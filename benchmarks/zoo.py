"""The limiter zoo's scenarios: one per kind of rate limiter real sites use, plus many hosts and a slow upstream.

Every site's limits come from a ``scrapy_polite.sandbox.limiters`` spec (``SiteConfig.limiter``);
the physical limit (``limit_steps``, the 1.0 line) is the limiter's own capacity formula for the
scenario's proxies. Each is sized so a crawl at that limit takes about ``SECONDS`` (15 s quick,
60 s full) and is cut at ``TIME_LIMIT``. ``python benchmarks/run.py --zoo [--quick]`` runs them.
"""

from __future__ import annotations

from typing import Any

from scenarios import Scenario, _catalogue_pages, _site

from scrapy_polite.sandbox import ProxyConfig, SandboxConfig
from scrapy_polite.sandbox.limiters import ZOO, build

PROXIES = 8
SECONDS = {True: 15.0, False: 60.0}
TIME_LIMIT = {True: 25.0, False: 90.0}
PER_LIST = 20
LATENCY = [0.04, 0.16]


def pages_for(capacity: float, seconds: float) -> int:
    """Catalogue size whose crawl (index + lists + items) takes *seconds* at *capacity* pages/s."""
    target = capacity * seconds
    return max(5, int((target - 1) * PER_LIST / (PER_LIST + 1)))


def _one(name: str, what: str, spec: dict[str, Any], q: bool, note: str, **kw: Any) -> Scenario:
    """A one-site zoo scenario: *spec* on a catalogue sized for its capacity with 8 proxies.

    *kw*: ``latency`` (the site's), ``seconds`` (at the limit), ``in_flight_cap`` (pages/s one request
    in flight per proxy allows), and Scenario fields.
    """
    steps = build(spec).steps(PROXIES)
    latency, span = kw.pop("latency", LATENCY), kw.pop("seconds", SECONDS[q])
    cap = min(steps[0][1], kw.pop("in_flight_cap", float("inf")))
    mean_cap = _mean(steps, span) if len(steps) > 1 else cap
    pages = pages_for(mean_cap, span)
    site = _site(pages=pages, limiter=spec, latency=latency, strikes_to_block=None)
    return Scenario(
        f"zoo-{name}", what, SandboxConfig(sites=[site], proxies=ProxyConfig(count=PROXIES, gateway=False)),
        time_limit=TIME_LIMIT[q] + (span - SECONDS[q]), page_budget=_catalogue_pages(pages),
        limit_note=note, limit_steps=steps if len(steps) > 1 else [(0.0, cap)], zoo=True, **kw)


def _mean(steps: list[tuple[float, float]], span: float) -> float:
    cuts = [t for t, _ in steps] + [span]
    return sum(v * (cuts[i + 1] - t) for i, (t, v) in enumerate(steps) if t < span) / span


def build_zoo(quick: bool) -> list[Scenario]:
    """The zoo, shorter when *quick*."""
    q, n = quick, PROXIES
    out = [
        _one("bucket-ip", "token bucket per IP, 1 req/s, burst 1, 429 + Retry-After", ZOO["bucket-ip"], q,
             f"{n} proxies x 1 req/s"),
        _one("bucket-ip-burst", "token bucket per IP, 1 req/s, burst 4", ZOO["bucket-ip-burst"], q,
             f"{n} proxies x 1 req/s (the burst not counted)"),
        _one("bucket-host", "token bucket for the host, 4 req/s, burst 1", ZOO["bucket-host"], q, "host 4 req/s"),
        _one("both", "per-IP 1 req/s and host 3 req/s at once (all_of)", ZOO["both"], q,
             f"min({n} x 1, 3) req/s"),
    ]
    drop, rise = (6.0, 12.0) if q else (20.0, 40.0)
    shifting = {"kind": "shifting", "schedule": [[0, 6.0], [drop, 2.0], [rise, 6.0]]}
    out.append(_one("shifting", f"host bucket 6 -> 2 req/s at {drop:g} s -> 6 at {rise:g} s (from the first "
                                "request)", shifting, q, "the rate in force (6, 2, 6 req/s)",
                    seconds=SECONDS[q] + 5, refusal_cap=0.05, steps_from_first=True))
    out += [
        _one("fixed-window", "5 requests per clock-aligned 5 s window per IP; Retry-After = time to the reset",
             ZOO["fixed-window"], q, f"{n} proxies x 5 / 5 s"),
        _one("sliding-log", "3 requests in any 3 s per IP; Retry-After = until the oldest leaves",
             ZOO["sliding-log"], q, f"{n} proxies x 3 / 3 s"),
        _one("concurrency-cap", "at most 3 in flight for the host, 0.4-0.6 s pages; 503 without Retry-After",
             ZOO["concurrency-cap"], q, "3 in flight / 0.5 s mean latency", latency=[0.4, 0.6]),
        _one("nginx-limit-req", "nginx limit_req 1 r/s per IP, burst 3, no nodelay: over-rate requests held "
                                "to their slot, 503 past the burst", {**ZOO["nginx-limit-req"], "burst": 3}, q,
             f"{n} proxies x 1 req/s"),
        _one("slowdown", "no refusals under 4 req/s for the host: latency grows with the excess; past 2 s of "
                         "queue, 503 at once", ZOO["slowdown"], q, "host 4 req/s"),
        _one("no-retry-after", "token bucket per IP, 1 req/s, 429 without Retry-After", ZOO["no-retry-after"], q,
             f"{n} proxies x 1 req/s"),
        _one("ratelimit-headers", "quota 10 per 10 s per IP, stated with RateLimit-Policy / RateLimit; 429 past it",
             ZOO["ratelimit-headers"], q, f"{n} proxies x 10 / 10 s"),
        _one("ratelimit-x", "quota 5 per 5 s per IP, stated with X-RateLimit-* (Reset as an epoch); 429 past it",
             {"kind": "ratelimit_headers", "quota": 5, "window": 5.0, "style": "x", "reset": "epoch"}, q,
             f"{n} proxies x 5 / 5 s"),
        _one("rate-independent", "every path's first request answered 429 (Retry-After 1) at any rate; per-IP "
                                 "2 req/s behind", ZOO["rate-independent"], q,
             f"min({n} proxies / 1 s Retry-After per page, {n} x 2 req/s)"),
        _one("penalty-box", "per IP 1 req/s; an IP over it is refused for 20 s, restarted by every request "
                            "inside", ZOO["penalty-box"], q, f"{n} proxies x 1 req/s"),
        _one("slow-upstream", "1-3 s pages behind a host bucket of 2 req/s", {"kind": "token_bucket", "rate": 2.0,
                                                                              "scope": "host"}, q,
             f"min(host 2 req/s, {n} proxies / 2 s mean latency)", latency=[1.0, 3.0],
             in_flight_cap=n / 2.0),
        many_hosts(q),
    ]
    return out


#: (site, spec): eleven hosts, eleven different limits.
MANY: list[tuple[str, dict[str, Any]]] = [
    ("h-ip1", {"kind": "token_bucket", "rate": 1.0}),
    ("h-ip05", {"kind": "token_bucket", "rate": 0.5}),
    ("h-ip025", {"kind": "token_bucket", "rate": 0.25, "burst": 2}),
    ("h-host2", {"kind": "token_bucket", "rate": 2.0, "scope": "host"}),
    ("h-host1", {"kind": "token_bucket", "rate": 1.0, "scope": "host"}),
    ("h-window", {"kind": "fixed_window", "limit": 2, "window": 4.0}),
    ("h-log", {"kind": "sliding_log", "limit": 1, "window": 4.0}),
    ("h-nginx", {"kind": "nginx_limit_req", "rate": 0.25, "burst": 2}),
    ("h-noretry", {"kind": "no_retry_after", "rate": 0.25}),
    ("h-quota", {"kind": "ratelimit_headers", "quota": 3, "window": 10.0}),
    ("h-slow", {"kind": "slowdown", "rate": 1.5, "max_delay": 2.0}),
]


def many_hosts(q: bool) -> Scenario:
    """Eleven sites, each its own kind and rate, in one crawl; sized so each needs the same time at its limit."""
    span = SECONDS[q]
    caps = {name: build(spec).capacity(PROXIES) for name, spec in MANY}
    pages = {name: pages_for(caps[name], span) for name, _ in MANY}
    total = sum(_catalogue_pages(p) for p in pages.values())
    allowed = max(_catalogue_pages(pages[name]) / caps[name] for name, _ in MANY)
    sites = [_site(name=name, pages=pages[name], limiter=spec, latency=LATENCY, strikes_to_block=None)
             for name, spec in MANY]
    return Scenario(
        "zoo-many-hosts", f"{len(MANY)} sites with different limiters and rates ({sum(caps.values()):.1f} req/s in all)",
        SandboxConfig(sites=sites, proxies=ProxyConfig(count=PROXIES, gateway=False)),
        time_limit=TIME_LIMIT[q], page_budget=total,
        limit_note=f"every site's pages over the {allowed:.1f} s its limit needs", limit_steps=[(0.0, total / allowed)],
        zoo=True)


def select(scenarios: list[Scenario], only: str, zoo: bool) -> list[Scenario]:
    """``--zoo`` or ``--only zoo`` pick the zoo; ``--only`` names pick those; none: the matrix without the zoo."""
    wanted = {w for w in only.split(",") if w}
    if zoo:
        wanted.add("zoo")
    if not wanted:
        return [s for s in scenarios if not s.zoo]
    return [s for s in scenarios if s.name in wanted or (s.zoo and "zoo" in wanted)]


#: The clients a zoo run compares (``--clients`` overrides).
ZOO_CLIENTS = ("polite-defaults", "polite-adaptive", "scrapy-autothrottle", "reference")


def clients(all_clients: tuple[str, ...], asked: str, scenarios: list[Scenario]) -> list[str]:
    """The clients to run: those asked for; else the zoo's four for a zoo-only run, else all but the reference."""
    if asked:
        return [c for c in all_clients if c in asked.split(",")]
    if scenarios and all(s.zoo for s in scenarios):
        return [c for c in all_clients if c in ZOO_CLIENTS]
    return [c for c in all_clients if c != "reference"]
