"""A throttle decision as event lines (the stats' JSON lines, the report) and as log text."""

from __future__ import annotations

from typing import Any


def throttle_events(
    old: dict[str, Any], new: dict[str, Any], evidence: dict[str, Any], now: float
) -> list[dict[str, Any]]:
    """What one throttle decision changed, one ``{"change", "from", "to"}`` per value.

    ``concurrency``, ``spacing`` (the delay band, seconds), ``host_rate`` (req/s,
    ``None``: unlimited), and ``pause`` or ``park`` (seconds the host is held
    from *now*, monotonic like the snapshots' ``paused_until``).
    """
    events: list[dict[str, Any]] = []
    if old["concurrency"] != new["concurrency"]:
        events.append({"change": "concurrency", "from": old["concurrency"], "to": new["concurrency"]})
    if tuple(old["delay"]) != tuple(new["delay"]):
        events.append({"change": "spacing", "from": _band(old["delay"]), "to": _band(new["delay"])})
    if old["interval"] != new["interval"]:
        events.append({"change": "host_rate", "from": _req_s(old["interval"]), "to": _req_s(new["interval"])})
    if new["paused_until"] > max(old["paused_until"], now):
        events.append({
            "change": "park" if "park" in evidence else "pause",
            "from": round(max(0.0, old["paused_until"] - now), 3),
            "to": round(new["paused_until"] - now, 3),
        })
    return events


def evidence_text(evidence: dict[str, Any]) -> str:
    """The evidence of a change for the log line: the answer's Retry-After and the IP's gap, and
    where a cut met the host's limit."""
    parts = []
    if evidence.get("retry_after") is not None:
        parts.append(f"Retry-After {evidence['retry_after']:g} s")
    if evidence.get("gap") is not None:
        parts.append(f"gap {evidence['gap']:.2f} s")
    text = "; " + ", ".join(parts) if parts else ""
    limit = evidence.get("host_limit")
    if limit and limit.get("ceiling") is not None:
        text += f"; host limit met at {limit['ceiling']:.2f} req/s"
    return text


def _band(delay: tuple[float, float]) -> list[float]:
    return [round(delay[0], 4), round(delay[1], 4)]


def _req_s(interval: float) -> float | None:
    return round(1 / interval, 4) if interval > 0 else None
