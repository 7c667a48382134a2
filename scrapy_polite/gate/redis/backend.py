"""RedisGate: the :class:`~scrapy_polite.gate.base.Gate` shared by every crawler process.

Processes pointed at the same Redis and namespace hold their limits fleet-wide;
each grant is one Lua script, so two processes never both take the last slot.
The queue of waiting requests stays local. docs/architecture.md (Redis) says
what happens on a crash and while Redis is away.
"""

from __future__ import annotations

import asyncio
import logging

from twisted.internet.defer import Deferred

from scrapy_polite.errors import SpiderClosing
from scrapy_polite.gate.redis import scripts as redis_scripts
from scrapy_polite.gate.redis.pump import Pump
from scrapy_polite.gate.redis.state import async_client, endpoint_id
from scrapy_polite.gate.redis.tables import IDLE_TTL
from scrapy_polite.gate.state import EndpointState, HostState, Lease, SessionState, Waiter

logger = logging.getLogger(__name__)

__all__ = ["RedisGate"]


class RedisGate(Pump):
    """A :class:`~scrapy_polite.gate.base.Gate` whose limits are held in Redis.

    Built with its endpoints and the keywords of :class:`~scrapy_polite.gate.redis.tables.RedisOptions`
    and :class:`~scrapy_polite.gate.core.GateOptions`.
    """

    shared = True

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

    # -- core hooks: the shared state hears of the common bookkeeping ------

    def _on_closed(self) -> None:
        for event in self._wakeups.values():
            event.set()

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
                args=[self.keys.endpoint(self._ids[key]), base, cap, IDLE_TTL]
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
