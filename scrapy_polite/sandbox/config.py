"""Sandbox configuration: plain dataclasses with a JSON round trip.

The parent process serialises a :class:`SandboxConfig` to JSON and the
sandbox child rebuilds it, so every field must survive ``to_dict`` /
``from_dict`` unchanged.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from .limiters import build

#: ``deny`` answers 407 to every request (CONNECT too); ``connect429`` answers a CONNECT with 429;
#: ``badgateway`` answers every request at once with its own 502 (no proxy-error header).
FAILURE_MODES = ("die", "hang", "refuse", "recover", "deny", "connect429", "badgateway")
#: ``Retry-After`` values a site sends as they are, by form: none of them is a wait a client can use.
LITERAL_RETRY_AFTER = {
    "garbage": "soon",
    "date-overflow": "Mon, 01 Jan 99999 00:00:00 GMT",
    "date-year20": "Mon, 01 Jan 12345678901234567890 00:00:00 GMT",
    "non-ascii": "\uff12\u79d2",  # "２秒", sent as UTF-8
    "huge": "9" * 8000,
    "empty": "",
}
RETRY_AFTER_FORMS = ("seconds", "date", "none", *LITERAL_RETRY_AFTER)


@dataclass
class FailureSpec:
    """Scheduled failure of one proxy (index, or ``"gateway"``)."""

    proxy: int | str
    mode: str
    at: float = 0.0

    def __post_init__(self) -> None:
        if self.mode not in FAILURE_MODES:
            raise ValueError(f"FailureSpec.mode must be one of {FAILURE_MODES}, got {self.mode!r}")


@dataclass
class SiteConfig:
    """One target site; limits default to unlimited."""

    name: str
    address: str | None = None
    per_ip_rate: float | None = None
    per_ip_burst: int = 1
    per_ip_max_inflight: int | None = None
    host_rate: float | None = None
    host_burst: int = 1
    host_rate_schedule: list[list[float]] | None = None
    latency: list[float] = field(default_factory=lambda: [0.0, 0.0])
    #: Answer the limits' refusals (429s, challenges, blocks) at once, without ``latency``, as nginx's
    #: ``limit_req`` does before it proxies to the upstream: a 429 then comes back before the pages
    #: asked for just ahead of it.
    refuse_at_once: bool = False
    retry_after: float = 2.0
    retry_after_form: str = "seconds"
    strikes_to_block: int | None = 3
    rate_limited_status: int = 429
    robots_crawl_delay: float | None = None
    #: Crawl-delay per User-agent group of robots.txt, beside the ``*`` group above.
    robots_agent_delays: dict[str, float] = field(default_factory=dict)
    pages: int = 100
    per_list: int = 20
    tls: bool = False
    #: ``[name, value]`` header lines added to every answer (a site-sent ``X-Exit-IP``, say); UTF-8 on the wire.
    extra_headers: list[list[str]] = field(default_factory=list)
    #: Item pages that never answer: the connection is held until the client drops
    #: it or the sandbox stops (``max_runtime``).
    hang_items: list[int] = field(default_factory=list)
    #: The escalation ladder: from this many strikes (requests inside a Retry-After window) an IP
    #: is flagged for ``flag_time`` s and gets challenge pages (a 200 with a "verify you are human"
    #: body and a 403 with ``cf-mitigated: challenge``, in turn) until ``strikes_to_block`` blocks it.
    challenge_after: int | None = None
    #: IPs flagged from the start (a burned cheap tier), for ``flag_time`` s.
    flagged_ips: list[str] = field(default_factory=list)
    flag_time: float = 30.0
    #: A zoo limiter's spec (``scrapy_polite.sandbox.limiters.build``), asked before the limits above.
    limiter: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.limiter is not None:
            build(self.limiter)  # a bad spec fails here, in the parent, naming the kind
        self.extra_headers = [[str(name), str(value)] for name, value in self.extra_headers]
        for name, value in self.extra_headers:
            if not name or any(c in name for c in ":\r\n ") or any(c in value for c in "\r\n"):
                raise ValueError(f"SiteConfig.extra_headers: bad header line {name!r}: {value!r}")
        if self.retry_after_form not in RETRY_AFTER_FORMS:
            raise ValueError(
                f"SiteConfig.retry_after_form must be one of {RETRY_AFTER_FORMS}, "
                f"got {self.retry_after_form!r}"
            )
        self.latency = [float(x) for x in self.latency]
        if len(self.latency) != 2 or self.latency[0] > self.latency[1] or self.latency[0] < 0:
            raise ValueError(f"SiteConfig.latency must be [min, max], got {self.latency!r}")
        if self.host_rate_schedule is not None:
            self.host_rate_schedule = sorted(
                [float(t), None if r is None else float(r)] for t, r in self.host_rate_schedule
            )
        if self.pages < 1 or self.per_list < 1:
            raise ValueError("SiteConfig.pages and per_list must be >= 1")


@dataclass
class ProxyConfig:
    """Forward-proxy fleet plus an optional session gateway."""

    count: int = 8
    first_source: str = "127.0.0.10"
    auth: tuple[str, str] | None = None
    exit_ip_header: str = "X-Proxy-Exit-IP"
    gateway: bool = True
    gateway_pool: int = 16
    gateway_first_source: str = "127.0.0.100"
    proxy_rate: float | None = None
    proxy_burst: int = 1
    address: str = "127.0.0.1"
    #: Fixed listening ports, by proxy index (0 or missing: a free one).
    ports: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.auth is not None:
            user, password = self.auth
            self.auth = (str(user), str(password))


@dataclass
class SandboxConfig:
    """Everything one sandbox process serves."""

    sites: list[SiteConfig] = field(default_factory=lambda: [SiteConfig(name="a")])
    proxies: ProxyConfig = field(default_factory=ProxyConfig)
    failures: list[FailureSpec] = field(default_factory=list)
    max_runtime: float = 900.0
    seed: int | None = None

    def __post_init__(self) -> None:
        names = [s.name for s in self.sites]
        if len(set(names)) != len(names):
            raise ValueError(f"site names must be unique, got {names}")

    def site(self, name: str) -> SiteConfig:
        """The site called *name* (``KeyError`` if absent)."""
        for s in self.sites:
            if s.name == name:
                return s
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict; inverse of :meth:`from_dict`."""
        data = asdict(self)
        if self.proxies.auth is not None:
            data["proxies"]["auth"] = list(self.proxies.auth)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SandboxConfig:
        """Rebuild from :meth:`to_dict` output (unknown keys are an error)."""
        data = dict(data)
        sites = [SiteConfig(**_known(SiteConfig, s)) for s in data.pop("sites", [])]
        proxy_data = dict(data.pop("proxies", {}) or {})
        if proxy_data.get("auth") is not None:
            proxy_data["auth"] = tuple(proxy_data["auth"])
        proxies = ProxyConfig(**_known(ProxyConfig, proxy_data))
        failures = [FailureSpec(**_known(FailureSpec, f)) for f in data.pop("failures", [])]
        return cls(sites=sites, proxies=proxies, failures=failures, **_known(cls, data))


def _known(klass: type, data: dict[str, Any]) -> dict[str, Any]:
    names = {f.name for f in fields(klass)}
    unknown = set(data) - names
    if unknown:
        raise ValueError(f"unknown {klass.__name__} fields: {sorted(unknown)}")
    return data
