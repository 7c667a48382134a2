"""Whose a 502, 503 or 504 is: the site's, or the one endpoint that keeps answering it.

A proxy that cannot (or will not) reach a site answers with its own 502/503/504,
often at once and without any proxy-error header: it then looks like the
site's own error, is free again first, and takes a large share of the requests.
What tells them apart is the other endpoints: when the site's pages keep
coming through them while one endpoint gets only gateway errors, that
endpoint is at fault; when several endpoints get them, the site is.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

#: The statuses a proxy answers for a site it cannot serve.
GATEWAY_STATUSES = frozenset({502, 503, 504})


@dataclass
class _Last:
    """An endpoint's latest answer from one host: when, whether a gateway error, and how many in a row."""

    at: float
    gateway: bool
    streak: int


class GatewayErrors:
    """Decides, per answer, whether a gateway error is its endpoint's fault.

    A gateway error through endpoint *E* for host *H* is *E*'s when *E* got
    *streak* of them in a row from *H* while, among the endpoints that answered
    for *H* within *window* seconds, some got the site's pages (any other
    status) and either *E* alone got gateway errors or more got pages than
    gateway errors. Anything else is the site's, as before:
    the first one (it may be the site's passing error), or several endpoints
    seeing them (the site is down). Memory is bounded to *max_hosts* hosts,
    least recent out first.
    """

    def __init__(
        self, *, window: float = 60.0, streak: int = 2, max_hosts: int = 1000,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.window, self.streak, self.max_hosts = window, streak, max_hosts
        self._clock = clock or time.monotonic
        self._hosts: OrderedDict[str, dict[str, _Last]] = OrderedDict()

    def __len__(self) -> int:
        """Hosts remembered."""
        return len(self._hosts)

    def answered(self, endpoint: str, host: str, gateway: bool) -> bool:
        """Record *endpoint*'s answer from *host*, a *gateway* error or not; True when it is that endpoint's fault.

        *gateway*: a status in :data:`GATEWAY_STATUSES` that the response policy takes
        for the site's error (not a rate signal, a challenge or a ban).
        """
        seen = self._hosts.get(host)
        if seen is None:
            seen = self._hosts[host] = {}
            while len(self._hosts) > self.max_hosts:
                self._hosts.popitem(last=False)
        else:
            self._hosts.move_to_end(host)
        now = self._clock()
        # Each endpoint's answer goes to the end when it comes, so the host's are oldest first:
        # those out of the window are at the front (no scan of all of them on every answer).
        stale = now - self.window
        while seen:
            oldest = next(iter(seen))
            if seen[oldest].at >= stale:
                break
            del seen[oldest]
        previous = seen.pop(endpoint, None)
        streak = previous.streak + 1 if gateway and previous is not None and previous.gateway else int(gateway)
        seen[endpoint] = _Last(now, gateway, streak)
        if not gateway:
            return False
        pages = sum(not last.gateway for last in seen.values())
        failing = len(seen) - pages
        return streak >= self.streak and pages >= 1 and (failing == 1 or pages > failing)
