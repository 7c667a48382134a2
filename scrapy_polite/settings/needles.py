"""The literal text every match of a body pattern starts with, so most answers skip the regex.

A challenge pattern is searched in every answer's body. A case-insensitive alternation gives
Python's regex engine no literal to scan for, and it tries each branch at each byte: tens of
microseconds on a small page, milliseconds on 64 KiB. Every match starts with one of the
branches' leading literals, so a body holding none of them cannot match; the substring test
that says so runs in C. When the pattern's start is not plain literals (an anchor, a class, a
group), there are no needles and the regex decides alone.
"""

from __future__ import annotations

import re
from typing import Any

try:  # Python 3.11+
    from re import _parser as sre_parse  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - Python 3.10
    import sre_parse  # type: ignore[no-redef]


def needles(pattern: re.Pattern[bytes]) -> tuple[tuple[bytes, ...], bool]:
    """(the literals one of which starts every match, whether to compare them lowercased); ``()`` when unknown."""
    try:
        parsed = sre_parse.parse(pattern.pattern, pattern.flags)
        flags = parsed.state.flags
        if flags & re.LOCALE:
            return (), False
        found = _leading(list(parsed))
    except Exception:  # an internal parser that changed: no needles, the regex alone decides
        return (), False
    folded = bool(flags & re.IGNORECASE)
    if found is None:
        return (), False
    return tuple(n.lower() for n in found) if folded else tuple(found), folded


def _leading(items: list[tuple[Any, Any]]) -> list[bytes] | None:
    """The leading literals of a parsed pattern, one per top-level branch; None if a branch has none."""
    lead = _literals(items)
    if lead:
        return [lead]
    if len(items) == 1 and items[0][0] is sre_parse.BRANCH:
        found = [_literals(list(branch)) for branch in items[0][1][1]]
        return None if not all(found) else found
    return None


def _literals(items: list[tuple[Any, Any]]) -> bytes:
    """The literal bytes at the start of *items*."""
    out = bytearray()
    for op, arg in items:
        if op is not sre_parse.LITERAL or not 0 <= arg < 256:
            break
        out.append(arg)
    return bytes(out)


def may_match(found: tuple[bytes, ...], folded: bool, body: bytes, lowered: bytes | None) -> bool:
    """Whether *body* holds one of the needles (*lowered*: ``body.lower()``, when *folded*)."""
    hay = lowered if folded and lowered is not None else body
    return any(n in hay for n in found)
