"""Attribution: whether a rate signal points at a per-IP limit or at a host-wide one.

The evidence that separates the two:

- **gaps**: a per-IP limit answers a short gap with a 429 and longer ones
  cleanly; a host-wide limit does not care about one IP's gap, so a clean
  answer after a gap as short as the failing one rules the IP out;
- **rate**: a host-wide limit fails when the host's total rate is at a new
  high, above the rates its clean answers were sent at, and does not fail well
  below a rate it answered cleanly moments ago;
- **clusters**: 429s again on the same IP point at that IP; 429s on several
  IPs within a moment point at the host;
- **first requests**: an IP's first request to a host has no gap; when those
  go through cleanly and only the IPs' next ones fail, at a host rate the
  first ones were answered at, the gap is what differs, not the rate (a
  first request limited within a moment of such a 429, whose own 429 came
  back later, takes that back);
- **runs**: an IP held by its spacing whose gap was answered cleanly (on it
  since its last 429, or on another IP) spent a per-IP allowance (a burst):
  the time its run took per clean request bounds where that limit lies
  (:mod:`.drain`), unless the host's own gap says otherwise: a request sent
  closer after the host's previous clean one than any two clean ones ever
  were is what a host-wide limit without a burst refuses, whatever the
  IP's run (two IPs' spacings end together now and then, at any spacing).
  A site refuses before its upstream answers (nginx's ``limit_req``), so a
  429 comes back before the pages asked for just ahead of it: the previous
  request may still be unanswered, and counts (most are answered cleanly).

When both hypotheses have support, the cheaper remedy is tried first (the share
of the host's throughput each would give up); the same IP limited again after
the host rate was cut points at the IP.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scrapy_polite.throttle.drain import Drained

PER_IP = "per-ip"
HOST = "host"
#: A request whose endpoint had been free to go for at most this long (or this
#: share of its gap: timers fire late) was held by its spacing.
SLACK_TOLERANCE = 0.1
GAP_TOLERANCE = 0.05
#: A rate this share above every clean answer's is a new high; one this factor
#: below a clean answer's (two host-rate steps) is one the host took.
RATE_MARGIN = 0.05
RATE_BELOW = 1.21
#: 429s on this many endpoints within ``MOMENT`` seconds cluster in time.
MOMENT = 1.0
MOMENT_ENDPOINTS = 2
#: Clean answers with a known gap needed before a short gap not held by the
#: spacing is taken for a per-IP limit on its own.
MIN_CLEAN_GAPS = 8
#: Host gaps between clean requests (not made by the host rate) needed before a
#: shorter one tells a host-wide limit without a burst: under a per-IP limit the
#: requests' host gaps fall at random, and one falls under the shortest of *k* about
#: once in *k* + 1 429s.
MIN_HOST_GAPS = 8
#: Fewer are enough for a host gap shorter than all of them to make an IP's run say nothing: a
#: raise for a run cannot be taken back, and the first 429s come after a few clean requests.
MIN_HOST_GAPS_RUN = 3
#: A host gap this share under the shortest answered one is refused: timers fire a
#: little early or late, and a host rate in force spaces every request alike.
HOST_GAP_MARGIN = 0.1
#: Clean first requests (no gap) from this many IPs, and none limited, at a host rate
#: within ``RATE_BELOW`` of a failure's (the rate sent, measured over seconds, lags a
#: climb), make the failure's gap the difference, unless a raise above it would give up
#: more than ``FIRST_COST`` of the host's throughput (a gap far past the spacing is less
#: likely a per-IP limit than a rate's burst).
FIRST_CLEAN = 3
FIRST_COST = 0.5
#: A remedy giving up at most this share of the host's throughput is cheap.
CHEAP = 0.05
#: A spacing raise is undone a step per spacing, a host-rate cut a step per clean
#: answer: weighed against each other, the raise counts this many times over.
SPACING_UNDO = 2.0


def spacing_held(gap: float, slack: float) -> bool:
    """Whether the spacing held a request sent *gap* after its endpoint's previous one, *slack* after
    the spacing let it go: the gap was the spacing's."""
    return slack <= max(SLACK_TOLERANCE, GAP_TOLERANCE * gap)


