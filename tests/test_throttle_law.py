"""The throttle's law, through the real gate, against the sandbox's limiter zoo on a fake clock.

Each test states what a site (or its operator) would see: pages, refusals, requests that came
back inside a Retry-After, latency. None reads a tuned constant or a private field.
"""

from __future__ import annotations

import statistics

import pytest
from test_units import config, granted, make_gate
from zoo_sim import crawl

from scrapy_polite.downloader.ratelimit_headers import Quota, read
from scrapy_polite.sandbox.limiters import ZOO
from scrapy_polite.throttle.policy import ThrottlePolicy
from scrapy_polite.throttle.quota import Scope

pytestmark = pytest.mark.once

#: Kinds whose refusals a rate controller can keep rare (every kind but the rate-independent one).
RATE_KINDS = [name for name in ZOO if name != "rate-independent"]


@pytest.mark.parametrize("name", RATE_KINDS)
@pytest.mark.parametrize("adaptive", [False, True])
def test_no_limiter_kind_sees_a_request_inside_its_retry_after_or_two_at_once_per_ip(name: str, adaptive: bool) -> None:
    r = crawl(ZOO[name], 90.0, adaptive=adaptive)
    assert r.inside_retry_after == 0
    assert r.most_in_flight_per_ip == 1
    assert r.ok > 0.3 * r.capacity * r.seconds, (name, r.efficiency)  # a crawl, not a stall
    # Refusals stay a small share: a burst finding the limit, then a probe now and then.
    assert r.refused_share < 0.12, (name, r.refused_share)


@pytest.mark.parametrize("name", ["bucket-ip", "bucket-ip-burst", "sliding-log", "nginx-limit-req", "no-retry-after"])
def test_adaptive_mode_gets_more_pages_than_the_defaults_where_the_band_is_slower_than_the_site(name: str) -> None:
    # The median of seven crawls (the gate's jitter drawn from seven seeds): where 429s come without a
    # Retry-After, each IP's doubling backoff makes a crawl's course depend much on the jitter drawn.
    def pages(adaptive: bool) -> float:
        return statistics.median(crawl(ZOO[name], 90.0, adaptive=adaptive, seed=seed).ok for seed in range(1, 8))

    defaults, adaptive = pages(False), pages(True)
    assert adaptive > 1.05 * defaults, (defaults, adaptive)


def test_a_concurrency_cap_answering_503_slows_the_pool_instead_of_speeding_it_up() -> None:
    # 3 requests at a time host-wide, 0.5 s each, 503 without Retry-After beyond: each 503 is an
    # overload answer, never a clean one.
    r = crawl(ZOO["concurrency-cap"], 90.0, adaptive=True)
    assert r.overloaded < 0.15 * r.requests
    assert r.efficiency > 0.6


def test_a_site_that_slows_down_above_its_limit_is_kept_near_its_unloaded_latency() -> None:
    # Above 4 pages/s the site queues (up to 2 s) instead of refusing: the latency is the signal.
    # It serves one page per 0.25 s in turn, so each request queued ahead adds 0.25 s to the
    # unloaded 0.05 s: the pool keeps fewer than two waiting there (saturated: eight, 2 s).
    spec = ZOO["slowdown"]
    r = crawl(spec, 90.0, adaptive=True)
    assert statistics.median(r.latencies) < 0.05 + 2 * 0.25
    assert r.efficiency > 0.85


def test_429s_that_do_not_depend_on_the_rate_stop_cutting_it() -> None:
    # Every URL's first request is refused whatever the rate: slowing down changes nothing.
    spec = ZOO["rate-independent"]
    r = crawl(spec, 90.0, adaptive=True, paths=True)
    assert r.ok > 0.3 * r.capacity * r.seconds  # not cut to a crawl of one page now and then
    assert r.inside_retry_after == 0


