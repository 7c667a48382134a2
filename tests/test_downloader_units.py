"""Unit tests of the units the middleware delegates to: re-queue, request meta, JOBDIR, maintenance, exit IPs."""

from __future__ import annotations

import logging
import math
import os
import time
from types import SimpleNamespace
from typing import Any

import pytest
import pytest_twisted
from scrapy import Request
from scrapy.http import Response
from scrapy.settings import Settings
from scrapy.signalmanager import SignalManager
from scrapy.statscollectors import MemoryStatsCollector

from scrapy_polite import compat
from scrapy_polite import signals as polite_signals
from scrapy_polite.downloader import requeue
from scrapy_polite.downloader.exit_ip import ExitIps
from scrapy_polite.downloader.jobdir import keep_for_next_run
from scrapy_polite.downloader.maintenance import Maintenance
from scrapy_polite.downloader.proxy_meta import (
    LEASE_KEY,
    NOT_BEFORE_KEY,
    OWN_PROXY_KEY,
    forget_own_proxy,
    host_key,
    pool_endpoint,
    pop_not_before,
    preset_proxy,
    session_of,
)
from scrapy_polite.errors import SpiderClosing
from scrapy_polite.gate.local import LocalGate
from scrapy_polite.metrics.outcome import Outcome, is_ban, is_success, status_label
from scrapy_polite.metrics.percentiles import seconds_at, summary_fields
from scrapy_polite.pool.watcher import ProxiesFileWatcher
from scrapy_polite.settings.config import PoliteConfig

pytestmark = pytest.mark.once

PROXIES = ["http://u:p@127.0.0.1:8001", "http://u:p@127.0.0.1:8002"]


def config(**overrides: object) -> PoliteConfig:
    return PoliteConfig.from_settings(Settings({"POLITE_PROXIES": PROXIES, **overrides}))


def crawler(**settings: Any) -> Any:
    c = SimpleNamespace(settings=Settings(settings), engine=None, signals=SimpleNamespace(send_catch_log=lambda *a, **k: None))
    c.stats = MemoryStatsCollector(c)
    return c


def gate(cfg: PoliteConfig) -> LocalGate:
    return LocalGate(list(cfg.endpoints), host_concurrency=2, endpoint_concurrency=1, delay=(0.0, 0.0),
                     backoff=(1.0, 2.0), max_failures=3)


# -- re-queue ----------------------------------------------------------------------


def test_budgets_come_from_the_config_and_a_ban_gets_at_most_two() -> None:
    b = requeue.Budgets.from_config(config(POLITE_RATE_RETRY_TIMES=7, POLITE_PROXY_RETRY_TIMES=5))
    assert (b.of("rate"), b.of("proxy"), b.of("ban")) == (7, 5, 2)
    with pytest.raises(AttributeError):
        b.rate = 1  # type: ignore[misc]


def test_a_requeue_counts_its_kind_drops_the_attempt_and_waits_its_delay() -> None:
    budgets = requeue.Budgets(rate=2, proxy=1, ban=1, timeout=1)
    request = Request("http://a.test/x", meta={LEASE_KEY: object(), "proxy": "http://p:1", OWN_PROXY_KEY: "http://p:1"})
    before = time.time()
    first = requeue.get_requeue_request(request, "rate", budgets, status=429, delay=3.0)
    assert first.verdict == requeue.REQUEUE and first.done == 0
    new = first.request
    assert new is not None and new is not request and new.dont_filter
    assert new.meta["polite_rate_retries"] == 1 and new.meta["polite_requeues"] == 1
    assert LEASE_KEY not in new.meta and "proxy" not in new.meta and OWN_PROXY_KEY not in new.meta
    assert before + 3.0 <= new.meta[NOT_BEFORE_KEY] <= time.time() + 3.0
    second = requeue.get_requeue_request(new, "rate", budgets, status=429).request
    assert second is not None and second.meta["polite_rate_retries"] == 2
    spent = requeue.get_requeue_request(second, "rate", budgets, status=429)
    assert (spent.verdict, spent.done, spent.request) == (requeue.SPENT, 2, None)
    # Each kind has its own budget.
    assert requeue.get_requeue_request(second, "proxy", budgets).verdict == requeue.REQUEUE


