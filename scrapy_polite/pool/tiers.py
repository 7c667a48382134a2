"""Tiered pools (``POLITE_PROXY_TIERS``): which tier of endpoints each host is sent through.

Every host starts on tier 0, the cheapest. It moves up a tier once its
challenges and bans on the current tier reach ``POLITE_TIER_ESCALATE_AFTER``,
or once every endpoint of that tier is benched for it; it steps back down
after ``POLITE_TIER_COOLDOWN`` seconds without a challenge or ban, as soon
as an endpoint of the lower tier is no longer benched for it.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from scrapy_polite.pool.host_memory import HOST_MEMORY

UP = "up"
DOWN = "down"


@dataclass
class _HostTier:
    tier: int = 0
    #: Challenges and bans on the current tier since the host moved to it.
    flags: int = 0
    #: Since when the host has been clean: its last move or its last flag.
    since: float = 0.0
    #: Endpoint key -> when its bench for this host ends.
    benched: dict[str, float] = field(default_factory=dict)


class TierLadder:
    """The tier state machine of every host; the gate asks :meth:`eligible` for each endpoint."""

    def __init__(
        self,
        ranks: dict[str, int],
        *,
        escalate_after: int,
        cooldown: float,
        clock: Callable[[], float] = time.monotonic,
        max_hosts: int = HOST_MEMORY,
        on_move: Callable[[str, int, int, str], None] | None = None,
    ) -> None:
        self.ranks = dict(ranks)
        self.top = max(self.ranks.values(), default=0)
        self.members: list[set[str]] = [set() for _ in range(self.top + 1)]
        for key, rank in self.ranks.items():
            self.members[rank].add(key)
        self.escalate_after = escalate_after
        self.cooldown = cooldown
        self.max_hosts = max(1, max_hosts)
        self._clock = clock
        self.on_move = on_move
        #: Hosts off tier 0 or with flags on it; a host in neither state is not kept.
        self._hosts: OrderedDict[str, _HostTier] = OrderedDict()

    def tier_of(self, key: str) -> int:
        """The tier of endpoint *key* (one outside every tier, added by a file reload, is tier 0)."""
        return self.ranks.get(key, 0)

    def current(self, host: str) -> int:
        """*host*'s tier now, after stepping down if its clean window has passed."""
        h = self._hosts.get(host)
        if h is None:
            return 0
        now = self._clock()
        while h.tier > 0 and now - h.since >= self.cooldown and self._free(h, h.tier - 1, now):
            self._move(host, h, h.tier - 1, now, DOWN)
        if h.tier == 0 and h.flags == 0 and not any(t > now for t in h.benched.values()):
            del self._hosts[host]
        return h.tier

    def eligible(self, host: str, key: str) -> bool:
        """Whether the gate may send *host*'s request through endpoint *key*."""
        return self.tier_of(key) == self.current(host)

    def flagged(self, host: str, key: str, bench: float) -> int:
        """A challenge or ban of *host* via *key*, benched *bench* s: the host's tier afterwards."""
        tier = self.current(host)
        h = self._hosts.get(host)
        if h is None:
            h = self._hosts[host] = _HostTier()
            while len(self._hosts) > self.max_hosts:
                self._hosts.popitem(last=False)
        self._hosts.move_to_end(host)
        now = self._clock()
        h.since = now
        h.benched[key] = max(h.benched.get(key, 0.0), now + bench)
        if self.tier_of(key) != tier:
            return tier  # an answer from before the move: the old tier is already left
        h.flags += 1
        if tier < self.top and (h.flags >= self.escalate_after or not self._free(h, tier, now)):
            self._move(host, h, tier + 1, now, UP)
        return h.tier

    def _free(self, h: _HostTier, tier: int, now: float) -> bool:
        """Whether some endpoint of *tier* is not benched for the host."""
        return any(h.benched.get(key, 0.0) <= now for key in self.members[tier])

    def _move(self, host: str, h: _HostTier, tier: int, now: float, way: str) -> None:
        old, h.tier, h.flags, h.since = h.tier, tier, 0, now
        h.benched = {k: t for k, t in h.benched.items() if t > now}
        if self.on_move is not None:
            self.on_move(host, old, tier, way)
