"""The options of ``scrapy polite-tune``: each flag, its default, and the reader that checks its value."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from scrapy.exceptions import UsageError

from scrapy_polite.errors import PoliteConfigError


def _int_option(name: str, value: Any, minimum: int) -> int:
    try:
        number = int(str(value).strip())
    except ValueError:
        raise UsageError(f"{name} must be a whole number >= {minimum}, got {value!r}", print_help=False) from None
    if number < minimum:
        raise UsageError(f"{name} must be a whole number >= {minimum}, got {value!r}", print_help=False)
    return number


def _float_option(name: str, value: Any, minimum: float) -> float:
    try:
        number = float(str(value).strip())
    except ValueError:
        number = float("nan")
    if not number >= minimum or number == float("inf"):
        raise UsageError(f"{name} must be a number of seconds >= {minimum:g}, got {value!r}", print_help=False)
    return number


def _rate_option(name: str, value: Any) -> float:
    text = str(value).strip()
    try:
        number = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        number = float("nan")
    if not 0 <= number < 1:
        raise UsageError(f"{name} must be a share between 0 and 1 (or 0% to 99%), got {value!r}", print_help=False)
    return number


def _delay_option(name: str, value: Any) -> tuple[float, float]:
    from scrapy.settings import BaseSettings

    from scrapy_polite.settings.config import _Reader

    raw: Any = str(value).strip()
    try:
        raw = float(raw)  # one number d means (2d/3, 4d/3), as in POLITE_DELAY
    except ValueError:
        pass
    try:
        low, high = _Reader(BaseSettings({"POLITE_DELAY": raw})).range("POLITE_DELAY", positive=True)
    except PoliteConfigError:
        raise UsageError(
            f"{name} must be MIN,MAX seconds with 0 < MIN <= MAX (or one number), got {value!r}",
            print_help=False,
        ) from None
    return (round(low, 2), round(high, 2))


#: The tuning options: flag, metavar, default, reader (flag, text -> value), help.
OPTIONS: tuple[tuple[str, str, str | None, Callable[[str, Any], Any], str], ...] = (
    ("--budget", "N", "600", lambda n, v: _int_option(n, v, 1),
     "most requests sent to the site, all trials together (default 600)"),
    ("--trial-requests", "N", "100", lambda n, v: _int_option(n, v, 10), "most requests per trial (default 100)"),
    ("--trial-seconds", "S", "60", lambda n, v: _float_option(n, v, 5.0), "longest trial, in seconds (default 60)"),
    ("--max-429-rate", "R", "5%", _rate_option,
     "highest acceptable share of 429 answers, e.g. 5%% or 0.05 (default 5%%)"),
    ("--min-gain", "R", "5%", _rate_option, "how much faster a trial must be to replace the best one (default 5%%)"),
    ("--start-concurrency", "N", "2", lambda n, v: _int_option(n, v, 1),
     "POLITE_HOST_CONCURRENCY of the first trial (default 2)"),
    ("--start-delay", "MIN,MAX", "0.8,1.6", _delay_option, "POLITE_DELAY of the first trial (default 0.8,1.6)"),
    ("--max-concurrency", "N", None, lambda n, v: _int_option(n, v, 1),
     "highest POLITE_HOST_CONCURRENCY to try (default endpoints x POLITE_ENDPOINT_CONCURRENCY, "
     "at most CONCURRENT_REQUESTS)"),
)
