"""A self-contained HTML report from ``POLITE_STATS_JSONL`` files.

``python -m scrapy_polite report stats.jsonl.1 stats.jsonl -o report.html``

The page has inline SVG figures and inline CSS only (no script, font, image
or style sheet is fetched), so it opens offline and can be attached to a
ticket or a job log as one file. Files are read as a stream and folded
into bounded aggregates, so a 100 MB log needs little memory.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from array import array
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import Any

from hdrh.histogram import HdrHistogram

from scrapy_polite.metrics.outcome import is_ban as outcome_ban
from scrapy_polite.metrics.outcome import is_challenge, status_label
from scrapy_polite.metrics.outcome import is_success as outcome_success
from scrapy_polite.metrics.percentiles import SparseHistogram, seconds_at
from scrapy_polite.metrics.top import OTHER, admit

#: Time buckets are merged (their width doubled) beyond this many.
_MAX_TIME_BUCKETS = 20_000
#: A record without a verdict (an older JSONL) is a ban on POLITE_BAN_CODES' default.
DEFAULT_BAN_CODES = frozenset({403})
#: Exit IPs and endpoints tracked one by one; the rest are pooled.
_MAX_NAMES = 5000
_BINS_PER_DECADE = 10


#: Latest time a record may carry: the end of year 9999, as far as ``time.gmtime`` goes everywhere.
_MAX_TIME = 253_402_300_799.0
#: Longest latency or gate wait a record may carry, in seconds.
_MAX_SECONDS = 1e7


def read_records(
    paths: Iterable[str | Path], skipped: Counter[str] | None = None
) -> Iterator[dict[str, Any]]:
    """Outcome records from JSONL files; bad or partial lines are skipped, counted in *skipped* by reason."""
    for path in paths:
        with open(path, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                line = line.strip()
                if not line:
                    continue
                rec = check_line(line)
                if isinstance(rec, str):
                    if skipped is not None:
                        skipped[rec] += 1
                    continue
                yield rec


def check_line(line: str) -> dict[str, Any] | str:
    """The record on a JSONL *line*, or why it cannot be one (the file may be cut, edited or corrupt)."""
    try:
        rec = json.loads(line)
    except (ValueError, RecursionError):
        return "not JSON"
    if not isinstance(rec, dict):
        return "not an object"
    if not _number(rec.get("time"), 0.0, _MAX_TIME):
        return "bad time"
    for key in ("latency", "wait"):
        if rec.get(key) is not None and not _number(rec[key], 0.0, _MAX_SECONDS):
            return f"bad {key}"
    return rec


def _number(value: Any, low: float, high: float) -> bool:
    """*value* is a real JSON number (not a boolean, NaN or an infinity) within [*low*, *high*]."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and low <= value <= high


def label_of(rec: dict[str, Any]) -> str:
    return status_label(rec.get("status"), rec.get("exception"))


def is_success(rec: dict[str, Any]) -> bool:
    return outcome_success(rec.get("status"), bool(rec.get("rate_limited")), rec.get("verdict"))


def _bump(counter: Counter[str], key: str, n: int = 1) -> None:
    counter[key if key in counter or len(counter) < _MAX_NAMES else OTHER] += n


#: Per-host timeline buckets, and points kept per throttle series, before halving.
_HOST_BUCKETS = 100
_SERIES_POINTS = 120
#: Pauses and parks kept one by one per host (the rest are only counted).
_MAX_PAUSES = 100
#: Rows of the host and endpoint tables (and host timelines) by default; the rest fold into OTHER.
DEFAULT_TOP = 20
#: Throttle values plotted per host, in lane order: (event change, lane title).
THROTTLE_SERIES = (("concurrency", "concurrency"), ("spacing", "spacing (s)"), ("host_rate", "host rate (req/s)"),
                   ("host_limit", "limit met (req/s)"))


class _Series:
    """A step series ``(time, value)`` in two float arrays, halved past ``_SERIES_POINTS`` (NaN: no value)."""

    __slots__ = ("times", "values")

    def __init__(self) -> None:
        self.times = array("d")
        self.values = array("d")

    def add(self, t: float, value: float | None) -> None:
        self.times.append(t)
        self.values.append(math.nan if value is None else float(value))
        if len(self.times) > _SERIES_POINTS:
            # Every other point goes, the last one stays: the shape and the final value survive.
            keep = list(range(0, len(self.times) - 1, 2)) + [len(self.times) - 1]
            self.times = array("d", (self.times[i] for i in keep))
            self.values = array("d", (self.values[i] for i in keep))

    def points(self) -> list[tuple[float, float | None]]:
        return [(t, None if math.isnan(v) else v) for t, v in zip(self.times, self.values)]


