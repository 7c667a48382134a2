"""Fleet-wide stats: every process's snapshot in Redis, merged on demand.

With ``POLITE_STATE = "redis://…"`` each process publishes its
:meth:`PoliteStats.summary` every :data:`PUBLISH_INTERVAL` seconds and once at
close, with its latency histograms HDR-encoded, so percentiles merge exactly
instead of being averaged. ``python -m scrapy_polite fleet REDIS_URL`` reads
them back and prints one summary for the whole fleet, in the same layout as a
single crawl's.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from collections.abc import Iterable
from typing import Any

from hdrh.histogram import HdrHistogram

from scrapy_polite.errors import scrub
from scrapy_polite.gate.redis.state import Keys, import_redis, mask_url, sync_client

#: Seconds between two snapshots of one process.
PUBLISH_INTERVAL = 5.0
#: How long a snapshot stays in Redis after its last update.
SNAPSHOT_TTL = 7 * 24 * 3600
#: Counters summed across processes, at the top level and per host/endpoint.
_TOTALS = ("attempts", "success", "rate_limited", "bans", "gave_up")
_PERCENTILES = (50, 95, 99)


def _encode(hist: HdrHistogram) -> str:
    """HDR's own compressed, base64 wire form: small, and exact to merge."""
    return hist.encode().decode("ascii")


def _decode(text: str) -> HdrHistogram:
    return HdrHistogram.decode(text.encode("ascii"))


def snapshot(stats: Any, finished: bool = False, summary: dict[str, Any] | None = None) -> dict[str, Any]:
    """What one process publishes: its *summary* (computed if not given), its raw histograms and its clock."""
    s = dict(stats.summary() if summary is None else summary)
    s.pop("sessions", None)  # the fleet's pins live in Redis already
    s["started"] = stats.started
    s["updated"] = time.time()
    s["finished"] = finished
    s["histograms"] = {
        "latency": _encode(stats.latency),
        "wait": _encode(stats.wait),
        "hosts": {host: _encode(h.latency) for host, h in stats.hosts.items() if h.latency is not None},
    }
    return s


def _percentiles(hist: HdrHistogram | None, prefix: str) -> dict[str, float | None]:
    total = hist is not None and hist.get_total_count() > 0
    return {
        f"{prefix}_p{p}": hist.get_value_at_percentile(p) / 1000.0 if total else None  # type: ignore[union-attr]
        for p in _PERCENTILES
    }


def _add(into: dict[str, HdrHistogram], key: str, encoded: str | None) -> None:
    if not encoded:
        return
    hist = _decode(encoded)
    if key in into:
        into[key].add(hist)
    else:
        into[key] = hist


