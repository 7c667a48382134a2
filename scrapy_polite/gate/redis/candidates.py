"""Which endpoints one grant attempt offers the script: a few, least recently used first."""

from __future__ import annotations

import math

from scrapy_polite.gate.redis.hosts import HostSync

#: At most this many endpoints are offered to one grant attempt of an unpinned
#: request (the least recently used first), so a script stays short however big
#: the pool is.
CANDIDATES = 64
#: A session's request offers its pin and this many other usable endpoints (the
#: least recently used first): the script pins a new session to the least shared
#: of them, or repins a lost one, at a cost that does not grow with the pool.
SESSION_CHOICES = 16


class Candidates(HostSync):
    """The endpoints worth offering, judged on what this process knows of them."""

    def _free_candidates(self, host: str, only: str | None = None) -> list[str]:
        now = self._clock()
        out = []
        for key in self._order if only is None else [only]:
            st = self._endpoints.get(key)
            if st is None:
                continue
            # Dead endpoints stay on offer: one probe per longest backoff (the script decides).
            if (not st.removed and st.inflight < self.endpoint_concurrency and st.unhealthy_until <= now
                    and self._spacing.get((key, host), 0.0) <= now
                    and (only is not None or self._may_take(host, key))):
                out.append(self._ids[key])
                if len(out) >= CANDIDATES:
                    break
        return out

    def _session_choices(self, host: str, pinned: str | None, avoid: str | None = None) -> tuple[list[str], str]:
        """Up to SESSION_CHOICES usable endpoints other than *pinned*, least recently used first,
        and '1' when they are all this process has (the script may then drop a pin it lacks).

        *avoid* (a retired identity's endpoint) is offered only when nothing else is."""
        out: list[str] = []
        skipped = False
        for key in self._order:
            if key == pinned or not self.endpoint_usable(self._endpoints[key]) or not self._may_take(host, key):
                continue
            if key == avoid:
                skipped = True
                continue
            if len(out) == SESSION_CHOICES:
                return out, "0"
            out.append(key)
        if skipped and not out:
            return [avoid], "1"  # type: ignore[list-item]
        return out, "0" if skipped else "1"

    def _next_free(self, host: str, now: float) -> float:
        """When an endpoint with a free slot is next out of its backoff and its spacing for *host*
        (a busy one wakes the pump when it is released)."""
        return min((max(st.unhealthy_until, self._spacing.get((key, host), 0.0))
                    for key, st in self._endpoints.items()
                    if not st.removed and st.inflight < self.endpoint_concurrency), default=math.inf)
