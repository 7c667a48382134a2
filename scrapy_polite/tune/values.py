"""What the ``scrapy polite-tune`` search works with: a trial's settings, its measured result, the trial.

Plain values, no search: :mod:`scrapy_polite.tune.tuner` plans with them,
:mod:`scrapy_polite.tune.output` prints them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any


@dataclass(frozen=True)
class TrialSettings:
    """The two variables the search moves."""

    host_concurrency: int
    delay: tuple[float, float]

    def settings(self) -> dict[str, str]:
        """``-s`` values for a trial crawl (strings, as on the command line)."""
        return {
            "POLITE_HOST_CONCURRENCY": str(self.host_concurrency),
            # A trial concurrency above the project's max would be a config error.
            "POLITE_HOST_CONCURRENCY_MAX": str(self.host_concurrency),
            "POLITE_DELAY": f"{num_text(self.delay[0])},{num_text(self.delay[1])}",
        }

    def delay_text(self) -> str:
        return f"{num_text(self.delay[0])}-{num_text(self.delay[1])}"

    def with_delay_scaled(self, factor: float) -> TrialSettings:
        low, high = self.delay
        return replace(self, delay=(round(low * factor, 2), round(high * factor, 2)))

    def changed(self, other: TrialSettings) -> list[str]:
        """Names of the variables that differ from *other*."""
        out = []
        if self.host_concurrency != other.host_concurrency:
            out.append("POLITE_HOST_CONCURRENCY")
        if self.delay != other.delay:
            out.append("POLITE_DELAY")
        return out


@dataclass
class TrialResult:
    """What one trial crawl measured, from the package's own stats.

    Counts cover the whole trial; ``seconds`` runs from the spider's start
    to its last answer. The 429 rate is taken over the *paced* answers
    (``paced_attempts``, ``paced_rate_limited``): all but the first through
    each endpoint, which leave together at start-up with no delay before
    them (see :mod:`scrapy_polite.tune.trial`). ``sent`` is ``None`` when the
    trial produced no result (it crashed or was killed); its whole
    allowance then counts as used.
    """

    sent: int | None
    attempts: int = 0
    success: int = 0
    rate_limited: int = 0
    bans: int = 0
    status_403: int = 0
    p95: float | None = None
    #: Challenge pages (a CAPTCHA or JavaScript check): as much a sign of blocking as a ban.
    challenges: int = 0
    seconds: float = 0.0
    finish_reason: str = ""
    error: str | None = None
    paced_attempts: int | None = None
    paced_rate_limited: int | None = None
    #: The spacing the throttle ended the trial with (``None``: not reported).
    throttled_delay: tuple[float, float] | None = None
    #: The busiest host, and the minimum interval between any two requests to it the
    #: throttle ended with (0: none; it sets one when the host limits its total rate).
    throttled_host: str | None = None
    throttled_interval: float = 0.0
    #: The rate the throttle holds the host to (req/s; ``None``: it never refused the pool).
    throttled_limit: float | None = None
    #: The highest rate (req/s) the site answered the host cleanly, many answers in a row, after its
    #: first 429 (``None``: no such run; see :mod:`scrapy_polite.tune.served`).
    served_rate: float | None = None

    @property
    def host_rate_limit(self) -> float | None:
        """Requests/s the throttle holds the host to once it refused the pool, else the host rate it
        ended with."""
        if self.throttled_limit:
            return self.throttled_limit
        return 1.0 / self.throttled_interval if self.throttled_interval > 0 else None

    @property
    def pages_per_min(self) -> float:
        return self.success * 60.0 / self.seconds if self.seconds > 0 else 0.0

    @property
    def rate_429(self) -> float:
        """Share of 429s among paced answers (among all answers if none was paced)."""
        if self.paced_attempts:
            return (self.paced_rate_limited or 0) / self.paced_attempts
        return self.rate_limited / self.attempts if self.attempts else 0.0

    @property
    def blocked(self) -> bool:
        return self.bans > 0 or self.challenges > 0

    @classmethod
    def from_trial_file(cls, data: dict[str, Any]) -> TrialResult:
        """Build from the JSON a trial crawl writes (see :mod:`scrapy_polite.tune.trial`)."""
        s = data.get("summary") or {}
        paced = data.get("paced") or {}
        throttle = data.get("throttle") or {}
        throttled = throttle.get("delay")
        return cls(
            sent=int(data["sent"]),
            attempts=int(data.get("attempts", 0)),
            success=int(s.get("success", 0)),
            rate_limited=int(s.get("rate_limited", 0)),
            bans=int(s.get("bans", 0)),
            challenges=int(s.get("challenges", 0)),
            status_403=int(data.get("statuses", {}).get("403", 0)),
            p95=s.get("latency_p95"),
            seconds=float(data.get("seconds", 0.0)),
            finish_reason=str(data.get("finish_reason", "")),
            error=data.get("error"),
            paced_attempts=paced.get("attempts"),
            paced_rate_limited=paced.get("rate_limited"),
            throttled_delay=(float(throttled[0]), float(throttled[1])) if throttled else None,
            throttled_host=throttle.get("host"),
            throttled_interval=float(throttle.get("interval") or 0.0),
            throttled_limit=float(throttle["limit_met"]) if throttle.get("limit_met") else None,
            served_rate=float(throttle["served"]) if throttle.get("served") else None,
        )


@dataclass
class Trial:
    """One planned trial, and its result once it ran."""

    index: int
    settings: TrialSettings
    #: What this trial changes relative to ``reference`` ("start" for the first).
    change: str
    reference: int | None
    allowance: int
    result: TrialResult | None = None
    verdict: str = ""

    @property
    def used(self) -> int:
        """Requests counted against the budget (the allowance if unknown)."""
        if self.result is None or self.result.sent is None:
            return self.allowance
        return self.result.sent


def num_text(x: float) -> str:
    """A short decimal: 0.8, 1.07, 2.0."""
    text = f"{x:.2f}".rstrip("0")
    return text + "0" if text.endswith(".") else text
