"""Two RedisGates in one process stand for two crawler processes sharing a real Redis."""

from __future__ import annotations

import asyncio
import functools
import json
import time
from collections import Counter
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
import pytest_twisted
import redis
from twisted.internet.defer import Deferred

from scrapy_polite.errors import SessionEndpointLost
from scrapy_polite.gate.base import GateListeners
from scrapy_polite.gate.redis.backend import RedisGate
from scrapy_polite.gate.state import Lease
from scrapy_polite.pool.endpoints import Endpoint

# The Redis gate is asyncio and Redis only: these tests run once, in the current environment.
pytestmark = pytest.mark.once


def endpoints(n: int, first: int = 0) -> list[Endpoint]:
    return [Endpoint(key=f"http://127.0.0.{i + 2}:8000", url=f"http://127.0.0.{i + 2}:8000",
                     label=f"ep{i}") for i in range(first, first + n)]


def gate(url: str, n: int = 1, namespace: str = "t", first: int = 0, **kw) -> RedisGate:
    opts = {"host_concurrency": 2, "endpoint_concurrency": 1, "delay": (0.0, 0.0), "backoff": (1.0, 5.0),
            "max_failures": 3, "lease_ttl": 1.5, "poll": 0.02, **kw}
    g = RedisGate(endpoints(n, first), url=url, namespace=namespace, **opts)
    g.start()
    return g


def on_asyncio(test: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., Any]:
    """Run an asyncio test body on the reactor's event loop (the gate's own world)."""

    @functools.wraps(test)
    @pytest_twisted.ensureDeferred
    async def wrapper(*args: Any, **kwargs: Any) -> None:
        await Deferred.fromFuture(asyncio.ensure_future(test(*args, **kwargs)))

    return wrapper


async def granted(d: Deferred, timeout: float = 5.0) -> tuple[Lease, float]:
    start = time.monotonic()
    lease = await asyncio.wait_for(d.asFuture(asyncio.get_running_loop()), timeout)
    return lease, time.monotonic() - start


async def pending(d: Deferred, seconds: float) -> bool:
    await asyncio.sleep(seconds)
    return not d.called


async def settle() -> None:
    """Let queued shared-state updates reach Redis."""
    await asyncio.sleep(0.1)


async def stop(*gates: RedisGate) -> None:
    for g in gates:
        d = g.stop()
        if d is not None:
            await d.asFuture(asyncio.get_running_loop())


def admin(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, decode_responses=True)


