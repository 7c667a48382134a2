"""Hosts no usable identity is left for: every endpoint they may take is benched for them.

Each challenge or ban benches its endpoint for the host (``POLITE_CHALLENGE_BENCH``,
``POLITE_BAN_DURATION``); tiers move the host up a tier once its tier is all
benched. When even the top tier (or the whole pool) is benched, the host's
requests could only wait, silently, for half an hour: the host is *blocked*.
That is said once per block (a WARNING naming when the first identity comes
back), counted (``polite/host_blocked``), and ``POLITE_HOST_BLOCKED`` decides:
``"give_up"`` (the default) gives its waiting and new requests up with that
reason, so a crawl whose other work is done finishes; ``"wait"`` keeps them.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from scrapy_polite.errors import HostBlocked

if TYPE_CHECKING:
    from twisted.internet.defer import Deferred

    from scrapy_polite.runtime import Runtime

logger = logging.getLogger(__name__)

GIVE_UP = "give_up"
WAIT = "wait"


class BlockedHosts:
    """Tracks each host's benched endpoints; tells when a host is blocked, and acts on it."""

    def __init__(self, runtime: Runtime, stats: Any, clock: Callable[[], float] = time.monotonic) -> None:
        self.runtime = runtime
        self.policy = runtime.config.host_blocked
        self.stats = stats
        self._clock = clock
        self.max_hosts = max(1, runtime.config.host_memory)
        #: Host -> endpoint key -> when its bench for the host ends (monotonic).
        self._benched: OrderedDict[str, dict[str, float]] = OrderedDict()
        #: Blocked hosts -> when their first identity comes back.
        self._blocked: dict[str, float] = {}
        #: Requests of each host waiting at the gate: cancelled when the host is blocked and given up.
        self._waiting: dict[str, set[Deferred]] = {}

    def benched(self, host: str, endpoint_key: str, seconds: float) -> None:
        """*endpoint_key* is benched for *host* for *seconds*: the host may now be blocked."""
        now = self._clock()
        table = self._benched.get(host)
        if table is None:
            table = self._benched[host] = {}
            while len(self._benched) > self.max_hosts:
                self._benched.popitem(last=False)
        self._benched.move_to_end(host)
        table[endpoint_key] = max(table.get(endpoint_key, 0.0), now + seconds)
        if self._still_blocked(host, now) is not None:
            return  # said already
        until = self._first_back(host, now)
        if until is None:
            return
        self._blocked[host] = until
        self.stats.inc_value("polite/host_blocked")
        wall = time.strftime("%H:%M:%S", time.localtime(time.time() + until - now))
        logger.warning(
            "%s is blocked: every endpoint it may use is benched for it (challenges or bans); "
            "the first comes back in %.0f s (at %s). Its requests %s (POLITE_HOST_BLOCKED = %r)",
            host, until - now, wall,
            "are given up meanwhile" if self.policy == GIVE_UP else "wait until then", self.policy,
        )
        if self.policy == GIVE_UP:
            for d in list(self._waiting.pop(host, ())):
                d.cancel()

    def refusal(self, host: str) -> HostBlocked | None:
        """The error to give a request for *host* up with, while it is blocked and the policy says so."""
        if host not in self._blocked:  # the common case: no clock read
            return None
        now = self._clock()
        until = self._still_blocked(host, now)
        if until is None or self.policy != GIVE_UP:
            return None
        return HostBlocked(f"{host}: every endpoint it may use is benched for it, the first for {until - now:.0f} s more")

    def _still_blocked(self, host: str, now: float) -> float | None:
        """When blocked *host*'s first identity comes back; None (and the block forgotten) once one is back."""
        if host not in self._blocked:
            return None
        until = self._first_back(host, now)  # read again: a bench ended, or the pool or the host's tier changed
        if until is None:
            del self._blocked[host]  # an identity is back: the next block is said again
        else:
            self._blocked[host] = until
        return until

    def waiting(self, host: str, acquiring: Deferred) -> None:
        """*acquiring* (the gate's Deferred for a request of *host*) waits: it is cancelled if the host is blocked."""
        if self.policy != GIVE_UP or acquiring.called:  # granted at once: nothing left to cancel
            return
        held = self._waiting.setdefault(host, set())
        held.add(acquiring)

        def done(result: Any) -> Any:
            held.discard(acquiring)
            if not held and self._waiting.get(host) is held:
                del self._waiting[host]
            return result

        acquiring.addBoth(done)

    def _first_back(self, host: str, now: float) -> float | None:
        """When the first identity *host* may use comes back, if all are benched now; None if one is free."""
        table = self._benched.get(host, {})
        tiers, ends = self.runtime.tiers, []
        for key, st in self.runtime.gate.endpoints.items():
            if st.removed or (tiers is not None and not tiers.eligible(host, key)):
                continue
            end = table.get(key, 0.0)
            if end <= now:
                return None
            ends.append(end)
        if not ends:
            return None
        for key in [k for k, end in table.items() if end <= now]:
            del table[key]
        return min(ends)
