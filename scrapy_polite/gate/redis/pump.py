"""The pump: one task per host with waiters, trying them in turn and sleeping until something may change."""

from __future__ import annotations

import asyncio
import logging

from scrapy_polite.gate.backoff import Retry
from scrapy_polite.gate.redis.grants import Grants
from scrapy_polite.gate.state import HostState, Waiter

logger = logging.getLogger(__name__)

#: Host-wide refusals: no other waiter of that host could be granted either.
_HOST_CODES = frozenset({"grace", "paused", "host_full", "host_spacing"})


class Pump(Grants):
    """Wakes a host's waiters when a slot, a spacing or Redis may have come back."""

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
        if h.paused_until > now:
            # Paused here: the pause may not have reached Redis yet, and no attempt may overtake it.
            return [], h.paused_until
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
