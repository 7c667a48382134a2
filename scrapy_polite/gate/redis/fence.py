"""Which shared host values this process changed, and whether a read from Redis is newer.

A process changes a host's limit, spacing or rate locally at once and queues the
update to Redis; a grant whose script ran before the update reached Redis reads
the old value. Mirrored blindly, that read would undo the change here, and the
throttle, which takes a value that moved as another process's step (a cut: a
limit met), would learn from its own shadow.
"""

from __future__ import annotations

import math
from collections.abc import Iterable


class WriteFence:
    """Per host and value: updates still queued, when the last one was made, and when sent."""

    __slots__ = ("_changed", "_queued", "_written")

    def __init__(self) -> None:
        self._queued: dict[str, dict[str, int]] = {}
        self._changed: dict[str, dict[str, float]] = {}
        self._written: dict[str, dict[str, float]] = {}

    def queued(self, host: str, names: Iterable[str], now: float) -> None:
        """Updates of *names* for *host*, made at *now*, were queued."""
        counts = self._queued.setdefault(host, {})
        changed = self._changed.setdefault(host, {})
        for name in names:
            counts[name] = counts.get(name, 0) + 1
            changed[name] = now

    def written(self, host: str, names: Iterable[str], now: float) -> None:
        """One queued update of *names* is done (sent, or given up) at *now*."""
        counts = self._queued.get(host, {})
        # A host forgotten meanwhile (and not changed since) keeps no time: nothing of it stays.
        times = self._written.setdefault(host, {}) if host in self._changed else {}
        for name in names:
            times[name] = now
            left = counts.get(name, 0) - 1
            if left > 0:
                counts[name] = left
            else:
                counts.pop(name, None)
        if not counts:
            self._queued.pop(host, None)

    def fresh(self, host: str, name: str, asked: float) -> bool:
        """Whether a read of *host*'s *name* made at *asked* is newer than this process's changes."""
        if name in self._queued.get(host, ()):
            return False
        return asked > self._written.get(host, {}).get(name, -math.inf)

    def missed(self, host: str, name: str, asked: float) -> float | None:
        """When this process last changed *host*'s *name*, if a read made at *asked* may predate
        that change (``None``: it cannot). A grant made on such a read was made under the old value."""
        if self.fresh(host, name, asked):
            return None
        return self._changed.get(host, {}).get(name)

    def forget(self, host: str) -> None:
        """*host* was evicted here: nothing of it is kept (its queued updates still count down,
        and leave nothing once done)."""
        self._written.pop(host, None)
        self._changed.pop(host, None)
