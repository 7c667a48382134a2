"""The search of `scrapy polite-tune`, on modelled sites, and the command's option checks."""

from __future__ import annotations

import argparse
import random
from collections.abc import Callable, Collection

import pytest
from scrapy.exceptions import UsageError
from scrapy.settings import Settings

from scrapy_polite.cli.tune import Command, _check_project
from scrapy_polite.tune.output import format_row, settings_lines
from scrapy_polite.tune.tuner import Tuner
from scrapy_polite.tune.values import Trial, TrialResult, TrialSettings

START = TrialSettings(2, (0.8, 1.6))
Site = Callable[[TrialSettings, int], TrialResult]


def per_ip_site(limit_interval: float, endpoints: int = 8, ban_below: float | None = None) -> Site:
    """Each endpoint may send once per *limit_interval*; faster spacing gets 429s.

    Throughput is endpoints / mean delay, minus the share of intervals below the limit
    (which get 429s). Concurrency changes nothing (latency ~0). With *ban_below*, a lower
    bound of the delay under it gets a 403.
    """

    def run(s: TrialSettings, allowance: int) -> TrialResult:
        low, high = s.delay
        share_limited = min(1.0, max(0.0, (limit_interval - low) / (high - low)))
        limited = round(allowance * share_limited)
        ok = allowance - limited
        seconds = allowance / (endpoints / ((low + high) / 2))
        bans = 1 if ban_below is not None and low < ban_below else 0
        return TrialResult(sent=allowance, attempts=allowance, success=ok, rate_limited=limited, bans=bans,
                           status_403=bans, p95=0.05, seconds=seconds)

    return run


def throttled_site(limit_interval: float, endpoints: int = 8) -> Site:
    """A per-IP limit met by the package's throttle: after the first 429 it spaces each endpoint
    just above the gap that drew it, so the trial runs at the site's interval and reports it."""

    def run(s: TrialSettings, allowance: int) -> TrialResult:
        low, high = s.delay
        if low >= limit_interval:
            spacing, limited, throttled = (low, high), 0, None
        else:
            spacing = (limit_interval * 1.04, max(high, limit_interval * 1.2))
            limited, throttled = 1, spacing
        seconds = allowance / (endpoints / (sum(spacing) / 2))
        return TrialResult(sent=allowance, attempts=allowance, success=allowance - limited,
                           rate_limited=limited, seconds=seconds, paced_attempts=allowance - endpoints,
                           paced_rate_limited=limited, throttled_delay=throttled)

    return run


def host_cap_site(cap: float, latency: float = 0.25, endpoints: int = 8) -> Site:
    """A host-wide cap of *cap* req/s: requests over it are 429s; concurrency helps up to the cap."""

    def run(s: TrialSettings, allowance: int) -> TrialResult:
        offered = min(endpoints / (sum(s.delay) / 2), s.host_concurrency / latency)
        served = min(offered, cap)
        limited = round(allowance * (1 - served / offered))
        seconds = allowance / offered
        return TrialResult(sent=allowance, attempts=allowance, success=allowance - limited,
                           rate_limited=limited, p95=latency, seconds=seconds)

    return run


def search(tuner: Tuner, site: Site) -> list[Trial]:
    while (trial := tuner.next_trial()) is not None:
        tuner.record(trial, site(trial.settings, trial.allowance))
    return tuner.trials


def feed(t: Tuner, *results: TrialResult) -> Tuner:
    """Run *t*'s next trials with these results, in order."""
    for result in results:
        trial = t.next_trial()
        assert trial is not None
        t.record(trial, result)
    return t


def tuner(**kw: object) -> Tuner:
    args: dict = {"budget": 1000, "trial_requests": 100, "max_concurrency": 8}
    args.update(kw)
    return Tuner(START, **args)  # type: ignore[arg-type]


def test_first_trial_is_the_start_and_every_later_one_changes_one_variable() -> None:
    sites = (per_ip_site(1.0), per_ip_site(0.3), host_cap_site(4.0), host_cap_site(40.0), throttled_site(1.0))
    for site in sites:
        t = tuner(budget=2000)
        trials = search(t, site)
        assert trials[0].settings == START and trials[0].change == "start"
        for trial in trials[1:]:
            assert trial.reference is not None and trial.reference < trial.index
            changed = trial.settings.changed(trials[trial.reference - 1].settings)
            assert len(changed) == 1, (trial, changed)
            assert trial.change.startswith(changed[0])


