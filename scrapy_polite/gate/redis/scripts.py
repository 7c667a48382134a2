"""Lua scripts of the Redis gate (``lua/*.lua``): each decision that must be atomic is one script.

All times are Redis server time (``TIME``), so processes on different
machines agree on spacing and cooldowns whatever their clocks say. Lua
numbers come back to redis-py as integers, so every time is returned as a
string. Keys are built inside the scripts from the namespace prefix in
``ARGV[1]`` (see :class:`scrapy_polite.gate.redis.state.Keys`), which a single
Redis server (not a cluster) allows.
"""

from __future__ import annotations

import math
from importlib import resources
from typing import Any, NamedTuple

#: Scripts that use the helpers of ``prelude.lua`` (clock, keep, grace_until).
_WITH_PRELUDE = frozenset({"acquire", "renew", "signal", "sweep", "extend", "set_interval", "endpoint_failed"})
NAMES = ("acquire", "release", "renew", "sweep", "extend", "set_interval", "endpoint_failed", "endpoint_ok",
         "unpin", "leave", "signal", "stall")

#: ACQUIRE's arguments, in ARGV order; the script reads them as ``A.<name>``. Then come the
#: candidate endpoint ids.
ACQUIRE_ARGS = (
    "prefix", "host",
    "session",  # '' = none
    "token", "ttl", "endpoint_concurrency",
    "limit", "lo", "hi",  # the host's defaults, until the throttle stored its own
    "max_failures", "backoff_max",
    "u",  # uniform in [0, 1) for the spacing's jitter
    "poll",
    "repin",  # '1' under POLITE_SESSION_POLICY = 'repin'
    "hint",  # this process's pin of the session ('' = none)
    "complete",  # '1' if the candidates are every usable endpoint of the process
    "pin_ttl",
    "last_seen",  # Redis time this process last heard from Redis (0: never)
    "longest_spacing", "host_ttl",
    "pair_memory",  # an (endpoint, host) record outlives its spacing by this much
)


class HostReply(NamedTuple):
    """The shared state of a host, as ACQUIRE saw it (gap and slack: -1 when unknown)."""

    now: float
    limit: int
    lo: float
    hi: float
    min_delay: float
    interval: float
    paused_until: float
    inflight: int
    grants: int
    interval_v: int  #: how many times the interval was set (see ``set_interval.lua``)
    gap: float
    slack: float


class AcquireReply(NamedTuple):
    code: str
    endpoint: str  # an endpoint id ('' = none)
    at: float  # granted at, or when to look again
    host: HostReply
    health: list[str]  # (endpoint id, failures, unhealthy until), flattened
    signal: str  # the host's last rate signal ('' = none)
    signal_rate: float | None  # the total rate it met (None: not known)
    signal_found: bool  # whether a host rate in force


def acquire_args(candidates: list[str], **named: Any) -> list[Any]:
    """ARGV for ACQUIRE: *named* must give exactly the values of ``ACQUIRE_ARGS``."""
    if named.keys() != set(ACQUIRE_ARGS):
        raise TypeError(f"ACQUIRE arguments differ: {sorted(set(ACQUIRE_ARGS) ^ named.keys())}")
    return [named[name] for name in ACQUIRE_ARGS] + candidates


def parse_acquire(reply: list[Any]) -> AcquireReply:
    code, ep_id, at, state, health, (signal, rate, found) = reply
    v = [float(x) for x in state] + [-1.0] * (len(HostReply._fields) - len(state))
    host = HostReply(v[0], int(v[1]), v[2], v[3], v[4], v[5], v[6], int(v[7]), int(v[8]), int(v[9]), v[10], v[11])
    return AcquireReply(str(code), str(ep_id), float(at), host, list(health), str(signal),
                        float(rate) if rate else None, found == "1")


def source(name: str) -> str:
    """The Lua text of script *name*, with its prelude (and, for ACQUIRE, its named arguments)."""
    lua = resources.files(__package__).joinpath("lua").joinpath(f"{name}.lua").read_text(encoding="utf-8")
    if name == "acquire":
        names = ", ".join(f"'{n}'" for n in ACQUIRE_ARGS)
        lua = (f"local A = {{}}\nfor i, name in ipairs({{{names}}}) do A[name] = ARGV[i] end\n"
               f"local FIRST_CANDIDATE = {len(ACQUIRE_ARGS) + 1}\n") + lua
    if name in _WITH_PRELUDE:
        lua = source("prelude") + lua
    return lua


def finite(value: float) -> float:
    """A -1 from a script (nothing remembered) as infinity."""
    return value if value >= 0 else math.inf
