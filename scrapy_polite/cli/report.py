"""``scrapy polite-report JSONL...``: the HTML report of :mod:`scrapy_polite.metrics.report`."""

from __future__ import annotations

from scrapy_polite.cli import ModuleCommand


class Command(ModuleCommand):
    module = "scrapy_polite.metrics.report"
    usage = "[options] <jsonl> [<jsonl> ...]"
