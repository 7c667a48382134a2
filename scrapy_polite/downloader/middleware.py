"""PoliteProxyMiddleware: one endpoint per request, enforced gates, re-queues.

Enable it with the add-on (``ADDONS = {"scrapy_polite.Addon": 500}``), which
places it at 650: after RedirectMiddleware (600) in the request chain and
before CookiesMiddleware (700), SplashMiddleware (725) and
HttpProxyMiddleware (750). So it sees raw 429s before Redirect and Retry
do, can pick a per-session cookie jar, can hand the proxy to Splash before
the Splash arguments are serialised, and sets ``meta['proxy']`` before
HttpProxyMiddleware derives ``Proxy-Authorization`` from it.
"""

from __future__ import annotations

import logging
import os
import random
import time
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.utils.defer import maybe_deferred_to_future
from scrapy.utils.httpobj import urlparse_cached

from scrapy_polite import compat
from scrapy_polite import signals as polite_signals
from scrapy_polite.downloader import failures, requeue
from scrapy_polite.downloader import playwright as playwright_support
from scrapy_polite.downloader import splash as splash_support
from scrapy_polite.downloader.exit_ip import parse_exit_ip
from scrapy_polite.downloader.response_policy import (
    BAN,
    CHALLENGE,
    PROXY_ERROR,
    RATE_LIMITED,
    TARGET_ERROR,
    Verdict,
)
from scrapy_polite.downloader.retry_after import parse_retry_after
from scrapy_polite.errors import NoUsableEndpoints, PoliteConfigError, SessionEndpointLost, SpiderClosing
from scrapy_polite.gate.local import Lease
from scrapy_polite.metrics.outcome import Outcome
from scrapy_polite.pool.sessions import SessionIdentities
from scrapy_polite.runtime import enabled_runtime

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response

logger = logging.getLogger(__name__)

LEASE_KEY = "_polite_lease"
#: The ``meta['proxy']`` the package itself set, so that a retry is not taken for a user's choice.
OWN_PROXY_KEY = "_polite_proxy"
NOT_BEFORE_KEY = "_polite_not_before"
#: Set on a request whose page the spider marked: its next record revises the one that counted it as a page.
REVISES_KEY = "_polite_revises"


