"""Fault cases: a hostile site's header values (Retry-After, exit IP, robots.txt Crawl-delay) lose no request.

Real crawls against sandbox sites that answer their 429s with ``Retry-After`` values no client can
use (dates past year 9999, a 20-digit year, non-ASCII, 8000 characters, empty), and send
``X-Exit-IP``-style headers of their own that name no address. The proxies name the real exit IP
in ``X-Outgoing-IP``, last in ``POLITE_EXIT_IP_HEADERS``, so a site's header is read first.
"""

from __future__ import annotations

import http.client
import json
import re
from collections import defaultdict
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import pytest_twisted
from example_project.spiders.catalogue import CatalogueSpider
from faultcheck import FAULT_AUTH, assert_clean, assert_pages_accounted, fault_crawl
from logcheck import items_fetched, statuses

from scrapy_polite.sandbox import ProxyConfig, SandboxConfig, SiteConfig
from scrapy_polite.sandbox.config import LITERAL_RETRY_AFTER
from scrapy_polite.settings.config import DEFAULTS

PAGES = 12

#: Each hostile Retry-After form, with the exit-IP (and proxy-error) headers the same site sends.
HOSTILE = {
    "date-overflow": [["X-Exit-IP", "999.1.1.1"]],
    "date-year20": [["X-Exit-IP", "garbage"]],
    "non-ascii": [["X-Exit-IP", "\uff11\uff12\uff17.\uff10.\uff10.\uff11"]],
    "huge": [["X-Exit-IP", "1" * 8192], ["X-Proxy-Error", "\u00e9" * 4000]],
    "empty": [["X-Proxy-Exit-IP", ""], ["X-Exit-IP", "127.0.0.1, 10.0.0.1"], ["X-Proxy-Error", ""]],
}


def _get_via(proxy_url: str, url: str) -> tuple[int, http.client.HTTPMessage]:
    p = urlsplit(proxy_url)
    conn = http.client.HTTPConnection(p.hostname, p.port, timeout=5)
    try:
        conn.request("GET", url)
        response = conn.getresponse()
        response.read()
        return response.status, response.headers
    finally:
        conn.close()


@pytest.mark.once
def test_the_hostile_site_sends_its_values_as_they_are(sandbox) -> None:
    sites = [SiteConfig(name=form, per_ip_rate=0.1, strikes_to_block=None, retry_after_form=form,
                        extra_headers=HOSTILE[form]) for form in HOSTILE]
    sb = sandbox(SandboxConfig(sites=sites, proxies=ProxyConfig(count=1, gateway=False, exit_ip_header="X-Outgoing-IP")))
    for form, extra in HOSTILE.items():
        url = sb.site_url(form) + "/item/1"
        assert _get_via(sb.proxy_urls[0], url)[0] == 200
        status, headers = _get_via(sb.proxy_urls[0], url)
        assert status == 429
        # http.client reads header bytes as latin-1: back to bytes, they are the value's UTF-8.
        assert headers["Retry-After"].encode("latin-1") == LITERAL_RETRY_AFTER[form].encode("utf-8")
        for name, value in extra:
            assert headers[name].encode("latin-1") == value.encode("utf-8")
    assert [e["status"] for e in sb.log()] == [200, 429] * len(HOSTILE)


