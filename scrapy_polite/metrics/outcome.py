"""The record of one finished request, shared by the middleware and stats."""

from __future__ import annotations

from collections.abc import Container
from dataclasses import asdict, dataclass
from typing import Any


def status_label(status: Any, exception: Any) -> str:
    """How an attempt is counted: its status, else its exception's name."""
    return str(status) if status is not None else str(exception or "unknown")


def is_success(status: Any, rate_limited: bool, verdict: str | None = None) -> bool:
    """The response policy's ``ok`` verdict; a record without one: a 2xx or 3xx answer that is not a rate signal."""
    if verdict is not None:
        return verdict == "ok"
    return isinstance(status, int) and 200 <= status < 400 and not rate_limited


def is_ban(
    status: int | None,
    ban_codes: Container[int],
    proxy_side: bool = False,
    rate_limited: bool = False,
    verdict: str | None = None,
) -> bool:
    """The policy's ``ban`` verdict; without one: a status in ``POLITE_BAN_CODES`` from the site, not a rate signal."""
    if verdict is not None:
        return verdict == "ban"
    return status is not None and status in ban_codes and not proxy_side and not rate_limited


def is_challenge(verdict: str | None) -> bool:
    """The policy's ``challenge`` verdict (a CAPTCHA or JavaScript check): never a page."""
    return verdict == "challenge"


@dataclass(frozen=True)
class Outcome:
    """What happened to one request attempt, as the stats report it.

    ``exit_ip`` is never ``response.ip_address`` behind a proxy (that is the
    proxy's address); ``exit_ip_source`` says where it came from:
    ``"header"`` (provider header), ``"static"`` (configured), ``"probe"``,
    ``"direct"`` (no proxy) or ``None`` (unknown). ``render`` is set for
    requests rendered in a browser only.
    """

    time: float
    url: str
    host: str
    endpoint: str | None
    session: str | None
    status: int | None
    exception: str | None
    wait: float
    latency: float | None
    exit_ip: str | None
    exit_ip_source: str | None
    requeues: int
    rate_limited: bool
    proxy_side: bool = False
    gave_up: bool = False
    #: Seconds the attempt spent in the browser (scrapy-playwright), else None.
    render: float | None = None
    #: The response policy's verdict kind (``ok``, ``rate_limited``, ``challenge``, ``ban``, ...).
    verdict: str | None = None
    #: Endpoint tier (0 = cheapest) with ``POLITE_PROXY_TIERS``, else None.
    tier: int | None = None
    #: Bytes of the answer's body, when there was one.
    size: int | None = None
    #: This record replaces the attempt's earlier one, which counted it as a page (the spider marked it).
    revises: bool = False

    @property
    def success(self) -> bool:
        return is_success(self.status, self.rate_limited, self.verdict)

    @property
    def label(self) -> str:
        return status_label(self.status, self.exception)

    def is_ban(self, ban_codes: Container[int]) -> bool:
        return is_ban(self.status, ban_codes, self.proxy_side, self.rate_limited, self.verdict)

    @property
    def challenge(self) -> bool:
        return is_challenge(self.verdict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
