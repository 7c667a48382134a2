"""The gate: who may send what, through which endpoint, and when.

All pool, host and session state lives here, behind the small interface of
:class:`Gate` (``acquire`` / ``release`` plus the setters the throttle and
health checks use), so a shared backend can implement the same interface.
:class:`LocalGate` is the in-memory implementation for one process.

Scrapy's download slots do not enforce per-slot concurrency on the asyncio
reactor, so the gate enforces every limit itself: requests wait here, in
``process_request``, without blocking the reactor.
"""

from __future__ import annotations

import heapq
import logging
import math
import random
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

from twisted.internet.defer import Deferred

from scrapy_polite.errors import NoUsableEndpoints, SessionEndpointLost
from scrapy_polite.pool.endpoints import Endpoint
from scrapy_polite.pool.host_memory import HOST_MEMORY, HostMemory

logger = logging.getLogger(__name__)

CallLater = Callable[[float, Callable[[], None]], object]

#: An (endpoint, host) pair is remembered this long after its timers run out,
#: so the next request through it knows its gap (the Redis keys live as long).
PAIR_MEMORY = 1.0
#: Idle hosts and sessions looked at per acquire and per release: eviction keeps
#: pace with the requests that create state, at a constant cost per request.
SWEEP = 2
#: A host's learned limits, kept after eviction: (concurrency, spacing band,
#: minimum spacing, host interval).
Learned = tuple[int, tuple[float, float], float, float]


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


@dataclass(eq=False)
class _Waiter:
    host: str
    session: str | None
    not_before: float
    created: float
    deferred: Deferred = field(repr=False)
    done: bool = False
    #: Only this endpoint may serve it (a request whose ``meta['proxy']`` names a pool endpoint).
    endpoint: str | None = None


@dataclass
class EndpointState:
    endpoint: Endpoint
    inflight: int = 0
    failures: int = 0
    unhealthy_until: float = 0.0
    removed: bool = False
    sessions: int = 0
    last_granted: float = 0.0
    requests: int = 0


@dataclass
class _PairState:
    last_granted: float = -math.inf
    next_allowed: float = 0.0
    cooldown_until: float = 0.0
    banned_until: float = 0.0


@dataclass
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
    waiters: deque[_Waiter] = field(default_factory=deque, repr=False)


@dataclass
class SessionState:
    key: str
    endpoint_key: str | None = None
    busy: bool = False
    lost: str | None = None
    requests: int = 0
    queue: deque[_Waiter] = field(default_factory=deque, repr=False)


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


#: Why a session leaves an endpoint that was taken out of the proxies file.
REMOVED = "endpoint removed from the pool"


class Gate(Protocol):
    """What the middleware and the throttle need from pool state."""

    def acquire(
        self, host: str, session: str | None = None, not_before: float = 0.0, tag: str | None = None
    ) -> Deferred: ...
    def release(self, lease: Lease) -> None: ...
    def expire_leases(self, max_age: float) -> list[Lease]: ...
    def host(self, host: str) -> HostState: ...
    def cool_endpoint(self, endpoint_key: str, host: str | None, seconds: float) -> None: ...
    def ban_endpoint(self, endpoint_key: str, host: str, seconds: float) -> None: ...
    def pause_host(self, host: str, seconds: float) -> None: ...
    def set_host_limit(self, host: str, limit: int) -> None: ...
    def set_host_delay(self, host: str, delay: tuple[float, float]) -> None: ...
    def set_host_interval(self, host: str, seconds: float) -> None: ...
    def endpoint_failed(self, endpoint_key: str) -> None: ...
    def endpoint_ok(self, endpoint_key: str) -> None: ...
    def set_endpoints(self, endpoints: Iterable[Endpoint]) -> tuple[list[str], list[str]]: ...
    def sessions(self) -> dict[str, str | None]: ...
    def close(self, reason: str, error: type[Exception] = ...) -> None: ...
    def start(self) -> None: ...
    def stop(self) -> Deferred | None: ...


