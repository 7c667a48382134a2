"""Host values shared through Redis: the throttle's settings, pauses, rate signals, cool-downs and bans."""

from __future__ import annotations

import math
from collections.abc import Callable, Coroutine
from typing import Any

from scrapy_polite.gate.redis.leases import HeldLeases
from scrapy_polite.gate.state import NO_SIGNAL, HostSignal, HostState


class HostSync(HeldLeases):
    """Sends this process's changes of host values to Redis, fenced until they are written."""

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

        async def send() -> None:
            at = await self._scripts["signal"](args=[key, self.host_ttl, rate, "1" if found else "0"])
            if host in self._hosts:
                self._sent_signals[host] = str(at)

        self._op(send)

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
