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

from scrapy_polite.errors import PoliteConfigError, Shown

SUPPORTED_SCHEMES = ("http", "https")
SESSION_PLACEHOLDER = "{session}"
_SESSION_ID_RE = re.compile(r"^[A-Za-z0-9_-]+$")
_SCHEME_RE = re.compile(r"^\w+://")
#: How a password holding a character that cuts or ends a URL part must be written.
ENCODE_HINT = "percent-encode ',' ' ' '/' '?' '#' '@' in a password (%2C %20 %2F %3F %23 %40)"


class SecretURL(str):
    """A proxy URL whose ``repr`` hides its credentials.

    The URL itself (``str()``, formatting, ``meta['proxy']``) is unchanged, but it
    ends up as a dict key and in ``request.meta``, which code logs with ``%r``.
    """

    __slots__ = ()

    def __repr__(self) -> str:
        return repr(shown_url(str(self)))


@dataclass(frozen=True)
class Endpoint:
    """One exit identity the pool can lease.

    ``url`` (and ``key``, ``template``) carry credentials and go only into
    ``meta['proxy']``, so they are left out of the ``repr``; ``label`` is the
    masked name used in logs, stats and metrics; ``ident`` is the URL without
    its password (plus an ordinal when two entries differ only by password),
    the one thing ids shared with other processes are derived from.
    """

    key: str = field(repr=False)
    url: str = field(repr=False)
    label: str
    static_exit_ip: str | None = None
    template: str | None = field(default=None, repr=False)
    session_id: str | None = None
    ident: str = field(default="", repr=False)

    def __post_init__(self) -> None:
        for name in ("key", "url", "template"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, SecretURL):
                object.__setattr__(self, name, SecretURL(value))
        if not self.ident:
            object.__setattr__(self, "ident", without_password(self.url))

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


def with_scheme(url: str) -> str:
    """*url* with ``http://`` in front if it has no scheme, as Scrapy's ``add_http_if_no_scheme``.

    Providers list proxies as ``user:pass@host:port``.
    """
    return url if _SCHEME_RE.match(url) else "http://" + url.lstrip("/")


def without_password(url: str) -> str:
    """*url* with its password removed (scheme, user, host and port kept): safe to hash and share."""
    scheme, _, rest = with_scheme(url).partition("://")
    userinfo, at, hostport = rest.rpartition("@")
    user = userinfo.split(":", 1)[0]
    return f"{scheme.lower()}://{user}{at}{hostport}"


