"""The run's figures as inline SVG: throughput, latency, answers by endpoint, requests by exit IP."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from html import escape

from scrapy_polite.metrics.percentiles import seconds_at
from scrapy_polite.report.formatting import num, sec
from scrapy_polite.report.model import BINS_PER_DECADE, ReportData
from scrapy_polite.report.svg import Svg, nice_ticks, status_color


def throughput_svg(data: ReportData) -> str:
    """Successful pages and 429s per minute over the run, against the run's average."""
    width, points = data.series()
    W, H, L, R, T, B = 900, 310, 60, 20, 34, 45
    svg = Svg(W, H, "Successful pages per minute over time, with rate-limited answers")
    if not points:
        svg.text(W / 2, H / 2, "no records", "middle")
        return svg.done()
    # Short runs read better in seconds; points are in minutes.
    unit, unit_name = (60.0, "seconds") if data.span < 120 else (1.0, "minutes")
    xmax = len(points) * width / 60.0
    ymax = max(max(p[1] for p in points), max(p[2] for p in points), 1.0) * 1.1
    pw, ph = W - L - R, H - T - B

    def x(v: float) -> float:
        return L + pw * v / xmax

    def y(v: float) -> float:
        return T + ph * (1 - v / ymax)

    for t in nice_ticks(0, ymax):
        svg.add(f'<line x1="{L}" x2="{W - R}" y1="{y(t):.1f}" y2="{y(t):.1f}" class="grid"/>')
        svg.text(L - 6, y(t) + 4, num(t), "end", "tick")
    for t in nice_ticks(0, xmax * unit, 8):
        xt = x(t / unit)
        svg.add(f'<line x1="{xt:.1f}" x2="{xt:.1f}" y1="{T + ph}" y2="{T + ph + 4}" class="axis"/>')
        svg.text(xt, T + ph + 17, num(t), "middle", "tick")
    bar_w = max(1.0, pw * (width / 60.0) / xmax * 0.8)
    for m, _ok, lim in points:
        if lim > 0:
            svg.add(
                f'<rect class="rl" x="{x(m) - bar_w / 2:.1f}" y="{y(lim):.1f}" width="{bar_w:.1f}" '
                f'height="{y(0) - y(lim):.1f}"><title>{escape(num(lim))} rate-limited/min at '
                f"{num(m * unit)} {unit_name}</title></rect>"
            )
    path = " ".join(f"{x(m):.1f},{y(v):.1f}" for m, v, _ in points)
    svg.add(f'<polyline class="ok" points="{path}"/>')
    for m, v, _ in points:
        svg.add(f'<circle class="ok" cx="{x(m):.1f}" cy="{y(v):.1f}" r="2.5"><title>'
                f"{escape(num(v))} pages/min at {num(m * unit)} {unit_name}</title></circle>")
    avg = data.pages_per_min()
    svg.add(f'<line class="avg" x1="{L}" x2="{W - R}" y1="{y(avg):.1f}" y2="{y(avg):.1f}">'
            f"<title>run average {avg:.1f} pages/min</title></line>")
    svg.add(f'<line x1="{L}" x2="{L}" y1="{T}" y2="{T + ph}" class="axis"/>')
    svg.add(f'<line x1="{L}" x2="{W - R}" y1="{T + ph}" y2="{T + ph}" class="axis"/>')
    svg.text(L + pw / 2, H - 8, f"{unit_name} since start (bins of {num(width)} s)", "middle", "label")
    svg.text(14, T + ph / 2, "per minute", "middle", "label", f' transform="rotate(-90 14 {T + ph / 2:.1f})"')
    # Legend.
    lx, ly = L, 12
    svg.add(f'<line class="ok" x1="{lx}" x2="{lx + 18}" y1="{ly}" y2="{ly}"/>')
    svg.text(lx + 24, ly + 4, "successful pages/min", cls="legend")
    svg.add(f'<rect class="rl" x="{lx + 170}" y="{ly - 5}" width="12" height="10"/>')
    svg.text(lx + 188, ly + 4, "rate-limited answers/min (429)", cls="legend")
    svg.add(f'<line class="avg" x1="{lx + 390}" x2="{lx + 408}" y1="{ly}" y2="{ly}"/>')
    svg.text(lx + 414, ly + 4, f"run average {avg:.1f} pages/min", cls="legend")
    return svg.done()


