"""Every Scrapy internal the package relies on, each with a fallback per Scrapy version.

Scrapy offers no public API for some of what the gates need (is the engine
closing, how many downloads a slot holds, which downloader interface a
priority queue asks). Each such access lives here, once, preferring a public
API where the running Scrapy has one, so a Scrapy release that changes an
internal breaks one function with a unit test of its own, not the crawl.
"""

from __future__ import annotations

from typing import Any


def engine_scheduler(engine: Any) -> Any:
    """The engine's scheduler, or ``None`` before the spider opened (or after it closed).

    ``ExecutionEngine.scheduler`` is public from Scrapy 2.19; earlier releases keep it on
    the private ``_slot``.
    """
    if engine is None:
        return None
    if hasattr(type(engine), "scheduler"):
        return engine.scheduler
    return getattr(getattr(engine, "_slot", None), "scheduler", None)


def engine_closing(engine: Any) -> bool:
    """Whether the engine stopped running or began closing its spider (no public API for the latter)."""
    if engine is None:
        return False
    if not engine.running:
        return True
    slot = getattr(engine, "_slot", None)
    return getattr(slot, "closing", None) is not None


def close_spider(crawler: Any, reason: str) -> None:
    """Ask the engine to close the spider: ``close_spider_async`` from Scrapy 2.14, else ``close_spider``."""
    engine = crawler.engine
    if engine is None:
        return
    if hasattr(engine, "close_spider_async"):
        from scrapy.utils.defer import deferred_from_coro

        deferred_from_coro(engine.close_spider_async(reason=reason))
    else:  # Scrapy < 2.14
        engine.close_spider(crawler.spider, reason)


def active_downloads(downloader: Any, slot: str) -> int:
    """Requests the downloader holds for *slot*, from its public ``slots`` (what Scrapy's own count reads)."""
    found = getattr(downloader, "slots", {}).get(slot)
    return len(found.active) if found is not None else 0


def set_downloader_interface(queue: Any, interface: Any) -> None:
    """Make a ``DownloaderAwarePriorityQueue`` rank its slots by *interface* instead of Scrapy's own.

    The queue keeps it in a private attribute; a release that renames it must fail here
    loudly, as the queue would otherwise silently ignore the gates.
    """
    if not hasattr(queue, "_downloader_interface"):
        raise RuntimeError(
            "this Scrapy's DownloaderAwarePriorityQueue has no _downloader_interface; "
            "set SCHEDULER_PRIORITY_QUEUE to Scrapy's own queue"
        )
    queue._downloader_interface = interface


def drop_slot_delays(downloader: Any) -> None:
    """Zero the ``delay`` of the downloader's ``DOWNLOAD_SLOTS`` entries, as the add-on zeroes ``DOWNLOAD_DELAY``.

    The gates space those hosts by that delay already; Scrapy's slot would add its own
    host-wide delay on top. Slots are built lazily from ``per_slot_settings``, so this
    must run before the first request (at ``spider_opened``).
    """
    per_slot = getattr(downloader, "per_slot_settings", None)
    if per_slot is None:
        return
    for key, entry in list(per_slot.items()):
        if isinstance(entry, dict) and entry.get("delay"):
            per_slot[key] = {**entry, "delay": 0.0}


async def engine_download(engine: Any, request: Any) -> Any:
    """Download *request* outside the scheduler: ``download_async`` from Scrapy 2.14, else ``download``."""
    if engine is None:
        raise RuntimeError("the engine is not running")
    if hasattr(engine, "download_async"):
        return await engine.download_async(request)
    from scrapy.utils.defer import maybe_deferred_to_future  # Scrapy < 2.14

    return await maybe_deferred_to_future(engine.download(request))
