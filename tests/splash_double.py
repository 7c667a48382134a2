"""A local stand-in for Splash's HTTP API that really fetches through the proxy it is given.

scrapy-splash talks to Splash with JSON POSTs to ``render.html``,
``render.json`` and ``execute``. This double serves those endpoints on
127.0.0.1, in a child process as Splash is a service of its own
(:class:`SplashDouble` starts and stops it; ``python splash_double.py
--port N`` runs it by hand). It fetches the target page itself, through
the ``proxy`` argument exactly as Splash does (absolute-URI HTTP proxying, ``Basic``
``Proxy-Authorization`` from the proxy URL's credentials), so the sandbox
sees the proxies' real exit IPs and answers with its real 429s. Nothing is
rendered: the page is returned as fetched.

Answers are shaped like Splash's:

* errors are ``{"error": <code>, "type", "description", "info"}`` JSON;
* a 4xx/5xx of the target page is a 502 ``RenderError`` whose ``info`` is
  ``{"type": "HTTP", "code": <status>, "text", "url"}``; with the argument
  ``http_status_from_error_code=1`` render.html and render.json answer with
  the target's status instead (render.html: the page as HTML; render.json:
  its JSON with ``http_status``);
* a failure to talk to the proxy is a 502 ``RenderError`` with
  ``info.type == "Network"`` and a QNetworkReply code (101 proxy connection
  refused, 102 proxy connection closed, 105 proxy authentication required,
  5 operation cancelled when ``resource_timeout`` expires);
* the whole render exceeding ``timeout`` is a 504 ``GlobalTimeoutError``;
* :meth:`SplashDouble.overload` makes the next N requests a 503 (Splash is
  overloaded), optionally with ``Retry-After``, without fetching anything
  (``POST /_double/overload``; ``GET /_double/log`` is the request log).

Every answer to a request with a ``proxy`` carries ``X-Splash-Double-Proxy``
(the proxy's ``scheme://host:port``), so a test can tell which proxy an
attempt really went through; real Splash sends no such header.

render.json returns ``{"url", "requestedUrl", "http_status", "title"}``
plus ``"html"`` when ``html=1``.

Lua convention (``execute``): Lua is not interpreted; the script is read
for these patterns, which cover scrapy-splash's documented session script:

* ``splash:init_cookies(...)``: send the ``cookies`` argument (HAR
  cookies, as SplashCookiesMiddleware passes them) to the target;
* ``headers = splash.args.headers`` (or ``args.headers``) in the
  ``splash:go`` call: send the ``headers`` argument;
* ``assert(splash:go(...))``: a 4xx/5xx of the page is a 400
  ``ScriptError`` whose ``info.error`` is ``"http<status>"``;
* ``return splash:html()``: answer the page as text/html;
* ``return { key = ..., ... }``: answer JSON with those keys, each taken
  from the fetch whatever the expression: ``html``, ``url``,
  ``http_status``, ``headers`` (the target's response headers as an
  object, with the proxy's ``X-Proxy-Exit-IP``), ``cookies`` (the HAR
  cookie jar after the response); other keys are ``null``.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import queue
import re
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from http.cookies import CookieError, SimpleCookie
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from scrapy_polite.sandbox.http import (
    HOP_BY_HOP,
    Headers,
    HttpError,
    Request,
    read_response,
    reason_phrase,
    serve_requests,
)
from scrapy_polite.sandbox.http import build_response as _build_response

_PACKAGE_ROOT = str(Path(__file__).resolve().parents[1])
DEFAULT_TIMEOUT = 30.0
MAX_WAIT = 2.0
#: Headers never forwarded from the ``headers`` argument to the target.
_NOT_FORWARDED = HOP_BY_HOP | {"host", "content-length", "accept-encoding"}


#: Leaves ``info`` out of an error: scrapy-splash 0.11 raises TypeError on a null ``info``
#: when ``http_status_from_error_code`` is on (SplashRequest's default).
_NO_INFO: Any = object()


@dataclass
class _Fetched:
    status: int
    headers: Headers
    body: bytes


class _SplashError(Exception):
    """An answer in Splash's error format."""

    def __init__(self, code: int, type_: str, description: str, info: Any = None,
                 extra_headers: list[tuple[str, str]] | None = None) -> None:
        super().__init__(description)
        self.code = code
        self.payload = {"error": code, "type": type_, "description": description}
        if info is not _NO_INFO:
            self.payload["info"] = info
        self.extra_headers = extra_headers or []


