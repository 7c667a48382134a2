"""Exit IPs named in response headers, which anyone on the path (the site too) can set."""

from __future__ import annotations

import ipaddress

#: The longest IPv6 text form with a zone is well under this; longer values are not parsed.
MAX_LENGTH = 64


def parse_exit_ip(value: str | bytes | None) -> str | None:
    """The IP address *value* names, in canonical form, or ``None`` if it names none."""
    if value is None or len(value) > MAX_LENGTH:
        return None
    if isinstance(value, (bytes, bytearray)):
        value = bytes(value).decode("latin-1")
    value = value.strip()
    if not value.isascii():
        return None
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        return None
