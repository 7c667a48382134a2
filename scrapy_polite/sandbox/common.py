"""Pieces shared by the site, the proxies and the server: logs, buckets, clocks."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any


class JsonlLog:
    """Append-only JSON-lines file, line-buffered so readers see each line at once."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._fh: IO[str] | None = open(  # noqa: SIM115 - held for the run, closed in close()
            self.path, "a", buffering=1, encoding="utf-8"
        )

    def write(self, record: dict[str, Any]) -> None:
        """Append one record (dropped silently once closed)."""
        if self._fh is not None:
            self._fh.write(json.dumps(record, separators=(",", ":")) + "\n")

    def flush(self) -> None:
        """Push buffered bytes to the OS."""
        if self._fh is not None:
            self._fh.flush()

    def close(self) -> None:
        """Flush and close; later writes are ignored."""
        if self._fh is not None:
            self._fh.close()
            self._fh = None


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """Parse a JSONL file, skipping a trailing partial line written concurrently."""
    out: list[dict[str, Any]] = []
    p = Path(path)
    if not p.exists():
        return out
    with open(p, encoding="utf-8") as fh:
        for line in fh:
            if not line.endswith("\n"):
                break
            line = line.strip()
            if line:
                out.append(json.loads(line))
    return out


class TokenBucket:
    """Classic token bucket; ``rate=None`` means unlimited.

    *rate_fn*, when given, is consulted on every refill so a schedule or a
    runtime override can change the rate without resetting the bucket.
    """

    def __init__(
        self,
        rate: float | None,
        burst: int,
        clock: Callable[[], float] = time.monotonic,
        rate_fn: Callable[[], float | None] | None = None,
    ) -> None:
        self._rate = rate
        self.burst = max(1, int(burst))
        self._clock = clock
        self._rate_fn = rate_fn
        self.tokens = float(self.burst)
        self.last = clock()

    @property
    def rate(self) -> float | None:
        """Current refill rate in tokens per second."""
        return self._rate_fn() if self._rate_fn is not None else self._rate

    def _refill(self) -> float | None:
        now = self._clock()
        rate = self.rate
        if rate is not None:
            self.tokens = min(float(self.burst), self.tokens + (now - self.last) * rate)
        self.last = now
        return rate

    def available(self) -> bool:
        """True if one token could be taken now (does not take it)."""
        rate = self._refill()
        return rate is None or self.tokens >= 1.0

    def take(self) -> None:
        """Consume one token (call only after :meth:`available`)."""
        if self.rate is not None:
            self.tokens -= 1.0

    def try_take(self) -> bool:
        """Take a token if one is there."""
        if self.available():
            self.take()
            return True
        return False


def peer_gone(reader: asyncio.StreamReader) -> bool:
    """Whether the other end closed (FIN) or reset (RST) the connection *reader* reads."""
    return reader.at_eof() or reader.exception() is not None
