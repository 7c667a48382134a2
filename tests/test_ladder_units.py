"""Units of the escalation ladder: the response policy, the tier state machine, session identities."""

from __future__ import annotations

from typing import Any

import pytest
from scrapy import Request
from scrapy.http import HtmlResponse
from scrapy.settings import Settings
from twisted.internet.error import ConnectionRefusedError, TimeoutError

from scrapy_polite.downloader.response_policy import ResponsePolicy, Verdict
from scrapy_polite.errors import PoliteConfigError
from scrapy_polite.pool.sessions import SessionIdentities
from scrapy_polite.pool.tiers import TierLadder
from scrapy_polite.settings.config import PoliteConfig

pytestmark = pytest.mark.once


def config(**settings: Any) -> PoliteConfig:
    return PoliteConfig.from_settings(Settings({"POLITE_PROXIES": ["http://127.0.0.1:1"], **settings}))


def answer(status: int, body: bytes = b"<html><body>fine</body></html>", **headers: str) -> HtmlResponse:
    return HtmlResponse("http://a.test/x", status=status, headers=headers, body=body)


def kind(policy: ResponsePolicy, response: HtmlResponse) -> str:
    return policy.classify(Request(response.url), response).kind


def test_default_policy_keeps_the_status_rules_and_adds_challenges() -> None:
    p = ResponsePolicy(config())
    assert kind(p, answer(200)) == "ok"
    assert kind(p, answer(301, Location="/y")) == "ok"
    assert kind(p, answer(404)) == "target_error"
    assert kind(p, answer(500)) == "target_error"
    assert kind(p, answer(429)) == "rate_limited"
    assert kind(p, answer(503, **{"Retry-After": "3"})) == "rate_limited"
    assert kind(p, answer(503)) == "target_error"
    assert kind(p, answer(403)) == "ban"
    assert kind(p, answer(407)) == "proxy_error"
    # An error header of the proxy: its 429 cools the endpoint, its 403 is no ban of the site's.
    limited = p.classify(Request("http://a.test/"), answer(429, **{"X-Proxy-Error": "1"}))
    assert limited.kind == "rate_limited" and limited.proxy_side
    assert kind(p, answer(403, **{"X-Proxy-Error": "1"})) == "target_error"
    # Challenges: a marker header, or a challenge body whatever the status.
    assert kind(p, answer(403, **{"cf-mitigated": "challenge"})) == "challenge"
    assert kind(p, answer(403, **{"CF-Mitigated": "Challenge"})) == "challenge"
    assert kind(p, answer(200, b"<p>Please verify you are human</p>")) == "challenge"
    assert kind(p, answer(503, b"<title>Just a moment...</title>")) == "challenge"
    assert kind(p, answer(403, b'<div class="g-recaptcha"></div>')) == "challenge"
    # A login page with a reCAPTCHA widget is a page, not a challenge.
    assert kind(p, answer(200, b'<form><div class="g-recaptcha"></div></form>')) == "ok"
    assert kind(p, answer(200, b'<script src="/_Incapsula_Resource?SWJIYLWA=1"></script>')) == "ok"
    assert kind(p, answer(403, b'<iframe src="/_Incapsula_Resource?CWUDNSAI=2"></iframe>')) == "challenge"
    assert kind(p, answer(200, **{"cf-mitigated": "other"})) == "ok"


def test_patterns_are_configurable_and_body_search_is_bounded() -> None:
    p = ResponsePolicy(config(POLITE_CHALLENGE_PATTERNS=[
        {"header": "x-blocked"}, {"status": [418], "body": "teapot check"},
    ]))
    assert kind(p, answer(200, **{"X-Blocked": "yes"})) == "challenge"
    assert kind(p, answer(418, b"teapot check")) == "challenge"
    assert kind(p, answer(200, b"teapot check")) == "ok"
    assert kind(p, answer(200, b"<p>verify you are human</p>")) == "ok"  # the defaults were replaced
    late = b"x" * (64 * 1024) + b"teapot check"
    assert kind(p, answer(418, late)) == "target_error"
    assert ResponsePolicy(config(POLITE_CHALLENGE_PATTERNS=[])).classify(
        Request("http://a.test/"), answer(403, **{"cf-mitigated": "challenge"})).kind == "ban"


@pytest.mark.parametrize("patterns", [
    "header",
    ["x"],
    [{}],
    [{"header": "x", "body": "y"}],
    [{"value": "x"}],
    [{"body": "("}],
    [{"header": "x", "value": "["}],
    [{"body": "x", "status": [99]}],
    [{"body": "x", "status": "403"}],
    [{"body": "x", "colour": "red"}],
])
def test_bad_challenge_patterns_are_refused_at_start(patterns: Any) -> None:
    with pytest.raises(PoliteConfigError, match="POLITE_CHALLENGE_PATTERNS"):
        config(POLITE_CHALLENGE_PATTERNS=patterns)


def test_exceptions_blame_the_proxy_only_when_certain() -> None:
    p = ResponsePolicy(config())
    req = Request("http://a.test/")
    assert p.classify_exception(req, ConnectionRefusedError()).kind == "proxy_error"
    assert p.classify_exception(req, TimeoutError()).kind == "target_error"
    with pytest.raises(ValueError):
        Verdict("weird")