@dataclass
class _LuaPlan:
    init_cookies: bool
    send_headers: bool
    assert_go: bool
    html_only: bool
    keys: list[str] = field(default_factory=list)


def parse_lua(source: str) -> _LuaPlan:
    """What the script asks for, by the module's Lua convention."""
    ret = re.search(r"return\s*\{(.*)\}", source, re.S)
    html_only = ret is None and re.search(r"return\s+splash:html\(\)", source) is not None
    if ret is None and not html_only:
        raise _SplashError(400, "BadOption", "splash double: lua_source outside the supported convention",
                           {"argument": "lua_source"})
    return _LuaPlan(
        init_cookies="init_cookies" in source,
        send_headers=re.search(r"headers\s*=\s*(splash\.)?args\.headers", source) is not None,
        assert_go=re.search(r"assert\s*\(\s*splash:go", source) is not None,
        html_only=html_only,
        keys=re.findall(r"(\w+)\s*=", ret.group(1)) if ret else [],
    )


class SplashServer:
    """The double's HTTP server; runs in the child process (see :func:`main`)."""

    def __init__(self) -> None:
        #: One record per API request: endpoint, url, proxy, status, target_status, times.
        self.log: list[dict[str, Any]] = []
        self._overloaded = 0
        self._overload_retry_after: float | None = None
        self._conns: set[asyncio.StreamWriter] = set()

    async def listen(self, host: str, port: int) -> asyncio.Server:
        return await asyncio.start_server(self._handle_conn, host, port)

    def close_connections(self) -> None:
        for w in list(self._conns):
            w.transport.abort()

    def _take_overload(self) -> float | None | bool:
        if self._overloaded <= 0:
            return False
        self._overloaded -= 1
        return self._overload_retry_after

    def _control(self, endpoint: str, args: dict[str, Any]) -> tuple[int, list, bytes] | None:
        """The test's side door: ``_double/overload`` and ``_double/log`` (not logged)."""
        if endpoint == "_double/overload":
            self._overloaded = int(args.get("count", 0))
            retry_after = args.get("retry_after")
            self._overload_retry_after = float(retry_after) if retry_after is not None else None
            return 200, [("Content-Type", "application/json")], b'{"status": "ok"}'
        if endpoint == "_double/log":
            return 200, [("Content-Type", "application/json")], json.dumps(self.log).encode()
        return None

    # -- HTTP --------------------------------------------------------------
    async def _handle_conn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._conns.add(writer)

        async def handle(req: Request) -> bool:
            status, headers, body = await self._serve(req.method, req.target, req.headers, req.body)
            writer.write(_build_response(status, headers, body, keep_alive=req.keep_alive))
            await writer.drain()
            return req.keep_alive

        try:
            await serve_requests(reader, writer, handle)
        finally:
            self._conns.discard(writer)

    async def _serve(self, method: str, target: str, headers: Headers, body: bytes) -> tuple[int, list, bytes]:
        split = urlsplit(target)
        endpoint = split.path.strip("/")
        record: dict[str, Any] = {"t_start": time.time(), "endpoint": endpoint, "url": None, "proxy": None,
                                  "status": None, "target_status": None, "exit_ip": None, "overloaded": False}
        try:
            args: dict[str, Any] = dict(parse_qsl(split.query))
            if method == "POST" and "json" in (headers.get("content-type") or ""):
                try:
                    args.update(json.loads(body.decode("utf-8") or "{}"))
                except ValueError as exc:
                    raise _SplashError(400, "BadOption", "Can't decode JSON", {"type": "invalid_json",
                                                                               "message": str(exc)}) from exc
            control = self._control(endpoint, args)
            if control is not None:
                return control
            record["url"], record["proxy"] = args.get("url"), args.get("proxy")
            if endpoint == "_ping":
                return self._done(record, 200, "application/json", json.dumps({"status": "ok"}).encode())
            retry_after = self._take_overload()
            if retry_after is not False:
                record["overloaded"] = True
                extra = [("Retry-After", f"{retry_after:g}")] if retry_after is not None else []
                raise _SplashError(503, "ServerOverloaded", "Splash is overloaded: too many requests in queue",
                                   _NO_INFO, extra)
            if endpoint not in ("render.html", "render.json", "execute"):
                raise _SplashError(404, "NotFound", f"no such endpoint: {endpoint}")
            status, ctype, out = await self._endpoint(endpoint, args, record)
            return self._done(record, status, ctype, out)
        except _SplashError as exc:
            return self._done(record, exc.code, "application/json", json.dumps(exc.payload).encode(),
                              exc.extra_headers)

    def _done(self, record: dict[str, Any], status: int, ctype: str, body: bytes,
              extra: list[tuple[str, str]] | None = None) -> tuple[int, list, bytes]:
        record["status"] = status
        record["t_end"] = time.time()
        self.log.append(record)
        headers = [("Content-Type", ctype), ("Server", "splash-double")]
        if record["proxy"]:
            headers.append(("X-Splash-Double-Proxy", _masked(str(record["proxy"]))))
        return status, headers + (extra or []), body

    async def _endpoint(self, endpoint: str, args: dict[str, Any], record: dict[str, Any]) -> tuple[int, str, bytes]:
        url = args.get("url")
        plan = parse_lua(str(args.get("lua_source") or "")) if endpoint == "execute" else None
        if not url:
            raise _SplashError(400, "BadOption", "Required argument is missing: url",
                               {"type": "argument_required", "argument": "url"})
        timeout = float(args.get("timeout") or DEFAULT_TIMEOUT)
        wait = min(float(args.get("wait") or 0.0), MAX_WAIT)
        send_headers = plan is None or plan.send_headers
        jar = list(args.get("cookies") or []) if plan is not None and plan.init_cookies else []
        try:
            fetched = await asyncio.wait_for(
                self._fetch(url, args.get("proxy"), args.get("http_method") or "GET",
                            args.get("headers") if send_headers else None, args.get("body"), jar,
                            args.get("resource_timeout")),
                timeout,
            )
        except asyncio.TimeoutError:
            raise _SplashError(504, "GlobalTimeoutError", "Timeout exceeded rendering page",
                               {"timeout": timeout}) from None
        if wait:
            await asyncio.sleep(wait)
        record["target_status"] = fetched.status
        record["exit_ip"] = fetched.headers.get("x-proxy-exit-ip")
        jar = _merge_cookies(jar, fetched.headers, urlsplit(url).hostname or "")
        html = fetched.body.decode("utf-8", errors="replace")
        failed = fetched.status >= 400
        from_error_code = str(args.get("http_status_from_error_code", "0")).lower() in ("1", "true")
        http_error = {"type": "HTTP", "code": fetched.status, "text": reason_phrase(fetched.status), "url": url}

        if plan is not None:
            if failed and plan.assert_go:
                raise _SplashError(400, "ScriptError", "Error happened while executing Lua script", {
                    "type": "LUA_ERROR", "error": f"http{fetched.status}", "line_number": 1,
                    "source": '[string "function main(splash, args)..."]',
                    "message": f'[string "function main(splash, args)..."]:1: http{fetched.status}',
                })
            if plan.html_only:
                return 200, "text/html; charset=utf-8", html.encode("utf-8")
            values = {"html": html, "url": url, "http_status": fetched.status,
                      "headers": {k: v for k, v in fetched.headers.items if k.lower() not in HOP_BY_HOP},
                      "cookies": jar}
            out = {k: values.get(k) for k in plan.keys}
            return 200, "application/json", json.dumps(out).encode()

        if failed and not from_error_code:
            raise _SplashError(502, "RenderError", "Error rendering page", http_error)
        status = fetched.status if failed else 200
        if endpoint == "render.html":
            return status, "text/html; charset=utf-8", html.encode("utf-8")
        title = re.search(r"<title>(.*?)</title>", html, re.S | re.I)
        out = {"url": url, "requestedUrl": url, "http_status": fetched.status,
               "title": title.group(1) if title else ""}
        if str(args.get("html", "0")) in ("1", "true", "True"):
            out["html"] = html
        return status, "application/json", json.dumps(out).encode()

    async def _fetch(self, url: str, proxy: str | None, method: str, headers: Any, body: Any,
                     cookies: list[dict[str, Any]], resource_timeout: Any) -> _Fetched:
        """Fetch *url* (through *proxy*, like Splash's network manager does)."""
        target = urlsplit(url)
        if target.scheme != "http":
            raise _SplashError(400, "BadOption", f"splash double fetches http:// only, got {url!r}")
        lines = []
        if proxy:
            p = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
            conn_host, conn_port, request_target = p.hostname, p.port or 1080, url
            if p.username is not None:
                token = base64.b64encode(f"{unquote(p.username)}:{unquote(p.password or '')}".encode()).decode()
                lines.append(("Proxy-Authorization", f"Basic {token}"))
        else:
            conn_host, conn_port = target.hostname, target.port or 80
            request_target = (target.path or "/") + (f"?{target.query}" if target.query else "")
        out = Headers([("Host", target.netloc)])
        for name, value in _header_pairs(headers):
            if name.lower() not in _NOT_FORWARDED:
                out.add(name, value)
        cookie = "; ".join(f"{c['name']}={c['value']}" for c in cookies
                           if _cookie_matches(c, target.hostname or "", target.path or "/"))
        if cookie:
            out.add("Cookie", cookie)
        for name, value in lines:
            out.add(name, value)
        payload = body.encode("utf-8") if isinstance(body, str) else (body or b"")
        if payload:
            out.add("Content-Length", str(len(payload)))
        out.add("Connection", "close")
        per_resource = float(resource_timeout) if resource_timeout else None

        def network_error(code: int, text: str) -> _SplashError:
            return _SplashError(502, "RenderError", "Error rendering page",
                                {"type": "Network", "code": code, "text": text, "url": url})

        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(conn_host, conn_port), per_resource)
        except asyncio.TimeoutError:
            raise network_error(5, "Operation canceled") from None
        except OSError as exc:
            raise (network_error(101, f"Proxy connection refused: {exc}") if proxy
                   else network_error(1, f"Connection refused: {exc}")) from None
        try:
            writer.write(f"{method.upper()} {request_target} HTTP/1.1\r\n".encode("latin-1") + out.encode()
                         + b"\r\n" + payload)
            await writer.drain()
            try:
                resp = await read_response(reader, method.upper(), per_resource or DEFAULT_TIMEOUT * 10)
            except asyncio.TimeoutError:
                raise network_error(5, "Operation canceled") from None
            except (ConnectionError, asyncio.IncompleteReadError, HttpError) as exc:
                raise (network_error(102, f"Proxy connection closed: {exc}") if proxy
                       else network_error(2, f"Remote host closed: {exc}")) from None
        finally:
            writer.close()
        if proxy and resp.status == 407:
            raise network_error(105, "Proxy requires authentication")
        return _Fetched(resp.status, resp.headers, resp.body)


