"""How a leased endpoint reaches the download: Splash's arguments, a browser context, or ``meta['proxy']``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from scrapy.utils.conf import build_component_list

from scrapy_polite.downloader import playwright as playwright_support
from scrapy_polite.downloader import splash as splash_support
from scrapy_polite.downloader.proxy_meta import LEASE_KEY, OWN_PROXY_KEY

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.settings import BaseSettings

    from scrapy_polite.gate.local import Lease


#: Scrapy's downloader middlewares that never answer ``process_request`` with a request: placed after
#: this one, none of them can send a request back to the scheduler still holding the lease it got here.
NEVER_REQUEUE = frozenset({
    "scrapy.downloadermiddlewares.cookies.CookiesMiddleware",
    "scrapy.downloadermiddlewares.httpproxy.HttpProxyMiddleware",
    "scrapy.downloadermiddlewares.stats.DownloaderStats",
    "scrapy.downloadermiddlewares.httpcache.HttpCacheMiddleware",
})


def leases_may_return(settings: BaseSettings, cls: type) -> bool:
    """Whether a downloader middleware after *cls* may send a leased request back to the scheduler.

    Only such a request can be dropped there (a duplicate) with a lease it never used: Splash's
    middleware does it to every Splash request, a project's own may. Without one, nothing needs to
    hear ``request_dropped``, which Scrapy sends for every duplicate link a spider yields.
    """
    order = build_component_list(settings.getwithbase("DOWNLOADER_MIDDLEWARES"))
    mine = next((i for i, c in enumerate(order)
                 if _path(c) == _path(cls) or (isinstance(c, type) and issubclass(c, cls))), None)
    return mine is None or any(_path(c) not in NEVER_REQUEUE for c in order[mine + 1:])


def _path(component: Any) -> str:
    """A component's class path, as written in the settings or of the class given."""
    return f"{component.__module__}.{component.__qualname__}" if isinstance(component, type) else str(component)


def holds_lease(request: Request) -> bool:
    """The second pass of a Splash request (to Splash itself): the lease of its first pass holds."""
    lease = request.meta.get(LEASE_KEY)
    return lease is not None and not lease.released and bool(request.meta.get("_splash_processed"))


def restarted(request: Request) -> Request | None:
    """A processed Splash request sent again (RetryMiddleware, Splash's 498 retry), rebuilt from its original.

    Its JSON body names the proxy of an earlier lease; ``None`` for any other request.
    """
    if not splash_support.is_processed(request):
        return None
    fresh = splash_support.fresh_request(request)
    if fresh is not None:
        fresh.meta.pop(LEASE_KEY, None)
    return fresh


async def send_through(request: Request, lease: Lease, contexts: playwright_support.Contexts) -> Request | None:
    """Point *request* at *lease*'s endpoint; a request to send instead, or ``None`` to go on."""
    meta, url = request.meta, lease.endpoint.url
    if splash_support.is_splash(request):
        if meta.get("_splash_processed"):
            # No original to start over from: rewrite the serialised proxy instead.
            return splash_support.with_proxy(request, url)
        splash_support.remember_original(request)
        splash_support.set_proxy(request, url)
        meta.pop("proxy", None)
    elif playwright_support.is_playwright(request):
        # The browser context carries the proxy; meta['proxy'] would only add a header to the page.
        await contexts.bind(request, lease)
        meta.pop("proxy", None)
    else:
        meta["proxy"] = meta[OWN_PROXY_KEY] = url
    return None
