"""A real ``redis-server`` for the shared-state tests, on a free loopback port."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

#: CI installs Redis and sets this, so a missing server fails there instead of skipping.
REQUIRED = os.environ.get("POLITE_TEST_REQUIRE_REDIS") == "1"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """One ``redis-server`` process without persistence, stopped by :meth:`stop`.

    With *password*, the server requires it (``--requirepass``) and :attr:`url` carries it.
    """

    def __init__(self, workdir: Path, password: str | None = None) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            if REQUIRED:
                pytest.fail("redis-server is not installed (POLITE_TEST_REQUIRE_REDIS=1)")
            pytest.skip("redis-server is not installed (apt-get install redis-server)")
        workdir.mkdir(parents=True, exist_ok=True)
        self.port = _free_port()
        self.password = password
        auth = f":{password}@" if password is not None else ""
        self.url = f"redis://{auth}127.0.0.1:{self.port}/0"
        self._cmd = [
            binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
            "--appendonly", "no", "--dir", str(workdir), "--logfile", str(workdir / "redis.log"),
        ] + (["--requirepass", password] if password is not None else [])
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        self.proc = subprocess.Popen(self._cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:  # e.g. the port was taken: never talk to another server
                raise RuntimeError(f"redis-server exited with {self.proc.returncode} on port {self.port}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"redis-server did not start on port {self.port}")

    async def outage(self, after: float, length: float, kill: bool = False) -> tuple[float, float]:
        """On the running reactor: wait *after* s, stop (or SIGKILL) the server for *length* s, restart it.

        Returns the wall times it went down and came back. Either way every key is lost.
        """
        from twisted.internet import reactor
        from twisted.internet.task import deferLater

        await deferLater(reactor, after, lambda: None)
        self.kill() if kill else self.stop()
        down = time.time()
        await deferLater(reactor, length, lambda: None)
        up = time.time()
        self.start()
        return down, up

    def kill(self) -> None:
        """SIGKILL: the server dies without a clean shutdown, and every key with it."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
