"""Sandbox process: starts sites, proxies and the control API, then serves.

Runs in its own OS process so its timing is independent of the crawler
under test. It always ends by itself: after ``max_runtime``, when its
parent dies, on stdin EOF (if watched), on SIGTERM/SIGINT or on
``POST /shutdown``.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import ssl
import sys
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import IO, Any
from urllib.parse import parse_qs, urlsplit

from .common import JsonlLog
from .config import FAILURE_MODES, SandboxConfig
from .gateway import GatewayServer
from .http import Headers, Request, build_response, serve_requests
from .proxy import ProxyServer, nth_address
from .site import Site
from .tls import make_self_signed

ACCESS_LOG = "access.jsonl"
PROXY_LOG = "proxy.jsonl"


class SandboxServer:
    """Everything one sandbox serves, inside one event loop."""

    def __init__(self, config: SandboxConfig, workdir: str | Path) -> None:
        self.config = config
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.started = time.monotonic()
        self.deadline = self.started + config.max_runtime
        self.rng = random.Random(config.seed)
        self.access_log = JsonlLog(self.workdir / ACCESS_LOG)
        self.proxy_log = JsonlLog(self.workdir / PROXY_LOG)
        self.sites: dict[str, Site] = {}
        self.proxies: list[ProxyServer] = []
        self.gateway: GatewayServer | None = None
        self.stop_event = asyncio.Event()
        self._control: asyncio.Server | None = None
        self.control_port = 0
        self._timers: list[asyncio.TimerHandle] = []

    async def start(self) -> dict[str, Any]:
        """Bind everything and return the ready description."""
        for i, sc in enumerate(self.config.sites):
            address = sc.address or f"127.0.1.{i + 1}"
            ctx = self._tls_context(sc.name, address) if sc.tls else None
            site = Site(sc, address, self.access_log, self.started, random.Random(self.rng.random()), ctx,
                        deadline=self.deadline)
            await site.start()
            self.sites[sc.name] = site
        pc = self.config.proxies
        for i in range(pc.count):
            p = ProxyServer(pc, i, nth_address(pc.first_source, i), self.proxy_log, self.deadline)
            p.port = pc.ports[i] if i < len(pc.ports) else 0
            await p.start()
            self.proxies.append(p)
        if pc.gateway:
            self.gateway = GatewayServer(pc, self.proxy_log, self.deadline, random.Random(self.rng.random()))
            await self.gateway.start()
        self._control = await asyncio.start_server(self._control_conn, "127.0.0.1", 0)
        self.control_port = self._control.sockets[0].getsockname()[1]
        loop = asyncio.get_running_loop()
        for f in self.config.failures:
            if f.at <= 0:
                # In force before the ready line: no client can reach the proxy before it fails.
                await self.set_proxy_mode(f.proxy, f.mode)
                continue
            self._timers.append(
                loop.call_later(
                    max(0.0, f.at), partial(self._fail_later, f.proxy, f.mode)
                )
            )
        self._timers.append(loop.call_later(self.config.max_runtime, self.stop_event.set))
        return self.ready_info()

    def _tls_context(self, name: str, address: str) -> ssl.SSLContext:
        cert, key = make_self_signed(address)
        cert_path = self.workdir / f"site-{name}-cert.pem"
        key_path = self.workdir / f"site-{name}-key.pem"
        cert_path.write_bytes(cert)
        key_path.write_bytes(key)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert_path, key_path)
        return ctx

    def ready_info(self) -> dict[str, Any]:
        """The JSON ``ready`` line: every address, port and log path."""
        gw = self.gateway
        return {
            "event": "ready",
            "pid": os.getpid(),
            "sites": {
                name: {"url": s.url, "address": s.address, "port": s.port, "tls": s.ssl_context is not None}
                for name, s in self.sites.items()
            },
            "proxies": [
                {"index": p.index, "url": p.url, "host": p.host, "port": p.port, "exit_ip": p.source}
                for p in self.proxies
            ],
            "gateway": None
            if gw is None
            else {"url": gw.url, "template": gw.template, "host": gw.host, "port": gw.port, "pool": gw.pool},
            "control_url": f"http://127.0.0.1:{self.control_port}",
            "access_log": str(self.workdir / ACCESS_LOG),
            "proxy_log": str(self.workdir / PROXY_LOG),
        }

    def _proxy(self, ref: int | str) -> ProxyServer:
        if ref == "gateway":
            if self.gateway is None:
                raise KeyError("no gateway configured")
            return self.gateway
        return self.proxies[int(ref)]

    def _fail_later(self, ref: int | str, mode: str) -> None:
        """A timer's callback: the failure scheduled for *ref*, started on the loop."""
        asyncio.ensure_future(self.set_proxy_mode(ref, mode))

    async def set_proxy_mode(self, ref: int | str, mode: str) -> None:
        """Switch one proxy's failure mode."""
        await self._proxy(ref).set_mode(mode)

    async def close(self) -> None:
        """Stop everything and flush the logs."""
        for t in self._timers:
            t.cancel()
        if self._control is not None:
            self._control.close()
        for s in self.sites.values():
            await s.close()
        for p in self.proxies:
            await p.close()
        if self.gateway is not None:
            await self.gateway.close()
        self.access_log.close()
        self.proxy_log.close()

    # -- control API -------------------------------------------------------
    async def _control_conn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:

        async def handle(req: Request) -> bool:
            status, payload = await self._dispatch(req.method, req.target)
            hdrs = Headers([("Content-Type", "application/json")])
            writer.write(build_response(status, hdrs, json.dumps(payload).encode(), keep_alive=req.keep_alive))
            await writer.drain()
            return req.keep_alive

        await serve_requests(reader, writer, handle)

    async def _dispatch(self, method: str, target: str) -> tuple[int, Any]:  # noqa: C901
        split = urlsplit(target)
        parts = [p for p in split.path.split("/") if p]
        query = parse_qs(split.query)
        if method == "GET" and parts == ["health"]:
            return 200, {"ok": True, "uptime": time.monotonic() - self.started, "pid": os.getpid()}
        if method == "GET" and parts == ["ready"]:
            return 200, self.ready_info()
        if method == "GET" and len(parts) == 3 and parts[0] == "site" and parts[2] == "state":
            site = self.sites.get(parts[1])
            return (200, site.state()) if site else (404, {"error": "unknown site"})
        if method == "GET" and parts == ["proxies"]:
            out = [{"index": p.index, "mode": p.mode, "port": p.port} for p in self.proxies]
            if self.gateway is not None:
                out.append({"index": "gateway", "mode": self.gateway.mode, "port": self.gateway.port})
            return 200, out
        if method == "GET" and parts == ["gateway"]:
            return (200, self.gateway.state()) if self.gateway else (404, {"error": "no gateway"})
        if method != "POST":
            return 404, {"error": "not found"}
        if len(parts) == 3 and parts[0] == "proxy":
            ref, mode = parts[1], parts[2]
            if mode not in FAILURE_MODES:
                return 400, {"error": f"mode must be one of {FAILURE_MODES}"}
            try:
                await self.set_proxy_mode(ref, mode)
            except (KeyError, IndexError, ValueError) as exc:
                return 404, {"error": str(exc)}
            except OSError as exc:
                return 500, {"error": f"cannot re-listen: {exc}"}
            return 200, {"proxy": ref, "mode": mode}
        if len(parts) == 3 and parts[0] == "site" and parts[2] == "host_rate":
            site = self.sites.get(parts[1])
            if site is None:
                return 404, {"error": "unknown site"}
            raw = (query.get("value") or ["none"])[0]
            try:
                value = None if raw.lower() in ("none", "null", "") else float(raw)
            except ValueError:
                return 400, {"error": f"bad value {raw!r}"}
            site.set_host_rate(value)
            return 200, {"site": site.name, "host_rate": value}
        if parts == ["flush"]:
            self.access_log.flush()
            self.proxy_log.flush()
            return 200, {"flushed": True}
        if parts == ["shutdown"]:
            asyncio.get_running_loop().call_soon(self.stop_event.set)
            return 200, {"stopping": True}
        return 404, {"error": "not found"}


