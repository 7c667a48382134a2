"""Rate limiters real sites use, as pure models on the caller's clock, and the zoo of them.

``build(spec)`` makes one from a JSON-able spec (``{"kind": "fixed_window", "limit": 20,
"window": 5}``), so a spec crosses the sandbox's process boundary; :data:`ZOO` names one spec
per kind, the set the throttle is proven on.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .admission import AllOf, FixedWindow, PenaltyBox, Shifting, SlidingLog, TokenBucket, as_admission
from .base import OVERLOAD, RATE_LIMIT, Limiter, Verdict, options, refusal_of, retry_after_seconds
from .queueing import ConcurrencyCap, NginxLimitReq, Slowdown
from .quirks import RateIndependent, RateLimitHeaders


def _all_of(limiters: list[Mapping[str, Any]]) -> Limiter:
    return AllOf([as_admission(build(spec)) for spec in limiters])


def _no_retry_after(**kw: Any) -> Limiter:
    return TokenBucket(retry_after=False, **kw)


KINDS: dict[str, Callable[..., Limiter]] = {
    "token_bucket": TokenBucket,
    "all_of": _all_of,
    "shifting": Shifting,
    "fixed_window": FixedWindow,
    "sliding_log": SlidingLog,
    "concurrency_cap": ConcurrencyCap,
    "nginx_limit_req": NginxLimitReq,
    "slowdown": Slowdown,
    "no_retry_after": _no_retry_after,
    "ratelimit_headers": RateLimitHeaders,
    "rate_independent": RateIndependent,
    "penalty_box": PenaltyBox,
}


def build(spec: Mapping[str, Any]) -> Limiter:
    """A limiter from its spec; ``ValueError`` naming the kind for an unknown kind or option."""
    kind = spec.get("kind")
    factory = KINDS.get(kind) if isinstance(kind, str) else None
    if factory is None:
        raise ValueError(f"limiter kind must be one of {sorted(KINDS)}, got {kind!r}")
    # A nested spec (rate_independent's ``limit``) is built first: a kind takes limiters, not specs.
    opts = {k: build(v) if isinstance(v, Mapping) and "kind" in v else v for k, v in options(spec).items()}
    try:
        return factory(**opts)
    except TypeError as exc:
        raise ValueError(f"limiter {kind!r}: bad options {sorted(options(spec))}: {exc}") from None


#: Scenario name -> spec: one or more per kind, at rates a crawl of a few hundred pages meets.
ZOO: dict[str, dict[str, Any]] = {
    "bucket-ip": {"kind": "token_bucket", "rate": 1.0, "burst": 1},
    "bucket-ip-burst": {"kind": "token_bucket", "rate": 1.0, "burst": 4},
    "bucket-host": {"kind": "token_bucket", "rate": 4.0, "burst": 1, "scope": "host"},
    "both": {"kind": "all_of", "limiters": [
        {"kind": "token_bucket", "rate": 1.0, "burst": 1},
        {"kind": "token_bucket", "rate": 3.0, "burst": 1, "scope": "host"},
    ]},
    "shifting": {"kind": "shifting", "schedule": [[0, 6.0], [20, 2.0], [40, 6.0]]},
    "fixed-window": {"kind": "fixed_window", "limit": 5, "window": 5.0},
    "sliding-log": {"kind": "sliding_log", "limit": 3, "window": 3.0},
    "concurrency-cap": {"kind": "concurrency_cap", "limit": 3, "latency": 0.5},
    "nginx-limit-req": {"kind": "nginx_limit_req", "rate": 1.0, "burst": 5},
    "slowdown": {"kind": "slowdown", "rate": 4.0, "max_delay": 2.0},
    "no-retry-after": {"kind": "no_retry_after", "rate": 1.0, "burst": 1},
    "ratelimit-headers": {"kind": "ratelimit_headers", "quota": 10, "window": 10.0},
    "ratelimit-headers-x": {"kind": "ratelimit_headers", "quota": 10, "window": 10.0, "style": "x",
                            "reset": "epoch", "wall": 1.8e9},
    "rate-independent": {"kind": "rate_independent", "limit": {"kind": "token_bucket", "rate": 2.0}},
    "penalty-box": {"kind": "penalty_box", "rate": 1.0, "burst": 1, "penalty": 20.0},
}

__all__ = [
    "KINDS",
    "OVERLOAD",
    "RATE_LIMIT",
    "ZOO",
    "AllOf",
    "ConcurrencyCap",
    "FixedWindow",
    "Limiter",
    "NginxLimitReq",
    "PenaltyBox",
    "RateIndependent",
    "RateLimitHeaders",
    "Shifting",
    "SlidingLog",
    "Slowdown",
    "TokenBucket",
    "Verdict",
    "build",
    "refusal_of",
    "retry_after_seconds",
]
