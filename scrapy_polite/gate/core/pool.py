"""The pool: endpoints joining and leaving it (with the removal grace), their failures and health."""

from __future__ import annotations

from collections.abc import Iterable

from scrapy_polite.gate.backoff import endpoint_backoff
from scrapy_polite.gate.core.sessions import Sessions
from scrapy_polite.gate.state import REMOVED, EndpointState, revive_sessions
from scrapy_polite.pool.endpoints import Endpoint


class Pool(Sessions):
    """The endpoints of the gate and their health, as every backend decides it."""

    def set_endpoints(self, endpoints: Iterable[Endpoint]) -> tuple[list[str], list[str]]:
        """Make the pool exactly *endpoints*; return (added, removed) labels.

        A removed endpoint takes no new requests; its in-flight ones finish. Its
        sessions wait for it through the removal grace, and come back with it.
        """
        now = self._clock()
        wanted = {e.key: e for e in endpoints}
        added, removed = [], []
        back: set[str] = set()
        for key, ep in wanted.items():
            st = self._endpoints.get(key)
            if st is None:
                self._endpoints[key] = EndpointState(ep)
                self._on_endpoint_added(key)
                added.append(ep.label)
            elif st.removed:
                st.removed = False
                self._removals.cancel(key)
                back.add(key)
                self._on_endpoint_back(key, st)
                added.append(ep.label)
        for key, st in self._endpoints.items():
            if key not in wanted and not st.removed:
                st.removed = True
                removed.append(st.endpoint.label)
                self._on_endpoint_removed(key, self._removals.start(key, now))
        revive_sessions(self._sessions.values(), {k for k in back if self.endpoint_usable(self._endpoints[k])})
        self._expire_removals(now)
        self._kick()
        return added, removed

    def endpoint_failed(self, endpoint_key: str) -> None:
        """A connection-level failure: back off exponentially, then re-check."""
        st = self._endpoints.get(endpoint_key)
        if st is None:
            return
        st.failures += 1
        st.unhealthy_until = self._clock() + endpoint_backoff(st.failures, self.backoff)
        self._after_health_change(endpoint_key)
        self._on_endpoint_failed(endpoint_key, st)
        self._kick()

    def endpoint_ok(self, endpoint_key: str) -> None:
        st = self._endpoints.get(endpoint_key)
        if st is not None and st.failures:
            st.failures = 0
            st.unhealthy_until = 0.0
            self._on_endpoint_ok(endpoint_key)

    def _after_health_change(self, endpoint_key: str) -> None:
        """A dead endpoint loses its sessions; the last usable one dying is reported."""
        st = self._endpoints[endpoint_key]
        if st.failures < self.max_failures:  # not dead (a removed one's sessions keep their grace)
            return
        self._handle_lost_endpoints({endpoint_key})
        if not any(self.endpoint_usable(s) for s in self._endpoints.values()):
            self.listeners.on_all_unusable()

    def _expire_removals(self, now: float) -> None:
        """Apply the session policy to the endpoints still removed when their grace ends."""
        if not self._removals:
            return
        ended = {key for key in self._removals.expired(now) if self._endpoints[key].removed}
        if ended:
            self._handle_lost_endpoints(ended, REMOVED)

    def health_counts(self) -> dict[str, int]:
        now = self._clock()
        counts = {"healthy": 0, "cooling": 0, "dead": 0}
        for st in self._endpoints.values():
            if not st.removed:
                counts[st.health(self.max_failures, now)] += 1
        return counts
