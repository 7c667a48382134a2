"""The fleet benchmark: four crawler processes sharing one proxy pool through Redis, against one.

Each run crawls the same item pages of a fresh sandbox site through the same 8 proxies three
times, each with scrapy-redis's shared request queue: with one ``scrapy crawl fleet`` process and
with four, both keeping their state in Redis (``POLITE_STATE``), and with one process keeping its
state in memory, for reference. Judged from the site's access log:
successful pages/s over the middle 80% of the crawl and over all of it, 429s, the most
requests in flight through one exit IP at once, and requests inside a Retry-After window.
The four processes' pages/s over the one process's is computed per run, and the median counts.

    python benchmarks/fleet_bench.py [--quick] [--runs 3] [--adaptive] [--only per-ip,host-cap] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
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

from metrics import compute  # noqa: E402
from redis_gate_bench import start_redis  # noqa: E402
from scenarios import Scenario  # noqa: E402

from scrapy_polite.sandbox import ProxyConfig, SandboxConfig, SiteConfig  # noqa: E402
from scrapy_polite.sandbox.client import Sandbox  # noqa: E402

PROXIES = 8
#: Targets from the issue: four processes reach this share of one process's pages/s.
TARGET_RATIO = 0.9
#: Seconds past the site's own pace before a fleet is stopped (start-up, idle close).
SLACK = 40.0
#: The three crawls of a run: one process with its state in memory, one and four through Redis.
SIDES = ("memory", "one", "four")
#: What each crawl's result keeps of the access log's metrics.
KEPT = ("ok", "requests", "items_ok", "items_total", "lost_items", "duplicate_200s", "s429", "s403", "rate_429",
        "pages_per_min", "steady_rate", "steady_efficiency", "max_inflight_ip", "inside_retry_after")


def scenarios(quick: bool) -> list[Scenario]:
    """Per-IP and host-wide caps, sized so one process needs about 20 s (quick) or 60 s at the limit."""
    scale = 1 if quick else 3
    per_ip_pages, host_pages = 160 * scale, 60 * scale
    return [
        Scenario("per-ip", f"1 req/s and 1 in flight per IP, {PROXIES} proxies",
                 SandboxConfig(sites=[SiteConfig(name="a", pages=per_ip_pages, per_ip_rate=1.0, per_ip_burst=1,
                                                 per_ip_max_inflight=1, retry_after=2)],
                               proxies=ProxyConfig(count=PROXIES, gateway=False)),
                 time_limit=per_ip_pages / PROXIES + SLACK, page_budget=per_ip_pages,
                 limit_note=f"{PROXIES} proxies x 1 req/s", limit_steps=[(0.0, PROXIES * 1.0)]),
        Scenario("host-cap", f"3 req/s for the whole host (burst 1), {PROXIES} proxies",
                 SandboxConfig(sites=[SiteConfig(name="a", pages=host_pages, host_rate=3.0, host_burst=1,
                                                 retry_after=2)],
                               proxies=ProxyConfig(count=PROXIES, gateway=False)),
                 time_limit=host_pages / 3.0 + SLACK, page_budget=host_pages,
                 limit_note="host_rate 3 req/s", limit_steps=[(0.0, 3.0)]),
    ]


def crawl(sc: Scenario, processes: int, redis_url: str, work: Path, adaptive: bool,
          state: str | None = None) -> dict[str, Any]:
    """One crawl of *sc*'s item pages by *processes* ``scrapy crawl fleet`` processes; metrics from the log.

    The queue is always scrapy-redis's; the package's state is *state* (the same Redis by default).
    """
    import redis

    pages = sc.config.sites[0].pages
    sb = Sandbox(sc.config, work / "sandbox")
    sb.start()
    try:
        client = redis.Redis.from_url(redis_url)
        client.flushdb()
        client.rpush("fleet:start_urls", *[f"{sb.site_url('a')}/item/{i}" for i in range(1, pages + 1)])
        client.close()
        settings = {
            "POLITE_PROXIES": ",".join(sb.proxy_urls), "POLITE_PROXIES_FILE": "",
            "POLITE_STATE": state or redis_url,
            "POLITE_ADAPTIVE": str(adaptive), "POLITE_LOG_INTERVAL": "0", "REDIS_URL": redis_url,
            "MAX_IDLE_TIME_BEFORE_CLOSE": "3", "TELNETCONSOLE_ENABLED": "False", "DOWNLOAD_TIMEOUT": "10",
            "CLOSESPIDER_TIMEOUT": str(int(sc.time_limit)), "LOG_LEVEL": "INFO",
            # scrapy-redis takes this many URLs at a time: each process its share.
            "CONCURRENT_REQUESTS": str(-(-pages // processes)),
            # The first process to finish must not flush the shared queue under the others.
            "SCHEDULER_PERSIST": "True",
        }
        # This checkout's package, as run.py's crawls use, whatever the environment has installed.
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "example_project")])}
        procs = []
        t0 = time.time()
        for i in range(processes):
            args = [sys.executable, "-m", "scrapy", "crawl", "fleet",
                    "-s", f"LOG_FILE={work / f'crawl{i}.log'}"]
            for k, v in settings.items():
                args += ["-s", f"{k}={v}"]
            procs.append(subprocess.Popen(args, cwd=ROOT / "example_project", env=env))
        deadline = t0 + sc.time_limit + 30
        for p in procs:
            try:
                p.wait(max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)
        log = sb.log()
    finally:
        sb.stop()
    m = compute(log, sc, t0)
    return {"processes": processes, "rcs": [p.returncode for p in procs],
            **{k: m.get(k) for k in KEPT}}


def one_run(sc: Scenario, redis_url: str, out: Path, index: int, adaptive: bool) -> dict[str, Any]:
    """One process, then four, on fresh sandboxes; the ratio of their pages/s.

    One process with the state in memory runs too, for reference: what sharing the state costs.
    """
    memory = crawl(sc, 1, redis_url, out / f"{sc.name}-{index}-memory", adaptive, state="memory")
    one = crawl(sc, 1, redis_url, out / f"{sc.name}-{index}-one", adaptive)
    four = crawl(sc, 4, redis_url, out / f"{sc.name}-{index}-four", adaptive)
    return {"scenario": sc.name, "run": index, "memory": memory, "one": one, "four": four,
            "steady_ratio": (four["steady_rate"] or 0.0) / max(one["steady_rate"] or 0.0, 1e-9),
            "ratio": four["pages_per_min"] / max(one["pages_per_min"], 1e-9)}


def checks(run: dict[str, Any]) -> list[str]:
    """What a run must show whatever its speed: every process done, every item fetched, no block,
    one request per exit IP."""
    bad = []
    for side in SIDES:
        r = run[side]
        if any(r["rcs"]):
            bad.append(f"{side}: exit codes {r['rcs']}")
        if r["items_ok"] != r["items_total"]:
            bad.append(f"{side}: {r['items_ok']} of {r['items_total']} items fetched")
        if r["s403"]:
            bad.append(f"{side}: {r['s403']} blocked requests")
        if r["max_inflight_ip"] > 1:
            bad.append(f"{side}: {r['max_inflight_ip']} requests at once through one exit IP")
        if r["inside_retry_after"]:
            bad.append(f"{side}: {r['inside_retry_after']} requests inside a Retry-After window")
    return bad


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| scenario | 1 process, state in memory: pages/s (steady) | 1 process: pages/s (steady) | "
             "4 processes: pages/s (steady) | 4 / 1 (steady) | 4 / 1 (whole crawl) | 429s 1 / 4 | "
             "most in flight per IP | checks |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        cells = [r["scenario"], *(f"{r[side]['steady_rate']:.2f}" for side in SIDES),
                 f"**{r['steady_ratio']:.2f}** (runs {', '.join(f'{x:.2f}' for x in r['ratios'])})",
                 f"{r['ratio']:.2f}", f"{r['one']['s429']} / {r['four']['s429']}",
                 str(max(r[side]["max_inflight_ip"] for side in SIDES)), "; ".join(r["failed"]) or "pass"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--adaptive", action="store_true", help="POLITE_ADAPTIVE in every process")
    parser.add_argument("--only", default="", help="comma-separated scenario names")
    parser.add_argument("--out", default=str(HERE / "out-fleet"))
    ns = parser.parse_args()
    out = Path(ns.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    wanted = set(filter(None, ns.only.split(",")))
    rows, every, failed = [], [], False
    with tempfile.TemporaryDirectory() as tmp:
        server, url = start_redis(Path(tmp))
        try:
            for sc in scenarios(ns.quick):
                if wanted and sc.name not in wanted:
                    continue
                runs = []
                for i in range(ns.runs):
                    runs.append(one_run(sc, url, out, i, ns.adaptive))
                    brief = {k: runs[-1][k] for k in ("scenario", "run", "steady_ratio", "ratio")}
                    print(json.dumps(brief), flush=True)
                every += runs
                runs.sort(key=lambda r: r["steady_ratio"])
                mid = dict(runs[len(runs) // 2])
                mid["ratios"] = [r["steady_ratio"] for r in runs]
                mid["ratio"] = statistics.median(r["ratio"] for r in runs)
                mid["failed"] = [f"run {r['run']}: {b}" for r in runs for b in checks(r)]
                if mid["steady_ratio"] < TARGET_RATIO:
                    mid["failed"].append(f"median 4/1 {mid['steady_ratio']:.2f} < {TARGET_RATIO}")
                failed |= bool(mid["failed"])
                rows.append(mid)
                (out / "fleet.json").write_text(json.dumps({"rows": rows, "runs": every}, indent=1))
        finally:
            server.terminate()
            server.wait(10)
    text = table(rows)
    (out / "fleet.md").write_text(text + "\n")
    print(text)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
