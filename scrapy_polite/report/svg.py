"""The drawing primitives of the report's inline SVG figures: the element list, axis ticks, status colours."""

from __future__ import annotations

import math
from html import escape

_STATUS_COLORS = {"2": "#2e7d32", "3": "#00838f", "4": "#8d6e63", "5": "#6a1b9a"}
_SPECIAL_COLORS = {"429": "#ef6c00", "403": "#c62828", "404": "#9e9e9e"}


def status_color(label: str) -> str:
    """One colour per status class; 429, 403 and 404 stand out; exceptions are dark grey."""
    if label in _SPECIAL_COLORS:
        return _SPECIAL_COLORS[label]
    if label.isdigit():
        return _STATUS_COLORS.get(label[0], "#607d8b")
    return "#37474f"  # exception classes


def nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """About *n* round tick values (steps of 1, 2, 2.5 or 5 times a power of ten) from *lo* to *hi*."""
    if hi <= lo:
        hi = lo + 1
    raw = (hi - lo) / n
    step = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 2.5, 5, 10):
        if raw <= step * m:
            step *= m
            break
    first = math.ceil(lo / step) * step
    return [round(first + i * step, 10) for i in range(int((hi - first) / step + 1e-9) + 1)]


class Svg:
    """One SVG figure built as a list of elements, with its accessible label."""

    def __init__(self, width: int, height: int, label: str) -> None:
        self.width, self.height = width, height
        self.parts: list[str] = [
            f'<svg viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" '
            f'aria-label="{escape(label)}">'
        ]

    def add(self, s: str) -> None:
        self.parts.append(s)

    def text(self, x: float, y: float, s: str, anchor: str = "start", cls: str = "", extra: str = "") -> None:
        c = f' class="{cls}"' if cls else ""
        self.add(f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}"{c}{extra}>{escape(s)}</text>')

    def done(self) -> str:
        return "".join(self.parts) + "</svg>"
