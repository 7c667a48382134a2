"""LocalGate: the in-memory gate of one crawler process.

Scrapy's download slots do not enforce per-slot concurrency on the asyncio
reactor, so the gate enforces every limit itself: requests wait here, in
``process_request``, without blocking the reactor.
"""

from __future__ import annotations

import heapq
import logging
import math
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from scrapy_polite.gate.backoff import PAIR_MEMORY, draw_spacing
from scrapy_polite.gate.core import CallLater, GateCore, cancel_timer
from scrapy_polite.gate.state import EndpointState, HostState, Lease, SessionLoad, SessionState, Waiter
from scrapy_polite.pool.endpoints import Endpoint
from scrapy_polite.pool.host_memory import HOST_MEMORY, HostMemory

logger = logging.getLogger(__name__)

#: Idle hosts and sessions looked at per acquire and per release: eviction keeps
#: pace with the requests that create state, at a constant cost per request.
SWEEP = 2
#: A host's learned limits, kept after eviction: (concurrency, spacing band,
#: minimum spacing, host interval).
Learned = tuple[int, tuple[float, float], float, float]


@dataclass(slots=True)
class _PairState:
    last_granted: float = -math.inf
    next_allowed: float = 0.0
    cooldown_until: float = 0.0
    banned_until: float = 0.0

    def quiet_at(self) -> float:
        """When its last timer runs out."""
        return max(self.next_allowed, self.cooldown_until, self.banned_until)


