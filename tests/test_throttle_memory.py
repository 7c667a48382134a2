"""The throttle's small memories, each on its own: what a latency watch, a window finder and the
recent answers say of the answers they are given."""

from __future__ import annotations

import pytest

from scrapy_polite.throttle.history import Answers, Granted, Windows
from scrapy_polite.throttle.latency import LatencyWatch


def test_a_queue_that_grows_is_told_from_one_that_drains_after_a_cut() -> None:
    watch = LatencyWatch(factor=2.0, margin=0.05, size=8)
    assert [watch.add(0.05) for _ in range(8)][-1] is None  # unloaded
    states = [watch.add(0.6) for _ in range(8)]
    assert states[-1] == "grows"
    watch.cut(watch.median() or 0.0)
    assert [watch.add(0.4) for _ in range(8)][-1] == "drains"  # above the baseline, lower than at the cut
    watch.cut()
    assert [watch.add(0.06) for _ in range(8)][-1] is None


def test_two_ips_told_the_same_moment_though_asked_apart_reveal_a_window() -> None:
    windows = Windows(tolerance=1.0)
    assert windows.stated("a", now=10.0, deadline=15.0) is None
    assert windows.stated("b", now=10.2, deadline=15.2) is None  # asked at about the same moment
    assert windows.stated("c", now=12.0, deadline=15.1) == (15.1, None)
    assert windows.stated("d", now=13.0, deadline=15.0) is None  # that reset is known already
    assert windows.stated("a", now=17.0, deadline=20.0) is None
    assert windows.stated("b", now=18.5, deadline=20.2) == (20.2, 15.1)


def test_recent_answers_are_counted_over_the_lookback_and_not_in_the_first_seconds() -> None:
    answers = Answers(born=0.0, lookback=2.0, least=4)
    for i in range(3):
        answers.add(0.1 * i, clean=True)
    assert answers.counts(0.5) is None  # too few
    answers.add(0.4, clean=False)
    assert answers.counts(0.5) is None  # the host's first seconds: a start-up burst
    for i in range(20):
        answers.add(3.0 + 0.25 * i, clean=i % 4 != 0)
    sent, clean, span = answers.counts(8.0) or (0, 0, 0.0)
    assert span == 2.0 and sent == 8 and clean == 6
    assert answers.rate(8.0) == 4.0


def test_the_grants_counted_by_the_gate_give_what_the_whole_fleet_sends() -> None:
    granted = Granted(lookback=2.0, least=8)
    assert granted.rate(0.0) is None
    for i in range(41):  # four processes, one grant each per second: the count read now and then
        granted.read(i * 0.25, i)
    assert granted.rate(10.0) == pytest.approx(4.0, rel=0.15)
    granted.read(10.5, 3)  # the shared record was lost: counting starts again, no negative rate
    assert granted.rate(10.5) is None
