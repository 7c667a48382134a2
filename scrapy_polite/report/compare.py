"""Two runs side by side: overall and per host, the better figure in green, the worse in red."""

from __future__ import annotations

from html import escape

from scrapy_polite.metrics.percentiles import seconds_at
from scrapy_polite.metrics.top import OTHER
from scrapy_polite.report.charts import throughput_svg
from scrapy_polite.report.formatting import num, sec
from scrapy_polite.report.model import HostGroup, ReportData
from scrapy_polite.report.page import DEFAULT_TOP, figure, fold_line, html_page


def _diff(a: float | None, b: float | None, higher_is_better: bool, unit: str = "") -> tuple[str, str]:
    """(text, CSS class) of ``b - a``: green when *b* is better, red when worse."""
    if a is None or b is None:
        return "-", ""
    d = b - a
    if abs(d) < 1e-9:
        return "0", ""
    rel = f" ({100.0 * d / a:+.0f}%)" if a else ""
    better = (d > 0) == higher_is_better
    return f"{d:+.3g}{unit}{rel}", "better" if better else "worse"


def _compare_rows(
    a: ReportData, b: ReportData, ga: HostGroup | None, gb: HostGroup | None, name: str
) -> list[tuple[str, str, str, tuple[str, str]]]:
    """(metric, run A, run B, (difference, class)) for one host (or overall, *ga*/*gb* None)."""

    def stats(d: ReportData, g: HostGroup | None, whole: bool) -> dict[str, float | None]:
        if whole:
            total, ok, limited = d.records, d.ok, d.rate_limited
            p50, p95 = seconds_at(d.latency, 50), seconds_at(d.latency, 95)
            ppm = d.pages_per_min()
        elif g is None:
            return {"ppm": None, "success": None, "limited": None, "share": None, "p50": None, "p95": None}
        else:
            total, ok, limited = g.total, g.ok, g.rate_limited
            p50, p95 = g.latency.percentile(50), g.latency.percentile(95)
            ppm = d.host_pages_per_min(g)
        return {"ppm": ppm, "success": 100.0 * ok / total if total else None, "limited": float(limited),
                "share": 100.0 * limited / total if total else None, "p50": p50, "p95": p95}

    whole = name == "overall"
    sa, sb = stats(a, ga, whole), stats(b, gb, whole)

    def fmt(v: float | None, unit: str = "") -> str:
        return "-" if v is None else f"{num(round(v, 2))}{unit}"

    return [
        ("pages/min", fmt(sa["ppm"]), fmt(sb["ppm"]), _diff(sa["ppm"], sb["ppm"], True)),
        ("success rate", fmt(sa["success"], "%"), fmt(sb["success"], "%"),
         _diff(sa["success"], sb["success"], True, " pt")),
        ("429s", fmt(sa["limited"]), fmt(sb["limited"]), _diff(sa["limited"], sb["limited"], False)),
        ("429 share", fmt(sa["share"], "%"), fmt(sb["share"], "%"), _diff(sa["share"], sb["share"], False, " pt")),
        ("latency P50", sec(sa["p50"]), sec(sb["p50"]), _diff(sa["p50"], sb["p50"], False, " s")),
        ("latency P95", sec(sa["p95"]), sec(sb["p95"]), _diff(sa["p95"], sb["p95"], False, " s")),
    ]


def render_compare(
    a: ReportData, b: ReportData, names: tuple[str, str] = ("A", "B"),
    title: str = "scrapy-polite: two runs compared", top: int = DEFAULT_TOP,
) -> str:
    """Two runs side by side: overall and per host (top *top* by both runs' attempts, plus OTHER)."""
    ranked = sorted(set(a.hosts) | set(b.hosts),
                    key=lambda h: (-(a.hosts[h].total if h in a.hosts else 0) - (b.hosts[h].total if h in b.hosts
                                                                                   else 0), h))
    shown, folded = ranked[:top], ranked[top:]

    def fold(d: ReportData) -> HostGroup | None:
        groups = [d.hosts[h] for h in folded if h in d.hosts]
        if not groups:
            return None
        other = HostGroup()
        for g in groups:
            other.merge(g)
        return other

    rows: list[str] = []
    for host, ga, gb in [("overall", None, None), *((h, a.hosts.get(h), b.hosts.get(h)) for h in shown),
                         *([(OTHER, fold(a), fold(b))] if folded else [])]:
        for i, (metric, va, vb, (d, cls)) in enumerate(_compare_rows(a, b, ga, gb, host)):
            c = f' class="{cls}"' if cls else ""
            rows.append(f'<tr data-host="{escape(host)}" data-metric="{escape(metric)}"><td>'
                        f"{escape(host) if i == 0 else ''}</td><td>{escape(metric)}</td><td>{escape(va)}</td>"
                        f"<td>{escape(vb)}</td><td{c}>{escape(d)}</td></tr>")
    head = "".join(f"<th>{escape(h)}</th>" for h in ("host", "", names[0], names[1], "difference (B - A)"))
    body = [
        f"<h1>{escape(title)}</h1>",
        f'<p class="sub">A: {escape(names[0])} ({a.records} records) &middot; B: {escape(names[1])} '
        f"({b.records} records)</p>",
        f'<table id="compare"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>',
        fold_line(len(folded), "hosts"),
        figure("fig-throughput-a", f"A: {names[0]}", throughput_svg(a), "Successful pages and 429s per minute."),
        figure("fig-throughput-b", f"B: {names[1]}", throughput_svg(b), "Successful pages and 429s per minute."),
    ]
    return html_page(title, body)
