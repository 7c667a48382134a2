"""CPU per page, the package against plain Scrapy, in pairs run one after the other.

``python benchmarks/overhead.py [--quick] [--out DIR]`` runs it alone and exits 1 when its check
fails; ``run.py`` runs it after the matrix and puts its check with the others.

The machine's load drifts over a run (the benchmarks share it with whatever else runs), so the
two clients run alternately, plain Scrapy then the package, and each pair gives one ratio: the
check reads the median of the pairs' ratios, which a slow minute moves less than a ratio of
medians taken over the whole run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from scenarios import Scenario, overhead_scenario  # noqa: E402

PLAIN, POLITE = "scrapy-defaults", "polite-defaults"
PAIRS = 3
#: The most CPU per page the package may spend, as a multiple of plain Scrapy's (median of the pairs).
MAX_RATIO = 1.1
CHECK = f"polite-defaults CPU per page <= {MAX_RATIO}x plain Scrapy's (median of {PAIRS} pairs)"

RunOne = Callable[[Scenario, str, Path], dict[str, Any]]


def figures(r: dict[str, Any]) -> dict[str, float]:
    """CPU seconds per 1,000 requests and requests per second of one crawl."""
    n = max(1, r.get("requests", 0))
    c = r.get("crawler", {})
    return {
        "requests": n,
        "crawl_cpu_per_1k": 1000 * c.get("crawl_cpu", float("nan")) / n,
        "total_cpu_per_1k": 1000 * c.get("total_cpu", float("nan")) / n,
        "req_per_s": n / max(r.get("span", 1e-9), 1e-9),
        # A handler that fails on every answer (its traceback logged each time) costs more than the rest.
        "errors": c.get("stats", {}).get("log_count/ERROR", 0),
    }


def overhead(quick: bool, out: Path, run_one: RunOne, pairs: int = PAIRS) -> dict[str, Any]:
    """*pairs* pairs of crawls on an unlimited site, plain Scrapy then the package; the ratio of each pair."""
    sc = overhead_scenario(quick)
    per: dict[str, list[dict[str, float]]] = {PLAIN: [], POLITE: []}
    ratios: list[dict[str, float]] = []
    for rep in range(pairs):
        for client in per:
            per[client].append(figures(run_one(sc, client, out / f"overhead{rep}")))
        plain, polite = per[PLAIN][-1], per[POLITE][-1]
        ratios.append({k: polite[k] / plain[k] for k in ("crawl_cpu_per_1k", "total_cpu_per_1k")})
        print(f"  pair {rep + 1}: plain {plain['crawl_cpu_per_1k']:.3f}, polite {polite['crawl_cpu_per_1k']:.3f} "
              f"CPU s/1k: {ratios[-1]['crawl_cpu_per_1k']:.3f}x; errors logged {plain['errors']:.0f}, "
              f"{polite['errors']:.0f}", flush=True)
    summary = {k: {f: statistics.median(x[f] for x in v) for f in v[0]} for k, v in per.items()}
    return {"runs": per, "pairs": ratios, "median": summary,
            "ratio_crawl_cpu": statistics.median(r["crawl_cpu_per_1k"] for r in ratios),
            "ratio_total_cpu": statistics.median(r["total_cpu_per_1k"] for r in ratios)}


def check(ov: dict[str, Any] | None) -> dict[str, Any]:
    """The overhead check: the median of the pairs' crawl-CPU ratios at most ``MAX_RATIO``."""
    if not ov:
        return {"check": CHECK, "pass": None, "detail": "not run"}
    each = ", ".join(f"{r['crawl_cpu_per_1k']:.3f}" for r in ov["pairs"])
    return {"check": CHECK, "pass": ov["ratio_crawl_cpu"] <= MAX_RATIO,
            "detail": f"median {ov['ratio_crawl_cpu']:.3f}x (pairs {each})"}


def report(ov: dict[str, Any]) -> list[str]:
    """The report's overhead section."""
    p, q = ov["median"][PLAIN], ov["median"][POLITE]
    lines = ["", "## Overhead", "",
             "CPU seconds per 1,000 requests on an unlimited local site (median of runs; *crawl* = between "
             "spider_opened and spider_closed in the child, *total* = the child's whole getrusage). The two "
             "clients run alternately; the ratio is the median of each pair's ratio.", "",
             "| client | requests | req/s | crawl CPU s/1k | total CPU s/1k |", "|---|---:|---:|---:|---:|"]
    for name, m in ((PLAIN, p), (POLITE, q)):
        lines.append(f"| {name} | {m['requests']:.0f} | {m['req_per_s']:.0f} | {m['crawl_cpu_per_1k']:.3f} | "
                     f"{m['total_cpu_per_1k']:.3f} |")
    lines += ["", "| pair | plain crawl CPU s/1k | polite crawl CPU s/1k | ratio | errors logged (polite) |",
              "|---:|---:|---:|---:|---:|"]
    for i, (a, b, r) in enumerate(zip(ov["runs"][PLAIN], ov["runs"][POLITE], ov["pairs"]), 1):
        lines.append(f"| {i} | {a['crawl_cpu_per_1k']:.3f} | {b['crawl_cpu_per_1k']:.3f} | "
                     f"{r['crawl_cpu_per_1k']:.3f}x | {b.get('errors', 0):.0f} |")
    lines += ["", f"Ratio polite / plain (median of the pairs): crawl CPU **{ov['ratio_crawl_cpu']:.2f}x**, "
                  f"total CPU {ov['ratio_total_cpu']:.2f}x."]
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1,000 pages a crawl instead of 4,000")
    parser.add_argument("--out", default=str(HERE / "out"))
    ns = parser.parse_args()
    from run import run_one

    out = Path(ns.out).resolve()
    ov = overhead(ns.quick, out, run_one)
    result = check(ov)
    (out / "overhead.json").write_text(json.dumps({"overhead": ov, "check": result}, indent=1))
    print("\n".join(report(ov)))
    print(f"\n{'pass' if result['pass'] else 'FAIL'}: {result['check']}: {result['detail']}")
    return 0 if result["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
