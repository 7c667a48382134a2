"""Forward-proxy fleet and a session gateway, each exit on its own source IP.

Every proxy binds its upstream sockets to a distinct loopback source
address, so the target site sees one client IP per proxy exactly as it
would with a real provider. Failure modes are switched at runtime to
exercise a crawler's handling of dead, hanging and refusing endpoints.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import ipaddress
import random
import socket
import time
from typing import Any
from urllib.parse import urlsplit

from .common import JsonlLog, TokenBucket, peer_gone
from .config import ProxyConfig
from .http import HOP_BY_HOP, Headers, HttpError, Request, build_response, read_response, serve_requests

CONNECT_TIMEOUT = 5.0
RESPONSE_TIMEOUT = 60.0
POOL_IDLE = 15.0
PIPE_CHUNK = 64 * 1024


def nth_address(first: str, i: int) -> str:
    """``first + i`` as a dotted IPv4 address."""
    return str(ipaddress.IPv4Address(first) + i)


def _credentials(req: Request) -> tuple[str, str] | None:
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


class _Upstream:
    """Keep-alive upstream connections per (source, host, port)."""

    def __init__(self) -> None:
        self._idle: dict[
            tuple[str, str, int], list[tuple[asyncio.StreamReader, asyncio.StreamWriter, float]]
        ] = {}
        self.live: set[asyncio.StreamWriter] = set()

    async def get(
        self, src: str, host: str, port: int
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, bool]:
        """A connection and whether it was reused from the pool."""
        key = (src, host, port)
        idle = self._idle.get(key, [])
        now = time.monotonic()
        while idle:
            r, w, since = idle.pop()
            if now - since < POOL_IDLE and not r.at_eof() and not w.is_closing():
                return r, w, True
            self.discard(w)
        r, w = await asyncio.wait_for(
            asyncio.open_connection(host, port, local_addr=(src, 0)), CONNECT_TIMEOUT
        )
        self.live.add(w)
        return r, w, False

    def put(self, src: str, host: str, port: int, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        """Return a still-usable connection to the pool."""
        self._idle.setdefault((src, host, port), []).append((r, w, time.monotonic()))

    def discard(self, w: asyncio.StreamWriter) -> None:
        """Close a connection for good."""
        self.live.discard(w)
        w.close()

    def abort_all(self) -> None:
        """Reset every upstream connection (used by ``die``)."""
        for w in list(self.live):
            w.transport.abort()
        self.live.clear()
        self._idle.clear()


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
        self._upstream = _Upstream()
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
        return auth is None or _credentials(req) == auth

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

    def _write_log(self, req: Request, exit_ip: str | None, status: int, session: str | None) -> None:
        self.log.write(
            {
                "t": time.time(),
                "proxy": self.index,
                "exit_ip": exit_ip,
                "method": req.method,
                "target": req.target,
                "status": status,
                "session": session,
            }
        )

    def _extra(self, exit_ip: str | None, session: str | None) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        if exit_ip is not None:
            out.append((self.config.exit_ip_header, exit_ip))
        if session is not None:
            out.append(("X-Proxy-Session", session))
        return out

    async def _reply(
        self,
        writer: asyncio.StreamWriter,
        req: Request,
        status: int,
        headers: list[tuple[str, str]],
        body: bytes,
        keep: bool,
        exit_ip: str | None,
        session: str | None,
    ) -> None:
        writer.write(build_response(status, headers, body, keep_alive=keep, head_only=req.method == "HEAD"))
        await writer.drain()
        self._write_log(req, exit_ip, status, session)

    async def _preflight(self, req: Request, writer: asyncio.StreamWriter) -> tuple[str, str | None] | None:
        """Auth and proxy-side rate limit; answers and returns ``None`` on refusal."""
        keep = req.keep_alive and req.method != "CONNECT"
        if self.mode == "deny" or not self.check_auth(req):
            challenge = [("Proxy-Authenticate", 'Basic realm="sandbox"')]
            await self._reply(writer, req, 407, challenge, b"Proxy Authentication Required", keep, None, None)
            return None
        if self.mode == "badgateway":  # the proxy's own 502, at once, with no proxy-error header
            await self._reply(writer, req, 502, [], b"<h1>502 Bad Gateway</h1>", keep, None, None)
            return None
        exit_ip, session = self.choose_exit(req)
        if not self._rate_ok(exit_ip) or (self.mode == "connect429" and req.method == "CONNECT"):
            await self._reply(
                writer,
                req,
                429,
                [("X-Proxy-Error", "rate-limited"), ("Retry-After", "1")] + self._extra(exit_ip, session),
                b"proxy rate limit",
                keep,
                exit_ip,
                session,
            )
            return None
        return exit_ip, session

    async def _connect(
        self, req: Request, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        chosen = await self._preflight(req, writer)
        if chosen is None:
            return
        exit_ip, session = chosen
        host, _, port_s = req.target.rpartition(":")
        host = host.strip("[]")
        if not host or not port_s.isdigit():
            await self._reply(writer, req, 400, [], b"bad CONNECT target", False, exit_ip, session)
            return
        try:
            up_r, up_w = await asyncio.wait_for(
                asyncio.open_connection(host, int(port_s), local_addr=(exit_ip, 0)), CONNECT_TIMEOUT
            )
        except (OSError, asyncio.TimeoutError):
            await self._reply(
                writer,
                req,
                502,
                [("X-Proxy-Error", "connect-failed")] + self._extra(exit_ip, session),
                b"upstream connect failed",
                False,
                exit_ip,
                session,
            )
            return
        self._upstream.live.add(up_w)
        head = (
            "HTTP/1.1 200 Connection established\r\n"
            + "".join(f"{k}: {v}\r\n" for k, v in self._extra(exit_ip, session))
            + "\r\n"
        )
        writer.write(head.encode("latin-1"))
        await writer.drain()
        self._write_log(req, exit_ip, 200, session)
        try:
            await self._pipe_both(reader, writer, up_r, up_w)
        finally:
            self._upstream.discard(up_w)

    async def _pipe_both(
        self,
        c_r: asyncio.StreamReader,
        c_w: asyncio.StreamWriter,
        u_r: asyncio.StreamReader,
        u_w: asyncio.StreamWriter,
    ) -> None:
        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while True:
                    data = await src.read(PIPE_CHUNK)
                    if not data:
                        break
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                if dst.can_write_eof() and not dst.is_closing():
                    try:
                        dst.write_eof()
                    except (OSError, RuntimeError):
                        pass

        remaining = max(0.0, self.deadline - time.monotonic())
        tasks = [asyncio.ensure_future(pipe(c_r, u_w)), asyncio.ensure_future(pipe(u_r, c_w))]
        _, pending = await asyncio.wait(tasks, timeout=remaining, return_when=asyncio.ALL_COMPLETED)
        for t in pending:
            t.cancel()

    async def _forward(
        self, req: Request, writer: asyncio.StreamWriter, reader: asyncio.StreamReader | None = None
    ) -> bool:
        keep = req.keep_alive
        chosen = await self._preflight(req, writer)
        if chosen is None:
            return keep
        exit_ip, session = chosen
        extra = self._extra(exit_ip, session)
        split = urlsplit(req.target)
        if split.scheme != "http" or not split.hostname:
            await self._reply(
                writer,
                req,
                400,
                [("X-Proxy-Error", "absolute-http-uri-required")] + extra,
                b"absolute http:// URI required (use CONNECT for https)",
                keep,
                exit_ip,
                session,
            )
            return keep
        host, port = split.hostname, split.port or 80
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
        wire = f"{req.method} {path} HTTP/1.1\r\n".encode("latin-1") + out.encode() + b"\r\n" + req.body

        resp = None
        for attempt in range(2):
            try:
                up_r, up_w, reused = await self._upstream.get(exit_ip, host, port)
            except (OSError, asyncio.TimeoutError):
                await self._reply(
                    writer,
                    req,
                    502,
                    [("X-Proxy-Error", "connect-failed")] + extra,
                    b"upstream connect failed",
                    keep,
                    exit_ip,
                    session,
                )
                return keep
            try:
                up_w.write(wire)
                await up_w.drain()
                resp = await self._read_unless_gone(up_r, req.method, reader)
                if resp is None:
                    # The client left (its own timeout): drop the upstream request too, as real proxies do.
                    self._upstream.discard(up_w)
                    return False
                break
            except (ConnectionError, asyncio.IncompleteReadError) as exc:
                self._upstream.discard(up_w)
                if reused and attempt == 0:
                    continue
                await self._reply(
                    writer,
                    req,
                    502,
                    [("X-Proxy-Error", "upstream-closed")] + extra,
                    str(exc).encode(),
                    keep,
                    exit_ip,
                    session,
                )
                return keep
            except (asyncio.TimeoutError, HttpError, OSError) as exc:
                self._upstream.discard(up_w)
                status = 504 if isinstance(exc, asyncio.TimeoutError) else 502
                await self._reply(
                    writer,
                    req,
                    status,
                    [("X-Proxy-Error", "upstream-error")] + extra,
                    str(exc).encode(),
                    keep,
                    exit_ip,
                    session,
                )
                return keep
        assert resp is not None
        if resp.reusable:
            self._upstream.put(exit_ip, host, port, up_r, up_w)
        else:
            self._upstream.discard(up_w)
        hdrs = Headers()
        rdrop = HOP_BY_HOP | resp.headers.connection_tokens()
        if req.method != "HEAD":
            rdrop = rdrop | {"content-length"}
        for k, v in resp.headers.items:
            if k.lower() not in rdrop:
                hdrs.add(k, v)
        for k, v in extra:
            hdrs.set(k, v)
        writer.write(
            build_response(
                resp.status,
                hdrs,
                resp.body,
                keep_alive=keep,
                head_only=req.method == "HEAD",
                reason=resp.reason or None,
            )
        )
        await writer.drain()
        self._write_log(req, exit_ip, resp.status, session)
        return keep


    async def _read_unless_gone(
        self, up_r: asyncio.StreamReader, method: str, client: asyncio.StreamReader | None
    ) -> Any:
        """The upstream response, or ``None`` once the client has closed its connection."""
        answer = asyncio.ensure_future(read_response(up_r, method, RESPONSE_TIMEOUT))
        while client is not None and not answer.done():
            if peer_gone(client):
                answer.cancel()
                return None
            await asyncio.wait({answer}, timeout=0.05)
        return await answer


class GatewayServer(ProxyServer):
    """Rotating gateway: the Basic-auth username picks a sticky exit IP."""

    kind = "gateway"

    def __init__(self, config: ProxyConfig, log: JsonlLog, deadline: float, rng: random.Random) -> None:
        super().__init__(config, "gateway", config.gateway_first_source, log, deadline)
        self.pool = [nth_address(config.gateway_first_source, i) for i in range(config.gateway_pool)]
        self.sessions: dict[str, str] = {}
        self._usage = {ip: 0 for ip in self.pool}
        self._rng = rng
        self.prefix = config.auth[0] if config.auth else "user"

    @property
    def password(self) -> str:
        """Password used in the template (any value works without auth)."""
        return self.config.auth[1] if self.config.auth else "pass"

    @property
    def url(self) -> str:
        """Gateway URL without a session (a fresh random exit per request)."""
        return f"http://{self.prefix}:{self.password}@{self.host}:{self.port}"

    @property
    def template(self) -> str:
        """Gateway URL with a ``{session}`` placeholder in the username."""
        return f"http://{self.prefix}-session-{{session}}:{self.password}@{self.host}:{self.port}"

    def _session_of(self, req: Request) -> tuple[bool, str | None]:
        cred = _credentials(req)
        auth = self.config.auth
        if cred is None:
            return auth is None, None
        user, password = cred
        if auth is not None and password != auth[1]:
            return False, None
        marker = f"{self.prefix}-session-"
        if user.startswith(marker) and len(user) > len(marker):
            return True, user[len(marker) :]
        if user == self.prefix:
            return True, None
        return auth is None, None

    def check_auth(self, req: Request) -> bool:
        """Valid password and a username of the form ``<prefix>[-session-<id>]``."""
        return self._session_of(req)[0]

    def choose_exit(self, req: Request) -> tuple[str, str | None]:
        """Sticky exit per session id; a random one without a session."""
        _, session = self._session_of(req)
        if session is None:
            return self._rng.choice(self.pool), None
        ip = self.sessions.get(session)
        if ip is None:
            ip = min(self.pool, key=lambda a: self._usage[a])
            self._usage[ip] += 1
            self.sessions[session] = ip
        return ip, session

    def state(self) -> dict[str, Any]:
        """Session map for the control API."""
        return {"sessions": dict(self.sessions), "mode": self.mode}
