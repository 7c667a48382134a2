"""``POLITE_*`` settings, read once and validated into a typed config.

Every component takes its numbers from :class:`PoliteConfig`; nothing else
reads ``POLITE_*`` settings. A bad value raises :class:`PoliteConfigError`
naming the setting, the value and what is expected.
"""

from __future__ import annotations

import builtins  # _Reader has methods named int, float, str, list, bool: its annotations name the types
import math
import os
import re
from dataclasses import dataclass, field
from typing import Any

from scrapy.settings import BaseSettings

from scrapy_polite.errors import PoliteConfigError, Shown
from scrapy_polite.pool.endpoints import Endpoint, load_endpoints, split_proxies
from scrapy_polite.pool.host_memory import HOST_MEMORY
from scrapy_polite.settings import checks

#: A session's pin is forgotten after this long without a request (POLITE_STATE_PIN_TTL).
PIN_TTL = 3600.0
#: A host's shared record (learned limits, grants, last rate signal) lives this long after
#: its last use (POLITE_STATE_HOST_TTL).
HOST_TTL = 24 * 3600.0

#: Defaults, also used by the add-on and documented in the README table.
DEFAULTS: dict[str, Any] = {
    "POLITE_ENABLED": True,
    "POLITE_PROXIES": [],
    "POLITE_PROXIES_FILE": None,
    "POLITE_PROXIES_FILE_CHECK_INTERVAL": 5.0,
    "POLITE_GATEWAY_SESSIONS": 10,
    "POLITE_HOST_CONCURRENCY": 2,
    "POLITE_HOST_CONCURRENCY_MAX": None,
    "POLITE_ENDPOINT_CONCURRENCY": 1,
    "POLITE_DELAY": (0.8, 1.6),
    "POLITE_HOST_KEY": "slot",
    "POLITE_SESSION_POLICY": "fail",
    "POLITE_SESSION_COOKIEJAR": True,
    "POLITE_PROXY_RETRY_TIMES": 5,
    "POLITE_TIMEOUT_RETRY_TIMES": 2,
    "POLITE_STALL_TIMEOUT": 30.0,
    "POLITE_ENDPOINT_BACKOFF": (2.0, 120.0),
    "POLITE_ENDPOINT_MAX_FAILURES": 5,
    "POLITE_BAN_CODES": [403],
    "POLITE_BAN_DURATION": 600.0,
    "POLITE_RATE_LIMIT_CODES": [429],
    "POLITE_RETRY_AFTER_CODES": [503],
    "POLITE_RETRY_AFTER_MAX": 300.0,
    "POLITE_COOLDOWN": (5.0, 10.0),
    "POLITE_RATE_RETRY_TIMES": 10,
    "POLITE_BACKOFF_FACTOR": 0.5,
    "POLITE_RECOVERY_WINDOW": 20.0,
    "POLITE_HOST_PAUSE_ENDPOINTS": 3,
    "POLITE_HOST_PAUSE_WINDOW": 10.0,
    "POLITE_PARK_AFTER": 5,
    "POLITE_PARK_TIME": (60.0, 1800.0),
    "POLITE_ADAPTIVE": False,
    "POLITE_DELAY_FLOOR": 0.2,
    "POLITE_EXIT_IP_HEADERS": ["X-Proxy-Exit-IP", "X-Exit-IP", "X-Outgoing-IP"],
    "POLITE_PROXY_ERROR_HEADERS": ["X-Proxy-Error"],
    "POLITE_LEASE_TIMEOUT": None,
    "POLITE_STATS_JSONL": None,
    "POLITE_STATS_JSONL_MAX_BYTES": 100 * 1024 * 1024,
    "POLITE_REPORT_HTML": None,
    "POLITE_STATS_WINDOW": 60.0,
    "POLITE_LOG_INTERVAL": 60.0,
    "POLITE_PROMETHEUS_PORT": None,
    "POLITE_PROMETHEUS_ADDRESS": "127.0.0.1",
    "POLITE_EXIT_IP_PROBE_URL": None,
    "POLITE_EXIT_IP_PROBE_TIMEOUT": 10.0,
    "POLITE_STATE": "memory",
    "POLITE_STATE_NAMESPACE": "polite",
    "POLITE_STATE_LEASE_TTL": 5.0,
    "POLITE_STATE_PIN_TTL": PIN_TTL,
    "POLITE_STATE_HOST_TTL": HOST_TTL,
    "POLITE_STATE_POLL": 0.05,
    "POLITE_STATE_OUTAGE_TIMEOUT": 300.0,
    "POLITE_PLAYWRIGHT_MAX_CONTEXTS": None,
    "POLITE_PLAYWRIGHT_BLOCK": [],
    "POLITE_HOST_MEMORY": HOST_MEMORY,
    "POLITE_STATS_TOP": 50,
    "POLITE_STATS_SESSIONS_MAP": 1000,
    "POLITE_RESPONSE_POLICY": "scrapy_polite.downloader.response_policy.ResponsePolicy",
    "POLITE_CHALLENGE_PATTERNS": [
        {"header": "cf-mitigated", "value": "challenge"},
        {"header": "x-amzn-waf-action", "value": "captcha|challenge"},
        {"body": r"(?i)verify (that )?you are (a )?human|<title>\s*just a moment\.\.\.|cf-chl-|"
                 r"px-captcha|captcha-delivery\.com"},
        # Widgets and scripts that ordinary pages carry too: a challenge only on an error status.
        {"status": [403, 429, 503], "body": r"(?i)g-recaptcha|h-captcha|hcaptcha\.com|challenges\.cloudflare\.com|"
                                            r"_incapsula_resource"},
    ],
    "POLITE_CHALLENGE_BENCH": 1800.0,
    "POLITE_CHALLENGE_RETRY_TIMES": 3,
    "POLITE_HOST_BLOCKED": "give_up",
    "POLITE_PROXY_TIERS": [],
    "POLITE_TIER_ESCALATE_AFTER": 3,
    "POLITE_TIER_COOLDOWN": 600.0,
    "POLITE_SESSION_MAX_REQUESTS": None,
    "POLITE_SESSION_MAX_AGE": None,
}

