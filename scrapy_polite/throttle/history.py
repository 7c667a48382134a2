"""What a host's controller remembers of its recent past: the rates in force over time (which
one a request went at), the answers since the last cut, recent answers as counts, and the
Retry-After deadlines that reveal a window."""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import deque
from dataclasses import dataclass


class RateHistory:
    """(since, rate) of the recent rates in force, oldest first (``None``: no host rate)."""

    __slots__ = ("_steps",)

    def __init__(self, size: int = 256) -> None:
        self._steps: deque[tuple[float, float | None]] = deque(maxlen=size)

    def record(self, now: float, rate: float | None) -> None:
        """*rate* is in force from *now* on: steps recorded after it, learnt late, are dropped."""
        while self._steps and self._steps[-1][0] > now:
            self._steps.pop()
        if not self._steps or self._steps[-1][1] != rate:
            self._steps.append((now, rate))

    def at(self, when: float, default: float | None) -> float | None:
        """The rate in force at *when* (a request's grant)."""
        rate = self._steps[0][1] if self._steps else default
        for t, r in self._steps:
            if t > when:
                break
            rate = r
        return rate


@dataclass
class Level:
    """Answers since the last cut, and what the cut was made from."""

    answers: int = 0
    refused: int = 0
    #: Refusals since the cut to requests sent before it (what the failed probe cost beyond its own).
    late: int = 0
    #: The share of refusals before a cut made from the rate the site answered cleanly (``None``:
    #: the cut was not), and that rate: under it a rate limit refuses nothing, and above it a rate
    #: limit still answers about that rate cleanly.
    share_before: float | None = None
    #: The rate the site answered cleanly before the cut, and the rate in force then.
    before: tuple[float, float] = (0.0, 0.0)

    def flat(self, ratio: float, least: int, clean: float | None, rate: float) -> bool:
        """This level's refusals held their share through the cut made from the clean rate, and the
        *clean* rate fell with the *rate* in force, as refusals that do not depend on the rate make
        it: a rate limit answers about its limit cleanly at any rate above it (even when each
        refusal's pause keeps the share of refusals the same), so the clean rate holds. Nearer a
        fall in proportion than no fall at all, in ratio."""
        share, before = self.share(least), self.share_before
        if before is None or before <= 0 or share is None or share < ratio * before or clean is None:
            return False
        clean_before, rate_before = self.before
        return rate_before > 0 and clean <= clean_before * math.sqrt(rate / rate_before)

    def share(self, least: int) -> float | None:
        """The share of its answers refused, once it holds *least* answers."""
        return self.refused / self.answers if self.answers >= least else None

    def exceeds(self, share: float, least: int) -> bool:
        """More refusals than *share* of the answers explains, by three standard deviations of
        their count (a binomial's), not by chance."""
        expected = share * self.answers
        return self.answers >= least and self.refused > expected + 3 * math.sqrt(expected * (1 - share))



#: A Retry-After is a whole number of seconds (RFC 9110), or a date to the second.
RESOLUTION = 1.0


class Windows:
    """Retry-After deadlines of different IPs: two IPs told to come back at the same moment,
    though asked at different moments, name the reset of a window (within *tolerance*, the
    resolution of a Retry-After)."""

    __slots__ = ("_deadlines", "reset_at", "tolerance")

    def __init__(self, tolerance: float = RESOLUTION) -> None:
        self.tolerance = tolerance
        self._deadlines: deque[tuple[float, float, str]] = deque(maxlen=64)
        #: The last reset found.
        self.reset_at: float | None = None

    def stated(self, endpoint: str, now: float, deadline: float) -> tuple[float, float | None] | None:
        """A Retry-After to *endpoint*: ``(reset, previous reset)`` when it reveals a window's reset
        not known yet, else ``None``."""
        tol = self.tolerance
        met = next((d for t, d, ep in self._deadlines
                    if ep != endpoint and abs(d - deadline) < tol and now - t >= tol), None)
        self._deadlines.append((now, deadline, endpoint))
        if met is None:
            return None
        reset, previous = max(met, deadline), self.reset_at
        if previous is not None and reset - previous < tol:
            return None  # this window's reset is known already
        self.reset_at = reset
        return reset, previous


class Answers:
    """When the host's recent answers came and whether each was clean. Counted when they come: a
    site that queues instead of refusing accepts what it answers, not what it was sent. Kept as
    running totals, so a count over any recent span is two binary searches, not a scan."""

    __slots__ = ("_at", "_clean", "_start", "born", "least", "lookback")

    def __init__(self, born: float, lookback: float, least: int) -> None:
        #: Answer times, oldest first, and the clean answers up to and including each.
        self._at: list[float] = []
        self._clean: list[int] = []
        self._start = 0  # answers before it are forgotten
        self.born, self.lookback, self.least = born, lookback, least

    def add(self, now: float, clean: bool) -> None:
        self._at.append(now)
        self._clean.append((self._clean[-1] if self._clean else 0) + clean)
        if self._start > 4096:  # forget the old ones, now and then
            del self._at[: self._start], self._clean[: self._start]
            self._start = 0
        elif len(self._at) - self._start > 4096:
            self._start += 1

    def counts(self, now: float) -> tuple[int, int, float] | None:
        """Answers and clean answers over the last lookback, or over the last *least* answers when
        it holds fewer, and its seconds; ``None`` when too few to say, or in the host's first
        seconds (a start-up burst says nothing of a rate)."""
        end = len(self._at)
        if end - self._start < self.least:
            return None
        since = min(now - self.lookback, self._at[end - self.least])
        if since < self.born:
            return None
        first = bisect_left(self._at, since, self._start, end)
        before = self._clean[first - 1] if first > 0 else 0
        return end - first, self._clean[-1] - before, max(now - since, 1e-3)

    def rate(self, now: float) -> float | None:
        """Answers per second over what :meth:`counts` covers."""
        counted = self.counts(now)
        return None if counted is None else counted[0] / counted[2]


class Granted:
    """The gate's count of requests granted to a host, as read over time. A shared gate counts
    every process's grants in one place (the host's record): one process's answers are only its
    part of the traffic, this count is the whole fleet's."""

    __slots__ = ("_reads", "least", "lookback")

    def __init__(self, lookback: float, least: int, size: int = 512) -> None:
        #: (when first read, count), oldest first; a read is kept only when the count moved.
        self._reads: deque[tuple[float, int]] = deque(maxlen=size)
        self.lookback, self.least = lookback, least

    def read(self, now: float, count: int) -> None:
        reads = self._reads
        if reads and count < reads[-1][1]:
            reads.clear()  # the shared record was lost and counts again from nothing
        if not reads or count != reads[-1][1]:
            reads.append((now, count))

    def rate(self, now: float) -> float | None:
        """Requests granted per second over the last lookback, or over the last *least* grants
        when it holds fewer (as :class:`Answers` counts), from the last read before them;
        ``None`` while the reads do not reach back that far."""
        if not self._reads:
            return None
        last = self._reads[-1][1]
        since = now - self.lookback
        start = next(((t, c) for t, c in reversed(self._reads) if t <= since and c <= last - self.least), None)
        return None if start is None else (last - start[1]) / max(now - start[0], 1e-3)
