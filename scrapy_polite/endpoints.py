"""Proxy endpoints: parsing, validation, masking and gateway templates.

An *endpoint* is one exit identity: a proxy URL, or one session id of a
rotating gateway whose username carries the session (``{session}`` in the
URL template).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from .errors import PoliteConfigError

SUPPORTED_SCHEMES = ("http", "https")
SESSION_PLACEHOLDER = "{session}"
_SESSION_ID_RE = re.compile(r"^[A-Za-z0-9_-]+$")


@dataclass(frozen=True)
class Endpoint:
    """One exit identity the pool can lease.

    ``url`` carries credentials and goes only into ``meta['proxy']``;
    ``label`` is the masked name used in logs, stats and metrics.
    """

    key: str
    url: str
    label: str
    static_exit_ip: str | None = None
    template: str | None = None
    session_id: str | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def is_gateway_session(self) -> bool:
        return self.template is not None


def mask_proxy_url(url: str) -> str:
    """``scheme://host:port`` without user, password, path or query."""
    parts = urlsplit(url)
    host = parts.hostname or "?"
    if ":" in host:
        host = f"[{host}]"
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}"


def _validate_url(url: str, setting: str) -> None:
    probe = url.replace(SESSION_PLACEHOLDER, "session")
    try:
        parts = urlsplit(probe)
        port = parts.port
    except ValueError as exc:
        raise PoliteConfigError(setting, url, f"a proxy URL ({exc})") from None
    if parts.scheme not in SUPPORTED_SCHEMES:
        raise PoliteConfigError(
            setting,
            mask_proxy_url(probe) if parts.hostname else url,
            "an http:// or https:// proxy URL (Scrapy cannot use "
            f"{parts.scheme or 'scheme-less'} proxies)",
        )
    if not parts.hostname or port is None and ":" in parts.netloc.rsplit("@", 1)[-1]:
        raise PoliteConfigError(setting, url, "a proxy URL with a host, e.g. http://user:pass@host:port")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise PoliteConfigError(
            setting, mask_proxy_url(probe), "a proxy URL without path, query or fragment"
        )
    if url.count(SESSION_PLACEHOLDER) > 1:
        raise PoliteConfigError(setting, mask_proxy_url(probe), "at most one {session} placeholder")


def _entry_to_pair(entry: Any, setting: str) -> tuple[str, str | None]:
    if isinstance(entry, str):
        return entry.strip(), None
    if isinstance(entry, dict) and isinstance(entry.get("url"), str):
        exit_ip = entry.get("exit_ip")
        if exit_ip is not None and not isinstance(exit_ip, str):
            raise PoliteConfigError(setting, entry, "'exit_ip' to be a string IP address")
        unknown = set(entry) - {"url", "exit_ip"}
        if unknown:
            raise PoliteConfigError(setting, sorted(unknown), "only the keys 'url' and 'exit_ip'")
        return entry["url"].strip(), exit_ip
    raise PoliteConfigError(
        setting, type(entry).__name__, "each proxy as a URL string or {'url': ..., 'exit_ip': ...}"
    )


def gateway_session_id(template: str, index: int, salt: str = "") -> str:
    """A stable, URL-safe session id for slot *index* of *template*."""
    digest = hashlib.sha1(f"{template}|{salt}|{index}".encode()).hexdigest()[:10]
    return f"p{index}{digest}"


def expand(
    entries: Iterable[Any], gateway_sessions: int, setting: str = "POLITE_PROXIES", salt: str = ""
) -> tuple[list[Endpoint], list[str]]:
    """Validate *entries* and turn them into endpoints.

    Returns the endpoints and the masked labels of duplicates that were
    dropped (reported by the caller, so a typo in a list is visible).
    """
    endpoints: list[Endpoint] = []
    seen: set[str] = set()
    duplicates: list[str] = []
    for entry in entries:
        url, exit_ip = _entry_to_pair(entry, setting)
        if not url:
            continue
        _validate_url(url, setting)
        if SESSION_PLACEHOLDER in url:
            masked = mask_proxy_url(url.replace(SESSION_PLACEHOLDER, "session"))
            for i in range(gateway_sessions):
                sid = gateway_session_id(url, i, salt)
                key = f"{url}#{sid}"
                if key in seen:
                    continue
                seen.add(key)
                endpoints.append(
                    Endpoint(
                        key=key,
                        url=url.replace(SESSION_PLACEHOLDER, sid),
                        label=f"{masked}/session={sid}",
                        static_exit_ip=exit_ip,
                        template=url,
                        session_id=sid,
                    )
                )
            continue
        if url in seen:
            duplicates.append(mask_proxy_url(url))
            continue
        seen.add(url)
        label = mask_proxy_url(url)
        if any(e.label == label for e in endpoints):
            # Same host:port with other credentials: keep them apart in stats.
            label = f"{label}#{hashlib.sha1(url.encode()).hexdigest()[:6]}"
        endpoints.append(Endpoint(key=url, url=url, label=label, static_exit_ip=exit_ip))
    return endpoints, duplicates


def read_proxies_file(path: str | Path) -> list[str]:
    """Proxy URLs from a UTF-8 text file: one per line, ``#`` starts a comment.

    Each line is checked here, so a bad one is reported by its number, never by
    its content (it may hold a password). Raises ``OSError`` when the file cannot
    be read and :class:`PoliteConfigError` for a line that is not UTF-8 or not a
    proxy URL.
    """
    out = []
    for number, raw in enumerate(Path(path).read_bytes().splitlines(), 1):
        try:
            text = raw.decode("utf-8").lstrip("\ufeff")
        except UnicodeDecodeError:
            raise _line_error(path, number, "UTF-8 text") from None
        line = re.split(r"(?:^|\s)#", text, maxsplit=1)[0].strip()
        if not line:
            continue
        try:
            expand([line], 1, "POLITE_PROXIES_FILE")
        except PoliteConfigError:
            raise _line_error(path, number, _reason_without_credentials(line)) from None
        out.append(line)
    return out


def _line_error(path: str | Path, number: int, expected: str) -> PoliteConfigError:
    return PoliteConfigError(
        "POLITE_PROXIES_FILE", f"{path}, line {number}", f"{expected} (the line is not shown: it may hold a password)"
    )


def _reason_without_credentials(line: str) -> str:
    """Why *line* is not a proxy URL, found on a copy whose user and password are replaced."""
    head, sep, rest = line.partition("://")
    if not sep:
        head, rest = "", line
    if "@" in rest:
        rest = "user:pass@" + rest.rpartition("@")[2]
    masked = f"{head}{sep}{rest}"
    try:
        expand([masked], 1, "POLITE_PROXIES_FILE")
    except PoliteConfigError as exc:
        return exc.expected
    return "a proxy URL such as http://user:pass@host:port"
