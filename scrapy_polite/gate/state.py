"""The small state objects both gates keep: leases, waiters, endpoints, hosts, sessions."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

from twisted.internet.defer import Deferred

from scrapy_polite.pool.endpoints import Endpoint

#: Why a session leaves an endpoint that was taken out of the proxies file.
REMOVED = "endpoint removed from the pool"


class HostSignal(NamedTuple):
    """A host's last host-wide rate signal in a fleet sharing its state: when, and the total rate
    it met, so every process holds where the one that failed does."""

    #: When, on this process's clock (-inf: never).
    at: float = -math.inf
    #: The total rate (req/s) the host refused then, when the process that got it knew one.
    failed: float | None = None
    #: Whether that rate was a host rate in force (else what a burst with none measured).
    found: bool = False


NO_SIGNAL = HostSignal()


@dataclass(frozen=True)
class Limits:
    """A host's limits as the throttle sets them, which the gate applies in one call
    (:meth:`~scrapy_polite.gate.core.hosts.HostLimits.apply_limits`)."""

    #: Requests per second across the pool (``None``: no host rate).
    rate: float | None
    #: The band each endpoint's spacing is drawn from, in seconds.
    spacing: tuple[float, float]
    concurrency: int
    #: When the host may be asked again (the gate's clock; 0: not paused).
    paused_until: float = 0.0

    @property
    def interval(self) -> float:
        return 1 / self.rate if self.rate else 0.0


@dataclass
class Lease:
    """The right to send one request through one endpoint to one host."""

    endpoint: Endpoint
    host: str
    session: str | None
    granted_at: float
    waited: float
    released: bool = False
    #: Names the lease in a shared backend (empty for the in-memory gate).
    token: str = ""
    #: Seconds since this endpoint's previous request to this host, and how long
    #: of that its spacing had already let it go (inf: none remembered). Near-zero
    #: slack means spacing held the request: the throttle tells per-IP limits from
    #: host-wide ones by these.
    gap: float = math.inf
    slack: float = math.inf
    #: The host slot was given back after the stall timeout; the endpoint stays held.
    stalled: bool = False
    #: The host rate held the request (in memory: the host's interval let it go after both its
    #: arrival and its endpoint's spacing did; shared: a grant attempt was refused for the interval):
    #: a clean answer to it says the rate binds, which a probe past a ceiling needs to be judged by.
    rate_held: bool = False


@dataclass(eq=False)
class Waiter:
    """A request waiting at the gate for a lease."""

    host: str
    session: str | None
    not_before: float
    created: float
    deferred: Deferred = field(repr=False)
    done: bool = False
    #: Only this endpoint may serve it (a request whose ``meta['proxy']`` names a pool endpoint).
    endpoint: str | None = None
    #: Names it in a shared backend; *tag* (its URL) is listed there while it is held.
    token: str = ""
    tag: str | None = None
    #: The host rate held it at least once (see ``Lease.rate_held``).
    rate_held: bool = False

    def rotates(self) -> bool:
        """Any free endpoint may serve it: no session, no named endpoint."""
        return self.session is None and self.endpoint is None


@dataclass
class EndpointState:
    endpoint: Endpoint
    inflight: int = 0
    failures: int = 0
    unhealthy_until: float = 0.0
    removed: bool = False
    last_granted: float = 0.0
    requests: int = 0

    def usable(self, max_failures: int) -> bool:
        """In the pool and not dead (a dead one still gets a probe per longest backoff)."""
        return not self.removed and self.failures < max_failures

    def health(self, max_failures: int, now: float) -> str:
        """'dead', 'cooling' or 'healthy' (a removed endpoint is none of them)."""
        if not self.usable(max_failures):
            return "dead"
        return "cooling" if self.unhealthy_until > now else "healthy"


#: Values closer than this (relative) are one value: the Redis scripts round what they
#: store to 14 digits.
SAME = 1e-9


def same(a: Iterable[float], b: Iterable[float]) -> bool:
    """The same values, as a shared state rounds them."""
    return all(math.isclose(x, y, rel_tol=SAME) for x, y in zip(a, b, strict=True))


@dataclass(slots=True)
class HostState:
    limit: int
    delay: tuple[float, float]
    inflight: int = 0
    paused_until: float = 0.0
    min_delay: float = 0.0
    # Minimum time between two request starts to the host, whatever the endpoint:
    # the throttle sets it when the host limits its total rate.
    interval: float = 0.0
    next_start: float = 0.0
    #: Requests granted to the host so far (by every process, for a shared gate):
    #: the throttle measures the rate actually sent from it.
    grants: int = 0
    #: Since when this process has had the current spacing band and host interval in force
    #: (set here, or first read from a shared state): the throttle counts an answer toward a
    #: value only if its request was granted under it.
    delay_since: float = -math.inf
    interval_since: float = -math.inf
    waiters: deque[Waiter] = field(default_factory=deque, repr=False)

    @property
    def load(self) -> int:
        """Requests in flight plus waiting (what the scheduler queue balances)."""
        return self.inflight + len(self.waiters)

    def idle(self) -> bool:
        return self.inflight <= 0 and not self.waiters

    def free_slots(self) -> int:
        return max(0, self.limit - self.inflight)

    def shortest_spacing(self) -> float:
        """The least gap between two requests through one endpoint: a spacing drawn
        before the band was raised still waits the new minimum."""
        return max(self.delay[0], self.min_delay)

    def longest_spacing(self) -> float:
        return max(self.delay[1], self.min_delay)


@dataclass(slots=True)
class SessionState:
    key: str
    endpoint_key: str | None = None
    busy: bool = False
    lost: str | None = None
    requests: int = 0
    queue: deque[Waiter] = field(default_factory=deque, repr=False)

    def idle(self) -> bool:
        """Nothing queued, nothing in flight: it may be forgotten after a while."""
        return not self.busy and not self.queue

    def turn_of(self, waiter: Waiter) -> bool:
        """Whether *waiter* is this session's next request, and nothing of it is in flight."""
        return not self.busy and bool(self.queue) and self.queue[0] is waiter


