"""Micro-benchmark of :class:`scrapy_polite.gate.local.LocalGate` alone, on a fake clock.

Each request is ``acquire`` (granted at once) then, with up to 8 leases held,
``release`` of the oldest: the same logical workload at two pool sizes, so the
cost ratio shows how the gate scales with endpoints and hosts.
"""

from __future__ import annotations

import gc
import random
import sys
import time
import tracemalloc
from collections import deque
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scrapy_polite.gate.local import LocalGate  # noqa: E402
from scrapy_polite.gate.state import Lease  # noqa: E402
from scrapy_polite.pool.endpoints import Endpoint  # noqa: E402

HELD = 8


class FakeClock:
    """A clock the benchmark advances by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make_gate(n_endpoints: int, clock: FakeClock) -> LocalGate:
    """A gate over *n_endpoints* fake proxies, no spacing, no host cap in the way."""
    eps = [Endpoint(key=f"http://10.0.{i // 250}.{i % 250}:8000", url=f"http://10.0.{i // 250}.{i % 250}:8000",
                    label=f"http://10.0.{i // 250}.{i % 250}:8000") for i in range(n_endpoints)]
    return LocalGate(
        eps, host_concurrency=10**6, endpoint_concurrency=1, delay=(0.0, 0.0), backoff=(2.0, 120.0),
        max_failures=5, call_later=lambda d, f: None, clock=clock, rng=random.Random(1),
    )


def run(n_endpoints: int, n_hosts: int, requests: int) -> dict[str, Any]:
    """Time *requests* acquire/release pairs over *n_hosts* hosts; measure retained and peak memory."""
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    clock = FakeClock()
    gate = make_gate(n_endpoints, clock)
    hosts = [f"host{i}.example" for i in range(n_hosts)]
    after_setup = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    held: deque[Lease] = deque()
    got: list[Lease] = []
    grab = got.append

    def one(i: int) -> None:
        clock.now += 0.001
        gate.acquire(hosts[i % n_hosts]).addCallback(grab)
        held.append(got.pop())
        if len(held) > min(HELD, n_endpoints - 1):
            gate.release(held.popleft())

    for i in range(min(2000, requests)):  # warm-up
        one(i)
    t = time.perf_counter()
    for i in range(requests):
        one(i)
    elapsed = time.perf_counter() - t
    gc.collect()
    tracemalloc.start()
    # Memory of the state after the run: re-run a slice under tracing to get the growth per request too.
    m0 = tracemalloc.get_traced_memory()[0]
    for i in range(requests, requests + min(20000, requests)):
        one(i)
    grown = tracemalloc.get_traced_memory()[0] - m0
    tracemalloc.stop()
    while held:
        gate.release(held.popleft())
    return {
        "endpoints": n_endpoints,
        "hosts": n_hosts,
        "requests": requests,
        "us_per_request": elapsed / requests * 1e6,
        "setup_bytes": after_setup - base,
        "growth_bytes_per_request": grown / min(20000, requests),
        "pairs": len(gate._pairs),
    }


def bench(quick: bool) -> dict[str, Any]:
    """Small pool vs large pool; the ratio of per-request costs."""
    n = 20000 if quick else 100000
    small = run(10, 1, n)
    large = run(10000, 1000, n)
    return {"small": small, "large": large, "ratio": large["us_per_request"] / small["us_per_request"]}


if __name__ == "__main__":
    import json

    print(json.dumps(bench("--quick" in sys.argv), indent=1))
