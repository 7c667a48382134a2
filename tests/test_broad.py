"""Broad crawls: state bounded by what is active, a scheduler queue that scales, bounded stats."""

from __future__ import annotations

import random
from collections import Counter
from types import SimpleNamespace
from typing import Any

import pytest
import pytest_twisted
import scrapy
from conftest import crawl
from logcheck import items_fetched
from scrapy.pqueues import DownloaderAwarePriorityQueue
from scrapy.settings import Settings

from scrapy_polite.gate.local import PAIR_MEMORY, LocalGate
from scrapy_polite.pool.endpoints import Endpoint
from scrapy_polite.pool.host_memory import HostMemory
from scrapy_polite.sandbox import ProxyConfig, SandboxConfig, SiteConfig
from scrapy_polite.scheduler.queue import ROUND_ROBIN, LoadIndex, SortedNames
from scrapy_polite.settings.config import PoliteConfig
from scrapy_polite.throttle.policy import ThrottlePolicy


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def endpoints(n: int) -> list[Endpoint]:
    return [Endpoint(key=f"http://10.0.0.{i}:80", url=f"http://10.0.0.{i}:80", label=f"p{i}") for i in range(n)]


def make_gate(clock: Clock, n: int = 3, **kw: Any) -> LocalGate:
    kw.setdefault("host_concurrency", 2)
    return LocalGate(endpoints(n), endpoint_concurrency=1, delay=(0.0, 0.0), backoff=(2.0, 120.0),
                     max_failures=5, call_later=lambda d, f: None, clock=clock, rng=random.Random(1), **kw)


def lease(gate: LocalGate, host: str, session: str | None = None) -> Any:
    got: list[Any] = []
    gate.acquire(host, session).addCallback(got.append)
    assert got, "granted at once"
    return got[0]


# -- eviction and resumption --------------------------------------------------


@pytest.mark.once
def test_idle_host_is_evicted_and_resumes_from_its_learned_limits() -> None:
    clock = Clock()
    gate = make_gate(clock, memory_ttl=600.0)
    gate.set_host_limit("a", 5)
    gate.set_host_delay("a", (0.3, 0.4))
    gate.set_host_interval("a", 0.25)
    gate.release(lease(gate, "a"))
    gate.release(lease(gate, "plain"))
    clock.now += 5.0
    gate.sweep()
    assert "a" not in gate.hosts and "plain" not in gate.hosts and not gate._pairs
    assert "plain" not in gate.memory  # nothing learned, nothing kept
    h = gate.host("a")
    assert (h.limit, h.delay, h.interval) == (5, (0.3, 0.4), 0.25)
    clock.now += 5.0
    gate.sweep()
    clock.now += 601.0  # older than the memory's age limit: back to the configured defaults
    h = gate.host("a")
    assert (h.limit, h.delay, h.interval) == (2, (0.0, 0.0), 0.0)


@pytest.mark.once
def test_host_with_a_cooldown_a_pause_or_a_waiter_is_never_evicted() -> None:
    clock = Clock()
    gate = make_gate(clock, n=1, host_concurrency=1)
    gate.release(lease(gate, "cool"))
    gate.cool_endpoint(next(iter(gate.endpoints)), "cool", 10.0)
    gate.host("paused")
    gate.pause_host("paused", 20.0)
    held = lease(gate, "busy")
    waiting: list[Any] = []
    gate.acquire("busy").addCallback(waiting.append)  # the only endpoint is held: it waits
    assert gate.waiting() == 1
    clock.now += 9.0
    gate.sweep()
    assert {"cool", "paused", "busy"} <= set(gate.hosts)
    clock.now += 2.0 + PAIR_MEMORY
    gate.sweep()
    assert "cool" not in gate.hosts and {"paused", "busy"} <= set(gate.hosts)
    clock.now += 100.0
    gate.sweep()
    assert "paused" not in gate.hosts and "busy" in gate.hosts
    gate.release(held)
    assert waiting and gate.waiting() == 0
    gate.release(waiting[0])
    clock.now += 5.0
    gate.sweep()
    assert not gate.hosts


