"""Helpers for sticky sessions: one identity per task, carried across steps."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

SESSION_KEY = "polite_session"


def session_meta(key: str, meta: dict[str, Any] | None = None) -> dict[str, Any]:
    """``meta`` for a request of session *key* (merged into *meta* if given)."""
    out = dict(meta or {})
    out[SESSION_KEY] = key
    return out


def follow_in_session(response: Any, url: Any, **kwargs: Any) -> Any:
    """``response.follow`` that keeps the response's session (and cookie jar).

    The follow-up request runs on the same endpoint, after the current one,
    so a login -> account -> checkout flow keeps one identity.
    """
    meta = dict(kwargs.pop("meta", None) or {})
    key = response.meta.get(SESSION_KEY)
    if key is not None:
        meta.setdefault(SESSION_KEY, key)
        if "cookiejar" in response.meta:
            meta.setdefault("cookiejar", response.meta["cookiejar"])
    return response.follow(url, meta=meta, **kwargs)


class SessionIdentities:
    """The current identity of each session: a new one after a retirement or past its limits.

    A session's identity is the key the gate pins (and the cookie jar): the
    first is the session's own name, later ones ``<name>#<n>``, which the gate
    pins afresh, away from the endpoint benched for the host.
    """

    def __init__(
        self,
        max_requests: int | None = None,
        max_age: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        max_sessions: int = 100_000,
    ) -> None:
        self.max_requests, self.max_age, self._clock = max_requests, max_age, clock
        self.max_sessions = max_sessions
        #: session -> [generation, requests in it, when it started]
        self._live: OrderedDict[str, list[Any]] = OrderedDict()

    def identity(self, session: str) -> tuple[str, str | None]:
        """The gate key for *session*'s next request, and why its previous identity ended (or None)."""
        now = self._clock()
        st = self._live.get(session)
        if st is None:
            st = self._live[session] = [0, 0, now]
            while len(self._live) > self.max_sessions:
                self._live.popitem(last=False)
        self._live.move_to_end(session)
        why = None
        if self.max_requests is not None and st[1] >= self.max_requests:
            why = f"{st[1]} requests (POLITE_SESSION_MAX_REQUESTS)"
        elif self.max_age is not None and st[1] and now - st[2] >= self.max_age:
            why = f"{now - st[2]:.0f} s old (POLITE_SESSION_MAX_AGE)"
        if why is not None:
            self._next(st, now)
        st[1] += 1
        return self.key(session, st[0]), why

    def current(self, session: str) -> str | None:
        """The gate key of *session*'s current identity (None: not seen, or forgotten)."""
        st = self._live.get(session)
        return None if st is None else self.key(session, st[0])

    def retire(self, session: str) -> None:
        """End *session*'s current identity: its next request starts a new one."""
        st = self._live.get(session)
        if st is not None:
            self._next(st, self._clock())

    @staticmethod
    def key(session: str, generation: int) -> str:
        return session if generation == 0 else f"{session}#{generation}"

    @staticmethod
    def _next(st: list[Any], now: float) -> None:
        st[0], st[1], st[2] = st[0] + 1, 0, now
