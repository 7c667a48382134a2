"""The in-memory gate of one crawler process, :class:`~scrapy_polite.gate.local.backend.LocalGate`.

Built in layers, each in the module that holds one concern: ``tables`` (its
state in this process), ``eviction`` (idle hosts, sessions and pairs),
``dispatch`` (the endpoint choice and the timer) and ``backend`` (the gate,
with the hooks :class:`~scrapy_polite.gate.core.GateCore` calls).
"""

from __future__ import annotations

from scrapy_polite.gate.backoff import PAIR_MEMORY
from scrapy_polite.gate.local.backend import LocalGate
from scrapy_polite.gate.state import Lease

__all__ = ["PAIR_MEMORY", "Lease", "LocalGate"]
