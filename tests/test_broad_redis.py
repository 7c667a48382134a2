"""Broad crawls on the Redis gate: in-process state bounded by what is active, every Redis key
expiring or owned, and a per-request cost that does not grow with the hosts seen."""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

import pytest
from test_redis_gate import admin, gate, granted, on_asyncio, settle, stop, until

from scrapy_polite.gate.redis.backend import RedisGate

pytestmark = pytest.mark.once


async def visit(g: RedisGate, host: str, session: str | None = None) -> None:
    """One request to *host*: granted, then released."""
    lease, _ = await granted(g.acquire(host, session=session, tag=f"http://{host}/"))
    g.release(lease)


def in_process(g: RedisGate) -> dict[str, int]:
    """Sizes of the gate's per-host and per-session structures."""
    return {
        "hosts": len(g._hosts), "sessions": len(g._sessions), "pumps": len(g._pumps),
        "wakeups": len(g._wakeups), "signals": len(g._signals),
        "spacing": len(g._spacing), "spacing_due": len(getattr(g, "_spacing_due", ())), "leases": len(g._leases),
        "idle_hosts": len(getattr(g, "_idle_hosts", ())), "idle_sessions": len(getattr(g, "_idle_sessions", ())),
        "longest": len(getattr(g, "_longest", ())),
    }


@on_asyncio
async def test_hosts_and_sessions_that_went_idle_leave_the_gate_and_come_back_from_redis(redis_server) -> None:
    g = gate(redis_server.url, n=4, delay=(0.0, 0.05), idle_keep=1.0)
    try:
        g.set_host_limit("h0", 1)
        for i in range(200):
            await visit(g, f"h{i}", session=f"s{i}" if i % 2 else None)
            if i % 10 == 0:
                g.cool_endpoint(next(iter(g.endpoints)), f"h{i}", 0.1)  # a rate signal, remembered per host
        assert len(g._hosts) >= 50, "the hosts are kept for a while, as they may come back"
        empty = {name: 0 for name in in_process(g)}
        sizes = await until(lambda: in_process(g) == empty, timeout=4.0)
        assert sizes, in_process(g)
        # A host seen again reads what it learned back from Redis.
        await visit(g, "h0")
        assert g.hosts["h0"].limit == 1
    finally:
        await stop(g)


@on_asyncio
async def test_every_key_written_expires_or_is_deleted_by_its_owner(redis_server) -> None:
    r = admin(redis_server.url)
    g = gate(redis_server.url, n=3, delay=(0.0, 0.2), lease_ttl=1.5, pin_ttl=2.0, host_ttl=2.0)
    ep = next(iter(g.endpoints))
    try:
        for i in range(30):
            await visit(g, f"h{i}", session=f"s{i}" if i % 3 == 0 else None)
        g.set_host_limit("h1", 3)
        g.set_host_delay("h2", (0.1, 0.3))
        g.set_host_min_delay("h3", 0.2)
        g.set_host_interval("h4", 0.1)
        g.pause_host("h5", 0.5)
        g.cool_endpoint(ep, "h6", 0.5)
        g.cool_endpoint(ep, None, 0.2)
        g.ban_endpoint(ep, "h7", 0.5)
        g.endpoint_failed(ep)
        held = g.acquire("h8", tag="http://h8/")  # in flight while the keyspace is read
        lease, _ = await granted(held)
        await settle()
        keys = sorted(r.scan_iter("t:*"))
        assert any(k.startswith("t:h:") for k in keys) and any(k.startswith("t:held:") for k in keys)
        forever = [k for k in keys if r.ttl(k) == -1]
        assert forever == [], f"keys without a TTL: {forever}"
        hosts = [k for k in keys if k.startswith("t:h:")]
        assert all(0 < r.ttl(k) <= 2 for k in hosts), {k: r.ttl(k) for k in hosts}
        g.release(lease)
    finally:
        await stop(g)
    # The clean exit deletes what this process owned; the rest runs out with its TTL,
    # but for the endpoints' health records (one per endpoint, a day).
    left = await until(lambda: all(k.startswith("t:e:") for k in r.scan_iter("t:*")), timeout=6.0)
    assert left, sorted(r.scan_iter("t:*"))


@on_asyncio
async def test_the_longest_spacing_falls_when_the_hosts_asking_for_it_go_away(redis_server) -> None:
    g = gate(redis_server.url, delay=(0.0, 0.1), idle_keep=0.3)
    try:
        g.set_host_delay("slow", (1.0, 5.0))
        g.set_host_min_delay("slower", 8.0)
        assert g._longest_spacing() == 8.0
        g.set_host_min_delay("slower", 0.0)
        assert g._longest_spacing() == 5.0
        await visit(g, "busy")
        assert await until(lambda: g._longest_spacing() == 0.1, timeout=3.0), g._longest_spacing()
        assert "slow" not in g.hosts
    finally:
        await stop(g)


def test_running_max_follows_every_change() -> None:
    from scrapy_polite.gate.redis.running_max import RunningMax

    rng = random.Random(7)
    m, values = RunningMax(0.5), {}
    for _ in range(5000):
        key = f"k{rng.randrange(50)}"
        if rng.random() < 0.3:
            m.discard(key)
            values.pop(key, None)
        else:
            values[key] = rng.choice([0.0, 0.25, 1.0, 2.0, rng.random() * 10])
            m.set(key, values[key])
        assert m.value() == max([0.5, *values.values()])
    assert len(m._heap) <= 2 * len(m._counts) + 17


class _Counting(dict):
    """A dict that counts the entries every walk over it visits."""

    steps = 0

    def _walked(self) -> None:
        _Counting.steps += len(self)

    def __iter__(self) -> Any:
        self._walked()
        return super().__iter__()

    def values(self) -> Any:
        self._walked()
        return super().values()

    def items(self) -> Any:
        self._walked()
        return super().items()


@on_asyncio
async def test_a_request_costs_the_same_however_many_hosts_were_seen(redis_server) -> None:
    g = gate(redis_server.url, n=8, delay=(0.0, 0.0))
    g._hosts, g._wakeups = _Counting(), _Counting()

    async def cycles(n: int) -> tuple[float, float]:
        """Seconds and walked entries per request."""
        _Counting.steps, start = 0, time.perf_counter()
        for _ in range(n):
            await visit(g, "measured")
        return (time.perf_counter() - start) / n, _Counting.steps / n

    try:
        await cycles(10)  # warm up
        few, few_steps = await cycles(40)
        for i in range(500):  # hosts that had a pump, a wake-up, a spacing
            await visit(g, f"old{i}")
        for i in range(30_000):  # hosts the throttle looked at
            g.host(f"seen{i}")
        assert len(g.hosts) > 30_000
        many, many_steps = await cycles(40)
        print(f"per request: {few * 1e3:.2f} ms, {few_steps:.1f} walked; at {len(g.hosts)} hosts {many * 1e3:.2f} ms, {many_steps:.1f}")
        assert many_steps < 20, f"{many_steps:.0f} entries walked per request at {len(g.hosts)} hosts"
        # Time per request is measured in benchmarks/redis_gate_bench.py, on a quiet machine.
    finally:
        await stop(g)
    await asyncio.sleep(0)
