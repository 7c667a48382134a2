"""What each path of a sandbox site answers: the catalogue, logins bound to an IP, and test pages.

Decided after the site's limits let a request through (see :mod:`.site`); nothing here
limits or delays.
"""

from __future__ import annotations

import json
import math
import secrets
from http.cookies import CookieError, SimpleCookie
from urllib.parse import parse_qs, urlsplit

from .config import SiteConfig
from .http import Request
from .pages import Reply, rich_asset, rich_page

_NOT_FOUND = b"<h1>Not Found</h1>"


class Router:
    """The pages of one site, and the sessions its logins opened."""

    def __init__(self, config: SiteConfig) -> None:
        self.config = config
        self.name = config.name
        #: Session id -> (user, the IP it logged in from).
        self.sessions: dict[str, tuple[str, str]] = {}
        #: Paths of ``/limited/<n>`` already answered 429 once.
        self._limited_once: set[str] = set()

    def route(self, path: str, ip: str, sid: str | None) -> Reply:
        """The answer to *path* (with its query) asked by *ip* with session cookie *sid*."""
        split = urlsplit(path)
        p, query = split.path, parse_qs(split.query)
        return (
            self._catalogue(p)
            or self._session(p, query, ip, sid)
            or self._rendered(p, ip)
            or self._signals(p, query, ip)
            or Reply(404, _NOT_FOUND)
        )

    def _catalogue(self, p: str) -> Reply | None:
        """robots.txt, the index, list pages and items: what a crawl walks."""
        cfg = self.config
        if p == "/robots.txt":
            return _robots(cfg)
        if p in ("/", "/index.html"):
            n_lists = math.ceil(cfg.pages / cfg.per_list)
            links = "".join(f'<li><a href="/list/{k}">List {k}</a></li>' for k in range(1, n_lists + 1))
            return _page(f"{self.name} catalogue", f"<h1>Catalogue {self.name}</h1><ul>{links}</ul>")
        if p.startswith("/list/"):
            k = path_number(p[6:])
            n_lists = math.ceil(cfg.pages / cfg.per_list)
            if k is None or not 1 <= k <= n_lists:
                return Reply(404, _NOT_FOUND)
            first = (k - 1) * cfg.per_list + 1
            last = min(k * cfg.per_list, cfg.pages)
            items = "".join(
                f'<li><a class="item" href="/item/{n}">Item {n}</a></li>' for n in range(first, last + 1)
            )
            nxt = f'<a class="next" rel="next" href="/list/{k + 1}">next</a>' if k < n_lists else ""
            return _page(f"List {k}", f"<h1>List {k}</h1><ul>{items}</ul>{nxt}")
        if p.startswith("/item/"):
            n = path_number(p[6:])
            if n is None or not 1 <= n <= cfg.pages:
                return Reply(404, _NOT_FOUND)
            a, b = n % cfg.pages + 1, (n * 7) % cfg.pages + 1
            body = (
                f'<h1>Item {n}</h1><span class="id">{n}</span>'
                f'<a class="related" href="/item/{a}">Item {a}</a> '
                f'<a class="related" href="/item/{b}">Item {b}</a>'
            )
            return _page(f"Item {n}", body)
        return None

    def _session(self, p: str, query: dict[str, list[str]], ip: str, sid: str | None) -> Reply | None:
        """Logins (by cookie, or by a page script) and account pages open only from the login's IP."""
        if p == "/login":
            user = (query.get("user") or ["anonymous"])[0]
            new_sid = self._open(user, ip)
            reply = _page("Logged in", f'<h1>Welcome</h1><span class="user">{_esc(user)}</span>')
            reply.extra = [("Set-Cookie", f"sid={new_sid}; Path=/; HttpOnly")]
            reply.user = user
            return reply
        if p in ("/account", "/account/orders"):
            bound = self.sessions.get(sid) if sid else None
            if bound is None:
                return Reply(401, b"<h1>Unauthorized</h1>")
            user, login_ip = bound
            if login_ip != ip:
                return Reply(409, b"<h1>Conflict</h1><p>session bound to another IP</p>", user=user)
            title = "Orders" if p.endswith("orders") else "Account"
            r = _page(title, f'<h1>{title}</h1><span class="user">{_esc(user)}</span>')
            r.user = user
            return r
        if p == "/login/js":
            # The cookie is set by the page's script: only a browser that keeps it has the session.
            user = (query.get("user") or ["anonymous"])[0]
            new_sid = self._open(user, ip)
            reply = _page(
                "Logged in",
                f'<h1>Welcome</h1><span class="user">{_esc(user)}</span>'
                f'<script>document.cookie = "sid={new_sid}; path=/";</script>',
            )
            reply.user = user
            return reply
        return None

    def _open(self, user: str, ip: str) -> str:
        new_sid = secrets.token_hex(8)
        self.sessions[new_sid] = (user, ip)
        return new_sid

    def _rendered(self, p: str, ip: str) -> Reply | None:
        """The rich page, its assets and the API call its script makes (what a renderer fetches)."""
        if p.startswith("/rich/"):
            n = path_number(p[6:])
            if n is None or not 1 <= n <= self.config.pages:
                return Reply(404, _NOT_FOUND)
            return rich_page(n)
        if p.startswith("/asset/rich-"):
            return rich_asset(p[len("/asset/rich-"):])
        if p.startswith("/api/rich/"):
            n = path_number(p[len("/api/rich/"):])
            if n is None:
                return Reply(404, _NOT_FOUND)
            return Reply(200, json.dumps({"n": n, "ip": ip}).encode(), "application/json")
        return None

    def _signals(self, p: str, query: dict[str, list[str]], ip: str) -> Reply | None:
        """Pages that answer what a test asks for: a 429 once, the client's IP, any status."""
        if p.startswith("/limited/"):
            # 429 the first time each page is asked for, then the page: a rate signal on the document.
            if p not in self._limited_once:
                self._limited_once.add(p)
                return Reply(429, b"<h1>Too Many Requests</h1><p>once</p>", extra=[("Retry-After", "1")])
            return _page(f"Limited {p[9:]}", f'<h1>Limited {_esc(p[9:])}</h1>')
        if p == "/ip":
            return Reply(200, json.dumps({"ip": ip}).encode(), "application/json")
        if p.startswith("/status/"):
            code = path_number(p[8:])
            if code is None or not 200 <= code <= 599:
                return Reply(400, b"<h1>Bad status</h1>")
            to = query.get("to")  # /status/302?to=URL: a redirect
            return Reply(code, f"<h1>Status {code}</h1>".encode(), extra=[("Location", to[0])] if to else None)
        return None


def _robots(cfg: SiteConfig) -> Reply:
    if cfg.robots_crawl_delay is not None:
        body = f"User-agent: *\nCrawl-delay: {cfg.robots_crawl_delay:g}\n"
    else:
        body = "User-agent: *\nAllow: /\n"
    body += "".join(
        f"\nUser-agent: {agent}\nCrawl-delay: {delay:g}\n" for agent, delay in cfg.robots_agent_delays.items()
    )
    return Reply(200, body.encode(), "text/plain; charset=utf-8")


def _page(title: str, body: str) -> Reply:
    html = f"<!DOCTYPE html><html><head><title>{title}</title></head><body>{body}</body></html>"
    return Reply(200, html.encode())


def _esc(s: str) -> str:
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def path_number(s: str) -> int | None:
    """The number a path segment names (``/item/<n>``), ``None`` if it is not one."""
    return int(s) if s.isdigit() else None


def cookie_sid(req: Request) -> str | None:
    """The ``sid`` cookie the request carries, if any."""
    for raw in req.headers.get_all("cookie"):
        try:
            jar = SimpleCookie(raw)
        except CookieError:
            continue
        if "sid" in jar:
            return jar["sid"].value
    return None