class LocalGate(GateCore):
    """In-memory :class:`~scrapy_polite.gate.base.Gate` for one crawler process."""

    def __init__(
        self,
        endpoints: Iterable[Endpoint],
        *,
        call_later: CallLater | None = None,
        host_memory: int = HOST_MEMORY,
        memory_ttl: float = 3600.0,
        **common: Any,
    ) -> None:
        super().__init__(**common)
        self._reactor_call_later = call_later or _reactor_call_later
        # Endpoints with a free request slot, least recently granted first.
        self._idle: OrderedDict[str, None] = OrderedDict()
        self.session_load = SessionLoad()
        self._pairs: dict[tuple[str, str], _PairState] = {}
        self._waiting_hosts: dict[str, None] = {}
        self._timer: object | None = None
        self._timer_at: float = float("inf")
        #: What idle hosts taught, after their live state is gone (POLITE_HOST_MEMORY).
        self.memory: HostMemory[Learned] = HostMemory(host_memory, memory_ttl)
        #: A session idle this long (nothing queued, nothing in flight) is forgotten.
        self.session_ttl = memory_ttl
        self._host_pairs: dict[str, set[str]] = {}
        # Each live host's earliest eviction check, in a heap (one entry per host).
        self._evict_due: dict[str, float] = {}
        self._evict_heap: list[tuple[float, str]] = []
        self._dropped = 0  # hosts and sessions dropped since the tables were last compacted
        self.set_endpoints(endpoints)

    def _call_later(self, delay: float, func: Callable[[], object]) -> object:
        return self._reactor_call_later(delay, func)

    # -- core hooks -------------------------------------------------------------

    def _on_host_created(self, host: str, h: HostState, now: float) -> None:
        learned = self.memory.recall(host, now)
        if learned is not None:
            h.limit, h.delay, h.min_delay, h.interval = learned
        self._evict_due[host] = due = now + PAIR_MEMORY
        heapq.heappush(self._evict_heap, (due, host))

    def _on_enqueued(self, w: Waiter, h: HostState, now: float) -> None:
        self._waiting_hosts[w.host] = None
        self._dispatch((w.host,))
        self._sweep_hosts(now, SWEEP)
        self._sweep_sessions(now, SWEEP)

    def _on_released(self, lease: Lease, st: EndpointState | None, h: HostState | None, now: float) -> None:
        if st is not None and not st.removed and st.inflight < self.endpoint_concurrency:
            self._idle[lease.endpoint.key] = None
        if h is not None and not lease.stalled:
            self._evict_due[lease.host] = now + PAIR_MEMORY
        self._kick()
        self._sweep_hosts(now, SWEEP)
        self._sweep_sessions(now, SWEEP)

    def _on_unpinned(self, s: SessionState, endpoint_key: str) -> None:
        self.session_load.unpin(endpoint_key)

    def _on_endpoint_added(self, key: str) -> None:
        self.session_load.add(key)
        self._idle[key] = None
        self._idle.move_to_end(key, last=False)

    def _on_endpoint_back(self, key: str, st: EndpointState) -> None:
        if st.inflight < self.endpoint_concurrency:
            self._idle[key] = None

    def _on_endpoint_removed(self, key: str, until: float) -> None:
        self._idle.pop(key, None)
        self._schedule(until)

    def _on_closed(self) -> None:
        self._waiting_hosts.clear()

    def _on_maintain(self, now: float) -> None:
        self._prune_pairs(now)
        self.sweep()

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
        self._host_evicted(host)

    def _sweep_sessions(self, now: float, limit: int | None) -> int:
        idle, forgotten = self._idle_sessions, 0
        while idle and (limit is None or forgotten < limit):
            key, since = next(iter(idle.items()))
            if since + self.session_ttl > now:
                break
            del idle[key]
            s = self._sessions.get(key)
            if s is None or not s.idle():
                continue
            if s.endpoint_key is not None:
                self.session_load.unpin(s.endpoint_key)
            del self._sessions[key]
            self._dropped += 1
            forgotten += 1
        return forgotten

    def _prune_pairs(self, now: float) -> None:
        """Forget (endpoint, host) pairs whose timers ran out ``PAIR_MEMORY`` ago.

        An expired pair constrains nothing, so dropping it changes no decision
        and keeps memory bounded by recent activity, not by endpoints x hosts.
        """
        done = [
            key for key, pair in self._pairs.items()
            if pair.quiet_at() + PAIR_MEMORY <= now
        ]
        for key in done:
            del self._pairs[key]
            keys = self._host_pairs.get(key[1])
            if keys is not None:
                keys.discard(key[0])
                if not keys:
                    del self._host_pairs[key[1]]

    # -- leasing --------------------------------------------------------

    def _pair(self, endpoint_key: str, host: str) -> _PairState:
        pair = self._pairs.get((endpoint_key, host))
        if pair is None:
            pair = self._pairs[(endpoint_key, host)] = _PairState()
            self._host_pairs.setdefault(host, set()).add(endpoint_key)
        return pair

    def _kick(self, host: str | None = None) -> None:
        if host is not None:
            if host in self._waiting_hosts:
                self._dispatch((host,))
        elif self._waiting_hosts:
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
                rotates = waiter.rotates()
                if rotation_blocked and rotates:
                    continue
                st, when = self._pick(waiter, h, now)
                if st is None:
                    wake = min(wake, when)
                    rotation_blocked = rotation_blocked or rotates
                    continue
                self._grant_local(waiter, st, h, now)
                granted = True
                break
            if not granted:
                break
        return wake

    def _pick(self, waiter: Waiter, h: HostState, now: float) -> tuple[EndpointState | None, float]:
        """The endpoint *waiter* can use now, or (None, when to look again)."""
        if waiter.session is not None:
            s = self._sessions[waiter.session]
            if not s.turn_of(waiter):
                return None, float("inf")
            pair = self._pairs.get((s.endpoint_key, waiter.host)) if s.endpoint_key is not None else None
            if pair is not None and pair.banned_until > now:
                # Its identity is burned for this host (a ban or challenge): the session starts on a new one.
                self._repin(s, f"benched for {waiter.host}")
            self._repin_off_tier(s, waiter.host)
            if s.endpoint_key is None:
                key = self._choose_for_session(waiter.host, now, self._avoided(waiter.session))
                if key is None:
                    return None, self._next_health_change(now)
                s.endpoint_key = key
                self.session_load.pin(key)
            pinned = self._endpoints[s.endpoint_key]
            if pinned.removed:  # within its removal grace: wait for it to come back
                until = self._removals.until(pinned.endpoint.key)
                return None, float("inf") if until is None else until
            if pinned.inflight >= self.endpoint_concurrency:
                return None, float("inf")
            ready = self._ready_at(pinned, waiter.host, h, now)
            return (pinned, 0.0) if ready <= now else (None, ready)
        wake = float("inf")
        for key in self._idle if waiter.endpoint is None else [waiter.endpoint]:
            st = self._endpoints.get(key)
            if st is None or key not in self._idle or (waiter.endpoint is None and not self._may_take(waiter.host, key)):
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
            ready = max(ready, pair.quiet_at(), pair.last_granted + h.shortest_spacing())
        return ready

    def _choose_for_session(self, host: str, now: float, avoid: str | None = None) -> str | None:
        """The least-shared endpoint *host* may use, a healthy one before one in its backoff.

        *avoid* (a retired identity's endpoint) is taken only when nothing else is usable.
        """
        for keys in self.session_load.least_shared():
            cooling, cooling_until = None, math.inf
            for key in keys:
                st = self._endpoints[key]
                if key == avoid or not self.endpoint_usable(st) or not self._may_take(host, key):
                    continue
                pair = self._pairs.get((key, host))
                if pair is not None and pair.banned_until > now:
                    continue
                if st.unhealthy_until <= now:
                    return key
                if st.unhealthy_until < cooling_until:
                    cooling, cooling_until = key, st.unhealthy_until
            if cooling is not None:
                return cooling
        return None if avoid is None else self._choose_for_session(host, now)

    def _next_health_change(self, now: float) -> float:
        times = [st.unhealthy_until for st in self._endpoints.values() if st.unhealthy_until > now]
        return min(times, default=now + 1.0)

    def _grant_local(self, waiter: Waiter, st: EndpointState, h: HostState, now: float) -> None:
        key = st.endpoint.key
        if not self.endpoint_usable(st):
            # A dead endpoint's probe: the next one comes a longest backoff later.
            st.unhealthy_until = now + self.backoff[1]
        if st.inflight + 1 >= self.endpoint_concurrency:
            self._idle.pop(key, None)
        else:
            self._idle.move_to_end(key)
        h.grants += 1
        pair = self._pair(key, waiter.host)
        spaced_at = max(pair.next_allowed, pair.last_granted + h.shortest_spacing())
        # The host rate held the request when its interval let it go after both the request came
        # and the endpoint's spacing did (a queue alone, waiting out spacings, is not held by it).
        waiter.rate_held = waiter.rate_held or h.next_start > max(waiter.created, spaced_at)
        h.next_start = now + h.interval
        gap = now - pair.last_granted
        slack = now - spaced_at
        pair.last_granted = now
        pair.next_allowed = now + draw_spacing(self._rng.random(), h.delay, h.min_delay)
        self._grant(waiter, st, h, now, gap=gap, slack=max(0.0, slack))

    def _schedule(self, at: float) -> None:
        if self._timer is not None and self._timer_at <= at:
            return
        if self._timer is not None:
            cancel_timer(self._timer)
        self._timer_at = at
        self._timer = self._call_later(max(0.0, at - self._clock()), self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at = float("inf")
        self._expire_removals(self._clock())
        self._kick()


def _reactor_call_later(delay: float, func: Callable[[], object]) -> object:
    from twisted.internet import reactor

    # The reactor module is typed as a module, not as the IReactorTime it provides.
    clock: Any = reactor
    return clock.callLater(delay, func)
