"""Limiters that admit or refuse at once: buckets, windows, a log, a penalty box, several at once."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from typing import Any

from .base import Admission, Verdict, positive, retry_after_seconds

_EPS = 1e-9


class Refusing(Admission):
    """An admission kind that answers 429 (or *status*) with an optional Retry-After."""

    def __init__(self, scope: str = "ip", retry_after: bool = True, status: int = 429) -> None:
        super().__init__(scope)
        self.retry_after = bool(retry_after)
        self.status = int(status)

    def refuse(self, wait: float) -> Verdict:
        """A refusal whose Retry-After (if any) is *wait* rounded up to whole seconds."""
        headers = (("Retry-After", retry_after_seconds(wait)),) if self.retry_after else ()
        return Verdict(self.status, headers)


class TokenBucket(Refusing):
    """``rate`` tokens/s up to ``burst``, per IP or host-wide; full at a key's first request."""

    KIND = "token_bucket"

    def __init__(self, rate: float, burst: int = 1, scope: str = "ip", retry_after: bool = True,
                 status: int = 429) -> None:
        super().__init__(scope, retry_after, status)
        self.rate = positive(self.KIND, "rate", rate)
        self.burst = int(positive(self.KIND, "burst", burst))
        self._state: dict[str, tuple[float, float]] = {}

    def rate_at(self, now: float) -> float:
        """The fill rate in force (constant here)."""
        return self.rate

    def filled(self, last: float, now: float) -> float:
        """Tokens that flowed in between *last* and *now*."""
        return (now - last) * self.rate

    def level(self, key: str, now: float) -> float:
        """Tokens in *key*'s bucket at *now* (refilled and stored)."""
        tokens, last = self._state.get(key, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + self.filled(last, now)) if now > last else tokens
        self._state[key] = (tokens, max(now, last))
        return tokens

    def check(self, ip: str, now: float, path: str = "") -> Verdict:
        tokens = self.level(self.key(ip), now)
        if tokens >= 1.0 - _EPS:
            return Verdict()
        return self.refuse((1.0 - tokens) / self.rate_at(now))

    def take(self, ip: str, now: float) -> None:
        key = self.key(ip)
        tokens, last = self._state[key]
        self._state[key] = (tokens - 1.0, last)

    def capacity(self, ips: int) -> float:
        return self.rate * self.per(ips)


class Shifting(TokenBucket):
    """A host-wide bucket whose rate follows ``schedule`` ``[[t, rate], ...]``, t from the first request."""

    KIND = "shifting"

    def __init__(self, schedule: Sequence[Sequence[float]], burst: int = 1, retry_after: bool = True,
                 status: int = 429) -> None:
        steps = sorted((float(t), positive(self.KIND, "schedule rate", r)) for t, r in schedule)
        if not steps or steps[0][0] > 0:
            raise ValueError(f"limiter {self.KIND!r}: schedule must start at t=0, got {schedule!r}")
        super().__init__(steps[0][1], burst, "host", retry_after, status)
        self.schedule = steps
        self.t0: float | None = None
        self._now = 0.0

    def _at(self, t: float) -> float:
        rate = self.schedule[0][1]
        for at, r in self.schedule:
            if t >= at:
                rate = r
        return rate

    def rate_at(self, now: float) -> float:
        return self._at(now - (self.t0 if self.t0 is not None else now))

    def filled(self, last: float, now: float) -> float:
        """The schedule's rate integrated over [last, now]."""
        t0 = self.t0 if self.t0 is not None else last
        a, b = last - t0, now - t0
        cuts = sorted({a, b, *(t for t, _ in self.schedule if a < t < b)})
        return sum(self._at(x) * (y - x) for x, y in zip(cuts, cuts[1:]))

    def check(self, ip: str, now: float, path: str = "") -> Verdict:
        if self.t0 is None:
            self.t0 = now
        self._now = max(self._now, now)
        return super().check(ip, now, path)

    def capacity(self, ips: int) -> float:
        """The rate in force at the latest request seen (the first step's before any)."""
        return self._at(self._now - self.t0) if self.t0 is not None else self.schedule[0][1]

    def steps(self, ips: int) -> list[tuple[float, float]]:
        return list(self.schedule)


