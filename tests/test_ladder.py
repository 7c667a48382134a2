"""The escalation ladder: challenges, their bench, and tiered pools, judged from the site's access log."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections import defaultdict

import pytest
import pytest_twisted
from conftest import crawl
from example_project.spiders.accounts import AccountsSpider
from example_project.spiders.catalogue import CatalogueSpider
from logcheck import items_fetched
from test_stats import read_jsonl

from scrapy_polite import ChallengeDetected
from scrapy_polite import signals as polite_signals
from scrapy_polite.downloader.response_policy import ResponsePolicy, Verdict
from scrapy_polite.report.model import build
from scrapy_polite.report.page import render
from scrapy_polite.sandbox import ProxyConfig, SandboxConfig, SiteConfig
from scrapy_polite.sandbox.proxy import nth_address


def exit_ips(n: int) -> list[str]:
    """The exit IPs of the first *n* sandbox proxies, known before the sandbox starts."""
    return [nth_address(ProxyConfig().first_source, i) for i in range(n)]


def ladder_site(**kw) -> SiteConfig:
    kw.setdefault("name", "a")
    kw.setdefault("latency", [0.01, 0.03])
    return SiteConfig(**kw)


def challenges(log: list[dict], site: str = "a") -> list[dict]:
    return [e for e in log if e["site"] == site and e.get("challenge")]


def pages(log: list[dict], site: str = "a") -> list[dict]:
    return [e for e in log if e["site"] == site and e["status"] == 200 and not e.get("challenge")]


FAST = {"POLITE_DELAY": (0.2, 0.3), "POLITE_COOLDOWN": (0.3, 0.5)}


@pytest.mark.timing
@pytest_twisted.ensureDeferred
async def test_challenges_are_never_pages_and_bench_the_ip_for_the_host(sandbox, tmp_path) -> None:
    burned = exit_ips(1)[0]
    sb = sandbox(SandboxConfig(sites=[ladder_site(pages=30, flag_time=60.0, flagged_ips=[burned])],
                               proxies=ProxyConfig(count=3)))
    assert sb.proxy_exit_ips[0] == burned
    jsonl = tmp_path / "s.jsonl"
    bench = 2.0
    result = await crawl(CatalogueSpider, {"POLITE_PROXIES": sb.proxy_urls, "POLITE_CHALLENGE_BENCH": bench,
                                           "POLITE_STATS_JSONL": str(jsonl), **FAST}, start_url=sb.site_url("a"))
    log = sb.log()
    seen = challenges(log)
    assert seen and {e["ip"] for e in seen} == {burned}
    assert {e["status"] for e in seen} <= {200, 403}
    # Every item once, from a real page; the challenge pages are not pages.
    fetched = items_fetched([e for e in log if not e.get("challenge")])
    assert sorted(fetched) == list(range(1, 31)) and set(fetched.values()) == {1}
    assert result.stats["polite/success"] == len(pages(log))
    assert result.stats["polite/challenges"] == len(seen)
    assert result.stats[f"polite/challenges/host/{sb.site_url('a').split('//')[1].split(':')[0]}"] == len(seen)
    assert sum(v for k, v in result.stats.items() if k.startswith("polite/challenges/endpoint/")) == len(seen)
    records = read_jsonl(jsonl)
    assert sum(r["verdict"] == "challenge" for r in records) == len(seen)
    assert sum(r["verdict"] == "ok" for r in records) == len(pages(log))
    # After each challenge the IP is left alone on that host for the bench time.
    by_ip = defaultdict(list)
    for e in sorted(log, key=lambda e: e["t_start"]):
        by_ip[e["ip"]].append(e)
    gaps = [b["t_start"] - a["t_end"] for a, b in zip(by_ip[burned], by_ip[burned][1:]) if a.get("challenge")]
    assert all(g >= bench - 0.05 for g in gaps), gaps


@pytest_twisted.ensureDeferred
async def test_a_host_whose_cheap_tier_is_burned_finishes_on_the_expensive_one_and_comes_back(sandbox) -> None:
    cheap_ips = exit_ips(2)
    sb = sandbox(SandboxConfig(sites=[ladder_site(pages=40, flagged_ips=cheap_ips, flag_time=2.5)],
                               proxies=ProxyConfig(count=4)))
    cheap, expensive = sb.proxy_urls[:2], sb.proxy_urls[2:]
    assert sb.proxy_exit_ips[:2] == cheap_ips
    result = await crawl(CatalogueSpider, {
        "POLITE_PROXY_TIERS": [cheap, expensive], "POLITE_CHALLENGE_BENCH": 2.5,
        "POLITE_TIER_ESCALATE_AFTER": 2, "POLITE_TIER_COOLDOWN": 2.0, "POLITE_DELAY": (0.3, 0.4),
        "POLITE_COOLDOWN": (0.3, 0.5),
    }, start_url=sb.site_url("a"))
    log = sorted(sb.log(), key=lambda e: e["t_start"])
    fetched = items_fetched([e for e in log if not e.get("challenge")])
    assert sorted(fetched) == list(range(1, 41))
    first_expensive = next(e for e in log if e["ip"] not in cheap_ips)
    # The host starts on the cheap tier, and leaves it only after challenges there.
    before = [e for e in log if e["t_start"] < first_expensive["t_start"]]
    assert before and all(e["ip"] in cheap_ips for e in before) and any(e.get("challenge") for e in before)
    # Pages were served through the expensive tier ...
    assert any(e["ip"] not in cheap_ips for e in pages(log))
    # ... and, once the cheap tier cooled, through the cheap one again.
    back = [e for e in pages(log) if e["ip"] in cheap_ips and e["t_start"] > first_expensive["t_start"]]
    assert back, "the host never returned to the cheap tier"
    assert not challenges([e for e in log if e["ip"] not in cheap_ips])
    assert result.stats["polite/tier/moves/up"] >= 1 and result.stats["polite/tier/moves/down"] >= 1
    assert result.stats["polite/tier/1/requests"] == sum(e["ip"] not in cheap_ips for e in log)
    assert result.stats["polite/tier/1/bytes"] > 0


class BodyPolicy(ResponsePolicy):
    """A site's own trap page: item 5 is a challenge, whatever its status says."""

    def classify(self, request, response, **kw) -> Verdict:
        if b'<span class="id">5</span>' in response.body:
            return Verdict("challenge", "trap page")
        return super().classify(request, response, **kw)


