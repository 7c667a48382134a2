"""Units of a session's identity on the request path: the gate key and the cookie jar move together."""

from __future__ import annotations

from typing import Any

import pytest
from scrapy.statscollectors import MemoryStatsCollector

from scrapy_polite import signals as polite_signals
from scrapy_polite.downloader.identities import Identities
from scrapy_polite.settings.config import PoliteConfig


class _Gate:
    """What the identities tell the gate: each retired identity and its successor."""

    def __init__(self) -> None:
        self.successions: list[tuple[str, str]] = []

    def succeed(self, old: str, new: str) -> None:
        self.successions.append((old, new))


def _identities(**settings) -> tuple[Identities, Any]:
    from scrapy.utils.test import get_crawler

    crawler = get_crawler(settings_dict={"POLITE_PROXIES": ["http://127.0.0.1:1"], **settings})
    crawler.stats = MemoryStatsCollector(crawler)
    crawler.gate = _Gate()
    return Identities(crawler, PoliteConfig.from_settings(crawler.settings), crawler.gate), crawler  # type: ignore[arg-type]


@pytest.mark.once
def test_a_retired_session_gets_a_new_gate_key_and_cookie_jar_and_is_reported() -> None:
    ids, crawler = _identities(POLITE_SESSION_COOKIEJAR=True)
    retired: list[dict] = []
    crawler.signals.connect(lambda **kw: retired.append(kw), signal=polite_signals.session_retired, weak=False)
    meta: dict = {"polite_session": "login"}
    assert ids.of(meta) == "login" and meta["cookiejar"] == "polite:login"
    ids.retire("login", "ep-1", "challenge: cf")
    meta = {"polite_session": "login", "cookiejar": "polite:login"}
    assert ids.of(meta) == "login#1" and meta["cookiejar"] == "polite:login#1"
    assert [(r["session"], r["endpoint"], r["reason"]) for r in retired] == [("login", "ep-1", "challenge: cf")]
    assert crawler.stats.get_value("polite/sessions/retired") == 1
    assert crawler.gate.successions == [("login", "login#1")]  # the gate starts it on another endpoint
    # A jar the spider chose itself is left alone.
    meta = {"polite_session": "login", "cookiejar": 7}
    assert ids.of(meta) == "login#1" and meta["cookiejar"] == 7
    assert ids.of({}) is None


@pytest.mark.once
def test_a_session_past_its_request_limit_starts_a_new_identity() -> None:
    ids, crawler = _identities(POLITE_SESSION_MAX_REQUESTS=2)
    keys = [ids.of({"polite_session": "s"}) for _ in range(5)]
    assert keys == ["s", "s", "s#1", "s#1", "s#2"]
    assert crawler.stats.get_value("polite/sessions/retired") == 2
    assert crawler.gate.successions == [("s", "s#1"), ("s#1", "s#2")]
