"""A scheduler queue that hands out requests of the least loaded host first.

Requests held at the gate are not in a download slot yet, so Scrapy's
DownloaderAwarePriorityQueue would let a saturated host fill
``CONCURRENT_REQUESTS``; this queue counts what the gate holds per host, kept
up to date in buckets by load, so a pop costs O(log n) in the number of slots.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right, insort
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.pqueues import DownloaderAwarePriorityQueue, DownloaderInterface

from scrapy_polite import compat
from scrapy_polite.runtime import get_runtime

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Request

    from scrapy_polite.gate.base import Gate

#: Scrapy >= 2.14 breaks ties between equally loaded slots round-robin, by name
#: after the last slot served; older releases take the smallest name.
ROUND_ROBIN = hasattr(DownloaderAwarePriorityQueue, "_next_slot")


class _GateInterface(DownloaderInterface):
    def __init__(self, crawler: Crawler) -> None:
        super().__init__(crawler)
        self._crawler = crawler
        #: The slot the load index chose: the only one Scrapy's pop then looks at.
        self.only: str | None = None

    def stats(self, possible_slots: Iterable[str]) -> list[tuple[int, str]]:
        if self.only is not None:
            return [(0, self.only)]
        gate = get_runtime(self._crawler).gate
        return [(self.load(gate, slot), slot) for slot in possible_slots]

    def load(self, gate: Gate, slot: str) -> int:
        return gate.host_load(slot) + compat.active_downloads(self.downloader, slot)


class SortedNames:
    """A sorted set of strings in blocks of at most ``BLOCK``: add, remove and
    successor in O(log n) plus a block's length, with no dependency."""

    BLOCK = 256

    def __init__(self) -> None:
        self._blocks: list[list[str]] = []
        self._maxes: list[str] = []
        self._len = 0

    def __len__(self) -> int:
        return self._len

    def add(self, name: str) -> None:
        if not self._blocks:
            self._blocks.append([name])
            self._maxes.append(name)
            self._len = 1
            return
        i = min(bisect_left(self._maxes, name), len(self._blocks) - 1)
        block = self._blocks[i]
        insort(block, name)
        self._maxes[i] = block[-1]
        self._len += 1
        if len(block) > 2 * self.BLOCK:
            self._blocks[i:i + 1] = [block[:self.BLOCK], block[self.BLOCK:]]
            self._maxes[i:i + 1] = [block[self.BLOCK - 1], block[-1]]

    def remove(self, name: str) -> None:
        i = bisect_left(self._maxes, name)
        block = self._blocks[i]
        del block[bisect_left(block, name)]
        self._len -= 1
        if block:
            self._maxes[i] = block[-1]
        else:
            del self._blocks[i]
            del self._maxes[i]

    def first(self) -> str:
        return self._blocks[0][0]

    def after(self, name: str) -> str | None:
        """The smallest name greater than *name*, or None."""
        i = bisect_right(self._maxes, name)
        if i == len(self._blocks):
            return None
        block = self._blocks[i]
        return block[bisect_right(block, name)]


class LoadIndex:
    """Slots by load: the slot Scrapy's ``DownloaderAwarePriorityQueue`` would pick, in O(log n).

    The least loaded slot; among equals the smallest name after the last one
    picked (round-robin), else the smallest (``round_robin=False``: always the smallest).
    """

    def __init__(self, round_robin: bool = ROUND_ROBIN) -> None:
        self.round_robin = round_robin
        self.last: str | None = None
        self._load: dict[str, int] = {}
        self._buckets: dict[int, SortedNames] = {}
        self._loads: list[int] = []  # heap of the loads with a bucket (lazy: an emptied one stays)
        self._heaped: set[int] = set()  # the loads in the heap, each once: it holds distinct loads only

    def __len__(self) -> int:
        return len(self._load)

    def __contains__(self, slot: object) -> bool:
        return slot in self._load

    def load(self, slot: str) -> int | None:
        return self._load.get(slot)

    def set(self, slot: str, load: int) -> None:
        old = self._load.get(slot)
        if old == load:
            return
        self._load[slot] = load
        if old is not None and len(self._buckets[old]) == 1 and load not in self._buckets:
            # The slot alone at its load (a crawl of one host): its bucket moves whole.
            self._file(load, self._buckets.pop(old))
            return
        if old is not None:
            self._take(slot, old)
        bucket = self._buckets.get(load)
        if bucket is None:
            bucket = SortedNames()
            self._file(load, bucket)
        bucket.add(slot)

    def _file(self, load: int, bucket: SortedNames) -> None:
        self._buckets[load] = bucket
        if load not in self._heaped:
            self._heaped.add(load)
            heapq.heappush(self._loads, load)

    def discard(self, slot: str) -> None:
        old = self._load.pop(slot, None)
        if old is not None:
            self._take(slot, old)

    def _take(self, slot: str, load: int) -> None:
        bucket = self._buckets[load]
        bucket.remove(slot)
        if not bucket:
            del self._buckets[load]

    def best(self, update_state: bool = True) -> str | None:
        loads = self._loads
        while loads and loads[0] not in self._buckets:
            self._heaped.discard(heapq.heappop(loads))
        if not loads:
            return None
        bucket = self._buckets[loads[0]]
        slot = None
        if self.round_robin and self.last is not None:
            slot = bucket.after(self.last)
        if slot is None:
            slot = bucket.first()
        if update_state:
            self.last = slot
        return slot


