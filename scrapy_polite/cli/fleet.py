"""``scrapy polite-fleet REDIS_URL``: the fleet-wide stats of :mod:`scrapy_polite.metrics.fleet`."""

from __future__ import annotations

from scrapy_polite.cli import ModuleCommand


class Command(ModuleCommand):
    module = "scrapy_polite.metrics.fleet"
    usage = "[options] <redis_url>"
