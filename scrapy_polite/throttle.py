"""HostThrottle: adapts each host's concurrency and spacing to its 429s.

AIMD, as TCP does it: a rate signal halves the host's concurrency for the
whole pool (floor 1) and widens each endpoint's spacing (the remedy for a
per-IP limit). Signals from several endpoints at once mean a host-wide
limit: the host pauses and its total request rate is halved (a minimum
interval between any two requests to it, which is what slows a pool
against a fast site, where fewer requests in flight alone would not). A
window of clean responses adds one back (up to
``POLITE_HOST_CONCURRENCY_MAX``), raises the host rate and narrows spacing
toward ``POLITE_DELAY`` (or, with ``POLITE_ADAPTIVE``, below it down to
``POLITE_DELAY_FLOOR``). A host that keeps answering 429 at the floor is
parked for a growing interval.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from scrapy import signals

from . import signals as polite_signals
from .runtime import enabled_runtime, get_runtime

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

    from .config import PoliteConfig
    from .endpoints import Endpoint
    from .gate import LocalGate

logger = logging.getLogger(__name__)

#: How much a 429 widens spacing, and how much a clean window narrows it.
DELAY_GROWTH = 1.25
DELAY_SHRINK = 0.85
#: Spacing never grows past this multiple of ``POLITE_DELAY``.
DELAY_CEILING = 4.0
#: In adaptive mode the jitter band narrows by this much more than the delay,
#: down to this fraction of the delay.
JITTER_SHRINK = 0.7
MIN_JITTER = 0.2
#: A host interval below this is dropped: the other limits bind first.
MIN_INTERVAL = 0.02


@dataclass
class _HostPolicy:
    last_change: float = 0.0
    last_decrease: float = -1e9
    last_signal: float = -1e9
    recent: deque[tuple[float, str]] = field(default_factory=deque)
    floor_hits: int = 0
    parks: int = 0
    clean: int = 0
    answers: deque[float] = field(default_factory=deque)


class ThrottlePolicy:
    """The decisions, free of Scrapy, so they can be tested on their own."""

    def __init__(
        self,
        config: PoliteConfig,
        gate: LocalGate,
        clock: Callable[[], float] = time.monotonic,
        notify: Callable[[str, dict[str, Any], dict[str, Any], str], None] | None = None,
    ) -> None:
        self.config = config
        self.gate = gate
        self.clock = clock
        self.notify = notify or (lambda *a: None)
        self._hosts: dict[str, _HostPolicy] = {}

    def _policy(self, host: str) -> _HostPolicy:
        p = self._hosts.get(host)
        if p is None:
            p = self._hosts[host] = _HostPolicy(last_change=self.clock())
        return p

    def _snapshot(self, host: str) -> dict[str, Any]:
        h = self.gate.host(host)
        return {"concurrency": h.limit, "delay": h.delay, "interval": h.interval, "paused_until": h.paused_until}

    def _observed_rate(self, p: _HostPolicy, now: float) -> float:
        """Answers per second from the host over the last pause window."""
        window = self.config.host_pause_window
        p.answers.append(now)
        while p.answers and p.answers[0] < now - window:
            p.answers.popleft()
        span = min(window, max(1.0, now - p.answers[0]))
        return len(p.answers) / span

    def rate_limited(self, host: str, endpoint: Endpoint, delay: float, status: int = 429) -> None:
        """A rate signal from *host* via *endpoint*, with its cooldown *delay*."""
        cfg, gate, now = self.config, self.gate, self.clock()
        p = self._policy(host)
        p.clean = 0
        p.last_signal = now
        rate = self._observed_rate(p, now)
        gate.cool_endpoint(endpoint.key, host, delay)
        h = gate.host(host)
        old = self._snapshot(host)
        reasons = []
        # One decrease per recovery window: a burst of 429s is one signal.
        if now - p.last_decrease >= max(1.0, cfg.recovery_window):
            p.last_decrease = now
            p.last_change = now
            if h.limit > 1:
                gate.set_host_limit(host, max(1, int(h.limit * cfg.backoff_factor)))
                reasons.append(f"{status} via {endpoint.label}")
            else:
                p.floor_hits += 1
            base_lo, base_hi = cfg.delay
            lo, hi = h.delay
            ceiling = DELAY_CEILING * base_hi
            if hi < ceiling:
                widen = min(DELAY_GROWTH, ceiling / hi if hi else DELAY_GROWTH)
                gate.set_host_delay(host, (max(lo * widen, cfg.delay_floor), max(hi * widen, base_lo or 0.1)))
                reasons.append("spacing widened")
        p.recent.append((now, endpoint.key))
        while p.recent and p.recent[0][0] < now - cfg.host_pause_window:
            p.recent.popleft()
        distinct = len({k for _, k in p.recent})
        if distinct >= cfg.host_pause_endpoints and h.paused_until < now:
            # Several exit IPs limited at once: the host caps its total rate, so
            # fewer requests per endpoint would not help; slow the host itself.
            gate.pause_host(host, delay)
            reasons.append(
                f"{distinct} endpoints rate-limited within {cfg.host_pause_window:g} s: host-wide pause {delay:.1f} s"
            )
            p.recent.clear()
            if rate > 0:
                interval = max(h.interval / cfg.backoff_factor, 1.0 / (rate * cfg.backoff_factor))
                gate.set_host_interval(host, min(interval, cfg.delay[1] * DELAY_CEILING))
                reasons.append(f"host rate {rate:.2f} -> {1 / h.interval:.2f} req/s")
        if p.floor_hits >= cfg.park_after:
            p.floor_hits = 0
            p.parks += 1
            low, high = cfg.park_time
            park = min(high, low * 2 ** (p.parks - 1))
            gate.pause_host(host, park)
            logger.warning(
                "scrapy-polite: %s keeps answering %d at concurrency 1; parked for %.0f s (park #%d)",
                host, status, park, p.parks,
            )
            reasons.append(f"parked {park:.0f} s")
        if reasons:
            self.notify(host, old, self._snapshot(host), "; ".join(reasons))

    def ok(self, host: str, status: int) -> None:
        """A clean answer from *host*: after a clean window, step back up."""
        cfg, now = self.config, self.clock()
        p = self._policy(host)
        p.clean += 1
        self._observed_rate(p, now)
        if now - p.last_change < cfg.recovery_window or now - p.last_signal < cfg.recovery_window:
            return
        h = self.gate.host(host)
        old = self._snapshot(host)
        reasons = []
        if h.limit < cfg.host_concurrency_max:
            self.gate.set_host_limit(host, h.limit + 1)
            reasons.append("clean window: +1 concurrency")
        if h.interval > 0:
            interval = h.interval * DELAY_SHRINK
            self.gate.set_host_interval(host, interval if interval >= MIN_INTERVAL else 0.0)
            reasons.append("clean window: host rate raised")
        floor_lo = cfg.delay_floor if cfg.adaptive else cfg.delay[0]
        lo, hi = h.delay
        if lo > floor_lo + 1e-9:
            new_lo = max(floor_lo, lo * DELAY_SHRINK)
            scale = new_lo / lo if lo else DELAY_SHRINK
            if cfg.adaptive:
                # The jitter narrows faster than the delay, but never to zero: a
                # narrow band just above the limit beats a wide one straddling it.
                new_hi = new_lo + max(new_lo * MIN_JITTER, (hi - lo) * scale * JITTER_SHRINK)
            else:
                new_hi = max(cfg.delay[1], hi * scale)
            self.gate.set_host_delay(host, (new_lo, new_hi))
            reasons.append("clean window: spacing narrowed")
        elif not cfg.adaptive and hi > cfg.delay[1]:
            self.gate.set_host_delay(host, cfg.delay)
            reasons.append("clean window: spacing restored")
        p.last_change = now
        p.floor_hits = 0
        if reasons:
            self.notify(host, old, self._snapshot(host), "; ".join(reasons))


class HostThrottle:
    """Scrapy extension around :class:`ThrottlePolicy`: logging, signals, robots."""

    def __init__(self, crawler: Crawler) -> None:
        rt = enabled_runtime(crawler)
        self.crawler = crawler
        self.policy = ThrottlePolicy(rt.config, rt.gate, notify=self._notify)
        rt.throttle = self.policy
        self._robots_seen: set[str] = set()
        if crawler.settings.getbool("ROBOTSTXT_OBEY"):
            crawler.signals.connect(self._response_received, signal=signals.response_received)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> HostThrottle:
        return cls(crawler)

    def _notify(self, host: str, old: dict[str, Any], new: dict[str, Any], reason: str) -> None:
        stats = self.crawler.stats
        stats.inc_value("polite/throttle/changes")
        stats.set_value(f"polite/throttle/{host}/concurrency", new["concurrency"])
        now = time.monotonic()
        logger.info(
            "scrapy-polite: %s concurrency %d -> %d, delay %.2f-%.2f -> %.2f-%.2f s, "
            "host interval %.2f -> %.2f s%s (%s)",
            host, old["concurrency"], new["concurrency"], *old["delay"], *new["delay"],
            old["interval"], new["interval"],
            f", paused {new['paused_until'] - now:.1f} s" if new["paused_until"] > now else "",
            reason,
        )
        self.crawler.signals.send_catch_log(
            polite_signals.host_throttle_changed, host=host, old=old, new=new, reason=reason
        )

    def _response_received(self, response: Any, request: Any, spider: Any = None) -> None:
        """Use a robots.txt ``Crawl-delay`` as the host's minimum spacing."""
        if not request.url.endswith("/robots.txt") or response.status != 200:
            return
        from scrapy.utils.httpobj import urlparse_cached

        host = request.meta.get("download_slot") or urlparse_cached(request).hostname or ""
        if host in self._robots_seen:
            return
        self._robots_seen.add(host)
        delay = _crawl_delay(response.text if hasattr(response, "text") else "")
        if delay:
            get_runtime(self.crawler).gate.set_host_min_delay(host, delay)
            logger.info("scrapy-polite: %s robots.txt Crawl-delay %.1f s is the minimum spacing", host, delay)


def _crawl_delay(text: str, agent: str = "*") -> float | None:
    """The ``Crawl-delay`` robots.txt gives *agent*, parsed by Protego (Scrapy's parser)."""
    from protego import Protego

    try:
        delay = Protego.parse(text).crawl_delay(agent)
    except Exception:  # a broken robots.txt must not break the crawl
        return None
    return float(delay) if delay else None
