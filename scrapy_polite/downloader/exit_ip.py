"""Exit IPs: named in response headers (which anyone on the path can set), configured, or probed."""

from __future__ import annotations

import ipaddress
import json
import logging
from typing import TYPE_CHECKING, Any

from scrapy.utils.httpobj import urlparse_cached
from twisted.internet.defer import Deferred

from scrapy_polite import compat

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Response

    from scrapy_polite.gate.local import Lease
    from scrapy_polite.pool.endpoints import Endpoint
    from scrapy_polite.settings.config import PoliteConfig

logger = logging.getLogger(__name__)

#: The longest IPv6 text form with a zone is well under this; longer values are not parsed.
MAX_LENGTH = 64
#: Header values remembered with the address each names (the memory starts over when full).
PARSED_MEMORY = 4096


def parse_exit_ip(value: str | bytes | None) -> str | None:
    """The IP address *value* names, in canonical form, or ``None`` if it names none."""
    if value is None or len(value) > MAX_LENGTH:
        return None
    if isinstance(value, (bytes, bytearray)):
        value = bytes(value).decode("latin-1")
    value = value.strip()
    if not value.isascii():
        return None
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        return None


def parse_probe_response(response: Response) -> str | None:
    """The IP address an IP-echo service answered: JSON ``{"ip": ...}`` or plain text."""
    if response.status != 200:
        return None
    return parse_probe_body(response.body)


def parse_probe_body(body: bytes) -> str | None:
    text = body.decode("utf-8", "replace").strip()
    candidate: Any = None
    if text.startswith("{"):
        try:
            data = json.loads(text)
        except ValueError:
            data = None
        if isinstance(data, dict):
            # "ip" (ipify and most), "origin" (httpbin, may list several hops).
            candidate = next((data[k] for k in ("ip", "origin") if isinstance(data.get(k), str)), None)
    elif text:
        candidate = text.split()[0]
    if not isinstance(candidate, str):
        return None
    try:
        return str(ipaddress.ip_address(candidate.split(",")[0].strip()))
    except ValueError:
        return None


