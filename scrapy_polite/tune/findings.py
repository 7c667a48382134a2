"""What ``scrapy polite-tune`` concludes about a host-wide limit, and how sure it is.

A trial's throttle sets a host interval when it blames 429s on the host as a whole. A
few 429s in a short trial can be blamed so on a site that limits each IP only, so one
trial's interval is a suspicion, not a finding: it is weighed against every trial.
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
    rates = [t.result.host_rate_limit for t in found if t.result is not None and t.result.host_rate_limit]
    low, high = min(rates), max(rates)
    faster = [t for t in ran if t.result is not None and t.result.success / t.result.seconds > low * _DISPROVED_ABOVE]
    first = found[0]
    assert first.result is not None
    if faster:
        fast = faster[0].result
        assert fast is not None
        return (
            f"Host-wide limit: none found. The throttle of trial {first.index} suspected one on "
            f"{first.result.throttled_host} at {low:.2f} requests/s, but trial {faster[0].index} was served "
            f"{fast.success / fast.seconds:.2f} successful requests/s: its 429s came from per-IP limits."
        )
    # The throttle models the pool's rate, not its cause: the endpoints' own limits summed look
    # the same as a host-wide one, so the trials that agree make the rate likely, not its scope.
    agree = len(found) >= 2 and high <= low * _AGREE_WITHIN
    met = f"{len(found)} of {len(ran)} trial(s) met it" + (f" at {low:.2f}-{high:.2f}" if agree else "")
    sureness = (
        f"uncertain: {met}, from {sum(t.result.rate_limited for t in found if t.result is not None)} 429(s); "
        "per-IP limits summed over the pool look the same: a trial with fewer endpoints tells them apart"
    )
    return (
        f"Host-wide limit: in trial {first.index} the throttle held {first.result.throttled_host} to "
        f"{first.result.host_rate_limit:.2f} requests/s after its first 429s, whatever the delay ({sureness}). "
        "No POLITE_* setting is a host rate: every crawl finds that rate again the same way."
    )
