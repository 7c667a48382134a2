"""Deployment: example_project as an egg on a real Scrapyd, scheduled over its HTTP API.

The job runs against the sandbox with per-job settings, and its log must
hold the ``polite/`` stats: scrapy-polite is an installed dependency of
Scrapyd's environment, the egg carries only the project.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("scrapyd", reason="Scrapyd is not installed (pip install -e . --group test)")
pytest.importorskip("scrapyd_client", reason="scrapyd-client is not installed (pip install -e . --group test)")

import requests  # noqa: E402  (a dependency of scrapyd-client)
from conftest import ROOT  # noqa: E402
from logcheck import items_fetched, max_inflight_host  # noqa: E402

from scrapy_polite.sandbox import ProxyConfig, SandboxConfig, SiteConfig  # noqa: E402

PROJECT = "example_project"
STARTUP_TIMEOUT = 20.0
JOB_TIMEOUT = 45.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Scrapyd:
    """A Scrapyd process with its own config, eggs, logs and dbs under one directory."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.http = requests.Session()
        self.http.trust_env = False  # never through an environment proxy: loopback only
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Scrapyd:
        self.home.mkdir(parents=True, exist_ok=True)
        (self.home / "scrapyd.conf").write_text(
            "[scrapyd]\n"
            "bind_address = 127.0.0.1\n"
            f"http_port = {self.port}\n"
            f"eggs_dir = {self.home / 'eggs'}\n"
            f"logs_dir = {self.home / 'logs'}\n"
            f"dbs_dir = {self.home / 'dbs'}\n"
            "items_dir =\n"
            "max_proc = 2\n"
            "poll_interval = 0.5\n"
        )
        # HOME too: Scrapyd also reads ~/.scrapyd.conf, which would override this one.
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("SCRAPY_", "SCRAPYD_")) and k != "POLITE_PROXIES_FILE"}
        env["HOME"] = str(self.home)
        with open(self.home / "scrapyd.out", "wb") as out:
            # Its own session, so teardown can end Scrapyd and the jobs it spawned together.
            self.proc = subprocess.Popen([sys.executable, "-m", "scrapyd", "--pidfile="], cwd=self.home, env=env,
                                         stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"Scrapyd exited: {self.output()}")
            try:
                if self.get("daemonstatus.json").get("status") == "ok":
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"Scrapyd not up after {STARTUP_TIMEOUT:g} s: {self.output()}")

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        except ProcessLookupError:
            pass

    def output(self) -> str:
        try:
            return (self.home / "scrapyd.out").read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def get(self, path: str, **params: Any) -> Any:
        resp = self.http.get(f"{self.url}/{path}", params=params, timeout=10)
        resp.raise_for_status()
        return resp.json() if path.endswith(".json") else resp.text

    def post(self, path: str, data: Any, files: Any = None) -> dict[str, Any]:
        resp = self.http.post(f"{self.url}/{path}", data=data, files=files, timeout=30)
        resp.raise_for_status()
        body = resp.json()
        assert body.get("status") == "ok", body
        return body


@pytest.fixture
def scrapyd(tmp_path: Path):
    server = Scrapyd(tmp_path / "scrapyd").start()
    yield server
    server.stop()


def build_egg(tmp_path: Path) -> Path:
    """The egg scrapyd-deploy builds, from a copy (it writes setup.py into the project)."""
    src = tmp_path / "project"
    shutil.copytree(ROOT / PROJECT, src, ignore=shutil.ignore_patterns(
        "__pycache__", "*.pyc", "build", "*.egg-info", "proxies.txt", "*.jsonl"))
    egg = tmp_path / f"{PROJECT}.egg"
    proc = subprocess.run([sys.executable, "-m", "scrapyd_client.deploy", "--build-egg", str(egg)],
                          cwd=src, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and egg.is_file(), proc.stderr
    return egg


def test_example_project_runs_on_scrapyd_with_per_job_settings(sandbox, scrapyd: Scrapyd, tmp_path: Path) -> None:
    sb = sandbox(SandboxConfig(sites=[SiteConfig(name="a", pages=20, latency=[0.2, 0.3])],
                               proxies=ProxyConfig(count=8)))
    proxies_file = tmp_path / "pool.txt"
    proxies_file.write_text("\n".join(sb.proxy_urls) + "\n")

    egg = build_egg(tmp_path)
    with open(egg, "rb") as f:
        added = scrapyd.post("addversion.json", {"project": PROJECT, "version": "1"}, files={"egg": f})
    spiders = {"catalogue", "accounts", "fleet"}
    assert added["spiders"] == len(spiders)
    assert set(scrapyd.get("listspiders.json", project=PROJECT)["spiders"]) == spiders

    job = scrapyd.post("schedule.json", [
        ("project", PROJECT),
        ("spider", "catalogue"),
        ("setting", f"POLITE_PROXIES_FILE={proxies_file}"),
        ("setting", "POLITE_HOST_CONCURRENCY=3"),
        ("setting", "POLITE_DELAY=0.1,0.2"),
        ("setting", "CLOSESPIDER_TIMEOUT=40"),
        ("setting", "TELNETCONSOLE_ENABLED=False"),
        ("start_url", sb.site_url("a")),
    ])["jobid"]

    deadline = time.monotonic() + JOB_TIMEOUT
    while True:
        jobs = scrapyd.get("listjobs.json", project=PROJECT)
        if any(j["id"] == job for j in jobs["finished"]):
            break
        assert time.monotonic() < deadline, f"job {job} not finished after {JOB_TIMEOUT:g} s: {jobs}"
        time.sleep(0.5)

    log = scrapyd.get(f"logs/{PROJECT}/catalogue/{job}.log")
    assert "'finish_reason': 'finished'" in log, log[-3000:]
    assert "] INFO: 8 endpoints" in log and "host concurrency 3" in log
    stats = dict(re.findall(r"'(polite/[^']+)': ([0-9.]+)", log))
    site_log = sb.log()
    assert int(stats["polite/success"]) == sum(e["status"] == 200 for e in site_log) >= 21
    assert float(stats["polite/pages_per_min"]) > 0
    assert int(stats["polite/endpoints"]) == 8
    assert "polite/gave_up" not in stats

    assert sorted(items_fetched(site_log)) == list(range(1, 21))
    assert {e["ip"] for e in site_log} <= set(sb.proxy_exit_ips)
    assert max_inflight_host(site_log, "a") == 3  # the per-job setting, not settings.py's 2
