"""What the stats do when the spider closes: the closing ``polite/`` keys, and the Prometheus server's stop.

Per-host and per-endpoint keys are kept for the busiest ``POLITE_STATS_TOP`` names
each (the rest summed under ``(other)``), so the stats dump stays small however
broad the crawl.
"""

from __future__ import annotations

from typing import Any

from scrapy_polite.metrics.percentiles import REPORTED
from scrapy_polite.metrics.tables import fold_top
from scrapy_polite.metrics.top import key_name


def closing_values(s: dict[str, Any], top: int, hosts_folded: int, sessions_cap: int) -> dict[str, Any]:
    """The closing stats keys and values of summary *s*, in the order they are written.

    *hosts_folded*: host rows already folded into ``(other)`` during the crawl;
    *sessions_cap*: ``POLITE_STATS_SESSIONS_MAP``, how many sessions the map lists.
    """
    values = _overall(s)
    hosts, folded = fold_top(s["hosts"], top)
    values["polite/hosts_folded"] = folded + hosts_folded
    for host, h in hosts.items():
        values.update(_host(f"polite/host/{host}", h))
    endpoints, folded = fold_top(s["endpoints"], top)
    values["polite/endpoints_folded"] = folded
    for ep, e in endpoints.items():
        values[f"polite/endpoint/{key_name(ep)}/attempts"] = e["attempts"]
        for label, n in e["statuses"].items():
            values[f"polite/endpoint/{key_name(ep)}/status/{label}"] = n
    sessions = s["sessions"]
    if sessions_cap:
        values["polite/sessions_map"] = dict(sorted(sessions.items())[:sessions_cap])
    values["polite/sessions_map_left_out"] = max(0, len(sessions) - sessions_cap)
    return values


def _overall(s: dict[str, Any]) -> dict[str, Any]:
    """The crawl's rates, percentiles and requests per exit IP."""
    values = {f"polite/{key}": s[key] for key in ("pages_per_min", "pages_per_min_window", "success_rate", "exit_ips")}
    for name in ("latency", "wait"):
        for p in REPORTED:
            if s[f"{name}_p{p}"] is not None:
                values[f"polite/{name}/p{p}"] = s[f"{name}_p{p}"]
    for ip, n in s["requests_per_exit_ip"].items():
        values[f"polite/exit_ip/{ip}"] = n
    return values


def _host(prefix: str, h: dict[str, Any]) -> dict[str, Any]:
    """One host row's keys under *prefix*."""
    values = {f"{prefix}/{key}": h[key] for key in ("attempts", "success", "exit_ips") if key in h}
    for label, n in h["statuses"].items():
        values[f"{prefix}/status/{label}"] = n
    for p in REPORTED:
        if h.get(f"latency_p{p}") is not None:
            values[f"{prefix}/latency/p{p}"] = h[f"latency_p{p}"]
    return values


async def close_off_thread(prom: Any) -> None:
    """Stopping the HTTP server takes up to its 0.5 s poll: not on the reactor thread."""
    from scrapy.utils.defer import maybe_deferred_to_future
    from twisted.internet.threads import deferToThread

    await maybe_deferred_to_future(deferToThread(prom.close))
