"""Exceptions raised by scrapy-polite."""

from __future__ import annotations

from scrapy.exceptions import IgnoreRequest


class PoliteConfigError(ValueError):
    """A ``POLITE_*`` setting has a value the package cannot work with.

    Raised while the crawler is built, so a bad ``settings.py`` stops the
    crawl at start-up instead of misbehaving against a real target.
    """

    def __init__(self, setting: str, value: object, expected: str) -> None:
        self.setting = setting
        self.value = value
        self.expected = expected
        super().__init__(f"{setting}={value!r} is invalid: expected {expected}")


class SessionEndpointLost(Exception):
    """A pinned session's endpoint became unusable and the policy is "fail".

    Its identity (exit IP, cookies bound to that IP) cannot be kept, so
    continuing on another endpoint would silently break the flow.
    """


class NoUsableEndpoints(Exception):
    """Every endpoint of the pool is dead or removed; nothing can be sent."""


class SpiderClosing(IgnoreRequest):
    """The spider is closing: a request still waiting at the gate is not sent.

    Like the requests left in the scheduler, it is dropped without an error
    per request; the middleware counts them and logs one line.
    """
