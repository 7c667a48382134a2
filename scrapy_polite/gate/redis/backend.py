"""RedisGate: the :class:`~scrapy_polite.gate.local.Gate` shared by every crawler process.

Several processes (Scrapyd jobs, or scrapy-redis workers on many machines)
pointed at the same Redis and namespace hold their limits fleet-wide: one
request per endpoint, the per-host cap and spacing, cooldowns and bans after
429s and 403s, the throttle's concurrency and rate, session pins and endpoint
health. Each grant is one Lua script (:mod:`scrapy_polite.gate.redis.scripts`), so
two processes can never both take the last slot.

What stays local: the queue of waiting requests (each process serves its own
in order), and a mirror of the host values the throttle reads and of the
health of the endpoints, refreshed by every grant attempt.

Crashes: a lease expires ``POLITE_STATE_LEASE_TTL`` seconds after its last
renewal, and live processes renew theirs every third of that, so a killed
process frees its endpoints and host slots within seconds. Its heartbeat lasts
three TTLs; then the URLs it was holding are moved to an orphans list by the
first survivor that notices.

Lost Redis: no lease is granted while Redis is unreachable (requests wait,
nothing is sent unguarded); each loop retries with its own backoff (renewals at
most a quarter TTL apart), the outage is logged once and its end once, and the
in-flight leases are re-asserted when Redis is back. After Redis lost its data,
or nobody reached it for a TTL, the fleet waits a grace period before new grants.
Away for longer than ``outage_timeout``, it is reported once, so the spider can close.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import math
import os
import random
import secrets
import socket
import time
from collections import OrderedDict
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from typing import Any

from twisted.internet.defer import Deferred

from scrapy_polite.errors import NoUsableEndpoints, SessionEndpointLost, SpiderClosing
from scrapy_polite.gate.local import (
    REMOVED,
    EndpointState,
    HostState,
    Lease,
    RemovalGrace,
    SessionState,
    lost_message,
    revive_sessions,
    take_host_slot_back,
)
from scrapy_polite.gate.redis import scripts as redis_scripts
from scrapy_polite.gate.redis.state import Keys, async_client, endpoint_id, import_redis, mask_url
from scrapy_polite.pool.endpoints import Endpoint

logger = logging.getLogger(__name__)

#: At most this many endpoints are offered to one grant attempt of an unpinned
#: request (the least recently used first), so a script stays short however big
#: the pool is; a session's first request may look at this many to pin one.
CANDIDATES = 64
SESSION_CANDIDATES = 512
#: A session's pin is forgotten after this long without a request (POLITE_STATE_PIN_TTL).
PIN_TTL = 3600.0
#: The orphans list keeps the newest this many entries.
ORPHANS_KEPT = 100_000
#: Host-wide refusals: no other waiter of that host could be granted either.
_HOST_CODES = frozenset({"grace", "paused", "host_full", "host_spacing"})
#: Shared keys that nobody touches expire after this, so a namespace cleans itself up.
_IDLE_TTL = 24 * 3600.0
#: A host's shared record (learned limits, grants, last rate signal) lives this long after
#: its last use (POLITE_STATE_HOST_TTL).
HOST_TTL = _IDLE_TTL
#: A host or session with nothing in flight and nobody waiting is forgotten here after
#: this long; what it learned stays in Redis and is read again when it comes back.
IDLE_KEEP = 60.0
#: Idle entries evicted per acquire or release, besides the sweep on each renewal.
_EVICT_PER_CALL = 4
_BACKOFF = (0.25, 8.0)


class _Backoff:
    """One loop's retry delay while Redis is away.

    Each loop backs off on its own, so failed grant attempts cannot stretch the
    renewal loop's sleep past the lease TTL (and get a live process swept).
    """

    def __init__(self, cap: float = _BACKOFF[1]) -> None:
        self.cap = cap
        self.delay = min(_BACKOFF[0], cap)

    def next(self) -> float:
        delay, self.delay = self.delay, min(self.cap, self.delay * 2)
        return delay

    def reset(self) -> None:
        self.delay = min(_BACKOFF[0], self.cap)


class RunningMax:
    """The largest of many per-key values, kept up to date as they change.

    A change costs O(log n) and a read O(1) amortised, instead of a scan of every
    key; a key's value leaves with the key, so the maximum falls when it goes.
    """

    def __init__(self, floor: float = 0.0) -> None:
        self.floor = floor
        self._values: dict[str, float] = {}
        self._counts: dict[float, int] = {}
        self._heap: list[float] = []  # negated values; ones no key holds any more are dropped lazily

    def __len__(self) -> int:
        return len(self._values)

    def set(self, key: str, value: float) -> None:
        old = self._values.get(key)
        if old == value:
            return
        if old is not None:
            self._forget(old)
        self._values[key] = value
        count = self._counts.get(value, 0)
        self._counts[value] = count + 1
        if count == 0:
            heapq.heappush(self._heap, -value)
            if len(self._heap) > 2 * len(self._counts) + 16:
                self._heap = [-v for v in self._counts]
                heapq.heapify(self._heap)

    def discard(self, key: str) -> None:
        old = self._values.pop(key, None)
        if old is not None:
            self._forget(old)

    def _forget(self, value: float) -> None:
        count = self._counts[value] - 1
        if count:
            self._counts[value] = count
        else:
            del self._counts[value]

    def value(self) -> float:
        heap = self._heap
        while heap and -heap[0] not in self._counts:
            heapq.heappop(heap)
        return max(self.floor, -heap[0]) if heap else self.floor


@dataclass(eq=False)
class _Waiter:
    host: str
    session: str | None
    not_before: float
    created: float
    token: str
    tag: str | None
    deferred: Deferred = field(repr=False)
    done: bool = False
    endpoint: str | None = None


class RedisGate:
    """A :class:`~scrapy_polite.gate.local.Gate` whose limits are held in Redis."""

    def __init__(
        self,
        endpoints: Iterable[Endpoint],
        *,
        url: str,
        namespace: str,
        host_concurrency: int,
        endpoint_concurrency: int,
        delay: tuple[float, float],
        backoff: tuple[float, float],
        max_failures: int,
        session_policy: str = "fail",
        lease_ttl: float = 5.0,
        pin_ttl: float = PIN_TTL,
        host_ttl: float = HOST_TTL,
        idle_keep: float = IDLE_KEEP,
        poll: float = 0.05,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
        on_session_repinned: Callable[[str, str | None, str], None] | None = None,
        on_all_unusable: Callable[[], None] | None = None,
        removal_grace: float = 0.0,
        outage_timeout: float = 0.0,
        on_outage_timeout: Callable[[float], None] | None = None,
        stall_timeout: float = 0.0,
        on_stalled: Callable[[Lease], None] | None = None,
        host_overrides: dict[str, tuple[int, tuple[float, float]]] | None = None,
    ) -> None:
        self._redis = import_redis()
        # Redis away: wait and retry. Any other Redis error (out of memory, a script error)
        # is logged and the update dropped, rather than retried forever as an outage.
        self._errors: tuple[type[BaseException], ...] = (
            self._redis.ConnectionError, self._redis.TimeoutError, OSError,
        )
        self.url = url
        self.label = mask_url(url)
        self.keys = Keys(namespace)
        self.host_concurrency = host_concurrency
        #: (concurrency, delay) a host starts at, by host key, instead of the two above.
        self.host_overrides: dict[str, tuple[int, tuple[float, float]]] = dict(host_overrides or {})
        self.endpoint_concurrency = endpoint_concurrency
        self.delay = delay
        self.backoff = backoff
        self.max_failures = max_failures
        self.session_policy = session_policy
        self.lease_ttl = lease_ttl
        self.pin_ttl = pin_ttl
        self.host_ttl = host_ttl
        self.idle_keep = idle_keep
        self.poll = poll
        self._clock = clock
        self._rng = rng or random.Random()
        self._on_session_repinned = on_session_repinned
        self._on_all_unusable = on_all_unusable
        #: Called with (process id, number of requests) when a dead process's requests are orphaned.
        self.on_orphans: Callable[[str, int], None] | None = None
        self.process_id = f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"
        self._endpoints: dict[str, EndpointState] = {}
        self._ids: dict[str, str] = {}
        self._by_id: dict[str, str] = {}
        self._order: OrderedDict[str, None] = OrderedDict()
        self._hosts: dict[str, HostState] = {}
        self._sessions: dict[str, SessionState] = {}
        self._leases: dict[str, Lease] = {}
        self.stall_timeout = stall_timeout
        self._on_stalled = on_stalled
        self._stall_timers: dict[str, asyncio.TimerHandle] = {}
        self._fleet_inflight: dict[str, int] = {}
        self._signals: dict[str, float] = {}
        # This process's own spacing per (endpoint key, host), kept locally too, so
        # a Redis restart that loses its data cannot make this process send early.
        self._spacing: dict[tuple[str, str], float] = {}
        self._spacing_due: list[tuple[float, str, str]] = []  # heap of (until, endpoint key, host)
        #: ``(host, endpoint key) -> bool``: which endpoints a host's requests may take (its proxy tier).
        self.eligible: Callable[[str, str], bool] | None = None
        # Hosts and sessions with nothing in flight and nobody waiting, oldest first, with
        # when they went idle: evicted after idle_keep, a few per call and on each renewal.
        self._idle_hosts: OrderedDict[str, float] = OrderedDict()
        self._idle_sessions: OrderedDict[str, float] = OrderedDict()
        self._longest = RunningMax(delay[1])
        self._pumps: dict[str, asyncio.Future[None]] = {}
        self._wakeups: dict[str, asyncio.Event] = {}
        self._client: Any = None
        self._scripts: dict[str, Any] = {}
        self._ops: asyncio.Queue[Callable[[], Coroutine[Any, Any, Any]]] | None = None
        self._tasks: list[asyncio.Future[None]] = []
        self._closed: str | None = None
        self._close_error: type[Exception] = NoUsableEndpoints
        self._stopped = False
        # Set when this gate stops talking to Redis; background loops end on it, since
        # redis-py can turn a task's cancellation into a connection error.
        self._halted = False
        self._down_since: float | None = None
        self.outages = 0
        #: Leases and heartbeats this process had to re-add (Redis lost them, or they lapsed).
        self.reasserted = 0
        self._renewed = False
        # Redis time of the last answer from Redis (0: none yet), and the end of the
        # fleet-wide grace this process last logged.
        self._seen = 0.0
        self._grace_until = 0.0
        self._removals = RemovalGrace(removal_grace)
        #: Seconds Redis may stay unreachable before *on_outage_timeout* is called (0: wait forever).
        self.outage_timeout = outage_timeout
        self.on_outage_timeout = on_outage_timeout
        self._outage_reported = False
        self.set_endpoints(endpoints)

    # -- inspection (same surface as LocalGate) ----------------------------

    @property
    def endpoints(self) -> dict[str, EndpointState]:
        return self._endpoints

    @property
    def hosts(self) -> dict[str, HostState]:
        return self._hosts

    @property
    def connected(self) -> bool:
        return self._client is not None and self._down_since is None

    def sessions(self) -> dict[str, str | None]:
        return {
            key: (self._endpoints[s.endpoint_key].endpoint.label
                  if s.endpoint_key in self._endpoints else None)
            for key, s in self._sessions.items()
        }

    def session_endpoint(self, key: str) -> Endpoint | None:
        s = self._sessions.get(key)
        st = self._endpoints.get(s.endpoint_key) if s and s.endpoint_key else None
        return st.endpoint if st else None

    def waiting(self) -> int:
        # Only a host with a pump can have waiters: no walk over idle hosts.
        return sum(len(self._hosts[host].waiters) for host in self._pumps if host in self._hosts)

    def host_load(self, host: str) -> int:
        h = self._hosts.get(host)
        return h.inflight + len(h.waiters) if h else 0

    def fleet_inflight(self, host: str) -> int:
        """Requests in flight to *host* from the whole fleet, as last seen."""
        return self._fleet_inflight.get(host, 0)

    def last_signal(self, host: str) -> float:
        """When (this process's clock) any process last got a rate signal from *host*, as last seen."""
        return self._signals.get(host, -math.inf)

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

    # -- lifecycle ---------------------------------------------------------

    def start(self) -> None:
        """Connect and start renewing; idempotent, and also done by the first acquire."""
        if self._client is not None or self._stopped:
            return
        self._client = async_client(self.url)
        self._scripts = {
            name: self._client.register_script(getattr(redis_scripts, name.upper()))
            for name in ("acquire", "release", "renew", "sweep", "extend", "set_interval",
                         "endpoint_failed", "endpoint_ok", "unpin", "leave", "signal", "stall")
        }
        self._ops = asyncio.Queue()
        self._tasks = [asyncio.ensure_future(self._run_ops()), asyncio.ensure_future(self._run_renewals())]

    def stop(self) -> Deferred | None:
        """Release what this process holds and disconnect (a clean exit orphans nothing)."""
        if self._stopped:
            return None
        self._stopped = True
        self.close("spider closed", SpiderClosing)
        if self._client is None:
            return None
        return Deferred.fromFuture(asyncio.ensure_future(self._shutdown()))

    async def _shutdown(self) -> None:
        if self._ops is not None:
            try:
                # While Redis is away, the queued updates cannot go: no point waiting for them.
                await asyncio.wait_for(self._ops.join(), timeout=5 if self._down_since is None else 0.5)
            except asyncio.TimeoutError:
                logger.warning("scrapy-polite: %d shared-state updates not sent at close", self._ops.qsize())
        self._halt()
        client, self._client = self._client, None
        try:
            leases, self._leases = list(self._leases.values()), {}
            for lease in leases:
                await asyncio.wait_for(self._scripts["release"](args=self._release_args(lease)), timeout=2)
            await asyncio.wait_for(self._scripts["leave"](args=[self.keys.prefix, self.process_id]), timeout=2)
        except (self._redis.RedisError, OSError, asyncio.TimeoutError) as exc:
            logger.warning("scrapy-polite: could not clear this process from the shared state: %s", exc)
        finally:
            await client.aclose()

    def _halt(self) -> None:
        self._halted = True
        for task in self._tasks + list(self._pumps.values()):
            task.cancel()

    def close(self, reason: str, error: type[Exception] = NoUsableEndpoints) -> None:
        """Fail every waiter with *error*, so the engine can close instead of hanging."""
        if self._closed:
            return
        self._closed = reason
        self._close_error = error
        for h in self._hosts.values():
            while h.waiters:
                self._fail(h.waiters[0], error(reason))
        for event in self._wakeups.values():
            event.set()

    # -- configuration -----------------------------------------------------

    def host(self, host: str) -> HostState:
        h = self._hosts.get(host)
        if h is None:
            h = self._hosts[host] = HostState(*self.host_overrides.get(host, (self.host_concurrency, self.delay)))
            self._longest.set(host, max(h.delay[1], h.min_delay))
            self._idle_host(host)
        return h

    # -- eviction of idle hosts and sessions -------------------------------

    def _idle_host(self, host: str) -> None:
        """Start *host*'s idle clock if nothing holds it: nothing in flight, nobody waiting, no pump."""
        h = self._hosts.get(host)
        if h is not None and h.inflight <= 0 and not h.waiters and host not in self._pumps:
            self._idle_hosts[host] = self._clock()
            self._idle_hosts.move_to_end(host)

    def _idle_session(self, key: str) -> None:
        s = self._sessions.get(key)
        if s is not None and not s.busy and not s.queue:
            self._idle_sessions[key] = self._clock()
            self._idle_sessions.move_to_end(key)

    def _evict(self, limit: int | None = _EVICT_PER_CALL) -> int:
        """Forget up to *limit* (None: all) hosts and sessions idle for ``idle_keep``; how many went."""
        now = self._clock()
        self._expire_spacing(now)
        cutoff = now - self.idle_keep
        gone = 0
        for idle, drop in ((self._idle_hosts, self._drop_host), (self._idle_sessions, self._drop_session)):
            while idle and (limit is None or gone < limit):
                key, since = next(iter(idle.items()))
                if since > cutoff:
                    break
                del idle[key]
                drop(key)
                gone += 1
        return gone

    def _drop_host(self, host: str) -> None:
        h = self._hosts.get(host)
        if h is None or h.inflight > 0 or h.waiters or host in self._pumps:
            return
        del self._hosts[host]
        self._longest.discard(host)
        self._signals.pop(host, None)
        self._fleet_inflight.pop(host, None)
        self._wakeups.pop(host, None)

    def _drop_session(self, key: str) -> None:
        s = self._sessions.get(key)
        if s is not None and not s.busy and not s.queue:
            del self._sessions[key]

    def set_endpoints(self, endpoints: Iterable[Endpoint]) -> tuple[list[str], list[str]]:
        """As :meth:`LocalGate.set_endpoints <scrapy_polite.gate.local.LocalGate.set_endpoints>`: a removed
        endpoint's sessions wait for it through the removal grace, and come back with it."""
        now = self._clock()
        wanted = {e.key: e for e in endpoints}
        added, removed = [], []
        back: set[str] = set()
        for key, ep in wanted.items():
            st = self._endpoints.get(key)
            if st is None:
                self._endpoints[key] = EndpointState(ep)
                ep_id = endpoint_id(ep.ident)
                self._ids[key], self._by_id[ep_id] = ep_id, key
                self._order[key] = None
                self._order.move_to_end(key, last=False)
                added.append(ep.label)
            elif st.removed:
                st.removed = False
                self._removals.cancel(key)
                back.add(key)
                added.append(ep.label)
        for key, st in self._endpoints.items():
            if key not in wanted and not st.removed:
                st.removed = True
                removed.append(st.endpoint.label)
                self._removals.start(key, now)
        revive_sessions(self._sessions.values(), {k for k in back if self.endpoint_usable(self._endpoints[k])})
        self._expire_removals(now)
        self._kick()
        return added, removed

    def set_host_limit(self, host: str, limit: int) -> None:
        self.host(host).limit = max(1, limit)
        self._hset(host, limit=max(1, limit))
        self._kick(host)

    def set_host_delay(self, host: str, delay: tuple[float, float]) -> None:
        h = self.host(host)
        h.delay = delay
        self._longest.set(host, max(h.delay[1], h.min_delay))
        self._hset(host, lo=delay[0], hi=delay[1])

    def set_host_min_delay(self, host: str, seconds: float) -> None:
        h = self.host(host)
        h.min_delay = seconds
        self._longest.set(host, max(h.delay[1], h.min_delay))
        self._hset(host, min_delay=seconds)

    def set_host_interval(self, host: str, seconds: float) -> None:
        self.host(host).interval = seconds
        self._op(lambda: self._scripts["set_interval"](args=[self.keys.host(host), seconds, self.host_ttl]))
        self._kick(host)

    def pause_host(self, host: str, seconds: float) -> None:
        h = self.host(host)
        h.paused_until = max(h.paused_until, self._clock() + seconds)
        self._extend(self.keys.host(host), "paused_until", seconds)
        self._kick(host)

    def cool_endpoint(self, endpoint_key: str, host: str | None, seconds: float) -> None:
        ep_id = self._ids.get(endpoint_key)
        if ep_id is None:
            return
        if host is None:
            st = self._endpoints[endpoint_key]
            st.unhealthy_until = max(st.unhealthy_until, self._clock() + seconds)
            self._extend(self.keys.endpoint(ep_id), "unhealthy_until", seconds)
        else:
            # A cooldown for one host is its rate signal: every process learns when.
            self._signals[host] = self._clock()
            key = self.keys.host(host)
            self._op(lambda: self._scripts["signal"](args=[key, self.host_ttl]))
            self._extend(self.keys.pair(ep_id, host), "cooldown_until", seconds)
        self._kick(host)

    def ban_endpoint(self, endpoint_key: str, host: str, seconds: float) -> None:
        ep_id = self._ids.get(endpoint_key)
        if ep_id is not None:
            self._extend(self.keys.pair(ep_id, host), "banned_until", seconds)
            self._kick(host)

    def endpoint_failed(self, endpoint_key: str) -> None:
        st = self._endpoints.get(endpoint_key)
        if st is None:
            return
        # Count it locally at once (the caller logs it); the shared count follows.
        st.failures += 1
        base, cap = self.backoff
        st.unhealthy_until = self._clock() + min(cap, base * 2 ** (st.failures - 1))
        self._after_health_change(endpoint_key)

        async def send() -> None:
            failures, until = await self._scripts["endpoint_failed"](
                args=[self.keys.endpoint(self._ids[endpoint_key]), base, cap, _IDLE_TTL]
            )
            if int(failures) > st.failures:
                st.failures = int(failures)
                self._after_health_change(endpoint_key)

        self._op(send)
        self._kick()

    def endpoint_ok(self, endpoint_key: str) -> None:
        """A success resets the shared count when it may be above zero.

        ``st.failures`` mirrors the shared count as of this process's last
        grant attempt through the endpoint, so failures seen by other processes
        are reset here too and never add up across successes.
        """
        st = self._endpoints.get(endpoint_key)
        if st is not None and st.failures:
            st.failures = 0
            st.unhealthy_until = 0.0
            self._op(lambda: self._scripts["endpoint_ok"](args=[self.keys.endpoint(self._ids[endpoint_key])]))

    def expire_leases(self, max_age: float) -> list[Lease]:
        now = self._clock()
        stale = [lease for lease in self._leases.values() if lease.granted_at < now - max_age]
        for lease in stale:
            self.release(lease)
        self._expire_spacing(now)
        return stale

    def _expire_spacing(self, now: float) -> None:
        """Forget this process's spacings that have run out, soonest first (no scan)."""
        due = self._spacing_due
        while due and due[0][0] <= now:
            until, key, host = heapq.heappop(due)
            if self._spacing.get((key, host)) == until:
                del self._spacing[(key, host)]

    # -- leasing -----------------------------------------------------------

    def acquire(
        self, host: str, session: str | None = None, not_before: float = 0.0, tag: str | None = None,
        endpoint: str | None = None,
    ) -> Deferred:
        now = self._clock()
        waiter = _Waiter(host, session, not_before, now, secrets.token_hex(8), tag,
                         Deferred(lambda d: self._cancel(waiter)), endpoint=endpoint)
        if self._closed:
            waiter.deferred.errback(self._close_error(self._closed))
            return waiter.deferred
        self.start()
        if session is not None:
            s = self._sessions.get(session)
            if s is None:
                s = self._sessions[session] = SessionState(session)
            if s.lost:
                waiter.deferred.errback(SessionEndpointLost(s.lost))
                return waiter.deferred
            s.queue.append(waiter)  # type: ignore[arg-type]
            self._idle_sessions.pop(session, None)
        self.host(host).waiters.append(waiter)  # type: ignore[arg-type]
        self._idle_hosts.pop(host, None)
        if tag is not None:
            held = self.keys.held(self.process_id)
            self._op(lambda: self._hold(held, waiter.token, tag))
        self._ensure_pump(host)
        self._evict()
        return waiter.deferred

    async def _hold(self, held: str, token: str, tag: str) -> None:
        """List a request this process holds; the list lives as long as the heartbeat."""
        pipe = self._client.pipeline(transaction=True)
        pipe.hset(held, token, tag)
        pipe.expire(held, math.ceil(self.lease_ttl * 6))
        await pipe.execute()

    def release(self, lease: Lease) -> None:
        if lease.released:
            return
        lease.released = True
        self._leases.pop(lease.token, None)
        timer = self._stall_timers.pop(lease.token, None)
        if timer is not None:
            timer.cancel()
        st = self._endpoints.get(lease.endpoint.key)
        if st is not None:
            st.inflight -= 1
        h = self._hosts.get(lease.host)
        if h is not None and not lease.stalled:
            h.inflight -= 1
            self._idle_host(lease.host)
        if lease.session is not None:
            s = self._sessions.get(lease.session)
            if s is not None:
                s.busy = False
                self._idle_session(lease.session)

        args = self._release_args(lease)

        async def send() -> None:
            await self._scripts["release"](args=args)
            self._kick()

        self._op(send)
        self._kick()
        self._evict()

    def stall(self, lease: Lease) -> bool:
        """Give *lease*'s host slot back, once and fleet-wide; its endpoint stays held.

        The same decision as :meth:`LocalGate.stall <scrapy_polite.gate.local.LocalGate.stall>`:
        the script takes the lease out of the host's set unless it was released, and
        renewals leave it out from then on.
        """
        self._stall_timers.pop(lease.token, None)
        if not take_host_slot_back(lease, self._hosts):
            return False
        args = [self.keys.prefix, lease.host, lease.token, self.lease_ttl]

        async def send() -> None:
            await self._scripts["stall"](args=args)
            self._kick()

        self._op(send)
        self._idle_host(lease.host)
        if self._on_stalled is not None:
            self._on_stalled(lease)
        self._kick()
        return True

    def _release_args(self, lease: Lease) -> list[Any]:
        ep_id = self._ids.get(lease.endpoint.key, endpoint_id(lease.endpoint.ident))
        return [self.keys.prefix, lease.host, lease.session or "", lease.token, ep_id,
                self.keys.held(self.process_id), lease.token, self.lease_ttl]

    # -- the pump: one task per host with waiters --------------------------

    def _ensure_pump(self, host: str) -> None:
        event = self._wakeups.get(host)
        if event is None:
            event = self._wakeups[host] = asyncio.Event()
        task = self._pumps.get(host)
        if task is None or task.done():
            self._pumps[host] = asyncio.ensure_future(self._pump(host, event))
        else:
            event.set()

    def _kick(self, host: str | None = None) -> None:
        """Wake *host*'s pump, or (None: an endpoint may be free) every pump: only hosts
        with waiters have one, so this walks what is waiting, not every host seen."""
        for name in (host,) if host is not None else self._wakeups:
            event = self._wakeups.get(name)  # type: ignore[arg-type]
            h = self._hosts.get(name)  # type: ignore[arg-type]
            if event is not None and h is not None and h.waiters:
                event.set()

    async def _pump(self, host: str, event: asyncio.Event) -> None:
        task = asyncio.current_task()
        try:
            await self._pump_waiters(host, event)
        finally:
            # A pump ends with its host's waiters: it leaves no trace behind.
            if self._pumps.get(host) is task:
                del self._pumps[host]
                if self._wakeups.get(host) is event:
                    del self._wakeups[host]
                self._idle_host(host)

    async def _pump_waiters(self, host: str, event: asyncio.Event) -> None:
        h = self._hosts[host]
        backoff = _Backoff()
        while h.waiters and not self._closed and not self._halted:
            event.clear()
            now = self._clock()
            self._expire_removals(now)
            tries, wake = self._eligible(h, now)
            pause = wake - now
            for waiter in tries:
                try:
                    code, wait = await self._try(host, waiter)
                except self._errors as exc:
                    await self._outage(exc, backoff)
                    pause = 0.0
                    break
                except Exception:
                    # A bug or a Redis error must not strand the waiters: log it, look again later.
                    logger.exception("scrapy-polite: grant attempt for %s failed", host)
                    pause = backoff.next()
                    break
                self._back(backoff)
                if code == "granted":
                    pause = 0.0
                    break
                pause = min(pause, wait)
                if code in _HOST_CODES:
                    break
            if pause > 0:
                try:
                    await asyncio.wait_for(event.wait(), timeout=min(pause, 1.0) + 0.001)
                except asyncio.TimeoutError:
                    pass

    def _eligible(self, h: HostState, now: float) -> tuple[list[_Waiter], float]:
        """Waiters worth one grant attempt now, and when to look again otherwise."""
        tries: list[_Waiter] = []
        wake = now + 1.0
        unpinned = False
        for waiter in h.waiters:
            w: _Waiter = waiter  # type: ignore[assignment]
            if w.not_before > now:
                wake = min(wake, w.not_before)
                continue
            if w.session is None:
                if not unpinned and self._free_candidates(w.host):
                    tries.append(w)
                unpinned = True
                continue
            s = self._sessions[w.session]
            if not s.busy and s.queue and s.queue[0] is w:
                tries.append(w)
        return tries, wake

    def _free_candidates(self, host: str, only: str | None = None) -> list[str]:
        now = self._clock()
        out = []
        for key in self._order if only is None else [only]:
            st = self._endpoints.get(key)
            if st is None:
                continue
            # Dead endpoints stay on offer: one probe per longest backoff (the script decides).
            if (not st.removed and st.inflight < self.endpoint_concurrency and st.unhealthy_until <= now
                    and self._spacing.get((key, host), 0.0) <= now
                    and (only is not None or self.eligible is None or self.eligible(host, key))):
                out.append(self._ids[key])
                if len(out) >= CANDIDATES:
                    break
        return out

    async def _try(self, host: str, w: _Waiter) -> tuple[str, float]:
        if w.session is not None:
            s = self._sessions[w.session]
            pinned = s.endpoint_key
            until = self._removals.until(pinned) if pinned is not None else None
            if until is not None:  # its endpoint was removed: wait for it through the grace
                return "session_wait", max(0.0, until - self._clock())
            if pinned is not None and pinned in self._endpoints:
                ready = self._spacing.get((pinned, host), 0.0)
                if ready > self._clock():
                    return "session_wait", ready - self._clock()
            # Every usable endpoint, this process's pin first: the script can repin
            # (or tell a pin to an endpoint this process lacks) without another trip.
            usable = [
                k for k, st in self._endpoints.items()
                if self.endpoint_usable(st) and k != pinned and (self.eligible is None or self.eligible(host, k))
            ]
            if pinned is not None and pinned in self._endpoints and self.endpoint_usable(self._endpoints[pinned]):
                usable.insert(0, pinned)
            hint = self._ids[usable[0]] if usable and usable[0] == pinned else ""
            complete = "1" if len(usable) <= SESSION_CANDIDATES else "0"
            ids = [self._ids[k] for k in usable[:SESSION_CANDIDATES]]
        else:
            hint, complete = "", "0"
            ids = self._free_candidates(host, only=w.endpoint)
        h = self.host(host)
        low, high = h.delay
        u = self._rng.random()
        code, ep_id, at, state, health, signal = await self._scripts["acquire"](args=[
            self.keys.prefix, host, w.session or "", w.token, self.lease_ttl, self.endpoint_concurrency,
            self.host_overrides.get(host, (self.host_concurrency,))[0], low, high, self.max_failures,
            self.backoff[1],
            u, self.poll, "1" if self.session_policy == "repin" else "0", hint, complete, self.pin_ttl,
            self._seen, self._longest_spacing(), self.host_ttl, *ids,
        ])
        now = self._clock()
        redis_now = self._seen = float(state[0])
        self._mirror(h, host, state, now)
        if signal:
            self._signals[host] = max(self._signals.get(host, -math.inf), now - (redis_now - float(signal)))
        self._mirror_health(health, redis_now, now)
        wait = max(0.0, float(at) - redis_now)
        if code == "grace" and float(at) > self._grace_until:
            self._grace_until = float(at)
            logger.warning(
                "scrapy-polite: the shared state at %s was unreachable for longer than the lease TTL, "
                "or lost its data: no new lease for %.1f s, so requests still in flight are "
                "re-asserted first", self.label, wait,
            )
        if code == "granted":
            key = self._by_id.get(ep_id)
            if w.done or key is None or self._closed:
                # Cancelled while the script ran, or pinned (by another process) to an
                # endpoint this process does not have: hand the slot straight back.
                self._send_release(host, w, ep_id)
                if not w.done and key is None:
                    if self.session_policy == "repin":
                        self._unpin(w.session, ep_id)  # type: ignore[arg-type]
                    else:
                        self._session_lost(w, f"session {w.session!r} is pinned to an endpoint missing here")
                return "refused", 0.0
            gap, slack = (float(v) for v in state[9:11]) if len(state) > 10 else (-1.0, -1.0)
            self._grant(w, self._endpoints[key], h, now, gap if gap >= 0 else math.inf,
                        slack if slack >= 0 else math.inf)
            # The same spacing the script drew, from the same band and the same u.
            lo, hi = h.delay
            until = self._spacing[(key, host)] = now + max(lo + u * (hi - lo), h.min_delay)
            heapq.heappush(self._spacing_due, (until, key, host))
        elif code == "session_lost" and w.session is not None:
            key = self._by_id.get(ep_id)
            label = self._endpoints[key].endpoint.label if key else ep_id
            self._session_lost(
                w, f"session {w.session!r} lost its endpoint {label} (POLITE_SESSION_POLICY='fail')"
            )
        elif code == "session_wait" and w.session is not None and w.session in self._sessions:
            self._sessions[w.session].endpoint_key = self._by_id.get(ep_id)
        return code, wait

    def _longest_spacing(self) -> float:
        """The longest gap any host known here asks for, which a grace after a reset must cover
        (an evicted host has nothing in flight to re-assert)."""
        return self._longest.value()

    def _mirror_health(self, health: list[str], redis_now: float, now: float) -> None:
        """Take the shared health the script saw: a death learned only from Redis
        unpins sessions and, for the last usable endpoint, closes the spider here too."""
        for ep_id, failures, until in zip(health[::3], health[1::3], health[2::3]):
            key = self._by_id.get(ep_id)
            st = self._endpoints.get(key) if key is not None else None
            if st is None:
                continue
            usable = self.endpoint_usable(st)
            st.failures = int(failures)
            st.unhealthy_until = now + max(0.0, float(until) - redis_now)
            if usable and not self.endpoint_usable(st):
                self._after_health_change(key)  # type: ignore[arg-type]

    def _mirror(self, h: HostState, host: str, state: list[str], now: float) -> None:
        """Refresh the throttle's view of *host* from the shared values."""
        redis_now = float(state[0])
        h.limit = int(float(state[1]))
        h.delay = (float(state[2]), float(state[3]))
        h.min_delay = float(state[4])
        self._longest.set(host, max(h.delay[1], h.min_delay))
        h.interval = float(state[5])
        h.paused_until = now + (float(state[6]) - redis_now) if float(state[6]) > redis_now else 0.0
        self._fleet_inflight[host] = int(float(state[7]))
        if len(state) > 8:
            h.grants = int(float(state[8]))

    def _grant(
        self, w: _Waiter, st: EndpointState, h: HostState, now: float, gap: float = math.inf, slack: float = math.inf
    ) -> None:
        key = st.endpoint.key
        st.inflight += 1
        st.requests += 1
        st.last_granted = now
        self._order.move_to_end(key)
        h.inflight += 1
        h.waiters.remove(w)  # type: ignore[arg-type]
        if w.session is not None:
            s = self._sessions[w.session]
            old, s.endpoint_key = s.endpoint_key, key
            if old is not None and old != key and self._on_session_repinned is not None:
                # Repinned by the script (its endpoint died or left the pool, maybe elsewhere).
                label = self._endpoints[old].endpoint.label if old in self._endpoints else old
                self._on_session_repinned(s.key, label, "endpoint unusable")
            s.busy = True
            s.requests += 1
            s.queue.popleft()
        w.done = True
        lease = Lease(st.endpoint, w.host, w.session, now, now - w.created, token=w.token, gap=gap, slack=slack)
        self._leases[w.token] = lease
        if self.stall_timeout > 0:
            self._stall_timers[w.token] = asyncio.get_running_loop().call_later(
                self.stall_timeout, self.stall, lease
            )
        w.deferred.callback(lease)

    def _send_release(self, host: str, w: _Waiter, ep_id: str) -> None:
        args = [self.keys.prefix, host, w.session or "", w.token, ep_id, self.keys.held(self.process_id),
                w.token, self.lease_ttl]
        self._op(lambda: self._scripts["release"](args=args))

    # -- waiters -----------------------------------------------------------

    def _cancel(self, w: _Waiter) -> None:
        w.done = True
        self._drop(w)

    def _drop(self, w: _Waiter) -> None:
        h = self._hosts.get(w.host)
        if h is not None and w in h.waiters:
            h.waiters.remove(w)  # type: ignore[arg-type]
        if h is not None:
            self._idle_host(w.host)
        s = self._sessions.get(w.session) if w.session is not None else None
        if s is not None and w in s.queue:
            s.queue.remove(w)  # type: ignore[arg-type]
            self._idle_session(w.session)  # type: ignore[arg-type]
        if w.tag is not None and self._client is not None:
            held = self.keys.held(self.process_id)
            self._op(lambda: self._client.hdel(held, w.token))

    def _fail(self, w: _Waiter, exc: Exception) -> None:
        if w.done:
            self._drop(w)
            return
        w.done = True
        self._drop(w)
        w.deferred.errback(exc)

    def _session_lost(self, w: _Waiter, reason: str) -> None:
        s = self._sessions[w.session]  # type: ignore[index]
        s.lost = reason
        for other in list(s.queue):
            self._fail(other, SessionEndpointLost(reason))  # type: ignore[arg-type]
        self._fail(w, SessionEndpointLost(reason))

    def _after_health_change(self, endpoint_key: str) -> None:
        st = self._endpoints[endpoint_key]
        if st.failures < self.max_failures:  # not dead (a removed one's sessions keep their grace)
            return
        self._handle_lost_endpoints({endpoint_key})
        if self._on_all_unusable is not None and not any(
            self.endpoint_usable(s) for s in self._endpoints.values()
        ):
            self._on_all_unusable()

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
                self._unpin(s.key, self._ids[pinned])
                if self._on_session_repinned is not None:
                    self._on_session_repinned(s.key, old, why)
                continue
            s.lost = lost_message(s.key, old, why)
            for w in list(s.queue):
                self._fail(w, SessionEndpointLost(s.lost))  # type: ignore[arg-type]

    def _unpin(self, session: str, ep_id: str) -> None:
        args = [self.keys.prefix, session, ep_id]
        self._op(lambda: self._scripts["unpin"](args=args))

    def publish_stats(self, snap: dict[str, Any]) -> None:
        """Queue this process's stats snapshot, sent in order with the other updates."""
        from scrapy_polite.metrics.fleet import publish_commands

        async def send() -> None:
            pipe = self._client.pipeline(transaction=False)
            await publish_commands(pipe, self.keys, self.process_id, snap).execute()

        self._op(send)

    # -- background: ordered updates, renewals, outages --------------------

    def _op(self, make: Callable[[], Coroutine[Any, Any, Any]]) -> None:
        """Queue a shared-state update; updates are sent one by one, in order."""
        if self._ops is None:
            self.start()
        if self._ops is not None:
            self._ops.put_nowait(make)

    def _hset(self, host: str, **fields: float) -> None:
        key = self.keys.host(host)

        async def send() -> None:
            pipe = self._client.pipeline(transaction=True)
            pipe.hset(key, mapping=fields)
            pipe.expire(key, math.ceil(self.host_ttl))
            await pipe.execute()

        self._op(send)

    def _extend(self, key: str, field_name: str, seconds: float) -> None:
        self._op(lambda: self._scripts["extend"](args=[key, field_name, seconds]))

    async def _run_ops(self) -> None:
        assert self._ops is not None
        backoff = _Backoff()
        while not self._halted:
            make = await self._ops.get()
            try:
                while True:
                    try:
                        await make()
                        self._back(backoff)
                        break
                    except self._errors as exc:
                        if self._halted:
                            break
                        # Updates wait for Redis, in order, rather than being lost.
                        await self._outage(exc, backoff)
            except Exception:
                logger.exception("scrapy-polite: shared-state update failed and was dropped")
            finally:
                self._ops.task_done()

    async def _run_renewals(self) -> None:
        """Every third of the lease TTL: renew leases and heartbeat, sweep dead processes.

        Retries while Redis is away come at most a quarter TTL apart, so leases
        are re-asserted soon after it is back, before another process sweeps.
        """
        backoff = _Backoff(cap=min(_BACKOFF[1], self.lease_ttl / 4))
        while not self._halted:
            try:
                await self._renew()
                self._back(backoff)
            except self._errors as exc:
                await self._outage(exc, backoff)
                continue
            except Exception:
                # Renewals must go on whatever happened, or every lease here lapses.
                logger.exception("scrapy-polite: lease renewal failed")
            self._evict(None)
            await asyncio.sleep(self.lease_ttl / 3)

    async def _renew(self) -> None:
        args: list[Any] = [self.keys.prefix, self.lease_ttl, self.process_id, self._seen, self._longest_spacing()]
        for lease in self._leases.values():
            # A stalled lease holds its endpoint only: no host to renew it for.
            args += [lease.token, self._ids.get(lease.endpoint.key, endpoint_id(lease.endpoint.ident)),
                     "" if lease.stalled else lease.host, lease.session or ""]
        seen, lapsed, beat = await self._scripts["renew"](args=args)
        self._seen = float(seen)
        lapsed, beat = int(lapsed), int(beat) if self._renewed else 0
        self._renewed = True
        if lapsed or beat:
            self.reasserted += lapsed + beat
            logger.warning(
                "scrapy-polite: re-asserted %d lease(s)%s in the shared state at %s (Redis lost them, "
                "or they ran out while it was unreachable)", lapsed,
                " and this process's heartbeat" if beat else "", self.label,
            )
        swept = await self._scripts["sweep"](args=[self.keys.prefix, ORPHANS_KEPT, _IDLE_TTL])
        for proc, count in zip(swept[::2], swept[1::2]):
            logger.warning(
                "scrapy-polite: process %s stopped renewing its leases; its endpoints are free again "
                "and the %d request(s) it held are listed under %s",
                proc, int(count), self.keys.orphans,
            )
            if self.on_orphans is not None:
                self.on_orphans(proc, int(count))

    async def _outage(self, exc: BaseException, backoff: _Backoff) -> None:
        if self._down_since is None:
            self._down_since = self._clock()
            self.outages += 1
            logger.warning(
                "scrapy-polite: lost the shared state at %s (%s); %d request(s) wait, none is sent "
                "until it is back", self.label, exc, self.waiting(),
            )
        self._check_outage_deadline()
        await asyncio.sleep(backoff.next())

    def _check_outage_deadline(self) -> None:
        """Once Redis has been away for ``outage_timeout``, say so (once per outage): the caller closes."""
        if self._down_since is None or self.outage_timeout <= 0 or self._outage_reported:
            return
        down_for = self._clock() - self._down_since
        if down_for >= self.outage_timeout:
            self._outage_reported = True
            if self.on_outage_timeout is not None:
                self.on_outage_timeout(down_for)

    def _back(self, backoff: _Backoff) -> None:
        if self._down_since is not None:
            logger.warning(
                "scrapy-polite: shared state at %s is back after %.1f s", self.label,
                self._clock() - self._down_since,
            )
            self._down_since = None
            self._outage_reported = False
            self._kick()
        backoff.reset()
