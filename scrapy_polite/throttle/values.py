"""The values that cross the throttle's edges: what the user configured for a host, one answer,
and the limits the gate applies."""

from __future__ import annotations

import math
from dataclasses import dataclass

from scrapy_polite.downloader.ratelimit_headers import Quota
from scrapy_polite.gate.state import Limits

__all__ = ["CHALLENGE", "OK", "OVERLOAD", "RATE", "Bounds", "Limits", "Sample"]

OK, RATE, OVERLOAD, CHALLENGE = "ok", "rate", "overload", "challenge"


@dataclass(frozen=True)
class Bounds:
    """What the user configured for a host, and the pool it is crawled through."""

    ips: int
    band: tuple[float, float]
    adaptive: bool
    floor: float
    concurrency: int
    concurrency_max: int
    #: Other processes share the host (``POLITE_STATE``): this one sees only its part of the
    #: traffic, so it takes what the fleet sends from the gate's shared count of grants, and
    #: the share of it the site answered cleanly from its own answers.
    shared: bool = False

    def band_rate(self) -> float:
        """Requests per second the pool sends at the configured band."""
        mean = sum(self.band) / 2
        return self.ips / mean if mean > 0 else math.inf

    def max_rate(self) -> float:
        """The fastest rate allowed: the pool at the spacing floor (adaptive) or at the band."""
        if not self.adaptive:
            return self.band_rate()
        return self.ips / self.floor if self.floor > 0 else math.inf

    def min_rate(self) -> float:
        """The slowest: one request per four of the band's longest spacings, host-wide."""
        return 1 / (4 * max(self.band[1], 1.0))

    def spacing(self, rate: float | None, jitter: float) -> tuple[float, float]:
        """Each IP's spacing band for a host *rate* (``None``: the configured band)."""
        if rate is None:
            return self.band
        even = self.ips / rate
        mean = sum(self.band) / 2
        if self.adaptive or mean <= 0:
            # Around the even share: an IP is due a little before its turn, and the host interval,
            # not a chance alignment of spacings, paces the pool. (A band of no spacing at all has
            # nothing to stretch: the same.)
            lo = max(self.floor, even * (1 - jitter))
            return lo, max(lo, even * (1 + jitter))
        scale = max(1.0, even / mean)
        return self.band[0] * scale, self.band[1] * scale

    def in_flight(self, rate: float | None, latency: float | None, headroom: float) -> int:
        """Requests in flight for *rate* at *latency* (Little's law), with *headroom*."""
        if rate is None or latency is None:
            return self.concurrency
        need = math.ceil(rate * latency * headroom) + 1
        return max(self.concurrency, min(self.concurrency_max, need))


@dataclass(frozen=True)
class Sample:
    """One answer from the host, as the controller needs it. ``endpoint`` is the endpoint's key,
    which may hold a proxy's credentials: it is compared, never logged."""

    kind: str
    endpoint: str
    sent_at: float
    now: float
    latency: float | None = None
    #: The Retry-After the site stated, in seconds (``None``: none).
    retry_after: float | None = None
    #: Seconds a refusal idles its IP (the Retry-After, or the IP's own backoff without one).
    idle: float = 0.0
    quota: Quota | None = None
    #: The request waited for the host's rate (or others waited behind it): the rate is in use.
    busy: bool = False
