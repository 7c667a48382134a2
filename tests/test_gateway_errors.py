"""Whose a 502/503/504 is: the one endpoint that keeps getting it, or the site (``downloader/gateway_errors``)."""

from __future__ import annotations

from scrapy_polite.downloader.gateway_errors import GatewayErrors


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def judge(**kw: float) -> tuple[GatewayErrors, Clock]:
    clock = Clock()
    return GatewayErrors(clock=clock, **kw), clock  # type: ignore[arg-type]


def test_one_endpoint_answering_only_gateway_errors_while_the_others_get_pages_is_at_fault() -> None:
    g, _ = judge()
    for ep in ("b", "c", "d"):
        assert not g.answered(ep, "h", gateway=False)
    assert not g.answered("a", "h", gateway=True)  # the first one may be the site's passing error
    assert g.answered("a", "h", gateway=True)
    assert g.answered("a", "h", gateway=True)
    # Its answers stay its fault for as long as they are all gateway errors.
    assert not g.answered("b", "h", gateway=False)
    assert g.answered("a", "h", gateway=True)


def test_in_a_pool_of_two_the_one_failing_alone_is_at_fault() -> None:
    g, _ = judge()
    assert not g.answered("b", "h", gateway=False)
    assert not g.answered("a", "h", gateway=True)
    assert g.answered("a", "h", gateway=True)


def test_gateway_errors_several_endpoints_get_are_the_site_s() -> None:
    g, _ = judge()
    for ep in ("a", "b", "c", "d"):
        assert not g.answered(ep, "h", gateway=False)
    for _ in range(3):
        for ep in ("a", "b", "c"):
            assert not g.answered(ep, "h", gateway=True)
    # Three endpoints failing against one getting pages: the site is down, not the proxies.
    assert not g.answered("a", "h", gateway=True)


def test_without_other_endpoints_getting_pages_nothing_is_blamed() -> None:
    g, _ = judge()
    for _ in range(5):
        assert not g.answered("a", "h", gateway=True)


def test_a_page_through_the_endpoint_ends_its_streak() -> None:
    g, _ = judge()
    for ep in ("b", "c"):
        g.answered(ep, "h", gateway=False)
    assert not g.answered("a", "h", gateway=True)
    assert not g.answered("a", "h", gateway=False)
    assert not g.answered("a", "h", gateway=True)  # a new streak: its first is the site's again
    assert g.answered("a", "h", gateway=True)


def test_hosts_are_judged_apart() -> None:
    g, _ = judge()
    for ep in ("b", "c"):
        g.answered(ep, "h1", gateway=False)
    g.answered("a", "h2", gateway=True)
    # Its other host's pages do not count, nor do other endpoints' pages from another host.
    assert not g.answered("a", "h2", gateway=True)
    assert not g.answered("a", "h1", gateway=True)
    assert g.answered("a", "h1", gateway=True)


def test_answers_older_than_the_window_are_no_evidence() -> None:
    g, clock = judge(window=30.0)
    for ep in ("b", "c"):
        g.answered(ep, "h", gateway=False)
    g.answered("a", "h", gateway=True)
    clock.now += 31.0
    assert not g.answered("a", "h", gateway=True)  # the others' pages are too old to compare with
    for ep in ("b", "c"):
        g.answered(ep, "h", gateway=False)
    assert g.answered("a", "h", gateway=True)


def test_memory_is_bounded_by_hosts() -> None:
    g, _ = judge(max_hosts=3)
    for n in range(50):
        g.answered("a", f"h{n}", gateway=n % 2 == 0)
    assert len(g) == 3
