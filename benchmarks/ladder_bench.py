"""The escalation-ladder benchmark: a site that challenges, then blocks, IPs that ignore its 429s.

Plain Scrapy (round-robin proxies), AutoThrottle and scrapy-rotating-proxies
(when it imports) against the package with one flat pool of 8 proxies and
with 6 cheap ones plus an expensive tier of 2. Two of the cheap IPs are
flagged from the start (an earlier crawl burned them). Judged from the
site's access log: successful pages/min, challenges seen, IPs blocked,
requests through the expensive tier.

    python benchmarks/ladder_bench.py [--quick] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from run import rotating_proxies_problem, run_one  # noqa: E402
from scenarios import Scenario, _catalogue_pages  # noqa: E402

from scrapy_polite.sandbox import SCENARIOS, ProxyConfig  # noqa: E402
from scrapy_polite.sandbox.client import read_access_log  # noqa: E402
from scrapy_polite.sandbox.proxy import nth_address  # noqa: E402

PROXIES = 8
CHEAP = 6
CLIENTS = ("scrapy-defaults", "scrapy-autothrottle", "scrapy-rotating-proxies", "polite-defaults")


def scenarios(quick: bool) -> list[Scenario]:
    pages = 80 if quick else 300
    config = SCENARIOS["ladder"]()
    config.sites[0].pages = pages
    config.sites[0].flag_time = 20.0
    common: dict[str, Any] = {
        "config": config,
        "time_limit": 30 if quick else 120, "page_budget": _catalogue_pages(pages),
        "limit_note": f"{PROXIES} proxies x 1 req/s", "limit_steps": [(0.0, float(PROXIES))],
    }
    return [
        Scenario("ladder", "1 req/s per IP; ignoring 429s earns challenges, then a block; 2 IPs burned",
                 **common),
        Scenario("ladder-tiers", f"the same site; the package with {CHEAP} cheap proxies and "
                 f"{PROXIES - CHEAP} expensive ones (POLITE_PROXY_TIERS)", cheap_tier=CHEAP,
                 polite_settings={"POLITE_TIER_ESCALATE_AFTER": 2, "POLITE_TIER_COOLDOWN": 20.0}, **common),
    ]


def ladder_metrics(log: list[dict[str, Any]], r: dict[str, Any], expensive: set[str]) -> dict[str, Any]:
    span = max(r.get("span") or 0.0, 1e-6)
    pages = sum(e["status"] == 200 and not e.get("challenge") for e in log)
    return {
        "scenario": r["scenario"], "client": r["client"], "pages": pages,
        "pages_per_min": round(pages * 60 / span, 1),
        "challenges": sum(bool(e.get("challenge")) for e in log),
        "ips_blocked": len({e["ip"] for e in log if e.get("blocked")}),
        # A flat pool holds the expensive proxies too, and uses them all the time.
        "expensive_requests": sum(e["ip"] in expensive for e in log),
        "requests": len(log),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", default=str(HERE / "out-ladder"))
    ns = parser.parse_args()
    out = Path(ns.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    problem = rotating_proxies_problem()
    clients = [c for c in CLIENTS if c != "scrapy-rotating-proxies" or not problem]
    note = f"scrapy-rotating-proxies skipped: it does not import here ({problem})." if problem else ""
    if note:
        print(note, flush=True)
    expensive = {nth_address(ProxyConfig().first_source, i) for i in range(CHEAP, PROXIES)}
    rows = []
    for sc in scenarios(ns.quick):
        for client in clients if sc.cheap_tier is None else ["polite-defaults"]:
            r = run_one(sc, client, out)
            log = read_access_log(out / "runs" / f"{sc.name}--{client}" / "sandbox" / "access.jsonl")
            rows.append(ladder_metrics(log, r, expensive))
            print(json.dumps(rows[-1]), flush=True)
    (out / "ladder.json").write_text(json.dumps(rows, indent=1))
    head = "| scenario | client | pages/min | pages | challenges | IPs blocked | requests via the 2 expensive proxies |"
    lines = [head, "|---|---|---|---|---|---|---|"] + [
        f"| {r['scenario']} | {r['client']} | {r['pages_per_min']} | {r['pages']} | {r['challenges']} | "
        f"{r['ips_blocked']} | {r['expensive_requests']} |" for r in rows
    ]
    (out / "ladder.md").write_text("\n".join(lines + ([f"\n{note}"] if note else [])) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