def shown_url(url: str) -> str:
    """*url* as an error may show it, whatever is wrong with it: never a password.

    Only what follows the last ``@`` is shown (a password may hold ``/``, ``?``,
    ``#`` or ``@``), up to a path. Without an ``@``, a port that is not a number
    may be a piece of a password (a ``user:pass`` without host), so it is hidden.
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    at = "@" in rest
    hostport = re.split(r"[/?#]", rest.rsplit("@", 1)[-1], maxsplit=1)[0]
    if not at:
        if hostport.startswith("["):
            host, close, port = hostport.partition("]")
            host, port = host + close, port[1:]
        else:
            host, _, port = hostport.partition(":")
        hostport = host + (f":{port}" if port.isdigit() else ":…" if port else "")
    prefix = f"{scheme}://" if sep else ""
    return f"{prefix}***@{hostport}" if at else f"{prefix}{hostport}"


def _validate_url(url: str, setting: str) -> None:
    probe = url.replace(SESSION_PLACEHOLDER, "session")
    shown = shown_url(probe)
    authority = re.split(r"[/?#]", probe.partition("://")[2], maxsplit=1)[0]
    # An '@' past the authority: the password holds a '/', '?' or '#' that ends it early.
    hint = f"; {ENCODE_HINT}" if "@" in probe and "@" not in authority else ""
    try:
        parts = urlsplit(probe)
        port = parts.port
    except ValueError as exc:
        expected = (
            "a proxy URL with its IPv6 host in brackets, e.g. http://user:pass@[2001:db8::1]:8080"
            if "IPv6" in str(exc) else "a proxy URL with a port number 1-65535, e.g. http://user:pass@host:port"
        )
        raise PoliteConfigError(setting, shown, expected + hint) from None
    if parts.scheme not in SUPPORTED_SCHEMES:
        raise PoliteConfigError(
            setting, shown,
            "an http:// or https:// proxy URL (Scrapy cannot use "
            f"{parts.scheme or 'scheme-less'} proxies)",
        )
    if not parts.hostname or port is None and ":" in parts.netloc.rsplit("@", 1)[-1]:
        raise PoliteConfigError(setting, shown, "a proxy URL with a host, e.g. http://user:pass@host:port" + hint)
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise PoliteConfigError(setting, shown, "a proxy URL without path, query or fragment" + hint)
    if url.count(SESSION_PLACEHOLDER) > 1:
        raise PoliteConfigError(setting, shown, "at most one {session} placeholder")


def split_proxies(value: str, setting: str) -> list[str]:
    """Proxy URLs from one string (``-s``, Scrapyd): separated by commas and spaces.

    A password holding ``,`` or a space is cut by that split. Its pieces must
    not be taken for proxies, nor shown: the error names the piece by number.
    """
    pieces = value.replace(",", " ").split()
    for n, piece in enumerate(pieces, 1):
        userinfo, at, _ = piece.rpartition("@")
        # A password's tail: "rest@host:port" without a scheme and without the "user:" before it.
        cut = at and not _SCHEME_RE.match(piece) and ":" not in userinfo
        why = "an '@' without 'user:' before it, like the end of a cut password" if cut else ""
        try:
            _validate_url(with_scheme(piece), setting)
        except PoliteConfigError as exc:
            if len(pieces) == 1:  # nothing was cut: the entry's own (masked) error says more
                raise
            why = exc.expected
        if why:
            raise PoliteConfigError(
                setting, Shown(f"<a string of {len(pieces)} comma/space separated pieces>"),
                f"proxy URLs separated by commas or spaces, but piece {n} is not one ({why}). "
                f"If a password holds ',' or ' ', {ENCODE_HINT}, or give a list (settings.py) "
                "or POLITE_PROXIES_FILE",
            )
    return pieces


def _entry_to_pair(entry: Any, setting: str) -> tuple[str, str | None]:
    if isinstance(entry, str):
        return entry.strip(), None
    if isinstance(entry, dict) and isinstance(entry.get("url"), str):
        exit_ip = entry.get("exit_ip")
        if exit_ip is not None and not isinstance(exit_ip, str):
            raise PoliteConfigError(
                setting, {"url": shown_url(entry["url"].strip()), "exit_ip": exit_ip},
                "'exit_ip' to be a string IP address",
            )
        unknown = set(entry) - {"url", "exit_ip"}
        if unknown:
            raise PoliteConfigError(setting, sorted(unknown), "only the keys 'url' and 'exit_ip'")
        return entry["url"].strip(), exit_ip
    raise PoliteConfigError(
        setting, type(entry).__name__, "each proxy as a URL string or {'url': ..., 'exit_ip': ...}"
    )


def gateway_session_id(template: str, index: int, salt: str = "") -> str:
    """A stable, URL-safe session id for slot *index* of *template*.

    Derived from the template without its password (it is published in labels),
    so every process reading the same list picks the same ids.
    """
    digest = hashlib.sha1(f"{without_password(template)}|{salt}|{index}".encode()).hexdigest()[:10]
    return f"p{index}{digest}"


def _ordinal(ident: str, seen: dict[str, int]) -> str:
    """*ident*, with ``#n`` when an earlier entry had the same one (the same URL but its password)."""
    n = seen.get(ident, 0)
    seen[ident] = n + 1
    return f"{ident}#{n}" if n else ident