#: The longest duration any ``POLITE_*`` setting accepts (30 days): a longer one is a typo,
#: and Redis rejects expiry times far beyond it.
MAX_SECONDS = 30 * 24 * 3600.0
#: The largest count any ``POLITE_*`` setting accepts.
MAX_COUNT = 1_000_000_000
#: Session ids per gateway template: each is an endpoint kept in memory and offered to every pin.
MAX_GATEWAY_SESSIONS = 10_000
#: Browser contexts the pool keeps open when neither POLITE_ nor PLAYWRIGHT_MAX_CONTEXTS says.
PLAYWRIGHT_CONTEXTS_DEFAULT = 16
#: Playwright's resource types that POLITE_PLAYWRIGHT_BLOCK may name (never "document": the page itself).
PLAYWRIGHT_RESOURCE_TYPES = (
    "stylesheet", "image", "media", "font", "script", "texttrack", "xhr", "fetch",
    "eventsource", "websocket", "manifest", "other",
)


#: How much of a body the challenge patterns search: challenge pages are small, catalogues need not be read whole.
CHALLENGE_BODY_BYTES = 64 * 1024


@dataclass(frozen=True)
class ChallengePattern:
    """One marker of a challenge page: a header (value regex), or statuses plus a body regex."""

    header: str | None = None
    value: re.Pattern[str] | None = None
    statuses: frozenset[int] = frozenset()
    body: re.Pattern[bytes] | None = None


@dataclass(frozen=True)
class HostLimits:
    """What the gates start a host at, and the most concurrency the throttle may grow it to."""

    concurrency: int
    concurrency_max: int
    delay: tuple[float, float]


