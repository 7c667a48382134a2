"""Unit tests of the pure parts: settings, Retry-After, endpoints, the gate."""

from __future__ import annotations

import email.utils
import math
import random
import time

import pytest
from scrapy.settings import Settings

from scrapy_polite.downloader.retry_after import parse_retry_after
from scrapy_polite.downloader.robots import crawl_delay as _crawl_delay
from scrapy_polite.errors import PoliteConfigError, SessionEndpointLost
from scrapy_polite.gate.backoff import doubling
from scrapy_polite.gate.base import GateListeners
from scrapy_polite.gate.local import PAIR_MEMORY, LocalGate
from scrapy_polite.pool.endpoints import expand, mask_proxy_url, read_proxies_file
from scrapy_polite.settings.config import PoliteConfig

PROXIES = ["http://u:p@127.0.0.1:8001", "http://u:p@127.0.0.1:8002"]


def config(**overrides: object) -> PoliteConfig:
    values = {"POLITE_PROXIES": PROXIES, **overrides}
    return PoliteConfig.from_settings(Settings(values))


# -- settings -------------------------------------------------------------


def test_defaults() -> None:
    cfg = config()
    assert cfg.host_concurrency == 2
    assert cfg.endpoint_concurrency == 1
    assert cfg.delay == (0.8, 1.6)
    assert cfg.host_concurrency_max == 2
    assert [e.label for e in cfg.endpoints] == ["http://127.0.0.1:8001", "http://127.0.0.1:8002"]
    assert 429 in cfg.rate_limit_codes


@pytest.mark.parametrize(
    ("name", "value", "fragment"),
    [
        ("POLITE_HOST_CONCURRENCY", 0, "POLITE_HOST_CONCURRENCY=0"),
        ("POLITE_HOST_CONCURRENCY", "two", "an integer"),
        ("POLITE_DELAY", (2, 1), "min <= max"),
        ("POLITE_DELAY", "fast", "POLITE_DELAY"),
        ("POLITE_SESSION_POLICY", "maybe", "'fail', 'repin'"),
        ("POLITE_PROXIES", ["socks5://127.0.0.1:1080"], "Scrapy cannot use socks5"),
        ("POLITE_PROXIES", ["http://127.0.0.1:99999"], "POLITE_PROXIES"),
        ("POLITE_PROXIES", ["http://127.0.0.1:8000/path"], "without path"),
        ("POLITE_PROXIES", [], "at least one proxy"),
        ("POLITE_PROXIES", [42], "URL string"),
        ("POLITE_PARK_TIME", (0, 10), "POLITE_PARK_TIME"),
        ("POLITE_HOST_CONCURRENCY_MAX", 1, ">= POLITE_HOST_CONCURRENCY"),
        ("POLITE_RATE_LIMIT_CODES", [999], "<= 599"),
        ("POLITE_PROXIES_FILE", "/nonexistent/proxies.txt", "a readable file"),
        ("POLITE_STATE", "postgres://db/1", "'memory' or a Redis URL"),
        ("POLITE_STATE_LEASE_TTL", 0.5, ">= 1.0"),
        ("POLITE_STATE_PIN_TTL", 0, ">= 1.0"),
    ],
)
def test_bad_settings_name_setting_value_and_expectation(name: str, value: object, fragment: str) -> None:
    with pytest.raises(PoliteConfigError) as info:
        config(**{name: value})
    message = str(info.value)
    assert name in message or info.value.setting == "POLITE_PROXIES"
    assert fragment in message
    assert "expected" in message


def test_credentials_never_in_errors_or_labels() -> None:
    with pytest.raises(PoliteConfigError) as info:
        config(POLITE_PROXIES=["http://user:secret@127.0.0.1:8000/x"])
    assert "secret" not in str(info.value)
    assert mask_proxy_url("https://user:secret@proxy.example:3128") == "https://proxy.example:3128"
    from scrapy_polite.runtime import _build_gate

    with pytest.raises(PoliteConfigError) as info:  # unreachable: nothing listens on port 9
        _build_gate(config(POLITE_STATE="redis://:secret@127.0.0.1:9/0"))
    assert "secret" not in str(info.value) and "reachable Redis" in str(info.value)


def test_string_settings_from_command_line() -> None:
    cfg = config(POLITE_PROXIES="http://127.0.0.1:8001,http://127.0.0.1:8002", POLITE_DELAY="0.5 1.0",
                 POLITE_HOST_CONCURRENCY="3", POLITE_ADAPTIVE="true")
    assert len(cfg.endpoints) == 2 and cfg.delay == (0.5, 1.0) and cfg.host_concurrency == 3
    assert cfg.adaptive and cfg.host_concurrency_max == 12


