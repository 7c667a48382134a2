"""Requests waiting for a lease: queued per host and per session, cancelled, failed, or all failed at close."""

from __future__ import annotations

from twisted.internet.defer import Deferred

from scrapy_polite.errors import NoUsableEndpoints, SessionEndpointLost
from scrapy_polite.gate.core.hosts import HostLimits
from scrapy_polite.gate.state import SessionState, Waiter


class Waiting(HostLimits):
    """The queues of waiters: a backend grants from them, this keeps them consistent."""

    def acquire(
        self, host: str, session: str | None = None, not_before: float = 0.0, tag: str | None = None,
        endpoint: str | None = None,
    ) -> Deferred:
        """A Deferred that fires with a :class:`Lease` when *host* may be sent to.

        *tag* (the request URL) only matters to shared backends, which list
        what a crashed process was holding. *endpoint* (a key) restricts the
        lease to that endpoint, under the same gates.
        """
        now = self._clock()
        w = Waiter(host, session, not_before, now, Deferred(lambda d: self._cancel(w)), endpoint=endpoint,
                   token=self._new_token(), tag=tag)
        if self._closed:
            w.deferred.errback(self._close_error(self._closed))
            return w.deferred
        self.start()
        if session is not None:
            s = self._sessions.get(session)
            if s is None:
                s = self._sessions[session] = SessionState(session)
            if s.lost:
                w.deferred.errback(SessionEndpointLost(s.lost))
                return w.deferred
            s.queue.append(w)
            self._idle_sessions.pop(session, None)
        h = self.host(host)
        h.waiters.append(w)
        self._waiting_count += 1
        self._load_changed(host, h)
        self._on_enqueued(w, h, now)
        return w.deferred

    def _cancel(self, w: Waiter) -> None:
        w.done = True
        self._drop(w)

    def _drop(self, w: Waiter) -> None:
        """Take *w* out of its host's and its session's queues, wherever it is."""
        h = self._hosts.get(w.host)
        if h is not None and w in h.waiters:
            h.waiters.remove(w)
            self._waiting_count -= 1
            self._load_changed(w.host, h)
        s = self._sessions.get(w.session) if w.session is not None else None
        if s is not None and w in s.queue:
            s.queue.remove(w)
            self._idle_session(s)
        self._on_dropped(w)

    def _fail(self, w: Waiter, exc: Exception) -> None:
        done, w.done = w.done, True
        self._drop(w)
        if not done:
            w.deferred.errback(exc)

    def _idle_session(self, s: SessionState) -> None:
        if s.idle():
            self._idle_sessions[s.key] = self._clock()
            self._idle_sessions.move_to_end(s.key)

    def close(self, reason: str, error: type[Exception] = NoUsableEndpoints) -> None:
        """Fail every waiter with *error*, so the engine can close instead of hanging."""
        if self._closed:
            return
        self._closed = reason
        self._close_error = error
        for h in list(self._hosts.values()):
            while h.waiters:
                self._fail(h.waiters[0], error(reason))
        self._on_closed()