def test_a_requeue_honours_what_the_request_asks() -> None:
    budgets = requeue.Budgets(rate=5, proxy=5, ban=2, timeout=5)
    handled = Request("http://a.test/", meta={"handle_httpstatus_list": [429]})
    assert requeue.get_requeue_request(handled, "rate", budgets, status=429).verdict == requeue.HANDLED
    # A proxy's answer is not the site's: only dont_retry and the budget stop it.
    assert requeue.get_requeue_request(handled, "proxy", budgets, status=429).verdict == requeue.REQUEUE
    assert requeue.get_requeue_request(Request("http://a.test/", meta={"dont_retry": True}), "rate", budgets,
                                       status=429).verdict == requeue.DONT_RETRY
    capped = requeue.get_requeue_request(Request("http://a.test/", meta={"max_retry_times": 0}), "rate", budgets)
    assert (capped.verdict, capped.budget) == (requeue.SPENT, 0)


# -- request meta -------------------------------------------------------------------


@pytest.mark.parametrize(("mode", "expected"), [("slot", "shared"), ("hostname", "a.test")])
def test_the_host_key_honours_polite_host_key(mode: str, expected: str) -> None:
    assert host_key(Request("http://a.test/", meta={"download_slot": "shared"}), mode) == expected
    assert host_key(Request("http://a.test/"), mode) == "a.test"
    splash = Request("http://splash:8050/render", meta={"_splash_processed": True, "polite_host": "t.test"})
    assert host_key(splash, mode) == "t.test"


def test_the_packages_own_proxy_is_forgotten_a_users_is_kept() -> None:
    own = {"proxy": "http://127.0.0.1:8001", OWN_PROXY_KEY: "http://u:p@127.0.0.1:8001"}
    assert preset_proxy(own) is None  # HttpProxyMiddleware moved the credentials out: still ours
    forget_own_proxy(own)
    assert own == {}
    users = {"proxy": "http://127.0.0.1:9999", OWN_PROXY_KEY: "http://u:p@127.0.0.1:8001"}
    assert preset_proxy(users) == "http://127.0.0.1:9999"
    forget_own_proxy(users)
    assert users == {"proxy": "http://127.0.0.1:9999"}


def test_a_preset_proxy_matches_a_pool_endpoint_credentials_included() -> None:
    g = gate(config())
    assert pool_endpoint(g.endpoints, "http://u:p@127.0.0.1:8002") == PROXIES[1]
    assert pool_endpoint(g.endpoints, "http://u:other@127.0.0.1:8002") is None
    assert pool_endpoint(g.endpoints, "127.0.0.1:9") is None


def test_not_before_and_session_are_read_from_meta() -> None:
    meta: dict[str, Any] = {NOT_BEFORE_KEY: time.time() + 2.0, "polite_session": 7}
    at = pop_not_before(meta)
    assert 1.5 < at - time.monotonic() <= 2.0 and NOT_BEFORE_KEY not in meta
    assert pop_not_before({NOT_BEFORE_KEY: time.time() - 5}) <= time.monotonic()
    assert pop_not_before({}) == 0.0
    assert session_of(meta, cookiejar=True) == "7" and meta["cookiejar"] == "polite:7"
    assert session_of({"polite_session": "s", "cookiejar": 3}, cookiejar=True) == "s"
    assert session_of({}, cookiejar=True) is None


# -- JOBDIR ------------------------------------------------------------------------


