"""Fault suite: a proxy or Redis credential is never shown, whatever fails.

Real DEBUG crawls through password-protected sandbox proxies and a gateway, with a
spider that logs ``response.meta`` and ``request.meta`` on every answer and in its
errback; one proxy has a wrong password, one is dead, and the proxies file is
reloaded with a bad line holding the password. Every output is grepped for the
passwords: the log, the stats, the JSONL, the HTML report, the Prometheus page,
and, with a password-protected Redis, every key and value in it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
import scrapy
from faultcheck import assert_no_secret, assert_no_traceback, assert_pages_accounted, fault_crawl
from twisted.internet.task import LoopingCall

from scrapy_polite.metrics.stats import PoliteStats
from scrapy_polite.sandbox import FailureSpec, ProxyConfig, SandboxConfig, SiteConfig

PW = "Zq7sekr1tPW"          # the proxies' password
WRONG = "Wr0ngPWx93"         # the password of the one proxy misconfigured
REDIS_PW = "Rd5sekr1tQQ"     # the Redis server's password
NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class MetaLoggingSpider(scrapy.Spider):
    """Logs every answer's meta, as many spiders do, and every failure's request meta.

    It also keeps the last Prometheus page, scraped after each answer and failure.
    """

    name = "meta_logging"

    def __init__(self, base: str, pages: int, **kw: Any) -> None:
        super().__init__(**kw)
        self.base, self.pages = base, int(pages)
        self.metrics: str | None = None
        self.failures = 0

    async def start(self) -> Any:
        for n in range(1, self.pages + 1):
            meta = {"polite_session": f"s{n % 3}"} if n % 4 == 0 else {}
            yield scrapy.Request(f"{self.base}/item/{n}", meta=meta, errback=self.failed)

    def parse(self, response: scrapy.http.Response) -> Any:
        self.logger.info("answer %s meta %r", response.status, response.meta)
        self.logger.debug("request %r meta %r", response.request, response.request.meta)
        self.scrape()
        yield {"url": response.url, "endpoint": response.meta.get("polite_endpoint")}

    def failed(self, failure: Any) -> None:
        self.failures += 1
        self.logger.warning("failed %r: %s; request meta %r", failure, failure.value, failure.request.meta)
        self.scrape()

    def scrape(self) -> None:
        url = self.crawler.get_extension(PoliteStats).prometheus_url
        if url:
            with NO_PROXY.open(url, timeout=5) as resp:
                self.metrics = resp.read().decode()


def pool(sb: Any) -> tuple[list[str], list[str]]:
    """(POLITE_PROXIES, the proxies file's lines): proxy 1 again with a wrong password, proxy 3 dead, a gateway."""
    urls = sb.proxy_urls
    assert all(PW in u for u in urls) and PW in sb.gateway_template
    return [urls[1].replace(PW, WRONG), urls[3], sb.gateway_template], urls[:3]


def sandbox_config(pages: int) -> SandboxConfig:
    return SandboxConfig(
        sites=[SiteConfig(name="a", pages=pages, latency=[0.01, 0.03])],
        proxies=ProxyConfig(count=4, auth=("crawler", PW), gateway=True, gateway_pool=4),
        failures=[FailureSpec(proxy=3, mode="die", at=0.0)],
    )


def settings(sb: Any, tmp_path: Path, proxies: list[str], proxies_file: Path) -> dict[str, Any]:
    return {
        "POLITE_PROXIES": proxies,
        "POLITE_PROXIES_FILE": str(proxies_file),
        "POLITE_PROXIES_FILE_CHECK_INTERVAL": 0.3,
        "POLITE_GATEWAY_SESSIONS": 2,
        "POLITE_DELAY": (0.2, 0.3),
        # Every failed attempt is given up: the errback sees the 407s and the dead proxy's errors.
        "POLITE_PROXY_RETRY_TIMES": 0,
        "POLITE_ENDPOINT_MAX_FAILURES": 2,
        "POLITE_ENDPOINT_BACKOFF": (0.3, 1.0),
        "POLITE_SESSION_POLICY": "repin",
        "POLITE_EXIT_IP_PROBE_URL": sb.site_url("a") + "/ip",
        "POLITE_EXIT_IP_PROBE_TIMEOUT": 2,
        "POLITE_STATS_JSONL": str(tmp_path / "stats.jsonl"),
        "POLITE_PROMETHEUS_PORT": 0,
        "POLITE_LOG_INTERVAL": 0.5,
        "DOWNLOAD_TIMEOUT": 3,
        "CLOSESPIDER_TIMEOUT": 20,
    }


def bad_line_mid_crawl(sb: Any, path: Path, good: list[str]) -> tuple[LoopingCall, list[float]]:
    """Once the crawl is under way, the proxies file gets a bad line that holds the password."""
    done: list[float] = []

    def rewrite() -> None:
        if not done and len(sb.log()) >= 4:
            path.write_text("\n".join(good) + f"\ncrawler:{PW}@127.0.0.1:80x\n")
            os.utime(path, (1e9, 1e9 + 1))
            done.append(1.0)

    loop = LoopingCall(rewrite)
    loop.start(0.1)
    return loop, done


def report_of(jsonl: Path, tmp_path: Path) -> Path:
    out = tmp_path / "report.html"
    proc = subprocess.run([sys.executable, "-m", "scrapy_polite", "report", str(jsonl), "-o", str(out)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert_no_secret(PW, proc.stdout + proc.stderr)
    return out


def outputs_of(run: Any) -> str:
    """The crawl's stats and its summary, as text."""
    summary = run.result.crawler.get_extension(PoliteStats).summary()
    return repr(run.stats) + json.dumps(run.stats, default=repr) + repr(summary)


def assert_failures_seen(run: Any, spider: MetaLoggingSpider) -> None:
    """The faults happened: the wrong password drew 407s, the dead proxy errors, the reload failed."""
    assert run.stats.get("polite/status/407", 0) >= 1, run.stats
    assert any(k.startswith("polite/exception/") for k in run.stats), run.stats
    assert spider.failures >= 2 and run.gave_up
    assert "kept the current pool" in run.log_text
    assert "_polite_lease" in run.log_text and "; request meta {" in run.log_text  # the metas were logged


@pytest_twisted.ensureDeferred
async def test_no_credential_in_any_output_of_a_failing_crawl(sandbox, tmp_path: Path) -> None:
    pages = 30
    sb = sandbox(sandbox_config(pages))
    proxies, good = pool(sb)
    path = tmp_path / "proxies.txt"
    path.write_text("\n".join(good) + "\n")
    loop, rewritten = bad_line_mid_crawl(sb, path, good)
    try:
        run = await fault_crawl(MetaLoggingSpider, settings(sb, tmp_path, proxies, path), tmp_path / "crawl.log",
                                base=sb.site_url("a"), pages=pages)
    finally:
        loop.stop()
    spider = run.result.crawler.spider
    assert rewritten and spider.metrics and 'status="407"' in spider.metrics  # the failures' endpoint labels
    assert_failures_seen(run, spider)
    log = sb.log()
    assert_pages_accounted(run, log, range(1, pages + 1))
    assert_no_traceback(run.log_text)
    jsonl = tmp_path / "stats.jsonl"
    texts = [run.log_text, outputs_of(run), spider.metrics]
    for secret in (PW, WRONG):
        assert_no_secret(secret, *texts, jsonl, report_of(jsonl, tmp_path), tmp_path / "crawl.log")


def redis_dump(url: str) -> str:
    """Every key and value in the Redis at *url*, as text."""
    import redis

    client = redis.Redis.from_url(url, decode_responses=True)
    read = {
        "string": client.get,
        "hash": client.hgetall,
        "list": lambda k: client.lrange(k, 0, -1),
        "set": lambda k: sorted(client.smembers(k)),
        "zset": lambda k: client.zrange(k, 0, -1, withscores=True),
    }
    out = []
    try:
        for key in client.scan_iter(count=1000):
            kind = client.type(key)
            value: Any = read[kind](key) if kind in read else kind
            out.append(f"{key} {value!r}")
    finally:
        client.close()
    return "\n".join(out)


@pytest.mark.once  # the Redis gate runs on asyncio in the current environment
@pytest.mark.parametrize("form", ["userinfo", "query"])
@pytest_twisted.ensureDeferred
async def test_no_credential_in_redis_or_the_log_with_a_password_protected_redis(
    sandbox, tmp_path: Path, form: str
) -> None:
    from redis_server import RedisServer

    server = RedisServer(tmp_path / "redis", password=REDIS_PW)
    try:
        state = server.url if form == "userinfo" else f"redis://127.0.0.1:{server.port}/0?password={REDIS_PW}"
        pages = 20
        sb = sandbox(sandbox_config(pages))
        proxies, good = pool(sb)
        path = tmp_path / "proxies.txt"
        path.write_text("\n".join(good) + "\n")
        dumps: list[str] = []
        watcher = LoopingCall(lambda: dumps.append(redis_dump(server.url)))  # leases, pins, held requests
        watcher.start(0.3)
        loop, rewritten = bad_line_mid_crawl(sb, path, good)
        try:
            run = await fault_crawl(
                MetaLoggingSpider,
                {**settings(sb, tmp_path, proxies, path), "POLITE_STATE": state, "POLITE_STATE_NAMESPACE": "sec"},
                tmp_path / "crawl.log", base=sb.site_url("a"), pages=pages,
            )
        finally:
            loop.stop()
            watcher.stop()
        dumps.append(redis_dump(server.url))
        spider = run.result.crawler.spider
        assert rewritten and spider.metrics and 'status="407"' in spider.metrics
        assert "sec:stats:" in dumps[-1] and "sec:pin:" in "".join(dumps)  # the scan saw the shared state
        assert_failures_seen(run, spider)
        assert_pages_accounted(run, sb.log(), range(1, pages + 1))
        assert_no_traceback(run.log_text)
        jsonl = tmp_path / "stats.jsonl"
        texts = [run.log_text, outputs_of(run), spider.metrics, *dumps]
        for secret in (PW, WRONG, REDIS_PW):
            assert_no_secret(secret, *texts, jsonl, report_of(jsonl, tmp_path))
        fleet = subprocess.run([sys.executable, "-m", "scrapy_polite", "fleet", state, "--namespace", "sec"],
                               capture_output=True, text=True, timeout=60)
        assert fleet.returncode == 0 and "1 process(es)" in fleet.stdout, fleet.stderr
        assert_no_secret(REDIS_PW, fleet.stdout + fleet.stderr)
        assert_no_secret(PW, fleet.stdout + fleet.stderr)
    finally:
        server.stop()
