"""Fault cases of the configuration: the proxies file going bad mid-crawl, endpoints removed and
re-added under their sessions, and Redis away for longer than POLITE_STATE_OUTAGE_TIMEOUT.

Each is a real crawl against the sandbox, judged from the site's access log (tests/faultcheck.py).
"""

from __future__ import annotations

import os
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from example_project.spiders.accounts import AccountsSpider
from example_project.spiders.catalogue import CatalogueSpider
from faultcheck import FAULT_AUTH, assert_clean, assert_no_secret, assert_pages_accounted, fault_crawl
from logcheck import items_fetched
from test_redis_gate import gate as redis_gate
from test_redis_gate import granted, on_asyncio, pending, stop
from twisted.internet.task import LoopingCall

from scrapy_polite.gate.base import GateListeners
from scrapy_polite.sandbox import ProxyConfig, SandboxConfig, SiteConfig

SECRET = "s3cret"


def site(**kw: Any) -> SiteConfig:
    kw.setdefault("name", "a")
    kw.setdefault("latency", [0.01, 0.05])
    return SiteConfig(**kw)


def write(path: Path, data: bytes) -> None:
    """Rewrite *path* and move its mtime on, so the next check sees a change however fast it comes."""
    path.write_bytes(data)
    stamp = time.time() + write.bump  # type: ignore[attr-defined]
    write.bump += 1  # type: ignore[attr-defined]
    os.utime(path, (stamp, stamp))


write.bump = 1  # type: ignore[attr-defined]


def lines(*urls: str) -> bytes:
    return ("\n".join(urls) + "\n").encode()


class Steps:
    """Runs each (condition, action) in turn, from a LoopingCall beside the crawl; records when."""

    def __init__(self, steps: list[tuple[Callable[[], bool], Callable[[], None]]]) -> None:
        self.steps = steps
        self.times: list[float] = []
        self.loop = LoopingCall(self._tick)

    def _tick(self) -> None:
        if len(self.times) < len(self.steps):
            ready, act = self.steps[len(self.times)]
            if ready():
                act()
                self.times.append(time.time())

    def __enter__(self) -> Steps:
        self.loop.start(0.05)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.loop.stop()


# -- the removal grace, as a unit ---------------------------------------------


@pytest.mark.once
def test_removal_grace_ends_once_per_removal() -> None:
    from scrapy_polite.gate.state import RemovalGrace

    grace = RemovalGrace(1.0)
    assert grace.start("a", 10.0) == 11.0
    grace.start("b", 10.5)
    assert grace.expired(10.9) == set() and grace.until("a") == 11.0
    grace.cancel("b")  # re-added in time
    assert grace.expired(11.0) == {"a"}
    assert grace.expired(20.0) == set() and grace.until("a") is None


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0
        self.timers: list[tuple[float, Callable[[], None]]] = []

    def clock(self) -> float:
        return self.now

    def call_later(self, delay: float, func: Callable[[], None]) -> object:
        self.timers.append((self.now + delay, func))
        return object()

    def advance(self, seconds: float) -> None:
        self.now += seconds
        due = [t for t in self.timers if t[0] <= self.now]
        self.timers = [t for t in self.timers if t[0] > self.now]
        for _, func in due:
            func()


def local_gate(policy: str = "fail", **kw: Any) -> tuple[Any, FakeTime, list[Any]]:
    from scrapy_polite.gate.local import LocalGate
    from scrapy_polite.pool.endpoints import expand

    ft = FakeTime()
    endpoints, _ = expand([f"http://127.0.0.1:{8001 + i}" for i in range(2)], 1)
    gate = LocalGate(endpoints, host_concurrency=2, endpoint_concurrency=1, delay=(0.0, 0.0),
                     backoff=(1.0, 10.0), max_failures=3, session_policy=policy, call_later=ft.call_later,
                     clock=ft.clock, removal_grace=1.0, **kw)
    return gate, ft, endpoints


def outcomes(d: Any) -> list[Any]:
    out: list[Any] = []
    d.addCallbacks(out.append, lambda f: out.append(f.value))
    return out