async def until(check: Callable[[], Any], timeout: float = 3.0) -> Any:
    """Poll *check* (ignoring Redis errors while a server restarts) until it is truthy."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            result = check()
            if asyncio.iscoroutine(result):
                result = await result
            if result or time.monotonic() > deadline:
                return result
        except redis.RedisError:
            if time.monotonic() > deadline:
                raise
        await asyncio.sleep(0.05)


@on_asyncio
async def test_one_request_per_endpoint_across_processes(redis_server) -> None:
    a, b = gate(redis_server.url), gate(redis_server.url)
    lease, _ = await granted(a.acquire("h"))
    waiting = b.acquire("h")
    assert await pending(waiting, 0.4)  # the only endpoint is busy in the other process
    a.release(lease)
    other, waited = await granted(waiting)
    assert other.endpoint.key == lease.endpoint.key and waited < 0.5
    b.release(other)
    await stop(a, b)


@on_asyncio
async def test_spacing_cooldown_and_ban_are_shared(redis_server) -> None:
    a, b = gate(redis_server.url, delay=(0.6, 0.6)), gate(redis_server.url, delay=(0.6, 0.6))
    lease, _ = await granted(a.acquire("h"))
    a.release(lease)
    _, waited = await granted(b.acquire("h"))  # spacing drawn in a, honoured in b
    assert waited >= 0.5
    b.release(_)
    a.cool_endpoint(lease.endpoint.key, "h", 1.0)
    await settle()
    _, waited = await granted(b.acquire("h"))
    assert waited >= 0.8
    b.release(_)
    a.ban_endpoint(lease.endpoint.key, "h", 30.0)
    await settle()
    banned = b.acquire("h")
    assert await pending(banned, 0.8)
    other_host, _ = await granted(b.acquire("other"))  # a ban is for one host only
    b.release(other_host)
    banned.cancel()
    await stop(a, b)


@on_asyncio
async def test_host_limit_and_pause_are_shared(redis_server) -> None:
    a, b = gate(redis_server.url, n=3), gate(redis_server.url, n=3)
    a.set_host_limit("h", 1)
    await settle()
    lease, _ = await granted(a.acquire("h"))
    waiting = b.acquire("h")
    assert await pending(waiting, 0.4)
    assert b.host("h").limit == 1  # the throttle's view in b follows the shared value
    a.release(lease)
    lease_b, _ = await granted(waiting)
    b.release(lease_b)
    a.pause_host("h", 1.0)
    await settle()
    _, waited = await granted(b.acquire("h"))
    assert waited >= 0.8
    await stop(a, b)


@on_asyncio
async def test_a_session_keeps_its_endpoint_in_every_process(redis_server) -> None:
    a, b = gate(redis_server.url, n=4, host_concurrency=4), gate(redis_server.url, n=4, host_concurrency=4)
    first, _ = await granted(a.acquire("h", session="user1"))
    busy = b.acquire("h", session="user1")
    assert await pending(busy, 0.3)  # one step at a time, fleet-wide
    a.release(first)
    second, _ = await granted(busy)
    assert second.endpoint.key == first.endpoint.key
    b.release(second)
    others = [await granted(a.acquire("h", session=f"user{i}")) for i in (2, 3, 4)]
    assert len({lease.endpoint.key for lease, _ in others} | {first.endpoint.key}) == 4  # spread
    for lease, _ in others:
        a.release(lease)
    await stop(a, b)


@on_asyncio
async def test_a_crashed_process_frees_its_endpoint_after_the_lease_ttl(redis_server) -> None:
    a, b = gate(redis_server.url), gate(redis_server.url)
    await granted(a.acquire("h", tag="http://h/1"))
    await settle()
    a._halt()  # a dies: no renewal, no release
    died = time.monotonic()
    _, waited = await granted(b.acquire("h"), timeout=10)
    assert 1.0 <= waited <= 3.0
    client = admin(redis_server.url)

    async def swept() -> list[dict]:
        await b._renew()
        return [json.loads(o) for o in client.lrange("t:orphans", 0, -1)]

    # a's heartbeat lasts three TTLs; then b's next sweep lists what it held.
    orphans = await until(swept, timeout=8)
    assert time.monotonic() - died >= 3 * 1.5 - 0.5 - 0.1
    assert [o["url"] for o in orphans] == ["http://h/1"] and orphans[0]["proc"] == a.process_id
    client.close()
    await stop(b)


@on_asyncio
async def test_namespaces_do_not_share(redis_server) -> None:
    a, b = gate(redis_server.url, namespace="one"), gate(redis_server.url, namespace="two")
    lease, _ = await granted(a.acquire("h"))
    other, waited = await granted(b.acquire("h"))
    assert waited < 0.3
    a.release(lease)
    b.release(other)
    await stop(a, b)


@on_asyncio
async def test_a_short_outage_does_not_get_a_live_process_swept(redis_server) -> None:
    a, b = gate(redis_server.url), gate(redis_server.url)
    lease, _ = await granted(a.acquire("h", tag="http://h/1"))
    await settle()
    client = admin(redis_server.url)
    client.save()  # the server comes back with its data
    client.close()
    redis_server.stop()
    await asyncio.sleep(2.5)  # longer than the 1.5 s lease TTL
    redis_server.start()
    await until(b._renew)  # the first process back sweeps at once
    client = admin(redis_server.url)
    ep_id = a._ids[lease.endpoint.key]
    # a's renewals retry at most a quarter TTL apart: its lease is back within moments.
    assert await until(lambda: (client.zscore(f"t:el:{ep_id}", lease.token) or 0) > time.time(), timeout=1.0)
    assert client.lrange("t:orphans", 0, -1) == []
    assert client.zscore("t:procs", a.process_id) is not None
    assert a.reasserted == 1  # the lease had lapsed and was re-added
    a.release(lease)
    client.close()
    await stop(a, b)


@on_asyncio
async def test_a_success_in_any_process_resets_the_shared_failure_count(redis_server) -> None:
    a, b = gate(redis_server.url, backoff=(0.05, 0.2)), gate(redis_server.url, backoff=(0.05, 0.2))
    for _ in range(3):  # fail, succeed, fail, ...: never three failures in a row
        lease, _ = await granted(a.acquire("h"), timeout=2)
        a.release(lease)
        a.endpoint_failed(lease.endpoint.key)
        await settle()
        other, _ = await granted(b.acquire("h"), timeout=2)
        b.release(other)
        b.endpoint_ok(other.endpoint.key)
        await settle()
    client = admin(redis_server.url)
    assert client.hget(f"t:e:{a._ids[lease.endpoint.key]}", "failures") == "0"
    client.close()
    await stop(a, b)


@on_asyncio
async def test_a_dead_endpoint_gets_one_probe_per_longest_backoff(redis_server) -> None:
    opts = {"n": 2, "backoff": (0.05, 0.5), "max_failures": 2}
    a, b = gate(redis_server.url, **opts), gate(redis_server.url, **opts)
    first, _ = await granted(a.acquire("h"))
    busy, _ = await granted(a.acquire("h"))  # the other endpoint stays busy throughout
    a.release(first)
    dead = first.endpoint.key
    a.endpoint_failed(dead)
    a.endpoint_failed(dead)
    await settle()
    probe, _ = await granted(b.acquire("h"), timeout=2)  # once its backoff has passed
    assert probe.endpoint.key == dead and not b.endpoint_usable(b.endpoints[dead])
    b.release(probe)
    # The probe's answer never came: the next look is a longest backoff later.
    again, waited = await granted(a.acquire("h"), timeout=2)
    assert again.endpoint.key == dead and waited >= 0.4
    a.release(again)
    a.endpoint_ok(dead)  # it answered: alive again, everywhere
    await settle()
    client = admin(redis_server.url)
    assert client.hget(f"t:e:{a._ids[dead]}", "failures") == "0"
    client.close()
    a.release(busy)
    await stop(a, b)


@on_asyncio
async def test_a_process_that_learns_from_redis_that_every_endpoint_is_dead_gives_up(redis_server) -> None:
    calls: list[int] = []
    a, b = gate(redis_server.url, n=2), gate(redis_server.url, n=2, listeners=GateListeners(on_all_unusable=lambda: calls.append(1)))
    for key in list(a.endpoints):
        for _ in range(3):
            a.endpoint_failed(key)
    await settle()
    waiting = b.acquire("h")
    assert await until(lambda: calls, timeout=2)
    waiting.addErrback(lambda f: None)
    b.close("no usable endpoints")
    await stop(a, b)


async def pinned_then_killed_elsewhere(url: str, moved: list[tuple[str, str | None]]):
    """Gates *a* (reporting repins to *moved*) and *b*; session "u" pinned in *a*, its endpoint killed by *b*."""
    opts = {"n": 2, "session_policy": "repin"}
    a = gate(url, listeners=GateListeners(on_session_repinned=lambda s, old, why: moved.append((s, old))), **opts)
    b = gate(url, **opts)
    first, _ = await granted(a.acquire("h", session="u"))
    a.release(first)
    for _ in range(3):
        b.endpoint_failed(first.endpoint.key)  # dead, and a has not seen it fail
    await settle()
    return a, b, first


@on_asyncio
async def test_a_session_repins_when_its_endpoint_dies_in_another_process(redis_server) -> None:
    moved: list[tuple[str, str | None]] = []
    a, b, first = await pinned_then_killed_elsewhere(redis_server.url, moved)
    second, _ = await granted(a.acquire("h", session="u"), timeout=2)
    assert second.endpoint.key != first.endpoint.key
    assert moved == [("u", first.endpoint.label)]
    a.release(second)
    await settle()
    client = admin(redis_server.url)  # unpinned in one script: pin and share moved together
    assert client.get("t:pin:u") == a._ids[second.endpoint.key]
    assert client.zscore(f"t:pc:{a._ids[first.endpoint.key]}", "u") is None
    assert client.zscore(f"t:pc:{a._ids[second.endpoint.key]}", "u") is not None
    client.close()
    await stop(a, b)


@on_asyncio
async def test_a_session_repinned_by_another_process_follows_here(redis_server) -> None:
    moved: list[tuple[str, str | None]] = []
    a, b, first = await pinned_then_killed_elsewhere(redis_server.url, moved)
    other, _ = await granted(b.acquire("h", session="u"), timeout=2)  # b repins u
    b.release(other)
    b.endpoint_ok(first.endpoint.key)  # the first endpoint is back
    await settle()
    again, _ = await granted(a.acquire("h", session="u"), timeout=2)
    assert again.endpoint.key == other.endpoint.key != first.endpoint.key
    assert moved == [("u", first.endpoint.label)]  # the move is reported here too
    a.release(again)
    await stop(a, b)


@on_asyncio
async def test_a_pin_outside_this_process_pool_is_treated_as_dead(redis_server) -> None:
    earlier = gate(redis_server.url, n=2)
    for session in ("u", "v"):
        lease, _ = await granted(earlier.acquire("h", session=session))
        earlier.release(lease)
    await stop(earlier)
    # A later crawl in the same namespace, with another pool.
    repin = gate(redis_server.url, n=2, first=5, session_policy="repin")
    lease, _ = await granted(repin.acquire("h", session="u"), timeout=2)
    assert lease.endpoint.key in repin.endpoints
    repin.release(lease)
    strict = gate(redis_server.url, n=2, first=5)
    lost = strict.acquire("h", session="v")
    with pytest.raises(SessionEndpointLost):
        await granted(lost, timeout=2)
    await stop(repin, strict)


@on_asyncio
async def test_pins_expire_when_the_session_idles(redis_server) -> None:
    a = gate(redis_server.url, n=2, pin_ttl=1.0)
    first, _ = await granted(a.acquire("h", session="u"))
    a.release(first)
    pinned = a._ids[first.endpoint.key]
    client = admin(redis_server.url)
    assert client.get("t:pin:u") == pinned and 0 < client.pttl("t:pin:u") <= 1000
    assert client.zcard(f"t:pc:{pinned}") == 1
    await asyncio.sleep(1.2)
    assert client.get("t:pin:u") is None
    # Its share of the endpoint went with it: the next new session's count of that endpoint leaves it out.
    other, _ = await granted(a.acquire("h", session="w"))
    assert "u" not in client.zrange(f"t:pc:{pinned}", 0, -1)
    assert client.zrange(f"t:pc:{a._ids[other.endpoint.key]}", 0, -1) == ["w"]
    a.release(other)
    client.close()
    await stop(a)


@on_asyncio
async def test_new_sessions_spread_over_a_large_pool_looking_at_a_bounded_number_of_endpoints(redis_server) -> None:
    from scrapy_polite.gate.redis.candidates import SESSION_CHOICES

    a = gate(redis_server.url, n=40, host_concurrency=100)
    others, complete = a._session_choices("h", None)
    assert (len(others), complete) == (SESSION_CHOICES, "0")
    small = gate(redis_server.url, n=3, namespace="small")
    assert (len(small._session_choices("h", None)[0]), small._session_choices("h", None)[1]) == (3, "1")
    pinned = next(iter(small.endpoints))
    assert pinned not in small._session_choices("h", pinned)[0]
    for i in range(80):
        lease, _ = await granted(a.acquire("h", session=f"s{i}"))
        a.release(lease)
    per_endpoint = Counter(a.sessions().values())
    assert len(per_endpoint) == 40 and max(per_endpoint.values()) <= 3, per_endpoint
    await stop(a, small)


@on_asyncio
async def test_a_renewal_does_not_bring_back_a_lease_released_meanwhile(redis_server) -> None:
    a, b = gate(redis_server.url), gate(redis_server.url)
    lease, _ = await granted(a.acquire("h", session="u"))
    ep_id = a._ids[lease.endpoint.key]
    # A renewal put together before the release reaches Redis...
    renewal = ["t:", 1.5, a.process_id, a._seen, 0.0, lease.token, ep_id, "h", "u"]
    a.release(lease)
    await settle()
    await a._scripts["renew"](args=renewal)  # ...and landing after it
    client = admin(redis_server.url)
    assert client.zscore(f"t:el:{ep_id}", lease.token) is None
    assert client.get("t:sl:u") is None
    client.close()
    other, waited = await granted(b.acquire("h", session="u"))
    assert waited < 0.3
    b.release(other)
    await stop(a, b)


@on_asyncio
async def test_after_redis_lost_its_data_no_lease_until_in_flight_ones_can_be_reasserted(redis_server) -> None:
    a, b = gate(redis_server.url), gate(redis_server.url)
    await granted(a.acquire("h"))  # in flight in a, which is slow to come back
    await asyncio.sleep(0.3)  # b has talked to Redis before (its first renewal)
    a._halt()
    redis_server.stop()  # a restart that loses every key
    redis_server.start()
    waiting = b.acquire("h")
    assert await pending(waiting, 1.2)  # a grace of a TTL (1.5 s): a's lease might come back
    _, waited = await granted(waiting, timeout=3)
    assert waited <= 2.5
    await stop(b)


@on_asyncio
async def test_a_fresh_namespace_and_the_next_clean_crawl_start_at_once(redis_server) -> None:
    a = gate(redis_server.url)
    lease, waited = await granted(a.acquire("h"))
    assert waited < 0.3
    a.release(lease)
    await stop(a)  # the last process to leave clears the fleet's pulse
    await asyncio.sleep(1.6)  # longer than the TTL
    b = gate(redis_server.url)
    lease, waited = await granted(b.acquire("h"))
    assert waited < 0.3
    b.release(lease)
    await stop(b)


@on_asyncio
async def test_renewals_go_on_after_an_unexpected_error(redis_server) -> None:
    a = gate(redis_server.url)
    lease, _ = await granted(a.acquire("h"))
    renew, calls = a._scripts["renew"], []

    async def broken_once(**kw: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise ValueError("a bug")
        return await renew(**kw)

    a._scripts["renew"] = broken_once
    client = admin(redis_server.url)
    key = f"t:el:{a._ids[lease.endpoint.key]}"
    # Renewals every 0.5 s: the lease stays alive well past its 1.5 s TTL.
    await asyncio.sleep(2.5)
    assert len(calls) >= 3 and client.zscore(key, lease.token) > time.time()
    a.release(lease)
    client.close()
    await stop(a)


@on_asyncio
async def test_a_redis_error_drops_the_update_and_the_next_ones_go_through(redis_server) -> None:
    a = gate(redis_server.url)
    client = admin(redis_server.url)
    client.set("t:h:x", "not a hash")  # every write to it fails (WRONGTYPE)
    a.set_host_limit("x", 1)
    a.set_host_limit("y", 3)
    assert await until(lambda: client.hget("t:h:y", "limit") == "3", timeout=1.5)
    assert a.outages == 0  # an error answer is not an outage
    client.close()
    await stop(a)


@on_asyncio
async def test_the_orphans_list_is_bounded(redis_server) -> None:
    kept = 100_000  # scrapy_polite.gate.redis.leases.ORPHANS_KEPT
    client = admin(redis_server.url)
    for start in range(0, kept, 20_000):
        client.rpush("t:orphans", *(f"old{i}" for i in range(start, start + 20_000)))
    a, b = gate(redis_server.url), gate(redis_server.url)
    await granted(a.acquire("h", tag="http://h/1"))
    await settle()
    a._halt()
    client.zadd("t:procs", {a.process_id: 0})  # a's heartbeat has run out
    await b._renew()
    assert client.llen("t:orphans") == kept
    assert json.loads(client.lindex("t:orphans", -1))["url"] == "http://h/1"
    assert client.lindex("t:orphans", 0) == "old1"
    client.close()
    await stop(b)


@on_asyncio
async def test_a_host_wide_signal_is_seen_by_every_process_and_a_cooldown_alone_is_not_one(redis_server) -> None:
    a, b = gate(redis_server.url, n=2), gate(redis_server.url, n=2)
    lease, _ = await granted(b.acquire("h"))
    b.release(lease)
    assert b.last_signal("h").at == float("-inf")
    a.cool_endpoint(next(iter(a.endpoints)), "h", 0.2)  # a per-IP 429: the IP's spacing answers for it
    await settle()
    lease, _ = await granted(b.acquire("h"))
    assert b.last_signal("h").at == float("-inf")
    b.release(lease)
    a.signal_host("h", 2.75, True)  # a 429 from h blamed on the host at 2.75 req/s, seen in a only
    signalled = time.monotonic()
    await settle()
    lease, _ = await granted(b.acquire("h"))  # the next grant attempt brings the time and the rate along
    seen = b.last_signal("h")
    assert abs(seen.at - signalled) < 0.2 and seen.failed == 2.75 and seen.found
    b.release(lease)
    a.signal_host("h")  # a later one whose rate a could not say: the old rate is not passed off as its
    await settle()
    lease, _ = await granted(b.acquire("h"))
    later = b.last_signal("h")
    assert later.at > seen.at and later.failed is None and not later.found
    b.release(lease)
    await stop(a, b)


@on_asyncio
async def test_a_host_rate_set_here_is_not_undone_by_a_grant_read_before_it_was_written(redis_server) -> None:
    """The throttle takes a host rate that moved as another process's step (a cut: the limit met),
    so a grant read before this process's own change reached Redis must not bring the old rate back."""
    a, b = gate(redis_server.url, n=2), gate(redis_server.url, n=2)
    lease, _ = await granted(a.acquire("h"))
    a.release(lease)
    early = 0
    for interval in (0.05, 0.04, 0.03):
        a.set_host_interval("h", interval)  # queued; the grant below may be read first
        changed = time.monotonic()
        lease, _ = await granted(a.acquire("h"))
        assert a.host("h").interval == interval
        # A grant read before the change reached Redis counts as sent before the change.
        early += lease.granted_at < changed
        a.release(lease)
    assert early >= 1
    await settle()
    lease, _ = await granted(b.acquire("h"))  # another process reads the shared rate
    assert b.host("h").interval == 0.03
    b.release(lease)
    b.set_host_interval("h", 0.06)  # and moves it: a sees the move at its next grant
    await settle()
    asked = time.monotonic()
    lease, _ = await granted(a.acquire("h"))
    assert a.host("h").interval == 0.06
    # In force here from that read on: the grant it came with was made under it.
    assert asked <= a.host("h").interval_since <= lease.granted_at
    a.release(lease)
    await stop(a, b)



