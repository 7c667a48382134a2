"""A host's recent traffic: the rate the gate sent it and the share of its answers that were clean.

The host-rate search and the attribution read the rate sent; the search also
reads, after many failures, what the host took of it.
"""

from __future__ import annotations

from collections import deque

from scrapy_polite.throttle.rate import STEP

#: The rate actually sent is measured over this many seconds of gate grants
#: (at least ``SPAN_MIN``).
WINDOW = 3.0
SPAN_MIN = 1.0
#: When fewer than this share of the answers over ``WINDOW`` were clean (out of
#: at least ``MIN_ANSWERS``), the host took the rate sent times that share.
CLEAN_SHARE = 0.8
MIN_ANSWERS = 10


class Traffic:
    """Gate grants and answers over the last ``WINDOW`` seconds, for one host."""

    __slots__ = ("grants", "answers")

    def __init__(self) -> None:
        self.grants: deque[tuple[float, int]] = deque()
        self.answers: deque[tuple[float, bool]] = deque()

    def sent_rate(self, grants: int, now: float) -> float:
        """Requests per second granted over the last ``WINDOW`` seconds (*grants*: the gate's count)."""
        self.grants.append((now, grants))
        while len(self.grants) > 2 and self.grants[1][0] <= now - WINDOW:
            self.grants.popleft()
        t0, g0 = self.grants[0]
        return max(0, grants - g0) / max(now - t0, SPAN_MIN)

    def answer(self, clean: bool, now: float) -> None:
        self.answers.append((now, clean))
        while self.answers[0][0] < now - WINDOW:
            self.answers.popleft()

    def accepted(self, sent: float, rate: float | None = None) -> float | None:
        """When many recent answers failed, what the host took: the rate sent times the clean share.

        Only over a window sent near the host rate *rate* in force: on a climb the window
        mostly holds answers to slower rates, and its clean share says little of this one.
        """
        if rate is not None and sent * (1 + STEP) ** 2 < rate:
            return None
        share = sum(clean for _, clean in self.answers) / max(1, len(self.answers))
        if len(self.answers) >= MIN_ANSWERS and sent > 0 and share < CLEAN_SHARE:
            return sent * share
        return None
