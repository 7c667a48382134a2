"""``scrapy polite-fleet REDIS_URL`` (also ``polite-fleet``, ``python -m scrapy_polite fleet``): the fleet's stats."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from scrapy_polite.cli import ModuleCommand


class Command(ModuleCommand):
    module = "scrapy_polite.cli.fleet"
    usage = "[options] <redis_url>"


def format_processes(snapshots: list[dict[str, Any]], now: float) -> str:
    """One line per process: state, age of its last snapshot, its own counts."""
    w = max([len("process"), *(len(s["process"]) for s in snapshots)])
    lines = [f"  {'process':<{w}} {'state':>8} {'updated':>9} {'attempts':>8} {'ok':>7} {'429':>6} {'pages/min':>9}"]
    for s in sorted(snapshots, key=lambda s: s["started"]):
        state = "finished" if s["finished"] else "running"
        lines.append(
            f"  {s['process']:<{w}} {state:>8} {now - s['updated']:>8.0f}s {s['attempts']:>8} "
            f"{s['success']:>7} {s['rate_limited']:>6} {s['pages_per_min']:>9.1f}"
        )
    return "\n".join(lines)


#: One line on what the command does: its --help, ``scrapy -h`` and ``python -m scrapy_polite``.
DESCRIPTION = "Fleet-wide stats of every crawler process sharing POLITE_STATE."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The command's arguments, shared by ``polite-fleet``, ``scrapy polite-fleet`` and ``python -m``."""
    parser.add_argument("url", help="the POLITE_STATE Redis URL")
    parser.add_argument("--namespace", default="polite", help="POLITE_STATE_NAMESPACE (default: polite)")
    parser.add_argument("--json", action="store_true", help="print the merged summary as JSON")
    parser.add_argument("--clear", action="store_true", help="forget the published snapshots, e.g. before a new run")


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    parser = argparse.ArgumentParser(prog=prog, description=DESCRIPTION)
    add_arguments(parser)
    return run(parser.parse_args(argv))


def run(args: argparse.Namespace) -> int:
    """Print (or clear) the fleet's stats *args* ask for; returns the exit code."""
    # Imported here: Scrapy imports every command to list them, on every ``scrapy`` run.
    from scrapy_polite.errors import scrub
    from scrapy_polite.gate.redis.state import import_redis, mask_url
    from scrapy_polite.metrics.fleet import TOTALS, merge
    from scrapy_polite.metrics.fleet_store import clear_snapshots, read_snapshots
    from scrapy_polite.metrics.summary import format_summary

    redis = import_redis()
    label = mask_url(args.url)
    try:
        if args.clear:
            print(f"cleared {clear_snapshots(args.url, args.namespace)} snapshot(s) from {label}")
            return 0
        snaps = read_snapshots(args.url, args.namespace)
    except redis.RedisError as exc:
        print(f"cannot read {label}: {scrub(str(exc))}", file=sys.stderr)
        return 1
    if not snaps:
        print(f"no process has published stats under namespace {args.namespace!r} at {label}", file=sys.stderr)
        return 1
    now = time.time()
    merged = merge(snaps, now)
    if args.json:
        merged["per_process"] = {s["process"]: {k: s[k] for k in (*TOTALS, "started", "updated", "finished")}
                                 for s in snaps}
        print(json.dumps(merged, indent=2, sort_keys=True))
        return 0
    print(f"scrapy-polite fleet {args.namespace!r} at {label}: {merged['processes']} process(es), "
          f"{merged['running']} running")
    print(format_processes(snaps, now))
    print()
    print(format_summary(merged))
    return 0
