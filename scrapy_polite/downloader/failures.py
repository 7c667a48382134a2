"""What a download exception says, and whom an unclear one blames.

A refused connection or a failed CONNECT is the proxy's fault for certain. A
timeout, a reset or a truncated answer after the proxy did connect is not: the
target may hang, or the proxy may. :func:`classify` sorts exceptions into those
kinds, and :class:`EvidenceTracker` puts each unclear failure where the
evidence so far points: the (endpoint, host) pair, the endpoint, or the host.
"""

from __future__ import annotations

import math
import re
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field

import scrapy.exceptions
from twisted.internet.error import (
    ConnectError,
    ConnectionDone,
    ConnectionLost,
    DNSLookupError,
    TimeoutError,
)
from twisted.web.client import ResponseFailed, ResponseNeverReceived

try:  # Scrapy >= 2.13 keeps it here; the class moved between releases.
    from scrapy.core.downloader.handlers.http11 import TunnelError
except ImportError:  # pragma: no cover
    TunnelError = None  # type: ignore[assignment,misc]

try:
    from twisted.web._newclient import RequestTransmissionFailed
except ImportError:  # pragma: no cover
    RequestTransmissionFailed = None  # type: ignore[assignment,misc]

#: The proxy failed for certain: it refused, could not be reached, or refused the tunnel.
PROXY = "proxy"
#: The proxy refused a CONNECT with 429: it limits this endpoint's rate.
PROXY_RATE = "proxy_rate"
#: The proxy connected, then no (complete) answer came: the target or the proxy.
AMBIGUOUS = "ambiguous"
#: Anything else (a bad URL, a TLS error of the target, ...): neither is blamed.
OTHER = "other"


def _scrapy(*names: str) -> tuple[type[BaseException], ...]:
    # Scrapy >= 2.14 wraps download errors in its own classes.
    return tuple(cls for name in names if (cls := getattr(scrapy.exceptions, name, None)) is not None)


def _optional(*classes: type[BaseException] | None) -> tuple[type[BaseException], ...]:
    return tuple(cls for cls in classes if cls is not None)


#: Checked first: Twisted's TimeoutError is a ConnectError subclass, yet a download
#: timeout says nothing certain about the proxy.
AMBIGUOUS_ERRORS: tuple[type[BaseException], ...] = (
    TimeoutError,
    ConnectionLost,
    ConnectionDone,
    ResponseNeverReceived,
    ResponseFailed,
) + _optional(RequestTransmissionFailed) + _scrapy(
    "DownloadTimeoutError", "DownloadFailedError", "ResponseDataLossError"
)
CERTAIN_PROXY_ERRORS: tuple[type[BaseException], ...] = (ConnectError, DNSLookupError) + _scrapy(
    "DownloadConnectionRefusedError", "CannotResolveHostError"
)

_TUNNEL_STATUS = re.compile(r"\[\{'status': (\d{3})\b")


@dataclass(frozen=True)
class Failure:
    """A classified download exception."""

    kind: str
    reason: str
    #: The proxy's answer to CONNECT, when it gave one.
    status: int | None = None


def tunnel_status(exc: BaseException) -> int | None:
    """The status a proxy answered a CONNECT with, from the message Scrapy builds.

    Scrapy (2.13 to 2.19) words it ``Could not open CONNECT tunnel with proxy
    host:port [{'status': 407, 'reason': b'...'}]``; the port may contain any
    digits, so only the status field counts.
    """
    match = _TUNNEL_STATUS.search(str(exc))
    return int(match.group(1)) if match else None


def classify(exc: BaseException) -> Failure:
    """What *exc*, raised by a download through a proxy, says about whom."""
    name = type(exc).__name__
    if TunnelError is not None and isinstance(exc, TunnelError):
        status = tunnel_status(exc)
        kind = PROXY_RATE if status == 429 else PROXY
        return Failure(kind, f"TunnelError {status}" if status else "TunnelError", status)
    if isinstance(exc, AMBIGUOUS_ERRORS):
        return Failure(AMBIGUOUS, name)
    if isinstance(exc, CERTAIN_PROXY_ERRORS):
        return Failure(PROXY, name)
    return Failure(OTHER, name)


# -- evidence ----------------------------------------------------------------

PAIR = "pair"
ENDPOINT = "endpoint"
HOST = "host"


@dataclass(frozen=True)
class Verdict:
    """Whom one unclear failure blames, and how strongly."""

    blame: str
    #: Unclear failures of this (endpoint, host) pair in a row: the pair's backoff step.
    streak: int = 1
    #: For a host: whether it answered nothing since the previous host verdict (park it).
    park: bool = False


@dataclass
class _Pair:
    count: int = 0
    first: float = 0.0