@pytest.mark.once
def test_host_memory_is_a_bounded_lru() -> None:
    clock = Clock()
    gate = make_gate(clock, host_memory=3)
    for i in range(10):
        gate.set_host_limit(f"h{i}", 7)
        gate.release(lease(gate, f"h{i}"))
        clock.now += 0.01
    clock.now += 5.0
    gate.sweep()
    assert not gate.hosts and len(gate.memory) == 3
    assert [k for k, _ in gate.memory.items()] == ["h7", "h8", "h9"]
    memory: HostMemory[int] = HostMemory(size=0)
    memory.remember("x", 1, 0.0)
    assert len(memory) == 0


@pytest.mark.once
def test_eviction_is_amortised_per_request() -> None:
    """Each acquire and release looks at a bounded number of idle entries, yet keeps up."""
    clock = Clock()
    gate = make_gate(clock, n=8)
    for i in range(5000):
        clock.now += 0.01
        gate.release(lease(gate, f"h{i}"))
        assert len(gate._evict_heap) == len(gate.hosts) <= 200  # about a second's worth of hosts
    assert not gate._pairs.keys() - {(k, h) for k, h in gate._pairs if h in gate.hosts}


@pytest.mark.once
def test_idle_session_is_forgotten_and_sessions_stays_right() -> None:
    clock = Clock()
    gate = make_gate(clock, memory_ttl=10.0)
    gate.release(lease(gate, "a", "s1"))
    held = lease(gate, "a", "s2")
    assert set(gate.sessions()) == {"s1", "s2"}
    pinned = next(st.endpoint for st in gate.endpoints.values() if st.endpoint.label == gate.sessions()["s1"])
    assert gate.session_load.of(pinned.key) == 1
    clock.now += 11.0
    gate.sweep()
    assert set(gate.sessions()) == {"s2"}  # s2 is busy: kept however long
    assert gate.session_load.of(pinned.key) == 0
    gate.release(held)
    clock.now += 5.0
    gate.release(lease(gate, "a", "s3"))
    clock.now += 6.0
    gate.sweep()
    assert set(gate.sessions()) == {"s3"}
    assert sum(gate.session_load.of(k) for k in gate.endpoints) == 1


@pytest.mark.once
def test_throttle_findings_survive_the_hosts_eviction() -> None:
    # A host the gate forgot for idleness comes back at the rate its 429 taught, not from scratch.
    clock = Clock()
    cfg = PoliteConfig.from_settings(Settings({"POLITE_PROXIES": ["http://10.0.0.1:80"]}))
    gate = make_gate(clock, host_concurrency=4)
    policy = ThrottlePolicy(cfg, gate, clock=clock)
    l1 = lease(gate, "a")
    gate.release(l1)
    policy.rate_limited(l1, 1.0)
    learnt = gate.host("a").interval
    assert learnt > 0
    clock.now += 10.0
    gate.sweep()
    assert "a" not in gate.hosts
    l2 = lease(gate, "a")
    assert gate.host("a").interval == pytest.approx(learnt)
    gate.release(l2)
    policy.ok(l2, 200)


# -- the scheduler queue ---------------------------------------------------------


def scrapy_choice(stats: list[tuple[int, str]], state: SimpleNamespace) -> str:
    """The slot Scrapy's own DownloaderAwarePriorityQueue picks from *stats*."""
    if ROUND_ROBIN:
        return DownloaderAwarePriorityQueue._next_slot(state, stats, update_state=True)  # type: ignore[arg-type]
    return min(stats)[1]


@pytest.mark.parametrize("seed", range(20))
def test_load_index_picks_what_scrapys_queue_picks(seed: int) -> None:
    rng = random.Random(seed)
    names = [f"s{rng.randrange(10**6)}.example" for _ in range(rng.choice([1, 5, 60, 700]))]
    loads = {n: rng.randrange(4) for n in names}
    index = LoadIndex()
    for n, load in loads.items():
        index.set(n, load)
    state = SimpleNamespace(_last_selected_slot=None)
    for _ in range(400):
        if not loads:
            break
        expected = scrapy_choice([(load, n) for n, load in loads.items()], state)
        assert index.best() == expected
        move = rng.random()
        if move < 0.3:  # the slot emptied
            del loads[expected]
            index.discard(expected)
        else:  # loads move as the gate grants and releases
            for n in rng.sample(list(loads), min(3, len(loads))):
                loads[n] = max(0, loads[n] + rng.choice([-1, 1]))
                index.set(n, loads[n])
    assert len(index) == len(loads)


