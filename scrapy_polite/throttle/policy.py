"""HostThrottle: adapts each host's rate, spacing and concurrency to its 429s.

Sites limit in two ways, and each needs its own remedy, so the throttle
searches two values separately:

- the **host rate**, a minimum interval between any two requests to the host
  from the whole pool, against a host-wide cap;
- each endpoint's **spacing** (the ``POLITE_DELAY`` band), against a per-IP
  limit.

A rate signal is blamed on spacing when its endpoint went as soon as its
spacing let it and no clean answer has come after a gap that short; otherwise
on the host (the gate's lease says both).

The host rate is searched as TCP searches a window. It climbs 10% per clean
answer sent at the current rate (in adaptive mode a new host starts there, at
its concurrency over the shortest spacing: a slow start, so the first burst of
links does not hit a host-wide cap at once). A signal falls back to the clean
rate it climbed from, or steps down a further 10% that doubles with each
signal in a row (down to ``POLITE_BACKOFF_FACTOR``); when many recent answers
failed, the rate becomes what the host accepted. The host then holds one step
below the rate that failed for a recovery window (half of one once its limit
has been seen to move) before probing past it. Climbing past what the pool can
send at its spacing drops the host rate: it limits nothing.

Spacing moves just above the longest gap that drew a per-IP signal (or to the
shortest clean gap near it). In adaptive mode, while the host has no rate of
its own, it narrows a step per spacing toward ``POLITE_DELAY_FLOOR``, never
down to that failing gap, which each clean window lets go of a little.

Concurrency keeps plain AIMD: a signal halves it (once per recovery window,
floor 1), a clean window adds one back, up to ``POLITE_HOST_CONCURRENCY_MAX``.
Several endpoints limited at once pause the host for the Retry-After. A host
that keeps answering 429 at concurrency 1 is parked for a growing interval.
"""

from __future__ import annotations

import logging
import math
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from scrapy import signals

from scrapy_polite import signals as polite_signals
from scrapy_polite.pool.host_memory import HostMemory
from scrapy_polite.runtime import enabled_runtime, get_runtime

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

    from scrapy_polite.gate.base import Gate
    from scrapy_polite.gate.state import HostState
    from scrapy_polite.pool.endpoints import Endpoint
    from scrapy_polite.settings.config import PoliteConfig

logger = logging.getLogger(__name__)

#: Without adaptive mode, a clean window narrows raised spacing back toward
#: ``POLITE_DELAY`` by this factor.
DELAY_SHRINK = 0.85
#: Spacing never grows past this multiple of ``POLITE_DELAY``'s upper end.
DELAY_CEILING = 4.0
#: A per-IP signal puts the spacing band this share above the gap that drew
#: it; a shorter clean gap within ``SPACING_REACH`` above it is taken instead.
SPACING_MARGIN = 0.05
SPACING_REACH = 0.5
#: Adaptive mode narrows the spacing by this factor per spacing (an answer whose
#: gap began after the last change), and the jitter band by ``JITTER_STEP``,
#: down to ``MIN_JITTER`` of the delay: a narrow band just above a limit beats a
#: wide one straddling it.
SPACING_STEP = 0.95
JITTER_STEP = 0.9
MIN_JITTER = 0.05
#: A request whose endpoint had been free to go for at most this long (or this
#: share of its gap: timers fire late) was held by its spacing.
SLACK_TOLERANCE = 0.05
GAP_TOLERANCE = 0.05
#: Each clean window eases the memory of the longest failing gap by this factor,
#: so a limit that relaxes (or a signal blamed on spacing by mistake) is let go.
BAD_GAP_DECAY = 0.85
#: Each clean answer sent at the current host rate raises it by this share; a
#: host holds one step below the rate that last failed.
RATE_STEP = 0.1
#: The rate actually sent is measured over this many seconds of gate grants
#: (at least ``RATE_SPAN_MIN``), for a first cut when the host had no rate yet.
RATE_WINDOW = 3.0
RATE_SPAN_MIN = 1.0
#: When fewer than this share of the answers over ``RATE_WINDOW`` were clean
#: (out of at least ``RATE_MIN_ANSWERS``), a step down is too small: the host
#: takes the rate sent times that share.
RATE_CLEAN_SHARE = 0.8
RATE_MIN_ANSWERS = 10
#: A host interval below this is dropped: the other limits bind first.
MIN_INTERVAL = 0.02


