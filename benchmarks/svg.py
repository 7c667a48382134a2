"""Small hand-written SVG charts: grouped bars and line series."""

from __future__ import annotations

from html import escape

PALETTE = ["#7f7f7f", "#bcbd22", "#8c564b", "#17becf", "#1f77b4", "#d62728", "#2ca02c", "#9467bd"]


def _text(x: float, y: float, s: str, size: int = 11, anchor: str = "middle", rotate: float | None = None) -> str:
    rot = f' transform="rotate({rotate} {x:.1f} {y:.1f})"' if rotate is not None else ""
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" '
            f'font-family="sans-serif"{rot}>{escape(s)}</text>')


def _legend(names: list[str], x: float, y: float) -> list[str]:
    out = []
    for i, n in enumerate(names):
        out.append(f'<rect x="{x}" y="{y + 16 * i}" width="10" height="10" fill="{PALETTE[i % len(PALETTE)]}"/>')
        out.append(_text(x + 14, y + 9 + 16 * i, n, 11, "start"))
    return out


def grouped_bars(title: str, groups: list[str], series: dict[str, list[float | None]], ylabel: str,
                 ref: float | None = None, ymax: float | None = None) -> str:
    """Bars per group (x) and series (colour); ``None`` values are left out; *ref* draws a dashed line."""
    w, h, left, top, bottom, right = 900, 380, 60, 40, 70, 190
    pw, ph = w - left - right, h - top - bottom
    vals = [v for vs in series.values() for v in vs if v is not None]
    top_v = ymax or max(vals + [ref or 0, 1e-9]) * 1.1
    names = list(series)
    gw = pw / max(1, len(groups))
    bw = gw * 0.8 / max(1, len(names))
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}">',
           '<rect width="100%" height="100%" fill="white"/>', _text(w / 2, 20, title, 14)]
    for k in range(6):
        v = top_v * k / 5
        y = top + ph - ph * k / 5
        out.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + pw}" y2="{y:.1f}" stroke="#ddd"/>')
        out.append(_text(left - 5, y + 4, f"{v:.2g}", 10, "end"))
    for gi, g in enumerate(groups):
        for si, n in enumerate(names):
            v = series[n][gi]
            if v is None:
                continue
            vv = min(v, top_v)
            x = left + gi * gw + gw * 0.1 + si * bw
            bh = ph * vv / top_v
            out.append(f'<rect x="{x:.1f}" y="{top + ph - bh:.1f}" width="{bw:.1f}" height="{bh:.1f}" '
                       f'fill="{PALETTE[si % len(PALETTE)]}"><title>{escape(n)} {escape(g)}: {v:.3g}</title></rect>')
        out.append(_text(left + gi * gw + gw / 2, top + ph + 16, g, 11))
    if ref is not None:
        y = top + ph - ph * min(ref, top_v) / top_v
        out.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + pw}" y2="{y:.1f}" stroke="black" '
                   'stroke-dasharray="4 3"/>')
    out.append(f'<line x1="{left}" y1="{top + ph}" x2="{left + pw}" y2="{top + ph}" stroke="black"/>')
    out.append(_text(16, top + ph / 2, ylabel, 11, "middle", -90))
    out += _legend(names, left + pw + 20, top)
    out.append("</svg>")
    return "\n".join(out)


def lines(title: str, series: dict[str, list[float]], ylabel: str, xlabel: str,
          steps: list[tuple[float, float]] | None = None) -> str:
    """Line per series over x = index (seconds); *steps* draws a dashed step function (the limit)."""
    w, h, left, top, bottom, right = 900, 380, 60, 40, 50, 190
    pw, ph = w - left - right, h - top - bottom
    xmax = max([len(v) for v in series.values()] + [1])
    vals = [x for v in series.values() for x in v] + [s for _, s in steps or []]
    ymax = max(vals + [1e-9]) * 1.1
    sx, sy = pw / max(1, xmax - 1), ph / ymax
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}">',
           '<rect width="100%" height="100%" fill="white"/>', _text(w / 2, 20, title, 14)]
    for k in range(6):
        y = top + ph - ph * k / 5
        out.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + pw}" y2="{y:.1f}" stroke="#ddd"/>')
        out.append(_text(left - 5, y + 4, f"{ymax * k / 5:.2g}", 10, "end"))
    for k in range(0, xmax, max(1, xmax // 10)):
        out.append(_text(left + k * sx, top + ph + 15, str(k), 10))
    if steps:
        pts = []
        for i, (t, v) in enumerate(steps):
            t_next = steps[i + 1][0] if i + 1 < len(steps) else xmax - 1
            pts += [(t, v), (t_next, v)]
        d = " ".join(f"{left + min(t, xmax - 1) * sx:.1f},{top + ph - v * sy:.1f}" for t, v in pts)
        out.append(f'<polyline points="{d}" fill="none" stroke="black" stroke-dasharray="4 3"/>')
    for i, (_n, v) in enumerate(series.items()):
        d = " ".join(f"{left + x * sx:.1f},{top + ph - y * sy:.1f}" for x, y in enumerate(v))
        out.append(f'<polyline points="{d}" fill="none" stroke="{PALETTE[i % len(PALETTE)]}" stroke-width="1.5"/>')
    out.append(f'<line x1="{left}" y1="{top + ph}" x2="{left + pw}" y2="{top + ph}" stroke="black"/>')
    out.append(_text(left + pw / 2, h - 10, xlabel, 11))
    out.append(_text(16, top + ph / 2, ylabel, 11, "middle", -90))
    out += _legend(list(series) + (["limit"] if steps else []), left + pw + 20, top)
    out.append("</svg>")
    return "\n".join(out)
