"""A sandbox site's own defences: per-IP and host-wide rate limits, strikes, blocks and challenges.

Every verdict is made when the request arrives, before the simulated latency, from
the IP's state and the host's bucket; the zoo limiters (:mod:`.limited`) judge apart.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

from .common import TokenBucket
from .config import LITERAL_RETRY_AFTER, SiteConfig
from .http import http_date
from .pages import Reply

_UNSET: Any = object()
_FORBIDDEN = b"<h1>Forbidden</h1><p>blocked</p>"
_CHALLENGE_BODY = (
    b"<!DOCTYPE html><html><head><title>Just a moment...</title></head><body>"
    b"<h1>Checking your browser</h1><p>Please verify you are human to continue.</p></body></html>"
)


@dataclass
class IpState:
    """What the site remembers of one client IP."""

    bucket: TokenBucket | None
    inflight: int = 0
    penalty_until: float = 0.0
    strikes: int = 0
    blocked: bool = False
    flagged_until: float = 0.0


class Defences:
    """The limits of one site, and each client IP's standing with it."""

    def __init__(self, config: SiteConfig, started: float) -> None:
        self.config = config
        self.started = started
        self.ips: dict[str, IpState] = {}
        self._challenges = 0
        self._host_override: Any = _UNSET
        self._host_bucket = TokenBucket(None, config.host_burst, rate_fn=self.current_host_rate)

    def current_host_rate(self) -> float | None:
        """Host-wide cap now: runtime override, else schedule step, else ``host_rate``."""
        if self._host_override is not _UNSET:
            return self._host_override
        schedule = self.config.host_rate_schedule
        if schedule:
            elapsed = time.monotonic() - self.started
            rate = self.config.host_rate
            for t, r in schedule:
                if elapsed >= t:
                    rate = r
            return rate
        return self.config.host_rate

    def set_host_rate(self, rate: float | None) -> None:
        """Override the host-wide cap (``None`` = unlimited) for the rest of the run."""
        self._host_bucket.available()
        self._host_override = rate

    def ip(self, ip: str) -> IpState:
        """The state of *ip*, created on its first request."""
        st = self.ips.get(ip)
        if st is None:
            cfg = self.config
            bucket = TokenBucket(cfg.per_ip_rate, cfg.per_ip_burst) if cfg.per_ip_rate is not None else None
            st = self.ips[ip] = IpState(bucket)
            if ip in cfg.flagged_ips:
                st.flagged_until = self.started + cfg.flag_time
        return st

    def verdict(self, st: IpState, now: float) -> Reply | None:
        """The limit verdict for an arriving request, or ``None`` to serve it."""
        cfg = self.config
        limited = cfg.rate_limited_status
        if st.blocked:
            return Reply(403, _FORBIDDEN)
        flagged = now < st.flagged_until
        if st.flagged_until and not flagged:
            st.flagged_until, st.strikes = 0.0, 0  # the flag expired: the IP starts clean
        if now < st.penalty_until or flagged:
            return self._strike(st, now, flagged)
        if cfg.per_ip_max_inflight is not None and st.inflight > cfg.per_ip_max_inflight:
            return Reply(
                limited, b"<h1>Too Many Requests</h1><p>in flight</p>", extra=self._retry_after(st, now)
            )
        if st.bucket is not None and not st.bucket.available():
            return Reply(limited, b"<h1>Too Many Requests</h1><p>rate</p>", extra=self._retry_after(st, now))
        if not self._host_bucket.available():
            return Reply(limited, b"<h1>Too Many Requests</h1><p>host</p>", extra=self._host_retry_after())
        if st.bucket is not None:
            st.bucket.take()
        self._host_bucket.take()
        return None

    def _strike(self, st: IpState, now: float, flagged: bool) -> Reply:
        """A request inside the IP's penalty window (or while flagged): a strike, maybe a block."""
        cfg = self.config
        st.strikes += 1
        if cfg.strikes_to_block is not None and st.strikes >= cfg.strikes_to_block:
            st.blocked = True
            return Reply(403, _FORBIDDEN)
        if cfg.challenge_after is not None and st.strikes >= cfg.challenge_after and not flagged:
            st.flagged_until, flagged = now + cfg.flag_time, True
        if flagged:
            return self._challenge()
        remaining = max(0.0, st.penalty_until - now)
        hdrs = self._retry_after_remaining(remaining)
        return Reply(cfg.rate_limited_status, b"<h1>Too Many Requests</h1><p>strike</p>", extra=hdrs)

    def _challenge(self) -> Reply:
        """A challenge page, by turns a 200 with a "verify you are human" body and a marked 403."""
        self._challenges += 1
        if self._challenges % 2:
            return Reply(200, _CHALLENGE_BODY, challenge=True)
        return Reply(403, _CHALLENGE_BODY, extra=[("cf-mitigated", "challenge")], challenge=True)

    def _retry_after(self, st: IpState, now: float) -> list[tuple[str, str]]:
        cfg = self.config
        ra = float(cfg.retry_after)
        form = cfg.retry_after_form
        if form == "date":
            wall_deadline = math.ceil(time.time() + ra)
            st.penalty_until = now + (wall_deadline - time.time())
            return [("Retry-After", http_date(wall_deadline))]
        st.penalty_until = now + ra
        if form == "seconds":
            return [("Retry-After", str(int(ra)) if ra.is_integer() else f"{ra:g}")]
        return _literal_retry_after(form)

    def _retry_after_remaining(self, remaining: float) -> list[tuple[str, str]]:
        """Retry-After for a strike: the rest of the current window."""
        form = self.config.retry_after_form
        if form == "date":
            return [("Retry-After", http_date(math.ceil(time.time() + remaining)))]
        if form == "seconds":
            return [("Retry-After", str(max(1, math.ceil(remaining))))]
        return _literal_retry_after(form)

    def _host_retry_after(self) -> list[tuple[str, str]]:
        """Host-cap answers advertise the configured wait but open no per-IP window."""
        cfg = self.config
        ra = float(cfg.retry_after)
        if cfg.retry_after_form == "date":
            return [("Retry-After", http_date(math.ceil(time.time() + ra)))]
        if cfg.retry_after_form == "seconds":
            return [("Retry-After", str(int(ra)) if ra.is_integer() else f"{ra:g}")]
        return _literal_retry_after(cfg.retry_after_form)


def _literal_retry_after(form: str) -> list[tuple[str, str]]:
    """The header of a form sent as is (garbage, hostile values); none for ``"none"``."""
    if form in LITERAL_RETRY_AFTER:
        return [("Retry-After", wire_text(LITERAL_RETRY_AFTER[form]))]
    return []


def wire_text(value: str) -> str:
    """*value* as its UTF-8 bytes, in the latin-1 text that header lines are encoded from."""
    return value.encode("utf-8").decode("latin-1")