class LocalGate:
    """In-memory :class:`Gate` for one crawler process."""

    def __init__(
        self,
        endpoints: Iterable[Endpoint],
        *,
        host_concurrency: int,
        endpoint_concurrency: int,
        delay: tuple[float, float],
        backoff: tuple[float, float],
        max_failures: int,
        session_policy: str = "fail",
        call_later: CallLater | None = None,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
        on_session_repinned: Callable[[str, str | None, str], None] | None = None,
        on_all_unusable: Callable[[], None] | None = None,
        removal_grace: float = 0.0,
        stall_timeout: float = 0.0,
        on_stalled: Callable[[Lease], None] | None = None,
        host_memory: int = HOST_MEMORY,
        memory_ttl: float = 3600.0,
        host_overrides: dict[str, tuple[int, tuple[float, float]]] | None = None,
    ) -> None:
        self.host_concurrency = host_concurrency
        #: (concurrency, delay) a host starts at, by host key, instead of the two above.
        self.host_overrides: dict[str, tuple[int, tuple[float, float]]] = dict(host_overrides or {})
        self.endpoint_concurrency = endpoint_concurrency
        self.delay = delay
        self.backoff = backoff
        self.max_failures = max_failures
        self.session_policy = session_policy
        self._call_later = call_later or _reactor_call_later
        self._clock = clock
        self._rng = rng or random.Random()
        self._on_session_repinned = on_session_repinned
        self._on_all_unusable = on_all_unusable
        self._endpoints: dict[str, EndpointState] = {}
        # Endpoints with a free request slot, least recently granted first.
        self._idle: OrderedDict[str, None] = OrderedDict()
        self._hosts: dict[str, HostState] = {}
        self._pairs: dict[tuple[str, str], _PairState] = {}
        self._sessions: dict[str, SessionState] = {}
        self._waiting_hosts: dict[str, None] = {}
        self._timer: object | None = None
        self._timer_at: float = float("inf")
        self._closed: str | None = None
        self._close_error: type[Exception] = NoUsableEndpoints
        self._leases: dict[int, Lease] = {}
        self._removals = RemovalGrace(removal_grace)
        self.stall_timeout = stall_timeout
        self._on_stalled = on_stalled
        self._stall_timers: dict[int, object] = {}
        #: What idle hosts taught, after their live state is gone (POLITE_HOST_MEMORY).
        self.memory: HostMemory[Learned] = HostMemory(host_memory, memory_ttl)
        #: A session idle this long (nothing queued, nothing in flight) is forgotten.
        self.session_ttl = memory_ttl
        self._host_pairs: dict[str, set[str]] = {}
        # Each live host's earliest eviction check, in a heap (one entry per host).
        self._evict_due: dict[str, float] = {}
        self._evict_heap: list[tuple[float, str]] = []
        # Sessions with nothing queued or in flight, least recently used first.
        self._idle_sessions: OrderedDict[str, float] = OrderedDict()
        self._waiting_count = 0
        self._load_listeners: list[Callable[[str, int], None]] = []
        self._evict_hooks: list[Callable[[str], None]] = []
        self._dropped = 0  # hosts and sessions dropped since the tables were last compacted
        #: ``(host, endpoint key) -> bool``: which endpoints a host's requests may take (its proxy tier).
        self.eligible: Callable[[str, str], bool] | None = None
        self.set_endpoints(endpoints)

    # -- inspection -----------------------------------------------------

    @property
    def endpoints(self) -> dict[str, EndpointState]:
        return self._endpoints

    @property
    def hosts(self) -> dict[str, HostState]:
        return self._hosts

    def sessions(self) -> dict[str, str | None]:
        """Session key -> masked label of its pinned endpoint (None: not yet)."""
        return {
            key: (self._endpoints[s.endpoint_key].endpoint.label if s.endpoint_key else None)
            for key, s in self._sessions.items()
        }

    def session_endpoint(self, key: str) -> Endpoint | None:
        s = self._sessions.get(key)
        return self._endpoints[s.endpoint_key].endpoint if s and s.endpoint_key else None

    def waiting(self) -> int:
        return self._waiting_count

    def host_load(self, host: str) -> int:
        """Requests in flight plus waiting for *host* (for the scheduler queue)."""
        h = self._hosts.get(host)
        return h.inflight + len(h.waiters) if h else 0

    def endpoint_usable(self, st: EndpointState) -> bool:
        return not st.removed and st.failures < self.max_failures

    def health_counts(self) -> dict[str, int]:
        now = self._clock()
        counts = {"healthy": 0, "cooling": 0, "dead": 0}
        for st in self._endpoints.values():
            if st.removed:
                continue
            if not self.endpoint_usable(st):
                counts["dead"] += 1
            elif st.unhealthy_until > now:
                counts["cooling"] += 1
            else:
                counts["healthy"] += 1
        return counts

    # -- configuration --------------------------------------------------

    def host(self, host: str) -> HostState:
        h = self._hosts.get(host)
        if h is None:
            now = self._clock()
            h = self._hosts[host] = HostState(*self.host_overrides.get(host, (self.host_concurrency, self.delay)))
            learned = self.memory.recall(host, now)
            if learned is not None:
                h.limit, h.delay, h.min_delay, h.interval = learned
            self._evict_due[host] = due = now + PAIR_MEMORY
            heapq.heappush(self._evict_heap, (due, host))
        return h

    def add_load_listener(self, listener: Callable[[str, int], None]) -> None:
        """Call *listener(host, load)* whenever a host's :meth:`host_load` changes."""
        self._load_listeners.append(listener)

    def on_host_evicted(self, hook: Callable[[str], None]) -> None:
        """Call *hook(host)* when an idle host's live state is dropped."""
        self._evict_hooks.append(hook)

    # -- eviction ---------------------------------------------------------

    def sweep(self, limit: int | None = None) -> int:
        """Evict up to *limit* (all, for None) idle hosts and sessions that are due; return how many."""
        now = self._clock()
        done = self._sweep_hosts(now, limit) + self._sweep_sessions(now, limit)
        if limit is None:
            self._compact()
        return done

    def _compact(self) -> None:
        """Rebuild the tables once more entries left them than they hold: dicts never shrink."""
        if self._dropped <= max(1024, len(self._hosts) + len(self._sessions)):
            return
        self._dropped = 0
        self._hosts = dict(self._hosts)
        self._evict_due = dict(self._evict_due)
        self._pairs = dict(self._pairs)
        self._host_pairs = dict(self._host_pairs)
        self._sessions = dict(self._sessions)
        self._idle_sessions = OrderedDict(self._idle_sessions)
        self._waiting_hosts = dict(self._waiting_hosts)
        self._evict_heap = list(self._evict_heap)
        self.memory.compact()

    def _sweep_hosts(self, now: float, limit: int | None) -> int:
        heap, due_at, evicted, looked = self._evict_heap, self._evict_due, 0, 0
        while heap and heap[0][0] <= now and (limit is None or looked < limit):
            looked += 1
            _, host = heapq.heappop(heap)
            due = due_at.get(host)
            h = self._hosts.get(host)
            if due is None or h is None:
                continue
            if due <= now:
                due = self._evictable_at(host, h, now)
                if due <= now:
                    self._evict(host, h, now)
                    evicted += 1
                    continue
                due_at[host] = due
            heapq.heappush(heap, (due, host))
        return evicted

    def _evictable_at(self, host: str, h: HostState, now: float) -> float:
        """When *host* can be evicted if it stays as it is: ``PAIR_MEMORY`` after its last timer."""
        if h.waiters or h.inflight > 0:
            return now + PAIR_MEMORY
        quiet = max(h.paused_until, h.next_start)
        for key in self._host_pairs.get(host, ()):
            pair = self._pairs[(key, host)]
            quiet = max(quiet, pair.next_allowed, pair.cooldown_until, pair.banned_until)
        return quiet + PAIR_MEMORY

    def _evict(self, host: str, h: HostState, now: float) -> None:
        self._dropped += 1
        del self._hosts[host]
        del self._evict_due[host]
        self._waiting_hosts.pop(host, None)
        for key in self._host_pairs.pop(host, ()):
            del self._pairs[(key, host)]
        learned = (h.limit, h.delay, h.min_delay, h.interval)
        if learned != (self.host_concurrency, self.delay, 0.0, 0.0):
            self.memory.remember(host, learned, now)
        for hook in self._evict_hooks:
            hook(host)

    def _sweep_sessions(self, now: float, limit: int | None) -> int:
        idle, forgotten = self._idle_sessions, 0
        while idle and (limit is None or forgotten < limit):
            key, since = next(iter(idle.items()))
            if since + self.session_ttl > now:
                break
            del idle[key]
            s = self._sessions.get(key)
            if s is None or s.busy or s.queue:
                continue
            if s.endpoint_key is not None and s.endpoint_key in self._endpoints:
                self._endpoints[s.endpoint_key].sessions -= 1
            del self._sessions[key]
            self._dropped += 1
            forgotten += 1
        return forgotten

    def _session_idle(self, s: SessionState, now: float) -> None:
        if not s.busy and not s.queue:
            self._idle_sessions[s.key] = now
            self._idle_sessions.move_to_end(s.key)

    def _load_changed(self, host: str, h: HostState) -> None:
        if self._load_listeners:
            load = h.inflight + len(h.waiters)
            for listener in self._load_listeners:
                listener(host, load)

    def set_endpoints(self, endpoints: Iterable[Endpoint]) -> tuple[list[str], list[str]]:
        """Make the pool exactly *endpoints*; return (added, removed) labels.

        A removed endpoint takes no new requests; its in-flight ones finish. Its
        sessions wait for it through the removal grace, and come back with it.
        """
        now = self._clock()
        wanted = {e.key: e for e in endpoints}
        added, removed = [], []
        back: set[str] = set()
        for key, ep in wanted.items():
            st = self._endpoints.get(key)
            if st is None:
                self._endpoints[key] = EndpointState(ep)
                self._idle[key] = None
                self._idle.move_to_end(key, last=False)
                added.append(ep.label)
            elif st.removed:
                st.removed = False
                self._removals.cancel(key)
                back.add(key)
                if st.inflight < self.endpoint_concurrency:
                    self._idle[key] = None
                added.append(ep.label)
        for key, st in self._endpoints.items():
            if key not in wanted and not st.removed:
                st.removed = True
                self._idle.pop(key, None)
                removed.append(st.endpoint.label)
                self._schedule(self._removals.start(key, now))
        revive_sessions(self._sessions.values(), {k for k in back if self.endpoint_usable(self._endpoints[k])})
        self._expire_removals(now)
        self._kick()
        return added, removed

    def set_host_limit(self, host: str, limit: int) -> None:
        self.host(host).limit = max(1, limit)
        self._kick()

    def set_host_delay(self, host: str, delay: tuple[float, float]) -> None:
        self.host(host).delay = delay

    def set_host_interval(self, host: str, seconds: float) -> None:
        h = self.host(host)
        h.next_start += seconds - h.interval
        h.interval = seconds
        self._kick()

    def set_host_min_delay(self, host: str, seconds: float) -> None:
        self.host(host).min_delay = seconds

    def pause_host(self, host: str, seconds: float) -> None:
        h = self.host(host)
        h.paused_until = max(h.paused_until, self._clock() + seconds)
        self._kick()

    def cool_endpoint(self, endpoint_key: str, host: str | None, seconds: float) -> None:
        """No request through *endpoint_key* (to *host*, or anywhere) for *seconds*."""
        until = self._clock() + seconds
        if host is None:
            st = self._endpoints.get(endpoint_key)
            if st is not None:
                st.unhealthy_until = max(st.unhealthy_until, until)
        else:
            pair = self._pair(endpoint_key, host)
            pair.cooldown_until = max(pair.cooldown_until, until)
        self._kick()

    def ban_endpoint(self, endpoint_key: str, host: str, seconds: float) -> None:
        pair = self._pair(endpoint_key, host)
        pair.banned_until = max(pair.banned_until, self._clock() + seconds)
        self._kick()

    def endpoint_failed(self, endpoint_key: str) -> None:
        """A connection-level failure: back off exponentially, then re-check."""
        st = self._endpoints.get(endpoint_key)
        if st is None:
            return
        st.failures += 1
        base, cap = self.backoff
        wait = min(cap, base * 2 ** (st.failures - 1))
        st.unhealthy_until = self._clock() + wait
        if st.failures >= self.max_failures:  # dead (a removed one's sessions keep their grace until then)
            self._handle_lost_endpoints({endpoint_key})
            if self._on_all_unusable is not None and not any(
                self.endpoint_usable(s) for s in self._endpoints.values()
            ):
                self._on_all_unusable()
        self._kick()

    def endpoint_ok(self, endpoint_key: str) -> None:
        st = self._endpoints.get(endpoint_key)
        if st is not None and st.failures:
            st.failures = 0
            st.unhealthy_until = 0.0

    def expire_leases(self, max_age: float) -> list[Lease]:
        """Release leases held longer than *max_age* seconds, and return them.

        A request that vanished between the gate and the downloader (dropped
        by another component) must not hold its endpoint forever.
        """
        now = self._clock()
        stale = [lease for lease in self._leases.values() if lease.granted_at < now - max_age]
        for lease in stale:
            self.release(lease)
        self._prune_pairs(now)
        self.sweep()
        return stale

    def _prune_pairs(self, now: float) -> None:
        """Forget (endpoint, host) pairs whose timers ran out ``PAIR_MEMORY`` ago.

        An expired pair constrains nothing, so dropping it changes no decision
        and keeps memory bounded by recent activity, not by endpoints x hosts.
        """
        done = [
            key for key, pair in self._pairs.items()
            if max(pair.next_allowed, pair.cooldown_until, pair.banned_until) + PAIR_MEMORY <= now
        ]
        for key in done:
            del self._pairs[key]
            keys = self._host_pairs.get(key[1])
            if keys is not None:
                keys.discard(key[0])
                if not keys:
                    del self._host_pairs[key[1]]

    def close(self, reason: str, error: type[Exception] = NoUsableEndpoints) -> None:
        """Fail every waiter with *error*, so the engine can close instead of hanging."""
        if self._closed:
            return
        self._closed = reason
        self._close_error = error
        for host, h in self._hosts.items():
            while h.waiters:
                self._waiting_count -= 1
                self._fail(h.waiters.popleft(), error(reason))
            self._load_changed(host, h)
        self._waiting_hosts.clear()

    # -- leasing --------------------------------------------------------

    def start(self) -> None:
        """Nothing to connect to: the in-memory gate is ready when built."""

    def stop(self) -> Deferred | None:
        return None

    def acquire(
        self, host: str, session: str | None = None, not_before: float = 0.0, tag: str | None = None,
        endpoint: str | None = None,
    ) -> Deferred:
        """A Deferred that fires with a :class:`Lease` when *host* may be sent to.

        *tag* (the request URL) only matters to shared backends, which list
        what a crashed process was holding. *endpoint* (a key) restricts the
        lease to that endpoint, under the same gates.
        """
        now = self._clock()
        waiter = _Waiter(host, session, not_before, now, Deferred(lambda d: self._cancel(waiter)), endpoint=endpoint)
        if self._closed:
            waiter.deferred.errback(self._close_error(self._closed))
            return waiter.deferred
        if session is not None:
            s = self._sessions.get(session)
            if s is None:
                s = self._sessions[session] = SessionState(session)
            if s.lost:
                waiter.deferred.errback(SessionEndpointLost(s.lost))
                return waiter.deferred
            s.queue.append(waiter)
            self._idle_sessions.pop(session, None)
        h = self.host(host)
        h.waiters.append(waiter)
        self._waiting_count += 1
        self._load_changed(host, h)
        self._waiting_hosts[host] = None
        self._dispatch((host,))
        self._sweep_hosts(now, SWEEP)
        self._sweep_sessions(now, SWEEP)
        return waiter.deferred

    def release(self, lease: Lease) -> None:
        if lease.released:
            return
        lease.released = True
        self._leases.pop(id(lease), None)
        timer = self._stall_timers.pop(id(lease), None)
        if timer is not None:
            _cancel_timer(timer)
        st = self._endpoints.get(lease.endpoint.key)
        if st is not None:
            st.inflight -= 1
            if not st.removed and st.inflight < self.endpoint_concurrency:
                self._idle[lease.endpoint.key] = None
        now = self._clock()
        h = self._hosts.get(lease.host)
        if h is not None and not lease.stalled:
            h.inflight -= 1
            self._evict_due[lease.host] = now + PAIR_MEMORY
            self._load_changed(lease.host, h)
        if lease.session is not None:
            s = self._sessions.get(lease.session)
            if s is not None:
                s.busy = False
                self._session_idle(s, now)
        self._kick()
        self._sweep_hosts(now, SWEEP)
        self._sweep_sessions(now, SWEEP)

    def stall(self, lease: Lease) -> bool:
        """Give *lease*'s host slot back, once; its endpoint stays held until release.

        A request unanswered after the stall timeout is most likely stuck on a
        hanging proxy: it must not keep other endpoints from the host until the
        download timeout. Returns whether the slot was given back now.
        """
        self._stall_timers.pop(id(lease), None)
        if not take_host_slot_back(lease, self._hosts):
            return False
        h = self._hosts.get(lease.host)
        if h is not None:
            self._load_changed(lease.host, h)
        if self._on_stalled is not None:
            self._on_stalled(lease)
        self._kick()
        return True

    # -- internals --------------------------------------------------------

    def _pair(self, endpoint_key: str, host: str) -> _PairState:
        pair = self._pairs.get((endpoint_key, host))
        if pair is None:
            pair = self._pairs[(endpoint_key, host)] = _PairState()
            self._host_pairs.setdefault(host, set()).add(endpoint_key)
        return pair

    def _cancel(self, waiter: _Waiter) -> None:
        waiter.done = True
        self._drop(waiter)

    def _drop(self, waiter: _Waiter) -> None:
        """Take *waiter* out of its host's and its session's queues, wherever it is."""
        h = self._hosts.get(waiter.host)
        s = self._sessions.get(waiter.session) if waiter.session is not None else None
        if h is not None and waiter in h.waiters:
            h.waiters.remove(waiter)
            self._waiting_count -= 1
            self._load_changed(waiter.host, h)
        if s is not None and waiter in s.queue:
            s.queue.remove(waiter)
            self._session_idle(s, self._clock())

    def _fail(self, waiter: _Waiter, exc: Exception) -> None:
        if waiter.done:
            return
        waiter.done = True
        self._drop(waiter)
        waiter.deferred.errback(exc)

    def _expire_removals(self, now: float) -> None:
        """Apply the session policy to the endpoints still removed when their grace ends."""
        ended = {key for key in self._removals.expired(now) if self._endpoints[key].removed}
        if ended:
            self._handle_lost_endpoints(ended, REMOVED)

    def _handle_lost_endpoints(self, keys: set[str], why: str = "endpoint unusable") -> None:
        for s in self._sessions.values():
            if s.endpoint_key not in keys:
                continue
            old = self._endpoints[s.endpoint_key].endpoint.label
            if self.session_policy == "repin":
                self._endpoints[s.endpoint_key].sessions -= 1
                s.endpoint_key = None
                if self._on_session_repinned is not None:
                    self._on_session_repinned(s.key, old, why)
                continue
            s.lost = lost_message(s.key, old, why)
            for w in list(s.queue):
                self._fail(w, SessionEndpointLost(s.lost))

    def _kick(self) -> None:
        if self._waiting_hosts:
            self._dispatch(tuple(self._waiting_hosts))

    def _dispatch(self, hosts: Iterable[str]) -> None:
        now = self._clock()
        self._expire_removals(now)
        wake = float("inf")
        for host in hosts:
            h = self._hosts.get(host)
            if h is None:
                continue
            wake = min(wake, self._dispatch_host(host, h, now))
            if not h.waiters:
                self._waiting_hosts.pop(host, None)
        if wake < float("inf"):
            self._schedule(wake)

    def _dispatch_host(self, host: str, h: HostState, now: float) -> float:
        """Grant what can be granted for *host*; return when to look again."""
        wake = float("inf")
        while h.waiters and h.inflight < h.limit:
            if h.paused_until > now:
                return h.paused_until
            if h.next_start > now:
                return h.next_start
            granted = False
            rotation_blocked = False  # no free endpoint for any unpinned waiter
            for waiter in h.waiters:
                if waiter.not_before > now:
                    wake = min(wake, waiter.not_before)
                    continue
                rotates = waiter.session is None and waiter.endpoint is None
                if rotation_blocked and rotates:
                    continue
                st, when = self._pick(waiter, h, now)
                if st is None:
                    wake = min(wake, when)
                    rotation_blocked = rotation_blocked or rotates
                    continue
                h.waiters.remove(waiter)
                self._waiting_count -= 1
                self._grant(waiter, st, h, now)
                granted = True
                break
            if not granted:
                break
        return wake

    def _pick(self, waiter: _Waiter, h: HostState, now: float) -> tuple[EndpointState | None, float]:
        """The endpoint *waiter* can use now, or (None, when to look again)."""
        if waiter.session is not None:
            s = self._sessions[waiter.session]
            if s.busy or not s.queue or s.queue[0] is not waiter:
                return None, float("inf")
            pair = self._pairs.get((s.endpoint_key, waiter.host)) if s.endpoint_key is not None else None
            if pair is not None and pair.banned_until > now:
                # Its identity is burned for this host (a ban or challenge): the session starts on a new one.
                old = self._endpoints[s.endpoint_key]
                old.sessions -= 1
                s.endpoint_key = None
                if self._on_session_repinned is not None:
                    self._on_session_repinned(s.key, old.endpoint.label, f"benched for {waiter.host}")
            if s.endpoint_key is None:
                key = self._choose_for_session(waiter.host, now)
                if key is None:
                    return None, self._next_health_change(now)
                s.endpoint_key = key
                self._endpoints[key].sessions += 1
            st = self._endpoints[s.endpoint_key]
            if st.removed:  # within its removal grace: wait for it to come back
                until = self._removals.until(st.endpoint.key)
                return None, float("inf") if until is None else until
            if st.inflight >= self.endpoint_concurrency:
                return None, float("inf")
            ready = self._ready_at(st, waiter.host, h, now)
            return (st, 0.0) if ready <= now else (None, ready)
        wake = float("inf")
        eligible = self.eligible if waiter.endpoint is None else None
        for key in self._idle if waiter.endpoint is None else [waiter.endpoint]:
            st = self._endpoints.get(key)
            if st is None or key not in self._idle or (eligible is not None and not eligible(waiter.host, key)):
                continue
            ready = self._ready_at(st, waiter.host, h, now)
            if ready <= now:
                return st, 0.0
            wake = min(wake, ready)
        return None, wake

    def _ready_at(self, st: EndpointState, host: str, h: HostState, now: float) -> float:
        # A dead endpoint is ready once its backoff has passed: it gets one probe
        # request (``_grant`` pushes the next one out by the longest backoff).
        ready = st.unhealthy_until
        pair = self._pairs.get((st.endpoint.key, host))
        if pair is not None:
            # A spacing drawn before the band was raised still waits the new minimum.
            shortest = pair.last_granted + max(h.delay[0], h.min_delay)
            ready = max(ready, pair.next_allowed, pair.cooldown_until, pair.banned_until, shortest)
        return ready

    def _choose_for_session(self, host: str, now: float) -> str | None:
        best: tuple[int, float, float] | None = None
        best_key = None
        for key, st in self._endpoints.items():
            if not self.endpoint_usable(st) or (self.eligible is not None and not self.eligible(host, key)):
                continue
            pair = self._pairs.get((key, host))
            if pair is not None and pair.banned_until > now:
                continue
            rank = (st.sessions, max(st.unhealthy_until, now), st.last_granted)
            if best is None or rank < best:
                best, best_key = rank, key
        return best_key

    def _next_health_change(self, now: float) -> float:
        times = [st.unhealthy_until for st in self._endpoints.values() if st.unhealthy_until > now]
        return min(times, default=now + 1.0)

    def _grant(self, waiter: _Waiter, st: EndpointState, h: HostState, now: float) -> None:
        key = st.endpoint.key
        st.inflight += 1
        st.requests += 1
        st.last_granted = now
        if not self.endpoint_usable(st):
            # A dead endpoint's probe: the next one comes a longest backoff later.
            st.unhealthy_until = now + self.backoff[1]
        if st.inflight >= self.endpoint_concurrency:
            self._idle.pop(key, None)
        else:
            self._idle.move_to_end(key)
        h.inflight += 1
        h.grants += 1
        h.next_start = now + h.interval
        low, high = h.delay
        spacing = max(self._rng.uniform(low, high), h.min_delay)
        pair = self._pair(key, waiter.host)
        gap = now - pair.last_granted
        slack = now - max(pair.next_allowed, pair.last_granted + max(low, h.min_delay))
        pair.last_granted = now
        pair.next_allowed = now + spacing
        if waiter.session is not None:
            s = self._sessions[waiter.session]
            s.busy = True
            s.requests += 1
            s.queue.popleft()
        waiter.done = True
        lease = Lease(st.endpoint, waiter.host, waiter.session, now, now - waiter.created, gap=gap, slack=max(0.0, slack))
        self._leases[id(lease)] = lease
        if self.stall_timeout > 0:
            self._stall_timers[id(lease)] = self._call_later(self.stall_timeout, lambda: self.stall(lease))
        waiter.deferred.callback(lease)

    def _schedule(self, at: float) -> None:
        if self._timer is not None and self._timer_at <= at:
            return
        if self._timer is not None:
            _cancel_timer(self._timer)
        self._timer_at = at
        self._timer = self._call_later(max(0.0, at - self._clock()), self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at = float("inf")
        self._expire_removals(self._clock())
        self._kick()


def lost_message(session: str, label: str, why: str) -> str:
    """The SessionEndpointLost text for *session*, whose endpoint *label* died or was removed."""
    how = ", removed from the pool" if why == REMOVED else ""
    return f"session {session!r} lost its endpoint {label}{how} (POLITE_SESSION_POLICY='fail')"


def take_host_slot_back(lease: Lease, hosts: dict[str, HostState]) -> bool:
    """Mark *lease* stalled and free its host slot in *hosts*; False if released or stalled already."""
    if lease.released or lease.stalled:
        return False
    lease.stalled = True
    h = hosts.get(lease.host)
    if h is not None:
        h.inflight -= 1
    return True


def _reactor_call_later(delay: float, func: Callable[[], None]) -> object:
    from twisted.internet import reactor

    return reactor.callLater(delay, func)  # type: ignore[attr-defined]


def _cancel_timer(timer: object) -> None:
    cancel = getattr(timer, "cancel", None)
    active = getattr(timer, "active", None)
    if cancel is not None and (active is None or active()):
        cancel()
