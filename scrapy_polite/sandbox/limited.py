"""The glue between a site and its zoo limiter, and the book of the Retry-Afters a site gave.

A site asks its :class:`SiteLimiter` about every request (``arrive`` before serving, ``leave``
once the answer is sent). The limiter is optional (``SiteConfig.limiter``); the book is not:
every site records which requests came back inside a Retry-After it had given that IP (or the
whole host), so a benchmark can check that a client never did.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import Any

from .limiters import OVERLOAD, RATE_LIMIT, Limiter, Verdict, build, refusal_of

#: Slack for a client's timer firing a hair early, and for the answer's own travel.
TOLERANCE = 0.02
_BODIES = {429: b"<h1>Too Many Requests</h1><p>limit</p>", 503: b"<h1>Service Unavailable</h1><p>limit</p>"}


def retry_after_wait(value: str | None, wall: float) -> float | None:
    """Seconds a Retry-After asks for (delta-seconds or an HTTP date), ``None`` when unusable."""
    if value is None:
        return None
    value = value.strip()
    try:
        secs = float(value)
    except ValueError:
        try:
            return max(0.0, parsedate_to_datetime(value).timestamp() - wall)
        except (TypeError, ValueError, IndexError, OverflowError):
            return None
    return secs if math.isfinite(secs) and secs >= 0 else None


class RetryAfterBook:
    """When each IP, and every IP, may come back, and who came back earlier."""

    HOST = ""

    def __init__(self) -> None:
        self._until: dict[str, float] = {}
        #: Requests per IP that arrived inside a Retry-After given to it or to the host.
        self.inside: Counter[str] = Counter()

    def arrived(self, ip: str, now: float) -> bool:
        """Record an arrival; whether it came inside a Retry-After."""
        until = max(self._until.get(ip, -math.inf), self._until.get(self.HOST, -math.inf))
        if now < until - TOLERANCE:
            self.inside[ip] += 1
            return True
        return False

    def sent(self, ip: str, headers: Sequence[tuple[str, str]], scope: str, now: float) -> None:
        """An answer carrying *headers* went to *ip*; a Retry-After in it covers *scope*."""
        value = next((v for k, v in headers if k.lower() == "retry-after"), None)
        wait = retry_after_wait(value, time.time())
        if wait is not None:
            self._until[ip if scope == "ip" else self.HOST] = now + wait


@dataclass
class Judged:
    """A limiter's verdict on one request, as the site uses it."""

    status: int = 200
    extra: list[tuple[str, str]] = field(default_factory=list)
    delay: float = 0.0
    refusal: str | None = None
    scope: str = "ip"
    inside: bool = False
    asked: bool = False

    @property
    def body(self) -> bytes:
        """The refusal page."""
        return _BODIES.get(self.status, b"<h1>Refused</h1>")


class SiteLimiter:
    """One site's optional zoo limiter and its Retry-After book."""

    def __init__(self, spec: Mapping[str, Any] | None) -> None:
        if spec and spec.get("reset") == "epoch" and "wall" not in spec:
            spec = {**spec, "wall": time.time() - time.monotonic()}  # X-RateLimit-Reset as a real epoch
        self.limiter: Limiter | None = build(spec) if spec else None
        self.book = RetryAfterBook()

    def arrive(self, ip: str, path: str, now: float) -> Judged:
        """Judge a request (robots.txt is never limited)."""
        inside = self.book.arrived(ip, now)
        if self.limiter is None or path.split("?")[0] == "/robots.txt":
            return Judged(inside=inside)
        verdict: Verdict = self.limiter.arrive(ip, now, path=path)
        kind = refusal_of(self.limiter, verdict)
        return Judged(verdict.status, list(verdict.headers), verdict.delay, kind[0] if kind else None,
                      kind[1] if kind else "ip", inside, asked=True)

    def leave(self, ip: str, judged: Judged, status: int, headers: Sequence[tuple[str, str]],
              now: float) -> dict[str, Any]:
        """The answer was sent: tell the limiter, book its Retry-After; the access log's fields."""
        if judged.asked and self.limiter is not None:
            self.limiter.leave(ip, now)
        refusal = judged.refusal if judged.status != 200 else _by_status(status)
        self.book.sent(ip, headers, judged.scope if judged.status != 200 else "ip", now)
        return {"refusal": refusal, "inside_retry_after": judged.inside}


def _by_status(status: int) -> str | None:
    """A refusal the site's own limits made: 429 a rate-limit answer, 503 an overload one."""
    return RATE_LIMIT if status == 429 else OVERLOAD if status == 503 else None
