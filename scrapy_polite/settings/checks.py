"""Start-up checks of setting values that are more than a type: URLs that must parse, a class that must be one.

Each raises :class:`PoliteConfigError` naming the setting, so a value that would
fail on the first request (or hang the crawl) stops it while it is being built.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from typing import Any
from urllib.parse import urlsplit

from scrapy_polite.errors import PoliteConfigError, scrub

#: The methods every ``POLITE_RESPONSE_POLICY`` class answers with (see ``ResponsePolicy``).
POLICY_METHODS = ("classify", "classify_exception")


def http_url(name: str, value: str) -> str:
    """*value*, an http(s) URL with a host and (if any) a valid port."""
    expected = "an http:// or https:// URL with a host, or None"
    if not value.startswith(("http://", "https://")):
        raise PoliteConfigError(name, value, expected)
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises on a port that is not a number in range
    except ValueError as exc:
        raise PoliteConfigError(name, value, f"{expected} ({exc})") from None
    if not parts.hostname:
        raise PoliteConfigError(name, value, expected)
    return value


def state(name: str, value: Any) -> str:
    """``POLITE_STATE``: ``"memory"`` or a Redis URL that parses (shown without its password)."""
    if value == "memory":
        return value  # before the import: a memory state never loads the Redis backend
    from scrapy_polite.gate.redis.state import mask_url

    shown = mask_url(value) if isinstance(value, str) else value
    if isinstance(value, str) and value.startswith(("redis://", "rediss://", "unix://")):
        return redis_url(name, value, shown)
    raise PoliteConfigError(name, shown, "'memory' or a Redis URL (redis://host:port/db)")


def redis_url(name: str, value: str, shown: str) -> str:
    """*value*, a Redis URL whose port (if any) is a port; *shown* is its masked form, for the error."""
    if value.startswith("unix://"):
        return value
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises on a port that is not a number in range
    except ValueError as exc:
        raise PoliteConfigError(name, shown, f"a Redis URL redis://host:port/db ({scrub(str(exc))})") from None
    db = parts.path.strip("/")
    if db and not db.isdigit():
        raise PoliteConfigError(name, shown, "a Redis URL redis://host:port/db, with a number for db")
    return value


def policy_class(name: str, path: str) -> str:
    """*path*, the import path of a class with the response policy's methods (imported here, once)."""
    from scrapy.utils.misc import load_object

    try:
        obj: Any = load_object(path)
    except (ImportError, NameError, ValueError, AttributeError) as exc:
        raise PoliteConfigError(name, path, f"an importable class path ({exc})") from None
    missing = [m for m in POLICY_METHODS if not callable(getattr(obj, m, None))]
    if not isinstance(obj, type) or missing:
        raise PoliteConfigError(
            name, path,
            "a response policy class (a subclass of scrapy_polite.downloader.response_policy.ResponsePolicy, "
            "or one with classify and classify_exception methods)",
        )
    return path


def output_path(name: str, value: str | None) -> str | None:
    """*value*, a file path whose directory exists and is writable (unless a placeholder names the directory).

    Output files are opened during the crawl: a missing directory would only show
    as an ERROR then, with the run's records or report lost.
    """
    if value is None:
        return None
    directory = os.path.dirname(value) or "."
    if "%(" in directory:
        return value  # filled per crawl (spider name, job id): checked when it is opened
    if not os.path.isdir(directory) or not os.access(directory, os.W_OK | os.X_OK):
        raise PoliteConfigError(name, value, f"a path in a writable directory ({directory!r} is not one)")
    return value


def listen_address(name: str, value: str) -> str:
    """*value*, an IP address or a host name that resolves, to listen on."""
    try:
        ipaddress.ip_address(value)
        return value
    except ValueError:
        pass
    try:
        socket.getaddrinfo(value, None)
    except (OSError, UnicodeError) as exc:
        raise PoliteConfigError(name, value, f"an address to listen on ({exc})") from None
    return value