class SessionLoad:
    """How many sessions each endpoint carries, in buckets by that count.

    A new session goes to the least-shared endpoint. Walking the buckets from
    the smallest count finds one at once in a balanced pool, where comparing
    every endpoint cost O(pool) per new session (4 ms at 10,000 endpoints).
    Within a bucket, the endpoint that reached the count first comes first.
    """

    def __init__(self) -> None:
        self._count: dict[str, int] = {}
        self._buckets: dict[int, dict[str, None]] = {}

    def add(self, key: str) -> None:
        if key not in self._count:
            self._count[key] = 0
            self._buckets.setdefault(0, {})[key] = None

    def of(self, key: str) -> int:
        return self._count.get(key, 0)

    def pin(self, key: str) -> None:
        self._move(key, 1)

    def unpin(self, key: str) -> None:
        if self._count.get(key, 0) > 0:
            self._move(key, -1)

    def least_shared(self) -> Iterator[Iterable[str]]:
        """The endpoints a bucket at a time, fewest sessions first (do not pin while walking)."""
        for count in sorted(self._buckets):
            yield self._buckets[count]

    def _move(self, key: str, delta: int) -> None:
        old = self._count.get(key)
        if old is None:
            return
        bucket = self._buckets[old]
        del bucket[key]
        if not bucket:
            del self._buckets[old]
        self._count[key] = old + delta
        self._buckets.setdefault(old + delta, {})[key] = None


class RemovalGrace:
    """When the grace of each endpoint removed from the pool ends.

    A proxies file being rewritten can drop an endpoint for one check. The
    sessions pinned to it wait this long for it to come back, so they keep their
    identity, before ``POLITE_SESSION_POLICY`` applies (at once for 0 seconds).
    """

    def __init__(self, seconds: float = 0.0) -> None:
        self.seconds = seconds
        self._until: dict[str, float] = {}

    def start(self, key: str, now: float) -> float:
        until = self._until[key] = now + self.seconds
        return until

    def cancel(self, key: str) -> None:
        self._until.pop(key, None)

    def until(self, key: str) -> float | None:
        return self._until.get(key)

    def __bool__(self) -> bool:
        """Whether any endpoint is within its grace (the gate asks on every dispatch)."""
        return bool(self._until)

    def expired(self, now: float) -> set[str]:
        """The keys whose grace has ended, forgotten from now on."""
        if not self._until:
            return set()
        done = {key for key, until in self._until.items() if until <= now}
        for key in done:
            del self._until[key]
        return done


def revive_sessions(sessions: Iterable[SessionState], keys: set[str]) -> None:
    """Sessions lost with one of *keys* may run again: those endpoints are back in the pool."""
    for s in sessions:
        if s.lost and s.endpoint_key in keys:
            s.lost = None


def lost_message(session: str, label: str, why: str) -> str:
    """The SessionEndpointLost text for *session*, whose endpoint *label* died or was removed."""
    how = ", removed from the pool" if why == REMOVED else ""
    return f"session {session!r} lost its endpoint {label}{how} (POLITE_SESSION_POLICY='fail')"
