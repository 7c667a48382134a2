"""Limiters with a twist: quota headers on every answer, 429s that are not about the rate."""

from __future__ import annotations

import math

from .admission import FixedWindow, as_admission
from .base import Admission, Kind, Limiter, Verdict, positive, refusal_of, retry_after_seconds

HEADER_STYLES = ("ietf", "x")
RESET_FORMS = ("seconds", "epoch")


class RateLimitHeaders(FixedWindow):
    """A quota of ``quota`` requests per ``window`` s stated on every answer; 429 + Retry-After past it.

    ``style="ietf"``: ``RateLimit-Policy: "default";q=..;w=..`` and ``RateLimit: "default";r=..;t=..``.
    ``style="x"``: ``X-RateLimit-Limit/Remaining/Reset``, Reset in seconds or, with
    ``reset="epoch"``, as a Unix time: ``wall`` + the caller's clock, so simulations stay deterministic.
    """

    KIND = "ratelimit_headers"

    def __init__(self, quota: int, window: float, scope: str = "ip", style: str = "ietf",
                 reset: str = "seconds", wall: float = 0.0) -> None:
        super().__init__(quota, window, scope, True, 429)
        if style not in HEADER_STYLES or reset not in RESET_FORMS:
            raise ValueError(f"limiter {self.KIND!r}: style must be one of {HEADER_STYLES} and reset one "
                             f"of {RESET_FORMS}, got {style!r}, {reset!r}")
        self.style, self.reset, self.wall = style, reset, float(wall)

    def quota_headers(self, remaining: int, now: float) -> tuple[tuple[str, str], ...]:
        """The quota fields for *remaining* requests left in the window that *now* is in."""
        t = max(1, math.ceil(self.reset_in(now) - 1e-6))
        if self.style == "ietf":
            w = int(self.window) if float(self.window).is_integer() else self.window
            return (("RateLimit-Policy", f'"default";q={self.limit};w={w}'),
                    ("RateLimit", f'"default";r={remaining};t={t}'))
        reset = str(t) if self.reset == "seconds" else str(math.ceil(self.wall + now + self.reset_in(now) - 1e-6))
        return (("X-RateLimit-Limit", str(self.limit)), ("X-RateLimit-Remaining", str(remaining)),
                ("X-RateLimit-Reset", reset))

    def arrive(self, ip: str, now: float, path: str = "") -> Verdict:
        verdict = super().arrive(ip, now, path)
        remaining = max(0, self.limit - self.used(self.key(ip), now))
        return Verdict(verdict.status, verdict.headers + self.quota_headers(remaining, now), verdict.delay)


class RateIndependent(Kind):
    """The first request for each path is answered 429 (Retry-After ``retry_after``) at any rate.

    The retry is judged by ``limit`` (an admission kind, built from its spec; none: served). Capacity: each page costs
    its IP one Retry-After, so at most ips / retry_after pages/s, and no more than ``limit`` allows.
    """

    KIND = "rate_independent"

    def __init__(self, limit: Limiter | None = None, retry_after: float = 1.0, scope: str = "ip") -> None:
        super().__init__(scope)
        self.inner: Admission | None = as_admission(limit) if limit is not None else None
        self.retry_after = positive(self.KIND, "retry_after", retry_after)
        self._seen: set[str] = set()
        self._last_inner = False

    def arrive(self, ip: str, now: float, path: str = "") -> Verdict:
        if path not in self._seen:
            self._seen.add(path)
            self._last_inner = False
            return Verdict(429, (("Retry-After", retry_after_seconds(self.retry_after)),))
        self._last_inner = self.inner is not None
        return self.inner.arrive(ip, now, path) if self.inner is not None else Verdict()

    def leave(self, ip: str, now: float) -> None:
        if self.inner is not None:
            self.inner.leave(ip, now)

    def refusal(self, verdict: Verdict) -> tuple[str, str] | None:
        """The first-request 429 covers its IP; an inner refusal is classified by the inner limiter."""
        if verdict.status == 200:
            return None
        if self._last_inner and self.inner is not None:
            return refusal_of(self.inner, verdict)
        return super().refusal(verdict)

    def capacity(self, ips: int) -> float:
        own = max(1, ips) / self.retry_after
        return min(own, self.inner.capacity(ips)) if self.inner is not None else own

