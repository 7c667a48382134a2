"""ThrottlePolicy: each host's model (per-IP spacing, host rate, concurrency), fed by its answers.

Sites limit in two ways, and each needs its own remedy, so each host has one
estimator per value, in its own module:

- :mod:`~scrapy_polite.throttle.spacing`: each endpoint's spacing (the
  ``POLITE_DELAY`` band) against a per-IP limit;
- :mod:`~scrapy_polite.throttle.rate`: the host rate, a minimum interval
  between any two requests to the host from the whole pool, against a
  host-wide cap;
- :mod:`~scrapy_polite.throttle.concurrency`: requests in flight, what the
  rate and latency need (adaptive mode), cut only by signals that point at it;
- :mod:`~scrapy_polite.throttle.attribution`: which of the first two a 429
  points at.

Several endpoints limited at once pause the host for the Retry-After; a host
that keeps answering 429 at concurrency 1 is parked for a growing interval.
Every change goes to *notify* once, with its evidence.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from scrapy_polite.gate.backoff import doubling
from scrapy_polite.gate.state import NO_SIGNAL, HostSignal, same
from scrapy_polite.pool.host_memory import HostMemory
from scrapy_polite.throttle.attribution import (
    HOST,
    PER_IP,
    Attribution,
    spacing_held,
)
from scrapy_polite.throttle.concurrency import ConcurrencyModel
from scrapy_polite.throttle.drain import IpRuns
from scrapy_polite.throttle.rate import KEEP, STEP, Cut, RateSearch, Signal
from scrapy_polite.throttle.spacing import MARGIN, TAKE_BACK, Raise, SpacingEstimator
from scrapy_polite.throttle.traffic import Traffic

if TYPE_CHECKING:
    from scrapy_polite.gate.base import Gate
    from scrapy_polite.gate.state import HostState
    from scrapy_polite.pool.endpoints import Endpoint
    from scrapy_polite.settings.config import PoliteConfig

logger = logging.getLogger(__name__)

#: Spacing never grows past this multiple of ``POLITE_DELAY``'s upper end.
DELAY_CEILING = 4.0
#: A host interval below this is dropped: the other limits bind first.
MIN_INTERVAL = 0.02
#: A challenge page cuts the host rate by this factor (a 429 by a search step).
CHALLENGE_FACTOR = 0.5
#: What a host-rate step down gives up of the host's throughput.
RATE_STEP_COST = 1 - 1 / (1 + STEP)
#: Adaptive mode narrows the spacing under a host rate while the pool at its spacing sends less
#: than this multiple of the rate.
POOL_HEADROOM = 1.5
#: A host signal read back from a shared state (``POLITE_STATE``) within this many seconds of one
#: this process shared is its own: converted to this process's clock, the two are that close.
OWN_SIGNAL = 0.5


@dataclass(slots=True)
class _HostPolicy:
    #: Last clean-window step (concurrency, spacing restored toward POLITE_DELAY).
    last_change: float
    last_signal: float = -math.inf
    #: When this process last shared a host-wide signal (``Gate.signal_host``): read back
    #: from a shared state, it is this process's own, already answered for.
    host_signalled: float = -math.inf
    #: Host-blamed signals within the pause window: (time, endpoint key).
    recent: deque[tuple[float, str]] = field(default_factory=deque)
    parks: int = 0
    spacing: SpacingEstimator = field(default_factory=SpacingEstimator)
    rate: RateSearch = field(default_factory=RateSearch)
    traffic: Traffic = field(default_factory=Traffic)
    concurrency: ConcurrencyModel = field(default_factory=ConcurrencyModel)
    attribution: Attribution = field(default_factory=Attribution)
    runs: IpRuns = field(default_factory=IpRuns)
    #: The last host-rate cuts, oldest first, kept to be taken back (``ThrottlePolicy._take_back_cuts``).
    cuts: list[Cut] = field(default_factory=list)
    #: What moved concurrency in the decision being made: "cut" (a signal that points at
    #: concurrency), "fit" (rate x latency), "clean window"; the event line says which.
    concurrency_cause: str | None = None

    @property
    def last_decrease(self) -> float:
        return self.concurrency.last_decrease


#: What survives a host's eviction from the throttle: the searches' findings and
#: when concurrency last stepped down, so a host seen again is not probed from scratch
#: (nor its steady limit re-probed on the first hold: the probes that met it are kept).
_KEPT = (("concurrency", "last_decrease"), ("", "last_signal"), ("concurrency", "floor_hits"), ("", "parks"),
         ("rate", "good"), ("rate", "bad"), ("rate", "bad_found"), ("rate.ceiling", "level"),
         ("rate.ceiling", "peak"), ("rate.ceiling", "confirmed"), ("rate.ceiling", "peak_confirmed"),
         ("spacing", "bad_gap"), ("spacing", "confirmed"))


_kept: Callable[[_HostPolicy], tuple[Any, ...]] = attrgetter(
    *(f"{part}.{name}" if part else name for part, name in _KEPT))


_NOTHING_KEPT = _kept(_HostPolicy(last_change=0.0))


def compact(p: _HostPolicy) -> tuple[Any, ...] | None:
    """*p*'s findings as a tuple, or None when it learned nothing worth keeping."""
    kept = _kept(p)
    return None if kept == _NOTHING_KEPT else kept


