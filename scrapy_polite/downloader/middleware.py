"""PoliteProxyMiddleware: one endpoint per request, enforced gates, re-queues.

Enable it with the add-on (``ADDONS = {"scrapy_polite.Addon": 500}``), which
places it at 650: after RedirectMiddleware (600) and before CookiesMiddleware
(700), SplashMiddleware (725) and HttpProxyMiddleware (750), so it sees raw
429s before Redirect and Retry do and sets ``meta['proxy']`` before the
proxy credentials are derived from it. See docs/architecture.md.
"""

from __future__ import annotations

import logging
import random
import time
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.utils.defer import maybe_deferred_to_future

from scrapy_polite.downloader import answers, failures, requeue
from scrapy_polite.downloader import playwright as playwright_support
from scrapy_polite.downloader import splash as splash_support
from scrapy_polite.downloader.blame import Blame
from scrapy_polite.downloader.exit_ip import ExitIps
from scrapy_polite.downloader.gate_events import GateEvents
from scrapy_polite.downloader.identities import Identities
from scrapy_polite.downloader.jobdir import dropped_at_close, report_dropped
from scrapy_polite.downloader.maintenance import Maintenance, announce
from scrapy_polite.downloader.proxy_meta import (
    LEASE_KEY,
    REVISES_KEY,
    host_key,
    pool_endpoint,
    pop_not_before,
    preset_proxy,
)
from scrapy_polite.downloader.recorder import Recorder
from scrapy_polite.downloader.response_policy import BAN, PROXY_ERROR, RATE_LIMITED, STRONG, Verdict
from scrapy_polite.downloader.retry_after import cooldown
from scrapy_polite.downloader.transport import holds_lease, restarted, send_through
from scrapy_polite.errors import NoUsableEndpoints, SessionEndpointLost, SpiderClosing
from scrapy_polite.gate.state import Lease
from scrapy_polite.runtime import enabled_runtime

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from scrapy.http.headers import Headers

logger = logging.getLogger(__name__)


