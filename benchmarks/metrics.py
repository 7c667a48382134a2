"""Metrics from the sandbox access log (the ground truth), one dict per run."""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from typing import Any

import zoo_report
from scenarios import Scenario, limit_at

ITEM_RE = re.compile(r"^/item/(\d+)$")
RECOVERY_WINDOW = 5.0
RECOVERY_SHARE = 0.8
STEADY_LOW, STEADY_HIGH = 0.1, 0.9


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (``None`` for no values)."""
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))]


def mean_limit(steps: list[tuple[float, float]], a: float, b: float) -> float:
    """Time-average of the step-function limit over [a, b] (seconds after crawl start)."""
    if b <= a:
        return limit_at(steps, a)
    cuts = sorted({a, b, *(t for t, _ in steps if a < t < b)})
    return sum(limit_at(steps, x) * (y - x) for x, y in zip(cuts, cuts[1:])) / (b - a)


def compute(log: list[dict[str, Any]], sc: Scenario, t0: float) -> dict[str, Any]:
    """Throughput, efficiency, status counts, losses, in-flight, latency; times relative to *t0*."""
    log = sorted((e for e in log if e["path"] != "/robots.txt"), key=lambda e: e["t_start"])
    out: dict[str, Any] = {"requests": len(log)}
    if not log:
        return out | {"ok": 0, "pages_per_min": 0.0, "efficiency": 0.0, "steady_efficiency": 0.0}
    st = Counter(e["status"] for e in log)
    ok_starts = [e["t_start"] - t0 for e in log if e["status"] == 200]
    first, last = log[0]["t_start"] - t0, max(e["t_end"] for e in log) - t0
    span = max(last - first, 1e-6)
    ok = len(ok_starts)
    steps = [(t + first if t > 0 else t, v) for t, v in sc.limit_steps] if sc.steps_from_first else sc.limit_steps
    limit = mean_limit(steps, first, last)
    out.update(
        ok=ok, span=span, first=first, pages_per_min=ok * 60 / span,
        statuses={str(k): v for k, v in sorted(st.items())},
        s429=st.get(429, 0), s403=st.get(403, 0), s409=st.get(409, 0),
        rate_429=st.get(429, 0) / len(log),
        limit=limit, efficiency=(ok / span) / limit if math.isfinite(limit) else None,
        max_inflight_ip=max(e["inflight_ip"] for e in log),
        max_inflight_host=max(e["inflight_host"] for e in log),
    )
    out["inside_retry_after"] = inside_retry_after(log, {s.name: s.retry_after for s in sc.config.sites})
    lat = [e["t_end"] - e["t_start"] for e in log]
    out["p50"], out["p95"] = percentile(lat, 0.5), percentile(lat, 0.95)
    # Steady state: the middle 80 % of successful requests, free of discovery ramp-up and tail.
    if ok >= 10:
        lo, hi = ok_starts[int(STEADY_LOW * ok)], ok_starts[int(STEADY_HIGH * ok) - 1]
        n_mid = int(STEADY_HIGH * ok) - int(STEADY_LOW * ok) - 1
        if hi > lo:
            steady = n_mid / (hi - lo)
            lim = mean_limit(steps, lo, hi)
            out["steady_rate"] = steady
            out["steady_efficiency"] = steady / lim if math.isfinite(lim) else None
    # Items: requested at least once but never answered 200.
    asked: dict[str, set[int]] = defaultdict(set)
    got: dict[str, set[int]] = defaultdict(set)
    ok_hits: Counter[tuple[str, str]] = Counter()
    for e in log:
        m = ITEM_RE.match(e["path"].split("?")[0])
        if e["status"] == 200:
            ok_hits[(e["site"], e["path"])] += 1
        if m:
            asked[e["site"]].add(int(m.group(1)))
            if e["status"] == 200:
                got[e["site"]].add(int(m.group(1)))
    out["items_ok"] = sum(len(v) for v in got.values())
    out["items_total"] = sum(s.pages for s in sc.config.sites) if sc.spider == "catalogue" else None
    out["lost_items"] = sum(len(asked[s] - got[s]) for s in asked)
    out["duplicate_200s"] = sum(c - 1 for c in ok_hits.values() if c > 1)
    if sc.spider == "accounts":
        done = {e["user"] for e in log if e["path"] == "/account/orders" and e["status"] == 200}
        out["flows_ok"], out["flows_total"] = len(done), sc.users
    if len(sc.config.sites) > 1:
        per_site = {}
        for s in sc.config.sites:
            ents = [e for e in log if e["site"] == s.name]
            oks = [e["t_start"] for e in ents if e["status"] == 200]
            sp = (max(e["t_end"] for e in ents) - min(e["t_start"] for e in ents)) if ents else 0.0
            per_site[s.name] = {"ok": len(oks), "span": sp, "s429": sum(e["status"] == 429 for e in ents),
                                "s403": sum(e["status"] == 403 for e in ents)}
        out["per_site"] = per_site
    # 1-second bins of successful requests, for plots.
    bins: Counter[int] = Counter(int(t) for t in ok_starts if t >= 0)
    out["series"] = [bins.get(i, 0) for i in range(int(last) + 1)]
    if sc.zoo:
        out.update(zoo_report.cell(log, sc))
    rises = [ev for ev in sc.events if ev.action == "host_rate"]
    if len(rises) >= 2 and rises[-1].value and rises[-1].value > (rises[-2].value or 0):
        out["recovery"] = recovery(ok_starts, rises[-1].at, rises[-1].value, last)
    return out


def inside_retry_after(log: list[dict[str, Any]], retry_after: dict[str, float]) -> int:
    """Requests an IP sent to a site before the Retry-After of its last 429 there had passed."""
    last: dict[tuple[str, str], float] = {}
    inside = 0
    for e in sorted(log, key=lambda e: e["t_start"]):
        key = (e["site"], e["ip"])
        until = last.get(key)
        if until is not None and e["t_start"] < until - 0.05:
            inside += 1
        if e["status"] == 429:
            last[key] = e["t_end"] + retry_after.get(e["site"], 0.0)
    return inside


def recovery(ok_starts: list[float], rise: float, cap: float, end: float) -> dict[str, Any]:
    """Seconds from the cap rising until a 5 s window of successes reaches 0.8 x the new cap."""
    target = RECOVERY_SHARE * cap
    best = 0.0
    s = rise
    while s + RECOVERY_WINDOW <= end + 1e-9:
        n = sum(s <= t < s + RECOVERY_WINDOW for t in ok_starts)
        best = max(best, n / RECOVERY_WINDOW)
        if n / RECOVERY_WINDOW >= target:
            return {"seconds": round(s - rise, 2), "target": target, "best_rate": best,
                    "observed_after_rise": end - rise}
        s += 0.25
    return {"seconds": None, "target": target, "best_rate": best, "observed_after_rise": end - rise}
