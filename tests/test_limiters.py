"""The limiter zoo's laws on a fake clock: budgets, refusals, headers, capacities."""

from __future__ import annotations

import json

import pytest

from scrapy_polite.sandbox.limiters import OVERLOAD, RATE_LIMIT, ZOO, Verdict, build, refusal_of

IP, IP2 = "10.0.0.1", "10.0.0.2"


def admitted(lim, times, ip=IP, path=""):
    """How many of the requests at *times* the limiter served (``leave`` right after each)."""
    n = 0
    for t in times:
        v = lim.arrive(ip, t, path=path)
        lim.leave(ip, t)
        n += v.status == 200
    return n


def ticks(start, stop, step):
    out, t = [], start
    while t < stop - 1e-9:
        out.append(round(t, 6))
        t += step
    return out


def test_every_zoo_spec_survives_json_and_builds():
    for name, spec in ZOO.items():
        lim = build(json.loads(json.dumps(spec)))
        assert lim.capacity(8) > 0, name
        v = lim.arrive(IP, 0.0, path="/")
        assert isinstance(v, Verdict)
        lim.leave(IP, 0.0)


def test_unknown_kind_and_option_name_the_problem():
    with pytest.raises(ValueError, match="kind"):
        build({"kind": "leaky"})
    with pytest.raises(ValueError, match="token_bucket"):
        build({"kind": "token_bucket", "rate": 1, "bogus": 2})
    with pytest.raises(ValueError, match="rate"):
        build({"kind": "token_bucket", "rate": 0})
    with pytest.raises(ValueError, match="all_of"):
        build({"kind": "all_of", "limiters": [{"kind": "slowdown", "rate": 1}]})


def test_token_bucket_per_ip_burst_one():
    lim = build({"kind": "token_bucket", "rate": 2.0, "burst": 1})
    # 10 requests/s for 5 s: exactly the first plus 2/s afterwards.
    assert admitted(lim, ticks(0, 5, 0.1)) == 10
    v = lim.arrive(IP, 4.95)  # last served at 4.5: 0.9 token
    assert v.status == 429 and v.header("Retry-After") == "1"
    assert lim.arrive(IP2, 4.95).status == 200  # another IP has its own bucket
    assert lim.capacity(4) == 8.0
    assert refusal_of(lim, v) == (RATE_LIMIT, "ip")


def test_token_bucket_burst_then_rate():
    lim = build({"kind": "token_bucket", "rate": 1.0, "burst": 4})
    assert admitted(lim, [0.0] * 6) == 4
    v = lim.arrive(IP, 0.0)
    assert v.header("Retry-After") == "1"
    assert admitted(lim, ticks(0.5, 10.5, 0.5)) == 10  # refilled at 1/s, never above 4 stored
    assert lim.capacity(3) == 3.0


def test_retry_after_rounds_up_the_wait():
    lim = build({"kind": "token_bucket", "rate": 0.4, "burst": 1})
    lim.arrive(IP, 0.0)
    assert lim.arrive(IP, 0.1).header("Retry-After") == "3"  # 2.4 s left -> 3


def test_host_bucket_is_shared_by_all_ips():
    lim = build({"kind": "token_bucket", "rate": 2.0, "scope": "host"})
    ips = [f"10.0.0.{i}" for i in range(8)]
    served = sum(lim.arrive(ips[i % 8], t).status == 200 for i, t in enumerate(ticks(0, 10, 0.05)))
    assert served == 20
    v = lim.arrive(IP, 9.99)  # last served at 9.5: 0.98 token
    assert v.status == 429 and refusal_of(lim, v) == (RATE_LIMIT, "host")
    assert lim.capacity(8) == 2.0


def test_all_of_takes_tokens_only_when_all_admit():
    lim = build({"kind": "all_of", "limiters": [
        {"kind": "token_bucket", "rate": 1.0},
        {"kind": "token_bucket", "rate": 2.0, "scope": "host"},
    ]})
    assert lim.capacity(1) == 1.0 and lim.capacity(4) == 2.0
    assert lim.arrive(IP, 0.0).status == 200
    refused = lim.arrive(IP, 0.1)  # per-IP bucket empty: the host bucket keeps its token
    assert refused.status == 429 and refusal_of(lim, refused) == (RATE_LIMIT, "ip")
    assert lim.arrive(IP2, 0.5).status == 200  # host bucket had refilled to 1 and was not spent
    host_refused = lim.arrive("10.0.0.3", 0.6)
    assert host_refused.status == 429 and refusal_of(lim, host_refused) == (RATE_LIMIT, "host")
    # Over time: 8 IPs, one request each every 0.1 s for 10 s -> the host's 2/s binds.
    ips = [f"10.0.1.{i}" for i in range(8)]
    served = sum(lim.arrive(ips[i % 8], 10 + t).status == 200 for i, t in enumerate(ticks(0, 10, 0.1)))
    assert 19 <= served <= 21