def test_a_limit_that_falls_is_not_taken_for_429s_that_do_not_depend_on_the_rate() -> None:
    # A host limit that falls from 8 to 1 req/s. Each 429's host pause keeps the share refused the
    # same at every rate above the new limit, as rate-independent 429s would; but the rate the site
    # answers cleanly holds at its limit instead of falling with the rate, so the cuts go on, and
    # no IP is sent back into the host's Retry-After as if the 429s were about the URL.
    spec = {"kind": "shifting", "schedule": [[0, 3.0], [30, 8.0], [70, 1.0]]}
    r = crawl(spec, 120.0, adaptive=True)
    assert r.refused_share < 0.12, r.refused_share
    assert r.inside_retry_after == 0


def test_a_stated_quota_is_paced_to_without_a_refusal() -> None:
    for name in ("ratelimit-headers", "ratelimit-headers-x"):
        r = crawl(ZOO[name], 90.0, adaptive=True)
        assert r.rate_limited == 0, name
        assert r.efficiency > 0.6, (name, r.efficiency)


def test_a_window_that_resets_for_every_ip_at_once_pauses_the_host_until_the_reset() -> None:
    spec = {"kind": "fixed_window", "limit": 20, "window": 5.0, "scope": "host"}
    for adaptive in (False, True):
        r = crawl(spec, 90.0, adaptive=adaptive)
        assert r.inside_retry_after == 0
        assert r.refused_share < 0.1, r.refused_share
        assert r.efficiency > 0.6, r.efficiency


def test_a_penalty_for_overshooting_is_probed_rarely() -> None:
    # Over its rate an IP is refused for 20 s: each probe past the limit idles one IP that long.
    r = crawl(ZOO["penalty-box"], 120.0, adaptive=True)
    assert r.rate_limited <= 12
    assert r.inside_retry_after == 0


def test_a_host_closed_after_an_overshoot_is_waited_out_by_every_ip() -> None:
    # Past 4 req/s the whole host is closed for 15 s, and each request inside the closure prolongs
    # it: once a request sent at the rate a cut set is refused inside another IP's Retry-After, the
    # host waits, instead of cutting at each refusal and sending into the closure.
    spec = {"kind": "penalty_box", "rate": 4.0, "burst": 1, "penalty": 15.0, "scope": "host"}
    r = crawl(spec, 120.0, adaptive=True)
    assert r.rate_limited <= 10, r.rate_limited
    assert r.efficiency > 0.45, r.efficiency


def test_the_first_requests_refused_together_are_no_probe_to_hold_back_from() -> None:
    # Three IPs' first requests reach a host bucket of 4 req/s at once, and two are refused: no
    # host rate was in force when they went, so the cut that follows climbs back without the hold
    # a failed probe earns, and the crawl reaches the host's rate.
    spec = {"kind": "token_bucket", "rate": 4.0, "burst": 1, "scope": "host"}
    r = crawl(spec, 120.0, adaptive=True, ips=3)
    assert r.efficiency > 0.8, r.efficiency


def test_a_retry_after_longer_than_the_cap_keeps_the_ip_out_until_then() -> None:
    # The site asks for 600 s, more than POLITE_RETRY_AFTER_MAX: the request goes again sooner, through
    # another IP; the refused IP itself waits all of it.
    spec = {"kind": "penalty_box", "rate": 1.0, "burst": 1, "penalty": 600.0}
    r = crawl(spec, 60.0, adaptive=True, POLITE_RETRY_AFTER_MAX=30)
    assert r.inside_retry_after == 0
    assert r.ok > 0


# -- the quota headers ---------------------------------------------------------------------------


def headers(**values: str):
    low = {k.lower().replace("_", "-"): v for k, v in values.items()}
    return lambda name: low.get(name.lower())


def test_the_ietf_fields_give_what_is_left_over_the_time_left() -> None:
    q = read(headers(RateLimit_Policy='"default";q=100;w=60', RateLimit='"default";r=30;t=15'))
    assert q == Quota(remaining=30, reset=15, limit=100, window=60)
    assert q.pace() == 2.0
    spent = read(headers(RateLimit='"default";r=0;t=4'))
    assert spent is not None and spent.exhausted() and spent.reset == 4


