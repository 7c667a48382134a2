"""Sessions and their pins: a lost endpoint's sessions, successor identities, repins."""

from __future__ import annotations

from scrapy_polite.errors import SessionEndpointLost
from scrapy_polite.gate.core.waiters import Waiting
from scrapy_polite.gate.state import SessionState, Waiter, lost_message

#: New session identities remembered, before their first pin, as to avoid their predecessor's endpoint.
MAX_AVOID = 10_000


class Sessions(Waiting):
    """Which endpoint each session is pinned to, and what happens to it when that endpoint goes."""

    def sessions(self) -> dict[str, str | None]:
        """Session key -> masked label of its pinned endpoint (None: not yet)."""
        return {
            key: (self._endpoints[s.endpoint_key].endpoint.label if s.endpoint_key in self._endpoints else None)
            for key, s in self._sessions.items()
        }

    def _handle_lost_endpoints(self, keys: set[str], why: str = "endpoint unusable") -> None:
        for s in self._sessions.values():
            if s.endpoint_key not in keys or s.lost:
                continue
            old = self._endpoints[s.endpoint_key].endpoint.label
            if self.session_policy == "repin":
                pinned, s.endpoint_key = s.endpoint_key, None
                self._on_unpinned(s, pinned)
                self.listeners.on_session_repinned(s.key, old, why)
                continue
            s.lost = lost_message(s.key, old, why)
            for w in list(s.queue):
                self._fail(w, SessionEndpointLost(s.lost))

    def succeed(self, old: str, new: str) -> None:
        """Session identity *new* replaces the retired *old*: its first pin avoids *old*'s endpoint.

        The old identity's pin is released once nothing of it is queued or in flight,
        so its endpoint is not counted as shared by a session that will not come back.
        """
        s = self._sessions.get(old)
        if s is None or s.endpoint_key is None:
            return
        self._avoid[new] = s.endpoint_key
        while len(self._avoid) > MAX_AVOID:
            self._avoid.popitem(last=False)
        if s.idle():
            pinned, s.endpoint_key = s.endpoint_key, None
            self._on_unpinned(s, pinned)

    def _avoided(self, session: str | None) -> str | None:
        """The endpoint a new identity's first pin should not take (its predecessor's), if any."""
        return self._avoid.get(session) if session is not None and self._avoid else None

    def _pinned(self, session: str) -> None:
        """*session* has its first pin: what it had to avoid is done with."""
        if self._avoid:
            self._avoid.pop(session, None)

    def _repin_off_tier(self, s: SessionState, host: str) -> None:
        """*s*'s pin is outside *host*'s proxy tier now (the host moved up or back): a new pin within it."""
        if s.endpoint_key is not None and not self._may_take(host, s.endpoint_key):
            self._repin(s, f"proxy tier of {host} moved")

    def _repin(self, s: SessionState, why: str) -> None:
        """Unpin *s*: its next request picks a new endpoint."""
        assert s.endpoint_key is not None
        old = self._endpoints[s.endpoint_key].endpoint.label
        pinned, s.endpoint_key = s.endpoint_key, None
        self._on_unpinned(s, pinned)
        self.listeners.on_session_repinned(s.key, old, why)

    def _session_lost(self, w: Waiter, reason: str) -> None:
        """*w*'s session cannot go on: it and everything queued behind it fail."""
        assert w.session is not None
        s = self._sessions[w.session]
        s.lost = reason
        for other in list(s.queue):
            self._fail(other, SessionEndpointLost(reason))
        self._fail(w, SessionEndpointLost(reason))