@dataclass
class Verdict:
    blame: str
    why: str
    ambiguous: bool = False
    #: Blamed on the IP's run (a per-IP allowance it spent), not on its last gap.
    drained: bool = False
    #: The shortest host gap answered cleanly, when the request was sent closer after the host's
    #: previous clean one: a host-wide limit without a burst answers every request that far apart.
    spaced: float | None = None
    #: When the requests went whose 429s the first requests' rule blamed on their IPs, and which this
    #: one, a first request limited at about the same moment, shows the rule had no ground for.
    unfounded: tuple[float, ...] = ()


class Attribution:
    """One host's recent answers, kept as the evidence for the next signal."""

    __slots__ = ("limited", "clean_rates", "clean_gaps", "first_clean", "first_limited", "last_ambiguous",
                 "clean_sent", "host_gaps", "host_gap_times", "host_shown_at", "first_blamed")

    def __init__(self) -> None:
        #: (time, endpoint key) of recent 429s, and (time, rate sent) of clean answers.
        self.limited: deque[tuple[float, str]] = deque()
        self.clean_rates: deque[tuple[float, float]] = deque()
        #: (time, gap) of clean answers whose gap is known.
        self.clean_gaps: deque[tuple[float, float]] = deque()
        #: (time, rate sent) of clean first requests (no gap), and when a first request was last limited.
        self.first_clean: deque[tuple[float, float]] = deque()
        self.first_limited = -math.inf
        self.last_ambiguous: tuple[float, str] | None = None
        #: When the clean answers' requests went (any IP), in order, with whether the host rate held
        #: each; and (time, gap) of the host gaps between two of them in a row that the host rate did
        #: not make (it spaces requests itself, whatever the limit), gaps increasing (the shortest first).
        self.clean_sent: list[tuple[float, bool]] = []
        self.host_gaps: deque[tuple[float, float]] = deque()
        #: When each of those gaps was seen, to count them; when a 429 last showed a host-wide limit (such
        #: a limit, or an IP gap failing as long as one answered cleanly).
        self.host_gap_times: deque[float] = deque()
        self.host_shown_at = -math.inf
        #: When the requests went whose 429s the first requests' rule blamed on their IPs' gaps, and when it
        #: did: its premise is that no first request was limited, and a 429 comes back faster than a page,
        #: so one may still be on its way.
        self.first_blamed: deque[tuple[float, float]] = deque()

    def clean(self, sent: float, now: float, window: float, gap: float = math.inf,
              granted_at: float | None = None, rate_held: bool = False) -> None:
        self.clean_rates.append((now, sent))
        if math.isfinite(gap):
            self.clean_gaps.append((now, gap))
        else:
            self.first_clean.append((now, sent))
        self._expire(now, window)
        if granted_at is not None:
            self._clean_sent(granted_at, rate_held, now)

    def _clean_sent(self, at: float, held: bool, now: float) -> None:
        """A clean answer's request went at *at* (*held*: by the host rate): the host answered the gaps to
        its neighbours (answers come back out of order, so the one after it may already be known)."""
        lst = self.clean_sent
        i = bisect_left(lst, (at,))
        pairs = [(at - lst[i - 1][0], held)] if i else []
        if i < len(lst):
            pairs.append((lst[i][0] - at, lst[i][1]))
        for gap, rate_made in pairs:
            if not rate_made:
                while self.host_gaps and self.host_gaps[-1][1] >= gap:
                    self.host_gaps.pop()
                self.host_gaps.append((now, gap))
                self.host_gap_times.append(now)
        lst.insert(i, (at, held))

    def host_gap(self, at: float | None, pending: float | None = None) -> float | None:
        """Seconds from the host's previous request answered cleanly, or still unanswered (*pending*: when
        the latest of those went; most are answered cleanly), to one that went at *at* (``None``: no
        such request known, or *at* is not)."""
        if at is None:
            return None
        i = bisect_left(self.clean_sent, (at,))
        before = max(self.clean_sent[i - 1][0] if i else -math.inf, -math.inf if pending is None else pending)
        return at - before if math.isfinite(before) else None

    def refuses(self, gap: float | None, margin: float = HOST_GAP_MARGIN, least: int = MIN_HOST_GAPS) -> bool:
        """Whether a limited request's host *gap* is shorter than any two clean requests in a row had (by
        *margin* of it), out of *least* of them at least: a host-wide limit without a burst refuses such
        a gap and answers every longer one."""
        return (gap is not None and len(self.host_gap_times) >= least
                and gap < self.host_gaps[0][1] * (1 - margin))

    def limited_elsewhere(self, at: float) -> None:
        """Another process sharing the host got a host-wide signal at *at*: for all this one
        knows, on a first request (so first requests answered cleanly here prove nothing)."""
        self.first_limited = max(self.first_limited, at)

    def _expire(self, now: float, window: float) -> None:
        for q in (self.limited, self.clean_rates, self.clean_gaps, self.first_clean, self.host_gaps):
            while q and q[0][0] < now - window:
                q.popleft()
        while self.host_gap_times and self.host_gap_times[0] < now - window:
            self.host_gap_times.popleft()
        while self.first_blamed and self.first_blamed[0][1] < now - window:
            self.first_blamed.popleft()
        del self.clean_sent[:bisect_left(self.clean_sent, (now - window,))]

    def decide(
        self, endpoint: str, gap: float, slack: float, shortest_clean: float, sent: float, now: float, window: float,
        spacing_cost: float = 0.0, rate_cost: float = 0.0, rate: float = math.inf, drained: Drained | None = None,
        granted_at: float | None = None, host_gap: float | None = None,
    ) -> Verdict:
        """The hypothesis the signal on *endpoint* supports (costs: the share of throughput each remedy gives
        up; *rate*: the host rate in force, which the rate sent over the last seconds lags behind;
        *drained*: the run the IP's 429 ended; *granted_at*: when its request went, *host_gap*: its
        :meth:`host_gap`, from the clean answers alone if not given)."""
        self._expire(now, window)
        if host_gap is None:
            host_gap = self.host_gap(granted_at)
        # Refused as a host-wide limit without a burst would (no allowance of the IP's explains it), and
        # clearly so (the host's doing, whatever else).
        run_refused, refused = self.refuses(host_gap, 0.0, MIN_HOST_GAPS_RUN), self.refuses(host_gap)
        repeats = sum(k == endpoint for _, k in self.limited)
        moment = len({k for t, k in self.limited if t >= now - MOMENT} | {endpoint})
        self.limited.append((now, endpoint))
        if not math.isfinite(gap):
            self.first_limited = now
            return Verdict(HOST, "no gap known for the endpoint", unfounded=self._unfounded(granted_at))
        held = spacing_held(gap, slack)
        if drained is not None and held and (not drained.strict or gap >= shortest_clean) and not run_refused:
            # The IP went as fast as its spacing let it, at a gap answered cleanly (on it or on another
            # IP), and then was not: an allowance it spent. The run's pace is what it allows (a host-wide
            # limit without a burst is told apart by the host's gap, above; one with a burst met this
            # way is one the pool's spacing crossed, and the same raise brings the pool back under it).
            return Verdict(PER_IP, f"gaps down to {min(drained.shortest, shortest_clean):.2f} s answered cleanly, "
                                   f"limited after {drained.clean} clean requests: a per-IP allowance spent, "
                                   f"which needs at least {drained.pace:.2f} s a request", drained=True)
        if refused and (held or gap >= shortest_clean):
            # Closer after the host's last clean request than any two clean ones in a row: the host's doing
            # when a gap as short as the IP's was answered; else the IP's gap, the shortest yet, says as
            # much, and the cheaper remedy goes first.
            answered = self.host_gaps[0][1]
            assert host_gap is not None
            host_side = (f"sent {host_gap:.2f} s after the host's last request answered cleanly or unanswered, "
                         f"closer than any two clean ones ({answered:.2f} s)")
            if gap >= shortest_clean:
                self.host_shown_at = now
                return Verdict(HOST, host_side, spaced=answered)
            verdict = self._cheaper(endpoint, repeats, now, window, spacing_cost, rate_cost,
                                    "shorter than every clean gap", host_side)
            if verdict.blame == HOST:
                verdict.spaced, self.host_shown_at = answered, now
            return verdict
        if gap >= shortest_clean:
            self.host_shown_at = now
            return Verdict(HOST, f"a {shortest_clean:.2f} s gap was answered cleanly")
        highest = max((r for _, r in self.clean_rates), default=0.0)
        at_most = min(sent, rate)
        if at_most > 0 and at_most * RATE_BELOW <= highest:
            # The host answered a clearly higher total rate cleanly within the window: a
            # host-wide cap does not explain this 429, the IP's short gap does.
            return Verdict(PER_IP, f"the host answered {highest:.2f} req/s cleanly, above the {at_most:.2f} sent")
        if not math.isfinite(shortest_clean):
            first = self._first_requests_clean(at_most, now, window)
            if first is not None and spacing_cost <= FIRST_COST:
                if granted_at is not None:
                    self.first_blamed.append((granted_at, now))
                return Verdict(PER_IP, first)
            # No clean gap to compare with: the spacing held the request or it did not. Held,
            # a raise that gives up much of the host's throughput is weighed against a
            # host-rate cut first (early in a crawl a host-wide cap hits held requests too).
            # Not held, a raise just above the gap is still tried first when it costs next to
            # nothing (a gap within the band): early in a crawl the host rate holds requests
            # to a host whose per-IP limit is above the band too.
            if not held:
                if spacing_cost > CHEAP:
                    return Verdict(HOST, "not held by its spacing")
                return self._cheaper(endpoint, repeats, now, window, spacing_cost, rate_cost,
                                     "no clean gap known yet", "not held by its spacing")
            if spacing_cost <= CHEAP:
                return Verdict(PER_IP, "held by its spacing")
            return self._cheaper(endpoint, repeats, now, window, spacing_cost, rate_cost,
                                 "held by its spacing", "no clean gap known yet")
        rate_high = sent > highest * (1 + RATE_MARGIN) and sent > 0
        time_cluster = moment >= MOMENT_ENDPOINTS
        ip_side = "shorter than every clean gap" + (f", {repeats + 1} on this endpoint" if repeats else "")
        # Held by its spacing, the gap was the spacing's; held by something else (the
        # host rate), it is only telling once enough clean gaps were seen. A raise that
        # would cost throughput needs both, and a cheap one either.
        enough = len(self.clean_gaps) >= MIN_CLEAN_GAPS
        telling = (held or enough) and (spacing_cost <= CHEAP or (held and enough))
        if not rate_high and telling:
            return Verdict(PER_IP, ip_side + (f"; {moment} endpoints within {MOMENT:g} s" if time_cluster else ""))
        host_side = f"host rate at a new high {sent:.2f} req/s" if rate_high else "not held by its spacing"
        if rate_high and time_cluster and not repeats:
            return Verdict(HOST, f"{host_side}; {moment} endpoints limited within {MOMENT:g} s")
        return self._cheaper(endpoint, repeats, now, window, spacing_cost, rate_cost, ip_side, host_side)

    def _first_requests_clean(self, sent: float, now: float, window: float) -> str | None:
        """Why the IPs' gaps explain a failure at *sent* req/s, when their first requests (no gap)
        went through cleanly at about that rate and none failed (``None``: they do not)."""
        if self.first_limited >= now - window or len(self.first_clean) < FIRST_CLEAN:
            return None
        fastest = max(r for _, r in self.first_clean)
        if sent > fastest * RATE_BELOW:
            return None
        return (f"{len(self.first_clean)} IPs' first requests answered cleanly at up to {fastest:.2f} req/s, "
                f"none limited: only a repeat failed")

    def _unfounded(self, at: float | None) -> tuple[float, ...]:
        """The requests the first requests' rule blamed on their IPs within ``MOMENT`` of a first request
        limited that went at *at*: sent together, the host refused both, and no IP's gap explains the
        first one's. Each is answered for once."""
        if at is None:
            return ()
        found = tuple(sent for sent, _ in self.first_blamed if abs(sent - at) <= MOMENT)
        if found:
            self.first_blamed = deque(e for e in self.first_blamed if e[0] not in found)
        return found

    def _cheaper(self, endpoint: str, repeats: int, now: float, window: float, spacing_cost: float,
                 rate_cost: float, ip_side: str, host_side: str) -> Verdict:
        """Both hypotheses have support: the cheaper remedy first; the same endpoint limited
        again after the host rate was tried points at the endpoint."""
        cheaper = PER_IP if spacing_cost * SPACING_UNDO <= rate_cost else HOST
        last = self.last_ambiguous
        if repeats and last is not None and now - last[0] < window and last[1] == HOST:
            cheaper = PER_IP
        self.last_ambiguous = (now, cheaper)
        return Verdict(cheaper, f"ambiguous ({ip_side} / {host_side}; costs: spacing {spacing_cost:.0%}, "
                                f"host rate {rate_cost:.0%}): probing {cheaper}", True)