class FixedWindow(Refusing):
    """``limit`` requests per clock-aligned window of ``window`` s; Retry-After = time to the reset."""

    KIND = "fixed_window"

    def __init__(self, limit: int, window: float, scope: str = "ip", retry_after: bool = True,
                 status: int = 429) -> None:
        super().__init__(scope, retry_after, status)
        self.limit = int(positive(self.KIND, "limit", limit))
        self.window = positive(self.KIND, "window", window)
        self._count: dict[str, tuple[int, int]] = {}

    def index(self, now: float) -> int:
        """The number of the window *now* falls in (windows start at multiples of ``window``)."""
        return math.floor(now / self.window + _EPS)

    def used(self, key: str, now: float) -> int:
        """Requests *key* has spent in the current window."""
        idx, n = self._count.get(key, (self.index(now), 0))
        return n if idx == self.index(now) else 0

    def reset_in(self, now: float) -> float:
        """Seconds until the current window ends."""
        return (self.index(now) + 1) * self.window - now

    def check(self, ip: str, now: float, path: str = "") -> Verdict:
        if self.used(self.key(ip), now) < self.limit:
            return Verdict()
        return self.refuse(self.reset_in(now))

    def take(self, ip: str, now: float) -> None:
        key = self.key(ip)
        self._count[key] = (self.index(now), self.used(key, now) + 1)

    def capacity(self, ips: int) -> float:
        return self.limit / self.window * self.per(ips)


class SlidingLog(Refusing):
    """``limit`` requests in any ``window`` s; Retry-After = time until the oldest leaves the window."""

    KIND = "sliding_log"

    def __init__(self, limit: int, window: float, scope: str = "ip", retry_after: bool = True,
                 status: int = 429) -> None:
        super().__init__(scope, retry_after, status)
        self.limit = int(positive(self.KIND, "limit", limit))
        self.window = positive(self.KIND, "window", window)
        self._log: dict[str, deque[float]] = {}

    def _times(self, key: str, now: float) -> deque[float]:
        times = self._log.setdefault(key, deque())
        while times and times[0] <= now - self.window + _EPS:
            times.popleft()
        return times

    def check(self, ip: str, now: float, path: str = "") -> Verdict:
        times = self._times(self.key(ip), now)
        if len(times) < self.limit:
            return Verdict()
        return self.refuse(times[0] + self.window - now)

    def take(self, ip: str, now: float) -> None:
        self._times(self.key(ip), now).append(now)

    def capacity(self, ips: int) -> float:
        return self.limit / self.window * self.per(ips)


class PenaltyBox(TokenBucket):
    """A per-IP bucket; an IP over it is refused for ``penalty`` s, restarted by every request inside."""

    KIND = "penalty_box"

    def __init__(self, rate: float, burst: int = 1, penalty: float = 30.0, scope: str = "ip",
                 status: int = 429) -> None:
        super().__init__(rate, burst, scope, True, status)
        self.penalty = positive(self.KIND, "penalty", penalty)
        self._until: dict[str, float] = {}

    def check(self, ip: str, now: float, path: str = "") -> Verdict:
        key = self.key(ip)
        if now < self._until.get(key, -math.inf) or super().check(ip, now, path).status != 200:
            self._until[key] = now + self.penalty
            return self.refuse(self.penalty)
        return Verdict()


class AllOf(Admission):
    """Several admission limiters at once: the first refusal answers; tokens go only if all admit."""

    KIND = "all_of"

    def __init__(self, limiters: Sequence[Admission]) -> None:
        super().__init__("ip")
        if not limiters or not all(isinstance(lim, Admission) for lim in limiters):
            raise ValueError(f"limiter {self.KIND!r}: limiters must be admission kinds (buckets, windows, logs)")
        self.limiters = list(limiters)
        self._refuser: Admission | None = None

    def check(self, ip: str, now: float, path: str = "") -> Verdict:
        self._refuser = None
        for lim in self.limiters:
            verdict = lim.check(ip, now, path)
            if verdict.status != 200:
                self._refuser = lim
                return verdict
        return Verdict()

    def take(self, ip: str, now: float) -> None:
        for lim in self.limiters:
            lim.take(ip, now)

    def refusal(self, verdict: Verdict) -> tuple[str, str] | None:
        """The refusal as the limiter that refused last declares it."""
        if verdict.status == 200:
            return None
        return (self._refuser or self.limiters[0]).refusal(verdict)

    def capacity(self, ips: int) -> float:
        return min(lim.capacity(ips) for lim in self.limiters)

    def steps(self, ips: int) -> list[tuple[float, float]]:
        cuts = sorted({t for lim in self.limiters for t, _ in lim.steps(ips)})
        return [(t, min(_step(lim.steps(ips), t) for lim in self.limiters)) for t in cuts]


def _step(steps: list[tuple[float, float]], t: float) -> float:
    value = steps[0][1]
    for at, v in steps:
        if t >= at:
            value = v
    return value


def as_admission(obj: Any) -> Admission:
    """*obj* if it can be a part of ``all_of``, else a ``ValueError``."""
    if not isinstance(obj, Admission):
        raise ValueError(f"limiter 'all_of': {type(obj).__name__} judges over time and cannot be a part")
    return obj
