"""Leases: granted, released, stalled (the host slot back early), expired, and their timers."""

from __future__ import annotations

import math

from scrapy_polite.gate.core.pool import Pool
from scrapy_polite.gate.state import EndpointState, HostState, Lease, Waiter


class Leases(Pool):
    """The leases this process holds, and what granting or ending one changes."""

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
            self._stall_due[id(lease)] = (self._clock() + self.stall_timeout, lease)
            if self._stall_timer is None:
                self._stall_timer = self._call_later(self.stall_timeout, self._stall_overdue)
        w.deferred.callback(lease)
        return lease

    def release(self, lease: Lease) -> None:
        if lease.released:
            return
        lease.released = True
        self._leases.pop(id(lease), None)
        self._stall_due.pop(id(lease), None)
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
        self._stall_due.pop(id(lease), None)
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

    def _stall_overdue(self) -> None:
        """Stall the leases past their deadline, after setting the timer for the next one's."""
        now = self._clock()
        overdue = []
        for key, (due, lease) in self._stall_due.items():
            if due > now:
                self._stall_timer = self._call_later(due - now, self._stall_overdue)
                break
            overdue.append((key, lease))
        else:
            self._stall_timer = None
        for key, _ in overdue:
            del self._stall_due[key]
        for _, lease in overdue:
            self.stall(lease)

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

