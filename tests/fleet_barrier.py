"""Downloader middleware for multi-process tests: no process downloads before all have started.

Processes start seconds apart on a loaded machine; without a barrier the first
ones can drain the shared queue before the last one has opened its spider, and
a "four processes" test would really run three. Each process joins a Redis set
with its first request and holds every request until the set has
``FLEET_BARRIER_SIZE`` members (or ``FLEET_BARRIER_TIMEOUT`` has passed).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import Any

import redis.asyncio as aioredis

logger = logging.getLogger(__name__)


class StartBarrier:
    def __init__(self, url: str, key: str, size: int, timeout: float) -> None:
        self.url, self.key, self.size, self.timeout = url, key, size, timeout
        self._opened: asyncio.Future[None] | None = None

    @classmethod
    def from_crawler(cls, crawler: Any) -> StartBarrier:
        s = crawler.settings
        return cls(s.get("REDIS_URL"), s.get("FLEET_BARRIER_KEY", "fleet:barrier"),
                   s.getint("FLEET_BARRIER_SIZE", 1), s.getfloat("FLEET_BARRIER_TIMEOUT", 30.0))

    async def process_request(self, request: Any, spider: Any = None) -> None:
        if self._opened is None:
            self._opened = asyncio.ensure_future(self._wait())
        await asyncio.shield(self._opened)

    async def _wait(self) -> None:
        client = aioredis.Redis.from_url(self.url)
        try:
            await client.sadd(self.key, os.getpid())
            deadline = time.monotonic() + self.timeout
            while (joined := await client.scard(self.key)) < self.size:
                if time.monotonic() > deadline:
                    logger.warning("start barrier: %d of %d processes after %.0f s; going on", joined, self.size,
                                   self.timeout)
                    break
                await asyncio.sleep(0.05)
        finally:
            await client.aclose()
