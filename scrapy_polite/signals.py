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

# -- between the package's own components -----------------------------------------------------
# What the downloader middleware tells the throttle about each answer, as AutoThrottle hears
# ``response_downloaded``: ``HostThrottle`` connects its policy (``downloader/pace.py``
# ``throttle_handlers``). With nobody listening, the middleware cools the pair or pauses the host
# itself. ``lease`` is the :class:`~scrapy_polite.gate.state.Lease` the attempt went through.

#: The site's rate signal. Args: ``lease``, ``delay`` (s before the request goes again), ``status``,
#: ``retry_after`` (s the site stated, or None), ``headers``.
pace_rate_limited = object()

#: The site's overload answer (a 5xx that is no rate signal). Args: ``lease``, ``status``.
pace_overloaded = object()

#: A challenge from a host the endpoint had been crawling. Args: ``lease``, ``delay`` (s).
pace_challenged = object()

#: A clean answer. Args: ``lease``, ``status``, ``headers``, ``latency`` (Scrapy's download latency, s, or None).
pace_ok = object()

#: Several endpoints got no answer from a host. Args: ``host``, ``park`` (bool). A listener
#: returns what it did to the host, as text for the log ("" when it was already slowed).
pace_unanswered = object()

#: A callback marked a page as a challenge or ban (``ChallengeDetected``), told by
#: ``PoliteMarksMiddleware``. Args: ``response``, ``kind``, ``reason``. The downloader middleware
#: returns the list of requests to send again in its place.
page_marked = object()
