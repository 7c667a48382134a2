"""The limiter zoo's per-cell figures (from the sandbox's access log), its checks and its table."""

from __future__ import annotations

import statistics
from typing import Any

from scenarios import Scenario

ADAPTIVE_MEDIAN, ADAPTIVE_WORST, DEFAULTS_REFUSALS = 0.90, 0.80, 0.05


def cell(log: list[dict[str, Any]], sc: Scenario) -> dict[str, Any]:
    """Refusal shares, requests inside a Retry-After, blocked IPs; *log* without robots.txt."""
    n = max(1, len(log))
    rate_limit = sum(e.get("refusal") == "rate_limit" for e in log)
    overload = sum(e.get("refusal") == "overload" for e in log)
    # A rate-independent site refuses every path's first request by design: those are not the client's.
    by_design = {s.name for s in sc.config.sites if (s.limiter or {}).get("kind") == "rate_independent"}
    unavoidable = len({(e["site"], e["path"]) for e in log if e["site"] in by_design})
    return {
        "rate_limit_answers": rate_limit, "overload_answers": overload, "s503": sum(e["status"] == 503 for e in log),
        "rate_limit_share": rate_limit / n, "overload_share": overload / n,
        "refusal_share": max(0, rate_limit + overload - unavoidable) / n, "refusals_by_design": unavoidable,
        "inside_retry_after": sum(bool(e.get("inside_retry_after")) for e in log),
        "blocked_ips": len({e["ip"] for e in log if e.get("blocked")}),
    }


def held_at_stop(r: dict[str, Any]) -> int:
    """Pages a crawl stopped by its time limit still held, waiting to go again (the package counts
    them as ``polite/dropped_at_close``): not given up, only unfinished."""
    stats = (r.get("crawler") or {}).get("stats") or {}
    return int(stats.get("polite/dropped_at_close", 0)) if r.get("lost_items") else 0


def lost(r: dict[str, Any]) -> int:
    """Pages asked for and never answered 200 (the access log), less those still held at the stop."""
    return max(0, (r.get("lost_items") or 0) - held_at_stop(r))


def _clean(r: dict[str, Any]) -> list[str]:
    """What a cell got wrong of: no page lost, none inside a Retry-After, no IP blocked, one in flight per IP."""
    bad = [f"{lost(r)} lost"] if lost(r) else []
    for key, label in (("inside_retry_after", "inside Retry-After"), ("blocked_ips", "blocked IPs")):
        if r.get(key):
            bad.append(f"{r[key]} {label}")
    if (r.get("max_inflight_ip") or 0) > 1:
        bad.append(f"{r['max_inflight_ip']} in flight per IP")
    return bad


