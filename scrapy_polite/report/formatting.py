"""How numbers and durations read in the report's tables and figures."""

from __future__ import annotations


def num(v: float) -> str:
    """A number in at most three significant digits (whole from 100 up)."""
    if v == 0:
        return "0"
    if abs(v) >= 100 or float(v).is_integer():
        return f"{v:.0f}"
    return f"{v:.3g}"


def sec(v: float | None) -> str:
    """Seconds, in ms below one; ``-`` for none."""
    if v is None:
        return "-"
    if v < 1:
        return f"{v * 1000:.0f} ms"
    return f"{v:.0f} s" if float(v).is_integer() else f"{v:.2f} s"
