"""The timing maths both gates share (the Lua scripts keep their copy, fed the same constants)."""

from __future__ import annotations

#: An (endpoint, host) pair is remembered this long after its timers run out,
#: so the next request through it knows its gap (the Redis scripts are given it too).
PAIR_MEMORY = 1.0
#: While Redis is away, each loop retries after this delay, doubled up to the cap.
RETRY_BACKOFF = (0.25, 8.0)


#: Past this many doublings any cap is reached (and ``2 ** 1024`` does not convert to a float).
MAX_DOUBLINGS = 64


def doubling(base: float, times: int, cap: float) -> float:
    """*base* doubled *times* times, capped at *cap*: every exponential backoff and hold, so that a
    count that keeps growing over a long crawl (an endpoint dead for days) never overflows."""
    return min(cap, base * 2.0 ** min(times, MAX_DOUBLINGS))


def endpoint_backoff(failures: int, backoff: tuple[float, float]) -> float:
    """How long an endpoint rests after its *failures*-th failure in a row: exponential, capped."""
    base, cap = backoff
    return doubling(base, failures - 1, cap)


def draw_spacing(u: float, delay: tuple[float, float], min_delay: float) -> float:
    """The gap before an endpoint's next request to a host, for *u* uniform in [0, 1)."""
    lo, hi = delay
    return max(lo + u * (hi - lo), min_delay)


class Retry:
    """One loop's retry delay while Redis is away.

    Each loop backs off on its own, so failed grant attempts cannot stretch the
    renewal loop's sleep past the lease TTL (and get a live process swept).
    """

    def __init__(self, cap: float = RETRY_BACKOFF[1]) -> None:
        self.cap = cap
        self.delay = min(RETRY_BACKOFF[0], cap)

    def next(self) -> float:
        delay, self.delay = self.delay, min(self.cap, self.delay * 2)
        return delay

    def reset(self) -> None:
        self.delay = min(RETRY_BACKOFF[0], self.cap)
