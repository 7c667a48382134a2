"""Scrapy's ``DOWNLOAD_SLOTS``, read as per-host starting limits that win over the ``POLITE_*`` defaults."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from scrapy.settings import BaseSettings

from scrapy_polite.errors import PoliteConfigError
from scrapy_polite.settings.parsers import MAX_SECONDS, number


@dataclass(frozen=True)
class HostLimits:
    """What the gates start a host at, and the most concurrency the throttle may grow it to."""

    concurrency: int
    concurrency_max: int
    delay: tuple[float, float]


def download_slots(settings: BaseSettings, defaults: HostLimits) -> dict[str, HostLimits]:
    """Scrapy's ``DOWNLOAD_SLOTS`` as per-host :class:`HostLimits` over *defaults*.

    ``delay`` is Scrapy's: with ``randomize_delay`` (default ``RANDOMIZE_DOWNLOAD_DELAY``)
    it spans 0.5-1.5 times the delay, with ``jitter`` j it spans (1-j)-(1+j) times it.
    An explicit ``concurrency`` is also the most the throttle grows the host to.
    """
    slots = settings.getdict("DOWNLOAD_SLOTS")
    randomize = settings.getbool("RANDOMIZE_DOWNLOAD_DELAY", True)
    out: dict[str, HostLimits] = {}
    for key, entry in slots.items():
        name = f"DOWNLOAD_SLOTS[{key!r}]"
        if not isinstance(entry, dict):
            raise PoliteConfigError(name, entry, "a dict with concurrency, delay, randomize_delay or jitter")
        conc, conc_max, delay = defaults.concurrency, defaults.concurrency_max, defaults.delay
        if entry.get("concurrency") is not None:
            conc = conc_max = number(f"{name}['concurrency']", entry["concurrency"], int, 1, 100_000)
        if entry.get("delay") is not None:
            delay = _delay(name, entry, randomize)
        out[str(key)] = HostLimits(conc, conc_max, delay)
    return out


def _delay(name: str, entry: dict[Any, Any], randomize: bool) -> tuple[float, float]:
    """The entry's delay as a (min, max) span, jittered as Scrapy would jitter it."""
    d = number(f"{name}['delay']", entry["delay"], float, 0.0, MAX_SECONDS / 2)
    if "jitter" in entry:
        jitter = number(f"{name}['jitter']", entry["jitter"], float, 0.0, 1.0)
    else:
        value = entry.get("randomize_delay", randomize)
        if not isinstance(value, bool):
            raise PoliteConfigError(f"{name}['randomize_delay']", value, "True or False")
        jitter = 0.5 if value else 0.0
    return (d * (1 - jitter), d * (1 + jitter))
