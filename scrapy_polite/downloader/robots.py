"""A robots.txt ``Crawl-delay``, taken as the host's minimum spacing (the site states it)."""

from __future__ import annotations

import logging
import math
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from scrapy_polite.downloader.proxy_meta import host_key

if TYPE_CHECKING:
    from scrapy_polite.gate.base import ThrottleGate
    from scrapy_polite.settings.config import PoliteConfig

logger = logging.getLogger(__name__)


class CrawlDelay:
    """Reads each host's robots.txt answer once (``response_received``) and sets its ``Crawl-delay``,
    capped at ``POLITE_RETRY_AFTER_MAX``, as the gate's minimum spacing for the host."""

    def __init__(self, gate: ThrottleGate, config: PoliteConfig, agent: str) -> None:
        self.gate, self.config, self.agent = gate, config, agent
        # Bounded as the host memory: a host's Crawl-delay outlives its eviction there.
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._max = max(1, config.host_memory)

    def response_received(self, response: Any, request: Any, spider: Any = None) -> None:
        if not request.url.endswith("/robots.txt") or response.status != 200:
            return
        host = host_key(request, self.config.host_key)
        if host in self._seen:
            return
        self._seen[host] = None
        if len(self._seen) > self._max:
            self._seen.popitem(last=False)
        delay = crawl_delay(response.text if hasattr(response, "text") else "", self.agent)
        if delay is None:
            return
        spacing = min(delay, self.config.retry_after_max)
        self.gate.set_host_min_delay(host, spacing)
        if spacing < delay:
            logger.warning(
                "%s robots.txt Crawl-delay %g s capped at POLITE_RETRY_AFTER_MAX: %.1f s is "
                "the minimum spacing", host, delay, spacing,
            )
        else:
            logger.info("%s robots.txt Crawl-delay %.1f s is the minimum spacing", host, delay)


def robots_agent(settings: Any) -> str:
    """The agent robots.txt rules are read for: ``ROBOTSTXT_USER_AGENT``, else ``USER_AGENT`` (as RobotsTxtMiddleware)."""
    return settings.get("ROBOTSTXT_USER_AGENT") or settings.get("USER_AGENT") or "*"


def crawl_delay(text: str, agent: str = "*") -> float | None:
    """The ``Crawl-delay`` robots.txt gives *agent*, parsed by Protego (Scrapy's parser).

    ``None`` unless it is a positive finite number of seconds: the site writes it.
    """
    from protego import Protego

    try:
        delay = float(Protego.parse(text).crawl_delay(agent) or 0)
    except Exception:  # a broken robots.txt must not break the crawl
        return None
    return delay if math.isfinite(delay) and delay > 0 else None
