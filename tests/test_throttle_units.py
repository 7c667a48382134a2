"""The throttle's units on fake clocks: spacing, host rate, concurrency, attribution, and their composition."""

from __future__ import annotations

import logging
import math

import pytest
from test_units import config, make_gate

from scrapy_polite.gate.state import NO_SIGNAL, HostSignal
from scrapy_polite.pool.endpoints import Endpoint
from scrapy_polite.sandbox.common import TokenBucket
from scrapy_polite.throttle.attribution import HOST, PER_IP, Attribution, Verdict
from scrapy_polite.throttle.concurrency import ConcurrencyModel
from scrapy_polite.throttle.drain import Drained, IpRuns
from scrapy_polite.throttle.policy import ThrottlePolicy, evidence_text
from scrapy_polite.throttle.rate import (
    FALLEN_HOLD,
    FOUND,
    HOLD_FIRST,
    HOLD_WINDOWS,
    KEEP,
    MET_AT,
    RUN_GROWTH,
    RUN_STEPS,
    SETTLE,
    SPACED,
    START_STEP,
    STEP,
    Ceiling,
    RateSearch,
    Signal,
)
from scrapy_polite.throttle.spacing import (
    BAD_GAP_DECAY,
    BISECT_STEP,
    CLOSE,
    DECAY_WINDOWS,
    HOLD,
    MARGIN,
    MIN_JITTER,
    TAKE_BACK,
    SpacingEstimator,
)
from scrapy_polite.throttle.traffic import MIN_ANSWERS, Traffic

pytestmark = pytest.mark.once

W = 20.0  # a recovery window


# -- spacing -------------------------------------------------------------------


def test_spacing_goes_just_above_the_failing_gap_or_to_a_clean_gap_near_it() -> None:
    s = SpacingEstimator()
    # No clean gap known, adaptive mode: a guess 25% above the failure, three times, then doubling
    # with each raise in a row (the last guesses fell short: the limit may be far above the band) ...
    band = s.raised(1.0, (0.8, 1.6), 10.0, True, 0.0, W)
    assert band == pytest.approx((1.25, 1.25 * (1 + MIN_JITTER)))
    band = s.raised(1.3, band, 10.0, True, 1.0, W)
    assert band == pytest.approx((1.3 * 1.25, 1.3 * 1.25 * (1 + MIN_JITTER)))
    band = s.raised(1.65, band, 10.0, True, 1.2, W)
    assert band == pytest.approx((1.65 * 1.25, 1.65 * 1.25 * (1 + MIN_JITTER)))
    band = s.raised(2.1, band, 10.0, True, 1.5, W)
    assert band == pytest.approx((2.1 * 1.5, 2.1 * 1.5 * (1 + MIN_JITTER)))
    assert s.raised(3.2, band, 10.0, True, 2.0, W) == pytest.approx((6.4, 6.4 * (1 + MIN_JITTER)))
    assert s.raised(5.3, (5.2, 5.4), 100.0, True, 3.0, W) == pytest.approx((10.6, 10.6 * (1 + MIN_JITTER)))
    assert s.raised(10.7, (10.6, 11.0), 100.0, True, 4.0, W) == pytest.approx((21.4, 21.4 * (1 + MIN_JITTER)))  # at most 100%
    # ... and a narrowing ends the run: the next guess is 25% again.
    assert s.narrowed((8.2, 8.6), 0.3, 100.0) is not None
    assert s.raised(5.0, (4.0, 4.2), 10.0, True, 101.0, W)[0] == pytest.approx(6.25)
    # Without adaptive mode, which never narrows a guess too high back: 50% above the failure.
    assert SpacingEstimator().raised(1.0, (0.8, 1.6), 10.0, False, 0.0, W) == pytest.approx((1.5, 1.6))
    s = SpacingEstimator()
    s = SpacingEstimator()
    s.clean(1.3, 1.0, W)
    s.clean(2.0, 1.1, W)
    assert s.shortest_clean(1.2, W) == 1.3
    band = s.raised(1.2, (1.0, 1.1), 10.0, True, 1.2, W)
    assert band is not None and band[0] == pytest.approx(1.3)  # the known-clean gap, within REACH above
    assert s.raised(1.0, band, 10.0, True, 1.3, W) is None  # already above


def test_an_ambiguous_signal_raises_the_spacing_to_a_clean_gap_near_it_or_just_above_its_gap() -> None:
    s = SpacingEstimator()
    s.clean(1.49, 0.0, W)
    assert s.raised(1.1, (0.8, 1.6), 10.0, True, 1.0, W) == pytest.approx((1.49, 1.49 * (1 + MIN_JITTER)))  # a clean gap near
    s = SpacingEstimator()
    s.clean(1.49, 0.0, W)
    # A probe goes to the known-good spacing too (a narrowing that overshot goes back to where it was clean)...
    assert s.raised(1.1, (0.8, 1.6), 10.0, True, 1.0, W, reach=False) == pytest.approx((1.49, 1.49 * (1 + MIN_JITTER)))
    assert s.target(1.1, 1.0, W, reach=False) == pytest.approx(1.49)
    # Without adaptive mode (no narrowing to go back from: a wide band's clean gaps), just above its gap.
    assert s.target(1.1, 1.0, W, reach=False, back=False) == pytest.approx(1.1 * (1 + MARGIN))
    band = s.raised(1.1, (0.8, 1.6), 10.0, False, 1.0, W, reach=False)
    assert band == pytest.approx((1.1 * (1 + MARGIN), 1.6))
    # ...but with none near, only just above its gap, not a guess at REACH above it.
    s = SpacingEstimator()
    s.clean(1.8, 0.0, W)
    assert s.raised(1.1, (0.8, 1.6), 10.0, True, 1.0, W, reach=False) == pytest.approx((1.1 * (1 + MARGIN), 1.1 * (1 + MARGIN) * (1 + MIN_JITTER)))
    assert SpacingEstimator().target(1.1, 1.0, W, reach=False) == pytest.approx(1.1 * (1 + MARGIN))
    assert SpacingEstimator().target(1.1, 1.0, W) == pytest.approx(1.375)
    assert SpacingEstimator().target(1.1, 1.0, W, back=False) == pytest.approx(1.65)


def test_after_a_raise_narrowing_waits_a_hold_that_doubles_until_a_clean_window() -> None:
    s = SpacingEstimator()
    band = s.raised(0.45, (0.41, 0.51), 10.0, True, 0.0, W)
    assert band is not None
    assert s.narrowed(band, 0.3, HOLD - 0.1, W) is None  # held after the raise
    assert s.narrowed(band, 0.3, HOLD + 0.1, W) is not None
    s.raised(band[0], band, 10.0, True, 10.0, W)  # a second raise: twice the hold
    band = (0.8, 0.84)
    assert s.narrowed(band, 0.3, 10.0 + 2 * HOLD - 0.1, W) is None
    assert s.narrowed(band, 0.3, 10.0 + 2 * HOLD + 0.1, W) is not None
    assert s.narrowed(band, 0.3, 10.0 + 1.1, 1.0) is not None  # never longer than the window
    s.raised(1.0, band, 10.0, True, 20.0, W)
    s.decay()  # a clean window: the next raise holds HOLD again, and this one no longer
    assert s.narrowed((1.5, 1.6), 0.3, 20.1, W) is not None


def test_raises_in_a_row_keep_the_hold_only_a_narrowing_that_drew_a_raise_doubles_it() -> None:
    s = SpacingEstimator()
    band = s.raised(1.0, (0.8, 1.6), 10.0, True, 0.0, W)
    band = s.raised(1.3, band, 10.0, True, 1.0, W)  # the first raise fell short
    assert s.narrowed(band, 0.3, 1.0 + HOLD + 0.1, W) is not None  # still the first hold
    band = s.raised(1.8, (1.5, 1.6), 10.0, True, 10.0, W)  # that narrowing crossed the limit
    assert s.narrowed(band, 0.3, 10.0 + 2 * HOLD - 0.1, W) is None  # now twice the hold


def narrowest(s: SpacingEstimator, band: tuple[float, float]) -> tuple[float, float]:
    """Where narrowing *band* step after step stops, past the hold after a raise."""
    for _ in range(30):
        nxt = s.narrowed(band, s.floor(0.3), HOLD + 1.0)
        if nxt is None:
            return band
        band = nxt
    raise AssertionError("the narrowing never stopped")


def test_spacing_narrows_per_step_to_close_above_the_failing_gap_and_forgets_it_slowly() -> None:
    s = SpacingEstimator()
    s.raised(0.9, (0.5, 0.5), 10.0, True, 0.0, W)
    band = narrowest(s, (1.2, 1.3))
    # Within 1 / CLOSE of the gap that failed: at least CLOSE of any limit between the two, and no
    # further step, which would cross a limit just above the gap with a 429 for a few percent.
    assert 0.9 * (1 + MARGIN) <= band[0] <= 0.9 / CLOSE
    assert band[1] == pytest.approx(band[0] * (1 + MIN_JITTER), rel=0.05)  # the jitter narrowed still
    # A band already that close does not move; one a step above it takes the step, not to the floor.
    assert s.narrowed((0.99, 1.2), s.floor(0.3), HOLD + 1.0) == pytest.approx((0.99, 0.99 + 0.21 / 2))
    assert narrowest(s, (1.02, 1.05))[0] == pytest.approx(min(1.02 * BISECT_STEP, (1.02 + 0.9 * (1 + MARGIN)) / 2))
    s.decay()
    assert s.floor(0.3) < 0.9 * (1 + MARGIN)
    assert narrowest(s, (0.99, 1.02))[0] < 0.99  # a decay lets the narrowing re-probe under it


def decays(s: SpacingEstimator, windows: int) -> list[float]:
    """The longest failing gap after each of *windows* clean windows."""
    out = []
    for _ in range(windows):
        s.decay()
        out.append(s.bad_gap)
    return out


def test_a_per_ip_limit_met_again_where_a_decay_let_go_of_it_is_re_probed_more_rarely() -> None:
    # A steady 1 req/s per-IP limit: each clean window let go of some of the failing gap, and the
    # narrowing that followed was a 429 every window (20 s) for the whole crawl, and a second one as
    # the narrowing searched under the gap that had failed before. Met again near where it was let
    # go, the limit stands there, and the next decay waits twice as many windows, up to DECAY_WINDOWS.
    s = SpacingEstimator()
    s.raised(0.97, (0.64, 1.04), 10.0, True, 0.0, W)
    assert decays(s, 1) == [pytest.approx(0.97 * BAD_GAP_DECAY)]  # the first: one window
    waits = []
    for probe in range(4):
        s.raised(0.94, (0.93, 0.96), 10.0, True, 100.0 * (probe + 1), W)  # the probe met it again
        assert s.confirmed == probe + 1 and s.bad_gap == pytest.approx(0.97)
        assert s.floor(0.3) == pytest.approx(0.97 * (1 + MARGIN))  # no narrowing under it again
        after = decays(s, 8)
        waits.append(next(i + 1 for i, gap in enumerate(after) if gap < 0.97))
    assert waits == [2, 4, DECAY_WINDOWS, DECAY_WINDOWS]


def test_a_per_ip_limit_that_relaxed_after_a_decay_is_probed_from_scratch() -> None:
    s = SpacingEstimator()
    s.raised(0.97, (0.64, 1.04), 10.0, True, 0.0, W)
    s.decay()
    s.raised(0.96, (0.93, 0.96), 10.0, True, 50.0, W)
    assert s.confirmed == 1
    assert s.bad_gap == 0.97  # met near where it was let go: it stands there
    let_go = [0.97 * BAD_GAP_DECAY ** k for k in (0, 1, 1, 2, 2, 3)]  # a decay every second window
    assert decays(s, 6) == pytest.approx(let_go)
    s.raised(0.6, (0.59, 0.61), 10.0, True, 100.0, W)  # the narrowings went far under it: it relaxed
    assert s.confirmed == 0 and decays(s, 1) == [pytest.approx(0.6 * BAD_GAP_DECAY)]  # the next window
    # Another process sharing the host raised the band back where this one let go: met again.
    s.seen = (0.5, 0.52)
    assert s.follow((0.6 * (1 + MARGIN), 0.65), 200.0) and s.confirmed == 1


def test_a_gap_the_band_raised_since_no_longer_allows_is_answered_for_and_bounds_the_narrowing() -> None:
    s = SpacingEstimator()
    band = s.raised(0.42, (0.41, 0.51), 10.0, True, 5.0, W)
    assert s.answered(0.47, 4.9, band) and s.bad_gap == 0.47  # sent before the raise, under the new band
    assert not s.answered(band[0] + 0.01, 4.9, band)  # a gap the band allows
    assert not s.answered(0.47, 5.1, band)  # sent after the raise
    assert s.bad_gap == 0.47


def test_raises_whose_429s_prove_the_hosts_are_taken_back_latest_first() -> None:
    s = SpacingEstimator()
    first = s.raised(1.1, (0.8, 1.6), 10.0, True, 1.0, W, sent_at=0.9)
    second = s.raised(1.2, first, 10.0, True, 2.0, W, sent_at=1.9)
    third = s.raised(1.5, second, 10.0, True, 3.0, W, sent_at=2.9)
    assert third is not None and s.bad_gap == 1.5 and s.raises == 1
    hosts = {1.9, 2.9}  # the host's doing: the last two (the first was an IP's)
    assert s.taken_back(lambda r: r.sent_at in hosts) == first  # the band before the second raise
    assert s.bad_gap == 1.1 and [r[0] for r in s.raised_for] == [0.9]
    assert s.taken_back(lambda r: r.sent_at in hosts) is None  # nothing more to take back
    # Only the last few raises are kept.
    for i in range(TAKE_BACK + 2):
        s.raised(2.0 + i, (1.0, 1.1), 10.0, True, 10.0 + i, W, sent_at=9.0 + i)
    assert len(s.raised_for) == TAKE_BACK


def test_a_raise_is_taken_back_after_host_wide_signals_that_show_a_limit_refusing_host_gaps() -> None:
    s = SpacingEstimator()
    first = s.raised(1.1, (0.8, 1.6), 10.0, True, 1.0, W, sent_at=0.9, host_gap=0.15)
    second = s.raised(1.2, first, 10.0, True, 2.0, W, sent_at=1.9, host_gap=0.12)
    assert second is not None
    assert s.outweighed() is None  # one such signal since the raise: not yet
    assert s.outweighed() == first and s.bad_gap == 1.1  # the second: the last raise goes, only it
    assert s.outweighed() is None
    s.raised(1.3, first, 10.0, True, 3.0, W, sent_at=2.9)  # a raise starts the count again
    assert s.outweighed() is None and [r.sent_at for r in s.raised_for] == [0.9, 2.9]
    assert s.outweighed() is not None and [r.sent_at for r in s.raised_for] == [0.9]
    assert SpacingEstimator().outweighed() is None and SpacingEstimator().outweighed() is None  # none kept


