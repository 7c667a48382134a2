"""Eviction of idle hosts, sessions and spent spacings: this process forgets what Redis keeps."""

from __future__ import annotations

import heapq

from scrapy_polite.gate.redis.tables import RedisTables

#: Idle entries evicted per acquire or release, besides the sweep on each renewal.
_EVICT_PER_CALL = 4


class RedisEviction(RedisTables):
    """Idle hosts and sessions leave this process after ``idle_keep``; what they learned stays in Redis."""

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
        self._sent_signals.pop(host, None)
        self._interval_v.pop(host, None)
        self._fence.forget(host)
        self._wakeups.pop(host, None)
        self._host_evicted(host)

    def _drop_session(self, key: str) -> None:
        s = self._sessions.get(key)
        if s is not None and not s.busy and not s.queue:
            del self._sessions[key]

    def _expire_spacing(self, now: float) -> None:
        """Forget this process's spacings that have run out, soonest first (no scan)."""
        due = self._spacing_due
        while due and due[0][0] <= now:
            until, key, host = heapq.heappop(due)
            if self._spacing.get((key, host)) == until:
                del self._spacing[(key, host)]
