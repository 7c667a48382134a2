"""Whether the package re-queues a request, honouring what the request asks (as ``get_retry_request`` does)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from scrapy_polite.downloader import splash
from scrapy_polite.downloader.proxy_meta import NOT_BEFORE_KEY, forget_attempt

if TYPE_CHECKING:
    from scrapy import Request

    from scrapy_polite.settings.config import PoliteConfig

#: Re-queue kinds whose trigger is the site's own answer, which a spider may ask to see.
SITE_ANSWERS = frozenset({"rate", "overload", "ban", "challenge"})
REQUEUE = "requeue"
#: Its budget for this kind is spent: given up.
SPENT = "spent"
#: ``meta['dont_retry']``: the answer or error goes on as it is.
DONT_RETRY = "dont_retry"
#: ``handle_httpstatus_list`` / ``handle_httpstatus_all`` names the status: the spider gets it.
HANDLED = "handle_httpstatus"


@dataclass(frozen=True)
class Budgets:
    """Re-queues allowed per kind, apart from RETRY_TIMES, so a 429 storm leaves server-error retries alone."""

    rate: int
    proxy: int
    ban: int
    timeout: int
    challenge: int = 3
    #: An overloaded site's 502/503/504: Scrapy's ``RETRY_TIMES``, spaced by a cooldown.
    overload: int = 2

    @classmethod
    def from_config(cls, config: PoliteConfig) -> Budgets:
        return cls(
            rate=config.rate_retry_times,
            proxy=config.proxy_retry_times,
            ban=min(2, config.proxy_retry_times),
            timeout=config.timeout_retry_times,
            challenge=config.challenge_retry_times,
            overload=config.retry_times,
        )

    def of(self, kind: str) -> int:
        return int(getattr(self, kind))


@dataclass(frozen=True)
class Decision:
    verdict: str
    #: Re-queues allowed for this kind, after ``max_retry_times``.
    budget: int
    #: Re-queues of this kind done before this attempt.
    done: int
    #: The request to send instead, when ``verdict`` is :data:`REQUEUE`.
    request: Request | None = None


def decide(meta: Any, kind: str, budget: int, done: int, status: int | None = None) -> Decision:
    """The one place that decides a re-queue of *kind* after *done* earlier ones.

    ``max_retry_times`` caps every kind's budget, as it caps RetryMiddleware's.
    A 407 or a proxy failure is the proxy's, not the site's answer, so only
    ``dont_retry`` and the budget stop those.
    """
    limit = meta.get("max_retry_times")
    if limit is not None:
        budget = min(budget, int(limit))
    if meta.get("dont_retry"):
        return Decision(DONT_RETRY, budget, done)
    if status is not None and kind in SITE_ANSWERS and (
        meta.get("handle_httpstatus_all") or status in (meta.get("handle_httpstatus_list") or ())
    ):
        return Decision(HANDLED, budget, done)
    return Decision(SPENT if done >= budget else REQUEUE, budget, done)


def counter_key(kind: str) -> str:
    """The meta key counting a request's re-queues of *kind*."""
    return f"polite_{kind}_retries"


def get_requeue_request(
    request: Request, kind: str, budgets: Budgets, *, status: int | None = None, delay: float = 0.0
) -> Decision:
    """Decide a re-queue of *request* for *kind*; on :data:`REQUEUE` the decision carries the new request.

    The new request has its counters raised, the attempt's lease and proxy
    dropped, and a not-before time *delay* seconds ahead (wall time, so it
    survives a disk queue).
    """
    counter = counter_key(kind)
    done = request.meta.get(counter, 0)
    decision = decide(request.meta, kind, budgets.of(kind), done, status)
    if decision.verdict != REQUEUE:
        return decision
    # A processed Splash request names its proxy in the JSON body: start over from the original.
    new = splash.fresh_request(request) if splash.is_splash(request) else None
    if new is None:
        new = request.replace(dont_filter=True)
    new.meta[counter] = done + 1
    new.meta["polite_requeues"] = request.meta.get("polite_requeues", 0) + 1
    forget_attempt(new.meta)
    if delay:
        new.meta[NOT_BEFORE_KEY] = time.time() + delay
    return Decision(REQUEUE, decision.budget, done, new)


def retry_reason(status: int | None, exception: BaseException | None) -> str:
    """The reason Scrapy's ``get_retry_request`` would name in ``retry/reason_count/<reason>``."""
    if status is not None:
        from scrapy.utils.response import response_status_message

        return response_status_message(status)
    cls = type(exception)
    return f"{cls.__module__}.{cls.__name__}"
