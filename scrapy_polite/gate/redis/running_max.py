"""The largest of many per-key values, kept up to date as they change."""

from __future__ import annotations

import heapq


class RunningMax:
    """The largest of many per-key values, kept up to date as they change.

    A change costs O(log n) and a read O(1) amortised, instead of a scan of every
    key; a key's value leaves with the key, so the maximum falls when it goes.
    """

    def __init__(self, floor: float = 0.0) -> None:
        self.floor = floor
        self._values: dict[str, float] = {}
        self._counts: dict[float, int] = {}
        self._heap: list[float] = []  # negated values; ones no key holds any more are dropped lazily

    def __len__(self) -> int:
        return len(self._values)

    def set(self, key: str, value: float) -> None:
        old = self._values.get(key)
        if old == value:
            return
        if old is not None:
            self._forget(old)
        self._values[key] = value
        count = self._counts.get(value, 0)
        self._counts[value] = count + 1
        if count == 0:
            heapq.heappush(self._heap, -value)
            if len(self._heap) > 2 * len(self._counts) + 16:
                self._heap = [-v for v in self._counts]
                heapq.heapify(self._heap)

    def discard(self, key: str) -> None:
        old = self._values.pop(key, None)
        if old is not None:
            self._forget(old)

    def _forget(self, value: float) -> None:
        count = self._counts[value] - 1
        if count:
            self._counts[value] = count
        else:
            del self._counts[value]

    def value(self) -> float:
        heap = self._heap
        while heap and -heap[0] not in self._counts:
            heapq.heappop(heap)
        return max(self.floor, -heap[0]) if heap else self.floor
