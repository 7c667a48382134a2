"""The exception classifier, the evidence tracker, and the stall of a lease in both gates."""

from __future__ import annotations

import asyncio

import pytest
import scrapy.exceptions
from test_redis_gate import admin, on_asyncio, settle, stop
from test_redis_gate import gate as redis_gate
from test_redis_gate import granted as redis_granted
from test_units import config, granted, make_gate
from twisted.internet.error import ConnectionLost, ConnectionRefusedError, DNSLookupError, TimeoutError
from twisted.web.client import ResponseFailed, ResponseNeverReceived

from scrapy_polite.downloader.failures import (
    AMBIGUOUS,
    ENDPOINT,
    HOST,
    OTHER,
    PAIR,
    PROXY,
    PROXY_RATE,
    EvidenceTracker,
    TunnelError,
    classify,
    tunnel_status,
)
from scrapy_polite.gate.base import GateListeners
from scrapy_polite.throttle.policy import ThrottlePolicy


def tunnel(status: int, reason: bytes, port: int) -> Exception:
    # Scrapy's own wording (http11.py, 2.13 to 2.19).
    extra = {"status": status, "reason": reason}
    return TunnelError(f"Could not open CONNECT tunnel with proxy 127.0.0.1:{port} [{extra!r}]")


# -- classifier -------------------------------------------------------------


@pytest.mark.once
def test_a_407_on_connect_to_a_port_containing_429_is_a_proxy_failure_not_a_rate_limit() -> None:
    exc = tunnel(407, b"Proxy Authentication Required", 4290)
    assert tunnel_status(exc) == 407
    assert classify(exc).kind == PROXY and classify(exc).status == 407
    assert classify(tunnel(429, b"Too Many Requests", 8080)).kind == PROXY_RATE
    assert classify(tunnel(502, b"Bad Gateway", 14290)).kind == PROXY
    # The proxy closed before a status line: no status, still the proxy's failure.
    garbled = TunnelError("Could not open CONNECT tunnel with proxy 127.0.0.1:4290 [b'garbage']")
    assert tunnel_status(garbled) is None and classify(garbled).kind == PROXY


def test_certain_unclear_and_other_exceptions() -> None:
    for exc in (ConnectionRefusedError(), DNSLookupError()):
        assert classify(exc).kind == PROXY, exc
    for exc in (TimeoutError("Getting http://x took longer than 2 seconds."), ConnectionLost(),
                ResponseNeverReceived([]), ResponseFailed([])):
        assert classify(exc).kind == AMBIGUOUS, exc
    # Scrapy >= 2.14 wraps them in its own classes.
    for name, kind in (("DownloadConnectionRefusedError", PROXY), ("CannotResolveHostError", PROXY),
                       ("DownloadTimeoutError", AMBIGUOUS), ("DownloadFailedError", AMBIGUOUS),
                       ("ResponseDataLossError", AMBIGUOUS)):
        cls = getattr(scrapy.exceptions, name, None)
        if cls is not None:
            assert classify(cls("x")).kind == kind, name
    assert classify(ValueError("bad url")).kind == OTHER


# -- evidence tracker -------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def tracker(**kw) -> tuple[EvidenceTracker, Clock]:
    clock = Clock()
    return EvidenceTracker(clock=clock, **kw), clock


@pytest.mark.once
def test_one_hanging_url_blames_the_pair_with_a_growing_streak() -> None:
    t, clock = tracker()
    assert t.failure("e1", "a").blame == PAIR
    clock.now += 1
    v = t.failure("e1", "a")
    assert (v.blame, v.streak) == (PAIR, 2)
    t.success("e1", "a")
    assert t.failure("e1", "a").streak == 1  # an answer resets the pair


@pytest.mark.once
def test_the_endpoint_is_blamed_across_hosts_or_while_others_get_answers() -> None:
    t, clock = tracker()
    assert t.failure("e1", "a").blame == PAIR
    assert t.failure("e1", "b").blame == ENDPOINT  # two hosts, one endpoint
    t, clock = tracker()
    t.failure("e1", "a")
    t.failure("e1", "a")
    clock.now += 1
    t.success("e2", "a")  # the host answers another endpoint
    v = t.failure("e1", "a")
    assert (v.blame, v.streak) == (ENDPOINT, 3)
    # Three in a row with nobody else answered: still only the pair.
    t, clock = tracker()
    assert [t.failure("e1", "a").blame for _ in range(4)] == [PAIR] * 4


@pytest.mark.once
def test_the_host_is_blamed_when_several_endpoints_fail_for_it_and_parked_when_it_stays_silent() -> None:
    t, clock = tracker(window=10.0, host_endpoints=3)
    assert [t.failure(e, "a").blame for e in ("e1", "e2")] == [PAIR, PAIR]
    v = t.failure("e3", "a")
    assert (v.blame, v.park) == (HOST, False)
    for e in ("e4", "e5"):
        t.failure(e, "a")
    v = t.failure("e6", "a")
    assert (v.blame, v.park) == (HOST, True)  # silent since the last verdict: park
    t.success("e7", "a")
    for e in ("e1", "e2"):
        t.failure(e, "a")
    assert t.failure("e3", "a").park is False  # it answered in between: slow only
    # Outside the window, failures do not add up.
    t, clock = tracker(window=10.0, host_endpoints=3)
    for e in ("e1", "e2", "e3"):
        clock.now += 6
        assert t.failure(e, "a").blame == PAIR


