"""What ``scrapy polite-tune`` concludes about a host-wide limit, and how sure it is.

A trial's throttle sets a host interval when it blames 429s on the host as a whole. A
few 429s in a short trial can be blamed so on a site that limits each IP only, so one
trial's interval is a suspicion, not a finding: it is weighed against every trial, and
one that another trial was served well above is dropped. The rate reported is the one
the site was seen to serve cleanly once the throttle had met the limit
(:mod:`scrapy_polite.tune.served`), the highest of any trial: the throttle's own figure
is one estimate at the trial's end, reported only when no trial has enough clean
answers in a row to measure.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scrapy_polite.tune.values import Trial

#: A trial that served more than this many times a suspected rate disproves it.
_DISPROVED_ABOVE = 1.15
#: Rates found by several trials agree when within this ratio of each other.
_AGREE_WITHIN = 1.25


def host_limit_finding(trials: list[Trial]) -> str | None:
    """One paragraph on the host-wide limit the trials' throttles met, or ``None`` if none did."""
    ran = [t for t in trials if t.result is not None and t.result.error is None and t.result.seconds > 0]
    found = [t for t in ran if t.result is not None and t.result.host_rate_limit is not None]
    if not found:
        return None
    fastest = max(ran, key=_served)
    # A trial served well above what another's throttle took for the host's rate disproves that
    # rate (a throttle that cut deep in its first seconds, or 429s from per-IP limits).
    standing = [t for t in found if _served(fastest) <= _suspected(t) * _DISPROVED_ABOVE]
    if not standing:
        suspect = max(found, key=_suspected)
        return (
            f"Host-wide limit: none found. The throttle of trial {suspect.index} suspected one on "
            f"{_host(suspect)} at {_suspected(suspect):.2f} requests/s, but trial {fastest.index} was served "
            f"{_served(fastest):.2f} successful requests/s: its 429s came from per-IP limits."
        )
    rates = [_rate(t) for t in standing]
    served = [t for t in standing if t.result is not None and t.result.served_rate is not None]
    shown = max(served, key=_rate) if served else standing[0]
    # The throttle models the pool's rate, not its cause: the endpoints' own limits summed look
    # the same as a host-wide one, so the trials that agree make the rate likely, not its scope.
    agree = len(standing) >= 2 and max(rates) <= min(rates) * _AGREE_WITHIN
    met = f"{len(standing)} of {len(ran)} trial(s) met it" + (
        f" at {min(rates):.2f}-{max(rates):.2f}" if agree else "")
    sureness = (
        f"uncertain: {met}, from {sum(t.result.rate_limited for t in standing if t.result is not None)} 429(s); "
        "per-IP limits summed over the pool look the same: a trial with fewer endpoints tells them apart"
    )
    return (
        f"Host-wide limit: in trial {shown.index} the throttle held {_host(shown)} to "
        f"{_rate(shown):.2f} requests/s after its first 429s, whatever the delay ({sureness}). "
        "No POLITE_* setting is a host rate: every crawl finds that rate again the same way."
    )


def _served(trial: Trial) -> float:
    """Successful requests/s over the whole trial."""
    r = trial.result
    assert r is not None and r.seconds > 0
    return r.success / r.seconds


def _suspected(trial: Trial) -> float:
    """The rate the trial's throttle took the host to allow."""
    assert trial.result is not None and trial.result.host_rate_limit is not None
    return trial.result.host_rate_limit


def _host(trial: Trial) -> str | None:
    assert trial.result is not None
    return trial.result.throttled_host


def _rate(trial: Trial) -> float:
    """The host rate a trial shows: what the site served it cleanly once the throttle had met the
    limit, else the throttle's own figure."""
    assert trial.result is not None
    served = trial.result.served_rate
    return served if served is not None else _suspected(trial)