class ExitIps:
    """Where each attempt exited: a provider header, the endpoint's static ``exit_ip``, or a probe.

    With ``POLITE_EXIT_IP_PROBE_URL`` each endpoint's exit IP is probed once, for
    providers that send no exit-IP header and endpoints without a static ``exit_ip``.
    """

    def __init__(self, crawler: Crawler, config: PoliteConfig) -> None:
        self.crawler = crawler
        self.config = config
        self.stats = crawler.stats
        self._warned_https = False
        self._warned_headers: set[str] = set()
        self._parsed: dict[bytes | str, str | None] = {}
        self._probed: dict[str, str | None] = {}
        self._probing: dict[str, Any] = {}
        self._probe_waiters: dict[str, list[Deferred]] = {}

    def of(self, lease: Lease, response: Response | None) -> tuple[str | None, str | None]:
        """(exit IP, its source) of the attempt through *lease*; ``(None, None)`` when unknown."""
        if response is not None:
            for name in self.config.exit_ip_headers:
                value = response.headers.get(name)
                if value is None:
                    continue
                ip = self._parse(value)
                if ip is not None:
                    return ip, "header"
                self._invalid(name, value, lease)
        if lease.endpoint.static_exit_ip:
            return lease.endpoint.static_exit_ip, "static"
        ip = self.probed(lease.endpoint.key)
        if ip:
            return ip, "probe"
        if response is not None and not self._warned_https and urlparse_cached(response).scheme == "https":
            # Scrapy drops the CONNECT reply, where the provider's exit-IP header is for HTTPS.
            self._warned_https = True
            logger.warning(
                "HTTPS responses via %s carry no exit IP. Scrapy discards the proxy's "
                "CONNECT reply headers: set DOWNLOAD_HANDLERS = {'https': "
                "'scrapy_proxy_headers.HTTP11ProxyDownloadHandler'} (pip install scrapy-proxy-headers), "
                "give each endpoint a static exit_ip, or set POLITE_EXIT_IP_PROBE_URL",
                lease.endpoint.label,
            )
        return None, None

    def _parse(self, value: bytes | str) -> str | None:
        """:func:`parse_exit_ip`, remembered: a pool names its few exit IPs on every answer."""
        if not isinstance(value, (bytes, str)):
            return parse_exit_ip(value)
        if value in self._parsed:
            return self._parsed[value]
        if len(self._parsed) >= PARSED_MEMORY:
            self._parsed.clear()
        ip = self._parsed[value] = parse_exit_ip(value)
        return ip

    def _invalid(self, name: str, value: bytes, lease: Lease) -> None:
        """Count a header value that names no IP address; the first one per header is logged."""
        self.stats.inc_value("polite/exit_ip_invalid")
        if name.lower() in self._warned_headers:
            return
        self._warned_headers.add(name.lower())
        logger.warning(
            "ignored %s header via %s, not an IP address: %r%s (further ones are only "
            "counted in polite/exit_ip_invalid)",
            name, lease.endpoint.label, value[:40], "..." if len(value) > 40 else "",
        )

    # -- probe --------------------------------------------------------------

    def probed(self, endpoint_key: str) -> str | None:
        """The exit IP the probe saw for *endpoint_key*, if any."""
        return self._probed.get(endpoint_key)

    def start(self, endpoints: Any) -> None:
        """Probe every endpoint of a gate's ``endpoints``; not awaited, so the crawl starts at once."""
        if self.config.exit_ip_probe_url:
            for st in list(endpoints.values()):
                if not st.removed:
                    self._start_probe(st.endpoint)

    def known(self, endpoint: Endpoint) -> Deferred | None:
        """A Deferred that fires once *endpoint*'s probe has answered; ``None`` if there is nothing to wait for.

        The middleware waits on it with the endpoint's lease in hand, so a probe
        never shares its endpoint with a crawl request. An endpoint first seen
        later (a reloaded proxies file) is probed here, on first use.
        """
        key = endpoint.key
        if not self.config.exit_ip_probe_url or key in self._probed or endpoint.static_exit_ip:
            return None
        if key not in self._probing:
            engine = getattr(self.crawler, "engine", None)
            if engine is None or not engine.running:
                return None
            self._start_probe(endpoint)
        d: Deferred = Deferred()
        self._probe_waiters.setdefault(key, []).append(d)
        return d

    def _start_probe(self, endpoint: Endpoint) -> None:
        from scrapy.utils.defer import deferred_from_coro

        self._probing[endpoint.key] = deferred_from_coro(self._probe(endpoint))

    async def _probe(self, endpoint: Endpoint) -> None:
        from scrapy import Request

        url = self.config.exit_ip_probe_url
        assert url is not None
        ip: str | None = None
        try:
            # Built inside the try: whatever goes wrong, the finally releases the requests waiting on it.
            request = Request(
                url,
                dont_filter=True,
                meta={
                    # The middleware leaves it alone; HttpProxyMiddleware still uses the proxy.
                    "polite": False,
                    "proxy": endpoint.url,
                    "dont_retry": True,
                    "dont_redirect": True,
                    "dont_merge_cookies": True,
                    "dont_cache": True,
                    "handle_httpstatus_all": True,
                    "download_timeout": self.config.exit_ip_probe_timeout,
                },
            )
            response = await compat.engine_download(self.crawler.engine, request)
            ip = parse_probe_response(response)
            if ip is None:
                logger.warning(
                    "exit-IP probe via %s got no IP address (status %d)",
                    endpoint.label, response.status,
                )
        except Exception as exc:
            logger.warning("exit-IP probe via %s failed: %r", endpoint.label, exc)
        finally:
            self._probing.pop(endpoint.key, None)
        self._probed[endpoint.key] = ip
        for d in self._probe_waiters.pop(endpoint.key, []):
            d.callback(ip)
        self.stats.inc_value("polite/exit_ip_probe/" + ("ok" if ip else "failed"))
        logger.debug("%s exits from %s", endpoint.label, ip)
