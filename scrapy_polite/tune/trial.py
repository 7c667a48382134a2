"""The crawl side of a ``scrapy polite-tune`` trial: a hard request allowance and a stop on bans.

Enabled by the add-on when ``POLITE_TUNE_TRIAL_FILE`` is set (trial crawls
only), before the polite middleware, so nothing over the allowance is leased an
endpoint. At the end it writes a JSON result, with the 429s among *paced*
answers. See docs/architecture.md, "Tuning".
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections import Counter
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.exceptions import IgnoreRequest, NotConfigured

from scrapy_polite import signals as polite_signals
from scrapy_polite.errors import SpiderClosing
from scrapy_polite.runtime import Runtime, get_runtime
from scrapy_polite.tune.served import settled_rate

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler

    from scrapy_polite.metrics.outcome import Outcome
    from scrapy_polite.metrics.stats import PoliteStats
    from scrapy_polite.throttle.policy import ThrottlePolicy

logger = logging.getLogger(__name__)

FILE_SETTING = "POLITE_TUNE_TRIAL_FILE"
REQUESTS_SETTING = "POLITE_TUNE_TRIAL_REQUESTS"
#: Before the polite middleware (650): nothing over the allowance is leased an endpoint.
PRIORITY = 600
#: Finish reasons of a trial stopped by the guard.
REASON_BUDGET = "polite_tune_allowance"
REASON_BLOCKED = "polite_tune_blocked"
#: Outcomes of requests dropped at the gate, never sent.
_NOT_SENT = frozenset({"NoUsableEndpoints", "SessionEndpointLost"})


class TrialGuard:
    """Caps a trial crawl at its request allowance and stops it at the first ban.

    Its result reads the crawl's *stats* and the rate the *throttle* met (None when either
    extension is not enabled).
    """

    def __init__(
        self, crawler: Crawler, runtime: Runtime, stats: PoliteStats | None, throttle: ThrottlePolicy | None
    ) -> None:
        settings = crawler.settings
        path = settings.get(FILE_SETTING)
        if not path:
            raise NotConfigured(f"{FILE_SETTING} is not set")
        allowance = settings.getint(REQUESTS_SETTING, 0)
        if allowance < 1:
            # Without an allowance nothing may be sent: a trial is always bounded.
            logger.error("scrapy-polite tune: %s=%r; no request will be sent", REQUESTS_SETTING, allowance)
            allowance = 0
        self.crawler = crawler
        self.path = str(path)
        self.allowance = allowance
        self.admitted = 0
        self.sent = 0
        self.stop_reason: str | None = None
        self.spent_at: float | None = None
        self.first_ban: dict[str, Any] | None = None
        self.last_answer: float | None = None
        self.attempts = 0
        self._used_endpoints: set[str] = set()
        self.paced_attempts = 0
        self.paced_rate_limited = 0
        self.statuses: Counter[str] = Counter()
        #: (host, time, clean, rate-limited) of every answer, in order: the rate each host was served.
        self._answers: list[tuple[str, float, bool, bool]] = []
        self.cooldown_until = 0.0
        self._closing = False
        self._loop: Any = None
        self._opened_at = time.time()
        self.runtime = runtime
        self.stats = stats
        self.throttle = throttle
        self.ban_codes = runtime.config.ban_codes
        # Requests admitted but still waiting at the gate get this long to be sent.
        self.grace = max(5.0, 2 * runtime.config.delay[1])
        polite_signals.connect(crawler, {
            polite_signals.outcome_recorded: self._outcome,
            polite_signals.request_rate_limited: self._rate_limited,
            signals.request_reached_downloader: self._reached,
            signals.spider_opened: self._opened,
            signals.spider_closed: self._closed,
        })

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> TrialGuard:
        # Extensions are built before downloader middlewares: the stats and the throttle exist already.
        from scrapy_polite.metrics.stats import PoliteStats
        from scrapy_polite.throttle.extension import HostThrottle

        host_throttle = crawler.get_extension(HostThrottle)
        return cls(crawler, get_runtime(crawler), crawler.get_extension(PoliteStats),
                   host_throttle.policy if host_throttle is not None else None)

    # -- the allowance --------------------------------------------------------

    def process_request(self, request: Request, spider: Any = None) -> None:
        if self.stop_reason is not None or self.admitted >= self.allowance:
            raise IgnoreRequest(f"polite-tune trial: {self.stop_reason or 'allowance spent'}")
        self.admitted += 1
        if self.admitted >= self.allowance:
            self.spent_at = time.monotonic()
            self.stop_reason = "allowance spent"
        return None

    def _reached(self, request: Request, spider: Any = None) -> None:
        self.sent += 1

    def _rate_limited(self, request: Any = None, host: str = "", endpoint: str = "", delay: float = 0.0) -> None:
        self.cooldown_until = max(self.cooldown_until, time.time() + delay)

    def _outcome(self, outcome: Outcome) -> None:
        if outcome.exception in _NOT_SENT:
            return
        self.attempts += 1
        self.last_answer = outcome.time
        if outcome.endpoint is not None and outcome.endpoint not in self._used_endpoints:
            self._used_endpoints.add(outcome.endpoint)
        else:
            self.paced_attempts += 1
            self.paced_rate_limited += outcome.rate_limited
        self.statuses[outcome.label] += 1
        if not outcome.revises:  # a revision is no new answer
            self._answers.append((outcome.host, outcome.time, outcome.success, outcome.rate_limited))
        # The response policy's verdict: a challenge is as much a sign of blocking as a ban.
        if (outcome.is_ban(self.ban_codes) or outcome.challenge) and self.first_ban is None:
            self.first_ban = {"url": outcome.url, "status": outcome.status, "endpoint": outcome.endpoint,
                              "time": outcome.time, "verdict": outcome.verdict}
            self.stop_reason = "blocked"
            logger.warning(
                "scrapy-polite tune: %s answered %s via %s; stopping this trial (first sign of blocking)",
                outcome.host, outcome.status, outcome.endpoint,
            )
            # Requests already waiting at the gate are not sent either.
            self.runtime.gate.close("polite-tune: blocked", SpiderClosing)
            self._close(REASON_BLOCKED)

    # -- lifecycle ------------------------------------------------------------

    def _opened(self, spider: Any) -> None:
        self._opened_at = time.time()
        from twisted.internet import task

        self._loop = task.LoopingCall(self._check)
        self._loop.start(0.1, now=False)

    def _check(self) -> None:
        if self._closing or self.spent_at is None or self.stop_reason != "allowance spent":
            return
        if self.sent >= self.admitted or time.monotonic() - self.spent_at >= self.grace:
            self._close(REASON_BUDGET)

    def _close(self, reason: str) -> None:
        if self._closing:
            return
        self._closing = True
        from scrapy_polite.compat import close_spider

        close_spider(self.crawler, reason)

    def _closed(self, spider: Any, reason: str) -> None:
        if self._loop is not None and self._loop.running:
            self._loop.stop()
        stats = self.stats
        summary = stats.summary() if stats is not None else {}
        started = stats.started if stats is not None else self._opened_at
        # Successful pages/min from the spider's start to its last answer: the
        # wind-down after the allowance is spent is not part of the measure.
        end = self.last_answer if self.last_answer is not None else time.time()
        keep = ("success", "rate_limited", "bans", "challenges", "gave_up", "exceptions", "latency_p50",
                "latency_p95", "latency_p99", "pages_per_min", "elapsed", "exit_ips")
        cfg = self.runtime.config
        result = {
            "finish_reason": reason,
            "stopped": self.stop_reason,
            "allowance": self.allowance,
            "admitted": self.admitted,
            "sent": self.sent,
            "attempts": self.attempts,
            "statuses": dict(self.statuses),
            "seconds": max(0.0, end - started),
            "first_ban": self.first_ban,
            "cooldown_until": self.cooldown_until,
            "settings": {
                "host_concurrency": cfg.host_concurrency,
                "endpoint_concurrency": cfg.endpoint_concurrency,
                "delay": list(cfg.delay),
                "endpoints": len(cfg.endpoints),
            },
            "summary": {k: summary[k] for k in keep if k in summary},
            "paced": {"attempts": self.paced_attempts, "rate_limited": self.paced_rate_limited},
            "throttle": self._throttle_state(summary),
        }
        tmp = f"{self.path}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)
        os.replace(tmp, self.path)

    def _throttle_state(self, summary: dict[str, Any]) -> dict[str, Any] | None:
        """Where the throttle left the busiest host: the spacing the site let it keep, and the rate
        the site served it cleanly once the throttle had met its limit."""
        hosts = summary.get("hosts") or {}
        if not hosts:
            return None
        host = max(hosts, key=lambda h: hosts[h].get("attempts", 0))
        try:
            state = self.runtime.gate.host(host)
        except Exception:  # a shared gate that cannot answer now: no state to report
            return None
        throttle = self.throttle
        served = settled_rate((at, clean, limited) for h, at, clean, limited in self._answers if h == host)
        return {"host": host, "delay": list(state.delay), "concurrency": state.limit,
                "interval": state.interval, "limit_met": throttle.limit_met(host) if throttle else None,
                "served": served}
