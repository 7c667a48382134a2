"""Command line: ``python -m scrapy_polite report|fleet ...``."""

from __future__ import annotations

import sys

USAGE = (
    "usage: python -m scrapy_polite report JSONL [JSONL ...] [-o report.html] [--title TITLE]\n"
    "       python -m scrapy_polite fleet REDIS_URL [--namespace NS] [--json] [--clear]"
)
COMMANDS = {
    "report": "self-contained HTML report from POLITE_STATS_JSONL files",
    "fleet": "stats of every process sharing a POLITE_STATE Redis, merged",
}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help"):
        print(USAGE)
        print("\ncommands:")
        for name, what in COMMANDS.items():
            print(f"  {name:<8} {what}")
        return 0 if args else 2
    if args[0] not in COMMANDS:
        print(f"unknown command {args[0]!r}\n{USAGE}", file=sys.stderr)
        return 2
    if args[0] == "fleet":
        from .fleet import main as command
    else:
        from .report import main as command
    return command(args[1:])


if __name__ == "__main__":
    sys.exit(main())
