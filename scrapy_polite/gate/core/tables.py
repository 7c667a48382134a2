"""The state every part of :class:`~scrapy_polite.gate.core.GateCore` reads, and what a backend plugs in.

A backend keeps its state where it likes (this process, or Redis) and fills
in the hooks named ``_on_*``; the parts built on this make every decision once for both.
"""

from __future__ import annotations

import random
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from twisted.internet.defer import Deferred

from scrapy_polite.errors import NoUsableEndpoints
from scrapy_polite.gate.base import GateListeners
from scrapy_polite.gate.state import EndpointState, HostState, Lease, RemovalGrace, SessionState, Waiter

#: (concurrency, delay) a host starts at, by host key.
HostOverrides = dict[str, tuple[int, tuple[float, float]]]


@dataclass(frozen=True)
class GateOptions:
    """What either gate is built with, by keyword: the limits and policies both backends enforce."""

    host_concurrency: int
    endpoint_concurrency: int
    delay: tuple[float, float]
    backoff: tuple[float, float]
    max_failures: int
    session_policy: str = "fail"
    clock: Callable[[], float] = time.monotonic
    rng: random.Random | None = None
    listeners: GateListeners | None = None
    removal_grace: float = 0.0
    stall_timeout: float = 0.0
    host_overrides: HostOverrides | None = None
    eligible: Callable[[str, str], bool] | None = None


class CoreTables:
    """The tables and settings of a gate, its backend hooks, listeners and inspection."""

    shared = False
    label = "memory"

    def __init__(self, **options: Any) -> None:
        """Keyword arguments: the fields of :class:`GateOptions`."""
        o = GateOptions(**options)
        self.host_concurrency = o.host_concurrency
        self.host_overrides: HostOverrides = dict(o.host_overrides or {})
        self.endpoint_concurrency = o.endpoint_concurrency
        self.delay = o.delay
        self.backoff = o.backoff
        self.max_failures = o.max_failures
        self.session_policy = o.session_policy
        self.stall_timeout = o.stall_timeout
        self.listeners = o.listeners or GateListeners()
        self.outages = 0
        #: Leases and heartbeats this process had to re-add (Redis lost them, or they lapsed).
        self.reasserted = 0
        self._clock = o.clock
        self._rng = o.rng or random.Random()
        self._endpoints: dict[str, EndpointState] = {}
        self._hosts: dict[str, HostState] = {}
        self._sessions: dict[str, SessionState] = {}
        # Sessions with nothing queued or in flight, least recently used first, with when they went idle.
        self._idle_sessions: OrderedDict[str, float] = OrderedDict()
        self._leases: dict[int, Lease] = {}
        # Each held lease's stall deadline, by id, in grant order (the same timeout for all, so also in
        # deadline order): one timer for the earliest, where a timer per lease cost a reactor call to
        # set and one to cancel on every request.
        self._stall_due: dict[int, tuple[float, Lease]] = {}
        self._stall_timer: object | None = None
        self._removals = RemovalGrace(o.removal_grace)
        self._closed: str | None = None
        self._close_error: type[Exception] = NoUsableEndpoints
        self._waiting_count = 0
        self._load_listeners: list[Callable[[str, int], None]] = []
        self._evict_hooks: list[Callable[[str], None]] = []
        self._create_hooks: list[Callable[[str], object]] = []
        #: ``(host, endpoint key) -> bool``: which endpoints a host's requests may take (its proxy tier).
        self.eligible = o.eligible
        #: A new session identity -> the endpoint its retired predecessor was pinned to (see ``succeed``).
        self._avoid: OrderedDict[str, str] = OrderedDict()

    # -- hooks a backend fills in ------------------------------------------

    def _call_later(self, delay: float, func: Callable[[], object]) -> object:
        raise NotImplementedError

    def _kick(self, host: str | None = None) -> None:
        """Look again at *host*'s waiters (None: every host's)."""
        raise NotImplementedError

    def _on_host_created(self, host: str, h: HostState, now: float) -> None: ...
    def _on_enqueued(self, w: Waiter, h: HostState, now: float) -> None: ...
    def _on_dropped(self, w: Waiter) -> None: ...
    def _on_released(self, lease: Lease, st: EndpointState | None, h: HostState | None, now: float) -> None: ...
    def _on_stall(self, lease: Lease) -> None: ...
    def _on_unpinned(self, s: SessionState, endpoint_key: str) -> None: ...
    def _on_endpoint_added(self, key: str) -> None: ...
    def _on_endpoint_back(self, key: str, st: EndpointState) -> None: ...
    def _on_endpoint_removed(self, key: str, until: float) -> None: ...
    def _on_endpoint_failed(self, key: str, st: EndpointState) -> None: ...
    def _on_endpoint_ok(self, key: str) -> None: ...
    def _on_host_setting(self, host: str, h: HostState, **fields: float) -> None: ...
    def _on_host_interval(self, host: str, seconds: float, base: float) -> None: ...
    def _on_host_paused(self, host: str, seconds: float) -> None: ...
    def _on_closed(self) -> None: ...
    def _on_maintain(self, now: float) -> None: ...

    def _new_token(self) -> str:
        return ""

    def start(self) -> None:
        """Connect, if there is anything to connect to."""

    def stop(self) -> Deferred | None:
        return None

    # -- inspection -----------------------------------------------------------

    @property
    def endpoints(self) -> dict[str, EndpointState]:
        return self._endpoints

    @property
    def hosts(self) -> dict[str, HostState]:
        return self._hosts

    def waiting(self) -> int:
        return self._waiting_count

    def endpoint_usable(self, st: EndpointState) -> bool:
        return st.usable(self.max_failures)

    def _may_take(self, host: str, endpoint_key: str) -> bool:
        """Whether *host*'s requests may go through *endpoint_key* (``eligible``, the host's proxy tier)."""
        return self.eligible is None or self.eligible(host, endpoint_key)

    # -- listeners --------------------------------------------------------------

    def listen(self, listeners: GateListeners) -> None:
        """Tell *listeners* of stalls, dead pools, repins, orphans and outages from now on."""
        self.listeners = listeners

    def add_load_listener(self, listener: Callable[[str, int], None]) -> None:
        """Call *listener(host, load)* whenever a host's :meth:`host_load` changes."""
        self._load_listeners.append(listener)

    def on_host_evicted(self, hook: Callable[[str], None]) -> None:
        """Call *hook(host)* when an idle host's live state is dropped."""
        self._evict_hooks.append(hook)

    def on_host_created(self, hook: Callable[[str], object]) -> None:
        """Call *hook(host)* when a host's live state is made, before its first request is granted."""
        self._create_hooks.append(hook)

    def _load_changed(self, host: str, h: HostState) -> None:
        if self._load_listeners:
            load = h.load
            for listener in self._load_listeners:
                listener(host, load)

    def _host_evicted(self, host: str) -> None:
        for hook in self._evict_hooks:
            hook(host)
