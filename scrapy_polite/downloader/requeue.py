"""Whether the package re-queues a request, honouring what the request asks (as ``get_retry_request`` does)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: Re-queue kinds whose trigger is the site's own answer, which a spider may ask to see.
SITE_ANSWERS = frozenset({"rate", "ban", "challenge"})
REQUEUE = "requeue"
#: Its budget for this kind is spent: given up.
SPENT = "spent"
#: ``meta['dont_retry']``: the answer or error goes on as it is.
DONT_RETRY = "dont_retry"
#: ``handle_httpstatus_list`` / ``handle_httpstatus_all`` names the status: the spider gets it.
HANDLED = "handle_httpstatus"


@dataclass(frozen=True)
class Decision:
    verdict: str
    #: Re-queues allowed for this kind, after ``max_retry_times``.
    budget: int
    #: Re-queues of this kind done before this attempt.
    done: int


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


def retry_reason(status: int | None, exception: BaseException | None) -> str:
    """The reason Scrapy's ``get_retry_request`` would name in ``retry/reason_count/<reason>``."""
    if status is not None:
        from scrapy.utils.response import response_status_message

        return response_status_message(status)
    cls = type(exception)
    return f"{cls.__module__}.{cls.__name__}"
