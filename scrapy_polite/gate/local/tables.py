"""The state of the in-memory gate: (endpoint, host) pairs, idle endpoints, waiting hosts, eviction order."""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from scrapy_polite import timers
from scrapy_polite.gate.core import CallLater, GateCore
from scrapy_polite.gate.state import SessionLoad
from scrapy_polite.pool.endpoints import Endpoint
from scrapy_polite.pool.host_memory import HOST_MEMORY, HostMemory

#: A host's learned limits, kept after eviction: (concurrency, spacing band,
#: minimum spacing, host interval).
Learned = tuple[int, tuple[float, float], float, float]


@dataclass(slots=True)
class PairState:
    """The timers of one endpoint towards one host: its spacing, a cool-down, a ban."""

    last_granted: float = -math.inf
    next_allowed: float = 0.0
    cooldown_until: float = 0.0
    banned_until: float = 0.0

    def quiet_at(self) -> float:
        """When its last timer runs out."""
        return max(self.next_allowed, self.cooldown_until, self.banned_until)


class LocalTables(GateCore):
    """What :class:`~scrapy_polite.gate.local.LocalGate` keeps in this process, besides the common tables."""

    def __init__(
        self,
        endpoints: Iterable[Endpoint],
        *,
        call_later: CallLater | None = None,
        host_memory: int = HOST_MEMORY,
        memory_ttl: float = 3600.0,
        **common: Any,
    ) -> None:
        super().__init__(**common)
        self._reactor_call_later = call_later or timers.call_later
        # Endpoints with a free request slot, least recently granted first.
        self._idle: OrderedDict[str, None] = OrderedDict()
        self.session_load = SessionLoad()
        self._pairs: dict[tuple[str, str], PairState] = {}
        self._waiting_hosts: dict[str, None] = {}
        self._timer: object | None = None
        self._timer_at: float = float("inf")
        #: What idle hosts taught, after their live state is gone (POLITE_HOST_MEMORY).
        self.memory: HostMemory[Learned] = HostMemory(host_memory, memory_ttl)
        #: A session idle this long (nothing queued, nothing in flight) is forgotten.
        self.session_ttl = memory_ttl
        self._host_pairs: dict[str, set[str]] = {}
        # Each live host's earliest eviction check, in a heap (one entry per host).
        self._evict_due: dict[str, float] = {}
        self._evict_heap: list[tuple[float, str]] = []
        self._dropped = 0  # hosts and sessions dropped since the tables were last compacted
        self.set_endpoints(endpoints)

    def _call_later(self, delay: float, func: Callable[[], object]) -> object:
        return self._reactor_call_later(delay, func)

    def _pair(self, endpoint_key: str, host: str) -> PairState:
        pair = self._pairs.get((endpoint_key, host))
        if pair is None:
            pair = self._pairs[(endpoint_key, host)] = PairState()
            self._host_pairs.setdefault(host, set()).add(endpoint_key)
        return pair

