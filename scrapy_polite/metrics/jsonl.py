"""POLITE_STATS_JSONL: one JSON line per attempt or event, on disk at once, rotated at its size cap."""

from __future__ import annotations

import json
import logging
import os
import re
import time
from datetime import datetime, timezone
from typing import Any

from scrapy_polite.errors import PoliteConfigError

logger = logging.getLogger(__name__)

#: ``%(name)s`` placeholders of POLITE_STATS_JSONL; any other ``%`` is kept as written.
_PLACEHOLDER = re.compile(r"%\((?:([^)]*)\)(.?))?")


def jsonl_path(template: str | None, spider: Any, started: float | None = None) -> str | None:
    """The POLITE_STATS_JSONL path of this crawl, its placeholders filled as in FEEDS URIs.

    So that concurrent crawls (Scrapyd jobs) write and rotate files of their
    own: ``%(name)s`` is the spider's name, ``%(time)s`` the start time in
    FEEDS' format, ``%(job)s`` Scrapyd's job id (its ``_job`` spider
    argument; the process id outside Scrapyd), and any other name a spider
    attribute. Raises :class:`PoliteConfigError` for an unknown or malformed
    placeholder, at start-up.
    """
    if template is None:
        return None
    utc = datetime.fromtimestamp(time.time() if started is None else started, tz=timezone.utc)
    fixed = {
        "time": utc.replace(microsecond=0).isoformat().replace(":", "-"),
        "job": str(getattr(spider, "_job", None) or os.getpid()),
    }

    def fill(match: re.Match[str]) -> str:
        name, conversion = match.group(1), match.group(2)
        if not name or conversion != "s":
            raise PoliteConfigError("POLITE_STATS_JSONL", template, "placeholders written %(name)s")
        if name in fixed:
            return fixed[name]
        try:
            return str(getattr(spider, name))
        except AttributeError:
            raise PoliteConfigError(
                "POLITE_STATS_JSONL", template,
                f"placeholders among %(name)s, %(time)s, %(job)s and the spider's attributes "
                f"(the spider has no {name!r})",
            ) from None

    return _PLACEHOLDER.sub(fill, template)


def report_path(template: str | None, spider: Any) -> str | None:
    """The POLITE_REPORT_HTML path of this crawl: the placeholders of POLITE_STATS_JSONL."""
    try:
        return jsonl_path(template, spider)
    except PoliteConfigError as exc:
        raise PoliteConfigError("POLITE_REPORT_HTML", template, exc.expected) from None



class JsonlSink:
    """Appends records to *path* (nothing when it is ``None``); at most two files of *max_bytes* each.

    A write error stops the writing for the rest of the run, with one ERROR: the crawl goes on.
    """

    def __init__(self, path: str | None, max_bytes: int) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self._file: Any = None
        self._size = 0

    def write(self, record: dict[str, Any]) -> None:
        path = self.path
        if path is None:
            return
        line = (json.dumps(record, separators=(",", ":")) + "\n").encode()
        try:
            if self._file is None:
                self._file = open(path, "ab", buffering=0)  # noqa: SIM115 - kept open for the run
                self._size = self._file.seek(0, os.SEEK_END)
            if self._size and self._size + len(line) > self.max_bytes:
                self._file.close()
                os.replace(path, path + ".1")
                self._file = open(path, "ab", buffering=0)  # noqa: SIM115
                self._size = 0
            self._file.write(line)
            self._size += len(line)
        except OSError as exc:
            logger.error("stopped writing %s: %s", path, exc)
            self.path = None
            self.close()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