@pytest.mark.parametrize("host_shown", [True, False])
def test_after_a_429_that_shows_a_host_limit_clean_answers_take_back_a_raise_at_a_refused_host_gap(
        host_shown: bool) -> None:
    # A raise blamed on an IP's gap early in a crawl, before any host gap between clean requests is known,
    # at 0.02 s after the host's last request. A host-wide limit shown since (an IP's gap failing as long as
    # one answered cleanly) makes the raise's host gap worth checking at each clean answer: once enough
    # clean host gaps are in, all longer, it goes. Without such a 429 a per-IP limit is the likelier, and
    # a raise's host gap falls under the shortest by chance now and then: it stays.
    p, gate, ft, changes = policy(True)
    eps = [st.endpoint for st in gate.endpoints.values()]
    for ep in eps[:5]:  # five IPs' first requests, clean, 0.3 s apart
        p.ok("a", 200, endpoint=ep.key, granted_at=ft.now, rate_held=False)
        ft.advance(0.3)
    p.rate_limited("a", eps[0], 2.0, gap=1.5, slack=0.0, granted_at=ft.now - 0.28)
    raised = gate.host("a").delay
    assert raised[0] > 1.5 and "first requests" in changes[-1][4]["why"]
    for ep in eps[1:5]:  # the others' second requests, clean at 1.6 s
        ft.advance(0.3)
        p.ok("a", 200, endpoint=ep.key, gap=1.6, granted_at=ft.now - 0.1, rate_held=False)
    if host_shown:
        ft.advance(0.3)
        p.rate_limited("a", eps[5], 2.0, gap=2.0, slack=0.0, granted_at=ft.now - 0.1)
        assert p._hosts["a"].attribution.host_shown_at == ft.now
        assert gate.host("a").delay == raised  # too few host gaps yet to tell
    for i in range(8):
        ft.advance(0.3)
        p.ok("a", 200, endpoint=eps[i].key, gap=raised[0] + 0.1, granted_at=ft.now - 0.1, rate_held=False)
    back = [c[3] for c in changes if "spacing back" in c[3]]
    assert bool(back) == host_shown
    assert (gate.host("a").delay[0] < 1.5) == host_shown


@pytest.mark.parametrize(("host_rate", "raised_after", "taken_back"),
                         [(5.0, False, True), (3.0, False, False), (5.0, True, False)])
def test_a_raise_made_before_the_hosts_limit_was_found_goes_once_the_spacing_keeps_the_pool_under_its_rate(
        host_rate: float, raised_after: bool, taken_back: bool) -> None:
    # A crawl's first 429s come before either limit is known: one blamed on an IP's gap raised the spacing to
    # 1.9 s (8 IPs: 4.1 req/s). A host-wide limit found since holds the host at its own rate; above what the
    # pool sends at that spacing, nothing would ever show the raise wrong (no 429 comes while the spacing keeps
    # the pool under both). Under the pool's rate, or raised once the host's limit was known, it stays.
    p, gate, ft, changes = policy(True)
    eps = [st.endpoint for st in gate.endpoints.values()]
    for ep in eps[:5]:  # five IPs' first requests, clean
        p.ok("a", 200, endpoint=ep.key, granted_at=ft.now, rate_held=False)
        ft.advance(0.3)
    search = p._hosts["a"].rate
    if raised_after:
        search.bad = 6.0
    assert search.starting != raised_after
    p.rate_limited("a", eps[0], 2.0, gap=1.5, slack=0.0, granted_at=ft.now - 0.28)
    raised = gate.host("a").delay
    assert raised[0] > 1.5 and "first requests" in changes[-1][4]["why"]
    search.bad = 6.0  # a host-wide limit met since, at 6 req/s
    gate.set_host_interval("a", 1 / host_rate)
    ft.advance(0.3)
    p.ok("a", 200, endpoint=eps[1].key, gap=2.5, granted_at=ft.now - 0.05, rate_held=True)
    assert (gate.host("a").delay == (0.8, 1.6)) == taken_back
    assert ("raised before the host's own limit was found" in changes[-1][3]) == taken_back
    if not taken_back:
        assert gate.host("a").delay == raised


def test_spacing_without_adaptive_mode_is_never_narrower_than_configured_and_comes_back() -> None:
    s = SpacingEstimator()
    band = s.raised(1.0, (0.8, 1.6), 10.0, False, 0.0, W)
    assert band is not None and band[1] == 1.6
    for _ in range(20):
        s.decay()
        band = s.restored(band, (0.8, 1.6), s.floor(0.8)) or band
    assert band == (0.8, 1.6)


# -- host rate -----------------------------------------------------------------


def test_a_ceiling_is_found_under_an_overshoot_met_again_by_probes_and_remembered_when_it_falls() -> None:
    c = Ceiling()
    assert c.failed(5.0, 1.0, probe=False, climbed_fast=True) == "" and c.level == 5.0 and c.provisional
    assert c.failed(4.5, 2.0, probe=False, climbed_fast=False) == FOUND  # under a slow start's overshoot
    assert c.level == 4.5 and c.at == 1.0 and not c.provisional
    assert c.failed(4.4, 3.0, probe=True, climbed_fast=False) == "" and c.level == 4.4  # a little under it
    assert c.failed(4.6, 4.0, probe=True, climbed_fast=False) == MET_AT  # a probe at or past it
    assert c.confirmed == 2 and c.level == 4.4 and c.hold(W) == W * HOLD_WINDOWS and not c.fallen
    c.bound(4.2, 5.0)  # met under a host rate in force elsewhere: no higher than that
    assert c.level == 4.2 and c.at == 5.0
    c.bound(4.3, 6.0)
    assert c.level == 4.2
    assert c.failed(2.0, 5.0 + SETTLE, probe=False, climbed_fast=False) == ""  # far under, once it stood
    assert c.fallen and c.peak == 4.4 and c.level == 2.0 and c.confirmed == 0 and c.hold(W) == FALLEN_HOLD
    c.passed(2.4)  # clean a step past it: nothing learnt
    assert c.level == 2.0
    assert c.back(20.0) == 4.4 and c.level == 4.4 and c.at == 20.0 and not c.fallen


def test_probes_that_met_a_limit_a_little_under_where_it_stood_count_for_it_when_it_comes_back() -> None:
    c = Ceiling()
    c.failed(6.0, 1.0, probe=False, climbed_fast=False)
    assert c.failed(6.0, 10.0, probe=True, climbed_fast=False) == MET_AT
    c.failed(5.9, 30.0, probe=True, climbed_fast=False)  # the same limit, met a little under
    assert c.level == 5.9 and c.peak == 6.0 and c.peak_confirmed == 2
    c.failed(2.0, 40.0, probe=False, climbed_fast=False)  # it fell
    assert c.fallen and c.confirmed == 0
    assert c.back(50.0) == 6.0 and c.confirmed == 2 and c.hold(W) == W * HOLD_WINDOWS


def test_holds_and_parks_stay_at_their_caps_however_many_probes_and_parks_came_before() -> None:
    # A steady limit probed every 80 s for a day, by four processes: thousands of confirmations.
    c = Ceiling()
    c.failed(6.0, 1.0, probe=False, climbed_fast=False)
    c.confirmed = 5000
    assert c.hold(W) == W * HOLD_WINDOWS
    c.failed(2.0, 10.0, probe=False, climbed_fast=False)  # it fell
    c.confirmed = 5000
    assert c.fallen and c.hold(W) == W * HOLD_WINDOWS
    s = SpacingEstimator()
    s.raises, s.streak, s.raised_at = 5000, 5000, 0.0
    assert s.narrowed((1.0, 1.1), 0.2, W - 0.1, W) is None  # held a window at most
    assert s.target(1.0, 0.0, W) == pytest.approx(2.0)  # a guess 100% above the gap at most
    p, gate, ft, _ = policy(True)
    p._policy("a").parks = 5000
    p.unanswered("a", park=True)
    assert gate.host("a").paused_until == pytest.approx(ft.now + p.config.park_time[1])


def test_a_long_run_of_signals_steps_down_to_the_deepest_cut_and_no_further() -> None:
    r, rate = RateSearch(), 8.0
    r.changed = 0.9  # the rate was just set (one answered cleanly for a while would start the run a step on)
    for i in range(20):  # a host answering 429 to everything, each a step deeper, never past the backoff
        new = r.limited(Signal(rate, rate, False, 0.01), 1.0 + i / 10)
        assert new == pytest.approx(max(rate / 1.1 ** min(RUN_GROWTH ** i, 2 ** RUN_STEPS), rate * 0.01))
        rate = new


def test_a_failure_far_under_a_ceiling_just_found_is_no_fall() -> None:
    c = Ceiling()
    c.failed(6.0, 1.0, probe=False, climbed_fast=False)
    c.failed(3.0, 1.0 + SETTLE / 2, probe=False, climbed_fast=False)  # a burst after a pause ran past it
    assert c.level == 3.0 and c.peak is None and not c.fallen
    c.failed(8.0, 10.0, probe=False, climbed_fast=True)  # far past it: the limit rose, an overshoot's bound
    assert c.level == 8.0 and c.provisional


def test_rate_falls_back_to_the_clean_rate_then_holds_briefly_then_probes() -> None:
    r = RateSearch()
    assert r.clean(4.0, 0.0, W, math.inf) == pytest.approx(5.0)  # slow start: no limit found yet
    r.changed = 0.0
    assert r.limited(Signal(5.0, 5.0, False, 0.5)) == pytest.approx(4.0)  # the rate it climbed from
    r.changed = 1.0
    assert r.clean(4.0, 1.1, W, math.inf) == pytest.approx(4.4)  # two steps below the failure: a step up
    assert r.clean(4.6, 1.0 + HOLD_FIRST - 0.1, W, math.inf) is KEEP  # one step below: hold (longer for a limit not seen to move)
    assert r.clean(4.6, 1.0 + HOLD_FIRST + 0.1, W, math.inf) == pytest.approx(4.6 * 1.1)  # then probe


def test_the_search_explains_where_it_met_the_limit_and_how_long_it_holds_under_it() -> None:
    r = RateSearch()
    assert r.explain(W) is None  # slow start: nothing known yet
    assert r.limited(Signal(None, 8.0, True, 0.5)) == pytest.approx(4.0)
    assert r.explain(W) is None  # a first burst's rate, with no host rate in force: climbed past
    r.clean(4.0, 1.0, W, math.inf)
    r.limited(Signal(6.6, 6.6, False, 0.5), 2.0)
    assert r.explain(W) == {"ceiling": 6.6, "fell_from": None, "holds_below": 6.6, "hold": HOLD_FIRST}
    assert r.explain(W, fast=False)["hold"] == W
    r.clean(6.0, 10.0, W, math.inf)
    r.limited(Signal(2.2, 2.2, False, 0.5), 10.0 + SETTLE)  # far under it, once it stood: the limit fell
    assert r.explain(W) == {"ceiling": 2.2, "fell_from": 6.6, "holds_below": 2.2, "hold": FALLEN_HOLD}


def test_a_probe_that_meets_the_same_ceiling_doubles_the_next_hold_up_to_several_windows() -> None:
    r = RateSearch()
    holds = []
    for t in range(7):
        r.clean(4.0, 100.0 * t, W, math.inf)
        r.limited(Signal(4.4, 4.4, False, 0.5), 100.0 * t + 1)
        holds.append(r.ceiling.hold(W))
    # A steady limit: re-probed more and more rarely (each probe is a 429), at most HOLD_WINDOWS windows apart.
    assert holds == [HOLD_FIRST, HOLD_FIRST * 4, W * HOLD_WINDOWS, W * HOLD_WINDOWS, W * HOLD_WINDOWS,
                     W * HOLD_WINDOWS, W * HOLD_WINDOWS]
    assert r.ceiling.hold(W, fast=False) == W  # without adaptive mode: one window, always
    r.clean(4.0, 1000.0, W, math.inf)
    assert r.limited(Signal(4.4, 4.4, False, 0.5), 1001.0) == pytest.approx(4.4 / 1.05)  # just under the ceiling
    r.limited(Signal(2.0, 2.0, False, 0.5), 1010.0)  # far below it: the limit moved
    assert r.ceiling.fallen and r.ceiling.hold(W) == FALLEN_HOLD
    # Without adaptive mode: a quarter window once fallen, so a cap that rises is found within it.
    assert r.ceiling.hold(W, fast=False) == W / 4


def test_signals_in_a_run_step_down_further_and_a_request_slipping_through_does_not_end_the_run() -> None:
    r = RateSearch()
    assert r.clean(6.0, 0.0, W, math.inf) == pytest.approx(7.5)
    r.changed = 0.0  # set then
    first = r.limited(Signal(7.5, 7.5, False, 0.5), 1.0)
    assert first == pytest.approx(6.0)
    assert r.clean(6.0, 1.2, W, math.inf) is KEEP
    # Each signal of the run steps down RUN_GROWTH times as many steps as the one before.
    assert r.limited(Signal(6.0, 6.0, False, 0.5), 1.3) == pytest.approx(6.0 / 1.1 ** RUN_GROWTH)
    assert r.limited(Signal(5.0, 5.0, False, 0.1), 1.5) == pytest.approx(5.0 / 1.1 ** RUN_GROWTH ** 2)


def test_a_429_at_a_rate_answered_cleanly_for_a_while_starts_its_run_as_at_its_second_signal() -> None:
    # The host answered 5.8 req/s cleanly for 12 s, held there a step under its ceiling (6.1), when its cap
    # fell to 2: the limit moved under the rate, and a one-step cut only costs one more 429 on the way down.
    def held_at(rate: float, since: float) -> RateSearch:
        r = RateSearch()
        r.clean(rate, since - 1.0, W, math.inf)
        r.changed = since
        r.clean(rate, 20.0, W, math.inf)
        return r

    r = held_at(5.8, 8.0)
    assert r.limited(Signal(5.8, 5.8, False, 0.5), 20.0) == pytest.approx(5.8 / 1.1 ** RUN_GROWTH)
    # Its next 429 in the run steps as the third: under the fallen cap at once (here the backoff's floor).
    assert r.limited(Signal(3.96, 3.96, False, 0.5), 20.2) == pytest.approx(3.96 * 0.5)
    # A rate set just now (a climb's step) that draws a 429: the one step it climbed, as before.
    r = held_at(5.8, 20.0 - SETTLE / 2)
    assert r.limited(Signal(5.8, 5.8, False, 0.5), 20.0) == pytest.approx(5.8 / 1.1)
    # A probe past a hold is expected to meet the limit: not a move.
    r = held_at(5.8, 8.0)
    r.probing = True
    assert r.limited(Signal(5.8, 5.8, False, 0.5), 20.0) == pytest.approx(5.8 / 1.1)


def test_a_drop_through_the_ceiling_is_not_a_probe_and_keeps_the_hold_short() -> None:
    r = RateSearch()
    r.clean(6.0, 0.0, W, math.inf)
    r.limited(Signal(6.6, 6.6, False, 0.5), 1.0)  # the ceiling: 6.6
    for t, rate in ((2.0, 6.0), (3.0, 5.5), (4.0, 6.2)):  # a run down past it, each one a lone signal
        r.changed = t - 0.5  # each signal set a new rate just before
        r.clean(rate, t, W, math.inf)
        r.limited(Signal(rate, rate, False, 0.5), t + 0.5)
    assert r.ceiling.confirmed == 0 and r.ceiling.hold(W) == HOLD_FIRST


def test_a_fallen_limit_that_came_back_resumes_a_step_under_where_it_stood_and_is_probed_as_a_steady_one() -> None:
    # The cap went 6 -> 2 -> 6 req/s: held at 2, the search probes past it, and once two steps past
    # it cleanly, the limit came back: it goes straight to a step under the 6.6 it fell from and holds
    # there (slow-start steps from 2.66 ran past 6.6 into a 429, and a second one found the ceiling).
    # Back where it stood, each probe that meets it doubles the next hold (it re-probed every 5 s).
    r = RateSearch()
    r.clean(6.0, 0.0, W, math.inf, fast=False)
    r.limited(Signal(6.6, 6.6, False, 0.5), 1.0)
    r.limited(Signal(2.2, 2.2, False, 0.5), 5.0)  # the drop: a fall (the first one below is forgiven)
    r.limited(Signal(2.2, 2.2, False, 0.5), 6.0)
    assert r.ceiling.fallen and r.ceiling.level == pytest.approx(2.2) and r.bad == pytest.approx(2.2)
    r.ceiling.confirmed = 3  # three probes met the 2.2 ceiling while it stayed
    r.changed = 6.0
    rate, climb = 2.0, []
    for t in range(4):  # past the hold: the probe, then steps while clean
        rate = r.clean(rate, 12.0 + t / 2, W, math.inf)
        climb.append(rate)
    assert climb == pytest.approx([2.2, 2.42, 2.662, 6.6 / (1 + STEP)])
    assert not r.ceiling.fallen and r.ceiling.level == pytest.approx(6.6) and r.bad == pytest.approx(6.6) and not r.climbed_fast
    assert r.ceiling.confirmed == 0 and r.ceiling.hold(W) == HOLD_FIRST  # its own probes count from none
    r.changed = 13.5
    assert r.clean(6.0, 14.0, W, math.inf) is KEEP  # held a step under where it stood
    holds = []
    for t in (20.0, 35.0, 60.0, 110.0, 200.0):
        r.changed = t - r.ceiling.hold(W) - 0.1
        assert r.clean(6.0, t, W, math.inf) == pytest.approx(6.6)  # past the hold: the probe
        r.limited(Signal(6.6, 6.6, False, 0.5), t + 0.5)  # meets the same ceiling
        holds.append(r.ceiling.hold(W))
    assert holds == [4 * HOLD_FIRST, W * HOLD_WINDOWS, W * HOLD_WINDOWS, W * HOLD_WINDOWS, W * HOLD_WINDOWS]