@pytest.mark.parametrize("form", list(HOSTILE))
@pytest_twisted.ensureDeferred
async def test_hostile_retry_after_and_exit_ip_headers_lose_nothing(sandbox, tmp_path: Path, form: str) -> None:
    site = SiteConfig(
        name="a", pages=PAGES, latency=[0.01, 0.03], per_ip_rate=2.0, per_ip_burst=1, retry_after=0.5,
        retry_after_form=form, strikes_to_block=None, extra_headers=HOSTILE[form],
    )
    sb = sandbox(SandboxConfig(sites=[site], proxies=ProxyConfig(count=3, exit_ip_header="X-Outgoing-IP", auth=FAULT_AUTH)))
    jsonl = tmp_path / "stats.jsonl"
    run = await fault_crawl(CatalogueSpider, {
        "POLITE_PROXIES": sb.proxy_urls, "POLITE_DELAY": (0.1, 0.2), "POLITE_COOLDOWN": (0.5, 0.8),
        "POLITE_STATS_JSONL": str(jsonl), "CLOSESPIDER_TIMEOUT": 20,
    }, tmp_path / "crawl.log", start_url=sb.site_url("a"))
    log = sb.log()
    limited = statuses(log).get(429, 0)
    assert limited >= 1, "the site drew no 429: the case tests nothing"
    assert run.stats["finish_reason"] == "finished"
    assert_pages_accounted(run, log, range(1, PAGES + 1))
    assert sorted(items_fetched(log)) == list(range(1, PAGES + 1))
    # Every 429 was heard, re-queued and recorded; the cooldown stood in for its Retry-After.
    assert run.stats.get("polite/requeued/rate", 0) + run.stats.get("polite/gave_up/rate", 0) == limited
    assert run.stats.get("polite/requeued/rate", 0) == limited
    assert run.stats.get("polite/rate_limited", 0) == limited
    records = [r for line in jsonl.read_text().splitlines() if "event" not in (r := json.loads(line))]
    assert len(records) == len(log)
    assert sum(r["rate_limited"] for r in records) == limited
    # Exit IPs are only the proxies' real ones, read past the site's headers.
    assert {r["exit_ip"] for r in records} <= set(sb.proxy_exit_ips)
    assert all(r["exit_ip"] and r["exit_ip_source"] == "header" for r in records)
    reported = {k.removeprefix("polite/exit_ip/") for k in run.stats if k.startswith("polite/exit_ip/")}
    assert reported and reported <= set(sb.proxy_exit_ips)
    invalid = [name for name, _ in HOSTILE[form] if name in DEFAULTS["POLITE_EXIT_IP_HEADERS"]]
    assert run.stats["polite/exit_ip_invalid"] == len(records) * len(invalid)
    warnings = re.findall(r"WARNING: ignored (\S+) header", run.log_text)
    assert sorted(warnings) == sorted(invalid)
    assert_clean(run)


@pytest_twisted.ensureDeferred
async def test_a_huge_robots_crawl_delay_is_capped_at_retry_after_max(sandbox, tmp_path: Path) -> None:
    site = SiteConfig(name="a", pages=3, latency=[0.01, 0.02], robots_crawl_delay=1e9)
    sb = sandbox(SandboxConfig(sites=[site], proxies=ProxyConfig(count=1, auth=FAULT_AUTH)))
    run = await fault_crawl(CatalogueSpider, {
        "POLITE_PROXIES": sb.proxy_urls, "ROBOTSTXT_OBEY": True, "POLITE_DELAY": (0.05, 0.1),
        "POLITE_RETRY_AFTER_MAX": 0.5, "CLOSESPIDER_TIMEOUT": 10,
    }, tmp_path / "crawl.log", start_url=sb.site_url("a"))
    log = sb.log()
    assert run.stats["finish_reason"] == "finished"
    assert_pages_accounted(run, log, range(1, 4))
    assert sorted(items_fetched(log)) == [1, 2, 3]
    starts = defaultdict(list)
    for e in log:
        if e["path"] != "/robots.txt":
            starts[e["ip"]].append(e["t_start"])
    gaps = [b - a for ts in starts.values() for a, b in zip(sorted(ts), sorted(ts)[1:])]
    assert gaps and min(gaps) >= 0.5 - 0.05  # the cap is still the minimum spacing
    capped = [line for line in run.log_text.splitlines() if "Crawl-delay" in line]
    assert len(capped) == 1 and "WARNING" in capped[0] and "Crawl-delay 1e+09 s capped" in capped[0], capped
    assert_clean(run)