def _masked(proxy: str) -> str:
    """``scheme://host:port`` of a proxy URL, as scrapy-polite labels endpoints."""
    p = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
    return f"{p.scheme}://{p.hostname}:{p.port or 1080}"


def _header_pairs(headers: Any) -> list[tuple[str, str]]:
    if not headers:
        return []
    items = headers.items() if isinstance(headers, dict) else headers
    pairs = []
    for name, value in items:
        for v in value if isinstance(value, list) else [value]:
            pairs.append((str(name), str(v)))
    return pairs


def _cookie_matches(cookie: dict[str, Any], host: str, path: str) -> bool:
    domain = (cookie.get("domain") or "").lstrip(".")
    if domain and domain != host and not host.endswith("." + domain):
        return False
    return path.startswith(cookie.get("path") or "/")


def _merge_cookies(jar: list[dict[str, Any]], headers: Headers, host: str) -> list[dict[str, Any]]:
    """The HAR cookie jar after the response's ``Set-Cookie`` lines."""
    merged = {(c.get("name"), (c.get("domain") or "").lstrip("."), c.get("path") or "/"): dict(c) for c in jar}
    for raw in headers.get_all("set-cookie"):
        try:
            parsed = SimpleCookie(raw)
        except CookieError:
            continue
        for name, morsel in parsed.items():
            domain = (morsel["domain"] or host).lstrip(".")
            path = morsel["path"] or "/"
            merged[(name, domain, path)] = {"name": name, "value": morsel.value, "domain": domain, "path": path,
                                            "httpOnly": bool(morsel["httponly"]), "secure": bool(morsel["secure"])}
    return list(merged.values())


