"""Ground-truth checks computed from the sandbox's access log."""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterable
from typing import Any

ITEM_RE = re.compile(r"^/item/(\d+)$")


def items_fetched(log: list[dict[str, Any]], site: str | None = None) -> Counter[int]:
    """How many times each item page was answered 200."""
    return Counter(
        int(m.group(1))
        for e in log
        if e["status"] == 200 and (site is None or e["site"] == site) and (m := ITEM_RE.match(e["path"]))
    )


def refetched(log: list[dict[str, Any]], site: str | None = None, undelivered_ips: Iterable[str] = ()) -> list[int]:
    """Item pages answered 200 more than once.

    A page whose every earlier answer went out through an IP in *undelivered_ips* is left out: that
    proxy died (or was cut off) while relaying, so the crawler may never have had the answer and
    had to fetch it again.
    """
    answers: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for e in sorted(log, key=lambda e: e["t_end"]):
        if e["status"] == 200 and (site is None or e["site"] == site) and (m := ITEM_RE.match(e["path"])):
            answers[int(m.group(1))].append(e)
    lost = set(undelivered_ips)
    return sorted(i for i, es in answers.items() if len(es) > 1 and not all(e["ip"] in lost for e in es[:-1]))


def max_inflight_per_ip(log: list[dict[str, Any]], site: str | None = None) -> int:
    return max((e["inflight_ip"] for e in log if site is None or e["site"] == site), default=0)


def max_inflight_host(log: list[dict[str, Any]], site: str) -> int:
    return max((e["inflight_host"] for e in log if e["site"] == site), default=0)


def min_spacing_per_ip(log: list[dict[str, Any]], site: str) -> float:
    """Smallest gap between two request starts of one IP at *site*."""
    starts: dict[str, list[float]] = defaultdict(list)
    for e in log:
        if e["site"] == site:
            starts[e["ip"]].append(e["t_start"])
    gaps = [b - a for ts in starts.values() for a, b in zip(sorted(ts), sorted(ts)[1:])]
    return min(gaps, default=float("inf"))


def statuses(log: list[dict[str, Any]], site: str | None = None) -> Counter[int]:
    return Counter(e["status"] for e in log if site is None or e["site"] == site)


def quiet_after(log: list[dict[str, Any]], site: str = "a", status: int = 429) -> list[tuple[float, dict[str, Any]]]:
    """For each *status* answer from *site*, how long until that IP came back to it, and the answer."""
    by_ip: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in sorted(log, key=lambda e: e["t_start"]):
        if e["site"] == site:
            by_ip[e["ip"]].append(e)
    return [(b["t_start"] - a["t_end"], a) for entries in by_ip.values()
            for a, b in zip(entries, entries[1:]) if a["status"] == status]
