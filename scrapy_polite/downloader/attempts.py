"""What one attempt's answer or download error leads to: its verdict, the pool's reaction, and a re-queue or not.

The middleware hands every leased attempt here before its lease is given back (a pause or a
cooled IP decided here binds the grant the freed slot makes);
the verdicts come from the response policy and ``answers``, the reactions
from ``Blame`` and the throttle (told through ``Pace``), the re-queue decisions
and records from ``Recorder``.
"""

from __future__ import annotations

import logging
import random
from typing import TYPE_CHECKING, Any

from scrapy_polite.downloader import answers, failures
from scrapy_polite.downloader import splash as splash_support
from scrapy_polite.downloader.gateway_errors import GATEWAY_STATUSES
from scrapy_polite.downloader.proxy_meta import REVISES_KEY
from scrapy_polite.downloader.response_policy import (
    BAN,
    PROXY_ERROR,
    RATE_LIMITED,
    STRONG,
    TARGET_ERROR,
    Verdict,
)
from scrapy_polite.downloader.retry_after import cooldown, parse_retry_after

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.http import Response
    from scrapy.http.headers import Headers

    from scrapy_polite.downloader.blame import Blame
    from scrapy_polite.downloader.pace import Pace
    from scrapy_polite.downloader.recorder import Recorder
    from scrapy_polite.downloader.response_policy import ResponsePolicy
    from scrapy_polite.gate.state import Lease
    from scrapy_polite.settings.config import PoliteConfig

logger = logging.getLogger(__name__)

#: A site's answers that say it is overloaded (bad gateway, unavailable, gateway timeout, and the
#: 529 some services use): the package re-queues them after a cooldown, as many times as Scrapy's
#: RETRY_TIMES (counted as its tries), where RetryMiddleware would retry them at once.
OVERLOAD_CODES = frozenset({502, 503, 504, 529})