def test_duplicates_reported_and_gateway_expanded(tmp_path) -> None:
    path = tmp_path / "proxies.txt"
    path.write_text("# pool\nhttp://127.0.0.1:8001\nhttp://127.0.0.1:8001  # again\n\n"
                    "http://user-session-{session}:pw@127.0.0.1:7000\n")
    assert read_proxies_file(path) == [
        "http://127.0.0.1:8001", "http://127.0.0.1:8001", "http://user-session-{session}:pw@127.0.0.1:7000"
    ]
    endpoints, dups = expand(read_proxies_file(path), gateway_sessions=3)
    assert dups == ["http://127.0.0.1:8001"]
    gateway = [e for e in endpoints if e.is_gateway_session]
    assert len(gateway) == 3 and len({e.url for e in gateway}) == 3
    assert all("pw" not in e.label and e.session_id in e.url for e in gateway)


# -- Retry-After ------------------------------------------------------------


def test_retry_after_forms() -> None:
    now = time.time()
    assert parse_retry_after(b"120") == 120
    assert parse_retry_after(" 3 ") == 3
    date = email.utils.formatdate(now + 30, usegmt=True)
    assert 28 <= parse_retry_after(date, now=now) <= 31
    assert parse_retry_after(email.utils.formatdate(now - 30, usegmt=True), now=now) is None
    for garbage in ("soon", "-5", "", "0", None, b"\xff\xfe"):
        assert parse_retry_after(garbage) is None


def test_crawl_delay() -> None:
    assert _crawl_delay("User-agent: *\nCrawl-delay: 2.5\n") == 2.5
    assert _crawl_delay("User-agent: *\nAllow: /\n") is None


# -- the gate -------------------------------------------------------------