@dataclass(frozen=True)
class PoliteConfig:
    """The validated ``POLITE_*`` settings of one crawler.

    The proxy URLs and the Redis URL carry credentials: they are left out of the ``repr``.
    """

    enabled: bool
    proxies: tuple[Any, ...] = field(repr=False)
    proxies_file: str | None
    proxies_file_check_interval: float
    gateway_sessions: int
    host_concurrency: int
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
    backoff_factor: float
    recovery_window: float
    host_pause_endpoints: int
    host_pause_window: float
    park_after: int
    park_time: tuple[float, float]
    adaptive: bool
    delay_floor: float
    exit_ip_headers: tuple[str, ...]
    proxy_error_headers: tuple[str, ...]
    lease_timeout: float
    stats_jsonl: str | None
    stats_jsonl_max_bytes: int
    stats_window: float
    log_interval: float
    prometheus_port: int | None
    prometheus_address: str
    endpoints: tuple[Endpoint, ...] = field(default=())
    duplicates: tuple[str, ...] = field(default=())
    exit_ip_probe_url: str | None = None
    exit_ip_probe_timeout: float = 10.0
    state: str = field(default="memory", repr=False)
    state_namespace: str = "polite"
    state_lease_ttl: float = 5.0
    state_pin_ttl: float = PIN_TTL
    state_host_ttl: float = HOST_TTL
    state_poll: float = 0.05
    state_outage_timeout: float = 300.0
    timeout_retry_times: int = 2
    #: Scrapy's ``RETRY_TIMES``: a site's overload answers get as many tries as Scrapy gives them.
    retry_times: int = 2
    stall_timeout: float = 30.0
    report_html: str | None = None
    playwright_max_contexts: int = PLAYWRIGHT_CONTEXTS_DEFAULT
    playwright_block: frozenset[str] = frozenset()
    host_memory: int = HOST_MEMORY
    stats_top: int = 50
    stats_sessions_map: int = 1000
    response_policy: str = DEFAULTS["POLITE_RESPONSE_POLICY"]
    challenge_patterns: tuple[ChallengePattern, ...] = ()
    challenge_bench: float = 1800.0
    challenge_retry_times: int = 3
    #: What requests do while every endpoint their host may use is benched for it: "give_up" or "wait".
    host_blocked: str = "give_up"
    #: Endpoint keys by tier, cheapest first; empty without ``POLITE_PROXY_TIERS``.
    proxy_tiers: tuple[Any, ...] = field(default=(), repr=False)
    #: Each endpoint key's tier (0 = cheapest); empty without tiers.
    endpoint_tiers: dict[str, int] = field(default_factory=dict, repr=False)
    tier_escalate_after: int = 3
    tier_cooldown: float = 600.0
    session_max_requests: int | None = None
    session_max_age: float | None = None
    #: Per slot/host key, from Scrapy's ``DOWNLOAD_SLOTS``: they win over the POLITE_* defaults.
    host_overrides: dict[str, HostLimits] = field(default_factory=dict)

    def host_limits(self, host: str) -> HostLimits:
        """*host*'s starting limits: its ``DOWNLOAD_SLOTS`` entry, else the ``POLITE_*`` defaults."""
        found = self.host_overrides.get(host)
        if found is not None:
            return found
        return HostLimits(self.host_concurrency, self.host_concurrency_max, self.delay)

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> PoliteConfig:
        r = _Reader(settings)
        host_conc, conc_max = r.host_concurrency()
        adaptive = r.bool("POLITE_ADAPTIVE")
        delay = r.range("POLITE_DELAY")
        floor = r.float("POLITE_DELAY_FLOOR", minimum=0.0)
        timeout = settings.getfloat("DOWNLOAD_TIMEOUT", 180.0)
        lease_timeout = r.optional_float("POLITE_LEASE_TIMEOUT", minimum=1.0)
        cfg = cls(
            enabled=r.bool("POLITE_ENABLED"),
            proxies=tuple(r.proxies("POLITE_PROXIES")),
            proxies_file=r.optional_str("POLITE_PROXIES_FILE"),
            proxies_file_check_interval=r.float("POLITE_PROXIES_FILE_CHECK_INTERVAL", minimum=0.1),
            gateway_sessions=r.int("POLITE_GATEWAY_SESSIONS", minimum=1, maximum=MAX_GATEWAY_SESSIONS),
            host_concurrency=host_conc,
            host_concurrency_max=conc_max,
            endpoint_concurrency=r.int("POLITE_ENDPOINT_CONCURRENCY", minimum=1, maximum=10_000),
            delay=delay,
            host_key=r.choice("POLITE_HOST_KEY", ("slot", "hostname")),
            session_policy=r.choice("POLITE_SESSION_POLICY", ("fail", "repin")),
            session_cookiejar=r.bool("POLITE_SESSION_COOKIEJAR"),
            proxy_retry_times=r.int("POLITE_PROXY_RETRY_TIMES", minimum=0),
            endpoint_backoff=r.range("POLITE_ENDPOINT_BACKOFF", positive=True),
            endpoint_max_failures=r.int("POLITE_ENDPOINT_MAX_FAILURES", minimum=1),
            ban_codes=r.codes("POLITE_BAN_CODES"),
            ban_duration=r.float("POLITE_BAN_DURATION", minimum=0.0),
            rate_limit_codes=r.rate_limit_codes(),
            retry_after_codes=r.codes("POLITE_RETRY_AFTER_CODES"),
            retry_after_max=r.float("POLITE_RETRY_AFTER_MAX", minimum=0.0),
            cooldown=r.range("POLITE_COOLDOWN"),
            rate_retry_times=r.int("POLITE_RATE_RETRY_TIMES", minimum=0),
            backoff_factor=r.float("POLITE_BACKOFF_FACTOR", minimum=0.05, maximum=0.95),
            recovery_window=r.float("POLITE_RECOVERY_WINDOW", minimum=0.1),
            host_pause_endpoints=r.int("POLITE_HOST_PAUSE_ENDPOINTS", minimum=1),
            host_pause_window=r.float("POLITE_HOST_PAUSE_WINDOW", minimum=0.1),
            park_after=r.int("POLITE_PARK_AFTER", minimum=1),
            park_time=r.range("POLITE_PARK_TIME", positive=True),
            adaptive=adaptive,
            delay_floor=min(floor, delay[0]),
            exit_ip_headers=tuple(r.str_list("POLITE_EXIT_IP_HEADERS")),
            proxy_error_headers=tuple(r.str_list("POLITE_PROXY_ERROR_HEADERS")),
            lease_timeout=lease_timeout if lease_timeout is not None else timeout + 60.0,
            stats_jsonl=checks.output_path("POLITE_STATS_JSONL", r.optional_str("POLITE_STATS_JSONL")),
            stats_jsonl_max_bytes=r.int("POLITE_STATS_JSONL_MAX_BYTES", minimum=1024, maximum=2**62),
            stats_window=r.float("POLITE_STATS_WINDOW", minimum=1.0),
            log_interval=r.float("POLITE_LOG_INTERVAL", minimum=0.0),
            prometheus_port=r.optional_int("POLITE_PROMETHEUS_PORT", minimum=0, maximum=65535),
            prometheus_address=checks.listen_address("POLITE_PROMETHEUS_ADDRESS", r.str("POLITE_PROMETHEUS_ADDRESS")),
            exit_ip_probe_url=r.optional_url("POLITE_EXIT_IP_PROBE_URL"),
            exit_ip_probe_timeout=r.float("POLITE_EXIT_IP_PROBE_TIMEOUT", minimum=0.1),
            state=r.state("POLITE_STATE"),
            state_namespace=r.str("POLITE_STATE_NAMESPACE"),
            state_lease_ttl=r.float("POLITE_STATE_LEASE_TTL", minimum=1.0),
            state_pin_ttl=r.float("POLITE_STATE_PIN_TTL", minimum=1.0),
            state_host_ttl=r.float("POLITE_STATE_HOST_TTL", minimum=1.0),
            state_poll=r.float("POLITE_STATE_POLL", minimum=0.005, maximum=5.0),
            state_outage_timeout=r.float("POLITE_STATE_OUTAGE_TIMEOUT", minimum=0.0),
            timeout_retry_times=r.int("POLITE_TIMEOUT_RETRY_TIMES", minimum=0),
            retry_times=max(0, settings.getint("RETRY_TIMES", 2)),
            stall_timeout=r.float("POLITE_STALL_TIMEOUT", minimum=0.0),
            report_html=checks.output_path("POLITE_REPORT_HTML", r.report_html()),
            playwright_max_contexts=r.playwright_max_contexts(),
            playwright_block=frozenset(r.choices("POLITE_PLAYWRIGHT_BLOCK", PLAYWRIGHT_RESOURCE_TYPES)),
            host_memory=r.int("POLITE_HOST_MEMORY", minimum=0, maximum=100_000_000),
            stats_top=r.int("POLITE_STATS_TOP", minimum=1, maximum=100_000),
            stats_sessions_map=r.int("POLITE_STATS_SESSIONS_MAP", minimum=0),
            host_overrides=r.download_slots(HostLimits(host_conc, conc_max, delay)),
            response_policy=checks.policy_class("POLITE_RESPONSE_POLICY", r.str("POLITE_RESPONSE_POLICY")),
            challenge_patterns=r.challenge_patterns("POLITE_CHALLENGE_PATTERNS"),
            challenge_bench=r.float("POLITE_CHALLENGE_BENCH", minimum=0.0, maximum=MAX_SECONDS),
            challenge_retry_times=r.int("POLITE_CHALLENGE_RETRY_TIMES", minimum=0),
            host_blocked=r.choice("POLITE_HOST_BLOCKED", checks.BLOCKED_CHOICES),
            proxy_tiers=r.proxy_tiers("POLITE_PROXY_TIERS"),
            tier_escalate_after=r.int("POLITE_TIER_ESCALATE_AFTER", minimum=1),
            tier_cooldown=r.float("POLITE_TIER_COOLDOWN", minimum=0.0, maximum=MAX_SECONDS),
            session_max_requests=r.optional_int("POLITE_SESSION_MAX_REQUESTS", minimum=1),
            session_max_age=r.optional_float("POLITE_SESSION_MAX_AGE", minimum=0.1),
        )
        if cfg.enabled:
            endpoints, duplicates = cfg.load_endpoints()
            object.__setattr__(cfg, "endpoints", tuple(endpoints))
            object.__setattr__(cfg, "duplicates", tuple(duplicates))
        return cfg

    def load_endpoints(self, reload: bool = False) -> tuple[list[Endpoint], list[str]]:
        """Endpoints from ``POLITE_PROXIES`` plus ``POLITE_PROXIES_FILE``.

        Raises when there are none, since a pool of zero would hang the crawl; on a
        *reload*, also when the file lists none, since an emptied file is most likely
        one being rewritten, and dropping its endpoints would strand their sessions.
        """
        endpoints, duplicates, ranks = load_endpoints(
            self.proxies, self.proxies_file, self.gateway_sessions, reload, self.proxy_tiers
        )
        object.__setattr__(self, "endpoint_tiers", ranks)
        return endpoints, duplicates


