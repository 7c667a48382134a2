"""Item pipeline for multi-process tests: one JSON line per item, flushed at once.

A process killed with SIGKILL loses nothing it has already scraped, so the
test can account for every item.
"""

from __future__ import annotations

import json
from typing import Any


class FlushedJsonLines:
    def __init__(self, path: str) -> None:
        self.file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - open for the crawl's lifetime

    @classmethod
    def from_crawler(cls, crawler: Any) -> FlushedJsonLines:
        return cls(crawler.settings.get("ITEMS_PATH"))

    def process_item(self, item: Any, spider: Any = None) -> Any:
        self.file.write(json.dumps(dict(item)) + "\n")
        self.file.flush()
        return item

    def close_spider(self, spider: Any = None) -> None:
        self.file.close()
