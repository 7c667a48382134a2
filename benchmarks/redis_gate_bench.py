"""Benchmark of :class:`scrapy_polite.gate.redis.backend.RedisGate` against a real ``redis-server``.

One request to each of N hosts (acquire, grant, release, one at a time), then the
hosts go idle: µs per request (wall and this process's CPU), the process's resident memory
after the idle hosts were evicted, and the Redis keys left once their TTLs have passed. Each
run is its own process and namespace, so memory and keys are one run's; the median of the
runs counts.

    python benchmarks/redis_gate_bench.py                   # 1, 1k, 10k, 100k hosts, 3 runs each
    python benchmarks/redis_gate_bench.py --hosts 1,1000 --runs 1
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

#: Short lifetimes, so the run can wait them out: host records, pins, leases, idle keep.
HOST_TTL, LEASE_TTL, IDLE_KEEP = 1.0, 1.0, 0.5
ENDPOINTS, IN_FLIGHT = 16, 1
#: Requests in each run at least, spread over its hosts, so the small runs are not one sample.
MIN_REQUESTS = 2000


def rss_kib() -> int:
    """This process's resident set size (Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


async def child(url: str, namespace: str, n_hosts: int) -> dict[str, Any]:
    """One run: the workload, then idle, then what is left in this process and in Redis."""
    import redis

    from scrapy_polite.gate.redis.backend import RedisGate
    from scrapy_polite.pool.endpoints import Endpoint

    eps = [Endpoint(key=f"http://10.0.0.{i}:8000", url=f"http://10.0.0.{i}:8000", label=f"ep{i}")
           for i in range(ENDPOINTS)]
    gate = RedisGate(
        eps, url=url, namespace=namespace, host_concurrency=1000, endpoint_concurrency=1, delay=(0.0, 0.0),
        backoff=(1.0, 5.0), max_failures=3, lease_ttl=LEASE_TTL, pin_ttl=HOST_TTL, host_ttl=HOST_TTL,
        idle_keep=IDLE_KEEP, poll=0.01,
    )
    gate.start()
    loop = asyncio.get_running_loop()
    requests = max(n_hosts, MIN_REQUESTS)
    hosts = iter([f"host{i % n_hosts}.example" for i in range(requests)])
    gc.collect()
    rss_start = rss_kib()

    async def worker() -> None:
        for host in hosts:
            lease = await gate.acquire(host).asFuture(loop)
            gate.release(lease)

    wall, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(worker() for _ in range(IN_FLIGHT)))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    in_use = {"hosts": len(gate.hosts), "sessions": len(gate.sessions())}
    rss_busy = rss_kib()
    # Idle: the renewal loop evicts what stayed idle for idle_keep.
    await asyncio.sleep(IDLE_KEEP + LEASE_TTL)
    maps = {name: len(getattr(gate, attr, ())) for name, attr in (
        ("hosts", "_hosts"), ("sessions", "_sessions"), ("pumps", "_pumps"), ("wakeups", "_wakeups"),
        ("signals", "_signals"), ("spacing", "_spacing"))}
    gc.collect()
    rss_idle = rss_kib()
    admin = redis.Redis.from_url(url, decode_responses=True)
    keys_busy = sum(1 for _ in admin.scan_iter(f"{namespace}:*", count=10_000))
    d = gate.stop()
    if d is not None:
        await d.asFuture(loop)
    await asyncio.sleep(2 * LEASE_TTL + HOST_TTL + 0.5)  # every TTL a request set has passed
    left = sorted(admin.scan_iter(f"{namespace}:*", count=10_000))
    admin.close()
    return {
        "hosts": n_hosts, "requests": requests,
        "us_per_request_wall": wall / requests * 1e6, "us_per_request_cpu": cpu / requests * 1e6,
        "rss_start_kib": rss_start, "rss_busy_kib": rss_busy, "rss_idle_kib": rss_idle,
        "in_use_after_run": in_use, "maps_after_idle": maps,
        "keys_after_run": keys_busy, "keys_after_ttl": len(left),
        "keys_left": sorted({k.split(":")[1] + ":" for k in left}),
    }


def start_redis(workdir: Path) -> tuple[subprocess.Popen[bytes], str]:
    """A throwaway redis-server on a free loopback port, without persistence."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("redis-server is not installed")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--dir", str(workdir)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc, f"redis://127.0.0.1:{port}/0"
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit("redis-server did not start")


def median_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out = dict(runs[0])
    for key, value in runs[0].items():
        if isinstance(value, (int, float)):
            out[key] = statistics.median(r[key] for r in runs)
    out["runs"] = len(runs)
    return out


def table(results: list[dict[str, Any]]) -> str:
    base = results[0]
    lines = ["| hosts | requests | µs/request (wall) | × 1 host | µs/request (CPU) | × 1 host | "
             "RSS after idle (MiB) | maps after idle | keys after run | keys after TTLs |",
             "|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|"]
    for r in results:
        maps = ", ".join(f"{k} {v}" for k, v in r["maps_after_idle"].items() if v) or "all empty"
        lines.append(
            f"| {r['hosts']:,} | {r['requests']:,} | {r['us_per_request_wall']:.0f} | "
            f"{r['us_per_request_wall'] / base['us_per_request_wall']:.2f} | {r['us_per_request_cpu']:.0f} | "
            f"{r['us_per_request_cpu'] / base['us_per_request_cpu']:.2f} | "
            f"{r['rss_idle_kib'] / 1024:.1f} | {maps} | {r['keys_after_run']:,} | "
            f"{r['keys_after_ttl']} {' '.join(r['keys_left'])} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", default="1,1000,10000,100000")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", type=Path, help="write every run and the medians here")
    parser.add_argument("--child", nargs=3, metavar=("URL", "NAMESPACE", "HOSTS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        url, namespace, n = args.child
        print(json.dumps(asyncio.run(child(url, namespace, int(n)))))
        return
    with tempfile.TemporaryDirectory() as tmp:
        server, url = start_redis(Path(tmp))
        try:
            every, results = [], []
            for n in (int(x) for x in args.hosts.split(",")):
                runs = []
                for i in range(args.runs):
                    out = subprocess.run([sys.executable, __file__, "--child", url, f"b{n}r{i}", str(n)],
                                         capture_output=True, text=True, timeout=600, check=True)
                    runs.append(json.loads(out.stdout.splitlines()[-1]))
                    print(f"{n} hosts, run {i + 1}: {runs[-1]['us_per_request_wall']:.0f} µs/request", flush=True)
                every += runs
                results.append(median_of(runs))
        finally:
            server.terminate()
            server.wait(10)
    print(table(results))
    if args.json:
        args.json.write_text(json.dumps({"runs": every, "medians": results}, indent=1))


if __name__ == "__main__":
    main()
