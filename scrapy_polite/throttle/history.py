"""What a host's controller remembers of its recent past: the rates in force over time (which
one a request went at), and the answers since the last cut."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass


class RateHistory:
    """(since, rate) of the recent rates in force, oldest first (``None``: no host rate)."""

    __slots__ = ("_steps",)

    def __init__(self, size: int = 256) -> None:
        self._steps: deque[tuple[float, float | None]] = deque(maxlen=size)

    def record(self, now: float, rate: float | None) -> None:
        if not self._steps or self._steps[-1][1] != rate:
            self._steps.append((now, rate))

    def at(self, when: float, default: float | None) -> float | None:
        """The rate in force at *when* (a request's grant)."""
        rate = self._steps[0][1] if self._steps else default
        for t, r in self._steps:
            if t > when:
                break
            rate = r
        return rate


@dataclass
class Level:
    """Answers since the last cut, and what the cut was made from."""

    answers: int = 0
    refused: int = 0
    #: Refusals since the cut to requests sent before it (what the failed probe cost beyond its own).
    late: int = 0
    #: The share of refusals before a cut made from the rate the site answered cleanly (``None``:
    #: the cut was not), and that rate: under it a rate limit refuses nothing, and above it a rate
    #: limit still answers about that rate cleanly.
    share_before: float | None = None
    #: Levels in a row, before this one, whose refusals held their share through a cut.
    flat_before: int = 0

    def flat(self, ratio: float) -> bool:
        """This level's refusals held their share through the cut made from the clean rate."""
        share, before = self.share(), self.share_before
        return before is not None and before > 0 and share is not None and share >= ratio * before

    def share(self) -> float | None:
        return self.refused / self.answers if self.answers >= 8 else None