def is_splash(request: Request) -> bool:
    return bool(request.meta.get("splash"))


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
        self._file_mtime: float | None = None
        self._loops: list[Any] = []
        self._closing = False
        self._engine_ran = False
        self._warned_https_exit_ip = False
        self._warned_exit_ip_headers: set[str] = set()
        self.evidence = failures.EvidenceTracker(
            window=self.config.host_pause_window, host_endpoints=self.config.host_pause_endpoints
        )
        self.playwright = playwright_support.Contexts(crawler, self.config, self.gate)
        self.identities = SessionIdentities(self.config.session_max_requests, self.config.session_max_age)
        if rt.tiers is not None:
            rt.tiers.on_move = self._tier_moved
        rt.middleware = self
        self.gate._on_stalled = self._stalled
        self.gate._on_all_unusable = self._all_unusable
        self.gate._on_session_repinned = self._session_repinned
        if hasattr(self.gate, "on_orphans"):
            self.gate.on_orphans = self._orphans
        if hasattr(self.gate, "on_outage_timeout"):
            self.gate.on_outage_timeout = self._state_unreachable
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
        cfg = self.config
        labels = [e.label for e in cfg.endpoints]
        shown = ", ".join(labels[:5]) + (f", ... (+{len(labels) - 5})" if len(labels) > 5 else "")
        logger.info(
            "scrapy-polite: %(n)d endpoints [%(shown)s]; host concurrency %(hc)d (max %(hm)d), "
            "%(ec)d request(s) per endpoint, delay %(lo).2f-%(hi).2f s%(adaptive)s",
            {
                "n": len(labels), "shown": shown, "hc": cfg.host_concurrency,
                "hm": cfg.host_concurrency_max, "ec": cfg.endpoint_concurrency,
                "lo": cfg.delay[0], "hi": cfg.delay[1],
                "adaptive": ", adaptive" if cfg.adaptive else "",
            },
            extra={"spider": spider},
        )
        if cfg.host_overrides:
            # The gates space these hosts by their DOWNLOAD_SLOTS delay; Scrapy's slot must not add its own.
            compat.drop_slot_delays(getattr(self.crawler.engine, "downloader", None))
            for host, limits in cfg.host_overrides.items():
                logger.info(
                    "scrapy-polite: %s (DOWNLOAD_SLOTS): host concurrency %d (max %d), delay %.2f-%.2f s",
                    host, limits.concurrency, limits.concurrency_max, *limits.delay, extra={"spider": spider},
                )
        for label in cfg.duplicates:
            logger.warning("scrapy-polite: duplicate proxy %s ignored", label, extra={"spider": spider})
        self.stats.set_value("polite/endpoints", len(labels))
        self.gate.start()
        from twisted.internet import task

        loops = [(task.LoopingCall(self._watch_engine), 0.5), (task.LoopingCall(self._expire_leases), 5.0)]
        if cfg.proxies_file:
            self._file_mtime = _mtime(cfg.proxies_file)
            loops.append((task.LoopingCall(self._reload_proxies_file), cfg.proxies_file_check_interval))
        for loop, interval in loops:
            loop.start(interval, now=False)
            self._loops.append(loop)

    async def _spider_closed(self, spider: Any, reason: str) -> None:
        for loop in self._loops:
            if loop.running:
                loop.stop()
        self._loops.clear()
        self.stats.set_value("polite/sessions", len(self.gate.sessions()))
        outages = getattr(self.gate, "outages", 0)
        if outages:
            self.stats.set_value("polite/state_outages", outages)
        dropped = self.stats.get_value("polite/dropped_at_close", 0)
        if dropped:
            logger.info(
                "scrapy-polite: %d request(s) still waiting at the gate were not sent, as the spider closed "
                "(%s); %d kept in JOBDIR for the next run",
                dropped, reason, self.stats.get_value("polite/kept_at_close", 0), extra={"spider": spider},
            )
        reasserted = getattr(self.gate, "reasserted", 0)
        if reasserted:
            self.stats.set_value("polite/state_reasserted", reasserted)
        # A shared gate hands back what this process holds before the crawl ends.
        stopping = self.gate.stop()
        if stopping is not None:
            await maybe_deferred_to_future(stopping)

    def _keep_for_next_run(self, request: Request) -> bool:
        """Hand a request that never left the gate back to the scheduler, for ``JOBDIR`` to keep.

        Without the package it would still be in the scheduler, so a paused crawl
        (``JOBDIR``, Ctrl-C) must not lose it. The scheduler is still open here: the
        engine closes it after the downloader has emptied. It bypasses the dupefilter,
        which has already seen it.
        """
        if not self.crawler.settings.get("JOBDIR"):
            return False
        scheduler = compat.engine_scheduler(self.crawler.engine)
        if scheduler is None:
            return False
        kept = request.replace(dont_filter=True)
        kept.meta.pop(LEASE_KEY, None)
        forget_own_proxy(kept.meta)
        return bool(scheduler.enqueue_request(kept))

    def _orphans(self, process: str, count: int) -> None:
        self.stats.inc_value("polite/fleet/orphaned", count)

    def _watch_engine(self) -> None:
        """Release waiters once the engine starts closing, so it need not wait for them."""
        engine = getattr(self.crawler, "engine", None)
        # The engine runs only once its engine_started handlers are done (a browser starting, say).
        self._engine_ran = self._engine_ran or bool(getattr(engine, "running", False))
        if self._engine_ran and compat.engine_closing(engine):
            self._closing = True
            self.gate.close("spider closing", SpiderClosing)

    def _expire_leases(self) -> None:
        for lease in self.gate.expire_leases(self.config.lease_timeout):
            self.stats.inc_value("polite/leases_expired")
            logger.warning(
                "scrapy-polite: released %s for %s after %.0f s without an answer "
                "(the request never reached the downloader or never came back)",
                lease.endpoint.label, lease.host, self.config.lease_timeout,
            )

    def _reload_proxies_file(self) -> None:
        """Apply a changed proxies file; whatever goes wrong, the pool stays and the loop goes on.

        A LoopingCall stops for good on an exception, so nothing may escape: an
        unusable file is one ERROR (naming the file and the line, never its content).
        """
        path = self.config.proxies_file
        assert path is not None
        mtime = _mtime(path)
        if mtime == self._file_mtime:
            return
        self._file_mtime = mtime
        try:
            endpoints, _ = self.config.load_endpoints(reload=True)
            added, removed = self.gate.set_endpoints(endpoints)
        except PoliteConfigError as exc:
            logger.error("scrapy-polite: kept the current pool, as %s cannot be used: %s", path, exc)
            return
        except Exception:
            logger.exception("scrapy-polite: kept the current pool, as reloading %s failed", path)
            return
        if added or removed:
            logger.info(
                "scrapy-polite: %s changed: %d endpoint(s) added %s, %d removed %s",
                path, len(added), added, len(removed), removed,
            )
            self.stats.inc_value("polite/pool_reloads")
        self.stats.set_value("polite/endpoints", sum(not s.removed for s in self.gate.endpoints.values()))

    def _all_unusable(self) -> None:
        if self._closing:
            return
        logger.error(
            "scrapy-polite: every endpoint is dead or removed (%d failures in a row each); "
            "closing the spider", self.config.endpoint_max_failures,
        )
        self.gate.close("no usable endpoints")
        self._close_spider("polite_no_usable_endpoints")

    def _state_unreachable(self, down_for: float) -> None:
        """Redis away past ``POLITE_STATE_OUTAGE_TIMEOUT``: close rather than wait forever.

        The requests waiting at the gate take the usual close path (kept in JOBDIR,
        or counted in ``polite/dropped_at_close``); those in flight finish.
        """
        if self._closing:
            return
        logger.error(
            "scrapy-polite: the shared state at %s has been unreachable for %.0f s "
            "(POLITE_STATE_OUTAGE_TIMEOUT=%g); closing the spider",
            getattr(self.gate, "label", "Redis"), down_for, self.config.state_outage_timeout,
        )
        # The engine first, so the requests handed back to the scheduler stay there for JOBDIR.
        self._close_spider("polite_state_unreachable")
        self.gate.close("shared state unreachable", SpiderClosing)

    def _close_spider(self, reason: str) -> None:
        self._closing = True
        compat.close_spider(self.crawler, reason)

    def _session_repinned(self, session: str, old: str | None, reason: str) -> None:
        logger.warning("scrapy-polite: session %r leaves %s (%s); it gets a new endpoint", session, old, reason)
        self.stats.inc_value("polite/sessions/repinned")
        self.crawler.signals.send_catch_log(
            polite_signals.session_repinned, session=session, old=old, reason=reason
        )

    # -- keys ---------------------------------------------------------------

    def host_key(self, request: Request) -> str:
        """The key the host gate limits: the download slot (as Scrapy groups) or hostname."""
        if request.meta.get("_splash_processed") and request.meta.get("polite_host"):
            # A request to Splash is keyed on the target its first pass was keyed on.
            return str(request.meta["polite_host"])
        if self.config.host_key == "slot":
            slot = request.meta.get("download_slot")
            if slot:
                return str(slot)
        return urlparse_cached(request).hostname or ""

    # -- downloader middleware API ----------------------------------------

    async def process_request(self, request: Request, spider: Any = None) -> Request | None:
        meta = request.meta
        if meta.get("polite") is False or meta.get("dont_proxy"):
            return None
        lease: Lease | None = meta.get(LEASE_KEY)
        if lease is not None and not lease.released and meta.get("_splash_processed"):
            # Second pass of a Splash request: the lease from the first pass holds.
            return None
        if meta.get("_splash_processed") and is_splash(request):
            # A processed Splash request sent again (RetryMiddleware, Splash's 498 retry): its
            # JSON body names the proxy of an earlier lease, so it starts over from the original.
            fresh = splash_support.fresh_request(request)
            if fresh is not None:
                fresh.meta.pop(LEASE_KEY, None)
                return fresh
        preset = preset_proxy(meta)
        pinned = None
        if preset is not None:
            pinned = self._pool_endpoint(preset)
            if pinned is None:
                self.stats.inc_value("polite/bypassed/preset_proxy")
                logger.debug("scrapy-polite: %s keeps its own meta['proxy'], outside the pool", request.url)
                return None
        session = meta.get("polite_session")
        if session is not None:
            session = self._session_identity(str(session), meta)
        host = self.host_key(request)
        not_before = meta.pop(NOT_BEFORE_KEY, 0.0)
        if not_before:
            # Stored as wall time so it survives a trip through a disk queue.
            not_before = time.monotonic() + max(0.0, not_before - time.time())
        arrived = time.monotonic()
        acquiring = (
            self.gate.acquire(host, session, not_before, tag=request.url, endpoint=pinned)
            if pinned is not None else self.gate.acquire(host, session, not_before, tag=request.url)
        )
        lease = await maybe_deferred_to_future(acquiring)
        meta[LEASE_KEY] = lease
        probing = self.runtime.stats.exit_ip_known(lease.endpoint) if self.runtime.stats is not None else None
        if probing is not None:
            await maybe_deferred_to_future(probing)
        meta["polite_endpoint"] = lease.endpoint.label
        meta["polite_wait"] = time.monotonic() - arrived
        meta["polite_host"] = host
        if is_splash(request):
            if meta.get("_splash_processed"):
                # No original to start over from: rewrite the serialised proxy instead.
                return splash_support.with_proxy(request, lease.endpoint.url)
            splash_support.remember_original(request)
            splash_support.set_proxy(request, lease.endpoint.url)
            meta.pop("proxy", None)
        elif playwright_support.is_playwright(request):
            # The browser context carries the proxy; meta['proxy'] would only add a header to the page.
            await self.playwright.bind(request, lease)
            meta.pop("proxy", None)
        else:
            meta["proxy"] = meta[OWN_PROXY_KEY] = lease.endpoint.url
        return None

    def _pool_endpoint(self, proxy: str) -> str | None:
        """The key of the pool endpoint whose URL (credentials included) is *proxy*, if any."""
        wanted = _proxy_id(proxy)
        for key, st in self.gate.endpoints.items():
            if not st.removed and _proxy_id(st.endpoint.url) == wanted:
                return key
        return None

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
        status = response.status
        headers = response.headers
        if is_splash(request) and request.meta.get("_splash_processed"):
            answer = splash_support.classify(request, response)
            if answer.kind == "splash":
                # Splash's own failure (overloaded, timeout, script error) says nothing about
                # the target or the proxy: no throttling; RetryMiddleware decides on a retry.
                self.stats.inc_value("polite/splash_errors")
                self.stats.inc_value(f"polite/splash_errors/{response.status}")
                logger.debug("scrapy-polite: %s for %s, not the target's answer", answer.reason, request)
                return response
            if answer.kind == "proxy":
                self._endpoint_failed(lease, answer.reason)
                return self._requeue(request, "proxy", lease, response=response)
            status, headers = answer.status or status, answer.headers
        verdict = self.runtime.policy.classify(request, response, status=status, headers=headers)
        return self._answered(request, response, lease, verdict, status, headers)

    def _answered(
        self, request: Request, response: Response, lease: Lease, verdict: Verdict, status: int, headers: Any
    ) -> Any:
        """Act on the policy's *verdict*: re-queue, bench, slow down, or pass the answer on."""
        ep = lease.endpoint
        if verdict.kind == PROXY_ERROR:
            self._endpoint_failed(lease, verdict.reason)
            return self._requeue(request, "proxy", lease, response=response)
        if verdict.kind == RATE_LIMITED:
            delay = self._cooldown(headers.get(b"Retry-After"))
            if verdict.proxy_side:
                self.gate.cool_endpoint(ep.key, None, delay)
            elif self.runtime.throttle is not None:
                self.runtime.throttle.rate_limited(
                    lease.host, ep, delay, status, gap=lease.gap, slack=lease.slack, granted_at=lease.granted_at
                )
            else:
                self.gate.cool_endpoint(ep.key, lease.host, delay)
            return self._requeue(
                request, "rate", lease, response=response, delay=delay, proxy_side=verdict.proxy_side
            )
        self.gate.endpoint_ok(ep.key)
        self.evidence.success(ep.key, lease.host)
        if verdict.kind == CHALLENGE:
            return self._challenged(request, response, lease, verdict)
        if verdict.kind == BAN:
            return self._banned(request, response, lease, verdict, status)
        if self.runtime.throttle is not None:
            self.runtime.throttle.ok(lease.host, status, gap=lease.gap, granted_at=lease.granted_at)
        self._record(request, lease, response=response, verdict=verdict.kind)
        return response

    def _banned(self, request: Request, response: Response, lease: Lease, verdict: Verdict, status: int) -> Any:
        cfg, ep = self.config, lease.endpoint
        self.gate.ban_endpoint(ep.key, lease.host, cfg.ban_duration)
        self.stats.inc_value("polite/bans")
        self._identity_flagged(request, lease, verdict, cfg.ban_duration)
        logger.warning(
            "scrapy-polite: %s answered %d to %s; benching it for %s for %.0f s",
            lease.host, status, ep.label, lease.host, cfg.ban_duration,
        )
        return self._requeue(request, "ban", lease, response=response)

    def marked(self, response: Response, kind: str, reason: str) -> list[Request]:
        """A page the spider's callback marked as a challenge or ban, after the fact: re-queued like one.

        Its first record counted it as a page; the one recorded now revises it.
        """
        request = response.request
        lease: Lease | None = request.meta.get(LEASE_KEY) if request is not None else None
        if request is None or lease is None:
            return []
        request.meta[REVISES_KEY] = True
        verdict = Verdict(kind, reason)
        if kind == BAN:
            new = self._banned(request, response, lease, verdict, response.status)
        else:
            new = self._challenged(request, response, lease, verdict)
        return [new] if new is not None and new is not response else []

    def _challenged(self, request: Request, response: Response, lease: Lease, verdict: Verdict) -> Any:
        """A challenge: bench the endpoint for the host longer than a 429 would, slow the host, re-queue."""
        cfg, ep = self.config, lease.endpoint
        self.gate.ban_endpoint(ep.key, lease.host, cfg.challenge_bench)
        delay = self._cooldown(None)
        throttle = self.runtime.throttle
        if throttle is not None:
            throttle.rate_limited(
                lease.host, ep, delay, response.status, gap=lease.gap, slack=lease.slack, granted_at=lease.granted_at
            )
        # Beyond a 429's slowdown: the whole pool waits a cooldown for this host.
        self.gate.pause_host(lease.host, delay)
        self._identity_flagged(request, lease, verdict, cfg.challenge_bench)
        logger.warning(
            "scrapy-polite: %s sent a challenge (%s) to %s; benching it for %s for %.0f s",
            lease.host, verdict.reason, ep.label, lease.host, cfg.challenge_bench,
        )
        self.crawler.signals.send_catch_log(
            polite_signals.polite_challenge, request=request, response=response, host=lease.host,
            endpoint=ep.label, session=lease.session, reason=verdict.reason,
        )
        return self._requeue(request, "challenge", lease, response=response)

    def _identity_flagged(self, request: Request, lease: Lease, verdict: Verdict, bench: float) -> None:
        """A challenge or ban marks the identity: the host's tier and the session hear of it."""
        if self.runtime.tiers is not None:
            self.runtime.tiers.flagged(lease.host, lease.endpoint.key, bench)
        session = request.meta.get("polite_session")
        if session is not None:
            self.identities.retire(str(session))
            self._session_retired(str(session), lease.endpoint.label, f"{verdict.kind}: {verdict.reason}")

    def _session_identity(self, session: str, meta: Any) -> str:
        """The gate key of *session*'s current identity; its cookie jar goes with it."""
        key, retired = self.identities.identity(session)
        if retired is not None:
            self._session_retired(session, meta.get("polite_endpoint"), retired)
        jar = meta.get("cookiejar")
        own_jar = isinstance(jar, str) and (jar == f"polite:{session}" or jar.startswith(f"polite:{session}#"))
        if self.config.session_cookiejar and (jar is None or own_jar):
            meta["cookiejar"] = f"polite:{key}"
        return key

    def _session_retired(self, session: str, endpoint: str | None, reason: str) -> None:
        self.stats.inc_value("polite/sessions/retired")
        logger.info("scrapy-polite: session %r retired (%s); its next request gets a new identity", session, reason)
        self.crawler.signals.send_catch_log(
            polite_signals.session_retired, session=session, endpoint=endpoint, reason=reason
        )

    def _tier_moved(self, host: str, old: int, new: int, way: str) -> None:
        self.stats.inc_value(f"polite/tier/moves/{way}")
        logger.warning(
            "scrapy-polite: %s moves from proxy tier %d to tier %d (%s)", host, old, new,
            "challenges or bans on its tier" if way == "up" else "a clean window",
        )

    def process_exception(self, request: Request, exception: Exception, spider: Any = None) -> Any:
        lease: Lease | None = request.meta.get(LEASE_KEY)
        if isinstance(exception, SpiderClosing):
            self.stats.inc_value("polite/dropped_at_close")
            if self._keep_for_next_run(request):
                self.stats.inc_value("polite/kept_at_close")
            return None
        if isinstance(exception, (SessionEndpointLost, NoUsableEndpoints)):
            self._emit(_failure_outcome(request, exception, self.host_key(request), gave_up=True))
            self._gave_up(request, type(exception).__name__, str(exception))
            if isinstance(exception, SessionEndpointLost):
                logger.error("scrapy-polite: gave up %s: %s", request.url, exception)
            return None
        if lease is None:
            return None
        self.gate.release(lease)
        self.playwright.finish(request)
        if playwright_support.is_playwright(request) and (reason := playwright_support.proxy_failure(exception)):
            self._endpoint_failed(lease, reason)
            return self._requeue(request, "proxy", lease, exception=exception)
        if request.meta.get("_splash_processed") and is_splash(request):
            # The connection to Splash failed, not the proxy (Splash reports proxy failures in
            # its answer): the endpoint stays healthy; RetryMiddleware decides on a retry.
            self.stats.inc_value("polite/splash_errors")
            self.stats.inc_value(f"polite/splash_errors/{type(exception).__name__}")
            return None
        failure = failures.classify(exception)
        if failure.kind == failures.PROXY_RATE:
            delay = self._cooldown(None)
            self.gate.cool_endpoint(lease.endpoint.key, None, delay)
            return self._requeue(request, "rate", lease, exception=exception, delay=delay, proxy_side=True)
        if failure.kind == failures.PROXY:
            self._endpoint_failed(lease, failure.reason)
            return self._requeue(request, "proxy", lease, exception=exception)
        if failure.kind == failures.AMBIGUOUS:
            self._unanswered(lease, failure.reason, request.url)
            return self._requeue(request, "timeout", lease, exception=exception)
        self._record(request, lease, exception=exception)
        return None

    # -- helpers ----------------------------------------------------------

    def _cooldown(self, header: bytes | None) -> float:
        low, high = self.config.cooldown
        seconds = parse_retry_after(header)
        if seconds is None:
            seconds = self._rng.uniform(low, high)
        return min(seconds, self.config.retry_after_max)

    def _endpoint_failed(self, lease: Lease, reason: str) -> None:
        st = self.gate.endpoints.get(lease.endpoint.key)
        before = st.failures if st else 0
        self.gate.endpoint_failed(lease.endpoint.key)
        self.stats.inc_value("polite/endpoint_failures")
        if st is not None:
            state = "dead" if not self.gate.endpoint_usable(st) else "backoff"
            logger.log(
                logging.WARNING if before == 0 or state == "dead" else logging.DEBUG,
                "scrapy-polite: endpoint %s failed (%s), %d in a row; %s until re-check",
                lease.endpoint.label, reason, st.failures, state,
            )
            self.crawler.signals.send_catch_log(
                polite_signals.endpoint_health_changed,
                endpoint=lease.endpoint.label, state=state, reason=reason,
            )

    def _unanswered(self, lease: Lease, reason: str, url: str) -> None:
        """A timeout or a broken answer: blame whom the evidence points at, not the proxy by default."""
        verdict = self.evidence.failure(lease.endpoint.key, lease.host, url)
        self.stats.inc_value(f"polite/blame/{verdict.blame}")
        if verdict.blame == failures.ENDPOINT:
            self._endpoint_failed(lease, f"{reason}; its unclear failures point at the proxy")
        elif verdict.blame == failures.HOST:
            self._host_unanswered(lease.host, verdict.park, reason)
        else:
            base, cap = self.config.endpoint_backoff
            seconds = min(cap, base * 2 ** (verdict.streak - 1))
            # Benched for this host only (as a ban is): no rate signal, the other hosts unaffected.
            self.gate.ban_endpoint(lease.endpoint.key, lease.host, seconds)
            logger.debug(
                "scrapy-polite: %s via %s: %s (%d in a row for this pair); that pair rests %.1f s",
                lease.host, lease.endpoint.label, reason, verdict.streak, seconds,
            )

    def _host_unanswered(self, host: str, park: bool, reason: str) -> None:
        """Several endpoints got no answer from *host*: slow the host down, or park it; the pool is fine."""
        throttle = self.runtime.throttle
        if throttle is not None:
            done = throttle.unanswered(host, park)
        else:
            seconds = self.config.park_time[0]
            self.gate.pause_host(host, seconds)
            done = f"paused {seconds:.0f} s"
        self.stats.inc_value("polite/hosts_parked" if park else "polite/hosts_slowed")
        logger.warning(
            "scrapy-polite: %s gave no answer (%s) to %d endpoints within %.0f s; the host is blamed, "
            "not the proxies: %s",
            host, reason, self.config.host_pause_endpoints, self.config.host_pause_window, done or "already slowed",
        )

    def _stalled(self, lease: Lease) -> None:
        self.stats.inc_value("polite/stalled")
        logger.info(
            "scrapy-polite: no answer via %s for %s after %.1f s: its host slot is free again, "
            "the endpoint stays busy until the answer or the download timeout",
            lease.endpoint.label, lease.host, self.config.stall_timeout,
        )

    def _requeue(
        self,
        request: Request,
        kind: str,
        lease: Lease,
        *,
        response: Response | None = None,
        exception: Exception | None = None,
        delay: float = 0.0,
        proxy_side: bool | None = None,
    ) -> Any:
        """Record this attempt, then send *request* back to the scheduler, or give it up.

        Each kind has its own budget, separate from RETRY_TIMES, so a 429
        storm does not use up the retries meant for server errors. The attempt
        is recorded here, once the budget is known, so its outcome says
        whether it was the last one.
        """
        budgets = {
            "rate": self.config.rate_retry_times,
            "proxy": self.config.proxy_retry_times,
            "ban": min(2, self.config.proxy_retry_times),
            "challenge": self.config.challenge_retry_times,
            "timeout": self.config.timeout_retry_times,
        }
        counter = f"polite_{kind}_retries"
        done = request.meta.get(counter, 0)
        status = response.status if response is not None else None
        decision = requeue.decide(request.meta, kind, budgets[kind], done, status)
        spent = decision.verdict == requeue.SPENT
        self._record(
            request, lease, response=response, exception=exception, rate_limited=kind == "rate",
            proxy_side=kind == "proxy" if proxy_side is None else proxy_side, gave_up=spent,
            verdict=_REQUEUE_VERDICTS[kind],
        )
        what = status if status is not None else type(exception).__name__
        if decision.verdict in (requeue.DONT_RETRY, requeue.HANDLED):
            self.stats.inc_value(f"polite/not_requeued/{decision.verdict}")
            logger.debug(
                "scrapy-polite: not re-queuing %s (%s: %s via %s), as its meta asks",
                request.url, decision.verdict, what, lease.endpoint.label,
            )
            return response
        if spent:
            logger.error(
                "scrapy-polite: gave up %s after %d %s re-queue(s) (last: %s via %s)",
                request.url, done, kind, what, lease.endpoint.label,
            )
            self._gave_up(request, kind, str(what))
            self.stats.inc_value("retry/max_reached")
            if response is not None:
                return response
            # Given up once: RetryMiddleware must not send it again on top of this budget.
            request.meta["dont_retry"] = True
            return None
        # A processed Splash request names its proxy in the JSON body: start over from the original.
        new = splash_support.fresh_request(request) if is_splash(request) else None
        if new is None:
            new = request.replace(dont_filter=True)
        new.meta[counter] = done + 1
        new.meta["polite_requeues"] = request.meta.get("polite_requeues", 0) + 1
        new.meta.pop(LEASE_KEY, None)
        forget_own_proxy(new.meta)
        if delay:
            new.meta[NOT_BEFORE_KEY] = time.time() + delay
        self.stats.inc_value(f"polite/requeued/{kind}")
        # Scrapy's own retry stats, which monitors (Spidermon) read: 429 is no longer RetryMiddleware's.
        self.stats.inc_value("retry/count")
        self.stats.inc_value(f"retry/reason_count/{requeue.retry_reason(status, exception)}")
        if kind == "rate":
            self.crawler.signals.send_catch_log(
                polite_signals.request_rate_limited,
                request=request, host=lease.host, endpoint=lease.endpoint.label, delay=delay,
            )
        logger.debug(
            "scrapy-polite: re-queued %s (%s via %s, not before %.1f s)",
            request.url, kind, lease.endpoint.label, delay,
        )
        return new

    def _gave_up(self, request: Request, kind: str, what: str) -> None:
        """Every request given up is counted here, and once: ``polite/gave_up`` and the signal."""
        self.stats.inc_value("polite/gave_up")
        self.stats.inc_value(f"polite/gave_up/{kind}")
        self.crawler.signals.send_catch_log(polite_signals.request_gave_up, request=request, reason=f"{kind}: {what}")

    def exit_ip(self, lease: Lease, response: Response | None) -> tuple[str | None, str | None]:
        if response is not None:
            for name in self.config.exit_ip_headers:
                value = response.headers.get(name)
                if value is None:
                    continue
                ip = parse_exit_ip(value)
                if ip is not None:
                    return ip, "header"
                self._invalid_exit_ip(name, value, lease)
        if lease.endpoint.static_exit_ip:
            return lease.endpoint.static_exit_ip, "static"
        probe = getattr(self.runtime.stats, "probed_exit_ip", None)
        if probe is not None:
            ip = probe(lease.endpoint.key)
            if ip:
                return ip, "probe"
        if response is not None and not self._warned_https_exit_ip and urlparse_cached(response).scheme == "https":
            # Scrapy drops the CONNECT reply, where the provider's exit-IP header is for HTTPS.
            self._warned_https_exit_ip = True
            logger.warning(
                "scrapy-polite: HTTPS responses via %s carry no exit IP. Scrapy discards the proxy's "
                "CONNECT reply headers: set DOWNLOAD_HANDLERS = {'https': "
                "'scrapy_proxy_headers.HTTP11ProxyDownloadHandler'} (pip install scrapy-proxy-headers), "
                "give each endpoint a static exit_ip, or set POLITE_EXIT_IP_PROBE_URL",
                lease.endpoint.label,
            )
        return None, None

    def _invalid_exit_ip(self, name: str, value: bytes, lease: Lease) -> None:
        """Count a header value that names no IP address; the first one per header is logged."""
        self.stats.inc_value("polite/exit_ip_invalid")
        if name.lower() in self._warned_exit_ip_headers:
            return
        self._warned_exit_ip_headers.add(name.lower())
        logger.warning(
            "scrapy-polite: ignored %s header via %s, not an IP address: %r%s (further ones are only "
            "counted in polite/exit_ip_invalid)",
            name, lease.endpoint.label, value[:40], "..." if len(value) > 40 else "",
        )

    def _record(
        self,
        request: Request,
        lease: Lease,
        *,
        response: Response | None = None,
        exception: Exception | None = None,
        rate_limited: bool = False,
        proxy_side: bool = False,
        gave_up: bool = False,
        verdict: str = TARGET_ERROR,
    ) -> None:
        exit_ip, source = self.exit_ip(lease, response)
        tiers = self.runtime.tiers
        self._emit(
            Outcome(
                time=time.time(),
                url=request.url,
                host=lease.host,
                endpoint=lease.endpoint.label,
                session=lease.session,
                status=response.status if response is not None else None,
                exception=type(exception).__name__ if exception is not None else None,
                wait=lease.waited,
                latency=request.meta.get("download_latency"),
                exit_ip=exit_ip,
                exit_ip_source=source,
                requeues=request.meta.get("polite_requeues", 0),
                rate_limited=rate_limited,
                proxy_side=proxy_side,
                gave_up=gave_up,
                render=playwright_support.render_seconds(request),
                verdict=verdict,
                tier=tiers.tier_of(lease.endpoint.key) if tiers is not None else None,
                size=len(response.body) if response is not None else None,
                revises=bool(request.meta.pop(REVISES_KEY, False)),
            )
        )

    def _emit(self, outcome: Outcome) -> None:
        self.crawler.signals.send_catch_log(polite_signals.outcome_recorded, outcome=outcome)