def fallen_in_steps_after_a_probe_met_it() -> RateSearch:
    """The cap fell 6 -> 2 req/s under a search held at 5.8, after a probe met it again at 6.1: 429s at
    5.8, 5.3 and 4.4 each lowered the ceiling a little before 3.0 was far under it."""
    r = RateSearch()
    r.clean(5.5, 0.0, W, math.inf, fast=False)
    r.limited(Signal(6.1, 6.1, False, 0.5), 1.0)
    r.changed = 1.0 - r.ceiling.hold(W) - 0.1
    r.clean(5.55, 10.0, W, math.inf)  # past the hold: the probe
    assert r.limited(Signal(6.1, 6.1, False, 0.5), 10.5) == pytest.approx(6.1 / (1 + STEP / 2))  # met again
    for t, rate in ((20.0, 5.8), (20.2, 5.3), (20.5, 4.4), (21.0, 3.0)):  # the fall
        r.limited(Signal(rate, rate, False, 0.5), t)
    return r


def test_a_limit_that_falls_in_steps_fell_from_the_ceiling_a_probe_met_not_from_the_last_step() -> None:
    r = fallen_in_steps_after_a_probe_met_it()
    assert r.ceiling.fallen and r.ceiling.peak == pytest.approx(6.1) and r.ceiling.level == pytest.approx(3.0)


def test_a_limit_back_where_a_probe_met_it_before_it_fell_resumes_as_it_stood() -> None:
    # The cap went 6 -> 2 -> 6 req/s. Before the fall a probe met it at 6.1 again: the search held 5%
    # under it, re-probing after 12 s. Back there, it holds as close and as long (a 6 s hold after the
    # rise cost the shifting cap a 429 more, and 6 s at a step under).
    r = fallen_in_steps_after_a_probe_met_it()
    assert r.ceiling.peak_confirmed == 1
    r.ceiling.confirmed = 3  # three probes met the low ceiling while it stayed
    r.changed = 21.0
    rate, climb = 2.75, []
    for t in range(4):  # past the hold: the probe, then steps while clean, then back where it stood
        rate = r.clean(rate, 30.0 + t / 2, W, math.inf)
        climb.append(rate)
    assert climb == pytest.approx([3.025, 3.3275, 3.66025, 6.1 / (1 + STEP / 2)])
    assert not r.ceiling.fallen and r.ceiling.confirmed == 1 and r.ceiling.hold(W) == 4 * HOLD_FIRST


def fall_before_any_probe(held: float) -> RateSearch:
    """The cap went 6 -> 2 req/s 8 s into a crawl: the slow start had overshot to 6.1, and the search
    had held at 5.55 for *held* seconds when the fall's run of 429s met 5.55, 5.04 and 4.17, each
    lowering the level, before 2.85 was far under it."""
    r = RateSearch()
    for rate in (2.5, 3.1, 3.9, 4.9):
        r.clean(rate, 0.0, W, math.inf)
    assert r.limited(Signal(6.1, 6.1, False, 0.5), 1.0) == pytest.approx(4.9)  # the overshoot
    assert r.ceiling.provisional
    r.changed = 6.0 - held
    r.clean(4.9, 1.5, W, math.inf)
    for t, rate in ((6.0, 5.55), (6.3, 5.04), (6.6, 4.17), (7.0, 2.85)):  # one run: each a step deeper
        r.limited(Signal(rate, rate, False, 0.5), t)
    # Held SETTLE seconds, the rate's first 429 starts the run as at its second signal: the limit moved.
    assert r.fail_streak == 4 + (held >= SETTLE) and r.ceiling.fallen and r.ceiling.level == pytest.approx(2.85)
    return r


def test_a_limit_that_falls_before_any_probe_fell_from_where_the_run_of_signals_began() -> None:
    # The limit stood at 5.55, not 4.17: back there, the search resumes a step under 5.55 (it resumed
    # at 3.8 and held there 6 s while the cap was back at 6).
    r = fall_before_any_probe(held=5.0)
    assert r.ceiling.peak == pytest.approx(5.55) and r.explain(W)["fell_from"] == pytest.approx(5.55)
    assert r.ceiling.back(20.0) == pytest.approx(5.55)


def test_a_rate_the_host_answered_only_briefly_before_a_run_of_signals_is_not_where_the_limit_stood() -> None:
    # A limit with a burst allowance answers a rate far past it for a second or two: a run that met
    # it then fell from the level it lowered to, not from that rate.
    r = fall_before_any_probe(held=SETTLE / 2)
    assert r.ceiling.peak == pytest.approx(4.17)


def test_a_fallen_limit_is_re_probed_every_few_seconds_and_held_a_step_under_not_closer() -> None:
    # The cap fell from 6.6 to 2.2 req/s: it may come back, and a rise is found within FALLEN_HOLD seconds
    # until STEADY probes met the same ceiling. Holding 5% under 2.2 (2.1) would be past a 2.05 cap.
    r = RateSearch()
    r.clean(6.0, 0.0, W, math.inf, fast=False)
    r.limited(Signal(6.6, 6.6, False, 0.5), 1.0)
    r.limited(Signal(2.2, 2.2, False, 0.5), 5.0)  # the drop
    r.limited(Signal(2.2, 2.2, False, 0.5), 6.0)
    assert r.ceiling.fallen and r.ceiling.peak == pytest.approx(6.6) and r.ceiling.level == pytest.approx(2.2)
    holds, after = [], []
    for t in (20.0, 30.0, 45.0, 60.0, 80.0):
        r.changed = t - r.ceiling.hold(W) - 0.1
        assert r.clean(2.0, t, W, math.inf) == pytest.approx(2.2)  # past the hold: the probe
        after.append(r.limited(Signal(2.2, 2.2, False, 0.5), t + 0.5))  # meets the same ceiling
        holds.append(r.ceiling.hold(W))
    assert holds == [FALLEN_HOLD, FALLEN_HOLD, FALLEN_HOLD, 2 * FALLEN_HOLD, 4 * FALLEN_HOLD]
    assert after == [pytest.approx(2.0)] * 5  # a step under, not 5% under
    assert r.ceiling.hold(W, fast=False) == W / 4


def test_a_failure_a_little_under_the_ceiling_lowers_it() -> None:
    r = RateSearch()
    r.clean(6.0, 0.0, W, math.inf, fast=False)
    r.limited(Signal(6.6, 6.6, False, 0.5), 1.0)  # the ceiling: 6.6
    r.changed = 1.0
    assert r.clean(5.3, 2.0, W, math.inf) == pytest.approx(5.83)  # two steps under it: a step up
    r.limited(Signal(5.83, 5.83, False, 0.5), 3.0)  # between one and two steps under 6.6
    assert r.ceiling.level == pytest.approx(5.83) and not r.ceiling.fallen


def test_rate_takes_what_the_host_accepted_when_many_answers_fail() -> None:
    traffic = Traffic()
    for i in range(12):
        traffic.answer(i % 2 == 0, i * 0.1)
    took = traffic.accepted(6.0, 6.0)
    assert took == pytest.approx(3.0)
    assert RateSearch().limited(Signal(6.0, 6.0, False, 0.5, took)) == pytest.approx(3.0)


def test_traffic_measures_the_rate_granted_over_its_window_and_needs_enough_answers() -> None:
    traffic = Traffic()
    assert traffic.sent_rate(0, 0.0) == 0.0
    assert traffic.sent_rate(4, 0.5) == pytest.approx(4.0)  # over at least SPAN_MIN
    assert traffic.sent_rate(12, 2.0) == pytest.approx(6.0)
    assert traffic.sent_rate(24, 6.0) == pytest.approx(3.0)  # the window keeps the last point before it
    for _ in range(MIN_ANSWERS - 1):
        traffic.answer(False, 6.0)
    assert traffic.accepted(3.0) is None  # too few answers to say
    traffic.answer(True, 6.0)
    assert traffic.accepted(3.0) == pytest.approx(0.3)
    for _ in range(40):
        traffic.answer(True, 10.0)  # the failures are older than the window
    assert traffic.accepted(3.0) is None


def test_a_climbs_window_says_nothing_of_what_the_host_accepts_at_its_top() -> None:
    traffic = Traffic()
    for i in range(12):
        traffic.answer(i % 4 != 0, i * 0.25)  # 3 of 12 failed
    assert traffic.accepted(6.0, 6.24) == pytest.approx(6.0 * 0.75)  # sent near the rate in force
    assert traffic.accepted(4.4, 6.24) is None  # sent well under it: the rate climbed through the window
    r = RateSearch()
    # A cut from the top of a climb steps down from the clean rate, not to the window's share.
    r.clean(5.68, 3.0, W, math.inf)
    assert r.limited(Signal(6.24, 4.4, False, 0.5, traffic.accepted(4.4, 6.24)), 3.1) == pytest.approx(5.68)


def test_a_failure_under_a_slow_start_overshoot_finds_the_limit_and_is_not_a_move() -> None:
    # 2.5 -> 3.125 -> 3.9 req/s against a 3 req/s cap: 3.9 fails, then 3.125.
    r = RateSearch()
    assert r.clean(2.5, 0.0, W, math.inf) == pytest.approx(3.125)
    assert r.clean(3.125, 0.5, W, math.inf) == pytest.approx(3.90625)
    assert r.limited(Signal(3.90625, 3.9, False, 0.5), 1.0) == pytest.approx(3.125)
    r.changed = 1.0
    r.limited(Signal(3.125, 3.1, False, 0.5), 2.0)
    assert r.ceiling.level == pytest.approx(3.125) and not r.ceiling.fallen and r.bad == pytest.approx(3.125)
    r.changed = 2.0
    assert r.clean(2.9, 3.0, W, math.inf) is KEEP  # held one step under 3.125, for a steady limit's hold
    assert r.ceiling.hold(W) == HOLD_FIRST


def test_a_probe_past_the_ceiling_that_stays_clean_climbs_by_slow_start_steps() -> None:
    r = RateSearch()
    r.clean(4.0, 0.0, W, math.inf, fast=False)
    r.limited(Signal(4.4, 4.4, False, 0.5), 1.0)  # the ceiling: 4.4
    r.changed = 1.0
    assert r.clean(4.0, 1.5, W, math.inf) is KEEP  # holding under it
    assert r.clean(4.0, 1.0 + r.ceiling.hold(W) + 0.1, W, math.inf) == pytest.approx(4.4)  # the probe
    assert r.clean(4.4, 20.0, W, math.inf) == pytest.approx(4.84)  # clean at the ceiling: a step past it
    # Clean a step past it: a ceiling set a step low by one 429 from requests that arrived bunched
    # looks the same, so another 10% step ...
    assert r.clean(4.84, 20.5, W, math.inf) == pytest.approx(4.84 * (1 + STEP))
    assert r.clean(5.324, 21.0, W, math.inf) == pytest.approx(5.324 * (1 + START_STEP))  # ... then it rose
    r.limited(Signal(6.6, 6.6, False, 0.5), 21.5)
    r.changed = 21.5
    assert r.clean(4.4, 22.0, W, math.inf) == pytest.approx(4.4 * (1 + STEP))  # found again: small steps


def test_rate_with_no_host_rate_ignores_a_lone_signal_and_cuts_a_wide_burst() -> None:
    r = RateSearch()
    assert r.limited(Signal(None, 8.0, False, 0.5)) is KEEP
    assert r.limited(Signal(None, 8.0, True, 0.5)) == pytest.approx(4.0)


def test_a_wide_burst_with_no_host_rate_steps_under_the_limit_found_before() -> None:
    r = RateSearch()
    r.limited(Signal(3.025, 3.0, False, 0.5), 1.0)  # a ceiling found at 3.025 req/s
    # The rate was dropped later (the spacing bound first); 2.44 req/s sent draws 429s on several IPs.
    assert r.limited(Signal(None, 2.44, True, 0.5), 15.0) == pytest.approx(2.44 / 1.1)
    assert r.limited(Signal(None, 5.0, True, 0.5), 30.0) == pytest.approx(3.025 / 1.1)  # never above the ceiling


def test_a_first_burst_sets_no_hold_and_the_first_failure_at_a_set_rate_does() -> None:
    r = RateSearch()
    assert r.limited(Signal(None, 4.0, True, 0.5), 0.0) == pytest.approx(2.0)  # a cold burst: half what was sent
    r.changed = 0.0
    # Climbing to and past the burst's 4 req/s, with no wait: the burst's rate found no limit.
    assert r.clean(3.8, 1.0, W, math.inf, fast=False) == pytest.approx(3.8 * (1 + STEP))
    assert r.clean(4.2, 1.5, W, math.inf, fast=False) == pytest.approx(4.2 * (1 + STEP))
    r.limited(Signal(4.6, 4.6, False, 0.5), 2.0)  # a 429 at a rate in force: the limit
    r.changed = 2.0
    assert r.clean(4.2, 3.0, W, math.inf, fast=False) is KEEP  # held one step under it for the window
    assert r.clean(4.2, 2.0 + W + 0.1, W, math.inf, fast=False) == pytest.approx(4.2 * (1 + STEP))


def test_rate_past_what_the_pool_can_send_is_dropped() -> None:
    assert RateSearch().clean(10.0, 0.0, W, 8.0) is None


def test_slow_start_climbs_fast_until_a_limit_is_found_then_by_small_steps() -> None:
    r = RateSearch()
    assert r.starting and r.clean(2.0, 0.0, W, math.inf) == pytest.approx(2.0 * (1 + START_STEP))
    assert r.clean(2.0, 0.0, W, math.inf, fast=False) == pytest.approx(2.2)  # no slow start without adaptive mode
    r.limited(Signal(4.0, 4.0, False, 0.5), 1.0)
    assert not r.starting
    assert r.clean(3.0, 10.0, W, math.inf) == pytest.approx(3.0 * (1 + STEP))


# -- concurrency -------------------------------------------------------------


def test_concurrency_is_rate_times_latency_with_headroom_within_bounds() -> None:
    c = ConcurrencyModel()
    assert c.needed(10.0, 2, 8) == 2  # no latency measured yet: the configured value
    for _ in range(30):
        c.observe(0.2)
    assert c.latency == pytest.approx(0.2, rel=1e-3)
    assert c.needed(10.0, 2, 8) == 4  # 10 req/s x 0.2 s x 2
    assert c.needed(100.0, 2, 8) == 8
    assert c.needed(1.0, 2, 8) == 2
    assert c.needed(12.0, 2, 8, current=6) == 6  # a need of 5 is not well below 6: no flapping
    assert c.needed(5.0, 2, 8, current=6) == 2


def test_concurrency_cut_once_per_window_caps_the_derived_value_and_clean_windows_lift_it() -> None:
    c = ConcurrencyModel()
    for _ in range(30):
        c.observe(0.2)
    assert c.cut(8, 0.5, 0.0, W) == 4
    assert c.cut(4, 0.5, 1.0, W) is None  # one per window
    assert c.needed(100.0, 2, 8) == 4
    c.clean_window(4, 8)
    assert c.needed(100.0, 2, 8) == 8


