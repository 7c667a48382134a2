"""What both gates share: every decision written once, whatever holds the state.

:class:`GateCore` is built in layers, each in the module that holds one concern:
``tables`` (the state, the hooks a backend fills in, listeners, inspection),
``hosts`` (a host's limits and the throttle's setters), ``waiters`` (the queues),
``sessions`` (pins and what becomes of them), ``pool`` (endpoints and their
health) and ``leases`` (grant, release, stall, expiry).
"""

from __future__ import annotations

from scrapy_polite.gate.core.leases import Leases
from scrapy_polite.gate.core.tables import GateOptions, HostOverrides
from scrapy_polite.timers import CallLater, cancel_timer

__all__ = ["CallLater", "GateCore", "GateOptions", "HostOverrides", "cancel_timer"]


class GateCore(Leases):
    """The bookkeeping of a :class:`~scrapy_polite.gate.base.Gate`, whatever holds its state."""
