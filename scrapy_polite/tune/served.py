"""The rate a site served a trial cleanly once the throttle had settled on its limit.

What ``scrapy polite-tune`` reports as a host's rate is measured, not read off the
throttle's model: the throttle's figure at the trial's end is one estimate, taken
at one moment (just after a cut that measured a lull, or in the middle of a probe
past the limit). Answers the site gave cleanly, many in a row, are a rate it
allows however the throttle got there.
"""

from __future__ import annotations

from collections.abc import Iterable

#: Clean answers in a row that a served rate is measured over: fewer make a burst, not a rate.
SUSTAINED = 8


def settled_rate(answers: Iterable[tuple[float, bool, bool]]) -> float | None:
    """The highest rate (answers/s) the site answered cleanly, over ``SUSTAINED`` clean answers
    in a row, after its first rate-limit answer; ``None`` without such a run.

    *answers* are ``(time, clean, rate_limited)`` in the order they came. Before the first
    rate-limit answer the throttle had met no limit (a start-up burst is no rate); a run
    broken by any answer not clean is no rate the site allowed.
    """
    limited = False
    run: list[float] = []
    best: float | None = None
    for at, clean, rate_limited in answers:
        if not limited:
            limited = rate_limited
            continue
        if not clean:
            run.clear()
            continue
        run.append(at)
        if len(run) >= SUSTAINED:
            span = run[-1] - run[-SUSTAINED]
            if span > 0:
                rate = (SUSTAINED - 1) / span
                best = rate if best is None else max(best, rate)
    return best