def test_delay_goes_down_while_it_pays_then_concurrency_up() -> None:
    t = tuner()
    trials = search(t, per_ip_site(0.5))
    changes = [tr.change for tr in trials]
    assert changes[:3] == ["start", "POLITE_DELAY down", "POLITE_DELAY down"]
    first_conc = changes.index("POLITE_HOST_CONCURRENCY up")
    assert all(c == "POLITE_DELAY down" for c in changes[1:first_conc])
    assert "POLITE_DELAY" not in changes[first_conc:]
    best = t.recommendation()
    assert best is not None and best.result is not None
    # The lowest delay whose lower bound stays at the site's 0.5 s limit: no 429s at all.
    assert best.settings.delay[0] >= 0.5
    assert best.result.rate_limited == 0
    # Concurrency changes nothing on this site: the gentler setting is kept.
    assert best.settings.host_concurrency == 2
    assert t.stopped == "search finished"


def test_delay_goes_up_while_the_start_gets_too_many_429s() -> None:
    t = tuner()
    trials = search(t, per_ip_site(1.3))
    assert [tr.change for tr in trials[:2]] == ["start", "POLITE_DELAY up"]
    assert trials[0].verdict == "too many 429s"
    best = t.recommendation()
    assert best is not None and best.result is not None
    assert best.settings.delay[0] >= 1.3 * 0.95 or best.result.rate_429 <= 0.05
    assert best.change == "POLITE_DELAY up"
    ups = [tr for tr in trials if tr.change == "POLITE_DELAY up"]
    # The first clean step up ends the delay search.
    assert ups[-1] is best


def test_concurrency_goes_up_on_a_host_cap_until_it_stops_paying() -> None:
    t = tuner(max_concurrency=16)
    trials = search(t, host_cap_site(cap=6.0, latency=0.5))
    best = t.recommendation()
    assert best is not None and best.result is not None
    conc = [tr for tr in trials if tr.change == "POLITE_HOST_CONCURRENCY up"]
    assert conc and best.settings.host_concurrency > 2
    assert best.result.rate_429 <= t.max_429_rate
    # At most concurrency / latency requests/s: the best one is near the cap without going over.
    assert best.settings.host_concurrency / 0.5 <= 6.0 * 1.5


def test_the_spacing_the_throttle_settled_on_is_tried_and_kept_when_as_fast() -> None:
    t = tuner()
    trials = search(t, throttled_site(1.0))
    changes = [tr.change for tr in trials]
    # (0.6, 1.2) draws one 429, then runs at the site's interval: faster than the start.
    assert changes[:3] == ["start", "POLITE_DELAY down", "POLITE_DELAY down"]
    throttled = [tr for tr in trials if tr.change == "POLITE_DELAY as throttled"]
    assert len(throttled) == 1
    assert throttled[0].settings.delay == (1.04, 1.2)
    assert throttled[0].settings.host_concurrency == trials[throttled[0].reference - 1].settings.host_concurrency
    # Within min_gain of the best and gentler: it becomes the recommendation, then concurrency goes up from it.
    best = t.recommendation()
    assert best is not None and best.settings.delay == (1.04, 1.2)
    assert throttled[0].verdict == "as fast, gentler"
    after = trials[trials.index(throttled[0]) + 1:]
    assert after and all(tr.change == "POLITE_HOST_CONCURRENCY up" for tr in after)
    assert all(tr.settings.delay == (1.04, 1.2) for tr in after)