def test_a_request_is_kept_for_the_next_run_only_with_jobdir() -> None:
    queued: list[Request] = []
    engine = SimpleNamespace(_slot=SimpleNamespace(scheduler=SimpleNamespace(enqueue_request=lambda r: queued.append(r) or True)))
    request = Request("http://a.test/", meta={LEASE_KEY: object(), "proxy": "http://p:1", OWN_PROXY_KEY: "http://p:1"})
    without = crawler()
    without.engine = engine
    assert not keep_for_next_run(without, request) and queued == []
    with_jobdir = crawler(JOBDIR="/tmp/job")
    assert not keep_for_next_run(with_jobdir, request)  # no engine: nowhere to keep it
    with_jobdir.engine = engine
    assert keep_for_next_run(with_jobdir, request)
    (kept,) = queued
    assert kept.dont_filter and LEASE_KEY not in kept.meta and "proxy" not in kept.meta


# -- maintenance and the proxies file -------------------------------------------------


def test_the_engine_watch_closes_the_gate_once_the_engine_ran_and_closes() -> None:
    closed: list[Any] = []
    fake_gate = SimpleNamespace(close=lambda reason, exc=None: closed.append((reason, exc)))
    c = crawler()
    m = Maintenance(c, config(), fake_gate)
    m.watch_engine()  # no engine yet
    c.engine = SimpleNamespace(running=False, _slot=None)
    m.watch_engine()  # not started yet: not closing
    assert closed == [] and not m.closing
    c.engine.running = True
    m.watch_engine()
    assert closed == []
    c.engine._slot = SimpleNamespace(closing=object())
    m.watch_engine()
    assert closed == [("spider closing", SpiderClosing)] and m.closing


def test_the_proxies_file_watcher_applies_a_change_and_keeps_the_pool_on_a_bad_one(tmp_path, caplog) -> None:
    path = tmp_path / "proxies.txt"
    path.write_text("http://127.0.0.1:8001\n")
    cfg = config(POLITE_PROXIES=[], POLITE_PROXIES_FILE=str(path))
    g = gate(cfg)
    c = crawler()
    watcher = ProxiesFileWatcher(cfg, g, c.stats)
    watcher.check()  # unchanged
    assert c.stats.get_value("polite/pool_reloads") is None
    path.write_text("http://127.0.0.1:8001\nhttp://127.0.0.1:8003\n")
    os.utime(path, (time.time() + 5, time.time() + 5))
    watcher.check()
    assert c.stats.get_value("polite/pool_reloads") == 1 and c.stats.get_value("polite/endpoints") == 2
    path.write_text("")
    os.utime(path, (time.time() + 10, time.time() + 10))
    with caplog.at_level("ERROR"):
        watcher.check()
    assert "kept the current pool" in caplog.text
    assert sum(not s.removed for s in g.endpoints.values()) == 2


# -- exit IPs ------------------------------------------------------------------------


def test_the_exit_ip_comes_from_a_header_then_the_static_one(caplog) -> None:
    cfg = config(POLITE_PROXIES=[{"url": PROXIES[0], "exit_ip": "198.51.100.1"}, PROXIES[1]])
    c = crawler()
    ips = ExitIps(c, cfg)
    g = gate(cfg)
    static, plain = (SimpleNamespace(endpoint=st.endpoint) for st in g.endpoints.values())
    header = cfg.exit_ip_headers[0]
    response = Response("http://a.test/", headers={header: "203.0.113.9"})
    assert ips.of(plain, response) == ("203.0.113.9", "header")
    bad = Response("http://a.test/", headers={header: "not-an-ip"})
    with caplog.at_level("WARNING"):
        assert ips.of(static, bad) == ("198.51.100.1", "static")
        assert ips.of(plain, bad) == (None, None)
    assert c.stats.get_value("polite/exit_ip_invalid") == 2
    assert len([r for r in caplog.records if "not an IP address" in r.getMessage()]) == 1
    assert ips.known(static.endpoint) is None  # no probe URL


@pytest_twisted.ensureDeferred
async def test_engine_download_needs_an_engine() -> None:
    with pytest.raises(RuntimeError):
        await compat.engine_download(None, Request("http://a.test/"))


# -- outcomes and percentiles ---------------------------------------------------------


