"""The records of ``POLITE_STATS_JSONL`` files, read as a stream: a cut, edited or corrupt line is skipped."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from scrapy_polite.metrics.outcome import is_success as outcome_success
from scrapy_polite.metrics.outcome import status_label

#: Latest time a record may carry: the end of year 9999, as far as ``time.gmtime`` goes everywhere.
MAX_TIME = 253_402_300_799.0
#: Longest latency or gate wait a record may carry, in seconds.
MAX_SECONDS = 1e7


def read_records(
    paths: Iterable[str | Path], skipped: Counter[str] | None = None
) -> Iterator[dict[str, Any]]:
    """Outcome records from JSONL files; bad or partial lines are skipped, counted in *skipped* by reason."""
    for path in paths:
        with open(path, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                line = line.strip()
                if not line:
                    continue
                rec = check_line(line)
                if isinstance(rec, str):
                    if skipped is not None:
                        skipped[rec] += 1
                    continue
                yield rec


def check_line(line: str) -> dict[str, Any] | str:
    """The record on a JSONL *line*, or why it cannot be one (the file may be cut, edited or corrupt)."""
    try:
        rec = json.loads(line)
    except (ValueError, RecursionError):
        return "not JSON"
    if not isinstance(rec, dict):
        return "not an object"
    if not in_range(rec.get("time"), 0.0, MAX_TIME):
        return "bad time"
    for key in ("latency", "wait"):
        if rec.get(key) is not None and not in_range(rec[key], 0.0, MAX_SECONDS):
            return f"bad {key}"
    return rec


def in_range(value: Any, low: float, high: float) -> bool:
    """*value* is a real JSON number (not a boolean, NaN or an infinity) within [*low*, *high*]."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and low <= value <= high


def label_of(rec: dict[str, Any]) -> str:
    return status_label(rec.get("status"), rec.get("exception"))


def is_success(rec: dict[str, Any]) -> bool:
    return outcome_success(rec.get("status"), bool(rec.get("rate_limited")), rec.get("verdict"))
