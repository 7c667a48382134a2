"""The record of one finished request, shared by the middleware and stats."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


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
        if self.verdict is not None:
            return self.verdict == "ok"
        return self.status is not None and 200 <= self.status < 400 and not self.rate_limited

    @property
    def ban(self) -> bool:
        if self.verdict is not None:
            return self.verdict == "ban"
        return False

    @property
    def challenge(self) -> bool:
        return self.verdict == "challenge"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