@on_asyncio
async def test_a_host_rate_step_from_a_value_another_process_moved_since_is_stale(redis_server) -> None:
    """Each process steps the shared host rate from the value it last read. A step from a value
    another process has moved since (even back to the same value) is stale: a faster one is
    dropped, and a cut never makes the host faster (four processes on a 3 req/s cap: a cut from a stale 3.55 req/s wrote 3.23 over
    another's 2.84, and drew two more 429s)."""
    a, b = gate(redis_server.url, n=2, namespace="steps"), gate(redis_server.url, n=2, namespace="steps")

    async def shared() -> float:
        await settle()
        lease, _ = await granted(a.acquire("h"))
        a.release(lease)
        return a.host("h").interval

    a.set_host_interval("h", 0.5)
    await settle()
    lease, _ = await granted(b.acquire("h"))  # b reads 0.5
    b.release(lease)
    assert b.host("h").interval == 0.5
    a.set_host_interval("h", 0.4)  # a climbs; b has not read it
    await settle()
    b.set_host_interval("h", 0.45)  # b climbs from the 0.5 it read: stale, dropped
    assert await shared() == 0.4
    a.set_host_interval("h", 0.6)  # a cuts; b still holds 0.45 here
    await settle()
    b.set_host_interval("h", 0.5)  # a cut from 0.45 to 0.5 would make the host faster than 0.6
    assert await shared() == 0.6
    b.set_host_interval("h", 0.8)  # a deeper cut than a's applies
    assert await shared() == 0.8
    assert b.host("h").interval == 0.8
    b.set_host_interval("h", 0.7)  # a step from the value now read applies
    assert await shared() == 0.7
    a.set_host_interval("h", 0.35)  # a climbs and cuts back to the value b last saw ...
    a.set_host_interval("h", 0.7)
    await settle()
    b.set_host_interval("h", 0.6)  # ... and b's climb from it is still stale: the limit was met since
    assert await shared() == 0.7
    await stop(a, b)

@on_asyncio
async def test_a_lease_says_whether_the_shared_host_rate_held_its_request(redis_server) -> None:
    """The shared host rate binds across processes: a request one process asks for right after
    another process's grant is held by it, and its lease says so (a probe is judged by such requests)."""
    a, b = gate(redis_server.url, n=2, namespace="held"), gate(redis_server.url, n=2, namespace="held", first=2)
    a.set_host_interval("h", 1.0)
    await settle()
    lease, _ = await granted(a.acquire("h"))
    assert not lease.rate_held  # nothing sent before it
    a.release(lease)
    lease, waited = await granted(b.acquire("h"))  # right after a's grant: the shared interval holds it
    assert lease.rate_held and waited >= 0.5
    b.release(lease)
    await asyncio.sleep(1.2)
    lease, _ = await granted(a.acquire("h"))  # long after the interval: not held
    assert not lease.rate_held
    a.release(lease)
    await stop(a, b)