@pytest.mark.once
def test_a_session_waits_for_its_removed_endpoint_and_goes_on_with_it() -> None:
    gate, ft, endpoints = local_gate()
    first = outcomes(gate.acquire("h", "u"))[0]
    gate.release(first)
    other = [e for e in endpoints if e.key != first.endpoint.key]
    gate.set_endpoints(other)  # the file, truncated for a moment
    step = outcomes(gate.acquire("h", "u"))
    ft.advance(0.5)
    assert step == []  # waits: it neither moves nor fails
    gate.set_endpoints(endpoints)
    assert len(step) == 1 and step[0].endpoint.key == first.endpoint.key


@pytest.mark.once
def test_a_failure_in_flight_on_a_removed_endpoint_does_not_lose_its_session_at_once() -> None:
    gate, ft, endpoints = local_gate()
    first = outcomes(gate.acquire("h", "u"))[0]
    step = outcomes(gate.acquire("h", "u"))
    gate.set_endpoints([e for e in endpoints if e.key != first.endpoint.key])
    gate.endpoint_failed(first.endpoint.key)  # its request in flight fails: one failure, not death
    gate.release(first)
    ft.advance(0.5)
    assert step == []
    gate.set_endpoints(endpoints)
    ft.advance(1.0)  # its backoff
    assert len(step) == 1 and step[0].endpoint.key == first.endpoint.key


@pytest.mark.once
@pytest.mark.parametrize("policy", ["fail", "repin"])
def test_after_the_grace_the_policy_applies_and_a_re_add_undoes_a_loss(policy: str) -> None:
    from scrapy_polite.errors import SessionEndpointLost

    moved: list[tuple[str, str]] = []
    gate, ft, endpoints = local_gate(policy, listeners=GateListeners(on_session_repinned=lambda s, old, why: moved.append((s, why))))
    first = outcomes(gate.acquire("h", "u"))[0]
    gate.release(first)
    gate.set_endpoints([e for e in endpoints if e.key != first.endpoint.key])
    step = outcomes(gate.acquire("h", "u"))
    ft.advance(1.01)
    if policy == "fail":
        assert len(step) == 1 and isinstance(step[0], SessionEndpointLost)
        assert "removed from the pool" in str(step[0])
        gate.set_endpoints(endpoints)  # back: the session is not lost for good
        again = outcomes(gate.acquire("h", "u"))
        assert len(again) == 1 and again[0].endpoint.key == first.endpoint.key
    else:
        assert len(step) == 1 and step[0].endpoint.key != first.endpoint.key
        assert moved == [("u", "endpoint removed from the pool")]


# -- the proxies file going bad mid-crawl ----------------------------------------


@pytest_twisted.ensureDeferred
async def test_a_proxies_file_gone_bad_keeps_the_pool_and_reloading_goes_on(sandbox, tmp_path) -> None:
    sb = sandbox(SandboxConfig(sites=[site(pages=30)], proxies=ProxyConfig(count=4, auth=("alice", SECRET))))
    old, new = sb.proxy_urls[:2], sb.proxy_urls[2:]
    path = tmp_path / "proxies.txt"
    write(path, lines(*old))
    bad = lines(old[0]) + "# caf\xe9, saved as Latin-1\n".encode("latin-1") + lines(old[1])
    with Steps([
        (lambda: len(sb.log()) >= 4, lambda: write(path, bad)),
        (lambda: time.time() > steps.times[0] + 1.0, lambda: write(path, b"")),
        (lambda: time.time() > steps.times[1] + 1.0, lambda: write(path, lines(*new))),
    ]) as steps:
        run = await fault_crawl(CatalogueSpider, {
            "POLITE_PROXIES_FILE": str(path), "POLITE_PROXIES_FILE_CHECK_INTERVAL": 0.3,
            "POLITE_DELAY": (0.4, 0.6), "CLOSESPIDER_TIMEOUT": 20,
        }, tmp_path / "crawl.log", start_url=sb.site_url("a"))
    log = sb.log()
    assert len(steps.times) == 3, "the crawl ended before the file was fixed"
    old_ips, new_ips = set(sb.proxy_exit_ips[:2]), set(sb.proxy_exit_ips[2:])
    fixed = steps.times[2]
    # Through the bad and the empty file, the current pool goes on.
    assert {e["ip"] for e in log if e["t_start"] < fixed} == old_ips
    assert any(e["t_start"] > steps.times[0] + 0.5 for e in log if e["ip"] in old_ips)
    # Fixed with a changed pool: after a check interval and one spacing, only the new pool is used.
    late = {e["ip"] for e in log if e["t_start"] > fixed + 0.3 + 0.6 + 0.2}
    assert late and late <= new_ips
    errors = [line for line in run.log_text.splitlines() if " ERROR: " in line and "kept the current pool" in line]
    assert len(errors) == 2, errors
    assert all(str(path) in line for line in errors)
    assert "line 2" in errors[0] and "UTF-8" in errors[0]
    assert "at least one proxy URL" in errors[1]
    assert run.stats.get("polite/pool_reloads") == 1
    assert_pages_accounted(run, log, range(1, 31))
    assert sorted(items_fetched(log)) == list(range(1, 31))
    assert_clean(run)
    assert_no_secret(SECRET, run.log_text, repr(run.stats))


