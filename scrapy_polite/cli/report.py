"""``scrapy polite-report JSONL...`` (also ``polite-report``, ``python -m scrapy_polite report``): the HTML report.

The report itself (:mod:`scrapy_polite.report`) is imported when the command
runs: Scrapy imports every command to list them, on every ``scrapy`` run.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from scrapy_polite.cli import ModuleCommand


class Command(ModuleCommand):
    module = "scrapy_polite.cli.report"
    usage = "[options] <jsonl> [<jsonl> ...]"


#: One line on what the command does: its --help, ``scrapy -h`` and ``python -m scrapy_polite``.
DESCRIPTION = "Write a self-contained HTML report from POLITE_STATS_JSONL files."


def _positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return n


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The command's arguments, shared by ``polite-report``, ``scrapy polite-report`` and ``python -m``."""
    from scrapy_polite.report.page import DEFAULT_TOP

    parser.add_argument("jsonl", nargs="+", help="JSONL files (include the rotated .1 file for the full run)")
    parser.add_argument("-o", "--output", default="report.html", help="HTML file to write (default: %(default)s)")
    parser.add_argument("--title", default="scrapy-polite crawl report")
    parser.add_argument("--top", type=_positive, default=DEFAULT_TOP,
                        help="hosts and endpoints shown one by one, the rest in one (other) row "
                             "(default: %(default)s)")
    parser.add_argument("--compare", nargs="+", metavar="JSONL",
                        help="a second run's JSONL files: write a side-by-side comparison of the two runs")


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    parser = argparse.ArgumentParser(prog=prog, description=DESCRIPTION)
    add_arguments(parser)
    return run(parser.parse_args(argv))


def run(args: argparse.Namespace) -> int:
    """Write the report *args* ask for; returns the exit code."""
    from scrapy_polite.report.compare import render_compare
    from scrapy_polite.report.model import build
    from scrapy_polite.report.page import DEFAULT_TOP, write_report

    top = getattr(args, "top", DEFAULT_TOP)
    try:
        if getattr(args, "compare", None):
            a, b = build(args.jsonl), build(args.compare)
        else:
            data = write_report(args.jsonl, args.output, args.title, top)
    except OSError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if getattr(args, "compare", None):
        names = (" ".join(Path(p).name for p in args.jsonl), " ".join(Path(p).name for p in args.compare))
        title = args.title if args.title != "scrapy-polite crawl report" else "scrapy-polite: two runs compared"
        Path(args.output).write_text(render_compare(a, b, names, title, top), encoding="utf-8")
        print(f"{args.output}: A {a.records} records, {a.pages_per_min():.1f} pages/min; "
              f"B {b.records} records, {b.pages_per_min():.1f} pages/min")
        return 0
    print(f"{args.output}: {data.records} records, {data.ok} successful pages, "
          f"{data.pages_per_min():.1f} pages/min{'; ' + data.skipped_text() if data.skipped else ''}")
    return 0