def restore(p: _HostPolicy, kept: tuple[Any, ...]) -> None:
    for (part, name), value in zip(_KEPT, kept):
        setattr(attrgetter(part)(p) if part else p, name, value)


class ThrottlePolicy:
    """The decisions, free of Scrapy, so they can be tested on their own.

    ``gap`` (seconds since the answering request's endpoint last sent to the
    host), ``slack`` (how long of that its spacing had already let it go) and
    ``granted_at`` (when the gate let it go) come from the
    :class:`~scrapy_polite.gate.local.Lease`; without them an answer counts as sent
    now, after a long gap, and a signal is blamed on the host.
    """

    def __init__(
        self,
        config: PoliteConfig,
        gate: Gate,
        clock: Callable[[], float] = time.monotonic,
        notify: Callable[[str, dict[str, Any], dict[str, Any], str, dict[str, Any]], None] | None = None,
    ) -> None:
        self.config = config
        self.gate = gate
        self.clock = clock
        self.notify = notify or (lambda *a: None)
        self._hosts: dict[str, _HostPolicy] = {}
        self._dropped = 0
        #: Findings of hosts the gate evicted, bounded as the gate's (POLITE_HOST_MEMORY).
        self.memory: HostMemory[tuple[Any, ...]] = HostMemory(config.host_memory, config.state_pin_ttl)
        gate.on_host_evicted(self._evicted)

    def _evicted(self, host: str) -> None:
        """The gate dropped *host*: drop its search state too, keeping its findings."""
        p = self._hosts.pop(host, None)
        kept = compact(p) if p is not None else None
        if kept is not None:
            self.memory.remember(host, kept, self.clock())
        self._dropped += 1
        if self._dropped > max(1024, len(self._hosts)):  # a dict never shrinks: rebuild it
            self._dropped = 0
            self._hosts = dict(self._hosts)
            self.memory.compact()

    # -- answers ------------------------------------------------------------

    def rate_limited(
        self,
        host: str,
        endpoint: Endpoint,
        delay: float,
        status: int = 429,
        *,
        gap: float = math.inf,
        slack: float = math.inf,
        granted_at: float | None = None,
    ) -> None:
        """A rate signal from *host* via *endpoint*, with its cooldown *delay*."""
        cfg, gate, now = self.config, self.gate, self.clock()
        p, old, sent = self._signalled(host, endpoint, delay, now)
        sent_at = now if granted_at is None else granted_at
        host_sent = self._host_sent(granted_at)
        # The requests a band too narrow sent before its raise come back limited together, on several
        # IPs within a moment: weighed again, they would look like a host-wide limit (unless the IP's
        # run, held by its spacing, says its allowance needs more than the raise gave).
        band, window = gate.host(host).delay, cfg.recovery_window
        shortest_clean = p.spacing.shortest_clean(now, window)
        drained = p.runs.limited(endpoint.key, gap, band[1], shortest_clean)
        short = (drained is None or drained.strict or not spacing_held(gap, slack)
                 or drained.pace * (1 + MARGIN) <= band[0])
        if short and p.spacing.answered(gap, sent_at, band):
            logger.debug("scrapy-polite: %s %s via %s answered for by the spacing raised since it was sent "
                         "(gap %.2f s, spacing now %.2f-%.2f s)", host, status, endpoint.label, gap, *band)
            return
        # What explaining the 429 by the IP's gap would cost: the spacing a probe of it raises to.
        spacing_cost, rate_cost = self._costs(host, sent, p.spacing.target(gap, now, window, reach=False, back=cfg.adaptive))
        interval = gate.host(host).interval
        p.attribution.limited_elsewhere(self._foreign_signal(p, host).at)
        # A site refuses before its upstream answers: the pages asked for just before this may be unanswered.
        host_gap = p.attribution.host_gap(host_sent, None if host_sent is None else gate.granted_before(host, host_sent))
        verdict = p.attribution.decide(
            endpoint.key, gap, slack, shortest_clean, sent, now, window,
            spacing_cost, rate_cost, 1 / interval if interval > 0 else math.inf, drained, host_sent, host_gap,
        )
        # With no gap known (the endpoint's first request to the host) the slack measured nothing.
        evidence: dict[str, Any] = {
            "status": status, "retry_after": round(delay, 3), "gap": _finite(gap),
            "slack": _finite(slack) if math.isfinite(gap) else None,
            "blame": verdict.blame, "why": verdict.why, "sent": round(sent, 3), "endpoint": endpoint.label,
        }
        changes: list[str] = []
        if verdict.blame == PER_IP and verdict.drained:
            assert drained is not None
            evidence["run_gap"] = round(drained.pace, 4)
            # A run that says no more than the spacing in force gives was sent at it: that spacing failed.
            changes += self._raise_spacing(p, host, max(drained.pace, band[0]), now, probe=True, run=True,
                                           sent_at=host_sent, host_gap=host_gap, failed=gap)
        elif verdict.blame == PER_IP:
            changes += self._raise_spacing(p, host, gap, now, probe=verdict.ambiguous, sent_at=host_sent,
                                           host_gap=host_gap)
            if changes and not verdict.ambiguous:
                changes += self._take_back_cuts(p, host, now)
        else:
            if verdict.spaced is not None:
                changes += self._take_back_raise(p, host) or self._take_back_outweighed(p, host)
            if verdict.unfounded:
                changes += self._take_back(p, host, lambda r: r.sent_at in verdict.unfounded,
                                           "a first request was limited with the one that raised it")
            changes += self._host_signal(p, host, endpoint, delay, sent, sent_at, now, status, verdict.spaced, gap)
            if not cfg.adaptive or gate.host(host).limit <= 1:
                # Without adaptive mode a host-wide signal halves concurrency (once per
                # recovery window: a burst of 429s is one signal); a per-IP one never does.
                changes += self._cut_concurrency(p, host, now)
        changes += self._fit_concurrency(p, host)
        changes += self._maybe_park(p, host, status, evidence)
        if changes:
            self._report(p, host, old, "; ".join([f"{status} via {endpoint.label}", *changes]), evidence)

    def on_challenge(self, host: str, endpoint: Endpoint, delay: float, *, granted_at: float | None = None) -> None:
        """A challenge page from *host* via *endpoint*: a stronger slow-down than a 429.

        The endpoint cools for *delay*, the host rate halves (from what was sent
        when it had none) and concurrency is cut, in every mode.
        """
        gate, now = self.gate, self.clock()
        p, old, sent = self._signalled(host, endpoint, delay, now)
        h = gate.host(host)
        current = 1 / h.interval if h.interval > 0 else sent
        changes: list[str] = []
        if current > 0:
            p.rate.bad, p.rate.bad_found, p.rate.good = current, True, None
            p.rate.met = (current, True)
            changes.append(self._set_rate(p, host, current * CHALLENGE_FACTOR, now))
        self._share_signal(p, host, now)
        changes += self._cut_concurrency(p, host, now)
        evidence = {"status": "challenge", "retry_after": round(delay, 3), "blame": HOST,
                    "why": "challenge page", "sent": round(sent, 3), "endpoint": endpoint.label,
                    "gap": None, "slack": None}
        changes += self._maybe_park(p, host, "challenge", evidence)
        if changes:
            self._report(p, host, old, "; ".join([f"challenge via {endpoint.label}", *changes]), evidence)

    def ok(self, host: str, status: int, *, gap: float = math.inf, granted_at: float | None = None,
           rate_held: bool = True, endpoint: str | None = None) -> None:
        """A clean answer from *host* (via the endpoint keyed *endpoint*): a step of each search, and
        after a clean window, of concurrency (*rate_held*: the host rate held its request, see
        ``Lease.rate_held``)."""
        cfg, now = self.config, self.clock()
        p = self._policy(host)
        old = self._snapshot(host)
        sent_at = now if granted_at is None else granted_at
        window = cfg.recovery_window
        p.spacing.clean(gap, now, window)
        if endpoint is not None:
            p.runs.clean(endpoint, gap, self.gate.host(host).delay[1])
        p.traffic.answer(True, now)
        sent = p.traffic.sent_rate(self.gate.host(host).grants, now)
        p.attribution.clean(sent, now, window, gap, self._host_sent(granted_at), rate_held)
        if granted_at is not None:
            p.concurrency.observe(now - granted_at)
        changes: list[str] = []
        if p.spacing.raised_for and now - p.attribution.host_shown_at < window:
            changes += self._take_back_raise(p, host)
        if p.spacing.raised_for and not p.rate.starting:
            changes += self._take_back_under_rate(p, host)
        self._follow_fleet(p, host, now)
        if sent_at > p.rate.changed:
            changes += self._rate_step(p, host, now, rate_held)
        if cfg.adaptive and math.isfinite(gap) and sent_at - gap >= p.spacing.changed and self._spacing_binds(p, host):
            # A step per answer whose whole gap was drawn from the current band (one
            # per spacing, as TCP grows once per round trip).
            changes += self._narrow_spacing(p, host, now)
        if now - p.last_change >= window and now - p.last_signal >= window:
            changes += self._clean_window(p, host, now)
        changes += self._fit_concurrency(p, host)
        if changes:
            self._report(p, host, old, "; ".join(changes), {"status": status, "gap": _finite(gap)})

    def unanswered(self, host: str, park: bool) -> str:
        """Several endpoints got no answer from *host*: slow it down, or park it.

        Slowing is one concurrency decrease per recovery window (as for a burst of
        429s); a host that answered nothing since it was last blamed is parked for
        the doubling ``POLITE_PARK_TIME``. Returns what changed.
        """
        gate, now = self.gate, self.clock()
        p = self._policy(host)
        old = self._snapshot(host)
        p.last_change = now  # no clean-window step back up right after
        changes: list[str] = []
        if park:
            seconds = self._park(p, host)
            changes.append(f"parked {seconds:.0f} s (park #{p.parks})")
        elif gate.host(host).limit > 1:
            changes += self._cut_concurrency(p, host, now)
        if changes:
            self._report(p, host, old, "; ".join(["no answer via several endpoints", *changes]), {})
        return "; ".join(changes)

    # -- bookkeeping ----------------------------------------------------------

    def _policy(self, host: str) -> _HostPolicy:
        p = self._hosts.get(host)
        if p is None:
            now = self.clock()
            p = self._hosts[host] = _HostPolicy(last_change=now)
            kept = self.memory.recall(host, now)
            if kept is not None:
                restore(p, kept)
            h = self.gate.host(host)
            p.traffic.sent_rate(h.grants, now)  # the first window starts here
            cfg, limits = self.config, self.config.host_limits(host)
            # Values another process sharing the host set: this one's answers so far were at older ones.
            p.spacing.seen = h.delay
            if not same(h.delay, limits.delay):
                p.spacing.changed = min(now, h.delay_since)
            if h.interval > 0:
                p.rate.seen, p.rate.changed = 1 / h.interval, min(now, h.interval_since)
            if cfg.adaptive and h.interval <= 0 and limits.delay[0] > 0:
                # Slow start: a new host begins at its concurrency at the shortest
                # spacing, and climbs from there while its answers stay clean.
                before = self._snapshot(host)
                reason = self._set_rate(p, host, limits.concurrency / limits.delay[0], now)
                self._report(p, host, before, f"slow start: {reason}", {})
        return p

    def _signalled(self, host: str, endpoint: Endpoint, delay: float, now: float) -> tuple[_HostPolicy, dict[str, Any], float]:
        """What every rate signal does first: the endpoint cools, the answer counts as failed.

        Returns the host's model, its values before the signal and the rate sent.
        """
        p = self._policy(host)
        old = self._snapshot(host)
        self._follow_fleet(p, host, now)
        p.last_signal = now
        sent = p.traffic.sent_rate(self.gate.host(host).grants, now)
        p.traffic.answer(False, now)
        self.gate.cool_endpoint(endpoint.key, host, delay)
        return p, old, sent

    def _report(self, p: _HostPolicy, host: str, old: dict[str, Any], reason: str, evidence: dict[str, Any]) -> None:
        """Hand one decision to *notify*, with what moved concurrency if anything did."""
        if p.concurrency_cause is not None:
            evidence["concurrency"] = p.concurrency_cause
            p.concurrency_cause = None
        new = self._snapshot(host)
        if new["interval"] != old["interval"]:
            limit = p.rate.explain(self.config.recovery_window, self.config.adaptive)
            if limit is not None:
                evidence["host_limit"] = limit
        self.notify(host, old, new, reason, evidence)

    def _snapshot(self, host: str) -> dict[str, Any]:
        h = self.gate.host(host)
        return {"concurrency": h.limit, "delay": h.delay, "interval": h.interval, "paused_until": h.paused_until}

    def _host_sent(self, granted_at: float | None) -> float | None:
        """When a request went, for the host's gaps between requests (``None`` in a fleet: this process
        sees only its own, and the gaps between them are not the host's)."""
        return None if self.gate.shared else granted_at

    def _costs(self, host: str, sent: float, spacing: float) -> tuple[float, float]:
        """The share of the host's throughput raising the spacing to *spacing* and a host-rate cut would give up."""
        h = self.gate.host(host)
        pool = self._pool_rate(h)
        rate = 1 / h.interval if h.interval > 0 else max(sent, 1e-9)
        now_rate = min(pool, rate)
        if not math.isfinite(now_rate) or now_rate <= 0 or not math.isfinite(spacing):
            return 0.0, 0.0
        mean = max(sum(h.delay) / 2, h.min_delay, 1e-9)
        raised = pool * min(1.0, mean / max(spacing, 1e-9))
        # A host-rate step that binds: from the rate in effect (a host rate above what the pool
        # sends would cost nothing to cut, and change nothing).
        return max(0.0, 1 - min(raised, rate) / now_rate), RATE_STEP_COST

    # -- spacing (per-IP limits) ------------------------------------------------

    def _take_back_raise(self, p: _HostPolicy, host: str) -> list[str]:
        """The last spacing raises go when their 429s came at host gaps a host-wide limit without a burst
        refuses, as ``MIN_HOST_GAPS`` host gaps between clean requests now show (the first 429s of a
        crawl come before any host gap is known). Checked at each host-wide signal that shows such a
        limit, and, within a window of any 429 that showed a host-wide limit, at each clean answer: the
        host gaps come in slowly once a host rate is set (the gaps it makes say nothing), and meanwhile
        a raise that stays bounds the narrowing, under the host's limit."""
        return self._take_back(p, host, lambda r: p.attribution.refuses(r.host_gap),
                               "the 429s that raised it came at host gaps the host refuses")

    def _take_back_under_rate(self, p: _HostPolicy, host: str) -> list[str]:
        """The last spacing raises made before the host's own limit was found go once the host rate in
        force is above what the pool sends at the spacing: their 429s may have been that limit's (a
        crawl's first ones come before either limit is known), and a raise that stays then holds the
        pool under the host's rate with nothing to show it wrong (no 429 comes while the spacing keeps
        the pool under both). A per-IP limit meets the narrowing again, and that raise stays."""
        h = self.gate.host(host)
        if h.interval <= 0 or self._pool_rate(h) * h.interval >= 1:
            return []
        return self._take_back(p, host, lambda r: not r.host_known,
                               "raised before the host's own limit was found, and the pool's spacing keeps it "
                               "under the host rate")

    def _take_back_cuts(self, p: _HostPolicy, host: str, now: float) -> list[str]:
        """The last host-rate cuts whose 429s came within a window, at IP gaps the spacing just raised
        keeps apart, go: the per-IP limit explains them (a crawl's first 429s, before the spacing finds
        its limit, often look host-wide: several IPs limited at once while the rate climbs). A cut that
        stays holds the host under a limit it does not have, the ceiling it set for seconds. The search
        goes back to where it stood before the first of them."""
        low, window = self.gate.host(host).delay[0], self.config.recovery_window
        taken: Cut | None = None
        while p.cuts and p.cuts[-1].gap < low and now - p.cuts[-1].at < window:
            taken = p.cuts.pop()
        if taken is None:
            return []
        p.rate = taken.search
        change = self._set_rate(p, host, taken.rate, now)
        return [f"{change}: the 429s that cut it came at IP gaps the spacing now keeps apart"]

    def _take_back_outweighed(self, p: _HostPolicy, host: str) -> list[str]:
        """The last spacing raise goes after ``OUTWEIGHED`` host-wide signals since, each at a host gap
        a host-wide limit without a burst refuses (``SpacingEstimator.outweighed``)."""
        return self._set_back(p, host, p.spacing.outweighed(),
                              "host-wide signals since it showed a limit that refuses host gaps")

    def _take_back(self, p: _HostPolicy, host: str, hosts: Callable[[Raise], bool], why: str) -> list[str]:
        """The last spacing raises whose requests *hosts* says the host refused, not their IPs, go."""
        return self._set_back(p, host, p.spacing.taken_back(hosts), why)

    def _set_back(self, p: _HostPolicy, host: str, band: tuple[float, float] | None, why: str) -> list[str]:
        """The band from before raises taken back, unless the band in force is already under it."""
        current = self.gate.host(host).delay
        if band is None or band[0] >= current[0]:
            return []
        self._set_delay(p, host, band)
        return [f"spacing back: {why}"]

    def _raise_spacing(self, p: _HostPolicy, host: str, gap: float, now: float, probe: bool = False,
                       run: bool = False, sent_at: float | None = None, host_gap: float | None = None,
                       failed: float | None = None) -> list[str]:
        """Put the spacing band just above *gap*, which was too short for the site (*probe*: an
        ambiguous signal, weighed at a raise to a clean gap near it or just above it, gets no more;
        *run*: *gap* is the seconds per request an IP's run needed, see :mod:`~scrapy_polite.throttle.drain`)."""
        cfg = self.config
        ceiling = DELAY_CEILING * cfg.host_limits(host).delay[1]
        band = p.spacing.raised(gap, self.gate.host(host).delay, ceiling, cfg.adaptive, now, cfg.recovery_window,
                                reach=not probe, sent_at=sent_at, host_gap=host_gap,
                                host_known=not p.rate.starting, failed=failed)
        if band is None:
            return []
        self._set_delay(p, host, band)
        if run:
            return [f"spacing raised above {gap:.2f} s a request, the least the IP's run and the spacing that "
                    "failed leave its allowance"]
        return [f"spacing raised above the {gap:.2f} s gap that drew it"]

    def _set_delay(self, p: _HostPolicy, host: str, band: tuple[float, float]) -> None:
        self.gate.set_host_delay(host, band)
        p.spacing.seen = band

    def _spacing_floor(self, p: _HostPolicy, host: str) -> float:
        cfg, low = self.config, self.config.host_limits(host).delay[0]
        return p.spacing.floor(min(cfg.delay_floor, low) if cfg.adaptive else low)

    def _spacing_binds(self, p: _HostPolicy, host: str) -> bool:
        """Whether narrower spacing would send more: the host has no rate of its own, its rate is
        still in slow start (both searches start at once), or the pool sends too little over the
        rate to keep it busy (each IP waits a random spacing, so a pool just above the rate leaves
        gaps in it)."""
        h = self.gate.host(host)
        return h.interval <= 0 or p.rate.starting or self._pool_rate(h) * h.interval < POOL_HEADROOM

    def _narrow_spacing(self, p: _HostPolicy, host: str, now: float) -> list[str]:
        """Adaptive mode: one step below the current spacing, while it is what limits the pool."""
        band = p.spacing.narrowed(self.gate.host(host).delay, self._spacing_floor(p, host), now,
                                  self.config.recovery_window)
        if band is None:
            return []
        self._set_delay(p, host, band)
        return ["clean answer: spacing narrowed"]

    # -- host rate (host-wide caps) ------------------------------------------

    def _host_signal(
        self, p: _HostPolicy, host: str, endpoint: Endpoint, delay: float, sent: float, sent_at: float, now: float,
        status: int, spaced: float | None = None, gap: float = math.inf,
    ) -> list[str]:
        """A signal not explained by the endpoint's spacing: the host's total rate."""
        cfg, gate = self.config, self.gate
        h = gate.host(host)
        changes: list[str] = []
        p.recent.append((now, endpoint.key))
        while p.recent and p.recent[0][0] < now - cfg.host_pause_window:
            p.recent.popleft()
        distinct = len({k for _, k in p.recent})
        wide = distinct >= cfg.host_pause_endpoints
        rate: list[str] = []
        if sent_at >= p.rate.cut:  # else sent at a rate cut since: already answered for
            # The rate in effect: a host rate above what the pool sends at its spacing binds nothing.
            rate_in_force = min(1 / h.interval, self._pool_rate(h)) if h.interval > 0 else None
            signal = Signal(rate_in_force, sent, wide, cfg.backoff_factor, p.traffic.accepted(sent, rate_in_force),
                            spaced)
            # Kept to be taken back, should a per-IP limit explain it (not with a shared state).
            before = p.rate.copy() if math.isfinite(gap) and not gate.shared else None
            new = p.rate.limited(signal, now)
            if new is not KEEP:
                if before is not None:
                    p.cuts = [*p.cuts[1 - TAKE_BACK:], Cut(now, gap, 1 / h.interval if h.interval > 0 else None, before)]
                rate.append(self._set_rate(p, host, new, now))  # type: ignore[arg-type]
        else:
            logger.debug("scrapy-polite: %s %s via %s answered for by the host rate cut since it was sent "
                         "(host rate now %s)", host, status, endpoint.label, _rate(h.interval))
        self._share_signal(p, host, now)
        # In adaptive mode a host rate in force (set just now if none was) answers for a
        # host-wide limit: the rate search steps it down, a pause on top only costs pages.
        if wide and h.paused_until < now and not (cfg.adaptive and h.interval > 0):
            gate.pause_host(host, delay)
            p.recent.clear()
            changes.append(
                f"{distinct} endpoints rate-limited within {cfg.host_pause_window:g} s: host-wide pause {delay:.1f} s"
            )
        return changes + rate

    def _share_signal(self, p: _HostPolicy, host: str, now: float) -> None:
        """Tell the processes sharing *host* of a host-wide signal, with the rate it met (once the
        rate search has weighed it): they hold under it."""
        failed, found = p.rate.met or (None, False)
        self.gate.signal_host(host, failed, found)
        p.host_signalled = now

    def _foreign_signal(self, p: _HostPolicy, host: str) -> HostSignal:
        """Another process's last host-wide signal from *host* (``NO_SIGNAL``: none): one read back
        from the shared state within ``OWN_SIGNAL`` of this process's own is its own."""
        last = self.gate.last_signal(host)
        return last if last.at > p.host_signalled + OWN_SIGNAL else NO_SIGNAL

    def _follow_fleet(self, p: _HostPolicy, host: str, now: float) -> None:
        """Take a host-rate or spacing change, or a failure, another process sharing the host met as this policy's own."""
        h = self.gate.host(host)
        p.rate.follow(1 / h.interval if h.interval > 0 else None, min(now, h.interval_since))
        p.spacing.follow(h.delay, min(now, h.delay_since))
        signal = self._foreign_signal(p, host)
        if signal.failed is not None:
            p.rate.learn(signal.failed, signal.found, min(now, signal.at))

    def _rate_step(self, p: _HostPolicy, host: str, now: float, held: bool = True) -> list[str]:
        """A clean answer sent at the current host rate: climb, or hold below the last failure."""
        h = self.gate.host(host)
        if h.interval <= 0:
            return []
        window = self.config.recovery_window
        fast = self.config.adaptive
        signal = self._foreign_signal(p, host)
        unknown = signal.at if signal.failed is None else -math.inf  # a known rate that failed is learnt
        new = p.rate.clean(1 / h.interval, now, window, self._pool_rate(h), unknown, fast, held)
        if new is KEEP:
            return []
        return [self._set_rate(p, host, new, now)]  # type: ignore[arg-type]

    def _pool_rate(self, h: HostState) -> float:
        """Requests per second the pool can send to a host at its current spacing."""
        lo, hi = h.delay
        mean = max((lo + hi) / 2, h.min_delay)
        return self._slots() / mean if mean > 0 else math.inf

    def _slots(self) -> int:
        """Requests the pool can have in flight to one host at once."""
        return len(self.gate.endpoints) * self.gate.endpoint_concurrency

    def _set_rate(self, p: _HostPolicy, host: str, rate: float | None, now: float) -> str:
        """Set the host rate (``None``: none) and return what changed."""
        old = self.gate.host(host).interval
        longest = DELAY_CEILING * max(self.config.host_limits(host).delay[1], 1.0)
        interval = 0.0 if rate is None else min(1 / rate, longest) if rate > 0 else longest
        if interval < MIN_INTERVAL:
            interval = 0.0
        self.gate.set_host_interval(host, interval)
        # From the moment the gate has it (a shared gate dates a grant read before then earlier).
        p.rate.changed = max(now, self.clock())
        if interval > old if old > 0 else interval > 0:
            p.rate.cut = p.rate.changed  # slower than before: signals sent until now are answered for
        p.rate.seen = 1 / interval if interval > 0 else None
        return f"host rate {_rate(old)} -> {_rate(interval)}"

    # -- concurrency -------------------------------------------------------------

    def _cut_concurrency(self, p: _HostPolicy, host: str, now: float) -> list[str]:
        cfg, h = self.config, self.gate.host(host)
        before = h.limit
        new = p.concurrency.cut(h.limit, cfg.backoff_factor, now, cfg.recovery_window)
        p.last_change = now if new is not None or before <= 1 else p.last_change
        if new is None:
            return []
        self.gate.set_host_limit(host, new)
        p.concurrency_cause = "cut"
        return [f"concurrency {before} -> {new}"]

    def _fit_concurrency(self, p: _HostPolicy, host: str) -> list[str]:
        """Adaptive mode: concurrency follows the rate the host can run at times its latency."""
        cfg, h = self.config, self.gate.host(host)
        if not cfg.adaptive:
            return []
        limits = cfg.host_limits(host)
        pool = self._pool_rate(h)
        slots = self._slots()
        if 0 < pool * h.interval < 1:
            rate = 1 / h.interval  # the host rate binds: it spaces the host's requests evenly
        else:
            # The spacing binds: endpoints waiting out one band fall due together, spread over its
            # jitter (a narrow band keeps the pool in step), and each one held back by concurrency
            # waits a latency on top of its spacing.
            spread = max(h.delay[1] - h.delay[0], p.concurrency.latency or 0.0, 1e-3)
            rate = max(pool, slots / spread)
        high = max(limits.concurrency, min(limits.concurrency_max, slots))
        new = p.concurrency.needed(rate, limits.concurrency, high, h.limit)
        if new == h.limit:
            return []
        before = h.limit
        self.gate.set_host_limit(host, new)
        p.concurrency_cause = p.concurrency_cause or "fit"
        lat = p.concurrency.latency
        return [f"concurrency {before} -> {new} ({rate:.2f} req/s x {lat or 0:.2f} s latency)"]

    def _park(self, p: _HostPolicy, host: str) -> float:
        """Park *host* for the next of its doubling ``POLITE_PARK_TIME`` intervals; returns the seconds."""
        p.parks += 1
        low, high = self.config.park_time
        seconds = doubling(low, p.parks - 1, high)
        self.gate.pause_host(host, seconds)
        return seconds

    def _maybe_park(self, p: _HostPolicy, host: str, status: int | str, evidence: dict[str, Any]) -> list[str]:
        cfg = self.config
        if p.concurrency.floor_hits < cfg.park_after:
            return []
        p.concurrency.floor_hits = 0
        park = self._park(p, host)
        evidence["park"] = p.parks
        return [f"keeps answering {status} at concurrency 1: parked {park:.0f} s (park #{p.parks})"]

    # -- clean windows ----------------------------------------------------------

    def _clean_window(self, p: _HostPolicy, host: str, now: float) -> list[str]:
        """A recovery window without a signal: +1 concurrency, spacing back toward POLITE_DELAY."""
        cfg, h = self.config, self.gate.host(host)
        base = cfg.host_limits(host)
        p.last_change = now
        p.spacing.decay()
        changes: list[str] = []
        new = p.concurrency.clean_window(h.limit, base.concurrency_max)
        if new is not None and not cfg.adaptive:
            self.gate.set_host_limit(host, new)
            p.concurrency_cause = "clean window"
            changes.append("clean window: +1 concurrency")
        if not cfg.adaptive:
            band = p.spacing.restored(h.delay, base.delay, self._spacing_floor(p, host))
            if band is not None:
                self._set_delay(p, host, band)
                changes.append("clean window: spacing " + ("restored" if band == base.delay else "narrowed"))
        return changes