async def _watch_parent(stop: asyncio.Event, parent: int) -> None:
    while not stop.is_set():
        if os.getppid() != parent:
            stop.set()
            return
        await asyncio.sleep(0.5)


def _watch_stdin(loop: asyncio.AbstractEventLoop, stop: asyncio.Event) -> None:
    def reader() -> None:
        try:
            fd = sys.stdin.fileno()
            while os.read(fd, 4096):
                pass
        except (OSError, ValueError):
            pass
        loop.call_soon_threadsafe(stop.set)

    threading.Thread(target=reader, name="sandbox-stdin", daemon=True).start()


async def serve(
    config: SandboxConfig,
    workdir: str | Path,
    *,
    watch_stdin: bool = False,
    watch_parent: bool = True,
    on_ready: Callable[[dict[str, Any]], None] | None = None,
) -> None:
    """Run the sandbox until one of its stop conditions fires."""
    server = SandboxServer(config, workdir)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, server.stop_event.set)
        except (NotImplementedError, RuntimeError):
            pass
    try:
        info = await server.start()
        if on_ready is not None:
            on_ready(info)
        watchers = []
        if watch_parent:
            watchers.append(asyncio.ensure_future(_watch_parent(server.stop_event, os.getppid())))
        if watch_stdin:
            _watch_stdin(loop, server.stop_event)
        await server.stop_event.wait()
        for w in watchers:
            w.cancel()
    finally:
        await server.close()


def print_ready(info: dict[str, Any], stream: IO[str] | None = None) -> None:
    """Write the ready line as one JSON line and flush."""
    out = stream or sys.stdout
    out.write(json.dumps(info) + "\n")
    out.flush()