def latency_svg(data: ReportData) -> str:
    """Responses per latency bin on a log scale, the percentiles marked."""
    W, H, L, R, T, B = 900, 290, 60, 20, 40, 45
    svg = Svg(W, H, "Download latency histogram with percentiles")
    if not data.latency_bins:
        svg.text(W / 2, H / 2, "no latencies recorded", "middle")
        return svg.done()
    lo, hi = min(data.latency_bins), max(data.latency_bins) + 1
    lo_d, hi_d = math.floor(lo / BINS_PER_DECADE), math.ceil(hi / BINS_PER_DECADE)
    lo, hi = lo_d * BINS_PER_DECADE, max(hi_d * BINS_PER_DECADE, lo + BINS_PER_DECADE)
    pw, ph = W - L - R, H - T - B
    cmax = max(data.latency_bins.values()) * 1.1

    def x(b: float) -> float:
        return L + pw * (b - lo) / (hi - lo)

    def y(v: float) -> float:
        return T + ph * (1 - v / cmax)

    for t in nice_ticks(0, cmax):
        svg.add(f'<line x1="{L}" x2="{W - R}" y1="{y(t):.1f}" y2="{y(t):.1f}" class="grid"/>')
        svg.text(L - 6, y(t) + 4, num(t), "end", "tick")
    for b, n in sorted(data.latency_bins.items()):
        a_ms, b_ms = 10 ** (b / BINS_PER_DECADE), 10 ** ((b + 1) / BINS_PER_DECADE)
        svg.add(
            f'<rect class="bar" x="{x(b) + 0.5:.1f}" y="{y(n):.1f}" width="{max(1.0, x(b + 1) - x(b) - 1):.1f}" '
            f'height="{y(0) - y(n):.1f}"><title>{n} responses, {a_ms:.0f}-{b_ms:.0f} ms</title></rect>'
        )
    for d in range(lo_d, hi_d + 1):
        xv = x(d * BINS_PER_DECADE)
        svg.add(f'<line x1="{xv:.1f}" x2="{xv:.1f}" y1="{T + ph}" y2="{T + ph + 4}" class="axis"/>')
        svg.text(xv, T + ph + 17, sec(10**d / 1000), "middle", "tick")
    for i, p in enumerate((50, 95, 99)):
        v = seconds_at(data.latency, p)
        if v is None:
            continue
        xv = x(BINS_PER_DECADE * math.log10(max(1.0, v * 1000)))
        svg.add(f'<line class="pct" x1="{xv:.1f}" x2="{xv:.1f}" y1="{T - 14 + 12 * i}" y2="{T + ph}">'
                f"<title>P{p} {sec(v)}</title></line>")
        svg.text(xv + 3, T - 6 + 12 * i, f"P{p}", cls="note")
    svg.text(W - R, T - 16, " \u00b7 ".join(f"P{p} {sec(seconds_at(data.latency, p))}" for p in (50, 95, 99)),
             "end", "note")
    svg.add(f'<line x1="{L}" x2="{L}" y1="{T}" y2="{T + ph}" class="axis"/>')
    svg.add(f'<line x1="{L}" x2="{W - R}" y1="{T + ph}" y2="{T + ph}" class="axis"/>')
    svg.text(L + pw / 2, H - 8, "download latency (log scale)", "middle", "label")
    svg.text(14, T + ph / 2, "responses", "middle", "label", f' transform="rotate(-90 14 {T + ph / 2:.1f})"')
    return svg.done()


