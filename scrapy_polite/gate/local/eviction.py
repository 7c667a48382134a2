"""Eviction of idle hosts, sessions and (endpoint, host) pairs, so memory follows recent activity."""

from __future__ import annotations

import heapq
from collections import OrderedDict

from scrapy_polite.gate.backoff import PAIR_MEMORY
from scrapy_polite.gate.local.tables import LocalTables
from scrapy_polite.gate.state import HostState

#: Idle hosts and sessions looked at per acquire and per release: eviction keeps
#: pace with the requests that create state, at a constant cost per request.
SWEEP = 2


class LocalEviction(LocalTables):
    """Drops what no longer constrains anything; a host's learned limits go to its memory."""

    def sweep(self, limit: int | None = None) -> int:
        """Evict up to *limit* (all, for None) idle hosts and sessions that are due; return how many."""
        now = self._clock()
        done = self._sweep_hosts(now, limit) + self._sweep_sessions(now, limit)
        if limit is None:
            self._compact()
        return done

    def _compact(self) -> None:
        """Rebuild the tables once more entries left them than they hold: dicts never shrink."""
        if self._dropped <= max(1024, len(self._hosts) + len(self._sessions)):
            return
        self._dropped = 0
        self._hosts = dict(self._hosts)
        self._evict_due = dict(self._evict_due)
        self._pairs = dict(self._pairs)
        self._host_pairs = dict(self._host_pairs)
        self._sessions = dict(self._sessions)
        self._idle_sessions = OrderedDict(self._idle_sessions)
        self._waiting_hosts = dict(self._waiting_hosts)
        self._evict_heap = list(self._evict_heap)
        self.memory.compact()

    def _sweep_hosts(self, now: float, limit: int | None) -> int:
        heap, due_at, evicted, looked = self._evict_heap, self._evict_due, 0, 0
        while heap and heap[0][0] <= now and (limit is None or looked < limit):
            looked += 1
            _, host = heapq.heappop(heap)
            due = due_at.get(host)
            h = self._hosts.get(host)
            if due is None or h is None:
                continue
            if due <= now:
                due = self._evictable_at(host, h, now)
                if due <= now:
                    self._evict(host, h, now)
                    evicted += 1
                    continue
                due_at[host] = due
            heapq.heappush(heap, (due, host))
        return evicted

    def _evictable_at(self, host: str, h: HostState, now: float) -> float:
        """When *host* can be evicted if it stays as it is: ``PAIR_MEMORY`` after its last timer."""
        if h.waiters or h.inflight > 0:
            return now + PAIR_MEMORY
        quiet = max(h.paused_until, h.next_start)
        for key in self._host_pairs.get(host, ()):
            pair = self._pairs[(key, host)]
            quiet = max(quiet, pair.next_allowed, pair.cooldown_until, pair.banned_until)
        return quiet + PAIR_MEMORY

    def _evict(self, host: str, h: HostState, now: float) -> None:
        self._dropped += 1
        del self._hosts[host]
        del self._evict_due[host]
        self._waiting_hosts.pop(host, None)
        for key in self._host_pairs.pop(host, ()):
            del self._pairs[(key, host)]
        learned = (h.limit, h.delay, h.min_delay, h.interval)
        if learned != (self.host_concurrency, self.delay, 0.0, 0.0):
            self.memory.remember(host, learned, now)
        self._host_evicted(host)

    def _sweep_sessions(self, now: float, limit: int | None) -> int:
        idle, forgotten = self._idle_sessions, 0
        while idle and (limit is None or forgotten < limit):
            key, since = next(iter(idle.items()))
            if since + self.session_ttl > now:
                break
            del idle[key]
            s = self._sessions.get(key)
            if s is None or not s.idle():
                continue
            if s.endpoint_key is not None:
                self.session_load.unpin(s.endpoint_key)
            del self._sessions[key]
            self._dropped += 1
            forgotten += 1
        return forgotten

    def _prune_pairs(self, now: float) -> None:
        """Forget (endpoint, host) pairs whose timers ran out ``PAIR_MEMORY`` ago.

        An expired pair constrains nothing, so dropping it changes no decision
        and keeps memory bounded by recent activity, not by endpoints x hosts.
        """
        done = [
            key for key, pair in self._pairs.items()
            if pair.quiet_at() + PAIR_MEMORY <= now
        ]
        for key in done:
            del self._pairs[key]
            keys = self._host_pairs.get(key[1])
            if keys is not None:
                keys.discard(key[0])
                if not keys:
                    del self._host_pairs[key[1]]