def test_the_throttled_spacing_is_kept_only_when_not_slower_than_the_start() -> None:
    start = TrialResult(sent=100, attempts=100, success=99, rate_limited=1, seconds=20.0,
                        throttled_delay=(1.3, 1.6))  # 297/min
    down = TrialResult(sent=100, attempts=100, success=98, rate_limited=2, seconds=25.0)  # no gain
    t = tuner(min_gain=0.05)
    feed(t, start, down)
    third = t.next_trial()
    assert third is not None and third.change == "POLITE_DELAY as throttled"
    assert third.settings.delay == (1.3, 1.6)
    # As fast as the start (within noise it is a little faster): kept, as the gentler setting.
    t.record(third, TrialResult(sent=100, attempts=100, success=100, seconds=19.8))
    assert t.recommendation() is third and third.verdict == "as fast, gentler"
    # Slower than the start, by any amount: what the user has stays the recommendation.
    for seconds in (20.5, 23.5, 30.0):
        slower = feed(tuner(min_gain=0.05), start, down, TrialResult(sent=100, attempts=100, success=100,
                                                                     seconds=seconds))
        assert slower.trials[2].verdict == "no gain"
        assert slower.recommendation() is slower.trials[0] and slower.recommended_settings() == START


def test_a_short_trial_under_the_limit_wins_neither_nor_does_a_spacing_slower_than_the_start() -> None:
    """40 requests through 8 endpoints, 1 request/s per IP (a real run's figures). The trial at
    0.6-1.2 s ran its first rounds under the limit before one 429 widened its spacing to
    1.01-1.2 s; the trial at that spacing from the start is slower than the start. A setting
    under the limit is no recommendation, and none is slower than what the user has: the start."""
    t = feed(
        tuner(trial_requests=40, budget=200),
        TrialResult(sent=40, attempts=40, success=39, rate_limited=1, seconds=39 * 60 / 381.7,
                    paced_attempts=32, paced_rate_limited=1, throttled_delay=(0.86, 1.6)),
        TrialResult(sent=40, attempts=40, success=39, rate_limited=1, seconds=39 * 60 / 472.1,
                    paced_attempts=32, paced_rate_limited=1, throttled_delay=(1.01, 1.2)),
        TrialResult(sent=40, attempts=40, success=38, rate_limited=2, seconds=38 * 60 / 441.8,
                    paced_attempts=32, paced_rate_limited=2, throttled_delay=(1.0, 1.1)),
        TrialResult(sent=40, attempts=40, success=40, seconds=40 * 60 / 356.6,
                    paced_attempts=32, paced_rate_limited=0),
    )
    assert [tr.change for tr in t.trials] == [
        "start", "POLITE_DELAY down", "POLITE_DELAY down", "POLITE_DELAY as throttled"]
    assert t.trials[3].settings.delay == (1.01, 1.2)
    assert t.trials[3].verdict == "no gain"
    assert t.recommendation() is t.trials[0] and t.recommended_settings() == START


@pytest.mark.parametrize("site", [per_ip_site(1.0), per_ip_site(0.3), per_ip_site(1.2), host_cap_site(4.0),
                                  host_cap_site(40.0), throttled_site(1.0), throttled_site(1.3)],
                         ids=["per-ip-1", "per-ip-0.3", "per-ip-1.2", "cap-4", "cap-40", "throttled-1",
                              "throttled-1.3"])
def test_a_recommendation_is_never_slower_than_an_acceptable_start(site: Site) -> None:
    t = tuner(budget=2000)
    trials = search(t, site)
    chosen = t.recommendation()
    assert trials[0].result is not None and chosen is not None and chosen.result is not None
    if t.acceptable(trials[0].result):
        assert chosen.result.pages_per_min >= trials[0].result.pages_per_min


def test_no_throttled_trial_when_the_throttle_kept_the_spacing() -> None:
    t = tuner()
    trials = search(t, per_ip_site(0.5))
    assert all(tr.change != "POLITE_DELAY as throttled" for tr in trials)


def test_concurrency_never_goes_above_the_maximum() -> None:
    t = tuner(max_concurrency=3, budget=5000)
    trials = search(t, host_cap_site(cap=1000.0, latency=1.0))
    assert max(tr.settings.host_concurrency for tr in trials) == 3


def test_search_stops_at_the_first_ban_and_never_pushes_after_it() -> None:
    t = tuner(budget=5000)
    trials = search(t, per_ip_site(0.2, ban_below=0.5))
    blocked = [tr for tr in trials if tr.result is not None and tr.result.blocked]
    assert len(blocked) == 1 and blocked[0] is trials[-1]
    assert trials[-1].verdict == "BLOCKED"
    assert "403" in (t.stopped or "") and "first sign of blocking" in (t.stopped or "")
    assert t.next_trial() is None
    best = t.recommendation()
    assert best is not None and not best.result.blocked  # type: ignore[union-attr]
    assert best.settings.delay[0] >= 0.5