def test_concurrency_cut_at_one_counts_floor_hits() -> None:
    c = ConcurrencyModel()
    assert c.cut(1, 0.5, 0.0, W) is None and c.floor_hits == 1


def test_past_the_pool_rate_the_host_rate_is_dropped_unless_a_host_wide_limit_was_met_within_the_window() -> None:
    r = RateSearch()
    assert r.clean(4.0, 0.0, W, 3.0) is None  # never limited: the rate limits nothing
    r = RateSearch()
    r.limited(Signal(None, 4.0, True, 0.5), 1.0)  # a first burst met a limit
    r.changed = 1.0
    assert r.clean(2.0, 2.0, W, 3.0) == pytest.approx(2.2)  # climbs on...
    assert r.clean(3.0, 3.0, W, 3.0) == pytest.approx(3.3)
    # ...past the burst's rate (an artefact of the burst, not a limit) and the pool's, holds there,
    # spacing requests evenly:
    assert r.clean(3.7, 4.0, W, 3.0) is KEEP
    assert r.clean(3.7, 1.0 + W, W, 3.0) is None  # a window later, dropped


# -- attribution ------------------------------------------------------------


def test_a_gap_shorter_than_every_clean_one_is_per_ip_even_when_the_host_rate_held_the_request() -> None:
    a = Attribution()
    a.clean(3.0, 0.0, W, 2.0)
    v = a.decide("e1", gap=1.4, slack=0.6, shortest_clean=2.0, sent=3.0, now=1.0, window=W)
    assert v.ambiguous  # one clean gap says little about a request the spacing did not hold
    for t in range(8):
        a.clean(3.0, 2.0 + t, W, 2.0 + t / 10)
    v = a.decide("e1", gap=1.4, slack=0.6, shortest_clean=2.0, sent=3.0, now=11.0, window=W)
    assert v.blame == PER_IP and not v.ambiguous


def test_a_clean_answer_after_a_shorter_gap_rules_the_ip_out() -> None:
    v = Attribution().decide("e1", gap=1.0, slack=0.0, shortest_clean=0.9, sent=3.0, now=5.0, window=W)
    assert v.blame == HOST


def test_without_a_known_gap_the_host_is_blamed_and_without_clean_gaps_the_slack_decides() -> None:
    a = Attribution()
    assert a.decide("e1", math.inf, math.inf, 2.0, 3.0, 0.0, W).blame == HOST
    assert a.decide("e1", 1.0, 0.0, math.inf, 3.0, 0.0, W).blame == PER_IP
    assert a.decide("e2", 1.0, 0.5, math.inf, 3.0, 0.0, W, spacing_cost=0.2, rate_cost=0.09).blame == HOST


def test_with_no_clean_gap_yet_a_request_the_host_rate_held_probes_a_raise_that_costs_nothing() -> None:
    # A 0.5 req/s per-IP site under a slow start: the host rate held a 1.12 s gap inside the
    # 0.8-1.6 s band a little past its spacing. Just above the gap costs no throughput.
    a = Attribution()
    v = a.decide("e1", 1.12, 0.11, math.inf, 5.0, 1.5, W, spacing_cost=0.0, rate_cost=0.09)
    assert v.blame == PER_IP and v.ambiguous and "not held" in v.why
    # Costly, the host rate is stepped down instead.
    assert a.decide("e2", 2.7, 1.3, math.inf, 3.0, 1.6, W, spacing_cost=0.3, rate_cost=0.09).blame == HOST


def test_a_new_rate_high_with_429s_across_ips_in_a_moment_is_host_wide() -> None:
    a = Attribution()
    a.clean(3.0, 0.0, W)
    assert a.decide("e1", 1.0, 0.0, 2.0, 4.0, 1.0, W).ambiguous
    v = a.decide("e2", 1.0, 0.0, 2.0, 4.0, 1.2, W)
    assert v.blame == HOST and not v.ambiguous


def test_ambiguity_probes_the_cheaper_remedy_and_a_repeat_on_the_ip_after_a_rate_cut_points_at_it() -> None:
    a = Attribution()
    a.clean(3.0, 0.0, W)
    first = a.decide("e1", 1.0, 0.0, 2.0, 4.0, 1.0, W, spacing_cost=0.0, rate_cost=0.1)
    assert first.ambiguous and first.blame == PER_IP
    b = Attribution()
    b.clean(3.0, 0.0, W)
    first = b.decide("e1", 1.0, 0.0, 2.0, 4.0, 1.0, W, spacing_cost=0.3, rate_cost=0.1)
    assert first.ambiguous and first.blame == HOST
    second = b.decide("e1", 1.0, 0.0, 2.0, 4.0, 5.0, W, spacing_cost=0.3, rate_cost=0.1)
    assert second.ambiguous and second.blame == PER_IP


def test_a_costly_spacing_raise_needs_the_spacing_to_have_held_the_request() -> None:
    a = Attribution()
    for t in range(10):
        a.clean(3.0, float(t), W, 3.0 + t / 10)
    assert a.decide("e1", 2.7, 1.3, 3.0, 3.0, 11.0, W, spacing_cost=0.14, rate_cost=0.09).blame == HOST
    assert a.decide("e2", 2.7, 0.0, 3.0, 3.0, 12.0, W, spacing_cost=0.14, rate_cost=0.09).blame == PER_IP


def test_a_held_request_with_few_clean_gaps_is_ambiguous_when_the_raise_is_costly() -> None:
    # 4 IPs under a 3 req/s cap: a 1.47 s gap fails after three clean ones of 1.5 s and more.
    a = Attribution()
    for t, gap in enumerate((1.5, 1.6, 1.9)):
        a.clean(3.0, t * 0.3, W, gap)
    v = a.decide("e1", 1.47, 0.05, 1.5, 3.0, 1.0, W, spacing_cost=0.16, rate_cost=0.09)
    assert v.ambiguous and v.blame == HOST
    assert a.decide("e2", 1.47, 0.05, 1.5, 3.0, 1.1, W, spacing_cost=0.0, rate_cost=0.09).blame == PER_IP  # cheap


def test_a_429_well_below_a_rate_the_host_answered_cleanly_is_per_ip_unless_a_gap_as_short_was_clean() -> None:
    # 8 IPs' first requests went through at 7.6 req/s; their second ones, 1.5 s later, fail at 5 req/s
    # although the host rate held them (slack): a host-wide cap does not explain it, the IPs' gaps do.
    a = Attribution()
    for t in range(8):
        a.clean(7.6, t * 0.13, W)
    a.decide("e9", math.inf, math.inf, math.inf, 7.6, 1.2, W)  # a first request failed too
    v = a.decide("e1", 1.5, 0.3, math.inf, 5.0, 1.5, W, spacing_cost=0.5, rate_cost=0.09)
    assert v.blame == PER_IP and "7.60 req/s cleanly" in v.why
    assert a.decide("e2", 1.5, 0.3, math.inf, 6.9, 1.6, W, spacing_cost=0.5).blame == HOST  # within two rate steps
    # The rate sent over the last seconds lags behind cuts: the host rate in force bounds it.
    assert a.decide("e4", 1.5, 0.3, math.inf, 6.9, 1.65, W, rate=3.1).blame == PER_IP
    # A cap that fell (the host answered 7.6 req/s and now 429s at 5): gaps as short were clean.
    assert a.decide("e3", 1.5, 0.3, 1.4, 5.0, 1.7, W).blame == HOST


def test_first_requests_clean_and_a_repeat_failing_at_their_rate_points_at_the_ip() -> None:
    # A 0.5 req/s per-IP site in slow start: 7 IPs' first requests went through at up to 4.8 req/s;
    # an IP's second one, 1.6 s later and not held by its spacing, fails at 5.7 req/s. A raise above
    # 1.6 s would give up 30 % of the pool's rate, a rate step 9 %, but only the gap differs.
    a = Attribution()
    for i, rate in enumerate((1.0, 2.0, 3.0, 4.0, 4.3, 4.5, 4.8)):
        a.clean(rate, i * 0.2, W)
    v = a.decide("e1", 1.6, 0.4, math.inf, 5.7, 1.6, W, spacing_cost=0.3, rate_cost=0.09)
    assert v.blame == PER_IP and not v.ambiguous and "first requests" in v.why  # within two rate steps
    # At a rate well past the first requests' (a host rate climbing onto a cap), the rate may be the cause.
    assert a.decide("e2", 1.6, 0.4, math.inf, 5.9, 1.7, W, spacing_cost=0.3, rate_cost=0.09).blame == HOST
    # A raise that would give up most of the host's throughput (a gap far past the spacing) needs more.
    assert a.decide("e4", 1.6, 0.4, math.inf, 5.0, 1.8, W, spacing_cost=0.6, rate_cost=0.09).blame == HOST
    # Too few first requests say little.
    b = Attribution()
    for i in range(2):
        b.clean(4.8, i * 0.2, W)
    assert b.decide("e1", 1.6, 0.4, math.inf, 5.0, 1.6, W, spacing_cost=0.3, rate_cost=0.09).blame == HOST
    # A first request limited too: the rate may be the cause.
    c = Attribution()
    for i in range(7):
        c.clean(4.8, i * 0.2, W)
    c.decide("e0", math.inf, math.inf, math.inf, 4.8, 1.5, W)
    assert c.decide("e1", 1.6, 0.4, math.inf, 5.0, 1.6, W, spacing_cost=0.3, rate_cost=0.09).blame == HOST
    # Another process sharing the host got a host-wide signal: its first requests may have failed.
    d = Attribution()
    for i in range(7):
        d.clean(4.8, i * 0.2, W)
    d.limited_elsewhere(1.4)
    assert d.decide("e1", 1.6, 0.4, math.inf, 5.0, 1.6, W, spacing_cost=0.3, rate_cost=0.09).blame == HOST
    d.limited_elsewhere(-math.inf)  # none: what it knew stays
    assert d.first_limited == 1.4
    # Once out of the window, neither counts.
    assert a.decide("e3", 1.6, 0.4, math.inf, 5.0, 30.0, W, spacing_cost=0.3, rate_cost=0.09).blame == HOST


def test_a_first_request_limited_with_one_the_first_requests_rule_blamed_on_its_ip_unfounds_the_blame() -> None:
    # A 429 comes back before the pages asked for with it: the rule blamed an IP's gap while a first
    # request sent at the same moment was still on its way to its 429. Once it is back, the rule had no
    # ground (none limited, it says), and the raise it made is the one to take back.
    a = Attribution()
    for i in range(7):
        a.clean(4.8, i * 0.2, W)
    v = a.decide("e1", 1.6, 0.4, math.inf, 5.0, 1.6, W, spacing_cost=0.3, rate_cost=0.09, granted_at=1.55)
    assert v.blame == PER_IP and "first requests" in v.why
    v = a.decide("e2", math.inf, math.inf, math.inf, 5.0, 1.61, W, granted_at=1.56)
    assert v.blame == HOST and v.unfounded == (1.55,)
    # Answered for once; a first request limited a while later says nothing of that blame.
    assert a.decide("e3", math.inf, math.inf, math.inf, 5.0, 1.62, W, granted_at=1.57).unfounded == ()
    b = Attribution()
    for i in range(7):
        b.clean(4.8, i * 0.2, W)
    b.decide("e1", 1.6, 0.4, math.inf, 5.0, 1.6, W, spacing_cost=0.3, rate_cost=0.09, granted_at=1.55)
    assert b.decide("e2", math.inf, math.inf, math.inf, 5.0, 4.0, W, granted_at=3.9).unfounded == ()


class _Preset(Attribution):
    """Attribution whose next signals get preset verdicts, in order: the rule under test, not the evidence."""

    __slots__ = ("verdicts",)

    def __init__(self, *verdicts: Verdict) -> None:
        super().__init__()
        self.verdicts = list(verdicts)

    def decide(self, *args: object, **kwargs: object) -> Verdict:
        return self.verdicts.pop(0)


def _verdicts(p: ThrottlePolicy, host: str, *verdicts: Verdict) -> None:
    p._policy(host).attribution = _Preset(*verdicts)


def _climbing(*verdicts: Verdict):
    """An adaptive policy whose host "a" climbs its slow start on six clean answers, its next signals
    getting *verdicts*; also returns the gate's endpoints."""
    p, gate, ft, changes = policy(True)
    for _ in range(6):
        p.ok("a", 200, gap=1.0, granted_at=ft.now)
        ft.advance(0.2)
    _verdicts(p, "a", *verdicts)
    return p, gate, ft, changes, [st.endpoint for st in gate.endpoints.values()]


def test_host_rate_cuts_whose_429s_came_at_ip_gaps_a_spacing_raise_keeps_apart_are_taken_back() -> None:
    # A crawl's first 429s, before the spacing finds a per-IP limit, may look host-wide (several IPs at
    # once while the rate climbs): the cuts they made held the host at a fraction of what its IPs allow.
    p, gate, ft, changes, eps = _climbing(Verdict(HOST, "host"), Verdict(HOST, "host"), Verdict(PER_IP, "ip"))
    climbed = gate.host("a").interval
    p.rate_limited("a", eps[0], 2.0, gap=0.8, slack=0.0, granted_at=ft.now - 0.1)
    ft.advance(0.1)
    p.rate_limited("a", eps[1], 2.0, gap=0.9, slack=0.0, granted_at=ft.now - 0.1)
    assert gate.host("a").interval > climbed * 1.5
    ft.advance(0.3)
    p.rate_limited("a", eps[2], 2.0, gap=0.95, slack=0.0, granted_at=ft.now - 0.1)  # per-IP: above 0.95 now
    assert gate.host("a").delay[0] > 0.95
    assert gate.host("a").interval == pytest.approx(climbed)
    assert "IP gaps the spacing now keeps apart" in changes[-1][3]
    assert p._policy("a").rate.starting  # the search is back in its slow start


def test_a_host_rate_cut_at_an_ip_gap_the_raised_spacing_still_allows_stays() -> None:
    p, gate, ft, changes, eps = _climbing(Verdict(HOST, "host"), Verdict(HOST, "host"), Verdict(PER_IP, "ip"))
    p.rate_limited("a", eps[0], 2.0, gap=0.8, slack=0.0, granted_at=ft.now - 0.1)
    ft.advance(0.1)
    p.rate_limited("a", eps[1], 2.0, gap=1.6, slack=0.0, granted_at=ft.now - 0.1)  # a gap no spacing explains
    cut = gate.host("a").interval
    ft.advance(0.3)
    p.rate_limited("a", eps[2], 2.0, gap=0.95, slack=0.0, granted_at=ft.now - 0.1)
    assert 0.95 < gate.host("a").delay[0] < 1.6
    assert gate.host("a").interval == cut
    assert not any("keeps apart" in c[3] for c in changes)


def test_an_ambiguous_per_ip_probe_takes_no_host_rate_cut_back() -> None:
    p, gate, ft, changes, eps = _climbing(Verdict(HOST, "host"), Verdict(PER_IP, "probe", ambiguous=True))
    p.rate_limited("a", eps[0], 2.0, gap=0.8, slack=0.0, granted_at=ft.now - 0.1)
    cut = gate.host("a").interval
    ft.advance(0.4)
    p.rate_limited("a", eps[1], 2.0, gap=0.9, slack=0.0, granted_at=ft.now - 0.1)
    assert gate.host("a").delay[0] > 0.9 and gate.host("a").interval == cut


def _slow_start_run(p: ThrottlePolicy, gate, ft, gaps: tuple[float, ...]) -> Endpoint:
    """An IP's run from its first request at *gaps*, then a 429 at 0.54 s with the band at 0.52-0.54 s."""
    ep = next(iter(gate.endpoints.values())).endpoint
    gate.set_host_delay("a", (0.52, 0.54))
    for gap in (math.inf, *gaps):
        ft.advance(gap if math.isfinite(gap) else 0.1)
        p.ok("a", 200, gap=gap, endpoint=ep.key, granted_at=ft.now - 0.1)
    ft.advance(0.54)
    p.rate_limited("a", ep, 2.0, gap=0.54, slack=0.0, granted_at=ft.now - 0.1)
    return ep