def _sum_counts(parts: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Attempts, successes, 429s, bans and statuses added up."""
    out: dict[str, Any] = {k: 0 for k in _TOTALS}
    statuses: Counter[str] = Counter()
    ips: Counter[str] = Counter()
    for part in parts:
        for k in _TOTALS:
            out[k] += part.get(k, 0)
        statuses.update(part.get("statuses", {}))
        ips.update(part.get("requests_per_exit_ip", {}))
    out["statuses"] = dict(statuses)
    out["requests_per_exit_ip"] = dict(ips)
    out["exit_ips"] = len(ips)
    return out


def merge(snapshots: list[dict[str, Any]], now: float | None = None) -> dict[str, Any]:
    """One summary for the whole fleet, shaped like :meth:`PoliteStats.summary`.

    Pages/min is the fleet's successes over the span from the first process's
    start to the last snapshot; the window rate adds up the processes still
    running (their windows cover the same recent seconds).
    """
    now = time.time() if now is None else now
    if not snapshots:
        raise ValueError("no snapshots to merge")
    started = min(s["started"] for s in snapshots)
    updated = max(s["updated"] for s in snapshots)
    span = max(1e-9, updated - started)
    total = _sum_counts(snapshots)
    hists: dict[str, HdrHistogram] = {}
    host_hists: dict[str, HdrHistogram] = {}
    by_host: dict[str, list[dict[str, Any]]] = {}
    by_endpoint: dict[str, list[dict[str, Any]]] = {}
    exceptions: Counter[str] = Counter()
    sources: Counter[str] = Counter()
    live = [s for s in snapshots if not s["finished"] and s["updated"] >= now - 3 * PUBLISH_INTERVAL]
    for s in snapshots:
        _add(hists, "latency", s["histograms"]["latency"])
        _add(hists, "wait", s["histograms"]["wait"])
        for host, encoded in s["histograms"]["hosts"].items():
            _add(host_hists, host, encoded)
        for host, h in s["hosts"].items():
            by_host.setdefault(host, []).append(h)
        for ep, e in s["endpoints"].items():
            by_endpoint.setdefault(ep, []).append(e)
        exceptions.update(s["exceptions"])
        sources.update(s["exit_ip_sources"])
    hosts = {
        host: {**_sum_counts(parts), **_percentiles(host_hists.get(host), "latency")}
        for host, parts in by_host.items()
    }
    endpoints = {}
    for ep, parts in by_endpoint.items():
        counts = _sum_counts(parts)
        del counts["requests_per_exit_ip"], counts["exit_ips"]
        endpoints[ep] = counts
    attempts = total["attempts"]
    return {
        "processes": len(snapshots),
        "running": len(live),
        "elapsed": round(span, 3),
        "pages_per_min": round(total["success"] * 60.0 / span, 2),
        "pages_per_min_window": round(sum(s["pages_per_min_window"] for s in live), 2),
        "success_rate": round(total["success"] / attempts, 4) if attempts else None,
        **{k: total[k] for k in _TOTALS},
        "exceptions": dict(exceptions),
        **_percentiles(hists.get("latency"), "latency"),
        **_percentiles(hists.get("wait"), "wait"),
        "exit_ips": total["exit_ips"],
        "requests_per_exit_ip": total["requests_per_exit_ip"],
        "exit_ip_sources": dict(sources),
        "hosts": hosts,
        "endpoints": endpoints,
    }


# -- Redis ------------------------------------------------------------------


def publish_commands(client: Any, keys: Keys, process_id: str, snap: dict[str, Any]) -> Any:
    """Queue one snapshot on *client* (a pipeline, sync or asyncio); the caller executes it."""
    key = keys.stats(process_id)
    client.hset(key, mapping={"data": json.dumps(snap, separators=(",", ":")), "updated": snap["updated"]})
    client.expire(key, SNAPSHOT_TTL)
    client.zadd(keys.stats_procs, {process_id: snap["updated"]})
    # Processes whose snapshot has expired leave the index too, so it does not grow run after run.
    client.zremrangebyscore(keys.stats_procs, "-inf", snap["updated"] - SNAPSHOT_TTL)
    client.expire(keys.stats_procs, SNAPSHOT_TTL)
    return client


def read_snapshots(url: str, namespace: str) -> list[dict[str, Any]]:
    """Every process's latest snapshot under *namespace* (expired ones are forgotten)."""
    keys = Keys(namespace)
    client = sync_client(url, timeout=5)
    try:
        out = []
        for proc in client.zrange(keys.stats_procs, 0, -1):
            data = client.hget(keys.stats(proc), "data")
            if data is None:
                continue
            snap = json.loads(data)
            snap["process"] = proc
            out.append(snap)
        return out
    finally:
        client.close()


def clear_snapshots(url: str, namespace: str) -> int:
    """Forget every published snapshot under *namespace*; returns how many there were."""
    keys = Keys(namespace)
    client = sync_client(url, timeout=5)
    try:
        procs = client.zrange(keys.stats_procs, 0, -1)
        if procs:
            client.delete(*(keys.stats(p) for p in procs))
        client.delete(keys.stats_procs)
        return len(procs)
    finally:
        client.close()


# -- command line -------------------------------------------------------------


def format_processes(snapshots: list[dict[str, Any]], now: float) -> str:
    """One line per process: state, age of its last snapshot, its own counts."""
    w = max([len("process"), *(len(s["process"]) for s in snapshots)])
    lines = [f"  {'process':<{w}} {'state':>8} {'updated':>9} {'attempts':>8} {'ok':>7} {'429':>6} {'pages/min':>9}"]
    for s in sorted(snapshots, key=lambda s: s["started"]):
        state = "finished" if s["finished"] else "running"
        lines.append(
            f"  {s['process']:<{w}} {state:>8} {now - s['updated']:>8.0f}s {s['attempts']:>8} "
            f"{s['success']:>7} {s['rate_limited']:>6} {s['pages_per_min']:>9.1f}"
        )
    return "\n".join(lines)


#: One line on what the command does: its --help, ``scrapy -h`` and ``python -m scrapy_polite``.
DESCRIPTION = "Fleet-wide stats of every crawler process sharing POLITE_STATE."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The command's arguments, shared by ``polite-fleet``, ``scrapy polite-fleet`` and ``python -m``."""
    parser.add_argument("url", help="the POLITE_STATE Redis URL")
    parser.add_argument("--namespace", default="polite", help="POLITE_STATE_NAMESPACE (default: polite)")
    parser.add_argument("--json", action="store_true", help="print the merged summary as JSON")
    parser.add_argument("--clear", action="store_true", help="forget the published snapshots, e.g. before a new run")


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    parser = argparse.ArgumentParser(prog=prog, description=DESCRIPTION)
    add_arguments(parser)
    return run(parser.parse_args(argv))


def run(args: argparse.Namespace) -> int:
    """Print (or clear) the fleet's stats *args* ask for; returns the exit code."""
    redis = import_redis()
    label = mask_url(args.url)
    try:
        if args.clear:
            print(f"cleared {clear_snapshots(args.url, args.namespace)} snapshot(s) from {label}")
            return 0
        snaps = read_snapshots(args.url, args.namespace)
    except redis.RedisError as exc:
        print(f"cannot read {label}: {scrub(str(exc))}", file=sys.stderr)
        return 1
    if not snaps:
        print(f"no process has published stats under namespace {args.namespace!r} at {label}", file=sys.stderr)
        return 1
    now = time.time()
    merged = merge(snaps, now)
    if args.json:
        merged["per_process"] = {s["process"]: {k: s[k] for k in (*_TOTALS, "started", "updated", "finished")}
                                 for s in snaps}
        print(json.dumps(merged, indent=2, sort_keys=True))
        return 0
    from scrapy_polite.metrics.stats import format_summary

    print(f"scrapy-polite fleet {args.namespace!r} at {label}: {merged['processes']} process(es), "
          f"{merged['running']} running")
    print(format_processes(snaps, now))
    print()
    print(format_summary(merged))
    return 0
