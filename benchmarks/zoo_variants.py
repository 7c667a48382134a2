"""The throttle on limiters the zoo does not hold, on a fake clock (``tests/zoo_sim.py``).

    python benchmarks/zoo_variants.py [--defaults] [NAME ...]

Each variant is one of the sandbox's limiter kinds with other parameters, scope or pool size; the
median of ten seeds is printed (a 429 without Retry-After makes a crawl's course depend much on
the jitter drawn, so three seeds would move a figure by a tenth): efficiency against the limit, refusals as a share of requests,
requests inside a Retry-After over the ten crawls (counted for the host when the limit is host-wide).
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from zoo_sim import crawl  # noqa: E402

SEEDS = range(1, 11)

VARIANTS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "bucket-ip-0.5": ({"kind": "token_bucket", "rate": 0.5, "burst": 1}, {}),
    "bucket-ip-3": ({"kind": "token_bucket", "rate": 3.0, "burst": 2}, {}),
    "bucket-host-12": ({"kind": "token_bucket", "rate": 12.0, "burst": 3, "scope": "host"}, {}),
    "bucket-host-1.5": ({"kind": "token_bucket", "rate": 1.5, "burst": 1, "scope": "host"}, {}),
    "window-host-20/10": ({"kind": "fixed_window", "limit": 20, "window": 10.0, "scope": "host"}, {}),
    "window-ip-30/60": ({"kind": "fixed_window", "limit": 30, "window": 60.0}, {}),
    "log-host-10/5": ({"kind": "sliding_log", "limit": 10, "window": 5.0, "scope": "host"}, {}),
    "ccap-429-5": ({"kind": "concurrency_cap", "limit": 5, "latency": 1.0, "status": 429}, {}),
    "ccap-2-fast": ({"kind": "concurrency_cap", "limit": 2, "latency": 0.2}, {}),
    "shift-3-8-1": ({"kind": "shifting", "schedule": [[0, 3.0], [30, 8.0], [70, 1.0]]}, {}),
    "penalty-host": ({"kind": "penalty_box", "rate": 4.0, "burst": 1, "penalty": 15.0, "scope": "host"}, {}),
    "noRA-host": ({"kind": "no_retry_after", "rate": 3.0, "burst": 1, "scope": "host"}, {}),
    "slowdown-2": ({"kind": "slowdown", "rate": 2.0, "max_delay": 3.0}, {}),
    "nginx-host-3": ({"kind": "nginx_limit_req", "rate": 3.0, "burst": 5, "scope": "host"}, {}),
    "bucket-ip-1@16": ({"kind": "token_bucket", "rate": 1.0, "burst": 1}, {"ips": 16}),
    "bucket-host-4@3": ({"kind": "token_bucket", "rate": 4.0, "burst": 1, "scope": "host"}, {"ips": 3}),
}


def main(argv: list[str]) -> int:
    adaptive = "--defaults" not in argv
    names = [a for a in argv if not a.startswith("--")] or list(VARIANTS)
    effs = []
    for name in names:
        spec, kw = VARIANTS[name]
        runs = [crawl(spec, 120.0, adaptive=adaptive, seed=seed, **kw) for seed in SEEDS]
        eff = statistics.median(r.efficiency for r in runs)
        effs.append(eff)
        refused = statistics.median(r.refused_share for r in runs)
        inside = sum(r.inside_retry_after for r in runs)
        print(f"{name:20s} eff {eff:.2f}  refused {100 * refused:5.1f}%  inside Retry-After {inside} in all")
    print(f"median {statistics.median(effs):.2f}, worst {min(effs):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
