"""Host-rate estimator: the highest total rate (req/s, all exit IPs together) a host accepts.

Searched as TCP searches a window: a step up per clean answer sent at the current
rate, back to the clean rate it climbed from on a signal (or a step down that
grows fourfold with each signal in a row), then a hold one step below the rate that
failed before a probe one step past it. A probe that finds the same ceiling
doubles the next hold (re-probing rarely); a limit seen to fall under where it
was keeps it short for a few probes (a limit that fell may come back).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import NamedTuple

from scrapy_polite.gate.backoff import doubling
from scrapy_polite.gate.state import same

#: Each clean answer sent at the current host rate raises it by this share; a
#: host holds one step below the rate that last failed.
STEP = 0.1
#: Adaptive mode's slow start, before any host-wide limit was found and once a
#: probe got past the ceiling cleanly: a step per clean answer this large (TCP's
#: slow start doubles per round trip; a crawl of a small site lasts seconds, and an
#: overshoot costs one 429 and a step back).
START_STEP = 0.25
#: Adaptive mode's first hold below a steady limit, seconds: its first probe checks a ceiling one
#: 429 found (a step low, when requests sent at the rate arrived bunched) and, met again, holds half
#: a step closer under it. Each later probe finds nothing unless the limit moved, and costs a 429
#: and a step back: each one that meets the same ceiling doubles the next hold ``HOLD_DOUBLINGS``
#: times (four times as long), up to ``HOLD_WINDOWS`` recovery windows.
HOLD_FIRST = 6.0
HOLD_DOUBLINGS = 2
#: Adaptive mode's hold below a limit seen to have fallen, seconds: a limit that fell may come back,
#: and a rise is found at the next probe (a few clean answers then climb back to where it stood),
#: so a cap that rises again is used within about ten seconds. Once ``STEADY`` probes met the same
#: ceiling, the hold doubles from there, as a steady limit's. A limit back where it was before it
#: fell is re-probed as a steady one.
FALLEN_HOLD = 6.0
STEADY = 3
#: A steady limit, confirmed probe after probe, is re-probed at most this many
#: ``POLITE_RECOVERY_WINDOW`` apart: each probe costs a 429, and the hold just under it
#: gives up about 2% of the limit.
HOLD_WINDOWS = 4
#: A rate within this share under the hold (one step below the rate that failed) is at it.
NEAR = 0.01
#: Without adaptive mode the hold is one recovery window, this share of one while the limit has
#: fallen: a rise is found at the next probe, and then takes a few seconds of 10% steps.
MOVED_SHARE = 4
#: A ceiling stands this many seconds before a failure far under it means the limit fell.
SETTLE = 3.0
#: A probe clean at a rate this factor past the ceiling (two steps: one 429 a little under the
#: limit, where requests sent at the rate arrive bunched, sets a ceiling a step low) means the
#: limit rose: the climb goes on by slow-start steps.
RISEN = (1 + STEP) * (1 + STEP / 2)
#: Signals less than this many seconds apart are one run: a clean answer between
#: them neither ends the run (each signal steps down further) nor climbs.
RUN = 0.4
#: Each signal of a run steps down ``RUN_GROWTH`` times as many steps as the one before (1, 4, 16:
#: a limit that fell to a third is under the rate by a run's third signal, not its fifth, and each
#: signal of a run is a 429), up to ``2 ** RUN_STEPS`` steps (a cut of 1.1 ** 64, past any
#: ``POLITE_BACKOFF_FACTOR``'s floor).
RUN_GROWTH = 4
RUN_STEPS = 6
#: A host rate set from the shortest host gap answered cleanly (``Signal.spaced``) spaces requests
#: this share further apart (timers fire a little early or late).
SPACED = 0.03


class _Keep:
    def __repr__(self) -> str:
        return "KEEP"


#: "Leave the host rate as it is", as opposed to ``None`` ("no host rate").
KEEP = _Keep()


@dataclass
class Signal:
    """What a host-blamed signal tells the rate search."""

    rate: float | None  #: the host rate in force (None: none set)
    sent: float  #: req/s the gate granted over the last few seconds (``Traffic.sent_rate``)
    wide: bool  #: several endpoints were limited at once
    backoff: float  #: POLITE_BACKOFF_FACTOR
    #: What the host took of ``sent`` when many recent answers failed (``Traffic.accepted``).
    accepted: float | None = None
    #: The shortest host gap answered cleanly, when the signal's was shorter (``Verdict.spaced``): a
    #: host-wide limit without a burst answers every request that far apart.
    spaced: float | None = None


#: How a failure moved a :class:`Ceiling`: under a slow start's overshoot it found the limit, or
#: a probe met the ceiling again at or past it.
FOUND = "found"
MET_AT = "met at"


class Ceiling:
    """Where one host's limit was met, and how often probes met it there: how long to hold under it."""

    __slots__ = ("level", "at", "peak", "confirmed", "peak_confirmed", "provisional", "stood")

    def __init__(self) -> None:
        #: The rate the limit was last met at (``None``: none yet), and since when.
        self.level: float | None = None
        self.at = -math.inf
        #: The highest level a probe met again or the limit fell from (``None``: none): a limit
        #: well under it fell, and may come back.
        self.peak: float | None = None
        #: Probes that met the same level again: each doubles the next hold. And those that met the
        #: peak: a limit back where it stood is the limit they met, and resumes as it stood.
        self.confirmed = 0
        self.peak_confirmed = 0
        #: Whether the level is a slow-start step's overshoot, so only an upper bound: a failure
        #: below it then finds the limit, and neither means the limit moved nor counts as noise.
        self.provisional = False
        #: Where the limit stood when the current run of signals began (``None``: the rate in force
        #: then had not stood ``SETTLE`` seconds): each signal of a run steps the rate, and so the
        #: level it meets, further down, and a run that ends far under the ceiling fell from where
        #: the run began, not from its last step.
        self.stood: float | None = None

    @property
    def fallen(self) -> bool:
        """Whether the limit lies well under where it stood before: it may come back, and a rise
        is worth its probes. Back at that level, it is a steady limit again."""
        return self.peak is not None and self.level is not None and self.level * (1 + STEP) ** 2 < self.peak

    def hold(self, window: float, fast: bool = True) -> float:
        """Seconds to hold below a rate that failed before probing past it (*fast*: adaptive mode's
        holds, short at first and for a limit that fell, growing while the same ceiling is met)."""
        fallen = self.fallen
        if not fast:
            return window / (MOVED_SHARE if fallen else 1)
        longest = window * HOLD_WINDOWS
        if fallen:
            return doubling(FALLEN_HOLD, max(0, self.confirmed - STEADY), longest)
        return doubling(HOLD_FIRST, HOLD_DOUBLINGS * self.confirmed, longest)

    def met_again(self, level: float) -> None:
        """A probe (here or in another process sharing the host) met the ceiling again at *level*:
        the next hold doubles, and the limit stood there."""
        self.confirmed += 1
        self._stood(level)

    def _stood(self, level: float) -> None:
        """The limit stood at *level*, met there by ``confirmed`` probes: the peak, if the highest or
        within a step under it (a probe meets a limit a little under where it met it before: the
        same limit, met again)."""
        if self.peak is None or level * (1 + STEP) >= self.peak:
            self.peak, self.peak_confirmed = max(self.peak or 0.0, level), self.confirmed

    def bound(self, level: float, at: float) -> None:
        """The limit was met at *level* (at *at*) under a host rate in force: the ceiling is no higher."""
        if self.level is None or level < self.level:
            self.level, self.at = level, at

    def failed(self, failed: float, now: float, probe: bool, climbed_fast: bool, first: bool = True,
               settled: bool = True) -> str:
        """A host-wide failure at the host rate *failed* (*probe*: sent past a hold; *climbed_fast*:
        that rate was a slow-start step; *first*: the first signal of a run, *settled*: at a rate in
        force for ``SETTLE`` seconds): move the ceiling. Returns ``FOUND``, ``MET_AT`` or ""."""
        provisional, self.provisional = self.provisional, False
        if first:
            # A slow start's overshoot is only an upper bound: the limit stood at least where this met
            # it, if the host had answered that rate for a while (a burst allowance answers a rate
            # far past the limit for a second or two).
            self.stood = None if not settled else (
                failed if self.level is None else min(self.level, failed) if provisional else self.level)
        how = ""
        if self.level is None:
            self.level, self.at, self.provisional = failed, now, climbed_fast
        elif provisional and failed < self.level:
            self.level, how = failed, FOUND  # under a slow start's overshoot: the limit, found
        elif failed < self.level / (1 + STEP) ** 2:
            # Far under the ceiling: the limit fell, unless that ceiling was only just found (a
            # burst the limit allows after a pause lets a climb run past it for a second or two).
            if now - self.at >= SETTLE:
                self._stood(max(self.level, self.stood or 0.0))
                self.confirmed = 0
            self.level, self.at = failed, now
        elif failed <= self.level * (1 + STEP) ** 2:
            if probe:
                # A probe met the same ceiling again: re-probe less often; met at or past it, hold
                # closer under it (not while the limit has fallen: the hold is short, and closer is
                # often past the limit, a 429 for little).
                self.met_again(min(self.level, failed))
                if failed >= self.level * (1 - 1e-9) and not self.fallen:
                    how = MET_AT
            self.level = min(self.level, failed)
        else:
            self.level, self.at = failed, now
            self.provisional = climbed_fast  # a fast climb's overshoot: an upper bound
        return how

    def passed(self, rate: float) -> None:
        """A clean answer at *rate*: two steps past the ceiling, the limit rose (or the ceiling was a
        burst's: a fleet's first requests arrive together). The next one found is met by probes of
        its own."""
        if self.level is not None and rate > self.level * (1 + STEP) ** 2:
            self.confirmed = 0

    def back(self, now: float) -> float:
        """A fallen limit came back: the ceiling is where it stood (returned), met again by as many
        probes as before it fell (those of the low ceiling say nothing of this one)."""
        assert self.peak is not None
        self.level, self.at, self.provisional, self.confirmed = self.peak, now, False, self.peak_confirmed
        return self.peak


