"""Scrapy commands scrapy-polite adds (registered under the ``scrapy.commands`` entry point)."""

from __future__ import annotations

import argparse
import importlib
from typing import Any

from scrapy.commands import ScrapyCommand
from scrapy.exceptions import UsageError


class ModuleCommand(ScrapyCommand):
    """A ``scrapy polite-…`` command around a module's ``add_arguments`` and ``run``.

    The console script and ``python -m scrapy_polite`` call the same two
    functions, so the three forms cannot drift apart.
    """

    #: The module with ``DESCRIPTION``, ``add_arguments(parser)`` and ``run(args) -> int``.
    module: str = ""
    #: What follows the command name in its usage line.
    usage: str = ""
    requires_project = False
    # Nothing here crawls: no reactor, no crawler process (Scrapy >= 2.14 honours it).
    requires_crawler_process = False
    default_settings = {"LOG_ENABLED": False}

    def _module(self) -> Any:
        return importlib.import_module(self.module)

    def syntax(self) -> str:
        return self.usage

    def short_desc(self) -> str:
        return self._module().DESCRIPTION

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        self._module().add_arguments(parser)

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        if args:
            raise UsageError(f"unexpected argument(s): {' '.join(args)}")
        self.exitcode = self._module().run(opts)


def enables_addon(settings: Any) -> bool:
    """Whether *settings* enable :class:`scrapy_polite.Addon` (or a subclass) in ``ADDONS``."""
    from scrapy.utils.misc import load_object

    from scrapy_polite.addon import Addon

    for key, priority in settings.getdict("ADDONS").items():
        try:
            obj = load_object(key) if isinstance(key, str) else key
        except (ImportError, NameError, ValueError):
            continue
        if isinstance(obj, type) and issubclass(obj, Addon) and priority is not None:
            return True
    return False
