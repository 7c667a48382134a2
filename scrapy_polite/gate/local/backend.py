"""LocalGate: the in-memory gate of one crawler process.

Scrapy's download slots do not enforce per-slot concurrency on the asyncio
reactor, so the gate enforces every limit itself: requests wait here, in
``process_request``, without blocking the reactor.
"""

from __future__ import annotations

import heapq

from scrapy_polite.gate.backoff import PAIR_MEMORY
from scrapy_polite.gate.local.dispatch import Dispatch
from scrapy_polite.gate.local.eviction import SWEEP
from scrapy_polite.gate.state import EndpointState, HostState, Lease, SessionState, Waiter


class LocalGate(Dispatch):
    """In-memory :class:`~scrapy_polite.gate.base.Gate` for one crawler process.

    Built with its endpoints and the keywords of :class:`~scrapy_polite.gate.local.tables.LocalTables`
    and :class:`~scrapy_polite.gate.core.GateOptions`.
    """

    # -- core hooks -------------------------------------------------------------

    def _on_host_created(self, host: str, h: HostState, now: float) -> None:
        learned = self.memory.recall(host, now)
        if learned is not None:
            h.limit, h.delay, h.min_delay, h.interval = learned
        self._evict_due[host] = due = now + PAIR_MEMORY
        heapq.heappush(self._evict_heap, (due, host))

    def _on_enqueued(self, w: Waiter, h: HostState, now: float) -> None:
        self._waiting_hosts[w.host] = None
        self._dispatch((w.host,))
        self._sweep_hosts(now, SWEEP)
        self._sweep_sessions(now, SWEEP)

    def _on_released(self, lease: Lease, st: EndpointState | None, h: HostState | None, now: float) -> None:
        if st is not None and not st.removed and st.inflight < self.endpoint_concurrency:
            self._idle[lease.endpoint.key] = None
        if h is not None and not lease.stalled:
            self._evict_due[lease.host] = now + PAIR_MEMORY
        self._kick()
        self._sweep_hosts(now, SWEEP)
        self._sweep_sessions(now, SWEEP)

    def _on_unpinned(self, s: SessionState, endpoint_key: str) -> None:
        self.session_load.unpin(endpoint_key)

    def _on_endpoint_added(self, key: str) -> None:
        self.session_load.add(key)
        self._idle[key] = None
        self._idle.move_to_end(key, last=False)

    def _on_endpoint_back(self, key: str, st: EndpointState) -> None:
        if st.inflight < self.endpoint_concurrency:
            self._idle[key] = None

    def _on_endpoint_removed(self, key: str, until: float) -> None:
        self._idle.pop(key, None)
        self._schedule(until)

    def _on_closed(self) -> None:
        self._waiting_hosts.clear()

    def _on_maintain(self, now: float) -> None:
        self._prune_pairs(now)
        self.sweep()

    def cool_endpoint(self, endpoint_key: str, host: str | None, seconds: float) -> None:
        """No request through *endpoint_key* (to *host*, or anywhere) for *seconds*."""
        until = self._clock() + seconds
        if host is None:
            st = self._endpoints.get(endpoint_key)
            if st is not None:
                st.unhealthy_until = max(st.unhealthy_until, until)
        else:
            pair = self._pair(endpoint_key, host)
            pair.cooldown_until = max(pair.cooldown_until, until)
        self._kick()

    def ban_endpoint(self, endpoint_key: str, host: str, seconds: float) -> None:
        pair = self._pair(endpoint_key, host)
        pair.banned_until = max(pair.banned_until, self._clock() + seconds)
        self._kick()
