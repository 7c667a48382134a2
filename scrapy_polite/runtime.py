"""Per-crawler shared state: one config and one gate for all components.

Scrapy builds extensions and middlewares separately, each from the crawler;
each reads the same validated config and waits at the same gate through here.
Components do not find each other here: a component gets what it works with
as constructor arguments, and hears the others through signals (see the
"Wiring" section of docs/architecture.md).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from scrapy_polite.settings.config import PoliteConfig

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

    from scrapy_polite.gate.base import Gate
    from scrapy_polite.pool.tiers import TierLadder


class Runtime:
    """Shared state of one crawler: the validated config and the gate (with the tier ladder it reads)."""

    def __init__(self, crawler: Crawler) -> None:
        self.config = PoliteConfig.from_settings(crawler.settings)
        self._gate: Gate | None = None
        self._tiers: TierLadder | None = None

    @property
    def gate(self) -> Gate:
        if self._gate is None:
            cfg = self.config
            if cfg.endpoint_tiers:
                from scrapy_polite.pool.tiers import TierLadder

                self._tiers = TierLadder(
                    cfg.endpoint_tiers, escalate_after=cfg.tier_escalate_after, cooldown=cfg.tier_cooldown,
                    max_hosts=cfg.host_memory,
                )
            self._gate = _build_gate(cfg, self._tiers.eligible if self._tiers else None)
        return self._gate

    @property
    def tiers(self) -> TierLadder | None:
        """The gate's proxy tiers (``POLITE_PROXY_TIERS``): which endpoints each host may take; None without tiers."""
        self.gate  # noqa: B018 - built with the gate, which asks it for every grant
        return self._tiers


def _build_gate(cfg: PoliteConfig, eligible: Callable[[str, str], bool] | None = None) -> Gate:
    """The in-memory gate, or the Redis one when ``POLITE_STATE`` names a server.

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

        return LocalGate(cfg.endpoints, **common, host_memory=cfg.host_memory, memory_ttl=cfg.state_pin_ttl)
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
    return RedisGate(
        cfg.endpoints, url=cfg.state, namespace=cfg.state_namespace,
        lease_ttl=cfg.state_lease_ttl, pin_ttl=cfg.state_pin_ttl, host_ttl=cfg.state_host_ttl, poll=cfg.state_poll,
        outage_timeout=cfg.state_outage_timeout, **common,
    )


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

