"""What both gates share: waiters, sessions, leases, pool health, host settings, inspection.

A backend keeps its state where it likes (this process, or Redis) and fills
in the hooks named ``_on_*``; every decision written here is made once for both.
"""

from __future__ import annotations

import math
import random
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable

from twisted.internet.defer import Deferred

from scrapy_polite.errors import NoUsableEndpoints, SessionEndpointLost
from scrapy_polite.gate.backoff import endpoint_backoff
from scrapy_polite.gate.base import GateListeners
from scrapy_polite.gate.state import (
    NO_SIGNAL,
    REMOVED,
    EndpointState,
    HostSignal,
    HostState,
    Lease,
    RemovalGrace,
    SessionState,
    Waiter,
    lost_message,
    revive_sessions,
)
from scrapy_polite.pool.endpoints import Endpoint

CallLater = Callable[[float, Callable[[], object]], object]
#: (concurrency, delay) a host starts at, by host key.
HostOverrides = dict[str, tuple[int, tuple[float, float]]]
#: New session identities remembered, before their first pin, as to avoid their predecessor's endpoint.
MAX_AVOID = 10_000


class GateCore:
    """The bookkeeping of a :class:`~scrapy_polite.gate.base.Gate`, whatever holds its state."""

    shared = False
    label = "memory"

    def __init__(
        self,
        *,
        host_concurrency: int,
        endpoint_concurrency: int,
        delay: tuple[float, float],
        backoff: tuple[float, float],
        max_failures: int,
        session_policy: str = "fail",
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
        listeners: GateListeners | None = None,
        removal_grace: float = 0.0,
        stall_timeout: float = 0.0,
        host_overrides: HostOverrides | None = None,
        eligible: Callable[[str, str], bool] | None = None,
    ) -> None:
        self.host_concurrency = host_concurrency
        self.host_overrides: HostOverrides = dict(host_overrides or {})
        self.endpoint_concurrency = endpoint_concurrency
        self.delay = delay
        self.backoff = backoff
        self.max_failures = max_failures
        self.session_policy = session_policy
        self.stall_timeout = stall_timeout
        self.listeners = listeners or GateListeners()
        self.outages = 0
        #: Leases and heartbeats this process had to re-add (Redis lost them, or they lapsed).
        self.reasserted = 0
        self._clock = clock
        self._rng = rng or random.Random()
        self._endpoints: dict[str, EndpointState] = {}
        self._hosts: dict[str, HostState] = {}
        self._sessions: dict[str, SessionState] = {}
        # Sessions with nothing queued or in flight, least recently used first, with when they went idle.
        self._idle_sessions: OrderedDict[str, float] = OrderedDict()
        self._leases: dict[int, Lease] = {}
        self._stall_timers: dict[int, object] = {}
        self._removals = RemovalGrace(removal_grace)
        self._closed: str | None = None
        self._close_error: type[Exception] = NoUsableEndpoints
        self._waiting_count = 0
        self._load_listeners: list[Callable[[str, int], None]] = []
        self._evict_hooks: list[Callable[[str], None]] = []
        #: ``(host, endpoint key) -> bool``: which endpoints a host's requests may take (its proxy tier).
        self.eligible = eligible
        #: A new session identity -> the endpoint its retired predecessor was pinned to (see ``succeed``).
        self._avoid: OrderedDict[str, str] = OrderedDict()

    # -- hooks a backend fills in ------------------------------------------

    def _call_later(self, delay: float, func: Callable[[], object]) -> object:
        raise NotImplementedError

    def _kick(self, host: str | None = None) -> None:
        """Look again at *host*'s waiters (None: every host's)."""
        raise NotImplementedError

    def _on_host_created(self, host: str, h: HostState, now: float) -> None: ...
    def _on_enqueued(self, w: Waiter, h: HostState, now: float) -> None: ...
    def _on_dropped(self, w: Waiter) -> None: ...
    def _on_released(self, lease: Lease, st: EndpointState | None, h: HostState | None, now: float) -> None: ...
    def _on_stall(self, lease: Lease) -> None: ...
    def _on_unpinned(self, s: SessionState, endpoint_key: str) -> None: ...
    def _on_endpoint_added(self, key: str) -> None: ...
    def _on_endpoint_back(self, key: str, st: EndpointState) -> None: ...
    def _on_endpoint_removed(self, key: str, until: float) -> None: ...
    def _on_endpoint_failed(self, key: str, st: EndpointState) -> None: ...
    def _on_endpoint_ok(self, key: str) -> None: ...
    def _on_host_setting(self, host: str, h: HostState, **fields: float) -> None: ...
    def _on_host_interval(self, host: str, seconds: float, base: float) -> None: ...
    def _on_host_paused(self, host: str, seconds: float) -> None: ...
    def _on_closed(self) -> None: ...
    def _on_maintain(self, now: float) -> None: ...

    # -- inspection -----------------------------------------------------------

    @property
    def endpoints(self) -> dict[str, EndpointState]:
        return self._endpoints

    @property
    def hosts(self) -> dict[str, HostState]:
        return self._hosts

    def sessions(self) -> dict[str, str | None]:
        """Session key -> masked label of its pinned endpoint (None: not yet)."""
        return {
            key: (self._endpoints[s.endpoint_key].endpoint.label if s.endpoint_key in self._endpoints else None)
            for key, s in self._sessions.items()
        }

    def waiting(self) -> int:
        return self._waiting_count

    def host_load(self, host: str) -> int:
        """Requests in flight plus waiting for *host* (for the scheduler queue)."""
        h = self._hosts.get(host)
        return h.load if h else 0

    def last_signal(self, host: str) -> HostSignal:
        """Another process's last host-wide rate signal from *host* (none, for one process)."""
        return NO_SIGNAL

    def signal_host(self, host: str, failed: float | None = None, found: bool = False) -> None:
        """A host-wide rate signal from *host*: one process's throttle knows its own, nothing to share."""

    def endpoint_usable(self, st: EndpointState) -> bool:
        return st.usable(self.max_failures)

    def health_counts(self) -> dict[str, int]:
        now = self._clock()
        counts = {"healthy": 0, "cooling": 0, "dead": 0}
        for st in self._endpoints.values():
            if not st.removed:
                counts[st.health(self.max_failures, now)] += 1
        return counts

    # -- listeners --------------------------------------------------------------

    def listen(self, listeners: GateListeners) -> None:
        """Tell *listeners* of stalls, dead pools, repins, orphans and outages from now on."""
        self.listeners = listeners

    def add_load_listener(self, listener: Callable[[str, int], None]) -> None:
        """Call *listener(host, load)* whenever a host's :meth:`host_load` changes."""
        self._load_listeners.append(listener)

    def on_host_evicted(self, hook: Callable[[str], None]) -> None:
        """Call *hook(host)* when an idle host's live state is dropped."""
        self._evict_hooks.append(hook)

    def _load_changed(self, host: str, h: HostState) -> None:
        if self._load_listeners:
            load = h.load
            for listener in self._load_listeners:
                listener(host, load)

    def _host_evicted(self, host: str) -> None:
        for hook in self._evict_hooks:
            hook(host)

    # -- configuration ----------------------------------------------------------

    def host(self, host: str) -> HostState:
        h = self._hosts.get(host)
        if h is None:
            h = self._hosts[host] = HostState(*self.host_overrides.get(host, (self.host_concurrency, self.delay)))
            self._on_host_created(host, h, self._clock())
        return h

    def set_host_limit(self, host: str, limit: int) -> None:
        h = self.host(host)
        h.limit = max(1, limit)
        self._on_host_setting(host, h, limit=h.limit)
        self._kick(host)

    def set_host_delay(self, host: str, delay: tuple[float, float]) -> None:
        h = self.host(host)
        h.delay = delay
        h.delay_since = self._clock()
        self._on_host_setting(host, h, lo=delay[0], hi=delay[1])

    def set_host_min_delay(self, host: str, seconds: float) -> None:
        h = self.host(host)
        h.min_delay = seconds
        self._on_host_setting(host, h, min_delay=seconds)

    def set_host_interval(self, host: str, seconds: float) -> None:
        h = self.host(host)
        # The next start moves by the difference, so a raised rate applies at once.
        base = h.interval
        h.next_start += seconds - base
        h.interval = seconds
        h.interval_since = self._clock()
        self._on_host_interval(host, seconds, base)
        self._kick(host)

    def pause_host(self, host: str, seconds: float) -> None:
        h = self.host(host)
        h.paused_until = max(h.paused_until, self._clock() + seconds)
        self._on_host_paused(host, seconds)
        self._kick(host)

    # -- the pool ---------------------------------------------------------------

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
                self._on_endpoint_added(key)
                added.append(ep.label)
            elif st.removed:
                st.removed = False
                self._removals.cancel(key)
                back.add(key)
                self._on_endpoint_back(key, st)
                added.append(ep.label)
        for key, st in self._endpoints.items():
            if key not in wanted and not st.removed:
                st.removed = True
                removed.append(st.endpoint.label)
                self._on_endpoint_removed(key, self._removals.start(key, now))
        revive_sessions(self._sessions.values(), {k for k in back if self.endpoint_usable(self._endpoints[k])})
        self._expire_removals(now)
        self._kick()
        return added, removed

    def endpoint_failed(self, endpoint_key: str) -> None:
        """A connection-level failure: back off exponentially, then re-check."""
        st = self._endpoints.get(endpoint_key)
        if st is None:
            return
        st.failures += 1
        st.unhealthy_until = self._clock() + endpoint_backoff(st.failures, self.backoff)
        self._after_health_change(endpoint_key)
        self._on_endpoint_failed(endpoint_key, st)
        self._kick()

    def endpoint_ok(self, endpoint_key: str) -> None:
        st = self._endpoints.get(endpoint_key)
        if st is not None and st.failures:
            st.failures = 0
            st.unhealthy_until = 0.0
            self._on_endpoint_ok(endpoint_key)

    def _after_health_change(self, endpoint_key: str) -> None:
        """A dead endpoint loses its sessions; the last usable one dying is reported."""
        st = self._endpoints[endpoint_key]
        if st.failures < self.max_failures:  # not dead (a removed one's sessions keep their grace)
            return
        self._handle_lost_endpoints({endpoint_key})
        if not any(self.endpoint_usable(s) for s in self._endpoints.values()):
            self.listeners.on_all_unusable()

    def _expire_removals(self, now: float) -> None:
        """Apply the session policy to the endpoints still removed when their grace ends."""
        ended = {key for key in self._removals.expired(now) if self._endpoints[key].removed}
        if ended:
            self._handle_lost_endpoints(ended, REMOVED)

    def _handle_lost_endpoints(self, keys: set[str], why: str = "endpoint unusable") -> None:
        for s in self._sessions.values():
            if s.endpoint_key not in keys or s.lost:
                continue
            old = self._endpoints[s.endpoint_key].endpoint.label
            if self.session_policy == "repin":
                pinned, s.endpoint_key = s.endpoint_key, None
                self._on_unpinned(s, pinned)
                self.listeners.on_session_repinned(s.key, old, why)
                continue
            s.lost = lost_message(s.key, old, why)
            for w in list(s.queue):
                self._fail(w, SessionEndpointLost(s.lost))

    def _may_take(self, host: str, endpoint_key: str) -> bool:
        """Whether *host*'s requests may go through *endpoint_key* (``eligible``, the host's proxy tier)."""
        return self.eligible is None or self.eligible(host, endpoint_key)

    def succeed(self, old: str, new: str) -> None:
        """Session identity *new* replaces the retired *old*: its first pin avoids *old*'s endpoint.

        The old identity's pin is released once nothing of it is queued or in flight,
        so its endpoint is not counted as shared by a session that will not come back.
        """
        s = self._sessions.get(old)
        if s is None or s.endpoint_key is None:
            return
        self._avoid[new] = s.endpoint_key
        while len(self._avoid) > MAX_AVOID:
            self._avoid.popitem(last=False)
        if s.idle():
            pinned, s.endpoint_key = s.endpoint_key, None
            self._on_unpinned(s, pinned)

    def _avoided(self, session: str | None) -> str | None:
        """The endpoint a new identity's first pin should not take (its predecessor's), if any."""
        return self._avoid.get(session) if session is not None and self._avoid else None

    def _pinned(self, session: str) -> None:
        """*session* has its first pin: what it had to avoid is done with."""
        if self._avoid:
            self._avoid.pop(session, None)

    def _repin_off_tier(self, s: SessionState, host: str) -> None:
        """*s*'s pin is outside *host*'s proxy tier now (the host moved up or back): a new pin within it."""
        if s.endpoint_key is not None and not self._may_take(host, s.endpoint_key):
            self._repin(s, f"proxy tier of {host} moved")

    def _repin(self, s: SessionState, why: str) -> None:
        """Unpin *s*: its next request picks a new endpoint."""
        assert s.endpoint_key is not None
        old = self._endpoints[s.endpoint_key].endpoint.label
        pinned, s.endpoint_key = s.endpoint_key, None
        self._on_unpinned(s, pinned)
        self.listeners.on_session_repinned(s.key, old, why)

    def _session_lost(self, w: Waiter, reason: str) -> None:
        """*w*'s session cannot go on: it and everything queued behind it fail."""
        assert w.session is not None
        s = self._sessions[w.session]
        s.lost = reason
        for other in list(s.queue):
            self._fail(other, SessionEndpointLost(reason))
        self._fail(w, SessionEndpointLost(reason))

    # -- waiters ----------------------------------------------------------------

    def _new_token(self) -> str:
        return ""

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
        w = Waiter(host, session, not_before, now, Deferred(lambda d: self._cancel(w)), endpoint=endpoint,
                   token=self._new_token(), tag=tag)
        if self._closed:
            w.deferred.errback(self._close_error(self._closed))
            return w.deferred
        self.start()
        if session is not None:
            s = self._sessions.get(session)
            if s is None:
                s = self._sessions[session] = SessionState(session)
            if s.lost:
                w.deferred.errback(SessionEndpointLost(s.lost))
                return w.deferred
            s.queue.append(w)
            self._idle_sessions.pop(session, None)
        h = self.host(host)
        h.waiters.append(w)
        self._waiting_count += 1
        self._load_changed(host, h)
        self._on_enqueued(w, h, now)
        return w.deferred

    def _cancel(self, w: Waiter) -> None:
        w.done = True
        self._drop(w)

    def _drop(self, w: Waiter) -> None:
        """Take *w* out of its host's and its session's queues, wherever it is."""
        h = self._hosts.get(w.host)
        if h is not None and w in h.waiters:
            h.waiters.remove(w)
            self._waiting_count -= 1
            self._load_changed(w.host, h)
        s = self._sessions.get(w.session) if w.session is not None else None
        if s is not None and w in s.queue:
            s.queue.remove(w)
            self._idle_session(s)
        self._on_dropped(w)

    def _fail(self, w: Waiter, exc: Exception) -> None:
        done, w.done = w.done, True
        self._drop(w)
        if not done:
            w.deferred.errback(exc)

    def _idle_session(self, s: SessionState) -> None:
        if s.idle():
            self._idle_sessions[s.key] = self._clock()
            self._idle_sessions.move_to_end(s.key)

    def close(self, reason: str, error: type[Exception] = NoUsableEndpoints) -> None:
        """Fail every waiter with *error*, so the engine can close instead of hanging."""
        if self._closed:
            return
        self._closed = reason
        self._close_error = error
        for h in list(self._hosts.values()):
            while h.waiters:
                self._fail(h.waiters[0], error(reason))
        self._on_closed()

    # -- leases -----------------------------------------------------------------

    def _grant(self, w: Waiter, st: EndpointState, h: HostState, now: float,
               gap: float = math.inf, slack: float = math.inf) -> Lease:
        """Hand *w* its lease through *st* (the backend has taken the slot in its state)."""
        st.inflight += 1
        st.requests += 1
        st.last_granted = now
        h.inflight += 1
        if w in h.waiters:
            h.waiters.remove(w)
            self._waiting_count -= 1
        if w.session is not None:
            s = self._sessions[w.session]
            old, s.endpoint_key = s.endpoint_key, st.endpoint.key
            if old is not None and old != s.endpoint_key:
                # Repinned by a shared backend (its endpoint died or left the pool, maybe elsewhere).
                label = self._endpoints[old].endpoint.label if old in self._endpoints else old
                self.listeners.on_session_repinned(s.key, label, "endpoint unusable")
            s.busy = True
            s.requests += 1
            s.queue.popleft()
            self._pinned(s.key)
        w.done = True
        lease = Lease(st.endpoint, w.host, w.session, now, now - w.created, token=w.token, gap=gap, slack=slack,
                      rate_held=w.rate_held)
        self._leases[id(lease)] = lease
        if self.stall_timeout > 0:
            self._stall_timers[id(lease)] = self._call_later(self.stall_timeout, lambda: self.stall(lease))
        w.deferred.callback(lease)
        return lease

    def release(self, lease: Lease) -> None:
        if lease.released:
            return
        lease.released = True
        self._leases.pop(id(lease), None)
        timer = self._stall_timers.pop(id(lease), None)
        if timer is not None:
            cancel_timer(timer)
        st = self._endpoints.get(lease.endpoint.key)
        if st is not None:
            st.inflight -= 1
        now = self._clock()
        h = self._hosts.get(lease.host)
        if h is not None and not lease.stalled:
            h.inflight -= 1
            self._load_changed(lease.host, h)
        if lease.session is not None:
            s = self._sessions.get(lease.session)
            if s is not None:
                s.busy = False
                self._idle_session(s)
        self._on_released(lease, st, h, now)

    def stall(self, lease: Lease) -> bool:
        """Give *lease*'s host slot back, once; its endpoint stays held until release.

        A request unanswered after the stall timeout is most likely stuck on a
        hanging proxy: it must not keep other endpoints from the host until the
        download timeout. Returns whether the slot was given back now.
        """
        self._stall_timers.pop(id(lease), None)
        if lease.released or lease.stalled:
            return False
        lease.stalled = True
        h = self._hosts.get(lease.host)
        if h is not None:
            h.inflight -= 1
            self._load_changed(lease.host, h)
        self._on_stall(lease)
        self.listeners.on_stalled(lease)
        self._kick()
        return True

    def granted_before(self, host: str, at: float) -> float | None:
        """When the latest request to *host* still in flight here went, of those that went before *at*
        (``None``: none): a site refuses before its upstream answers, so a 429 comes back before the
        pages asked for just ahead of it, and the host's gap before it is to one of those."""
        return max((lease.granted_at for lease in self._leases.values()
                    if lease.host == host and lease.granted_at < at), default=None)

    def expire_leases(self, max_age: float) -> list[Lease]:
        """Release leases held longer than *max_age* seconds, and return them.

        A request that vanished between the gate and the downloader (dropped
        by another component) must not hold its endpoint forever.
        """
        now = self._clock()
        stale = [lease for lease in self._leases.values() if lease.granted_at < now - max_age]
        for lease in stale:
            self.release(lease)
        self._on_maintain(now)
        return stale

    def start(self) -> None:
        """Connect, if there is anything to connect to."""

    def stop(self) -> Deferred | None:
        return None


def cancel_timer(timer: object) -> None:
    """Cancel a reactor ``callLater`` or an asyncio timer handle, if it is still pending."""
    cancel = getattr(timer, "cancel", None)
    active = getattr(timer, "active", None)
    if cancel is not None and (active is None or active()):
        cancel()
