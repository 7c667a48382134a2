"""Command line: ``python -m scrapy_polite report stats.jsonl -o report.html``."""

from __future__ import annotations

import sys

USAGE = "usage: python -m scrapy_polite report JSONL [JSONL ...] [-o report.html] [--title TITLE]"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help"):
        print(USAGE)
        print("\ncommands:\n  report   self-contained HTML report from POLITE_STATS_JSONL files")
        return 0 if args else 2
    if args[0] != "report":
        print(f"unknown command {args[0]!r}\n{USAGE}", file=sys.stderr)
        return 2
    from .report import main as report_main

    return report_main(args[1:])


if __name__ == "__main__":
    sys.exit(main())
