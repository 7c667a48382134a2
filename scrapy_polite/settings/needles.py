"""The literal text every match of a body pattern starts with: the regex is tried only there.

A challenge pattern is searched in every answer's body. A case-insensitive alternation gives
Python's regex engine no literal to scan for, and it tries each branch at each byte: tens of
microseconds on a small page, milliseconds on 64 KiB. Every match starts with one of the
branches' leading literals, so the regex need only be tried where one of them is, and finding
them runs in C. When the pattern's start is not plain literals (an anchor, a class, a group),
there are no needles and the regex searches alone.
"""

from __future__ import annotations

import re
from typing import Any

try:  # Python 3.11+
    from re import _parser as sre_parse  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - Python 3.10
    import sre_parse  # type: ignore[no-redef]

#: Places tried before the whole body is searched instead.
MAX_TRIES = 32


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


def found(pattern: re.Pattern[bytes], needles: tuple[bytes, ...], folded: bool, body: bytes,
          lowered: bytes | None) -> bool:
    """Whether *pattern* matches somewhere in *body*: tried only where a needle starts.

    *lowered* is ``body.lower()`` when *folded*. Each match starts where one of the needles does,
    so trying those places alone finds a match exactly when searching the whole body would.
    """
    hay = lowered if folded and lowered is not None else body
    tries = 0
    for needle in needles:
        at = hay.find(needle)
        while at >= 0:
            if pattern.match(body, at):
                return True
            tries += 1
            if tries > MAX_TRIES:  # a needle too common to help: the regex searches on its own
                return pattern.search(body) is not None
            at = hay.find(needle, at + 1)
    return False
