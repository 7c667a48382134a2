"""Browser rendering (scrapy-playwright) through the pool: one browser context per lease's endpoint.

scrapy-playwright takes its proxy per browser context, so a rendered request is
bound, after the gate, to a context made with the leased endpoint's proxy;
:class:`Contexts` keeps those contexts bounded (``POLITE_PLAYWRIGHT_MAX_CONTEXTS``).
Nothing here imports scrapy-playwright. See docs/architecture.md.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler

    from scrapy_polite.gate.base import Gate
    from scrapy_polite.gate.state import Lease
    from scrapy_polite.settings.config import PoliteConfig

logger = logging.getLogger(__name__)

#: Prefix of the context names the pool owns.
PREFIX = "polite:"
#: Meta key of what the user wrote before the pool bound the request: {"context": ..., "kwargs": ...}.
USER_KEY = "_polite_playwright_user"
#: Meta key of the context this attempt holds (until :meth:`Contexts.finish`).
USE_KEY = "_polite_playwright_context"
#: Meta key of the monotonic time the attempt was handed to the browser.
START_KEY = "_polite_render_start"
#: Meta key of the seconds the last attempt spent in the browser (the attempt record's ``render``).
RENDER_KEY = "polite_render"
#: Error texts of Chromium that say the proxy, not the target, failed.
PROXY_ERROR_TEXTS = (
    "net::ERR_PROXY_CONNECTION_FAILED",
    "net::ERR_TUNNEL_CONNECTION_FAILED",
    "net::ERR_PROXY_AUTH_UNSUPPORTED",
    "net::ERR_PROXY_CERTIFICATE_INVALID",
    "net::ERR_NO_SUPPORTED_PROXIES",
)


def is_playwright(request: Request) -> bool:
    return bool(request.meta.get("playwright"))


def proxy_settings(proxy_url: str) -> dict[str, str]:
    """Playwright's ``proxy`` context option for an endpoint URL (credentials apart, decoded)."""
    parts = urlsplit(proxy_url)
    server = f"{parts.scheme}://{parts.hostname}" + (f":{parts.port}" if parts.port else "")
    proxy = {"server": server}
    if parts.username is not None:
        proxy["username"] = unquote(parts.username)
        proxy["password"] = unquote(parts.password or "")
    return proxy


def context_name(lease: Lease, user_context: str | None) -> str:
    """The context a lease renders in: per endpoint, per session, within the user's own context name.

    The endpoint's label (no credentials) names it, since scrapy-playwright logs context names.
    """
    name = f"{PREFIX}{lease.endpoint.label}"
    if lease.session is not None:
        name += f"|session={lease.session}"
    if user_context:
        name += f"|{user_context}"
    return name


def proxy_failure(exception: BaseException) -> str | None:
    """The Chromium error naming a proxy failure in *exception*, if it is one."""
    text = str(exception)
    return next((t for t in PROXY_ERROR_TEXTS if t in text), None)


def render_seconds(request: Request) -> float | None:
    value = request.meta.get(RENDER_KEY)
    return float(value) if value is not None else None


