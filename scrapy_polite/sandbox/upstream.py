"""A proxy's side towards the sites: pooled keep-alive connections and the CONNECT tunnel's pipes.

Each connection is bound to the exit's source address, so the pool is kept per
(source, host, port): a connection never carries another exit's requests.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from .common import peer_gone
from .http import read_response

CONNECT_TIMEOUT = 5.0
RESPONSE_TIMEOUT = 60.0
POOL_IDLE = 15.0
PIPE_CHUNK = 64 * 1024

_Key = tuple[str, str, int]


class UpstreamPool:
    """Keep-alive upstream connections per (source, host, port)."""

    def __init__(self) -> None:
        self._idle: dict[_Key, list[tuple[asyncio.StreamReader, asyncio.StreamWriter, float]]] = {}
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


async def read_unless_gone(
    up_r: asyncio.StreamReader, method: str, client: asyncio.StreamReader | None
) -> Any:
    """The upstream response, or ``None`` once the client has closed its connection."""
    answer = asyncio.ensure_future(read_response(up_r, method, RESPONSE_TIMEOUT))
    while client is not None and not answer.done():
        if peer_gone(client):
            answer.cancel()
            return None
        await asyncio.wait({answer}, timeout=0.05)
    return await answer


async def _pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
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


async def pipe_both(
    c_r: asyncio.StreamReader,
    c_w: asyncio.StreamWriter,
    u_r: asyncio.StreamReader,
    u_w: asyncio.StreamWriter,
    deadline: float,
) -> None:
    """Copy bytes both ways between client and upstream until both sides end or the run does."""
    remaining = max(0.0, deadline - time.monotonic())
    tasks = [asyncio.ensure_future(_pipe(c_r, u_w)), asyncio.ensure_future(_pipe(u_r, c_w))]
    _, pending = await asyncio.wait(tasks, timeout=remaining, return_when=asyncio.ALL_COMPLETED)
    for t in pending:
        t.cancel()