def test_x_ratelimit_reset_is_read_as_seconds_or_as_a_unix_time() -> None:
    seconds = read(headers(X_RateLimit_Limit="10", X_RateLimit_Remaining="5", X_RateLimit_Reset="10"))
    assert seconds is not None and seconds.pace() == 0.5
    epoch = read(headers(X_RateLimit_Remaining="5", X_RateLimit_Reset="1800000010"), wall=lambda: 1.8e9)
    assert epoch is not None and epoch.reset == pytest.approx(10)
    assert read(headers(X_RateLimit_Remaining="soon")) is None
    assert read(headers()) is None


def test_a_quota_counted_down_by_every_ip_in_turn_is_the_hosts() -> None:
    shared, own = Scope(), Scope()
    for i in range(12):
        shared.observe(f"ip{i % 4}", 100 - i)  # one counter: each answer one below the last
        own.observe(f"ip{i % 4}", 100 - i // 4)  # a counter per IP: the IPs show the same count
    assert shared.host_wide and not own.host_wide


def test_no_spacing_at_all_is_cut_from_what_the_pool_can_send() -> None:
    # POLITE_DELAY = (0, 0) and no adaptive mode: no rate to cut from but one request per IP per
    # round trip, and no band to stretch; after the cuts each IP is spaced for its share of the rate.
    r = crawl(ZOO["bucket-host"], 60.0, adaptive=False, POLITE_DELAY=(0.0, 0.0))
    assert r.rate_limited > 0
    assert r.ok > 0.2 * r.capacity * r.seconds and r.refused_share < 0.25, (r.ok, r.refused_share)


@pytest.mark.parametrize("name", ["bucket-ip", "bucket-host", "both"])
def test_four_processes_sharing_the_state_crawl_as_fast_as_one_and_are_refused_as_rarely(name: str) -> None:
    # Each process has its own throttle and requests, one gate stands for the shared state: a cut
    # one of them makes is the fleet's, made once, and the others hold as long after it.
    def median(fleet: int) -> tuple[float, float]:
        runs = [crawl(ZOO[name], 90.0, fleet=fleet, seed=seed) for seed in (1, 2, 3)]
        return statistics.median(r.ok for r in runs), statistics.median(r.rate_limited for r in runs)

    (one, one_refused), (four, four_refused) = median(1), median(4)
    assert four >= 0.9 * one, (one, four)
    assert four_refused <= 1.5 * one_refused + 1, (one_refused, four_refused)


def test_a_new_hosts_first_requests_are_spread_not_sent_in_one_burst() -> None:
    # Eight IPs free at once and eight requests for a host nobody has answered yet: a host-wide
    # limit refuses a burst, so the host's limits are in force before its first request.
    gate, ft = make_gate(n=8, host_concurrency=8, delay=(0.8, 1.6))
    ThrottlePolicy(config(POLITE_ADAPTIVE=True, POLITE_DELAY=(0.8, 1.6), POLITE_HOST_CONCURRENCY=8), gate,
                   clock=ft.clock)
    leases = granted([gate.acquire("a.test") for _ in range(8)])
    assert len(leases) == 1
    ft.advance(2.0)
    times = [lease.granted_at for lease in leases]
    assert len(times) == 8
    assert min(b - a for a, b in zip(times, times[1:])) > 0.05, times


@pytest.mark.parametrize("spec", [
    {"kind": "fixed_window", "limit": 20, "window": 10.0, "scope": "host"},
    {"kind": "penalty_box", "rate": 4.0, "burst": 1, "penalty": 15.0, "scope": "host"},
])
def test_a_host_found_closed_for_every_ip_once_is_closed_for_every_ip_at_its_next_long_retry_after(
    spec: dict[str, object],
) -> None:
    # A long Retry-After binds the refused IP alone until another IP's refusal shows the closure is
    # the host's: once per crawl, one request goes inside it. After that the host's long
    # Retry-Afters are the host's from their first refusal.
    for adaptive in (False, True):
        assert crawl(spec, 120.0, adaptive=adaptive).inside_retry_after <= 1, adaptive