class Contexts:
    """The browser contexts the pool opened: bound to leases, bounded, closed when idle and unwanted."""

    def __init__(self, crawler: Crawler, config: PoliteConfig, gate: Gate) -> None:
        self.crawler = crawler
        self.gate = gate
        self.max_contexts = config.playwright_max_contexts
        self.block = config.playwright_block
        self.stats = crawler.stats
        #: Attempts in flight per context name, and when each context was last handed out.
        self.in_use: dict[str, int] = {}
        self.last_used: dict[str, float] = {}
        #: The endpoint key each context's proxy is for.
        self.endpoint_of: dict[str, str] = {}
        #: Cookies and storage of a session context closed to make room, for the one that replaces it.
        self.saved_state: dict[str, Any] = {}
        self._handler: Any = None
        self._lock: asyncio.Lock | None = None
        self._idle: asyncio.Event | None = None
        self._warned_user_proxy = False
        self._warned_no_handler = False

    # -- binding a request ---------------------------------------------------

    async def bind(self, request: Request, lease: Lease) -> None:
        """Point *request* at the context of *lease*'s endpoint, making room for it if needed."""
        meta = request.meta
        retry = USE_KEY in meta
        user = meta.setdefault(
            USER_KEY, {"context": meta.get("playwright_context"), "kwargs": meta.get("playwright_context_kwargs")}
        )
        name = context_name(lease, user["context"])
        meta["playwright_context"] = name
        kwargs = dict(user["kwargs"] or {})
        if "proxy" in kwargs and not self._warned_user_proxy:
            self._warned_user_proxy = True
            logger.warning(
                "ignored the proxy in playwright_context_kwargs of %s: a rendered request "
                "goes through its lease's endpoint", request.url,
            )
        kwargs["proxy"] = proxy_settings(lease.endpoint.url)
        handler = self._find_handler()
        if handler is not None:
            await self._make_room(handler, name)
        if name in self.saved_state:
            kwargs.setdefault("storage_state", self.saved_state[name])
        meta["playwright_context_kwargs"] = kwargs
        self._drop_stale_page(request, handler, name, retry)
        self.in_use[name] = self.in_use.get(name, 0) + 1
        self.last_used[name] = time.monotonic()
        self.endpoint_of[name] = lease.endpoint.key
        meta[USE_KEY] = name
        meta.pop(RENDER_KEY, None)
        meta[START_KEY] = time.monotonic()
        self.stats.inc_value("polite/rendered")

    def finish(self, request: Request) -> None:
        """The attempt left the browser (answer, error, drop): free its context, once, and time it."""
        meta = request.meta
        name = meta.get(USE_KEY)
        start = meta.pop(START_KEY, None)
        if name is None or start is None:
            return
        meta[RENDER_KEY] = round(time.monotonic() - start, 4)
        left = self.in_use.get(name, 0) - 1
        if left > 0:
            self.in_use[name] = left
        else:
            self.in_use.pop(name, None)
            if self._idle is not None:
                self._idle.set()

    # -- the bound -------------------------------------------------------------

    async def _make_room(self, handler: Any, name: str) -> None:
        """Close what must go before *name* is used: contexts of gone endpoints, then the LRU idle ones."""
        if self._lock is None:
            self._lock = asyncio.Lock()
            self._idle = asyncio.Event()
        gone = [n for n in self._live(handler) if n != name and not self.in_use.get(n) and self._endpoint_gone(n)]
        if not gone and name in self._held(handler):
            return
        async with self._lock:
            for other in gone:
                if not self.in_use.get(other):
                    await self._close(handler, other, "its endpoint left the pool")
            while name not in self._held(handler) and len(self._held(handler)) >= self.max_contexts:
                idle = [n for n in self._live(handler) if not self.in_use.get(n)]
                if not idle:
                    assert self._idle is not None
                    self._idle.clear()
                    await self._idle.wait()
                    continue
                victim = min(idle, key=lambda n: self.last_used.get(n, 0.0))
                await self._close(handler, victim, "room for another")

    def _live(self, handler: Any) -> list[str]:
        """The open contexts the pool owns (a crashed or closed one has left the handler's list)."""
        return [n for n in getattr(handler, "context_wrappers", {}) if n.startswith(PREFIX)]

    def _held(self, handler: Any) -> set[str]:
        """Open contexts and those bound to an attempt that scrapy-playwright has yet to create."""
        return set(self._live(handler)) | set(self.in_use)

    def _endpoint_gone(self, name: str) -> bool:
        key = self.endpoint_of.get(name)
        if key is None:
            return False
        st = self.gate.endpoints.get(key)
        return st is None or st.removed

    async def _close(self, handler: Any, name: str, why: str) -> None:
        # Out of the handler's list at once: a request bound meanwhile finds it gone and waits for
        # the room lock, so it gets the saved storage instead of a page in a closing context.
        wrapper = handler.context_wrappers.pop(name, None)
        if wrapper is None:
            return
        if "|session=" in name:
            try:
                self.saved_state[name] = await wrapper.context.storage_state()
            except Exception as exc:  # a crashed context has nothing to save
                logger.debug("could not save the storage of context %s: %s", name, exc)
        try:
            await wrapper.context.close()
        except Exception as exc:
            logger.debug("closing context %s failed: %s", name, exc)
        self.last_used.pop(name, None)
        self.endpoint_of.pop(name, None)
        self.stats.inc_value("polite/playwright/contexts_closed")
        logger.debug("closed browser context %s (%s)", name, why)

    def _drop_stale_page(self, request: Request, handler: Any, name: str, retry: bool) -> None:
        """A fresh page for a new attempt, and never a page of another endpoint's context.

        A page left in meta by an earlier attempt of this request (``playwright_include_page``)
        is closed; a page the user passed belongs to another context is dropped from meta.
        """
        page = request.meta.get("playwright_page")
        if page is None:
            return
        wrapper = getattr(handler, "context_wrappers", {}).get(name) if handler is not None else None
        ours = wrapper is not None and getattr(page, "context", None) is wrapper.context
        if retry or not ours:
            request.meta.pop("playwright_page", None)
            if retry and hasattr(page, "close"):
                asyncio.ensure_future(_quietly(page.close()))

    # -- scrapy-playwright's handler -----------------------------------------------

    def _find_handler(self) -> Any:
        """scrapy-playwright's download handler, once found; installs the sub-resource block on it."""
        if self._handler is not None:
            return self._handler
        handlers = getattr(getattr(getattr(self.crawler, "engine", None), "downloader", None), "handlers", None)
        found = [h for h in getattr(handlers, "_handlers", {}).values() if hasattr(h, "context_wrappers")]
        if not found:
            if not self._warned_no_handler:
                self._warned_no_handler = True
                logger.warning(
                    "a request asks for playwright, but no scrapy-playwright download handler "
                    "is set (DOWNLOAD_HANDLERS); its contexts are not bounded by the pool"
                )
            return None
        self._handler = found[0]
        if self.block:
            self._handler.abort_request = blocker(self.block, self._handler.abort_request)
        return self._handler


def blocker(types: frozenset[str], theirs: Any = None) -> Any:
    """A ``PLAYWRIGHT_ABORT_REQUEST`` predicate: abort sub-requests of *types*, or what *theirs* aborts."""

    async def abort(playwright_request: Any) -> bool:
        if playwright_request.resource_type in types:
            return True
        if theirs is None:
            return False
        verdict = theirs(playwright_request)
        if asyncio.iscoroutine(verdict):
            verdict = await verdict
        return bool(verdict)

    return abort


async def _quietly(coro: Any) -> None:
    try:
        await coro
    except Exception:  # the page of an earlier attempt may be closed already
        pass