def test_a_blocked_start_gives_no_recommendation() -> None:
    t = tuner()
    trials = search(t, per_ip_site(0.1, ban_below=10.0))
    assert len(trials) == 1
    assert t.recommendation() is None


def test_recommendation_is_the_fastest_acceptable_trial() -> None:
    t = tuner(budget=400, max_429_rate=0.05, min_gain=0.05)
    results = [
        TrialResult(sent=100, attempts=100, success=98, rate_limited=2, seconds=30.0),  # 196/min
        # Faster, but 20% 429s: not acceptable.
        TrialResult(sent=100, attempts=100, success=80, rate_limited=20, seconds=10.0),  # 480/min
        # Faster than the start by 2% only: within min_gain, the gentler start stays.
        TrialResult(sent=100, attempts=100, success=99, rate_limited=1, seconds=29.7),
    ]
    for result in results:
        trial = t.next_trial()
        assert trial is not None
        t.record(trial, result)
    best = t.recommendation()
    assert best is not None and best.index == 1
    assert [tr.verdict for tr in t.trials] == ["ok", "too many 429s", "no gain"]


@pytest.mark.parametrize("seed", range(40))
def test_budget_is_never_exceeded(seed: int) -> None:
    rng = random.Random(seed)
    budget = rng.randint(20, 900)
    trial_requests = rng.randint(10, min(budget, 200))
    t = Tuner(START, budget=budget, trial_requests=trial_requests, max_concurrency=rng.randint(2, 20))
    while (trial := t.next_trial()) is not None:
        assert trial.allowance <= trial_requests
        assert sum(tr.used for tr in t.trials[:-1]) + trial.allowance <= budget
        roll = rng.random()
        if roll < 0.05:
            result = TrialResult(sent=None, error="crashed")  # counts its whole allowance
        else:
            sent = rng.randint(0, trial.allowance)
            limited = rng.randint(0, sent // 8) if sent else 0
            result = TrialResult(sent=sent, attempts=max(sent, 1), success=max(1, sent - limited),
                                 rate_limited=limited, bans=int(roll > 0.97), seconds=rng.uniform(1, 60))
        t.record(trial, result)
    assert t.used <= budget
    assert t.stopped


def test_a_failed_trial_counts_its_whole_allowance_and_stops() -> None:
    t = tuner(budget=300)
    trial = t.next_trial()
    assert trial is not None
    t.record(trial, TrialResult(sent=None, error="no result (exit code 1)"))
    assert t.used == 100 and t.next_trial() is None
    assert "failed" in (t.stopped or "") and t.recommendation() is None
    assert "failed" in format_row(trial)


def test_the_last_trial_must_get_enough_requests() -> None:
    t = tuner(budget=240, trial_requests=100)
    trials = search(t, per_ip_site(0.1))
    assert [tr.allowance for tr in trials] == [100, 100]
    assert "budget" in (t.stopped or "")


def test_settings_lines_and_row() -> None:
    s = TrialSettings(3, (1.07, 2.13))
    assert settings_lines(s, 1) == [
        "POLITE_HOST_CONCURRENCY = 3",
        "POLITE_ENDPOINT_CONCURRENCY = 1",
        "POLITE_DELAY = (1.07, 2.13)",
    ]
    assert settings_lines(TrialSettings(2, (0.8, 1.6)), 1)[2] == "POLITE_DELAY = (0.8, 1.6)"
    assert s.settings() == {
        "POLITE_HOST_CONCURRENCY": "3", "POLITE_HOST_CONCURRENCY_MAX": "3", "POLITE_DELAY": "1.07,2.13",
    }


# -- options -------------------------------------------------------------------


def parse(*argv: str) -> tuple[Command, argparse.Namespace]:
    cmd = Command()
    cmd.settings = Settings()
    parser = argparse.ArgumentParser()
    cmd.add_options(parser)
    opts, args = parser.parse_known_args(list(argv))
    cmd.process_options(args, opts)
    return cmd, opts


def test_options_are_parsed() -> None:
    _, opts = parse("--budget", "500", "--trial-requests", "50", "--trial-seconds", "30",
                    "--max-429-rate", "2%", "--min-gain", "0.1", "--start-delay", "1,2",
                    "-a", "start_url=http://x", "-s", "LOG_LEVEL=INFO")
    assert opts.budget == 500 and opts.trial_requests == 50 and opts.trial_seconds == 30.0
    assert opts.max_429_rate == pytest.approx(0.02) and opts.min_gain == pytest.approx(0.1)
    assert opts.start_delay == (1.0, 2.0) and opts.start_concurrency == 2
    _, opts = parse("--start-delay", "1.5")
    assert opts.start_delay == (1.0, 2.0)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--budget", "lots"], "--budget must be a whole number >= 1, got 'lots'"),
        (["--budget", "0"], "--budget must be a whole number >= 1"),
        (["--budget", "-5"], "--budget must be a whole number >= 1"),
        (["--budget", "50"], "--budget 50 is smaller than one trial (--trial-requests 100)"),
        (["--trial-requests", "3"], "--trial-requests must be a whole number >= 10"),
        (["--trial-seconds", "nan"], "--trial-seconds must be a number of seconds >= 5"),
        (["--trial-seconds", "1"], "--trial-seconds must be a number of seconds >= 5"),
        (["--max-429-rate", "150%"], "--max-429-rate must be a share between 0 and 1"),
        (["--max-429-rate", "high"], "--max-429-rate must be a share between 0 and 1"),
        (["--start-delay", "2,1"], "--start-delay must be MIN,MAX seconds with 0 < MIN <= MAX"),
        (["--start-delay", "0,1"], "--start-delay must be MIN,MAX seconds with 0 < MIN <= MAX"),
        (["--start-concurrency", "0"], "--start-concurrency must be a whole number >= 1"),
        (["--max-concurrency", "1"], "--max-concurrency 1 is below --start-concurrency 2"),
        (["-a", "start_url"], "Invalid -a value, use -a NAME=VALUE"),
        (["-s", "POLITE_DELAY=0.5"], "POLITE_DELAY is set by each trial; use --start-delay"),
    ],
)
def test_bad_options_are_refused_with_a_clear_message(argv: list[str], message: str) -> None:
    with pytest.raises(UsageError) as err:
        parse(*argv)
    assert message in str(err.value)