def test_status_label_success_and_ban_are_decided_once() -> None:
    assert status_label(200, None) == "200" and status_label(None, "TimeoutError") == "TimeoutError"
    assert status_label(None, None) == "unknown"
    assert is_success(302, False) and not is_success(200, True) and not is_success(None, False)
    assert not is_success("200", False)  # a JSONL record that is not a number
    assert is_ban(403, {403}) and not is_ban(403, {403}, proxy_side=True) and not is_ban(403, {403}, rate_limited=True)
    o = Outcome(time=0.0, url="u", host="h", endpoint="e", session=None, status=403, exception=None, wait=0.0,
                latency=None, exit_ip=None, exit_ip_source=None, requeues=0, rate_limited=False)
    assert o.label == "403" and o.is_ban({403}) and not o.success


def test_percentiles_are_seconds_and_none_when_empty() -> None:
    from hdrh.histogram import HdrHistogram

    hist = HdrHistogram(1, 3_600_000, 3)
    assert seconds_at(hist, 50) is None and seconds_at(None, 50) is None
    for ms in (100, 200, 300, 400):
        hist.record_value(ms)
    fields = summary_fields(hist, "latency")
    assert list(fields) == ["latency_p50", "latency_p95", "latency_p99"]
    assert fields["latency_p50"] == pytest.approx(0.2, rel=0.01)
    assert fields["latency_p99"] == pytest.approx(0.4, rel=0.01)


# -- answers, cooldown, Splash restarts ---------------------------------------------------


def test_an_answer_is_classified_once_in_the_order_the_middleware_acts() -> None:
    from scrapy.http import Request, Response

    from scrapy_polite.downloader import response_policy as rp

    cfg = config(POLITE_BAN_CODES=[403], POLITE_RATE_LIMIT_CODES=[429])
    policy = rp.ResponsePolicy(cfg)
    proxy_header = cfg.proxy_error_headers[0]

    def kind(status: int, **headers: str) -> tuple[str, bool]:
        request = Request("http://t.test/")
        verdict = policy.classify(request, Response(request.url, status=status, headers=headers, request=request))
        return verdict.kind, verdict.proxy_side

    assert kind(407) == (rp.PROXY_ERROR, True)
    assert kind(429) == (rp.RATE_LIMITED, False)
    assert kind(429, **{proxy_header: "1"}) == (rp.RATE_LIMITED, True)
    assert kind(403) == (rp.BAN, False)
    assert kind(403, **{proxy_header: "1"}) == (rp.TARGET_ERROR, True)  # the proxy's 403 is no ban of the site
    assert kind(200) == (rp.OK, False)
    retry_after_code = next(iter(cfg.retry_after_codes))
    assert kind(retry_after_code) == (rp.TARGET_ERROR, False)
    assert kind(retry_after_code, **{"Retry-After": "3"}) == (rp.RATE_LIMITED, False)


def test_the_cooldown_honours_retry_after_up_to_its_cap() -> None:
    import random

    from scrapy_polite.downloader.retry_after import cooldown

    rng = random.Random(1)
    assert cooldown(b"5", (1.0, 2.0), 60.0, rng) == 5.0
    assert cooldown(b"500", (1.0, 2.0), 60.0, rng) == 60.0
    assert all(1.0 <= cooldown(None, (1.0, 2.0), 60.0, rng) <= 2.0 for _ in range(50))
    assert cooldown(b"soon", (1.0, 1.0), 60.0, rng) == 1.0


def test_a_splash_request_keeps_its_lease_on_its_second_pass_and_restarts_from_its_original() -> None:
    from scrapy_polite.downloader.splash import remember_original
    from scrapy_polite.downloader.transport import holds_lease, restarted

    lease = SimpleNamespace(released=False)
    first = Request("http://t.test/page", meta={"splash": {"args": {}}})
    assert not holds_lease(first) and restarted(first) is None
    remember_original(first)
    processed = first.replace(url="http://splash:8050/render.html", method="POST",
                              meta={**first.meta, "_splash_processed": True, LEASE_KEY: lease})
    assert holds_lease(processed)
    lease.released = True
    assert not holds_lease(processed)
    fresh = restarted(processed)
    assert fresh is not None and fresh.url == "http://t.test/page" and fresh.method == "GET"
    assert LEASE_KEY not in fresh.meta and "_splash_processed" not in fresh.meta