#: The verdict recorded for an attempt re-queued (or given up) as each kind.
_REQUEUE_VERDICTS = {
    "rate": RATE_LIMITED, "proxy": PROXY_ERROR, "ban": BAN, "challenge": CHALLENGE, "timeout": TARGET_ERROR,
}


def _failure_outcome(request: Request, exc: Exception, host: str, gave_up: bool) -> Outcome:
    return Outcome(
        time=time.time(), url=request.url, host=host, endpoint=None,
        session=request.meta.get("polite_session"), status=None,
        exception=type(exc).__name__, wait=0.0, latency=None, exit_ip=None,
        exit_ip_source=None, requeues=request.meta.get("polite_requeues", 0),
        rate_limited=False, gave_up=gave_up,
    )


def preset_proxy(meta: Any) -> str | None:
    """The ``meta['proxy']`` the request came with, unless the package set it on an earlier attempt."""
    proxy = meta.get("proxy")
    if not proxy or _is_own_proxy(meta):
        return None
    return str(proxy)


def forget_own_proxy(meta: Any) -> None:
    """Drop the package's own ``meta['proxy']`` (and its mark) before the request goes round again."""
    if _is_own_proxy(meta):
        meta.pop("proxy", None)
    meta.pop(OWN_PROXY_KEY, None)


def _is_own_proxy(meta: Any) -> bool:
    """Whether ``meta['proxy']`` is the one the package set: HttpProxyMiddleware may since have moved
    its credentials into a header, so scheme, host and port decide."""
    own, proxy = meta.get(OWN_PROXY_KEY), meta.get("proxy")
    if not own or not proxy:
        return False
    if proxy == own:
        return True
    (scheme, _, host, port), (own_scheme, _, own_host, own_port) = _proxy_id(str(proxy)), _proxy_id(str(own))
    return (scheme, host, port) == (own_scheme, own_host, own_port)


def _proxy_id(url: str) -> tuple[str, str, str | None, int | None]:
    """A proxy URL compared as Scrapy would connect: scheme, credentials, host, port."""
    from urllib.parse import urlsplit

    from scrapy.utils.url import add_http_if_no_scheme

    parts = urlsplit(add_http_if_no_scheme(url))
    userinfo = parts.netloc.rpartition("@")[0]
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        port = None
    return parts.scheme.lower(), userinfo, (parts.hostname or "").lower(), port


def _mtime(path: str) -> float | None:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return None
