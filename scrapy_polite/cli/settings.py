"""``scrapy polite-settings``: the settings a crawl of this project runs with.

Scrapy applies add-ons to each crawl, not to the project settings its own
``settings`` command prints, so ``scrapy settings --get RETRY_HTTP_CODES``
still lists 429 and ``scrapy settings --get POLITE_DELAY`` prints ``None`` in
a project that enables the add-on. This command takes the same options as
``scrapy settings`` and answers after the add-on has updated the settings
(its ``POLITE_*`` defaults, and what it takes over from Scrapy); Scrapy's
own command is left as it is.
"""

from __future__ import annotations

import argparse
from typing import Any

from scrapy.commands.settings import Command as ScrapySettingsCommand

from scrapy_polite.cli import enables_addon


def apply_addon(settings: Any) -> None:
    """Update *settings* as the add-on does for a crawl, when they enable it; otherwise leave them."""
    if not enables_addon(settings):
        return
    from scrapy_polite.addon import Addon

    Addon().update_settings(settings)


class Command(ScrapySettingsCommand):
    def short_desc(self) -> str:
        return "Get settings values as a crawl sees them, scrapy-polite's add-on applied"

    def process_options(self, args: list[str], opts: argparse.Namespace) -> None:
        super().process_options(args, opts)
        # Scrapy 2.13 reads the crawler process's settings, later releases these: the same object.
        apply_addon(self.settings)
