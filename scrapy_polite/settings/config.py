"""``POLITE_*`` settings, read once and validated into a typed config.

Every component takes its numbers from :class:`PoliteConfig`; nothing else
reads ``POLITE_*`` settings. Each is read as the settings table says
(:mod:`scrapy_polite.settings.table`); a bad value raises :class:`PoliteConfigError`
naming the setting, the value and what is expected.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from scrapy.settings import BaseSettings

from scrapy_polite.errors import PoliteConfigError
from scrapy_polite.pool.endpoints import Endpoint, load_endpoints
from scrapy_polite.settings import checks
from scrapy_polite.settings.challenges import CHALLENGE_BODY_BYTES as CHALLENGE_BODY_BYTES
from scrapy_polite.settings.challenges import ChallengePattern
from scrapy_polite.settings.parsers import span
from scrapy_polite.settings.slots import HostLimits, download_slots
from scrapy_polite.settings.table import BY_NAME, PLAYWRIGHT_CONTEXTS_DEFAULT, RETIRED, SETTINGS
from scrapy_polite.settings.table import HOST_TTL as HOST_TTL
from scrapy_polite.settings.table import PIN_TTL as PIN_TTL

logger = logging.getLogger(__name__)

#: Defaults, registered by the add-on below anything a project or ``-s`` sets.
DEFAULTS: dict[str, Any] = {s.name: s.default for s in SETTINGS}


@dataclass(frozen=True)
class PoliteConfig:
    """The validated ``POLITE_*`` settings of one crawler: one field per setting of the table, plus derived ones.

    The proxy URLs and the Redis URL carry credentials: they are left out of the ``repr``.
    """

    enabled: bool
    proxies: tuple[Any, ...] = field(repr=False)
    proxies_file: str | None
    proxies_file_check_interval: float
    gateway_sessions: int
    host_concurrency: int
    #: ``POLITE_HOST_CONCURRENCY_MAX``, else ``host_concurrency`` (4x it in adaptive mode).
    host_concurrency_max: int
    endpoint_concurrency: int
    delay: tuple[float, float]
    host_key: str
    session_policy: str
    session_cookiejar: bool
    proxy_retry_times: int
    endpoint_backoff: tuple[float, float]
    endpoint_max_failures: int
    ban_codes: frozenset[int]
    ban_duration: float
    rate_limit_codes: frozenset[int]
    retry_after_codes: frozenset[int]
    retry_after_max: float
    cooldown: tuple[float, float]
    rate_retry_times: int
    host_pause_endpoints: int
    host_pause_window: float
    park_time: tuple[float, float]
    adaptive: bool
    #: ``POLITE_DELAY_FLOOR``, never above the low end of ``delay``.
    delay_floor: float
    exit_ip_headers: tuple[str, ...]
    proxy_error_headers: tuple[str, ...]
    #: ``POLITE_LEASE_TIMEOUT``, else Scrapy's ``DOWNLOAD_TIMEOUT`` + 60.
    lease_timeout: float
    stats_jsonl: str | None
    stats_jsonl_max_bytes: int
    stats_window: float
    log_interval: float
    prometheus_port: int | None
    prometheus_address: str
    #: The pool, from ``proxies``, ``proxies_file`` and ``proxy_tiers``; empty when not enabled.
    endpoints: tuple[Endpoint, ...]
    #: Proxy URLs listed twice, left out of ``endpoints`` (shown without credentials).
    duplicates: tuple[str, ...]
    exit_ip_probe_url: str | None
    exit_ip_probe_timeout: float
    state: str = field(repr=False)
    state_namespace: str
    state_lease_ttl: float
    state_pin_ttl: float
    state_host_ttl: float
    state_poll: float
    state_outage_timeout: float
    timeout_retry_times: int
    #: Scrapy's ``RETRY_TIMES``: a site's overload answers get as many tries as Scrapy gives them.
    retry_times: int
    stall_timeout: float
    report_html: str | None
    #: ``POLITE_PLAYWRIGHT_MAX_CONTEXTS``, else Scrapy-playwright's ``PLAYWRIGHT_MAX_CONTEXTS``, else 16.
    playwright_max_contexts: int
    playwright_block: frozenset[str]
    host_memory: int
    stats_top: int
    stats_sessions_map: int
    response_policy: str
    challenge_patterns: tuple[ChallengePattern, ...]
    challenge_bench: float
    challenge_retry_times: int
    #: What requests do while every endpoint their host may use is benched for it: "give_up" or "wait".
    host_blocked: str
    #: Endpoint keys by tier, cheapest first; empty without ``POLITE_PROXY_TIERS``.
    proxy_tiers: tuple[Any, ...] = field(repr=False)
    #: Each endpoint key's tier (0 = cheapest); empty without tiers.
    endpoint_tiers: dict[str, int] = field(repr=False)
    tier_escalate_after: int
    tier_cooldown: float
    session_max_requests: int | None
    session_max_age: float | None
    #: Per slot/host key, from Scrapy's ``DOWNLOAD_SLOTS``: they win over the POLITE_* defaults.
    host_overrides: dict[str, HostLimits]

    def host_limits(self, host: str) -> HostLimits:
        """*host*'s starting limits: its ``DOWNLOAD_SLOTS`` entry, else the ``POLITE_*`` defaults."""
        found = self.host_overrides.get(host)
        if found is not None:
            return found
        return HostLimits(self.host_concurrency, self.host_concurrency_max, self.delay)

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> PoliteConfig:
        """Every setting of the table read and checked, then the values that depend on several settings."""
        values = {s.field: read(settings, s.name) for s in SETTINGS}
        for name, instead in RETIRED.items():
            if settings.get(name) is not None:
                logger.warning("%s is no longer read: %s", name, instead)
        values.update(_derived(settings, values))
        if values["enabled"]:
            endpoints, duplicates, ranks = load_endpoints(
                values["proxies"], values["proxies_file"], values["gateway_sessions"], False, values["proxy_tiers"]
            )
        else:
            endpoints, duplicates, ranks = [], [], {}
        return cls(**values, endpoints=tuple(endpoints), duplicates=tuple(duplicates), endpoint_tiers=ranks)

    def load_endpoints(self, reload: bool = False) -> tuple[list[Endpoint], list[str]]:
        """Endpoints from ``POLITE_PROXIES`` plus ``POLITE_PROXIES_FILE``, read anew, and the duplicates left out.

        Raises when there are none, since a pool of zero would hang the crawl; on a
        *reload*, also when the file lists none, since an emptied file is most likely
        one being rewritten, and dropping its endpoints would strand their sessions.
        """
        endpoints, duplicates, _ = load_endpoints(
            self.proxies, self.proxies_file, self.gateway_sessions, reload, self.proxy_tiers
        )
        return endpoints, duplicates


