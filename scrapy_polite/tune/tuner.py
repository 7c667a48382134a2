"""The search behind ``scrapy polite-tune``: which trial to run next, and what to recommend.

One variable at a time (``POLITE_DELAY``, then the throttle's spacing, then
``POLITE_HOST_CONCURRENCY``), under one request budget; the first ban ends the
search. Nothing here runs a crawl: :class:`Tuner` is fed :class:`TrialResult`\\ s,
which makes the search testable on its own. See docs/architecture.md, "Tuning".
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from scrapy_polite.tune.values import Trial, TrialResult, TrialSettings

#: POLITE_DELAY moves by this factor per step (down: times it; up: divided by it).
DELAY_STEP = 0.75
#: The delay search does not go below this lower bound, in seconds.
MIN_DELAY = 0.05
#: Steps up from the start before giving up on finding a clean delay.
MAX_DELAY_STEPS_UP = 4
#: The change of the trial that tries the spacing the throttle settled on.
THROTTLED = "POLITE_DELAY as throttled"
#: That trial is kept unless slower than the best by more than its wider spacing explains,
#: and by more than this many times ``min_gain`` beyond that.
THROTTLED_TOLERANCE = 3


@dataclass
class Tuner:
    """Plans trials one at a time; see the module docstring for the procedure."""

    start: TrialSettings
    budget: int
    trial_requests: int
    max_429_rate: float = 0.05
    min_gain: float = 0.05
    max_concurrency: int = 16
    #: A trial gets at least this many requests, or the search stops.
    min_trial_requests: int = 0
    trials: list[Trial] = field(default_factory=list)
    best: Trial | None = None
    stopped: str | None = None
    _phase: str = "start"
    _direction: str = "down"

    def __post_init__(self) -> None:
        if self.budget < 1 or self.trial_requests < 1:
            raise ValueError("budget and trial_requests must be >= 1")
        if not self.min_trial_requests:
            self.min_trial_requests = max(1, self.trial_requests // 2)

    # -- budget ---------------------------------------------------------------

    @property
    def used(self) -> int:
        return sum(t.used for t in self.trials)

    @property
    def remaining(self) -> int:
        return max(0, self.budget - self.used)

    # -- verdicts -------------------------------------------------------------

    def acceptable(self, result: TrialResult) -> bool:
        return (
            result.error is None
            and not result.blocked
            and result.success > 0
            and result.rate_429 <= self.max_429_rate
        )

    def _better(self, trial: Trial) -> bool:
        """Acceptable, and faster than the best by ``min_gain`` (the throttled spacing: not clearly slower)."""
        assert trial.result is not None
        if not self.acceptable(trial.result):
            return False
        if self.best is None:
            return True
        assert self.best.result is not None
        best = self.best.result.pages_per_min
        if trial.change == THROTTLED:
            floor = _pages_per_min(self._start())
            return trial.result.pages_per_min >= max(floor, self._throttled_floor(trial))
        return trial.result.pages_per_min >= best * (1 + self.min_gain)

    def _throttled_floor(self, trial: Trial) -> float:
        """The pages/min under which the throttled spacing's trial is clearly slower than the best.

        The best trial ran its first rounds at its own, narrower delay, until a 429 made its
        throttle widen it; the throttled trial runs at the wider spacing from its first request.
        In a short trial that alone makes it slower, by up to the ratio of the two spacings,
        although a longer crawl of the best trial's settings would run at the same spacing
        after its first 429s. Slower than that, by more than the tolerance, is clearly slower.
        """
        assert self.best is not None
        explained = min(1.0, _mean(self.best.settings.delay) / _mean(trial.settings.delay))
        return self._tolerated() * explained

    def _tolerated(self) -> float:
        """The best trial's pages/min, less ``THROTTLED_TOLERANCE`` times ``min_gain``: about how much
        trials this short vary."""
        assert self.best is not None and self.best.result is not None
        return self.best.result.pages_per_min * (1 - THROTTLED_TOLERANCE * self.min_gain)

    def recommendation(self) -> Trial | None:
        """The trial whose settings are recommended (see :meth:`recommended_settings`)."""
        chosen = self._choice()
        return None if chosen is None else chosen[0]

    def recommended_settings(self) -> TrialSettings | None:
        """The best trial's settings, with ``POLITE_DELAY`` at least the spacing its throttle
        had to widen to when the search ended before trying that spacing (a ban or the budget
        stopped it): a setting under the site's limit, next to a site that has blocked, is no
        recommendation. Never slower than what the user has: the start's settings, when they
        were acceptable, unless a trial measured faster (or its spacing is no wider)."""
        chosen = self._choice()
        return None if chosen is None else chosen[1]

    def _choice(self) -> tuple[Trial, TrialSettings] | None:
        best, start = self.best, self._start()
        if best is None:
            return None
        planned = self._throttled_settings(best)
        tried = [t for t in self.trials if planned is not None and t.settings == planned]
        floor = _pages_per_min(start)
        if start is not None and tried and tried[0] is not best and _pages_per_min(tried[0]) < floor:
            return start, start.settings  # the spacing the site allows measured slower than the start
        if planned is None or tried:
            return best, best.settings  # kept, or tried and found slower
        if start is not None and _mean(planned.delay) > _mean(start.settings.delay):
            return start, start.settings  # untried, and wider than what the user has
        return best, planned

    def _start(self) -> Trial | None:
        """The first trial (the user's settings), when it was acceptable: no recommendation is slower."""
        first = self.trials[0] if self.trials else None
        ok = first is not None and first.result is not None and self.acceptable(first.result)
        return first if ok else None

    def _throttled_settings(self, trial: Trial) -> TrialSettings | None:
        """*trial*'s settings with the spacing its throttle ended with, if that was wider."""
        if trial.result is None or trial.result.throttled_delay is None:
            return None
        low, high = trial.result.throttled_delay
        if low < trial.settings.delay[0] + 0.01:
            return None  # the throttle kept the configured spacing (or narrowed it)
        return replace(trial.settings, delay=(round(low, 2), round(max(low, high), 2)))

    # -- planning -------------------------------------------------------------

    def next_trial(self) -> Trial | None:
        """The next trial to run, or ``None`` when the search is over (see :attr:`stopped`)."""
        if self.stopped is not None:
            return None
        if self.trials and self.trials[-1].result is None:
            raise RuntimeError("record the result of the previous trial first")
        planned = self._plan()
        if planned is None:
            return None
        settings, change, reference = planned
        allowance = min(self.trial_requests, self.remaining)
        if allowance < self.min_trial_requests:
            self.stopped = (
                f"budget: {self.remaining} request(s) left, fewer than a trial needs "
                f"({self.min_trial_requests})"
            )
            return None
        trial = Trial(len(self.trials) + 1, settings, change, reference, allowance)
        self.trials.append(trial)
        return trial

    def _plan(self) -> tuple[TrialSettings, str, int | None] | None:
        while True:
            if self._phase == "start":
                return self.start, "start", None
            if self._phase == "delay":
                planned = self._plan_delay()
                if planned is not None:
                    return planned
                if self.stopped is not None:
                    return None
                self._phase = "throttled"
                continue
            if self._phase == "throttled":
                planned = self._plan_throttled()
                if planned is not None:
                    self._phase = "throttled trial"
                    return planned
                self._phase = "concurrency"
                continue
            if self._phase == "concurrency":
                planned = self._plan_concurrency()
                if planned is not None:
                    return planned
            self._phase = "done"
            if self.stopped is None:
                self.stopped = "search finished"
            return None

    def _plan_delay(self) -> tuple[TrialSettings, str, int | None] | None:
        if self._direction == "down":
            assert self.best is not None
            base = self.best
            candidate = base.settings.with_delay_scaled(DELAY_STEP)
            if candidate.delay[0] < MIN_DELAY or candidate.delay == base.settings.delay:
                return None
            return candidate, "POLITE_DELAY down", base.index
        # Up: from the last (unacceptable) trial until one is clean.
        base = self.trials[-1]
        steps = sum(1 for t in self.trials if t.change == "POLITE_DELAY up")
        if steps >= MAX_DELAY_STEPS_UP:
            self.stopped = (
                f"no clean delay found within {MAX_DELAY_STEPS_UP} steps up; "
                "start from a larger --start-delay"
            )
            return None
        return base.settings.with_delay_scaled(1 / DELAY_STEP), "POLITE_DELAY up", base.index

    def _plan_throttled(self) -> tuple[TrialSettings, str, int | None] | None:
        best = self.best
        candidate = None if best is None else self._throttled_settings(best)
        if best is None or candidate is None or any(t.settings == candidate for t in self.trials):
            return None
        return candidate, THROTTLED, best.index

    def _plan_concurrency(self) -> tuple[TrialSettings, str, int | None] | None:
        if self.best is None:
            return None
        base = self.best
        current = base.settings.host_concurrency
        if current >= self.max_concurrency:
            return None
        step = min(self.max_concurrency, max(current + 1, round(current * 1.5)))
        return replace(base.settings, host_concurrency=step), "POLITE_HOST_CONCURRENCY up", base.index

    # -- results --------------------------------------------------------------

    def record(self, trial: Trial, result: TrialResult) -> None:
        """Take a trial's result and decide where the search goes next."""
        if trial is not self.trials[-1] or trial.result is not None:
            raise RuntimeError("results are recorded once, for the last planned trial")
        trial.result = result
        improved = self._better(trial)
        trial.verdict, self.stopped = self._verdict(trial, result, improved)
        if improved:
            self.best = trial
        if self.stopped is not None:
            self._phase = "done"
            return
        self._advance(improved)

    def _verdict(self, trial: Trial, result: TrialResult, improved: bool) -> tuple[str, str | None]:
        """The trial's verdict, and why the search stops after it (``None``: it goes on)."""
        n = trial.index
        if result.error is not None:
            return "failed", f"trial {n} failed: {result.error}"
        if result.blocked:
            sign = "challenge page" if result.challenges else "ban answer (403)"
            return "BLOCKED", f"trial {n} got a {sign}: stopped at the first sign of blocking"
        if result.attempts == 0:
            return "no answers", (
                f"trial {n} got no answers ({result.sent} request(s) sent): "
                "check the spider, its arguments and the trial's log"
            )
        if result.success == 0 and result.rate_limited == 0:
            return "no pages", f"trial {n} got no successful pages: nothing to tune"
        if not self.acceptable(result):
            return "too many 429s", self.stopped
        if not improved:
            return "no gain", self.stopped
        if trial.change == THROTTLED:
            as_fast = result.pages_per_min >= self._tolerated()
            return ("as fast, gentler" if as_fast else "gentler, slower by its spacing"), self.stopped
        return ("best so far" if self.best is not None else "ok"), self.stopped

    def _advance(self, improved: bool) -> None:
        """The search's next phase after a trial that did (or did not) improve on the best."""
        if self._phase == "start":
            self._phase = "delay"
            self._direction = "down" if improved else "up"
        elif self._phase == "delay" and improved == (self._direction == "up"):
            # Down: the first step that is not better ends it. Up: the first clean step ends it.
            self._phase = "throttled"
        elif self._phase == "throttled trial":
            self._phase = "concurrency"
        elif self._phase == "concurrency" and not improved:
            self._phase = "done"
            self.stopped = "search finished"

def _pages_per_min(trial: Trial | None) -> float:
    return 0.0 if trial is None or trial.result is None else trial.result.pages_per_min


def _mean(delay: tuple[float, float]) -> float:
    return (delay[0] + delay[1]) / 2
