"""The settings reference: the docs' settings page, generated from the settings table (see docs/conf.py).

Settings read together (``joined`` in the table) share one row, their names joined by `` / ``.
"""

from __future__ import annotations

from typing import Any

from scrapy_polite.settings.table import SCRAPY_SETTINGS, SETTINGS, Setting


def shown_default(setting: Setting) -> str:
    """The setting's default as the reference shows it: ``300`` for ``300.0``, strings in double quotes."""
    if setting.shown is not None:
        return setting.shown
    return f"`{_literal(setting.default)}`"


def _literal(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, tuple):
        return "(" + ", ".join(_literal(v) for v in value) + ")"
    if isinstance(value, list):
        return "[" + ", ".join(_literal(v) for v in value) + "]"
    return repr(value)


def rows() -> list[list[Setting]]:
    """The table's settings grouped by reference row, in order."""
    grouped: list[list[Setting]] = []
    for setting in SETTINGS:
        if setting.joined and grouped:
            grouped[-1].append(setting)
        else:
            grouped.append([setting])
    return grouped


def markdown_table() -> str:
    """The reference table, in Markdown: setting, default, meaning."""
    lines = ["| Setting | Default | Meaning |", "|---|---|---|"]
    for row in rows():
        names = " / ".join(f"`{s.name}`" for s in row)
        lines.append(f"| {names} | {' / '.join(shown_default(s) for s in row)} | {row[0].doc} |")
    for scrapy in SCRAPY_SETTINGS:
        lines.append(f"| `{scrapy.name}` (Scrapy's) | {scrapy.shown} | {scrapy.doc} |")
    return "\n".join(lines) + "\n"
