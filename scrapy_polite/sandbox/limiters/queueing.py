"""Limiters that judge load over time: a concurrency cap, nginx's delaying ``limit_req``, a slowing site.

None of them sends a Retry-After: their refusals are 503s, an overload answer.
"""

from __future__ import annotations

from collections import Counter

from .base import OVERLOAD, RATE_LIMIT, Kind, Verdict, positive

_EPS = 1e-9


class ConcurrencyCap(Kind):
    """At most ``limit`` requests in flight host-wide (nginx ``limit_conn``, an origin's worker pool).

    Every ``arrive`` counts until its ``leave``, refusals included (they leave at once).
    Capacity: min(limit, ips) / ``latency``, the site's mean service time, with one request per IP.
    """

    KIND = "concurrency_cap"
    REFUSAL = OVERLOAD

    def __init__(self, limit: int, latency: float, scope: str = "host", status: int = 503) -> None:
        super().__init__(scope)
        self.limit = int(positive(self.KIND, "limit", limit))
        self.latency = positive(self.KIND, "latency", latency)
        self.status = int(status)
        self._inflight: Counter[str] = Counter()

    def arrive(self, ip: str, now: float, path: str = "") -> Verdict:
        key = self.key(ip)
        busy = self._inflight[key]
        self._inflight[key] += 1
        return Verdict() if busy < self.limit else Verdict(self.status)

    def leave(self, ip: str, now: float) -> None:
        key = self.key(ip)
        if self._inflight[key] > 0:
            self._inflight[key] -= 1

    def capacity(self, ips: int) -> float:
        if self.scope == "ip":
            return max(1, ips) * self.limit / self.latency
        return min(self.limit, max(1, ips)) / self.latency


class NginxLimitReq(Kind):
    """nginx ``limit_req rate=R burst=B`` without ``nodelay``: over-rate requests wait for their slot.

    As ``ngx_http_limit_req_module``: excess = max(0, excess - R * elapsed + 1); over ``burst`` the
    request is refused at once (``limit_req_status``, 503 by default), else it is held excess / R s.
    ``scope: "ip"`` is ``$binary_remote_addr``.
    """

    KIND = "nginx_limit_req"

    def __init__(self, rate: float, burst: int = 5, scope: str = "ip", status: int = 503) -> None:
        super().__init__(scope)
        self.rate = positive(self.KIND, "rate", rate)
        self.burst = int(burst)
        if self.burst < 0:
            raise ValueError(f"limiter {self.KIND!r}: burst must be >= 0, got {burst!r}")
        self.status = int(status)
        self._state: dict[str, tuple[float, float]] = {}

    @property
    def REFUSAL(self) -> str:  # type: ignore[override]  # noqa: N802 - the class attribute's name
        """A 429 ``limit_req_status`` is a rate-limit answer; nginx's default 503 an overload one."""
        return RATE_LIMIT if self.status == 429 else OVERLOAD

    def arrive(self, ip: str, now: float, path: str = "") -> Verdict:
        key = self.key(ip)
        state = self._state.get(key)
        if state is None:
            self._state[key] = (0.0, now)
            return Verdict()
        excess, last = state
        excess = max(0.0, excess - self.rate * max(0.0, now - last) + 1.0)
        if excess > self.burst + _EPS:
            return Verdict(self.status)
        self._state[key] = (excess, max(now, last))
        return Verdict(delay=excess / self.rate if excess > _EPS else 0.0)

    def capacity(self, ips: int) -> float:
        return self.rate * self.per(ips)


class Slowdown(Kind):
    """A site that slows down above ``rate`` instead of refusing, then sheds load.

    Host-wide it serves ``rate`` pages/s in arrival order: a request waits for the server to be
    free (the answer is held that long), so latency grows with the excess; a request that would
    wait more than ``max_delay`` s is answered 503 at once.
    """

    KIND = "slowdown"
    REFUSAL = OVERLOAD

    def __init__(self, rate: float, max_delay: float = 2.0, scope: str = "host", status: int = 503) -> None:
        super().__init__(scope)
        self.rate = positive(self.KIND, "rate", rate)
        self.max_delay = positive(self.KIND, "max_delay", max_delay)
        self.status = int(status)
        self._free_at: dict[str, float] = {}

    def arrive(self, ip: str, now: float, path: str = "") -> Verdict:
        key = self.key(ip)
        start = max(now, self._free_at.get(key, now))
        wait = start - now
        if wait > self.max_delay + _EPS:
            return Verdict(self.status)
        self._free_at[key] = start + 1.0 / self.rate
        return Verdict(delay=wait)

    def capacity(self, ips: int) -> float:
        return self.rate * self.per(ips)
