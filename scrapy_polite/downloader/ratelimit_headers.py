"""A quota the site states in its answers' headers, read as what is left, when it resets and the policy.

Reads the IETF fields (``RateLimit-Policy: "p";q=100;w=60`` with
``RateLimit: "p";r=42;t=17``), their earlier draft (``RateLimit-Limit``,
``-Remaining``, ``-Reset``) and the common ``X-RateLimit-Limit/Remaining/Reset``
(``Reset`` in seconds, or as a Unix time). A site that says how much it allows
need not be probed past it.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass

#: A ``-Reset`` larger than this is a Unix time, not seconds (2001-09-09).
EPOCH = 1e9
_PARAM = re.compile(r";\s*([a-z]+)\s*=\s*([0-9.]+)")


@dataclass(frozen=True)
class Quota:
    """What one answer says of the client's allowance."""

    #: Requests left in the current window, and seconds until it resets.
    remaining: float | None = None
    reset: float | None = None
    #: The policy: *limit* requests per *window* seconds.
    limit: float | None = None
    window: float | None = None

    def pace(self) -> float | None:
        """Requests per second that spend the allowance evenly: what is left over the time left,
        else the policy's own rate; ``None`` when the answer says neither."""
        if self.remaining is not None and self.remaining >= 1 and self.reset is not None and self.reset > 0:
            return self.remaining / self.reset  # (spent: the wait is the reset's, the pace the policy's)
        if self.limit is not None and self.window:
            return self.limit / self.window
        return None

    def exhausted(self) -> bool:
        return self.remaining is not None and self.remaining < 1 and bool(self.reset)


#: The fields :func:`read` finds no quota without (IETF, its draft, ``X-``): an answer carrying
#: none of them states no quota, and need not be read.
FIELDS = ("RateLimit", "RateLimit-Remaining", "X-RateLimit-Remaining")


def read(get: Callable[[str], str | None], wall: Callable[[], float] = time.time) -> Quota | None:
    """The quota the headers *get* returns state, or ``None``. *wall* is the clock for Unix-time resets."""
    quota = _ietf(get)
    if quota is None:
        quota = _legacy(get, "RateLimit-", wall) or _legacy(get, "X-RateLimit-", wall)
    return quota


def _ietf(get: Callable[[str], str | None]) -> Quota | None:
    current, policy = get("RateLimit"), get("RateLimit-Policy")
    if current is None or ";" not in current:
        return None
    now = _params(current)
    pol = _params(policy or "")
    remaining, reset = now.get("r"), now.get("t")
    if remaining is None and reset is None:
        return None
    return Quota(remaining, reset, pol.get("q"), pol.get("w"))


def _legacy(get: Callable[[str], str | None], prefix: str, wall: Callable[[], float]) -> Quota | None:
    remaining = _number(get(prefix + "Remaining"))
    if remaining is None:
        return None
    reset = _number(get(prefix + "Reset"))
    if reset is not None and reset > EPOCH:
        reset = max(0.0, reset - wall())
    limit = _number(get(prefix + "Limit"))
    return Quota(remaining, reset, limit, None)


def _params(value: str) -> dict[str, float]:
    """The first list member's numeric parameters of a structured field (``"p";q=10;w=1`` -> q, w)."""
    first = value.split(",", 1)[0]
    out: dict[str, float] = {}
    for key, number in _PARAM.findall(first):
        parsed = _number(number)
        if parsed is not None:
            out.setdefault(key, parsed)
    return out


def _number(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        number = float(value.strip().split(",", 1)[0])
    except ValueError:
        return None
    return number if math.isfinite(number) and number >= 0 else None
