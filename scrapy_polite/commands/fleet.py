"""``scrapy polite-fleet REDIS_URL``: the fleet-wide stats of :mod:`scrapy_polite.fleet`."""

from __future__ import annotations

from . import ModuleCommand


class Command(ModuleCommand):
    module = "scrapy_polite.fleet"
    usage = "[options] <redis_url>"
