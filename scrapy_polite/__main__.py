"""Command line: ``python -m scrapy_polite report|fleet ...``.

The same commands are ``polite-report`` / ``polite-fleet`` (console scripts)
and ``scrapy polite-report`` / ``scrapy polite-fleet``; all three forms use
one argument parser and one run function per command (:data:`COMMANDS`).
"""

from __future__ import annotations

import importlib
import sys

#: Command name -> the module holding its ``DESCRIPTION``, ``add_arguments``, ``run`` and ``main``.
COMMANDS = {
    "report": "scrapy_polite.report",
    "fleet": "scrapy_polite.fleet",
}
USAGE = (
    "usage: python -m scrapy_polite report JSONL [JSONL ...] [-o report.html] [--title TITLE]\n"
    "       python -m scrapy_polite fleet REDIS_URL [--namespace NS] [--json] [--clear]"
)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help"):
        print(USAGE)
        print("\ncommands:")
        for name, module in COMMANDS.items():
            print(f"  {name:<8} {importlib.import_module(module).DESCRIPTION}")
        return 0 if args else 2
    if args[0] not in COMMANDS:
        print(f"unknown command {args[0]!r}\n{USAGE}", file=sys.stderr)
        return 2
    command = importlib.import_module(COMMANDS[args[0]])
    return command.main(args[1:], prog=f"python -m scrapy_polite {args[0]}")


if __name__ == "__main__":
    sys.exit(main())
