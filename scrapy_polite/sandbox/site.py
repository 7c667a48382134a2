"""The defended target site: a catalogue behind per-IP and host-wide limits.

Clients are told apart by TCP peer address only (the proxy's exit IP), as
a real site behind no CDN would. Every limit decision is made when the
request arrives, before the simulated latency, so the access log's
``inflight_*`` fields describe exactly what the site judged.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import secrets
import ssl
import time
from dataclasses import dataclass
from http.cookies import CookieError, SimpleCookie
from typing import Any
from urllib.parse import parse_qs, urlsplit

from .common import JsonlLog, TokenBucket, peer_gone
from .config import LITERAL_RETRY_AFTER, SiteConfig
from .http import Headers, Request, build_response, http_date, serve_requests
from .limited import SiteLimiter
from .pages import Reply as _Reply
from .pages import rich_asset, rich_page

_UNSET: Any = object()


@dataclass
class _IpState:
    bucket: TokenBucket | None
    inflight: int = 0
    penalty_until: float = 0.0
    strikes: int = 0
    blocked: bool = False
    flagged_until: float = 0.0


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
        self.ips: dict[str, _IpState] = {}
        self.sessions: dict[str, tuple[str, str]] = {}
        #: Paths of ``/limited/<n>`` already answered 429 once.
        self._limited_once: set[str] = set()
        self._challenges = 0
        self._host_override: Any = _UNSET
        self._host_bucket = TokenBucket(None, config.host_burst, rate_fn=self.current_host_rate)
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
        if self._host_override is not _UNSET:
            return self._host_override
        schedule = self.config.host_rate_schedule
        if schedule:
            elapsed = time.monotonic() - self.started
            rate = self.config.host_rate
            for t, r in schedule:
                if elapsed >= t:
                    rate = r
            return rate
        return self.config.host_rate

    def set_host_rate(self, rate: float | None) -> None:
        """Override the host-wide cap (``None`` = unlimited) for the rest of the run."""
        self._host_bucket.available()
        self._host_override = rate

    def state(self) -> dict[str, Any]:
        """Snapshot for the control API."""
        return {
            "name": self.name,
            "url": self.url,
            "host_rate": self.current_host_rate(),
            "inflight": self.inflight,
            "blocked": sorted(ip for ip, s in self.ips.items() if s.blocked),
            "strikes": {ip: s.strikes for ip, s in self.ips.items() if s.strikes},
            "flagged": sorted(ip for ip, s in self.ips.items() if s.flagged_until > time.monotonic()),
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

    def _ip(self, ip: str) -> _IpState:
        st = self.ips.get(ip)
        if st is None:
            cfg = self.config
            bucket = TokenBucket(cfg.per_ip_rate, cfg.per_ip_burst) if cfg.per_ip_rate is not None else None
            st = self.ips[ip] = _IpState(bucket)
            if ip in cfg.flagged_ips:
                st.flagged_until = self.started + cfg.flag_time
        return st

    async def _handle_conn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        ip = peer[0] if peer else "?"
        self._conns.add(writer)
        try:
            await serve_requests(reader, writer, lambda req: self._serve(req, ip, writer, reader))
        finally:
            self._conns.discard(writer)

    def _retry_after(self, st: _IpState, now: float) -> list[tuple[str, str]]:
        cfg = self.config
        ra = float(cfg.retry_after)
        form = cfg.retry_after_form
        if form == "date":
            wall_deadline = math.ceil(time.time() + ra)
            st.penalty_until = now + (wall_deadline - time.time())
            return [("Retry-After", http_date(wall_deadline))]
        st.penalty_until = now + ra
        if form == "seconds":
            return [("Retry-After", str(int(ra)) if ra.is_integer() else f"{ra:g}")]
        return _literal_retry_after(form)

    def _limit(self, req: Request, st: _IpState, now: float) -> _Reply | None:
        """The limit verdict for an arriving request, or ``None`` to serve it."""
        cfg = self.config
        limited = cfg.rate_limited_status
        if st.blocked:
            return _Reply(403, b"<h1>Forbidden</h1><p>blocked</p>")
        flagged = now < st.flagged_until
        if st.flagged_until and not flagged:
            st.flagged_until, st.strikes = 0.0, 0  # the flag expired: the IP starts clean
        if now < st.penalty_until or flagged:
            st.strikes += 1
            if cfg.strikes_to_block is not None and st.strikes >= cfg.strikes_to_block:
                st.blocked = True
                return _Reply(403, b"<h1>Forbidden</h1><p>blocked</p>")
            if cfg.challenge_after is not None and st.strikes >= cfg.challenge_after and not flagged:
                st.flagged_until, flagged = now + cfg.flag_time, True
            if flagged:
                return self._challenge()
            remaining = max(0.0, st.penalty_until - now)
            hdrs = self._retry_after_remaining(remaining)
            return _Reply(limited, b"<h1>Too Many Requests</h1><p>strike</p>", extra=hdrs)
        if cfg.per_ip_max_inflight is not None and st.inflight > cfg.per_ip_max_inflight:
            return _Reply(
                limited, b"<h1>Too Many Requests</h1><p>in flight</p>", extra=self._retry_after(st, now)
            )
        if st.bucket is not None and not st.bucket.available():
            return _Reply(limited, b"<h1>Too Many Requests</h1><p>rate</p>", extra=self._retry_after(st, now))
        if not self._host_bucket.available():
            return _Reply(limited, b"<h1>Too Many Requests</h1><p>host</p>", extra=self._host_retry_after())
        if st.bucket is not None:
            st.bucket.take()
        self._host_bucket.take()
        return None

    def _challenge(self) -> _Reply:
        """A challenge page, by turns a 200 with a "verify you are human" body and a marked 403."""
        self._challenges += 1
        if self._challenges % 2:
            return _Reply(200, _CHALLENGE_BODY, challenge=True)
        return _Reply(403, _CHALLENGE_BODY, extra=[("cf-mitigated", "challenge")], challenge=True)

    def _retry_after_remaining(self, remaining: float) -> list[tuple[str, str]]:
        """Retry-After for a strike: the rest of the current window."""
        form = self.config.retry_after_form
        if form == "date":
            return [("Retry-After", http_date(math.ceil(time.time() + remaining)))]
        if form == "seconds":
            return [("Retry-After", str(max(1, math.ceil(remaining))))]
        return _literal_retry_after(form)

    def _host_retry_after(self) -> list[tuple[str, str]]:
        """Host-cap answers advertise the configured wait but open no per-IP window."""
        cfg = self.config
        ra = float(cfg.retry_after)
        if cfg.retry_after_form == "date":
            return [("Retry-After", http_date(math.ceil(time.time() + ra)))]
        if cfg.retry_after_form == "seconds":
            return [("Retry-After", str(int(ra)) if ra.is_integer() else f"{ra:g}")]
        return _literal_retry_after(cfg.retry_after_form)

    async def _serve(
        self, req: Request, ip: str, writer: asyncio.StreamWriter, reader: asyncio.StreamReader | None = None
    ) -> bool:
        t_start = time.time()
        now = time.monotonic()
        st = self._ip(ip)
        st.inflight += 1
        self.inflight += 1
        inflight_ip, inflight_host = st.inflight, self.inflight
        sid = _cookie_sid(req)
        keep = req.keep_alive
        reply: _Reply | None = None
        path = req.target
        if path.startswith(("http://", "https://")):
            split = urlsplit(path)
            path = split.path + (f"?{split.query}" if split.query else "")
        judged = self.zoo.arrive(ip, path, now)
        try:
            if urlsplit(path).path != "/robots.txt":
                reply = self._limit(req, st, now) if judged.status == 200 else _Reply(
                    judged.status, judged.body, extra=judged.extra)
            if reply is None and self._hangs(path):
                await self._hang(reader, writer)
                return False
            refused = reply is not None and self.config.refuse_at_once
            if reply is None:
                reply = self._route(req, path, ip, sid)
            lo, hi = self.config.latency
            if (hi > 0 and not refused) or judged.delay:
                await asyncio.sleep((self.rng.uniform(lo, hi) if not refused else 0.0) + judged.delay)
            headers = Headers(
                [
                    ("Date", http_date()),
                    ("Server", "scrapy-polite-sandbox"),
                    ("Content-Type", reply.content_type),
                    ("X-Sandbox-Peer-IP", ip),
                    ("X-Sandbox-Site", self.name),
                ]
                + [(name, _wire(value)) for name, value in self.config.extra_headers]
                + (reply.extra or []) + (judged.extra if judged.status == 200 else [])
            )
            writer.write(
                build_response(
                    reply.status, headers, reply.body, keep_alive=keep, head_only=req.method == "HEAD"
                )
            )
            await writer.drain()
        finally:
            st.inflight -= 1
            self.inflight -= 1
            self.log.write(
                {
                    "t_start": t_start,
                    "t_end": time.time(),
                    "site": self.name,
                    "ip": ip,
                    "method": req.method,
                    "path": path,
                    "status": reply.status if reply is not None else 0,
                    "inflight_ip": inflight_ip,
                    "inflight_host": inflight_host,
                    "sid": sid,
                    "user": reply.user if reply is not None else None,
                    "challenge": reply.challenge if reply is not None else False,
                    "blocked": st.blocked,
                    **self.zoo.leave(ip, judged, reply.status if reply is not None else 0,
                                     (reply.extra or []) if reply is not None else [], time.monotonic()),
                }
            )
        return keep

    def _hangs(self, path: str) -> bool:
        p = urlsplit(path).path
        return p.startswith("/item/") and _int(p[6:]) in self.config.hang_items

    async def _hang(self, reader: asyncio.StreamReader | None, writer: asyncio.StreamWriter) -> None:
        """Never answer: hold the connection until the client drops it or the sandbox stops.

        The access log gets the request with status 0 when it ends.
        """
        while time.monotonic() < self.deadline and not writer.is_closing():
            if reader is not None and peer_gone(reader):
                break
            await asyncio.sleep(0.05)

    def _route(self, req: Request, path: str, ip: str, sid: str | None) -> _Reply:
        split = urlsplit(path)
        p = split.path
        cfg = self.config
        if p == "/robots.txt":
            if cfg.robots_crawl_delay is not None:
                body = f"User-agent: *\nCrawl-delay: {cfg.robots_crawl_delay:g}\n"
            else:
                body = "User-agent: *\nAllow: /\n"
            body += "".join(
                f"\nUser-agent: {agent}\nCrawl-delay: {delay:g}\n" for agent, delay in cfg.robots_agent_delays.items()
            )
            return _Reply(200, body.encode(), "text/plain; charset=utf-8")
        if p in ("/", "/index.html"):
            n_lists = math.ceil(cfg.pages / cfg.per_list)
            links = "".join(f'<li><a href="/list/{k}">List {k}</a></li>' for k in range(1, n_lists + 1))
            return _page(f"{self.name} catalogue", f"<h1>Catalogue {self.name}</h1><ul>{links}</ul>")
        if p.startswith("/list/"):
            k = _int(p[6:])
            n_lists = math.ceil(cfg.pages / cfg.per_list)
            if k is None or not 1 <= k <= n_lists:
                return _Reply(404, b"<h1>Not Found</h1>")
            first = (k - 1) * cfg.per_list + 1
            last = min(k * cfg.per_list, cfg.pages)
            items = "".join(
                f'<li><a class="item" href="/item/{n}">Item {n}</a></li>' for n in range(first, last + 1)
            )
            nxt = f'<a class="next" rel="next" href="/list/{k + 1}">next</a>' if k < n_lists else ""
            return _page(f"List {k}", f"<h1>List {k}</h1><ul>{items}</ul>{nxt}")
        if p.startswith("/item/"):
            n = _int(p[6:])
            if n is None or not 1 <= n <= cfg.pages:
                return _Reply(404, b"<h1>Not Found</h1>")
            a, b = n % cfg.pages + 1, (n * 7) % cfg.pages + 1
            body = (
                f'<h1>Item {n}</h1><span class="id">{n}</span>'
                f'<a class="related" href="/item/{a}">Item {a}</a> '
                f'<a class="related" href="/item/{b}">Item {b}</a>'
            )
            return _page(f"Item {n}", body)
        if p == "/login":
            user = (parse_qs(split.query).get("user") or ["anonymous"])[0]
            new_sid = secrets.token_hex(8)
            self.sessions[new_sid] = (user, ip)
            reply = _page("Logged in", f'<h1>Welcome</h1><span class="user">{_esc(user)}</span>')
            reply.extra = [("Set-Cookie", f"sid={new_sid}; Path=/; HttpOnly")]
            reply.user = user
            return reply
        if p in ("/account", "/account/orders"):
            bound = self.sessions.get(sid) if sid else None
            if bound is None:
                return _Reply(401, b"<h1>Unauthorized</h1>")
            user, login_ip = bound
            if login_ip != ip:
                return _Reply(409, b"<h1>Conflict</h1><p>session bound to another IP</p>", user=user)
            title = "Orders" if p.endswith("orders") else "Account"
            r = _page(title, f'<h1>{title}</h1><span class="user">{_esc(user)}</span>')
            r.user = user
            return r
        if p == "/login/js":
            # The cookie is set by the page's script: only a browser that keeps it has the session.
            user = (parse_qs(split.query).get("user") or ["anonymous"])[0]
            new_sid = secrets.token_hex(8)
            self.sessions[new_sid] = (user, ip)
            reply = _page(
                "Logged in",
                f'<h1>Welcome</h1><span class="user">{_esc(user)}</span>'
                f'<script>document.cookie = "sid={new_sid}; path=/";</script>',
            )
            reply.user = user
            return reply
        if p.startswith("/rich/"):
            n = _int(p[6:])
            if n is None or not 1 <= n <= cfg.pages:
                return _Reply(404, b"<h1>Not Found</h1>")
            return rich_page(n)
        if p.startswith("/asset/rich-"):
            return rich_asset(p[len("/asset/rich-"):])
        if p.startswith("/api/rich/"):
            n = _int(p[len("/api/rich/"):])
            if n is None:
                return _Reply(404, b"<h1>Not Found</h1>")
            return _Reply(200, json.dumps({"n": n, "ip": ip}).encode(), "application/json")
        if p.startswith("/limited/"):
            # 429 the first time each page is asked for, then the page: a rate signal on the document.
            if p not in self._limited_once:
                self._limited_once.add(p)
                return _Reply(429, b"<h1>Too Many Requests</h1><p>once</p>", extra=[("Retry-After", "1")])
            return _page(f"Limited {p[9:]}", f'<h1>Limited {_esc(p[9:])}</h1>')
        if p == "/ip":
            return _Reply(200, json.dumps({"ip": ip}).encode(), "application/json")
        if p.startswith("/status/"):
            code = _int(p[8:])
            if code is None or not 200 <= code <= 599:
                return _Reply(400, b"<h1>Bad status</h1>")
            to = parse_qs(split.query).get("to")  # /status/302?to=URL: a redirect
            return _Reply(code, f"<h1>Status {code}</h1>".encode(), extra=[("Location", to[0])] if to else None)
        return _Reply(404, b"<h1>Not Found</h1>")


_CHALLENGE_BODY = (
    b"<!DOCTYPE html><html><head><title>Just a moment...</title></head><body>"
    b"<h1>Checking your browser</h1><p>Please verify you are human to continue.</p></body></html>"
)


def _literal_retry_after(form: str) -> list[tuple[str, str]]:
    """The header of a form sent as is (garbage, hostile values); none for ``"none"``."""
    if form in LITERAL_RETRY_AFTER:
        return [("Retry-After", _wire(LITERAL_RETRY_AFTER[form]))]
    return []


def _wire(value: str) -> str:
    """*value* as its UTF-8 bytes, in the latin-1 text that header lines are encoded from."""
    return value.encode("utf-8").decode("latin-1")


def _page(title: str, body: str) -> _Reply:
    html = f"<!DOCTYPE html><html><head><title>{title}</title></head><body>{body}</body></html>"
    return _Reply(200, html.encode())


def _esc(s: str) -> str:
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _int(s: str) -> int | None:
    return int(s) if s.isdigit() else None


def _cookie_sid(req: Request) -> str | None:
    for raw in req.headers.get_all("cookie"):
        try:
            jar = SimpleCookie(raw)
        except CookieError:
            continue
        if "sid" in jar:
            return jar["sid"].value
    return None


def make_self_signed(address: str) -> tuple[bytes, bytes]:
    """PEM cert and key for *address* (IP SAN), for TLS sites reached via CONNECT."""
    import datetime
    import ipaddress

    try:
        import cryptography  # noqa: F401
    except ImportError:
        raise RuntimeError(
            "the sandbox's HTTPS sites need the cryptography package: pip install 'scrapy-polite[sandbox]'"
        ) from None
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, address)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(address))]), critical=False
        )
        .sign(key, hashes.SHA256())
    )
    cert_pem = cert.public_bytes(serialization.Encoding.PEM)
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return cert_pem, key_pem
