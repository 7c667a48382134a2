"""A crawl on a fake clock: the real gate and throttle against one of the zoo's limiters.

Requests go through :class:`~scrapy_polite.gate.local.LocalGate` as the
middleware sends them, the limiter answers each one as the sandbox's site would,
and every answer reaches :class:`~scrapy_polite.throttle.policy.ThrottlePolicy`
as ``Attempts`` hands it over. What the site saw is counted from the site's side:
clean pages, refusals, requests that came back inside a Retry-After.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from test_units import config, make_gate

from scrapy_polite.downloader.retry_after import parse_retry_after
from scrapy_polite.gate.local import LocalGate
from scrapy_polite.gate.state import NO_SIGNAL, HostSignal
from scrapy_polite.sandbox.limiters import RATE_LIMIT, Limiter, build, refusal_of
from scrapy_polite.throttle.policy import ThrottlePolicy

HOST = "site.test"


class FleetGate(LocalGate):
    """One gate standing for the state a fleet shares (``POLITE_STATE``): every process's throttle
    reads and writes it as each does the Redis one, the fleet's last host-wide signal with it."""

    shared = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._fleet_signals: dict[str, HostSignal] = {}

    def signal_host(self, host: str, failed: float | None = None, found: bool = False) -> None:
        self._fleet_signals[host] = HostSignal(self._clock(), failed, found)

    def last_signal(self, host: str) -> HostSignal:
        return self._fleet_signals.get(host, NO_SIGNAL)


class Clock:
    """A fake clock whose timers sit in a heap (a crawl of minutes schedules thousands)."""

    def __init__(self) -> None:
        self.now = 0.0
        self._timers: list[tuple[float, int, list[Any]]] = []
        self._order = itertools.count()

    def clock(self) -> float:
        return self.now

    def call_later(self, delay: float, func: Callable[[], None]) -> Any:
        timer: list[Any] = [func, True]
        heapq.heappush(self._timers, (self.now + max(0.0, delay), next(self._order), timer))

        class Handle:
            def cancel(self) -> None:
                timer[1] = False

            def active(self) -> bool:
                return bool(timer[1])

        return Handle()

    def run_until(self, end: float) -> None:
        while self._timers and self._timers[0][0] <= end:
            at, _, timer = heapq.heappop(self._timers)
            self.now = max(self.now, at)
            if timer[1]:
                timer[1] = False
                timer[0]()
        self.now = end


@dataclass
class Result:
    """What the site saw of one simulated crawl."""

    seconds: float
    capacity: float
    ok: int = 0
    rate_limited: int = 0
    overloaded: int = 0
    inside_retry_after: int = 0
    most_in_flight_per_ip: int = 0
    latencies: list[float] = field(default_factory=list)

    @property
    def requests(self) -> int:
        return self.ok + self.rate_limited + self.overloaded

    @property
    def efficiency(self) -> float:
        """Clean pages over what the limit allows in the same time."""
        return self.ok / (self.capacity * self.seconds)

    @property
    def refused_share(self) -> float:
        return (self.rate_limited + self.overloaded) / max(1, self.requests)


