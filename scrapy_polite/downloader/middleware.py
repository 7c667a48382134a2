"""PoliteProxyMiddleware: one endpoint per request, enforced gates, re-queues.

Enable it with the add-on (``ADDONS = {"scrapy_polite.Addon": 500}``), which
places it at 650: after RedirectMiddleware (600) and before CookiesMiddleware
(700), SplashMiddleware (725) and HttpProxyMiddleware (750), so it sees raw
429s before Redirect and Retry do and sets ``meta['proxy']`` before the
proxy credentials are derived from it. See docs/architecture.md.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any, cast

from scrapy import signals
from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet.defer import CancelledError

from scrapy_polite import signals as polite_signals
from scrapy_polite.downloader import playwright as playwright_support
from scrapy_polite.downloader import requeue
from scrapy_polite.downloader.attempts import Attempts
from scrapy_polite.downloader.blame import Blame
from scrapy_polite.downloader.blocked_hosts import BlockedHosts
from scrapy_polite.downloader.exit_ip import ExitIps
from scrapy_polite.downloader.gate_events import GateEvents
from scrapy_polite.downloader.identities import Identities
from scrapy_polite.downloader.jobdir import dropped_at_close
from scrapy_polite.downloader.maintenance import Maintenance
from scrapy_polite.downloader.pace import Pace
from scrapy_polite.downloader.proxy_meta import (
    LEASE_KEY,
    drop_inherited_slot,
    host_key,
    no_proxy,
    pool_endpoint,
    pop_not_before,
    preset_proxy,
)
from scrapy_polite.downloader.recorder import Recorder
from scrapy_polite.downloader.response_policy import ResponsePolicy, load_policy
from scrapy_polite.downloader.transport import holds_lease, leases_may_return, restarted, send_through
from scrapy_polite.errors import HostBlocked, NoUsableEndpoints, SessionEndpointLost, SpiderClosing
from scrapy_polite.gate.state import Lease
from scrapy_polite.runtime import Runtime, enabled_runtime
from scrapy_polite.timers import call_later

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response

logger = logging.getLogger(__name__)


def granted(acquiring: Any) -> Lease | None:
    """The lease *acquiring* already fired with (the gate granted at once), without a Future to await."""
    result = getattr(acquiring, "result", None) if acquiring.called else None
    return result if isinstance(result, Lease) else None


class PoliteProxyMiddleware:
    """Assigns each request an endpoint and holds it until the gates allow.

    It builds the parts of the request path it owns (see docs/architecture.md, "Wiring"); the
    throttle hears of each answer through the ``pace_*`` signals, the stats through ``outcome_recorded``.
    """

    def __init__(self, crawler: Crawler, runtime: Runtime, policy: ResponsePolicy) -> None:
        self.crawler = crawler
        self.config = runtime.config
        self.gate = runtime.gate
        self.stats = crawler.stats
        self.maintenance = Maintenance(crawler, self.config, self.gate)
        self.exit_ips = ExitIps(crawler, self.config)
        self.recorder = Recorder(crawler, self.exit_ips, requeue.Budgets.from_config(self.config), runtime.tiers)
        self.identities = Identities(crawler, self.config, self.gate)
        self.blocked = BlockedHosts(runtime, self.stats)
        pace = Pace(crawler.signals)
        blame = Blame(crawler, runtime, self.identities, pace, self.blocked)
        self.attempts = Attempts(self.config, policy, pace, self.stats, blame, self.recorder)
        #: Attempts that left the downloader this turn of the loop, their answers not judged yet.
        self._leaving: list[tuple[Request, Lease]] = []
        self.playwright = playwright_support.Contexts(crawler, self.config, self.gate)
        self.gate.listen(GateEvents(crawler, self.config, self.gate, self.maintenance).listeners())
        polite_signals.connect(crawler, {
            signals.spider_opened: self._spider_opened,
            signals.spider_closed: self._spider_closed,
            signals.request_left_downloader: self._request_left,
            polite_signals.page_marked: self.marked,
        })
        if leases_may_return(crawler.settings, PoliteProxyMiddleware):
            # A Splash request goes back to the scheduler holding its lease: if it is dropped there, free it.
            crawler.signals.connect(self._request_dropped, signal=signals.request_dropped)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> PoliteProxyMiddleware:
        runtime = enabled_runtime(crawler)
        # Built now, so a POLITE_RESPONSE_POLICY that cannot be fails at start-up.
        return cls(crawler, runtime, load_policy(crawler, runtime.config.response_policy))

    # -- lifecycle --------------------------------------------------------

    def _spider_opened(self, spider: Any) -> None:
        self.maintenance.opened(spider)
        self.exit_ips.start(self.gate.endpoints)

    async def _spider_closed(self, spider: Any, reason: str) -> None:
        stopping = self.maintenance.closed(spider, reason)
        if stopping is not None:
            await maybe_deferred_to_future(stopping)

    def host_key(self, request: Request) -> str:
        return host_key(request, self.config.host_key)

    # -- downloader middleware API ----------------------------------------

    async def process_request(self, request: Request, spider: Any = None) -> Request | None:
        meta = request.meta
        if meta.get("polite") is False or meta.get("dont_proxy"):
            return None
        if no_proxy(meta):
            self.stats.inc_value("polite/bypassed/no_proxy")
            return None
        if holds_lease(request):
            return None
        if (fresh := restarted(request)) is not None:
            return fresh
        preset = preset_proxy(meta)
        pinned = None
        if preset is not None:
            pinned = pool_endpoint(self.gate.endpoints, preset)
            if pinned is None:
                self.stats.inc_value("polite/bypassed/preset_proxy")
                logger.debug("%s keeps its own meta['proxy'], outside the pool", request.url)
                return None
        drop_inherited_slot(meta)
        session = self.identities.of(meta)
        host = self.host_key(request)
        if (blocked := self.blocked.refusal(host)) is not None:
            raise blocked
        not_before = pop_not_before(meta)
        arrived = time.monotonic()
        acquiring = self.gate.acquire(host, session, not_before, tag=request.url, endpoint=pinned)
        self.blocked.waiting(host, acquiring)
        try:
            lease = granted(acquiring)
            if lease is None:
                lease = cast(Lease, await maybe_deferred_to_future(acquiring))
        except CancelledError:
            if (blocked := self.blocked.refusal(host)) is None:
                raise
            raise blocked from None
        meta[LEASE_KEY] = lease
        probing = self.exit_ips.known(lease.endpoint)
        if probing is not None:
            await maybe_deferred_to_future(probing)
        meta["polite_endpoint"] = lease.endpoint.label
        meta["polite_wait"] = time.monotonic() - arrived
        meta["polite_host"] = host
        return await send_through(request, lease, self.playwright)

    def _request_left(self, request: Request, **_: Any) -> None:
        """Scrapy's per-request signals: the lease goes back as the attempt leaves the downloader.

        Scrapy sends ``request_left_downloader`` before the answer reaches ``process_response``,
        which judges it and gives the lease back then, so that a pause or a cooled IP the answer
        leads to binds the next grant. Here the lease waits for the end of the loop's turn, and
        goes back then only if nothing judged it (an answer another middleware turned into a
        request).

        Per-request receivers take the signal's other arguments as ``**_``: pydispatch then passes
        them on as they are, where for a fixed signature it sorts them out on every call.
        """
        self.playwright.finish(request)  # the browser is done with it: its context frees, its render is timed
        lease = request.meta.get(LEASE_KEY)
        if lease is None or lease.released:
            return
        self._leaving.append((request, lease))
        if len(self._leaving) == 1:
            call_later(0, self._give_back_unjudged)

    def _request_dropped(self, request: Request, **_: Any) -> None:
        lease = request.meta.get(LEASE_KEY)
        if lease is not None and not lease.released:
            self._give_back(request, lease)

    def _give_back_unjudged(self) -> None:
        leaving, self._leaving = self._leaving, []
        for request, lease in leaving:
            if not lease.released:
                self._give_back(request, lease)

    def process_response(self, request: Request, response: Response, spider: Any = None) -> Any:
        lease: Lease | None = request.meta.get(LEASE_KEY)
        if lease is None:
            return response
        try:  # judged before the slot frees: a pause or a cooled IP it leads to binds the next grant
            return self.attempts.answered(request, response, lease)
        finally:
            self._give_back(request, lease)

    def marked(self, response: Response, kind: str, reason: str) -> list[Request]:
        """A page the spider's callback marked as a challenge or ban (``page_marked``, from ``PoliteMarksMiddleware``)."""
        request = response.request
        lease: Lease | None = request.meta.get(LEASE_KEY) if request is not None else None
        return [] if lease is None else self.attempts.marked(response, lease, kind, reason)

    def process_exception(self, request: Request, exception: Exception, spider: Any = None) -> Any:
        lease: Lease | None = request.meta.get(LEASE_KEY)
        if isinstance(exception, SpiderClosing):
            dropped_at_close(self.crawler, request)
            return None
        if isinstance(exception, HostBlocked):
            self.recorder.not_sent(request, exception, self.host_key(request), kind="host_blocked")
            return None
        if isinstance(exception, (SessionEndpointLost, NoUsableEndpoints)):
            self.recorder.not_sent(request, exception, self.host_key(request))
            if isinstance(exception, SessionEndpointLost):
                logger.error("gave up %s: %s", request.url, exception)
            return None
        if lease is None:
            return None
        try:
            return self.attempts.failed(request, exception, lease)
        finally:
            self._give_back(request, lease)

    def _give_back(self, request: Request, lease: Lease) -> None:
        self.gate.release(lease)
        self.playwright.finish(request)
