"""The throttle's tuned constants, all of them, in one frozen object.

Each is a property of the law in ``docs/throttle.md``, not of one site: change
one and the page says what moves. Tests build their own :class:`Params` when
they need a different value; none imports a default to assert on it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Params:
    """The controller's parameters (see ``docs/throttle.md`` for the equations)."""

    #: A rate signal cuts the rate to this share of the rate the site accepted (TCP CUBIC and
    #: botocore use 0.7; the accepted rate is measured, not guessed, so the cut can be shallower).
    beta: float = 0.75
    #: The rate that failed was past the limit by what the last round trip grew: the curve comes
    #: back to this fraction under it, and probes past it only after the hold.
    margin: float = 0.1
    #: CUBIC's scale (botocore's 0.4): how fast the rate grows back, in req/s per s^3.
    cubic_c: float = 0.4
    #: A failed probe costs the pool the time its Retry-After idles an IP (the host, for a window)
    #: and about one refusal: probes come no more often than keeps both under this share.
    probe_budget: float = 0.02
    #: Before the first signal (adaptive mode) the rate grows by this factor per round of one
    #: answer per IP (TCP's slow start doubles per round trip).
    slow_start: float = 1.5
    #: Adaptive spacing is the even share ``ips / rate`` within +/- this fraction (jitter).
    jitter: float = 0.05
    #: The accepted rate is measured over at least this many seconds, and at least
    #: ``min_answers`` answers at the rate in force.
    lookback: float = 2.0
    min_answers: int = 8
    #: Latency over ``latency_factor`` times the host's baseline (the lowest recent median, as
    #: Envoy's min-RTT), plus ``latency_margin`` seconds, is an overload signal.
    latency_factor: float = 2.0
    latency_margin: float = 0.05
    #: 5xx overload answers count once this many distinct IPs saw them within ``overload_window``
    #: seconds (one IP alone may be its proxy).
    overload_ips: int = 2
    overload_window: float = 10.0
    #: A cut followed by 429s at this share of the ones before it or more (over the next 8
    #: answers), the clean rate falling with the rate: the 429s do not depend on it, cutting stops.
    independent_share: float = 0.7
    #: A Retry-After no longer than this many of each IP's spacings is waited out by every IP: with
    #: IPs loaded evenly a per-IP limit refuses the others as soon, a host-wide one refuses them
    #: anyway; a longer one costs the others more turns than it saves and binds the refused IP alone.
    scope_spacings: float = 3.0
    #: Concurrency is rate x latency (Little's law) times this headroom, plus one.
    headroom: float = 1.5


DEFAULT = Params()