def test_a_429_at_about_the_shortest_gap_its_run_was_answered_at_raises_just_above_that_gap() -> None:
    # A run from the IP's first request, at a slow start's long gaps, then at the narrowed band, ends in a
    # 429 at 0.54 s, 3% over a gap it was answered at (the site counts gaps between arrivals, tens of
    # milliseconds off those sent). A bucket of one met a little early explains it: the run's time, most
    # of which its bucket sat full, says nothing (as a burst spent it said 0.8 s, where the spacing stayed
    # for a recovery window: 0.6 of a 2 req/s site).
    p, gate, ft, changes = policy(True)
    _slow_start_run(p, gate, ft, (1.134, 1.153, 1.015, 0.526, 0.614))
    assert gate.host("a").delay[0] == pytest.approx(0.54 * (1 + MARGIN))
    assert "allowance spent" in changes[-1][4]["why"]
    assert p._policy("a").spacing.bad_gap == pytest.approx(0.54)


def test_a_bound_an_ips_run_derived_far_above_its_failing_gap_holds_the_raise_but_not_the_narrowing() -> None:
    # The same run, with a gap clearly shorter answered in it (a burst): counted with the time its bucket
    # sat full, the run says its allowance needs about 1 s a request. The raise goes there; the narrowing
    # may come back down after its hold (it stayed above 1 s for a recovery window, half the site's limit).
    p, gate, ft, changes = policy(True)
    _verdicts(p, "a", Verdict(PER_IP, "run", drained=True))
    _slow_start_run(p, gate, ft, (1.134, 1.153, 1.015, 0.45, 0.614))
    assert gate.host("a").delay[0] > 0.95
    assert p._policy("a").spacing.bad_gap == pytest.approx(0.54)
    end = ft.now + 15.0  # clean answers at the band in force, past the hold, within a window
    while ft.now < end:
        ft.advance(gate.host("a").delay[1] + 0.05)
        p.ok("a", 200, gap=gate.host("a").delay[0], granted_at=ft.now - 0.05)
    assert 0.54 < gate.host("a").delay[0] < 0.62


def test_a_raise_after_a_failing_gap_was_known_bisects_toward_the_clean_gap_and_the_first_goes_to_it() -> None:
    s = SpacingEstimator()
    s.clean(1.14, 0.0, W)
    band = s.raised(0.83, (0.8, 0.85), 10.0, True, 1.0, W)  # the first failure: back to the clean gap
    assert band is not None and band[0] == pytest.approx(1.14)
    band = s.narrowed(band, s.floor(0.2), 5.0, W)
    assert band is not None and band[0] < 1.0
    # A narrowing between a failing gap and a clean one failed at 1.0 s: the limit lies between 1.0 and
    # 1.14 s, and the raise goes halfway (at most a BISECT_STEP under the clean gap), not back to 1.14 s.
    band = s.raised(1.0, band, 10.0, True, 6.0, W)
    assert band is not None
    assert band[0] == pytest.approx(min(1.14 * BISECT_STEP, (1.14 + 1.0 * (1 + MARGIN)) / 2))
    # Close under the clean gap (within CLOSE), it is taken as it is.
    t = SpacingEstimator()
    t.clean(1.05, 0.0, W)
    t.raised(0.9, (0.85, 0.9), 10.0, True, 1.0, W)
    assert t.raised(1.0, (0.99, 1.0), 10.0, True, 6.0, W)[0] == pytest.approx(1.05)


def test_a_first_request_limited_with_it_takes_back_the_raise_the_first_requests_rule_made() -> None:
    p, gate, ft, changes = policy(True)
    eps = [st.endpoint for st in list(gate.endpoints.values())[:8]]
    for ep in eps[:7]:  # seven IPs' first requests, clean
        p.ok("a", 200, endpoint=ep.key, granted_at=ft.now)
        ft.advance(0.25)
    before = gate.host("a").delay
    p.rate_limited("a", eps[0], 2.0, gap=1.75, slack=0.5, granted_at=ft.now - 0.01)
    assert gate.host("a").delay[0] > before[0] and "first requests" in changes[-1][4]["why"]
    p.rate_limited("a", eps[7], 2.0, granted_at=ft.now - 0.01)  # the eighth IP's first request, sent with it
    assert gate.host("a").delay == before and "spacing back" in changes[-1][3]


def test_with_no_clean_gap_yet_a_held_request_is_per_ip_unless_the_raise_costs_more_than_a_rate_cut() -> None:
    # Early in a crawl no IP has a clean gap: a per-IP limit and a host-wide one both hit held requests.
    cheap = Attribution().decide("e1", 0.85, 0.0, math.inf, 5.0, 1.0, W, spacing_cost=0.0, rate_cost=0.1)
    assert cheap.blame == PER_IP and not cheap.ambiguous
    # Raising 4 IPs' spacing 50% would give up 43% of the host's rate; a rate step gives up 9%.
    a = Attribution()
    costly = a.decide("e1", 1.4, 0.0, math.inf, 2.95, 1.5, W, spacing_cost=0.43, rate_cost=0.09)
    assert costly.blame == HOST and costly.ambiguous
    # The same IP limited again after the host rate was tried: the IP.
    again = a.decide("e1", 1.4, 0.0, math.inf, 2.7, 4.0, W, spacing_cost=0.43, rate_cost=0.09)
    assert again.blame == PER_IP


# -- composition -------------------------------------------------------------


def policy(adaptive: bool = True, n: int = 8, **settings: object):
    cfg = config(POLITE_ADAPTIVE=adaptive, POLITE_RECOVERY_WINDOW=20, **settings)
    gate, ft = make_gate(n=n, host_concurrency=cfg.host_concurrency, delay=cfg.delay)
    changes: list = []
    return ThrottlePolicy(cfg, gate, clock=ft.clock, notify=lambda *a: changes.append(a)), gate, ft, changes


@pytest.mark.parametrize("adaptive", [False, True])
def test_a_per_ip_signal_never_cuts_concurrency(adaptive: bool) -> None:
    p, gate, ft, _ = policy(adaptive)
    ep = next(iter(gate.endpoints.values())).endpoint
    p.ok("a", 200, gap=2.0, granted_at=ft.now)
    before = gate.host("a").limit
    p.rate_limited("a", ep, 2.0, gap=1.0, slack=0.0, granted_at=ft.now)
    assert gate.host("a").delay[0] > 1.0
    assert gate.host("a").limit == before


def test_only_host_wide_signals_hold_the_other_processes_host_rate() -> None:
    # With a shared state, the gate times a host's signals fleet-wide: other processes hold their host-rate
    # climb after one. A per-IP 429 (the IP's spacing answers for it) must not stop the fleet's rate.
    p, gate, ft, _ = policy(True)
    shared: list[str] = []
    gate.signal_host = lambda host, failed=None, found=False: shared.append(host)
    ep = next(iter(gate.endpoints.values())).endpoint
    p.ok("a", 200, gap=2.0, granted_at=ft.now)
    p.rate_limited("a", ep, 2.0, gap=1.0, slack=0.0, granted_at=ft.now)  # per-IP: shorter than a clean gap
    assert shared == []
    ft.advance(1.0)
    other = list(gate.endpoints.values())[1].endpoint
    p.rate_limited("a", other, 2.0, granted_at=ft.now)  # no gap known: the host
    assert shared == ["a"]


@pytest.mark.parametrize("elsewhere", [False, True])
def test_another_processs_host_signal_keeps_first_requests_from_pointing_at_the_ips(elsewhere: bool) -> None:
    # Four IPs' first requests went through here; another process sharing the host may have had
    # its own first requests limited (its host signal says so much): the rule has no ground there.
    p, gate, ft, changes = policy(True)
    gate.signal_host = lambda host, failed=None, found=False: None
    gate.last_signal = lambda host: HostSignal(ft.now - 0.2) if elsewhere else NO_SIGNAL
    eps = [st.endpoint for st in gate.endpoints.values()]
    for _ in range(4):
        ft.advance(0.2)
        gate.host("a").grants += 1
        p.ok("a", 200, granted_at=ft.now - 0.1)
    ft.advance(0.2)
    p.rate_limited("a", eps[0], 2.0, gap=1.0, slack=0.5, granted_at=ft.now - 0.1)
    assert ("first requests" in changes[-1][4]["why"]) is not elsewhere


def test_a_host_signal_read_back_from_the_shared_state_is_this_processs_own_and_holds_nothing() -> None:
    # Through Redis a process reads its own host signal back (on its clock, a moment later). Taken
    # for another process's, it held this process's climb for a whole hold: one process through
    # Redis sat at 2.14 req/s for 13 s under a 3 req/s cap after its first burst.
    p, gate, ft, _ = policy(False, POLITE_HOST_PAUSE_ENDPOINTS=2)
    signals: list[float] = []
    gate.signal_host = lambda host, failed=None, found=False: signals.append(ft.now)
    gate.last_signal = lambda host: HostSignal(signals[-1] + 0.05) if signals else NO_SIGNAL
    eps = [st.endpoint for st in gate.endpoints.values()]
    p.ok("a", 200)
    ft.advance(2.0)
    gate.host("a").grants += 8  # a first burst of 4 req/s
    for ep in eps[:2]:
        p.rate_limited("a", ep, 2.0, granted_at=ft.now)
    assert 1 / gate.host("a").interval == pytest.approx(2.0)  # half what was sent
    ft.advance(2.5)
    for _ in range(12):
        ft.advance(0.5)
        p.ok("a", 200, granted_at=ft.now - 0.1)
    assert 1 / gate.host("a").interval > 4.4  # climbed on past the burst's rate
    # Another process's signal (not this one's): the climb holds.
    climbed = gate.host("a").interval
    signals.append(ft.now)
    ft.advance(0.5)
    p.ok("a", 200, granted_at=ft.now - 0.1)
    assert gate.host("a").interval == climbed


def test_a_host_rate_change_carries_what_the_search_knows_of_the_limit() -> None:
    p, gate, ft, changes = policy(True)
    eps = [st.endpoint for st in gate.endpoints.values()]
    for _ in range(6):  # slow start: clean answers climb the host rate
        ft.advance(0.3)
        gate.host("a").grants += 1
        p.ok("a", 200, granted_at=ft.now - 0.1)
    assert changes and all("host_limit" not in c[4] for c in changes)  # nothing known of a limit yet
    rate = min(1 / gate.host("a").interval, len(eps) / 1.2)  # the host rate, or what the pool sends at its spacing
    ft.advance(0.3)
    # No gap known (the endpoint's first request to the host): the gate's slack measured nothing.
    p.rate_limited("a", eps[0], 2.0, slack=11814.0, granted_at=ft.now - 0.1)
    evidence = changes[-1][4]
    assert evidence["blame"] == HOST and evidence["gap"] is None and evidence["slack"] is None
    assert evidence["host_limit"]["ceiling"] == pytest.approx(rate, rel=1e-3)
    assert evidence["host_limit"]["holds_below"] == pytest.approx(rate, rel=1e-3)
    assert evidence["host_limit"]["hold"] == HOLD_FIRST and evidence["host_limit"]["fell_from"] is None
    text = evidence_text(evidence)
    assert "gap never, Retry-After 2 s" in text and f"host limit met at {rate:.2f} req/s" in text and f"holds below {rate:.2f} req/s for {HOLD_FIRST:g} s, then probes past it" in text


def test_the_log_line_tells_a_fallen_limit_and_a_clean_answers_host_limit() -> None:
    limit = {"ceiling": 2.2, "fell_from": 6.6, "holds_below": 2.2, "hold": 3.0}
    assert evidence_text({"status": 200, "gap": 0.5, "host_limit": limit}) == (
        "; host limit met at 2.20 req/s, down from 6.60; holds below 2.20 req/s for 3 s, then probes past it")
    assert evidence_text({"status": 200, "gap": 0.5}) == ""
    probing = {"ceiling": 2.2, "fell_from": None, "holds_below": None, "hold": None}
    assert evidence_text({"host_limit": probing}) == "; host limit met at 2.20 req/s"


def answers_at_quarter_second_latency(p, gate, ft) -> None:
    """Clean answers 0.25 s after their grant, the host rate then lifted: concurrency follows the pool."""
    for _ in range(40):
        ft.advance(0.05)
        p.ok("a", 200, granted_at=ft.now - 0.25)
    gate.set_host_interval("a", 0.0)
    ft.advance(0.05)
    p.ok("a", 200, granted_at=ft.now - 0.25)


def test_adaptive_concurrency_follows_rate_and_latency() -> None:
    # 8 endpoints at 0.5 s: 16 req/s
    p, gate, ft, _ = policy(True, POLITE_HOST_CONCURRENCY_MAX=16, POLITE_DELAY=(0.5, 0.5), POLITE_DELAY_FLOOR=0.5)
    answers_at_quarter_second_latency(p, gate, ft)
    assert gate.host("a").limit == 8  # 16 req/s x 0.25 s x 2


def test_each_host_is_found_independently() -> None:
    p, gate, ft, _ = policy(True)
    eps = [st.endpoint for st in gate.endpoints.values()]
    for host in ("slow", "fast"):
        p.ok(host, 200, gap=3.0, granted_at=ft.now)
    fast = gate.host("fast").delay, gate.host("fast").interval
    p.rate_limited("slow", eps[0], 4.0, gap=1.2, slack=0.0, granted_at=ft.now)
    assert gate.host("slow").delay[0] > 1.2
    assert (gate.host("fast").delay, gate.host("fast").interval) == fast  # its slow start, untouched


def test_adaptive_mode_does_not_pause_a_host_whose_rate_is_in_force() -> None:
    p, gate, ft, _ = policy(True, POLITE_HOST_PAUSE_ENDPOINTS=2)
    eps = [st.endpoint for st in gate.endpoints.values()]
    p.ok("a", 200)
    assert gate.host("a").interval > 0
    for ep in eps[:3]:
        p.rate_limited("a", ep, 2.0, granted_at=ft.now)
    assert gate.host("a").paused_until < ft.now


def test_adaptive_mode_sets_a_host_rate_instead_of_pausing_a_host_that_had_none() -> None:
    # A host whose rate went past what the pool can send has none: 429s on several IPs at once
    # set one under what was sent, and the host is not paused (its per-IP limits go on answering).
    p, gate, ft, _ = policy(True, POLITE_HOST_PAUSE_ENDPOINTS=2)
    eps = [st.endpoint for st in gate.endpoints.values()]
    p.ok("a", 200)
    gate.set_host_interval("a", 0.0)
    ft.advance(2.0)
    gate.host("a").grants += 12  # 6 req/s sent over the last 2 s
    for ep in eps[:3]:
        p.rate_limited("a", ep, 2.0, granted_at=ft.now)
    assert gate.host("a").paused_until < ft.now
    assert 0 < 1 / gate.host("a").interval < 6.0
    # Nothing measured sent, no rate to set: the pause is what answers.
    q, qgate, qft, _ = policy(True, POLITE_HOST_PAUSE_ENDPOINTS=2)
    q.ok("a", 200)
    qgate.set_host_interval("a", 0.0)
    for ep in [st.endpoint for st in qgate.endpoints.values()][:2]:
        q.rate_limited("a", ep, 2.0, granted_at=qft.now)
    assert qgate.host("a").interval == 0 and qgate.host("a").paused_until == pytest.approx(qft.now + 2.0)
    # Without adaptive mode the host is paused for the Retry-After.
    d, dgate, dft, _ = policy(False, POLITE_HOST_PAUSE_ENDPOINTS=2)
    for ep in [st.endpoint for st in dgate.endpoints.values()][:2]:
        d.rate_limited("a", ep, 2.0, granted_at=dft.now)
    assert dgate.host("a").paused_until == pytest.approx(dft.now + 2.0)


