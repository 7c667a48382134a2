"""The report page: one self-contained HTML file.

It has inline SVG figures and inline CSS only (no script, font, image or
style sheet is fetched), so it opens offline and can be attached to a
ticket or a job log as one file.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Iterable
from html import escape
from pathlib import Path
from typing import Any

from scrapy_polite.metrics.percentiles import seconds_at
from scrapy_polite.metrics.top import OTHER
from scrapy_polite.report.charts import (
    exit_ips_svg,
    latency_svg,
    order_labels,
    status_by_endpoint_svg,
    throughput_svg,
)
from scrapy_polite.report.formatting import num, sec
from scrapy_polite.report.model import HostGroup, ReportData, build
from scrapy_polite.report.throttle import ThrottleTrack
from scrapy_polite.report.timeline import host_timeline_svg

#: Rows of the host and endpoint tables (and host timelines) by default; the rest fold into OTHER.
DEFAULT_TOP = 20

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:24px auto;max-width:960px;
color:#212121;padding:0 16px}
h1{font-size:1.6em;margin-bottom:.2em}h2{font-size:1.2em;margin-top:1.8em;border-bottom:1px solid #ddd}
.sub{color:#616161;margin-top:0}
.cards{display:grid;grid-template-columns:repeat(auto-fit,minmax(112px,1fr));gap:10px;margin:16px 0}
.card{border:1px solid #e0e0e0;border-radius:6px;padding:8px 10px}
.card b{display:block;font-size:1.35em}.card span{color:#616161;font-size:.85em}
figure{margin:10px 0}figcaption{color:#616161;font-size:.9em;margin-top:4px}
svg{max-width:100%;height:auto;font-size:12px}
svg .grid{stroke:#eeeeee}svg .axis{stroke:#9e9e9e}
svg .tick{fill:#616161;font-size:11px}svg .label{fill:#424242}svg .legend{fill:#424242}
svg .name{fill:#424242;font-size:11px}svg .note{fill:#1a237e;font-size:11px}
svg polyline.ok{fill:none;stroke:#2e7d32;stroke-width:2}svg circle.ok{fill:#2e7d32}
svg line.ok{stroke:#2e7d32;stroke-width:2}
svg .rl{fill:#ef6c00;opacity:.75}svg .bar{fill:#5c6bc0}
svg line.avg{stroke:#1a237e;stroke-dasharray:5 4}svg line.pct{stroke:#1a237e;stroke-dasharray:3 3}
table{border-collapse:collapse;font-size:.9em;margin:8px 0}
th,td{padding:3px 10px;border-bottom:1px solid #eee;text-align:right}
th:first-child,td:first-child{text-align:left}th{background:#fafafa}
.fold{color:#616161;font-size:.9em;margin:2px 0}td.better{color:#2e7d32}td.worse{color:#c62828}
svg .okbar{fill:#2e7d32;opacity:.8}svg polyline.step{fill:none;stroke:#1a237e;stroke-width:1.5}
svg circle.event{fill:#1a237e}svg .pause{fill:#42a5f5;opacity:.18}svg .park{fill:#e53935;opacity:.18}
"""


def _card(value: str, what: str) -> str:
    return f'<div class="card"><b>{escape(value)}</b><span>{escape(what)}</span></div>'