def test_project_checks() -> None:
    base = {"SPIDER_MODULES": ["example_project.spiders"], "POLITE_PROXIES": ["http://127.0.0.1:1"]}
    with pytest.raises(UsageError, match="Spider not found: nope"):
        _check_project(Settings({**base, "ADDONS": {"scrapy_polite.Addon": 500}}), "nope")
    with pytest.raises(UsageError, match="does not enable scrapy-polite"):
        _check_project(Settings(base), "catalogue")
    with pytest.raises(UsageError, match="POLITE_ENABLED is False"):
        _check_project(Settings({**base, "ADDONS": {"scrapy_polite.Addon": 500}, "POLITE_ENABLED": False}),
                       "catalogue")
    with pytest.raises(UsageError, match="POLITE_PROXIES="):
        _check_project(Settings({**base, "ADDONS": {"scrapy_polite.Addon": 500}, "POLITE_PROXIES": []}),
                       "catalogue")
    endpoints, per_endpoint = _check_project(
        Settings({**base, "ADDONS": {"scrapy_polite.Addon": 500},
                  "POLITE_PROXIES": ["http://127.0.0.1:1", "http://127.0.0.1:2"]}), "catalogue")
    assert (endpoints, per_endpoint) == (2, 1)


def test_the_429_rate_is_taken_over_paced_answers() -> None:
    """Each endpoint's first answer leaves at start-up with no delay before it: not the delay's fault."""
    data = {
        "sent": 60, "attempts": 60, "seconds": 12.0, "statuses": {"200": 56, "429": 4},
        "summary": {"success": 56, "rate_limited": 4, "bans": 0, "latency_p95": 0.02},
        "paced": {"attempts": 52, "rate_limited": 0},
    }
    result = TrialResult.from_trial_file(data)
    assert result.rate_429 == 0.0 and result.rate_limited == 4
    assert result.pages_per_min == pytest.approx(280.0)
    assert tuner().acceptable(result)
    data["paced"] = {"attempts": 52, "rate_limited": 3}
    assert not tuner().acceptable(TrialResult.from_trial_file(data))
    assert result.host_rate_limit is None and result.throttled_delay is None
    data["throttle"] = {"host": "shop.example", "delay": [0.8, 1.6], "concurrency": 1, "interval": 0.25}
    result = TrialResult.from_trial_file(data)
    assert result.host_rate_limit == 4.0 and result.throttled_host == "shop.example"
    assert result.throttled_delay == (0.8, 1.6)
    # Without paced answers (every answer was an endpoint's first), all answers count.
    assert TrialResult(sent=4, attempts=4, success=3, rate_limited=1, paced_attempts=0).rate_429 == 0.25