# -- a session's endpoint removed, then re-added ------------------------------------


async def removed_then_re_added(sb: Any, tmp_path: Path, settings: dict[str, Any]) -> None:
    """Crawl login flows while endpoint 0 leaves the file and comes back at the next check."""
    urls = sb.proxy_urls
    path = tmp_path / "proxies.txt"
    write(path, lines(*urls))
    log_path = tmp_path / "crawl.log"

    def reloaded(text: str) -> bool:
        return log_path.exists() and text in log_path.read_text(errors="replace")

    def on_ip0() -> int:
        return sum(1 for e in sb.log() if e["ip"] == sb.proxy_exit_ips[0] and e.get("user"))

    with Steps([
        (lambda: on_ip0() >= 2, lambda: write(path, lines(*urls[1:]))),  # truncated for a moment
        (lambda: reloaded("1 removed"), lambda: write(path, lines(*urls))),
        (lambda: reloaded("1 endpoint(s) added"), lambda: None),
    ]) as steps:
        run = await fault_crawl(AccountsSpider, {
            "POLITE_PROXIES_FILE": str(path), "POLITE_PROXIES_FILE_CHECK_INTERVAL": 0.5,
            "POLITE_DELAY": (0.3, 0.4), "CLOSESPIDER_TIMEOUT": 20, **settings,
        }, log_path, start_url=sb.site_url("a"), users="8")
    log = sb.log()
    assert len(steps.times) == 3, "the endpoint was not removed and re-added during the crawl"
    truncated_at, restored_at = steps.times[0], steps.times[1]
    ip0 = sb.proxy_exit_ips[0]
    flows: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in sorted(log, key=lambda e: e["t_start"]):
        if e.get("user"):
            flows[e["user"]].append(e)
    # Every flow on one identity, in order, none failed: no SessionEndpointLost.
    assert len(run.result.items) == 8 and all(i["status"] == 200 for i in run.result.items)
    assert all(len({e["ip"] for e in f}) == 1 for f in flows.values())
    assert all([e["path"].split("?")[0] for e in f] == ["/login", "/account", "/account/orders"]
               for f in flows.values())
    assert not run.gave_up and "SessionEndpointLost" not in run.log_text
    # A session on endpoint 0 had steps before the removal and after the file was restored (no step
    # can start on it in between, as it is out of the pool): it came back to it.
    assert any(f[0]["ip"] == ip0 and f[0]["t_start"] < truncated_at and f[-1]["t_start"] > restored_at
               for f in flows.values()), (truncated_at, restored_at, dict(flows))
    assert_clean(run)


@pytest_twisted.ensureDeferred
async def test_a_session_whose_endpoint_is_removed_then_re_added_runs_on_it(sandbox, tmp_path) -> None:
    sb = sandbox(SandboxConfig(sites=[site()], proxies=ProxyConfig(count=2, auth=FAULT_AUTH)))
    await removed_then_re_added(sb, tmp_path, {})


@pytest.mark.once
@pytest_twisted.ensureDeferred
async def test_the_same_through_redis(sandbox, redis_server, tmp_path) -> None:
    sb = sandbox(SandboxConfig(sites=[site()], proxies=ProxyConfig(count=2, auth=FAULT_AUTH)))
    await removed_then_re_added(sb, tmp_path, {"POLITE_STATE": redis_server.url, "POLITE_STATE_NAMESPACE": "re"})


# -- Redis away for longer than the outage deadline ------------------------------------