class PoliteProxyMiddleware:
    """Assigns each request an endpoint and holds it until the gates allow."""

    def __init__(self, crawler: Crawler) -> None:
        rt = enabled_runtime(crawler)
        self.crawler = crawler
        self.runtime = rt
        self.config = rt.config
        self.gate = rt.gate
        self.stats = crawler.stats
        self._rng = random.Random()
        self.maintenance = Maintenance(crawler, self.config, self.gate)
        self.exit_ips = rt.exit_ips = ExitIps(crawler, self.config)
        self.recorder = Recorder(crawler, self.exit_ips, requeue.Budgets.from_config(self.config), rt.tiers)
        self.identities = Identities(crawler, self.config)
        self.blame = Blame(crawler, rt, self.identities)
        self.playwright = playwright_support.Contexts(crawler, self.config, self.gate)
        self.gate.listen(GateEvents(crawler, self.config, self.gate, self.maintenance).listeners())
        rt.middleware = self
        crawler.signals.connect(self._spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(self._spider_closed, signal=signals.spider_closed)
        crawler.signals.connect(self._request_left, signal=signals.request_left_downloader)
        # A Splash request goes back to the scheduler holding its lease: if it is dropped there, free it.
        crawler.signals.connect(self._request_left, signal=signals.request_dropped)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> PoliteProxyMiddleware:
        return cls(crawler)

    # -- lifecycle --------------------------------------------------------

    def _spider_opened(self, spider: Any) -> None:
        announce(self.config, self.crawler, spider)
        self.stats.set_value("polite/endpoints", len(self.config.endpoints))
        self.gate.start()
        self.exit_ips.start(self.gate.endpoints)
        self.maintenance.start()

    async def _spider_closed(self, spider: Any, reason: str) -> None:
        self.maintenance.stop()
        self.stats.set_value("polite/sessions", len(self.gate.sessions()))
        if self.gate.outages:
            self.stats.set_value("polite/state_outages", self.gate.outages)
        report_dropped(self.stats, reason, spider)
        if self.gate.reasserted:
            self.stats.set_value("polite/state_reasserted", self.gate.reasserted)
        # A shared gate hands back what this process holds before the crawl ends.
        stopping = self.gate.stop()
        if stopping is not None:
            await maybe_deferred_to_future(stopping)

    def host_key(self, request: Request) -> str:
        return host_key(request, self.config.host_key)

    # -- downloader middleware API ----------------------------------------

    async def process_request(self, request: Request, spider: Any = None) -> Request | None:
        meta = request.meta
        if meta.get("polite") is False or meta.get("dont_proxy"):
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
                logger.debug("scrapy-polite: %s keeps its own meta['proxy'], outside the pool", request.url)
                return None
        session = self.identities.of(meta)
        host = self.host_key(request)
        not_before = pop_not_before(meta)
        arrived = time.monotonic()
        acquiring = self.gate.acquire(host, session, not_before, tag=request.url, endpoint=pinned)
        lease = await maybe_deferred_to_future(acquiring)
        meta[LEASE_KEY] = lease
        probing = self.exit_ips.known(lease.endpoint)
        if probing is not None:
            await maybe_deferred_to_future(probing)
        meta["polite_endpoint"] = lease.endpoint.label
        meta["polite_wait"] = time.monotonic() - arrived
        meta["polite_host"] = host
        return await send_through(request, lease, self.playwright)

    def _request_left(self, request: Request, spider: Any = None) -> None:
        lease = request.meta.get(LEASE_KEY)
        if lease is not None:
            self.gate.release(lease)
        self.playwright.finish(request)

    def process_response(self, request: Request, response: Response, spider: Any = None) -> Any:
        lease: Lease | None = request.meta.get(LEASE_KEY)
        if lease is None:
            return response
        self.gate.release(lease)
        self.playwright.finish(request)
        status, headers = response.status, response.headers
        if splash_support.is_processed(request):
            answer = splash_support.classify(request, response)
            if answer.kind == "splash":
                # Splash's own failure (overloaded, timeout, script error) says nothing about
                # the target or the proxy: no throttling; RetryMiddleware decides on a retry.
                self.stats.inc_value("polite/splash_errors")
                self.stats.inc_value(f"polite/splash_errors/{response.status}")
                logger.debug("scrapy-polite: %s for %s, not the target's answer", answer.reason, request)
                return response
            if answer.kind == "proxy":
                self.blame.endpoint_failed(lease, answer.reason)
                return self.recorder.requeue(request, "proxy", lease, response=response)
            status, headers = answer.status or status, answer.headers
        return self._answered(request, response, lease, status, headers)

    def _answered(self, request: Request, response: Response, lease: Lease, status: int, headers: Headers) -> Any:
        """The target's (or the proxy's) answer *status*, as the response policy judges it."""
        verdict = self.runtime.policy.classify(request, response, status=status, headers=headers)
        if verdict.kind == PROXY_ERROR:
            self.blame.endpoint_failed(lease, verdict.reason)
            return self.recorder.requeue(request, "proxy", lease, response=response)
        if verdict.kind == RATE_LIMITED:
            delay = self._cooldown(headers.get(b"Retry-After"))
            self.blame.rate_limited(lease, status, delay, verdict.proxy_side)
            return self.recorder.requeue(
                request, "rate", lease, response=response, delay=delay, proxy_side=verdict.proxy_side
            )
        self.blame.answered(lease)
        if verdict.kind in STRONG:
            return self._flagged(request, response, lease, verdict, status)
        if self.runtime.throttle is not None:
            self.runtime.throttle.ok(lease.host, status, gap=lease.gap, granted_at=lease.granted_at)
        self.recorder.attempt(request, lease, response=response, verdict=verdict.kind)
        return response

    def _flagged(self, request: Request, response: Response, lease: Lease, verdict: Verdict, status: int) -> Any:
        """A challenge or ban: the pool and the identity hear of it, and the request goes again."""
        if verdict.kind == BAN:
            self.blame.banned(lease, status)
        else:
            self.blame.challenged(request, response, lease, verdict, self._cooldown(None))
        self.blame.identity_flagged(request, lease, verdict)
        return self.recorder.requeue(request, "ban" if verdict.kind == BAN else "challenge", lease, response=response)

    def marked(self, response: Response, kind: str, reason: str) -> list[Request]:
        """A page the spider's callback marked as a challenge or ban: re-queued like one; its record revises the page's."""
        request = response.request
        lease: Lease | None = request.meta.get(LEASE_KEY) if request is not None else None
        if request is None or lease is None:
            return []
        request.meta[REVISES_KEY] = True
        new = self._flagged(request, response, lease, Verdict(kind, reason), response.status)
        return [new] if new is not None and new is not response else []

    def process_exception(self, request: Request, exception: Exception, spider: Any = None) -> Any:
        lease: Lease | None = request.meta.get(LEASE_KEY)
        if isinstance(exception, SpiderClosing):
            dropped_at_close(self.crawler, request)
            return None
        if isinstance(exception, (SessionEndpointLost, NoUsableEndpoints)):
            self.recorder.not_sent(request, exception, self.host_key(request))
            if isinstance(exception, SessionEndpointLost):
                logger.error("scrapy-polite: gave up %s: %s", request.url, exception)
            return None
        if lease is None:
            return None
        self.gate.release(lease)
        self.playwright.finish(request)
        failure = answers.classify_exception(request, exception)
        if failure.kind == answers.SPLASH:
            # The endpoint stays healthy; RetryMiddleware decides on a retry.
            self.stats.inc_value("polite/splash_errors")
            self.stats.inc_value(f"polite/splash_errors/{failure.reason}")
            return None
        if failure.kind == failures.PROXY_RATE:
            delay = self._cooldown(None)
            self.blame.rate_limited(lease, None, delay, proxy_side=True)
            return self.recorder.requeue(request, "rate", lease, exception=exception, delay=delay, proxy_side=True)
        if failure.kind == failures.PROXY:
            self.blame.endpoint_failed(lease, failure.reason)
            return self.recorder.requeue(request, "proxy", lease, exception=exception)
        if failure.kind == failures.AMBIGUOUS:
            self.blame.unanswered(lease, failure.reason, request.url)
            return self.recorder.requeue(request, "timeout", lease, exception=exception)
        self.recorder.attempt(request, lease, exception=exception)
        return None

    # -- helpers ----------------------------------------------------------

    def _cooldown(self, header: bytes | None) -> float:
        return cooldown(header, self.config.cooldown, self.config.retry_after_max, self._rng)
