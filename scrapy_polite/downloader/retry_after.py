"""``Retry-After`` parsing (RFC 9110 §10.2.3), after urllib3's ``Retry``.

Both forms are accepted: delta-seconds (``120``) and an HTTP-date
(``Wed, 21 Oct 2026 07:28:00 GMT``). Garbage, negative values and dates in
the past yield ``None`` so the caller falls back to its default cooldown.
The value comes from the site, so nothing it can hold raises: dates beyond
what the platform's time functions reach, non-ASCII text and oversized
values are all ``None`` too.
"""

from __future__ import annotations

import email.utils
import math
import random
import re
import time

#: Longer values are not parsed: an HTTP-date is 29 characters, a useful delta far fewer.
MAX_LENGTH = 64
_DELTA_RE = re.compile(r"[0-9]+(?:\.[0-9]+)?")


def parse_retry_after(value: str | bytes | None, now: float | None = None) -> float | None:
    """Seconds to wait, or ``None`` when *value* says nothing usable."""
    if value is None or len(value) > MAX_LENGTH:
        return None
    if isinstance(value, (bytes, bytearray)):
        value = bytes(value).decode("latin-1")
    value = value.strip()
    if not value or not value.isascii():
        return None
    if _DELTA_RE.fullmatch(value):
        seconds: float | None = float(value)
    else:
        seconds = _seconds_until(value, time.time() if now is None else now)
    if seconds is None or not math.isfinite(seconds) or seconds <= 0:
        return None
    return seconds


def _seconds_until(value: str, now: float) -> float | None:
    """Seconds from *now* to the HTTP-date *value*; ``None`` if it is no date the platform can place."""
    try:
        parsed = email.utils.parsedate_tz(value)
        if parsed is None:
            return None
        if parsed[9] is None:
            # No zone: HTTP-dates are always GMT.
            parsed = (*parsed[:9], 0)
        return email.utils.mktime_tz(parsed) - now
    except (ArithmeticError, ValueError, OSError, LookupError, TypeError):
        # Years past 9999 or of 20 digits overflow the date functions.
        return None


def cooldown(header: bytes | None, default: tuple[float, float], cap: float, rng: random.Random) -> float:
    """Seconds to rest after a rate signal: its ``Retry-After``, else a draw in ``POLITE_COOLDOWN``; at most *cap*."""
    seconds = parse_retry_after(header)
    if seconds is None:
        seconds = rng.uniform(*default)
    return min(seconds, cap)
