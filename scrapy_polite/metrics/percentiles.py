"""Percentiles of the latency histograms (recorded in ms), in seconds, for every view of the stats."""

from __future__ import annotations

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
