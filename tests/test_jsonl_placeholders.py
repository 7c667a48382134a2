"""POLITE_STATS_JSONL placeholders, as in FEEDS URIs: real crawls through the sandbox."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import pytest_twisted
from conftest import crawl
from example_project.spiders.catalogue import CatalogueSpider
from twisted.internet.defer import Deferred, gatherResults

from scrapy_polite.errors import PoliteConfigError
from scrapy_polite.sandbox import ProxyConfig, SandboxConfig, SiteConfig

#: FEEDS' %(time)s: UTC, to the second, with ':' replaced by '-'.
FEEDS_TIME = r"\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d\+00-00"


def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest_twisted.ensureDeferred
async def test_two_concurrent_jobs_write_files_of_their_own(sandbox, tmp_path: Path) -> None:
    """Two crawls at once, Scrapyd-style (a _job spider argument each): one file per job, no mixing."""
    sb = sandbox(SandboxConfig(sites=[SiteConfig(name="a", pages=8), SiteConfig(name="b", pages=8)],
                               proxies=ProxyConfig(count=4)))
    settings = {"POLITE_PROXIES": sb.proxy_urls, "POLITE_DELAY": (0.05, 0.1),
                "POLITE_STATS_JSONL": str(tmp_path / "%(name)s-%(job)s-%(time)s.jsonl")}
    await gatherResults([
        Deferred.fromCoroutine(crawl(CatalogueSpider, settings, start_url=sb.site_url(site), _job=f"job-{site}"))
        for site in ("a", "b")
    ])
    files = sorted(p.name for p in tmp_path.glob("*.jsonl"))
    assert len(files) == 2, files
    for name, site in zip(files, ("a", "b")):
        assert re.fullmatch(rf"catalogue-job-{site}-{FEEDS_TIME}\.jsonl", name), name
    log = sb.log()
    for name, site in zip(files, ("a", "b")):
        recs = records(tmp_path / name)
        # Every attempt this job sent, and only those: the site's access log is the ground truth.
        assert Counter(urlsplit(r["url"]).path or "/" for r in recs) == Counter(
            e["path"] for e in log if e["site"] == site), name
        assert {r["host"] for r in recs} == {urlsplit(sb.site_url(site)).hostname}


@pytest_twisted.ensureDeferred
async def test_a_spider_attribute_fills_its_placeholder_and_percent_signs_stay(sandbox, tmp_path: Path) -> None:
    sb = sandbox(SandboxConfig(sites=[SiteConfig(name="a", pages=2)], proxies=ProxyConfig(count=2)))
    template = str(tmp_path / "100%-%(region)s.jsonl")
    await crawl(CatalogueSpider, {"POLITE_PROXIES": sb.proxy_urls, "POLITE_DELAY": (0.05, 0.1),
                                  "POLITE_STATS_JSONL": template}, start_url=sb.site_url("a"), region="eu")
    (path,) = tmp_path.glob("*.jsonl")
    assert path.name == "100%-eu.jsonl"
    assert len(records(path)) == len(sb.log()) > 0


@pytest.mark.parametrize(("template", "expected"), [
    ("%(region)s.jsonl", "the spider has no 'region'"),
    ("%(name)d.jsonl", "placeholders written %(name)s"),
    ("%(name.jsonl", "placeholders written %(name)s"),
])
@pytest_twisted.ensureDeferred
async def test_an_unknown_placeholder_stops_the_crawl_at_start_up(sandbox, tmp_path: Path, template: str,
                                                                   expected: str) -> None:
    sb = sandbox(SandboxConfig(sites=[SiteConfig(name="a", pages=2)], proxies=ProxyConfig(count=2)))
    with pytest.raises(PoliteConfigError, match=r"^POLITE_STATS_JSONL=.* is invalid: expected .*") as info:
        await crawl(CatalogueSpider, {"POLITE_PROXIES": sb.proxy_urls,
                                      "POLITE_STATS_JSONL": str(tmp_path / template)}, start_url=sb.site_url("a"))
    assert expected in str(info.value)
    assert sb.log() == [] and list(tmp_path.glob("*.jsonl*")) == []
