"""A host's live state and its setters: concurrency, spacing band, host rate, pauses, and the
throttle's :class:`~scrapy_polite.gate.state.Limits` applied in one call."""

from __future__ import annotations

import math

from scrapy_polite.gate.core.tables import CoreTables
from scrapy_polite.gate.state import NO_SIGNAL, HostSignal, HostState, Limits


class HostLimits(CoreTables):
    """Each host's limits, as configured, overridden, learned or set by the throttle."""

    def host(self, host: str) -> HostState:
        h = self._hosts.get(host)
        if h is None:
            h = self._hosts[host] = HostState(*self.host_overrides.get(host, (self.host_concurrency, self.delay)))
            self._on_host_created(host, h, self._clock())
            for hook in self._create_hooks:
                hook(host)
        return h

    def apply_limits(self, host: str, limits: Limits) -> None:
        """Put the throttle's limits on *host*, writing only what differs (a shared gate writes
        each field it changes)."""
        h = self.host(host)
        if not math.isclose(limits.interval, h.interval, rel_tol=1e-9):
            self.set_host_interval(host, limits.interval)
        if limits.spacing != h.delay:
            self.set_host_delay(host, limits.spacing)
        if limits.concurrency != h.limit:
            self.set_host_limit(host, limits.concurrency)
        now = self._clock()
        if limits.paused_until > max(h.paused_until, now) + 1e-3:
            self.pause_host(host, limits.paused_until - now)

    def set_host_limit(self, host: str, limit: int) -> None:
        h = self.host(host)
        h.limit = max(1, limit)
        self._on_host_setting(host, h, limit=h.limit)
        self._kick(host)

    def set_host_delay(self, host: str, delay: tuple[float, float]) -> None:
        h = self.host(host)
        h.delay = delay
        h.delay_since = self._clock()
        self._on_host_setting(host, h, lo=delay[0], hi=delay[1])

    def set_host_min_delay(self, host: str, seconds: float) -> None:
        h = self.host(host)
        h.min_delay = seconds
        self._on_host_setting(host, h, min_delay=seconds)

    def set_host_interval(self, host: str, seconds: float) -> None:
        h = self.host(host)
        # The next start moves by the difference, so a raised rate applies at once.
        base = h.interval
        h.next_start += seconds - base
        h.interval = seconds
        h.interval_since = self._clock()
        self._on_host_interval(host, seconds, base)
        self._kick(host)

    def pause_host(self, host: str, seconds: float) -> None:
        h = self.host(host)
        h.paused_until = max(h.paused_until, self._clock() + seconds)
        self._on_host_paused(host, seconds)
        self._kick(host)

    def host_load(self, host: str) -> int:
        """Requests in flight plus waiting for *host* (for the scheduler queue)."""
        h = self._hosts.get(host)
        return h.load if h else 0

    def last_signal(self, host: str) -> HostSignal:
        """Another process's last host-wide rate signal from *host* (none, for one process)."""
        return NO_SIGNAL

    def signal_host(self, host: str, failed: float | None = None, found: bool = False) -> None:
        """A host-wide rate signal from *host*: one process's throttle knows its own, nothing to share."""