class RateSearch:
    """One host's search for its host-wide limit."""

    __slots__ = ("good", "bad", "bad_found", "ceiling", "fail_streak", "forgiven", "changed", "last_limited",
                 "probing", "climbed_fast", "seen", "cut", "met")

    def __init__(self) -> None:
        #: The rate last answered cleanly, and the one that drew the last signal.
        self.good: float | None = None
        self.bad: float | None = None
        #: Whether ``bad`` is a limit found at a set host rate (not a burst's rate).
        self.bad_found = False
        self.ceiling = Ceiling()
        self.fail_streak = 0
        #: Whether this hold has already forgiven one signal below ``bad`` as noise.
        self.forgiven = False
        #: Answers to requests granted before this were sent at an older host rate, and
        #: signals to requests granted before ``cut`` at a faster one, already answered for.
        self.changed = -math.inf
        self.cut = -math.inf
        self.last_limited = -math.inf
        #: Whether the rate is past a hold, probing: its next signal may confirm the ceiling.
        self.probing = False
        #: Whether the rate last climbed by a slow-start step, and so the ceiling its first
        #: signal sets is only an upper bound (``Ceiling.provisional``).
        self.climbed_fast = False
        #: The host rate (req/s, None: none) this search last set or saw in force: another
        #: process sharing the host (``POLITE_STATE``) may have moved it since.
        self.seen: float | None = None
        #: The total rate the last host-wide signal here met, and whether at a host rate in force
        #: (``bad`` may stay above it: one signal under a ceiling per hold is noise): what the
        #: other processes sharing the host hold under.
        self.met: tuple[float, bool] | None = None

    def copy(self) -> RateSearch:
        """This search as it stands, to go back to (``Cut``)."""
        kept = copy.copy(self)
        kept.ceiling = copy.copy(self.ceiling)
        return kept

    def _hold_under(self, level: float, found: bool) -> None:
        """Hold a step under *level*, a rate the limit was met at (*found*: under a host rate in
        force), without probing past it yet."""
        self.bad, self.bad_found, self.forgiven, self.probing = level, found, False, False

    # -- steps -----------------------------------------------------------------

    def follow(self, rate: float | None, since: float) -> bool:
        """The host rate in force is *rate*, in force here *since* then: when another process
        moved it, take its step as this search's own. Answers to requests sent before then were
        at another rate (so a fleet climbs a step per round, as one process does), and a cut
        means that process met the limit at the rate it cut from: this one holds under it too,
        and its slow start is over. A cut from the ceiling this search knows is a probe that met
        it again, as one of this search's own would be: the next hold doubles here too (else each
        process of a fleet probes a steady limit on its own hold, a 429 each). Returns whether
        the rate had moved."""
        old = self.seen
        if rate == old or (rate is not None and old is not None and same((rate,), (old,))):
            return False  # the same rate, as Redis rounds it
        self.seen = rate
        self.changed = max(self.changed, since)
        if old is not None and rate is not None and rate < old:
            self.cut = max(self.cut, since)
            self.good, self.fail_streak = None, 0
            self._hold_under(old, True)
            level = self.ceiling.level
            if level is not None and level / (1 + STEP / 2) <= old <= level * (1 + STEP):
                self.ceiling.met_again(min(level, old))
            self.ceiling.bound(old, since)
        return True

    def learn(self, failed: float, found: bool, at: float) -> None:
        """Another process sharing the host met its limit at the total rate *failed* at *at* (*found*:
        a host rate in force, else what a burst with none measured): hold under it as under a
        failure of this search's own, so each process of a fleet holds, and then climbs, where the
        one that failed does. A failure of this search's own since is newer, and stays; one taken
        already is not taken again (both set ``last_limited``). A failure above a limit already met
        here says nothing new (that process failed at a rate it had not yet seen cut), and a limit
        met at a host rate in force bounds the ceiling, as this search's own does."""
        if at <= self.last_limited:
            return
        self.last_limited = at
        if found and self.bad_found and self.bad is not None and failed > self.bad:
            return
        self._hold_under(failed, found)
        self.good, self.fail_streak = None, 0
        if found:
            self.ceiling.bound(failed, at)

    def limited(self, s: Signal, now: float = 0.0) -> float | None | _Keep:
        """A host-blamed signal (at *now*): the new host rate, ``KEEP``, or ``None``."""
        self.last_limited = now
        probe, self.probing = self.probing, False
        accepted = s.accepted
        # Requests as far apart as the shortest answered host gap go through (``Signal.spaced``).
        spaced = None if s.spaced is None else 1 / (s.spaced * (1 + SPACED))
        first, settled = self.fail_streak == 0, now - self.changed >= SETTLE
        if s.rate is not None:
            # A host rate answered cleanly for ``SETTLE`` seconds, not a probe's: the limit moved under
            # it, and the run starts as at its second signal (a limit that fell to a third is under the
            # rate by the run's second 429, not its third).
            self.fail_streak += 1 + (first and settled and not probe)
            if self.good is not None and self.good < s.rate:
                new = self.good
            else:
                # Capped: past the deepest cut (``backoff``) a longer run changes nothing, and 1.1 ** 2 ** 13
                # overflows.
                new = s.rate / (1 + STEP) ** min(RUN_GROWTH ** (self.fail_streak - 1), 2 ** RUN_STEPS)
            failed = s.rate
            if accepted is not None and accepted < new:
                new = max(accepted, s.rate * s.backoff)
                failed = new * (1 + STEP)
            new = max(new, s.rate * s.backoff)
        elif s.wide and accepted is not None:
            new, failed = accepted, accepted * (1 + STEP)
        elif s.wide and s.sent > 0:
            # No host rate in force: a step under the rate sent, or under the limit found before.
            level = self.ceiling.level
            failed = s.sent if level is None else min(s.sent, level)
            new = max(failed / (1 + STEP) if level is not None else 0.0, s.sent * s.backoff)
        elif spaced is not None:
            # No host rate in force, and a request refused closer after another than any two answered:
            # the host's requests spaced as far apart as those were (then climbing past it, as after a
            # burst), and no further under the rate sent than a step (few gaps seen, the shortest is long).
            new = max(spaced, s.sent / (1 + STEP))
            failed = new * (1 + STEP)
        else:
            return KEEP
        if spaced is not None and s.rate is not None:
            new = max(new, min(spaced, s.rate))  # no deeper a cut than that
        self.met = (failed, s.rate is not None)
        if s.rate is None:
            self.ceiling.provisional = False  # a burst with no host rate says little about where the limit is
        else:
            how, level = self.ceiling.failed(failed, now, probe, self.climbed_fast, first, settled), self.ceiling.level
            if how == FOUND:
                self.bad_found = False  # neither noise nor a move: the limit
            elif how == MET_AT and accepted is None and level is not None:
                new = max(new, min(level, s.rate) / (1 + STEP / 2))
        if self.bad_found and self.bad is not None and failed < self.bad and not self.forgiven and accepted is None:
            self.forgiven = True  # one signal below the ceiling per hold is noise
        else:
            self.bad, self.bad_found = failed, s.rate is not None
        self.good = None
        return new

    def clean(self, rate: float, now: float, window: float, pool_rate: float,
              fleet_signal: float = -math.inf, fast: bool = True, held: bool = True) -> float | None | _Keep:
        """A clean answer sent at *rate*: climb, hold, or drop the rate (past *pool_rate* it limits
        nothing; *fleet_signal*: when another process sharing the host last met a host-wide limit
        at a rate it could not say, see ``learn`` for one it could; *held*: the rate held the
        request, so it binds)."""
        if now - self.last_limited < RUN:
            return KEEP  # inside a run of signals: a request that slipped through says little
        self.good = rate
        self.fail_streak = 0
        ceiling = self.ceiling
        hold = ceiling.hold(window, fast)
        if self.bad is None and now - fleet_signal < hold:
            return KEEP  # another process sharing the host rate just stepped it down
        # ``bad`` (if set) is only a burst's rate, sent with no host rate and no ceiling known: a
        # first burst goes out faster than its measured rate, which says nothing of the limit.
        burst = not self.bad_found and ceiling.level is None
        if self.bad is not None and burst:
            if rate * (1 + STEP) >= self.bad * (1 - 1e-9):  # climb on, past it
                self.bad = None
        elif self.bad is not None and rate * (1 + NEAR) >= self.bad / (1 + STEP):
            # The hold is one step below the rate that failed; a rate a hair under it is at it
            # (a 10% climb from just over a step under would land on the rate that failed).
            if now - self.changed < hold:
                return KEEP
            self.bad = None  # then probe past it: limits move
            self.forgiven = False
            self.probing = True
        ceiling.passed(rate)
        if self.bad is None and rate > (1 + STEP) * pool_rate:
            # Past what the pool sends the rate limits nothing: dropped, unless a host-wide limit
            # was met within the window. It then stays just above the pool's rate, which it spaces
            # evenly: at a cap with little burst, requests the spacing happens to bunch are 429s.
            return None if now - self.last_limited >= window else KEEP
        if self.probing and not held:
            # A probe past a ceiling is judged by requests its rate held: one the spacing sent under
            # it says nothing of the limit, and climbing on it runs past the limit unchecked.
            return KEEP
        # Slow-start steps before any limit is found, and again once a probe got two steps past
        # the ceiling cleanly: the limit rose, and a short crawl has no time for 10% steps.
        risen = self.probing and ceiling.level is not None and rate > ceiling.level * RISEN
        self.climbed_fast = fast and (self.starting or risen)
        climbed = rate * (1 + (START_STEP if self.climbed_fast else STEP))
        if self.climbed_fast and risen and ceiling.fallen:
            # A fallen limit came back: the search resumes where it stood, a step under that ceiling,
            # held there and probed as before the fall (slow-start steps from the low ceiling take
            # seconds, and run past where it stood: a 429).
            peak = ceiling.back(now)
            self._hold_under(peak, True)
            self.climbed_fast = False
            # As close under it as before the fall: a step, or half one once probes met it there.
            return max(rate, peak / (1 + (STEP / 2 if ceiling.confirmed else STEP)))
        if self.bad is not None and not burst:
            climbed = min(climbed, self.bad / (1 + STEP))  # a climb ends at the hold, not past it
        return climbed

    def explain(self, window: float, fast: bool = True) -> dict[str, float | None] | None:
        """What this search knows of the host's limit, for a change's evidence (``None``: nothing yet):
        the rate it was last met at (``ceiling``), where it stood before it fell (``fell_from``), the
        rate it holds below (``holds_below``: the rate that drew the last signal) and the seconds
        before a probe past it (``hold``, from now: the host rate just moved)."""
        c = self.ceiling
        # With no limit found, ``bad`` is only a first burst's rate, which the search climbs past.
        held = self.bad if self.bad_found or c.level is not None else None
        if c.level is None and held is None:
            return None
        return {
            "ceiling": _round(c.level),
            "fell_from": _round(c.peak) if c.fallen else None,
            "holds_below": _round(held),
            "hold": c.hold(window, fast) if held is not None else None,
        }

    @property
    def starting(self) -> bool:
        """Whether no host-wide limit was found yet (slow start)."""
        return self.ceiling.level is None and self.bad is None


class Cut(NamedTuple):
    """A host-rate cut kept to be taken back, should a per-IP limit found later explain its 429: when it
    came, the IP gap its request went at, the host rate before it (``None``: none) and the search as it
    stood then."""

    at: float
    gap: float
    rate: float | None
    search: RateSearch


def _round(rate: float | None) -> float | None:
    return None if rate is None else round(rate, 3)