class _Reader:
    """Typed getters that raise :class:`PoliteConfigError` on bad values."""

    def __init__(self, settings: BaseSettings) -> None:
        self.settings = settings

    def raw(self, name: str) -> Any:
        value = self.settings.get(name)
        return DEFAULTS[name] if value is None else value

    def bool(self, name: str) -> bool:
        value = self.raw(name)
        if isinstance(value, bool):
            return value
        if isinstance(value, (int, str)) and str(value).strip().lower() in {"0", "1", "true", "false"}:
            return str(value).strip().lower() in {"1", "true"}
        raise PoliteConfigError(name, value, "True or False")

    def _number(self, name: str, value: Any, kind: type, minimum: float | None, maximum: float | None) -> Any:
        """*value* as a finite int or float within bounds.

        Without a *maximum*, floats (all seconds) stop at ``MAX_SECONDS`` and ints at ``MAX_COUNT``,
        so a typo cannot overflow a timer, a Redis expiry or a loop.
        """
        noun = "an integer" if kind is int else "a number"
        try:
            if isinstance(value, bool):
                raise ValueError
            if isinstance(value, str):
                value = value.strip()
            number = kind(value)
            if kind is int and isinstance(value, float) and not value.is_integer():
                raise ValueError
        except (TypeError, ValueError, OverflowError):  # int(inf) overflows
            raise PoliteConfigError(name, value, noun) from None
        if isinstance(number, float) and not math.isfinite(number):
            raise PoliteConfigError(name, value, "a finite " + ("integer" if kind is int else "number"))
        if maximum is None:
            maximum = MAX_SECONDS if kind is float else MAX_COUNT
        if minimum is not None and number < minimum:
            raise PoliteConfigError(name, value, f"{noun} >= {minimum}")
        if maximum is not None and number > maximum:
            raise PoliteConfigError(name, value, f"{noun} <= {maximum:g}")
        return number

    def int(self, name: str, minimum: int | None = None, maximum: int | None = None) -> int:
        return self._number(name, self.raw(name), int, minimum, maximum)

    def float(self, name: str, minimum: float | None = None, maximum: float | None = None) -> float:
        return self._number(name, self.raw(name), float, minimum, maximum)

    def optional_int(self, name: builtins.str, minimum: builtins.int | None = None, maximum: builtins.int | None = None) -> builtins.int | None:
        value = self.settings.get(name, DEFAULTS[name])
        return None if _unset(value) else self._number(name, value, int, minimum, maximum)

    def optional_float(self, name: builtins.str, minimum: builtins.float | None = None) -> builtins.float | None:
        value = self.settings.get(name, DEFAULTS[name])
        return None if _unset(value) else self._number(name, value, float, minimum, None)

    def str(self, name: str) -> str:
        value = self.raw(name)
        if not isinstance(value, str) or not value.strip():
            raise PoliteConfigError(name, value, "a non-empty string")
        return value

    def optional_str(self, name: builtins.str) -> builtins.str | None:
        value = self.settings.get(name, DEFAULTS[name])
        if _unset(value):
            return None
        if isinstance(value, os.PathLike):
            value = os.fspath(value)
        if not isinstance(value, str):
            raise PoliteConfigError(name, value, "a string or None")
        return value

    def optional_url(self, name: builtins.str) -> builtins.str | None:
        value = self.optional_str(name)
        return None if value is None else checks.http_url(name, value)

    def state(self, name: builtins.str) -> builtins.str:
        return checks.state(name, self.raw(name))

    def choice(self, name: builtins.str, choices: tuple[builtins.str, ...]) -> builtins.str:
        value = self.raw(name)
        if value not in choices:
            raise PoliteConfigError(name, value, "one of " + ", ".join(repr(c) for c in choices))
        return value

    def choices(self, name: builtins.str, choices: tuple[builtins.str, ...]) -> builtins.list[builtins.str]:
        values = self.list(name)
        bad = [v for v in values if v not in choices]
        if bad:
            raise PoliteConfigError(name, values, "a list of " + ", ".join(repr(c) for c in choices))
        return values

    def playwright_max_contexts(self) -> builtins.int:
        """``POLITE_PLAYWRIGHT_MAX_CONTEXTS``: at most ``PLAYWRIGHT_MAX_CONTEXTS``, which it defaults to.

        Above scrapy-playwright's own limit, a new context would wait there while
        the pool holds its lease, for a context the pool would never close.
        """
        theirs = self.settings.getint("PLAYWRIGHT_MAX_CONTEXTS") or None
        ours = self.optional_int("POLITE_PLAYWRIGHT_MAX_CONTEXTS", minimum=1, maximum=100_000)
        if ours is None:
            return theirs or PLAYWRIGHT_CONTEXTS_DEFAULT
        if theirs is not None and ours > theirs:
            raise PoliteConfigError(
                "POLITE_PLAYWRIGHT_MAX_CONTEXTS", ours, f"an integer <= PLAYWRIGHT_MAX_CONTEXTS ({theirs})"
            )
        return ours

    def list(self, name: builtins.str) -> builtins.list[Any]:
        value = self.raw(name)
        if isinstance(value, str):
            # Command line (-s) and Scrapyd pass strings: comma/space separated.
            return [v for v in value.replace(",", " ").split() if v]
        if not isinstance(value, (list, tuple)):
            raise PoliteConfigError(name, value, "a list")
        return list(value)

    def proxies(self, name: builtins.str) -> builtins.list[Any]:
        """Like :meth:`list`, but a string is split without taking a piece of a password for a proxy."""
        value = self.raw(name)
        return split_proxies(value, name) if isinstance(value, str) else self.list(name)

    def str_list(self, name: builtins.str) -> builtins.list[builtins.str]:
        values = self.list(name)
        if not all(isinstance(v, str) and v for v in values):
            raise PoliteConfigError(name, values, "a list of non-empty strings")
        return values

    def challenge_patterns(self, name: builtins.str) -> tuple[ChallengePattern, ...]:
        """Each entry a dict: ``{"header": name, "value": regex}`` or ``{"status": [codes], "body": regex}``."""
        expected = 'a list of {"header": name, "value": regex} or {"status": [codes], "body": regex} dicts'
        found: list[ChallengePattern] = []
        for entry in self.list(name):
            if not isinstance(entry, dict) or not entry or set(entry) - {"header", "value", "status", "body"}:
                raise PoliteConfigError(name, entry, expected)
            header, value, body = entry.get("header"), entry.get("value"), entry.get("body")
            statuses = entry.get("status", [])
            if (header is None) == (body is None) or (header is None and value is not None):
                raise PoliteConfigError(name, entry, expected)
            if not isinstance(statuses, (list, tuple)) or any(
                not isinstance(c, int) or not 100 <= c <= 599 for c in statuses
            ):
                raise PoliteConfigError(name, entry, "a status list of HTTP codes")
            if header is not None and (not isinstance(header, str) or not header):
                raise PoliteConfigError(name, entry, expected)
            try:
                found.append(ChallengePattern(
                    header=header.lower() if header else None,
                    value=re.compile(value, re.IGNORECASE) if value is not None else None,
                    statuses=frozenset(statuses),
                    body=re.compile(body.encode()) if isinstance(body, str) else None,
                ))
            except (re.error, TypeError) as exc:
                raise PoliteConfigError(name, entry, f"valid regular expressions ({exc})") from None
        return tuple(found)

    def proxy_tiers(self, name: builtins.str) -> tuple[Any, ...]:
        """Each tier a list of proxies, or the path of a proxies file; tiers come cheapest first."""
        tiers: list[Any] = []
        for tier in self.list(name):
            if isinstance(tier, str):
                tiers.append(tier)
            elif isinstance(tier, (list, tuple)) and tier:
                tiers.append(tuple(tier))
            else:
                raise PoliteConfigError(name, Shown("[...]"), "a list of tiers: proxy lists or proxies-file paths")
        return tuple(tiers)

    def codes(self, name: builtins.str) -> frozenset[builtins.int]:
        return frozenset(self._number(name, v, int, 100, 599) for v in self.list(name))

    def host_concurrency(self) -> tuple[builtins.int, builtins.int]:
        """``POLITE_HOST_CONCURRENCY`` and ``POLITE_HOST_CONCURRENCY_MAX`` (4x it in adaptive mode by default)."""
        host_conc = self.int("POLITE_HOST_CONCURRENCY", minimum=1, maximum=100_000)
        conc_max = self.optional_int("POLITE_HOST_CONCURRENCY_MAX", minimum=1, maximum=100_000)
        if conc_max is None:
            return host_conc, host_conc * 4 if self.bool("POLITE_ADAPTIVE") else host_conc
        if conc_max < host_conc:
            raise PoliteConfigError(
                "POLITE_HOST_CONCURRENCY_MAX", conc_max,
                f"an integer >= POLITE_HOST_CONCURRENCY ({host_conc})",
            )
        return host_conc, conc_max

    def rate_limit_codes(self) -> frozenset[builtins.int]:
        """``POLITE_RATE_LIMIT_CODES``: never empty, or no component would handle a 429."""
        name = "POLITE_RATE_LIMIT_CODES"
        codes = self.codes(name)
        if not codes:
            raise PoliteConfigError(name, self.raw(name), "at least one HTTP status (e.g. [429])")
        return codes

    def report_html(self) -> builtins.str | None:
        """``POLITE_REPORT_HTML``: the report is written from the run's JSONL, so it needs one."""
        name = "POLITE_REPORT_HTML"
        value = self.optional_str(name)
        if value is not None and self.optional_str("POLITE_STATS_JSONL") is None:
            raise PoliteConfigError(name, value, "a path, with POLITE_STATS_JSONL set: the report is read from it")
        return value

    def download_slots(self, defaults: HostLimits) -> dict[builtins.str, HostLimits]:
        """Scrapy's ``DOWNLOAD_SLOTS`` as per-host :class:`HostLimits` over *defaults*.

        ``delay`` is Scrapy's: with ``randomize_delay`` (default ``RANDOMIZE_DOWNLOAD_DELAY``)
        it spans 0.5-1.5 times the delay, with ``jitter`` j it spans (1-j)-(1+j) times it.
        An explicit ``concurrency`` is also the most the throttle grows the host to.
        """
        slots = self.settings.getdict("DOWNLOAD_SLOTS")
        randomize = self.settings.getbool("RANDOMIZE_DOWNLOAD_DELAY", True)
        out: dict[str, HostLimits] = {}
        for key, entry in slots.items():
            name = f"DOWNLOAD_SLOTS[{key!r}]"
            if not isinstance(entry, dict):
                raise PoliteConfigError(name, entry, "a dict with concurrency, delay, randomize_delay or jitter")
            conc, conc_max, delay = defaults.concurrency, defaults.concurrency_max, defaults.delay
            if entry.get("concurrency") is not None:
                conc = conc_max = self._number(f"{name}['concurrency']", entry["concurrency"], int, 1, 100_000)
            if entry.get("delay") is not None:
                d = self._number(f"{name}['delay']", entry["delay"], float, 0.0, MAX_SECONDS / 2)
                if "jitter" in entry:
                    jitter = self._number(f"{name}['jitter']", entry["jitter"], float, 0.0, 1.0)
                else:
                    value = entry.get("randomize_delay", randomize)
                    if not isinstance(value, bool):
                        raise PoliteConfigError(f"{name}['randomize_delay']", value, "True or False")
                    jitter = 0.5 if value else 0.0
                delay = (d * (1 - jitter), d * (1 + jitter))
            out[str(key)] = HostLimits(conc, conc_max, delay)
        return out

    def range(self, name: builtins.str, positive: builtins.bool = False) -> tuple[builtins.float, builtins.float]:
        value = self.raw(name)
        if isinstance(value, str):
            value = [v for v in value.replace(",", " ").split() if v]
        if isinstance(value, (list, tuple)) and len(value) == 1:
            value = value[0]
        if isinstance(value, (list, tuple)) and len(value) == 2:
            low = self._number(name, value[0], float, 0.0, None)
            high = self._number(name, value[1], float, 0.0, None)
        elif isinstance(value, (int, float, str)) and not isinstance(value, bool):
            # A single number d means "about d": jitter it by +-1/3.
            d = self._number(name, value, float, 0.0, MAX_SECONDS * 3 / 4)
            low, high = d * 2 / 3, d * 4 / 3
        else:
            raise PoliteConfigError(name, value, "(min, max) seconds, or one number of seconds")
        if low < 0 or high < low:
            raise PoliteConfigError(name, value, "(min, max) with 0 <= min <= max")
        if positive and low <= 0:
            raise PoliteConfigError(name, value, "(min, max) with 0 < min <= max")
        return (low, high)


def _unset(value: Any) -> bool:
    """None or an empty string (``-s NAME=``): the setting is off."""
    return value is None or (isinstance(value, str) and not value.strip())


def register_defaults(settings: BaseSettings) -> None:
    """Add :data:`DEFAULTS` at Scrapy's ``default`` priority, below anything a project or ``-s`` sets."""
    for name, value in DEFAULTS.items():
        settings.set(name, value, priority="default")


def enabled(settings: BaseSettings) -> bool:
    """The validated ``POLITE_ENABLED``, for the add-on, which runs before the config is built."""
    return _Reader(settings).bool("POLITE_ENABLED")


def rate_limit_codes(settings: BaseSettings) -> frozenset[int]:
    """The validated ``POLITE_RATE_LIMIT_CODES``, for the add-on, which runs before the config is built."""
    return _Reader(settings).rate_limit_codes()


def host_concurrency_max(settings: BaseSettings) -> int:
    """The most requests the gates let one host have in flight, for the add-on (before the config is built)."""
    return _Reader(settings).host_concurrency()[1]
