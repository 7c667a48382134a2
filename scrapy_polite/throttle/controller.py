"""One host's rate controller: samples in, limits out (the law, with its equations, is
``docs/throttle.md``). The site is modelled by one number, the rate it accepts from the pool: cut
on rate and overload signals, grown back on a CUBIC curve while in use, probed past as rarely as
a failed probe's cost allows; each IP's spacing, the host interval and the concurrency follow.

Pure: no gate, no clock of its own. :mod:`~scrapy_polite.throttle.policy` feeds it and applies
what it returns.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

from scrapy_polite.throttle.history import RESOLUTION, Answers, Granted, Level, RateHistory, Windows
from scrapy_polite.throttle.latency import LatencyWatch
from scrapy_polite.throttle.params import DEFAULT, Params
from scrapy_polite.throttle.quota import Stated
from scrapy_polite.throttle.values import CHALLENGE, OK, OVERLOAD, Bounds, Limits, Sample


@dataclass
class HostController:
    """The law for one host; see the module docstring."""

    bounds: Bounds
    params: Params = DEFAULT
    rate: float | None = None
    #: Slow start (adaptive mode, before the first signal).
    starting: bool = False
    #: CUBIC's W_max: the accepted rate at the last cut; ``k``: seconds in use to get back to it.
    peak: float = 0.0
    k: float = 0.0
    #: The rate the last cut set (where the curve starts).
    floor_rate: float = 0.0
    #: The rate the site answered cleanly before the last cut.
    answered: float = 0.0
    hold: float = 0.0
    grown: float = 0.0
    touched: float = 0.0
    cut_at: float = -math.inf
    changed_at: float = -math.inf
    paused_until: float = 0.0
    #: The last cut was made from what the site answered cleanly (not a guess of beta times the rate).
    measured: bool = False
    #: The share of answers refused when the 429s were found not to depend on the rate (``None``:
    #: they do). Signals no longer cut while it predicts them.
    independent: float | None = None
    #: The rate a chain of cuts began from (what cuts that did not help are taken back to).
    chain_from: float = 0.0
    quota: Stated = field(default_factory=Stated)
    level: Level = field(default_factory=Level)
    sent: Answers = field(init=False)
    #: The gate's count of grants to the host (shared: the whole fleet's requests).
    granted: Granted = field(init=False)
    #: When each recent clean answer's request went (window budgets count them).
    clean: deque[float] = field(default_factory=lambda: deque(maxlen=4096))
    born: float = 0.0
    first_cut: float | None = None
    #: The rate a window's budget spreads evenly (inf: no window found).
    window_rate: float = math.inf
    #: When the refusal that made the last cut said the site opens again (-inf: it did not say).
    closed_until: float = -math.inf
    closes_host: bool = False  # found closed for every IP once (a window's reset, other IPs refused)
    #: The highest rate a host rate in force was refused at.
    refused_at: float = 0.0
    #: (since, rate) of the recent rates in force, oldest first.
    history: RateHistory = field(default_factory=RateHistory)
    latency: LatencyWatch = field(init=False)
    overloads: deque[tuple[float, str]] = field(default_factory=deque)
    windows: Windows = field(init=False)

    def __post_init__(self) -> None:
        self.latency = LatencyWatch(self.params.latency_factor, self.params.latency_margin)
        self.windows = Windows()
        self.sent = Answers(self.born, self.params.lookback, self.params.min_answers)
        self.granted = Granted(self.params.lookback, self.params.min_answers)

    @classmethod
    def start(cls, bounds: Bounds, now: float, params: Params = DEFAULT) -> HostController:
        """A new host: at the configured band's rate, climbing in adaptive mode."""
        c = cls(bounds, params, touched=now, changed_at=now, born=now)
        if bounds.adaptive:
            c.rate, c.starting = min(bounds.band_rate(), bounds.max_rate()), True
        return c

    # -- samples -------------------------------------------------------------

    def observe(self, s: Sample) -> str | None:
        """Take one answer; return why the limits moved (``None``: they did not)."""
        why = self._observe(s)
        self.history.record(s.now, self.rate)
        return why

    def held(self) -> float | None:
        """What the throttle found the host takes (req/s; ``None`` before a cut): a margin under the highest
        rate a host rate in force was refused at (a first cut from none only bounds it), or the rate now."""
        if self.first_cut is None:
            return None
        return max(self.rate or 0.0, self.refused_at * (1 - self.params.margin))

    def _observe(self, s: Sample) -> str | None:
        current = s.sent_at > self.cut_at  # sent at the rate since the last cut: this level's
        self.level.answers += current
        self.sent.add(s.now, s.kind == OK)
        stated = self._stated(s) if s.quota is not None else None
        if s.kind == OK:
            return self._clean(s) or stated
        if s.kind == OVERLOAD:
            return self._overloaded(s) or stated
        self.level.refused += current
        if s.kind == CHALLENGE:
            return self._cut(s, "challenge page", depth=2, cost=1.0)
        return self._refused(s) or stated

    def adopt(self, rate: float | None, now: float, peak: float | None = None, cost: float = 0.0) -> None:
        """Another process sharing the host set *rate*, in force since *now*: continue from it. A cut
        there (a lower rate, or a *peak* met since) is this one's too, from that peak, held for its
        *cost* (a pause: the fleet's time); this one's answers are a part of its level's evidence."""
        if rate is not None and self.rate is not None and (rate < self.rate * 0.99 or peak is not None):
            peak = max(rate, peak or self.rate)
            self.peak, self.rate, self.floor_rate, self.answered, self.cut_at = peak, rate, rate, rate, now
            self.k, self.touched = self._k(peak, rate), max(self.touched, now)
            self.hold = self._hold(peak, cost)  # probes as rarely as after a cut of its own
            self.grown, self.starting, self.level, self.measured = 0.0, False, Level(), False
        elif rate != self.rate:
            self.rate = rate
        self.changed_at = now
        self.history.record(now, rate)

    def slow(self, now: float, why: str) -> str:
        """An overload the caller saw itself (no answer via several IPs): a cut, once per round trip."""
        if now - self.cut_at < self.params.lookback:
            return f"{why}: host rate cut {now - self.cut_at:.1f} s ago already"
        return self._cut(Sample(OVERLOAD, "", now, now), why, 1, 0.0)

    def limits(self) -> Limits:
        """The host's limits now."""
        rate = self.rate
        # Each IP is spaced for its share of what the site answered cleanly (or of the rate, when
        # above it): under it the host interval paces the pool, and no IP waits out a spacing drawn
        # for a cut, yet none goes faster than the site answered it.
        spaced = None if rate is None else max(rate, self.answered)
        b, p = self.bounds, self.params
        latency = self.latency.median() if b.adaptive and rate is not None else None
        return Limits(rate, b.spacing(spaced, p.jitter), b.in_flight(rate, latency, p.headroom), self.paused_until)

    # -- the law ---------------------------------------------------------------

    def _clean(self, s: Sample) -> str | None:
        self.clean.append(s.sent_at)
        watch = self.latency
        queue = watch.add(s.latency) if s.latency is not None else None
        if queue == "grows" and s.sent_at >= self.cut_at:
            at = watch.median() or 0.0
            why = self._cut(s, f"latency {at:.2f} s, baseline {watch.baseline:.2f} s", 1, 0.0)
            watch.cut(at)
            return why
        if queue == "drains":
            return None  # the queue a latency cut left at the site drains before the rate grows
        undecided = self.level.refused and self.level.answers < self.params.min_answers
        if (not s.busy or s.sent_at < self.changed_at or self.rate is None
                or (undecided and self.independent is None) or self.rate > self._usable(s.now)):
            # A refusal since the last cut holds the climb until the level has its evidence: another
            # refusal then cuts, and none says the site refuses the level rarely.
            self.touched = max(self.touched, s.now)
            return None
        if self.starting:
            return self._climb(s.now, self.rate * self.params.slow_start ** (1 / max(1, self.bounds.ips)), "slow start")
        self.grown += max(0.0, min(s.now - self.touched, 5.0))
        self.touched = s.now
        return self._climb(s.now, self._cubic(), "recovery")

    def _climb(self, now: float, new: float, why: str) -> str | None:
        assert self.rate is not None
        top = min(self.bounds.max_rate(), self.quota.binds(now) or math.inf, self.window_rate)
        if new >= top and not self.bounds.adaptive:
            self.rate = None  # the band binds again: no host rate of its own
            self.changed_at = now
            return f"{why}: back to the configured spacing"
        # A fleet's process climbs at its share of the answers, steps far apart: none past the use.
        new = min(new, top, self._usable(now) if self.bounds.shared else math.inf)
        if new <= self.rate:
            return None
        self.rate = new
        return why

    def _cubic(self) -> float:
        """CUBIC's W(t) = T + S (t - K)^3: from the rate the cut set back to T, W_max less a margin,
        at K, held there for ``hold`` seconds, then past it as fast as the cut went down
        (S = W_max (1 - beta) / K^3, CUBIC's symmetric curve)."""
        beta, k = self.params.beta, max(self.k, 1e-3)
        top = self.peak * (1 - self.params.margin)  # the rate that failed was past the limit
        t = self.grown
        if t > k:
            t = max(k, t - self.hold)
        low = min(self.floor_rate, top)
        scale = (top - low if t < k else self.peak * (1 - beta)) / k**3
        return max(low, top + scale * (t - k) ** 3)

    def _k(self, peak: float, new: float) -> float:
        """CUBIC's K, seconds in use back to *peak* from *new*: no sooner than a level's answers."""
        p = self.params
        return max((peak * (1 - p.beta) / p.cubic_c) ** (1 / 3), p.min_answers / max(new, 1e-6))

    def _hold(self, peak: float, cost: float, refusals: int = 1) -> float:
        """Seconds under the peak before probing past it: a failed probe then costs at most the
        budgets, of the pool's time (the Retry-After it idles an IP, or the host, for) and of the
        requests (the refusals it drew: one, and those the pool had sent before the cut)."""
        p = self.params
        return max(0.0, cost / p.probe_budget, refusals / (p.probe_budget * max(peak, 1e-6)) - self.k)

    def _charge(self) -> None:
        """A refusal to a request sent before the last cut: the probe that failed cost one more."""
        self.level.late += 1
        self.hold = max(self.hold, self._hold(self.peak, 0.0, 1 + self.level.late))

    def _refused(self, s: Sample) -> str | None:
        ra = s.retry_after
        window = self._window(s, ra) if ra else None
        closed = window is not None or (ra is not None and self._host_closed(s))
        self.closes_host = self.closes_host or closed
        if window is not None:
            return window
        host_wide = ra is not None and (self._host_wide(ra) or closed)
        why = self._rate_signal(s, ra, host_wide)
        if ra and host_wide and s.now + ra > self.paused_until:
            self.paused_until = max(self.paused_until, s.now + ra)
            why = "; ".join(filter(None, [why, f"Retry-After honoured by every IP: host paused {ra:.1f} s"]))
        return why

    def _host_wide(self, ra: float) -> bool:
        """Whether every IP waits out a Retry-After. IPs loaded evenly draw the same refusals from a
        per-IP limit as from a host-wide one, so which one spoke is unknown: a Retry-After of a few
        of each IP's spacings is the host's (the others would be refused as soon, and waiting costs
        each a few turns), a longer one the refused IP's alone, unless the host was found closed for
        every IP once: its closures are the host's. Not when 429s do not depend on the rate (they
        are about the URL)."""
        spacing = self.bounds.ips / (self.rate or self.bounds.band_rate())
        return self.independent is None and (self.closes_host or ra <= self.params.scope_spacings * spacing)

    def _host_closed(self, s: Sample) -> bool:
        """A request sent inside the Retry-After of the refusal that made the last cut, at the rate
        that cut set, refused: the host is closed. A rate limit the cut had met would not refuse
        it; a closure (a window, a penalty) refuses any IP, and may be prolonged by each request
        inside it."""
        at = self.history.at(s.sent_at, self.rate)
        return (self.independent is None and self.cut_at < s.sent_at < self.closed_until
                and at is not None and at <= self.floor_rate)

    def _rate_signal(self, s: Sample, ra: float | None, host_wide: bool) -> str | None:
        if s.sent_at <= self.cut_at:
            self._charge()
            return None  # sent before the last cut: already answered for
        if self.independent is not None:
            if not self.level.exceeds(self.independent, self.params.min_answers):
                return None
            # More 429s at the rate restored than the share they were found at predicts: they depend on it.
            self.independent = None
            why = self._cut(s, "rate signal", 1, s.idle)
            return f"429s more frequent at {self.history.at(s.sent_at, self.rate) or 0:.2f} req/s than when found " \
                   f"not to depend on the rate: they do; {why}"
        if ra is not None and abs(s.now + ra - self.closed_until) < RESOLUTION:
            # The site named this moment already, to the refusal that made the last cut: the same
            # closure (a penalty, a window), which says nothing of the rate since.
            return None
        at, least = self.history.at(s.sent_at, self.rate) or 0.0, self.params.min_answers
        if self.level.flat(self.params.independent_share, least, self._accepted(s.now, at)[0], at):
            self.independent = self.level.share(least)
            old, self.rate, self.changed_at = self.rate, max(self.rate or 0.0, self.chain_from), s.now
            self.peak, self.cut_at, self.level = self.rate, s.now, Level()
            return (f"429s as frequent at {old or 0:.2f} req/s as above it, and the clean rate fell with it: "
                    f"they do not depend on the rate; cuts taken back to {self.rate:.2f} req/s, "
                    "no more cuts while their share holds")
        if self.measured and self.level.answers < self.params.min_answers:
            # A level set under what the site answered cleanly needs a level's worth of evidence (a
            # rate limit refuses it rarely); one only guessed at is cut again at its first refusal.
            return None
        cost = s.idle / (1 if host_wide else max(1, self.bounds.ips))
        return self._cut(s, "rate signal", 1, cost)

    def _overloaded(self, s: Sample) -> str | None:
        p = self.params
        self.overloads.append((s.now, s.endpoint))
        while self.overloads and self.overloads[0][0] < s.now - p.overload_window:
            self.overloads.popleft()
        ips = {ep for _, ep in self.overloads}
        if s.sent_at <= self.cut_at:
            self._charge()
            return None
        if len(ips) < p.overload_ips:
            return None
        return self._cut(s, f"overload answers from {len(ips)} IPs", 1, 0.0)

    def _cut(self, s: Sample, why: str, depth: int, cost: float) -> str:
        b, p = self.bounds, self.params
        # Sent before this controller began (the host's first requests): no host rate was in force.
        at_send = None if s.sent_at < self.born else self.history.at(s.sent_at, self.rate)
        # With no host rate in force, what the band sends; with no band either, the most the pool
        # sends with one request at a time per IP: one per IP per round trip.
        in_force = at_send if at_send is not None else min(b.band_rate(), b.ips / max(s.now - s.sent_at, 1e-3))
        accepted, from_clean = self._accepted(s.now, in_force)
        # It failed at the rate it was sent at, unless the site took much less (it refused more
        # than a cut gives up) or the pool sent much less: then nearer what it answered cleanly.
        peak = in_force
        measured = accepted is not None and (from_clean or in_force > self._usable(s.now))
        if accepted is not None and measured:
            # The limit lies between what the site answered (a bound from below: irregular arrivals
            # are refused under a limit they average) and the rate it refused: halfway, in ratio,
            # and no more than a cut's worth above the first when the second is far.
            peak = min(peak, (accepted * in_force) ** 0.5, accepted / p.beta)
        # A rate measured from what the site answered is already under its limit: the cut keeps
        # the margin under it, not a cut's worth on top.
        new = max(b.min_rate(), peak * ((1 - p.margin) if measured and depth == 1 else p.beta**depth))
        old, self.peak, self.rate, self.floor_rate = self.rate, peak, new, new
        self.first_cut = s.now if self.first_cut is None else self.first_cut
        if at_send is not None:
            self.refused_at = max(self.refused_at, peak)
        # What the site answered cleanly (at most the peak): each IP is spaced for its share of it.
        self.answered = min(peak, accepted) if accepted is not None else new
        self.k = self._k(peak, new)
        # What the site answered is under its limit, and a rate never in force was no probe of
        # one: past either the curve probes without a hold.
        self.hold = 0.0 if measured or at_send is None else self._hold(peak, cost)
        self.measured = measured
        self.grown, self.touched, self.cut_at, self.changed_at, self.starting = 0.0, s.now, s.now, s.now, False
        self.closed_until = -math.inf if s.retry_after is None else s.now + s.retry_after
        self.latency.cut()
        share = self.level.share(self.params.min_answers)
        if share is None:  # too few answers since the last cut: what was known before it stands
            share = self.level.share_before
        if self.first_cut == s.now or (self.level.refused <= 1 and self.level.answers >= p.min_answers):
            # The first cut, or one after a level answered cleanly but once: where unfounded cuts begin.
            self.chain_from = in_force
        self.level = Level(share_before=share if from_clean else None, before=(accepted or 0.0, in_force))
        before = "unlimited" if old is None else f"{old:.2f}"
        return f"{why}: host rate {before} -> {new:.2f} req/s (accepted {peak:.2f}, back in {self.k:.0f} s, held {self.hold:.0f} s)"

    def _usable(self, now: float) -> float:
        """The highest rate the pool's sending keeps in use: growing a rate nobody uses proves nothing
        (TCP's congestion-window validation). Shared, this process's answers are a part: the gate counts all."""
        sent = (self.granted if self.bounds.shared else self.sent).rate(now)
        return -math.inf if sent is None else sent / 0.8

    def _accepted(self, now: float, in_force: float) -> tuple[float | None, bool]:
        """The rate the site answered cleanly over the last lookback, and whether it refused more of
        what was sent than a cut gives up (a cut then falls under what the site accepted)."""
        counted = self.sent.counts(now)
        if counted is None:
            return None, False
        sent, clean, span = counted
        if self.bounds.shared:  # what the fleet sent, the share of it this process saw answered at this
            # level (its own last answers span several of the fleet's levels)
            sent, clean, fleet = self.level.answers, self.level.answers - self.level.refused, self.granted.rate(now)
            if fleet is None or sent < self.params.min_answers:
                return None, False
            return fleet * clean / sent, clean < self.params.beta * sent
        return clean / span, clean < self.params.beta * sent

    def _window(self, s: Sample, ra: float) -> str | None:
        """A window's reset (:class:`Windows`): the host waits for it, and the budget a window
        held is spread over the next."""
        found = self.windows.stated(s.endpoint, s.now, s.now + ra)
        if found is None:
            return None
        reset, previous = found
        self.paused_until = max(self.paused_until, reset)
        why = f"window resets in {reset - s.now:.1f} s: host paused until then"
        if previous is None or self.independent is not None:
            return why
        budget = sum(1 for t in self.clean if previous <= t < reset)
        if budget:
            length = reset - previous
            # The budget is the site's statement, as a stated quota: paced to, never probed past.
            self.peak = self.rate = self.floor_rate = self.window_rate = max(self.bounds.min_rate(), budget / length)
            self.k, self.grown, self.cut_at, self.changed_at = self._k(self.peak, self.rate), 0.0, s.now, s.now
            self.hold, self.starting = 0.0, False
            why += f"; {budget} requests per {length:.1f} s spread evenly: {self.rate:.2f} req/s"
        return why

    def _stated(self, s: Sample) -> str | None:
        """The site states its quota: pace to it, never probe past it; a host-wide quota spent
        pauses the host until its reset."""
        assert s.quota is not None
        pause = self.quota.read(s.endpoint, s.quota, s.now, self.bounds.ips, self.bounds.min_rate())
        if pause is not None:
            self.paused_until = max(self.paused_until, pause)
        pace = self.quota.binds(s.now)
        if pace is None:
            return None
        # Down to it at once; up to it too, while nothing was refused since the last cut (the site
        # says what it allows, so there is nothing to probe; another limit's refusal still binds).
        up = self.rate is not None and self.rate < pace / 1.05 and not self.level.refused
        if self.rate is None or self.rate > pace * 1.05 or up:
            old, self.rate, self.changed_at = self.rate, min(pace, self.bounds.max_rate()), s.now
            self.starting = False
            scope = "the host's" if self.quota.scope.host_wide else "each IP's"
            return f"quota stated ({scope}): {old or 0:.2f} -> {self.rate:.2f} req/s"
        return None