def read(settings: BaseSettings, name: str) -> Any:
    """The setting *name*, read and checked as the table says; unset (None), it takes its default."""
    setting = BY_NAME[name]
    value = settings.get(name)
    return setting.parse(setting, setting.default if value is None else value)


def _derived(settings: BaseSettings, values: dict[str, Any]) -> dict[str, Any]:
    """The fields that depend on several settings, or on Scrapy's: checked together, filled in."""
    concurrency, delay = values["host_concurrency"], values["delay"]
    most = _concurrency_max(concurrency, values["host_concurrency_max"], values["adaptive"])
    lease_timeout = values["lease_timeout"]
    if lease_timeout is None:
        lease_timeout = settings.getfloat("DOWNLOAD_TIMEOUT", 180.0) + 60.0
    report_html = values["report_html"]
    if report_html is not None and values["stats_jsonl"] is None:
        raise PoliteConfigError(
            "POLITE_REPORT_HTML", report_html, "a path, with POLITE_STATS_JSONL set: the report is read from it"
        )
    return {
        "report_html": checks.output_path("POLITE_REPORT_HTML", report_html),
        "host_concurrency_max": most,
        "delay_floor": min(values["delay_floor"], delay[0]),
        "lease_timeout": lease_timeout,
        "retry_times": max(0, settings.getint("RETRY_TIMES", 2)),
        "playwright_max_contexts": _playwright_contexts(settings, values["playwright_max_contexts"]),
        "host_overrides": download_slots(settings, HostLimits(concurrency, most, delay)),
    }


def _concurrency_max(concurrency: int, most: int | None, adaptive: bool) -> int:
    """``POLITE_HOST_CONCURRENCY_MAX``: at least ``POLITE_HOST_CONCURRENCY``; unset, 4x it in adaptive mode."""
    if most is None:
        return concurrency * 4 if adaptive else concurrency
    if most < concurrency:
        raise PoliteConfigError(
            "POLITE_HOST_CONCURRENCY_MAX", most, f"an integer >= POLITE_HOST_CONCURRENCY ({concurrency})"
        )
    return most


def _playwright_contexts(settings: BaseSettings, ours: int | None) -> int:
    """``POLITE_PLAYWRIGHT_MAX_CONTEXTS``: at most ``PLAYWRIGHT_MAX_CONTEXTS``, which it defaults to.

    Above scrapy-playwright's own limit, a new context would wait there while
    the pool holds its lease, for a context the pool would never close.
    """
    theirs = settings.getint("PLAYWRIGHT_MAX_CONTEXTS") or None
    if ours is None:
        return theirs or PLAYWRIGHT_CONTEXTS_DEFAULT
    if theirs is not None and ours > theirs:
        raise PoliteConfigError(
            "POLITE_PLAYWRIGHT_MAX_CONTEXTS", ours, f"an integer <= PLAYWRIGHT_MAX_CONTEXTS ({theirs})"
        )
    return ours


class _Reader:
    """A setting read in its own form, for a command option that takes the same form (``polite-tune --delay``)."""

    def __init__(self, settings: BaseSettings) -> None:
        self.settings = settings

    def range(self, name: str, positive: bool = False) -> tuple[float, float]:
        """The ``(min, max)`` seconds setting *name*; with *positive*, a low end of 0 is refused too."""
        value = self.settings.get(name)
        return span(name, BY_NAME[name].default if value is None else value, positive)


def register_defaults(settings: BaseSettings) -> None:
    """Add :data:`DEFAULTS` at Scrapy's ``default`` priority, below anything a project or ``-s`` sets."""
    for name, value in DEFAULTS.items():
        settings.set(name, value, priority="default")


def enabled(settings: BaseSettings) -> bool:
    """The validated ``POLITE_ENABLED``, for the add-on, which runs before the config is built."""
    return bool(read(settings, "POLITE_ENABLED"))


def rate_limit_codes(settings: BaseSettings) -> frozenset[int]:
    """The validated ``POLITE_RATE_LIMIT_CODES``, for the add-on, which runs before the config is built."""
    return frozenset(read(settings, "POLITE_RATE_LIMIT_CODES"))


def host_concurrency_max(settings: BaseSettings) -> int:
    """The most requests the gates let one host have in flight, for the add-on (before the config is built)."""
    concurrency = read(settings, "POLITE_HOST_CONCURRENCY")
    most = read(settings, "POLITE_HOST_CONCURRENCY_MAX")
    return _concurrency_max(concurrency, most, most is None and read(settings, "POLITE_ADAPTIVE"))
