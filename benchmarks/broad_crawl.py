"""Broad-crawl benchmarks through the sandbox's proxy fleet, each crawl in a fresh process.

``slots``: N requests to an unlimited target, each in its own download slot
(``many``) or all in one (``one``), with the package and with plain Scrapy
(round-robin proxies, Scrapy's DownloaderAwarePriorityQueue, which the package's
queue extends). Reported: pages/s and the process's peak RSS; the package's
memory per host beyond plain Scrapy's own growth is
``((polite many - polite one) - (plain many - plain one)) / N``.

``hosts``: H host keys (``download_slot`` per host name) with P pages each, at
the package's default politeness (per-host cap 2, one request per endpoint,
spacing 0.8-1.6 s per endpoint and host) against plain Scrapy's defaults:
pages/min and peak RSS.

Each measure is the median of ``--runs`` crawls (default 3).

``python benchmarks/broad_crawl.py [--scenario slots|hosts|all] [--runs 3] [--requests 20000]``
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

PROXIES = 8


def child(spec: dict[str, Any]) -> dict[str, Any]:
    """One crawl in this process: the spider yields every request at once."""
    import scrapy
    from scrapy import signals
    from scrapy.crawler import CrawlerProcess

    base, n, per, polite = spec["base"], spec["hosts"], spec["per_host"], spec["polite"]

    class Broad(scrapy.Spider):
        name = "broad"

        async def start(self) -> Any:
            page = 0
            for i in range(n):
                for _ in range(per):
                    page += 1
                    yield scrapy.Request(f"{base}/item/{page % spec['pages'] + 1}", dont_filter=True,
                                         meta={"download_slot": spec["slot_fmt"].format(i)})

        def parse(self, response: Any) -> Any:
            return None

    settings: dict[str, Any] = {
        "TELNETCONSOLE_ENABLED": False, "ROBOTSTXT_OBEY": False, "LOG_LEVEL": "WARNING",
        "DOWNLOAD_TIMEOUT": 10, "CLOSESPIDER_TIMEOUT": spec["time_limit"], "COOKIES_ENABLED": False,
        **spec["settings"],
    }
    if polite:
        settings.update({"ADDONS": {"scrapy_polite.Addon": 500}, "POLITE_PROXIES": spec["proxies"],
                         "POLITE_LOG_INTERVAL": 0})
    else:
        settings.update({"BENCH_PROXIES": spec["proxies"],
                         "DOWNLOADER_MIDDLEWARES": {"bench_mw.RoundRobinProxyMiddleware": 740},
                         "SCHEDULER_PRIORITY_QUEUE": "scrapy.pqueues.DownloaderAwarePriorityQueue"})
    process = CrawlerProcess(settings)
    crawler = process.create_crawler(Broad)
    marks: dict[str, float] = {}
    crawler.signals.connect(lambda spider: marks.setdefault("open", time.time()), signal=signals.spider_opened,
                            weak=False)
    crawler.signals.connect(lambda spider, reason: marks.setdefault("close", time.time()),
                            signal=signals.spider_closed, weak=False)
    rss_start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    process.crawl(crawler)
    process.start()
    stats = crawler.stats.get_stats()
    pages = stats.get("downloader/response_status_count/200", 0)
    seconds = marks.get("close", time.time()) - marks.get("open", time.time())
    return {
        "pages": pages, "seconds": seconds, "pages_per_s": pages / seconds if seconds else 0.0,
        "peak_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "rss_at_start_kb": rss_start,
        "finish_reason": stats.get("finish_reason"),
    }


def crawl(spec: dict[str, Any]) -> dict[str, Any]:
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(spec, f)
    out = subprocess.run([sys.executable, __file__, "--child", f.name], capture_output=True, text=True,
                         timeout=spec["time_limit"] + 60, check=False)
    Path(f.name).unlink()
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        raise RuntimeError(f"crawl failed: {out.stderr[-2000:]}")
    return json.loads(lines[-1])


def median_of(runs: list[dict[str, Any]], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def scenario_slots(sb: Any, requests: int, runs: int) -> dict[str, Any]:
    common = {"base": sb.site_url("a"), "proxies": sb.proxy_urls, "pages": 1000, "time_limit": 300}
    settings_polite = {"CONCURRENT_REQUESTS": 64, "POLITE_DELAY": 0, "POLITE_ENDPOINT_CONCURRENCY": 8,
                       "POLITE_HOST_CONCURRENCY": 64}
    settings_plain = {"CONCURRENT_REQUESTS": 64, "CONCURRENT_REQUESTS_PER_DOMAIN": 64, "DOWNLOAD_DELAY": 0}
    out: dict[str, Any] = {"requests": requests}
    for polite in (True, False):
        for mode in ("many", "one"):
            spec = {**common, "polite": polite, "settings": settings_polite if polite else settings_plain,
                    "hosts": requests if mode == "many" else 1, "per_host": 1 if mode == "many" else requests,
                    "slot_fmt": "host{}" if mode == "many" else "one"}
            rs = [crawl(spec) for _ in range(runs)]
            out[f"{'polite' if polite else 'plain'}_{mode}"] = {
                "pages_per_s": median_of(rs, "pages_per_s"), "peak_rss_kb": median_of(rs, "peak_rss_kb"),
                "pages": median_of(rs, "pages"), "runs": rs,
            }
    pm, po = out["polite_many"], out["polite_one"]
    sm, so = out["plain_many"], out["plain_one"]
    excess_kb = ((pm["peak_rss_kb"] - po["peak_rss_kb"]) - (sm["peak_rss_kb"] - so["peak_rss_kb"])) / requests
    speed = pm["pages_per_s"] / po["pages_per_s"]
    out["checks"] = {
        "kb_per_host_beyond_plain": round(excess_kb, 3), "memory_ok": excess_kb <= 0.5,
        "polite_many_over_one": round(speed, 3), "speed_ok": speed >= 0.8,
        "plain_many_over_one": round(sm["pages_per_s"] / so["pages_per_s"], 3),
    }
    return out


def scenario_hosts(sb: Any, hosts: int, per_host: int, runs: int) -> dict[str, Any]:
    common = {"base": sb.site_url("a"), "proxies": sb.proxy_urls, "pages": 1000, "time_limit": 240,
              "hosts": hosts, "per_host": per_host, "slot_fmt": "site{:05d}.example", "settings": {}}
    out: dict[str, Any] = {"hosts": hosts, "per_host": per_host}
    for polite in (True, False):
        rs = [crawl({**common, "polite": polite}) for _ in range(runs)]
        out["polite" if polite else "plain"] = {
            "pages_per_min": 60 * median_of(rs, "pages_per_s"), "peak_rss_kb": median_of(rs, "peak_rss_kb"),
            "pages": median_of(rs, "pages"), "runs": rs,
        }
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--child")
    ap.add_argument("--scenario", default="all", choices=["slots", "hosts", "all"])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--requests", type=int, default=20000)
    ap.add_argument("--hosts", type=int, default=3000)
    ap.add_argument("--per-host", type=int, default=2)
    ns = ap.parse_args()
    if ns.child:
        print(json.dumps(child(json.loads(Path(ns.child).read_text()))))
        return 0
    from scrapy_polite.sandbox import ProxyConfig, Sandbox, SandboxConfig, SiteConfig

    result: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        sb = Sandbox(SandboxConfig(sites=[SiteConfig(name="a", pages=1000, latency=[0.002, 0.005])],
                                   proxies=ProxyConfig(count=PROXIES)), workdir=Path(tmp))
        sb.start()
        try:
            if ns.scenario in ("slots", "all"):
                result["slots"] = scenario_slots(sb, ns.requests, ns.runs)
            if ns.scenario in ("hosts", "all"):
                result["hosts"] = scenario_hosts(sb, ns.hosts, ns.per_host, ns.runs)
        finally:
            sb.stop()
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
