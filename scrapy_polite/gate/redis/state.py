"""Connecting to the shared Redis state, and where each piece of it lives.

Every process that points ``POLITE_STATE`` at the same Redis and uses the same
``POLITE_STATE_NAMESPACE`` shares one pool: endpoint leases, host budgets,
spacing, cooldowns, session pins, health, fleet stats. This module is the one
place that names the keys, so the gate, the stats and the ``fleet`` command
agree on them.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any
from urllib.parse import urlsplit

from scrapy_polite.errors import PoliteConfigError, scrub

INSTALL_HINT = "pip install 'scrapy-polite[redis]'"


def import_redis() -> Any:
    """The ``redis`` package, or a start-up error that says how to get it."""
    try:
        import redis
    except ImportError:
        raise PoliteConfigError(
            "POLITE_STATE", "redis://…", f"redis-py installed for a Redis state ({INSTALL_HINT})"
        ) from None
    return redis


def mask_url(url: str) -> str:
    """A Redis URL without its password (in the userinfo or a ``password=`` parameter), for logs and errors."""
    try:
        parts = urlsplit(url)
    except ValueError:  # e.g. a broken IPv6 host: mask whatever looks like a credential
        return scrub(url)
    userinfo, at, host = parts.netloc.rpartition("@")
    if ":" in userinfo:
        userinfo = userinfo.split(":", 1)[0] + ":***"
    query = re.sub(r"(?i)(^|&)(password=)[^&]*", r"\1\2***", parts.query)
    return parts._replace(netloc=f"{userinfo}{at}{host}", query=query).geturl()


def sync_client(url: str, timeout: float = 3.0) -> Any:
    """redis-py's blocking client, for start-up checks and the command line."""
    redis = import_redis()
    return redis.Redis.from_url(url, socket_connect_timeout=timeout, socket_timeout=timeout, decode_responses=True)


def check_reachable(url: str, timeout: float = 3.0) -> None:
    """Ping Redis once, synchronously, so a wrong URL stops the crawl at start-up."""
    redis = import_redis()
    client = sync_client(url, timeout)
    try:
        client.ping()
    except redis.RedisError as exc:
        raise PoliteConfigError(
            "POLITE_STATE", mask_url(url), f"a reachable Redis server ({scrub(str(exc))})"
        ) from None
    finally:
        client.close()


def async_client(url: str, timeout: float = 3.0) -> Any:
    """redis-py's asyncio client, with timeouts so a lost server fails fast."""
    redis = import_redis()
    return redis.asyncio.Redis.from_url(
        url, socket_connect_timeout=timeout, socket_timeout=timeout, decode_responses=True
    )


def endpoint_id(ident: str) -> str:
    """A short stable id for an endpoint, from its ``Endpoint.ident`` (no password in it).

    Every process reading the same list gets the same id, and the id cannot be
    traced back to a password by guessing.
    """
    return hashlib.sha1(ident.encode()).hexdigest()[:16]


class Keys:
    """Redis key names under one namespace.

    Every key expires when idle or is deleted by its owner (the README's Redis section
    lists each one's lifetime and size), so a namespace does not grow with the hosts
    ever crawled.
    """

    def __init__(self, namespace: str) -> None:
        self.prefix = f"{namespace}:"

    def host(self, host: str) -> str:
        """Hash: limit, delay band, min_delay, interval, next_start, paused_until, grants, last_signal
        (with signal_rate, signal_found: the rate it met);
        lives ``POLITE_STATE_HOST_TTL`` after its last grant or change (a pause: at least to its end)."""
        return f"{self.prefix}h:{host}"

    def host_leases(self, host: str) -> str:
        """Sorted set: lease token -> expiry (Redis time); two lease TTLs after its last lease."""
        return f"{self.prefix}hl:{host}"

    def endpoint(self, ep_id: str) -> str:
        """Hash: failures, unhealthy_until; a day after its last failure or cooldown."""
        return f"{self.prefix}e:{ep_id}"

    def endpoint_leases(self, ep_id: str) -> str:
        """Sorted set: lease token -> expiry (Redis time); two lease TTLs after its last lease."""
        return f"{self.prefix}el:{ep_id}"

    def pair(self, ep_id: str, host: str) -> str:
        """Hash: next_allowed, cooldown_until, banned_until, granted (the last grant's time);
        expires a second after its last timer."""
        return f"{self.prefix}p:{ep_id}:{host}"

    def session_lock(self, session: str) -> str:
        """String: the token of the lease a session's step holds; deleted by its release, else a lease TTL."""
        return f"{self.prefix}sl:{session}"

    def released(self, token: str) -> str:
        """String, for two lease TTLs: the lease was released, so a late renewal leaves it alone."""
        return f"{self.prefix}rel:{token}"

    def stalled(self, token: str) -> str:
        """String, for two lease TTLs: the lease stalled, so a renewal does not give it its host slot back."""
        return f"{self.prefix}stl:{token}"

    @property
    def alive(self) -> str:
        """Hash: at (last touch), since (start of this record), grace (no new lease before);
        a day after its last touch, deleted by the last process to leave."""
        return f"{self.prefix}alive"

    def pin(self, session: str) -> str:
        """String: the endpoint id a session is pinned to; expires when the session idles."""
        return f"{self.prefix}pin:{session}"

    def pin_sessions(self, ep_id: str) -> str:
        """Sorted set: session -> last use, of the sessions pinned to an endpoint (trimmed by age);
        a pin TTL after its last pin."""
        return f"{self.prefix}pc:{ep_id}"

    @property
    def procs(self) -> str:
        """Sorted set: process id -> heartbeat expiry (Redis time); six lease TTLs after the last
        renewal, a process leaves it on a clean exit or when swept."""
        return f"{self.prefix}procs"

    def held(self, proc: str) -> str:
        """Hash: waiter token -> URL of a request the process holds (waiting or in flight); six lease
        TTLs after the last renewal or hold, deleted on a clean exit or by the sweep."""
        return f"{self.prefix}held:{proc}"

    @property
    def orphans(self) -> str:
        """List of JSON records: requests held by a process that stopped without releasing them;
        the newest 100,000, for a day after the last one."""
        return f"{self.prefix}orphans"

    def stats(self, proc: str) -> str:
        """Hash: one process's published stats snapshot; seven days."""
        return f"{self.prefix}stats:{proc}"

    @property
    def stats_procs(self) -> str:
        """Sorted set: process id -> time of its last stats snapshot; seven days, expired entries trimmed."""
        return f"{self.prefix}statsprocs"
