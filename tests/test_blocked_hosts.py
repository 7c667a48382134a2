"""When a host is blocked (every endpoint it may use benched for it), and what its requests do then."""

from __future__ import annotations

import logging
from collections import Counter
from types import SimpleNamespace
from typing import Any

import pytest
from twisted.internet.defer import CancelledError, Deferred

from scrapy_polite.downloader.blocked_hosts import BlockedHosts
from scrapy_polite.errors import HostBlocked


class Stats(Counter):
    def inc_value(self, key: str, count: int = 1) -> None:
        self[key] += count


class Clock:
    now = 1000.0

    def __call__(self) -> float:
        return self.now


def blocked_hosts(policy: str = "give_up", keys: tuple[str, ...] = ("e1", "e2"), tiers: Any = None):
    endpoints = {k: SimpleNamespace(removed=False) for k in keys}
    runtime = SimpleNamespace(config=SimpleNamespace(host_blocked=policy, host_memory=100),
                              gate=SimpleNamespace(endpoints=endpoints), tiers=tiers)
    clock, stats = Clock(), Stats()
    return BlockedHosts(runtime, stats, clock=clock), endpoints, clock, stats  # type: ignore[arg-type]


def test_a_host_is_blocked_once_every_endpoint_is_benched_for_it_and_said_once(caplog) -> None:
    b, _, _, stats = blocked_hosts()
    caplog.set_level(logging.WARNING)
    b.benched("h", "e1", 1800)
    assert b.refusal("h") is None and not stats["polite/host_blocked"]
    b.benched("other", "e2", 1800)  # another host's bench is not this one's
    assert b.refusal("h") is None
    b.benched("h", "e2", 600)
    refusal = b.refusal("h")
    assert isinstance(refusal, HostBlocked) and "h:" in str(refusal)
    b.benched("h", "e1", 1800)  # benched again while blocked: not said again
    assert stats["polite/host_blocked"] == 1
    said = [r.getMessage() for r in caplog.records if "is blocked" in r.getMessage()]
    assert len(said) == 1 and "comes back in 600 s" in said[0]


def test_the_block_ends_when_an_identity_is_back_and_a_new_one_is_said_again() -> None:
    b, _, clock, stats = blocked_hosts()
    b.benched("h", "e1", 10)
    b.benched("h", "e2", 20)
    assert b.refusal("h") is not None
    clock.now += 11
    assert b.refusal("h") is None
    b.benched("h", "e1", 10)
    assert b.refusal("h") is not None and stats["polite/host_blocked"] == 2


def test_an_endpoint_added_to_the_pool_unblocks_the_host() -> None:
    b, endpoints, _, _ = blocked_hosts()
    for key in ("e1", "e2"):
        b.benched("h", key, 1800)
    assert b.refusal("h") is not None
    endpoints["e3"] = SimpleNamespace(removed=False)
    assert b.refusal("h") is None


def test_with_tiers_only_the_host_s_tier_counts() -> None:
    tier = {"h": 0}
    ranks = {"e1": 0, "e2": 0, "e3": 1}
    tiers = SimpleNamespace(eligible=lambda host, key: ranks[key] == tier[host])
    b, _, _, _ = blocked_hosts(keys=("e1", "e2", "e3"), tiers=tiers)
    b.benched("h", "e1", 1800)
    tier["h"] = 1  # the ladder moved the host up once its tier was benched
    b.benched("h", "e2", 1800)
    assert b.refusal("h") is None
    b.benched("h", "e3", 1800)
    assert b.refusal("h") is not None


def test_waiting_requests_are_cancelled_when_the_host_is_blocked_unless_they_wait() -> None:
    b, _, _, _ = blocked_hosts()
    waiting, other = Deferred(), Deferred()
    failures: list[Any] = []
    for d in (waiting, other):
        d.addErrback(failures.append)
    b.waiting("h", waiting)
    b.waiting("x", other)
    b.benched("h", "e1", 1800)
    b.benched("h", "e2", 1800)
    assert len(failures) == 1 and failures[0].check(CancelledError)
    assert not other.called

    w, _, _, _ = blocked_hosts("wait")
    kept = Deferred()
    w.waiting("h", kept)
    w.benched("h", "e1", 1800)
    w.benched("h", "e2", 1800)
    assert not kept.called and w.refusal("h") is None


@pytest.mark.parametrize("policy", ["give_up", "wait"])
def test_a_removed_endpoint_does_not_count(policy: str) -> None:
    b, endpoints, _, stats = blocked_hosts(policy)
    endpoints["e2"].removed = True
    b.benched("h", "e1", 1800)
    assert stats["polite/host_blocked"] == 1
    assert (b.refusal("h") is not None) == (policy == "give_up")