def test_shifting_follows_its_schedule_from_the_first_request():
    lim = build({"kind": "shifting", "schedule": [[0, 4.0], [10, 1.0], [20, 4.0]]})
    start = 100.0
    assert admitted(lim, [start + t for t in ticks(0, 10, 0.05)]) == 40
    assert lim.capacity(8) == 4.0
    assert admitted(lim, [start + t for t in ticks(10, 20, 0.05)]) == 10
    assert lim.capacity(8) == 1.0
    assert admitted(lim, [start + t for t in ticks(20, 30, 0.05)]) == 40
    assert lim.steps(8) == [(0.0, 4.0), (10.0, 1.0), (20.0, 4.0)]


def test_fixed_window_is_clock_aligned_and_says_when_it_resets():
    lim = build({"kind": "fixed_window", "limit": 5, "window": 10.0})
    assert admitted(lim, ticks(3, 10, 0.5)) == 5
    v = lim.arrive(IP, 7.2)
    assert v.status == 429 and v.header("Retry-After") == "3"  # resets at 10.0
    assert admitted(lim, ticks(10, 20, 0.5)) == 5
    assert admitted(lim, [20.0] * 7) == 5  # a full window's budget at once at the boundary
    assert lim.capacity(2) == 1.0


def test_sliding_log_counts_any_window():
    lim = build({"kind": "sliding_log", "limit": 3, "window": 10.0, "scope": "host"})
    assert admitted(lim, [0.0, 1.0, 2.0]) == 3
    v = lim.arrive(IP2, 9.5)
    assert v.status == 429 and v.header("Retry-After") == "1"  # the request at 0.0 leaves at 10.0
    assert admitted(lim, [10.0, 10.5]) == 1  # the slot of 0.0 only
    assert admitted(lim, [11.0]) == 1
    assert lim.capacity(8) == 0.3


def test_concurrency_cap_refuses_over_k_in_flight_with_a_bare_503():
    lim = build({"kind": "concurrency_cap", "limit": 2, "latency": 0.5})
    ips = ["a", "b", "c"]
    verdicts = [lim.arrive(ip, 0.0) for ip in ips]
    assert [v.status for v in verdicts] == [200, 200, 503]
    assert verdicts[2].headers == () and refusal_of(lim, verdicts[2]) == (OVERLOAD, "host")
    lim.leave("c", 0.0)  # the refusal leaves at once
    lim.leave("a", 0.5)
    assert lim.arrive("c", 0.5).status == 200
    assert lim.capacity(8) == 4.0 and lim.capacity(1) == 2.0


def test_nginx_limit_req_delays_up_to_burst_then_503():
    lim = build({"kind": "nginx_limit_req", "rate": 2.0, "burst": 3})
    verdicts = [lim.arrive(IP, 0.0) for _ in range(6)]
    assert [v.status for v in verdicts] == [200, 200, 200, 200, 503, 503]
    assert [v.delay for v in verdicts[:4]] == [0.0, 0.5, 1.0, 1.5]
    assert verdicts[4].headers == () and refusal_of(lim, verdicts[4])[0] == OVERLOAD
    assert lim.arrive(IP2, 0.0).delay == 0.0  # per IP by default
    # At the rate exactly, nothing waits.
    lim2 = build({"kind": "nginx_limit_req", "rate": 2.0, "burst": 3})
    assert all(lim2.arrive(IP, t).delay == 0.0 for t in ticks(0, 5, 0.5))
    assert lim.capacity(4) == 8.0
    as429 = build({"kind": "nginx_limit_req", "rate": 1.0, "burst": 0, "status": 429})
    as429.arrive(IP, 0.0)
    assert refusal_of(as429, as429.arrive(IP, 0.0))[0] == RATE_LIMIT


