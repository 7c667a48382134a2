"""Bounded memory of what was learned about hosts no longer active.

A broad crawl meets far more hosts than it has in flight at once. The gate and
the throttle drop a host's live state once it is idle (see
:meth:`scrapy_polite.gate.local.LocalGate.sweep`); what they learned about it (its
concurrency, spacing and rate) is kept here in a compact record, so a host
seen again resumes from it instead of from the configured defaults.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Generic, TypeVar

T = TypeVar("T")

#: Hosts remembered after eviction unless ``POLITE_HOST_MEMORY`` says otherwise.
HOST_MEMORY = 10_000


class HostMemory(Generic[T]):
    """An LRU of at most *size* records, each dropped once older than *max_age* seconds.

    Old knowledge is dropped whole rather than discounted: a site's limits
    change on its own schedule, and a stale limit is worse than the slow start
    that finds the current one.
    """

    __slots__ = ("size", "max_age", "_records")

    def __init__(self, size: int = HOST_MEMORY, max_age: float = 3600.0) -> None:
        self.size = size
        self.max_age = max_age
        self._records: OrderedDict[str, tuple[float, T]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._records)

    def __contains__(self, key: object) -> bool:
        return key in self._records

    def remember(self, key: str, record: T, now: float) -> None:
        """Keep *record* for *key*, evicting the least recently remembered beyond the bound."""
        if self.size <= 0:
            return
        self._records[key] = (now, record)
        self._records.move_to_end(key)
        while len(self._records) > self.size:
            self._records.popitem(last=False)

    def recall(self, key: str, now: float) -> T | None:
        """The record for *key* (taken out: the live state owns it again), or None if none or too old."""
        entry = self._records.pop(key, None)
        if entry is None or now - entry[0] > self.max_age:
            return None
        return entry[1]

    def compact(self) -> None:
        """Rebuild the table: after many evictions an OrderedDict keeps the room they took."""
        self._records = OrderedDict(self._records)

    def age(self, key: str, now: float) -> float | None:
        entry = self._records.get(key)
        return None if entry is None else now - entry[0]

    def items(self) -> list[tuple[str, Any]]:
        return [(k, v) for k, (_, v) in self._records.items()]
