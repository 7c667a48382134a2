"""``Retry-After`` parsing (RFC 9110 §10.2.3), after urllib3's ``Retry``.

Both forms are accepted: delta-seconds (``120``) and an HTTP-date
(``Wed, 21 Oct 2026 07:28:00 GMT``). Garbage, negative values and dates in
the past yield ``None`` so the caller falls back to its default cooldown.
"""

from __future__ import annotations

import email.utils
import re
import time

_DELTA_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*$")


def parse_retry_after(value: str | bytes | None, now: float | None = None) -> float | None:
    """Seconds to wait, or ``None`` when *value* says nothing usable."""
    if value is None:
        return None
    if isinstance(value, bytes):
        value = value.decode("latin-1", "replace")
    match = _DELTA_RE.match(value)
    if match:
        seconds = float(match.group(1))
    else:
        parsed = email.utils.parsedate_tz(value)
        if parsed is None:
            return None
        if parsed[9] is None:
            # No zone: HTTP-dates are always GMT.
            parsed = (*parsed[:9], 0)
        seconds = email.utils.mktime_tz(parsed) - (time.time() if now is None else now)
    if seconds <= 0:
        return None
    return seconds
