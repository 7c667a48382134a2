"""How a setting's value is read: one function per kind of value, named in the settings table.

Each takes the table entry (its name, bounds and allowed values) and the raw value
(the default when the setting is unset), and returns the typed value the config
holds, or raises :class:`PoliteConfigError` naming the setting, the value and what
is expected. Values from the command line (``-s``) and Scrapyd arrive as strings,
so every parser takes the string form too.
"""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING, Any

from scrapy_polite.errors import PoliteConfigError, Shown
from scrapy_polite.pool.endpoints import split_proxies
from scrapy_polite.settings import checks

if TYPE_CHECKING:
    from scrapy_polite.settings.table import Setting

#: The longest duration any ``POLITE_*`` setting accepts (30 days): a longer one is a typo,
#: and Redis rejects expiry times far beyond it.
MAX_SECONDS = 30 * 24 * 3600.0
#: The largest count any ``POLITE_*`` setting accepts.
MAX_COUNT = 1_000_000_000


def unset(value: Any) -> bool:
    """None or an empty string (``-s NAME=``): an optional setting is off."""
    return value is None or (isinstance(value, str) and not value.strip())


def number(name: str, value: Any, kind: type, minimum: float | None, maximum: float | None) -> Any:
    """*value* as a finite int or float within bounds.

    Without a *maximum*, floats (all seconds) stop at ``MAX_SECONDS`` and ints at ``MAX_COUNT``,
    so a typo cannot overflow a timer, a Redis expiry or a loop.
    """
    noun = "an integer" if kind is int else "a number"
    try:
        if isinstance(value, bool):
            raise ValueError
        if isinstance(value, str):
            value = value.strip()
        found = kind(value)
        if kind is int and isinstance(value, float) and not value.is_integer():
            raise ValueError
    except (TypeError, ValueError, OverflowError):  # int(inf) overflows
        raise PoliteConfigError(name, value, noun) from None
    if isinstance(found, float) and not math.isfinite(found):
        raise PoliteConfigError(name, value, "a finite " + ("integer" if kind is int else "number"))
    if maximum is None:
        maximum = MAX_SECONDS if kind is float else MAX_COUNT
    if minimum is not None and found < minimum:
        raise PoliteConfigError(name, value, f"{noun} >= {minimum}")
    if found > maximum:
        raise PoliteConfigError(name, value, f"{noun} <= {maximum:g}")
    return found


def boolean(s: Setting, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, str)) and str(value).strip().lower() in {"0", "1", "true", "false"}:
        return str(value).strip().lower() in {"1", "true"}
    raise PoliteConfigError(s.name, value, "True or False")


def integer(s: Setting, value: Any) -> int:
    return int(number(s.name, value, int, s.minimum, s.maximum))


def decimal(s: Setting, value: Any) -> float:
    return float(number(s.name, value, float, s.minimum, s.maximum))


def optional_integer(s: Setting, value: Any) -> int | None:
    return None if unset(value) else integer(s, value)


def optional_decimal(s: Setting, value: Any) -> float | None:
    return None if unset(value) else decimal(s, value)


def text(s: Setting, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise PoliteConfigError(s.name, value, "a non-empty string")
    return value


def optional_text(s: Setting, value: Any) -> str | None:
    """A string, a path object (as a string) or None."""
    if unset(value):
        return None
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str):
        raise PoliteConfigError(s.name, value, "a string or None")
    return value


def http_url(s: Setting, value: Any) -> str | None:
    found = optional_text(s, value)
    return None if found is None else checks.http_url(s.name, found)


def output_path(s: Setting, value: Any) -> str | None:
    return checks.output_path(s.name, optional_text(s, value))


def listen_address(s: Setting, value: Any) -> str:
    return checks.listen_address(s.name, text(s, value))


def policy_class(s: Setting, value: Any) -> str:
    return checks.policy_class(s.name, text(s, value))


