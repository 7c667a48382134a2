"""The defended target site: a catalogue behind per-IP and host-wide limits.

Clients are told apart by TCP peer address only (the proxy's exit IP), as
a real site behind no CDN would. Every limit decision is made when the
request arrives, before the simulated latency, so the access log's
``inflight_*`` fields describe exactly what the site judged. The limits are
in :mod:`.defences`, the pages in :mod:`.routes`.
"""

from __future__ import annotations

import asyncio
import math
import random
import ssl
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from .common import JsonlLog, peer_gone
from .config import SiteConfig
from .defences import Defences, IpState, wire_text
from .http import Headers, Request, build_response, http_date, serve_requests
from .limited import Judged, SiteLimiter
from .pages import Reply
from .routes import Router, cookie_sid, path_number


class Site:
    """One site server bound to its own loopback address."""

    def __init__(
        self,
        config: SiteConfig,
        address: str,
        log: JsonlLog,
        started: float,
        rng: random.Random,
        ssl_context: ssl.SSLContext | None = None,
        deadline: float = math.inf,
    ) -> None:
        self.config = config
        self.deadline = deadline
        self.name = config.name
        self.address = address
        self.port = 0
        self.log = log
        self.started = started
        self.rng = rng
        self.ssl_context = ssl_context
        self.inflight = 0
        self.defences = Defences(config, started)
        self.router = Router(config)
        self.zoo = SiteLimiter(config.limiter)
        self._server: asyncio.Server | None = None
        self._conns: set[asyncio.StreamWriter] = set()

    @property
    def url(self) -> str:
        """Base URL without trailing slash."""
        scheme = "https" if self.ssl_context is not None else "http"
        return f"{scheme}://{self.address}:{self.port}"

    def current_host_rate(self) -> float | None:
        """Host-wide cap now: runtime override, else schedule step, else ``host_rate``."""
        return self.defences.current_host_rate()

    def set_host_rate(self, rate: float | None) -> None:
        """Override the host-wide cap (``None`` = unlimited) for the rest of the run."""
        self.defences.set_host_rate(rate)

    def state(self) -> dict[str, Any]:
        """Snapshot for the control API."""
        ips = self.defences.ips
        return {
            "name": self.name,
            "url": self.url,
            "host_rate": self.current_host_rate(),
            "inflight": self.inflight,
            "blocked": sorted(ip for ip, s in ips.items() if s.blocked),
            "strikes": {ip: s.strikes for ip, s in ips.items() if s.strikes},
            "flagged": sorted(ip for ip, s in ips.items() if s.flagged_until > time.monotonic()),
            "inside_retry_after": dict(self.zoo.book.inside),
        }

    async def start(self) -> None:
        """Listen on a free port of this site's address."""
        self._server = await asyncio.start_server(self._handle_conn, self.address, 0, ssl=self.ssl_context)
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        """Stop listening and drop open connections."""
        if self._server is not None:
            self._server.close()
        for w in list(self._conns):
            w.transport.abort()

    async def _handle_conn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        ip = peer[0] if peer else "?"
        self._conns.add(writer)
        try:
            await serve_requests(reader, writer, lambda req: self._serve(req, ip, writer, reader))
        finally:
            self._conns.discard(writer)

    async def _serve(
        self, req: Request, ip: str, writer: asyncio.StreamWriter, reader: asyncio.StreamReader | None = None
    ) -> bool:
        now = time.monotonic()
        st = self.defences.ip(ip)
        st.inflight += 1
        self.inflight += 1
        path = req.target
        if path.startswith(("http://", "https://")):
            split = urlsplit(path)
            path = split.path + (f"?{split.query}" if split.query else "")
        visit = _Visit(req, ip, path, st, self.zoo.arrive(ip, path, now), (st.inflight, self.inflight))
        judged = visit.judged
        try:
            if urlsplit(path).path != "/robots.txt":
                visit.reply = self.defences.verdict(st, now) if judged.status == 200 else Reply(
                    judged.status, judged.body, extra=judged.extra)
            if visit.reply is None and self._hangs(path):
                await self._hang(reader, writer)
                return False
            refused = visit.reply is not None and self.config.refuse_at_once
            if visit.reply is None:
                visit.reply = self.router.route(path, ip, visit.sid)
            await self._answer(visit, visit.reply, refused, writer)
        finally:
            st.inflight -= 1
            self.inflight -= 1
            self._write_log(visit)
        return req.keep_alive

    async def _answer(self, visit: _Visit, reply: Reply, refused: bool, writer: asyncio.StreamWriter) -> None:
        """Wait out the simulated latency (none for a refusal sent at once), then send *reply*."""
        req, judged = visit.req, visit.judged
        lo, hi = self.config.latency
        if (hi > 0 and not refused) or judged.delay:
            await asyncio.sleep((self.rng.uniform(lo, hi) if not refused else 0.0) + judged.delay)
        headers = Headers(
            [
                ("Date", http_date()),
                ("Server", "scrapy-polite-sandbox"),
                ("Content-Type", reply.content_type),
                ("X-Sandbox-Peer-IP", visit.ip),
                ("X-Sandbox-Site", self.name),
            ]
            + [(name, wire_text(value)) for name, value in self.config.extra_headers]
            + (reply.extra or []) + (judged.extra if judged.status == 200 else [])
        )
        writer.write(
            build_response(
                reply.status, headers, reply.body, keep_alive=req.keep_alive, head_only=req.method == "HEAD"
            )
        )
        await writer.drain()

    def _write_log(self, visit: _Visit) -> None:
        """One access-log line per request, written when it ends (status 0: never answered)."""
        reply = visit.reply
        status = reply.status if reply is not None else 0
        self.log.write(
            {
                "t_start": visit.t_start,
                "t_end": time.time(),
                "site": self.name,
                "ip": visit.ip,
                "method": visit.req.method,
                "path": visit.path,
                "status": status,
                "inflight_ip": visit.inflight[0],
                "inflight_host": visit.inflight[1],
                "sid": visit.sid,
                "user": reply.user if reply is not None else None,
                "challenge": reply.challenge if reply is not None else False,
                "blocked": visit.st.blocked,
                **self.zoo.leave(visit.ip, visit.judged, status,
                                 (reply.extra or []) if reply is not None else [], time.monotonic()),
            }
        )

    def _hangs(self, path: str) -> bool:
        p = urlsplit(path).path
        return p.startswith("/item/") and path_number(p[6:]) in self.config.hang_items

    async def _hang(self, reader: asyncio.StreamReader | None, writer: asyncio.StreamWriter) -> None:
        """Never answer: hold the connection until the client drops it or the sandbox stops.

        The access log gets the request with status 0 when it ends.
        """
        while time.monotonic() < self.deadline and not writer.is_closing():
            if reader is not None and peer_gone(reader):
                break
            await asyncio.sleep(0.05)


@dataclass
class _Visit:
    """One request at the site: what it judged on arrival, and the answer once decided."""

    req: Request
    ip: str
    path: str
    st: IpState
    judged: Judged
    #: In flight from this IP, and at the host, counting this request.
    inflight: tuple[int, int]
    reply: Reply | None = None
    t_start: float = field(default_factory=time.time)
    sid: str | None = None

    def __post_init__(self) -> None:
        self.sid = cookie_sid(self.req)