def crawl(spec: dict[str, Any], seconds: float = 120.0, *, adaptive: bool = True, ips: int = 8,
          latency: float | None = None, paths: bool = False, log: list[Any] | None = None, seed: int = 1,
          fleet: int = 0, **settings: Any) -> Result:
    """Crawl a site limited by *spec* for *seconds* of fake time with *ips* exit IPs, always
    with more pages waiting than the pool can send (*paths*: each page a new URL). *fleet*: that
    many crawler processes share the pool's state, each with its own throttle and requests."""
    limiter: Limiter = build(spec)
    if latency is None:  # the site's own service time, where its limiter has one
        latency = float(getattr(limiter, "latency", 0.05))
    cfg = config(POLITE_ADAPTIVE=adaptive, **settings)
    ft = Clock()
    gate, _ = make_gate(n=ips, host_concurrency=cfg.host_concurrency, delay=cfg.delay, clock=ft.clock,
                        call_later=ft.call_later, rng=random.Random(seed), cls=FleetGate if fleet else LocalGate)
    wall = float(spec.get("wall", 0.0))
    policies = [ThrottlePolicy(cfg, gate, clock=ft.clock, wall=lambda: wall + ft.now,
                               notify=None if log is None else lambda *a: log.append((ft.now, *a)))
                for _ in range(max(1, fleet))]
    owner: dict[int, ThrottlePolicy] = {}  # each lease's process
    steps = getattr(limiter, "steps", None)
    result = Result(seconds, _mean_capacity(steps(ips), seconds) if steps else limiter.capacity(ips))
    deadlines: dict[str, float] = {}
    in_flight: dict[str, int] = {}
    fresh = iter(range(10**9))
    again: list[int] = []  # pages refused, to be asked for again (the same URL)

    def go(policy: ThrottlePolicy) -> None:
        gate.acquire(HOST).addCallback(lambda lease: send(lease, policy))

    def send(lease: Any, policy: ThrottlePolicy) -> None:
        owner[id(lease)] = policy
        ip = lease.endpoint.key
        now = ft.now
        if now < max(deadlines.get(ip, -math.inf), deadlines.get(HOST, -math.inf)) - 1e-6:
            result.inside_retry_after += 1
        in_flight[ip] = in_flight.get(ip, 0) + 1
        result.most_in_flight_per_ip = max(result.most_in_flight_per_ip, in_flight[ip])
        page = again.pop(0) if again else next(fresh)
        verdict = limiter.arrive(ip, now, f"/p/{page}" if paths else "/")
        ft.call_later(latency + verdict.delay, lambda: answer(lease, verdict, page))

    def answer(lease: Any, verdict: Any, page: int) -> None:
        ip, policy = lease.endpoint.key, owner.pop(id(lease))
        in_flight[ip] -= 1
        limiter.leave(ip, ft.now)
        headers = {k: v for k, v in verdict.headers}
        stated = parse_retry_after(headers.get("Retry-After"))
        if stated is not None:  # a host-wide limit's Retry-After covers every IP, as the sandbox books it
            scope = (refusal_of(limiter, verdict) or ("", "ip"))[1]
            deadlines[HOST if scope == "host" else ip] = ft.now + stated
        if verdict.refused:
            again.append(page)
        if log is not None and verdict.refused:
            log.append((ft.now, HOST, {}, {}, f"site: {verdict.status} to {ip} sent {lease.granted_at:.2f}", {}))
        if not verdict.refused:
            result.ok += 1
            result.latencies.append(ft.now - lease.granted_at)
            policy.ok(lease, 200, headers)
        elif verdict.status == 429 or stated is not None:
            rate = (refusal_of(limiter, verdict) or ("",))[0] == RATE_LIMIT
            result.rate_limited += rate
            result.overloaded += not rate
            delay = min(stated if stated is not None else cfg.cooldown[0], cfg.retry_after_max)
            policy.rate_limited(lease, delay, verdict.status, stated, headers)
        else:
            result.overloaded += 1
            policy.overloaded(lease, verdict.status)
        gate.release(lease)  # judged first, as the middleware does: a pause is in force before the slot frees
        go(policy)

    for i in range(3 * ips):  # a fleet's processes start a second apart, as real ones do
        n = i % len(policies)
        ft.call_later(float(n), functools.partial(go, policies[n]))
    ft.run_until(seconds)
    return result


def _mean_capacity(steps: list[tuple[float, float]], seconds: float) -> float:
    """The mean of a capacity that steps at given times over the first *seconds*."""
    total = 0.0
    for (t, rate), (t_next, _) in zip(steps, [*steps[1:], (seconds, 0.0)]):
        total += rate * max(0.0, min(t_next, seconds) - min(t, seconds))
    return total / seconds