def test_load_index_heap_holds_distinct_loads_however_often_a_slot_flickers() -> None:
    index = LoadIndex()
    index.set("busy", 3)
    for i in range(10_000):  # a slot whose load goes 0, 1, 0, 1, ... as requests come and go
        index.set("flicker", i % 2)
        assert index.best() == "flicker"
    assert len(index._loads) <= 3


@pytest.mark.once
def test_sorted_names_match_a_sorted_list() -> None:
    rng = random.Random(3)
    names = SortedNames()
    truth: set[str] = set()
    for _ in range(2000):
        n = f"h{rng.randrange(1500)}"
        if n in truth and rng.random() < 0.5:
            names.remove(n)
            truth.discard(n)
        elif n not in truth:
            names.add(n)
            truth.add(n)
        ordered = sorted(truth)
        if ordered:
            probe = f"h{rng.randrange(1500)}"
            assert names.first() == ordered[0]
            assert names.after(probe) == next((x for x in ordered if x > probe), None)
    assert len(names) == len(truth)


class FakeDownloader:
    def __init__(self) -> None:
        self.slots: dict[str, Any] = {}

    def get_slot_key(self, request: scrapy.Request) -> str:
        return request.meta["download_slot"]


class FakeCrawler:
    """What the queue reads of a crawler: settings, the downloader's slots, signals."""

    def __init__(self) -> None:
        from scrapy.signalmanager import SignalManager

        self.settings = Settings({"POLITE_PROXIES": ["http://10.0.0.1:80", "http://10.0.0.2:80"],
                                  "POLITE_STALL_TIMEOUT": 0, "POLITE_DELAY": 0, "CONCURRENT_REQUESTS_PER_IP": 0})
        self.engine = SimpleNamespace(downloader=FakeDownloader())
        self.signals = SignalManager()


def test_queue_pops_in_the_order_of_the_previous_implementation(monkeypatch: pytest.MonkeyPatch) -> None:
    """The indexed queue against the same class asking the gate about every slot on each pop."""
    from scrapy.squeues import FifoMemoryQueue

    from scrapy_polite.runtime import get_runtime
    from scrapy_polite.scheduler import queue as queue_module

    rng = random.Random(7)
    crawler = FakeCrawler()
    gate = get_runtime(crawler).gate
    new = queue_module.PolitePriorityQueue(crawler, FifoMemoryQueue, "")
    old = queue_module.PolitePriorityQueue(crawler, FifoMemoryQueue, "")
    old._index = None  # the previous implementation: a gate lookup per pending slot
    assert new._index is not None
    slots = [f"host{i}" for i in range(40)]
    held: list[Any] = []
    for i in range(300):
        slot = rng.choice(slots)
        for q in (new, old):
            q.push(scrapy.Request(f"http://{slot}/{i}", meta={"download_slot": slot}))
    popped = 0
    while len(old):
        a, b = new.pop(), old.pop()
        assert a is not None and b is not None and a.url == b.url
        popped += 1
        slot = a.meta["download_slot"]
        # The popped request goes to the gate; others come back: loads move.
        if rng.random() < 0.7:
            gate.acquire(slot).addCallback(held.append)
        if held and rng.random() < 0.5:
            gate.release(held.pop(rng.randrange(len(held))))
    assert popped == 300 and new.pop() is None and len(new) == 0


# -- bounded stats ------------------------------------------------------------------


class BroadSpider(scrapy.Spider):
    """One item page per download slot, a few slots busier than the rest."""

    name = "broad"

    def __init__(self, base: str = "", slots: int = 40, **kw: Any) -> None:
        super().__init__(**kw)
        self.base, self.slots = base, int(slots)

    async def start(self) -> Any:
        for r in self._requests():
            yield r

    def _requests(self) -> Any:
        page = 0
        for i in range(self.slots):
            for _ in range(4 if i < 3 else 1):
                page += 1
                yield scrapy.Request(f"{self.base}/item/{page}", meta={
                    "download_slot": f"host{i:03d}", "polite_session": f"user{page}"}, callback=self.parse)

    def parse(self, response: scrapy.http.Response) -> Any:
        yield {"url": response.url}