@pytest_twisted.ensureDeferred
async def test_a_custom_policy_is_honoured_by_stats_tune_and_report(sandbox, tmp_path) -> None:
    sb = sandbox(SandboxConfig(sites=[ladder_site(pages=12)], proxies=ProxyConfig(count=3)))
    jsonl = tmp_path / "s.jsonl"
    settings = {"POLITE_PROXIES": sb.proxy_urls, "POLITE_RESPONSE_POLICY": "test_ladder.BodyPolicy",
                "POLITE_CHALLENGE_RETRY_TIMES": 1, "POLITE_CHALLENGE_BENCH": 5.0, **FAST}
    result = await crawl(CatalogueSpider, {**settings, "POLITE_STATS_JSONL": str(jsonl)}, start_url=sb.site_url("a"))
    log = sb.log()
    trap = [e for e in log if e["path"] == "/item/5"]
    assert len(trap) == 2 and len({e["ip"] for e in trap}) == 2  # re-queued once, through another endpoint
    answered = [e for e in log if e["status"] == 200]
    assert result.stats["polite/challenges"] == 2
    assert result.stats["polite/success"] == len(answered) - 2
    assert result.stats["polite/gave_up/challenge"] == 1
    data = build([jsonl])
    assert data.challenges == 2 and data.ok == len(answered) - 2
    assert "Escalation ladder" in render(data, "t", ["s.jsonl"], 10)
    # A tune trial stops at the first answer the policy calls a challenge.
    trial = tmp_path / "trial.json"
    sb2 = sandbox(SandboxConfig(sites=[ladder_site(pages=12)], proxies=ProxyConfig(count=3)))
    await crawl(CatalogueSpider, {**settings, "POLITE_TUNE_TRIAL_FILE": str(trial), "POLITE_TUNE_TRIAL_REQUESTS": 100},
                start_url=sb2.site_url("a"))
    out = json.loads(trial.read_text())
    assert out["stopped"] == "blocked" and out["first_ban"]["verdict"] == "challenge"
    assert out["first_ban"]["url"].endswith("/item/5")
    assert out["summary"]["challenges"] == 1
    # The tuner reads that trial as blocked: its settings are never recommended.
    from scrapy_polite.tune.values import TrialResult

    assert TrialResult.from_trial_file(out).blocked


class MarkingSpider(CatalogueSpider):
    """Item 3 looks fine to the site, but the spider knows its first answer is a decoy."""

    name = "marking"

    def parse_page(self, response):
        if response.url.endswith("/item/3") and not response.meta.get("polite_challenge_retries"):
            raise ChallengeDetected(response, "decoy page")
        yield from super().parse_page(response)


