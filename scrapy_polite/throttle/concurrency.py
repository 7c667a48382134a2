"""Host concurrency: what the host's rate and latency need, cut only by signals that point at concurrency.

Requests in flight to a host are its rate times its latency (Little's law), so
the concurrency that lets the host run at its rate is that product with
headroom for jitter. A per-IP or host-rate signal says nothing about how many
requests may be in flight at once; timeouts on several endpoints do.
"""

from __future__ import annotations

import math

#: In-flight requests allowed over rate x latency.
HEADROOM = 2.0
#: Weight of a new latency sample in the running mean.
LATENCY_WEIGHT = 0.2
#: The need must fall below the current limit by this factor before it comes down.
HYSTERESIS = 1.5


class ConcurrencyModel:
    """One host's latency and the concurrency derived from it."""

    __slots__ = ("latency", "cap", "last_decrease", "floor_hits")

    def __init__(self) -> None:
        self.latency: float | None = None
        #: An upper bound set by concurrency signals (halved each), lifted by clean windows.
        self.cap: int | None = None
        self.last_decrease = -math.inf
        self.floor_hits = 0

    def observe(self, seconds: float) -> None:
        """The time from a grant to its answer."""
        if not math.isfinite(seconds) or seconds < 0:
            return
        self.latency = seconds if self.latency is None else (
            self.latency + LATENCY_WEIGHT * (seconds - self.latency))

    def needed(self, rate: float, low: int, high: int, current: int | None = None) -> int:
        """The concurrency for *rate* req/s at the measured latency, within [*low*, *high*] and the cap.

        From *current*, it only comes down once the need is well below it
        (``HYSTERESIS``): latency is noisy, and a limit that flaps says nothing.
        """
        want = low
        if self.latency is not None and math.isfinite(rate) and rate > 0:
            want = max(low, math.ceil(rate * self.latency * HEADROOM))
        if current is not None and want < current and want * HYSTERESIS >= current:
            want = current
        want = min(want, high)
        return max(1, min(want, self.cap)) if self.cap is not None else max(1, want)

    def cut(self, current: int, factor: float, now: float, window: float) -> int | None:
        """A signal that points at concurrency: the halved limit, once per *window* (``None``: not now)."""
        if now - self.last_decrease < max(1.0, window):
            return None
        self.last_decrease = now
        if current <= 1:
            self.floor_hits += 1
            return None
        new = max(1, int(current * factor))
        self.cap = new
        return new

    def clean_window(self, current: int, high: int) -> int | None:
        """A recovery window without a signal: one more in flight, up to *high* (``None``: already there)."""
        self.floor_hits = 0
        if self.cap is not None:
            self.cap = self.cap * 2 if self.cap * 2 < high else None
        return current + 1 if current < high else None
