"""Zoo limiters inside the sandbox's site, over real sockets: verdicts, held answers, the access log."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import replace

import pytest
import pytest_twisted
from test_sandbox import via

from scrapy_polite.sandbox import ProxyConfig, Sandbox, SandboxConfig, SiteConfig

pytestmark = pytest.mark.once


@pytest.fixture(scope="module")
def zoo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    cfg = SandboxConfig(
        sites=[
            SiteConfig(name="quota", limiter={"kind": "ratelimit_headers", "quota": 2, "window": 600.0}),
            SiteConfig(name="xquota", limiter={"kind": "ratelimit_headers", "quota": 2, "window": 600.0,
                                               "style": "x", "reset": "epoch"}),
            SiteConfig(name="conn", latency=[0.8, 0.8], refuse_at_once=True,
                       limiter={"kind": "concurrency_cap", "limit": 1, "latency": 0.8}),
            SiteConfig(name="nginx", limiter={"kind": "nginx_limit_req", "rate": 1.0, "burst": 2}),
            SiteConfig(name="hostwide", limiter={"kind": "token_bucket", "rate": 0.01, "scope": "host"}),
            SiteConfig(name="plain", per_ip_rate=0.01, retry_after=30, strikes_to_block=None),
            SiteConfig(name="once", limiter={"kind": "rate_independent"}),
        ],
        proxies=ProxyConfig(count=4, gateway=False),
        max_runtime=120,
    )
    with Sandbox(cfg, workdir=tmp_path_factory.mktemp("zoo")) as box:
        yield box


def _log(sb: Sandbox, site: str) -> list[dict]:
    return sorted((r for r in sb.log() if r["site"] == site), key=lambda r: r["t_start"])


def test_config_carries_the_spec_and_rejects_a_bad_one() -> None:
    cfg = SandboxConfig(sites=[SiteConfig(name="a", limiter={"kind": "fixed_window", "limit": 3, "window": 2})])
    assert SandboxConfig.from_dict(cfg.to_dict()).sites[0].limiter == {"kind": "fixed_window", "limit": 3,
                                                                        "window": 2}
    with pytest.raises(ValueError, match="fixed_window"):
        SiteConfig(name="b", limiter={"kind": "fixed_window", "limit": 3})


def test_quota_headers_then_429_and_a_request_inside_its_retry_after(zoo: Sandbox) -> None:
    url, proxy = zoo.site_url("quota") + "/item/1", zoo.proxy_urls[0]
    answers = [via(proxy, url) for _ in range(4)]
    assert [a[0] for a in answers] == [200, 200, 429, 429]
    assert answers[0][1]["RateLimit-Policy"] == '"default";q=2;w=600'
    assert answers[1][1]["RateLimit"].startswith('"default";r=0;t=')
    assert int(answers[2][1]["Retry-After"]) >= 1
    recs = _log(zoo, "quota")
    assert [r["refusal"] for r in recs] == [None, None, "rate_limit", "rate_limit"]
    assert [r["inside_retry_after"] for r in recs] == [False, False, False, True]  # the 4th came back too soon
    assert zoo.site_state("quota")["inside_retry_after"] == {zoo.proxy_exit_ips[0]: 1}
    assert via(zoo.proxy_urls[1], url)[0] == 200  # per IP


def test_x_ratelimit_reset_is_a_real_epoch(zoo: Sandbox) -> None:
    _, headers, _ = via(zoo.proxy_urls[0], zoo.site_url("xquota") + "/")
    reset = int(headers["X-RateLimit-Reset"])
    assert time.time() < reset <= time.time() + 601
    assert headers["X-RateLimit-Limit"] == "2" and headers["X-RateLimit-Remaining"] == "1"


def test_concurrency_cap_answers_503_without_retry_after_as_overload(zoo: Sandbox) -> None:
    url = zoo.site_url("conn") + "/item/2"
    results: list[tuple[int, str | None]] = []

    def fetch(proxy: str) -> None:
        status, headers, _ = via(proxy, url)
        results.append((status, headers.get("Retry-After")))

    first = threading.Thread(target=fetch, args=(zoo.proxy_urls[2],))
    first.start()
    time.sleep(0.3)
    fetch(zoo.proxy_urls[3])
    first.join(10)
    assert sorted(results) == [(200, None), (503, None)]
    assert sorted(r["refusal"] or "" for r in _log(zoo, "conn")) == ["", "overload"]
    assert via(zoo.proxy_urls[3], url)[0] == 200  # the slot came back when the answer was sent


def test_nginx_limit_req_holds_the_answer_to_its_slot(zoo: Sandbox) -> None:
    url, proxy = zoo.site_url("nginx") + "/item/3", zoo.proxy_urls[1]
    t0 = time.monotonic()
    assert via(proxy, url)[0] == 200
    assert via(proxy, url)[0] == 200  # one request early: held about 1 s, not refused
    held = time.monotonic() - t0
    assert 0.6 < held < 4.0
    assert [r["refusal"] for r in _log(zoo, "nginx")] == [None, None]


def test_host_wide_retry_after_covers_every_ip(zoo: Sandbox) -> None:
    url = zoo.site_url("hostwide") + "/"
    assert via(zoo.proxy_urls[0], url)[0] == 200
    assert via(zoo.proxy_urls[1], url)[0] == 429  # the host's bucket: its Retry-After covers every IP
    assert via(zoo.proxy_urls[2], url)[0] == 429
    recs = _log(zoo, "hostwide")
    assert [r["inside_retry_after"] for r in recs] == [False, False, True]
    assert recs[2]["ip"] == zoo.proxy_exit_ips[2]


def test_sites_without_a_limiter_book_their_retry_afters_too(zoo: Sandbox) -> None:
    url = zoo.site_url("plain") + "/"
    assert [via(zoo.proxy_urls[0], url)[0] for _ in range(3)] == [200, 429, 429]
    recs = _log(zoo, "plain")
    assert [r["inside_retry_after"] for r in recs] == [False, False, True]
    assert [r["refusal"] for r in recs] == [None, "rate_limit", "rate_limit"]


@pytest_twisted.ensureDeferred
async def test_a_zoo_scenario_end_to_end_with_the_reference_client(sandbox) -> None:
    """The benchmark's host-bucket cell, small: a real crawl by the botocore-style reference client."""
    import metrics
    import zoo as bench_zoo
    from conftest import crawl
    from example_project.spiders.catalogue import CatalogueSpider

    sc = next(s for s in bench_zoo.build_zoo(quick=True) if s.name == "zoo-bucket-host")
    sc = replace(sc, config=replace(sc.config, sites=[replace(sc.config.sites[0], pages=15)]))
    sb = sandbox(sc.config)
    t0 = time.time()
    result = await crawl(CatalogueSpider, {
        "ADDONS": {}, "BENCH_PROXIES": sb.proxy_urls, "RETRY_HTTP_CODES": [500, 502, 504],
        "DOWNLOADER_MIDDLEWARES": {"reference_controller.ReferenceMiddleware": 740},
    }, start_url=sb.site_url("a"))
    log = sb.log()
    assert len(result.items) == 15
    refused = [r for r in log if r["status"] == 429]
    assert refused, "unthrottled until its first throttle, the reference draws 429s"
    assert all(r["refusal"] == "rate_limit" for r in refused)
    # It retries each refused page no sooner than the Retry-After (1 s) its 429 gave.
    for r in refused:
        later = [x["t_start"] for x in log if x["path"] == r["path"] and x["t_start"] > r["t_start"]]
        assert later and min(later) >= r["t_end"] + 1.0 - 0.05
    m = metrics.compute([r for r in log if r["path"] != "/robots.txt"], sc, t0)
    assert m["limit"] == 4.0 and m["lost_items"] == 0
    assert m["rate_limit_answers"] == len(refused) and m["overload_answers"] == 0