def test_a_429_sent_before_a_climb_cuts_the_rate_and_one_sent_before_a_cut_is_answered_for(
    caplog: pytest.LogCaptureFixture,
) -> None:
    p, gate, ft, _ = policy(True)
    eps = [st.endpoint for st in gate.endpoints.values()]
    p.ok("a", 200, granted_at=ft.now)  # slow start: a host rate
    sent = ft.now
    ft.advance(0.5)
    p.ok("a", 200, granted_at=ft.now - 0.1)  # a clean answer at that rate: it climbs
    climbed = gate.host("a").interval
    ft.advance(0.5)
    # Sent before the climb, at a slower rate than the one in force now: the limit is below it.
    p.rate_limited("a", eps[0], 2.0, granted_at=sent)
    cut = gate.host("a").interval
    assert cut > climbed
    ft.advance(0.1)
    with caplog.at_level(logging.DEBUG, logger="scrapy_polite.throttle.policy"):
        p.rate_limited("a", eps[1], 2.0, granted_at=sent + 0.2)  # sent before the cut: already answered for
    assert gate.host("a").interval == cut
    assert [r.getMessage() for r in caplog.records] == [
        f"scrapy-polite: a 429 via {eps[1].label} answered for by the host rate cut since it was sent "
        f"(host rate now {1 / cut:.2f} req/s)"]
    ft.advance(1.0)
    p.rate_limited("a", eps[2], 2.0, granted_at=ft.now - 0.2)  # sent at the cut rate: cut again
    assert gate.host("a").interval > cut


def test_a_host_rate_above_what_the_pool_sends_is_cut_from_what_the_pool_sends() -> None:
    # 8 endpoints at a 1 s spacing send 8 req/s: a host rate of 10 binds nothing, and a cut
    # from 10 would not either.
    p, gate, ft, _ = policy(True, POLITE_DELAY=(1.0, 1.0), POLITE_DELAY_FLOOR=1.0)
    ep = next(iter(gate.endpoints.values())).endpoint
    p.ok("a", 200)
    gate.set_host_interval("a", 0.1)
    ft.advance(1.0)
    p.rate_limited("a", ep, 2.0, granted_at=ft.now)  # no gap known: the host
    assert 1 / gate.host("a").interval < 8.0


def test_a_host_rate_step_is_weighed_at_what_it_gives_up_where_it_binds() -> None:
    # Weighed against a spacing raise, a host-rate step costs a step of the rate in effect,
    # even when the host rate is above what the pool sends (cutting it there would cost nothing).
    p, gate, ft, changes = policy(True, POLITE_DELAY=(1.0, 1.6))
    eps = [st.endpoint for st in gate.endpoints.values()]
    p.ok("a", 200)
    gate.set_host_interval("a", 0.05)  # 20 req/s; the pool sends about 6
    changes.clear()
    p.rate_limited("a", eps[0], 2.0, gap=1.5, slack=0.0, granted_at=ft.now)  # held, no clean gap: ambiguous
    assert "host rate 9%" in changes[-1][4]["why"]


def test_every_change_is_notified_once_with_its_evidence() -> None:
    p, gate, ft, changes = policy(True)
    ep = next(iter(gate.endpoints.values())).endpoint
    p.ok("a", 200, gap=3.0, granted_at=ft.now)
    changes.clear()
    p.rate_limited("a", ep, 2.0, gap=1.0, slack=0.3, granted_at=ft.now)
    assert len(changes) == 1
    evidence = changes[0][4]
    assert evidence["blame"] == PER_IP and evidence["why"] and evidence["gap"] == 1.0


def test_a_challenge_halves_the_host_rate_and_cuts_concurrency_in_adaptive_mode_too() -> None:
    p, gate, ft, changes = policy(True, POLITE_HOST_CONCURRENCY=4)
    ep = next(iter(gate.endpoints.values())).endpoint
    p.ok("a", 200)
    rate = 1 / gate.host("a").interval
    p.on_challenge("a", ep, 5.0)
    assert 1 / gate.host("a").interval == pytest.approx(rate / 2)
    assert gate.host("a").limit == 2
    assert changes[-1][4]["why"] == "challenge page"
    assert changes[-1][4]["concurrency"] == "cut"


def test_endpoints_that_fall_due_together_get_a_slot_each_and_a_wide_band_needs_few() -> None:
    # 8 endpoints at 0.5 s and 0.25 s latency: 8 in flight (the pool's size, under the max of 16).
    p, gate, ft, changes = policy(True, POLITE_HOST_CONCURRENCY=1, POLITE_HOST_CONCURRENCY_MAX=16,
                                  POLITE_DELAY=(0.5, 0.5), POLITE_DELAY_FLOOR=0.5)
    ep = next(iter(gate.endpoints.values())).endpoint
    answers_at_quarter_second_latency(p, gate, ft)
    assert gate.host("a").limit == 8
    # A per-IP raise to a narrow band above 2 s: the pool still comes due in step, and an endpoint
    # concurrency held back would wait a latency on top of its spacing. Nothing is cut.
    p.rate_limited("a", ep, 2.0, gap=2.0, slack=0.0, granted_at=ft.now)
    assert gate.host("a").delay[0] >= 2.0 and gate.host("a").limit == 8
    # A band 4 s wide spreads the pool: 2 req/s due at 0.25 s latency need 1, the configured value.
    changes.clear()
    gate.set_host_delay("a", (4.0, 8.0))
    ft.advance(0.1)
    p.ok("a", 200, granted_at=ft.now - 0.25)
    assert gate.host("a").limit == 1
    (_, old, new, _, evidence), = changes
    assert old["concurrency"] == 8 and evidence["concurrency"] == "fit"


def test_a_rate_cut_by_another_process_is_held_under_as_this_searchs_own() -> None:
    r = RateSearch()
    r.follow(4.0, 0.0)  # the rate in force when this process met the host
    assert r.starting
    assert r.follow(3.0, 1.0)  # another process met the limit at 4 and cut to 3
    assert not r.starting and r.bad == 4.0 and r.ceiling.level == 4.0 and r.changed == 1.0
    # Held one step under the rate that failed for the hold, as after its own signal; then a probe.
    assert r.clean(3.0, 2.0, W, math.inf, fast=False) == pytest.approx(3.0 * (1 + STEP))
    assert r.clean(3.7, 3.0, W, math.inf, fast=False) is KEEP  # a step under 4
    assert r.clean(3.7, 1.0 + W + 0.1, W, math.inf, fast=False) == pytest.approx(3.7 * (1 + STEP))
    # A rate raised elsewhere only restarts the round; no change, nothing learned.
    assert r.follow(5.0, 30.0) and r.changed == 30.0 and r.bad is None
    assert not r.follow(5.0, 31.0) and r.changed == 30.0


def test_a_cut_elsewhere_from_the_known_ceiling_doubles_the_hold_here_as_a_probe_of_its_own_would() -> None:
    # Four processes on a steady 3 req/s cap: each probed on its own hold, 15 429s against one
    # process's 6. Another process's probe that met the ceiling again counts here too.
    r = RateSearch()
    r.follow(2.9, 0.0)
    r.clean(2.9, 0.5, W, math.inf, fast=False)
    r.limited(Signal(3.03, 3.03, False, 0.5), 1.0)  # this process found the ceiling at 3.03
    r.seen = 2.75
    first = r.ceiling.hold(W)
    assert r.follow(3.03, 8.0)  # another process's probe ...
    assert r.follow(2.88, 8.5)  # ... met it again and cut
    assert r.ceiling.confirmed == 1 and r.ceiling.hold(W) == 4 * first and r.ceiling.peak == pytest.approx(3.03)
    assert r.follow(1.5, 20.0) and r.ceiling.confirmed == 1  # a cut from far under it is no probe of it
    assert r.follow(1.0, 25.0) and r.ceiling.fallen  # the limit fell there: here too, its probes come often


def test_a_failure_another_process_met_is_held_under_as_this_searchs_own_and_a_newer_own_one_stays() -> None:
    r = RateSearch()
    r.follow(2.0, 0.0)
    r.learn(3.0, True, 1.0)  # another process met the cap at 3 req/s
    assert r.bad == 3.0 and r.bad_found and r.last_limited == 1.0
    assert r.clean(2.8, 2.0, W, math.inf, fast=False) is KEEP  # a step under it: hold
    assert r.clean(2.5, 2.5, W, math.inf, fast=False) == pytest.approx(3.0 / 1.1)  # further under: climb to it
    r.limited(Signal(2.9, 2.9, False, 0.5), 5.0)  # a failure of its own, later
    own = r.bad
    r.learn(1.5, True, 4.0)  # older than this search's own: nothing
    assert r.bad == own
    r.learn(1.5, False, 6.0)  # newer: taken, with what it says of the limit
    assert r.bad == 1.5 and not r.bad_found
    r.bad = 2.0
    r.learn(1.5, False, 6.0)  # the same signal, seen again: taken once
    assert r.bad == 2.0


def test_what_a_signal_met_is_shared_even_when_this_search_takes_it_for_noise() -> None:
    # A failure under the ceiling is forgiven once per hold here (``bad`` stays above it), but the
    # rate was cut: shared as the higher ``bad``, it let another process climb back past the rate
    # that had just failed (four processes, adaptive, 3 req/s cap: 3.91 shared for a 429 at 3.12).
    r = RateSearch()
    r.follow(3.91, 0.0)
    r.limited(Signal(3.91, 3.91, False, 0.5), 1.0)
    assert r.met == (3.91, True)
    r.follow(3.125, 2.0)
    r.limited(Signal(3.125, 3.125, False, 0.5), 3.0)
    assert r.bad == 3.91 and r.met == (3.125, True)


def test_a_rate_past_the_pool_stays_through_the_window_after_a_limit_met_elsewhere() -> None:
    # A fleet's host rate above what the pool sends: the process that met the cap keeps it through
    # the window (see rate.clean); one that only followed the cut must not drop it at the hold's end.
    r = RateSearch()
    r.follow(5.0, 0.0)
    r.follow(4.6, 1.0)  # another process cut from 5 req/s ...
    r.learn(5.0, True, 1.0)  # ... and said so
    after_hold = 1.0 + r.ceiling.hold(W) + 0.1
    assert r.clean(4.6, after_hold, W, 3.0) is KEEP
    assert r.clean(4.6, 1.0 + W + 0.1, W, 3.0) is None  # a window later, it limits nothing


def shared_host_policies(n: int = 2):
    """*n* throttles on one gate: a fleet whose host rate is one shared value, as through Redis."""
    cfg = config(POLITE_ADAPTIVE=True, POLITE_RECOVERY_WINDOW=20)
    gate, ft = make_gate(n=8, host_concurrency=cfg.host_concurrency, delay=cfg.delay)
    return [ThrottlePolicy(cfg, gate, clock=ft.clock) for _ in range(n)], gate, ft


def test_a_fleet_climbs_its_shared_host_rate_a_step_per_round_not_a_step_per_process() -> None:
    (a, b), gate, ft = shared_host_policies()
    a.ok("a", 200, gap=2.0, granted_at=ft.now)  # slow start sets the host rate
    b.ok("a", 200, gap=2.0, granted_at=ft.now)
    ft.advance(0.1)
    start = gate.host("a").interval
    assert start > 0
    granted = ft.now
    ft.advance(0.2)
    a.ok("a", 200, gap=2.0, granted_at=granted)  # a step up
    stepped = gate.host("a").interval
    assert stepped < start
    # b's answer was sent before a's step: it was at the old rate, and climbs nothing.
    b.ok("a", 200, gap=2.0, granted_at=granted)
    assert gate.host("a").interval == stepped
    ft.advance(0.2)
    b.ok("a", 200, gap=2.0, granted_at=ft.now - 0.1)  # sent after a's step: the fleet's next step
    assert gate.host("a").interval < stepped


def test_a_process_that_saw_no_429_holds_under_the_rate_another_cut_from() -> None:
    (a, b), gate, ft = shared_host_policies()
    ep = next(iter(gate.endpoints.values())).endpoint
    for _ in range(6):  # both climb in slow start
        ft.advance(0.3)
        a.ok("a", 200, gap=2.0, granted_at=ft.now - 0.1)
        b.ok("a", 200, gap=2.0, granted_at=ft.now - 0.1)
    failed = 1 / gate.host("a").interval
    ft.advance(0.3)
    a.rate_limited("a", ep, 2.0, granted_at=ft.now - 0.1)  # no gap known: blamed on the host
    cut = 1 / gate.host("a").interval
    assert cut < failed
    for _ in range(10):  # b's clean answers within the hold: a step under the failed rate at most
        ft.advance(0.3)
        b.ok("a", 200, gap=2.0, granted_at=ft.now - 0.1)
        assert 1 / gate.host("a").interval < failed


def test_a_spacing_raised_by_another_process_is_a_floor_here_and_a_move_restarts_the_step() -> None:
    s = SpacingEstimator()
    s.follow((0.8, 1.6), 0.0)  # the band in force when this process met the host
    assert s.bad_gap == 0.0 and s.changed == -math.inf
    assert not s.follow((0.8 * (1 + 1e-13), 1.6), 1.0)  # the same band, as Redis's scripts round it
    assert s.follow((0.6, 0.7), 2.0) and s.changed == 2.0 and s.bad_gap == 0.0  # narrowed elsewhere
    raised = (1.05, 1.05 * (1 + MIN_JITTER))
    assert s.follow(raised, 3.0) and s.changed == 3.0  # raised elsewhere: a limit met under 1.05
    assert s.floor(0.3) == pytest.approx(1.05)
    assert s.narrowed(raised, s.floor(0.3), 4.0) is None


def test_a_rate_is_the_same_rate_as_redis_rounds_it() -> None:
    r = RateSearch()
    r.follow(4.0, 0.0)
    assert not r.follow(4.0 * (1 - 1e-13), 1.0) and r.bad is None and r.changed == 0.0


def test_a_fleet_narrows_its_shared_spacing_a_step_per_spacing_not_a_step_per_process() -> None:
    (a, b), gate, ft = shared_host_policies()
    for pol in (a, b):
        pol.ok("a", 200, gap=5.0, granted_at=ft.now)
    ft.advance(2.0)
    band = gate.host("a").delay
    a.ok("a", 200, gap=1.0, granted_at=ft.now - 0.1)  # a gap wholly drawn from the current band: a step
    narrowed = gate.host("a").delay
    assert narrowed[0] < band[0]
    # b's gap was drawn (partly) from the band before a's step: nothing.
    b.ok("a", 200, gap=1.0, granted_at=ft.now - 0.1)
    assert gate.host("a").delay == narrowed


def test_an_answer_granted_under_a_rate_another_process_set_climbs_from_it() -> None:
    # Four processes each see every fourth answer: if a rate moved elsewhere counted only from when
    # this process noticed it, the fleet would climb a step per four answers, not per answer.
    (a, b), gate, ft = shared_host_policies()
    a.ok("a", 200, gap=2.0, granted_at=ft.now)
    b.ok("a", 200, gap=2.0, granted_at=ft.now)
    ft.advance(0.3)
    a.ok("a", 200, gap=2.0, granted_at=ft.now - 0.1)  # a steps the shared rate
    stepped = gate.host("a").interval
    ft.advance(0.1)
    granted = ft.now  # b's request goes under a's new rate
    ft.advance(0.5)
    b.ok("a", 200, gap=2.0, granted_at=granted)  # b's first look at the new rate
    assert gate.host("a").interval < stepped


def shared_signals(gate, ft) -> list[HostSignal]:
    """The fleet's host signals through one store, as Redis keeps them, each at its time on *ft*."""
    store = [NO_SIGNAL]
    gate.signal_host = lambda host, failed=None, found=False: store.append(HostSignal(ft.now, failed, found))
    gate.last_signal = lambda host: store[-1]
    return store