class FakeTime:
    """A clock and call_later that tests advance by hand."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.timers: list[list] = []

    def clock(self) -> float:
        return self.now

    def call_later(self, delay: float, func):
        timer = [self.now + delay, func, True]
        self.timers.append(timer)

        class Handle:
            def cancel(self_inner) -> None:
                timer[2] = False

            def active(self_inner) -> bool:
                return timer[2]

        return Handle()

    def advance(self, seconds: float) -> None:
        end = self.now + seconds
        while True:
            due = sorted((t for t in self.timers if t[2] and t[0] <= end), key=lambda t: t[0])
            if not due:
                break
            timer = due[0]
            timer[2] = False
            self.now = max(self.now, timer[0])
            timer[1]()
        self.now = end


def make_gate(n: int = 3, **kw) -> tuple[LocalGate, FakeTime]:
    ft = FakeTime()
    endpoints, _ = expand([f"http://127.0.0.1:{8000 + i}" for i in range(n)], 1)
    params = dict(host_concurrency=2, endpoint_concurrency=1, delay=(1.0, 1.0), backoff=(2.0, 60.0),
                  max_failures=3, call_later=ft.call_later, clock=ft.clock, rng=random.Random(1))
    params.update(kw)
    cls = params.pop("cls", LocalGate)
    return cls(endpoints, **params), ft


def granted(deferreds) -> list:
    out = []
    for d in deferreds:
        d.addCallback(lambda lease: out.append(lease) or lease)
    return out


def test_host_cap_and_one_request_per_endpoint() -> None:
    gate, ft = make_gate(n=3)
    leases = granted([gate.acquire("a") for _ in range(5)])
    assert len(leases) == 2  # host cap
    assert len({lease.endpoint.key for lease in leases}) == 2
    gate.release(leases[0])
    assert len(leases) == 3  # third endpoint, never used yet, no spacing
    assert len({lease.endpoint.key for lease in leases}) == 3
    gate.release(leases[1])
    # Both free endpoints were used less than the spacing ago.
    assert len(leases) == 3
    ft.advance(1.0)
    assert len(leases) == 4
    assert gate.host("a").inflight == 2


def test_spacing_per_endpoint_and_host_is_independent_of_other_hosts() -> None:
    gate, ft = make_gate(n=1, host_concurrency=5)
    a = granted([gate.acquire("a"), gate.acquire("a")])
    b = granted([gate.acquire("b")])
    assert len(a) == 1 and not b  # one endpoint, one request at a time
    gate.release(a[0])
    assert len(b) == 1 and len(a) == 1  # other host not spaced by a's request
    gate.release(b[0])
    ft.advance(0.99)
    assert len(a) == 1
    ft.advance(0.02)
    assert len(a) == 2


def test_sessions_are_pinned_sequential_and_inspectable() -> None:
    gate, ft = make_gate(n=3, host_concurrency=3, delay=(0.0, 0.0))
    s1 = granted([gate.acquire("a", "alice"), gate.acquire("a", "alice")])
    s2 = granted([gate.acquire("a", "bob")])
    assert len(s1) == 1 and len(s2) == 1
    assert s1[0].endpoint.key != s2[0].endpoint.key  # spread over endpoints
    gate.release(s1[0])
    assert len(s1) == 2 and s1[1].endpoint.key == s1[0].endpoint.key
    assert gate.sessions() == {"alice": s1[0].endpoint.label, "bob": s2[0].endpoint.label}


def test_session_fails_loudly_when_its_endpoint_dies() -> None:
    gate, ft = make_gate(n=2, delay=(0.0, 0.0))
    first = granted([gate.acquire("a", "alice")])
    errors = []
    gate.acquire("a", "alice").addErrback(lambda f: errors.append(f.value))
    for _ in range(3):
        gate.endpoint_failed(first[0].endpoint.key)
    assert errors and isinstance(errors[0], SessionEndpointLost)
    later = []
    gate.acquire("a", "alice").addErrback(lambda f: later.append(f.value))
    assert later and isinstance(later[0], SessionEndpointLost)


def test_session_repins_when_policy_says_so() -> None:
    moved = []
    gate, ft = make_gate(n=2, delay=(0.0, 0.0), session_policy="repin",
                         listeners=GateListeners(on_session_repinned=lambda s, old, why: moved.append(s)))
    first = granted([gate.acquire("a", "alice")])
    gate.release(first[0])
    for _ in range(3):
        gate.endpoint_failed(first[0].endpoint.key)
    second = granted([gate.acquire("a", "alice")])
    assert moved == ["alice"] and second[0].endpoint.key != first[0].endpoint.key


def test_unhealthy_endpoint_backs_off_then_is_rechecked() -> None:
    gate, ft = make_gate(n=1, delay=(0.0, 0.0))
    lease = granted([gate.acquire("a")])[0]
    gate.release(lease)
    gate.endpoint_failed(lease.endpoint.key)
    waiting = granted([gate.acquire("a")])
    assert not waiting
    ft.advance(2.0)
    assert len(waiting) == 1


def test_all_dead_calls_back() -> None:
    calls = []
    gate, ft = make_gate(n=2, listeners=GateListeners(on_all_unusable=lambda: calls.append(1)))
    for key in list(gate.endpoints):
        for _ in range(3):
            gate.endpoint_failed(key)
    assert calls


def test_removed_endpoint_finishes_in_flight_but_takes_no_more() -> None:
    gate, ft = make_gate(n=2, delay=(0.0, 0.0))
    leases = granted([gate.acquire("a"), gate.acquire("a")])
    keep = [e.endpoint for e in gate.endpoints.values() if e.endpoint.key != leases[0].endpoint.key]
    added, removed = gate.set_endpoints(keep)
    assert removed == [leases[0].endpoint.label] and not added
    gate.release(leases[0])
    more = granted([gate.acquire("a")])
    assert not more
    gate.release(leases[1])
    assert more and more[0].endpoint.key == leases[1].endpoint.key


def test_lease_carries_the_endpoints_gap_and_the_host_counts_grants() -> None:
    gate, ft = make_gate(n=1, delay=(1.0, 1.0))
    first = granted([gate.acquire("a")])[0]
    assert first.gap == math.inf  # never sent to this host before
    gate.release(first)
    ft.advance(1.5)
    second = granted([gate.acquire("a")])[0]
    assert second.gap == pytest.approx(1.5)
    assert second.slack == pytest.approx(0.5)  # free to go for 0.5 s: spacing did not hold it
    assert gate.host("a").grants == 2
    gate.release(second)
    ft.advance(1.0 + PAIR_MEMORY + 1)
    gate.expire_leases(60)  # the pair is forgotten: the gap is unknown again
    assert granted([gate.acquire("a")])[0].gap == math.inf


def test_the_gate_says_when_the_latest_request_still_in_flight_to_a_host_went() -> None:
    gate, ft = make_gate(n=4, delay=(1.0, 1.0), host_concurrency=3)
    a1 = granted([gate.acquire("a")])[0]
    ft.advance(0.1)
    a2 = granted([gate.acquire("a")])[0]
    ft.advance(0.1)
    b1 = granted([gate.acquire("b")])[0]
    ft.advance(0.1)
    a3 = granted([gate.acquire("a")])[0]
    assert gate.granted_before("a", a3.granted_at) == a2.granted_at  # not the other host's
    assert gate.granted_before("a", a2.granted_at) == a1.granted_at
    assert gate.granted_before("a", a1.granted_at) is None
    gate.release(a2)  # answered: no longer in flight
    assert gate.granted_before("a", a3.granted_at) == a1.granted_at
    assert gate.granted_before("b", b1.granted_at) is None


def test_raised_band_holds_spacings_drawn_before_it() -> None:
    gate, ft = make_gate(n=1, delay=(0.5, 0.5))
    gate.release(granted([gate.acquire("a")])[0])
    gate.set_host_delay("a", (1.0, 1.1))  # raised after the 0.5 s spacing was drawn
    later = granted([gate.acquire("a")])
    ft.advance(0.9)
    assert not later
    ft.advance(0.11)
    assert later and later[0].gap == pytest.approx(1.0)
    assert later[0].slack == pytest.approx(0.0)  # held by its spacing to the last moment


def test_stale_leases_expire() -> None:
    gate, ft = make_gate(n=1, delay=(0.0, 0.0))
    first = granted([gate.acquire("a")])
    second = granted([gate.acquire("a")])
    assert len(first) == 1 and not second
    ft.advance(30)
    assert gate.expire_leases(60) == []
    ft.advance(31)
    assert gate.expire_leases(60) == first
    assert len(second) == 1


def test_expired_pairs_are_forgotten() -> None:
    gate, ft = make_gate(n=2, delay=(1.0, 1.0))
    for host in ("a", "b", "c"):
        gate.release(granted([gate.acquire(host)])[0])
    assert len(gate._pairs) == 3
    gate.ban_endpoint(next(iter(gate.endpoints)), "a", 100)
    ft.advance(2)
    gate.expire_leases(60)
    assert list(gate._pairs) == [(next(iter(gate.endpoints)), "a")]


def test_a_dead_endpoint_is_probed_once_per_longest_backoff() -> None:
    gate, ft = make_gate(n=2, delay=(0.0, 0.0), max_failures=2, backoff=(1.0, 10.0))
    busy = granted([gate.acquire("a")])  # the other endpoint stays busy throughout
    dead = next(key for key in gate.endpoints if key != busy[0].endpoint.key)
    gate.endpoint_failed(dead)
    gate.endpoint_failed(dead)  # dead, backoff 2 s
    probe = granted([gate.acquire("a")])
    ft.advance(1.9)
    assert not probe
    ft.advance(0.2)
    assert probe and probe[0].endpoint.key == dead
    gate.release(probe[0])
    again = granted([gate.acquire("a")])
    ft.advance(9.5)
    assert not again
    ft.advance(0.6)
    assert again and again[0].endpoint.key == dead
    gate.endpoint_ok(dead)
    assert gate.endpoint_usable(gate.endpoints[dead])


def test_an_endpoint_dead_for_days_keeps_its_longest_backoff() -> None:
    # One failed probe per longest backoff: 2000 failures is 2.8 days at 2 minutes. 2 ** 1024 does not
    # convert to a float: uncapped, the backoff raised OverflowError after about 34 hours.
    gate, ft = make_gate(n=2, max_failures=2, backoff=(2.0, 120.0))
    dead = next(iter(gate.endpoints))
    for _ in range(2000):
        gate.endpoint_failed(dead)
    assert gate.endpoints[dead].unhealthy_until == pytest.approx(ft.now + 120.0)
    assert doubling(2.0, 10**6, 120.0) == 120.0 and doubling(2.0, 3, 120.0) == 16.0


def test_a_lease_says_whether_the_host_rate_held_its_request() -> None:
    gate, ft = make_gate(n=3, delay=(0.0, 0.0))
    gate.set_host_interval("a", 0.5)
    first = granted([gate.acquire("a")])
    assert len(first) == 1 and not first[0].rate_held  # nothing sent before: the rate held nothing
    gate.release(first[0])
    second = granted([gate.acquire("a")])
    assert not second  # asked 0 s after the first: held by the 0.5 s interval
    ft.advance(0.5)
    assert len(second) == 1 and second[0].rate_held
    gate.release(second[0])
    ft.advance(2.0)
    third = granted([gate.acquire("a")])  # long after the interval: sent at once, not held
    assert len(third) == 1 and not third[0].rate_held


def test_a_request_queued_behind_spacing_is_not_held_by_the_host_rate() -> None:
    # One endpoint, spacing 1 s, host interval 0.2 s: a request that waits in the queue is let go by
    # its endpoint's spacing, long after the host's interval passed; the rate held nothing.
    gate, ft = make_gate(n=1, delay=(1.0, 1.0))
    gate.set_host_interval("a", 0.2)
    leases = granted([gate.acquire("a") for _ in range(2)])
    assert len(leases) == 1
    gate.release(leases[0])
    ft.advance(1.0)
    assert len(leases) == 2 and not leases[1].rate_held