class Attempts:
    """Judges each finished attempt and returns what the downloader middleware returns for it."""

    def __init__(
        self, config: PoliteConfig, policy: ResponsePolicy, pace: Pace, stats: Any, blame: Blame, recorder: Recorder
    ) -> None:
        self.config = config
        self.policy = policy
        self.pace = pace
        self.stats = stats
        self.blame = blame
        self.recorder = recorder
        self._rng = random.Random()

    def answered(self, request: Request, response: Response, lease: Lease) -> Any:
        """A response came through *lease*: the response, or the request to send again instead."""
        status, headers = response.status, response.headers
        if splash_support.is_processed(request):
            answer = splash_support.classify(request, response)
            if answer.kind == "splash":
                # Splash's own failure (overloaded, timeout, script error) says nothing about
                # the target or the proxy: no throttling; RetryMiddleware decides on a retry.
                self._splash_error(str(response.status))
                logger.debug("%s for %s, not the target's answer", answer.reason, request)
                return response
            if answer.kind == "proxy":
                self.blame.endpoint_failed(lease, answer.reason)
                return self.recorder.requeue(request, "proxy", lease, response=response)
            status, headers = answer.status or status, answer.headers
        if self._gateway_fault(request, response, lease, status, headers):
            return self.recorder.requeue(request, "proxy", lease, response=response)
        return self._judged(request, response, lease, status, headers)

    def _gateway_fault(self, request: Request, response: Response, lease: Lease, status: int, headers: Headers) -> bool:
        """A 502/503/504 the policy takes for the site's error, that only this endpoint gets: the endpoint's failure."""
        gateway = status in GATEWAY_STATUSES and self.policy.classify(
            request, response, status=status, headers=headers
        ).kind == TARGET_ERROR
        return self.blame.gateway_fault(lease, status, gateway)

    def failed(self, request: Request, exception: Exception, lease: Lease) -> Any:
        """The download of *request* through *lease* raised *exception*: a request to send again, or None.

        The response policy judges it (a rate signal, the proxy's error, or the
        target's); a target error is then placed by its kind: Splash's own, an
        unclear one for the evidence, or one that blames nobody.
        """
        verdict = self.policy.classify_exception(request, exception)
        if verdict.kind == RATE_LIMITED:
            delay = self.cooldown(None)
            self.blame.rate_limited(lease, None, delay, proxy_side=verdict.proxy_side)
            return self.recorder.requeue(
                request, "rate", lease, exception=exception, delay=delay, proxy_side=verdict.proxy_side
            )
        if verdict.kind == PROXY_ERROR:
            self.blame.endpoint_failed(lease, verdict.reason)
            return self.recorder.requeue(request, "proxy", lease, exception=exception)
        failure = answers.classify_exception(request, exception)
        if failure.kind == answers.SPLASH:
            self._splash_error(failure.reason)  # the endpoint stays healthy; RetryMiddleware decides
            return None
        if failure.kind == failures.AMBIGUOUS:
            self.blame.unanswered(lease, failure.reason, request.url)
            return self.recorder.requeue(request, "timeout", lease, exception=exception)
        self.recorder.attempt(request, lease, exception=exception)
        return None

    def marked(self, response: Response, lease: Lease, kind: str, reason: str) -> list[Request]:
        """A page the spider's callback marked as a challenge or ban: re-queued like one; its record revises the page's."""
        request = response.request
        assert request is not None
        request.meta[REVISES_KEY] = True
        new = self._flagged(request, response, lease, Verdict(kind, reason), response.status)
        return [new] if new is not None and new is not response else []

    def cooldown(self, header: bytes | None) -> float:
        """The wait before a rate-limited request goes again: its ``Retry-After``, capped, or the jittered cooldown."""
        return cooldown(header, self.config.cooldown, self.config.retry_after_max, self._rng)

    def _judged(self, request: Request, response: Response, lease: Lease, status: int, headers: Headers) -> Any:
        """The target's (or the proxy's) answer *status*, as the response policy judges it."""
        verdict = self.policy.classify(request, response, status=status, headers=headers)
        if verdict.kind == PROXY_ERROR:
            self.blame.endpoint_failed(lease, verdict.reason)
            return self.recorder.requeue(request, "proxy", lease, response=response)
        if verdict.kind == RATE_LIMITED:
            header = headers.get(b"Retry-After")
            delay = self.cooldown(header)
            self.blame.rate_limited(lease, status, delay, verdict.proxy_side, parse_retry_after(header), headers)
            return self.recorder.requeue(
                request, "rate", lease, response=response, delay=delay, proxy_side=verdict.proxy_side
            )
        self.blame.answered(lease)
        if verdict.kind in STRONG:
            return self._flagged(request, response, lease, verdict, status)
        if verdict.kind == TARGET_ERROR and status >= 500:
            # The site is overloaded, not limiting: never a clean answer; the page goes again later.
            self.pace.overloaded(lease, status)
            if status in OVERLOAD_CODES:
                again = self.recorder.requeue(request, "overload", lease, response=response,
                                              delay=self.cooldown(None))
                if again is not response:  # a try of Scrapy's own budget, taken after a cooldown
                    again.meta["retry_times"] = request.meta.get("retry_times", 0) + 1
                return again
        else:
            # Scrapy's download latency is the site's and the proxy's, not the time the answer then
            # waited in a busy crawler's own queues (which would read as a queue at the site).
            self.pace.ok(lease, status, headers, latency=request.meta.get("download_latency"))
        self.recorder.attempt(request, lease, response=response, verdict=verdict.kind)
        return response

    def _flagged(self, request: Request, response: Response, lease: Lease, verdict: Verdict, status: int) -> Any:
        """A challenge or ban: the pool and the identity hear of it, and the request goes again."""
        if verdict.kind == BAN:
            self.blame.banned(lease, status)
        else:
            self.blame.challenged(request, response, lease, verdict, self.cooldown(None))
        self.blame.identity_flagged(request, lease, verdict)
        return self.recorder.requeue(request, "ban" if verdict.kind == BAN else "challenge", lease, response=response)

    def _splash_error(self, reason: str) -> None:
        self.stats.inc_value("polite/splash_errors")
        self.stats.inc_value(f"polite/splash_errors/{reason}")
