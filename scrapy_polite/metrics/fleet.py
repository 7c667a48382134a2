"""Fleet-wide stats: the snapshot each process publishes, and their merge into one summary.

With ``POLITE_STATE = "redis://…"`` each process publishes its
:meth:`PoliteStats.summary` every :data:`PUBLISH_INTERVAL` seconds and once at
close, with its latency histograms HDR-encoded, so percentiles merge exactly
instead of being averaged. Stored by :mod:`scrapy_polite.metrics.fleet_store`,
read back by ``scrapy polite-fleet`` (:mod:`scrapy_polite.cli.fleet`).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable
from typing import Any

from hdrh.histogram import HdrHistogram

from scrapy_polite.metrics.percentiles import summary_fields

#: Seconds between two snapshots of one process.
PUBLISH_INTERVAL = 5.0
#: How long a snapshot stays in Redis after its last update.
SNAPSHOT_TTL = 7 * 24 * 3600
#: Counters summed across processes, at the top level and per host/endpoint.
TOTALS = ("attempts", "success", "rate_limited", "bans", "gave_up")


def _encode(hist: HdrHistogram) -> str:
    """HDR's own compressed, base64 wire form: small, and exact to merge."""
    return hist.encode().decode("ascii")


def _decode(text: str) -> HdrHistogram:
    return HdrHistogram.decode(text.encode("ascii"))


def snapshot(stats: Any, finished: bool = False, summary: dict[str, Any] | None = None) -> dict[str, Any]:
    """What one process publishes: its *summary* (computed if not given), its raw histograms and its clock."""
    # The fleet's pins live in Redis already: no walk of the sessions every publish.
    s = dict(stats.summary(sessions=False) if summary is None else summary)
    s.pop("sessions", None)
    s["started"] = stats.started
    s["updated"] = time.time()
    s["finished"] = finished
    s["histograms"] = {
        "latency": _encode(stats.latency),
        "wait": _encode(stats.wait),
        "hosts": {host: _encode(h.latency) for host, h in stats.hosts.items() if h.latency is not None},
    }
    return s


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
    out: dict[str, Any] = {k: 0 for k in TOTALS}
    statuses: Counter[str] = Counter()
    ips: Counter[str] = Counter()
    for part in parts:
        for k in TOTALS:
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
        host: {**_sum_counts(parts), **summary_fields(host_hists.get(host), "latency")}
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
        **{k: total[k] for k in TOTALS},
        "exceptions": dict(exceptions),
        **summary_fields(hists.get("latency"), "latency"),
        **summary_fields(hists.get("wait"), "wait"),
        "exit_ips": total["exit_ips"],
        "requests_per_exit_ip": total["requests_per_exit_ip"],
        "exit_ip_sources": dict(sources),
        "hosts": hosts,
        "endpoints": endpoints,
    }
