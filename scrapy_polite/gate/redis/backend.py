"""RedisGate: the :class:`~scrapy_polite.gate.base.Gate` shared by every crawler process.

Processes pointed at the same Redis and namespace hold their limits fleet-wide;
each grant is one Lua script, so two processes never both take the last slot.
The queue of waiting requests stays local. docs/architecture.md (Redis) says
what happens on a crash and while Redis is away.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import math
import os
import secrets
import socket
from collections import OrderedDict
from collections.abc import Callable, Coroutine, Iterable
from typing import Any

from twisted.internet.defer import Deferred

from scrapy_polite.errors import SpiderClosing
from scrapy_polite.gate.backoff import PAIR_MEMORY, RETRY_BACKOFF, Retry, draw_spacing
from scrapy_polite.gate.core import GateCore
from scrapy_polite.gate.redis import scripts as redis_scripts
from scrapy_polite.gate.redis.fence import WriteFence
from scrapy_polite.gate.redis.state import Keys, async_client, endpoint_id, import_redis, mask_url
from scrapy_polite.gate.state import (
    NO_SIGNAL,
    EndpointState,
    HostSignal,
    HostState,
    Lease,
    SessionState,
    Waiter,
    lost_message,
    same,
)
from scrapy_polite.pool.endpoints import Endpoint
from scrapy_polite.settings.config import HOST_TTL, PIN_TTL

logger = logging.getLogger(__name__)

#: At most this many endpoints are offered to one grant attempt of an unpinned
#: request (the least recently used first), so a script stays short however big
#: the pool is.
CANDIDATES = 64
#: A session's request offers its pin and this many other usable endpoints (the
#: least recently used first): the script pins a new session to the least shared
#: of them, or repins a lost one, at a cost that does not grow with the pool.
SESSION_CHOICES = 16
#: The orphans list keeps the newest this many entries.
ORPHANS_KEPT = 100_000
#: Host-wide refusals: no other waiter of that host could be granted either.
_HOST_CODES = frozenset({"grace", "paused", "host_full", "host_spacing"})
#: Shared keys that nobody touches expire after this, so a namespace cleans itself up.
_IDLE_TTL = 24 * 3600.0
#: A host or session with nothing in flight and nobody waiting is forgotten here after
#: this long; what it learned stays in Redis and is read again when it comes back.
IDLE_KEEP = 60.0
#: Idle entries evicted per acquire or release, besides the sweep on each renewal.
_EVICT_PER_CALL = 4

__all__ = ["HOST_TTL", "PIN_TTL", "RedisGate", "RunningMax"]


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


class RedisGate(GateCore):
    """A :class:`~scrapy_polite.gate.base.Gate` whose limits are held in Redis."""

    shared = True

    def __init__(
        self,
        endpoints: Iterable[Endpoint],
        *,
        url: str,
        namespace: str,
        lease_ttl: float = 5.0,
        pin_ttl: float = PIN_TTL,
        host_ttl: float = HOST_TTL,
        idle_keep: float = IDLE_KEEP,
        poll: float = 0.05,
        outage_timeout: float = 0.0,
        **common: Any,
    ) -> None:
        super().__init__(**common)
        self._redis = import_redis()
        # Redis away: wait and retry. Any other Redis error (out of memory, a script error)
        # is logged and the update dropped, rather than retried forever as an outage.
        self._errors: tuple[type[BaseException], ...] = (
            self._redis.ConnectionError, self._redis.TimeoutError, OSError,
        )
        self.url = url
        self.label = mask_url(url)
        self.keys = Keys(namespace)
        self.lease_ttl = lease_ttl
        self.pin_ttl = pin_ttl
        self.host_ttl = host_ttl
        self.idle_keep = idle_keep
        self.poll = poll
        self.process_id = f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"
        self._ids: dict[str, str] = {}
        self._by_id: dict[str, str] = {}
        self._order: OrderedDict[str, None] = OrderedDict()
        self._signals: dict[str, HostSignal] = {}
        #: Per host, the version of the shared interval this process's view of it is of: what a
        #: fresh read brought, or this process's own change made (see ``set_interval.lua``).
        self._interval_v: dict[str, int] = {}
        # The host values this process changed, so a grant read before a change reached Redis
        # cannot bring the old value back here (the throttle takes a value that moved as
        # another process's step).
        self._fence = WriteFence()
        # This process's own spacing per (endpoint key, host), kept locally too, so
        # a Redis restart that loses its data cannot make this process send early.
        self._spacing: dict[tuple[str, str], float] = {}
        self._spacing_due: list[tuple[float, str, str]] = []  # heap of (until, endpoint key, host)
        # Hosts with nothing in flight and nobody waiting, oldest first, with when they went
        # idle: evicted after idle_keep (as idle sessions), a few per call and on each renewal.
        self._idle_hosts: OrderedDict[str, float] = OrderedDict()
        self._longest = RunningMax(self.delay[1])
        self._pumps: dict[str, asyncio.Future[None]] = {}
        self._wakeups: dict[str, asyncio.Event] = {}
        self._client: Any = None
        self._scripts: dict[str, Any] = {}
        self._ops: asyncio.Queue[tuple[Callable[[], Coroutine[Any, Any, Any]], Callable[[], None] | None]] | None = None
        self._tasks: list[asyncio.Future[None]] = []
        self._stopped = False
        # Set when this gate stops talking to Redis; background loops end on it, since
        # redis-py can turn a task's cancellation into a connection error.
        self._halted = False
        self._down_since: float | None = None
        self._renewed = False
        # Redis time of the last answer from Redis (0: none yet), and the end of the
        # fleet-wide grace this process last logged.
        self._seen = 0.0
        self._grace_until = 0.0
        #: Seconds Redis may stay unreachable before ``listeners.on_outage_timeout`` is called (0: never).
        self.outage_timeout = outage_timeout
        self._outage_reported = False
        self.set_endpoints(endpoints)

    def _call_later(self, delay: float, func: Callable[[], object]) -> object:
        return asyncio.get_running_loop().call_later(delay, func)

    def _new_token(self) -> str:
        return secrets.token_hex(8)

    def last_signal(self, host: str) -> HostSignal:
        """Any process's last host-wide rate signal from *host*, as last seen (its time on this process's clock)."""
        return self._signals.get(host, NO_SIGNAL)

    def signal_host(self, host: str, failed: float | None = None, found: bool = False) -> None:
        """A host-wide rate signal from *host*, met at the total rate *failed* (req/s, when known;
        *found*: a host rate in force): every process learns when and where, and holds under it.

        A per-IP signal is not one: the IP's spacing answers for it, and the host rate may climb on.
        """
        self._signals[host] = HostSignal(self._clock(), failed, found)
        key = self.keys.host(host)
        rate = "" if failed is None else repr(float(failed))
        self._op(lambda: self._scripts["signal"](args=[key, self.host_ttl, rate, "1" if found else "0"]))

    # -- lifecycle ---------------------------------------------------------

    def start(self) -> None:
        """Connect and start renewing; idempotent, and also done by the first acquire."""
        if self._client is not None or self._stopped:
            return
        self._client = async_client(self.url)
        self._scripts = {name: self._client.register_script(redis_scripts.source(name)) for name in redis_scripts.NAMES}
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
                logger.warning("%d shared-state updates not sent at close", self._ops.qsize())
        self._halt()
        client, self._client = self._client, None
        try:
            leases, self._leases = list(self._leases.values()), {}
            for lease in leases:
                await asyncio.wait_for(self._scripts["release"](args=self._release_args(lease)), timeout=2)
            await asyncio.wait_for(self._scripts["leave"](args=[self.keys.prefix, self.process_id]), timeout=2)
        except (self._redis.RedisError, OSError, asyncio.TimeoutError) as exc:
            logger.warning("could not clear this process from the shared state: %s", exc)
        finally:
            await client.aclose()

    def _halt(self) -> None:
        self._halted = True
        for task in self._tasks + list(self._pumps.values()):
            task.cancel()

    def _on_closed(self) -> None:
        for event in self._wakeups.values():
            event.set()

    def _on_host_created(self, host: str, h: HostState, now: float) -> None:
        self._longest.set(host, h.longest_spacing())
        self._idle_host(host)

    def _on_host_setting(self, host: str, h: HostState, **fields: float) -> None:
        self._longest.set(host, h.longest_spacing())
        self._hset(host, **fields)

    def _on_host_interval(self, host: str, seconds: float, base: float) -> None:
        # A step from *base*, the value seen here: one another process made since wins (the script).
        # The version is taken when the update is sent, after this process's earlier ones.
        async def send() -> None:
            version = self._interval_v.get(host, 0)
            applied, _, now_v = await self._scripts["set_interval"](
                args=[self.keys.host(host), seconds, self.host_ttl, base, version])
            if int(applied) and host in self._hosts:
                self._interval_v[host] = int(now_v)

        self._host_op(host, ("interval",), send)

    def _on_host_paused(self, host: str, seconds: float) -> None:
        self._extend(self.keys.host(host), "paused_until", seconds)

    def _on_endpoint_added(self, key: str) -> None:
        ep_id = endpoint_id(self._endpoints[key].endpoint.ident)
        self._ids[key], self._by_id[ep_id] = ep_id, key
        self._order[key] = None
        self._order.move_to_end(key, last=False)

    def _on_endpoint_failed(self, key: str, st: EndpointState) -> None:
        # Counted locally at once (the caller logs it); the shared count follows.
        base, cap = self.backoff

        async def send() -> None:
            failures, until = await self._scripts["endpoint_failed"](
                args=[self.keys.endpoint(self._ids[key]), base, cap, _IDLE_TTL]
            )
            if int(failures) > st.failures:
                st.failures = int(failures)
                self._after_health_change(key)

        self._op(send)

    def _on_endpoint_ok(self, key: str) -> None:
        # ``st.failures`` mirrors the shared count as of this process's last grant attempt
        # through the endpoint, so failures seen by other processes are reset here too.
        self._op(lambda: self._scripts["endpoint_ok"](args=[self.keys.endpoint(self._ids[key])]))

    def _on_maintain(self, now: float) -> None:
        self._evict(None)

    def _on_enqueued(self, w: Waiter, h: HostState, now: float) -> None:
        self._idle_hosts.pop(w.host, None)
        if w.tag is not None:
            held, token, tag = self.keys.held(self.process_id), w.token, w.tag
            self._op(lambda: self._hold(held, token, tag))
        self._ensure_pump(w.host)
        self._evict()

    def _on_dropped(self, w: Waiter) -> None:
        if w.host in self._hosts:
            self._idle_host(w.host)
        if w.tag is not None and self._client is not None:
            held = self.keys.held(self.process_id)
            self._op(lambda: self._client.hdel(held, w.token))

    def _on_released(self, lease: Lease, st: EndpointState | None, h: HostState | None, now: float) -> None:
        if h is not None and not lease.stalled:
            self._idle_host(lease.host)
        args = self._release_args(lease)

        async def send() -> None:
            await self._scripts["release"](args=args)
            self._kick()

        self._op(send)
        self._kick()
        self._evict()

    def _on_stall(self, lease: Lease) -> None:
        # The script takes the lease out of the host's set unless it was released, and
        # renewals leave it out from then on.
        args = [self.keys.prefix, lease.host, lease.token, self.lease_ttl]

        async def send() -> None:
            await self._scripts["stall"](args=args)
            self._kick()

        self._op(send)
        self._idle_host(lease.host)

    def _on_unpinned(self, s: SessionState, endpoint_key: str) -> None:
        self._unpin(s.key, self._ids[endpoint_key])

    # -- eviction of idle hosts and sessions -------------------------------

    def _idle_host(self, host: str) -> None:
        """Start *host*'s idle clock if nothing holds it: nothing in flight, nobody waiting, no pump."""
        h = self._hosts.get(host)
        if h is not None and h.inflight <= 0 and not h.waiters and host not in self._pumps:
            self._idle_hosts[host] = self._clock()
            self._idle_hosts.move_to_end(host)

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
        self._interval_v.pop(host, None)
        self._fence.forget(host)
        self._wakeups.pop(host, None)
        self._host_evicted(host)

    def _drop_session(self, key: str) -> None:
        s = self._sessions.get(key)
        if s is not None and not s.busy and not s.queue:
            del self._sessions[key]

    def cool_endpoint(self, endpoint_key: str, host: str | None, seconds: float) -> None:
        ep_id = self._ids.get(endpoint_key)
        if ep_id is None:
            return
        if host is None:
            st = self._endpoints[endpoint_key]
            st.unhealthy_until = max(st.unhealthy_until, self._clock() + seconds)
            self._extend(self.keys.endpoint(ep_id), "unhealthy_until", seconds)
        else:
            self._extend(self.keys.pair(ep_id, host), "cooldown_until", seconds)
        self._kick(host)

    def ban_endpoint(self, endpoint_key: str, host: str, seconds: float) -> None:
        ep_id = self._ids.get(endpoint_key)
        if ep_id is not None:
            self._extend(self.keys.pair(ep_id, host), "banned_until", seconds)
            self._kick(host)

    def _expire_spacing(self, now: float) -> None:
        """Forget this process's spacings that have run out, soonest first (no scan)."""
        due = self._spacing_due
        while due and due[0][0] <= now:
            until, key, host = heapq.heappop(due)
            if self._spacing.get((key, host)) == until:
                del self._spacing[(key, host)]

    # -- leasing -----------------------------------------------------------

    async def _hold(self, held: str, token: str, tag: str) -> None:
        """List a request this process holds; the list lives as long as the heartbeat."""
        pipe = self._client.pipeline(transaction=True)
        pipe.hset(held, token, tag)
        pipe.expire(held, math.ceil(self.lease_ttl * 6))
        await pipe.execute()


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
        for name in [host] if host is not None else list(self._wakeups):
            event = self._wakeups.get(name)
            h = self._hosts.get(name)
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
        backoff = Retry()
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
                    logger.exception("grant attempt for %s failed", host)
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

    def _eligible(self, h: HostState, now: float) -> tuple[list[Waiter], float]:
        """Waiters worth one grant attempt now, and when to look again otherwise."""
        tries: list[Waiter] = []
        wake = now + 1.0
        unpinned = False
        for w in h.waiters:
            if w.not_before > now:
                wake = min(wake, w.not_before)
                continue
            if w.session is None:
                if not unpinned:
                    if self._free_candidates(w.host):
                        tries.append(w)
                    else:
                        wake = min(wake, self._next_free(w.host, now))
                unpinned = True
                continue
            s = self._sessions[w.session]
            if s.turn_of(w):
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
                    and (only is not None or self._may_take(host, key))):
                out.append(self._ids[key])
                if len(out) >= CANDIDATES:
                    break
        return out

    def _session_choices(self, host: str, pinned: str | None, avoid: str | None = None) -> tuple[list[str], str]:
        """Up to SESSION_CHOICES usable endpoints other than *pinned*, least recently used first,
        and '1' when they are all this process has (the script may then drop a pin it lacks).

        *avoid* (a retired identity's endpoint) is offered only when nothing else is."""
        out: list[str] = []
        skipped = False
        for key in self._order:
            if key == pinned or not self.endpoint_usable(self._endpoints[key]) or not self._may_take(host, key):
                continue
            if key == avoid:
                skipped = True
                continue
            if len(out) == SESSION_CHOICES:
                return out, "0"
            out.append(key)
        if skipped and not out:
            return [avoid], "1"  # type: ignore[list-item]
        return out, "0" if skipped else "1"

    def _next_free(self, host: str, now: float) -> float:
        """When an endpoint with a free slot is next out of its backoff and its spacing for *host*
        (a busy one wakes the pump when it is released)."""
        return min((max(st.unhealthy_until, self._spacing.get((key, host), 0.0))
                    for key, st in self._endpoints.items()
                    if not st.removed and st.inflight < self.endpoint_concurrency), default=math.inf)

    async def _try(self, host: str, w: Waiter) -> tuple[str, float]:
        if w.session is not None:
            s = self._sessions[w.session]
            off_tier = s.endpoint_key
            self._repin_off_tier(s, host)
            if off_tier is not None and s.endpoint_key is None:
                # The shared pin goes before this acquire reads it (the queued unpin may come later).
                with contextlib.suppress(Exception):
                    await self._scripts["unpin"](args=[self.keys.prefix, s.key, self._ids[off_tier]])
            pinned = s.endpoint_key
            until = self._removals.until(pinned) if pinned is not None else None
            if until is not None:  # its endpoint was removed: wait for it through the grace
                return "session_wait", max(0.0, until - self._clock())
            if pinned is not None and pinned in self._endpoints:
                ready = self._spacing.get((pinned, host), 0.0)
                if ready > self._clock():
                    return "session_wait", ready - self._clock()
            # The pin first, then a few usable others, so the script can repin (or tell a
            # pin to an endpoint this process lacks) without another trip.
            others, complete = self._session_choices(host, pinned, None if pinned else self._avoided(w.session))
            pin_ok = pinned in self._endpoints and self.endpoint_usable(self._endpoints[pinned])
            hint = self._ids[pinned] if pinned is not None and pin_ok else ""
            ids = ([hint] if hint else []) + [self._ids[k] for k in others]
        else:
            hint, complete = "", "0"
            ids = self._free_candidates(host, only=w.endpoint)
        h = self.host(host)
        u = self._rng.random()
        asked = self._clock()
        r = redis_scripts.parse_acquire(await self._scripts["acquire"](args=redis_scripts.acquire_args(
            ids, prefix=self.keys.prefix, host=host, session=w.session or "", token=w.token, ttl=self.lease_ttl,
            endpoint_concurrency=self.endpoint_concurrency,
            limit=self.host_overrides.get(host, (self.host_concurrency,))[0], lo=h.delay[0], hi=h.delay[1],
            max_failures=self.max_failures, backoff_max=self.backoff[1], u=u, poll=self.poll,
            repin="1" if self.session_policy == "repin" else "0", hint=hint, complete=complete,
            pin_ttl=self.pin_ttl, last_seen=self._seen, longest_spacing=self._longest_spacing(),
            host_ttl=self.host_ttl, pair_memory=PAIR_MEMORY,
        )))
        code, ep_id = r.code, r.endpoint
        now = self._clock()
        redis_now = self._seen = r.host.now
        self._mirror(h, host, r.host, now, asked)
        if r.signal:
            at = now - (redis_now - float(r.signal))
            if at > self._signals.get(host, NO_SIGNAL).at:
                self._signals[host] = HostSignal(at, r.signal_rate, r.signal_found)
        self._mirror_health(r.health, redis_now, now)
        wait = max(0.0, r.at - redis_now)
        if code == "grace" and r.at > self._grace_until:
            self._grace_until = r.at
            logger.warning(
                "the shared state at %s was unreachable for longer than the lease TTL, "
                "or lost its data: no new lease for %.1f s, so requests still in flight are "
                "re-asserted first", self.label, wait,
            )
        if code == "granted":
            key = self._by_id.get(ep_id)
            if w.done or key is None or self._closed:
                # Cancelled while the script ran, or pinned (by another process) to an
                # endpoint this process does not have: hand the slot straight back.
                self._send_release(host, w, ep_id)
                if not w.done and key is None and w.session is not None:
                    if self.session_policy == "repin":
                        self._unpin(w.session, ep_id)
                    else:
                        self._session_lost(w, f"session {w.session!r} is pinned to an endpoint missing here")
                return "refused", 0.0
            self._order.move_to_end(key)
            lease = self._grant(w, self._endpoints[key], h, now, redis_scripts.finite(r.host.gap),
                                redis_scripts.finite(r.host.slack))
            changed = self._fence.missed(host, "interval", asked)
            if changed is not None:
                # Granted under the host rate before this process changed it: the throttle
                # counts its answer as one of the old rate, as a request sent before the change.
                lease.granted_at = min(lease.granted_at, changed - 1e-6)
            # The same spacing the script drew, from the same band and the same u.
            until = self._spacing[(key, host)] = now + draw_spacing(u, h.delay, h.min_delay)
            heapq.heappush(self._spacing_due, (until, key, host))
        elif code == "host_spacing":
            w.rate_held = True
        elif code == "session_lost" and w.session is not None:
            key = self._by_id.get(ep_id)
            label = self._endpoints[key].endpoint.label if key else ep_id
            self._session_lost(w, lost_message(w.session, label, "endpoint unusable"))
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
            if key is None or st is None:
                continue
            usable = self.endpoint_usable(st)
            st.failures = int(failures)
            st.unhealthy_until = now + max(0.0, float(until) - redis_now)
            if usable and not self.endpoint_usable(st):
                self._after_health_change(key)

    def _mirror(self, h: HostState, host: str, state: redis_scripts.HostReply, now: float, asked: float) -> None:
        """Refresh the throttle's view of *host* from the shared values (read when *asked*)."""
        fresh = self._fence.fresh
        if fresh(host, "limit", asked):
            h.limit = state.limit
        if fresh(host, "lo", asked) and fresh(host, "hi", asked):
            if not same(h.delay, (state.lo, state.hi)):
                h.delay_since = asked  # moved by another process: in force here from this read on
            h.delay = (state.lo, state.hi)
        if fresh(host, "min_delay", asked):
            h.min_delay = state.min_delay
        self._longest.set(host, h.longest_spacing())
        if fresh(host, "interval", asked):
            if not same((h.interval,), (state.interval,)):
                h.interval_since = asked
            h.interval = state.interval
            self._interval_v[host] = state.interval_v
        h.paused_until = now + (state.paused_until - state.now) if state.paused_until > state.now else 0.0
        h.grants = state.grants

    def _send_release(self, host: str, w: Waiter, ep_id: str) -> None:
        args = [self.keys.prefix, host, w.session or "", w.token, ep_id, self.keys.held(self.process_id),
                w.token, self.lease_ttl]
        self._op(lambda: self._scripts["release"](args=args))

    def _unpin(self, session: str, ep_id: str) -> None:
        args = [self.keys.prefix, session, ep_id]
        self._op(lambda: self._scripts["unpin"](args=args))


    def submit(self, make: Callable[[Any, Keys, str], Coroutine[Any, Any, Any]]) -> None:
        """Queue *make(client, keys, process id)*, sent in order with this gate's own updates."""
        self._op(lambda: make(self._client, self.keys, self.process_id))

    # -- background: ordered updates, renewals, outages --------------------

    def _op(self, make: Callable[[], Coroutine[Any, Any, Any]], done: Callable[[], None] | None = None) -> None:
        """Queue a shared-state update; updates are sent one by one, in order (*done*: called
        once the update is sent, or given up)."""
        if self._ops is None:
            self.start()
        if self._ops is not None:
            self._ops.put_nowait((make, done))

    def _host_op(self, host: str, names: tuple[str, ...], make: Callable[[], Coroutine[Any, Any, Any]]) -> None:
        """Queue an update of *host*'s values *names*, fenced until it is sent (see ``WriteFence``)."""
        self._fence.queued(host, names, self._clock())
        self._op(make, lambda: self._fence.written(host, names, self._clock()))

    def _hset(self, host: str, **fields: float) -> None:
        key = self.keys.host(host)

        async def send() -> None:
            pipe = self._client.pipeline(transaction=True)
            pipe.hset(key, mapping=fields)
            pipe.expire(key, math.ceil(self.host_ttl))
            await pipe.execute()

        self._host_op(host, tuple(fields), send)

    def _extend(self, key: str, field_name: str, seconds: float) -> None:
        self._op(lambda: self._scripts["extend"](args=[key, field_name, seconds]))

    async def _run_ops(self) -> None:
        assert self._ops is not None
        backoff = Retry()
        while not self._halted:
            make, done = await self._ops.get()
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
                logger.exception("shared-state update failed and was dropped")
            finally:
                if done is not None:
                    done()
                self._ops.task_done()

    async def _run_renewals(self) -> None:
        """Every third of the lease TTL: renew leases and heartbeat, sweep dead processes.

        Retries while Redis is away come at most a quarter TTL apart, so leases
        are re-asserted soon after it is back, before another process sweeps.
        """
        backoff = Retry(cap=min(RETRY_BACKOFF[1], self.lease_ttl / 4))
        while not self._halted:
            try:
                await self._renew()
                self._back(backoff)
            except self._errors as exc:
                await self._outage(exc, backoff)
                continue
            except Exception:
                # Renewals must go on whatever happened, or every lease here lapses.
                logger.exception("lease renewal failed")
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
                "re-asserted %d lease(s)%s in the shared state at %s (Redis lost them, "
                "or they ran out while it was unreachable)", lapsed,
                " and this process's heartbeat" if beat else "", self.label,
            )
        swept = await self._scripts["sweep"](args=[self.keys.prefix, ORPHANS_KEPT, _IDLE_TTL])
        for proc, count in zip(swept[::2], swept[1::2]):
            logger.warning(
                "process %s stopped renewing its leases; its endpoints are free again "
                "and the %d request(s) it held are listed under %s",
                proc, int(count), self.keys.orphans,
            )
            self.listeners.on_orphans(proc, int(count))

    async def _outage(self, exc: BaseException, backoff: Retry) -> None:
        if self._down_since is None:
            self._down_since = self._clock()
            self.outages += 1
            logger.warning(
                "lost the shared state at %s (%s); %d request(s) wait, none is sent "
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
            self.listeners.on_outage_timeout(down_for)

    def _back(self, backoff: Retry) -> None:
        if self._down_since is not None:
            logger.warning(
                "shared state at %s is back after %.1f s", self.label,
                self._clock() - self._down_since,
            )
            self._down_since = None
            self._outage_reported = False
            self._kick()
        backoff.reset()
