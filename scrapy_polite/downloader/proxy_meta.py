"""The request meta the middleware owns: the lease, its own ``meta['proxy']``, a not-before time, the host key."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from scrapy.utils.httpobj import urlparse_cached
from scrapy.utils.url import add_http_if_no_scheme

if TYPE_CHECKING:
    from scrapy import Request

LEASE_KEY = "_polite_lease"
#: The ``meta['proxy']`` the package itself set, so that a retry is not taken for a user's choice.
OWN_PROXY_KEY = "_polite_proxy"
NOT_BEFORE_KEY = "_polite_not_before"
#: Whether ``meta['download_slot']`` was set before the package first saw the request (the user's own slot).
SLOT_SET_KEY = "_polite_slot_set"
#: Set on a request whose page the spider marked: its next record revises the one that counted it as a page.
REVISES_KEY = "_polite_revises"


def host_key(request: Request, mode: str) -> str:
    """The key the host gate limits: the download slot (``POLITE_HOST_KEY = "slot"``) or the hostname."""
    if request.meta.get("_splash_processed") and request.meta.get("polite_host"):
        # A request to Splash is keyed on the target its first pass was keyed on.
        return str(request.meta["polite_host"])
    if mode == "slot":
        slot = request.meta.get("download_slot")
        if slot:
            return str(slot)
    return urlparse_cached(request).hostname or ""


def drop_inherited_slot(meta: Any) -> None:
    """Forget a ``download_slot`` a redirect copied from the hop before, unless the user set it.

    Scrapy's downloader sets the slot of the first hop (its host) in the meta, and
    ``RedirectMiddleware`` copies the meta: without this, a page redirected to
    another host is gated, throttled and counted as the host it came from.
    """
    user_set = meta.setdefault(SLOT_SET_KEY, bool(meta.get("download_slot")))
    if not user_set and meta.get("redirect_urls") and not meta.get("_splash_processed"):
        meta.pop("download_slot", None)


def session_of(meta: Any, cookiejar: bool) -> str | None:
    """The request's ``polite_session``; with *cookiejar* (``POLITE_SESSION_COOKIEJAR``) it gets its own jar."""
    session = meta.get("polite_session")
    if session is None:
        return None
    session = str(session)
    if cookiejar and "cookiejar" not in meta:
        meta["cookiejar"] = f"polite:{session}"
    return session


def pop_not_before(meta: Any) -> float:
    """The monotonic time a re-queued request may leave the gate (0: at once), taken out of *meta*.

    Stored as wall time so it survives a trip through a disk queue.
    """
    not_before = meta.pop(NOT_BEFORE_KEY, 0.0)
    if not not_before:
        return 0.0
    return float(time.monotonic() + max(0.0, not_before - time.time()))


def preset_proxy(meta: Any) -> str | None:
    """The ``meta['proxy']`` the request came with, unless the package set it on an earlier attempt."""
    proxy = meta.get("proxy")
    if not proxy or _is_own_proxy(meta):
        return None
    return str(proxy)


def no_proxy(meta: Any) -> bool:
    """``meta['proxy'] = None``: Scrapy's "no proxy for this request", honoured as ``dont_proxy``."""
    return "proxy" in meta and meta["proxy"] is None and OWN_PROXY_KEY not in meta


def forget_own_proxy(meta: Any) -> None:
    """Drop the package's own ``meta['proxy']`` (and its mark) before the request goes round again."""
    if _is_own_proxy(meta):
        meta.pop("proxy", None)
    meta.pop(OWN_PROXY_KEY, None)


def forget_attempt(meta: Any) -> None:
    """Drop what one attempt left in *meta* (its lease, its own proxy) before the request goes round again."""
    meta.pop(LEASE_KEY, None)
    meta.pop(REVISES_KEY, None)
    forget_own_proxy(meta)


def pool_endpoint(endpoints: Any, proxy: str) -> str | None:
    """The key of the pool endpoint (a gate's ``endpoints``) whose URL, credentials included, is *proxy*."""
    wanted = proxy_id(proxy)
    for key, st in endpoints.items():
        if not st.removed and proxy_id(st.endpoint.url) == wanted:
            return str(key)
    return None


def _is_own_proxy(meta: Any) -> bool:
    """Whether ``meta['proxy']`` is the one the package set: HttpProxyMiddleware may since have moved
    its credentials into a header, so scheme, host and port decide."""
    own, proxy = meta.get(OWN_PROXY_KEY), meta.get("proxy")
    if not own or not proxy:
        return False
    if proxy == own:
        return True
    (scheme, _, host, port), (own_scheme, _, own_host, own_port) = proxy_id(str(proxy)), proxy_id(str(own))
    return (scheme, host, port) == (own_scheme, own_host, own_port)


def proxy_id(url: str) -> tuple[str, str, str | None, int | None]:
    """A proxy URL compared as Scrapy would connect: scheme, credentials, host, port."""
    parts = urlsplit(add_http_if_no_scheme(url))
    userinfo = parts.netloc.rpartition("@")[0]
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        port = None
    return parts.scheme.lower(), userinfo, (parts.hostname or "").lower(), port