def test_requests_dropped_at_close_are_counted_and_kept(caplog) -> None:
    from scrapy_polite.downloader.jobdir import dropped_at_close, report_dropped

    queued: list[Request] = []
    c = crawler(JOBDIR="/tmp/job")
    c.engine = SimpleNamespace(_slot=SimpleNamespace(scheduler=SimpleNamespace(enqueue_request=lambda r: queued.append(r) or True)))
    for i in range(2):
        dropped_at_close(c, Request(f"http://a.test/{i}"))
    assert (c.stats.get_value("polite/dropped_at_close"), c.stats.get_value("polite/kept_at_close")) == (2, 2)
    with caplog.at_level("INFO"):
        report_dropped(c.stats, "shutdown", None)
    assert "2 request(s) still waiting at the gate" in caplog.text and "2 kept in JOBDIR" in caplog.text


def test_a_download_error_is_classified_once_browser_and_splash_first() -> None:
    from twisted.internet.error import ConnectionRefusedError

    from scrapy_polite.downloader import answers, failures
    from scrapy_polite.downloader.playwright import PROXY_ERROR_TEXTS

    browser_error = Exception(f"page.goto: {PROXY_ERROR_TEXTS[0]} at http://t.test/")
    rendered = Request("http://t.test/", meta={"playwright": True})
    assert answers.classify_exception(rendered, browser_error) == failures.Failure(failures.PROXY, PROXY_ERROR_TEXTS[0])
    assert answers.classify_exception(Request("http://t.test/"), browser_error).kind == failures.OTHER
    to_splash = Request("http://splash:8050/", meta={"splash": {"args": {}}, "_splash_processed": True})
    assert answers.classify_exception(to_splash, ConnectionRefusedError()).kind == answers.SPLASH
    assert answers.classify_exception(Request("http://t.test/"), ConnectionRefusedError()).kind == failures.PROXY


# -- what an attempt leads to ----------------------------------------------------------


class _Calls:
    """Records every call made on it, by name, and answers with *returns*."""

    def __init__(self, returns: Any = None) -> None:
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
        self.returns = returns

    def __getattr__(self, name: str) -> Any:
        def record(*args: Any, **kwargs: Any) -> Any:
            self.calls.append((name, args, kwargs))
            return self.returns
        return record

    def names(self) -> list[str]:
        return [name for name, _, _ in self.calls]


def test_each_verdict_leads_to_its_reaction_and_requeue_kind() -> None:
    from twisted.internet.error import ConnectionRefusedError

    from scrapy_polite.downloader.attempts import Attempts
    from scrapy_polite.downloader.response_policy import ResponsePolicy

    cfg = config(POLITE_BAN_CODES=[403], POLITE_RETRY_AFTER_MAX=30)
    lease = SimpleNamespace(host="t.test", gap=1.0, granted_at=0.0, session=None,
                            endpoint=SimpleNamespace(key="e1", label="e1"))

    def attempt(status: int | None, body: bytes = b"", **headers: str) -> tuple[list[str], list[Any], Any]:
        blame, recorder = _Calls(), _Calls(returns="again")
        attempts = Attempts(cfg, ResponsePolicy(cfg), _Calls(), crawler().stats, blame, recorder)  # type: ignore[arg-type]
        request = Request("http://t.test/page")
        if status is None:
            out = attempts.failed(request, ConnectionRefusedError(), lease)  # type: ignore[arg-type]
        else:
            response = Response(request.url, status=status, headers=headers, body=body, request=request)
            out = attempts.answered(request, response, lease)  # type: ignore[arg-type]
        # Every answer is also shown to the gateway-error judge (tested in test_gateway_errors.py).
        return [n for n in blame.names() if n != "gateway_fault"], recorder.calls, out

    blamed, recorded, out = attempt(429, **{"Retry-After": "7"})
    assert blamed == ["rate_limited"] and out == "again"
    assert recorded[0][0] == "requeue" and recorded[0][1][1] == "rate" and recorded[0][2]["delay"] == 7.0
    blamed, recorded, out = attempt(403)
    assert blamed == ["answered", "banned", "identity_flagged"] and recorded[0][1][1] == "ban"
    blamed, recorded, _ = attempt(403, **{"cf-mitigated": "challenge"})
    assert blamed == ["answered", "challenged", "identity_flagged"] and recorded[0][1][1] == "challenge"
    blamed, recorded, _ = attempt(407)
    assert blamed == ["endpoint_failed"] and recorded[0][1][1] == "proxy"
    blamed, recorded, _ = attempt(None)
    assert blamed == ["endpoint_failed"] and recorded[0][1][1] == "proxy"
    blamed, recorded, out = attempt(200, b"<html>fine</html>")
    assert blamed == ["answered"] and [c[0] for c in recorded] == ["attempt"] and out.status == 200


