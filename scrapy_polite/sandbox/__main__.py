"""CLI: ``serve`` (machine use, JSON ready line) and ``run`` (a preset, for humans)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from .config import SandboxConfig
from .scenarios import SCENARIOS
from .server import print_ready, serve


def _serve(args: argparse.Namespace) -> int:
    config = SandboxConfig.from_dict(json.loads(Path(args.config).read_text()))
    workdir = args.workdir or str(Path(args.config).resolve().parent)
    asyncio.run(serve(config, workdir, watch_stdin=args.watch_stdin, on_ready=print_ready))
    return 0


def _run(args: argparse.Namespace) -> int:
    config = SCENARIOS[args.scenario]()
    config.max_runtime = args.duration
    workdir = args.workdir or tempfile.mkdtemp(prefix="polite-sandbox-")

    def show(info: dict[str, Any]) -> None:
        print(f"scenario {args.scenario}: serving for up to {args.duration:g} s (Ctrl-C to stop)")
        for name, site in info["sites"].items():
            print(f"site {name}: {site['url']}")
        print("proxies:")
        for p in info["proxies"]:
            print(p["url"])
        if info["gateway"]:
            print(f"gateway template: {info['gateway']['template']}")
        print(f"control: {info['control_url']}")
        print(f"access log: {info['access_log']}")
        print(f"proxy log: {info['proxy_log']}")
        sys.stdout.flush()

    try:
        asyncio.run(serve(config, workdir, watch_parent=False, on_ready=show))
    except KeyboardInterrupt:
        pass
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m scrapy_polite.sandbox``."""
    parser = argparse.ArgumentParser(prog="python -m scrapy_polite.sandbox", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p_serve = sub.add_parser("serve", help="serve a JSON config and print a JSON ready line")
    p_serve.add_argument("--config", required=True, help="path to a SandboxConfig JSON file")
    p_serve.add_argument("--workdir", help="where logs go (default: the config's directory)")
    p_serve.add_argument("--watch-stdin", action="store_true", help="exit when stdin reaches EOF")
    p_run = sub.add_parser("run", help="serve a preset scenario and print its URLs")
    p_run.add_argument("--scenario", default="demo", choices=sorted(SCENARIOS))
    p_run.add_argument("--duration", type=float, default=600.0, help="seconds before exiting")
    p_run.add_argument("--workdir", help="where logs go (default: a new temp dir)")
    args = parser.parse_args(argv)
    return _serve(args) if args.command == "serve" else _run(args)


if __name__ == "__main__":
    sys.exit(main())
