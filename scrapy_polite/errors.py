"""Exceptions raised by scrapy-polite."""

from __future__ import annotations

import re

from scrapy.exceptions import IgnoreRequest

#: The userinfo of URL-like text: ``scheme://user:pass@``, or a scheme-less ``user:pass@``,
#: up to the last ``@`` before a quote or line end (a password may hold ``@`` or a space).
_USERINFO_RE = re.compile(
    r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)[^'\"<>\n]*@"
    r"|(?<![\w/:.%@*-])[^\s'\"<>/@:]+:[^'\"<>\n]*@"
)
#: A ``password=`` parameter (redis-py takes one in its URL's query).
_PASSWORD_PARAM_RE = re.compile(r"(?i)(?P<name>\bpassword=)[^\s&'\"<>]*")


def scrub(text: str) -> str:
    """*text* with the userinfo of every URL-like word and every ``password=`` value masked.

    The last resort for text that may quote a setting: the call sites show a
    masked form already, this catches what they did not foresee.
    """
    text = _USERINFO_RE.sub(lambda m: f"{m.group('scheme') or ''}***@", text)
    return _PASSWORD_PARAM_RE.sub(lambda m: f"{m.group('name')}***", text)


class Shown(str):
    """A description shown in an error instead of a value that must not be echoed."""

    def __repr__(self) -> str:
        return str(self)


class PoliteConfigError(ValueError):
    """A ``POLITE_*`` setting has a value the package cannot work with.

    Raised while the crawler is built, so a bad ``settings.py`` stops the
    crawl at start-up instead of misbehaving against a real target. The value
    is scrubbed of credentials (:func:`scrub`): the message goes to logs, and
    ``value`` holds the scrubbed text whenever scrubbing changed it.
    """

    def __init__(self, setting: str, value: object, expected: str) -> None:
        shown = repr(value)
        safe = scrub(shown)
        self.setting = setting
        self.value = value if safe == shown else Shown(safe)
        self.expected = expected
        super().__init__(f"{setting}={safe} is invalid: expected {expected}")


class SessionEndpointLost(Exception):
    """A pinned session's endpoint became unusable and the policy is "fail".

    Its identity (exit IP, cookies bound to that IP) cannot be kept, so
    continuing on another endpoint would silently break the flow.
    """


class NoUsableEndpoints(Exception):
    """Every endpoint of the pool is dead or removed; nothing can be sent."""


class HostBlocked(IgnoreRequest):
    """Every endpoint the request's host may use is benched for it, and ``POLITE_HOST_BLOCKED = "give_up"``.

    The request is given up (``polite/gave_up/host_blocked``) instead of waiting
    for the first bench to end, which may be half an hour away.
    """


class SpiderClosing(IgnoreRequest):
    """The spider is closing: a request still waiting at the gate is not sent.

    Like the requests left in the scheduler, it is dropped without an error
    per request; the middleware counts them and logs one line.
    """


class ChallengeDetected(Exception):
    """Raise from a callback when a page turns out to be a challenge: it is re-queued like one.

    ``raise ChallengeDetected(response)`` (or :class:`BanDetected`) benches the
    endpoint for the host, slows the host, retires the session and sends the
    request again through another endpoint; the page no longer counts as one.
    """

    kind = "challenge"

    def __init__(self, response: object, reason: str = "marked by the spider") -> None:
        self.response = response
        self.reason = reason
        super().__init__(f"{self.kind}: {reason}")


class BanDetected(ChallengeDetected):
    """Raise from a callback when a page turns out to be a block: it is re-queued like a ban."""

    kind = "ban"