def test_a_challenge_page_stops_the_search_as_a_ban_does() -> None:
    base = per_ip_site(0.2)

    def challenging(s: TrialSettings, allowance: int) -> TrialResult:
        result = base(s, allowance)
        result.challenges = 1 if s.delay[0] < 0.5 else 0
        return result

    t = tuner(budget=5000)
    trials = search(t, challenging)
    assert trials[-1].verdict == "BLOCKED" and "challenge page" in (t.stopped or "")
    best = t.recommendation()
    assert best is not None and best.settings.delay[0] >= 0.5


def test_a_ban_before_the_throttled_step_recommends_the_spacing_the_throttle_widened_to() -> None:
    """The trial before a ban drew a 429 or two (under the acceptable rate) and its throttle widened
    the spacing past the site's limit; the ban ends the search before that spacing is tried. The
    recommendation keeps the fast trial but never its delay under the limit the throttle found."""
    t = tuner(budget=1000)
    results = [
        TrialResult(sent=60, attempts=60, success=60, seconds=30.0),  # start, clean
        # (0.6, 1.2): one 429 in 59; the throttle ended at (0.74, 0.78).
        TrialResult(sent=60, attempts=60, success=59, rate_limited=1, seconds=20.0,
                    paced_attempts=59, paced_rate_limited=1, throttled_delay=(0.74, 0.78)),
        TrialResult(sent=60, attempts=40, success=30, rate_limited=9, bans=1, status_403=1, seconds=10.0),
    ]
    for result in results:
        trial = t.next_trial()
        assert trial is not None
        t.record(trial, result)
    assert t.trials[-1].verdict == "BLOCKED" and t.next_trial() is None
    best = t.recommendation()
    assert best is t.trials[1] and best.settings.delay == (0.6, 1.2)
    recommended = t.recommended_settings()
    assert recommended is not None and recommended.delay == (0.74, 0.78)
    assert recommended.host_concurrency == best.settings.host_concurrency


def test_the_recommended_spacing_is_the_trials_own_once_its_throttled_spacing_was_tried() -> None:
    t = tuner()
    search(t, throttled_site(1.0))
    best = t.recommendation()
    assert best is not None and t.recommended_settings() == best.settings
    # And a clean best trial is recommended as it ran.
    t2 = tuner()
    search(t2, per_ip_site(0.5))
    assert t2.recommendation() is not None and t2.recommended_settings() == t2.recommendation().settings  # type: ignore[union-attr]


def _ran(index: int, success: int, seconds: float, interval: float = 0.0, limited: int = 0) -> Trial:
    trial = Trial(index, START, "start" if index == 1 else "POLITE_DELAY down", None, 40)
    trial.result = TrialResult(sent=40, attempts=40, success=success, rate_limited=limited, seconds=seconds,
                               throttled_host="a.example", throttled_interval=interval)
    return trial


