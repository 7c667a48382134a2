"""Per-crawler wiring: one config and one gate shared by all components.

Scrapy builds extensions and middlewares separately; they meet here instead
of through attributes set on the crawler.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from scrapy_polite.settings.config import PoliteConfig

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

    from scrapy_polite.downloader.exit_ip import ExitIps
    from scrapy_polite.downloader.middleware import PoliteProxyMiddleware
    from scrapy_polite.downloader.response_policy import ResponsePolicy
    from scrapy_polite.gate.base import Gate
    from scrapy_polite.gate.redis.backend import RedisGate
    from scrapy_polite.metrics.stats import PoliteStats
    from scrapy_polite.pool.tiers import TierLadder
    from scrapy_polite.throttle.policy import ThrottlePolicy

#: Sends this process's stats snapshot to the fleet (a shared state only).
Publisher = Callable[[dict[str, Any]], None]


class Runtime:
    """Shared state of one crawler: the validated config and the gate."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self.config = PoliteConfig.from_settings(crawler.settings)
        self._gate: Gate | None = None
        #: Where the stats go for the ``fleet`` command (None: the state is not shared).
        self.publisher: Publisher | None = None
        #: The components, each set by itself when Scrapy builds it (None: not enabled).
        self.throttle: ThrottlePolicy | None = None
        self.stats: PoliteStats | None = None
        self.exit_ips: ExitIps | None = None
        self.middleware: PoliteProxyMiddleware | None = None
        self._policy: ResponsePolicy | None = None
        self.tiers: TierLadder | None = None

    @property
    def policy(self) -> ResponsePolicy:
        """The ``POLITE_RESPONSE_POLICY`` every component asks what an answer means."""
        if self._policy is None:
            self._policy = _load_policy(self.crawler, self.config.response_policy)
        return self._policy

    @property
    def gate(self) -> Gate:
        if self._gate is None:
            cfg = self.config
            if cfg.endpoint_tiers:
                from scrapy_polite.pool.tiers import TierLadder

                self.tiers = TierLadder(
                    cfg.endpoint_tiers, escalate_after=cfg.tier_escalate_after, cooldown=cfg.tier_cooldown,
                    max_hosts=cfg.host_memory,
                )
            self._gate, self.publisher = _build_gate(cfg, self.tiers.eligible if self.tiers else None)
        return self._gate


def _build_gate(
    cfg: PoliteConfig, eligible: Callable[[str, str], bool] | None = None
) -> tuple[Gate, Publisher | None]:
    """The in-memory gate, or the Redis one (and its stats publisher) when ``POLITE_STATE`` names a server.

    *eligible* says which endpoints a host may take (its proxy tier), when tiers are configured.
    """
    common: dict[str, Any] = {
        "eligible": eligible,
        "host_concurrency": cfg.host_concurrency,
        "endpoint_concurrency": cfg.endpoint_concurrency,
        "delay": cfg.delay,
        "backoff": cfg.endpoint_backoff,
        "max_failures": cfg.endpoint_max_failures,
        "session_policy": cfg.session_policy,
        # Two file checks: a file caught mid-rewrite is read whole at the next one.
        "removal_grace": 2 * cfg.proxies_file_check_interval if cfg.proxies_file else 0.0,
        "stall_timeout": cfg.stall_timeout,
        "host_overrides": {k: (v.concurrency, v.delay) for k, v in cfg.host_overrides.items()},
    }
    if cfg.state == "memory":
        from scrapy_polite.gate.local import LocalGate

        return LocalGate(cfg.endpoints, **common, host_memory=cfg.host_memory, memory_ttl=cfg.state_pin_ttl), None
    from scrapy_polite.errors import PoliteConfigError
    from scrapy_polite.gate.redis.backend import RedisGate
    from scrapy_polite.gate.redis.state import check_reachable, mask_url

    try:
        from scrapy.utils.reactor import is_asyncio_reactor_installed

        asyncio_reactor = is_asyncio_reactor_installed()
    except RuntimeError:  # no reactor installed yet: Scrapy installs the configured one later
        asyncio_reactor = True
    if not asyncio_reactor:
        raise PoliteConfigError(
            "POLITE_STATE", mask_url(cfg.state),
            "the asyncio reactor (TWISTED_REACTOR = "
            "'twisted.internet.asyncioreactor.AsyncioSelectorReactor') for a Redis state",
        )
    check_reachable(cfg.state)
    gate = RedisGate(
        cfg.endpoints, url=cfg.state, namespace=cfg.state_namespace,
        lease_ttl=cfg.state_lease_ttl, pin_ttl=cfg.state_pin_ttl, host_ttl=cfg.state_host_ttl, poll=cfg.state_poll,
        outage_timeout=cfg.state_outage_timeout, **common,
    )
    return gate, _fleet_publisher(gate)


def _fleet_publisher(gate: RedisGate) -> Publisher:
    """Publish stats snapshots through *gate*'s ordered updates, under its namespace."""
    from scrapy_polite.metrics.fleet_store import publish_commands

    def publish(snap: dict[str, Any]) -> None:
        async def send(client: Any, keys: Any, process_id: str) -> None:
            await publish_commands(client.pipeline(transaction=False), keys, process_id, snap).execute()

        gate.submit(send)

    return publish


_runtimes: weakref.WeakKeyDictionary[Any, Runtime] = weakref.WeakKeyDictionary()


def enabled_runtime(crawler: Crawler) -> Runtime:
    """The :class:`Runtime` of *crawler*; ``NotConfigured`` when ``POLITE_ENABLED`` is False."""
    rt = get_runtime(crawler)
    if not rt.config.enabled:
        from scrapy.exceptions import NotConfigured

        raise NotConfigured("POLITE_ENABLED is False")
    return rt


def get_runtime(crawler: Crawler) -> Runtime:
    """The :class:`Runtime` of *crawler*, created (and validated) on first use."""
    rt = _runtimes.get(crawler)
    if rt is None:
        rt = _runtimes[crawler] = Runtime(crawler)
    return rt


def _load_policy(crawler: Crawler, path: str) -> ResponsePolicy:
    """The ``POLITE_RESPONSE_POLICY`` class, built from the crawler (loaded by path, as Scrapy loads components)."""
    from scrapy.utils.misc import build_from_crawler, load_object

    from scrapy_polite.errors import PoliteConfigError

    try:
        cls = load_object(path)
    except (ImportError, NameError, ValueError, AttributeError) as exc:
        raise PoliteConfigError("POLITE_RESPONSE_POLICY", path, f"an importable class path ({exc})") from None
    return build_from_crawler(cls, crawler)