def _rate(interval: float) -> str:
    return f"{1 / interval:.2f} req/s" if interval > 0 else "unlimited"


def _finite(value: float) -> float | None:
    """*value* rounded for a log or a JSON line; ``None`` for "never" (an infinite gap)."""
    return round(value, 4) if math.isfinite(value) else None


def throttle_events(
    old: dict[str, Any], new: dict[str, Any], evidence: dict[str, Any], now: float
) -> list[dict[str, Any]]:
    """What one throttle decision changed, one ``{"change", "from", "to"}`` per value.

    ``concurrency`` (with its ``cause`` where the policy named one: ``cut``,
    ``fit`` or ``clean window``), ``spacing`` (the delay band, seconds), ``host_rate``
    (req/s, ``None``: unlimited), and ``pause`` or ``park`` (seconds the host
    is held from *now*, monotonic like the snapshots' ``paused_until``).
    """
    events: list[dict[str, Any]] = []
    if old["concurrency"] != new["concurrency"]:
        event = {"change": "concurrency", "from": old["concurrency"], "to": new["concurrency"]}
        if "concurrency" in evidence:
            event["cause"] = evidence["concurrency"]
        events.append(event)
    if tuple(old["delay"]) != tuple(new["delay"]):
        events.append({"change": "spacing", "from": _band(old["delay"]), "to": _band(new["delay"])})
    if old["interval"] != new["interval"]:
        events.append({"change": "host_rate", "from": _req_s(old["interval"]), "to": _req_s(new["interval"])})
    if new["paused_until"] > max(old["paused_until"], now):
        events.append({
            "change": "park" if "park" in evidence else "pause",
            "from": round(max(0.0, old["paused_until"] - now), 3),
            "to": round(new["paused_until"] - now, 3),
        })
    return events


