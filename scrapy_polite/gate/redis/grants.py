"""One grant attempt: what it offers the acquire script, and what this process takes from the reply."""

from __future__ import annotations

import contextlib
import heapq
import logging
from typing import NamedTuple

from scrapy_polite.gate.backoff import PAIR_MEMORY, draw_spacing
from scrapy_polite.gate.redis import scripts as redis_scripts
from scrapy_polite.gate.redis.candidates import Candidates
from scrapy_polite.gate.state import (
    NO_SIGNAL,
    HostSignal,
    HostState,
    SessionState,
    Waiter,
    lost_message,
    same,
)

logger = logging.getLogger(__name__)


class Offer(NamedTuple):
    """The endpoint ids one grant attempt offers the script, the session's pin among them
    (``hint``, '' for none), and '1' when they are all this process has."""

    ids: list[str]
    hint: str
    complete: str


class Grants(Candidates):
    """Grant attempts through the acquire script, and the mirror of what the script read."""

    async def _try(self, host: str, w: Waiter) -> tuple[str, float]:
        """One grant attempt for *w*: the script's code (or this process's), and how long to wait."""
        if w.session is not None:
            offer, wait = await self._session_offer(host, self._sessions[w.session])
            if offer is None:
                return "session_wait", wait
        else:
            offer = Offer(self._free_candidates(host, only=w.endpoint), "", "0")
        h = self.host(host)
        u = self._rng.random()
        asked = self._clock()
        r = redis_scripts.parse_acquire(await self._scripts["acquire"](args=redis_scripts.acquire_args(
            offer.ids, prefix=self.keys.prefix, host=host, session=w.session or "", token=w.token,
            ttl=self.lease_ttl, endpoint_concurrency=self.endpoint_concurrency,
            limit=self.host_overrides.get(host, (self.host_concurrency,))[0], lo=h.delay[0], hi=h.delay[1],
            max_failures=self.max_failures, backoff_max=self.backoff[1], u=u, poll=self.poll,
            repin="1" if self.session_policy == "repin" else "0", hint=offer.hint, complete=offer.complete,
            pin_ttl=self.pin_ttl, last_seen=self._seen, longest_spacing=self._longest_spacing(),
            host_ttl=self.host_ttl, pair_memory=PAIR_MEMORY,
        )))
        return self._answer(w, h, r, u, asked)

    async def _session_offer(self, host: str, s: SessionState) -> tuple[Offer | None, float]:
        """What a request of session *s* offers, or (None, how long it waits for its pin's grace or spacing)."""
        off_tier = s.endpoint_key
        self._repin_off_tier(s, host)
        if off_tier is not None and s.endpoint_key is None:
            # The shared pin goes before this acquire reads it (the queued unpin may come later).
            with contextlib.suppress(Exception):
                await self._scripts["unpin"](args=[self.keys.prefix, s.key, self._ids[off_tier]])
        pinned = s.endpoint_key
        until = self._removals.until(pinned) if pinned is not None else None
        if until is not None:  # its endpoint was removed: wait for it through the grace
            return None, max(0.0, until - self._clock())
        if pinned is not None and pinned in self._endpoints:
            ready = self._spacing.get((pinned, host), 0.0)
            if ready > self._clock():
                return None, ready - self._clock()
        # The pin first, then a few usable others, so the script can repin (or tell a
        # pin to an endpoint this process lacks) without another trip.
        others, complete = self._session_choices(host, pinned, None if pinned else self._avoided(s.key))
        pin_ok = pinned in self._endpoints and self.endpoint_usable(self._endpoints[pinned])
        hint = self._ids[pinned] if pinned is not None and pin_ok else ""
        return Offer(([hint] if hint else []) + [self._ids[k] for k in others], hint, complete), 0.0

    def _answer(
        self, w: Waiter, h: HostState, r: redis_scripts.AcquireReply, u: float, asked: float,
    ) -> tuple[str, float]:
        """Act on the script's reply to *w*'s attempt (sent when *asked*, its spacing drawn with *u*)."""
        code, ep_id = r.code, r.endpoint
        now = self._clock()
        redis_now = self._mirror_reply(w.host, h, r, now, asked)
        wait = max(0.0, r.at - redis_now)
        if code == "grace" and r.at > self._grace_until:
            self._grace_until = r.at
            logger.warning(
                "the shared state at %s was unreachable for longer than the lease TTL, "
                "or lost its data: no new lease for %.1f s, so requests still in flight are "
                "re-asserted first", self.label, wait,
            )
        if code == "granted":
            if not self._take_grant(w, h, r, u, now, asked):
                return "refused", 0.0
        elif code == "host_spacing":
            w.rate_held = True
        elif code == "session_lost" and w.session is not None:
            key = self._by_id.get(ep_id)
            label = self._endpoints[key].endpoint.label if key else ep_id
            self._session_lost(w, lost_message(w.session, label, "endpoint unusable"))
        elif code == "session_wait" and w.session is not None and w.session in self._sessions:
            self._sessions[w.session].endpoint_key = self._by_id.get(ep_id)
        return code, wait

    def _take_grant(
        self, w: Waiter, h: HostState, r: redis_scripts.AcquireReply, u: float, now: float, asked: float,
    ) -> bool:
        """Hand *w* the slot the script granted, or (False) hand it straight back to Redis."""
        host, ep_id = w.host, r.endpoint
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
            return False
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
        return True

    def _mirror_reply(
        self, host: str, h: HostState, r: redis_scripts.AcquireReply, now: float, asked: float,
    ) -> float:
        """Take what the script read of *host*, its last rate signal and the endpoints' health;
        return Redis's time then."""
        redis_now = self._seen = r.host.now
        self._mirror(h, host, r.host, now, asked)
        if r.signal and r.signal != self._sent_signals.get(host):  # this process's own, read back: kept as made
            at = now - (redis_now - float(r.signal))
            if at > self._signals.get(host, NO_SIGNAL).at:
                self._signals[host] = HostSignal(at, r.signal_rate, r.signal_found)
        self._mirror_health(r.health, redis_now, now)
        return redis_now

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
        # The last pause's end, past or not, as the in-memory gate keeps it: a pause some process
        # made is known here after it ends too (how long the fleet waited for a Retry-After).
        h.paused_until = now + (state.paused_until - state.now) if state.paused_until > 0 else 0.0
        h.grants = state.grants
