"""The leases this process holds in Redis: listed, handed back, unpinned, renewed, and dead processes swept."""

from __future__ import annotations

import asyncio
import logging
import math
from typing import Any

from scrapy_polite.gate.backoff import RETRY_BACKOFF, Retry
from scrapy_polite.gate.redis.connection import Connection
from scrapy_polite.gate.redis.state import endpoint_id
from scrapy_polite.gate.redis.tables import IDLE_TTL
from scrapy_polite.gate.state import Waiter

logger = logging.getLogger(__name__)

#: The orphans list keeps the newest this many entries.
ORPHANS_KEPT = 100_000


class HeldLeases(Connection):
    """Keeps what this process holds alive in Redis, and lists what a dead process held."""

    async def _hold(self, held: str, token: str, tag: str) -> None:
        """List a request this process holds; the list lives as long as the heartbeat."""
        pipe = self._client.pipeline(transaction=True)
        pipe.hset(held, token, tag)
        pipe.expire(held, math.ceil(self.lease_ttl * 6))
        await pipe.execute()

    def _send_release(self, host: str, w: Waiter, ep_id: str) -> None:
        args = [self.keys.prefix, host, w.session or "", w.token, ep_id, self.keys.held(self.process_id),
                w.token, self.lease_ttl]
        self._op(lambda: self._scripts["release"](args=args))

    def _unpin(self, session: str, ep_id: str) -> None:
        args = [self.keys.prefix, session, ep_id]
        self._op(lambda: self._scripts["unpin"](args=args))

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
        swept = await self._scripts["sweep"](args=[self.keys.prefix, ORPHANS_KEPT, IDLE_TTL])
        for proc, count in zip(swept[::2], swept[1::2]):
            logger.warning(
                "process %s stopped renewing its leases; its endpoints are free again "
                "and the %d request(s) it held are listed under %s",
                proc, int(count), self.keys.orphans,
            )
            self.listeners.on_orphans(proc, int(count))
