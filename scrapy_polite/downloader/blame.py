"""What an answer or a failure does to the pool: rate signals, challenges, bans, proxy failures, and
unclear failures put where the evidence points (the pair, the endpoint or the host)."""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING

from scrapy_polite import signals as polite_signals
from scrapy_polite.downloader import failures
from scrapy_polite.downloader.gateway_errors import GatewayErrors
from scrapy_polite.gate.backoff import endpoint_backoff

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response

    from scrapy_polite.downloader.blocked_hosts import BlockedHosts
    from scrapy_polite.downloader.identities import Identities
    from scrapy_polite.downloader.pace import Pace
    from scrapy_polite.downloader.response_policy import Verdict
    from scrapy_polite.gate.base import Gate
    from scrapy_polite.gate.local import Lease
    from scrapy_polite.runtime import Runtime

logger = logging.getLogger(__name__)


class Blame:
    """Endpoint health and host slow-downs after each attempt, with their stats, logs and signals.

    The throttle hears of rate signals, challenges and unanswered hosts through *pace*; the host's
    proxy tier and the session's identity through the runtime's tiers and *identities*.
    """

    def __init__(
        self, crawler: Crawler, runtime: Runtime, identities: Identities, pace: Pace,
        blocked: BlockedHosts | None = None,
    ) -> None:
        self.crawler = crawler
        self.blocked = blocked
        self.identities = identities
        self.pace = pace
        self.config = runtime.config
        self.gate: Gate = runtime.gate
        self.tiers = runtime.tiers
        self.stats = crawler.stats
        self.evidence = failures.EvidenceTracker(
            window=self.config.host_pause_window, host_endpoints=self.config.host_pause_endpoints
        )
        self.gateway = GatewayErrors(max_hosts=max(1, min(self.config.host_memory, 1000)))
        if self.tiers is not None:
            self.tiers.on_move = self._tier_moved

    def answered(self, lease: Lease) -> None:
        """An answer came through *lease*: its endpoint works and the pair's unclear failures are forgiven."""
        self.gate.endpoint_ok(lease.endpoint.key)
        self.evidence.success(lease.endpoint.key, lease.host)

    def rate_limited(
        self, lease: Lease, status: int | None, delay: float, proxy_side: bool,
        retry_after: float | None = None, headers: object = None,
    ) -> None:
        """A rate signal: the proxy's cools its endpoint; the site's goes to the throttle (or cools the pair).

        *retry_after* is what the site stated: the pair waits all of it, even past the request's *delay*.
        """
        ep = lease.endpoint
        if proxy_side:
            self.gate.cool_endpoint(ep.key, None, delay)
        elif not self.pace.rate_limited(lease, delay, status or 429, retry_after, headers):
            self.gate.cool_endpoint(ep.key, lease.host, max(delay, retry_after or 0.0))

    def banned(self, lease: Lease, status: int) -> None:
        """A ban: the endpoint rests for this host only, ``POLITE_BAN_DURATION`` seconds."""
        ep, duration = lease.endpoint, self.config.ban_duration
        self.gate.ban_endpoint(ep.key, lease.host, duration)
        self.stats.inc_value("polite/bans")
        logger.warning(
            "%s answered %d to %s; benching it for %s for %.0f s",
            lease.host, status, ep.label, lease.host, duration,
        )

    def challenged(self, request: Request, response: Response, lease: Lease, verdict: Verdict, delay: float) -> None:
        """A challenge: the endpoint benched for the host longer than a 429 would, the host slowed for the pool."""
        ep, bench = lease.endpoint, self.config.challenge_bench
        self.gate.ban_endpoint(ep.key, lease.host, bench)
        # The IP had been crawling the host and the site escalated: the pace is to blame, not
        # one IP's spacing as a 429 may be. The host rate halves and concurrency is cut.
        if not (math.isfinite(lease.gap) and self.pace.challenged(lease, delay)):
            # Its first request to the host: the site had flagged that IP before (the bench answers
            # for it); the pace hears of it as of a 429 (no throttle: the pair cools).
            self.rate_limited(lease, response.status, delay, proxy_side=False)
        # Beyond a 429's slowdown: the whole pool waits a cooldown for this host.
        self.gate.pause_host(lease.host, delay)
        logger.warning(
            "%s sent a challenge (%s) to %s; benching it for %s for %.0f s",
            lease.host, verdict.reason, ep.label, lease.host, bench,
        )
        self.crawler.signals.send_catch_log(
            polite_signals.polite_challenge, request=request, response=response, host=lease.host,
            endpoint=ep.label, session=lease.session, reason=verdict.reason,
        )

    def identity_flagged(self, request: Request, lease: Lease, verdict: Verdict) -> None:
        """A challenge or ban marks the identity: the host's tier and the session hear of it."""
        bench = self.config.ban_duration if verdict.kind == "ban" else self.config.challenge_bench
        if self.tiers is not None:
            self.tiers.flagged(lease.host, lease.endpoint.key, bench)
        if self.blocked is not None:  # after the tiers: a host moved up a tier is not blocked
            self.blocked.benched(lease.host, lease.endpoint.key, bench)
        session = request.meta.get("polite_session")
        if session is not None:
            self.identities.retire(str(session), lease.endpoint.label, f"{verdict.kind}: {verdict.reason}")

    def _tier_moved(self, host: str, old: int, new: int, way: str) -> None:
        self.stats.inc_value(f"polite/tier/moves/{way}")
        logger.warning(
            "%s moves from proxy tier %d to tier %d (%s)", host, old, new,
            "challenges or bans on its tier" if way == "up" else "a clean window",
        )

    def endpoint_failed(self, lease: Lease, reason: str) -> None:
        st = self.gate.endpoints.get(lease.endpoint.key)
        before = st.failures if st else 0
        self.gate.endpoint_failed(lease.endpoint.key)
        self.stats.inc_value("polite/endpoint_failures")
        if st is not None:
            state = "dead" if not self.gate.endpoint_usable(st) else "backoff"
            logger.log(
                logging.WARNING if before == 0 or state == "dead" else logging.DEBUG,
                "endpoint %s failed (%s), %d in a row; %s until re-check",
                lease.endpoint.label, reason, st.failures, state,
            )
            self.crawler.signals.send_catch_log(
                polite_signals.endpoint_health_changed,
                endpoint=lease.endpoint.label, state=state, reason=reason,
            )

    def gateway_fault(self, lease: Lease, status: int, gateway: bool) -> bool:
        """Whether this answer is a 502/503/504 of the endpoint's own (see ``gateway_errors``); if so it fails.

        The site's own gateway errors (several endpoints get them) are left to the
        caller, to reach the throttle as any other error of the site.
        """
        if not self.gateway.answered(lease.endpoint.key, lease.host, gateway):
            return False
        self.stats.inc_value("polite/blame/endpoint_gateway")
        self.endpoint_failed(lease, f"{status} for {lease.host}, which answers the other endpoints")
        return True

    def unanswered(self, lease: Lease, reason: str, url: str) -> None:
        """A timeout or a broken answer: blame whom the evidence points at, not the proxy by default."""
        verdict = self.evidence.failure(lease.endpoint.key, lease.host, url)
        self.stats.inc_value(f"polite/blame/{verdict.blame}")
        if verdict.blame == failures.ENDPOINT:
            self.endpoint_failed(lease, f"{reason}; its unclear failures point at the proxy")
        elif verdict.blame == failures.HOST:
            self._host_unanswered(lease.host, verdict.park, reason)
        else:
            seconds = endpoint_backoff(verdict.streak, self.config.endpoint_backoff)
            # Benched for this host only (as a ban is): no rate signal, the other hosts unaffected.
            self.gate.ban_endpoint(lease.endpoint.key, lease.host, seconds)
            logger.debug(
                "%s via %s: %s (%d in a row for this pair); that pair rests %.1f s",
                lease.host, lease.endpoint.label, reason, verdict.streak, seconds,
            )

    def _host_unanswered(self, host: str, park: bool, reason: str) -> None:
        """Several endpoints got no answer from *host*: slow the host down, or park it; the pool is fine."""
        done = self.pace.unanswered(host, park)
        if done is None:  # no throttle: the gate pauses the host itself
            seconds = self.config.park_time[0]
            self.gate.pause_host(host, seconds)
            done = f"paused {seconds:.0f} s"
        self.stats.inc_value("polite/hosts_parked" if park else "polite/hosts_slowed")
        logger.warning(
            "%s gave no answer (%s) to %d endpoints within %.0f s; the host is blamed, "
            "not the proxies: %s",
            host, reason, self.config.host_pause_endpoints, self.config.host_pause_window, done or "already slowed",
        )
