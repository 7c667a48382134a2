"""The bounded tables behind :class:`~scrapy_polite.metrics.stats.PoliteStats`.

Counters, fixed-size HDR histograms and a ring of per-second buckets: their
memory stays bounded however long the crawl, and names past the caps are pooled
under ``"(other)"``, however broad the crawl or however many exits a gateway rotates.
"""

from __future__ import annotations

from collections import Counter, deque
from typing import Any

from hdrh.histogram import HdrHistogram

from scrapy_polite.metrics.top import OTHER

#: Latencies are recorded in milliseconds, 1 ms to 1 h, 3 significant digits
#: (0.1 %) overall. Per host 2 digits (1 %) keep a histogram near 18 KB.
HIST_RANGE = (1, 3_600_000)
DIGITS_OVERALL = 3
DIGITS_HOST = 2
#: Beyond these, names are pooled under OTHER so a broad crawl or a rotating
#: gateway with millions of exits cannot grow memory without bound (hosts: the
#: busiest MAX_HOSTS keep their rows, see :func:`~scrapy_polite.metrics.top.admit`).
MAX_HOSTS = 500
MAX_ENDPOINTS = 5000
MAX_EXIT_IPS = 1024
MAX_EXIT_IPS_PER_HOST = 256


def histogram(digits: int = DIGITS_OVERALL) -> HdrHistogram:
    """A latency histogram in milliseconds: its size is fixed by its range and *digits*, not by the samples."""
    return HdrHistogram(*HIST_RANGE, digits)


def to_ms(seconds: float) -> int:
    """*seconds* as a histogram value, clamped to the range it can record."""
    return min(HIST_RANGE[1], max(0, int(seconds * 1000)))


def capped(table: dict[str, Any] | set[str], key: str, limit: int) -> str:
    """*key*, or OTHER once *table* holds *limit* names without it."""
    return key if key in table or len(table) < limit else OTHER


def fold_top(table: dict[str, dict[str, Any]], n: int) -> tuple[dict[str, dict[str, Any]], int]:
    """The *n* rows of *table* with the most attempts, plus one OTHER row summing the rest.

    Returns (rows, how many names were folded into OTHER), so per-host and
    per-endpoint stats stay at most *n* + 1 keys a kind however broad the crawl.
    """
    ranked = sorted(table, key=lambda k: (k == OTHER, -table[k]["attempts"], k))
    top = {k: table[k] for k in ranked[:n] if k != OTHER}
    rest = [table[k] for k in table if k not in top]
    if not rest:
        return top, 0
    statuses: Counter[str] = Counter()
    other: dict[str, Any] = {"attempts": 0, "success": 0, "statuses": statuses}
    for row in rest:
        other["attempts"] += row["attempts"]
        other["success"] += row["success"]
        statuses.update(row["statuses"])
    top[OTHER] = other
    return top, sum(k != OTHER for k in table) - (len(top) - 1)


def distinct(counter: Counter[str]) -> int:
    """Distinct names tracked; the pooled OTHER bucket is not one of them."""
    return len(counter) - (OTHER in counter)


#: Distinct values a :class:`Tallied` holds before they go into its histogram (its memory stays bounded).
TALLY_MAX = 256


class Tallied:
    """An HDR histogram whose values are counted first, then recorded a distinct value at a time.

    ``HdrHistogram.record_value`` takes five Python calls per value, and every answer records its
    latency and its wait. Counted in a dict, a value costs one update; the histogram gets each
    distinct value once, with its count, when it is read (:attr:`hist`) or the tally holds
    ``TALLY_MAX`` values: the same histogram recording each value would have made.
    """

    __slots__ = ("_hist", "_tally")

    def __init__(self, hist: HdrHistogram) -> None:
        self._hist = hist
        self._tally: dict[int, int] = {}

    def add(self, value: int) -> None:
        tally = self._tally
        tally[value] = tally.get(value, 0) + 1
        if len(tally) >= TALLY_MAX:
            self._flush()

    @property
    def hist(self) -> HdrHistogram:
        """The histogram, every value counted so far in it."""
        if self._tally:
            self._flush()
        return self._hist

    def _flush(self) -> None:
        for value, count in self._tally.items():
            self._hist.record_value(value, count)
        self._tally.clear()