class PolitePriorityQueue(DownloaderAwarePriorityQueue):
    """DownloaderAwarePriorityQueue that also counts requests waiting at the gates.

    The gate reports its load changes (``add_load_listener``), so the loads are kept
    in a :class:`LoadIndex`; without one (None) every pop asks the gate for each slot.
    """

    def __init__(self, crawler: Crawler, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(crawler, *args, **kwargs)
        iface = _GateInterface(crawler)
        compat.set_downloader_interface(self, iface)
        self._iface = iface  # the same object, typed as the gate's (Scrapy's attribute is typed as its own)
        gate = get_runtime(crawler).gate
        self._gate = gate
        self._index: LoadIndex | None = LoadIndex()
        for slot in self.pqueues:
            self._index.set(slot, iface.load(gate, slot))
        gate.add_load_listener(self._gate_load)
        crawler.signals.connect(self._reached, signal=signals.request_reached_downloader)
        crawler.signals.connect(self._left, signal=signals.request_left_downloader)

    def _refresh(self, slot: str, adjust: int = 0) -> None:
        if self._index is not None and slot in self.pqueues:
            self._index.set(slot, self._iface.load(self._gate, slot) + adjust)

    def _gate_load(self, host: str, load: int) -> None:
        # *load* is the gate's host_load, told with the change: only the downloader's part is read.
        if self._index is not None and host in self.pqueues:
            self._index.set(host, load + compat.active_downloads(self._iface.downloader, host))

    # Per-request receivers take the signal's other arguments as ``**_`` (pydispatch passes them on as
    # they are, where for a fixed signature it sorts them out on every call).
    def _reached(self, request: Request, **_: Any) -> None:
        self._refresh(self._downloader_interface.get_slot_key(request))

    def _left(self, request: Request, **_: Any) -> None:
        # Sent before the downloader takes the request out of its slot.
        self._refresh(self._downloader_interface.get_slot_key(request), -1)

    def _pick(self, update_state: bool) -> str | None:
        """The slot to serve; the chosen one's load is checked, in case an update was missed."""
        index = self._index
        assert index is not None
        while True:
            saved = index.last
            slot = index.best(update_state=True)
            if slot is None:
                return None
            actual = self._iface.load(self._gate, slot)
            if actual == index.load(slot):
                if not update_state:
                    index.last = saved
                return slot
            index.last = saved
            index.set(slot, actual)

    def pop(self) -> Request | None:
        if self._index is None:
            return super().pop()
        slot = self._pick(update_state=True)
        if slot is None:
            return None
        request = self._only(slot, super().pop)
        if slot not in self.pqueues:
            self._index.discard(slot)
        return request

    def _only(self, slot: str, call: Any) -> Any:
        """Scrapy's own pop or peek (its bookkeeping, its JOBDIR clean-up) on *slot* alone."""
        iface = self._iface
        iface.only = slot
        try:
            return call()
        finally:
            iface.only = None

    def push(self, request: Request) -> None:
        super().push(request)
        if self._index is not None:
            slot = self._downloader_interface.get_slot_key(request)
            if slot not in self._index:
                self._index.set(slot, self._iface.load(self._gate, slot))

    def peek(self) -> Request | None:
        if self._index is None:
            return super().peek()
        slot = self._pick(update_state=False)
        return None if slot is None else self._only(slot, super().peek)

    def close(self) -> dict[str, list[int]]:
        if self._index is not None:
            self._index = LoadIndex()
        return super().close()
