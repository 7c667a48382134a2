"""``scrapy polite-report JSONL...``: the HTML report of :mod:`scrapy_polite.report`."""

from __future__ import annotations

from . import ModuleCommand


class Command(ModuleCommand):
    module = "scrapy_polite.report"
    usage = "[options] <jsonl> [<jsonl> ...]"