@dataclass
class _HostPolicy:
    #: Last clean-window step (concurrency, spacing restored toward POLITE_DELAY).
    last_change: float
    last_decrease: float = -math.inf
    last_signal: float = -math.inf
    #: Host-blamed signals within the pause window: (time, endpoint key).
    recent: deque[tuple[float, str]] = field(default_factory=deque)
    floor_hits: int = 0
    parks: int = 0
    #: Answers to requests granted before this were sent at an older host rate.
    rate_changed: float = -math.inf
    #: The host rate (req/s) last answered cleanly, and the one that drew the
    #: last signal: the host holds just below it before probing past it.
    good: float | None = None
    bad: float | None = None
    #: Whether ``bad`` is a limit found at a set host rate (not a burst's rate).
    bad_found: bool = False
    #: The rate the limit was last found at (kept while probing), and whether the
    #: limit has been seen to move (a failure far below it, or a clean climb far
    #: past it): such a host is re-probed twice as often.
    ceiling: float | None = None
    moved: bool = False
    #: Host-rate signals since the last clean answer: each one steps down further.
    fail_streak: int = 0
    #: Whether this hold has already forgiven one signal below ``bad`` as noise.
    forgiven: bool = False
    #: (time, the gate's grant count for the host), for the rate actually sent,
    #: and (time, clean?) of this process's answers over the same window.
    grants: deque[tuple[float, int]] = field(default_factory=deque)
    answers: deque[tuple[float, bool]] = field(default_factory=deque)
    spacing_changed: float = -math.inf
    #: The longest endpoint gap that drew a per-IP signal.
    bad_gap: float = 0.0
    #: Clean answers' gaps over the last recovery window, (time, gap) with
    #: increasing gaps, so the first one is the shortest.
    clean_gaps: deque[tuple[float, float]] = field(default_factory=deque)


#: What survives a host's eviction from the throttle: the rate search's findings
#: and when it last stepped down, so a host seen again is not probed from scratch.
_KEPT = ("last_decrease", "last_signal", "floor_hits", "parks", "good", "bad", "bad_found", "ceiling", "moved",
         "bad_gap")


_NOTHING_KEPT = tuple(getattr(_HostPolicy(last_change=0.0), name) for name in _KEPT)


def compact(p: _HostPolicy) -> tuple[Any, ...] | None:
    """*p*'s findings as a tuple, or None when it learned nothing worth keeping."""
    kept = tuple(getattr(p, name) for name in _KEPT)
    return None if kept == _NOTHING_KEPT else kept