def test_a_host_wide_limit_is_reported_with_how_sure_it_is() -> None:
    from scrapy_polite.tune.findings import host_limit_finding

    assert host_limit_finding([_ran(1, 40, 8.0), _ran(2, 40, 6.0)]) is None
    # Two trials at different settings held the host to about the same rate: the rate is likely,
    # its scope (the host's, or the endpoints' own limits summed) is not.
    likely = host_limit_finding([_ran(1, 40, 14.0, 1 / 3.0, 2), _ran(2, 40, 14.5, 1 / 2.9, 3)])
    assert likely is not None and likely.startswith("Host-wide limit: in trial 1 the throttle held a.example to 3.00")
    assert "(uncertain: 2 of 2 trial(s) met it at 2.90-3.00" in likely and "fewer endpoints" in likely
    # One trial's few 429s: a suspicion, said to be one (a per-IP limit looks the same).
    one = host_limit_finding([_ran(1, 39, 6.6), _ran(2, 38, 8.0, 1 / 6.43, 1)])
    assert one is not None and "(uncertain: 1 of 2 trial(s) met it, from 1 429(s)" in one
    # A trial served well above the suspected rate: there is no such limit.
    disproved = host_limit_finding([_ran(1, 40, 4.0), _ran(2, 38, 8.0, 1 / 6.43, 1)])
    assert disproved is not None and disproved.startswith("Host-wide limit: none found")
    assert "trial 1 was served 10.00 successful requests/s" in disproved


def _answers(start: float, gaps: list[float], limited_at: Collection[int] = ()) -> list[tuple[float, bool, bool]]:
    """(time, clean, rate-limited) of answers *gaps* apart; those at *limited_at* are 429s."""
    out, at = [], start
    for i, gap in enumerate(gaps):
        at += gap
        out.append((at, i not in limited_at, i in limited_at))
    return out


def test_the_served_rate_counts_clean_runs_after_the_first_429_only() -> None:
    from scrapy_polite.tune.served import SUSTAINED, settled_rate

    # A start-up burst answered fast and clean says nothing: no 429 yet, no rate.
    assert settled_rate(_answers(0.0, [0.01] * 40)) is None
    # After the first 429: the site answered every 0.4 s, then every 0.5 s.
    timeline = _answers(0.0, [0.01] * 5 + [0.4] * (SUSTAINED + 2) + [0.5] * 20, limited_at={4})
    assert settled_rate(timeline) == pytest.approx(1 / 0.4)
    # A 429 inside every run of SUSTAINED clean answers: no rate the site allowed.
    broken = _answers(0.0, [0.2] * 40, limited_at={0, *range(SUSTAINED - 1, 40, SUSTAINED - 1)})
    assert settled_rate(broken) is None


def _met(index: int, success: int, seconds: float, limit: float, served: float | None) -> Trial:
    trial = Trial(index, START, "start" if index == 1 else "POLITE_DELAY down", None, 40)
    trial.result = TrialResult(sent=40, attempts=40, success=success, rate_limited=4, seconds=seconds,
                               throttled_host="a.example", throttled_limit=limit, served_rate=served)
    return trial


def test_a_host_wide_limit_is_reported_at_the_rate_the_site_served() -> None:
    """The throttle's figure at a trial's end is one estimate; what the site served cleanly once
    the throttle had met the limit is measured, and the highest of any trial is reported."""
    from scrapy_polite.tune.findings import host_limit_finding

    finding = host_limit_finding([_met(1, 30, 15.0, 2.24, 2.6), _met(2, 30, 14.0, 2.9, 2.8)])
    assert finding is not None and finding.startswith("Host-wide limit: in trial 2 the throttle held a.example to 2.80")
    assert "2 of 2 trial(s) met it at 2.60-2.80" in finding
    # A trial whose throttle cut deep early holds the host far under the limit: the others' faster
    # trials drop its figure, not the limit they met.
    deep = host_limit_finding([_met(1, 33, 15.0, 2.7, 2.7), _met(2, 15, 20.0, 1.1, 0.9)])
    assert deep is not None and deep.startswith("Host-wide limit: in trial 1 the throttle held a.example to 2.70")
    assert "1 of 2 trial(s) met it" in deep
    data = {"sent": 40, "summary": {"success": 30}, "seconds": 15.0,
            "throttle": {"host": "a.example", "delay": [2.0, 4.0], "interval": 0.4, "limit_met": 2.7,
                         "served": 2.6}}
    assert TrialResult.from_trial_file(data).served_rate == 2.6