def _table(head: list[str], rows: list[list[Any]]) -> str:
    out = ["<table><thead><tr>", *(f"<th>{escape(h)}</th>" for h in head), "</tr></thead><tbody>"]
    for r in rows:
        out.append("<tr>" + "".join(f"<td>{escape(str(c))}</td>" for c in r) + "</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def figure(fig_id: str, title: str, svg: str, caption: str) -> str:
    """A titled SVG figure with its caption, under an id the page's readers can find."""
    return (f'<h2>{escape(title)}</h2><figure id="{fig_id}">{svg}'
            f"<figcaption>{escape(caption)}</figcaption></figure>")


def fold_line(folded: int, what: str) -> str:
    """The line under a table saying how many rows its OTHER row holds (none: no line)."""
    if not folded:
        return ""
    return f'<p class="fold">{folded} more {what} folded into the {escape(OTHER)} row</p>'


def _host_row(data: ReportData, host: str, g: HostGroup) -> list[Any]:
    st = g.statuses
    return [
        host, g.total, g.ok, st.get("429", 0), st.get("403", 0), st.get("404", 0),
        sec(g.latency.percentile(50)), sec(g.latency.percentile(95)), sec(g.latency.percentile(99)),
    ]


def _ladder_part(data: ReportData, hosts: list[tuple[str, HostGroup]]) -> list[str]:
    """Per host, 429s / challenges / bans in each slice of its time: how far up the ladder it went, and when."""
    climbed = [(host, g) for host, g in hosts if g.challenges or g.bans]
    if not climbed:
        return []
    rows = []
    for host, g in climbed:
        steps = " ".join(
            f"+{num(start - data.t0) if math.isfinite(data.t0) else start} s: {lim}/{ch}/{ban}"
            for start, lim, ch, ban in g.ladder()
        )
        rows.append([host, g.rate_limited, g.challenges, g.bans, steps])
    return [
        "<h2>Escalation ladder</h2>",
        '<p class="sub">Rate limits, then challenges, then bans, as the response policy judged each answer; '
        "over time: 429s/challenges/bans from each time since the start.</p>",
        _table(["host", "429", "challenges", "bans", "over time"], rows),
    ]


def _throttle_row(host: str, th: ThrottleTrack) -> list[Any]:
    def val(v: float | None, unit: str = "") -> str:
        return "-" if v is None else f"{num(v)}{unit}"

    conc = th.series["concurrency"]
    conc_txt = (f"{val(th.start.get('concurrency'))} \u2192 {val(th.final('concurrency'))} "
                f"(min {val(th.lowest('concurrency'))})" if len(conc.times) else "-")
    rate = th.final("host_rate")
    limit = "-"
    if th.limit is not None:
        met, fell = th.limit
        limit = f"{num(met)} req/s" + (f" (fell from {num(fell)})" if fell is not None else "")
    return [
        host, sum(th.changes.values()), th.blame.get("rate", 0), th.blame.get("overload", 0), conc_txt,
        val(th.final("spacing"), " s") if th.changes.get("spacing") else "-",
        ("unlimited" if rate is None else f"{num(rate)} req/s") if th.changes.get("host_rate") else "-",
        limit, th.changes.get("pause", 0), th.changes.get("park", 0),
    ]


def render(
    data: ReportData, title: str = "scrapy-polite crawl report", sources: Iterable[str] = (), top: int = DEFAULT_TOP
) -> str:
    """The report page as one HTML string."""
    when = ""
    if data.records:
        fmt = "%Y-%m-%d %H:%M:%S UTC"
        length = f"{data.span:.0f} s" if data.span < 120 else f"{data.span / 60:.1f} min"
        when = f"{time.strftime(fmt, time.gmtime(data.t0))} to {time.strftime(fmt, time.gmtime(data.t1))} ({length})"
    rate = f"{100.0 * data.ok / data.records:.1f}%" if data.records else "-"
    rl = f"{100.0 * data.rate_limited / data.records:.1f}%" if data.records else "-"
    cards = "".join([
        _card(f"{data.pages_per_min():.1f}", "successful pages/min"),
        _card(str(data.ok), "successful pages"),
        _card(str(data.records), "attempts"),
        _card(rate, "success rate"),
        _card(f"{data.rate_limited} ({rl})", "rate-limited (429)"),
        _card(str(data.challenges), "challenges"),
        _card(sec(seconds_at(data.latency, 95)), "latency P95"),
        _card(str(len(data.exit_ips)), "exit IPs"),
    ])
    top_hosts, other_hosts, folded_hosts = data.top_hosts(top)
    host_rows = [_host_row(data, host, g) for host, g in top_hosts]
    if other_hosts is not None:
        host_rows.append(_host_row(data, OTHER, other_hosts))
    pct_rows = [
        ["download latency", *(sec(seconds_at(data.latency, p)) for p in (50, 95, 99)), data.latency.get_total_count()],
        ["wait at the gates", *(sec(seconds_at(data.wait, p)) for p in (50, 95, 99)), data.wait.get_total_count()],
    ]
    labels = order_labels({k for c in data.endpoints.values() for k in c})
    ranked = sorted(data.endpoints.items(), key=lambda kv: (-sum(kv[1].values()), kv[0]))
    ep_other: Counter[str] = Counter()
    for _, c in ranked[top:]:
        ep_other.update(c)
    ep_rows = [[ep, sum(c.values()), *(c.get(lab, 0) for lab in labels)] for ep, c in ranked[:top]]
    if ranked[top:]:
        ep_rows.append([OTHER, sum(ep_other.values()), *(ep_other.get(lab, 0) for lab in labels)])
    throttled = [(host, g.throttle) for host, g in top_hosts if g.throttle is not None]
    throttle_part = [
        "<h2>Throttle per host</h2>",
        f'<p class="sub">{data.throttle_events} throttle events: what the throttle changed, what the '
        "signals behind it were, and the host's limit it last met.</p>",
        _table(["host", "events", "rate signals", "overload signals", "concurrency", "spacing",
                "host rate", "host limit met at", "pauses", "parks"],
               [_throttle_row(h, th) for h, th in throttled]),
    ] if data.throttle_events else []
    timelines = [
        figure(f"fig-host-{i}", f"Throttle timeline: {host}", host_timeline_svg(data, host, g),
                f"{host}: successful pages and 429s per minute, and the throttle's concurrency, spacing "
                "(lower end of the band) and host rate after each change, and each rate the host-wide limit "
                "was met at; shaded: pauses and parks.")
        for i, (host, g) in enumerate(top_hosts)
    ]
    sources_txt = ", ".join(f"{k}: {v}" for k, v in sorted(data.exit_ip_sources.items())) or "-"
    body = [
        f"<h1>{escape(title)}</h1>",
        f'<p class="sub">{escape(when)}{" &middot; " if when else ""}{data.records} records from '
        f"{escape(', '.join(sources) or '-')}"
        f"{' &middot; ' + escape(data.skipped_text()) if data.skipped else ''}</p>",
        f'<div class="cards">{cards}</div>',
        figure("fig-throughput", "Successful pages per minute", throughput_svg(data),
                "Green: successful pages (2xx/3xx, not rate-limited) per minute in each bin; orange bars: "
                "rate-limited answers per minute; dashed: run average."),
        figure("fig-latency", "Download latency", latency_svg(data),
                "Responses per latency bin (log scale), time at the gates excluded; dashed lines: percentiles."),
        _table(["", "P50", "P95", "P99", "samples"], pct_rows),
        "<h2>Per host</h2>",
        _table(["host", "attempts", "ok", "429", "403", "404", "P50", "P95", "P99"], host_rows),
        fold_line(folded_hosts, "hosts"),
        *_ladder_part(data, top_hosts),
        *throttle_part,
        figure("fig-status-endpoint", "Status by endpoint", status_by_endpoint_svg(data, top),
                "Answers per proxy endpoint (masked), by HTTP status or exception class."),
        _table(["endpoint", "attempts", *labels], ep_rows),
        fold_line(max(0, len(ranked) - top), "endpoints"),
        figure("fig-exit-ips", "Requests per exit IP", exit_ips_svg(data),
                f"Requests per exit IP as seen by the target; exit IP source: {sources_txt}."),
        *timelines,
    ]
    return html_page(title, body)


def html_page(title: str, body: list[str]) -> str:
    """The whole document around *body*, its style inline."""
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title><style>{_CSS}</style></head><body>"
        + "\n".join(body)
        + "</body></html>\n"
    )


def write_report(
    paths: list[str], output: str | Path, title: str = "scrapy-polite crawl report", top: int = DEFAULT_TOP
) -> ReportData:
    """Read *paths* (one run) and write its report to *output*; the data, for a summary line."""
    data = build(paths)
    Path(output).write_text(render(data, title, [Path(p).name for p in paths], top), encoding="utf-8")
    return data