def restore(p: _HostPolicy, kept: tuple[Any, ...]) -> None:
    for name, value in zip(_KEPT, kept):
        setattr(p, name, value)


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
        p = self._policy(host)
        old = self._snapshot(host)
        p.last_signal = now
        sent = self._sent_rate(p, host, now)
        self._remember_answer(p, False, now)
        gate.cool_endpoint(endpoint.key, host, delay)
        h = gate.host(host)
        changes: list[str] = []
        per_ip = self._blames_spacing(p, gap, slack, now)
        evidence: dict[str, Any] = {
            "status": status, "retry_after": round(delay, 3), "gap": _finite(gap), "slack": _finite(slack),
            "blame": "per-ip" if per_ip else "host", "endpoint": endpoint.label,
        }
        if per_ip:
            changes += self._raise_spacing(p, host, gap, now)
        else:
            sent_at = now if granted_at is None else granted_at
            changes += self._host_signal(p, host, endpoint, delay, sent, sent_at, now)
        # One concurrency decrease per recovery window: a burst of 429s is one signal.
        if now - p.last_decrease >= max(1.0, cfg.recovery_window):
            p.last_decrease = now
            p.last_change = now
            if h.limit > 1:
                gate.set_host_limit(host, max(1, int(h.limit * cfg.backoff_factor)))
                changes.append(f"concurrency {old['concurrency']} -> {h.limit}")
            else:
                p.floor_hits += 1
        if p.floor_hits >= cfg.park_after:
            p.floor_hits = 0
            p.parks += 1
            low, high = cfg.park_time
            park = min(high, low * 2 ** (p.parks - 1))
            gate.pause_host(host, park)
            changes.append(f"keeps answering {status} at concurrency 1: parked {park:.0f} s (park #{p.parks})")
            evidence["park"] = p.parks
        if changes:
            self.notify(
                host, old, self._snapshot(host), "; ".join([f"{status} via {endpoint.label}", *changes]), evidence
            )

    def ok(self, host: str, status: int, *, gap: float = math.inf, granted_at: float | None = None) -> None:
        """A clean answer from *host*: a step of each search, and after a clean window, of concurrency."""
        cfg, now = self.config, self.clock()
        p = self._policy(host)
        old = self._snapshot(host)
        sent_at = now if granted_at is None else granted_at
        self._remember_clean_gap(p, gap, now)
        self._remember_answer(p, True, now)
        self._sent_rate(p, host, now)
        changes: list[str] = []
        if sent_at > p.rate_changed:
            changes += self._rate_step(p, host, now)
        if cfg.adaptive and sent_at - gap >= p.spacing_changed and self.gate.host(host).interval <= 0:
            # A step per answer whose whole gap was drawn from the current band (one
            # per spacing, as TCP grows once per round trip); and only while the host
            # has no rate of its own, under which narrower spacing gains nothing.
            changes += self._narrow_spacing(p, host, now)
        if now - p.last_change >= cfg.recovery_window and now - p.last_signal >= cfg.recovery_window:
            changes += self._clean_window(p, host, now)
        if changes:
            self.notify(host, old, self._snapshot(host), "; ".join(changes), {"status": status, "gap": _finite(gap)})

    def unanswered(self, host: str, park: bool) -> str:
        """Several endpoints got no answer from *host*: slow it down, or park it.

        Slowing is one concurrency decrease per recovery window (as for a burst of
        429s); a host that answered nothing since it was last blamed is parked for
        the doubling ``POLITE_PARK_TIME``. Returns what changed.
        """
        cfg, gate, now = self.config, self.gate, self.clock()
        p = self._policy(host)
        old = self._snapshot(host)
        h = gate.host(host)
        p.last_change = now  # no clean-window step back up right after
        changes: list[str] = []
        if park:
            p.parks += 1
            low, high = cfg.park_time
            seconds = min(high, low * 2 ** (p.parks - 1))
            gate.pause_host(host, seconds)
            changes.append(f"parked {seconds:.0f} s (park #{p.parks})")
        elif now - p.last_decrease >= max(1.0, cfg.recovery_window) and h.limit > 1:
            p.last_decrease = now
            gate.set_host_limit(host, max(1, int(h.limit * cfg.backoff_factor)))
            changes.append(f"concurrency {old['concurrency']} -> {h.limit}")
        if changes:
            self.notify(host, old, self._snapshot(host), "; ".join(["no answer via several endpoints", *changes]))
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
            p.grants.append((now, h.grants))
            cfg, limits = self.config, self.config.host_limits(host)
            if cfg.adaptive and h.interval <= 0 and limits.delay[0] > 0:
                # Slow start: a new host begins at its concurrency at the shortest
                # spacing, and climbs from there while its answers stay clean.
                before = self._snapshot(host)
                reason = self._set_rate(p, host, limits.concurrency / limits.delay[0], now)
                self.notify(host, before, self._snapshot(host), f"slow start: {reason}", {})
        return p

    def _snapshot(self, host: str) -> dict[str, Any]:
        h = self.gate.host(host)
        return {"concurrency": h.limit, "delay": h.delay, "interval": h.interval, "paused_until": h.paused_until}

    def _sent_rate(self, p: _HostPolicy, host: str, now: float) -> float:
        """Requests per second the gate granted to *host* over the last ``RATE_WINDOW`` seconds."""
        grants = self.gate.host(host).grants
        p.grants.append((now, grants))
        while len(p.grants) > 2 and p.grants[1][0] <= now - RATE_WINDOW:
            p.grants.popleft()
        t0, g0 = p.grants[0]
        return max(0, grants - g0) / max(now - t0, RATE_SPAN_MIN)

    def _remember_answer(self, p: _HostPolicy, clean: bool, now: float) -> None:
        p.answers.append((now, clean))
        while p.answers[0][0] < now - RATE_WINDOW:
            p.answers.popleft()

    def _remember_clean_gap(self, p: _HostPolicy, gap: float, now: float) -> None:
        window = self.config.recovery_window
        if math.isfinite(gap):
            while p.clean_gaps and p.clean_gaps[-1][1] >= gap:
                p.clean_gaps.pop()
            p.clean_gaps.append((now, gap))
        while p.clean_gaps and p.clean_gaps[0][0] < now - window:
            p.clean_gaps.popleft()

    def _shortest_clean_gap(self, p: _HostPolicy, now: float) -> float:
        self._remember_clean_gap(p, math.inf, now)
        return p.clean_gaps[0][1] if p.clean_gaps else math.inf

    # -- spacing (per-IP limits) ------------------------------------------------

    def _blames_spacing(self, p: _HostPolicy, gap: float, slack: float, now: float) -> bool:
        """A per-IP limit: the endpoint went as soon as its spacing let it, after a
        gap shorter than any clean answer's."""
        held = slack <= max(SLACK_TOLERANCE, GAP_TOLERANCE * gap)
        return held and gap < self._shortest_clean_gap(p, now)

    def _raise_spacing(self, p: _HostPolicy, host: str, gap: float, now: float) -> list[str]:
        """Put the spacing band just above *gap*, which was too short for the site."""
        cfg, h = self.config, self.gate.host(host)
        p.bad_gap = max(p.bad_gap, gap)
        lo, hi = h.delay
        # Just above the failing gap, or the shortest gap known to be clean if that
        # is not far above it: a known-good spacing beats a guess.
        target = max(gap * (1 + SPACING_MARGIN), min(self._shortest_clean_gap(p, now), gap * (1 + SPACING_REACH)))
        new_lo = min(target, DELAY_CEILING * cfg.host_limits(host).delay[1])
        if new_lo <= lo:
            return []
        new_hi = new_lo * (1 + MIN_JITTER)
        if not cfg.adaptive:
            new_hi = max(new_hi, hi)  # never narrower than POLITE_DELAY without adaptive mode
        self.gate.set_host_delay(host, (new_lo, new_hi))
        p.spacing_changed = now
        return [f"spacing raised above the {gap:.2f} s gap that drew it"]

    def _spacing_floor(self, p: _HostPolicy, host: str) -> float:
        """The shortest spacing the configuration and the longest failing gap allow."""
        cfg, low = self.config, self.config.host_limits(host).delay[0]
        return max(min(cfg.delay_floor, low) if cfg.adaptive else low, p.bad_gap * (1 + SPACING_MARGIN))

    def _narrow_spacing(self, p: _HostPolicy, host: str, now: float) -> list[str]:
        """Adaptive mode: one step below the current spacing, while it is what limits the pool."""
        lo, hi = self.gate.host(host).delay
        new_lo = min(lo, max(self._spacing_floor(p, host), lo * SPACING_STEP))
        new_hi = new_lo + max(new_lo * MIN_JITTER, (hi - lo) * JITTER_STEP)
        if new_hi >= hi - 1e-6:
            return []
        self.gate.set_host_delay(host, (new_lo, new_hi))
        p.spacing_changed = now
        return ["clean answer: spacing narrowed"]

    # -- host rate (host-wide caps) ------------------------------------------

    def _host_signal(
        self, p: _HostPolicy, host: str, endpoint: Endpoint, delay: float, sent: float, sent_at: float, now: float
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
        if wide and h.paused_until < now:
            gate.pause_host(host, delay)
            p.recent.clear()
            changes.append(
                f"{distinct} endpoints rate-limited within {cfg.host_pause_window:g} s: host-wide pause {delay:.1f} s"
            )
        if sent_at < p.rate_changed:
            return changes  # sent at an older rate, already answered for
        # When many recent answers failed, the host has said what it takes: the rate
        # sent times the share answered cleanly. The host holds there.
        share = sum(clean for _, clean in p.answers) / len(p.answers)
        enough = len(p.answers) >= RATE_MIN_ANSWERS and sent > 0
        accepted = sent * share if enough and share < RATE_CLEAN_SHARE else None
        if h.interval > 0:
            # The host rate drew the signal: back to the clean rate it just climbed
            # from, else a step down that doubles with each signal in a row (one
            # alone is noise or a small drop), down to POLITE_BACKOFF_FACTOR.
            rate = 1 / h.interval
            p.fail_streak += 1
            if p.good is not None and p.good < rate:
                new = p.good
            else:
                new = rate / (1 + RATE_STEP) ** (2 ** (p.fail_streak - 1))
            failed = rate
            if accepted is not None and accepted < new:
                new = max(accepted, rate * cfg.backoff_factor)
                failed = new * (1 + RATE_STEP)
            new = max(new, rate * cfg.backoff_factor)
        elif wide and accepted is not None:
            # No host rate yet: take what the host accepted.
            new, failed = accepted, accepted * (1 + RATE_STEP)
        elif wide and sent > 0:
            # No host rate yet, few failures: cut what was sent, climb back toward it.
            new, failed = sent * cfg.backoff_factor, sent
        else:
            return changes
        if h.interval <= 0:
            pass  # a burst with no host rate says little about where the limit is
        elif p.ceiling is None or failed >= p.ceiling:
            p.ceiling = failed
        elif failed < p.ceiling / (1 + RATE_STEP) ** 2:
            p.moved = True
            p.ceiling = failed
        if p.bad_found and p.bad is not None and failed < p.bad and not p.forgiven and accepted is None:
            p.forgiven = True  # one signal below the ceiling per hold is noise: step down, keep the ceiling
        else:
            p.bad, p.bad_found = failed, h.interval > 0
        p.good = None
        changes.append(self._set_rate(p, host, new, now))
        return changes

    def _rate_step(self, p: _HostPolicy, host: str, now: float) -> list[str]:
        """A clean answer sent at the current host rate: climb, or hold below the last failure."""
        h = self.gate.host(host)
        if h.interval <= 0:
            return []
        rate = 1 / h.interval
        p.good = rate
        p.fail_streak = 0
        hold = self.config.recovery_window / (2 if p.moved else 1)
        if p.bad is None and now - self.gate.last_signal(host) < hold:
            # Another process sharing the host rate (POLITE_STATE) just met the limit and
            # stepped it down: hold with it, or every process would climb straight back.
            return []
        if p.bad is not None and rate * (1 + RATE_STEP) >= p.bad * (1 - 1e-9):
            if now - p.rate_changed < hold:
                return []  # hold one step below the rate that failed
            p.bad = None  # then probe past it: limits move
            p.forgiven = False
        if p.ceiling is not None and rate > p.ceiling * (1 + RATE_STEP) ** 2:
            p.moved = True
        new: float | None = rate * (1 + RATE_STEP)
        if p.bad is None and rate > (1 + RATE_STEP) * self._pool_rate(h):
            new = None  # past what the pool can send at its spacing: the host rate limits nothing
        return [self._set_rate(p, host, new, now)]

    def _pool_rate(self, h: HostState) -> float:
        """Requests per second the pool can send to a host at its current spacing."""
        lo, hi = h.delay
        mean = max((lo + hi) / 2, h.min_delay)
        slots = len(self.gate.endpoints) * self.gate.endpoint_concurrency
        return slots / mean if mean > 0 else math.inf

    def _set_rate(self, p: _HostPolicy, host: str, rate: float | None, now: float) -> str:
        """Set the host rate (``None``: none) and return what changed."""
        old = self.gate.host(host).interval
        longest = DELAY_CEILING * max(self.config.host_limits(host).delay[1], 1.0)
        interval = 0.0 if rate is None else min(1 / rate, longest) if rate > 0 else longest
        if interval < MIN_INTERVAL:
            interval = 0.0
        self.gate.set_host_interval(host, interval)
        p.rate_changed = now
        return f"host rate {_rate(old)} -> {_rate(interval)}"

    # -- clean windows ----------------------------------------------------------

    def _clean_window(self, p: _HostPolicy, host: str, now: float) -> list[str]:
        """A recovery window without a signal: +1 concurrency, spacing back toward POLITE_DELAY."""
        cfg, h = self.config, self.gate.host(host)
        base = cfg.host_limits(host)
        p.last_change = now
        p.floor_hits = 0
        p.bad_gap *= BAD_GAP_DECAY
        changes: list[str] = []
        if h.limit < base.concurrency_max:
            self.gate.set_host_limit(host, h.limit + 1)
            changes.append("clean window: +1 concurrency")
        if not cfg.adaptive:
            lo, hi = h.delay
            floor = self._spacing_floor(p, host)
            if lo > floor + 1e-9:
                new_lo = max(floor, lo * DELAY_SHRINK)
                self.gate.set_host_delay(host, (new_lo, max(base.delay[1], hi * new_lo / lo)))
                changes.append("clean window: spacing narrowed")
            elif hi > base.delay[1] + 1e-9 and lo <= base.delay[0] + 1e-9:
                self.gate.set_host_delay(host, base.delay)
                changes.append("clean window: spacing restored")
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

    ``concurrency``, ``spacing`` (the delay band, seconds), ``host_rate``
    (req/s, ``None``: unlimited), and ``pause`` or ``park`` (seconds the host
    is held from *now*, monotonic like the snapshots' ``paused_until``).
    """
    events: list[dict[str, Any]] = []
    if old["concurrency"] != new["concurrency"]:
        events.append({"change": "concurrency", "from": old["concurrency"], "to": new["concurrency"]})
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


def _evidence_text(evidence: dict[str, Any]) -> str:
    """The evidence of a rate signal for the log line: blame, gap, slack, Retry-After."""
    if "blame" not in evidence:
        return ""

    def sec(v: float | None) -> str:
        return "never" if v is None else f"{v:.2f} s"

    return (f"; blamed on a {evidence['blame']} limit: gap {sec(evidence['gap'])}, "
            f"slack {sec(evidence['slack'])}, Retry-After {evidence['retry_after']:g} s")


class HostThrottle:
    """Scrapy extension around :class:`ThrottlePolicy`: logging, signals, robots."""

    def __init__(self, crawler: Crawler) -> None:
        rt = enabled_runtime(crawler)
        self.crawler = crawler
        self.policy = ThrottlePolicy(rt.config, rt.gate, notify=self._notify)
        rt.throttle = self.policy
        # Bounded as the host memory: a host's Crawl-delay outlives its eviction there.
        self._robots_seen: OrderedDict[str, None] = OrderedDict()
        self._robots_max = max(1, rt.config.host_memory)
        self._stats_hosts: set[str] = set()
        self._stats_top = rt.config.stats_top
        self._resume_calls: list[Any] = []
        crawler.signals.connect(self._closed, signal=signals.spider_closed)
        if crawler.settings.getbool("ROBOTSTXT_OBEY"):
            crawler.signals.connect(self._response_received, signal=signals.response_received)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> HostThrottle:
        return cls(crawler)

    def _notify(
        self, host: str, old: dict[str, Any], new: dict[str, Any], reason: str, evidence: dict[str, Any] | None = None
    ) -> None:
        stats = self.crawler.stats
        stats.inc_value("polite/throttle/changes")
        if host in self._stats_hosts or len(self._stats_hosts) < self._stats_top:
            self._stats_hosts.add(host)
            stats.set_value(f"polite/throttle/{host}/concurrency", new["concurrency"])
        else:  # POLITE_STATS_TOP hosts have keys of their own; the rest are counted together
            stats.inc_value("polite/throttle/(other)/changes")
        evidence = evidence or {}
        now = time.monotonic()
        events = throttle_events(old, new, evidence, now)
        logger.log(
            logging.WARNING if "park" in evidence else logging.INFO,
            "scrapy-polite: %s concurrency %d -> %d, delay %.2f-%.2f -> %.2f-%.2f s, "
            "host interval %.2f -> %.2f s%s (%s%s)",
            host, old["concurrency"], new["concurrency"], *old["delay"], *new["delay"],
            old["interval"], new["interval"],
            f", paused {new['paused_until'] - now:.1f} s" if new["paused_until"] > now else "",
            reason, _evidence_text(evidence),
        )
        self.crawler.signals.send_catch_log(
            polite_signals.host_throttle_changed, host=host, old=old, new=new, reason=reason,
            events=events, evidence=evidence,
        )
        if any(e["change"] in ("pause", "park") for e in events):
            self._watch_resume(host, new["paused_until"], "park" in evidence)

    def _watch_resume(self, host: str, until: float, parked: bool) -> None:
        """Log and signal the end of a pause or park, unless a later one extended it."""
        from twisted.internet import reactor

        def resumed() -> None:
            h = get_runtime(self.crawler).gate.host(host)
            if h.paused_until > until + 1e-6 or not self.crawler.crawling:
                return  # extended (its own watch reports it), or the crawl is over
            change = "unpark" if parked else "resume"
            snap = self.policy._snapshot(host)
            logger.info("scrapy-polite: %s %s after %.1f s", host, "unparked" if parked else "resumed",
                        until - started)
            self.crawler.signals.send_catch_log(
                polite_signals.host_throttle_changed, host=host, old=snap, new=snap,
                reason=f"{change}: the {'park' if parked else 'pause'} is over",
                events=[{"change": change, "from": round(until - started, 3), "to": 0.0}], evidence={},
            )

        started = time.monotonic()
        self._resume_calls = [c for c in self._resume_calls if c.active()]
        self._resume_calls.append(reactor.callLater(max(0.0, until - started), resumed))  # type: ignore[attr-defined]

    def _closed(self, spider: Any = None) -> None:
        for call in self._resume_calls:
            if call.active():
                call.cancel()
        self._resume_calls.clear()

    def _response_received(self, response: Any, request: Any, spider: Any = None) -> None:
        """Use a robots.txt ``Crawl-delay`` as the host's minimum spacing."""
        if not request.url.endswith("/robots.txt") or response.status != 200:
            return
        from scrapy_polite.downloader.proxy_meta import host_key

        host = host_key(request, get_runtime(self.crawler).config.host_key)
        if host in self._robots_seen:
            return
        self._robots_seen[host] = None
        if len(self._robots_seen) > self._robots_max:
            self._robots_seen.popitem(last=False)
        delay = _crawl_delay(response.text if hasattr(response, "text") else "", robots_agent(self.crawler.settings))
        if delay is None:
            return
        rt = get_runtime(self.crawler)
        spacing = min(delay, rt.config.retry_after_max)
        rt.gate.set_host_min_delay(host, spacing)
        if spacing < delay:
            logger.warning(
                "scrapy-polite: %s robots.txt Crawl-delay %g s capped at POLITE_RETRY_AFTER_MAX: %.1f s is "
                "the minimum spacing", host, delay, spacing,
            )
        else:
            logger.info("scrapy-polite: %s robots.txt Crawl-delay %.1f s is the minimum spacing", host, delay)


def robots_agent(settings: Any) -> str:
    """The agent robots.txt rules are read for: ``ROBOTSTXT_USER_AGENT``, else ``USER_AGENT`` (as RobotsTxtMiddleware)."""
    return settings.get("ROBOTSTXT_USER_AGENT") or settings.get("USER_AGENT") or "*"


def _crawl_delay(text: str, agent: str = "*") -> float | None:
    """The ``Crawl-delay`` robots.txt gives *agent*, parsed by Protego (Scrapy's parser).

    ``None`` unless it is a positive finite number of seconds: the site writes it.
    """
    from protego import Protego

    try:
        delay = float(Protego.parse(text).crawl_delay(agent) or 0)
    except Exception:  # a broken robots.txt must not break the crawl
        return None
    return delay if math.isfinite(delay) and delay > 0 else None
