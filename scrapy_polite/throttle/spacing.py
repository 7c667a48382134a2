"""Per-IP spacing estimator: the shortest gap between two requests of one exit IP a host accepts."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from typing import NamedTuple

from scrapy_polite.gate.backoff import doubling
from scrapy_polite.gate.state import same

#: A per-IP signal puts the spacing band this share above the gap that drew it;
#: a clean gap within ``REACH`` above it is taken instead.
MARGIN = 0.03
REACH = 0.5
#: With no clean gap near, a guess at where the limit lies: ``REACH`` above the gap without
#: adaptive mode (nothing narrows a guess too high back), in adaptive mode ``GUESS_FIRST`` above
#: it, three times, then doubling with each raise in a row (a search that doubles its step, as for
#: a limit far above the band), up to ``GUESS_MAX``; a narrowing ends the run. A limit is often
#: just past a failing gap (the site counts gaps between arrivals, which differ a little from
#: those sent), so the first guess is small and the next two no bigger: a guess past the limit
#: costs every IP its overshoot until the narrowing is back under it (a step per spacing), one
#: more guess only the IP that meets it.
GUESS_FIRST = 0.25
GUESS_MAX = 1.0
#: Adaptive narrowing per spacing, of the delay (``STEP``; once a failing gap is
#: known, at least ``BISECT_STEP`` and halfway to just above it) and of the jitter
#: band, down to ``MIN_JITTER`` of the delay: a narrow band just above a limit beats a wide one.
#: Without a failure known the steps are large, as the host rate's slow start.
STEP = 0.8
BISECT_STEP = 0.95
JITTER_STEP = 0.5
MIN_JITTER = 0.03
#: A band whose low edge is at most ``1 / CLOSE`` of the longest failing gap is at least this share
#: of any limit between the two: the narrowing stops there (only the jitter narrows). A step under
#: it gains a few percent at most, and costs a 429 whenever it crosses the limit, which a
#: bisection's last steps do about half the time.
CLOSE = 0.9
#: Adaptive mode holds the band this many seconds after a raise before narrowing again,
#: doubled with each narrowing that drew a raise since the last clean window (up to the
#: window): a narrowing that crosses a per-IP limit costs a 429 on each IP that sends before
#: the first is back. Raises in a row (the last one fell short) do not double it.
HOLD = 3.0
#: Each clean window eases the memory of the longest failing gap by this factor,
#: so a limit that relaxes (or a signal blamed on spacing by mistake) is let go.
BAD_GAP_DECAY = 0.85
#: A raise at a gap within this share under the failing gap a decay let go of met the same
#: per-IP limit again: each such raise doubles the clean windows before the next decay, up to
#: ``DECAY_WINDOWS`` (the narrowing a decay allows is a probe, a 429 while the limit stays).
SAME_LIMIT = 0.05
DECAY_WINDOWS = 4
#: The raises kept to be taken back, should later evidence show their 429s were the host's.
TAKE_BACK = 4
#: Host-wide signals showing a limit without a burst (a host gap it refuses), since the last raise,
#: that take that raise back even when its own 429's host gap was not clearly short: such a limit
#: binds, and a 429 at about the shortest answered host gap (grants reach the site tens of
#: milliseconds apart from when they went) is likelier its doing than an IP's.
OUTWEIGHED = 2
#: Without adaptive mode, a clean window narrows raised spacing back toward
#: ``POLITE_DELAY`` by this factor.
SHRINK = 0.85

Band = tuple[float, float]


class Raise(NamedTuple):
    """A raise kept to be taken back: when the request that drew it went, its host gap then (the
    seconds since the host's previous request answered cleanly or still unanswered; ``None``: not
    known), the longest failing gap and the band before it, and whether a host-wide limit was known
    then (before one is, a 429 may be either's)."""

    sent_at: float
    host_gap: float | None
    bad_before: float
    band_before: Band
    host_known: bool = True


class SpacingEstimator:
    """Bounds a host's per-IP spacing between the longest failing gap and the shortest clean one."""

    __slots__ = ("bad_gap", "changed", "raised_at", "raises", "streak", "clean_gaps", "seen", "let_go",
                 "confirmed", "windows", "raised_for", "host_signals")

    def __init__(self) -> None:
        self.bad_gap = 0.0
        self.changed = -math.inf
        #: When a signal last raised the band; raises since the last clean window that followed
        #: a narrowing (or were the first); raises since the band last narrowed.
        self.raised_at = -math.inf
        self.raises = 0
        self.streak = 0
        #: Clean answers' gaps over the last window, (time, gap), gaps increasing.
        self.clean_gaps: deque[tuple[float, float]] = deque()
        #: The band this estimator last set or saw in force: another process sharing the
        #: host (``POLITE_STATE``) may have moved it since.
        self.seen: Band | None = None
        #: The failing gap the last decay let go of (0: none since the last raise), the raises
        #: that met the limit there again, and the clean windows since the last decay or raise.
        self.let_go = 0.0
        self.confirmed = 0
        self.windows = 0
        #: The last few raises, oldest first, and the host-wide signals since the last (``OUTWEIGHED``).
        self.raised_for: list[Raise] = []
        self.host_signals = 0

    def follow(self, band: Band, since: float) -> bool:
        """The band in force is *band*, in force here *since* then: when another process moved
        it, take its step as this estimator's own. Gaps drawn from the older band narrow nothing
        (so a fleet narrows a step per spacing, as one process does), and a raise means that
        process met the limit just under the new band: this one does not narrow below it
        either. Returns whether the band had moved."""
        old = self.seen
        if old is not None and (band == old or same(band, old)):
            return False  # the same band, as Redis rounds it
        self.seen = band
        if old is None:
            return False
        self.changed = max(self.changed, since)
        if band[0] > old[0]:
            self._failed(band[0] / (1 + MARGIN))
        return True

    def _failed(self, gap: float) -> None:
        """A gap this short failed (here or in another process sharing the host): after a decay, met
        near where the decay let go, the same limit, which stands where it was (the narrowing does
        not search under it again, a 429 more); well under it, a limit that relaxed."""
        if self.let_go > 0:
            same = gap * (1 + SAME_LIMIT) >= self.let_go
            self.confirmed = self.confirmed + 1 if same else 0
            gap = max(gap, self.let_go) if same else gap
            self.let_go = 0.0
        self.windows = 0
        self.bad_gap = max(self.bad_gap, gap)

    def clean(self, gap: float, now: float, window: float) -> None:
        if math.isfinite(gap):
            while self.clean_gaps and self.clean_gaps[-1][1] >= gap:
                self.clean_gaps.pop()
            self.clean_gaps.append((now, gap))
        while self.clean_gaps and self.clean_gaps[0][0] < now - window:
            self.clean_gaps.popleft()

    def shortest_clean(self, now: float, window: float) -> float:
        self.clean(math.inf, now, window)
        return self.clean_gaps[0][1] if self.clean_gaps else math.inf

    def target(self, gap: float, now: float, window: float, reach: bool = True, back: bool = True) -> float:
        """Where a signal after *gap* puts the spacing: the shortest clean gap if that is not
        far above it (a known-good spacing beats a guess), else just above the gap (*reach*:
        a guess at where a limit nothing was answered under lies, see ``GUESS_FIRST``). Without
        *reach* the clean gap is taken only when *back* (adaptive mode: a narrowing that overshot
        goes back to where it was clean; without it a wide band's clean gaps say little)."""
        known = self.shortest_clean(now, window)
        if (reach or back) and known <= gap * (1 + REACH):
            return max(gap * (1 + MARGIN), known)
        if reach:
            guess = doubling(GUESS_FIRST, max(0, self.streak - 2), GUESS_MAX) if back else REACH
            return gap * (1 + max(MARGIN, guess))
        return gap * (1 + MARGIN)

    @staticmethod
    def _bisected(gap: float, clean: float) -> float:
        """Where a raise goes between *gap*, which failed, and the shortest *clean* gap above it, once a
        failing gap was known before (a narrowing between the two failed): halfway, at most a
        ``BISECT_STEP`` under the clean gap, as the narrowing would after the hold; the clean gap itself
        when within ``CLOSE`` of the failing one. A search's first failure goes back to the clean gap:
        the requests a narrowing sent past the limit are still coming back."""
        low = gap * (1 + MARGIN)
        if clean * CLOSE <= gap:
            return clean
        return max(low, min(clean * BISECT_STEP, (clean + low) / 2))

    def raised(self, gap: float, band: Band, ceiling: float, adaptive: bool, now: float, window: float,
               reach: bool = True, sent_at: float | None = None, host_gap: float | None = None,
               host_known: bool = True, failed: float | None = None) -> Band | None:
        """The band just above *gap*, which was too short (``None``: the band already is; *reach*:
        see :meth:`target`; *sent_at*: when the request that failed went, *host_gap* its host gap and
        *host_known* whether a host-wide limit was known, kept to take the raise back; *failed*: the gap
        that failed, when *gap* is only a bound an IP's run derived from it)."""
        before = self.bad_gap
        # A bound more than ``REACH`` above the gap that failed may count time the IP's bucket sat full
        # (a run from a slow start's long gaps, whose tokens overflowed): it holds the raise, but only
        # the gap counts as failed, and the narrowing searches back down once its hold is over.
        self._failed(failed if failed is not None and gap > failed * (1 + REACH) else gap)
        lo, hi = band
        new_lo = self.target(gap, now, window, reach, back=adaptive)
        if adaptive and before > 0 and new_lo == self.shortest_clean(now, window):
            new_lo = self._bisected(gap, new_lo)
        new_lo = min(new_lo, ceiling)
        if new_lo <= lo:
            return None
        new_hi = new_lo * (1 + MIN_JITTER)
        if not adaptive:
            new_hi = max(new_hi, hi)  # never narrower than POLITE_DELAY without adaptive mode
        self.changed = self.raised_at = now
        self.raises += self.streak == 0
        self.streak += 1
        if sent_at is not None:
            self.raised_for = [*self.raised_for[1 - TAKE_BACK:], Raise(sent_at, host_gap, before, band, host_known)]
            self.host_signals = 0
        return (new_lo, new_hi)

    def taken_back(self, hosts: Callable[[Raise], bool]) -> Band | None:
        """The last raises *hosts* says were the host's doing, not a per-IP limit's (their requests went
        at a host gap a host-wide limit refuses, say): their failing gaps go, and the band before the
        first of them is returned (``None``: none). A raise that stays bounds the narrowing for a
        window, and a wrong one costs the pool up to half the host's rate meanwhile."""
        band = None
        while self.raised_for and hosts(self.raised_for[-1]):
            last = self.raised_for.pop()
            self.bad_gap, band = last.bad_before, last.band_before
            self.streak = max(0, self.streak - 1)
            self.raises = max(0, self.raises - 1)
        if band is not None and not self.raises:
            self.raised_at = -math.inf
        return band

    def outweighed(self) -> Band | None:
        """A host-wide signal showed a limit without a burst: the ``OUTWEIGHED``-th since the last raise
        takes that raise back (the band before it is returned; ``None``: not yet, or none kept)."""
        self.host_signals += 1
        if self.host_signals < OUTWEIGHED or not self.raised_for:
            return None
        self.host_signals, last = 0, self.raised_for[-1]
        return self.taken_back(lambda r: r is last)

    def answered(self, gap: float, sent_at: float, band: Band) -> bool:
        """Whether a signal after *gap*, whose request went at *sent_at*, is already answered for by a
        move of the band since: *band*, the one in force, no longer allows so short a gap. The gap
        still failed, and bounds the narrowing."""
        if not (sent_at < self.changed and gap < band[0]):
            return False
        self._failed(gap)
        return True

    def floor(self, configured: float) -> float:
        """The shortest spacing *configured* and the longest failing gap allow."""
        return max(configured, self.bad_gap * (1 + MARGIN))

    def narrowed(self, band: Band, floor: float, now: float, window: float = math.inf) -> Band | None:
        """Adaptive mode: one step below *band*, never under *floor*, once a raise's hold is over."""
        if self.raises and now - self.raised_at < doubling(HOLD, self.raises - 1, window):
            return None
        lo, hi = band
        # Without a failure known, a step down; with one, at least halfway to just above it, and
        # none once close above it.
        if self.bad_gap <= 0:
            step = lo * STEP
        elif lo * CLOSE <= self.bad_gap * (1 + 1e-9):
            step = lo
        else:
            step = min(lo * BISECT_STEP, (lo + floor) / 2)
        new_lo = min(lo, max(floor, step))
        new_hi = new_lo + max(new_lo * MIN_JITTER, (hi - lo) * JITTER_STEP)
        if new_hi >= hi - 1e-6:
            return None
        self.changed = now
        self.streak = 0
        return (new_lo, new_hi)

    def decay(self) -> None:
        """A clean window: the raises' hold starts afresh, and once as many clean windows passed as
        the limit's confirmations allow, a little of the failing gap is let go (re-probed)."""
        self.raises = self.streak = 0
        self.windows += 1
        if self.windows < doubling(1, self.confirmed, DECAY_WINDOWS):
            return
        self.windows = 0
        if self.bad_gap > 0:
            self.let_go = max(self.let_go, self.bad_gap)
        self.bad_gap *= BAD_GAP_DECAY

    def restored(self, band: Band, base: Band, floor: float) -> Band | None:
        """Without adaptive mode: a clean window brings a raised band back toward *base*."""
        lo, hi = band
        if lo > floor + 1e-9:
            new_lo = max(floor, lo * SHRINK)
            return (new_lo, max(base[1], hi * new_lo / lo))
        if hi > base[1] + 1e-9 and lo <= base[0] + 1e-9:
            return base
        return None
