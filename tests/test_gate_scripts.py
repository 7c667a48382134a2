"""The Redis gate's Lua scripts ship as files, and ACQUIRE reads its arguments by the names Python sends."""

from __future__ import annotations

import re

import pytest

from scrapy_polite.gate.redis import scripts

pytestmark = pytest.mark.once


def test_every_script_loads_and_acquire_uses_exactly_the_named_arguments() -> None:
    for name in scripts.NAMES:
        assert "redis.call" in scripts.source(name)
    lua = scripts.source("acquire")
    assert set(re.findall(r"\bA\.(\w+)", lua)) == set(scripts.ACQUIRE_ARGS)
    assert not re.search(r"ARGV\[\d+\]", lua)  # nothing read by position but the candidates


def test_acquire_arguments_are_checked_by_name_and_the_reply_is_named() -> None:
    named = {name: i for i, name in enumerate(scripts.ACQUIRE_ARGS)}
    assert scripts.acquire_args(["e1", "e2"], **named) == [*range(len(named)), "e1", "e2"]
    with pytest.raises(TypeError, match="pair_memory"):
        scripts.acquire_args([], **{k: v for k, v in named.items() if k != "pair_memory"})
    state = ["10", "2", "0.5", "1", "0", "0", "0", "2", "7"]
    reply = scripts.parse_acquire(["host_full", "", "12.5", state, [], ["", "", ""]])
    assert reply.code == "host_full" and reply.at == 12.5
    assert reply.host.limit == 2 and reply.host.inflight == 2 and reply.host.grants == 7
    assert reply.host.gap == -1.0 and scripts.finite(reply.host.slack) == float("inf")
    assert reply.signal == "" and reply.signal_rate is None and not reply.signal_found
    signalled = scripts.parse_acquire(["host_full", "", "12.5", state, [], ["11.0", "2.75", "1"]])
    assert signalled.signal == "11.0" and signalled.signal_rate == 2.75 and signalled.signal_found


def test_a_read_older_than_this_processs_change_is_not_mirrored() -> None:
    from scrapy_polite.gate.redis.fence import WriteFence

    f = WriteFence()
    assert f.fresh("h", "interval", 0.0)  # nothing changed here: every read counts
    f.queued("h", ["lo", "hi"], 4.0)
    f.queued("h", ["lo", "hi"], 4.5)
    assert not f.fresh("h", "lo", 5.0) and f.fresh("h", "interval", 5.0)
    assert f.missed("h", "lo", 5.0) == 4.5 and f.missed("h", "interval", 5.0) is None
    f.written("h", ["lo", "hi"], 6.0)
    assert not f.fresh("h", "lo", 7.0)  # one update still queued
    f.written("h", ["lo", "hi"], 8.0)
    assert not f.fresh("h", "lo", 7.5)  # read before the last update was sent
    assert f.fresh("h", "lo", 8.5) and f.fresh("h", "hi", 8.5) and f.missed("h", "lo", 8.5) is None
    f.forget("h")
    assert f.fresh("h", "lo", 0.0) and f._queued == {} and f._written == {} and f._changed == {}
    f.queued("g", ["interval"], 9.0)
    f.forget("g")  # evicted with an update still queued
    assert not f.fresh("g", "interval", 9.5)
    f.written("g", ["interval"], 10.0)
    assert f._queued == {} and f._written == {} and f._changed == {}
