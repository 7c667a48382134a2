"""The report's figures: every record folded into bounded aggregates, so a 100 MB log needs little memory."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hdrh.histogram import HdrHistogram

from scrapy_polite.metrics.outcome import is_ban as outcome_ban
from scrapy_polite.metrics.outcome import is_challenge
from scrapy_polite.metrics.percentiles import SparseHistogram
from scrapy_polite.metrics.top import OTHER, admit
from scrapy_polite.report.records import is_success, label_of, read_records
from scrapy_polite.report.throttle import ThrottleTrack

#: Time buckets are merged (their width doubled) beyond this many.
_MAX_TIME_BUCKETS = 20_000
#: A record without a verdict (an older JSONL) is a ban on POLITE_BAN_CODES' default.
DEFAULT_BAN_CODES = frozenset({403})
#: Exit IPs and endpoints tracked one by one; the rest are pooled.
MAX_NAMES = 5000
#: Latency histogram bins per power of ten.
BINS_PER_DECADE = 10
#: Per-host timeline buckets before halving.
_HOST_BUCKETS = 100
#: Time slices of the escalation-ladder table, per host.
LADDER_SLICES = 8


def _bump(counter: Counter[str], key: str, n: int = 1) -> None:
    counter[key if key in counter or len(counter) < MAX_NAMES else OTHER] += n


@dataclass
class HostGroup:
    """One host's counts, latencies and timeline (or the OTHER row's, merged)."""

    statuses: Counter[str] = field(default_factory=Counter)
    ok: int = 0
    rate_limited: int = 0
    challenges: int = 0
    bans: int = 0
    latency: SparseHistogram = field(default_factory=SparseHistogram)
    #: Time bucket (``resolution`` seconds wide) -> [ok, rate-limited].
    buckets: dict[int, list[int]] = field(default_factory=dict)
    resolution: int = 1
    throttle: ThrottleTrack | None = None

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

    def merge(self, other: HostGroup) -> None:
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
        self.hosts: dict[str, HostGroup] = {}
        #: Host rows folded into OTHER while reading (a broad crawl's hosts beyond MAX_NAMES).
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
            self.latency_bins[int(math.floor(BINS_PER_DECADE * math.log10(ms)))] += 1
        endpoint = rec.get("endpoint")
        if endpoint:
            wait = rec.get("wait")
            if isinstance(wait, (int, float)):
                self.wait.record_value(min(3_600_000, max(0, int(wait * 1000))))
            key = str(endpoint)
            if key not in self.endpoints and len(self.endpoints) >= MAX_NAMES:
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
            g.throttle = ThrottleTrack()
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

    def _host(self, host: str) -> HostGroup:
        g = self.hosts.get(host)
        if g is None:
            # The busiest MAX_NAMES / 2 or more keep their rows; a host busy late still gets one.
            self.hosts_folded += len(admit(self.hosts, host, MAX_NAMES // 2, HostGroup))
            g = self.hosts[host] = HostGroup()
        return g

    def top_hosts(self, n: int) -> tuple[list[tuple[str, HostGroup]], HostGroup | None, int]:
        """The *n* hosts with the most attempts, the rest merged into one group, and how many were."""
        # OTHER (hosts folded while reading) ranks last: it is never a top row.
        ranked = sorted(self.hosts.items(), key=lambda kv: (kv[0] == OTHER, -kv[1].total, kv[0]))
        top = [kv for kv in ranked[:n] if kv[0] != OTHER]
        rest = ranked[len(top):]
        if not rest:
            return top, None, 0
        other = HostGroup()
        for _, g in rest:
            other.merge(g)
        return top, other, sum(name != OTHER for name, _ in rest) + self.hosts_folded

    def host_pages_per_min(self, g: HostGroup) -> float:
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


def build(paths: Iterable[str | Path]) -> ReportData:
    """The figures of one run's JSONL files (its rotated ``.1`` file first)."""
    data = ReportData()
    for rec in read_records(paths, data.skipped):
        data.add(rec)
    return data
