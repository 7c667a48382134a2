"""Counting into Scrapy's stats on every answer, at the cost of a dict update.

``StatsCollector.inc_value`` is a dict update, but each call goes through the collector's
attribute hook and the spider-argument check Scrapy wraps its methods in: a few stats
keys per answer cost microseconds. When the collector's ``inc_value`` and ``get_stats`` are
Scrapy's own, the same update goes straight into the dict ``get_stats`` returns; any
other collector (a subclass that overrides them, the dummy one) is called as usual.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from scrapy.statscollectors import StatsCollector

Inc = Callable[..., None]


def increments(stats: Any) -> Inc:
    """A function with ``inc_value``'s ``(key, count=1, start=0)``, for one run of updates.

    Taken again for each run of updates: ``set_stats`` may replace the collector's dict.
    """
    cls = type(stats)
    if getattr(cls, "inc_value", None) is not StatsCollector.inc_value or \
            getattr(cls, "get_stats", None) is not StatsCollector.get_stats:
        inc: Inc = stats.inc_value
        return inc
    d = stats.get_stats()

    def inc_in_place(key: str, count: int = 1, start: int = 0) -> None:
        d[key] = d.setdefault(key, start) + count  # StatsCollector.inc_value's own update

    return inc_in_place
