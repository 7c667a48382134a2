"""Signals scrapy-polite sends through ``crawler.signals``.

Connect with ``crawler.signals.connect(handler, signal=polite_signals.X)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def connect(crawler: Any, handlers: dict[object, Callable[..., Any]]) -> None:
    """Connect each handler to its signal (Scrapy's or ours) on *crawler*'s signal manager."""
    for signal, handler in handlers.items():
        crawler.signals.connect(handler, signal=signal)

#: A host's concurrency, delay or pause changed (or a pause ended).
#: Args: ``host``, ``old`` (dict), ``new`` (dict), ``reason`` (str), ``events`` (list of
#: ``{"change", "from", "to"}``, one per value), ``evidence`` (dict: what the decision acted on).
host_throttle_changed = object()

#: A request got a rate-limit answer and was re-queued after a cooldown.
#: Args: ``request``, ``host``, ``endpoint`` (masked label), ``delay`` (s).
request_rate_limited = object()

#: A request ran out of its re-queue budget and was given up.
#: Args: ``request``, ``reason`` (str).
request_gave_up = object()

#: An endpoint's health changed. Args: ``endpoint`` (label), ``state``, ``reason``.
endpoint_health_changed = object()

#: A session was moved to another endpoint (``POLITE_SESSION_POLICY='repin'``).
#: Args: ``session``, ``old`` (label or None), ``reason``.
session_repinned = object()

#: One request finished (response or failure). Args: ``outcome``
#: (:class:`scrapy_polite.metrics.outcome.Outcome`).
outcome_recorded = object()

#: An answer was a challenge (CAPTCHA, JavaScript check), by the response policy or the spider.
#: Args: ``request``, ``response``, ``host``, ``endpoint`` (label), ``session`` (or None), ``reason``.
polite_challenge = object()

#: A session's identity was retired (a challenge or ban, or its request or age limit): its next
#: request gets a new endpoint and a new cookie jar. Args: ``session``, ``endpoint`` (label or None), ``reason``.
session_retired = object()
