"""One contract, both gates: the in-memory gate and the Redis one (a real redis-server) grant alike."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from test_redis_gate import on_asyncio
from twisted.internet.defer import Deferred

from scrapy_polite.errors import SessionEndpointLost, SpiderClosing
from scrapy_polite.gate.base import Gate, GateListeners
from scrapy_polite.gate.state import Lease, Limits
from scrapy_polite.pool.endpoints import Endpoint

pytestmark = pytest.mark.once

HOST = "site.test"


def endpoints(n: int) -> list[Endpoint]:
    return [Endpoint(key=f"http://127.0.0.{i + 2}:8000", url=f"http://127.0.0.{i + 2}:8000", label=f"ep{i}")
            for i in range(n)]


@pytest.fixture(params=["memory", "redis"])
def make(request: pytest.FixtureRequest) -> Any:
    """Build gates of the backend under test; Redis ones are stopped after the test."""
    built: list[Gate] = []
    url = request.getfixturevalue("redis_server").url if request.param == "redis" else None

    def build(n: int = 2, **kw: Any) -> Gate:
        opts: dict[str, Any] = {"host_concurrency": 2, "endpoint_concurrency": 1, "delay": (0.0, 0.0),
                                "backoff": (1.0, 5.0), "max_failures": 3, **kw}
        if url is None:
            from scrapy_polite.gate.local import LocalGate

            g: Gate = LocalGate(endpoints(n), **opts)
        else:
            from scrapy_polite.gate.redis.backend import RedisGate

            g = RedisGate(endpoints(n), url=url, namespace=f"c{len(built)}", lease_ttl=1.5, poll=0.02,
                          **{"idle_keep": 0.2, **opts})
        g.start()
        built.append(g)
        return g

    build.backend = request.param  # type: ignore[attr-defined]
    yield build
    for g in built:
        g.close("test over", SpiderClosing)


async def granted(d: Deferred, timeout: float = 3.0) -> Lease:
    return await asyncio.wait_for(d.asFuture(asyncio.get_running_loop()), timeout)


async def served(g: Gate, session: str) -> Lease:
    """One request of *session*, granted and given back."""
    lease = await granted(g.acquire(HOST, session=session))
    g.release(lease)
    return lease


async def pending(d: Deferred, seconds: float = 0.2) -> bool:
    await asyncio.sleep(seconds)
    return not d.called


async def failure(d: Deferred, timeout: float = 3.0) -> BaseException:
    try:
        await granted(d, timeout)
    except Exception as exc:
        return exc
    raise AssertionError("granted, not failed")


async def stop(g: Gate) -> None:
    d = g.stop()
    if d is not None:
        await d.asFuture(asyncio.get_running_loop())


@on_asyncio
async def test_waiters_are_served_in_order_within_the_host_cap(make: Any) -> None:
    g = make(n=3, host_concurrency=1)
    first, second, third = (g.acquire(HOST) for _ in range(3))
    a = await granted(first)
    assert await pending(second) and not third.called
    g.release(a)
    b = await granted(second)
    assert await pending(third)
    g.release(b)
    g.release(await granted(third))
    await stop(g)


@on_asyncio
async def test_the_host_cap_holds_and_a_release_frees_a_slot(make: Any) -> None:
    g = make(n=4, host_concurrency=2)
    ds = [g.acquire(HOST) for _ in range(3)]
    leases = [await granted(d) for d in ds[:2]]
    assert await pending(ds[2]) and g.host(HOST).inflight == 2
    g.release(leases[0])
    leases.append(await granted(ds[2]))
    assert len({lease.endpoint.key for lease in leases[1:]}) == 2
    for lease in leases[1:]:
        g.release(lease)
    await stop(g)


@on_asyncio
async def test_one_request_per_endpoint(make: Any) -> None:
    g = make(n=2, host_concurrency=5)
    ds = [g.acquire(HOST) for _ in range(3)]
    a, b = await granted(ds[0]), await granted(ds[1])
    assert a.endpoint.key != b.endpoint.key
    assert await pending(ds[2])
    g.release(b)
    assert (await granted(ds[2])).endpoint.key == b.endpoint.key
    await stop(g)


@on_asyncio
async def test_spacing_through_one_endpoint_stays_within_its_band(make: Any) -> None:
    g = make(n=1, delay=(0.3, 0.4))
    first = await granted(g.acquire(HOST))
    g.release(first)
    second = await granted(g.acquire(HOST))
    assert 0.3 - 0.01 <= second.granted_at - first.granted_at <= 0.4 + 0.25
    g.release(second)
    await stop(g)


@on_asyncio
async def test_the_throttles_limits_apply_in_one_call(make: Any) -> None:
    g = make(n=4, host_concurrency=4)
    g.apply_limits(HOST, Limits(rate=None, spacing=(0.0, 0.0), concurrency=1, paused_until=time.monotonic() + 0.4))
    ds = [g.acquire(HOST) for _ in range(2)]
    assert await pending(ds[0], 0.2), "granted inside the pause"
    first = await granted(ds[0])
    assert await pending(ds[1]), "the concurrency of 1 let a second request in"
    g.release(first)
    g.release(await granted(ds[1]))
    g.apply_limits(HOST, Limits(rate=4.0, spacing=(0.0, 0.0), concurrency=4))
    await asyncio.sleep(0.1)  # a shared gate writes the rate on its own time; grants before it keep the old one
    h = g.host(HOST)
    assert (h.limit, h.interval) == (4, 0.25)
    leases = [await granted(g.acquire(HOST)) for _ in range(3)]
    gaps = [b.granted_at - a.granted_at for a, b in zip(leases, leases[1:])]
    assert min(gaps) >= 0.25 - 0.03, gaps
    for lease in leases:
        g.release(lease)
    await stop(g)


@on_asyncio
async def test_no_grant_through_an_endpoint_inside_its_cooldown(make: Any) -> None:
    g = make(n=1)
    lease = await granted(g.acquire(HOST))
    g.cool_endpoint(lease.endpoint.key, HOST, 0.5)  # a 429 through it
    g.release(lease)
    start = time.monotonic()
    d = g.acquire(HOST)
    assert await pending(d, 0.35)
    g.release(await granted(d))
    assert time.monotonic() - start >= 0.5 - 0.01
    await stop(g)


@on_asyncio
async def test_a_session_stays_on_its_endpoint_and_repins_when_it_dies(make: Any) -> None:
    moved: list[tuple[str, str | None, str]] = []
    g = make(n=3, session_policy="repin", listeners=GateListeners(on_session_repinned=lambda *a: moved.append(a)))
    first = await granted(g.acquire(HOST, session="s"))
    g.release(first)
    for _ in range(2):
        again = await granted(g.acquire(HOST, session="s"))
        assert again.endpoint.key == first.endpoint.key
        g.release(again)
    for _ in range(3):  # max_failures: dead
        g.endpoint_failed(first.endpoint.key)
    assert moved == [("s", first.endpoint.label, "endpoint unusable")]
    other = await granted(g.acquire(HOST, session="s"))
    assert other.endpoint.key != first.endpoint.key
    assert g.sessions()["s"] == other.endpoint.label
    g.release(other)
    await stop(g)


@on_asyncio
async def test_a_session_follows_its_hosts_proxy_tier(make: Any) -> None:
    tier = {"now": {"ep0", "ep1"}}  # the host's tier: its endpoints by label
    moved: list[tuple[str, str | None, str]] = []
    labels = {e.key: e.label for e in endpoints(4)}
    g = make(n=4, eligible=lambda host, key: labels[key] in tier["now"],
             listeners=GateListeners(on_session_repinned=lambda *a: moved.append(a)))
    first = await served(g, "s")
    assert first.endpoint.label in tier["now"]
    tier["now"] = {"ep2", "ep3"}  # the host moved up a tier
    up = await served(g, "s")
    assert up.endpoint.label in tier["now"] and moved == [("s", first.endpoint.label, f"proxy tier of {HOST} moved")]
    assert (await served(g, "s")).endpoint.key == up.endpoint.key  # and stays there while the tier holds
    await stop(g)


@on_asyncio
async def test_a_new_identity_starts_away_from_its_retired_predecessor(make: Any) -> None:
    g = make(n=2)
    old, other = await served(g, "a"), await served(g, "b")
    assert old.endpoint.key != other.endpoint.key
    # "a" retires: its pin goes (the endpoint it leaves is then the least shared), and yet ...
    g.succeed("a", "a#1")
    assert (await served(g, "a#1")).endpoint.key != old.endpoint.key  # ... its successor starts on another one
    await stop(g)


@on_asyncio
async def test_a_session_whose_endpoint_dies_fails_under_the_fail_policy(make: Any) -> None:
    g = make(n=2)
    lease = await granted(g.acquire(HOST, session="s"))
    g.release(lease)
    for _ in range(3):
        g.endpoint_failed(lease.endpoint.key)
    assert isinstance(await failure(g.acquire(HOST, session="s")), SessionEndpointLost)
    await stop(g)


@on_asyncio
async def test_a_removed_endpoint_keeps_its_sessions_through_the_grace(make: Any) -> None:
    g = make(n=2, removal_grace=0.6)
    pool = endpoints(2)
    lease = await granted(g.acquire(HOST, session="s"))
    g.release(lease)
    kept = [e for e in pool if e.key != lease.endpoint.key]
    g.set_endpoints(kept)
    d = g.acquire(HOST, session="s")
    assert await pending(d, 0.2)  # waits for its endpoint, not another one
    g.set_endpoints(pool)  # back within the grace
    back = await granted(d)
    assert back.endpoint.key == lease.endpoint.key
    g.release(back)
    g.set_endpoints(kept)  # gone for longer than the grace: the session policy applies
    exc = await failure(g.acquire(HOST, session="s"))
    assert isinstance(exc, SessionEndpointLost) and "removed from the pool" in str(exc)
    await stop(g)


@on_asyncio
async def test_close_fails_every_waiter_with_the_given_error(make: Any) -> None:
    g = make(n=1, host_concurrency=1)
    lease = await granted(g.acquire(HOST))
    waiting = [g.acquire(HOST), g.acquire("other.test", session="s")]
    await asyncio.sleep(0.05)
    g.close("spider closing", SpiderClosing)
    for d in waiting:
        assert isinstance(await failure(d), SpiderClosing)
    assert isinstance(await failure(g.acquire(HOST)), SpiderClosing)
    assert g.waiting() == 0
    g.release(lease)
    await stop(g)


@on_asyncio
async def test_a_stalled_lease_gives_its_host_slot_back_and_keeps_its_endpoint(make: Any) -> None:
    stalled: list[Lease] = []
    g = make(n=2, host_concurrency=1, stall_timeout=0.3, listeners=GateListeners(on_stalled=stalled.append))
    stuck = await granted(g.acquire(HOST))
    d = g.acquire(HOST)
    assert await pending(d, 0.15)
    other = await granted(d, timeout=2.0)
    assert stalled == [stuck] and stuck.stalled
    assert other.endpoint.key != stuck.endpoint.key  # the stuck one's endpoint stays held
    g.release(stuck)
    g.release(other)
    await stop(g)


@on_asyncio
async def test_load_listeners_and_eviction_hooks_hear_of_each_host(make: Any) -> None:
    g = make(n=2, host_concurrency=1)
    loads: list[tuple[str, int]] = []
    evicted: list[str] = []
    g.add_load_listener(lambda host, load: loads.append((host, load)))
    g.on_host_evicted(evicted.append)
    a = await granted(g.acquire(HOST))
    d = g.acquire(HOST)
    await asyncio.sleep(0.05)
    assert g.host_load(HOST) == 2 and loads[-1] == (HOST, 2)
    g.release(a)
    g.release(await granted(d))
    assert g.host_load(HOST) == 0 and loads[-1] == (HOST, 0)
    deadline = time.monotonic() + 3.0
    while HOST not in evicted and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
        g.expire_leases(60)  # the middleware's maintenance, which also evicts idle hosts
    assert evicted == [HOST] and HOST not in g.hosts
    await stop(g)