@pytest_twisted.ensureDeferred
async def test_stats_stay_top_n_plus_other_across_many_slots(sandbox) -> None:
    sb = sandbox(SandboxConfig(sites=[SiteConfig(name="a", pages=60, latency=[0.005, 0.01])],
                               proxies=ProxyConfig(count=8)))
    result = await crawl(BroadSpider, {
        "POLITE_PROXIES": sb.proxy_urls, "POLITE_DELAY": (0.0, 0.01), "POLITE_STATS_TOP": 5,
        "POLITE_STATS_SESSIONS_MAP": 4, "CONCURRENT_REQUESTS": 32,
    }, base=sb.site_url("a"), slots=49)
    log = sb.log()
    fetched = items_fetched(log)
    assert sorted(fetched) == list(range(1, 59)) and set(fetched.values()) == {1}
    stats = result.stats
    per_host = {k.split("/")[2] for k in stats if k.startswith("polite/host/") and k.endswith("/attempts")}
    assert len(per_host) == 5 + 1 and "(other)" in per_host
    assert {"host000", "host001", "host002"} <= per_host  # the busiest are the ones kept
    attempts = Counter(stats[f"polite/host/{h}/attempts"] for h in per_host if h != "(other)")
    assert sum(stats[f"polite/host/{h}/attempts"] for h in per_host) == len(log) == 58
    assert stats["polite/host/(other)/attempts"] == 58 - sum(n * c for n, c in attempts.items())
    assert stats["polite/host/(other)/status/200"] == stats["polite/host/(other)/attempts"]
    assert stats["polite/hosts_folded"] == 49 - 5
    assert len(stats["polite/sessions_map"]) == 4 and stats["polite/sessions_map_left_out"] == 58 - 4
    eps = {k[len("polite/endpoint/"):-len("/attempts")] for k in stats
           if k.startswith("polite/endpoint/") and k.endswith("/attempts")}
    assert len(eps) == 5 + 1 and stats["polite/endpoints_folded"] == len({e["ip"] for e in log}) - 5


# -- choosing an endpoint for a new session --------------------------------------


@pytest.mark.once
def test_session_load_walks_endpoints_fewest_sessions_first() -> None:
    from scrapy_polite.gate.state import SessionLoad

    load = SessionLoad()
    for key in "abc":
        load.add(key)
    load.pin("a")
    load.pin("a")
    load.pin("b")
    assert [list(bucket) for bucket in load.least_shared()] == [["c"], ["b"], ["a"]]
    load.unpin("a")
    load.unpin("a")
    load.unpin("a")  # never below zero
    assert [list(bucket) for bucket in load.least_shared()] == [["c", "a"], ["b"]]
    assert (load.of("a"), load.of("b"), load.of("missing")) == (0, 1, 0)
    load.add("b")  # adding a known endpoint keeps its count
    assert load.of("b") == 1


@pytest.mark.once
def test_new_sessions_fill_every_endpoint_once_before_any_twice_and_skip_benched_ones() -> None:
    clock = Clock()
    gate = make_gate(clock, n=200, host_concurrency=10_000)
    benched = next(iter(gate.endpoints))
    gate.ban_endpoint(benched, "a", 60.0)
    for i in range(199 * 2):
        gate.release(lease(gate, "a", f"s{i}"))
        clock.now += 0.001
    per_endpoint = Counter(gate.sessions().values())
    assert gate.endpoints[benched].endpoint.label not in per_endpoint  # banned for this host
    assert len(per_endpoint) == 199 and set(per_endpoint.values()) == {2}, per_endpoint


@pytest.mark.once
def test_new_session_takes_a_healthy_endpoint_before_an_as_little_shared_one_in_backoff() -> None:
    clock = Clock()
    gate = make_gate(clock, n=3, host_concurrency=10)
    cooling = list(gate.endpoints)[0]
    gate.endpoint_failed(cooling)
    label = gate.endpoints[cooling].endpoint.label
    gate.release(lease(gate, "a", "s0"))
    gate.release(lease(gate, "a", "s1"))
    assert label not in {gate.sessions()["s0"], gate.sessions()["s1"]}
    gate.acquire("a", "s2")  # fewest sessions wins over health: it waits out the backoff there
    assert gate.sessions()["s2"] == label
