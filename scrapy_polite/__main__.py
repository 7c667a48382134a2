"""Command line: ``python -m scrapy_polite report|fleet ...``.

The same commands are ``polite-report`` / ``polite-fleet`` (console scripts)
and ``scrapy polite-report`` / ``scrapy polite-fleet``; all three forms use
one argument parser and one run function per command (:data:`COMMANDS`).
"""

from __future__ import annotations

import argparse
import importlib
import sys

#: Command name -> the module holding its ``DESCRIPTION``, ``add_arguments``, ``run`` and ``main``.
COMMANDS = {
    "report": "scrapy_polite.cli.report",
    "fleet": "scrapy_polite.cli.fleet",
}
PROG = "python -m scrapy_polite"


def usage() -> str:
    """Every command's usage line, from its own parser."""
    lines = []
    for name, module in COMMANDS.items():
        parser = argparse.ArgumentParser(prog=f"{PROG} {name}")
        importlib.import_module(module).add_arguments(parser)
        lines.append(parser.format_usage().strip())
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help"):
        print(usage())
        print("\ncommands:")
        for name, module in COMMANDS.items():
            print(f"  {name:<8} {importlib.import_module(module).DESCRIPTION}")
        return 0 if args else 2
    if args[0] not in COMMANDS:
        print(f"unknown command {args[0]!r}\n{usage()}", file=sys.stderr)
        return 2
    command = importlib.import_module(COMMANDS[args[0]])
    return command.main(args[1:], prog=f"{PROG} {args[0]}")


if __name__ == "__main__":
    sys.exit(main())
