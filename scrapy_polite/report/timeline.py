"""Each top host's timeline as inline SVG: its pages and 429s per minute, then what the throttle set it to."""

from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape

from scrapy_polite.report.formatting import num
from scrapy_polite.report.model import HostGroup, ReportData
from scrapy_polite.report.svg import Svg, nice_ticks
from scrapy_polite.report.throttle import THROTTLE_SERIES, ThrottleTrack

#: Figure width, left, right and top margins, lane height and the gap between lanes (px).
W, L, R, T, LANE_H, GAP = 900, 120, 20, 24, 52, 14


@dataclass(frozen=True)
class _Axis:
    """The run's time across the plot: every lane shares it, records and throttle events alike."""

    t0: float
    span: float

    @property
    def unit(self) -> tuple[float, str]:
        return (1.0, "seconds") if self.span < 120 else (60.0, "minutes")

    def x(self, t: float) -> float:
        return L + (W - L - R) * min(1.0, max(0.0, (t - self.t0) / self.span))

    def since(self, t: float) -> str:
        """*t* as the time since the start, in the axis' unit: ``"12 seconds"``."""
        unit, unit_name = self.unit
        return f"{num((t - self.t0) / unit)} {unit_name}"


def host_timeline_svg(data: ReportData, host: str, g: HostGroup) -> str:
    """One host over the run: pages/min and 429s/min, then each throttle value as a step line, pauses shaded."""
    lanes: list[tuple[str | None, str]] = [(None, "pages, 429s /min"), *THROTTLE_SERIES]
    H = T + len(lanes) * (LANE_H + GAP) + 30
    svg = Svg(W, H, f"Throttle timeline of {host}")
    t0 = min(data.t0, data.e0)
    span = max(data.t1, data.e1) - t0
    if not math.isfinite(span) or span <= 0:
        span = 1.0
    axis = _Axis(t0, span)
    th = g.throttle
    # Pauses and parks, across every lane.
    for start, kind, held in th.pauses if th else ():
        x0, x1 = axis.x(start), axis.x(start + held)
        svg.add(f'<rect class="{kind}" x="{x0:.1f}" y="{T}" width="{max(1.5, x1 - x0):.1f}" '
                f'height="{len(lanes) * (LANE_H + GAP) - GAP}"><title>{kind} {num(held)} s at '
                f"{axis.since(start)}</title></rect>")
    for i, (name, lane_title) in enumerate(lanes):
        top = T + i * (LANE_H + GAP)
        svg.text(L - 8, top + LANE_H / 2 + 4, lane_title, "end", "name")
        svg.add(f'<line x1="{L}" x2="{W - R}" y1="{top + LANE_H}" y2="{top + LANE_H}" class="axis"/>')
        if name is None:
            _counts_lane(svg, g, axis, top)
        else:
            _step_lane(svg, th, name, axis, top)
    bottom = T + len(lanes) * (LANE_H + GAP) - GAP
    unit, unit_name = axis.unit
    for t in nice_ticks(0, span / unit, 8):
        svg.text(axis.x(t0 + t * unit), bottom + 16, num(t), "middle", "tick")
    svg.text(L + (W - L - R) / 2, H - 4, f"{unit_name} since start; shaded: pauses (blue) and parks (red)",
             "middle", "label")
    return svg.done()


def _counts_lane(svg: Svg, g: HostGroup, axis: _Axis, top: int) -> None:
    """Pages and 429s per minute in each of the host's time buckets, side by side."""
    bottom = top + LANE_H
    width = g.resolution
    rows = [(key * width, ok * 60.0 / width, lim * 60.0 / width) for key, (ok, lim, *_) in g.buckets.items()]
    ymax = max([1.0, *(max(o, r) for _, o, r in rows)])
    bw = max(1.0, (W - L - R) * width / axis.span * 0.8)
    for start, ok, lim in sorted(rows):
        for cls, v in (("okbar", ok), ("rl", lim)):
            if v > 0:
                h = LANE_H * v / ymax
                off = 0 if cls == "okbar" else bw / 2
                svg.add(f'<rect class="{cls}" x="{axis.x(start) + off:.1f}" y="{bottom - h:.1f}" '
                        f'width="{bw / 2:.1f}" height="{h:.1f}"><title>{num(v)} '
                        f'{"pages" if cls == "okbar" else "429s"}/min at {axis.since(start)}</title></rect>')
    svg.text(L + 4, top + 10, f"max {num(ymax)}/min", cls="tick")


def _step_lane(svg: Svg, th: ThrottleTrack | None, name: str, axis: _Axis, top: int) -> None:
    """One throttle value as a step line, a marker at each change; "unchanged" when it never moved."""
    bottom = top + LANE_H
    points = th.series[name].points() if th else []
    first = th.start.get(name) if th else None
    if not points:
        svg.text(L + 4, top + LANE_H / 2 + 4, "unchanged", cls="tick")
        return
    values = [v for _, v in points if v is not None] + ([first] if first is not None else [])
    vmax = max([*values, 1e-9]) * 1.15

    def y(v: float | None) -> float:
        return top if v is None else bottom - LANE_H * v / vmax

    # A limit is drawn from where it was first met; the other values from the start.
    steps = [*([] if name == "host_limit" else [(axis.t0, first)]), *points, (axis.t0 + axis.span, points[-1][1])]
    path = []
    for (ta, va), (tb, _vb) in zip(steps, steps[1:]):
        path += [f"{axis.x(ta):.1f},{y(va):.1f}", f"{axis.x(tb):.1f},{y(va):.1f}"]
    svg.add(f'<polyline class="step" points="{" ".join(path)}"/>')
    for t, level in points:
        shown = "unlimited" if level is None else num(level)
        svg.add(f'<circle class="event" cx="{axis.x(t):.1f}" cy="{y(level):.1f}" r="2.5"><title>{escape(name)} '
                f"{shown} at {axis.since(t)}</title></circle>")
    svg.text(W - R, top + 10, f"last {'unlimited' if points[-1][1] is None else num(points[-1][1])}",
             "end", "tick")
