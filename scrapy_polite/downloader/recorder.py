"""How an attempt ends: its :class:`Outcome`, then its re-queue or give-up, in stats, logs and signals."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from scrapy_polite import signals as polite_signals
from scrapy_polite.downloader import playwright as playwright_support
from scrapy_polite.downloader import requeue
from scrapy_polite.downloader.proxy_meta import REVISES_KEY
from scrapy_polite.downloader.requeue import Decision
from scrapy_polite.downloader.response_policy import BAN, CHALLENGE, PROXY_ERROR, RATE_LIMITED, TARGET_ERROR
from scrapy_polite.metrics.outcome import Outcome

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response

    from scrapy_polite.downloader.exit_ip import ExitIps
    from scrapy_polite.gate.local import Lease
    from scrapy_polite.pool.tiers import TierLadder

logger = logging.getLogger(__name__)

#: The verdict recorded for an attempt re-queued (or given up) as each kind.
REQUEUE_VERDICTS = {
    "rate": RATE_LIMITED, "proxy": PROXY_ERROR, "ban": BAN, "challenge": CHALLENGE, "timeout": TARGET_ERROR,
    "overload": TARGET_ERROR,
}


class Recorder:
    """Sends ``outcome_recorded`` per attempt, re-queues within the budgets, and counts every give-up once."""

    def __init__(
        self, crawler: Crawler, exit_ips: ExitIps, budgets: requeue.Budgets, tiers: TierLadder | None = None
    ) -> None:
        self.crawler = crawler
        self.stats = crawler.stats
        self.exit_ips = exit_ips
        self.budgets = budgets
        self.tiers = tiers

    def attempt(
        self,
        request: Request,
        lease: Lease,
        *,
        response: Response | None = None,
        exception: BaseException | None = None,
        rate_limited: bool = False,
        proxy_side: bool = False,
        gave_up: bool = False,
        verdict: str = TARGET_ERROR,
    ) -> None:
        """The outcome of an attempt through *lease*, with the response policy's *verdict* kind."""
        exit_ip, source = self.exit_ips.of(lease, response)
        self.emit(
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
                tier=self.tiers.tier_of(lease.endpoint.key) if self.tiers is not None else None,
                size=len(response.body) if response is not None else None,
                revises=bool(request.meta.pop(REVISES_KEY, False)),
            )
        )

    def not_sent(self, request: Request, exception: BaseException, host: str, kind: str | None = None) -> None:
        """A request given up before any endpoint was leased (no usable endpoint, its session's lost, its host blocked)."""
        self.emit(Outcome(
            time=time.time(), url=request.url, host=host, endpoint=None,
            session=request.meta.get("polite_session"), status=None,
            exception=type(exception).__name__, wait=0.0, latency=None, exit_ip=None,
            exit_ip_source=None, requeues=request.meta.get("polite_requeues", 0),
            rate_limited=False, gave_up=True,
        ))
        self.gave_up(request, kind or type(exception).__name__, str(exception))

    def emit(self, outcome: Outcome) -> None:
        self.crawler.signals.send_catch_log(polite_signals.outcome_recorded, outcome=outcome)

    def gave_up(self, request: Request, kind: str, what: str) -> None:
        """Every request given up is counted here, and once: ``polite/gave_up`` and the signal."""
        self.stats.inc_value("polite/gave_up")
        self.stats.inc_value(f"polite/gave_up/{kind}")
        self.crawler.signals.send_catch_log(polite_signals.request_gave_up, request=request, reason=f"{kind}: {what}")

    def requeue(
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
        """Record this attempt (its outcome says whether it was the last), then re-queue or give up."""
        status = response.status if response is not None else None
        decision = requeue.get_requeue_request(request, kind, self.budgets, status=status, delay=delay)
        spent = decision.verdict == requeue.SPENT
        self.attempt(
            request, lease, response=response, exception=exception, rate_limited=kind == "rate",
            proxy_side=kind == "proxy" if proxy_side is None else proxy_side, gave_up=spent,
            verdict=REQUEUE_VERDICTS[kind],
        )
        self._requeue_decided(request, kind, lease, decision, status=status, exception=exception, delay=delay)
        if decision.request is not None:
            return decision.request
        if spent and response is None:
            # Given up once: RetryMiddleware must not send it again on top of this budget.
            request.meta["dont_retry"] = True
            return None
        return response

    def _requeue_decided(
        self,
        request: Request,
        kind: str,
        lease: Lease,
        decision: Decision,
        *,
        status: int | None,
        exception: BaseException | None,
        delay: float,
    ) -> None:
        """The stats, log line and signals of a re-queue *decision* about *request*."""
        label = lease.endpoint.label
        what = status if status is not None else type(exception).__name__
        if decision.verdict in (requeue.DONT_RETRY, requeue.HANDLED):
            self.stats.inc_value(f"polite/not_requeued/{decision.verdict}")
            logger.debug(
                "not re-queuing %s (%s: %s via %s), as its meta asks",
                request.url, decision.verdict, what, label,
            )
        elif decision.verdict == requeue.SPENT:
            logger.error(
                "gave up %s after %d %s re-queue(s) (last: %s via %s)",
                request.url, decision.done, kind, what, label,
            )
            self.gave_up(request, kind, str(what))
            self.stats.inc_value("retry/max_reached")
        else:
            self.stats.inc_value(f"polite/requeued/{kind}")
            # Scrapy's own retry stats, which monitors (Spidermon) read: 429 is no longer RetryMiddleware's.
            self.stats.inc_value("retry/count")
            self.stats.inc_value(f"retry/reason_count/{requeue.retry_reason(status, exception)}")
            if kind == "rate":
                self.crawler.signals.send_catch_log(
                    polite_signals.request_rate_limited,
                    request=request, host=lease.host, endpoint=label, delay=delay,
                )
            logger.debug("re-queued %s (%s via %s, not before %.1f s)", request.url, kind, label, delay)
