"""Signals scrapy-polite sends through ``crawler.signals``.

Connect with ``crawler.signals.connect(handler, signal=polite_signals.X)``.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pydispatch import dispatcher, robustapply  # type: ignore[import-untyped]
from scrapy.exceptions import StopDownload
from twisted.internet.defer import Deferred
from twisted.python.failure import Failure

if TYPE_CHECKING:
    from scrapy.signalmanager import SignalManager

#: Scrapy's own logger for a failing signal handler, so the log reads as from ``send_catch_log``.
_scrapy_signal_logger = logging.getLogger("scrapy.utils.signal")
_ANY_ID = id(dispatcher.Any)
#: A receiver whose signature cannot be read: called through pydispatch, as Scrapy calls it.
_ROBUST = object()


def connect(crawler: Any, handlers: dict[object, Callable[..., Any]]) -> None:
    """Connect each handler to its signal (Scrapy's or ours) on *crawler*'s signal manager."""
    for signal, handler in handlers.items():
        crawler.signals.connect(handler, signal=signal)


class Sender:
    """Sends one signal on a crawler as Scrapy's ``send_catch_log`` does, for less CPU per call.

    ``send_catch_log`` finds the receivers through generators and reads each one's signature again
    on every call: some microseconds on each answer for the signals sent per answer. This reads
    pydispatch's table on every call (a receiver connected or gone is heard at once) and reads the
    signatures again only when it changed. Receivers get the same arguments (``signal`` and
    ``sender`` where they take them), a failure is logged by the same logger with the same message,
    and the same ``(receiver, result)`` list comes back.
    """

    def __init__(self, manager: SignalManager, signal: object) -> None:
        self.sender = manager.sender
        self.signal = signal
        self._found: tuple[Any, ...] = ()
        #: (table entry, the names it takes: None when it takes ``**kwargs``), one per live receiver.
        self._calls: list[tuple[Any, Any]] = []

    def _entries(self) -> tuple[Any, ...]:
        """The table's entries for this signal, in ``getAllReceivers``' order (duplicates left in)."""
        found: tuple[Any, ...] = ()
        connections = dispatcher.connections
        for key in (id(self.sender), _ANY_ID):
            table = connections.get(key)
            if table:
                found += tuple(table.get(self.signal, ())) + tuple(table.get(dispatcher.Any, ()))
        return found

    def _prepare(self, found: tuple[Any, ...]) -> None:
        calls: list[tuple[Any, Any]] = []
        seen: set[Any] = set()
        for entry in found:
            try:
                if not entry or entry in seen:
                    continue
            except TypeError:  # a dead weak reference cannot be hashed
                continue
            seen.add(entry)
            receiver = entry() if isinstance(entry, dispatcher.WEAKREF_TYPES) else entry
            if receiver is None:
                continue
            calls.append((entry, _takes(receiver)))
        self._found, self._calls = found, calls

    def send(self, **kwargs: Any) -> list[tuple[Any, Any]]:
        """Call each receiver with *kwargs*; ``(receiver, result or Failure)`` for each."""
        found = self._entries()
        if found != self._found:
            self._prepare(found)
        responses: list[tuple[Any, Any]] = []
        for entry, takes in self._calls:
            receiver = entry() if isinstance(entry, dispatcher.WEAKREF_TYPES) else entry
            if receiver is None:
                continue
            try:
                result = self._call(receiver, takes, kwargs)
                if isinstance(result, Deferred):
                    _scrapy_signal_logger.error("Cannot return deferreds from signal handler: %(receiver)s",
                                                {"receiver": receiver}, extra={"spider": None})
            except StopDownload:
                result = Failure()
            except Exception:
                result = Failure()
                _scrapy_signal_logger.error("Error caught on signal handler: %(receiver)s", {"receiver": receiver},
                                            exc_info=True, extra={"spider": None})
            responses.append((receiver, result))
        return responses

    def _call(self, receiver: Any, takes: Any, kwargs: dict[str, Any]) -> Any:
        """*receiver* called with what it takes of *kwargs*, ``signal`` and ``sender``, as ``robustApply`` calls it."""
        if isinstance(takes, frozenset) and "signal" not in takes and "sender" not in takes \
                and takes.issuperset(kwargs):
            return receiver(**kwargs)
        if takes is _ROBUST:  # no signature to read: pydispatch's own call, which fails as it does there
            return robustapply.robustApply(receiver, signal=self.signal, sender=self.sender, **kwargs)
        named = {"signal": self.signal, "sender": self.sender, **kwargs}
        if takes is not None:
            named = {k: v for k, v in named.items() if k in takes}
        return receiver(**named)


def _takes(receiver: Any) -> Any:
    """The keyword names *receiver* takes as pydispatch's ``robustApply`` reads them (None: any)."""
    try:
        _, code, start = robustapply.function(receiver)
    except ValueError:
        return _ROBUST
    if code.co_flags & inspect.CO_VARKEYWORDS:
        return None
    return frozenset(code.co_varnames[start:code.co_argcount])


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
