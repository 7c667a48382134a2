"""Demo: start the local sandbox, crawl it with `scrapy crawl`, print what happened.

The sandbox is a rate-limited shop (1 request/s per IP) behind a fleet of
8 proxies on loopback addresses. The crawl is the example project's
`catalogue` spider, run exactly as a user runs it; the numbers printed at
the end come from the site's own access log, not from the crawler.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

from scrapy_polite.sandbox import SCENARIOS, Sandbox

HERE = Path(__file__).resolve().parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--scenario", default="demo", choices=sorted(SCENARIOS))
    parser.add_argument("--spider", default="catalogue", choices=["catalogue", "accounts"])
    parser.add_argument("-s", "--set", action="append", default=[], metavar="NAME=VALUE",
                        help="extra Scrapy setting, e.g. -s POLITE_HOST_CONCURRENCY=4")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="polite-demo-") as tmp, \
            Sandbox(SCENARIOS[args.scenario](), workdir=Path(tmp) / "sandbox") as sb:
        site = next(iter(sb.site_urls))
        proxies = Path(tmp) / "proxies.txt"
        proxies.write_text("# the sandbox's proxy fleet\n" + "\n".join(sb.proxy_urls) + "\n")
        print(f"sandbox site {site}: {sb.site_url(site)}; {len(sb.proxy_urls)} proxies, "
              f"exit IPs {sb.proxy_exit_ips[0]}..{sb.proxy_exit_ips[-1]}", flush=True)
        cmd = [sys.executable, "-m", "scrapy", "crawl", args.spider, "-a", f"start_url={sb.site_url(site)}",
               "-s", f"POLITE_PROXIES_FILE={proxies}", "-s", "LOG_LEVEL=INFO",
               "-O", str(Path(tmp) / "items.jsonl")]
        for setting in args.set:
            cmd += ["-s", setting]
        print("$ " + " ".join(cmd[2:]), flush=True)
        rc = subprocess.call(cmd, cwd=HERE, env={**os.environ, "POLITE_PROXIES_FILE": str(proxies)})
        log = sb.log()
        items = (Path(tmp) / "items.jsonl").read_text().splitlines()

    statuses = Counter(e["status"] for e in log)
    if log:
        span = max(e["t_end"] for e in log) - min(e["t_start"] for e in log)
        ok = statuses.get(200, 0)
        print("\nWhat the site saw (its access log):")
        print(f"  {len(log)} requests in {span:.1f} s from {len({e['ip'] for e in log})} exit IPs")
        print(f"  statuses: {dict(sorted(statuses.items()))}")
        print(f"  successful pages/min: {ok * 60 / max(span, 1e-9):.1f}")
        print(f"  most requests in flight from one IP: {max(e['inflight_ip'] for e in log)}")
        print(f"  blocked (403): {statuses.get(403, 0)}, rate-limited (429): {statuses.get(429, 0)}")
    print(f"  items scraped: {len(items)}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
