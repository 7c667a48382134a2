"""Parent-side handle: spawn the sandbox process, read its ready line, drive it."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import IO, Any
from urllib.parse import quote

from .common import read_jsonl
from .config import SandboxConfig

_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])


def read_access_log(path: str | Path) -> list[dict[str, Any]]:
    """Records of an access (or proxy) JSONL log; a partial last line is skipped."""
    return read_jsonl(path)


class SandboxError(RuntimeError):
    """The sandbox process failed to start or to obey a control call."""


class Sandbox:
    """A sandbox running in a child process for the lifetime of this object."""

    def __init__(
        self,
        config: SandboxConfig | None = None,
        workdir: str | Path | None = None,
        *,
        startup_timeout: float = 15.0,
        python: str | None = None,
    ) -> None:
        self.config = config or SandboxConfig()
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if workdir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="polite-sandbox-")
            workdir = self._tmp.name
        self.workdir = Path(workdir)
        self.startup_timeout = startup_timeout
        self.python = python or sys.executable
        self.proc: subprocess.Popen[bytes] | None = None
        self.info: dict[str, Any] = {}
        self._stderr: IO[bytes] | None = None

    # -- lifecycle -------------------------------------------------------
    def start(self) -> Sandbox:
        """Spawn the child and wait (bounded) for its ready line."""
        if self.proc is not None:
            return self
        self.workdir.mkdir(parents=True, exist_ok=True)
        cfg_path = self.workdir / "sandbox-config.json"
        cfg_path.write_text(json.dumps(self.config.to_dict(), indent=1))
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
        env["PYTHONUNBUFFERED"] = "1"
        stderr_path = self.workdir / "sandbox-stderr.log"
        self._stderr = open(stderr_path, "wb")  # noqa: SIM115 - outlives this call, closed in stop()
        cmd = [
            self.python,
            "-m",
            "scrapy_polite.sandbox",
            "serve",
            "--config",
            str(cfg_path),
            "--workdir",
            str(self.workdir),
            "--watch-stdin",
        ]
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, env=env
        )
        lines: queue.Queue[bytes | None] = queue.Queue()
        threading.Thread(target=_drain, args=(self.proc.stdout, lines), daemon=True).start()
        deadline = time.monotonic() + self.startup_timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.stop()
                raise SandboxError(
                    f"sandbox not ready after {self.startup_timeout:g} s: {self._stderr_text()}"
                )
            try:
                line = lines.get(timeout=min(remaining, 0.2))
            except queue.Empty:
                continue
            if line is None:
                self.stop()
                raise SandboxError(f"sandbox exited before ready: {self._stderr_text()}")
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if isinstance(msg, dict) and msg.get("event") == "ready":
                self.info = msg
                return self

    def _stderr_text(self) -> str:
        try:
            return (self.workdir / "sandbox-stderr.log").read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the child (idempotent): SIGTERM, then SIGKILL after *timeout*."""
        proc = self.proc
        if proc is not None and proc.poll() is None:
            try:
                if proc.stdin is not None:
                    proc.stdin.close()
            except OSError:
                pass
            proc.terminate()
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=timeout)
        if proc is not None:
            for stream in (proc.stdin, proc.stdout):
                try:
                    if stream is not None:
                        stream.close()
                except OSError:
                    pass
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    def close(self) -> None:
        """Stop and remove the temporary workdir if this object created it."""
        self.stop()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> Sandbox:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        """Whether the child process is alive."""
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int | None:
        """Child process id."""
        return self.proc.pid if self.proc is not None else None

    # -- addresses ---------------------------------------------------------
    def site_url(self, name: str) -> str:
        """Base URL of site *name*, no trailing slash."""
        return self.info["sites"][name]["url"]

    @property
    def site_urls(self) -> dict[str, str]:
        """Site name to base URL."""
        return {n: s["url"] for n, s in self.info["sites"].items()}

    @property
    def proxy_urls(self) -> list[str]:
        """One URL per forward proxy, in index order (credentials included)."""
        return [p["url"] for p in self.info["proxies"]]

    @property
    def proxy_exit_ips(self) -> list[str]:
        """Exit (source) IP of each forward proxy, in index order."""
        return [p["exit_ip"] for p in self.info["proxies"]]

    @property
    def gateway_url(self) -> str | None:
        """Gateway URL without a session (random exit per request)."""
        gw = self.info.get("gateway")
        return gw["url"] if gw else None

    @property
    def gateway_template(self) -> str | None:
        """Gateway URL with ``{session}`` in the username."""
        gw = self.info.get("gateway")
        return gw["template"] if gw else None

    def gateway_proxy_url(self, session: str) -> str:
        """Gateway URL for one session id."""
        if self.gateway_template is None:
            raise SandboxError("no gateway configured")
        return self.gateway_template.replace("{session}", session)

    @property
    def control_url(self) -> str:
        """Base URL of the control API."""
        return self.info["control_url"]

    @property
    def access_log_path(self) -> Path:
        """Path of the site access log."""
        return Path(self.info["access_log"])

    @property
    def proxy_log_path(self) -> Path:
        """Path of the proxy log."""
        return Path(self.info["proxy_log"])

    # -- control -----------------------------------------------------------
    def _call(self, method: str, path: str, timeout: float = 5.0) -> Any:
        req = urllib.request.Request(
            self.control_url + path, method=method, data=b"" if method == "POST" else None
        )
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with opener.open(req, timeout=timeout) as resp:
                return json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as exc:
            raise SandboxError(
                f"control {method} {path}: {exc.code} {exc.read().decode(errors='replace')}"
            ) from exc

    def fail_proxy(self, index: int | str, mode: str) -> None:
        """Put proxy *index* (or ``"gateway"``) into ``die|hang|refuse|recover``."""
        self._call("POST", f"/proxy/{index}/{mode}")

    def recover_proxy(self, index: int | str) -> None:
        """Back to normal on the same port."""
        self.fail_proxy(index, "recover")

    def set_host_rate(self, site: str, rate: float | None) -> None:
        """Change the host-wide cap of *site* (``None`` = unlimited)."""
        value = "none" if rate is None else repr(float(rate))
        self._call("POST", f"/site/{quote(site)}/host_rate?value={value}")

    def site_state(self, site: str) -> dict[str, Any]:
        """Blocked IPs, strikes and current host rate of *site*."""
        return self._call("GET", f"/site/{quote(site)}/state")

    def health(self) -> dict[str, Any]:
        """``GET /health``."""
        return self._call("GET", "/health")

    def flush(self) -> None:
        """Flush both logs in the child."""
        self._call("POST", "/flush")

    def log(self) -> list[dict[str, Any]]:
        """Site access-log records so far."""
        if self.running:
            self.flush()
        return read_access_log(self.access_log_path)

    def proxy_log(self) -> list[dict[str, Any]]:
        """Proxy-log records so far."""
        if self.running:
            self.flush()
        return read_jsonl(self.proxy_log_path)


def _drain(stream: IO[bytes] | None, out: queue.Queue[bytes | None]) -> None:
    if stream is None:
        out.put(None)
        return
    try:
        for line in stream:
            out.put(line)
    except (OSError, ValueError):
        pass
    out.put(None)
