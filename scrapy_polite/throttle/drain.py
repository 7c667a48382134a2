"""Each exit IP's run of requests to one host since its last 429: the evidence a per-IP allowance leaves.

A per-IP limit with no burst (nginx's ``limit_req`` without ``burst``) refuses a
gap shorter than its interval, so the gap that drew a 429 bounds the limit. One
with a burst (a token bucket; ``burst=N nodelay``) answers gaps far shorter than
its interval until the burst is spent: the 429 then comes after a gap the IP was
answered at moments before, and says nothing by itself. What does say where such
a limit lies is the run: between two 429s on one IP the bucket went from under a
token to under a token, so the IP's clean requests over that time are what its rate allows, give
or take one: the time per clean request and one more is the least spacing that
can drain nothing, and a long run narrows it down to the spacing that drains
nothing. A run from the IP's first request began with a full bucket, at least
two tokens when it was answered at a gap as short as the one it was refused at:
the time per clean request but one. Sites count the gaps between arrivals,
tens of milliseconds off those sent: such a run shows a burst only when a gap
clearly shorter was answered (in it or on another IP), or its last few gaps
were as short; else a bucket of one met a little early explains the 429, and
the run, whose bucket may have sat full through a slow start's long gaps,
says no more than its gap. A run from a 429 counts the Retry-After its
IP waited out, over which the bucket may have filled and turned tokens away
(which the count takes as spent): it says the lower of its pace and the pace of
a run from a full bucket at its first request after the wait.

The time is the sum of the run's gaps, each measured from the IP's previous
request to the host by anyone: a process sharing the pool with others
(``POLITE_STATE``) sees some of an IP's requests, and its gaps are a sample of
the IP's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: A clean request after a gap this many times the spacing band's upper end (and not the
#: first after a 429, which waited out its Retry-After) ends a run: an IP that idled may have
#: filled its bucket, and its run would count the tokens that went to waste.
IDLE = 3.0
#: A run of fewer clean requests, sent at a pace within ``AT_BAND`` of the spacing in force (its band's
#: upper end: a wide band, as ``POLITE_DELAY``'s without adaptive mode, spaces requests that far), says
#: nothing of a per-IP allowance: a host-wide limit ends runs that short on any IP, however far apart
#: its requests, and each raise to what such a run says creeps the spacing up a few percent while the
#: host's total rate stays past its limit. The pace it was sent at is its time per gap: a run from a
#: full bucket says its allowance needs its whole time per clean request but one, twice the spacing
#: for a run of two. (A short run sent well slower than the spacing in force is one the spacing let
#: run short: a per-IP allowance with a Retry-After shorter than its refill.)
MIN_RUN = 3
AT_BAND = 0.1
#: A site counts the gaps between arrivals, which differ from the gaps sent by tens of milliseconds (a
#: proxy's hop, a loaded event loop): a 429 at a gap within this share of one answered cleanly may be a
#: bucket of one met a little early, not a burst spent.
JITTER = 0.05


@dataclass(slots=True)
class _Run:
    #: The clean requests since the IP's last 429 (or its first request to the host), the sum of
    #: their gaps and the shortest of them.
    clean: int = 0
    gaps: float = 0.0
    shortest: float = math.inf
    #: Whether its bucket may have been full when it began (the IP's first request, or one after
    #: it idled; such a run counts that request). One that began at a 429 counts none yet until
    #: its first request, which waited out the Retry-After.
    full: bool = False
    #: The gap of a run that began at a 429 to its first request: the Retry-After waited out, over
    #: which the bucket may have filled (0: none yet, or a run that did not begin at a 429).
    wait: float = 0.0
    #: Its last ``MIN_RUN`` clean gaps (not the Retry-After waited out).
    recent: tuple[float, ...] = ()


@dataclass(frozen=True, slots=True)
class Drained:
    """An IP's run that ended in a 429."""

    #: Seconds per request the run says the IP's allowance needs at least (see the module's docstring).
    pace: float
    clean: int  #: clean requests in the run
    shortest: float  #: the shortest gap answered cleanly in it
    #: Whether the gap that drew the 429 was shorter than every clean one in the run: a limit on
    #: the gap itself explains it, unless another IP was answered at a gap as short.
    strict: bool


class IpRuns:
    """One host's exit IPs, each with its run since its last 429 (or its first request)."""

    __slots__ = ("runs",)

    def __init__(self) -> None:
        self.runs: dict[str, _Run] = {}

    def clean(self, key: str, gap: float, band_hi: float) -> None:
        """A clean answer to a request through the endpoint keyed *key*, sent *gap* after the IP's previous one."""
        run = self.runs.get(key)
        after_limit = run is not None and run.clean == 0
        idle = math.isfinite(gap) and gap > IDLE * band_hi and not after_limit
        if run is None or not math.isfinite(gap) or idle:
            # The IP's first request, or one after it idled: its bucket may be full, and the run starts here.
            self.runs[key] = _Run(1, full=True)
            return
        if after_limit:
            run.wait = gap
        run.clean += 1
        run.gaps += gap
        run.shortest = min(run.shortest, gap)
        if not after_limit:
            run.recent = (*run.recent[1 - MIN_RUN:], gap)

    def limited(self, key: str, gap: float, band_hi: float = 0.0, answered: float = math.inf) -> Drained | None:
        """A 429 to a request through *key* sent *gap* after the IP's previous one, with the spacing in
        force up to *band_hi* and *answered* the shortest gap answered cleanly on any IP: the run it ended
        (``None``: none known, no gap, or too short to say anything, see ``MIN_RUN``). The IP's next run
        starts here."""
        run = self.runs.get(key)
        self.runs[key] = _Run()
        if run is None or run.clean <= 0 or not math.isfinite(gap):
            return None
        # r * time = clean + tokens at the 429 - tokens at the start: the first is under 1, the second at
        # least 0, or when the bucket was full its burst, one token or more, and two when a gap this short
        # was answered (a bucket of one answers no gap as short as one it refuses).
        strict = gap < run.shortest
        spent = run.clean + (-int(not strict) if run.full else 1)
        pace = (run.gaps + gap) / spent
        if run.wait > 0 and run.clean > int(not strict):
            # Its bucket may have filled during the Retry-After (and turned tokens away, which the count
            # above takes as spent): then the run began full at its first request. One of the two holds,
            # so the allowance needs at least the lower of the two paces.
            pace = min(pace, (run.gaps - run.wait + gap) / (run.clean - int(not strict)))
        # The run's gaps: one per request after its first (a full run's first has none counted).
        sent_pace = (run.gaps + gap) / (run.clean + (not run.full))
        if run.clean < MIN_RUN and sent_pace <= band_hi * (1 + AT_BAND):
            return None
        clearly = gap >= min(run.shortest, answered) * (1 + JITTER)
        paced = len(run.recent) >= MIN_RUN - 1 and max(run.recent) <= gap * (1 + JITTER)
        if run.full and not (clearly or paced):
            # A run from a full bucket with no gap clearly shorter answered anywhere, nor a few in a row as
            # short: a bucket of one met a little early explains the 429 as well as a burst spent, and the
            # run's time counts gaps its bucket may have sat full in (a slow start's, a wider band's).
            pace = gap
        return Drained(pace, run.clean, run.shortest, strict)
