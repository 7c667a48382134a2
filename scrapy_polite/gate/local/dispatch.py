"""Dispatch: which waiter gets which endpoint now, and when to look again."""

from __future__ import annotations

import math
from collections.abc import Iterable

from scrapy_polite.gate.backoff import draw_spacing
from scrapy_polite.gate.core import cancel_timer
from scrapy_polite.gate.local.eviction import LocalEviction
from scrapy_polite.gate.state import EndpointState, HostState, Waiter


class Dispatch(LocalEviction):
    """Grants in memory: the one endpoint choice (``_pick``), spacing, and the timer that wakes waiters."""

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
