"""Percentiles of the latency histograms (recorded in ms), in seconds, for every view of the stats."""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

#: The percentiles every summary reports.
REPORTED = (50, 95, 99)


def seconds_at(hist: Any, p: float) -> float | None:
    """The *p*-th percentile of an HDR histogram of milliseconds, in seconds; ``None`` when it is empty."""
    if hist is None or hist.get_total_count() == 0:
        return None
    return float(hist.get_value_at_percentile(p)) / 1000.0


def summary_fields(hist: Any, prefix: str) -> dict[str, float | None]:
    """``{prefix}_p50``, ``_p95`` and ``_p99`` of *hist*, as the summaries name them."""
    return {f"{prefix}_p{p}": seconds_at(hist, p) for p in REPORTED}


#: Sparse log bins per decade (2.3% wide): a histogram costs what its values spread over,
#: not a fixed HDR histogram (~100 KiB at 3 digits), so the report can keep one per host.
SPARSE_BINS_PER_DECADE = 100


class SparseHistogram:
    """Latencies (ms) in sparse log bins: percentiles to 2.3%, memory by spread."""

    __slots__ = ("bins", "count")

    def __init__(self) -> None:
        self.bins: Counter[int] = Counter()
        self.count = 0

    def record(self, ms: int) -> None:
        self.bins[int(math.floor(SPARSE_BINS_PER_DECADE * math.log10(max(1, ms))))] += 1
        self.count += 1

    def merge(self, other: SparseHistogram) -> None:
        self.bins.update(other.bins)
        self.count += other.count

    def percentile(self, p: float) -> float | None:
        """Seconds; the top of the bin holding the value, as HdrHistogram reports."""
        if not self.count:
            return None
        rank, seen = max(1, math.ceil(p / 100.0 * self.count)), 0
        for b in sorted(self.bins):
            seen += self.bins[b]
            if seen >= rank:
                return round(10 ** ((b + 1) / SPARSE_BINS_PER_DECADE)) / 1000.0
        return None  # pragma: no cover - the bins hold count values