def expand(
    entries: Iterable[Any], gateway_sessions: int, setting: str = "POLITE_PROXIES", salt: str = ""
) -> tuple[list[Endpoint], list[str]]:
    """Validate *entries* and turn them into endpoints.

    Returns the endpoints and the masked labels of duplicates that were
    dropped (reported by the caller, so a typo in a list is visible).
    """
    endpoints: list[Endpoint] = []
    seen: set[str] = set()
    idents: dict[str, int] = {}
    duplicates: list[str] = []
    for entry in entries:
        url, exit_ip = _entry_to_pair(entry, setting)
        if not url:
            continue
        url = with_scheme(url)
        _validate_url(url, setting)
        if SESSION_PLACEHOLDER in url:
            if url in seen:
                continue
            seen.add(url)
            masked = mask_proxy_url(url.replace(SESSION_PLACEHOLDER, "session"))
            template_ident = _ordinal(without_password(url), idents)
            for i in range(gateway_sessions):
                sid = gateway_session_id(template_ident, i, salt)
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
                        # Apart from the others even when the session sits in the password.
                        ident=f"{template_ident}#{sid}",
                    )
                )
            continue
        if url in seen:
            duplicates.append(mask_proxy_url(url))
            continue
        seen.add(url)
        ident = _ordinal(without_password(url), idents)
        label = mask_proxy_url(url)
        if any(e.label == label for e in endpoints):
            # Same host:port with other credentials: keep them apart in stats.
            label = f"{label}#{hashlib.sha1(ident.encode()).hexdigest()[:6]}"
        endpoints.append(Endpoint(key=url, url=url, label=label, static_exit_ip=exit_ip, ident=ident))
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


def load_endpoints(
    proxies: Iterable[Any],
    proxies_file: str | None,
    gateway_sessions: int,
    reload: bool = False,
    tiers: Iterable[Any] = (),
) -> tuple[list[Endpoint], list[str], dict[str, int]]:
    """Endpoints of ``POLITE_PROXIES`` plus ``POLITE_PROXIES_FILE`` (plus ``POLITE_PROXY_TIERS``), the
    duplicates left out, and each endpoint key's tier (0 = cheapest; empty without tiers).

    Raises when there are none, since a pool of zero would hang the crawl; on a
    *reload*, also when the file lists none, since an emptied file is most likely
    one being rewritten, and dropping its endpoints would strand their sessions.
    """
    proxies = list(proxies)
    entries: list[Any] = list(proxies)
    if proxies_file:
        listed = _read_file("POLITE_PROXIES_FILE", proxies_file)
        if reload and not listed:
            raise PoliteConfigError("POLITE_PROXIES_FILE", proxies_file, "at least one proxy URL")
        entries.extend(listed)
    setting = "POLITE_PROXIES_FILE" if proxies_file and not proxies else "POLITE_PROXIES"
    ranks: dict[str, int] = {}
    tiers = list(tiers)
    if tiers:
        # The tiers are the pool; POLITE_PROXIES (and its file), if set too, come first as tier 0.
        by_tier = ([entries] if entries else []) + [
            _read_file("POLITE_PROXY_TIERS", t) if isinstance(t, str) else list(t) for t in tiers
        ]
        entries, setting = [e for tier in by_tier for e in tier], "POLITE_PROXY_TIERS"
        for rank, tier in enumerate(by_tier):
            for ep in expand(tier, gateway_sessions, setting)[0]:
                ranks.setdefault(ep.key, rank)
    endpoints, duplicates = expand(entries, gateway_sessions, setting)
    if not endpoints:
        raise PoliteConfigError(
            "POLITE_PROXIES", [shown_url(p) if isinstance(p, str) else p for p in proxies],
            "at least one proxy URL (in POLITE_PROXIES or POLITE_PROXIES_FILE)",
        )
    return endpoints, duplicates, ranks


def _read_file(setting: str, path: str) -> list[Any]:
    try:
        return read_proxies_file(path)
    except OSError as exc:
        raise PoliteConfigError(setting, path, f"a readable file ({exc.strerror or exc})") from None