class _HostThrottle:
    """What the throttle did to one host, from its ``"event": "throttle"`` lines."""

    __slots__ = ("changes", "blame", "series", "start", "pauses", "pause_count", "last_decision", "limit")

    def __init__(self) -> None:
        self.changes: Counter[str] = Counter()
        #: Signals behind the changes, by kind (rate, overload).
        self.blame: Counter[str] = Counter()
        self.series = {name: _Series() for name, _ in THROTTLE_SERIES}
        #: Each series' value before its first change.
        self.start: dict[str, float | None] = {}
        #: (time, "pause" or "park", seconds held).
        self.pauses: list[tuple[float, str, float]] = []
        self.pause_count = 0
        self.last_decision: tuple[float, str] | None = None
        #: The host-wide limit the host-rate search last met (req/s), and where it stood before it
        #: fell (``None``: it did not), from the events' ``host_limit`` evidence.
        self.limit: tuple[float, float | None] | None = None

    def add(self, rec: dict[str, Any]) -> None:
        change = str(rec.get("change"))
        t = float(rec["time"])
        self.changes[change] += 1
        if change in self.series:
            before, after = _series_value(rec.get("from")), _series_value(rec.get("to"))
            self.start.setdefault(change, before)
            self.series[change].add(t, after)
        elif change in ("pause", "park"):
            self.pause_count += 1
            held = rec.get("to")
            if len(self.pauses) < _MAX_PAUSES and held is not None and _number(held, 0.0, _MAX_SECONDS):
                self.pauses.append((t, change, float(held)))
        evidence = rec.get("evidence")
        limit = evidence.get("host_limit") if isinstance(evidence, dict) else None
        if isinstance(limit, dict) and _number(limit.get("ceiling"), 0.0, _MAX_SECONDS):
            fell, met = limit.get("fell_from"), float(limit["ceiling"])
            if self.limit is None or self.limit[0] != met:
                self.series["host_limit"].add(t, met)  # each level the limit was met at, once
            self.limit = (met, float(fell) if fell is not None and _number(fell, 0.0, _MAX_SECONDS) else None)

    def final(self, name: str) -> float | None:
        s = self.series[name]
        if not len(s.times):
            return self.start.get(name)
        v = s.values[-1]
        return None if math.isnan(v) else v

    def lowest(self, name: str) -> float | None:
        values = [v for v in (*self.series[name].values, self.start.get(name)) if v is not None and not math.isnan(v)]
        return min(values, default=None)


def _series_value(value: Any) -> float | None:
    """A plotted value: a number, or a spacing band's lower end; ``None`` for "unlimited" or garbage."""
    if isinstance(value, list) and value:
        value = value[0]
    return float(value) if _number(value, 0.0, _MAX_SECONDS) else None


#: Time slices of the escalation-ladder table, per host.
LADDER_SLICES = 8


