"""What the throttle did to each host, folded from its ``"event": "throttle"`` lines."""

from __future__ import annotations

import math
from array import array
from collections import Counter
from typing import Any

from scrapy_polite.report.records import MAX_SECONDS, in_range

#: Points kept per throttle series before halving.
_SERIES_POINTS = 120
#: Pauses and parks kept one by one per host (the rest are only counted).
_MAX_PAUSES = 100
#: Throttle values plotted per host, in lane order: (event change, lane title).
THROTTLE_SERIES = (("concurrency", "concurrency"), ("spacing", "spacing (s)"), ("host_rate", "host rate (req/s)"),
                   ("host_limit", "limit met (req/s)"))


class StepSeries:
    """A step series ``(time, value)`` in two float arrays, halved past ``_SERIES_POINTS`` (NaN: no value)."""

    __slots__ = ("times", "values")

    def __init__(self) -> None:
        self.times = array("d")
        self.values = array("d")

    def add(self, t: float, value: float | None) -> None:
        self.times.append(t)
        self.values.append(math.nan if value is None else float(value))
        if len(self.times) > _SERIES_POINTS:
            # Every other point goes, the last one stays: the shape and the final value survive.
            keep = list(range(0, len(self.times) - 1, 2)) + [len(self.times) - 1]
            self.times = array("d", (self.times[i] for i in keep))
            self.values = array("d", (self.values[i] for i in keep))

    def points(self) -> list[tuple[float, float | None]]:
        return [(t, None if math.isnan(v) else v) for t, v in zip(self.times, self.values)]


class ThrottleTrack:
    """What the throttle did to one host, from its ``"event": "throttle"`` lines."""

    __slots__ = ("changes", "blame", "series", "start", "pauses", "pause_count", "last_decision", "limit")

    def __init__(self) -> None:
        self.changes: Counter[str] = Counter()
        #: Signals behind the changes, by kind (rate, overload).
        self.blame: Counter[str] = Counter()
        self.series = {name: StepSeries() for name, _ in THROTTLE_SERIES}
        #: Each series' value before its first change.
        self.start: dict[str, float | None] = {}
        #: (time, "pause" or "park", seconds held).
        self.pauses: list[tuple[float, str, float]] = []
        self.pause_count = 0
        self.last_decision: tuple[float, str] | None = None
        #: The host-wide limit the host-rate search last met (req/s), and where it stood before it
        #: fell (``None``: it did not), from the events' ``host_limit`` evidence.
        self.limit: tuple[float, float | None] | None = None

    def add(self, rec: dict[str, Any]) -> None:
        change = str(rec.get("change"))
        t = float(rec["time"])
        self.changes[change] += 1
        if change in self.series:
            before, after = _series_value(rec.get("from")), _series_value(rec.get("to"))
            self.start.setdefault(change, before)
            self.series[change].add(t, after)
        elif change in ("pause", "park"):
            self.pause_count += 1
            held = rec.get("to")
            if len(self.pauses) < _MAX_PAUSES and held is not None and in_range(held, 0.0, MAX_SECONDS):
                self.pauses.append((t, change, float(held)))
        evidence = rec.get("evidence")
        limit = evidence.get("host_limit") if isinstance(evidence, dict) else None
        if isinstance(limit, dict) and in_range(limit.get("ceiling"), 0.0, MAX_SECONDS):
            fell, met = limit.get("fell_from"), float(limit["ceiling"])
            if self.limit is None or self.limit[0] != met:
                self.series["host_limit"].add(t, met)  # each level the limit was met at, once
            self.limit = (met, float(fell) if fell is not None and in_range(fell, 0.0, MAX_SECONDS) else None)

    def final(self, name: str) -> float | None:
        s = self.series[name]
        if not len(s.times):
            return self.start.get(name)
        v = s.values[-1]
        return None if math.isnan(v) else v

    def lowest(self, name: str) -> float | None:
        values = [v for v in (*self.series[name].values, self.start.get(name)) if v is not None and not math.isnan(v)]
        return min(values, default=None)


def _series_value(value: Any) -> float | None:
    """A plotted value: a number, or a spacing band's lower end; ``None`` for "unlimited" or garbage."""
    if isinstance(value, list) and value:
        value = value[0]
    return float(value) if in_range(value, 0.0, MAX_SECONDS) else None
