"""``scrapy settings``, which also answers for the ``POLITE_*`` defaults.

Scrapy applies add-ons to each crawl, not to the project settings its
``settings`` command prints, so ``scrapy settings --get POLITE_DELAY`` would
print ``None`` in a project that enables the add-on. This command, registered
under the same name, adds :data:`scrapy_polite.settings.config.DEFAULTS` at
Scrapy's ``default`` priority in such a project; elsewhere it is unchanged.
"""

from __future__ import annotations

import argparse
from typing import Any

from scrapy.commands.settings import Command as ScrapySettingsCommand

from scrapy_polite.cli import enables_addon


def register_defaults(settings: Any) -> None:
    """Add the ``POLITE_*`` defaults to *settings* when they enable the add-on, overriding nothing."""
    if not enables_addon(settings):
        return
    from scrapy_polite.settings.config import register_defaults as register

    register(settings)


class Command(ScrapySettingsCommand):
    def process_options(self, args: list[str], opts: argparse.Namespace) -> None:
        super().process_options(args, opts)
        # Scrapy 2.13 reads the crawler process's settings, later releases these: the same object.
        register_defaults(self.settings)
