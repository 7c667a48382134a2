"""ThrottlePolicy: the gate's side of the throttle. One :class:`HostController` per host.

Turns each answer into a :class:`~scrapy_polite.throttle.controller.Sample`,
cools the answering IP for the Retry-After the site stated (its own doubling
backoff when it stated none), and applies the :class:`Limits` the controller
returns to the gate in one place. Every change goes to *notify* once, with
its evidence. The law itself is :mod:`~scrapy_polite.throttle.controller`.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from scrapy_polite.downloader import ratelimit_headers as quota_headers
from scrapy_polite.gate.backoff import doubling
from scrapy_polite.pool.host_memory import HostMemory
from scrapy_polite.throttle.controller import HostController
from scrapy_polite.throttle.params import DEFAULT, Params
from scrapy_polite.throttle.values import CHALLENGE, OK, OVERLOAD, RATE, Bounds, Sample

if TYPE_CHECKING:
    from scrapy_polite.gate.base import ThrottleGate
    from scrapy_polite.gate.state import Lease
    from scrapy_polite.pool.endpoints import Endpoint
    from scrapy_polite.settings.config import PoliteConfig

logger = logging.getLogger(__name__)

#: A host rate moves the gate only when it moved this much (a shared gate is written less often).
STEP = 0.05

Notify = Callable[[str, dict[str, Any], dict[str, Any], str, dict[str, Any]], None]


class ThrottlePolicy:
    """Feeds each host's controller and applies its limits; free of Scrapy, tested on fake clocks."""

    def __init__(
        self,
        config: PoliteConfig,
        gate: ThrottleGate,
        clock: Callable[[], float] = time.monotonic,
        notify: Notify | None = None,
        params: Params = DEFAULT,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.gate = gate
        self.clock = clock
        self.notify: Notify = notify or (lambda *a: None)
        self.params = params
        self.wall = wall
        self._hosts: dict[str, HostController] = {}
        #: The rate each host's gate holds as this process last wrote it (another process may change it).
        self._applied: dict[str, float | None] = {}
        #: Rate signals without a Retry-After in a row, per (endpoint, host): the IP's own backoff doubles.
        self._streaks: dict[tuple[str, str], int] = {}
        #: Parks per host (each doubles the next, up to ``POLITE_PARK_TIME``'s upper end).
        self._parks: dict[str, int] = {}
        #: What evicted hosts had found (the rate and the peak), bounded as the gate's host memory.
        self.memory: HostMemory[tuple[float | None, float]] = HostMemory(config.host_memory, config.state_pin_ttl)
        gate.on_host_evicted(self._evicted)
        # The host's limits are in force before its first request: the first wave is paced too.
        gate.on_host_created(self._controller)

    # -- answers ---------------------------------------------------------------

    def rate_limited(
        self, lease: Lease, delay: float, status: int = 429, retry_after: float | None = None, headers: Any = None,
    ) -> None:
        """A rate signal to the request *lease* let go. *delay* is the request's wait before it goes
        again; *retry_after* what the site stated (the IP waits all of it, however long)."""
        now, host, endpoint = self.clock(), lease.host, lease.endpoint
        idle = self._cool(host, endpoint, delay, retry_after)
        sample = Sample(RATE, endpoint.key, lease.granted_at, now, retry_after=retry_after,
                        quota=self._quota(headers), idle=idle)
        evidence = {"status": status, "signal": "rate", "endpoint": endpoint.label, "gap": _finite(lease.gap),
                    "retry_after": round(retry_after if retry_after is not None else delay, 3)}
        self._observe(host, sample, f"{status} via {endpoint.label}", evidence)

    def overloaded(self, lease: Lease, status: int | str) -> None:
        """An overload answer (a 5xx that is no rate signal): never a clean answer, a cut once
        several IPs see them."""
        sample = Sample(OVERLOAD, lease.endpoint.key, lease.granted_at, self.clock())
        self._observe(lease.host, sample, f"{status} via {lease.endpoint.label}",
                      {"status": status, "signal": "overload", "endpoint": lease.endpoint.label})

    def on_challenge(self, lease: Lease, delay: float) -> None:
        """A challenge page: a cut twice as deep as a rate signal's (the IP is benched by the caller)."""
        endpoint = lease.endpoint
        self.gate.cool_endpoint(endpoint.key, lease.host, delay)
        sample = Sample(CHALLENGE, endpoint.key, lease.granted_at, self.clock())
        self._observe(lease.host, sample, f"challenge via {endpoint.label}",
                      {"status": "challenge", "signal": "challenge", "retry_after": round(delay, 3),
                       "endpoint": endpoint.label})

    def ok(self, lease: Lease, status: int, headers: Any = None, latency: float | None = None) -> None:
        """A clean answer to the request *lease* let go, *latency* seconds after it was sent (by
        default since the grant)."""
        now, host, endpoint = self.clock(), lease.host, lease.endpoint.key
        self._streaks.pop((endpoint, host), None)
        busy = lease.rate_held or bool(self.gate.host(host).waiters)
        quota = self._quota(headers)
        took = now - lease.granted_at if latency is None else latency
        sample = Sample(OK, endpoint, lease.granted_at, now, latency=took, quota=quota, busy=busy)
        self._observe(host, sample, "", {"status": status, "gap": _finite(lease.gap)})
        if quota is not None and quota.exhausted() and quota.reset:
            # Spent: this IP waits for the reset (the controller pauses the host when the quota is the host's).
            self.gate.cool_endpoint(endpoint, host, quota.reset)

    def unanswered(self, host: str, park: bool) -> str:
        """Several endpoints got no answer from *host*: an overload signal, or a park that doubles."""
        c = self._controller(host)
        if park:
            parks = self._parks[host] = self._parks.get(host, 0) + 1
            low, high = self.config.park_time
            seconds = doubling(low, parks - 1, high)
            old = self._snapshot(host)
            self.gate.pause_host(host, seconds)
            why = f"parked {seconds:.0f} s (park #{parks})"
            self.notify(host, old, self._snapshot(host), f"no answer via several endpoints; {why}", {"park": parks})
            return why
        reason = c.slow(self.clock(), "no answer via several endpoints")
        self._apply(host, c, reason, {})
        return reason

    # -- the controller's side ---------------------------------------------------

    def _observe(self, host: str, sample: Sample, what: str, evidence: dict[str, Any]) -> None:
        c = self._controller(host)
        self._follow_fleet(host, c, sample.now)
        followed = c.cut_at
        why = c.observe(sample)
        if c.cut_at == sample.now:  # a cut: where the host's limit was met
            evidence = {**evidence, "host_limit": {"ceiling": round(c.peak, 4), "fell_from": None}}
            if self.gate.shared and followed != sample.now:  # made here: every process sharing the host learns where
                self.gate.signal_host(host, c.peak, c.refused_at >= c.peak)
        if why is not None:
            self._apply(host, c, f"{what}: {why}" if what else why, evidence)
        elif c.limits().concurrency != self.gate.host(host).limit:
            self._apply(host, c, "concurrency follows the rate times the latency", evidence)

    def _apply(self, host: str, c: HostController, reason: str, evidence: dict[str, Any]) -> None:
        """Put *c*'s limits on the gate: the one place the throttle writes to it."""
        limits, h = c.limits(), self.gate.host(host)
        old = self._snapshot(host)
        applied = self._applied.get(host)
        if _moved(applied, limits.rate) or limits.rate is None and h.interval > 0:
            self._applied[host] = limits.rate
        else:  # a small move of the host rate is not written (a shared gate is written less often)
            limits = replace(limits, rate=1 / h.interval if h.interval > 0 else None)
        if _same(h.delay, limits.spacing):
            limits = replace(limits, spacing=h.delay)
        self.gate.apply_limits(host, limits)
        new = self._snapshot(host)
        if new != old:
            loud = any(word in reason for word in ("->", "paused", "quota", "back to"))
            if loud:
                evidence = {**evidence, "why": reason}
            self.notify(host, old, new, reason, evidence)

    def _controller(self, host: str) -> HostController:
        c = self._hosts.get(host)
        if c is None:
            now = self.clock()
            c = self._hosts[host] = HostController.start(self._bounds(host), now, self.params)
            kept = self.memory.recall(host, now)
            if kept is not None:
                c.rate, c.peak = kept
                c.starting = False
            shared = self.gate.host(host).interval
            if self.gate.shared:  # joining a fleet: from the rate it holds and where that was met
                self._applied[host] = None
                self._follow_fleet(host, c, now)
            elif shared > 0:
                c.adopt(1 / shared, now)
            self._applied.setdefault(host, None if shared <= 0 else 1 / shared)
            self._apply(host, c, "start" if c.rate is None else f"start at {c.rate:.2f} req/s", {})
        return c

    def _bounds(self, host: str) -> Bounds:
        cfg, limits = self.config, self.config.host_limits(host)
        ips = max(1, len(self.gate.endpoints) * self.gate.endpoint_concurrency)
        floor = min(cfg.delay_floor, limits.delay[0]) if cfg.adaptive else limits.delay[0]
        high = max(limits.concurrency, min(limits.concurrency_max, ips))
        return Bounds(ips, limits.delay, cfg.adaptive, floor, limits.concurrency, high, self.gate.shared)

    def _follow_fleet(self, host: str, c: HostController, now: float) -> None:
        """What the other processes sharing the gate did. Their grants count in what the host is
        sent; a host rate one of them wrote, this controller continues from: a cut there is the
        fleet's, made once, from the rate its signal met, and a pause every process keeps is what
        the failed probe cost the fleet (from the signal to the pause's end, the pause over or not)."""
        if not self.gate.shared:
            return
        h, signal = self.gate.host(host), self.gate.last_signal(host)
        c.granted.read(now, h.grants)
        shared = 1 / h.interval if h.interval > 0 else None
        fresh = signal.at > c.cut_at + 1e-3  # a cut since this one's own or the last it followed
        if fresh or _moved(self._applied.get(host), shared):
            cost = max(0.0, h.paused_until - signal.at) if fresh else 0.0
            # In force since this process's gate first read it: its grants since were made under it.
            c.adopt(shared, min(now, max(h.interval_since, c.changed_at)), signal.failed if fresh else None, cost)
            self._applied[host] = shared

    def _cool(self, host: str, endpoint: Endpoint, delay: float, retry_after: float | None) -> float:
        """The IP waits what the site stated, whole; without a statement its own backoff doubles.
        Returns the seconds it waits."""
        if retry_after is not None:
            self._streaks.pop((endpoint.key, host), None)
            seconds = max(delay, retry_after)
        else:
            streak = self._streaks.get((endpoint.key, host), 0)
            self._streaks[(endpoint.key, host)] = streak + 1
            seconds = doubling(delay, streak, max(delay, self.config.retry_after_max))
        self.gate.cool_endpoint(endpoint.key, host, seconds)
        return seconds

    def _quota(self, headers: Any) -> quota_headers.Quota | None:
        # Most answers state no quota: the three fields a quota needs are looked for first.
        if headers is None or not any(name in headers for name in quota_headers.FIELDS):
            return None

        def get(name: str) -> str | None:
            value = headers.get(name)
            if isinstance(value, bytes):
                return value.decode("latin-1")
            return value

        return quota_headers.read(get, self.wall)

    def _evicted(self, host: str) -> None:
        c = self._hosts.pop(host, None)
        self._applied.pop(host, None)
        if c is not None and (c.peak > 0 or c.rate is not None):
            self.memory.remember(host, (c.rate, c.peak), self.clock())

    def limit_met(self, host: str) -> float | None:
        """The rate the throttle holds *host* to (req/s), or ``None`` if it never refused the pool."""
        c = self._hosts.get(host)
        return None if c is None else c.held()

    def _snapshot(self, host: str) -> dict[str, Any]:
        h = self.gate.host(host)
        return {"concurrency": h.limit, "delay": h.delay, "interval": h.interval, "paused_until": h.paused_until}


def _moved(old: float | None, new: float | None) -> bool:
    if old is None or new is None:
        return old is not new
    return abs(new - old) > STEP * old


def _same(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return all(abs(x - y) <= 0.01 * max(x, y, 1e-6) for x, y in zip(a, b))


def _finite(value: float) -> float | None:
    """*value* rounded for a log or a JSON line; ``None`` for "never" (an infinite gap)."""
    return round(value, 4) if math.isfinite(value) else None
