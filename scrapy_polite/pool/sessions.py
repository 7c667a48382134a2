"""Helpers for sticky sessions: one identity per task, carried across steps."""

from __future__ import annotations

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