def test_slowdown_grows_latency_then_sheds():
    lim = build({"kind": "slowdown", "rate": 4.0, "max_delay": 1.0})
    verdicts = [lim.arrive(f"10.0.0.{i}", 0.0) for i in range(7)]
    assert [v.delay for v in verdicts[:5]] == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert [v.status for v in verdicts] == [200] * 5 + [503] * 2
    assert refusal_of(lim, verdicts[5]) == (OVERLOAD, "host")
    # At its rate it never slows down.
    lim2 = build({"kind": "slowdown", "rate": 4.0, "max_delay": 1.0})
    assert all(lim2.arrive(IP, t).delay == 0.0 for t in ticks(0, 5, 0.25))
    assert lim.capacity(8) == 4.0


def test_no_retry_after_refuses_without_the_header():
    lim = build({"kind": "no_retry_after", "rate": 1.0})
    lim.arrive(IP, 0.0)
    v = lim.arrive(IP, 0.2)
    assert v.status == 429 and v.headers == ()
    assert admitted(lim, ticks(1, 11, 0.25)) == 10


def test_ratelimit_headers_ietf():
    lim = build({"kind": "ratelimit_headers", "quota": 3, "window": 60.0})
    v = lim.arrive(IP, 43.0)
    assert v.status == 200
    assert v.header("RateLimit-Policy") == '"default";q=3;w=60'
    assert v.header("RateLimit") == '"default";r=2;t=17'
    lim.arrive(IP, 44.0)
    assert lim.arrive(IP, 45.0).header("RateLimit") == '"default";r=0;t=15'
    refused = lim.arrive(IP, 46.0)
    assert refused.status == 429 and refused.header("RateLimit") == '"default";r=0;t=14'
    assert refused.header("Retry-After") == "14"
    assert lim.arrive(IP, 60.0).header("RateLimit") == '"default";r=2;t=60'
    assert lim.capacity(6) == pytest.approx(0.3)


def test_ratelimit_headers_x_style_seconds_and_epoch():
    sec = build({"kind": "ratelimit_headers", "quota": 5, "window": 10.0, "style": "x"})
    v = sec.arrive(IP, 2.5)
    assert (v.header("X-RateLimit-Limit"), v.header("X-RateLimit-Remaining"), v.header("X-RateLimit-Reset")) == (
        "5", "4", "8")
    epoch = build({"kind": "ratelimit_headers", "quota": 5, "window": 10.0, "style": "x", "reset": "epoch",
                   "wall": 1_800_000_000.0})
    assert epoch.arrive(IP, 2.5).header("X-RateLimit-Reset") == "1800000010"


def test_rate_independent_429s_the_first_request_of_each_path():
    lim = build({"kind": "rate_independent"})
    first = lim.arrive(IP, 0.0, path="/item/1")
    assert first.status == 429 and first.header("Retry-After") == "1"
    assert lim.arrive(IP, 0.001, path="/item/1").status == 200  # whatever the rate
    assert lim.arrive(IP2, 0.002, path="/item/2").status == 429
    assert lim.arrive(IP2, 100.0, path="/item/2").status == 200
    assert lim.capacity(8) == 8.0
    inner = build({"kind": "rate_independent", "limit": {"kind": "token_bucket", "rate": 0.5}})
    assert inner.capacity(8) == 4.0
    inner.arrive(IP, 0.0, path="/a")
    assert inner.arrive(IP, 1.0, path="/a").status == 200
    assert inner.arrive(IP, 1.1, path="/b").status == 429  # first of /b
    assert inner.arrive(IP, 1.2, path="/b").status == 429  # the inner bucket this time
    assert inner.arrive(IP, 3.0, path="/b").status == 200


def test_penalty_box_restarts_on_every_request_inside():
    lim = build({"kind": "penalty_box", "rate": 1.0, "burst": 1, "penalty": 30.0})
    assert lim.arrive(IP, 0.0).status == 200
    over = lim.arrive(IP, 0.5)
    assert over.status == 429 and over.header("Retry-After") == "30"
    again = lim.arrive(IP, 20.0)  # inside: the penalty starts over, 30 s from now
    assert again.status == 429 and again.header("Retry-After") == "30"
    assert lim.arrive(IP, 49.0).status == 429
    assert lim.arrive(IP2, 49.0).status == 200  # per IP
    assert lim.arrive(IP, 79.5).status == 200  # waited the whole penalty out
    assert lim.capacity(5) == 5.0


def test_sparse_leave_calls_never_go_negative():
    lim = build({"kind": "concurrency_cap", "limit": 1, "latency": 1.0})
    lim.leave(IP, 0.0)
    assert lim.arrive(IP, 0.0).status == 200
    assert lim.arrive(IP2, 0.0).status == 503