def test_a_process_that_saw_no_429_climbs_with_the_one_whose_first_burst_failed() -> None:
    # Four processes through Redis, defaults, 3 req/s cap: one process's first burst set the shared
    # rate to half what it measured, and the others, knowing only when, held the fleet's climb for a
    # whole recovery window (4 / 1 process: 0.77). Knowing the rate that failed, they climb as it does.
    cfg = config(POLITE_ADAPTIVE=False, POLITE_RECOVERY_WINDOW=20, POLITE_HOST_PAUSE_ENDPOINTS=2)
    gate, ft = make_gate(n=8, host_concurrency=cfg.host_concurrency, delay=cfg.delay)
    a, b = ThrottlePolicy(cfg, gate, clock=ft.clock), ThrottlePolicy(cfg, gate, clock=ft.clock)
    store = shared_signals(gate, ft)
    eps = [st.endpoint for st in gate.endpoints.values()]
    a.ok("a", 200)
    b.ok("a", 200)
    ft.advance(2.0)
    gate.host("a").grants += 8  # a first burst of 4 req/s
    for ep in eps[:2]:
        a.rate_limited("a", ep, 2.0, granted_at=ft.now)
    assert 1 / gate.host("a").interval == pytest.approx(2.0)
    assert store[-1].failed == pytest.approx(4.0) and not store[-1].found
    ft.advance(2.5)
    for _ in range(12):  # only b's answers: a sends nothing more
        ft.advance(0.5)
        b.ok("a", 200, granted_at=ft.now - 0.1)
    assert 1 / gate.host("a").interval > 4.4  # climbed past the burst's rate, as a would have



def test_a_climb_never_lands_within_a_step_of_the_rate_that_failed_during_the_hold() -> None:
    # Both limits binding, adaptive: a 429 at 3.04 req/s cut to the last clean rate, 2.76, a hair
    # more than a step under it; a 10% climb then landed on 3.036 and drew the next 429 a second later.
    r = RateSearch()
    r.follow(2.76, 0.0)
    r.good, r.ceiling.level = 2.76, 3.04
    assert r.limited(Signal(3.04, 3.0, False, 0.5), 1.0) == pytest.approx(2.76)
    assert r.clean(2.76, 2.0, W, math.inf) is KEEP  # a hair under the hold: at it
    assert r.clean(2.6, 2.5, W, math.inf) == pytest.approx(3.04 / 1.1)  # from further under: up to it
    assert r.clean(2.0, 3.0, W, math.inf) == pytest.approx(2.2)  # a full step where one fits
    assert r.clean(2.76, 1.0 + r.ceiling.hold(W) + 0.1, W, math.inf) == pytest.approx(2.76 * 1.1)  # the probe, after the hold


def test_a_probe_climbs_only_on_answers_to_requests_its_rate_held() -> None:
    # Both limits binding: a probe past a 3 req/s ceiling was clean because the spacing sent less
    # than the rate, so it climbed fast to 4.2 req/s; once the spacing let more through, three 429s.
    r = RateSearch()
    held = 3.0 / 1.1
    r.follow(held, 0.0)
    r.limited(Signal(3.0, 3.0, False, 0.5), 0.5)
    r.changed = 0.5
    after = 0.5 + r.ceiling.hold(W) + 0.1
    assert r.clean(held, after, W, 3.3, held=False) is KEEP  # the hold ends, but the rate binds nothing
    assert r.probing
    assert r.clean(held, after + 0.5, W, 3.3, held=True) == pytest.approx(3.0)  # it binds: the probe
    r.changed = after
    for t in (1.0, 2.0, 3.0):  # answers the spacing sent under the probe's rate: no climb
        assert r.clean(3.0, after + t, W, 3.3, held=False) is KEEP
    assert r.clean(3.0, after + 4.0, W, 3.3, held=True) == pytest.approx(3.3)  # held: it binds


def test_a_first_bursts_rate_bounds_no_climb() -> None:
    # A first burst with no host rate measured 3 req/s and failed: that says nothing of the limit,
    # so the climb from the cut neither ends a step under it nor holds there.
    r = RateSearch()
    r.limited(Signal(None, 3.0, True, 0.5), 0.0)
    assert r.bad == 3.0 and not r.bad_found and r.ceiling.level is None
    assert r.clean(2.66, 1.0, W, math.inf, fast=False) == pytest.approx(2.66 * 1.1)
    assert r.clean(2.93, 2.0, W, math.inf, fast=False) == pytest.approx(2.93 * 1.1) and r.bad is None


def test_a_failure_far_under_a_ceiling_found_only_just_now_is_no_move() -> None:
    # A cap of 3 req/s with a burst of 3: after a pause the full bucket let a climb run to 5.85 cleanly,
    # then 3.5 failed a second later. The limit did not move; taken for a move, it was re-probed on a
    # moved limit's short hold, and the burst drew a stream of 429s.
    r = RateSearch()
    r.limited(Signal(5.85, 5.85, False, 0.5), 10.0)
    r.limited(Signal(3.5, 3.5, False, 0.5), 10.0 + SETTLE / 2)
    assert not r.ceiling.fallen and r.ceiling.level == pytest.approx(3.5)
    assert r.ceiling.hold(W, fast=False) == W
    r.limited(Signal(1.5, 1.5, False, 0.5), 10.0 + SETTLE * 3)  # far under one that stood: a move
    assert r.ceiling.fallen and r.ceiling.level == pytest.approx(1.5)


def test_a_failure_met_elsewhere_above_one_met_here_is_no_news_and_one_found_bounds_the_ceiling() -> None:
    # Four processes on a 3 req/s cap: a process that had only learned of the limit had no ceiling,
    # so its probe was a slow-start step (2.84 -> 3.55 req/s); and another's failure at a stale 3.55
    # lifted this one's hold from under 3.23 to under 3.55, so it climbed back to 3.23 a second later.
    r = RateSearch()
    r.follow(2.5, 0.0)
    r.learn(3.12, True, 1.0)
    assert r.ceiling.level == 3.12 and not r.starting
    r.clean(2.84, 1.5, W, math.inf)
    probe = r.clean(2.84, 1.0 + r.ceiling.hold(W) + 0.1, W, math.inf)  # the hold is over: a probe
    assert probe == pytest.approx(2.84 * (1 + STEP))  # a 10% step, not slow start's 25%
    r.limited(Signal(3.23, 3.23, False, 0.5), 20.0)
    r.changed = 20.0  # the policy sets the cut rate
    assert r.bad == 3.23
    r.learn(3.55, True, 20.1)  # failed elsewhere at a rate cut here since
    assert r.bad == 3.23 and r.ceiling.level == 3.12
    assert r.clean(2.93, 20.6, W, math.inf) is KEEP  # at the hold under 3.23
    r.learn(3.0, True, 21.0)  # a lower one is news
    assert r.bad == 3.0 and r.ceiling.level == 3.0
    r.learn(2.0, False, 22.0)  # a burst's rate with no host rate in force bounds no ceiling
    assert r.bad == 2.0 and r.ceiling.level == 3.0


def test_429s_to_requests_a_band_too_narrow_sent_before_its_raise_are_answered_for_by_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A per-IP limit of 0.5 s under a 0.41-0.51 s band: the requests in flight when the first 429 raised the
    # band come back limited together, on several IPs within a moment, as the host's rate peaks. They were
    # sent at gaps the raised band no longer allows: already answered for, not a host-wide limit.
    p, gate, ft, changes = policy(True)
    eps = [st.endpoint for st in gate.endpoints.values()]
    p.ok("a", 200, granted_at=ft.now)  # slow start
    for _ in range(16):  # clean answers at 0.51 s gaps, 12 req/s
        ft.advance(1 / 12)
        gate.host("a").grants += 1
        p.ok("a", 200, gap=0.51, granted_at=ft.now - 0.1)
    gate.set_host_interval("a", 0.0)
    gate.set_host_delay("a", (0.41, 0.51))
    ft.advance(0.3)
    sent = ft.now - 0.1
    p.rate_limited("a", eps[0], 2.0, gap=0.42, slack=0.0, granted_at=sent)
    band = gate.host("a").delay
    assert band[0] > 0.42
    before = len(changes)
    gate.host("a").grants += 12  # the host's rate at a new high
    with caplog.at_level(logging.DEBUG, logger="scrapy_polite.throttle.policy"):
        for i, gap in enumerate((0.5, 0.44, 0.47), start=1):
            ft.advance(0.05)
            p.rate_limited("a", eps[i], 2.0, gap=gap, slack=0.0, granted_at=sent + 0.01 * i)
    assert gate.host("a").interval == 0 and gate.host("a").delay == band and len(changes) == before
    # Nothing changed, and the log says why (at DEBUG).
    answered = [r.getMessage() for r in caplog.records if "answered for by the spacing raised" in r.getMessage()]
    assert len(answered) == 3 and f"via {eps[2].label}" in answered[1] and "gap 0.44 s" in answered[1]
    # Sent after the raise, at gaps the band allows, they are weighed as usual: here, a host-wide limit.
    for i in range(4, 8):
        ft.advance(0.05)
        p.rate_limited("a", eps[i], 2.0, gap=0.6, slack=0.0, granted_at=ft.now - 0.1)
    assert gate.host("a").interval > 0


def test_climbing_past_a_ceiling_is_no_fall_and_the_next_ceiling_counts_its_own_probes() -> None:
    # Four processes' first requests arrive together: one 429 at the slow start's 2.5 req/s on a 3 req/s cap.
    # Climbing cleanly past that ceiling is no fall: the steady limit keeps its long holds (a fallen limit
    # is re-probed every few seconds, a 429 each). Past one a probe had met again, the count starts over.
    def climb_past(r: RateSearch, t: float) -> None:
        r.changed = t - r.ceiling.hold(W) - 0.1
        rate = r.bad / (1 + STEP)
        while rate <= 2.5 * (1 + STEP) ** 2:
            t += 0.5
            rate = r.clean(rate, t, W, math.inf)
            assert isinstance(rate, float)
        r.clean(rate, t + 0.5, W, math.inf)

    once = RateSearch()
    once.limited(Signal(2.5, 2.5, False, 0.5), 1.0)
    climb_past(once, 10.0)
    assert not once.ceiling.fallen and once.ceiling.hold(W) == HOLD_FIRST
    again = RateSearch()
    again.limited(Signal(2.5, 2.5, False, 0.5), 1.0)
    again.changed = 10.0 - again.ceiling.hold(W) - 0.1
    assert again.clean(2.3, 10.0, W, math.inf) == pytest.approx(2.3 * (1 + STEP))  # the probe
    again.limited(Signal(2.53, 2.53, False, 0.5), 10.5)  # meets the same ceiling
    assert again.ceiling.confirmed == 1 and again.ceiling.hold(W) == 4 * HOLD_FIRST
    climb_past(again, 40.0)
    assert not again.ceiling.fallen and again.ceiling.confirmed == 0 and again.ceiling.hold(W) == HOLD_FIRST


# -- per-IP allowances (token buckets) ------------------------------------------------------------------


def test_a_run_from_a_full_bucket_says_more_than_its_gap_only_once_a_burst_shows() -> None:
    # A slow start's long gaps, then the narrowed band, and a 429 at 0.53 s, 2% over a gap answered in the
    # run: a bucket of one met a little early (sites count arrival gaps, tens of milliseconds off those
    # sent) explains it, and the run's 4.9 s, most of them at the slow start's gaps with its bucket full,
    # would say about 1 s as a burst spent. It says the gap.
    slow_start = (1.13, 1.15, 1.0, 0.52, 0.6)

    def run(*gaps: float, answered: float = math.inf) -> Drained:
        runs = IpRuns()
        runs.clean("e1", math.inf, 0.53)
        for gap in gaps:
            runs.clean("e1", gap, 1.6)
        drained = runs.limited("e1", 0.53, 0.53, answered)
        assert drained is not None
        return drained

    assert run(*slow_start).pace == pytest.approx(0.53)
    assert run(*slow_start, answered=0.52).pace == pytest.approx(0.53)
    as_burst = (sum(slow_start) + 0.53) / len(slow_start)
    # A burst shows: a gap clearly shorter answered, in the run or on another IP ...
    assert run(*slow_start[:3], 0.45, 0.6).pace == pytest.approx((sum(slow_start[:3]) + 1.05 + 0.53) / 5)
    assert run(*slow_start, answered=0.45).pace == pytest.approx(as_burst)
    # ... or its last few gaps answered as short as the one refused (a bucket of one at the limit refuses some).
    assert run(*slow_start[:3], 0.53, 0.52, 0.54).pace == pytest.approx((sum(slow_start[:3]) + 1.59 + 0.53) / 6)


def test_a_run_after_a_retry_after_its_bucket_may_have_filled_in_says_the_lower_of_its_two_paces() -> None:
    # 2 req/s per IP, burst 1, Retry-After 2 s: the bucket is full half a second into the wait and turns
    # the rest away. Counted as refilled, the run said 0.58 s a request, and the spacing stayed there.
    runs = IpRuns()
    runs.clean("e1", math.inf, 0.52)
    runs.limited("e1", 0.45)
    runs.clean("e1", 2.5, 0.52)  # the Retry-After waited out
    for _ in range(25):
        runs.clean("e1", 0.51, 0.52)
    drained = runs.limited("e1", 0.51, 0.52)
    assert drained is not None and drained.clean == 26
    assert drained.pace == pytest.approx((25 * 0.51 + 0.51) / 25)  # as from a full bucket at the first request
    assert drained.pace < (2.5 + 25 * 0.51 + 0.51) / 27


def test_an_ips_run_says_how_long_it_took_per_clean_request() -> None:
    runs = IpRuns()
    runs.clean("e1", math.inf, 1.6)  # the IP's first request: its bucket is full, the run starts
    for _ in range(4):
        runs.clean("e1", 0.4, 1.6)
    # Failed at a gap it was answered at: five clean requests in 2.0 s from a full bucket of two tokens at
    # least (one of one answers no gap as short as one it refuses): at least 0.5 s a request.
    drained = runs.limited("e1", 0.4)
    assert drained is not None and drained.clean == 5 and drained.pace == pytest.approx(0.5)
    assert not drained.strict
    # The next run starts at that 429: its Retry-After wait counts (the bucket refilled meanwhile), and ends
    # no run. Two clean requests over 3.2 s, then a 429 at a gap it was answered at: its bucket went from
    # under a token to under a token, so it refilled less than three: at least 1.07 s a request.
    runs.clean("e1", 2.0, 0.5)
    runs.clean("e1", 0.6, 0.5)
    drained = runs.limited("e1", 0.6)
    assert drained is not None and drained.pace == pytest.approx(3.2 / 3) and drained.shortest == pytest.approx(0.6)
    # Failing at a gap shorter than every clean one in the run: a limit on the gap itself may explain it.
    runs.clean("e1", 2.0, 1.6)
    runs.clean("e1", 1.0, 1.6)
    drained = runs.limited("e1", 0.9)
    assert drained is not None and drained.strict
    # A run an idle gap interrupted starts again (the bucket may have filled); nor is an IP without a run known.
    runs.clean("e1", 2.1, 1.6)
    runs.clean("e1", 19.0, 1.6)
    runs.clean("e1", 0.5, 1.6)
    runs.clean("e1", 0.5, 1.6)
    drained = runs.limited("e1", 0.5)
    assert drained is not None and drained.clean == 3 and drained.pace == pytest.approx(0.75)
    assert runs.limited("e2", 0.5) is None
    # A short run at the spacing in force says nothing of an allowance: a host-wide limit ends such runs on
    # any IP. Well faster than the spacing in force, it is one the spacing let run short.
    runs.clean("e1", 2.0, 1.6)
    runs.clean("e1", 2.1, 1.6)
    assert runs.limited("e1", 2.1, band_hi=2.0) is None
    runs.clean("e1", 2.0, 1.6)
    runs.clean("e1", 2.1, 1.6)
    assert runs.limited("e1", 2.1, band_hi=1.0) is not None
    # A run of two from a full bucket (its first request and one at about the spacing), refused at a gap as
    # long: it would say the allowance needs its whole time per clean request but one, twice the spacing.
    # Sent at the spacing in force, it says nothing (a host-wide limit ends such runs too); sent well
    # slower than the spacing in force, it says that.
    runs.clean("e3", math.inf, 1.3)
    runs.clean("e3", 0.97, 1.3)
    assert runs.limited("e3", 1.19, band_hi=1.23) is None
    runs.clean("e4", math.inf, 1.3)
    runs.clean("e4", 0.97, 1.3)
    drained = runs.limited("e4", 1.19, band_hi=0.9)
    assert drained is not None and drained.pace == pytest.approx(2.16)
    # A run after a 429 counts its Retry-After wait: sent within a wide band (POLITE_DELAY's, 0.8-1.6 s,
    # without adaptive mode), two clean requests and a 429 are at the spacing in force, whatever its low end.
    runs.clean("e5", math.inf, 1.6)
    runs.limited("e5", 1.0, band_hi=1.6)
    runs.clean("e5", 2.0, 1.6)
    runs.clean("e5", 1.2, 1.6)
    assert runs.limited("e5", 1.3, band_hi=1.6) is None