def state(s: Setting, value: Any) -> str:
    return checks.state(s.name, value)


def choice(s: Setting, value: Any) -> str:
    if value not in s.choices:
        raise PoliteConfigError(s.name, value, "one of " + ", ".join(repr(c) for c in s.choices))
    return str(value)


def items(name: str, value: Any) -> list[Any]:
    """A list, or a string's comma/space separated words: the command line (-s) and Scrapyd pass strings."""
    if isinstance(value, str):
        return [v for v in value.replace(",", " ").split() if v]
    if not isinstance(value, (list, tuple)):
        raise PoliteConfigError(name, value, "a list")
    return list(value)


def choices(s: Setting, value: Any) -> frozenset[str]:
    values = items(s.name, value)
    if any(v not in s.choices for v in values):
        raise PoliteConfigError(s.name, values, "a list of " + ", ".join(repr(c) for c in s.choices))
    return frozenset(values)


def text_list(s: Setting, value: Any) -> tuple[str, ...]:
    values = items(s.name, value)
    if not all(isinstance(v, str) and v for v in values):
        raise PoliteConfigError(s.name, values, "a list of non-empty strings")
    return tuple(values)


def proxies(s: Setting, value: Any) -> tuple[Any, ...]:
    """Like a list, but a string is split without taking a piece of a password for a proxy."""
    return tuple(split_proxies(value, s.name) if isinstance(value, str) else items(s.name, value))


def status_codes(s: Setting, value: Any) -> frozenset[int]:
    return frozenset(number(s.name, v, int, 100, 599) for v in items(s.name, value))


def some_status_codes(s: Setting, value: Any) -> frozenset[int]:
    """Status codes, at least one: an empty ``POLITE_RATE_LIMIT_CODES`` would leave a 429 to no component."""
    codes = status_codes(s, value)
    if not codes:
        raise PoliteConfigError(s.name, value, "at least one HTTP status (e.g. [429])")
    return codes


def span(name: str, value: Any, positive: bool = False) -> tuple[float, float]:
    """``(min, max)`` seconds; one number d means "about d", jittered by +-1/3."""
    if isinstance(value, str):
        value = [v for v in value.replace(",", " ").split() if v]
    if isinstance(value, (list, tuple)) and len(value) == 1:
        value = value[0]
    if isinstance(value, (list, tuple)) and len(value) == 2:
        low = number(name, value[0], float, 0.0, None)
        high = number(name, value[1], float, 0.0, None)
    elif isinstance(value, (int, float, str)) and not isinstance(value, bool):
        d = number(name, value, float, 0.0, MAX_SECONDS * 3 / 4)
        low, high = d * 2 / 3, d * 4 / 3
    else:
        raise PoliteConfigError(name, value, "(min, max) seconds, or one number of seconds")
    if low < 0 or high < low:
        raise PoliteConfigError(name, value, "(min, max) with 0 <= min <= max")
    if positive and low <= 0:
        raise PoliteConfigError(name, value, "(min, max) with 0 < min <= max")
    return (low, high)


def seconds_range(s: Setting, value: Any) -> tuple[float, float]:
    return span(s.name, value)


def positive_range(s: Setting, value: Any) -> tuple[float, float]:
    """A range whose low end is above 0: a backoff or a park that doubles from 0 s never waits."""
    return span(s.name, value, positive=True)


def proxy_tiers(s: Setting, value: Any) -> tuple[Any, ...]:
    """Each tier a list of proxies, or the path of a proxies file; tiers come cheapest first."""
    tiers: list[Any] = []
    for tier in items(s.name, value):
        if isinstance(tier, str):
            tiers.append(tier)
        elif isinstance(tier, (list, tuple)) and tier:
            tiers.append(tuple(tier))
        else:
            raise PoliteConfigError(s.name, Shown("[...]"), "a list of tiers: proxy lists or proxies-file paths")
    return tuple(tiers)
