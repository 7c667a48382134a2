"""Fault suite: the crawl's own process, or the Redis server it shares state through, is stopped.

Each case is a real crawl through password-protected sandbox proxies, judged from the site's
access log: every page fetched exactly once (or given up with its reason), the pool in use,
no traceback and no credential in any output.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import pytest_twisted
from conftest import ROOT
from example_project.spiders.catalogue import CatalogueSpider
from faultcheck import assert_no_secret, assert_no_traceback, assert_pages_accounted, fault_crawl
from logcheck import items_fetched, max_inflight_per_ip

from scrapy_polite.sandbox import ProxyConfig, SandboxConfig, SiteConfig

SECRET = "s3cr3t-Fault-pw"


def auth_sandbox(sandbox, pages: int, count: int = 4) -> object:
    site = SiteConfig(name="a", pages=pages, per_ip_max_inflight=1, latency=[0.01, 0.05])
    return sandbox(SandboxConfig(sites=[site], proxies=ProxyConfig(count=count, auth=("crawler", SECRET))))


def scrapy_crawl(sb, workdir: Path, run: int, **settings: str) -> subprocess.Popen[str]:
    """``scrapy crawl catalogue`` in example_project, as a user runs it, logging at DEBUG to a file."""
    opts = {
        "POLITE_PROXIES": ",".join(sb.proxy_urls),
        "POLITE_PROXIES_FILE": "",
        "POLITE_DELAY": "0.3 0.5",
        "POLITE_LOG_INTERVAL": "1",
        "POLITE_STATS_JSONL": str(workdir / f"attempts{run}.jsonl"),
        "LOG_LEVEL": "DEBUG",
        "LOG_FILE": str(workdir / f"crawl{run}.log"),
        "TELNETCONSOLE_ENABLED": "False",
        "DOWNLOAD_TIMEOUT": "5",
        "CLOSESPIDER_TIMEOUT": "60",
        **settings,
    }
    args = [sys.executable, "-m", "scrapy", "crawl", "catalogue", "-a", f"start_url={sb.site_url('a')}",
            "-o", str(workdir / f"items{run}.jsonl")]
    for k, v in opts.items():
        args += ["-s", f"{k}={v}"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.Popen(args, cwd=ROOT / "example_project", env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def test_sigterm_with_jobdir_then_resume_fetches_every_page_once(sandbox, tmp_path) -> None:
    pages = 30
    sb = auth_sandbox(sandbox, pages)
    job = str(tmp_path / "job")
    first = scrapy_crawl(sb, tmp_path, 1, JOBDIR=job)
    deadline = time.monotonic() + 40
    while time.monotonic() < deadline and len(items_fetched(sb.log())) < 8:
        time.sleep(0.1)
    assert first.poll() is None, first.communicate()[0]
    first.send_signal(signal.SIGTERM)  # Scrapy's graceful shutdown, as Ctrl-C or `kill` does
    out1, _ = first.communicate(timeout=40)
    assert first.returncode == 0, out1
    log1 = (tmp_path / "crawl1.log").read_text()
    assert "Received SIGTERM" in log1 and "'finish_reason': 'shutdown'" in log1
    done_first = set(items_fetched(sb.log()))
    assert 8 <= len(done_first) < pages

    second = scrapy_crawl(sb, tmp_path, 2, JOBDIR=job)
    out2, _ = second.communicate(timeout=90)
    assert second.returncode == 0, out2
    log2 = (tmp_path / "crawl2.log").read_text()
    assert "'finish_reason': 'finished'" in log2

    log = sb.log()
    fetched = items_fetched(log)
    assert sorted(fetched) == list(range(1, pages + 1)) and set(fetched.values()) == {1}
    ids = sorted(json.loads(line)["id"] for run in (1, 2)
                 for line in (tmp_path / f"items{run}.jsonl").read_text().splitlines() if line.strip())
    assert ids == list(range(1, pages + 1))
    assert len({e["ip"] for e in log}) == len(sb.proxy_exit_ips)  # the whole pool in use
    assert max_inflight_per_ip(log) == 1
    assert_no_traceback(log1, log2, out1, out2)
    assert_no_secret(SECRET, log1, log2, out1, out2, tmp_path / "attempts1.jsonl", tmp_path / "attempts2.jsonl",
                     tmp_path / "items1.jsonl", tmp_path / "items2.jsonl")


@pytest.mark.once
@pytest_twisted.ensureDeferred
async def test_redis_killed_and_restarted_mid_crawl_loses_nothing(sandbox, redis_server, tmp_path) -> None:
    from twisted.internet.defer import ensureDeferred

    pages = 40
    sb = auth_sandbox(sandbox, pages, count=6)
    running = ensureDeferred(fault_crawl(
        CatalogueSpider,
        {"POLITE_PROXIES": sb.proxy_urls, "POLITE_STATE": redis_server.url, "POLITE_DELAY": (0.4, 0.6),
         "POLITE_STATS_JSONL": str(tmp_path / "attempts.jsonl")},
        tmp_path / "crawl.log", start_url=sb.site_url("a"),
    ))
    down, up = await redis_server.outage(2.0, 2.5, kill=True)  # SIGKILL: no clean shutdown
    run = await running
    log = sb.log()
    assert run.stats["finish_reason"] == "finished"
    assert_pages_accounted(run, log, range(1, pages + 1))
    assert not run.gave_up and len(run.result.items) == pages
    assert any(e["t_start"] < down for e in log) and any(e["t_start"] > up for e in log)
    assert [e for e in log if down + 0.3 < e["t_start"] < up] == []  # nothing sent unguarded
    assert {e["ip"] for e in log if e["t_start"] > up} == set(sb.proxy_exit_ips)
    assert max_inflight_per_ip(log) == 1
    assert run.stats.get("polite/state_outages", 0) >= 1
    assert_no_traceback(run.log_text)
    assert_no_secret(SECRET, run.log_text, tmp_path / "attempts.jsonl", json.dumps(run.stats, default=str))