@pytest.mark.once
@pytest_twisted.ensureDeferred
async def test_redis_away_past_the_deadline_closes_and_jobdir_resumes(sandbox, redis_server, tmp_path) -> None:
    sb = sandbox(SandboxConfig(sites=[site(pages=40)], proxies=ProxyConfig(count=4, auth=FAULT_AUTH)))
    settings = {"POLITE_PROXIES": sb.proxy_urls, "POLITE_STATE": redis_server.url, "POLITE_DELAY": (0.3, 0.4),
                "POLITE_STATE_OUTAGE_TIMEOUT": 1.5, "JOBDIR": str(tmp_path / "job"), "CLOSESPIDER_TIMEOUT": 20}
    with Steps([(lambda: len(sb.log()) >= 8, redis_server.stop)]) as steps:
        first = await fault_crawl(CatalogueSpider, settings, tmp_path / "first.log", start_url=sb.site_url("a"))
    took = time.time() - steps.times[0]
    log = sb.log()
    assert first.stats["finish_reason"] == "polite_state_unreachable"
    assert took < 1.5 + 5.0  # closed soon after the deadline, not hanging on
    # Nothing sent while Redis was away (a grant in flight when it went may still land at once).
    assert [e for e in log if e["t_start"] > steps.times[0] + 0.3] == []
    errors = [line for line in first.log_text.splitlines() if " ERROR: " in line]
    assert any("unreachable for" in line and "closing the spider" in line for line in errors), errors
    kept = first.stats["polite/kept_at_close"]
    assert kept == first.stats["polite/dropped_at_close"] >= 1
    assert len(set(items_fetched(log))) < 40
    assert_clean(first)
    redis_server.start()
    second = await fault_crawl(CatalogueSpider, settings, tmp_path / "second.log", start_url=sb.site_url("a"))
    assert second.stats["finish_reason"] == "finished"
    log = sb.log()
    first.gave_up += second.gave_up
    assert_pages_accounted(first, log, range(1, 41))
    assert sorted(items_fetched(log)) == list(range(1, 41))  # resumed from JOBDIR: each page once
    assert_clean(second)


# -- the same rules in the Redis gate, as units -------------------------------------------


@pytest.mark.once
@pytest.mark.parametrize("policy", ["fail", "repin"])
@on_asyncio
async def test_the_redis_gate_keeps_a_removed_endpoint_s_sessions_through_the_grace(redis_server, policy: str) -> None:
    from scrapy_polite.errors import SessionEndpointLost

    moved: list[str] = []
    g = redis_gate(redis_server.url, n=2, removal_grace=0.6, session_policy=policy,
                   listeners=GateListeners(on_session_repinned=lambda s, old, why: moved.append(why)))
    pool = [st.endpoint for st in g.endpoints.values()]
    first, _ = await granted(g.acquire("h", session="u"))
    g.release(first)
    others = [e for e in pool if e.key != first.endpoint.key]
    g.set_endpoints(others)
    step = g.acquire("h", session="u")
    assert await pending(step, 0.3)  # within the grace: it waits
    g.set_endpoints(pool)
    lease, _ = await granted(step)
    assert lease.endpoint.key == first.endpoint.key and moved == []
    g.release(lease)
    g.set_endpoints(others)  # removed again, for longer than the grace
    late = g.acquire("h", session="u")
    if policy == "repin":
        lease, waited = await granted(late)
        assert lease.endpoint.key != first.endpoint.key and waited >= 0.5
        assert moved == ["endpoint removed from the pool"]
        g.release(lease)
    else:
        with pytest.raises(SessionEndpointLost, match="removed from the pool"):
            await granted(late)
        g.set_endpoints(pool)  # back: the session is not lost for good
        lease, _ = await granted(g.acquire("h", session="u"))
        assert lease.endpoint.key == first.endpoint.key
        g.release(lease)
    await stop(g)


@pytest.mark.once
@on_asyncio
async def test_the_redis_gate_reports_an_outage_past_its_deadline_once(redis_server) -> None:
    import asyncio

    calls: list[float] = []
    g = redis_gate(redis_server.url, n=1, outage_timeout=0.5, listeners=GateListeners(on_outage_timeout=calls.append))
    lease, _ = await granted(g.acquire("h"))
    redis_server.stop()
    await asyncio.sleep(0.3)
    assert calls == []
    await asyncio.sleep(1.2)
    assert len(calls) == 1 and calls[0] >= 0.5
    g.release(lease)
    await stop(g)