def order_labels(labels: Iterable[str]) -> list[str]:
    """Status codes first, in order, then exception classes."""
    return sorted(labels, key=lambda s: (not s.isdigit(), s))


def status_by_endpoint_svg(data: ReportData, max_rows: int = 40) -> str:
    """Answers per endpoint as stacked bars by status: an endpoint the site singles out stands out."""
    rows = sorted(data.endpoints.items(), key=lambda kv: (-sum(kv[1].values()), kv[0]))
    if len(rows) > max_rows:
        rest: Counter[str] = Counter()
        for _, c in rows[max_rows:]:
            rest.update(c)
        rows = rows[:max_rows] + [(f"{len(rows) - max_rows} more endpoints", rest)]
    labels = order_labels({k for _, c in rows for k in c})
    name_w = min(360, max([60, *(7 * len(n) for n, _ in rows)]))
    W, T, row_h = 900, 36, 22
    L, R = name_w + 16, 70
    H = T + row_h * max(1, len(rows)) + 20
    svg = Svg(W, H, "Status by endpoint")
    if not rows:
        svg.text(W / 2, H / 2, "no endpoint records", "middle")
        return svg.done()
    cmax = max(sum(c.values()) for _, c in rows)
    pw = W - L - R
    lx = L
    for lab in labels:
        svg.add(f'<rect x="{lx}" y="8" width="12" height="12" fill="{status_color(lab)}"/>')
        svg.text(lx + 16, 18, lab, cls="legend")
        lx += 28 + 7 * len(lab)
    for i, (name, counts) in enumerate(rows):
        yv = T + i * row_h
        svg.text(L - 8, yv + 15, name, "end", "name")
        xv = float(L)
        for lab in labels:
            n = counts.get(lab, 0)
            if not n:
                continue
            w = pw * n / cmax
            svg.add(
                f'<rect x="{xv:.1f}" y="{yv + 3}" width="{w:.1f}" height="{row_h - 6}" '
                f'fill="{status_color(lab)}"><title>{escape(name)}: {n} x {escape(lab)}</title></rect>'
            )
            xv += w
        svg.text(xv + 6, yv + 15, str(sum(counts.values())), cls="tick")
    return svg.done()


def exit_ips_svg(data: ReportData, max_rows: int = 50) -> str:
    """Requests per exit IP against their mean: how evenly the pool spread the load, as the site saw it."""
    rows = sorted(data.exit_ips.items(), key=lambda kv: (-kv[1], kv[0]))
    if len(rows) > max_rows:
        rest = sum(n for _, n in rows[max_rows - 1:])
        rows = rows[: max_rows - 1] + [(f"{len(rows) - max_rows + 1} more IPs", rest)]
    W, T, row_h, L, R = 900, 10, 18, 180, 70
    H = T + row_h * max(1, len(rows)) + 30
    svg = Svg(W, H, "Requests per exit IP")
    if not rows:
        svg.text(W / 2, H / 2, "no exit IPs known (no provider header, static exit_ip or probe)", "middle")
        return svg.done()
    cmax = max(n for _, n in rows)
    pw = W - L - R
    mean = sum(n for _, n in rows) / len(rows)
    for i, (ip, n) in enumerate(rows):
        yv = T + i * row_h
        svg.text(L - 8, yv + 13, ip, "end", "name")
        w = max(1.0, pw * n / cmax)
        svg.add(f'<rect class="bar" x="{L}" y="{yv + 2}" width="{w:.1f}" height="{row_h - 4}">'
                f'<title>{escape(ip)}: {n} requests</title></rect>')
        svg.text(L + w + 6, yv + 13, str(n), cls="tick")
    xm = L + pw * mean / cmax
    svg.add(f'<line class="avg" x1="{xm:.1f}" x2="{xm:.1f}" y1="{T}" y2="{T + row_h * len(rows)}"/>')
    svg.text(xm, H - 8, f"mean {mean:.1f}", "middle", "note")
    return svg.done()
