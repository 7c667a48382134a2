"""Bounded tables of names (hosts, endpoints): the busiest keep rows, the rest share one OTHER row."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar

#: The row every view (stats keys, Prometheus, summary, report) sums the folded names into.
OTHER = "(other)"


_Self = TypeVar("_Self", bound="Row")


class Row(Protocol):
    @property
    def total(self) -> int: ...
    def merge(self: _Self, other: _Self) -> None: ...


R = TypeVar("R", bound=Row)


def admit(table: dict[str, R], name: str, limit: int, make_other: Callable[[], R]) -> list[str]:
    """Make room for *name* in *table*; return the names folded into OTHER.

    The table holds up to twice *limit* names. When it is full, the less busy
    half goes into the OTHER row, so a name that becomes busy late in a broad
    crawl still gets a row of its own, at an amortised O(log n) per new name,
    and the totals stay exact.
    """
    if name in table or len(table) < 2 * limit:
        return []
    ranked = sorted((k for k in table if k != OTHER), key=lambda k: table[k].total)
    other = table.get(OTHER)
    if other is None:
        other = table[OTHER] = make_other()
    folded = ranked[: len(ranked) - limit + 1]
    for key in folded:
        other.merge(table.pop(key))
    return folded


def key_name(label: str) -> str:
    """An endpoint's label as one stats-key segment: no ``/``, no default scheme.

    Monitoring tools split Scrapy's stats keys on ``/``, so
    ``http://10.0.0.1:8000/session=p0ab`` becomes ``10.0.0.1:8000;session=p0ab``
    (another scheme stays in front: ``https:10.0.0.1:8443``).
    """
    name = label.removeprefix("http://").replace("://", ":", 1)
    return name.replace("/", ";")