def _band(delay: tuple[float, float]) -> list[float]:
    return [round(delay[0], 4), round(delay[1], 4)]


def _req_s(interval: float) -> float | None:
    return round(1 / interval, 4) if interval > 0 else None


def evidence_text(evidence: dict[str, Any]) -> str:
    """The evidence of a change for the log line: a rate signal's blame, gap, slack and Retry-After,
    and what the host-rate search knows of the host's limit when the host rate moved."""

    def sec(v: float | None) -> str:
        return "never" if v is None else f"{v:.2f} s"

    text = ""
    if "blame" in evidence:
        why = f" ({evidence['why']})" if evidence.get("why") else ""
        slack = f", slack {sec(evidence['slack'])}" if evidence["gap"] is not None else ""
        text = (f"; blamed on a {evidence['blame']} limit{why}: gap {sec(evidence['gap'])}{slack}, "
                f"Retry-After {evidence['retry_after']:g} s")
    limit = evidence.get("host_limit")
    if limit:
        if limit["ceiling"] is not None:
            fell = f", down from {limit['fell_from']:.2f}" if limit["fell_from"] is not None else ""
            text += f"; host limit met at {limit['ceiling']:.2f} req/s{fell}"
        if limit["holds_below"] is not None:
            text += f"; holds below {limit['holds_below']:.2f} req/s for {limit['hold']:g} s, then probes past it"
    return text


