"""Forward-proxy fleet, each exit on its own source IP.

Every proxy binds its upstream sockets to a distinct loopback source
address, so the target site sees one client IP per proxy exactly as it
would with a real provider. Failure modes are switched at runtime to
exercise a crawler's handling of dead, hanging and refusing endpoints.
The session gateway (:mod:`.gateway`) is a proxy that picks its exit per session.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import ipaddress
import socket
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import SplitResult, urlsplit

from .common import JsonlLog, TokenBucket
from .config import ProxyConfig
from .http import HOP_BY_HOP, Headers, HttpError, Request, build_response, serve_requests
from .upstream import CONNECT_TIMEOUT, UpstreamPool, pipe_both, read_unless_gone


def nth_address(first: str, i: int) -> str:
    """``first + i`` as a dotted IPv4 address."""
    return str(ipaddress.IPv4Address(first) + i)


def basic_credentials(req: Request) -> tuple[str, str] | None:
    """The user and password of the request's ``Proxy-Authorization: Basic``, if well formed."""
    value = req.headers.get("proxy-authorization")
    if not value:
        return None
    scheme, _, token = value.partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(token.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    user, sep, password = decoded.partition(":")
    return (user, password) if sep else None


@dataclass
class _Exchange:
    """One request through the proxy: the client to answer, and the exit it leaves by once chosen."""

    req: Request
    writer: asyncio.StreamWriter
    keep: bool
    exit_ip: str | None = None
    session: str | None = None


def _upstream_request(req: Request, split: SplitResult) -> bytes:
    """The request as the proxy sends it on: origin-form target, hop-by-hop headers dropped."""
    path = split.path or "/"
    if split.query:
        path += "?" + split.query
    out = Headers()
    drop = HOP_BY_HOP | req.headers.connection_tokens() | {"content-length"}
    for k, v in req.headers.items:
        if k.lower() not in drop:
            out.add(k, v)
    if out.get("host") is None:
        out.add("Host", split.netloc.rpartition("@")[2])
    if req.body or req.method in ("POST", "PUT", "PATCH"):
        out.add("Content-Length", str(len(req.body)))
    out.add("Connection", "keep-alive")
    return f"{req.method} {path} HTTP/1.1\r\n".encode("latin-1") + out.encode() + b"\r\n" + req.body


class ProxyServer:
    """One forward proxy (or, subclassed, the gateway) with failure modes."""

    kind = "proxy"

    def __init__(
        self, config: ProxyConfig, index: int | str, source: str, log: JsonlLog, deadline: float
    ) -> None:
        self.config = config
        self.index = index
        self.source = source
        self.log = log
        self.deadline = deadline
        self.host = config.address
        self.port = 0
        self.mode = "ok"
        self._server: asyncio.Server | None = None
        #: While down (``refuse``, ``die``): the port, bound but not listening, so a connection is
        #: refused and no other server on the machine is handed the port and answers in its place.
        self._reserved: socket.socket | None = None
        self._conns: set[asyncio.StreamWriter] = set()
        self._hung: set[asyncio.StreamWriter] = set()
        self._upstream = UpstreamPool()
        self._buckets: dict[str, TokenBucket] = {}

    # -- lifecycle -------------------------------------------------------
    @property
    def url(self) -> str:
        """Proxy URL including credentials when auth is on."""
        auth = self.config.auth
        cred = f"{auth[0]}:{auth[1]}@" if auth else ""
        return f"http://{cred}{self.host}:{self.port}"

    async def start(self) -> None:
        """Listen (on a free port first, then on the same port after ``recover``)."""
        if self._reserved is not None:
            self._reserved.close()
            self._reserved = None
        self._server = await asyncio.start_server(self._handle_conn, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        """Shut down for good."""
        self._stop_listening(reserve=False)
        self._abort_conns()
        if self._reserved is not None:
            self._reserved.close()
            self._reserved = None

    def _stop_listening(self, reserve: bool = True) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
            if reserve and self.port:
                self._reserve()

    def _reserve(self) -> None:
        """Hold the port without listening (no SO_REUSEADDR: nobody else may bind it meanwhile)."""
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.bind((self.host, self.port))
        except OSError:  # connections still open on it: the port is held by them anyway
            s.close()
            return
        self._reserved = s

    def _abort_conns(self) -> None:
        for w in list(self._conns):
            w.transport.abort()
        self._conns.clear()
        self._upstream.abort_all()

    async def set_mode(self, mode: str) -> None:
        """Apply ``die`` / ``hang`` / ``refuse`` / ``recover`` / ``deny`` / ``connect429`` / ``badgateway``."""
        if mode in ("deny", "connect429", "badgateway"):
            if self._server is None:
                await self.start()
        elif mode == "refuse":
            self._stop_listening()
        elif mode == "die":
            self._stop_listening()
            self._abort_conns()
        elif mode == "hang":
            if self._server is None:
                await self.start()
        elif mode == "recover":
            for w in list(self._hung):
                w.transport.abort()
            if self._server is None:
                await self.start()
            mode = "ok"
        else:
            raise ValueError(f"unknown mode {mode!r}")
        self.mode = mode

    # -- exit selection (overridden by the gateway) -------------------------
    def check_auth(self, req: Request) -> bool:
        """Whether the request carries the configured credentials."""
        auth = self.config.auth
        return auth is None or basic_credentials(req) == auth

    def choose_exit(self, req: Request) -> tuple[str, str | None]:
        """Source IP and session id for this request."""
        return self.source, None

    def _rate_ok(self, exit_ip: str) -> bool:
        rate = self.config.proxy_rate
        if rate is None:
            return True
        bucket = self._buckets.get(exit_ip)
        if bucket is None:
            bucket = self._buckets[exit_ip] = TokenBucket(rate, self.config.proxy_burst)
        return bucket.try_take()

    # -- connection handling -----------------------------------------------
    async def _handle_conn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._conns.add(writer)

        async def handle(req: Request) -> bool:
            if self.mode == "hang":
                await self._hang(writer)
                return False
            if req.method == "CONNECT":
                await self._connect(req, reader, writer)
                return False
            return await self._forward(req, writer, reader)

        try:
            await serve_requests(reader, writer, handle)
        finally:
            self._conns.discard(writer)
            self._hung.discard(writer)

    async def _hang(self, writer: asyncio.StreamWriter) -> None:
        """Hold the request unanswered until recovery, death or the run's end."""
        self._hung.add(writer)
        while self.mode == "hang" and time.monotonic() < self.deadline and not writer.is_closing():
            await asyncio.sleep(0.05)

    def _write_log(self, ex: _Exchange, status: int) -> None:
        self.log.write(
            {
                "t": time.time(),
                "proxy": self.index,
                "exit_ip": ex.exit_ip,
                "method": ex.req.method,
                "target": ex.req.target,
                "status": status,
                "session": ex.session,
            }
        )

    def _extra(self, ex: _Exchange) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        if ex.exit_ip is not None:
            out.append((self.config.exit_ip_header, ex.exit_ip))
        if ex.session is not None:
            out.append(("X-Proxy-Session", ex.session))
        return out

    async def _reply(self, ex: _Exchange, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
        head_only = ex.req.method == "HEAD"
        ex.writer.write(build_response(status, headers, body, keep_alive=ex.keep, head_only=head_only))
        await ex.writer.drain()
        self._write_log(ex, status)

    async def _fail(self, ex: _Exchange, status: int, error: str, body: bytes) -> None:
        """The proxy's own error answer, marked with ``X-Proxy-Error``."""
        await self._reply(ex, status, [("X-Proxy-Error", error)] + self._extra(ex), body)

    async def _preflight(self, ex: _Exchange) -> bool:
        """Auth and proxy-side rate limit, then the exit; answers and returns ``False`` on refusal."""
        req = ex.req
        if self.mode == "deny" or not self.check_auth(req):
            challenge = [("Proxy-Authenticate", 'Basic realm="sandbox"')]
            await self._reply(ex, 407, challenge, b"Proxy Authentication Required")
            return False
        if self.mode == "badgateway":  # the proxy's own 502, at once, with no proxy-error header
            await self._reply(ex, 502, [], b"<h1>502 Bad Gateway</h1>")
            return False
        ex.exit_ip, ex.session = self.choose_exit(req)
        if not self._rate_ok(ex.exit_ip) or (self.mode == "connect429" and req.method == "CONNECT"):
            limited = [("X-Proxy-Error", "rate-limited"), ("Retry-After", "1")] + self._extra(ex)
            await self._reply(ex, 429, limited, b"proxy rate limit")
            return False
        return True

    async def _connect(
        self, req: Request, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        ex = _Exchange(req, writer, keep=False)
        if not await self._preflight(ex):
            return
        assert ex.exit_ip is not None
        host, _, port_s = req.target.rpartition(":")
        host = host.strip("[]")
        if not host or not port_s.isdigit():
            await self._reply(ex, 400, [], b"bad CONNECT target")
            return
        try:
            up_r, up_w = await asyncio.wait_for(
                asyncio.open_connection(host, int(port_s), local_addr=(ex.exit_ip, 0)), CONNECT_TIMEOUT
            )
        except (OSError, asyncio.TimeoutError):
            await self._fail(ex, 502, "connect-failed", b"upstream connect failed")
            return
        self._upstream.live.add(up_w)
        head = (
            "HTTP/1.1 200 Connection established\r\n"
            + "".join(f"{k}: {v}\r\n" for k, v in self._extra(ex))
            + "\r\n"
        )
        writer.write(head.encode("latin-1"))
        await writer.drain()
        self._write_log(ex, 200)
        try:
            await pipe_both(reader, writer, up_r, up_w, self.deadline)
        finally:
            self._upstream.discard(up_w)

    async def _forward(
        self, req: Request, writer: asyncio.StreamWriter, reader: asyncio.StreamReader | None = None
    ) -> bool:
        ex = _Exchange(req, writer, keep=req.keep_alive)
        if not await self._preflight(ex):
            return ex.keep
        split = urlsplit(req.target)
        if split.scheme != "http" or not split.hostname:
            await self._fail(ex, 400, "absolute-http-uri-required",
                             b"absolute http:// URI required (use CONNECT for https)")
            return ex.keep
        resp = await self._fetch(ex, split, _upstream_request(req, split), reader)
        if resp is not None:
            await self._relay(ex, resp)
        return ex.keep

    async def _fetch(
        self, ex: _Exchange, split: SplitResult, wire: bytes, reader: asyncio.StreamReader | None
    ) -> Any:
        """The site's answer, or ``None`` once the client was answered otherwise or left.

        A pooled connection the site closed meanwhile is retried once on a new one.
        """
        assert ex.exit_ip is not None and split.hostname is not None
        host, port = split.hostname, split.port or 80
        for attempt in range(2):
            try:
                up_r, up_w, reused = await self._upstream.get(ex.exit_ip, host, port)
            except (OSError, asyncio.TimeoutError):
                await self._fail(ex, 502, "connect-failed", b"upstream connect failed")
                return None
            try:
                up_w.write(wire)
                await up_w.drain()
                resp = await read_unless_gone(up_r, ex.req.method, reader)
            except (ConnectionError, asyncio.IncompleteReadError) as exc:
                self._upstream.discard(up_w)
                if reused and attempt == 0:
                    continue
                await self._fail(ex, 502, "upstream-closed", str(exc).encode())
                return None
            except (asyncio.TimeoutError, HttpError, OSError) as exc:
                self._upstream.discard(up_w)
                status = 504 if isinstance(exc, asyncio.TimeoutError) else 502
                await self._fail(ex, status, "upstream-error", str(exc).encode())
                return None
            if resp is None:
                # The client left (its own timeout): drop the upstream request too, as real proxies do.
                self._upstream.discard(up_w)
                ex.keep = False
            elif resp.reusable:
                self._upstream.put(ex.exit_ip, host, port, up_r, up_w)
            else:
                self._upstream.discard(up_w)
            return resp
        return None

    async def _relay(self, ex: _Exchange, resp: Any) -> None:
        """Pass the site's answer on, with its own hop-by-hop headers dropped and the exit's added."""
        req = ex.req
        hdrs = Headers()
        rdrop = HOP_BY_HOP | resp.headers.connection_tokens()
        if req.method != "HEAD":
            rdrop = rdrop | {"content-length"}
        for k, v in resp.headers.items:
            if k.lower() not in rdrop:
                hdrs.add(k, v)
        for k, v in self._extra(ex):
            hdrs.set(k, v)
        ex.writer.write(
            build_response(
                resp.status,
                hdrs,
                resp.body,
                keep_alive=ex.keep,
                head_only=req.method == "HEAD",
                reason=resp.reason or None,
            )
        )
        await ex.writer.drain()
        self._write_log(ex, resp.status)
