"""The connection to Redis: updates sent one by one in order, outages, and the way back from one."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from scrapy_polite.gate.backoff import Retry
from scrapy_polite.gate.redis.eviction import RedisEviction
from scrapy_polite.gate.redis.state import Keys

logger = logging.getLogger(__name__)


class Connection(RedisEviction):
    """The ordered update queue, and what this process does while Redis is away."""

    def submit(self, make: Callable[[Any, Keys, str], Coroutine[Any, Any, Any]]) -> None:
        """Queue *make(client, keys, process id)*, sent in order with this gate's own updates."""
        self._op(lambda: make(self._client, self.keys, self.process_id))

    # -- ordered updates -------------------------------------------------------

    def _op(self, make: Callable[[], Coroutine[Any, Any, Any]], done: Callable[[], None] | None = None) -> None:
        """Queue a shared-state update; updates are sent one by one, in order (*done*: called
        once the update is sent, or given up)."""
        if self._ops is None:
            self.start()
        if self._ops is not None:
            self._ops.put_nowait((make, done))

    async def _run_ops(self) -> None:
        assert self._ops is not None
        backoff = Retry()
        while not self._halted:
            make, done = await self._ops.get()
            try:
                while True:
                    try:
                        await make()
                        self._back(backoff)
                        break
                    except self._errors as exc:
                        if self._halted:
                            break
                        # Updates wait for Redis, in order, rather than being lost.
                        await self._outage(exc, backoff)
            except Exception:
                logger.exception("shared-state update failed and was dropped")
            finally:
                if done is not None:
                    done()
                self._ops.task_done()

    # -- outages ---------------------------------------------------------------

    async def _outage(self, exc: BaseException, backoff: Retry) -> None:
        if self._down_since is None:
            self._down_since = self._clock()
            self.outages += 1
            logger.warning(
                "lost the shared state at %s (%s); %d request(s) wait, none is sent "
                "until it is back", self.label, exc, self.waiting(),
            )
        self._check_outage_deadline()
        await asyncio.sleep(backoff.next())

    def _check_outage_deadline(self) -> None:
        """Once Redis has been away for ``outage_timeout``, say so (once per outage): the caller closes."""
        if self._down_since is None or self.outage_timeout <= 0 or self._outage_reported:
            return
        down_for = self._clock() - self._down_since
        if down_for >= self.outage_timeout:
            self._outage_reported = True
            self.listeners.on_outage_timeout(down_for)

    def _back(self, backoff: Retry) -> None:
        if self._down_since is not None:
            logger.warning(
                "shared state at %s is back after %.1f s", self.label,
                self._clock() - self._down_since,
            )
            self._down_since = None
            self._outage_reported = False
            self._kick()
        backoff.reset()