class SplashDouble:
    """Parent-side handle: the double in a child process for the lifetime of this object.

    A separate process, as Splash is: the crawl's reactor and the double's
    event loop do not share one interpreter's time.
    """

    def __init__(self, host: str = "127.0.0.1", startup_timeout: float = 10.0) -> None:
        self.host = host
        self.startup_timeout = startup_timeout
        self.url = ""
        self.proc: subprocess.Popen[bytes] | None = None
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def start(self) -> SplashDouble:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
        self.proc = subprocess.Popen([sys.executable, __file__, "--host", self.host, "--port", "0"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
        lines: queue.Queue[bytes | None] = queue.Queue()

        def drain() -> None:
            assert self.proc is not None and self.proc.stdout is not None
            for line in self.proc.stdout:
                lines.put(line)
            lines.put(None)

        threading.Thread(target=drain, daemon=True).start()
        try:
            line = lines.get(timeout=self.startup_timeout)
        except queue.Empty:
            line = None
        if not line:
            self.stop()
            raise RuntimeError("splash double did not start")
        self.url = json.loads(line)["url"]
        return self

    def stop(self, timeout: float = 5.0) -> None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout)

    def __enter__(self) -> SplashDouble:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _call(self, path: str, payload: dict[str, Any] | None = None) -> Any:
        data = json.dumps(payload).encode() if payload is not None else None
        req = urllib.request.Request(f"{self.url}/{path}", data=data, headers={"Content-Type": "application/json"})
        with self._opener.open(req, timeout=10) as resp:
            return json.loads(resp.read())

    def overload(self, count: int, retry_after: float | None = None) -> None:
        """Answer the next *count* requests 503 (overloaded) without fetching."""
        self._call("_double/overload", {"count": count, "retry_after": retry_after})

    def records(self) -> list[dict[str, Any]]:
        """The double's request log so far."""
        return self._call("_double/log")


async def _serve_until_stdin_closes(host: str, port: int) -> None:
    server = SplashServer()
    listener = await server.listen(host, port)
    bound = listener.sockets[0].getsockname()[1]
    sys.stdout.write(json.dumps({"event": "ready", "url": f"http://{host}:{bound}"}) + "\n")
    sys.stdout.flush()
    # The parent closing stdin (or dying) ends the double.
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.buffer.read)
    listener.close()
    server.close_connections()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="A local Splash HTTP API double for tests.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    opts = parser.parse_args(argv)
    asyncio.run(_serve_until_stdin_closes(opts.host, opts.port))


if __name__ == "__main__":
    main()
