"""What each answer tells the throttle, sent as the ``pace_*`` signals.

The middleware does not hold the throttle: it sends what it saw, and ``HostThrottle``
connects its policy to these signals (:func:`throttle_handlers`), as AutoThrottle
listens to ``response_downloaded``. Whether anybody heard decides the fallback:
without a throttle the caller cools the pair or pauses the host itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from scrapy_polite import signals as polite_signals

if TYPE_CHECKING:
    from scrapy.signalmanager import SignalManager

    from scrapy_polite.gate.state import Lease
    from scrapy_polite.throttle.policy import ThrottlePolicy


def throttle_handlers(throttle: ThrottlePolicy) -> dict[object, Callable[..., Any]]:
    """Each pace signal and the *throttle* method it calls (its arguments are the method's, by name)."""
    return {
        polite_signals.pace_rate_limited: throttle.rate_limited,
        polite_signals.pace_overloaded: throttle.overloaded,
        polite_signals.pace_challenged: throttle.on_challenge,
        polite_signals.pace_ok: throttle.ok,
        polite_signals.pace_unanswered: throttle.unanswered,
    }


class Pace:
    """Sends the pace signals; each method that has a fallback says whether a listener heard it."""

    def __init__(self, signals: SignalManager) -> None:
        self.signals = signals

    def _tell(self, signal: object, **kwargs: Any) -> list[Any]:
        """What each listener of *signal* returned (a failure is logged by Scrapy); empty when none listens."""
        return [result for _, result in self.signals.send_catch_log(signal, **kwargs)]

    def rate_limited(
        self, lease: Lease, delay: float, status: int, retry_after: float | None, headers: Any
    ) -> bool:
        return bool(self._tell(polite_signals.pace_rate_limited, lease=lease, delay=delay, status=status,
                               retry_after=retry_after, headers=headers))

    def overloaded(self, lease: Lease, status: int) -> None:
        self._tell(polite_signals.pace_overloaded, lease=lease, status=status)

    def challenged(self, lease: Lease, delay: float) -> bool:
        return bool(self._tell(polite_signals.pace_challenged, lease=lease, delay=delay))

    def ok(self, lease: Lease, status: int, headers: Any, latency: float | None = None) -> None:
        # Every clean answer, and nothing falls back on it: what the listeners returned is not collected.
        self.signals.send_catch_log(polite_signals.pace_ok, lease=lease, status=status, headers=headers, latency=latency)

    def unanswered(self, host: str, park: bool) -> str | None:
        """What the throttle did to *host* ("" if nothing new); None when no throttle listens."""
        results = self._tell(polite_signals.pace_unanswered, host=host, park=park)
        if not results:
            return None
        return next((r for r in results if isinstance(r, str)), "")