class Window:
    """Successes, 429s and attempts per second over the last *seconds* seconds."""

    def __init__(self, seconds: float) -> None:
        self.seconds = int(max(1, seconds))
        self._buckets: deque[list[int]] = deque()  # [second, ok, rate_limited, total]

    def add(self, now: float, ok: bool, rate_limited: bool = False) -> None:
        sec = int(now)
        if not self._buckets or self._buckets[-1][0] != sec:
            self._buckets.append([sec, 0, 0, 0])
        bucket = self._buckets[-1]
        bucket[1] += ok
        bucket[2] += rate_limited
        bucket[3] += 1
        self._trim(now)

    def _trim(self, now: float) -> None:
        while self._buckets and self._buckets[0][0] + 1 <= now - self.seconds:
            self._buckets.popleft()

    def rate_per_min(self, now: float, started: float) -> float:
        """Successes per minute over ``(now - seconds, now]``; the oldest second counts pro rata."""
        self._trim(now)
        start = now - self.seconds
        ok = sum(b[1] * min(1.0, b[0] + 1 - start) for b in self._buckets)
        span = min(self.seconds, max(1e-9, now - started))
        return ok * 60.0 / span


class Counts:
    """Attempts, successes and answers of one host or endpoint."""

    __slots__ = ("statuses", "ok", "total", "rate_limited", "bans", "challenges")

    def __init__(self) -> None:
        self.statuses: Counter[str] = Counter()
        self.ok = 0
        self.total = 0
        self.rate_limited = 0
        self.bans = 0
        self.challenges = 0

    def add(self, label: str, ok: bool, rate_limited: bool, ban: bool, challenge: bool = False) -> None:
        self.statuses[label] += 1
        self.total += 1
        self.ok += ok
        self.rate_limited += rate_limited
        self.bans += ban
        self.challenges += challenge

    def merge(self, other: Counts) -> None:
        """Add *other*'s counts to these (a name folded into OTHER)."""
        self.statuses.update(other.statuses)
        self.ok += other.ok
        self.total += other.total
        self.rate_limited += other.rate_limited
        self.bans += other.bans
        self.challenges += other.challenges

    def as_dict(self) -> dict[str, Any]:
        return {
            "attempts": self.total,
            "success": self.ok,
            "rate_limited": self.rate_limited,
            "bans": self.bans,
            "challenges": self.challenges,
            "statuses": dict(self.statuses),
        }


class HostStats(Counts):
    """Per-host counts plus a latency histogram and requests per exit IP.

    The histogram (about 18 KB) only for the first ``POLITE_STATS_TOP`` hosts:
    a broad crawl's hosts keep their counts at a few hundred bytes each.
    """

    __slots__ = ("_latency", "exit_ips")

    def __init__(self, latency: bool = True) -> None:
        super().__init__()
        self._latency = Tallied(histogram(DIGITS_HOST)) if latency else None
        self.exit_ips: Counter[str] = Counter()

    @property
    def latency(self) -> HdrHistogram | None:
        """The host's latency histogram (ms), if it has one."""
        return self._latency.hist if self._latency is not None else None

    def add_latency(self, ms: int) -> None:
        """One answer's latency, in the host's histogram if it has one."""
        if self._latency is not None:
            self._latency.add(ms)

    def merge(self, other: Counts) -> None:
        super().merge(other)
        if isinstance(other, HostStats):
            for ip, n in other.exit_ips.items():
                self.exit_ips[capped(self.exit_ips, ip, MAX_EXIT_IPS_PER_HOST)] += n
            if self.latency is not None and other.latency is not None:
                self.latency.add(other.latency)