def test_zoo_scenarios_cross_the_process_boundary_and_are_selected_as_a_group() -> None:
    import scenarios
    import zoo as bench_zoo
    from crawl_client import CLIENTS

    for quick in (True, False):
        zoo_list = bench_zoo.build_zoo(quick)
        kinds = {(s.limiter or {}).get("kind") for sc in zoo_list for s in sc.config.sites}
        assert len(kinds) == 12  # every kind of the limiters package
        for sc in zoo_list:
            assert SandboxConfig.from_dict(sc.config.to_dict()).to_dict() == sc.config.to_dict()
            # A crawl at the physical limit fits well inside the time limit.
            at_limit = sc.page_budget / sc.limit_steps[0][1]
            assert at_limit < sc.time_limit, sc.name
        everything = scenarios.build(quick) + zoo_list
        assert bench_zoo.select(everything, "", True) == zoo_list
        assert bench_zoo.select(everything, "zoo", False) == zoo_list
        assert not any(s.zoo for s in bench_zoo.select(everything, "", False))
        assert [s.name for s in bench_zoo.select(everything, "per-ip,zoo-slowdown", False)] == ["per-ip",
                                                                                             "zoo-slowdown"]
    assert bench_zoo.clients(CLIENTS, "", zoo_list) == ["scrapy-autothrottle", "polite-defaults", "polite-adaptive",
                                                        "reference"]
    assert "reference" not in bench_zoo.clients(CLIENTS, "", scenarios.build(True))


def test_rate_independent_429s_are_counted_as_the_sites_not_the_clients(zoo: Sandbox) -> None:
    import zoo_report
    from scenarios import Scenario

    url, proxy = zoo.site_url("once") + "/item/4", zoo.proxy_urls[3]
    status, headers, _ = via(proxy, url)
    assert (status, headers["Retry-After"]) == (429, "1")
    time.sleep(1.05)
    assert via(proxy, url)[0] == 200  # the retry, after the Retry-After
    assert via(proxy, zoo.site_url("once") + "/item/5")[0] == 429  # another page: its own first 429
    sc = Scenario("zoo-once", "", SandboxConfig(sites=[zoo.config.site("once")]), 10, 1, "", [(0.0, 1.0)], zoo=True)
    cell = zoo_report.cell(_log(zoo, "once"), sc)
    assert cell["rate_limit_answers"] == 2 and cell["refusals_by_design"] == 2
    assert cell["refusal_share"] == 0.0 and cell["inside_retry_after"] == 0


def test_pages_still_held_when_the_time_limit_stops_a_crawl_are_not_counted_lost() -> None:
    import zoo_report

    def result(unanswered: int, held: int | None) -> dict:
        stats = {} if held is None else {"polite/dropped_at_close": held}
        return {"lost_items": unanswered, "crawler": {"stats": stats}}

    assert zoo_report.lost(result(3, 2)) == 1  # one given up, two waiting to go again at the stop
    assert zoo_report.lost(result(2, 5)) == 0
    assert zoo_report.lost(result(4, None)) == 4  # a client that holds nothing back loses what it did not get
    assert zoo_report.lost(result(0, 3)) == 0