def test_tiers_setting_builds_the_ranks_and_refuses_bad_tiers(tmp_path) -> None:
    listed = tmp_path / "expensive.txt"
    listed.write_text("http://127.0.0.1:3\nhttp://127.0.0.1:4\n")
    cfg = config(POLITE_PROXIES=[], POLITE_PROXY_TIERS=[["http://127.0.0.1:1", "http://127.0.0.1:2"], str(listed)])
    assert len(cfg.endpoints) == 4
    assert sorted(cfg.endpoint_tiers.values()) == [0, 0, 1, 1]
    # POLITE_PROXIES, when set as well, is the cheapest tier.
    both = config(POLITE_PROXIES=["http://127.0.0.1:9"], POLITE_PROXY_TIERS=[str(listed)])
    assert sorted(both.endpoint_tiers.values()) == [0, 1, 1]
    for bad in ([[]], [5], "x y"):
        with pytest.raises(PoliteConfigError, match="POLITE_PROXY_TIERS"):
            config(POLITE_PROXY_TIERS=bad)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def ladder(clock: Clock, **kw: Any) -> tuple[TierLadder, list[tuple[str, int, int, str]]]:
    moves: list[tuple[str, int, int, str]] = []
    kw.setdefault("escalate_after", 2)
    kw.setdefault("cooldown", 10.0)
    t = TierLadder({"c1": 0, "c2": 0, "c3": 0, "e1": 1, "e2": 1, "p1": 2}, clock=clock,
                   on_move=lambda *m: moves.append(m), **kw)
    return t, moves


def test_a_host_climbs_after_its_flags_on_the_current_tier() -> None:
    clock = Clock()
    t, moves = ladder(clock)
    assert t.current("h") == 0 and t.eligible("h", "c1") and not t.eligible("h", "e1")
    assert t.flagged("h", "c1", 5.0) == 0
    assert t.flagged("h", "c2", 5.0) == 1
    assert moves == [("h", 0, 1, "up")]
    assert t.eligible("h", "e1") and not t.eligible("h", "c3")
    assert t.current("other") == 0  # per host
    # A late answer from the tier already left does not count on the new one.
    assert t.flagged("h", "c3", 5.0) == 1
    assert t.flagged("h", "e1", 5.0) == 1
    assert t.flagged("h", "e2", 5.0) == 2 and t.current("h") == 2
    # The top tier is the last: flags there move nothing.
    assert t.flagged("h", "p1", 5.0) == 2


def test_a_host_climbs_once_its_whole_tier_is_benched() -> None:
    clock = Clock()
    t, _ = ladder(clock, escalate_after=100)
    for key in ("c1", "c2"):
        assert t.flagged("h", key, 60.0) == 0
    assert t.flagged("h", "c3", 60.0) == 1


def test_a_host_steps_down_after_a_clean_window_once_the_lower_tier_is_free() -> None:
    clock = Clock()
    t, moves = ladder(clock, escalate_after=1, cooldown=10.0)
    t.flagged("h", "c1", 30.0)
    assert t.current("h") == 1
    clock.now += 9.9
    assert t.current("h") == 1
    clock.now += 0.2
    assert t.current("h") == 0  # c2 and c3 were never benched
    t.flagged("h", "c1", 30.0)
    t.flagged("h", "e1", 5.0)
    assert t.current("h") == 2
    clock.now += 10.0
    assert t.current("h") == 1  # e1's 5 s bench is over; one step at a time ...
    clock.now += 10.0
    assert t.current("h") == 0  # ... c2 and c3 are free
    assert [m[3] for m in moves] == ["up", "down", "up", "up", "down", "down"]


def test_a_host_does_not_step_down_onto_a_tier_still_benched() -> None:
    clock = Clock()
    t, _ = ladder(clock, escalate_after=100, cooldown=1.0)
    for key in ("c1", "c2", "c3"):
        t.flagged("h", key, 30.0)
    assert t.current("h") == 1
    clock.now += 5.0
    assert t.current("h") == 1  # clean for long enough, but every cheap endpoint is still benched
    clock.now += 25.1
    assert t.current("h") == 0


def test_clean_hosts_are_not_kept_and_memory_is_bounded() -> None:
    clock = Clock()
    t, _ = ladder(clock, escalate_after=1, cooldown=1.0, max_hosts=10)
    for i in range(50):
        t.flagged(f"h{i}", "c1", 0.5)
    assert len(t._hosts) == 10
    clock.now += 2.0
    for i in range(40, 50):
        assert t.current(f"h{i}") == 0
    assert not t._hosts


def test_session_identities_renew_on_retirement_and_limits() -> None:
    clock = Clock()
    ids = SessionIdentities(max_requests=2, max_age=50.0, clock=clock)
    assert ids.identity("s") == ("s", None)
    assert ids.identity("s") == ("s", None)
    key, why = ids.identity("s")
    assert key == "s#1" and "POLITE_SESSION_MAX_REQUESTS" in why
    ids.retire("s")
    assert ids.identity("s") == ("s#2", None)
    clock.now += 50.0
    key, why = ids.identity("s")
    assert key == "s#3" and "POLITE_SESSION_MAX_AGE" in why
    assert SessionIdentities().identity("t") == ("t", None)