@dataclass
class _Group:
    statuses: Counter[str] = field(default_factory=Counter)
    ok: int = 0
    rate_limited: int = 0
    challenges: int = 0
    bans: int = 0
    latency: SparseHistogram = field(default_factory=SparseHistogram)
    #: Time bucket (``resolution`` seconds wide) -> [ok, rate-limited].
    buckets: dict[int, list[int]] = field(default_factory=dict)
    resolution: int = 1
    throttle: _HostThrottle | None = None

    @property
    def total(self) -> int:
        return sum(self.statuses.values())

    def add_time(self, t: float, ok: bool, limited: bool, challenge: bool = False, ban: bool = False) -> None:
        b = self.buckets.setdefault(int(t) // self.resolution, [0, 0, 0, 0])
        for i, v in enumerate((ok, limited, challenge, ban)):
            b[i] += v
        while len(self.buckets) > _HOST_BUCKETS:
            self.resolution *= 2
            merged: dict[int, list[int]] = {}
            for key, counts in self.buckets.items():
                m = merged.setdefault(key // 2, [0, 0, 0, 0])
                for i, n in enumerate(counts):
                    m[i] += n
            self.buckets = merged

    def ladder(self, slices: int = LADDER_SLICES) -> list[tuple[int, int, int, int]]:
        """(bucket start, 429s, challenges, bans) over at most *slices* equal slices of the host's time."""
        if not self.buckets:
            return []
        first, last = min(self.buckets), max(self.buckets)
        per = max(1, math.ceil((last - first + 1) / slices))
        rows: dict[int, list[int]] = {}
        for key, (_ok, lim, ch, ban) in self.buckets.items():
            r = rows.setdefault((key - first) // per, [0, 0, 0])
            r[0] += lim
            r[1] += ch
            r[2] += ban
        out = []
        for i in range(max(rows) + 1):
            lim, ch, ban = rows.get(i, (0, 0, 0))
            out.append(((first + i * per) * self.resolution, lim, ch, ban))
        return out

    def merge(self, other: _Group) -> None:
        """Counts and latencies of *other* into this one (the OTHER row)."""
        self.statuses.update(other.statuses)
        self.ok += other.ok
        self.rate_limited += other.rate_limited
        self.challenges += other.challenges
        self.bans += other.bans
        self.latency.merge(other.latency)


class ReportData:
    """Everything the report shows, folded from records in bounded memory."""

    def __init__(self) -> None:
        self.records = 0
        self.ok = 0
        self.rate_limited = 0
        self.challenges = 0
        self.bans = 0
        self.t0 = math.inf
        self.t1 = -math.inf
        self.resolution = 1  # seconds per time bucket
        self.buckets: dict[int, list[int]] = {}  # bucket -> [ok, rate_limited, total]
        self.latency = HdrHistogram(1, 3_600_000, 3)
        self.wait = HdrHistogram(1, 3_600_000, 3)
        self.latency_bins: Counter[int] = Counter()
        self.hosts: dict[str, _Group] = {}
        #: Host rows folded into OTHER while reading (a broad crawl's hosts beyond _MAX_NAMES).
        self.hosts_folded = 0
        self.endpoints: dict[str, Counter[str]] = {}
        self.exit_ips: Counter[str] = Counter()
        self.exit_ip_sources: Counter[str] = Counter()
        #: Lines that held no usable record, by reason.
        self.skipped: Counter[str] = Counter()
        #: Throttle event lines read, and the times they span.
        self.throttle_events = 0
        self.e0 = math.inf
        self.e1 = -math.inf

    def skipped_text(self) -> str:
        """``"3 lines skipped (2 not JSON, 1 bad time)"``, or ``""`` when none was."""
        n = sum(self.skipped.values())
        if not n:
            return ""
        why = ", ".join(f"{count} {reason}" for reason, count in sorted(self.skipped.items()))
        return f"{n} line{'s' if n != 1 else ''} skipped ({why})"

    def add(self, rec: dict[str, Any]) -> None:
        if "event" in rec:
            if rec["event"] == "throttle":
                self.add_throttle(rec)
            return  # other events: not attempts
        t = float(rec["time"])
        if rec.get("revises"):
            self._unrecord_page(rec)
        ok = is_success(rec)
        limited = bool(rec.get("rate_limited"))
        label = label_of(rec)
        self.records += 1
        self.ok += ok
        self.rate_limited += limited
        self.t0, self.t1 = min(self.t0, t), max(self.t1, t)
        b = self.buckets.setdefault(int(t) // self.resolution, [0, 0, 0])
        b[0] += ok
        b[1] += limited
        b[2] += 1
        if len(self.buckets) > _MAX_TIME_BUCKETS:
            self._coarsen()
        g = self._host(str(rec.get("host") or "?"))
        g.statuses[label] += 1
        verdict = rec.get("verdict")
        challenge = is_challenge(verdict)
        ban = outcome_ban(rec.get("status"), DEFAULT_BAN_CODES, bool(rec.get("proxy_side")), limited, verdict)
        g.ok += ok
        g.rate_limited += limited
        g.challenges += challenge
        g.bans += ban
        self.challenges += challenge
        self.bans += ban
        g.add_time(t, ok, limited, challenge, ban)
        latency = rec.get("latency")
        if isinstance(latency, (int, float)):
            ms = min(3_600_000, max(1, int(latency * 1000)))
            self.latency.record_value(ms)
            g.latency.record(ms)
            self.latency_bins[int(math.floor(_BINS_PER_DECADE * math.log10(ms)))] += 1
        endpoint = rec.get("endpoint")
        if endpoint:
            wait = rec.get("wait")
            if isinstance(wait, (int, float)):
                self.wait.record_value(min(3_600_000, max(0, int(wait * 1000))))
            key = str(endpoint)
            if key not in self.endpoints and len(self.endpoints) >= _MAX_NAMES:
                key = OTHER
            self.endpoints.setdefault(key, Counter())[label] += 1
        if rec.get("exit_ip"):
            _bump(self.exit_ips, str(rec["exit_ip"]))
        self.exit_ip_sources[str(rec.get("exit_ip_source") or "unknown")] += 1

    def _unrecord_page(self, rec: dict[str, Any]) -> None:
        """The spider marked a page after the fact: the attempt's first record no longer counts as one."""
        self.records -= 1
        self.ok -= 1
        g = self._host(str(rec.get("host") or "?"))
        g.ok -= 1
        g.statuses[label_of(rec)] -= 1

    def add_throttle(self, rec: dict[str, Any]) -> None:
        """A throttle event line: what the throttle changed for its host, and on what evidence."""
        self.throttle_events += 1
        g = self._host(str(rec.get("host") or "?"))
        if g.throttle is None:
            g.throttle = _HostThrottle()
        g.throttle.add(rec)
        evidence = rec.get("evidence")
        # The events of one decision share its time and reason: its signal counts once.
        decision = (rec["time"], str(rec.get("reason")))
        if isinstance(evidence, dict) and evidence.get("signal") in ("rate", "overload") and (
            decision != g.throttle.last_decision
        ):
            g.throttle.blame[evidence["signal"]] += 1
        g.throttle.last_decision = decision
        t = float(rec["time"])
        self.e0, self.e1 = min(self.e0, t), max(self.e1, t)

    def _host(self, host: str) -> _Group:
        g = self.hosts.get(host)
        if g is None:
            # The busiest _MAX_NAMES / 2 or more keep their rows; a host busy late still gets one.
            self.hosts_folded += len(admit(self.hosts, host, _MAX_NAMES // 2, _Group))
            g = self.hosts[host] = _Group()
        return g

    def top_hosts(self, n: int) -> tuple[list[tuple[str, _Group]], _Group | None, int]:
        """The *n* hosts with the most attempts, the rest merged into one group, and how many were."""
        # OTHER (hosts folded while reading) ranks last: it is never a top row.
        ranked = sorted(self.hosts.items(), key=lambda kv: (kv[0] == OTHER, -kv[1].total, kv[0]))
        top = [kv for kv in ranked[:n] if kv[0] != OTHER]
        rest = ranked[len(top):]
        if not rest:
            return top, None, 0
        other = _Group()
        for _, g in rest:
            other.merge(g)
        return top, other, sum(name != OTHER for name, _ in rest) + self.hosts_folded

    def host_pages_per_min(self, g: _Group) -> float:
        return g.ok * 60.0 / self.span if self.span > 0 else 0.0

    def _coarsen(self) -> None:
        self.resolution *= 2
        merged: dict[int, list[int]] = {}
        for key, (ok, limited, total) in self.buckets.items():
            m = merged.setdefault(key // 2, [0, 0, 0])
            m[0] += ok
            m[1] += limited
            m[2] += total
        self.buckets = merged

    @property
    def span(self) -> float:
        return max(0.0, self.t1 - self.t0) if self.records else 0.0

    def pages_per_min(self) -> float:
        return self.ok * 60.0 / self.span if self.span > 0 else 0.0

    def series(self, max_points: int = 120) -> tuple[float, list[tuple[float, float, float]]]:
        """(bin width s, [(minutes since start, ok/min, rate-limited/min)]) over the run."""
        if not self.records:
            return 1.0, []
        width = _nice_width(max(self.span / max_points, self.resolution))
        n = max(1, math.ceil((self.span + 1e-9) / width))
        ok = [0] * n
        limited = [0] * n
        for key, (k_ok, k_lim, _total) in self.buckets.items():
            start = key * self.resolution
            i = min(n - 1, max(0, int((start - int(self.t0)) // width)))
            ok[i] += k_ok
            limited[i] += k_lim
        # The last bin may be partly covered by the run: its rate is over the covered part.
        last = max(self.span - (n - 1) * width, min(width, 1.0))
        points = []
        for i in range(n):
            w = width if i < n - 1 else last
            points.append(((i + 0.5) * width / 60.0, ok[i] * 60.0 / w, limited[i] * 60.0 / w))
        return width, points


def _nice_width(seconds: float) -> float:
    for w in (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 43200, 86400):
        if w >= seconds:
            return float(w)
    return float(math.ceil(seconds / 86400) * 86400)


# -- SVG helpers -------------------------------------------------------------

_STATUS_COLORS = {"2": "#2e7d32", "3": "#00838f", "4": "#8d6e63", "5": "#6a1b9a"}
_SPECIAL_COLORS = {"429": "#ef6c00", "403": "#c62828", "404": "#9e9e9e"}


def status_color(label: str) -> str:
    if label in _SPECIAL_COLORS:
        return _SPECIAL_COLORS[label]
    if label.isdigit():
        return _STATUS_COLORS.get(label[0], "#607d8b")
    return "#37474f"  # exception classes


def nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    if hi <= lo:
        hi = lo + 1
    raw = (hi - lo) / n
    step = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 2.5, 5, 10):
        if raw <= step * m:
            step *= m
            break
    first = math.ceil(lo / step) * step
    return [round(first + i * step, 10) for i in range(int((hi - first) / step + 1e-9) + 1)]


def _num(v: float) -> str:
    if v == 0:
        return "0"
    if abs(v) >= 100 or float(v).is_integer():
        return f"{v:.0f}"
    return f"{v:.3g}"


def _sec(v: float | None) -> str:
    if v is None:
        return "-"
    if v < 1:
        return f"{v * 1000:.0f} ms"
    return f"{v:.0f} s" if float(v).is_integer() else f"{v:.2f} s"


class _Svg:
    def __init__(self, width: int, height: int, label: str) -> None:
        self.width, self.height = width, height
        self.parts: list[str] = [
            f'<svg viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" '
            f'aria-label="{escape(label)}">'
        ]

    def add(self, s: str) -> None:
        self.parts.append(s)

    def text(self, x: float, y: float, s: str, anchor: str = "start", cls: str = "", extra: str = "") -> None:
        c = f' class="{cls}"' if cls else ""
        self.add(f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}"{c}{extra}>{escape(s)}</text>')

    def done(self) -> str:
        return "".join(self.parts) + "</svg>"


def throughput_svg(data: ReportData) -> str:
    width, points = data.series()
    W, H, L, R, T, B = 900, 310, 60, 20, 34, 45
    svg = _Svg(W, H, "Successful pages per minute over time, with rate-limited answers")
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
        svg.text(L - 6, y(t) + 4, _num(t), "end", "tick")
    for t in nice_ticks(0, xmax * unit, 8):
        xt = x(t / unit)
        svg.add(f'<line x1="{xt:.1f}" x2="{xt:.1f}" y1="{T + ph}" y2="{T + ph + 4}" class="axis"/>')
        svg.text(xt, T + ph + 17, _num(t), "middle", "tick")
    bar_w = max(1.0, pw * (width / 60.0) / xmax * 0.8)
    for m, _ok, lim in points:
        if lim > 0:
            svg.add(
                f'<rect class="rl" x="{x(m) - bar_w / 2:.1f}" y="{y(lim):.1f}" width="{bar_w:.1f}" '
                f'height="{y(0) - y(lim):.1f}"><title>{escape(_num(lim))} rate-limited/min at '
                f"{_num(m * unit)} {unit_name}</title></rect>"
            )
    path = " ".join(f"{x(m):.1f},{y(v):.1f}" for m, v, _ in points)
    svg.add(f'<polyline class="ok" points="{path}"/>')
    for m, v, _ in points:
        svg.add(f'<circle class="ok" cx="{x(m):.1f}" cy="{y(v):.1f}" r="2.5"><title>'
                f"{escape(_num(v))} pages/min at {_num(m * unit)} {unit_name}</title></circle>")
    avg = data.pages_per_min()
    svg.add(f'<line class="avg" x1="{L}" x2="{W - R}" y1="{y(avg):.1f}" y2="{y(avg):.1f}">'
            f"<title>run average {avg:.1f} pages/min</title></line>")
    svg.add(f'<line x1="{L}" x2="{L}" y1="{T}" y2="{T + ph}" class="axis"/>')
    svg.add(f'<line x1="{L}" x2="{W - R}" y1="{T + ph}" y2="{T + ph}" class="axis"/>')
    svg.text(L + pw / 2, H - 8, f"{unit_name} since start (bins of {_num(width)} s)", "middle", "label")
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
    W, H, L, R, T, B = 900, 290, 60, 20, 40, 45
    svg = _Svg(W, H, "Download latency histogram with percentiles")
    if not data.latency_bins:
        svg.text(W / 2, H / 2, "no latencies recorded", "middle")
        return svg.done()
    lo, hi = min(data.latency_bins), max(data.latency_bins) + 1
    lo_d, hi_d = math.floor(lo / _BINS_PER_DECADE), math.ceil(hi / _BINS_PER_DECADE)
    lo, hi = lo_d * _BINS_PER_DECADE, max(hi_d * _BINS_PER_DECADE, lo + _BINS_PER_DECADE)
    pw, ph = W - L - R, H - T - B
    cmax = max(data.latency_bins.values()) * 1.1

    def x(b: float) -> float:
        return L + pw * (b - lo) / (hi - lo)

    def y(v: float) -> float:
        return T + ph * (1 - v / cmax)

    for t in nice_ticks(0, cmax):
        svg.add(f'<line x1="{L}" x2="{W - R}" y1="{y(t):.1f}" y2="{y(t):.1f}" class="grid"/>')
        svg.text(L - 6, y(t) + 4, _num(t), "end", "tick")
    for b, n in sorted(data.latency_bins.items()):
        a_ms, b_ms = 10 ** (b / _BINS_PER_DECADE), 10 ** ((b + 1) / _BINS_PER_DECADE)
        svg.add(
            f'<rect class="bar" x="{x(b) + 0.5:.1f}" y="{y(n):.1f}" width="{max(1.0, x(b + 1) - x(b) - 1):.1f}" '
            f'height="{y(0) - y(n):.1f}"><title>{n} responses, {a_ms:.0f}-{b_ms:.0f} ms</title></rect>'
        )
    for d in range(lo_d, hi_d + 1):
        xv = x(d * _BINS_PER_DECADE)
        svg.add(f'<line x1="{xv:.1f}" x2="{xv:.1f}" y1="{T + ph}" y2="{T + ph + 4}" class="axis"/>')
        svg.text(xv, T + ph + 17, _sec(10**d / 1000), "middle", "tick")
    for i, p in enumerate((50, 95, 99)):
        v = seconds_at(data.latency, p)
        if v is None:
            continue
        xv = x(_BINS_PER_DECADE * math.log10(max(1.0, v * 1000)))
        svg.add(f'<line class="pct" x1="{xv:.1f}" x2="{xv:.1f}" y1="{T - 14 + 12 * i}" y2="{T + ph}">'
                f"<title>P{p} {_sec(v)}</title></line>")
        svg.text(xv + 3, T - 6 + 12 * i, f"P{p}", cls="note")
    svg.text(W - R, T - 16, " \u00b7 ".join(f"P{p} {_sec(seconds_at(data.latency, p))}" for p in (50, 95, 99)),
             "end", "note")
    svg.add(f'<line x1="{L}" x2="{L}" y1="{T}" y2="{T + ph}" class="axis"/>')
    svg.add(f'<line x1="{L}" x2="{W - R}" y1="{T + ph}" y2="{T + ph}" class="axis"/>')
    svg.text(L + pw / 2, H - 8, "download latency (log scale)", "middle", "label")
    svg.text(14, T + ph / 2, "responses", "middle", "label", f' transform="rotate(-90 14 {T + ph / 2:.1f})"')
    return svg.done()


def _order(labels: Iterable[str]) -> list[str]:
    return sorted(labels, key=lambda s: (not s.isdigit(), s))


def status_by_endpoint_svg(data: ReportData, max_rows: int = 40) -> str:
    rows = sorted(data.endpoints.items(), key=lambda kv: (-sum(kv[1].values()), kv[0]))
    if len(rows) > max_rows:
        rest: Counter[str] = Counter()
        for _, c in rows[max_rows:]:
            rest.update(c)
        rows = rows[:max_rows] + [(f"{len(rows) - max_rows} more endpoints", rest)]
    labels = _order({k for _, c in rows for k in c})
    name_w = min(360, max([60, *(7 * len(n) for n, _ in rows)]))
    W, T, row_h = 900, 36, 22
    L, R = name_w + 16, 70
    H = T + row_h * max(1, len(rows)) + 20
    svg = _Svg(W, H, "Status by endpoint")
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
    rows = sorted(data.exit_ips.items(), key=lambda kv: (-kv[1], kv[0]))
    if len(rows) > max_rows:
        rest = sum(n for _, n in rows[max_rows - 1:])
        rows = rows[: max_rows - 1] + [(f"{len(rows) - max_rows + 1} more IPs", rest)]
    W, T, row_h, L, R = 900, 10, 18, 180, 70
    H = T + row_h * max(1, len(rows)) + 30
    svg = _Svg(W, H, "Requests per exit IP")
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


# -- page --------------------------------------------------------------------

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


def _figure(fig_id: str, title: str, svg: str, caption: str) -> str:
    return (f'<h2>{escape(title)}</h2><figure id="{fig_id}">{svg}'
            f"<figcaption>{escape(caption)}</figcaption></figure>")


def host_timeline_svg(data: ReportData, host: str, g: _Group) -> str:
    """One host over the run: pages/min and 429s/min, then each throttle value as a step line, pauses shaded."""
    W, L, R, T, lane_h, gap = 900, 120, 20, 24, 52, 14
    lanes: list[tuple[str | None, str]] = [(None, "pages, 429s /min"), *THROTTLE_SERIES]
    H = T + len(lanes) * (lane_h + gap) + 30
    svg = _Svg(W, H, f"Throttle timeline of {host}")
    t0 = min(data.t0, data.e0)
    span = max(data.t1, data.e1) - t0
    if not math.isfinite(span) or span <= 0:
        span = 1.0
    pw = W - L - R
    unit, unit_name = (1.0, "seconds") if span < 120 else (60.0, "minutes")

    def x(t: float) -> float:
        return L + pw * min(1.0, max(0.0, (t - t0) / span))

    th = g.throttle
    # Pauses and parks, across every lane.
    for start, kind, held in th.pauses if th else ():
        x0, x1 = x(start), x(start + held)
        svg.add(f'<rect class="{kind}" x="{x0:.1f}" y="{T}" width="{max(1.5, x1 - x0):.1f}" '
                f'height="{len(lanes) * (lane_h + gap) - gap}"><title>{kind} {_num(held)} s at '
                f"{_num((start - t0) / unit)} {unit_name}</title></rect>")
    for i, (name, lane_title) in enumerate(lanes):
        top = T + i * (lane_h + gap)
        bottom = top + lane_h
        svg.text(L - 8, top + lane_h / 2 + 4, lane_title, "end", "name")
        svg.add(f'<line x1="{L}" x2="{W - R}" y1="{bottom}" y2="{bottom}" class="axis"/>')
        if name is None:
            width = g.resolution
            rows = [(key * width, ok * 60.0 / width, lim * 60.0 / width) for key, (ok, lim, *_) in g.buckets.items()]
            ymax = max([1.0, *(max(o, r) for _, o, r in rows)])
            bw = max(1.0, pw * width / span * 0.8)
            for start, ok, lim in sorted(rows):
                for cls, v in (("okbar", ok), ("rl", lim)):
                    if v > 0:
                        h = lane_h * v / ymax
                        off = 0 if cls == "okbar" else bw / 2
                        svg.add(f'<rect class="{cls}" x="{x(start) + off:.1f}" y="{bottom - h:.1f}" '
                                f'width="{bw / 2:.1f}" height="{h:.1f}"><title>{_num(v)} '
                                f'{"pages" if cls == "okbar" else "429s"}/min at {_num((start - t0) / unit)} '
                                f"{unit_name}</title></rect>")
            svg.text(L + 4, top + 10, f"max {_num(ymax)}/min", cls="tick")
            continue
        points = th.series[name].points() if th else []
        first = th.start.get(name) if th else None
        if not points:
            svg.text(L + 4, top + lane_h / 2 + 4, "unchanged", cls="tick")
            continue
        values = [v for _, v in points if v is not None] + ([first] if first is not None else [])
        vmax = max([*values, 1e-9]) * 1.15

        def y(v: float | None, top: float = top, bottom: float = bottom, vmax: float = vmax) -> float:
            return top if v is None else bottom - lane_h * v / vmax

        # A limit is drawn from where it was first met; the other values from the start.
        steps = [*([] if name == "host_limit" else [(t0, first)]), *points, (t0 + span, points[-1][1])]
        path = []
        for (ta, va), (tb, _vb) in zip(steps, steps[1:]):
            path += [f"{x(ta):.1f},{y(va):.1f}", f"{x(tb):.1f},{y(va):.1f}"]
        svg.add(f'<polyline class="step" points="{" ".join(path)}"/>')
        for t, level in points:
            shown = "unlimited" if level is None else _num(level)
            svg.add(f'<circle class="event" cx="{x(t):.1f}" cy="{y(level):.1f}" r="2.5"><title>{escape(name)} '
                    f"{shown} at {_num((t - t0) / unit)} {unit_name}</title></circle>")
        svg.text(W - R, top + 10, f"last {'unlimited' if points[-1][1] is None else _num(points[-1][1])}",
                 "end", "tick")
    bottom = T + len(lanes) * (lane_h + gap) - gap
    for t in nice_ticks(0, span / unit, 8):
        xt = x(t0 + t * unit)
        svg.text(xt, bottom + 16, _num(t), "middle", "tick")
    svg.text(L + pw / 2, H - 4, f"{unit_name} since start; shaded: pauses (blue) and parks (red)", "middle",
             "label")
    return svg.done()


def _fold_line(folded: int, what: str) -> str:
    if not folded:
        return ""
    return f'<p class="fold">{folded} more {what} folded into the {escape(OTHER)} row</p>'


def _host_row(data: ReportData, host: str, g: _Group) -> list[Any]:
    st = g.statuses
    return [
        host, g.total, g.ok, st.get("429", 0), st.get("403", 0), st.get("404", 0),
        _sec(g.latency.percentile(50)), _sec(g.latency.percentile(95)), _sec(g.latency.percentile(99)),
    ]


def _ladder_part(data: ReportData, hosts: list[tuple[str, _Group]]) -> list[str]:
    """Per host, 429s / challenges / bans in each slice of its time: how far up the ladder it went, and when."""
    climbed = [(host, g) for host, g in hosts if g.challenges or g.bans]
    if not climbed:
        return []
    rows = []
    for host, g in climbed:
        steps = " ".join(
            f"+{_num(start - data.t0) if math.isfinite(data.t0) else start} s: {lim}/{ch}/{ban}"
            for start, lim, ch, ban in g.ladder()
        )
        rows.append([host, g.rate_limited, g.challenges, g.bans, steps])
    return [
        "<h2>Escalation ladder</h2>",
        '<p class="sub">Rate limits, then challenges, then bans, as the response policy judged each answer; '
        "over time: 429s/challenges/bans from each time since the start.</p>",
        _table(["host", "429", "challenges", "bans", "over time"], rows),
    ]


def _throttle_row(host: str, th: _HostThrottle) -> list[Any]:
    def val(v: float | None, unit: str = "") -> str:
        return "-" if v is None else f"{_num(v)}{unit}"

    conc = th.series["concurrency"]
    conc_txt = (f"{val(th.start.get('concurrency'))} \u2192 {val(th.final('concurrency'))} "
                f"(min {val(th.lowest('concurrency'))})" if len(conc.times) else "-")
    rate = th.final("host_rate")
    limit = "-"
    if th.limit is not None:
        met, fell = th.limit
        limit = f"{_num(met)} req/s" + (f" (fell from {_num(fell)})" if fell is not None else "")
    return [
        host, sum(th.changes.values()), th.blame.get("rate", 0), th.blame.get("overload", 0), conc_txt,
        val(th.final("spacing"), " s") if th.changes.get("spacing") else "-",
        ("unlimited" if rate is None else f"{_num(rate)} req/s") if th.changes.get("host_rate") else "-",
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
        _card(_sec(seconds_at(data.latency, 95)), "latency P95"),
        _card(str(len(data.exit_ips)), "exit IPs"),
    ])
    top_hosts, other_hosts, folded_hosts = data.top_hosts(top)
    host_rows = [_host_row(data, host, g) for host, g in top_hosts]
    if other_hosts is not None:
        host_rows.append(_host_row(data, OTHER, other_hosts))
    pct_rows = [
        ["download latency", *(_sec(seconds_at(data.latency, p)) for p in (50, 95, 99)), data.latency.get_total_count()],
        ["wait at the gates", *(_sec(seconds_at(data.wait, p)) for p in (50, 95, 99)), data.wait.get_total_count()],
    ]
    labels = _order({k for c in data.endpoints.values() for k in c})
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
        _figure(f"fig-host-{i}", f"Throttle timeline: {host}", host_timeline_svg(data, host, g),
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
        _figure("fig-throughput", "Successful pages per minute", throughput_svg(data),
                "Green: successful pages (2xx/3xx, not rate-limited) per minute in each bin; orange bars: "
                "rate-limited answers per minute; dashed: run average."),
        _figure("fig-latency", "Download latency", latency_svg(data),
                "Responses per latency bin (log scale), time at the gates excluded; dashed lines: percentiles."),
        _table(["", "P50", "P95", "P99", "samples"], pct_rows),
        "<h2>Per host</h2>",
        _table(["host", "attempts", "ok", "429", "403", "404", "P50", "P95", "P99"], host_rows),
        _fold_line(folded_hosts, "hosts"),
        *_ladder_part(data, top_hosts),
        *throttle_part,
        _figure("fig-status-endpoint", "Status by endpoint", status_by_endpoint_svg(data, top),
                "Answers per proxy endpoint (masked), by HTTP status or exception class."),
        _table(["endpoint", "attempts", *labels], ep_rows),
        _fold_line(max(0, len(ranked) - top), "endpoints"),
        _figure("fig-exit-ips", "Requests per exit IP", exit_ips_svg(data),
                f"Requests per exit IP as seen by the target; exit IP source: {sources_txt}."),
        *timelines,
    ]
    return _page(title, body)


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
    a: ReportData, b: ReportData, ga: _Group | None, gb: _Group | None, name: str
) -> list[tuple[str, str, str, tuple[str, str]]]:
    """(metric, run A, run B, (difference, class)) for one host (or overall, *ga*/*gb* None)."""

    def stats(d: ReportData, g: _Group | None, whole: bool) -> dict[str, float | None]:
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
        return "-" if v is None else f"{_num(round(v, 2))}{unit}"

    return [
        ("pages/min", fmt(sa["ppm"]), fmt(sb["ppm"]), _diff(sa["ppm"], sb["ppm"], True)),
        ("success rate", fmt(sa["success"], "%"), fmt(sb["success"], "%"),
         _diff(sa["success"], sb["success"], True, " pt")),
        ("429s", fmt(sa["limited"]), fmt(sb["limited"]), _diff(sa["limited"], sb["limited"], False)),
        ("429 share", fmt(sa["share"], "%"), fmt(sb["share"], "%"), _diff(sa["share"], sb["share"], False, " pt")),
        ("latency P50", _sec(sa["p50"]), _sec(sb["p50"]), _diff(sa["p50"], sb["p50"], False, " s")),
        ("latency P95", _sec(sa["p95"]), _sec(sb["p95"]), _diff(sa["p95"], sb["p95"], False, " s")),
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

    def fold(d: ReportData) -> _Group | None:
        groups = [d.hosts[h] for h in folded if h in d.hosts]
        if not groups:
            return None
        other = _Group()
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
        _fold_line(len(folded), "hosts"),
        _figure("fig-throughput-a", f"A: {names[0]}", throughput_svg(a), "Successful pages and 429s per minute."),
        _figure("fig-throughput-b", f"B: {names[1]}", throughput_svg(b), "Successful pages and 429s per minute."),
    ]
    return _page(title, body)


def _page(title: str, body: list[str]) -> str:
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title><style>{_CSS}</style></head><body>"
        + "\n".join(body)
        + "</body></html>\n"
    )


def build(paths: Iterable[str | Path]) -> ReportData:
    data = ReportData()
    for rec in read_records(paths, data.skipped):
        data.add(rec)
    return data


def write_report(
    paths: list[str], output: str | Path, title: str = "scrapy-polite crawl report", top: int = DEFAULT_TOP
) -> ReportData:
    """Read *paths* (one run) and write its report to *output*; the data, for a summary line."""
    data = build(paths)
    Path(output).write_text(render(data, title, [Path(p).name for p in paths], top), encoding="utf-8")
    return data


#: One line on what the command does: its --help, ``scrapy -h`` and ``python -m scrapy_polite``.
DESCRIPTION = "Write a self-contained HTML report from POLITE_STATS_JSONL files."


def _positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return n


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The command's arguments, shared by ``polite-report``, ``scrapy polite-report`` and ``python -m``."""
    parser.add_argument("jsonl", nargs="+", help="JSONL files (include the rotated .1 file for the full run)")
    parser.add_argument("-o", "--output", default="report.html", help="HTML file to write (default: %(default)s)")
    parser.add_argument("--title", default="scrapy-polite crawl report")
    parser.add_argument("--top", type=_positive, default=DEFAULT_TOP,
                        help="hosts and endpoints shown one by one, the rest in one (other) row "
                             "(default: %(default)s)")
    parser.add_argument("--compare", nargs="+", metavar="JSONL",
                        help="a second run's JSONL files: write a side-by-side comparison of the two runs")


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    parser = argparse.ArgumentParser(prog=prog, description=DESCRIPTION)
    add_arguments(parser)
    return run(parser.parse_args(argv))


def run(args: argparse.Namespace) -> int:
    """Write the report *args* ask for; returns the exit code."""
    top = getattr(args, "top", DEFAULT_TOP)
    try:
        if getattr(args, "compare", None):
            a, b = build(args.jsonl), build(args.compare)
        else:
            data = write_report(args.jsonl, args.output, args.title, top)
    except OSError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if getattr(args, "compare", None):
        names = (" ".join(Path(p).name for p in args.jsonl), " ".join(Path(p).name for p in args.compare))
        title = args.title if args.title != "scrapy-polite crawl report" else "scrapy-polite: two runs compared"
        Path(args.output).write_text(render_compare(a, b, names, title, top), encoding="utf-8")
        print(f"{args.output}: A {a.records} records, {a.pages_per_min():.1f} pages/min; "
              f"B {b.records} records, {b.pages_per_min():.1f} pages/min")
        return 0
    print(f"{args.output}: {data.records} records, {data.ok} successful pages, "
          f"{data.pages_per_min():.1f} pages/min{'; ' + data.skipped_text() if data.skipped else ''}")
    return 0