@pytest_twisted.ensureDeferred
async def test_a_page_the_spider_marks_as_a_challenge_is_requeued_like_one(sandbox, tmp_path) -> None:
    sb = sandbox(SandboxConfig(sites=[ladder_site(pages=10)], proxies=ProxyConfig(count=3)))
    jsonl = tmp_path / "s.jsonl"
    result = await crawl(MarkingSpider, {"POLITE_PROXIES": sb.proxy_urls, "POLITE_CHALLENGE_BENCH": 30.0,
                                         "POLITE_STATS_JSONL": str(jsonl), **FAST}, start_url=sb.site_url("a"))
    log = sorted(sb.log(), key=lambda e: e["t_start"])
    decoy = [e for e in log if e["path"] == "/item/3"]
    assert len(decoy) == 2 and decoy[0]["ip"] != decoy[1]["ip"]
    assert not [e for e in log if e["ip"] == decoy[0]["ip"] and e["t_start"] > decoy[0]["t_end"]]
    assert sorted(i["id"] for i in result.items) == list(range(1, 11))
    assert result.stats["polite/challenges"] == 1
    assert result.stats["polite/success"] == sum(e["status"] == 200 for e in log) - 1
    assert build([jsonl]).ok == result.stats["polite/success"]


@pytest.mark.once
def test_the_sandbox_site_climbs_the_ladder_for_a_client_ignoring_its_429s(sandbox) -> None:
    cfg = SandboxConfig(sites=[ladder_site(per_ip_rate=1.0, retry_after=5.0, challenge_after=2, strikes_to_block=6)])
    assert SandboxConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    sb = sandbox(cfg)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    answers = []
    for _ in range(9):
        try:
            with opener.open(sb.site_url("a") + "/item/1", timeout=5) as r:
                answers.append((r.status, r.headers.get("cf-mitigated"), b"verify you are human" in r.read()))
        except urllib.error.HTTPError as e:
            answers.append((e.code, e.headers.get("cf-mitigated"), b"verify you are human" in e.read()))
    assert [a[0] for a in answers] == [200, 429, 429, 200, 403, 200, 403, 403, 403]
    assert answers[3][2] and answers[4][1] == "challenge" and answers[5][2] and answers[6][1] == "challenge"
    assert not answers[0][2] and answers[7][1] is None and not answers[7][2]  # then blocked
    log = sb.log()
    assert [e["challenge"] for e in log] == [False] * 3 + [True] * 4 + [False] * 2


@pytest_twisted.ensureDeferred
async def test_a_challenged_session_is_retired_and_its_flow_restarts_on_a_new_identity(sandbox) -> None:
    burned = exit_ips(1)[0]
    sb = sandbox(SandboxConfig(sites=[ladder_site(flagged_ips=[burned], flag_time=60.0)],
                               proxies=ProxyConfig(count=3, gateway=False)))
    retired: list[dict] = []
    seen: list[dict] = []

    def on_retired(**kw) -> None:
        retired.append(kw)

    def on_challenge(**kw) -> None:
        seen.append(kw)

    def connect(crawler) -> None:
        crawler.signals.connect(on_retired, signal=polite_signals.session_retired)
        crawler.signals.connect(on_challenge, signal=polite_signals.polite_challenge)

    result = await crawl(AccountsSpider, {"POLITE_PROXIES": sb.proxy_urls, **FAST}, connect,
                         start_url=sb.site_url("a"), users="6")
    log = sb.log()
    assert challenges(log) and len(seen) == len(challenges(log))
    assert sorted(i["user"] for i in result.items) == [f"user{i}" for i in range(6)]
    assert all(i["status"] == 200 for i in result.items)
    # Each challenged session was retired and reported, and finished its flow on one other IP.
    assert {r["session"] for r in retired} == {s["session"] for s in seen} != set()
    assert result.stats["polite/sessions/retired"] == len(retired)
    steps = defaultdict(list)
    for e in sorted(log, key=lambda e: e["t_start"]):
        if e.get("user"):
            steps[e["user"]].append((e["path"].split("?")[0], e["ip"]))
    for user, flow in steps.items():
        assert [p for p, _ in flow] == ["/login", "/account", "/account/orders"], (user, flow)
        assert len({ip for _, ip in flow}) == 1 and flow[0][1] != burned
    assert sum(e["status"] == 409 for e in log) == 0