def checks(results: list[dict[str, Any]], scenarios: list[Scenario]) -> list[dict[str, Any]]:
    """The zoo's targets for the throttle (they may fail: nothing is tuned to pass them)."""
    zoo = [s for s in scenarios if s.zoo]
    if not zoo:
        return []
    cells = {(r["scenario"], r["client"]): r for r in results}
    out: list[dict[str, Any]] = []

    def add(name: str, ok: bool | None, detail: str) -> None:
        out.append({"check": name, "pass": ok, "detail": detail})

    eff = {s.name: cells[(s.name, "polite-adaptive")].get("steady_efficiency") or 0.0
           for s in zoo if (s.name, "polite-adaptive") in cells}
    if eff:
        med, worst = statistics.median(eff.values()), min(eff, key=eff.__getitem__)
        add(f"zoo: polite-adaptive median steady efficiency >= {ADAPTIVE_MEDIAN:.2f}", med >= ADAPTIVE_MEDIAN,
            f"median {med:.3f} over {len(eff)} scenarios")
        add(f"zoo: polite-adaptive worst steady efficiency >= {ADAPTIVE_WORST:.2f}", eff[worst] >= ADAPTIVE_WORST,
            f"{worst} {eff[worst]:.3f}")
    for s in zoo:
        a = cells.get((s.name, "polite-adaptive"))
        if a is not None:
            share, bad = a.get("refusal_share", 0.0), _clean(a)
            add(f"{s.name}: polite-adaptive refusals <= {100 * s.refusal_cap:g}%, nothing lost, none inside "
                "Retry-After, no IP blocked, 1 in flight per IP", share <= s.refusal_cap and not bad,
                f"refusals {100 * share:.1f}%" + (f"; {', '.join(bad)}" if bad else ""))
            for other in ("polite-defaults", "reference"):
                o = cells.get((s.name, other))
                if o is not None:
                    ea, eo = a.get("steady_efficiency") or 0.0, o.get("steady_efficiency") or 0.0
                    add(f"{s.name}: polite-adaptive >= {other}", ea >= eo, f"steady {ea:.3f} vs {eo:.3f}")
    d = [(s.name, cells[(s.name, "polite-defaults")]) for s in zoo if (s.name, "polite-defaults") in cells]
    if d:
        gone = {n: lost(r) for n, r in d if lost(r)}
        add("zoo: polite-defaults never loses a page", not gone, ", ".join(f"{n} {v}" for n, v in gone.items())
            or f"0 lost on {len(d)} scenarios")
        over = {n: r.get("refusal_share", 0.0) for n, r in d if r.get("refusal_share", 0.0) > DEFAULTS_REFUSALS}
        add(f"zoo: polite-defaults refusals <= {100 * DEFAULTS_REFUSALS:g}%", not over,
            ", ".join(f"{n} {100 * v:.1f}%" for n, v in over.items()) or f"all within, {len(d)} scenarios")
    return out


def table(results: list[dict[str, Any]], scenarios: list[Scenario]) -> list[str]:
    """The zoo table: scenario x client, efficiency, 429 / 503 shares, lost, and what else went wrong."""
    zoo = [s.name for s in scenarios if s.zoo]
    rows = [r for r in results if r["scenario"] in zoo]
    if not rows:
        return []
    lines = ["", "## Limiter zoo", "",
             "*eff* = steady efficiency against the limiter's capacity (– under 10 pages); *rate-limit* and *overload* = the site's "
             "refusals of each kind as a share of requests (a rate-independent site's by-design 429s included); "
             "*lost* = pages given up (asked for, never answered 200, not held at the time limit); "
             "*other* = pages still held when the time limit stopped the crawl, requests inside a Retry-After, "
             "blocked IPs, more than one request in flight per IP.", "",
             "| scenario | client | eff | rate-limit | overload | lost | other |", "|---|---|---:|---:|---:|---:|---|"]
    for r in sorted(rows, key=lambda r: (zoo.index(r["scenario"]), r["client"])):
        other = [b for b in _clean(r) if "lost" not in b]
        if held_at_stop(r):
            other.insert(0, f"{held_at_stop(r)} held at the time limit")
        eff = r.get("steady_efficiency")
        lines.append(f"| {r['scenario']} | {r['client']} | {'–' if eff is None else f'{eff:.2f}'} | "
                     f"{100 * r.get('rate_limit_share', 0):.1f}% | {100 * r.get('overload_share', 0):.1f}% | "
                     f"{lost(r) if 'lost_items' in r else '–'} | {', '.join(other) or '–'} |")
    return lines


def relevant(base: list[dict[str, Any]], scenarios: list[Scenario]) -> list[dict[str, Any]]:
    """The matrix's checks, without those left unrun by a zoo-only run."""
    if scenarios and all(s.zoo for s in scenarios):
        return [c for c in base if c["pass"] is not None]
    return base


def insert(md: str, results: list[dict[str, Any]], scenarios: list[Scenario]) -> str:
    """*md* with the zoo table before its results table."""
    lines = table(results, scenarios)
    if not lines:
        return md
    block = "\n".join(lines[1:]) + "\n\n"
    return md.replace("## Results\n", block + "## Results\n", 1) if "## Results\n" in md else md + "\n" + block
