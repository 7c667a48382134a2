"""The throttle of two processes sharing one host through a real Redis: a cut is the fleet's.

Two RedisGates with a ThrottlePolicy each stand for two crawler processes (as in
test_redis_gate.py); the answers are handed to the policies as the middleware would.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from test_redis_gate import gate, granted, on_asyncio, settle, stop
from test_units import config

from scrapy_polite.throttle.policy import ThrottlePolicy

pytestmark = pytest.mark.once


def process(url: str, namespace: str) -> tuple[ThrottlePolicy, object]:
    g = gate(url, n=4, namespace=namespace, delay=(0.0, 0.0))
    return ThrottlePolicy(config(POLITE_ADAPTIVE=True), g), g


@on_asyncio
async def test_a_pause_another_process_made_is_known_after_it_ends(redis_server) -> None:
    """How long the fleet waited for a Retry-After is what a failed probe cost it: every process
    knows the pause's end, not only while it lasts."""
    a, b = gate(redis_server.url, n=2, namespace="pause"), gate(redis_server.url, n=2, namespace="pause")
    a.pause_host("h", 0.3)
    end = time.monotonic() + 0.3
    await settle()
    await asyncio.sleep(0.3)
    lease, _ = await granted(b.acquire("h"))  # after the pause: granted at once, its end read along
    assert b.host("h").paused_until == pytest.approx(end, abs=0.1)
    assert b.host("h").paused_until < time.monotonic()
    b.release(lease)
    await stop(a, b)


@on_asyncio
async def test_a_refusal_wave_is_cut_once_for_the_fleet_and_every_process_learns_where(redis_server) -> None:
    (pa, a), (pb, b) = process(redis_server.url, "wave"), process(redis_server.url, "wave")
    first, _ = await granted(a.acquire("h"))
    pa.ok(first, 200)  # the host's first answer: a starts it at the configured band's rate
    a.release(first)
    start = 1 / a.host("h").interval
    await settle()
    la, _ = await granted(a.acquire("h"))
    lb, _ = await granted(b.acquire("h"))  # both sent at the starting rate
    # A Retry-After of a second, a few of each IP's spacings: every IP waits it out (the host pauses).
    pa.rate_limited(la, 1.0, 429, retry_after=1.0)
    a.release(la)
    cut = 1 / a.host("h").interval
    assert cut < start
    await settle()
    lease, _ = await granted(b.acquire("h"))  # after the pause: b reads the cut and where it was met
    assert b.host("h").interval == pytest.approx(1 / cut)
    signal = b.last_signal("h")
    assert signal.failed is not None and cut < signal.failed <= start * 1.001
    # The same wave refuses b's request, sent before the cut: answered for already, no second cut.
    pb.rate_limited(lb, 1.0, 429, retry_after=1.0)
    b.release(lb)
    pb.ok(lease, 200)
    b.release(lease)
    await settle()
    lease, _ = await granted(a.acquire("h"))
    assert a.host("h").interval == pytest.approx(1 / cut)  # still the one cut
    a.release(lease)
    await stop(a, b)
