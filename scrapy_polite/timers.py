"""Timers on the loop the crawl runs on: one place for the gate, the middleware and the throttle."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

CallLater = Callable[[float, Callable[[], object]], object]


def call_later(delay: float, func: Callable[[], object]) -> object:
    """*func* after *delay* s: on the running asyncio loop when there is one (Scrapy's asyncio
    reactor runs on it), else on the Twisted reactor. The loop's own timer costs a third of
    Twisted's (its delayed call, re-armed on the loop), and the gate sets about one per grant it spaces."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        from twisted.internet import reactor

        # The reactor module is typed as a module, not as the IReactorTime it provides.
        clock: Any = reactor
        return clock.callLater(delay, func)
    return loop.call_later(delay, func)


def cancel_timer(timer: object) -> None:
    """Cancel a reactor ``callLater`` or an asyncio timer handle, if it is still pending."""
    cancel = getattr(timer, "cancel", None)
    active = getattr(timer, "active", None)
    if cancel is not None and (active is None or active()):
        cancel()
