"""``POLITE_CHALLENGE_PATTERNS``: what marks an answer as a challenge page, compiled once at start-up."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from scrapy_polite.errors import PoliteConfigError
from scrapy_polite.settings.needles import needles
from scrapy_polite.settings.parsers import items

if TYPE_CHECKING:
    from scrapy_polite.settings.table import Setting

#: How much of a body the challenge patterns search: challenge pages are small, catalogues need not be read whole.
CHALLENGE_BODY_BYTES = 64 * 1024

#: The markers of the common CAPTCHA and JavaScript-check pages.
DEFAULT_PATTERNS: list[dict[str, Any]] = [
    {"header": "cf-mitigated", "value": "challenge"},
    {"header": "x-amzn-waf-action", "value": "captcha|challenge"},
    {"body": r"(?i)verify (that )?you are (a )?human|<title>\s*just a moment\.\.\.|cf-chl-|"
             r"px-captcha|captcha-delivery\.com"},
    # Widgets and scripts that ordinary pages carry too: a challenge only on an error status.
    {"status": [403, 429, 503], "body": r"(?i)g-recaptcha|h-captcha|hcaptcha\.com|challenges\.cloudflare\.com|"
                                        r"_incapsula_resource"},
]


@dataclass(frozen=True)
class ChallengePattern:
    """One marker of a challenge page: a header (value regex), or statuses plus a body regex."""

    header: str | None = None
    value: re.Pattern[str] | None = None
    statuses: frozenset[int] = frozenset()
    body: re.Pattern[bytes] | None = None
    #: Literals one of which starts every match of *body* (none: unknown), lowercased when *folded*.
    needles: tuple[bytes, ...] = ()
    folded: bool = False


def patterns(s: Setting, value: Any) -> tuple[ChallengePattern, ...]:
    """Each entry a dict: ``{"header": name, "value": regex}`` or ``{"status": [codes], "body": regex}``."""
    return tuple(_pattern(s.name, entry) for entry in items(s.name, value))


def _pattern(name: str, entry: Any) -> ChallengePattern:
    expected = 'a list of {"header": name, "value": regex} or {"status": [codes], "body": regex} dicts'
    if not isinstance(entry, dict) or not entry or set(entry) - {"header", "value", "status", "body"}:
        raise PoliteConfigError(name, entry, expected)
    header, value, body = entry.get("header"), entry.get("value"), entry.get("body")
    statuses = entry.get("status", [])
    if (header is None) == (body is None) or (header is None and value is not None):
        raise PoliteConfigError(name, entry, expected)
    if not isinstance(statuses, (list, tuple)) or any(
        not isinstance(c, int) or not 100 <= c <= 599 for c in statuses
    ):
        raise PoliteConfigError(name, entry, "a status list of HTTP codes")
    if header is not None and (not isinstance(header, str) or not header):
        raise PoliteConfigError(name, entry, expected)
    try:
        compiled = re.compile(body.encode()) if isinstance(body, str) else None
        found, folded = needles(compiled) if compiled is not None else ((), False)
        return ChallengePattern(
            header=header.lower() if header else None,
            value=re.compile(value, re.IGNORECASE) if value is not None else None,
            statuses=frozenset(statuses),
            body=compiled,
            needles=found,
            folded=folded,
        )
    except (re.error, TypeError) as exc:
        raise PoliteConfigError(name, entry, f"valid regular expressions ({exc})") from None
