"""The limiter contract: a verdict per arriving request, on the caller's clock.

Limiters own no clock and do no I/O, so the same objects judge requests inside
the sandbox's HTTP site and in-process simulations on a fake clock.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

#: A refusal that says "you are over the site's rate" (counted as a 429 share).
RATE_LIMIT = "rate_limit"
#: A refusal that says "the site is overloaded" (counted as a 503 share).
OVERLOAD = "overload"
SCOPES = ("ip", "host")


@dataclass(frozen=True)
class Verdict:
    """What the site answers: a status, headers, and how long it holds the answer."""

    status: int = 200
    headers: tuple[tuple[str, str], ...] = ()
    delay: float = 0.0

    @property
    def refused(self) -> bool:
        """Whether the page is withheld."""
        return self.status != 200

    def header(self, name: str) -> str | None:
        """The first header called *name* (case-insensitive), or ``None``."""
        low = name.lower()
        return next((v for k, v in self.headers if k.lower() == low), None)


OK = Verdict()


class Limiter(Protocol):
    """One site's rate limiter; ``leave`` is called once for every ``arrive``, refusals included."""

    def arrive(self, ip: str, now: float, path: str = "") -> Verdict:
        """A request from exit IP *ip* arrives at *now* (monotonic seconds)."""
        ...

    def leave(self, ip: str, now: float) -> None:
        """The answer to a request from *ip* has been sent."""
        ...

    def capacity(self, ips: int) -> float:
        """Successful pages/s a client with *ips* exit IPs can get at most."""
        ...


def retry_after_seconds(wait: float) -> str:
    """A Retry-After in integer seconds, rounded up (at least 1), as real servers send it."""
    return str(max(1, math.ceil(wait - 1e-6)))


def positive(kind: str, name: str, value: Any) -> float:
    """*value* as a float > 0, else a ``ValueError`` naming the kind and the field."""
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"limiter {kind!r}: {name} must be a number, got {value!r}") from None
    if not out > 0 or not math.isfinite(out):
        raise ValueError(f"limiter {kind!r}: {name} must be > 0, got {value!r}")
    return out


class Kind:
    """Shared plumbing: scope keys, refusal classification, a no-op ``leave``."""

    KIND: ClassVar[str] = ""
    #: What a refusal of this kind means to a client counting answers.
    REFUSAL: ClassVar[str] = RATE_LIMIT

    def __init__(self, scope: str = "ip") -> None:
        if scope not in SCOPES:
            raise ValueError(f"limiter {self.KIND!r}: scope must be one of {SCOPES}, got {scope!r}")
        self.scope = scope

    def key(self, ip: str) -> str:
        """The state key of a request from *ip*: the IP, or one key for the whole host."""
        return ip if self.scope == "ip" else ""

    def per(self, ips: int) -> int:
        """How many independent budgets a client with *ips* exit IPs draws on."""
        return max(1, ips) if self.scope == "ip" else 1

    def leave(self, ip: str, now: float) -> None:
        """Most kinds judge on arrival only."""

    def refusal(self, verdict: Verdict) -> tuple[str, str] | None:
        """``(RATE_LIMIT | OVERLOAD, "ip" | "host")`` for a refusal, ``None`` for a page.

        The scope says whom a Retry-After in the answer covers: that IP, or every IP.
        """
        return None if verdict.status == 200 else (self.REFUSAL, self.scope)

    def steps(self, ips: int) -> list[tuple[float, float]]:
        """The capacity as a step function of time since the first request."""
        return [(0.0, self.capacity(ips))]

    def capacity(self, ips: int) -> float:  # pragma: no cover - every kind overrides it
        raise NotImplementedError


class Admission(Kind):
    """A kind that admits or refuses at once, in two steps so ``all_of`` can take from all or none."""

    def check(self, ip: str, now: float, path: str = "") -> Verdict:
        """The verdict without taking anything from the budget."""
        raise NotImplementedError

    def take(self, ip: str, now: float) -> None:
        """Spend one request of the budget (after a 200 ``check``)."""
        raise NotImplementedError

    def arrive(self, ip: str, now: float, path: str = "") -> Verdict:
        """Check, and take when admitted."""
        verdict = self.check(ip, now, path)
        if verdict.status == 200:
            self.take(ip, now)
        return verdict


def refusal_of(limiter: Limiter, verdict: Verdict) -> tuple[str, str] | None:
    """Classify *verdict* with the limiter's own declaration, else by status (429 vs other)."""
    classify = getattr(limiter, "refusal", None)
    if classify is not None:
        return classify(verdict)
    if verdict.status == 200:
        return None
    return (RATE_LIMIT if verdict.status == 429 else OVERLOAD, "ip")


def options(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The spec without its ``kind``."""
    return {k: v for k, v in spec.items() if k != "kind"}