@pytest.mark.once
def test_a_few_urls_that_hang_wherever_they_go_blame_their_host_once_and_never_park_it() -> None:
    t, clock = tracker(window=10.0, host_endpoints=3)
    blames = []
    for attempt in range(3):  # three hanging URLs, each tried through three endpoints
        for n, url in enumerate(("u1", "u2", "u3")):
            blames.append(t.failure(f"e{attempt * 3 + n}", "a", url))
            clock.now += 0.5
    assert [v.blame for v in blames].count(HOST) == 1
    assert not any(v.park for v in blames)


@pytest.mark.once
def test_the_tracker_memory_is_bounded() -> None:
    t, clock = tracker(max_keys=50)
    for i in range(1000):
        t.failure(f"e{i % 300}", f"h{i}")
        clock.now += 0.01
    assert len(t) <= 150
    t2, _ = tracker()
    for i in range(100):
        t2.success(f"e{i}", f"h{i}")
    assert len(t2) == 0  # answers alone leave nothing behind


@pytest.mark.once
def test_a_host_blamed_by_timeouts_is_slowed_once_per_round_then_parked() -> None:
    cfg = config(POLITE_HOST_CONCURRENCY=4, POLITE_PARK_TIME=(30, 600))
    gate, ft = make_gate(n=3, host_concurrency=4)
    policy = ThrottlePolicy(cfg, gate, clock=ft.clock)
    policy.unanswered("a", park=False)
    slowed = gate.host("a").interval
    assert slowed > 0  # a host rate below what the pool sent
    policy.unanswered("a", park=False)
    assert gate.host("a").interval == slowed  # the same overload: cut once
    assert "parked 30 s" in policy.unanswered("a", park=True)
    assert gate.host("a").paused_until == pytest.approx(ft.now + 30)


# -- stall ---------------------------------------------------------------------


@pytest.mark.once
def test_a_stalled_lease_gives_its_host_slot_back_once_and_keeps_its_endpoint() -> None:
    stalled = []
    gate, ft = make_gate(n=3, host_concurrency=1, delay=(0.0, 0.0), stall_timeout=2.0, listeners=GateListeners(on_stalled=stalled.append))
    leases = granted([gate.acquire("a"), gate.acquire("a")])
    assert len(leases) == 1
    first = leases[0]
    ft.advance(1.9)
    assert len(leases) == 1
    ft.advance(0.2)
    assert stalled == [first] and first.stalled
    assert len(leases) == 2 and leases[1].endpoint.key != first.endpoint.key  # slot back, endpoint still busy
    assert gate.endpoints[first.endpoint.key].inflight == 1
    assert gate.stall(first) is False  # exactly once
    gate.release(first)
    assert gate.host("a").inflight == 1  # the release freed the endpoint only
    assert gate.endpoints[first.endpoint.key].inflight == 0
    gate.release(leases[1])
    assert gate.host("a").inflight == 0
    ft.advance(5)
    assert stalled == [first]  # a released lease never stalls


@pytest.mark.once
def test_stall_timeout_zero_disables_it_and_the_setting_is_validated() -> None:
    gate, ft = make_gate(n=2, host_concurrency=1, stall_timeout=0.0)
    leases = granted([gate.acquire("a"), gate.acquire("a")])
    ft.advance(1000)
    assert len(leases) == 1 and not leases[0].stalled
    assert config().stall_timeout == 30.0 and config().timeout_retry_times == 2
    with pytest.raises(Exception, match="POLITE_STALL_TIMEOUT"):
        config(POLITE_STALL_TIMEOUT=-1)
    with pytest.raises(Exception, match="POLITE_TIMEOUT_RETRY_TIMES"):
        config(POLITE_TIMEOUT_RETRY_TIMES="x")


@pytest.mark.once
@on_asyncio
async def test_a_stalled_lease_gives_its_host_slot_back_fleet_wide_in_redis(redis_server) -> None:
    stalled = []
    a = redis_gate(redis_server.url, n=2, host_concurrency=1, stall_timeout=0.5, listeners=GateListeners(on_stalled=stalled.append))
    b = redis_gate(redis_server.url, n=2, first=2, host_concurrency=1)
    try:
        first, _ = await redis_granted(a.acquire("h"))
        other = b.acquire("h")
        await asyncio.sleep(0.3)
        assert not other.called  # the host's one slot is taken, fleet-wide
        second, waited = await redis_granted(other)
        assert stalled == [first] and first.stalled and 0.1 < waited < 1.0
        # Renewals (lease TTL 1.5 s) must not bring the stalled lease back into the host's set.
        await asyncio.sleep(1.2)
        r = admin(redis_server.url)
        assert r.zrange("t:hl:h", 0, -1) == [second.token]
        assert r.zcard(f"t:el:{a._ids[first.endpoint.key]}") == 1  # its endpoint stays held
        assert a.stall(first) is False
        a.release(first)
        await settle()
        assert r.zcard(f"t:el:{a._ids[first.endpoint.key]}") == 0
        assert r.zrange("t:hl:h", 0, -1) == [second.token]  # the release freed the endpoint only
        assert a.host("h").inflight == 0
    finally:
        await stop(a, b)