def test_a_429_after_an_ips_run_held_by_its_spacing_points_at_the_ip_and_one_not_held_is_weighed_as_before() -> None:
    a = Attribution()
    for i in range(10):
        a.clean(8.0, i * 0.1, W, gap=0.3)
    drained = Drained(1.02, 8, 0.35, False)
    v = a.decide("e1", 0.4, 0.0, 0.3, 8.0, 1.0, W, spacing_cost=0.6, rate_cost=0.09, drained=drained)
    assert v.blame == PER_IP and v.drained and "after 8 clean requests" in v.why and "1.02 s a request" in v.why
    # A gap the host rate held (slack): the run was the rate's, not the IP's own pace.
    v = a.decide("e2", 0.4, 0.3, 0.3, 8.0, 1.1, W, spacing_cost=0.6, rate_cost=0.09, drained=drained)
    assert v.blame == HOST and not v.drained
    # Shorter than every clean gap of its run and of the other IPs: the gap says it, as before.
    strict = Drained(1.02, 8, 0.45, True)
    v = a.decide("e3", 0.25, 0.0, 0.3, 8.0, 1.2, W, drained=strict)
    assert v.blame == PER_IP and not v.drained
    # Shorter than its own, but another IP was answered at a gap as short: no limit on the gap; the run says it.
    v = a.decide("e4", 0.4, 0.0, 0.3, 8.0, 1.3, W, drained=strict)
    assert v.blame == PER_IP and v.drained


def test_a_host_gap_shorter_than_any_two_clean_requests_had_is_the_hosts_not_an_ips_allowance() -> None:
    a = Attribution()
    # Clean requests from several IPs, never closer than 0.1 s to the one before (answers come back out
    # of order: the gap to a neighbour answered earlier counts too).
    sent = [0.0, 0.2, 0.1, 0.35, 0.5, 0.62, 0.8, 1.0, 1.25]
    for i, at in enumerate(sent[:3]):
        a.clean(8.0, 1.0 + i * 0.01, W, gap=1.0, granted_at=at)
    assert not a.refuses(a.host_gap(0.25))  # too few clean requests yet to tell
    for at in sent[3:]:
        a.clean(8.0, 1.5, W, gap=1.0, granted_at=at)
    assert a.host_gaps[0][1] == pytest.approx(0.1)
    assert a.host_gap(1.3) == pytest.approx(0.05) and a.refuses(0.05)  # 0.05 s after the last clean one
    assert a.host_gap(1.345) == pytest.approx(0.095) and a.refuses(0.095, 0.0)
    assert not a.refuses(0.095)  # not clearly shorter (HOST_GAP_MARGIN)
    assert not a.refuses(0.05, least=20)  # too few gaps seen
    assert a.host_gap(1.4) == pytest.approx(0.15) and not a.refuses(0.15)  # longer than two clean ones in a row had
    assert a.host_gap(None) is None and not a.refuses(None)
    drained = Drained(1.02, 8, 0.8, False)
    # A host-wide limit without a burst refuses a host gap that short whatever the IP's run: the host,
    # whose requests as far apart as the shortest answered gap go through.
    v = a.decide("e1", 1.0, 0.0, 1.0, 8.0, 2.0, W, drained=drained, granted_at=1.3)
    assert v.blame == HOST and not v.drained and v.spaced == pytest.approx(0.1) and "0.05 s after" in v.why
    # Only just shorter: the run says nothing, and the 429 is weighed as before (a 1.0 s gap was answered).
    v = a.decide("e2", 1.0, 0.0, 1.0, 8.0, 2.1, W, drained=drained, granted_at=1.345)
    assert v.blame == HOST and not v.drained and v.spaced is None
    # A host gap as long as answered ones: the IP's run, as before.
    v = a.decide("e3", 1.0, 0.0, 1.0, 8.0, 2.2, W, drained=drained, granted_at=1.4)
    assert v.blame == PER_IP and v.drained
    # Not held by its spacing and shorter than every clean gap: the IP's gap says as much as the host's.
    v = a.decide("e4", 0.5, 0.5, 1.0, 8.0, 2.3, W, granted_at=1.3)
    assert v.spaced is None
    # Held by its spacing, the shortest gap yet: either; the cheaper remedy first.
    v = a.decide("e5", 0.5, 0.0, 1.0, 8.0, 2.4, W, spacing_cost=0.4, rate_cost=0.09, granted_at=1.3)
    assert v.blame == HOST and v.ambiguous and v.spaced == pytest.approx(0.1)
    v = a.decide("e6", 0.5, 0.0, 1.0, 8.0, 2.5, W, spacing_cost=0.02, rate_cost=0.09, granted_at=1.3)
    assert v.blame == PER_IP and v.spaced is None
    # A request the host rate held, 0.06 s after the last: the rate's spacing, which says nothing of the limit.
    a.clean(8.0, 2.4, W, gap=1.0, granted_at=1.31, rate_held=True)
    assert a.host_gaps[0][1] == pytest.approx(0.1)
    # Clean requests leave the evidence a window later.
    a.clean(8.0, 2.0 + W, W, gap=1.0, granted_at=1.5 + W)
    assert a.clean_sent == [(1.5 + W, False)] and not a.host_gaps


def test_a_request_unanswered_before_a_429_counts_for_its_host_gap() -> None:
    # A site refuses before its upstream answers: a 429 is back before pages asked for just ahead of it.
    a = Attribution()
    for i in range(9):
        a.clean(8.0, 1.0, W, gap=1.0, granted_at=i * 0.2)
    assert a.host_gap(1.8) == pytest.approx(0.2) and not a.refuses(a.host_gap(1.8))
    assert a.host_gap(1.8, pending=1.78) == pytest.approx(0.02) and a.refuses(a.host_gap(1.8, 1.78))
    assert a.host_gap(1.8, pending=1.5) == pytest.approx(0.2)  # an older one unanswered: the clean one counts
    assert a.host_gap(-1.0) is None and a.host_gap(None) is None and a.host_gap(-1.0, pending=-1.2) == pytest.approx(0.2)
    assert not a.refuses(None)


@pytest.mark.parametrize("latency", [0.06, 0.1, 0.14])
def test_a_host_wide_limit_that_refuses_before_its_upstream_answers_is_told_from_ip_allowances(latency: float) -> None:
    # nginx's limit_req answers its 429 at once, before the pages asked for just ahead of it: judged from
    # the clean answers in alone, two requests sent together looked far apart, and the 429s taken for
    # allowances IPs spent put the spacing at 3 s (a quarter to a third of the limit, 10% 429s).
    p, gate, ft, changes = policy(True)
    rate = 10.0
    ok, limited, _ = _bucket_crawl(p, gate, ft, 120.0, burst=1, rate=rate, latency=latency, host_wide=True,
                                   refused_latency=0.005)
    assert not any("allowance spent" in c[4].get("why", "") for c in changes if len(c) > 4)
    assert ok > 0.85 * 120 * rate
    assert limited < 0.025 * (ok + limited)


def test_a_host_rate_from_the_shortest_answered_host_gap() -> None:
    # No host rate in force, not wide: the host's requests as far apart as the shortest answered gap.
    r = RateSearch()
    assert r.limited(Signal(None, 6.0, False, 0.5), 1.0) is KEEP
    new = r.limited(Signal(None, 6.0, False, 0.5, spaced=0.1), 2.0)
    assert new == pytest.approx(1 / (0.1 * (1 + SPACED)))
    # Out of few gaps the shortest may be long: no further under the rate sent than a step.
    assert RateSearch().limited(Signal(None, 6.0, False, 0.5, spaced=0.5), 2.0) == pytest.approx(6.0 / (1 + STEP))
    # A host rate in force: a run's deeper cut stops there.
    r = RateSearch()
    r.changed = 0.9
    r.limited(Signal(12.0, 12.0, False, 0.5), 1.0)
    assert r.limited(Signal(12.0, 12.0, False, 0.5), 1.1) == pytest.approx(12.0 / 1.1 ** RUN_GROWTH)
    r = RateSearch()
    r.changed = 0.9
    r.limited(Signal(12.0, 12.0, False, 0.5), 1.0)
    assert r.limited(Signal(12.0, 12.0, False, 0.5, spaced=0.1), 1.1) == pytest.approx(1 / (0.1 * (1 + SPACED)))


def _bucket_crawl(p: ThrottlePolicy, gate, ft, seconds: float, burst: int, rate: float = 1.0,
                  latency: float = 0.1, retry_after: float = 2.0, host_wide: bool = False,
                  refused_latency: float | None = None) -> tuple[int, int, list[str]]:
    """Requests through *gate* to a site that keeps a token bucket per exit IP (*host_wide*: one for the
    host; the sandbox's own), answered *latency* after they go (a 429 *refused_latency* after, if given:
    nginx refuses before the upstream answers), every answer to *p*. Returns the clean answers, the
    429s and each 429's blame."""
    shared = TokenBucket(rate, burst, clock=ft.clock)
    buckets = {key: shared if host_wide else TokenBucket(rate, burst, clock=ft.clock) for key in gate.endpoints}
    counts, blames = [0, 0], []

    def go() -> None:
        gate.acquire("a").addCallback(lambda lease: ft.call_later(
            latency if refused_latency is None else refused_latency, lambda: arrived(lease)))

    def arrived(lease) -> None:
        clean = buckets[lease.endpoint.key].try_take()
        if clean and refused_latency is not None:
            ft.call_later(latency - refused_latency, lambda: answer(lease, clean))
        else:
            answer(lease, clean)

    def answer(lease, clean: bool) -> None:
        counts[not clean] += 1
        kw = {"gap": lease.gap, "granted_at": lease.granted_at}
        if clean:
            p.ok("a", 200, endpoint=lease.endpoint.key, rate_held=lease.rate_held, **kw)
        else:
            p.rate_limited("a", lease.endpoint, retry_after, slack=lease.slack, **kw)
        gate.release(lease)
        go()

    for _ in range(3 * len(gate.endpoints)):
        go()
    end = ft.now + seconds
    while ft.now < end:
        ft.advance(0.01)
    return counts[0], counts[1], blames


@pytest.mark.parametrize("adaptive", [False, True])
def test_a_per_ip_token_bucket_is_found_from_the_ips_runs_and_held_under(adaptive: bool) -> None:
    # 8 IPs, each allowed 1 req/s with a burst of 3 (nginx's limit_req burst=2 nodelay). Gaps far under
    # a second go through until the burst is spent, so the gap that drew a 429 says little.
    p, gate, ft, changes = policy(adaptive)
    ok, limited, _ = _bucket_crawl(p, gate, ft, 240.0, burst=3)
    why = [c[4].get("why", "") for c in changes]
    assert any("allowance spent" in w for w in why) == adaptive  # defaults' band (0.8-1.6 s) keeps up
    lo, hi = gate.host("a").delay
    pace = len(gate.endpoints) * 240.0 / (ok + limited)
    assert limited < 0.03 * ok
    assert ok > 0.9 * 240 * len(gate.endpoints) * (1.0 if adaptive else 0.75)  # of the limit (defaults: their band)
    assert (0.85 <= lo <= 1.15) if adaptive else (lo, hi) == (0.8, 1.6)
    assert gate.host("a").interval == 0 or 1 / gate.host("a").interval > 7.0, pace


def test_a_per_ip_limit_with_no_burst_is_found_from_its_gaps_as_before() -> None:
    p, gate, ft, changes = policy(True)
    ok, limited, _ = _bucket_crawl(p, gate, ft, 240.0, burst=1)
    assert not any("allowance spent" in c[4].get("why", "") for c in changes)
    assert limited < 0.03 * ok and ok > 0.9 * 240 * len(gate.endpoints)



@pytest.mark.parametrize(("retry_after", "burst", "rate"), [(10.0, 10, 1.0), (5.0, 3, 1.0), (10.0, 3, 0.5), (2.0, 10, 0.5)])
def test_a_per_ip_token_bucket_is_held_under_whatever_its_burst_rate_and_retry_after(
    retry_after: float, burst: int, rate: float
) -> None:
    # Each 429 costs its IP the Retry-After, during which its bucket refills (up to its burst): the runs
    # between two 429s count that wait, as the bucket does.
    p, gate, ft, _ = policy(True)
    ok, limited, _ = _bucket_crawl(p, gate, ft, 240.0, burst=burst, rate=rate, retry_after=retry_after)
    assert ok > 0.85 * 240 * len(gate.endpoints) * rate
    assert limited < 0.04 * (ok + limited)
    assert 0.85 / rate <= gate.host("a").delay[0] <= 1.15 / rate  # a clean window's probe may be under way


@pytest.mark.parametrize("rate", [10.0, 5.0])
def test_a_host_wide_limit_without_a_burst_above_what_the_pool_sends_does_not_raise_the_spacing(rate: float) -> None:
    # One token for the host, refilled faster than the pool's spacing sends (8 IPs at 0.8-1.6 s: 6.7 req/s
    # on average): two IPs' spacings end within 1/rate of each other now and then, at any spacing, and
    # one of them is refused. Taken for allowances the IPs spent, the spacing crept up 3% and more with
    # each such 429 (to 4 s, a quarter of the limit). A host gap shorter than any answered one is the
    # host's: its rate spaces requests as far apart as those were.
    p, gate, ft, changes = policy(True)
    ok, limited, _ = _bucket_crawl(p, gate, ft, 120.0, burst=1, rate=rate, host_wide=True)
    assert sum("allowance spent" in c[4].get("why", "") for c in changes if len(c) > 4) <= 1
    assert ok > 0.85 * 120 * rate
    assert limited < 0.03 * (ok + limited)
    assert gate.host("a").delay[0] < len(gate.endpoints) / rate


@pytest.mark.parametrize(("adaptive", "burst", "rate"), [(True, 20, 4.0), (False, 10, 3.0)])
def test_a_host_wide_token_bucket_is_not_taken_for_spent_ips(adaptive: bool, burst: int, rate: float) -> None:
    # One bucket for the host: its 429s end the IPs' runs at any pace. The runs that say an IP spent an
    # allowance raise the spacing to what the pool may send, not past it; the short ones at the spacing
    # in force say nothing.
    p, gate, ft, _ = policy(adaptive)
    ok, limited, _ = _bucket_crawl(p, gate, ft, 120.0, burst=burst, rate=rate, host_wide=True)
    assert ok > 0.9 * 120 * rate
    assert limited < 0.04 * (ok + limited)
    assert gate.host("a").delay[0] < 1.2 * len(gate.endpoints) / rate
