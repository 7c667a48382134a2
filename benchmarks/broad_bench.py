"""Broad-crawl micro-benchmark of ``LocalGate`` plus ``ThrottlePolicy`` on a fake clock.

One request to each of N hosts (acquire, release, a clean answer to the
throttle), 1 ms of fake time apart, then the hosts go idle and are evicted.
Reports µs per request, the peak traced while the requests ran (tracemalloc,
up to 100k), and the bytes the gate and throttle still hold once everything
went idle and was evicted (their object graph, measured with
``sys.getsizeof``), at 1, 1k, 100k and 1M hosts, and at 1M sessions to one
host. Each figure is the median of ``--runs`` runs (default 3); a 1M case is
one run, its cost the median of three windows of 100k requests at its end.

The 1-host figure is the issue's "one request, then idle" at one host,
repeated for a stable timing: ``ONE_HOST_REQUESTS`` hosts in turn, each sent
one request and left idle until it is evicted before the next one comes, so
one host lives at a time. The cost ratios are against it. For reference,
``warm`` is the cost of a request to a host already known (the same host
``ONE_HOST_REQUESTS`` times): what a first sight adds on top of that is the
creation and later eviction of its state, the same at every scale.

``python benchmarks/broad_bench.py [--runs 3] [--max 1000000]``
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gate_bench import FakeClock  # noqa: E402
from scrapy.settings import Settings  # noqa: E402

from scrapy_polite.gate.local import LocalGate  # noqa: E402
from scrapy_polite.pool.endpoints import Endpoint  # noqa: E402
from scrapy_polite.pool.host_memory import HOST_MEMORY  # noqa: E402
from scrapy_polite.settings.config import PoliteConfig  # noqa: E402
from scrapy_polite.throttle.policy import ThrottlePolicy  # noqa: E402

ENDPOINTS = 8
#: Requests of the 1-host case (one host at a time), the per-request baseline, and of the warm case.
ONE_HOST_REQUESTS = 20_000
#: Fake seconds between two hosts of the 1-host case: the previous one is due for eviction.
IDLE_BETWEEN = 10.0
#: Every host learns a limit (as after a 429): the host memory fills to its bound.
LEARNED_LIMIT = 3


def build(clock: FakeClock) -> tuple[LocalGate, ThrottlePolicy]:
    urls = [f"http://10.0.0.{i}:8000" for i in range(ENDPOINTS)]
    cfg = PoliteConfig.from_settings(Settings({"POLITE_PROXIES": urls, "POLITE_DELAY": 0}))
    gate = LocalGate(
        [Endpoint(key=u, url=u, label=u) for u in urls], host_concurrency=2, endpoint_concurrency=1,
        delay=(0.0, 0.0), backoff=(2.0, 120.0), max_failures=5, call_later=lambda d, f: None, clock=clock,
        rng=random.Random(1), host_memory=cfg.host_memory, memory_ttl=cfg.state_pin_ttl,
    )
    return gate, ThrottlePolicy(cfg, gate, clock=clock)


def deep_size(*roots: Any) -> int:
    """Bytes of the objects reachable from *roots*, modules, classes and functions left out."""
    import types

    skip = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType)
    seen: set[int] = set()
    stack, total = list(roots), 0
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, skip):
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj)
        stack.extend(gc.get_referents(obj))
    return total


def one_run(
    n: int, sessions: bool, sample: int | None, trace: bool, requests: int | None = None, step: float = 0.001
) -> dict[str, Any]:
    gc.collect()
    if trace:
        tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0] if trace else 0
    clock = FakeClock()
    gate, policy = build(clock)
    got: list[Any] = []
    grab = got.append
    total = requests or n
    windows = [0] if sample is None else [max(0, total - k * sample) for k in (3, 2, 1)]
    marks: list[float] = []
    for i in range(total):
        if i in windows:
            marks.append(time.perf_counter())
        clock.now += step
        # Names of one length at every scale: the memory figures compare records, not name lengths.
        host, session = ("h", f"s{i:07d}") if sessions else (f"host{i % n:07d}.example", None)
        gate.acquire(host, session).addCallback(grab)
        lease = got.pop()
        if not sessions:
            gate.set_host_limit(host, LEARNED_LIMIT)
        gate.release(lease)
        policy.ok(lease, 200)
    marks.append(time.perf_counter())
    per = (total - windows[0]) / len(windows)
    costs = [(b - a) / per * 1e6 for a, b in zip(marks, marks[1:])]
    peak = tracemalloc.get_traced_memory()[1] - base if trace else 0
    clock.now += 2 * gate.session_ttl  # idle: everything may go
    gate.sweep()
    gc.collect()
    if trace:
        tracemalloc.stop()
    held = deep_size(gate, policy) - deep_size(*build(FakeClock()))  # beyond a fresh gate and throttle
    return {
        "us_per_request": statistics.median(costs),
        "peak_bytes": peak,
        "bytes_after_eviction": held,
        "hosts_live": len(gate.hosts),
        "sessions_live": len(gate.sessions()),
        "hosts_remembered": len(gate.memory),
    }


def case(n: int, sessions: bool, runs: int, warm: bool = False) -> dict[str, Any]:
    """*n* hosts (or sessions), one request each. At one host: ``ONE_HOST_REQUESTS`` hosts one
    at a time, each idle (evicted) before the next; *warm*: one host sent that many requests."""
    sample = 100_000 if n > 100_000 else None
    requests, step, hosts = None, 0.001, n
    if n == 1:
        requests = ONE_HOST_REQUESTS
        if not warm:
            step, hosts = IDLE_BETWEEN, ONE_HOST_REQUESTS
    timed = [one_run(hosts, sessions, sample, False, requests, step) for _ in range(1 if n > 100_000 else runs)]
    traced = timed if n > 100_000 else [one_run(hosts, sessions, sample, True, requests, step) for _ in range(runs)]
    return {
        "n": n,
        "warm": warm,
        "sessions": sessions,
        "us_per_request": statistics.median(r["us_per_request"] for r in timed),
        "peak_bytes": statistics.median(r["peak_bytes"] for r in traced),
        "bytes_after_eviction": statistics.median(r["bytes_after_eviction"] for r in traced),
        "hosts_live": timed[-1]["hosts_live"],
        "sessions_live": timed[-1]["sessions_live"],
        "hosts_remembered": timed[-1]["hosts_remembered"],
    }


def memory_bound_bytes() -> float:
    """What a full host memory (``POLITE_HOST_MEMORY`` records, gate and throttle) holds."""
    return one_run(HOST_MEMORY, False, None, trace=False)["bytes_after_eviction"]


def bench(runs: int = 3, largest: int = 1_000_000) -> dict[str, Any]:
    sizes = [s for s in (1, 1000, 100_000, 1_000_000) if s <= largest]
    hosts = [case(n, False, runs) for n in sizes]
    sess = case(largest, True, runs)
    warm = case(1, False, runs, warm=True)
    one = hosts[0]
    bound = memory_bound_bytes()
    checks = []
    for c in [*hosts, sess]:
        ratio = c["us_per_request"] / one["us_per_request"]
        # Memory against one host's (the warm case: one host's state, then evicted), plus the bound.
        allowed = 2 * max(warm["bytes_after_eviction"], 0) + bound
        checks.append({
            "case": f"{c['n']} {'sessions' if c['sessions'] else 'hosts'}",
            "cost_ratio": round(ratio, 2), "cost_ok": ratio <= 1.5,
            "over_warm": round(c["us_per_request"] / warm["us_per_request"], 2),
            "memory_ok": c["bytes_after_eviction"] <= allowed, "memory_allowed_bytes": allowed,
        })
    return {"hosts": hosts, "sessions": sess, "warm": warm, "host_memory_bytes": bound, "checks": checks}


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--max", type=int, default=1_000_000)
    ns = ap.parse_args()
    print(json.dumps(bench(ns.runs, ns.max), indent=1))
