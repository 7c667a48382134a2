"""A quota the site stated (:mod:`~scrapy_polite.downloader.ratelimit_headers` reads it), as a
pace for the pool, and whether it is each IP's or the host's."""

from __future__ import annotations

from scrapy_polite.downloader.ratelimit_headers import Quota


class Scope:
    """Whether a stated quota is each IP's own or the host's: a host-wide counter is counted down
    by every IP's answers in turn (one IP's answer one below another's), an IP's own counters
    move apart (IPs crawling evenly show about the same count)."""

    def __init__(self) -> None:
        self._last: tuple[str, float] | None = None
        self._shared = 0
        self._own = 0

    def observe(self, endpoint: str, remaining: float) -> None:
        if self._last is not None and self._last[0] != endpoint:
            if 0.5 <= self._last[1] - remaining <= 1.5:
                self._shared += 1
            else:
                self._own += 1
        self._last = (endpoint, remaining)

    @property
    def host_wide(self) -> bool:
        return self._shared > self._own


class Stated:
    """The quota a host's answers stated, as a pace for the whole pool (req/s) and until when."""

    __slots__ = ("rate", "scope", "until")

    def __init__(self) -> None:
        self.scope = Scope()
        self.rate: float | None = None
        self.until = 0.0

    def read(self, endpoint: str, quota: Quota, now: float, ips: int, floor: float) -> float | None:
        """Take one answer's *quota*; return until when the host waits (a host-wide quota spent),
        else ``None``. Each IP's own quota paces the pool at *ips* times it."""
        if quota.remaining is not None:
            self.scope.observe(endpoint, quota.remaining)
        pace = quota.pace()
        if pace is not None:
            self.rate = max(floor, pace if self.scope.host_wide else pace * ips)
            self.until = now + (quota.reset or quota.window or 60.0)
        if quota.exhausted() and quota.reset and self.scope.host_wide:
            return now + quota.reset
        return None

    def binds(self, now: float) -> float | None:
        """The pace in force at *now*, if the last one stated still holds."""
        return self.rate if self.rate is not None and now < self.until else None
