"""Minimal HTTP/1.1 message parsing and serialisation over asyncio streams.

Shared by the site, the proxies and the control API. It handles exactly
what those need: keep-alive, ``Content-Length`` and chunked bodies, and
read-until-close responses, with every read bounded by a timeout.
"""

from __future__ import annotations

import asyncio
import builtins  # Headers has a method named set: its annotations name the type
import email.utils
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from http import HTTPStatus

MAX_HEAD = 64 * 1024
MAX_BODY = 16 * 1024 * 1024
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authorization",
        "proxy-authenticate",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)


class HttpError(Exception):
    """Malformed message; *status* is what a server should answer."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class Headers:
    """Ordered, case-insensitive multi-valued headers."""

    items: list[tuple[str, str]] = field(default_factory=list)

    def get(self, name: str, default: str | None = None) -> str | None:
        """First value of *name*."""
        lname = name.lower()
        for k, v in self.items:
            if k.lower() == lname:
                return v
        return default

    def get_all(self, name: str) -> list[str]:
        """All values of *name*, in order."""
        lname = name.lower()
        return [v for k, v in self.items if k.lower() == lname]

    def add(self, name: str, value: str) -> None:
        """Append one header line."""
        self.items.append((name, value))

    def remove(self, name: str) -> None:
        """Drop every line of *name*."""
        lname = name.lower()
        self.items = [(k, v) for k, v in self.items if k.lower() != lname]

    def set(self, name: str, value: str) -> None:
        """Replace every line of *name* with one."""
        self.remove(name)
        self.add(name, value)

    def connection_tokens(self) -> builtins.set[str]:
        """Lower-cased tokens of all ``Connection`` headers."""
        return {t.strip().lower() for v in self.get_all("connection") for t in v.split(",") if t.strip()}

    def encode(self) -> bytes:
        """Wire form of the header lines (without the final blank line)."""
        return b"".join(f"{k}: {v}\r\n".encode("latin-1") for k, v in self.items)


@dataclass
class Request:
    """A parsed request; *target* is the raw request-target."""

    method: str
    target: str
    version: str
    headers: Headers
    body: bytes = b""

    @property
    def keep_alive(self) -> bool:
        """Whether the client wants the connection kept open afterwards."""
        tokens = self.headers.connection_tokens() | {
            t.strip().lower() for t in (self.headers.get("proxy-connection") or "").split(",")
        }
        if "close" in tokens:
            return False
        return self.version == "HTTP/1.1" or "keep-alive" in tokens


@dataclass
class Response:
    """A parsed response as read from an upstream server."""

    status: int
    reason: str
    version: str
    headers: Headers
    body: bytes = b""
    reusable: bool = False


async def _read_head(reader: asyncio.StreamReader, timeout: float) -> bytes | None:
    try:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout)
    except asyncio.IncompleteReadError as exc:
        if not exc.partial.strip():
            return None
        raise HttpError("truncated message head") from exc
    except asyncio.LimitOverrunError as exc:
        raise HttpError("message head too large", 431) from exc
    if len(head) > MAX_HEAD:
        raise HttpError("message head too large", 431)
    return head


def _parse_headers(lines: list[bytes]) -> Headers:
    headers = Headers()
    for raw in lines:
        if not raw:
            continue
        line = raw.decode("latin-1")
        if line[0] in " \t" and headers.items:
            k, v = headers.items[-1]
            headers.items[-1] = (k, v + " " + line.strip())
            continue
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise HttpError(f"bad header line {line!r}")
        headers.add(name, value.strip())
    return headers


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    parts: list[bytes] = []
    total = 0
    while True:
        size_line = await reader.readuntil(b"\r\n")
        try:
            size = int(size_line.split(b";", 1)[0].strip(), 16)
        except ValueError as exc:
            raise HttpError("bad chunk size") from exc
        if size == 0:
            while (await reader.readuntil(b"\r\n")) != b"\r\n":
                pass
            return b"".join(parts)
        total += size
        if total > MAX_BODY:
            raise HttpError("body too large", 413)
        parts.append(await reader.readexactly(size))
        await reader.readexactly(2)


async def _read_framed_body(reader: asyncio.StreamReader, headers: Headers) -> bytes | None:
    """Body framed by chunking or Content-Length; ``None`` if unframed."""
    te = (headers.get("transfer-encoding") or "").lower()
    if "chunked" in te:
        return await _read_chunked(reader)
    length = headers.get("content-length")
    if length is None:
        return None
    try:
        n = int(length)
    except ValueError as exc:
        raise HttpError("bad Content-Length") from exc
    if n < 0 or n > MAX_BODY:
        raise HttpError("bad Content-Length", 413)
    return await reader.readexactly(n) if n else b""


async def read_request(
    reader: asyncio.StreamReader, idle_timeout: float, body_timeout: float = 30.0
) -> Request | None:
    """Next request on the connection, or ``None`` on a clean EOF."""
    head = await _read_head(reader, idle_timeout)
    if head is None:
        return None
    lines = head[:-4].split(b"\r\n")
    while lines and not lines[0]:
        lines.pop(0)
    if not lines:
        raise HttpError("empty request")
    parts = lines[0].decode("latin-1").split()
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise HttpError(f"bad request line {lines[0]!r}")
    method, target, version = parts
    headers = _parse_headers(lines[1:])
    try:
        body = await asyncio.wait_for(_read_framed_body(reader, headers), body_timeout)
    except asyncio.IncompleteReadError as exc:
        raise HttpError("truncated body") from exc
    return Request(method.upper(), target, version, headers, body or b"")


async def read_response(reader: asyncio.StreamReader, method: str, timeout: float) -> Response:
    """One response; raises ``ConnectionError`` if the peer closed before any byte."""

    async def _read() -> Response:
        head = await _read_head(reader, timeout)
        if head is None:
            raise ConnectionResetError("upstream closed before responding")
        lines = head[:-4].split(b"\r\n")
        status_line = lines[0].decode("latin-1")
        version, _, rest = status_line.partition(" ")
        code, _, reason = rest.partition(" ")
        if not version.startswith("HTTP/1.") or not code.isdigit():
            raise HttpError(f"bad status line {status_line!r}", 502)
        status = int(code)
        headers = _parse_headers(lines[1:])
        close = "close" in headers.connection_tokens() or version == "HTTP/1.0"
        if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
            return Response(status, reason, version, headers, b"", not close)
        body = await _read_framed_body(reader, headers)
        if body is None:
            body = await reader.read(MAX_BODY)
            return Response(status, reason, version, headers, body, False)
        return Response(status, reason, version, headers, body, not close)

    return await asyncio.wait_for(_read(), timeout)


def reason_phrase(status: int) -> str:
    """Standard reason phrase, or a neutral one for unknown codes."""
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Status"


def http_date(ts: float | None = None) -> str:
    """RFC 7231 IMF-fixdate."""
    return email.utils.formatdate(ts, usegmt=True)


def build_response(
    status: int,
    headers: Headers | list[tuple[str, str]] | None = None,
    body: bytes = b"",
    *,
    keep_alive: bool = True,
    head_only: bool = False,
    reason: str | None = None,
) -> bytes:
    """Serialise a full response with a correct ``Content-Length``."""
    hdrs = headers if isinstance(headers, Headers) else Headers(list(headers or []))
    hdrs = Headers(list(hdrs.items))
    no_body_status = 100 <= status < 200 or status in (204, 304)
    if not no_body_status and (hdrs.get("content-length") is None or not head_only):
        hdrs.set("Content-Length", str(len(body)))
    hdrs.set("Connection", "keep-alive" if keep_alive else "close")
    line = f"HTTP/1.1 {status} {reason or reason_phrase(status)}\r\n".encode("latin-1")
    return line + hdrs.encode() + b"\r\n" + (b"" if head_only else body)


#: How long a keep-alive connection may sit idle between requests.
IDLE_TIMEOUT = 60.0


async def serve_requests(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    handle: Callable[[Request], Awaitable[bool]],
) -> None:
    """Read requests off one keep-alive connection and pass each to *handle*.

    *handle* answers and says whether the connection stays open; a malformed
    request gets its error status. A peer that goes away ends the loop
    quietly, and the connection is always closed. Shared by every server here.
    """
    try:
        while True:
            try:
                req = await read_request(reader, IDLE_TIMEOUT)
            except HttpError as exc:
                writer.write(build_response(exc.status, body=str(exc).encode(), keep_alive=False))
                await writer.drain()
                return
            if req is None or not await handle(req):
                return
    except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.close()
