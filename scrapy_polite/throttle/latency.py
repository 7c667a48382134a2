"""A host's latency as an overload signal: a queue at the site (Envoy's minimum-RTT baseline,
TCP Vegas and Netflix's gradient limit read latency the same way)."""

from __future__ import annotations

import math
from collections import deque
from statistics import median


class LatencyWatch:
    """The last few clean answers' latencies against the host's baseline."""

    __slots__ = ("baseline", "factor", "margin", "queued", "recent", "size")

    def __init__(self, factor: float, margin: float, size: int = 8) -> None:
        self.factor, self.margin = factor, margin
        self.size = size
        self.recent: deque[float] = deque(maxlen=size)
        #: The lowest lower quartile seen, forgotten slowly if the site changed.
        self.baseline = math.inf
        #: The median the last latency cut was made at (0: the last cut was not one).
        self.queued = 0.0

    def median(self) -> float | None:
        return median(self.recent) if self.recent else None

    def add(self, latency: float) -> str | None:
        """Record a clean answer's latency; whether a queue is at the site: ``"grows"`` when the
        recent median is well above the baseline and no lower than at the last latency cut,
        ``"drains"`` when above it but lower (after a cut), else ``None``."""
        self.recent.append(latency)
        if len(self.recent) < 4:
            return None
        # A queue that builds from the first requests on still lets a few through unqueued.
        low = sorted(self.recent)[len(self.recent) // 4]
        self.baseline = min(self.baseline * 1.002, low)
        now = median(self.recent)
        if len(self.recent) < self.size or now <= self.factor * self.baseline + self.margin:
            return None
        return "grows" if now >= self.queued else "drains"

    def cut(self, at: float = 0.0) -> None:
        """A cut (*at*: the median a latency cut was made at): the latencies after it are the new
        rate's."""
        self.queued = at
        self.recent.clear()