@pytest.mark.parametrize("adaptive", [False, True])
def test_a_challenge_slows_the_host_for_the_pool_more_than_a_429(adaptive: bool) -> None:
    from test_units import make_gate

    from scrapy_polite.downloader.blame import Blame
    from scrapy_polite.downloader.pace import Pace, throttle_handlers
    from scrapy_polite.downloader.response_policy import Verdict
    from scrapy_polite.throttle.policy import ThrottlePolicy

    def after(kind: str, gap: float = 3.0) -> tuple[Any, Any]:
        cfg = config(POLITE_ADAPTIVE=adaptive, POLITE_HOST_CONCURRENCY=4, POLITE_CHALLENGE_BENCH=600)
        g, ft = make_gate(n=4, host_concurrency=4, delay=cfg.delay)
        throttle = ThrottlePolicy(cfg, g, clock=ft.clock)
        runtime = SimpleNamespace(config=cfg, gate=g, tiers=None)
        c = crawler()
        c.signals = SignalManager(c)
        polite_signals.connect(c, throttle_handlers(throttle))  # as HostThrottle listens
        blame = Blame(c, runtime, identities=None, pace=Pace(c.signals))  # type: ignore[arg-type]
        ep = next(iter(g.endpoints.values())).endpoint
        for _ in range(12):  # some traffic: the host's sent rate is what a challenge halves
            leases: list[Any] = []
            g.acquire("t.test").addCallback(leases.append)
            ft.advance(0.5)
            for granted in leases:
                g.release(granted)
                throttle.ok(granted, 200)
        lease = SimpleNamespace(host="t.test", endpoint=ep, gap=gap, slack=0.0, granted_at=ft.now, session=None)
        if kind == "429":
            blame.rate_limited(lease, 429, 5.0, proxy_side=False)  # type: ignore[arg-type]
        else:
            request = Request("http://t.test/")
            response = Response(request.url, status=403, request=request)
            blame.challenged(request, response, lease, Verdict("challenge", "marker"), 5.0)  # type: ignore[arg-type]
        return g.host("t.test"), g._pair(ep.key, "t.test")

    limited, limited_pair = after("429")
    challenged, challenged_pair = after("challenge")
    # The host gets a rate for the whole pool, slower than after a 429.
    assert challenged.interval > 0 and (limited.interval == 0 or challenged.interval > limited.interval)
    assert challenged.paused_until > limited.paused_until
    assert challenged_pair.banned_until - limited_pair.cooldown_until > 500  # the IP benched for the host
    # A challenge on an IP's first request to the host: the site had flagged the IP, not the pace.
    flagged, flagged_pair = after("challenge", gap=math.inf)
    first_429, _ = after("429", gap=math.inf)
    assert (flagged.interval, flagged.limit) == (first_429.interval, first_429.limit)
    assert flagged.paused_until > first_429.paused_until and flagged_pair.banned_until > challenged_pair.cooldown_until



