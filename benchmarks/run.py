"""Run the benchmark matrix (scenarios x clients) against fresh sandboxes and write the report.

``python benchmarks/run.py [--quick] [--zoo] [--out DIR] [--jobs N] [--only SCENARIO,...] [--clients NAME,...]``

Every crawl runs in its own subprocess (``crawl_client.py``) against its own
sandbox, bounded by a page budget, a wall-clock limit (CLOSESPIDER_TIMEOUT or
``asyncio.wait_for``) and a hard subprocess timeout. Metrics come from the
sandbox's access log. Writes ``results.json``, ``results.md`` and SVG plots.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import gate_bench  # noqa: E402
import overhead  # noqa: E402
import svg  # noqa: E402
import zoo  # noqa: E402
import zoo_report  # noqa: E402
from crawl_client import CLIENTS  # noqa: E402
from metrics import compute  # noqa: E402
from scenarios import Scenario, build  # noqa: E402

from scrapy_polite.sandbox import Sandbox  # noqa: E402

HARD_MARGIN = 25.0
GATEWAY_SESSIONS = 10
POLITE = ("polite-defaults", "polite-adaptive")
#: Scenarios where adaptive mode must reach 0.90 of the physical limit.
ADAPTIVE_TARGETS = ("per-ip", "host-cap", "host-cap-fast", "shifting", "multi-host", "both-bind", "bursty")


def rotating_proxies_problem() -> str | None:
    """Why scrapy-rotating-proxies cannot run here, or ``None`` if it imports."""
    proc = subprocess.run([sys.executable, "-c", "import scrapy, rotating_proxies.middlewares"],
                          capture_output=True, text=True, timeout=60)
    if proc.returncode == 0:
        return None
    return (proc.stderr.strip().splitlines() or ["import failed"])[-1]


#: Run *i* of a cell has the scenario's timed events (the shifting cap's fall and rise, proxy
#: deaths) *i* times this many seconds later. A throttle probes a fallen cap every few seconds, and
#: where the rise falls between two probes decides much of its efficiency: with the events at the
#: same times, each run met the rise at the same phase, and the median of three was one phase.
PHASE_STEP = 1.7


def run_median(sc: Scenario, client: str, out: Path, runs: int) -> dict[str, Any]:
    """*runs* crawls of one cell; the result of the run with the median steady efficiency, with every run's figures."""
    if runs <= 1:
        return run_one(sc, client, out)
    each = []
    for i in range(runs):
        each.append(run_one(sc.phased(i * PHASE_STEP), client, out, i))
        each[-1]["phase"] = i * PHASE_STEP
    each.sort(key=lambda r: r.get("steady_efficiency") or 0.0)
    mid = dict(each[len(each) // 2])
    mid["runs"] = [{k: r.get(k) for k in ("steady_efficiency", "efficiency", "rate_429", "s429", "s403", "ok")}
                   for r in each]
    return mid


def run_one(sc: Scenario, client: str, out: Path, index: int = 0) -> dict[str, Any]:
    """One crawl of *client* on a fresh sandbox of *sc*; metrics from the access log."""
    work = out / "runs" / (f"{sc.name}--{client}" + (f"--{index}" if index else ""))
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    sb = Sandbox(sc.config, work / "sandbox")
    sb.start()
    applied: list[dict[str, Any]] = []
    killed = False
    try:
        if sc.via_gateway:
            template = sb.gateway_template or ""
            proxies = [template.replace("{session}", f"s{i}") for i in range(GATEWAY_SESSIONS)]
            polite_proxies = [template]
        else:
            proxies = polite_proxies = sb.proxy_urls
        settings = dict(sc.settings)
        if client in POLITE:
            settings.update(sc.polite_settings)
            settings.setdefault("POLITE_GATEWAY_SESSIONS", GATEWAY_SESSIONS)
            if sc.cheap_tier is not None:
                polite_proxies = proxies[:sc.cheap_tier]
                settings["POLITE_PROXY_TIERS"] = [proxies[sc.cheap_tier:]]
        args = {
            "spider": sc.spider, "start_urls": [sb.site_url(s.name) for s in sc.config.sites],
            "users": sc.users, "proxies": proxies, "polite_proxies": polite_proxies,
            "time_limit": sc.time_limit, "page_budget": sc.page_budget, "settings": settings,
            "result": str(work / "result.json"), "log_file": str(work / "crawl.log"),
        }
        (work / "args.json").write_text(json.dumps(args, indent=1))
        cmd = [sys.executable, str(HERE / "crawl_client.py"), "--client", client, "--scenario", sc.name,
               "--json", f"@{work / 'args.json'}"]
        with open(work / "stdout.log", "wb") as so, open(work / "stderr.log", "wb") as se:
            t0 = time.time()
            proc = subprocess.Popen(cmd, stdout=so, stderr=se, cwd=HERE.parent)
            done = threading.Event()
            thread = threading.Thread(target=_events, args=(sb, sc, t0, done, applied), daemon=True)
            thread.start()
            try:
                rc = proc.wait(timeout=sc.time_limit + HARD_MARGIN)
            except subprocess.TimeoutExpired:
                proc.kill()
                rc = proc.wait(timeout=10)
                killed = True
            wall = time.time() - t0
            done.set()
            thread.join(timeout=10)
        log = sb.log()
    finally:
        sb.stop()
    res_path = work / "result.json"
    crawler = json.loads(res_path.read_text()) if res_path.exists() else {}
    m = compute(log, sc, t0)
    return {"scenario": sc.name, "client": client, "rc": rc, "killed": killed, "wall": wall,
            "events": applied, "crawler": crawler, **m}


def _events(sb: Sandbox, sc: Scenario, t0: float, done: threading.Event, applied: list[dict[str, Any]]) -> None:
    for ev in sorted(sc.events, key=lambda e: e.at):
        if done.wait(max(0.0, t0 + ev.at - time.time())):
            return
        if ev.action == "host_rate":
            sb.set_host_rate(str(ev.target), ev.value)
        elif ev.action == "die":
            sb.fail_proxy(ev.target, "die")
        applied.append({"at": time.time() - t0, "action": ev.action, "target": ev.target, "value": ev.value})


def find(results: list[dict[str, Any]], scenario: str, client: str) -> dict[str, Any] | None:
    """The result of one cell, if it ran."""
    return next((r for r in results if r["scenario"] == scenario and r["client"] == client), None)


def checks(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The issue's acceptance checks, evaluated on the measured numbers."""
    out = []

    def add(name: str, r: dict[str, Any] | None, ok: bool | None, detail: str) -> None:
        out.append({"check": name, "pass": ok if r is not None else None,
                    "detail": detail if r is not None else "not run"})

    r = find(results, "unlimited", "polite-defaults")
    if r:
        e = r.get("steady_efficiency") or 0.0
        add("polite-defaults on unlimited >= 0.95 of what spacing allows", r, e >= 0.95,
            f"steady {e:.3f} ({r.get('steady_rate', 0):.2f} of {r['limit']:.2f} pages/s); "
            f"whole run {r['efficiency']:.3f}")
    else:
        add("polite-defaults on unlimited >= 0.95 of what spacing allows", None, None, "")
    for sc in ADAPTIVE_TARGETS:
        r = find(results, sc, "polite-adaptive")
        name = f"polite-adaptive {sc} >= 0.90 of the limit, 429s < 2%, no 403s, none inside Retry-After"
        if r:
            e = r.get("steady_efficiency") or 0.0
            inside = r.get("inside_retry_after", 0)
            ok = e >= 0.90 and r["rate_429"] < 0.02 and r["s403"] == 0 and inside == 0
            add(name, r, ok, f"steady {e:.3f} (whole run {r['efficiency']:.3f}); 429s {100 * r['rate_429']:.1f}% "
                             f"({r['s429']}/{r['requests']}); 403s {r['s403']}; inside Retry-After {inside}")
        else:
            add(name, None, None, "")
    for sc in sorted({r["scenario"] for r in results}):
        a, d = find(results, sc, "polite-adaptive"), find(results, sc, "polite-defaults")
        if a and d and a.get("steady_efficiency") is not None and d.get("steady_efficiency") is not None:
            ea, ed = a["steady_efficiency"], d["steady_efficiency"]
            add(f"polite-adaptive not slower than polite-defaults on {sc}", a, ea >= ed,
                f"steady {ea:.3f} vs {ed:.3f}")
    for client in POLITE:
        r = find(results, "shifting", client)
        name = f"{client} shifting: back to >= 0.8 of the risen cap within 10 s"
        rec = (r or {}).get("recovery") or {}
        secs = rec.get("seconds")
        add(name, r, secs is not None and secs <= 10,
            (f"{secs:.1f} s" if secs is not None else
             f"not reached in {rec.get('observed_after_rise', 0):.0f} s observed")
            + f" (target {rec.get('target', 0):.1f} pages/s over 5 s; best 5 s window {rec.get('best_rate', 0):.2f})")
    return out


def fmt(v: Any, spec: str = ".2f") -> str:
    """A table cell."""
    if v is None:
        return "–"
    if isinstance(v, float):
        return format(v, spec)
    return str(v)


def report(data: dict[str, Any], out: Path) -> str:
    """The markdown report."""
    res = data["results"]
    lines = [f"# scrapy-polite benchmarks ({'quick' if data['quick'] else 'full'})", "",
             f"{data['started']}, {data['python']}, Scrapy {data['scrapy']}, {data['cpus']} CPUs, "
             f"{data['jobs']} crawls at a time; total run time {data['run_seconds']:.0f} s"
             + (f"; each cell the median of {data['runs']} runs." if data.get("runs", 1) > 1 else "."), "",
             "Every number comes from the sandbox's access log. *eff* = successful pages/s divided by the "
             "scenario's physical limit; *steady* uses the middle 80% of successful requests "
             "(no discovery ramp-up, no tail), *run* the whole crawl. † = the crawl lost items (gave up on pages "
             "it had requested), so its rate is over a crawl that did not do the work.", ""]
    if data["notes"]:
        lines += [f"- {n}" for n in data["notes"]] + [""]
    lines += ["## Checks", "", "| check | result | numbers |", "|---|---|---|"]
    for c in data["checks"]:
        verdict = {True: "**pass**", False: "**FAIL**", None: "n/a"}[c["pass"]]
        lines.append(f"| {c['check']} | {verdict} | {c['detail']} |")
    lines += ["", "## Results", "",
              "| scenario | client | ok pages | pages/min | limit/s | eff run | eff steady | 429 | 403 | 409 "
              "| in Retry-After | lost items | items ok | max in-flight/IP | P50 ms | P95 ms | wall s | end |",
              "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in res:
        items = (f"{r.get('flows_ok')}/{r.get('flows_total')} flows" if r.get("flows_total") is not None
                 else f"{r.get('items_ok', 0)}/{r.get('items_total')}")
        dag = " †" if r.get("lost_items") else ""
        end = "killed" if r["killed"] else (r.get("crawler", {}).get("finish_reason") or f"rc {r['rc']}")
        lines.append("| " + " | ".join([
            r["scenario"], r["client"], fmt(r.get("ok")), fmt(r.get("pages_per_min"), ".0f"),
            fmt(r.get("limit")), fmt(r.get("efficiency")) + dag, fmt(r.get("steady_efficiency")) + dag,
            fmt(r.get("s429")), fmt(r.get("s403")), fmt(r.get("s409")), fmt(r.get("inside_retry_after")),
            fmt(r.get("lost_items")), items,
            fmt(r.get("max_inflight_ip")), fmt((r.get("p50") or 0) * 1000, ".1f"),
            fmt((r.get("p95") or 0) * 1000, ".1f"), fmt(r["wall"], ".1f"), end]) + " |")
    sh = [r for r in res if r.get("recovery")]
    if sh:
        lines += ["", "## Shifting cap: recovery after the rise", "",
                  "| client | seconds to >= 0.8 x cap | best 5 s rate | observed after rise |", "|---|---:|---:|---:|"]
        for r in sh:
            rec = r["recovery"]
            seen = rec["observed_after_rise"]
            lines.append(f"| {r['client']} | {fmt(rec['seconds'], '.1f')} | {rec['best_rate']:.2f} | "
                         + (f"{seen:.0f} s |" if seen > 0 else "crawl ended before the rise |"))
    mh = [r for r in res if r.get("per_site")]
    if mh:
        lines += ["", "## Multi-host, per site (ok / 429 / 403)", "",
                  "| client | " + " | ".join(mh[0]["per_site"]) + " |", "|---|" + "---|" * len(mh[0]["per_site"])]
        for r in mh:
            lines.append(f"| {r['client']} | " + " | ".join(
                f"{v['ok']} / {v['s429']} / {v['s403']}" for v in r["per_site"].values()) + " |")
    if data.get("overhead"):
        lines += overhead.report(data["overhead"])
    gb = data.get("gate")
    if gb:
        s, lg = gb["small"], gb["large"]
        lines += ["", "## Gate micro-benchmark (LocalGate, fake clock)", "",
                  "| pool | µs per acquire+release | state after setup | retained growth per request | pairs |",
                  "|---|---:|---:|---:|---:|",
                  f"| {s['endpoints']} endpoints, {s['hosts']} host | {s['us_per_request']:.2f} | "
                  f"{s['setup_bytes'] / 1024:.1f} KiB | {s['growth_bytes_per_request']:.1f} B | {s['pairs']} |",
                  f"| {lg['endpoints']} endpoints, {lg['hosts']} hosts | {lg['us_per_request']:.2f} | "
                  f"{lg['setup_bytes'] / 1024:.1f} KiB | {lg['growth_bytes_per_request']:.1f} B | {lg['pairs']} |", "",
                  f"Cost ratio large / small: **{gb['ratio']:.2f}x**."]
    lines += ["", "## Scenarios", "", "| scenario | what | physical limit | time limit | page budget |",
              "|---|---|---|---:|---:|"]
    for sc in data["scenarios"]:
        lines.append(f"| {sc['name']} | {sc['description']} | {sc['limit_note']} | {sc['time_limit']:g} s | "
                     f"{sc['page_budget']} |")
    lines += ["", "Plots: `efficiency.svg`, `rate429.svg`, `shifting.svg`, `proxies-die.svg`.", ""]
    return "\n".join(lines)


def plots(data: dict[str, Any], out: Path, scenarios: list[Scenario]) -> None:
    """Write the SVG charts."""
    res = data["results"]
    names = [s.name for s in scenarios]
    clients = [c for c in data["clients"] if any(r["client"] == c for r in res)]

    def cell(s: str, c: str, key: str, scale: float = 1.0) -> float | None:
        r = find(res, s, c)
        v = r.get(key) if r else None
        return None if v is None else v * scale

    (out / "efficiency.svg").write_text(svg.grouped_bars(
        "Steady successful pages/s vs physical limit (clipped at 2)", names,
        {c: [cell(s, c, "steady_efficiency") for s in names] for c in clients}, "efficiency", ref=1.0, ymax=2.0))
    (out / "rate429.svg").write_text(svg.grouped_bars(
        "Share of requests answered 429 (%)", names,
        {c: [cell(s, c, "rate_429", 100) for s in names] for c in clients}, "% of requests"))
    for name in ("shifting", "proxies-die"):
        sc = next((s for s in scenarios if s.name == name), None)
        # Each client's median run, its pages/s per second moved back by its phase (to the nearest
        # second), so that the limit steps drawn are where its events came.
        series = {c: r["series"][round(r.get("phase", 0.0)):] for c in clients if (r := find(res, name, c))}
        if sc and series:
            (out / f"{name}.svg").write_text(svg.lines(
                f"{name}: successful pages per second", series, "pages/s", "seconds since crawl start",
                steps=sc.limit_steps))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short runs (about 5 minutes on 2 cores)")
    parser.add_argument("--out", default=str(HERE / "out"))
    parser.add_argument("--jobs", type=int, default=None, help="crawls at a time (default 4 quick, 2 full)")
    parser.add_argument("--only", default="", help="comma-separated scenario names")
    parser.add_argument("--clients", default="", help="comma-separated client names")
    parser.add_argument("--no-overhead", action="store_true", help="skip the CPU and gate benchmarks")
    parser.add_argument("--runs", type=int, default=1, help="crawls per cell; the median one is reported")
    parser.add_argument("--zoo", action="store_true", help="the limiter zoo (as --only zoo); see zoo.py")
    ns = parser.parse_args()
    out = Path(ns.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    jobs = ns.jobs or (4 if ns.quick else 2)
    started = time.time()
    scenarios = zoo.select(build(ns.quick) + zoo.build_zoo(ns.quick), ns.only, ns.zoo)
    clients = zoo.clients(CLIENTS, ns.clients, scenarios)
    notes: list[str] = []
    if "scrapy-rotating-proxies" in clients:
        problem = rotating_proxies_problem()
        if problem:
            clients.remove("scrapy-rotating-proxies")
            notes.append(f"scrapy-rotating-proxies skipped: it does not import here ({problem}; "
                         "`pip install --group bench` installs it).")
    import scrapy

    cells = [(s, c) for s in sorted(scenarios, key=lambda s: -s.time_limit) for c in clients]
    print(f"{len(cells)} crawls, {jobs} at a time", flush=True)

    def job(cell: tuple[Scenario, str]) -> dict[str, Any]:
        sc, client = cell
        r = run_median(sc, client, out, ns.runs)
        print(f"  {sc.name:12} {client:24} ok={r.get('ok', 0):4} eff={r.get('steady_efficiency') or 0:.2f} "
              f"429={r.get('s429', 0)} 403={r.get('s403', 0)} wall={r['wall']:.1f}s", flush=True)
        return r

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        results = list(pool.map(job, cells))
    order = {s.name: i for i, s in enumerate(scenarios)}
    results.sort(key=lambda r: (order[r["scenario"]], clients.index(r["client"])))
    data: dict[str, Any] = {
        "quick": ns.quick, "started": time.strftime("%Y-%m-%d %H:%M:%S"), "python": platform.python_version(),
        "scrapy": scrapy.__version__, "cpus": _cpus(), "jobs": jobs, "runs": ns.runs, "clients": clients,
        "notes": notes,
        "scenarios": [{"name": s.name, "description": s.description, "limit_note": s.limit_note,
                       "time_limit": s.time_limit, "page_budget": s.page_budget, "limit_steps": s.limit_steps}
                      for s in scenarios],
        "results": results,
    }
    if not ns.no_overhead and not all(s.zoo for s in scenarios):  # a zoo run is about the limiters
        print("overhead (alone)...", flush=True)
        data["overhead"] = overhead.overhead(ns.quick, out, run_one)
        print("gate micro-benchmark...", flush=True)
        data["gate"] = gate_bench.bench(ns.quick)
    data["checks"] = zoo_report.relevant(checks(results), scenarios) + zoo_report.checks(results, scenarios)
    if "overhead" in data:
        data["checks"].append(overhead.check(data["overhead"]))
    data["run_seconds"] = time.time() - started
    (out / "results.json").write_text(json.dumps(data, indent=1, default=str))
    plots(data, out, scenarios)
    md = zoo_report.insert(report(data, out), results, scenarios)
    (out / "results.md").write_text(md)
    print(md)
    return 0


def _cpus() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


if __name__ == "__main__":
    sys.exit(main())
