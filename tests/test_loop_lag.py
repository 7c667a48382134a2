"""The crawler's own event-loop lag, taken off the latency the throttle reads."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from scrapy_polite.downloader.loop_lag import LoopLag


class Timers:
    """call_later that the test fires by hand, late or on time."""

    def __init__(self) -> None:
        self.now = 100.0
        self.due: list[tuple[float, Callable[[], object]]] = []

    def call_later(self, delay: float, func: Callable[[], object]) -> Any:
        self.due.append((self.now + delay, func))
        return self  # a handle: cancelled by the probe, never fired here once cancelled

    def cancel(self) -> None:
        pass

    def fire(self, late: float) -> None:
        at, func = self.due.pop(0)
        self.now = at + late
        func()


def test_a_timer_run_late_is_taken_off_the_latency_and_forgotten_after_the_window() -> None:
    t = Timers()
    lag = LoopLag(t.call_later, clock=lambda: t.now, interval=0.05, keep=4)
    lag.start()
    t.fire(0.0)
    assert lag.site_latency(0.07) == 0.07  # the loop ran on time: all of it was the site's
    t.fire(0.06)  # a garbage collection, a long parse
    assert abs(lag.lag() - 0.06) < 1e-9
    assert abs((lag.site_latency(0.07) or 0.0) - 0.01) < 1e-9
    assert lag.site_latency(0.03) == 0.0 and lag.site_latency(None) is None
    for _ in range(4):  # the window moves past it
        t.fire(0.0)
    assert lag.lag() == 0.0


def test_a_stopped_probe_sets_no_more_timers() -> None:
    t = Timers()
    lag = LoopLag(t.call_later, clock=lambda: t.now)
    lag.start()
    lag.stop()
    t.fire(0.0)  # the timer already due runs once and finds the probe stopped
    assert t.due == []


def test_a_busy_asyncio_loop_shows_as_lag() -> None:
    async def run() -> float:
        loop = asyncio.get_running_loop()
        lag = LoopLag(loop.call_later, interval=0.02)
        lag.start()
        await asyncio.sleep(0.05)
        time.sleep(0.15)  # the crawler parsing: the loop runs nothing else meanwhile
        await asyncio.sleep(0.05)
        lag.stop()
        return lag.lag()

    # Its own loop, in a thread of its own: the test session's reactor may be running this one's.
    with ThreadPoolExecutor(1) as pool:
        assert pool.submit(asyncio.run, run()).result(timeout=10) >= 0.1