@pytest.mark.parametrize("listening", [True, False], ids=["throttle", "no-throttle"])
def test_an_unanswered_host_is_parked_by_the_throttle_or_paused_by_the_gate_without_one(
    listening: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """The throttle hears of it through the pace signals; with nobody listening the pool still reacts."""
    from test_units import make_gate

    from scrapy_polite.downloader.blame import Blame
    from scrapy_polite.downloader.pace import Pace, throttle_handlers
    from scrapy_polite.throttle.policy import ThrottlePolicy

    cfg = config(POLITE_PARK_TIME=(30, 120))
    g, ft = make_gate(n=2, delay=cfg.delay)
    c = crawler()
    c.signals = SignalManager(c)
    throttle = ThrottlePolicy(cfg, g, clock=ft.clock)
    if listening:
        polite_signals.connect(c, throttle_handlers(throttle))
    blame = Blame(c, SimpleNamespace(config=cfg, gate=g, tiers=None), identities=None,  # type: ignore[arg-type]
                  pace=Pace(c.signals))
    caplog.set_level(logging.WARNING)
    blame._host_unanswered("t.test", park=True, reason="timeout")
    assert g.host("t.test").paused_until == pytest.approx(ft.now + 30.0)
    (line,) = [r.getMessage() for r in caplog.records if "gave no answer" in r.getMessage()]
    assert line.endswith("parked 30 s (park #1)" if listening else "paused 30 s")


def test_a_marked_page_goes_to_the_middleware_holding_its_lease() -> None:
    """``page_marked`` carries the page to whoever holds its lease; without one the callback's error goes on."""
    from scrapy.utils.test import get_crawler

    from scrapy_polite.downloader.marks import PoliteMarksMiddleware
    from scrapy_polite.errors import BanDetected

    c = get_crawler(settings_dict={"POLITE_PROXIES": PROXIES})
    marks = PoliteMarksMiddleware.from_crawler(c)
    request = Request("http://t.test/item/3")
    response = Response(request.url, request=request)
    assert marks.process_spider_exception(response, BanDetected(response, "blocked page")) is None
    again = request.replace(dont_filter=True)
    heard: list[tuple[Any, str, str]] = []

    def marked(response: Response, kind: str, reason: str) -> list[Request]:
        heard.append((response, kind, reason))
        return [again]

    c.signals.connect(marked, signal=polite_signals.page_marked)
    assert marks.process_spider_exception(response, BanDetected(response, "blocked page")) == [again]
    assert heard == [(response, "ban", "blocked page")]
    assert marks.process_spider_exception(response, ValueError("not a mark")) is None


def test_a_download_error_is_judged_by_the_response_policy() -> None:
    from twisted.internet.error import ConnectionRefusedError, TimeoutError

    from scrapy_polite.downloader.attempts import Attempts
    from scrapy_polite.downloader.response_policy import ResponsePolicy, Verdict

    class SiteRefuses(ResponsePolicy):
        """This site's own front refuses connections when it is down; its timeouts are the proxy's."""

        def classify_exception(self, request, exc):
            if isinstance(exc, ConnectionRefusedError):
                return Verdict("target_error", "site down")
            if isinstance(exc, TimeoutError):
                return Verdict("proxy_error", "proxy hangs")
            return super().classify_exception(request, exc)

    cfg = config()
    lease = SimpleNamespace(host="t.test", gap=1.0, granted_at=0.0, session=None,
                            endpoint=SimpleNamespace(key="e1", label="e1"))

    def failed(policy: ResponsePolicy, exc: Exception) -> tuple[list[str], list[str]]:
        blame, recorder = _Calls(), _Calls(returns="again")
        Attempts(cfg, policy, _Calls(), crawler().stats, blame, recorder).failed(  # type: ignore[arg-type]
            Request("http://t.test/"), exc, lease)  # type: ignore[arg-type]
        return blame.names(), [c[1][1] if c[0] == "requeue" else c[0] for c in recorder.calls]

    assert failed(ResponsePolicy(cfg), ConnectionRefusedError()) == (["endpoint_failed"], ["proxy"])
    assert failed(ResponsePolicy(cfg), TimeoutError()) == (["unanswered"], ["timeout"])
    assert failed(SiteRefuses(cfg), ConnectionRefusedError()) == ([], ["attempt"])
    assert failed(SiteRefuses(cfg), TimeoutError()) == (["endpoint_failed"], ["proxy"])


@pytest.mark.parametrize(("extra", "hears"), [
    ({}, False),  # Scrapy's own middlewares after the package's never send a request back
    ({"scrapy.downloadermiddlewares.cookies.CookiesMiddleware": None}, False),
    ({"scrapy.downloadermiddlewares.retry.RetryMiddleware": 600}, False),  # before the package's: its lease comes later
    ({"scrapy.downloadermiddlewares.retry.RetryMiddleware": 725}, True),  # after it: may send a leased request back
    ({"tests.own.Rewrite": 800}, True),  # a project's own
])
def test_a_dropped_request_frees_its_lease_when_one_can_be_dropped_holding_it(
    extra: dict[str, Any], hears: bool
) -> None:
    """``request_dropped`` is heard when a middleware after the package's may send a leased request back to the
    scheduler (Splash's does), and then frees the lease; else no duplicate link pays for a receiver."""
    from scrapy import signals
    from scrapy.utils.test import get_crawler

    from scrapy_polite.downloader.middleware import PoliteProxyMiddleware

    own = {_Rewrite if k == "tests.own.Rewrite" else k: v for k, v in extra.items()}
    c = get_crawler(settings_dict={"POLITE_PROXIES": PROXIES, "ADDONS": {"scrapy_polite.Addon": 500},
                                   "DOWNLOADER_MIDDLEWARES": own})
    mw = PoliteProxyMiddleware.from_crawler(c)
    lease = mw.gate.acquire("t.test").result
    request = Request("http://t.test/item/1", meta={LEASE_KEY: lease})
    assert bool(c.signals.send_catch_log(signals.request_dropped, request=request)) is hears
    assert lease.released is hears


class _Rewrite:
    """A project's downloader middleware that answers some requests with another request."""

    def process_request(self, request: Request) -> Request | None:
        return None


@pytest_twisted.ensureDeferred
async def test_an_answer_is_judged_before_its_lease_frees_the_slot() -> None:
    """Scrapy sends ``request_left_downloader`` before the answer reaches ``process_response``: the
    lease stays held until the answer is judged, so the pause a 429 leads to binds the next grant;
    one that nothing judges goes back at the end of the loop's turn."""
    from scrapy import signals
    from scrapy.utils.test import get_crawler
    from twisted.internet import reactor
    from twisted.internet.task import deferLater

    from scrapy_polite.downloader.middleware import PoliteProxyMiddleware

    c = get_crawler(settings_dict={"POLITE_PROXIES": PROXIES, "ADDONS": {"scrapy_polite.Addon": 500}})
    mw = PoliteProxyMiddleware.from_crawler(c)
    judged = Request("http://t.test/item/1", meta={LEASE_KEY: mw.gate.acquire("t.test").result})
    unjudged = Request("http://t.test/item/2", meta={LEASE_KEY: mw.gate.acquire("t.test").result})
    for request in (judged, unjudged):
        c.signals.send_catch_log(signals.request_left_downloader, request=request)
        assert not request.meta[LEASE_KEY].released
    mw.process_response(judged, Response(judged.url, status=429, headers={"Retry-After": "5"}, request=judged))
    assert judged.meta[LEASE_KEY].released  # once judged (its IP cooled for the Retry-After first)
    assert not unjudged.meta[LEASE_KEY].released
    await deferLater(reactor, 0.01, lambda: None)
    assert unjudged.meta[LEASE_KEY].released