@dataclass
class _Host:
    #: Unclear failures within the window: (time, endpoint key, URL).
    recent: deque[tuple[float, str, object]] = field(default_factory=deque)
    #: URLs a host verdict already counted (the newest ones): a URL that hangs
    #: wherever it is sent is that URL's problem, and blames its host once.
    counted: OrderedDict[object, None] = field(default_factory=OrderedDict)
    #: When any endpoint last got an answer from the host, and which one.
    last_ok: float = -math.inf
    last_ok_endpoint: str = ""
    #: Host verdicts since its last answer.
    strikes: int = 0


class EvidenceTracker:
    """Decides whom each unclear failure blames, from the recent ones and the answers.

    - by default the (endpoint, host) pair: one hanging URL says little;
    - the endpoint, when its unclear failures since its last answer span
      *endpoint_hosts* hosts, or *endpoint_streak* come in a row for one host
      while another endpoint got an answer from that host meanwhile;
    - the host, when *host_endpoints* distinct endpoints failed for it within
      *window* seconds, on as many distinct URLs not counted by an earlier host
      verdict; a host verdict with no answer from the host since the previous
      one says to park it.

    An answer clears the pair's streak, the endpoint's record and the host's
    strikes. Memory is bounded: records older than the window are dropped, and
    at most *max_keys* endpoints, hosts and pairs are remembered (least recent
    out first).
    """

    def __init__(
        self,
        *,
        window: float = 10.0,
        host_endpoints: int = 3,
        endpoint_hosts: int = 2,
        endpoint_streak: int = 3,
        max_keys: int = 10_000,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.window, self.max_keys, self._clock = window, max_keys, clock or time.monotonic
        self.host_endpoints, self.endpoint_hosts, self.endpoint_streak = host_endpoints, endpoint_hosts, endpoint_streak
        self._pairs: OrderedDict[tuple[str, str], _Pair] = OrderedDict()
        self._endpoints: OrderedDict[str, deque[tuple[float, str]]] = OrderedDict()
        self._hosts: OrderedDict[str, _Host] = OrderedDict()

    def __len__(self) -> int:
        return len(self._pairs) + len(self._endpoints) + len(self._hosts)

    def failure(self, endpoint: str, host: str, url: object = None) -> Verdict:
        """An unclear failure of *endpoint* for *host* (on *url*, if known): whom it blames."""
        now = self._clock()
        pair = self._touch(self._pairs, (endpoint, host), _Pair)
        if pair.count == 0:
            pair.first = now
        pair.count += 1
        mine = self._touch(self._endpoints, endpoint, deque)
        mine.append((now, host))
        self._expire(mine, now)
        h = self._touch(self._hosts, host, _Host)
        h.recent.append((now, endpoint, object() if url is None else url))
        self._expire(h.recent, now)
        fresh = {u for _, _, u in h.recent if u not in h.counted}
        if len({k for _, k, _ in h.recent}) >= self.host_endpoints and len(fresh) >= self.host_endpoints:
            # Several endpoints failed for the host, on several URLs: the host, not the pool.
            h.recent.clear()
            for u in fresh:
                h.counted[u] = None
            while len(h.counted) > self.max_keys:
                h.counted.popitem(last=False)
            h.strikes += 1
            for key in [k for k in self._pairs if k[1] == host]:
                del self._pairs[key]
            return Verdict(HOST, park=h.strikes > 1)
        others_ok = h.last_ok > pair.first and h.last_ok_endpoint != endpoint
        if len({k for _, k in mine}) >= self.endpoint_hosts or (
            pair.count >= self.endpoint_streak and others_ok
        ):
            mine.clear()
            streak, pair.count = pair.count, 0
            return Verdict(ENDPOINT, streak=streak)
        return Verdict(PAIR, streak=pair.count)

    def success(self, endpoint: str, host: str) -> None:
        """An answer from *host* via *endpoint*: the failures it explains are forgiven."""
        self._pairs.pop((endpoint, host), None)
        self._endpoints.pop(endpoint, None)
        h = self._hosts.get(host)
        if h is None:
            if not self._pairs and not self._endpoints and not self._hosts:
                return  # nothing to forgive: keep no record of healthy hosts
            h = self._touch(self._hosts, host, _Host)
        h.last_ok, h.last_ok_endpoint, h.strikes = self._clock(), endpoint, 0

    def _expire(self, records: deque, now: float) -> None:  # type: ignore[type-arg]
        while records and records[0][0] < now - self.window:
            records.popleft()

    def _touch(self, table: OrderedDict, key: object, make: Callable[[], object]):  # type: ignore[type-arg]
        value = table.get(key)
        if value is None:
            value = table[key] = make()
            while len(table) > self.max_keys:
                table.popitem(last=False)
        else:
            table.move_to_end(key)
        return value
